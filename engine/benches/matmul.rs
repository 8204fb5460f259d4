//! MatMul through the CPU backend (the `gemm` crate underneath), as the decoder uses it: an
//! activation `[m, k]` times a weight `[k, n]`. Ids: `matmul/{dtype}_t{threads}/{m}x{k}x{n}`;
//! throughput is in FLOPs (2·m·k·n "elements"), so criterion's elem/s reads as FLOP/s.
//! `threads` is 1 and every core of the machine (`t{N}`; on the 2-core CI machine `t2`).
//!
//! `matvec/{dtype}/{k}x{n}`: one decode step's `[1, k] x [k, n]` product (SmolLM2-135M's MLP
//! up-projection) on one thread, the matrix-vector kernel of `backend/cpu/matvec.rs`, with the
//! weight taken in turn from copies totalling at least 16 MiB, so every call streams it from L3
//! as a decode step streams its layers (one weight reused would sit in L2 and time the
//! arithmetic, not the stream; at the L2's edge a process's physical pages would set its speed:
//! harness/STATS.md section 1). Throughput in bytes of weight: the stream's GB/s.
//! `matvec/{dtype}_packed/{k}x{n}`: the same on weights packed into panels at load
//! (`Backend::prepare_weight`), the kernel every decode step runs on constant weights; the
//! unpacked row stays for products whose right operand is computed.

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
        // Not when serving a benchmark of another thread count (or another group): the pool's
        // threads would run beside it (`Group::reaches`).
        let suffix = format!("_t{t}");
        if !g.reaches(|function| function.ends_with(&suffix)) {
            continue;
        }
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

/// (k, n) of the decode-step products timed by `matvec`.
const MATVEC: [(usize, usize); 1] = [(576, 1536)];

fn matvec(c: &mut Criterion) {
    let cpu = CpuBackend::new(1).expect("cpu backend");
    let mut g = group(c, "matvec");
    for (dtype, dname) in [FLOAT_DTYPES[0], FLOAT_DTYPES[1]] {
        for (k, n) in MATVEC {
            let bytes = k * n * common::elem_bytes(dtype) as usize;
            let copies = (16usize << 20).div_ceil(bytes);
            let a = tensor(dtype, &[1, k], 5);
            let ws: Vec<_> = (0..copies)
                .map(|i| tensor(dtype, &[k, n], 6 + i as u64))
                .collect();
            let mut next = 0;
            g.throughput(Throughput::Bytes(bytes as u64));
            g.bench(dname, format!("{k}x{n}"), || {
                next = (next + 1) % ws.len();
                cpu.matmul(black_box(&a), black_box(&ws[next]))
            });
            // The same weights packed at load, as the executor does for every constant weight:
            // the kernel a decode step runs (six panels read at once).
            let packed: Vec<_> = ws
                .iter()
                .map(|w| cpu.prepare_weight(w).expect("pack weight"))
                .collect();
            g.bench(format!("{dname}_packed"), format!("{k}x{n}"), || {
                next = (next + 1) % packed.len();
                cpu.matmul(black_box(&a), black_box(&packed[next]))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, matmul, matvec);
criterion_main!(benches);
