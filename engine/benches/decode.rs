//! End-to-end decode of the tiny model on the CPU backend, one thread: prefill of a 6-token
//! prompt plus 32 greedy steps with the KV cache, end-of-sequence ignored so every iteration does
//! the same work. Id: `decode/tiny_tokens_per_second/32_tokens`; throughput in tokens
//! (criterion's elem/s reads as tokens/s). Catches regressions anywhere on the decode path:
//! executor overhead, op lowering, kernels, KV-cache handling, sampling.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::CpuBackend;
use engine::package::Package;
use engine::session::{GenerateOptions, Session};
use engine::text::TextCodec;
use engine::tiny::{TinyConfig, write_package};

const NEW_TOKENS: usize = 32;

fn decode(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_package(dir.path(), 0, &TinyConfig::default()).expect("tiny package");
    let package = Package::open(dir.path()).expect("open tiny package");
    // The prompt is encoded on a thread of its own, so the tokenizer's allocations land in
    // another of glibc's malloc arenas: its hash maps are seeded per process, the order of its
    // allocations with them, and on the main thread that left the heap in one of two states
    // for the timed loop (the instruction count per iteration moved by 0.08 % between
    // processes; harness/eval/noise/README.md).
    let path = dir.path().to_path_buf();
    let prompt = std::thread::spawn(move || {
        let codec = TextCodec::open(&path).expect("tiny tokenizer");
        codec.encode("The capital of France is").expect("encode")
    })
    .join()
    .expect("encode the prompt");
    let session = Session::new(&package, CpuBackend::new(1).expect("cpu")).expect("session");
    let opts = GenerateOptions {
        max_new_tokens: NEW_TOKENS,
        eos_token_ids: Vec::new(),
        use_kv_cache: true,
        sampling: Default::default(),
    };
    let mut g = common::group(c, "decode");
    g.throughput(Throughput::Elements(NEW_TOKENS as u64));
    g.bench(
        "tiny_tokens_per_second",
        format!("{NEW_TOKENS}_tokens"),
        || {
            let out = session
                .generate(black_box(&prompt), &opts, false)
                .expect("decode");
            assert_eq!(out.generated_ids.len(), NEW_TOKENS);
            out
        },
    );
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
