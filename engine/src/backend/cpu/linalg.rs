//! MatMul (numpy `matmul`, behind MatMul and Gemm) on the `gemm` crate: f32 and f16 natively,
//! bf16 through f32, integers by a plain loop (they only occur in shape arithmetic).

use gemm::Parallelism;
use half::{bf16, f16};
use rayon::prelude::*;

use super::broadcast::Bcast;
use super::matvec::{PANEL, STREAMS};
use super::{CpuBackend, Int, Panels, out_numel};
use crate::bail;
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor};

/// Batched matmuls run one single-threaded gemm per batch, batches in parallel, when there
/// are at least as many batches as threads or each batch is at most this many multiply-adds;
/// otherwise batch after batch, each gemm split across the threads.
const SMALL_GEMM: usize = 64 * 64 * 64;

/// The resolved shapes of one matmul.
struct Plan {
    m: usize,
    n: usize,
    k: usize,
    /// Per output batch, the matrix index into `a` and into `b`.
    batches: Vec<(usize, usize)>,
    out_shape: Vec<usize>,
}

impl Plan {
    fn new(sa: &[usize], sb: &[usize]) -> Result<Plan> {
        if sa.is_empty() || sb.is_empty() {
            bail!("MatMul: scalar operand (shapes {sa:?} x {sb:?})");
        }
        let a2: Vec<usize> = if sa.len() == 1 {
            vec![1, sa[0]]
        } else {
            sa.to_vec()
        };
        let b2: Vec<usize> = if sb.len() == 1 {
            vec![sb[0], 1]
        } else {
            sb.to_vec()
        };
        let (ra, rb) = (a2.len(), b2.len());
        let (m, k, kb, n) = (a2[ra - 2], a2[ra - 1], b2[rb - 2], b2[rb - 1]);
        if k != kb {
            bail!("MatMul: inner dims {k} vs {kb} (shapes {sa:?} x {sb:?})");
        }
        let bc = Bcast::new([&a2[..ra - 2], &b2[..rb - 2]]).ok_or_else(|| {
            Error::msg(format!(
                "MatMul: batch dims of {sa:?} and {sb:?} do not broadcast"
            ))
        })?;
        let mut full = bc.out_shape().to_vec();
        full.extend([m, n]);
        out_numel("MatMul", &full)?;
        let mut batches = Vec::with_capacity(bc.numel());
        let [sa_in, sb_in] = bc.inner_strides();
        bc.runs(0, bc.numel(), |_, [oa, ob], len| {
            batches.extend((0..len).map(|j| (oa + j * sa_in, ob + j * sb_in)));
        });
        let mut out_shape = bc.out_shape().to_vec();
        if sa.len() > 1 {
            out_shape.push(m);
        }
        if sb.len() > 1 {
            out_shape.push(n);
        }
        Ok(Plan {
            m,
            n,
            k,
            batches,
            out_shape,
        })
    }

    /// True when `a`'s batches are contiguous and `b` is the same matrix for all of them, so
    /// the batch folds into `m`: one `[batches * m, k] x [k, n]` gemm.
    fn folds(&self) -> bool {
        let b0 = self.batches.first().map_or(0, |b| b.1);
        self.batches
            .iter()
            .enumerate()
            .all(|(i, &(ia, ib))| ia == i && ib == b0)
    }
}

pub(super) fn matmul(be: &CpuBackend, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.dtype() != b.dtype() {
        bail!("MatMul: dtype mismatch {} vs {}", a.dtype(), b.dtype());
    }
    let plan = Plan::new(a.shape(), b.shape())?;
    if let Some(p) = b.prepared::<Panels>()
        && plan.m * plan.batches.len() == 1
    {
        return Ok(Tensor::from_parts(plan.out_shape, panels_matvec(be, a, p)?));
    }
    let data = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => Data::F32(gemm_batched(be, &plan, x, y, 0.0, 1.0)),
        (Data::F16(x), Data::F16(y)) => {
            Data::F16(gemm_batched(be, &plan, x, y, f16::ZERO, f16::ONE))
        }
        (Data::BF16(x), Data::BF16(y)) => {
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let yf: Vec<f32> = y.iter().map(|v| v.to_f32()).collect();
            let out = gemm_batched(be, &plan, &xf, &yf, 0.0, 1.0);
            Data::BF16(out.into_iter().map(bf16::from_f32).collect())
        }
        (Data::I64(x), Data::I64(y)) => Data::I64(int_matmul(&plan, x, y)),
        (Data::I32(x), Data::I32(y)) => Data::I32(int_matmul(&plan, x, y)),
        _ => bail!("MatMul: unsupported dtype {}", a.dtype()),
    };
    Ok(Tensor::from_parts(plan.out_shape, data))
}

/// Columns of `Bᵀ` (rows of `B`) transposed into the buffer at a time by
/// [`matvec_transposed_b`]: two AVX vectors per row of the buffer, `k · 16` values (4 KiB for a
/// 64-wide attention head in f32), so the buffer stays in L1.
const BT_COLS: usize = 16;

/// `A · Bᵀ` (the last two axes of `B` swapped) when every product has one row, as the decode
/// step's attention scores `q · Kᵀ` do: bit for bit what `matmul(a, transpose(b))` gives, since
/// that runs the matrix-vector kernel, in which every output is its own chain of multiply-adds
/// over the rows in order, whatever block of columns it is computed in. Here `B`'s rows are
/// transposed [`BT_COLS`] at a time into a buffer that stays in L1 and the kernel runs on it,
/// instead of a whole transposed copy being allocated, written and read back. `Ok(None)` when
/// the product takes another path (more than one row, or a dtype other than f32 and f16): the
/// caller transposes then.
pub(super) fn matvec_transposed_b(
    be: &CpuBackend,
    a: &Tensor,
    b: &Tensor,
) -> Result<Option<Tensor>> {
    if a.dtype() != b.dtype() {
        bail!("MatMul: dtype mismatch {} vs {}", a.dtype(), b.dtype());
    }
    let mut sb = b.shape().to_vec();
    let r = sb.len();
    if r < 2 {
        return Ok(None);
    }
    sb.swap(r - 2, r - 1);
    let plan = Plan::new(a.shape(), &sb)?;
    if plan.m != 1 {
        return Ok(None);
    }
    let data = match (a.data(), b.data()) {
        (Data::F32(x), Data::F32(y)) => Data::F32(transposed_b_batched(be, &plan, x, y)),
        (Data::F16(x), Data::F16(y)) => Data::F16(transposed_b_batched(be, &plan, x, y)),
        _ => return Ok(None),
    };
    Ok(Some(Tensor::from_parts(plan.out_shape, data)))
}

/// The one-row products of `plan` with `b` holding each right matrix untransposed (`[n, k]`):
/// batches in parallel when there are several, else blocks of columns over the team when the
/// product is large enough to split (as [`gemm_batched`] shares out the same products).
fn transposed_b_batched<T: Copy + Default + Send + Sync + Matvec>(
    be: &CpuBackend,
    plan: &Plan,
    a: &[T],
    b: &[T],
) -> Vec<T> {
    let (n, k) = (plan.n, plan.k);
    let nb = plan.batches.len();
    let mut out = vec![T::default(); nb * n];
    if out.is_empty() || k == 0 {
        return out;
    }
    let one = |dst: &mut [T], (ia, ib): (usize, usize), cols: std::ops::Range<usize>| {
        transposed_b_rows(
            &a[ia * k..(ia + 1) * k],
            &b[ib * n * k..(ib + 1) * n * k],
            k,
            cols,
            dst,
        )
    };
    let threads = be.threads();
    if threads > 1 && nb > 1 {
        be.in_pool(|| {
            out.par_chunks_mut(n)
                .zip(plan.batches.par_iter())
                .for_each(|(dst, &ab)| one(dst, ab, 0..n));
        });
    } else if threads > 1 && n * k >= GEMV_PAR_MIN && n >= 64 {
        let w = n.div_ceil(threads).next_multiple_of(BT_COLS);
        let mut blocks: Vec<(usize, &mut [T])> = out.chunks_mut(w).enumerate().collect();
        be.team_each(&mut blocks, &|(i, d)| {
            let j0 = *i * w;
            one(d, plan.batches[0], j0..j0 + d.len())
        });
    } else {
        for (dst, &ab) in out.chunks_mut(n).zip(&plan.batches) {
            one(dst, ab, 0..n);
        }
    }
    out
}

/// `dst[j - cols.start] = x · bt[j]` for `j` in `cols`, `bt` row-major `[n, k]`.
fn transposed_b_rows<T: Copy + Default + Matvec>(
    x: &[T],
    bt: &[T],
    k: usize,
    cols: std::ops::Range<usize>,
    dst: &mut [T],
) {
    let mut buf = vec![T::default(); k * BT_COLS];
    for j0 in cols.clone().step_by(BT_COLS) {
        let jb = BT_COLS.min(cols.end - j0);
        let rows = &bt[j0 * k..(j0 + jb) * k];
        for (j, row) in rows.chunks_exact(k).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                buf[i * jb + j] = v;
            }
        }
        let d0 = j0 - cols.start;
        T::matvec(x, (&buf[..k * jb], jb), k, jb, &mut dst[d0..d0 + jb]);
    }
}

/// Blocks of panels per thread in a split packed product (1, 4 and 8 measured within noise of
/// each other on two threads; 4 lets the faster thread take more).
const BLOCKS_PER_THREAD: usize = 4;

/// `x · W` for a one-row `x` and a packed weight: blocks of whole panels shared out over the
/// team, several per thread so that one that started late (or runs on a slower vCPU) takes
/// fewer (each block is one contiguous stream, so narrow blocks cost no bandwidth).
fn panels_matvec(be: &CpuBackend, a: &Tensor, p: &Panels) -> Result<Data> {
    let (k, n) = (p.k(), p.n());
    let widened;
    let x: &[f32] = match a.data() {
        Data::F32(x) => x,
        Data::F16(x) => {
            widened = x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
            &widened
        }
        _ => bail!("MatMul: unsupported dtype {}", a.dtype()),
    };
    if x.len() != k {
        bail!("MatMul: {} values against a [{k}, {n}] weight", x.len());
    }
    let mut y = vec![0f32; n];
    let panels = p.panels();
    let threads = be.threads();
    // Blocks are whole groups of STREAMS panels, which the kernel reads together.
    let groups = panels.div_ceil(STREAMS);
    let blocks = if threads > 1 && k * n >= GEMV_PAR_MIN {
        groups.min(threads * BLOCKS_PER_THREAD)
    } else {
        1
    };
    let mut work: Vec<((usize, usize), &mut [f32])> = Vec::with_capacity(blocks);
    let mut rest = &mut y[..];
    for b in 0..blocks {
        let (g0, g1) = (b * groups / blocks, (b + 1) * groups / blocks);
        let (p0, p1) = (g0 * STREAMS, (g1 * STREAMS).min(panels));
        let cols = (p1 * PANEL).min(n) - p0 * PANEL;
        let (mine, tail) = rest.split_at_mut(cols);
        work.push(((p0, p1), mine));
        rest = tail;
    }
    be.team_each(&mut work, &|(range, out)| p.matvec(x, *range, out));
    Ok(match a.data() {
        Data::F16(_) => Data::F16(y.into_iter().map(f16::from_f32).collect()),
        _ => Data::F32(y),
    })
}

/// Matrix-vector products at or above this many multiply-adds are split across threads.
const GEMV_PAR_MIN: usize = 1 << 16;

/// `dst := lhs x rhs` for row-major matrices with column stride 1 and the given row strides:
/// `dst` is `[m, n]`, `lhs` `[m, k]`, `rhs` `[k, n]`.
fn gemm_raw<T: Copy + 'static>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (&mut [T], usize),
    (lhs, lhs_rs): (&[T], usize),
    (rhs, rhs_rs): (&[T], usize),
    zero: T,
    one: T,
    par: Parallelism,
) {
    // Elements spanned by a `rows x cols` matrix with row stride `rs`.
    let span = |rows: usize, rs: usize, cols: usize| {
        if rows == 0 || cols == 0 {
            0
        } else {
            (rows - 1) * rs + cols
        }
    };
    let dst = &mut dst[..span(m, dst_rs, n)];
    let lhs = &lhs[..span(m, lhs_rs, k)];
    let rhs = &rhs[..span(k, rhs_rs, n)];
    // SAFETY: the slicing above bounds every element gemm touches: dst is m x n, lhs m x k and
    // rhs k x n, each with the row stride passed and column stride 1, and each slice is at
    // least (rows - 1) * row_stride + cols long (the slicing panics otherwise, never reading
    // out of bounds). dst is a unique borrow, so it aliases neither operand. T is f32 or
    // gemm::f16 (= half::f16), both supported by gemm. With read_dst = false gemm computes
    // dst := one * lhs * rhs and never reads dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            lhs.as_ptr(),
            1,
            lhs_rs as isize,
            rhs.as_ptr(),
            1,
            rhs_rs as isize,
            zero,
            one,
            false,
            false,
            false,
            par,
        );
    }
}

/// Element types with a matrix-vector kernel for `m = 1` (`matvec.rs`).
trait Matvec: Sized {
    /// `y := x · W` on a block of `n` columns with row stride `ldw`.
    fn matvec(x: &[Self], w: (&[Self], usize), k: usize, n: usize, y: &mut [Self]);
}

impl Matvec for f32 {
    fn matvec(x: &[f32], w: (&[f32], usize), k: usize, n: usize, y: &mut [f32]) {
        super::matvec::matvec_f32(x, w, k, n, y);
    }
}

impl Matvec for f16 {
    fn matvec(x: &[f16], w: (&[f16], usize), k: usize, n: usize, y: &mut [f16]) {
        super::matvec::matvec_f16(x, w, k, n, y);
    }
}

/// One contiguous row-major `[m, k] x [k, n]` product into `dst` (`[m, n]`, overwritten). With
/// more than one row it must run inside the backend's pool when `par` is not `None`. A product
/// with one row goes to the matrix-vector kernel, split by columns over the team (from any
/// thread).
fn gemm_one<T: Copy + Send + Sync + 'static + Matvec>(
    be: &CpuBackend,
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    zero: T,
    one: T,
    par: Parallelism,
) {
    let threads = be.threads();
    let split = threads > 1 && !matches!(par, Parallelism::None) && m * n * k >= GEMV_PAR_MIN;
    if split && m == 1 && n >= 64 {
        // The matrix-vector kernel is single-threaded: give each thread a block of columns.
        let w = n.div_ceil(threads).next_multiple_of(16);
        let mut blocks: Vec<(usize, &mut [T])> = dst[..n].chunks_mut(w).enumerate().collect();
        be.team_each(&mut blocks, &|(i, d)| {
            T::matvec(lhs, (&rhs[*i * w..], n), k, d.len(), d)
        });
    } else if m == 1 {
        T::matvec(lhs, (rhs, n), k, n, dst);
    } else if split && n == 1 && m >= 64 {
        // Same for a matrix times a column: blocks of rows.
        let h = m.div_ceil(threads).next_multiple_of(16);
        dst[..m]
            .par_chunks_mut(h)
            .zip(lhs[..m * k].par_chunks(h * k))
            .for_each(|(d, l)| {
                gemm_raw(
                    (d.len(), 1, k),
                    (d, 1),
                    (l, k),
                    (rhs, 1),
                    zero,
                    one,
                    Parallelism::None,
                );
            });
    } else {
        gemm_raw((m, n, k), (dst, n), (lhs, k), (rhs, n), zero, one, par);
    }
}

fn gemm_batched<T: Copy + Default + Send + Sync + 'static + Matvec>(
    be: &CpuBackend,
    plan: &Plan,
    a: &[T],
    b: &[T],
    zero: T,
    one: T,
) -> Vec<T> {
    let Plan {
        m,
        n,
        k,
        ref batches,
        ..
    } = *plan;
    let mut out = vec![T::default(); batches.len() * m * n];
    if out.is_empty() || k == 0 {
        return out;
    }
    let threads = be.threads();
    let par = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let (mk, kn, mn) = (m * k, k * n, m * n);
    let nb = batches.len();
    if plan.folds() {
        let b0 = batches[0].1 * kn;
        if nb * m == 1 {
            // A matrix-vector product: the team splits it, from any thread (no hand-off).
            gemm_one(be, (1, n, k), &mut out, a, &b[b0..], zero, one, par);
        } else {
            be.in_pool(|| gemm_one(be, (nb * m, n, k), &mut out, a, &b[b0..], zero, one, par));
        }
    } else if threads > 1 && nb > 1 && (nb >= threads || m * n * k <= SMALL_GEMM) {
        // Enough (or small enough) batches: one single-threaded gemm per task.
        be.in_pool(|| {
            out.par_chunks_mut(mn)
                .zip(batches.par_iter())
                .for_each(|(dst, &(ia, ib))| {
                    let (lhs, rhs) = (&a[ia * mk..], &b[ib * kn..]);
                    gemm_one(be, (m, n, k), dst, lhs, rhs, zero, one, Parallelism::None);
                });
        });
    } else {
        be.in_pool(|| {
            for (dst, &(ia, ib)) in out.chunks_mut(mn).zip(batches) {
                gemm_one(
                    be,
                    (m, n, k),
                    dst,
                    &a[ia * mk..],
                    &b[ib * kn..],
                    zero,
                    one,
                    par,
                );
            }
        });
    }
    out
}

fn int_matmul<T: Int>(plan: &Plan, a: &[T], b: &[T]) -> Vec<T> {
    let Plan {
        m,
        n,
        k,
        ref batches,
        ..
    } = *plan;
    let mut out = vec![T::default(); batches.len() * m * n];
    if m * n == 0 {
        return out;
    }
    let mut acc = vec![0i64; n];
    for (dst, &(ia, ib)) in out.chunks_mut(m * n).zip(batches) {
        let (x, y) = (
            &a[ia * m * k..(ia + 1) * m * k],
            &b[ib * k * n..(ib + 1) * k * n],
        );
        for (i, drow) in dst.chunks_mut(n).enumerate() {
            acc.fill(0);
            for p in 0..k {
                let av = x[i * k + p].to_i64();
                for (c, &bv) in acc.iter_mut().zip(&y[p * n..(p + 1) * n]) {
                    *c = c.wrapping_add(av.wrapping_mul(bv.to_i64()));
                }
            }
            for (o, &c) in drow.iter_mut().zip(&acc) {
                *o = T::from_i64(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    /// Deterministic values in [-1, 1) from a linear congruential generator.
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// numpy matmul by definition: promote 1-D, broadcast batch dims, triple loop in f64.
    fn naive(sa: &[usize], a: &[f32], sb: &[usize], b: &[f32]) -> (Vec<usize>, Vec<f32>) {
        let a2: Vec<usize> = if sa.len() == 1 {
            vec![1, sa[0]]
        } else {
            sa.to_vec()
        };
        let b2: Vec<usize> = if sb.len() == 1 {
            vec![sb[0], 1]
        } else {
            sb.to_vec()
        };
        let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
        let (ba, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
        let r = ba.len().max(bb.len());
        let pad = |s: &[usize]| [vec![1; r - s.len()], s.to_vec()].concat();
        let (pa, pb) = (pad(ba), pad(bb));
        let batch: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
        let nb: usize = batch.iter().product();
        let mut out = vec![0f32; nb * m * n];
        for bi in 0..nb {
            // Unravel bi over `batch`, then ravel into each operand with broadcasting.
            let (mut rem, mut ia, mut ib) = (bi, 0, 0);
            let (mut sta, mut stb) = (1, 1);
            for d in (0..r).rev() {
                let i = rem % batch[d];
                rem /= batch[d];
                ia += if pa[d] == 1 { 0 } else { i * sta };
                ib += if pb[d] == 1 { 0 } else { i * stb };
                sta *= pa[d];
                stb *= pb[d];
            }
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f64;
                    for p in 0..k {
                        s += a[ia * m * k + i * k + p] as f64 * b[ib * k * n + p * n + j] as f64;
                    }
                    out[bi * m * n + i * n + j] = s as f32;
                }
            }
        }
        let mut shape = batch;
        if sa.len() > 1 {
            shape.push(m);
        }
        if sb.len() > 1 {
            shape.push(n);
        }
        (shape, out)
    }

    const SHAPES: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[4, 5]),
        (&[1, 7], &[7, 9]),
        (&[2, 1, 3, 4], &[5, 4, 6]),
        (&[4], &[4, 3]),
        (&[2, 3, 4], &[4]),
        (&[6], &[6]),
        (&[3, 5, 8], &[8, 2]),
        (&[1, 8], &[3, 8, 2]),
        (&[2, 2, 17, 33], &[2, 1, 33, 65]),
        (&[130, 70], &[70, 90]),
        (&[4, 0], &[0, 3]),
        // Matrix-vector products big enough to be split across threads.
        (&[1, 512], &[512, 300]),
        (&[300, 512], &[512]),
        (&[512], &[512, 300]),
        // Batched, big enough for per-batch parallel gemm.
        (&[4, 1, 256], &[4, 256, 200]),
        (&[2, 1, 512], &[2, 512, 600]),
        (&[0, 4], &[4, 3]),
    ];

    #[test]
    fn f32_matches_naive_for_every_shape_and_thread_count() {
        for threads in [1, 2, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for (i, &(sa, sb)) in SHAPES.iter().enumerate() {
                let a = data(sa.iter().product(), 2 * i as u64);
                let b = data(sb.iter().product(), 2 * i as u64 + 1);
                let (shape, want) = naive(sa, &a, sb, &b);
                let y = be
                    .matmul(
                        &Tensor::f32(sa, a.clone()).unwrap(),
                        &Tensor::f32(sb, b.clone()).unwrap(),
                    )
                    .unwrap();
                assert_eq!(y.shape(), &shape[..], "{sa:?} x {sb:?}");
                let got = y.to_f32_vec();
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-4,
                        "{sa:?} x {sb:?} threads {threads}: {g} vs {w}"
                    );
                }
            }
        }
    }

    /// The column split sums each output in the same order as one thread does, so a decode
    /// gives the same bits on any number of cores.
    #[test]
    fn split_matrix_vector_products_are_bitwise_the_same_on_any_thread_count() {
        let (k, n) = (576, 1536);
        let x = Tensor::f32(&[1, k], data(k, 7)).unwrap();
        let w = Tensor::f32(&[k, n], data(k * n, 8)).unwrap();
        let one = CpuBackend::new(1).unwrap().matmul(&x, &w).unwrap();
        for threads in [2, 3, 4] {
            let y = CpuBackend::new(threads).unwrap().matmul(&x, &w).unwrap();
            assert_eq!(y, one, "{threads} threads");
        }
    }

    /// A prepared (packed) weight gives the same product as the plain one for one row, on any
    /// thread count, and rows > 1 still go through gemm on the row-major values; one thread
    /// does not pack.
    /// The fused `A · Bᵀ` is bit for bit the transpose followed by the MatMul, for every path it
    /// takes (batches in parallel, columns over the team, sequential), any column count against
    /// the 16-column blocks, broadcast batches, f32 and f16; more than one row falls back.
    #[test]
    fn transposed_right_operand_gives_the_bits_of_transpose_then_matmul() {
        let bits =
            |t: &Tensor| -> Vec<u32> { t.to_f32_vec().iter().map(|v| v.to_bits()).collect() };
        let half = |t: &Tensor| {
            let v = t.to_f32_vec().into_iter().map(f16::from_f32).collect();
            Tensor::new(t.shape().to_vec(), Data::F16(v)).unwrap()
        };
        let cases: &[(&[usize], &[usize])] = &[
            (&[1, 9, 1, 64], &[1, 9, 37, 64]),
            (&[9, 1, 64], &[9, 100, 64]),
            (&[1, 64], &[3, 200, 64]),
            (&[1, 576], &[1000, 576]),
            (&[576], &[130, 576]),
            (&[1, 3, 1, 8], &[1, 3, 1, 8]),
            (&[1, 1, 5], &[1, 17, 5]),
            (&[2, 64], &[40, 64]),
            (&[1, 0], &[7, 0]),
        ];
        for threads in [1, 2, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for &(sa, sb) in cases {
                let a = Tensor::f32(sa, data(sa.iter().product(), 21)).unwrap();
                let b = Tensor::f32(sb, data(sb.iter().product(), 22)).unwrap();
                let r = sb.len();
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                for (a, b) in [(a.clone(), b.clone()), (half(&a), half(&b))] {
                    let want = be.matmul(&a, &be.transpose(&b, &perm).unwrap()).unwrap();
                    let got = be.matmul_transposed_b(&a, &b).unwrap();
                    let what = format!("{} threads, {sa:?} x {sb:?}ᵀ {}", threads, a.dtype());
                    assert_eq!(got.shape(), want.shape(), "{what}");
                    assert_eq!(got.dtype(), want.dtype(), "{what}");
                    assert_eq!(bits(&got), bits(&want), "{what}");
                }
            }
        }
        let be = CpuBackend::new(2).unwrap();
        let a = Tensor::f32(&[1, 4], data(4, 1)).unwrap();
        let err = be
            .matmul_transposed_b(&a, &Tensor::f32(&[3, 5], data(15, 2)).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("inner dims 4 vs 5"), "{err}");
    }

    #[test]
    fn prepared_weights_give_the_same_products() {
        let half = |t: &Tensor| {
            let v = t.to_f32_vec().into_iter().map(f16::from_f32).collect();
            Tensor::new(t.shape().to_vec(), Data::F16(v)).unwrap()
        };
        for threads in [1, 2, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for (sa, k, n) in [
                (&[1usize, 576][..], 576, 1536),
                (&[1, 1, 576], 576, 192),
                (&[576], 576, 100),
                (&[3, 576], 576, 200),
            ] {
                let a = Tensor::f32(sa, data(sa.iter().product(), 11)).unwrap();
                let w = Tensor::f32(&[k, n], data(k * n, 12)).unwrap();
                let packed = be.prepare_weight(&w).unwrap();
                assert!(packed.prepared::<Panels>().is_some());
                assert_eq!(packed, w);
                let want = be.matmul(&a, &w).unwrap();
                assert_eq!(be.matmul(&a, &packed).unwrap(), want, "{sa:?} x [{k}, {n}]");
                let (ah, wh) = (half(&a), half(&w));
                let want = be.matmul(&ah, &wh).unwrap();
                let packed = be.prepare_weight(&wh).unwrap();
                assert!(packed.prepared::<Panels>().is_some());
                assert_eq!(be.matmul(&ah, &packed).unwrap(), want, "f16 {sa:?}");
            }
            // Left alone: narrow, not 2-D, not a float.
            for t in [
                Tensor::f32(&[4, 8], data(32, 1)).unwrap(),
                Tensor::f32(&[2, 4, 64], data(512, 1)).unwrap(),
                Tensor::i64(&[2, 64], vec![1; 128]).unwrap(),
            ] {
                assert!(
                    be.prepare_weight(&t)
                        .unwrap()
                        .prepared::<Panels>()
                        .is_none()
                );
            }
        }
    }

    #[test]
    fn hand_checked_small_product() {
        let be = CpuBackend::new(1).unwrap();
        let a = Tensor::f32(&[2, 2], vec![1., 2., 3., 4.]).unwrap();
        let b = Tensor::f32(&[2, 2], vec![5., 6., 7., 8.]).unwrap();
        assert_eq!(
            be.matmul(&a, &b).unwrap().to_f32_vec(),
            vec![19., 22., 43., 50.]
        );
        let v = Tensor::f32(&[2], vec![1., 1.]).unwrap();
        let y = be.matmul(&v, &b).unwrap();
        assert_eq!(y.shape(), &[2]);
        assert_eq!(y.to_f32_vec(), vec![12., 14.]);
        let y = be.matmul(&v, &v).unwrap();
        assert_eq!(y.shape(), &[] as &[usize]);
        assert_eq!(y.to_f32_vec(), vec![2.]);
    }

    #[test]
    fn half_types_match_naive() {
        for threads in [1, 2] {
            let be = CpuBackend::new(threads).unwrap();
            for &(sa, sb) in &[
                (&[3usize, 5, 8][..], &[8usize, 4][..]),
                (&[2, 4, 16], &[2, 16, 3]),
            ] {
                // Quantise inputs first so only the accumulation differs from the f64 oracle.
                let a: Vec<f32> = data(sa.iter().product(), 7)
                    .iter()
                    .map(|&v| f16::from_f32(v).to_f32())
                    .collect();
                let b: Vec<f32> = data(sb.iter().product(), 8)
                    .iter()
                    .map(|&v| f16::from_f32(v).to_f32())
                    .collect();
                let (shape, want) = naive(sa, &a, sb, &b);
                let ah = Tensor::new(
                    sa.to_vec(),
                    Data::F16(a.iter().map(|&v| f16::from_f32(v)).collect()),
                )
                .unwrap();
                let bh = Tensor::new(
                    sb.to_vec(),
                    Data::F16(b.iter().map(|&v| f16::from_f32(v)).collect()),
                )
                .unwrap();
                let y = be.matmul(&ah, &bh).unwrap();
                assert_eq!(y.dtype(), crate::DType::F16);
                assert_eq!(y.shape(), &shape[..]);
                for (g, w) in y.to_f32_vec().iter().zip(&want) {
                    assert!((g - w).abs() < 1e-2 * (1.0 + w.abs()), "f16 {g} vs {w}");
                }
                let a16: Vec<f32> = a.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
                let b16: Vec<f32> = b.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
                let (_, want) = naive(sa, &a16, sb, &b16);
                let ab = Tensor::new(
                    sa.to_vec(),
                    Data::BF16(a16.iter().map(|&v| bf16::from_f32(v)).collect()),
                )
                .unwrap();
                let bb = Tensor::new(
                    sb.to_vec(),
                    Data::BF16(b16.iter().map(|&v| bf16::from_f32(v)).collect()),
                )
                .unwrap();
                let y = be.matmul(&ab, &bb).unwrap();
                assert_eq!(y.dtype(), crate::DType::BF16);
                for (g, w) in y.to_f32_vec().iter().zip(&want) {
                    // One bf16 rounding of an f32-accurate result.
                    assert!((g - w).abs() <= 4e-3 * w.abs() + 1e-6, "bf16 {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn integer_matmul() {
        let be = CpuBackend::new(1).unwrap();
        let a = Tensor::i64(&[2, 1, 3], vec![1, 2, 3, -1, 0, 2]).unwrap();
        let b = Tensor::i64(&[3, 2], vec![1, 0, 0, 1, 2, -2]).unwrap();
        let y = be.matmul(&a, &b).unwrap();
        assert_eq!(y.shape(), &[2, 1, 2]);
        assert_eq!(y.as_i64().unwrap(), &[7, -4, 3, -4]);
        let a = Tensor::new(vec![3], Data::I32(vec![1, 2, 3])).unwrap();
        let y = be.matmul(&a, &a).unwrap();
        assert_eq!(y.data(), &Data::I32(vec![14]));
    }

    #[test]
    fn errors_name_the_problem() {
        let be = CpuBackend::new(1).unwrap();
        let a = Tensor::f32(&[1, 7, 576], vec![0.0; 7 * 576]).unwrap();
        let b = Tensor::f32(&[192, 64], vec![0.0; 192 * 64]).unwrap();
        let err = be.matmul(&a, &b).unwrap_err().to_string();
        assert_eq!(
            err,
            "MatMul: inner dims 576 vs 192 (shapes [1, 7, 576] x [192, 64])"
        );
        let a = Tensor::f32(&[2, 3, 4], vec![0.0; 24]).unwrap();
        let b = Tensor::f32(&[3, 4, 5], vec![0.0; 60]).unwrap();
        let err = be.matmul(&a, &b).unwrap_err().to_string();
        assert_eq!(
            err,
            "MatMul: batch dims of [2, 3, 4] and [3, 4, 5] do not broadcast"
        );
        let i = Tensor::i64(&[4], vec![0; 4]).unwrap();
        let f = Tensor::f32(&[4], vec![0.0; 4]).unwrap();
        let err = be.matmul(&f, &i).unwrap_err().to_string();
        assert_eq!(err, "MatMul: dtype mismatch f32 vs i64");
        let u = Tensor::new(vec![1], Data::U8(vec![1])).unwrap();
        let err = be.matmul(&u, &u).unwrap_err().to_string();
        assert_eq!(err, "MatMul: unsupported dtype u8");
        let s = Tensor::f32(&[], vec![1.0]).unwrap();
        let err = be.matmul(&s, &f).unwrap_err().to_string();
        assert_eq!(err, "MatMul: scalar operand (shapes [] x [4])");
    }
}
