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
            }
        }
    }
    g.finish();
}

criterion_group!(benches, matmul);
criterion_main!(benches);
