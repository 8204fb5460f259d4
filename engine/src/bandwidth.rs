//! A STREAM-like read-bandwidth probe (`engine bandwidth`): how fast `threads` cores can stream
//! a buffer much larger than the caches, the ceiling of a decode step that reads every weight
//! once. `goldens/speed_vs_ort.py` divides the bytes a decode step streams by its time and
//! states both runtimes' speed as a fraction of this figure.
//!
//! Only reads are timed (STREAM's kernels also write; a decode step's weights are only read).
//! The buffer comes from the same allocator as the weights, so it gets the same page size.
//! Each thread sums its own contiguous share as the matrix-vector kernel reads a block of packed
//! weights: [`STREAMS`] sequential streams in turn (a cache line of each per step, 32-byte
//! loads; 16 portable lanes over one stream without AVX2, which on the CI machine read 10-15 %
//! slower). One stream per thread is not this machine's ceiling where memory latency is high:
//! on the Intel Xeon VM one stream read 6.9 GB/s and four 8.9 on one core, and the decode
//! step, reading six panels at once, streamed 119 % of a one-stream probe. A pass ends when the
//! slowest thread is done, and the figure is the median pass of `passes` after one untimed
//! pass.

use crate::backend::cpu::STREAMS;

use std::time::Instant;

/// One probe's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Bandwidth {
    pub threads: usize,
    pub bytes: usize,
    /// GB/s (10⁹ bytes per second) of each timed pass, in order.
    pub passes_gb_s: Vec<f64>,
    /// Median of `passes_gb_s`.
    pub median_gb_s: f64,
}

/// Streams a buffer of `bytes` (rounded down to whole 64-byte lines, at least one per thread)
/// `passes + 1` times with `threads` threads (0 = all cores) and times the last `passes`.
pub fn probe(threads: usize, bytes: usize, passes: usize) -> Bandwidth {
    const LANES: usize = 16;
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    let n = (bytes / 4 / LANES).max(threads) * LANES;
    // Written before it is read: untouched pages would all map the kernel's zero page.
    let buf: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let per = (n / LANES).div_ceil(threads) * LANES;
    let pass = || {
        let t = Instant::now();
        let total: f32 = std::thread::scope(|s| {
            let parts: Vec<_> = buf
                .chunks(per)
                .map(|part| s.spawn(move || sum(part)))
                .collect();
            parts.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        std::hint::black_box(total);
        (n * 4) as f64 / t.elapsed().as_secs_f64() / 1e9
    };
    pass();
    let passes_gb_s: Vec<f64> = (0..passes.max(1)).map(|_| pass()).collect();
    let mut sorted = passes_gb_s.clone();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median_gb_s = if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    };
    Bandwidth {
        threads,
        bytes: n * 4,
        passes_gb_s,
        median_gb_s,
    }
}

/// The sum of `x` (its length a multiple of 16), read once.
fn sum(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked).
        return unsafe { sum_avx2(x) };
    }
    let mut acc = [0f32; 16];
    for c in x.chunks_exact(16) {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum()
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    const S: usize = STREAMS;
    // S equal contiguous ranges read in turn, 16 floats (one cache line) of each per step.
    let per = x.len() / S / 16 * 16;
    let xp = x.as_ptr();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < per {
        for s in 0..S {
            // SAFETY: s * per + i + 16 <= S * per <= x.len().
            unsafe {
                let p = xp.add(s * per + i);
                acc[s % 2] = _mm256_add_ps(acc[s % 2], _mm256_loadu_ps(p));
                acc[2 + s % 2] = _mm256_add_ps(acc[2 + s % 2], _mm256_loadu_ps(p.add(8)));
            }
        }
        i += 16;
    }
    let mut out = [0f32; 8];
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    // SAFETY: out holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
    out.iter().sum::<f32>() + x[S * per..].iter().sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_times_every_pass_over_the_whole_buffer() {
        let b = probe(2, 1 << 20, 3);
        assert_eq!(b.threads, 2);
        assert_eq!(b.bytes, 1 << 20);
        assert_eq!(b.passes_gb_s.len(), 3);
        assert!(b.passes_gb_s.iter().all(|g| g.is_finite() && *g > 0.0));
        let mut s = b.passes_gb_s.clone();
        s.sort_by(f64::total_cmp);
        assert_eq!(b.median_gb_s, s[1]);
    }

    #[test]
    fn the_sum_reads_every_value() {
        // Every stream's whole lines and a tail of one line past them (a multiple of 16 values,
        // as `sum` asks: the portable path reads whole 16-value chunks only).
        let n = STREAMS * 48 + 16;
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
        let want: f32 = (0..n).map(|i| (i % 97) as f32).sum();
        assert_eq!(sum(&x), want);
    }

    #[test]
    fn a_tiny_buffer_still_gives_each_thread_a_line() {
        let b = probe(4, 1, 1);
        assert_eq!(b.bytes, 4 * 64);
    }
}
