//! The CPU backend: host tensors, a rayon thread pool with more than one thread (and a spinning
//! team for the decode step's matrix-vector products), gemm for MatMul; with one thread every
//! kernel runs on the calling thread and no other thread is started.
//!
//! Kernels live in one file per op family, the families of `crate::ops` and the oracle
//! (`elementwise`, `reduce`, `layout`, `linalg`, `norm`; `broadcast` is the broadcasting walker
//! they share); this module holds the backend struct, the element traits the kernels are
//! generic over, the dtype dispatch macro and the parallel-chunk helper.
//! Float kernels compute in f32 (f64 for some accumulators) and round back to the storage type;
//! integer kernels compute in i64 with wrapping arithmetic and truncate back.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::backend::{Backend, BinaryOp, ReduceOp, SliceDim, UnaryOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{Data, Tensor};

/// Runs `$body` with `$T` aliased to the element type of `$dt` (all seven stored types).
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::dtype::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::dtype::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::dtype::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::dtype::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::dtype::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

mod broadcast;
mod elementwise;
mod layout;
mod linalg;
mod matvec;
pub use matvec::Panels;
pub(crate) use matvec::STREAMS;
mod norm;
mod reduce;
#[cfg(test)]
mod test_util;

/// Below this many output elements a kernel runs on the calling thread: the pool's wake-up
/// costs more than it saves.
const PAR_MIN: usize = 32 * 1024;
/// Smallest parallel chunk, in elements.
const PAR_GRAIN: usize = 8 * 1024;

/// How long a team worker spins for the next product before it sleeps. The gaps between the
/// matrix-vector products of a decode step (attention, norms, the sampler) are shorter than this,
/// so the workers stay awake through a step and between steps; after that they sleep, and the
/// caller starts the next product alone until one wakes (nothing waits for a wake-up).
const TEAM_SPIN: std::time::Duration = std::time::Duration::from_micros(500);

/// [`TEAM_SPIN`] in spin-loop hints (the unit `micropool` counts in), timed on this CPU once: a
/// pause takes about 15 ns on the CI machine's Xeon and up to 10x that on others.
fn team_spin() -> usize {
    use std::sync::OnceLock;
    static SPIN: OnceLock<usize> = OnceLock::new();
    *SPIN.get_or_init(|| {
        const PROBE: u32 = 2000;
        let t = std::time::Instant::now();
        for _ in 0..PROBE {
            std::hint::spin_loop();
        }
        let per = (t.elapsed() / PROBE).max(std::time::Duration::from_nanos(1));
        (TEAM_SPIN.as_nanos() / per.as_nanos()).clamp(1_000, 100_000) as usize
    })
}

/// The CPU device: kernels run on a private rayon pool of `threads` workers, or on the calling
/// thread when `threads` is 1.
pub struct CpuBackend {
    /// `None` with one thread: nothing runs on it then ([`CpuBackend::in_pool`]), and a worker
    /// thread that starts beside the caller makes the caller's heap differ from run to run (the
    /// two threads' allocations interleave by timing), which moved a one-thread benchmark's
    /// instruction count by up to 3 % between processes (harness/eval/noise/README.md).
    pool: Option<rayon::ThreadPool>,
    /// `threads - 1` workers that spin between products, for the decode step's matrix-vector
    /// products ([`CpuBackend::team_each`]); `None` with one thread.
    team: Option<micropool::ThreadPool>,
    threads: usize,
}

impl CpuBackend {
    /// Runs `f` in the backend's pool, where its parallel iterators take their threads; with
    /// one thread, on the calling thread. (A one-thread pool would hand every call to its worker
    /// and back: two cross-thread wake-ups per op, tens of µs each on a 2-vCPU VM, about 10 % of
    /// a SmolLM2 decode step.) Nested calls from inside the pool run inline, so a whole decode
    /// run through this (`Session::generate` by the CPU decoder and `engine generate`) pays the
    /// hand-off once, and each op only wakes the pool's other threads.
    pub fn in_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) if self.threads > 1 => pool.install(f),
            _ => f(),
        }
    }

    /// threads = 0 means all available cores (std::thread::available_parallelism).
    pub fn new(threads: usize) -> Result<CpuBackend> {
        let threads = if threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            threads
        };
        let pool = if threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("engine-cpu-{i}"))
                    .build()
                    .map_err(|e| {
                        Error::msg(format!(
                            "cpu backend: cannot start a pool of {threads} threads: {e}"
                        ))
                    })?,
            )
        } else {
            None
        };
        let team = (threads > 1).then(|| {
            micropool::ThreadPoolBuilder::default()
                .num_threads(threads - 1)
                .idle_spin_cycles(team_spin())
                .spawn_handler(|i, run| {
                    std::thread::Builder::new()
                        .name(format!("engine-team-{i}"))
                        .spawn(run)
                        .expect("cpu backend: cannot start a team thread")
                })
                .build()
        });
        Ok(CpuBackend {
            pool,
            team,
            threads,
        })
    }

    /// Calls `f` on every item, spread over the team: the calling thread takes a share, so
    /// nothing waits for a sleeping thread to wake before work starts, and idle workers spin
    /// for [`TEAM_SPIN`] before they sleep.
    ///
    /// Why a second pool beside rayon's: a decode step runs about 210 products of 0.05-2 ms with
    /// single-threaded ops between them, and rayon's workers go to sleep after a few µs of
    /// idling, so every product paid a futex wake-up of a halted vCPU (tens of µs on the 2-vCPU
    /// CI machine): 15 % of the CPU time of a two-thread decode went to sleeping and waking.
    /// `micropool` (spin before sleeping, the caller helps) removed that; `gemm`'s own
    /// parallelism (products with more rows) stays on rayon. A panic inside `f` aborts the
    /// process (`micropool` does not carry panics across threads); only the matrix-vector
    /// kernel runs here, on slices its caller has sized.
    pub(crate) fn team_each<I: Send>(&self, items: &mut [I], f: &(impl Fn(&mut I) + Sync)) {
        fn split<I: Send>(
            p: &micropool::ThreadPool,
            items: &mut [I],
            f: &(impl Fn(&mut I) + Sync),
        ) {
            match items {
                [] => {}
                [one] => f(one),
                _ => {
                    let (a, b) = items.split_at_mut(items.len() / 2);
                    p.join(|| split(p, a, f), || split(p, b, f));
                }
            }
        }
        match &self.team {
            Some(p) => split(p, items, f),
            None => items.iter_mut().for_each(f),
        }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(offset, chunk)` over consecutive chunks of `out` that together cover it, each a
    /// whole number of `row`s long; in parallel on the pool when `out` is large enough.
    ///
    /// The parallel path takes `f` as a `dyn Fn` ([`Self::for_chunks_on_pool`]), so rayon's
    /// machinery (jobs, latches, the producer/consumer bridge) is compiled once per element type,
    /// not once per kernel closure: with it generic over `f`, each of the ~245 closures the
    /// kernels pass here got its own copy, a third of the engine's LLVM IR (`cargo llvm-lines
    /// --release -p engine --lib`: 1.59 M lines before, 0.98 M after) and of its release build
    /// time. A chunk is at least `PAR_GRAIN` elements, so one indirect call per chunk
    /// costs nothing measurable; the serial path below still calls `f` directly.
    pub(crate) fn for_chunks<T: Send>(
        &self,
        out: &mut [T],
        row: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let row = row.max(1);
        let rows = out.len() / row;
        match self
            .pool
            .as_ref()
            .filter(|_| out.len() >= PAR_MIN && rows >= 2)
        {
            Some(pool) => self.for_chunks_on_pool(pool, out, row, &f),
            None => f(0, out),
        }
    }

    /// The parallel half of [`Self::for_chunks`], generic only over the element type.
    fn for_chunks_on_pool<T: Send>(
        &self,
        pool: &rayon::ThreadPool,
        out: &mut [T],
        row: usize,
        f: &(dyn Fn(usize, &mut [T]) + Sync),
    ) {
        let rows = out.len() / row;
        let per = rows.div_ceil(self.threads * 4).max(PAR_GRAIN.div_ceil(row));
        let chunk = per * row;
        pool.install(|| {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, c)| f(i * chunk, c));
        });
    }
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("threads", &self.threads)
            .finish()
    }
}

/// An element type the tensor storage holds.
pub(crate) trait Elem:
    Copy + Default + PartialEq + Send + Sync + std::fmt::Debug + 'static
{
    const DTYPE: DType;
    fn wrap(v: Vec<Self>) -> Data;
    /// The elements of `d` when it holds this type.
    fn slice(d: &Data) -> Option<&[Self]>;
}

/// Float storage types: computed in f32.
pub(crate) trait Float: Elem {
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
    /// Elementwise kernels widen this type a block at a time ([`Float::widen`],
    /// [`Float::narrow`]) instead of one element at a time (f16: see its impl).
    const BLOCKWISE: bool = false;
    /// `dst[i] = src[i].to_f32()` (equal lengths).
    #[inline(always)]
    fn widen(src: &[Self], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_f32();
        }
    }
    /// `dst[i] = Self::from_f32(src[i])` (equal lengths).
    #[inline(always)]
    fn narrow(src: &[f32], dst: &mut [Self]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = Self::from_f32(*s);
        }
    }
}

/// Integer storage types: computed in i64, truncated back with wrapping.
pub(crate) trait Int: Elem {
    const SIGNED: bool;
    const MIN: i64;
    const MAX: i64;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
}

macro_rules! impl_elem {
    ($t:ty, $variant:ident) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
            fn slice(d: &Data) -> Option<&[Self]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

impl_elem!(f32, F32);
impl_elem!(f16, F16);
impl_elem!(bf16, BF16);
impl_elem!(i64, I64);
impl_elem!(i32, I32);
impl_elem!(u8, U8);
impl_elem!(bool, Bool);

impl Float for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

/// f16 converts through `half`, whose scalar conversions check for F16C at every call (it is
/// not a compile-time feature of the baseline target) and convert one value per instruction:
/// about 1.2 ns per conversion here, twenty times an f32 add (`add/f16/*` ran at 0.28 Gelem/s
/// against 5-6 for f32). Its slice conversions check once per call and convert eight values per
/// instruction, with the same rounding (round to nearest even, the same instructions), so the
/// elementwise kernels widen f16 a block at a time.
impl Float for f16 {
    const BLOCKWISE: bool = true;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn widen(src: &[Self], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
    #[inline(always)]
    fn narrow(src: &[f32], dst: &mut [Self]) {
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
}

impl Float for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

macro_rules! impl_int {
    ($t:ty, $signed:expr) => {
        impl Int for $t {
            const SIGNED: bool = $signed;
            const MIN: i64 = <$t>::MIN as i64;
            const MAX: i64 = <$t>::MAX as i64;
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}

impl_int!(i64, true);
impl_int!(i32, true);
impl_int!(u8, false);

/// The elements of `t` as `T`; errors (naming `op`) when `t` holds another type.
pub(crate) fn elems<'a, T: Elem>(op: &str, t: &'a Tensor) -> Result<&'a [T]> {
    T::slice(t.data()).ok_or_else(|| {
        Error::msg(format!(
            "{op}: expected {} elements, got {}",
            T::DTYPE,
            t.dtype()
        ))
    })
}

/// Element count of an output shape computed from input shapes or values; an error instead of
/// an overflow (or an absurd allocation) when it does not fit in memory.
pub(crate) fn out_numel(op: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize / 8)
        .ok_or_else(|| Error::msg(format!("{op}: output shape {shape:?} is too large")))
}

/// Product of `dims` (1 for none).
pub(crate) fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

impl Backend for CpuBackend {
    type Tensor = Tensor;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }

    fn download(&self, t: &Tensor) -> Result<Tensor> {
        Ok(t.clone())
    }

    fn shape<'a>(&self, t: &'a Tensor) -> &'a [usize] {
        t.shape()
    }

    fn dtype(&self, t: &Tensor) -> DType {
        t.dtype()
    }

    fn reshape(&self, x: &Tensor, shape: Vec<usize>) -> Result<Tensor> {
        x.reshape(shape)
    }

    fn unary(&self, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        elementwise::unary(self, op, x)
    }

    fn binary(&self, op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        elementwise::binary(self, op, a, b)
    }

    fn where_cond(&self, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        elementwise::where_cond(self, cond, a, b)
    }

    fn cast(&self, x: &Tensor, to: DType) -> Result<Tensor> {
        elementwise::cast(self, x, to)
    }

    fn reduce(&self, op: ReduceOp, x: &Tensor, axes: &[usize], keepdims: bool) -> Result<Tensor> {
        reduce::reduce(op, x, axes, keepdims)
    }

    fn softmax(&self, x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
        reduce::softmax(self, x, axis, log)
    }

    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        linalg::matmul(self, a, b)
    }

    fn matmul_transposed_b(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        match linalg::matvec_transposed_b(self, a, b)? {
            Some(t) => Ok(t),
            None => crate::backend::transpose_then_matmul(self, a, b),
        }
    }

    /// Packs every 2-D f32/f16 weight at least a panel wide, for any thread count. With more
    /// than one thread the panels gave two-thread decode +7.5 % on the Intel Xeon VM (each
    /// thread's block one contiguous stream, blocks taken dynamically). On one thread the Xeon
    /// measured the row-major kernel and the panels alike, so one thread used not to pack; on
    /// the AMD EPYC VM one thread decodes 10-20 % faster on the panels (one stream, the sums in
    /// registers, no load and store of `y` per four rows), measured in `goldens/speed/`
    /// (`2026-12-02-epyc-pack-1t.txt`). The row-major values stay beside the panels for products
    /// with more rows (the prefill's gemm), so a packed weight is held twice.
    fn prepare_weight(&self, t: &Tensor) -> Result<Tensor> {
        Ok(match (t.shape(), t.data()) {
            (&[k, n], Data::F32(w)) if k > 0 && n >= matvec::PANEL => {
                t.with_prepared(Panels::f32(w, k, n))
            }
            (&[k, n], Data::F16(w)) if k > 0 && n >= matvec::PANEL => {
                t.with_prepared(Panels::f16(w, k, n))
            }
            _ => t.clone(),
        })
    }

    fn gather(&self, data: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor> {
        layout::gather(data, indices, axis)
    }

    fn transpose(&self, x: &Tensor, perm: &[usize]) -> Result<Tensor> {
        layout::transpose(self, x, perm)
    }

    fn concat(&self, xs: &[&Tensor], axis: usize) -> Result<Tensor> {
        layout::concat(xs, axis)
    }

    fn slice(&self, x: &Tensor, dims: &[SliceDim]) -> Result<Tensor> {
        layout::slice(x, dims)
    }

    fn expand(&self, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
        layout::expand(self, x, shape)
    }

    fn trilu(&self, x: &Tensor, k: i64, upper: bool) -> Result<Tensor> {
        layout::trilu(x, k, upper)
    }

    fn rms_norm(&self, x: &Tensor, scale: &Tensor, axis: usize, eps: f32) -> Result<Tensor> {
        norm::rms_norm(self, x, scale, axis, eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_resolves_thread_count() {
        let be = CpuBackend::new(3).unwrap();
        assert_eq!(be.threads(), 3);
        let all = CpuBackend::new(0).unwrap();
        assert!(all.threads() >= 1);
        assert_eq!(all.name(), "cpu");
    }

    #[test]
    fn upload_download_reshape_share_storage() {
        let be = CpuBackend::new(1).unwrap();
        let t = Tensor::f32(&[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap();
        let d = be.upload(&t).unwrap();
        assert_eq!(be.shape(&d), &[2, 3]);
        assert_eq!(be.dtype(&d), DType::F32);
        let r = be.reshape(&d, vec![3, 2]).unwrap();
        assert_eq!(r.shape(), &[3, 2]);
        assert!(std::ptr::eq(
            r.as_f32().unwrap().as_ptr(),
            t.as_f32().unwrap().as_ptr()
        ));
        let back = be.download(&r).unwrap();
        assert_eq!(back.to_f32_vec(), t.to_f32_vec());
        let err = be.reshape(&d, vec![4]).unwrap_err().to_string();
        assert!(err.contains("cannot reshape [2, 3]"), "{err}");
    }

    #[test]
    fn team_each_calls_f_once_per_item_for_any_thread_count() {
        for threads in [1, 2, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for len in [0, 1, 2, 5] {
                let mut items: Vec<(usize, u32)> = (0..len).map(|i| (i, 0)).collect();
                be.team_each(&mut items, &|(i, calls): &mut (usize, u32)| {
                    *calls += 1 + *i as u32
                });
                let want: Vec<(usize, u32)> = (0..len).map(|i| (i, 1 + i as u32)).collect();
                assert_eq!(items, want, "threads {threads}, {len} items");
            }
        }
    }

    #[test]
    fn for_chunks_covers_output_in_whole_rows() {
        let be = CpuBackend::new(4).unwrap();
        let mut out = vec![0usize; 100 * 1000];
        be.for_chunks(&mut out, 1000, |off, c| {
            assert_eq!(off % 1000, 0);
            assert_eq!(c.len() % 1000, 0);
            for (i, o) in c.iter_mut().enumerate() {
                *o = off + i;
            }
        });
        assert!(out.iter().enumerate().all(|(i, &v)| i == v));
    }
}
