//! MatMul through the CPU backend (the `gemm` crate underneath), as the decoder uses it: an
//! activation `[m, k]` times a weight `[k, n]`. Ids: `matmul/{dtype}_t{threads}/{m}x{k}x{n}`;
//! throughput is in FLOPs (2·m·k·n "elements"), so criterion's elem/s reads as FLOP/s.
//! `threads` is 1 and every core of the machine (`t{N}`; on the 2-core CI machine `t2`).

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::{Backend, CpuBackend};

use common::{FLOAT_DTYPES, all_cores, group, tensor};

/// (m, k, n): one decode step's projection, a 32-token prompt, a 32-token prompt at 2× width.
pub const SHAPES: [(usize, usize, usize); 3] = [(1, 256, 256), (32, 512, 512), (32, 1024, 1024)];

fn matmul(c: &mut Criterion) {
    let mut g = group(c, "matmul");
    let mut threads = vec![1];
    if all_cores() > 1 {
        threads.push(all_cores());
    }
    for t in threads {
        let cpu = CpuBackend::new(t).expect("cpu backend");
        for (dtype, dname) in FLOAT_DTYPES {
            for (m, k, n) in SHAPES {
                let a = tensor(dtype, &[m, k], 5);
                let b = tensor(dtype, &[k, n], 6);
                g.throughput(Throughput::Elements(2 * (m * k * n) as u64));
                g.bench(format!("{dname}_t{t}"), format!("{m}x{k}x{n}"), || {
                    cpu.matmul(black_box(&a), black_box(&b))
                });
                if (m, k, n) == (32, 512, 512) && t == 1 {
                    // Experiment (harness/eval/noise/cold.yaml): the same product with the
                    // weight taken in turn from copies totalling ≥ 8 MiB (4× this machine's
                    // 2 MiB L2), so it comes from L3 on every call as in a decode step, and the
                    // process's physical pages no longer decide its L2 hit rate.
                    let copies = cold_copies(k * n * common::elem_bytes(dtype) as usize);
                    let bs: Vec<_> = (0..copies)
                        .map(|i| tensor(dtype, &[k, n], 6 + i as u64))
                        .collect();
                    let mut next = 0;
                    g.bench(format!("{dname}_t{t}"), format!("{m}x{k}x{n}_cold"), || {
                        next = (next + 1) % bs.len();
                        cpu.matmul(black_box(&a), black_box(&bs[next]))
                    });
                }
            }
        }
    }
    g.finish();
}

/// Copies of a `bytes`-sized input that together take at least 8 MiB.
fn cold_copies(bytes: usize) -> usize {
    (8usize << 20).div_ceil(bytes.max(1)).max(2)
}

criterion_group!(benches, matmul);
criterion_main!(benches);
