//! Data movement: gather, transpose, concat, slice, expand and trilu. Contiguous runs are
//! copied with `copy_from_slice`; nothing here does arithmetic on element values.

use super::broadcast::{Bcast, expand_into};
use super::{CpuBackend, Elem, elems, numel, out_numel};
use crate::backend::SliceDim;
use crate::bail;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, strides};

pub(super) fn gather(data: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
    let shape = data.shape();
    if axis >= shape.len() {
        bail!("Gather: axis {axis} out of range for rank {}", shape.len());
    }
    let dim = shape[axis];
    let raw = match indices.dtype() {
        crate::DType::I64 | crate::DType::I32 => indices.to_i64_vec()?,
        other => bail!("Gather: indices must be i64 or i32, got {other}"),
    };
    let idx = raw
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + dim as i64 } else { i };
            if j < 0 || j >= dim as i64 {
                bail!("Gather: index {i} out of range for axis {axis} of size {dim}");
            }
            Ok(j as usize)
        })
        .collect::<Result<Vec<usize>>>()?;
    let out_shape = [&shape[..axis], indices.shape(), &shape[axis + 1..]].concat();
    out_numel("Gather", &out_shape)?;
    let outer = numel(&shape[..axis]);
    let inner = numel(&shape[axis + 1..]);
    let out = with_dtype!(data.dtype(), T => {
        let x = elems::<T>("Gather", data)?;
        let mut out: Vec<T> = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            let base = o * dim * inner;
            for &i in &idx {
                let start = base + i * inner;
                out.extend_from_slice(&x[start..start + inner]);
            }
        }
        T::wrap(out)
    });
    Ok(Tensor::from_parts(out_shape, out))
}

/// Collapses a transpose into the fewest output dims: returns each kept output dim's size and
/// its input stride (size-1 dims dropped, dims that stay adjacent merged).
fn collapse_perm(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let st = strides(shape);
    let (mut dims, mut ist): (Vec<usize>, Vec<usize>) = (vec![], vec![]);
    for &p in perm {
        let (size, stride) = (shape[p], st[p]);
        if size == 1 {
            continue;
        }
        match (dims.last_mut(), ist.last_mut()) {
            (Some(d), Some(s)) if *s == stride * size => {
                *d *= size;
                *s = stride;
            }
            _ => {
                dims.push(size);
                ist.push(stride);
            }
        }
    }
    (dims, ist)
}

pub(super) fn transpose(be: &CpuBackend, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let shape = x.shape();
    let mut seen = vec![false; shape.len()];
    let valid = perm.len() == shape.len()
        && perm
            .iter()
            .all(|&p| p < shape.len() && !std::mem::replace(&mut seen[p], true));
    if !valid {
        bail!(
            "Transpose: perm {perm:?} is not a permutation of 0..{}",
            shape.len()
        );
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let (dims, ist) = collapse_perm(shape, perm);
    if dims.len() <= 1 {
        // The element order does not change: share the storage.
        return x.reshape(out_shape);
    }
    let data = with_dtype!(x.dtype(), T => {
        T::wrap(transpose_t(be, elems::<T>("Transpose", x)?, &dims, &ist))
    });
    Ok(Tensor::from_parts(out_shape, data))
}

/// Side of the square tiles a strided 2-D copy walks, so reads and writes both stay in cache.
const TILE: usize = 32;

/// Writes the output of collapsed dims `dims` (input strides `ist`, at least two dims) as a
/// sequence of `[p, q]` matrices, the last two dims, each copied by rows when the last dim is
/// contiguous in the input and by tiles otherwise.
fn transpose_t<T: Elem>(be: &CpuBackend, x: &[T], dims: &[usize], ist: &[usize]) -> Vec<T> {
    let r = dims.len();
    let (p, q, sp, sq) = (dims[r - 2], dims[r - 1], ist[r - 2], ist[r - 1]);
    let (outer_dims, outer_st) = (&dims[..r - 2], &ist[..r - 2]);
    let mut out = vec![T::default(); numel(dims)];
    let mat = p * q;
    if mat == 0 {
        return out;
    }
    be.for_chunks(&mut out, mat, |off, chunk| {
        for (mi, dst) in chunk.chunks_mut(mat).enumerate() {
            let mut rem = off / mat + mi;
            let mut base = 0;
            for d in (0..outer_dims.len()).rev() {
                base += (rem % outer_dims[d]) * outer_st[d];
                rem /= outer_dims[d];
            }
            if sq == 1 {
                for (i, row) in dst.chunks_mut(q).enumerate() {
                    let s = base + i * sp;
                    row.copy_from_slice(&x[s..s + q]);
                }
                continue;
            }
            for i0 in (0..p).step_by(TILE) {
                for j0 in (0..q).step_by(TILE) {
                    for i in i0..(i0 + TILE).min(p) {
                        let row = &mut dst[i * q..(i + 1) * q];
                        let s = base + i * sp;
                        for j in j0..(j0 + TILE).min(q) {
                            row[j] = x[s + j * sq];
                        }
                    }
                }
            }
        }
    });
    out
}

pub(super) fn concat(xs: &[&Tensor], axis: usize) -> Result<Tensor> {
    let Some(first) = xs.first() else {
        bail!("Concat: no inputs");
    };
    let shape = first.shape();
    if axis >= shape.len() {
        bail!("Concat: axis {axis} out of range for rank {}", shape.len());
    }
    for (i, t) in xs.iter().enumerate().skip(1) {
        if t.dtype() != first.dtype() {
            bail!(
                "Concat: input {i} has dtype {}, input 0 has {}",
                t.dtype(),
                first.dtype()
            );
        }
        let s = t.shape();
        let agree = s.len() == shape.len()
            && s.iter()
                .zip(shape)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !agree {
            bail!(
                "Concat: input {i} shape {s:?} does not match input 0 shape {shape:?} off axis {axis}"
            );
        }
    }
    let outer = numel(&shape[..axis]);
    let inner = numel(&shape[axis + 1..]);
    let total: usize = xs.iter().map(|t| t.shape()[axis]).sum();
    let data = with_dtype!(first.dtype(), T => {
        let parts = xs
            .iter()
            .map(|t| Ok((elems::<T>("Concat", t)?, t.shape()[axis] * inner)))
            .collect::<Result<Vec<_>>>()?;
        let mut out: Vec<T> = Vec::with_capacity(outer * total * inner);
        for o in 0..outer {
            for &(v, run) in &parts {
                out.extend_from_slice(&v[o * run..(o + 1) * run]);
            }
        }
        T::wrap(out)
    });
    let mut out_shape = shape.to_vec();
    out_shape[axis] = total;
    Ok(Tensor::from_parts(out_shape, data))
}

pub(super) fn slice(x: &Tensor, dims: &[SliceDim]) -> Result<Tensor> {
    let shape = x.shape();
    if dims.len() != shape.len() {
        bail!(
            "Slice: {} dims given for a rank {} input",
            dims.len(),
            shape.len()
        );
    }
    for (a, (d, &size)) in dims.iter().zip(shape).enumerate() {
        if d.step == 0 {
            bail!("Slice: axis {a} has step 0");
        }
        if d.len == 0 {
            continue;
        }
        let last = d.start as i128 + (d.len as i128 - 1) * d.step as i128;
        if d.start >= size || last < 0 || last >= size as i128 {
            bail!(
                "Slice: axis {a} (size {size}) reads from {} to {last} with step {}",
                d.start,
                d.step
            );
        }
    }
    let out_shape: Vec<usize> = dims.iter().map(|d| d.len).collect();
    let full = |(d, &size): (&SliceDim, &usize)| d.start == 0 && d.step == 1 && d.len == size;
    if dims.iter().zip(shape).all(full) {
        return x.reshape(out_shape);
    }
    let data = with_dtype!(x.dtype(), T => {
        T::wrap(slice_t(elems::<T>("Slice", x)?, shape, dims))
    });
    Ok(Tensor::from_parts(out_shape, data))
}

/// Copies a validated strided slice as contiguous runs: the trailing axes taken whole, plus the
/// next one out when its step is 1, make one run.
fn slice_t<T: Elem>(x: &[T], shape: &[usize], dims: &[SliceDim]) -> Vec<T> {
    let total = numel(&dims.iter().map(|d| d.len).collect::<Vec<_>>());
    let mut out: Vec<T> = Vec::with_capacity(total);
    if total == 0 {
        return out;
    }
    let st = strides(shape);
    // Axes q.. are whole; axis q - 1 is the first (from the end) that is not.
    let mut q = shape.len();
    while q > 0
        && dims[q - 1].start == 0
        && dims[q - 1].step == 1
        && dims[q - 1].len == shape[q - 1]
    {
        q -= 1;
    }
    let mut run = numel(&shape[q..]);
    let mut outer_axes = q;
    if q > 0 && dims[q - 1].step == 1 {
        run *= dims[q - 1].len;
        outer_axes = q - 1;
    }
    // Offsets as isize: negative steps walk backwards from in-range starts.
    let base: isize = (0..q).map(|a| (dims[a].start * st[a]) as isize).sum();
    let steps: Vec<isize> = (0..outer_axes)
        .map(|a| dims[a].step * st[a] as isize)
        .collect();
    let lens: Vec<usize> = (0..outer_axes).map(|a| dims[a].len).collect();
    let mut idx = vec![0usize; outer_axes];
    let mut off = base;
    loop {
        let s = off as usize;
        out.extend_from_slice(&x[s..s + run]);
        // Advance the outer multi-index, innermost first.
        let mut a = outer_axes;
        loop {
            if a == 0 {
                return out;
            }
            a -= 1;
            idx[a] += 1;
            off += steps[a];
            if idx[a] < lens[a] {
                break;
            }
            off -= steps[a] * lens[a] as isize;
            idx[a] = 0;
        }
    }
}

pub(super) fn expand(be: &CpuBackend, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    out_numel("Expand", shape)?;
    let bc = Bcast::to([x.shape()], shape).ok_or_else(|| {
        Error::msg(format!(
            "Expand: cannot broadcast {:?} to {shape:?}",
            x.shape()
        ))
    })?;
    if numel(shape) == x.numel() {
        // Only size-1 dims added or kept: same elements in the same order.
        return x.reshape(shape.to_vec());
    }
    let data = with_dtype!(x.dtype(), T => {
        let v = elems::<T>("Expand", x)?;
        let mut out = vec![T::default(); bc.numel()];
        be.for_chunks(&mut out, 1, |off, chunk| expand_into(&bc, v, chunk, off));
        T::wrap(out)
    });
    Ok(Tensor::from_parts(shape.to_vec(), data))
}

pub(super) fn trilu(x: &Tensor, k: i64, upper: bool) -> Result<Tensor> {
    let shape = x.shape();
    let r = shape.len();
    if r < 2 {
        bail!("Trilu: input rank {r}, needs at least 2");
    }
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let data = with_dtype!(x.dtype(), T => {
        let mut v = elems::<T>("Trilu", x)?.to_vec();
        if rows * cols > 0 {
            for mat in v.chunks_mut(rows * cols) {
                for (i, row) in mat.chunks_mut(cols).enumerate() {
                    // Column i + k is the diagonal; clamp it into 0..=cols.
                    let diag = (i as i128 + k as i128).clamp(0, cols as i128) as usize;
                    if upper {
                        row[..diag].fill(T::default());
                    } else {
                        let from = (i as i128 + k as i128 + 1).clamp(0, cols as i128) as usize;
                        row[from..].fill(T::default());
                    }
                }
            }
        }
        T::wrap(v)
    });
    Ok(Tensor::from_parts(shape.to_vec(), data))
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::test_util::{be, f32t};
    use crate::tensor::Data;

    fn iota(shape: &[usize]) -> Tensor {
        let n = shape.iter().product::<usize>();
        Tensor::f32(shape, (0..n).map(|v| v as f32).collect()).unwrap()
    }

    #[test]
    fn gather_rows_scalars_and_negative_indices() {
        let x = iota(&[3, 2]);
        let idx = Tensor::i64(&[2, 2], vec![0, 2, -1, 1]).unwrap();
        let y = be().gather(&x, &idx, 0).unwrap();
        assert_eq!(y.shape(), &[2, 2, 2]);
        assert_eq!(y.to_f32_vec(), vec![0., 1., 4., 5., 4., 5., 2., 3.]);
        // Scalar index removes the axis.
        let y = be().gather(&x, &Tensor::scalar_i64(1), 1).unwrap();
        assert_eq!(y.shape(), &[3]);
        assert_eq!(y.to_f32_vec(), vec![1., 3., 5.]);
        // i32 indices, middle axis, bool data.
        let b = Tensor::new(vec![1, 3, 1], Data::Bool(vec![true, false, true])).unwrap();
        let idx = Tensor::new(vec![2], Data::I32(vec![1, 2])).unwrap();
        let y = be().gather(&b, &idx, 1).unwrap();
        assert_eq!(y.shape(), &[1, 2, 1]);
        assert_eq!(y.data(), &Data::Bool(vec![false, true]));
        let err = be()
            .gather(&x, &Tensor::i64(&[1], vec![3]).unwrap(), 0)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Gather: index 3 out of range for axis 0 of size 3");
        let err = be()
            .gather(&x, &Tensor::i64(&[1], vec![-4]).unwrap(), 0)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Gather: index -4 out of range for axis 0 of size 3");
        let err = be()
            .gather(&x, &f32t(&[1], &[0.0]), 0)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Gather: indices must be i64 or i32, got f32");
        let err = be()
            .gather(&x, &Tensor::scalar_i64(0), 2)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Gather: axis 2 out of range for rank 2");
    }

    #[test]
    fn transpose_matrix_and_3d() {
        let x = iota(&[2, 3]);
        let y = be().transpose(&x, &[1, 0]).unwrap();
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_f32_vec(), vec![0., 3., 1., 4., 2., 5.]);
        let x = iota(&[2, 3, 4]);
        let y = be().transpose(&x, &[1, 0, 2]).unwrap();
        assert_eq!(y.shape(), &[3, 2, 4]);
        let v = y.to_f32_vec();
        assert_eq!(&v[..8], &[0., 1., 2., 3., 12., 13., 14., 15.]);
        assert_eq!(&v[16..], &[8., 9., 10., 11., 20., 21., 22., 23.]);
        let y = be().transpose(&x, &[2, 0, 1]).unwrap();
        assert_eq!(y.shape(), &[4, 2, 3]);
        assert_eq!(&y.to_f32_vec()[..6], &[0., 4., 8., 12., 16., 20.]);
        // Moving only size-1 dims is free: same storage.
        let x = iota(&[1, 3, 1, 2]);
        let y = be().transpose(&x, &[2, 1, 0, 3]).unwrap();
        assert_eq!(y.shape(), &[1, 3, 1, 2]);
        assert!(std::ptr::eq(
            y.as_f32().unwrap().as_ptr(),
            x.as_f32().unwrap().as_ptr()
        ));
        let h = Tensor::new(
            vec![2, 1, 2],
            Data::F16((0..4).map(|v| f16::from_f32(v as f32)).collect()),
        )
        .unwrap();
        let y = be().transpose(&h, &[2, 1, 0]).unwrap();
        assert_eq!(y.to_f32_vec(), vec![0., 2., 1., 3.]);
    }

    #[test]
    fn transpose_large_tiles_match_definition() {
        for threads in [1, 2] {
            let b = CpuBackend::new(threads).unwrap();
            let shape = [3, 70, 45, 5];
            let x = iota(&shape);
            let perm = [0, 3, 2, 1];
            let y = b.transpose(&x, &perm).unwrap();
            let ys = y.shape().to_vec();
            assert_eq!(ys, vec![3, 5, 45, 70]);
            let xv = x.to_f32_vec();
            let st = strides(&shape);
            let yv = y.to_f32_vec();
            let mut i = 0;
            for a in 0..ys[0] {
                for bb in 0..ys[1] {
                    for c in 0..ys[2] {
                        for d in 0..ys[3] {
                            let src = a * st[0] + bb * st[3] + c * st[2] + d * st[1];
                            assert_eq!(yv[i], xv[src]);
                            i += 1;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transpose_rejects_bad_perm() {
        let x = iota(&[2, 3, 4]);
        let err = be().transpose(&x, &[0, 0, 1]).unwrap_err().to_string();
        assert_eq!(
            err,
            "Transpose: perm [0, 0, 1] is not a permutation of 0..3"
        );
        let err = be().transpose(&x, &[1, 0]).unwrap_err().to_string();
        assert_eq!(err, "Transpose: perm [1, 0] is not a permutation of 0..3");
        let err = be().transpose(&x, &[0, 1, 3]).unwrap_err().to_string();
        assert_eq!(
            err,
            "Transpose: perm [0, 1, 3] is not a permutation of 0..3"
        );
    }

    #[test]
    fn concat_along_each_axis() {
        let a = iota(&[2, 2]);
        let b = f32t(&[2, 1], &[10., 11.]);
        let y = be().concat(&[&a, &b], 1).unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_f32_vec(), vec![0., 1., 10., 2., 3., 11.]);
        let c = f32t(&[1, 2], &[7., 8.]);
        let y = be().concat(&[&a, &c, &a], 0).unwrap();
        assert_eq!(y.shape(), &[5, 2]);
        assert_eq!(y.to_f32_vec(), vec![0., 1., 2., 3., 7., 8., 0., 1., 2., 3.]);
        let i = Tensor::i64(&[2], vec![1, 2]).unwrap();
        let e = Tensor::i64(&[0], vec![]).unwrap();
        assert_eq!(
            be().concat(&[&i, &e, &i], 0).unwrap().as_i64().unwrap(),
            &[1, 2, 1, 2]
        );
        let err = be().concat(&[&a, &c], 1).unwrap_err().to_string();
        assert_eq!(
            err,
            "Concat: input 1 shape [1, 2] does not match input 0 shape [2, 2] off axis 1"
        );
        let err = be().concat(&[&a, &i], 0).unwrap_err().to_string();
        assert_eq!(err, "Concat: input 1 has dtype i64, input 0 has f32");
        let err = be().concat(&[], 0).unwrap_err().to_string();
        assert_eq!(err, "Concat: no inputs");
    }

    fn sd(start: usize, step: isize, len: usize) -> SliceDim {
        SliceDim { start, step, len }
    }

    #[test]
    fn slice_contiguous_strided_and_reversed() {
        let x = iota(&[3, 4]);
        // Rows 1..3, all columns: one contiguous run.
        let y = be().slice(&x, &[sd(1, 1, 2), sd(0, 1, 4)]).unwrap();
        assert_eq!(y.shape(), &[2, 4]);
        assert_eq!(y.to_f32_vec(), vec![4., 5., 6., 7., 8., 9., 10., 11.]);
        // Columns 1..3 of every row.
        let y = be().slice(&x, &[sd(0, 1, 3), sd(1, 1, 2)]).unwrap();
        assert_eq!(y.to_f32_vec(), vec![1., 2., 5., 6., 9., 10.]);
        // Every other column, reversed rows.
        let y = be().slice(&x, &[sd(2, -1, 3), sd(0, 2, 2)]).unwrap();
        assert_eq!(y.to_f32_vec(), vec![8., 10., 4., 6., 0., 2.]);
        // Reversed columns.
        let y = be().slice(&x, &[sd(0, 1, 1), sd(3, -1, 4)]).unwrap();
        assert_eq!(y.to_f32_vec(), vec![3., 2., 1., 0.]);
        // Empty.
        let y = be().slice(&x, &[sd(0, 1, 0), sd(0, 1, 4)]).unwrap();
        assert_eq!(y.shape(), &[0, 4]);
        // Whole: shares storage.
        let y = be().slice(&x, &[sd(0, 1, 3), sd(0, 1, 4)]).unwrap();
        assert!(std::ptr::eq(
            y.as_f32().unwrap().as_ptr(),
            x.as_f32().unwrap().as_ptr()
        ));
        let bf = Tensor::new(
            vec![3],
            Data::BF16((0..3).map(|v| bf16::from_f32(v as f32)).collect()),
        )
        .unwrap();
        assert_eq!(
            be().slice(&bf, &[sd(1, 1, 2)]).unwrap().to_f32_vec(),
            vec![1., 2.]
        );
        let err = be().slice(&x, &[sd(0, 1, 3)]).unwrap_err().to_string();
        assert_eq!(err, "Slice: 1 dims given for a rank 2 input");
        let err = be()
            .slice(&x, &[sd(0, 1, 3), sd(2, 1, 3)])
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Slice: axis 1 (size 4) reads from 2 to 4 with step 1");
        let err = be()
            .slice(&x, &[sd(1, -1, 3), sd(0, 1, 4)])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "Slice: axis 0 (size 3) reads from 1 to -1 with step -1"
        );
        let err = be()
            .slice(&x, &[sd(0, 0, 1), sd(0, 1, 4)])
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Slice: axis 0 has step 0");
    }

    #[test]
    fn expand_broadcasts() {
        let x = f32t(&[3, 1], &[1., 2., 3.]);
        let y = be().expand(&x, &[2, 3, 2]).unwrap();
        assert_eq!(y.shape(), &[2, 3, 2]);
        assert_eq!(
            y.to_f32_vec(),
            vec![1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.]
        );
        let s = Tensor::scalar_i64(7);
        assert_eq!(be().expand(&s, &[3]).unwrap().as_i64().unwrap(), &[7, 7, 7]);
        let y = be().expand(&x, &[1, 3, 1]).unwrap();
        assert_eq!(y.shape(), &[1, 3, 1]);
        let err = be().expand(&x, &[3, 4, 2]).unwrap_err().to_string();
        assert_eq!(err, "Expand: cannot broadcast [3, 1] to [3, 4, 2]");
        let err = be().expand(&x, &[3]).unwrap_err().to_string();
        assert_eq!(err, "Expand: cannot broadcast [3, 1] to [3]");
        let err = be()
            .expand(&x, &[1 << 40, 3, 1 << 30])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "Expand: output shape [1099511627776, 3, 1073741824] is too large"
        );
        let big = CpuBackend::new(2)
            .unwrap()
            .expand(&x, &[20_000, 3, 2])
            .unwrap();
        assert!(
            big.to_f32_vec()
                .chunks(6)
                .all(|c| c == [1., 1., 2., 2., 3., 3.])
        );
    }

    #[test]
    fn trilu_upper_lower_with_offsets() {
        let x = f32t(&[3, 3], &[1.; 9]);
        let y = be().trilu(&x, 0, true).unwrap().to_f32_vec();
        assert_eq!(y, vec![1., 1., 1., 0., 1., 1., 0., 0., 1.]);
        let y = be().trilu(&x, 0, false).unwrap().to_f32_vec();
        assert_eq!(y, vec![1., 0., 0., 1., 1., 0., 1., 1., 1.]);
        let y = be().trilu(&x, 1, true).unwrap().to_f32_vec();
        assert_eq!(y, vec![0., 1., 1., 0., 0., 1., 0., 0., 0.]);
        let y = be().trilu(&x, -1, false).unwrap().to_f32_vec();
        assert_eq!(y, vec![0., 0., 0., 1., 0., 0., 1., 1., 0.]);
        let y = be().trilu(&x, i64::MIN, true).unwrap().to_f32_vec();
        assert_eq!(y, vec![1.; 9]);
        // Batched, non-square, integer.
        let i = Tensor::i64(&[2, 2, 3], vec![1; 12]).unwrap();
        let y = be().trilu(&i, 1, false).unwrap();
        assert_eq!(y.as_i64().unwrap(), &[1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1]);
        let err = be()
            .trilu(&f32t(&[3], &[1.; 3]), 0, true)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "Trilu: input rank 1, needs at least 2");
    }
}
