//! Reductions (ReduceSum … ReduceLogSumExp), ArgMax / ArgMin, Softmax and LogSoftmax. Float
//! reductions accumulate in f64 in input order and round once.

use crate::bail;
use crate::error::Result;
use crate::tensor::{DType, Data, OTensor, norm_axis, strides};

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    L1,
    L2,
    LogSumExp,
}

impl Reduce {
    fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "ReduceSum",
            Reduce::Mean => "ReduceMean",
            Reduce::Max => "ReduceMax",
            Reduce::Min => "ReduceMin",
            Reduce::Prod => "ReduceProd",
            Reduce::SumSquare => "ReduceSumSquare",
            Reduce::L1 => "ReduceL1",
            Reduce::L2 => "ReduceL2",
            Reduce::LogSumExp => "ReduceLogSumExp",
        }
    }
}

/// Sorted, unique, non-negative axes.
pub fn norm_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    let before = out.len();
    out.dedup();
    if out.len() != before {
        bail!("axes {axes:?} name an axis twice");
    }
    Ok(out)
}

/// Groups the elements of `shape` by output position: for every input element (row-major) the
/// flat index of the output element it reduces into. Also returns the output shape.
fn reduce_plan(shape: &[usize], axes: &[usize], keepdims: bool) -> (Vec<usize>, Vec<usize>, usize) {
    let kept: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    let kept_strides = strides(&kept);
    let mut target = Vec::with_capacity(shape.iter().product());
    crate::tensor::for_each_index(shape, |idx| {
        let t: usize = idx
            .iter()
            .enumerate()
            .map(|(a, &i)| {
                if axes.contains(&a) {
                    0
                } else {
                    i * kept_strides[a]
                }
            })
            .sum();
        target.push(t);
    });
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let out_shape = if keepdims {
        kept
    } else {
        shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect()
    };
    (out_shape, target, count)
}

/// The general reduction. `axes` of `None` or empty mean every axis, unless
/// `noop_with_empty_axes`, in which case the input is returned unchanged.
pub fn reduce(
    op: Reduce,
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> Result<OTensor> {
    let axes = match axes {
        Some(a) if !a.is_empty() => norm_axes(a, x.rank())?,
        _ if noop_with_empty_axes => return Ok(x.clone()),
        _ => (0..x.rank()).collect(),
    };
    let (out_shape, target, count) = reduce_plan(&x.shape, &axes, keepdims);
    let n_out: usize = out_shape.iter().product();
    let data = match x.data() {
        Data::F32(v) => {
            let nan_max = |a: f64, b: f64| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            };
            let nan_min = |a: f64, b: f64| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            };
            let fold = |init: f64, f: &dyn Fn(f64, f64) -> f64| {
                let mut acc = vec![init; n_out];
                for (&t, &a) in target.iter().zip(v) {
                    acc[t] = f(acc[t], a as f64);
                }
                acc
            };
            let acc: Vec<f64> = match op {
                Reduce::Sum => fold(0.0, &|s, a| s + a),
                Reduce::Mean => fold(0.0, &|s, a| s + a)
                    .into_iter()
                    .map(|s| s / count as f64)
                    .collect(),
                Reduce::Max => fold(f64::NEG_INFINITY, &nan_max),
                Reduce::Min => fold(f64::INFINITY, &nan_min),
                Reduce::Prod => fold(1.0, &|s, a| s * a),
                Reduce::SumSquare => fold(0.0, &|s, a| s + a * a),
                Reduce::L1 => fold(0.0, &|s, a| s + a.abs()),
                Reduce::L2 => fold(0.0, &|s, a| s + a * a)
                    .into_iter()
                    .map(f64::sqrt)
                    .collect(),
                Reduce::LogSumExp => {
                    let m = fold(f64::NEG_INFINITY, &nan_max);
                    let mut s = vec![0.0; n_out];
                    for (&t, &a) in target.iter().zip(v) {
                        s[t] += (a as f64 - m[t]).exp();
                    }
                    // An infinite or NaN maximum is the answer itself (all -inf gives -inf).
                    m.iter()
                        .zip(s)
                        .map(|(&m, s)| if m.is_finite() { m + s.ln() } else { m })
                        .collect()
                }
            };
            Data::F32(acc.into_iter().map(|a| a as f32).collect())
        }
        Data::I64(v) => {
            let dt = x.dtype();
            let (min, max) = match dt {
                DType::I32 => (i32::MIN as i64, i32::MAX as i64),
                DType::U8 => (0, 255),
                _ => (i64::MIN, i64::MAX),
            };
            let fold = |init: i64, f: &dyn Fn(i64, i64) -> i64| {
                let mut acc = vec![init; n_out];
                for (&t, &a) in target.iter().zip(v) {
                    acc[t] = f(acc[t], a);
                }
                acc
            };
            let acc = match op {
                Reduce::Sum => fold(0, &|s, a| s.wrapping_add(a)),
                // Truncating, as integer ReduceMean in onnxruntime; an empty reduction gives 0.
                Reduce::Mean => fold(0, &|s, a| s.wrapping_add(a))
                    .into_iter()
                    .map(|s| {
                        if count == 0 {
                            0
                        } else {
                            dt.wrap_int(s) / count as i64
                        }
                    })
                    .collect(),
                Reduce::Max => fold(min, &|s, a| s.max(a)),
                Reduce::Min => fold(max, &|s, a| s.min(a)),
                Reduce::Prod => fold(1, &|s, a| s.wrapping_mul(a)),
                Reduce::SumSquare => fold(0, &|s, a| s.wrapping_add(a.wrapping_mul(a))),
                Reduce::L1 => fold(0, &|s, a| s.wrapping_add(a.wrapping_abs())),
                Reduce::L2 | Reduce::LogSumExp => bail!("{} does not take {dt}", op.name()),
            };
            Data::I64(acc.into_iter().map(|a| dt.wrap_int(a)).collect())
        }
        Data::Bool(_) => bail!("{} does not take bool", op.name()),
    };
    OTensor::new(out_shape, x.dtype(), data)
}

pub fn reduce_sum(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::Sum, x, axes, keepdims, noop)
}

pub fn reduce_mean(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::Mean, x, axes, keepdims, noop)
}

pub fn reduce_max(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::Max, x, axes, keepdims, noop)
}

pub fn reduce_min(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::Min, x, axes, keepdims, noop)
}

pub fn reduce_prod(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::Prod, x, axes, keepdims, noop)
}

pub fn reduce_sum_square(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::SumSquare, x, axes, keepdims, noop)
}

pub fn reduce_l1(x: &OTensor, axes: Option<&[i64]>, keepdims: bool, noop: bool) -> Result<OTensor> {
    reduce(Reduce::L1, x, axes, keepdims, noop)
}

pub fn reduce_l2(x: &OTensor, axes: Option<&[i64]>, keepdims: bool, noop: bool) -> Result<OTensor> {
    reduce(Reduce::L2, x, axes, keepdims, noop)
}

pub fn reduce_log_sum_exp(
    x: &OTensor,
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<OTensor> {
    reduce(Reduce::LogSumExp, x, axes, keepdims, noop)
}

/// Index of the largest (`max`) or smallest value along `axis`; the first such index wins unless
/// `select_last`. A NaN never replaces the running best (so it wins only in the first position).
fn arg_extreme(
    op: &str,
    x: &OTensor,
    axis: i64,
    keepdims: bool,
    select_last: bool,
    max: bool,
) -> Result<OTensor> {
    let axis = norm_axis(axis, x.rank())?;
    let n = x.shape[axis];
    if n == 0 {
        bail!("{op}: axis {axis} is empty");
    }
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let better = |cur: f64, best: f64| if max { cur > best } else { cur < best };
    let mut out = Vec::with_capacity(outer * inner);
    // Integers are compared exactly; floats (and bools) as f64.
    let ints: Option<&[i64]> = match x.data() {
        Data::I64(v) => Some(v),
        _ => None,
    };
    let values = if ints.is_some() {
        Vec::new()
    } else {
        x.to_f64_vec()
    };
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let mut best = 0usize;
            for k in 1..n {
                let (replace, tie) = match ints {
                    Some(v) => {
                        let (c, b) = (v[at(k)], v[at(best)]);
                        (if max { c > b } else { c < b }, c == b)
                    }
                    None => {
                        let (c, b) = (values[at(k)], values[at(best)]);
                        (better(c, b), c == b)
                    }
                };
                if replace || (select_last && tie) {
                    best = k;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    OTensor::from_i64(shape, out)
}

pub fn arg_max(x: &OTensor, axis: i64, keepdims: bool, select_last_index: bool) -> Result<OTensor> {
    arg_extreme("ArgMax", x, axis, keepdims, select_last_index, true)
}

pub fn arg_min(x: &OTensor, axis: i64, keepdims: bool, select_last_index: bool) -> Result<OTensor> {
    arg_extreme("ArgMin", x, axis, keepdims, select_last_index, false)
}

/// Softmax along one axis in f64: `exp(x - max) / sum(exp(x - max))`; with `log`,
/// `(x - max) - ln(sum(exp(x - max)))`. `legacy` (opset < 13) first flattens the input to 2-D
/// `[prod(dims before axis), prod(dims from axis)]` and normalises each row.
fn softmax_impl(op: &str, x: &OTensor, axis: i64, legacy: bool, log: bool) -> Result<OTensor> {
    let Data::F32(v) = x.data() else {
        bail!("{op} needs a float input, got {}", x.dtype());
    };
    let axis = norm_axis(axis, x.rank())?;
    let (outer, n, inner) = if legacy {
        (
            x.shape[..axis].iter().product::<usize>(),
            x.shape[axis..].iter().product::<usize>(),
            1,
        )
    } else {
        (
            x.shape[..axis].iter().product(),
            x.shape[axis],
            x.shape[axis + 1..].iter().product(),
        )
    };
    let mut out = vec![0f32; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let mut m = f64::NEG_INFINITY;
            for k in 0..n {
                let a = v[at(k)] as f64;
                if a > m || a.is_nan() {
                    m = a;
                }
                if m.is_nan() {
                    break;
                }
            }
            let s: f64 = (0..n).map(|k| (v[at(k)] as f64 - m).exp()).sum();
            for k in 0..n {
                let d = v[at(k)] as f64 - m;
                out[at(k)] = if log { d - s.ln() } else { d.exp() / s } as f32;
            }
        }
    }
    OTensor::new(x.shape.clone(), x.dtype(), Data::F32(out))
}

pub fn softmax(x: &OTensor, axis: i64, legacy: bool) -> Result<OTensor> {
    softmax_impl("Softmax", x, axis, legacy, false)
}

pub fn log_softmax(x: &OTensor, axis: i64, legacy: bool) -> Result<OTensor> {
    softmax_impl("LogSoftmax", x, axis, legacy, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], v: &[f32]) -> OTensor {
        OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn reductions_by_hand() {
        let x = f(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let s = reduce_sum(&x, Some(&[1]), true, false).unwrap();
        assert_eq!(
            (s.shape.clone(), s.f32s().unwrap()),
            (vec![2, 1], &[6.0f32, 15.0][..])
        );
        let m = reduce_mean(&x, Some(&[-2]), false, false).unwrap();
        assert_eq!(
            (m.shape.clone(), m.f32s().unwrap()),
            (vec![3], &[2.5f32, 3.5, 4.5][..])
        );
        let all = reduce_max(&x, None, false, false).unwrap();
        assert_eq!(
            (all.shape.clone(), all.f32s().unwrap()),
            (vec![], &[6.0f32][..])
        );
        assert_eq!(
            reduce_sum(&x, Some(&[]), true, true).unwrap(),
            x,
            "noop_with_empty_axes"
        );
        let l2 = reduce_l2(&f(&[2], &[3.0, 4.0]), None, true, false).unwrap();
        assert_eq!(l2.f32s().unwrap(), &[5.0]);
        let lse = reduce_log_sum_exp(&f(&[2], &[0.0, 0.0]), None, false, false).unwrap();
        assert_eq!(lse.f32s().unwrap(), &[std::f32::consts::LN_2]);
        assert!(
            reduce_sum(&x, Some(&[1, -1]), true, false).is_err(),
            "repeated axis"
        );
        let ints = OTensor::from_i64(vec![3], vec![7, -2, 2]).unwrap();
        assert_eq!(
            reduce_mean(&ints, None, false, false)
                .unwrap()
                .i64s()
                .unwrap(),
            &[2]
        );
    }

    #[test]
    fn softmax_by_hand() {
        // softmax([0, ln 3]) = [1/4, 3/4]; a row of -inf masks and one finite value gives [0, 1].
        let x = f(&[2, 2], &[0.0, 3f32.ln(), f32::NEG_INFINITY, 2.0]);
        let y = softmax(&x, -1, false).unwrap();
        let v = y.f32s().unwrap();
        assert!(
            (v[0] - 0.25).abs() < 1e-7 && (v[1] - 0.75).abs() < 1e-7,
            "{v:?}"
        );
        assert_eq!(&v[2..], &[0.0, 1.0]);
        let l = log_softmax(&f(&[2], &[1.0, 1.0]), 0, false).unwrap();
        assert_eq!(l.f32s().unwrap(), &[-std::f32::consts::LN_2; 2]);
        // Along axis 0 of a [2, 2]: columns normalise.
        let c = softmax(&f(&[2, 2], &[0.0, 5.0, 0.0, 5.0]), 0, false).unwrap();
        assert_eq!(c.f32s().unwrap(), &[0.5; 4]);
        // Legacy (opset < 13) with axis 0 normalises the whole flattened tensor.
        let g = softmax(&f(&[2, 2], &[0.0; 4]), 0, true).unwrap();
        assert_eq!(g.f32s().unwrap(), &[0.25; 4]);
    }

    #[test]
    fn arg_max_and_min() {
        let x = f(&[2, 3], &[1.0, 5.0, 5.0, 0.0, -1.0, 0.0]);
        assert_eq!(
            arg_max(&x, 1, false, false).unwrap().i64s().unwrap(),
            &[1, 0]
        );
        assert_eq!(arg_max(&x, 1, true, true).unwrap().i64s().unwrap(), &[2, 2]);
        let m = arg_min(&x, 0, true, false).unwrap();
        assert_eq!(
            (m.shape.clone(), m.i64s().unwrap()),
            (vec![1, 3], &[1i64, 1, 1][..])
        );
    }
}
