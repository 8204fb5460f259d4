//! Elementwise, gather and reduction kernels of the CPU backend, single thread, through the
//! `Backend` trait exactly as the executor calls them. Ids: `{add,gather,reduce_mean}/{dtype}/{size}`.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::backend::{BinaryOp, ReduceOp};
use engine::{Backend, CpuBackend, Tensor};

use common::{FLOAT_DTYPES, elem_bytes, group, tensor};

/// (name, shape) of the elementwise and reduction inputs: L1-resident, L2-resident and
/// memory-bound sizes.
const SIZES: [(&str, [usize; 2]); 3] = [
    ("small", [64, 64]),
    ("medium", [512, 512]),
    ("large", [1024, 2048]),
];

/// (name, rows gathered) from an embedding-like `[8192, 576]` table: one decode token, a short
/// prompt, a long prompt.
const GATHER_ROWS: [(&str, usize); 3] = [("small", 1), ("medium", 32), ("large", 512)];
const TABLE: [usize; 2] = [8192, 576];

fn add(c: &mut Criterion) {
    let cpu = CpuBackend::new(1).expect("cpu backend");
    let mut g = group(c, "add");
    for (dtype, dname) in FLOAT_DTYPES {
        for (sname, shape) in SIZES {
            let a = tensor(dtype, &shape, 1);
            let b = tensor(dtype, &shape, 2);
            g.throughput(Throughput::Elements((shape[0] * shape[1]) as u64));
            g.bench(dname, sname, || {
                cpu.binary(BinaryOp::Add, black_box(&a), black_box(&b))
            });
        }
    }
    g.finish();
}

fn gather(c: &mut Criterion) {
    let cpu = CpuBackend::new(1).expect("cpu backend");
    let mut g = group(c, "gather");
    for (dtype, dname) in FLOAT_DTYPES {
        let table = tensor(dtype, &TABLE, 3);
        for (sname, rows) in GATHER_ROWS {
            let ids: Vec<i64> = (0..rows as i64)
                .map(|i| (i * 7919) % TABLE[0] as i64)
                .collect();
            let ids = Tensor::i64(&[rows], ids).expect("ids");
            g.throughput(Throughput::Bytes(
                rows as u64 * TABLE[1] as u64 * elem_bytes(dtype),
            ));
            g.bench(dname, sname, || {
                cpu.gather(black_box(&table), black_box(&ids), 0)
            });
            if sname == "large" {
                // Experiment (harness/eval/noise/cold.yaml): other rows on every call (16 sets
                // of `rows` ids covering the whole table), so they come from L3 as a prompt's
                // embeddings do, and the process's physical pages no longer decide its L2 hit
                // rate.
                let sets: Vec<Tensor> = (0..16i64)
                    .map(|s| {
                        let ids: Vec<i64> = (0..rows as i64)
                            .map(|i| ((i * 16 + s) * 7919) % TABLE[0] as i64)
                            .collect();
                        Tensor::i64(&[rows], ids).expect("ids")
                    })
                    .collect();
                let mut next = 0;
                g.bench(dname, "large_cold", || {
                    next = (next + 1) % sets.len();
                    cpu.gather(black_box(&table), black_box(&sets[next]), 0)
                });
            }
        }
    }
    g.finish();
}

fn reduce_mean(c: &mut Criterion) {
    let cpu = CpuBackend::new(1).expect("cpu backend");
    let mut g = group(c, "reduce_mean");
    for (dtype, dname) in FLOAT_DTYPES {
        for (sname, shape) in SIZES {
            let x = tensor(dtype, &shape, 4);
            g.throughput(Throughput::Elements((shape[0] * shape[1]) as u64));
            g.bench(dname, sname, || {
                cpu.reduce(ReduceOp::Mean, black_box(&x), &[1], true)
            });
        }
    }
    g.finish();
}

criterion_group!(benches, add, gather, reduce_mean);
criterion_main!(benches);
