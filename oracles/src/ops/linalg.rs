//! MatMul (numpy `matmul`: 1-D promotion, broadcast batch dims) and Gemm.
//!
//! Float products and sums are computed in f64 and rounded once per output element. The loops run
//! in i-k-j order over contiguous rows of `b`: for each output row `i` (and block of columns), for
//! each `k` in ascending order, `acc[i][j] += a[i][k] * b[k][j]`. Rows are taken a few at a time
//! so that each segment of `b` read from memory serves all of them (a prefill multiplies many
//! rows by the same weights). Row tiles and column blocks are independent, so they run on rayon;
//! every element is still summed over `k` in the same order, so the result does not depend on
//! the thread count or the tiling.

use rayon::prelude::*;

use crate::bail;
use crate::error::Result;
use crate::tensor::{Data, OTensor, broadcast_offsets, broadcast_shapes};

/// Output rows per task.
const ROW_TILE: usize = 8;
/// Output columns per task (a decode step has a single row, so rows alone are not enough
/// parallelism); long enough that reading a segment of a row of `b` streams from memory.
const COLUMN_BLOCK: usize = 2048;

/// `out[i][j] = sum_k a[i][k] * b[k][j]` for one `[m, k] x [k, n]` matrix pair, in f64.
fn matmul_f32(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, out: &mut [f32]) {
    if n == 0 || m == 0 {
        return;
    }
    out.par_chunks_mut(ROW_TILE * n)
        .enumerate()
        .for_each(|(tile, out_rows)| {
            let i0 = tile * ROW_TILE;
            let rows = out_rows.len() / n;
            let blocks: Vec<(usize, Vec<f64>)> = (0..n.div_ceil(COLUMN_BLOCK))
                .into_par_iter()
                .map(|block| {
                    let j0 = block * COLUMN_BLOCK;
                    let len = COLUMN_BLOCK.min(n - j0);
                    // acc[r * len + j] accumulates out[i0 + r][j0 + j].
                    let mut acc = vec![0f64; rows * len];
                    for kk in 0..k {
                        let b_seg = &b[kk * n + j0..kk * n + j0 + len];
                        for (r, acc_row) in acc.chunks_mut(len).enumerate() {
                            let aik = a[(i0 + r) * k + kk] as f64;
                            for (s, &bkj) in acc_row.iter_mut().zip(b_seg) {
                                *s += aik * bkj as f64;
                            }
                        }
                    }
                    (j0, acc)
                })
                .collect();
            for (j0, acc) in blocks {
                let len = acc.len() / rows;
                for (r, acc_row) in acc.chunks(len).enumerate() {
                    for (o, &s) in out_rows[r * n + j0..r * n + j0 + len]
                        .iter_mut()
                        .zip(acc_row)
                    {
                        *o = s as f32;
                    }
                }
            }
        });
}

/// Integer matmul with wrapping i64 arithmetic.
fn matmul_i64(a: &[i64], b: &[i64], m: usize, k: usize, n: usize, out: &mut [i64]) {
    for i in 0..m {
        for kk in 0..k {
            let aik = a[i * k + kk];
            for j in 0..n {
                out[i * n + j] = out[i * n + j].wrapping_add(aik.wrapping_mul(b[kk * n + j]));
            }
        }
    }
}

/// numpy `matmul`: a 1-D `a` is a row vector and a 1-D `b` a column vector (the added dim is
/// removed from the result); the leading (batch) dims broadcast.
pub fn mat_mul(a: &OTensor, b: &OTensor) -> Result<OTensor> {
    if a.dtype() != b.dtype() {
        bail!(
            "MatMul: input types differ ({} vs {})",
            a.dtype(),
            b.dtype()
        );
    }
    if a.rank() == 0 || b.rank() == 0 {
        bail!(
            "MatMul: inputs must have rank >= 1, got shapes {:?} and {:?}",
            a.shape,
            b.shape
        );
    }
    let a_shape = if a.rank() == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let b_shape = if b.rank() == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (ra, rb) = (a_shape.len(), b_shape.len());
    let (m, k) = (a_shape[ra - 2], a_shape[ra - 1]);
    let (kb, n) = (b_shape[rb - 2], b_shape[rb - 1]);
    if k != kb {
        bail!(
            "MatMul: inner dims {k} vs {kb} (shapes {:?} and {:?})",
            a.shape,
            b.shape
        );
    }
    let (batch_a, batch_b) = (&a_shape[..ra - 2], &b_shape[..rb - 2]);
    let batch = broadcast_shapes(&[batch_a, batch_b])?;
    // For each output batch, which matrix of `a` and of `b` it multiplies.
    let which_a = broadcast_offsets(batch_a, &batch)?;
    let which_b = broadcast_offsets(batch_b, &batch)?;
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    let data = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => {
            let mut out = vec![0f32; which_a.len() * m * n];
            if m * n > 0 {
                for (bi, out_mat) in out.chunks_mut(m * n).enumerate() {
                    let am = &x[which_a[bi] * m * k..(which_a[bi] + 1) * m * k];
                    let bm = &y[which_b[bi] * k * n..(which_b[bi] + 1) * k * n];
                    matmul_f32(am, bm, m, k, n, out_mat);
                }
            }
            Data::F32(out)
        }
        (Data::I64(x), Data::I64(y)) => {
            let mut out = vec![0i64; which_a.len() * m * n];
            if m * n > 0 {
                for (bi, out_mat) in out.chunks_mut(m * n).enumerate() {
                    let am = &x[which_a[bi] * m * k..(which_a[bi] + 1) * m * k];
                    let bm = &y[which_b[bi] * k * n..(which_b[bi] + 1) * k * n];
                    matmul_i64(am, bm, m, k, n, out_mat);
                }
            }
            Data::I64(out.into_iter().map(|v| a.dtype().wrap_int(v)).collect())
        }
        _ => bail!("MatMul does not take {}", a.dtype()),
    };
    OTensor::new(out_shape, a.dtype(), data)
}

/// `alpha * op(A) @ op(B) + beta * C` for 2-D float `A`, `B`; `op` transposes when asked; `C`
/// (optional) broadcasts to `[M, N]`. Computed in f64, rounded once.
pub fn gemm(
    a: &OTensor,
    b: &OTensor,
    c: Option<&OTensor>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> Result<OTensor> {
    if a.dtype() != b.dtype() || c.is_some_and(|c| c.dtype() != a.dtype()) {
        bail!("Gemm: input types differ");
    }
    let (Data::F32(x), Data::F32(y)) = (a.data(), b.data()) else {
        bail!(
            "Gemm: the oracle supports float inputs only, got {}",
            a.dtype()
        );
    };
    if a.rank() != 2 || b.rank() != 2 {
        bail!(
            "Gemm: A and B must be 2-D, got shapes {:?} and {:?}",
            a.shape,
            b.shape
        );
    }
    let (m, k) = if trans_a {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (kb, n) = if trans_b {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != kb {
        bail!(
            "Gemm: inner dims {k} vs {kb} (shapes {:?} and {:?}, transA {trans_a}, transB {trans_b})",
            a.shape,
            b.shape
        );
    }
    let a_at = |i: usize, kk: usize| {
        if trans_a {
            x[kk * m + i]
        } else {
            x[i * k + kk]
        }
    };
    let b_at = |kk: usize, j: usize| {
        if trans_b {
            y[j * k + kk]
        } else {
            y[kk * n + j]
        }
    };
    let c_vals: Option<(Vec<usize>, &[f32])> = match c {
        Some(c) => Some((broadcast_offsets(&c.shape, &[m, n])?, c.f32s()?)),
        None => None,
    };
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for kk in 0..k {
                acc += a_at(i, kk) as f64 * b_at(kk, j) as f64;
            }
            let mut v = alpha as f64 * acc;
            if let Some((offs, cv)) = &c_vals {
                v += beta as f64 * cv[offs[i * n + j]] as f64;
            }
            out[i * n + j] = v as f32;
        }
    }
    OTensor::new(vec![m, n], a.dtype(), Data::F32(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(shape: &[usize], v: &[f32]) -> OTensor {
        OTensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn matmul_by_hand() {
        // [[1, 2, 3], [4, 5, 6]] @ [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]]
        let a = f(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = f(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
        let y = mat_mul(&a, &b).unwrap();
        assert_eq!(
            (y.shape.clone(), y.f32s().unwrap()),
            (vec![2, 2], &[58.0f32, 64.0, 139.0, 154.0][..])
        );
        // 1-D on either side drops the promoted dim.
        let v = mat_mul(&f(&[3], &[1.0, 0.0, -1.0]), &b).unwrap();
        assert_eq!(
            (v.shape.clone(), v.f32s().unwrap()),
            (vec![2], &[-4.0f32, -4.0][..])
        );
        let w = mat_mul(&a, &f(&[3], &[1.0, 1.0, 1.0])).unwrap();
        assert_eq!(
            (w.shape.clone(), w.f32s().unwrap()),
            (vec![2], &[6.0f32, 15.0][..])
        );
        assert!(mat_mul(&a, &a).is_err(), "inner dims 3 vs 2");
    }

    #[test]
    fn matmul_broadcasts_batches() {
        // Batch [2] x no batch: the same b for both; identity then doubling.
        let a = f(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = f(&[2, 2], &[2.0, 0.0, 0.0, 2.0]);
        let y = mat_mul(&a, &b).unwrap();
        assert_eq!(
            (y.shape.clone(), y.f32s().unwrap()),
            (vec![2, 1, 2], &[2.0f32, 4.0, 6.0, 8.0][..])
        );
        // [2, 1, 1, 2] x [3, 2, 1] -> [2, 3, 1, 1]
        let a4 = f(&[2, 1, 1, 2], &[1.0, 1.0, 2.0, 2.0]);
        let b3 = f(&[3, 2, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        let z = mat_mul(&a4, &b3).unwrap();
        assert_eq!(
            (z.shape.clone(), z.f32s().unwrap()),
            (vec![2, 3, 1, 1], &[1.0f32, 1.0, 2.0, 2.0, 2.0, 4.0][..])
        );
    }

    #[test]
    fn matmul_tiles_cover_every_row_and_column() {
        // m > 2 ROW_TILE and n > 2 COLUMN_BLOCK, neither a multiple. With a[i][kk] = i + 1 and
        // b[kk][j] = j + kk, out[i][j] = (i + 1) sum_kk (j + kk) = (i + 1) (k j + k (k - 1) / 2).
        let (m, k, n) = (2 * ROW_TILE + 3, 3usize, 2 * COLUMN_BLOCK + 5);
        let a: Vec<f32> = (0..m * k).map(|e| (e / k + 1) as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|e| ((e % n) + e / n) as f32).collect();
        let y = mat_mul(&f(&[m, k], &a), &f(&[k, n], &b)).unwrap();
        let want: Vec<f32> = (0..m * n)
            .map(|e| ((e / n + 1) * (k * (e % n) + k * (k - 1) / 2)) as f32)
            .collect();
        assert_eq!(y.f32s().unwrap(), want.as_slice());
    }

    #[test]
    fn gemm_by_hand() {
        let a = f(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]); // transposed [[1, 2, 3], [4, 5, 6]]
        let b = f(&[2, 3], &[7.0, 9.0, 11.0, 8.0, 10.0, 12.0]); // transposed [[7, 8], [9, 10], [11, 12]]
        let c = f(&[2], &[1.0, -1.0]);
        let y = gemm(&a, &b, Some(&c), 0.5, 2.0, true, true).unwrap();
        assert_eq!(y.f32s().unwrap(), &[31.0, 30.0, 71.5, 75.0]);
    }
}
