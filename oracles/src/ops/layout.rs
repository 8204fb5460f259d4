//! Layout ops: they move or select values without arithmetic — Reshape, Transpose, Concat,
//! Slice, Split, Squeeze, Unsqueeze, Flatten, Expand, Tile, Gather, Shape, Size, Trilu.
//! Index arithmetic goes through [`strided_offsets`] / [`broadcast_offsets`] (one offset per
//! output element, then a plain gather of those values).

use crate::bail;
use crate::error::Result;
use crate::ops::reduce::norm_axes;
use crate::tensor::{
    Data, OTensor, broadcast_offsets, broadcast_shapes, for_each_index, norm_axis, strides,
};
use crate::tensor::{checked_numel, strided_offsets};

/// Resolves a Reshape spec against the input shape: `0` copies the input dim (unless
/// `allowzero`), one `-1` is inferred.
pub fn reshape_target(shape: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>> {
    let numel: usize = shape.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut inferred = None;
    for (i, &d) in spec.iter().enumerate() {
        if d == -1 {
            if inferred.is_some() {
                bail!("reshape spec {spec:?} has more than one -1");
            }
            inferred = Some(i);
            out.push(1);
        } else if d == 0 && !allowzero {
            match shape.get(i) {
                Some(&s) => out.push(s),
                None => bail!(
                    "reshape spec {spec:?} copies dim {i} but the input shape {shape:?} has no such dim"
                ),
            }
        } else if d < 0 {
            bail!("reshape spec {spec:?} has an invalid dim {d}");
        } else {
            out.push(d as usize);
        }
    }
    if let Some(i) = inferred {
        let known = checked_numel(&out)?;
        if known == 0 || !numel.is_multiple_of(known) {
            bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
        }
        out[i] = numel / known;
    }
    if checked_numel(&out)? != numel {
        bail!("cannot reshape {shape:?} ({numel} elements) to {spec:?}");
    }
    Ok(out)
}

pub fn reshape(x: &OTensor, spec: &[i64], allowzero: bool) -> Result<OTensor> {
    x.reshaped(reshape_target(&x.shape, spec, allowzero)?)
}

/// `perm` defaults to reversing the axes; negative entries count from the end.
pub fn transpose(x: &OTensor, perm: Option<&[i64]>) -> Result<OTensor> {
    let rank = x.rank();
    let perm: Vec<usize> = match perm {
        Some(p) => p
            .iter()
            .map(|&a| norm_axis(a, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).rev().collect(),
    };
    let mut sorted = perm.clone();
    sorted.sort_unstable();
    if sorted != (0..rank).collect::<Vec<_>>() {
        bail!("perm {perm:?} is not a permutation of the {rank} axes");
    }
    let in_strides = strides(&x.shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let step: Vec<isize> = perm.iter().map(|&p| in_strides[p] as isize).collect();
    let offsets = strided_offsets(&out_shape, 0, &step);
    OTensor::new(out_shape, x.dtype(), x.data().select(&offsets))
}

/// Joins along `axis`; every other dim must agree.
pub fn concat(xs: &[&OTensor], axis: i64) -> Result<OTensor> {
    let Some(first) = xs.first() else {
        bail!("Concat needs at least one input");
    };
    let rank = first.rank();
    let axis = norm_axis(axis, rank)?;
    for x in xs {
        if x.dtype() != first.dtype() {
            bail!(
                "Concat: input types differ ({} vs {})",
                first.dtype(),
                x.dtype()
            );
        }
        let same_rest =
            x.rank() == rank && (0..rank).all(|a| a == axis || x.shape[a] == first.shape[a]);
        if !same_rest {
            bail!(
                "Concat on axis {axis}: shapes {:?} and {:?} disagree off the axis",
                first.shape,
                x.shape
            );
        }
    }
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis + 1..].iter().product();
    let mut picks = Vec::new();
    for o in 0..outer {
        for (t, x) in xs.iter().enumerate() {
            let block = x.shape[axis] * inner;
            picks.extend((0..block).map(|e| (t, o * block + e)));
        }
    }
    let mut shape = first.shape.clone();
    shape[axis] = xs.iter().map(|x| x.shape[axis]).sum();
    let datas: Vec<&Data> = xs.iter().map(|x| x.data()).collect();
    OTensor::new(shape, first.dtype(), Data::pick(&datas, &picks)?)
}

/// One axis of a slice: the first index, the step and the number of elements taken, after ONNX
/// clamping (negative `start`/`end` count from the end; with a positive step both clamp to
/// `[0, dim]`; with a negative step `start` clamps to `[0, dim - 1]` and `end` to `[-1, dim - 1]`).
pub fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> Result<(usize, isize, usize)> {
    if step == 0 {
        bail!("slice step must not be 0");
    }
    if dim == 0 {
        return Ok((0, step as isize, 0));
    }
    let d = dim as i64;
    let resolve = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (start, end) = if step > 0 {
        (resolve(start).clamp(0, d), resolve(end).clamp(0, d))
    } else {
        (
            resolve(start).clamp(0, d - 1),
            resolve(end).clamp(-1, d - 1),
        )
    };
    // Count of start, start + step, … strictly before end (in the step's direction).
    let mut len = 0i64;
    let mut i = start;
    while (step > 0 && i < end) || (step < 0 && i > end) {
        len += 1;
        i = match i.checked_add(step) {
            Some(v) => v,
            None => break,
        };
    }
    let start = if len == 0 { 0 } else { start as usize };
    Ok((start, step as isize, len as usize))
}

/// ONNX Slice: `axes` default to `0..starts.len()`, `steps` to 1.
pub fn slice(
    x: &OTensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<OTensor> {
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    let ones = vec![1i64; starts.len()];
    let steps = steps.unwrap_or(&ones);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        bail!(
            "starts, ends, axes and steps must have the same length, got {}, {}, {}, {}",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        );
    }
    let rank = x.rank();
    // Per axis: (start, step, len); untouched axes take everything.
    let mut dims: Vec<(usize, isize, usize)> = x.shape.iter().map(|&d| (0, 1, d)).collect();
    let mut seen = vec![false; rank];
    for i in 0..starts.len() {
        let a = norm_axis(axes[i], rank)?;
        if seen[a] {
            bail!("axis {} appears twice in axes {axes:?}", axes[i]);
        }
        seen[a] = true;
        dims[a] = slice_axis(x.shape[a], starts[i], ends[i], steps[i])?;
    }
    let in_strides = strides(&x.shape);
    let out_shape: Vec<usize> = dims.iter().map(|d| d.2).collect();
    let base: isize = dims
        .iter()
        .zip(&in_strides)
        .map(|(d, &s)| (d.0 * s) as isize)
        .sum();
    let step: Vec<isize> = dims
        .iter()
        .zip(&in_strides)
        .map(|(d, &s)| d.1 * s as isize)
        .collect();
    let offsets = strided_offsets(&out_shape, base, &step);
    OTensor::new(out_shape, x.dtype(), x.data().select(&offsets))
}

/// Splits along `axis` into pieces of the given sizes (input `split` or the attribute), else into
/// `num_outputs` (or `n_outputs`) pieces of `ceil(dim / n)` with a smaller last piece.
pub fn split(
    x: &OTensor,
    axis: i64,
    sizes: Option<&[i64]>,
    num_outputs: Option<usize>,
    n_outputs: usize,
) -> Result<Vec<OTensor>> {
    let axis = norm_axis(axis, x.rank())?;
    let dim = x.shape[axis];
    let sizes: Vec<usize> = match sizes {
        Some(s) => {
            if let Some(&bad) = s.iter().find(|&&v| v < 0) {
                bail!("split sizes {s:?} have a negative entry {bad}");
            }
            s.iter().map(|&v| v as usize).collect()
        }
        None => {
            let n = num_outputs.unwrap_or(n_outputs);
            if n == 0 {
                bail!("Split needs at least one output");
            }
            let chunk = dim.div_ceil(n);
            (0..n)
                .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.iter().sum::<usize>() != dim {
        bail!("split sizes {sizes:?} do not add up to dim {dim} of axis {axis}");
    }
    if n_outputs != 0 && sizes.len() != n_outputs {
        bail!(
            "Split into {} pieces ({sizes:?}) but the node has {n_outputs} outputs",
            sizes.len()
        );
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut start = 0i64;
    for len in sizes {
        let end = start + len as i64;
        out.push(slice(x, &[start], &[end], Some(&[axis as i64]), None)?);
        start = end;
    }
    Ok(out)
}

/// Removes the listed size-1 axes, or every size-1 axis when `axes` is `None`.
pub fn squeeze(x: &OTensor, axes: Option<&[i64]>) -> Result<OTensor> {
    let shape: Vec<usize> = match axes {
        Some(axes) => {
            let axes = norm_axes(axes, x.rank())?;
            if let Some(&a) = axes.iter().find(|&&a| x.shape[a] != 1) {
                bail!(
                    "cannot squeeze axis {a} of size {} (shape {:?})",
                    x.shape[a],
                    x.shape
                );
            }
            x.shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect()
        }
        None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
    };
    x.reshaped(shape)
}

/// Inserts size-1 axes at `axes` (positions in the output).
pub fn unsqueeze(x: &OTensor, axes: &[i64]) -> Result<OTensor> {
    let out_rank = x.rank() + axes.len();
    let axes = norm_axes(axes, out_rank)?;
    let mut rest = x.shape.iter();
    let mut shape = Vec::with_capacity(out_rank);
    for i in 0..out_rank {
        if axes.contains(&i) {
            shape.push(1);
        } else {
            match rest.next() {
                Some(&d) => shape.push(d),
                None => bail!("unsqueeze axes {axes:?} do not fit shape {:?}", x.shape),
            }
        }
    }
    x.reshaped(shape)
}

/// `[prod(dims before axis), prod(dims from axis)]`; `axis` may be `rank`.
pub fn flatten(x: &OTensor, axis: i64) -> Result<OTensor> {
    let r = x.rank() as i64;
    if axis < -r || axis > r {
        bail!("axis {axis} is out of range for rank {r}");
    }
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    x.reshaped(vec![
        x.shape[..axis].iter().product(),
        x.shape[axis..].iter().product(),
    ])
}

/// Broadcasts `x` and `shape` against each other (numpy rules, both directions).
pub fn expand(x: &OTensor, shape: &[i64]) -> Result<OTensor> {
    if let Some(&bad) = shape.iter().find(|&&d| d < 0) {
        bail!("Expand shape {shape:?} has a negative dim {bad}");
    }
    let spec: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let out_shape = broadcast_shapes(&[&x.shape, &spec])?;
    let offsets = broadcast_offsets(&x.shape, &out_shape)?;
    OTensor::new(out_shape, x.dtype(), x.data().select(&offsets))
}

/// Repeats `x` `repeats[i]` times along each axis.
pub fn tile(x: &OTensor, repeats: &[i64]) -> Result<OTensor> {
    if repeats.len() != x.rank() || repeats.iter().any(|&r| r < 0) {
        bail!(
            "repeats {repeats:?} must be {} non-negative values for shape {:?}",
            x.rank(),
            x.shape
        );
    }
    let out_shape: Vec<usize> = x
        .shape
        .iter()
        .zip(repeats)
        .map(|(&d, &r)| d * r as usize)
        .collect();
    checked_numel(&out_shape)?;
    let in_strides = strides(&x.shape);
    let mut offsets = Vec::with_capacity(out_shape.iter().product());
    for_each_index(&out_shape, |idx| {
        offsets.push(
            idx.iter()
                .zip(&x.shape)
                .zip(&in_strides)
                .map(|((&i, &d), &s)| (i % d) * s)
                .sum(),
        );
    });
    OTensor::new(out_shape, x.dtype(), x.data().select(&offsets))
}

/// numpy `take` along `axis`: output shape is `data[..axis] ++ indices ++ data[axis + 1..]`;
/// negative indices count from the end; out-of-range indices are an error.
pub fn gather(data: &OTensor, indices: &OTensor, axis: i64) -> Result<OTensor> {
    let axis = norm_axis(axis, data.rank())?;
    let idx = match indices.data() {
        Data::I64(v) => v,
        _ => bail!("Gather indices must be integers, got {}", indices.dtype()),
    };
    let dim = data.shape[axis];
    let outer: usize = data.shape[..axis].iter().product();
    let inner: usize = data.shape[axis + 1..].iter().product();
    let mut rows = Vec::with_capacity(idx.len());
    for &i in idx {
        let j = if i < 0 { i + dim as i64 } else { i };
        if j < 0 || j >= dim as i64 {
            bail!("Gather index {i} is out of range for axis {axis} of size {dim}");
        }
        rows.push(j as usize);
    }
    let mut offsets = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in &rows {
            offsets.extend((0..inner).map(|e| (o * dim + r) * inner + e));
        }
    }
    let mut shape = data.shape[..axis].to_vec();
    shape.extend_from_slice(&indices.shape);
    shape.extend_from_slice(&data.shape[axis + 1..]);
    OTensor::new(shape, data.dtype(), data.data().select(&offsets))
}

/// The input's dims `start..end` (clamped; negative values count from the end) as i64.
pub fn shape(x: &OTensor, start: i64, end: Option<i64>) -> Result<OTensor> {
    let r = x.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    let dims: Vec<i64> = x.shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
    OTensor::from_i64(vec![dims.len()], dims)
}

pub fn size(x: &OTensor) -> Result<OTensor> {
    Ok(OTensor::scalar_i64(x.shape.iter().product::<usize>() as i64))
}

/// Keeps the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of the last two dims; zeroes
/// (false) elsewhere.
pub fn trilu(x: &OTensor, k: i64, upper: bool) -> Result<OTensor> {
    if x.rank() < 2 {
        bail!("Trilu needs rank >= 2, got shape {:?}", x.shape);
    }
    let (rows, cols) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
    let keep = |e: usize| {
        let (i, j) = (((e / cols) % rows) as i64, (e % cols) as i64);
        if upper { j - i >= k } else { j - i <= k }
    };
    let data = match x.data() {
        Data::F32(v) => Data::F32(
            v.iter()
                .enumerate()
                .map(|(e, &a)| if keep(e) { a } else { 0.0 })
                .collect(),
        ),
        Data::I64(v) => Data::I64(
            v.iter()
                .enumerate()
                .map(|(e, &a)| if keep(e) { a } else { 0 })
                .collect(),
        ),
        Data::Bool(v) => Data::Bool(v.iter().enumerate().map(|(e, &a)| a && keep(e)).collect()),
    };
    OTensor::new(x.shape.clone(), x.dtype(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], v: &[f32]) -> OTensor {
        OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
    }

    fn iota(shape: &[usize]) -> OTensor {
        let n: usize = shape.iter().product();
        f(shape, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
    }

    #[test]
    fn slice_clamps_and_steps() {
        let x = iota(&[10]);
        let s = |st: i64, en: i64, step: i64| {
            slice(&x, &[st], &[en], None, Some(&[step]))
                .unwrap()
                .f32s()
                .unwrap()
                .to_vec()
        };
        assert_eq!(s(2, 5, 1), [2.0, 3.0, 4.0]);
        assert_eq!(s(-3, i64::MAX, 1), [7.0, 8.0, 9.0], "end clamps to dim");
        assert_eq!(s(-100, 2, 1), [0.0, 1.0], "start clamps to 0");
        assert_eq!(s(8, 2, -2), [8.0, 6.0, 4.0]);
        assert_eq!(
            s(i64::MAX, i64::MIN, -3),
            [9.0, 6.0, 3.0, 0.0],
            "negative step runs to the front"
        );
        assert_eq!(s(5, 5, 1), Vec::<f32>::new());
        assert_eq!(s(3, 7, -1), Vec::<f32>::new());
        assert!(slice(&x, &[0], &[1], None, Some(&[0])).is_err());
        // 2-D with axes: rows 1.., columns reversed.
        let m = iota(&[3, 3]);
        let y = slice(&m, &[1, -1], &[3, i64::MIN], Some(&[0, -1]), Some(&[1, -1])).unwrap();
        assert_eq!(
            (y.shape.clone(), y.f32s().unwrap()),
            (vec![2, 3], &[5.0f32, 4.0, 3.0, 8.0, 7.0, 6.0][..])
        );
    }

    #[test]
    fn gather_takes_rows_and_negative_indices() {
        let x = iota(&[3, 2]);
        let idx = OTensor::from_i64(vec![2, 2], vec![0, -1, 2, 1]).unwrap();
        let y = gather(&x, &idx, 0).unwrap();
        assert_eq!(y.shape, vec![2, 2, 2]);
        assert_eq!(y.f32s().unwrap(), &[0.0, 1.0, 4.0, 5.0, 4.0, 5.0, 2.0, 3.0]);
        let cols = gather(&x, &OTensor::scalar_i64(1), 1).unwrap();
        assert_eq!(
            (cols.shape.clone(), cols.f32s().unwrap()),
            (vec![3], &[1.0f32, 3.0, 5.0][..])
        );
        assert!(gather(&x, &OTensor::scalar_i64(3), 0).is_err());
    }

    #[test]
    fn transpose_concat_split() {
        let x = iota(&[2, 3]);
        let t = transpose(&x, None).unwrap();
        assert_eq!(
            (t.shape.clone(), t.f32s().unwrap()),
            (vec![3, 2], &[0.0f32, 3.0, 1.0, 4.0, 2.0, 5.0][..])
        );
        assert!(transpose(&x, Some(&[0, 0])).is_err());
        let c = concat(&[&x, &iota(&[2, 1])], -1).unwrap();
        assert_eq!(
            (c.shape.clone(), c.f32s().unwrap()),
            (vec![2, 4], &[0.0f32, 1.0, 2.0, 0.0, 3.0, 4.0, 5.0, 1.0][..])
        );
        let parts = split(&iota(&[5]), 0, None, Some(3), 3).unwrap();
        let lens: Vec<usize> = parts.iter().map(|p| p.shape[0]).collect();
        assert_eq!(lens, [2, 2, 1]);
        assert_eq!(parts[2].f32s().unwrap(), &[4.0]);
        assert!(
            split(&iota(&[5]), 0, Some(&[2, 2]), None, 2).is_err(),
            "sizes must add up"
        );
    }

    #[test]
    fn reshape_expand_tile_trilu_shape() {
        let x = iota(&[2, 3]);
        assert_eq!(
            reshape(&x, &[0, -1, 1], false).unwrap().shape,
            vec![2, 3, 1]
        );
        assert!(reshape(&x, &[-1, -1], false).is_err());
        assert_eq!(
            reshape(&iota(&[0, 3]), &[0, 3], true).unwrap().shape,
            vec![0, 3]
        );
        let e = expand(&f(&[2, 1], &[1.0, 2.0]), &[1, 3]).unwrap();
        assert_eq!(
            (e.shape.clone(), e.f32s().unwrap()),
            (vec![2, 3], &[1.0f32, 1.0, 1.0, 2.0, 2.0, 2.0][..])
        );
        let t = tile(&f(&[2], &[1.0, 2.0]), &[3]).unwrap();
        assert_eq!(t.f32s().unwrap(), &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
        let ones = f(&[3, 3], &[1.0; 9]);
        assert_eq!(
            trilu(&ones, 0, true).unwrap().f32s().unwrap(),
            &[1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
        );
        assert_eq!(
            trilu(&ones, -1, false).unwrap().f32s().unwrap(),
            &[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
        );
        assert_eq!(
            shape(&iota(&[2, 3, 4]), -2, None).unwrap().i64s().unwrap(),
            &[3, 4]
        );
        assert_eq!(squeeze(&iota(&[1, 3, 1]), None).unwrap().shape, vec![3]);
        assert!(squeeze(&iota(&[1, 3]), Some(&[1])).is_err());
        assert_eq!(
            unsqueeze(&iota(&[3]), &[0, -1]).unwrap().shape,
            vec![1, 3, 1]
        );
        assert_eq!(flatten(&iota(&[2, 3, 4]), -1).unwrap().shape, vec![6, 4]);
    }
}
