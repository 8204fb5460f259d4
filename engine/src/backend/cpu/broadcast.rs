//! Numpy broadcasting: output shape resolution and a walker over the output in contiguous runs.
//!
//! Inputs are described by per-dim strides over the output shape (0 where broadcast); dims of
//! size 1 are dropped and adjacent dims that are contiguous for every input are merged, so the
//! common cases (same shape, scalar, row, column) collapse to one or two dims whose innermost
//! stride is 0 or 1 for every input. Kernels then run tight loops over each run.

use crate::tensor::strides;

/// The broadcast of `N` input shapes onto one output shape.
#[derive(Debug)]
pub(crate) struct Bcast<const N: usize> {
    out_shape: Vec<usize>,
    /// Collapsed output dims (at least one).
    dims: Vec<usize>,
    /// Per input, its element stride along each collapsed dim (0 where broadcast).
    strides: [Vec<usize>; N],
}

impl<const N: usize> Bcast<N> {
    /// Multidirectional (numpy) broadcast of `shapes`; `None` when two dims are neither equal
    /// nor 1.
    pub fn new(shapes: [&[usize]; N]) -> Option<Self> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut out = vec![1; rank];
        for s in shapes {
            let off = rank - s.len();
            for (i, &d) in s.iter().enumerate() {
                let o = &mut out[off + i];
                if *o == 1 {
                    *o = d;
                } else if d != 1 && d != *o {
                    return None;
                }
            }
        }
        Some(Self::build(shapes, out))
    }

    /// Unidirectional broadcast of every shape to exactly `out`; `None` when one does not fit.
    pub fn to(shapes: [&[usize]; N], out: &[usize]) -> Option<Self> {
        for s in shapes {
            let off = out.len().checked_sub(s.len())?;
            if s.iter()
                .enumerate()
                .any(|(i, &d)| d != 1 && d != out[off + i])
            {
                return None;
            }
        }
        Some(Self::build(shapes, out.to_vec()))
    }

    fn build(shapes: [&[usize]; N], out: Vec<usize>) -> Self {
        let rank = out.len();
        let full: [Vec<usize>; N] = std::array::from_fn(|k| {
            let s = shapes[k];
            let off = rank - s.len();
            let cs = strides(s);
            (0..rank)
                .map(|d| {
                    if d < off || s[d - off] == 1 {
                        0
                    } else {
                        cs[d - off]
                    }
                })
                .collect()
        });
        let mut dims: Vec<usize> = Vec::with_capacity(rank);
        let mut st: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(rank));
        for d in 0..rank {
            let size = out[d];
            if size == 1 {
                continue;
            }
            let merge = !dims.is_empty()
                && (0..N).all(|k| st[k].last().copied() == Some(full[k][d] * size));
            if merge {
                if let Some(last) = dims.last_mut() {
                    *last *= size;
                }
                for k in 0..N {
                    if let Some(last) = st[k].last_mut() {
                        *last = full[k][d];
                    }
                }
            } else {
                dims.push(size);
                for k in 0..N {
                    st[k].push(full[k][d]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in st.iter_mut() {
                s.push(0);
            }
        }
        Bcast {
            out_shape: out,
            dims,
            strides: st,
        }
    }

    pub fn out_shape(&self) -> &[usize] {
        &self.out_shape
    }

    pub fn numel(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// Each input's stride along the innermost run (0 or 1 for contiguous inputs).
    pub fn inner_strides(&self) -> [usize; N] {
        let last = self.dims.len() - 1;
        std::array::from_fn(|k| self.strides[k][last])
    }

    /// Calls `f(pos, offsets, len)` for consecutive runs covering output positions
    /// `start..end`: output `pos + j` reads input `k` at `offsets[k] + j * inner_strides()[k]`.
    pub fn runs(&self, start: usize, end: usize, mut f: impl FnMut(usize, [usize; N], usize)) {
        if start >= end || end > self.numel() {
            return;
        }
        let r = self.dims.len();
        let inner = self.dims[r - 1];
        let mut idx = vec![0usize; r];
        let mut rem = start;
        for d in (0..r).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
        }
        let mut offs: [usize; N] =
            std::array::from_fn(|k| (0..r).map(|d| idx[d] * self.strides[k][d]).sum());
        let mut pos = start;
        while pos < end {
            let len = (inner - idx[r - 1]).min(end - pos);
            f(pos, offs, len);
            pos += len;
            idx[r - 1] += len;
            if idx[r - 1] < inner {
                for k in 0..N {
                    offs[k] += len * self.strides[k][r - 1];
                }
                continue;
            }
            // Carry into the outer dims: rewind the inner dim to 0.
            for k in 0..N {
                offs[k] -= (idx[r - 1] - len) * self.strides[k][r - 1];
            }
            idx[r - 1] = 0;
            let mut d = r - 1;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                for k in 0..N {
                    offs[k] += self.strides[k][d];
                }
                if idx[d] < self.dims[d] {
                    break;
                }
                for k in 0..N {
                    offs[k] -= self.dims[d] * self.strides[k][d];
                }
                idx[d] = 0;
            }
        }
    }
}

/// Writes output positions `start..start + out.len()` of the broadcast of `x` (`bc` built from
/// `[x's shape]`).
pub(crate) fn expand_into<T: Copy>(bc: &Bcast<1>, x: &[T], out: &mut [T], start: usize) {
    let [s] = bc.inner_strides();
    bc.runs(start, start + out.len(), |pos, [o], len| {
        let dst = &mut out[pos - start..pos - start + len];
        match s {
            0 => dst.fill(x[o]),
            1 => dst.copy_from_slice(&x[o..o + len]),
            s => {
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = x[o + j * s];
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_runs<const N: usize>(bc: &Bcast<N>) -> Vec<(usize, [usize; N], usize)> {
        let mut v = vec![];
        bc.runs(0, bc.numel(), |p, o, l| v.push((p, o, l)));
        v
    }

    #[test]
    fn shapes_resolve_like_numpy() {
        let bc = Bcast::new([&[3, 1][..], &[1, 4][..]]).unwrap();
        assert_eq!(bc.out_shape(), &[3, 4]);
        let bc = Bcast::new([&[2, 1, 3, 4][..], &[5, 1, 1][..]]).unwrap();
        assert_eq!(bc.out_shape(), &[2, 5, 3, 4]);
        let bc = Bcast::new([&[][..], &[2, 2][..]]).unwrap();
        assert_eq!(bc.out_shape(), &[2, 2]);
        assert!(Bcast::new([&[2, 3][..], &[4][..]]).is_none());
        assert!(Bcast::new([&[0][..], &[2][..]]).is_none());
        assert_eq!(Bcast::new([&[0][..], &[1][..]]).unwrap().out_shape(), &[0]);
    }

    #[test]
    fn common_cases_collapse_to_tight_runs() {
        // Same shape: one run.
        let bc = Bcast::new([&[2, 3, 4][..], &[2, 3, 4][..]]).unwrap();
        assert_eq!(all_runs(&bc), vec![(0, [0, 0], 24)]);
        // Row broadcast: b restarts at 0 for every row of a.
        let bc = Bcast::new([&[3, 4][..], &[4][..]]).unwrap();
        assert_eq!(bc.inner_strides(), [1, 1]);
        assert_eq!(
            all_runs(&bc),
            vec![(0, [0, 0], 4), (4, [4, 0], 4), (8, [8, 0], 4)]
        );
        // Column broadcast: b is a scalar per run.
        let bc = Bcast::new([&[2, 3][..], &[2, 1][..]]).unwrap();
        assert_eq!(bc.inner_strides(), [1, 0]);
        assert_eq!(all_runs(&bc), vec![(0, [0, 0], 3), (3, [3, 1], 3)]);
    }

    #[test]
    fn runs_start_mid_row() {
        let bc = Bcast::new([&[3, 1][..], &[1, 4][..]]).unwrap();
        let mut v = vec![];
        bc.runs(2, 9, |p, o, l| v.push((p, o, l)));
        assert_eq!(v, vec![(2, [0, 2], 2), (4, [1, 0], 4), (8, [2, 0], 1)]);
    }

    #[test]
    fn expand_into_fills_and_copies() {
        let x = [1, 2, 3];
        let bc = Bcast::to([&[3, 1][..]], &[3, 2]).unwrap();
        let mut out = [0; 6];
        expand_into(&bc, &x, &mut out, 0);
        assert_eq!(out, [1, 1, 2, 2, 3, 3]);
        let bc = Bcast::to([&[3][..]], &[2, 3]).unwrap();
        let mut out = [0; 4];
        expand_into(&bc, &x, &mut out, 2);
        assert_eq!(out, [3, 1, 2, 3]);
        assert!(Bcast::to([&[2][..]], &[3]).is_none());
        assert!(Bcast::to([&[1, 1, 2][..]], &[2]).is_none());
    }
}
