//! Reductions over axes and softmax / log-softmax along one axis.
//!
//! Float reductions accumulate in f64 and round once to the storage type; integer reductions
//! accumulate in i64 with wrapping arithmetic.

use super::{CpuBackend, Float, Int, numel};
use crate::backend::ReduceOp;
use crate::bail;
use crate::error::Result;
use crate::tensor::{Data, Tensor};

fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "ReduceSum",
        ReduceOp::Mean => "ReduceMean",
        ReduceOp::Max => "ReduceMax",
        ReduceOp::Min => "ReduceMin",
        ReduceOp::Prod => "ReduceProd",
        ReduceOp::SumSquare => "ReduceSumSquare",
        ReduceOp::L2 => "ReduceL2",
        ReduceOp::L1 => "ReduceL1",
        ReduceOp::LogSumExp => "ReduceLogSumExp",
    }
}

/// The input viewed as alternating kept / reduced groups of adjacent dims (size-1 dims
/// dropped), walked in input order.
struct Plan {
    /// (size, reduced) per group, outermost first; never empty.
    groups: Vec<(usize, bool)>,
    /// Output stride of each group (0 for reduced groups).
    out_strides: Vec<usize>,
    out_len: usize,
    /// Input elements folded into each output element.
    count: usize,
}

impl Plan {
    fn new(shape: &[usize], axes: &[usize]) -> Plan {
        let mut groups: Vec<(usize, bool)> = vec![];
        for (d, &size) in shape.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let reduced = axes.contains(&d);
            match groups.last_mut() {
                Some((s, r)) if *r == reduced => *s *= size,
                _ => groups.push((size, reduced)),
            }
        }
        if groups.is_empty() {
            groups.push((1, false));
        }
        let mut out_strides = vec![0; groups.len()];
        let mut stride = 1;
        for (g, &(size, reduced)) in groups.iter().enumerate().rev() {
            if !reduced {
                out_strides[g] = stride;
                stride *= size;
            }
        }
        let count = groups.iter().filter(|g| g.1).map(|g| g.0).product();
        Plan {
            groups,
            out_strides,
            out_len: stride,
            count,
        }
    }

    /// Calls `f(in_offset, out_offset, len, inner_reduced)` for each innermost run: `len`
    /// contiguous inputs that fold into one output (`inner_reduced`) or into `len` contiguous
    /// outputs.
    fn walk(&self, mut f: impl FnMut(usize, usize, usize, bool)) {
        let g = self.groups.len();
        let (inner, inner_reduced) = self.groups[g - 1];
        let outer = &self.groups[..g - 1];
        let rows: usize = outer.iter().map(|o| o.0).product();
        if inner == 0 || rows == 0 {
            return;
        }
        let mut idx = vec![0usize; g - 1];
        let mut out_off = 0;
        for row in 0..rows {
            f(row * inner, out_off, inner, inner_reduced);
            for d in (0..g - 1).rev() {
                idx[d] += 1;
                out_off += self.out_strides[d];
                if idx[d] < outer[d].0 {
                    break;
                }
                out_off -= outer[d].0 * self.out_strides[d];
                idx[d] = 0;
            }
        }
    }

    /// Folds `x` into one accumulator per output: `acc = f(acc, x, out_index)`.
    fn fold<S: Copy, A: Copy>(&self, x: &[S], init: A, f: impl Fn(A, S, usize) -> A) -> Vec<A> {
        let mut acc = vec![init; self.out_len];
        self.walk(|i, o, len, reduced| {
            let xs = &x[i..i + len];
            if reduced {
                let mut a = acc[o];
                for &v in xs {
                    a = f(a, v, o);
                }
                acc[o] = a;
            } else {
                for (j, (a, &v)) in acc[o..o + len].iter_mut().zip(xs).enumerate() {
                    *a = f(*a, v, o + j);
                }
            }
        });
        acc
    }
}

pub(super) fn reduce(op: ReduceOp, x: &Tensor, axes: &[usize], keepdims: bool) -> Result<Tensor> {
    let name = reduce_name(op);
    let shape = x.shape();
    let sorted = axes.windows(2).all(|w| w[0] < w[1]);
    if !sorted || axes.last().is_some_and(|&a| a >= shape.len()) {
        bail!(
            "{name}: axes {axes:?} must be sorted, unique and below rank {}",
            shape.len()
        );
    }
    if axes.is_empty() {
        return Ok(x.clone());
    }
    let plan = Plan::new(shape, axes);
    let data = match x.data() {
        Data::F32(v) => Data::F32(reduce_float(op, &plan, v)),
        Data::F16(v) => Data::F16(reduce_float(op, &plan, v)),
        Data::BF16(v) => Data::BF16(reduce_float(op, &plan, v)),
        Data::I64(v) => Data::I64(reduce_int(op, &plan, v)?),
        Data::I32(v) => Data::I32(reduce_int(op, &plan, v)?),
        Data::U8(v) => Data::U8(reduce_int(op, &plan, v)?),
        Data::Bool(_) => bail!("{name}: unsupported dtype bool"),
    };
    let out_shape: Vec<usize> = shape
        .iter()
        .enumerate()
        .filter_map(|(d, &s)| match (axes.contains(&d), keepdims) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(Tensor::from_parts(out_shape, data))
}

/// NaN-propagating max / min over f64.
fn max_nan(a: f64, b: f64) -> f64 {
    if a >= b || a.is_nan() { a } else { b }
}

fn min_nan(a: f64, b: f64) -> f64 {
    if a <= b || a.is_nan() { a } else { b }
}

fn reduce_float<T: Float>(op: ReduceOp, plan: &Plan, x: &[T]) -> Vec<T> {
    let v = |t: T| t.to_f32() as f64;
    let acc = match op {
        ReduceOp::Sum | ReduceOp::Mean => plan.fold(x, 0.0, |a, t, _| a + v(t)),
        ReduceOp::SumSquare | ReduceOp::L2 => plan.fold(x, 0.0, |a, t, _| a + v(t) * v(t)),
        ReduceOp::L1 => plan.fold(x, 0.0, |a, t, _| a + v(t).abs()),
        ReduceOp::Prod => plan.fold(x, 1.0, |a, t, _| a * v(t)),
        ReduceOp::Max => plan.fold(x, f64::NEG_INFINITY, |a, t, _| max_nan(a, v(t))),
        ReduceOp::Min => plan.fold(x, f64::INFINITY, |a, t, _| min_nan(a, v(t))),
        ReduceOp::LogSumExp => {
            let m = plan.fold(x, f64::NEG_INFINITY, |a, t, _| max_nan(a, v(t)));
            let s = plan.fold(x, 0.0, |a, t, o| a + (v(t) - m[o]).exp());
            // An infinite or NaN max is the answer itself (all -inf gives -inf, not NaN).
            m.iter()
                .zip(s)
                .map(|(&m, s)| if m.is_finite() { m + s.ln() } else { m })
                .collect()
        }
    };
    let count = plan.count as f64;
    acc.into_iter()
        .map(|a| {
            let a = match op {
                ReduceOp::Mean => a / count,
                ReduceOp::L2 => a.sqrt(),
                _ => a,
            };
            T::from_f32(a as f32)
        })
        .collect()
}

fn reduce_int<T: Int>(op: ReduceOp, plan: &Plan, x: &[T]) -> Result<Vec<T>> {
    let acc = match op {
        ReduceOp::Sum | ReduceOp::Mean => plan.fold(x, 0i64, |a, t, _| a.wrapping_add(t.to_i64())),
        ReduceOp::SumSquare => plan.fold(x, 0i64, |a, t, _| {
            a.wrapping_add(t.to_i64().wrapping_mul(t.to_i64()))
        }),
        ReduceOp::L1 => plan.fold(x, 0i64, |a, t, _| a.wrapping_add(t.to_i64().wrapping_abs())),
        ReduceOp::Prod => plan.fold(x, 1i64, |a, t, _| a.wrapping_mul(t.to_i64())),
        ReduceOp::Max => plan.fold(x, T::MIN, |a, t, _| a.max(t.to_i64())),
        ReduceOp::Min => plan.fold(x, T::MAX, |a, t, _| a.min(t.to_i64())),
        ReduceOp::L2 | ReduceOp::LogSumExp => {
            bail!("{}: unsupported dtype {}", reduce_name(op), T::DTYPE)
        }
    };
    let count = plan.count as i64;
    Ok(acc
        .into_iter()
        .map(|a| match op {
            // Truncating, as integer ReduceMean in onnxruntime; an empty reduction gives 0.
            ReduceOp::Mean if count > 0 => T::from_i64(a / count),
            ReduceOp::Mean => T::from_i64(0),
            _ => T::from_i64(a),
        })
        .collect())
}

pub(super) fn softmax(be: &CpuBackend, x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    let name = if log { "LogSoftmax" } else { "Softmax" };
    let shape = x.shape();
    if axis >= shape.len() {
        bail!("{name}: axis {axis} out of range for rank {}", shape.len());
    }
    let n = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let data = match x.data() {
        Data::F32(v) => Data::F32(softmax_t(be, v, n, inner, log)),
        Data::F16(v) => Data::F16(softmax_t(be, v, n, inner, log)),
        Data::BF16(v) => Data::BF16(softmax_t(be, v, n, inner, log)),
        _ => bail!("{name}: unsupported dtype {}", x.dtype()),
    };
    Ok(Tensor::from_parts(shape.to_vec(), data))
}

/// Softmax of `x` viewed as `[outer, n, inner]` along `n`, in f32.
fn softmax_t<T: Float>(be: &CpuBackend, x: &[T], n: usize, inner: usize, log: bool) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    let block = n * inner;
    if block == 0 {
        return out;
    }
    if inner == 1 {
        // The common case (last axis): contiguous rows.
        be.for_chunks(&mut out, n, |off, chunk| {
            let mut buf = vec![0f32; n];
            for (r, dst) in chunk.chunks_mut(n).enumerate() {
                let start = off + r * n;
                for (t, s) in buf.iter_mut().zip(&x[start..start + n]) {
                    *t = s.to_f32();
                }
                let mut max = f32::NEG_INFINITY;
                for &v in &buf {
                    if v > max || v.is_nan() {
                        max = v;
                    }
                }
                let mut sum = 0f32;
                for v in buf.iter_mut() {
                    let d = *v - max;
                    let e = d.exp();
                    sum += e;
                    *v = if log { d } else { e };
                }
                if log {
                    let ls = sum.ln();
                    for (o, &v) in dst.iter_mut().zip(&buf) {
                        *o = T::from_f32(v - ls);
                    }
                } else {
                    let r = 1.0 / sum;
                    for (o, &v) in dst.iter_mut().zip(&buf) {
                        *o = T::from_f32(v * r);
                    }
                }
            }
        });
        return out;
    }
    be.for_chunks(&mut out, block, |off, chunk| {
        let mut buf = vec![0f32; block];
        let mut maxes = vec![f32::NEG_INFINITY; inner];
        let mut sums = vec![0f32; inner];
        for (b, dst) in chunk.chunks_mut(block).enumerate() {
            let start = off + b * block;
            for (t, s) in buf.iter_mut().zip(&x[start..start + block]) {
                *t = s.to_f32();
            }
            maxes.fill(f32::NEG_INFINITY);
            sums.fill(0.0);
            for row in buf.chunks(inner) {
                for (m, &v) in maxes.iter_mut().zip(row) {
                    *m = if v > *m || v.is_nan() { v } else { *m };
                }
            }
            for row in buf.chunks_mut(inner) {
                for ((v, &m), s) in row.iter_mut().zip(&maxes).zip(sums.iter_mut()) {
                    let d = *v - m;
                    let e = d.exp();
                    *s += e;
                    *v = if log { d } else { e };
                }
            }
            if log {
                for s in sums.iter_mut() {
                    *s = s.ln();
                }
                for (row, drow) in buf.chunks(inner).zip(dst.chunks_mut(inner)) {
                    for ((o, &v), &ls) in drow.iter_mut().zip(row).zip(&sums) {
                        *o = T::from_f32(v - ls);
                    }
                }
            } else {
                for s in sums.iter_mut() {
                    *s = 1.0 / *s;
                }
                for (row, drow) in buf.chunks(inner).zip(dst.chunks_mut(inner)) {
                    for ((o, &v), &r) in drow.iter_mut().zip(row).zip(&sums) {
                        *o = T::from_f32(v * r);
                    }
                }
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::test_util::{be, close, f32t};

    /// [2, 3]: [[1, -2, 3], [4, 5, -6]].
    fn x23() -> Tensor {
        f32t(&[2, 3], &[1., -2., 3., 4., 5., -6.])
    }

    fn red(op: ReduceOp, x: &Tensor, axes: &[usize], keep: bool) -> Tensor {
        be().reduce(op, x, axes, keep).unwrap()
    }

    #[test]
    fn every_float_reduction() {
        use ReduceOp::*;
        let x = x23();
        assert_eq!(red(Sum, &x, &[1], false).to_f32_vec(), vec![2., 3.]);
        assert_eq!(red(Sum, &x, &[0], false).to_f32_vec(), vec![5., 3., -3.]);
        assert_eq!(red(Mean, &x, &[0, 1], false).to_f32_vec(), vec![5.0 / 6.0]);
        assert_eq!(red(Max, &x, &[1], false).to_f32_vec(), vec![3., 5.]);
        assert_eq!(red(Min, &x, &[0], false).to_f32_vec(), vec![1., -2., -6.]);
        assert_eq!(red(Prod, &x, &[1], false).to_f32_vec(), vec![-6., -120.]);
        assert_eq!(red(SumSquare, &x, &[1], false).to_f32_vec(), vec![14., 77.]);
        close(
            &red(L2, &x, &[1], false).to_f32_vec(),
            &[14f32.sqrt(), 77f32.sqrt()],
            1e-7,
        );
        assert_eq!(red(L1, &x, &[1], false).to_f32_vec(), vec![6., 15.]);
        let lse = |v: &[f32]| v.iter().map(|x| (*x as f64).exp()).sum::<f64>().ln() as f32;
        close(
            &red(LogSumExp, &x, &[1], false).to_f32_vec(),
            &[lse(&[1., -2., 3.]), lse(&[4., 5., -6.])],
            1e-6,
        );
        let inf = f32t(&[2], &[f32::NEG_INFINITY, f32::NEG_INFINITY]);
        assert_eq!(
            red(LogSumExp, &inf, &[0], false).to_f32_vec(),
            vec![f32::NEG_INFINITY]
        );
        let big = f32t(&[2], &[1000.0, 1000.0]);
        close(
            &red(LogSumExp, &big, &[0], false).to_f32_vec(),
            &[1000.0 + 2f32.ln()],
            1e-7,
        );
        let nan = f32t(&[3], &[1.0, f32::NAN, 2.0]);
        assert!(red(Max, &nan, &[0], false).to_f32_vec()[0].is_nan());
    }

    #[test]
    fn keepdims_and_shapes() {
        let x = f32t(&[2, 3, 4], &(0..24).map(|v| v as f32).collect::<Vec<_>>());
        let y = red(ReduceOp::Sum, &x, &[1], true);
        assert_eq!(y.shape(), &[2, 1, 4]);
        assert_eq!(y.to_f32_vec(), vec![12., 15., 18., 21., 48., 51., 54., 57.]);
        let y = red(ReduceOp::Sum, &x, &[0, 2], false);
        assert_eq!(y.shape(), &[3]);
        assert_eq!(y.to_f32_vec(), vec![6. + 54., 22. + 70., 38. + 86.]);
        let y = red(ReduceOp::Max, &x, &[0, 1, 2], true);
        assert_eq!(y.shape(), &[1, 1, 1]);
        assert_eq!(y.to_f32_vec(), vec![23.]);
        // Reducing a size-1 dim still applies the op (L2 of one value is its magnitude).
        let z = f32t(&[2, 1], &[-3., 4.]);
        let y = red(ReduceOp::L2, &z, &[1], false);
        assert_eq!(y.shape(), &[2]);
        assert_eq!(y.to_f32_vec(), vec![3., 4.]);
        // Empty axes: identity, sharing storage.
        let y = red(ReduceOp::L2, &x, &[], false);
        assert_eq!(y, x);
        // Reducing an empty dim: sums are 0.
        let e = f32t(&[2, 0], &[]);
        assert_eq!(
            red(ReduceOp::Sum, &e, &[1], false).to_f32_vec(),
            vec![0., 0.]
        );
    }

    #[test]
    fn integer_and_half_reductions() {
        use ReduceOp::*;
        let x = Tensor::i64(&[2, 2], vec![3, -4, 5, 6]).unwrap();
        assert_eq!(red(Sum, &x, &[1], false).as_i64().unwrap(), &[-1, 11]);
        assert_eq!(red(Mean, &x, &[1], false).as_i64().unwrap(), &[0, 5]);
        assert_eq!(red(Max, &x, &[0], false).as_i64().unwrap(), &[5, 6]);
        assert_eq!(red(Min, &x, &[0], false).as_i64().unwrap(), &[3, -4]);
        assert_eq!(red(Prod, &x, &[0, 1], false).as_i64().unwrap(), &[-360]);
        assert_eq!(red(SumSquare, &x, &[1], false).as_i64().unwrap(), &[25, 61]);
        assert_eq!(red(L1, &x, &[1], false).as_i64().unwrap(), &[7, 11]);
        let y = Tensor::new(vec![3], Data::I32(vec![-1, 7, 2])).unwrap();
        assert_eq!(red(Max, &y, &[0], false).data(), &Data::I32(vec![7]));
        let err = be().reduce(L2, &x, &[0], false).unwrap_err().to_string();
        assert_eq!(err, "ReduceL2: unsupported dtype i64");
        let b = Tensor::new(vec![1], Data::Bool(vec![true])).unwrap();
        let err = be().reduce(Sum, &b, &[0], false).unwrap_err().to_string();
        assert_eq!(err, "ReduceSum: unsupported dtype bool");
        let h = Tensor::new(vec![3], Data::F16(vec![f16::from_f32(0.5); 3])).unwrap();
        assert_eq!(
            red(Sum, &h, &[0], false).data(),
            &Data::F16(vec![f16::from_f32(1.5)])
        );
        let h = Tensor::new(
            vec![2],
            Data::BF16(vec![bf16::from_f32(2.0), bf16::from_f32(8.0)]),
        )
        .unwrap();
        assert_eq!(
            red(Mean, &h, &[0], false).data(),
            &Data::BF16(vec![bf16::from_f32(5.0)])
        );
    }

    #[test]
    fn reduce_rejects_bad_axes() {
        let err = be()
            .reduce(ReduceOp::Sum, &x23(), &[1, 0], false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "ReduceSum: axes [1, 0] must be sorted, unique and below rank 2"
        );
        let err = be()
            .reduce(ReduceOp::Sum, &x23(), &[2], false)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "ReduceSum: axes [2] must be sorted, unique and below rank 2"
        );
    }

    #[test]
    fn softmax_last_and_middle_axis() {
        let x = f32t(&[2, 3], &[1., 2., 3., 1000., 1000., 1000.]);
        let y = be().softmax(&x, 1, false).unwrap().to_f32_vec();
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        let s: f32 = e.iter().sum();
        let third = 1.0 / 3.0;
        close(
            &y,
            &[e[0] / s, e[1] / s, e[2] / s, third, third, third],
            1e-6,
        );
        let y = be().softmax(&x, 1, true).unwrap().to_f32_vec();
        let ls = s.ln();
        let l3 = -(3f32.ln());
        close(&y, &[1. - ls, 2. - ls, 3. - ls, l3, l3, l3], 1e-6);
        // Axis 0 of [2, 3]: columns.
        let x = f32t(&[2, 2], &[0., 1., 0., 3.]);
        let y = be().softmax(&x, 0, false).unwrap().to_f32_vec();
        let a = 1.0 / (1.0 + 2f32.exp());
        close(&y, &[0.5, a, 0.5, 1.0 - a], 1e-6);
        let h = Tensor::new(vec![2], Data::F16(vec![f16::from_f32(0.0); 2])).unwrap();
        let y = be().softmax(&h, 0, false).unwrap();
        assert_eq!(y.data(), &Data::F16(vec![f16::from_f32(0.5); 2]));
        let err = be().softmax(&x, 2, false).unwrap_err().to_string();
        assert_eq!(err, "Softmax: axis 2 out of range for rank 2");
        let i = Tensor::i64(&[1], vec![1]).unwrap();
        let err = be().softmax(&i, 0, true).unwrap_err().to_string();
        assert_eq!(err, "LogSoftmax: unsupported dtype i64");
    }

    #[test]
    fn softmax_parallel_matches_serial() {
        let x: Vec<f32> = (0..64 * 1024)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
            .collect();
        let t = f32t(&[64, 1024], &x);
        let one = be().softmax(&t, 1, false).unwrap();
        let two = CpuBackend::new(2).unwrap().softmax(&t, 1, false).unwrap();
        assert_eq!(one, two);
        let t = f32t(&[64, 32, 32], &x);
        let one = be().softmax(&t, 1, true).unwrap();
        let two = CpuBackend::new(2).unwrap().softmax(&t, 1, true).unwrap();
        assert_eq!(one, two);
    }
}
