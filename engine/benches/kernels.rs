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
/// prompt, a long prompt (other rows on every call: `gather`).
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
            // One set of ids for the small and medium rows (they stay in L1/L2 as a decode
            // step's few embeddings do). The large rows take other rows on every call (16 sets of
            // 512 ids covering the whole table), so they come from L3 as a long prompt's
            // embeddings do: with one set, its 590 KB of f16/bf16 rows plus the output sat at
            // half this machine's 2 MiB L2, whose hit rate then depended on each process's
            // physical pages (per-round A/A sd 7.8-8.9 %, 1.8-2.6 % this way, in the same rounds:
            // harness/eval/results/noise/cold/).
            let sets = if sname == "large" { 16 } else { 1 };
            let ids: Vec<Tensor> = (0..sets as i64)
                .map(|s| {
                    let ids: Vec<i64> = (0..rows as i64)
                        .map(|i| ((i * sets as i64 + s) * 7919) % TABLE[0] as i64)
                        .collect();
                    Tensor::i64(&[rows], ids).expect("ids")
                })
                .collect();
            g.throughput(Throughput::Bytes(
                rows as u64 * TABLE[1] as u64 * elem_bytes(dtype),
            ));
            let mut next = 0;
            g.bench(dname, sname, || {
                next = (next + 1) % ids.len();
                cpu.gather(black_box(&table), black_box(&ids[next]), 0)
            });
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
