//! Reference, not gated: the `gemm` crate called directly on the shapes of `benches/matmul.rs`,
//! so the engine's MatMul overhead (dispatch, allocation, bf16 conversion, the m = 1 row split)
//! can be read off as a ratio. Ids: `gemm_reference/{dtype}_t{threads}/{m}x{k}x{n}`; f32 and
//! f16 only (gemm has no bf16: the engine converts bf16 to f32). Kept out of the harness
//! suites (`harness.yaml`): it measures a dependency, not this repository's code.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gemm::{Parallelism, f16};

use common::{all_cores, group};

const SHAPES: [(usize, usize, usize); 3] = [(1, 256, 256), (32, 512, 512), (32, 1024, 1024)];

/// dst[m, n] = lhs[m, k] · rhs[k, n], all row-major and contiguous.
fn gemm_into<T: 'static>(
    (m, k, n): (usize, usize, usize),
    dst: &mut [T],
    lhs: &[T],
    rhs: &[T],
    zero: T,
    one: T,
    par: Parallelism,
) {
    assert!(dst.len() == m * n && lhs.len() == m * k && rhs.len() == k * n);
    // SAFETY: the three buffers are exactly m·n, m·k and k·n elements (asserted above), the
    // strides (row stride = columns, column stride 1) stay inside them, dst is a unique borrow
    // aliasing neither input, and with read_dst = false gemm never reads dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            1,
            k as isize,
            rhs.as_ptr(),
            1,
            n as isize,
            zero,
            one,
            false,
            false,
            false,
            par,
        );
    }
}

fn values(n: usize, salt: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            ((i.wrapping_mul(2654435761).wrapping_add(salt * 97)) % 1000) as f32 / 1000.0 - 0.5
        })
        .collect()
}

fn gemm_reference(c: &mut Criterion) {
    let mut g = group(c, "gemm_reference");
    let mut threads = vec![1];
    if all_cores() > 1 {
        threads.push(all_cores());
    }
    for t in threads {
        let par = if t > 1 {
            Parallelism::Rayon(t)
        } else {
            Parallelism::None
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .expect("rayon pool");
        for (m, k, n) in SHAPES {
            g.throughput(Throughput::Elements(2 * (m * k * n) as u64));
            let (a, b) = (values(m * k, 5), values(k * n, 6));
            let mut d = vec![0f32; m * n];
            g.bench(format!("f32_t{t}"), format!("{m}x{k}x{n}"), || {
                pool.install(|| {
                    gemm_into(
                        (m, k, n),
                        &mut d,
                        black_box(&a),
                        black_box(&b),
                        0.0,
                        1.0,
                        par,
                    )
                })
            });
            let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
            let b16: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
            let mut d16 = vec![f16::ZERO; m * n];
            g.bench(format!("f16_t{t}"), format!("{m}x{k}x{n}"), || {
                pool.install(|| {
                    gemm_into(
                        (m, k, n),
                        &mut d16,
                        black_box(&a16),
                        black_box(&b16),
                        f16::ZERO,
                        f16::ONE,
                        par,
                    )
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, gemm_reference);
criterion_main!(benches);
