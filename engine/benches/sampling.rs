//! Token selection at SmolLM2's vocabulary size (49152), on one step's logits.
//! - `sampling_latency/{greedy,top_k,top_p,min_p}_per_token/49152`: one `Sampler::next_token`
//!   (greedy argmax; top-k 50; top-p 0.9; min-p 0.05; temperature 1, seeded);
//! - `logit_processing/seven_processor_chain_per_step/49152`: the seven-processor chain
//!   (repetition 1.1, presence/frequency 0.5/0.5, no-repeat-3-gram, temperature 0.8, top-k 50,
//!   top-p 0.9, min-p 0.05) over a 256-token history, without the final draw.
//!
//! Processors write into the logits, so each iteration gets a fresh copy, made outside the timed
//! region (`iter_batched_ref`). Throughput: vocabulary entries.

mod common;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::sampling::{History, Sampler, SamplingConfig};

const VOCAB: usize = 49152;

/// Logits shaped like a language model's: a few strong candidates over a long tail.
fn logits() -> Vec<f32> {
    (0..VOCAB as u64)
        .map(|i| {
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            let u = h as f32 / (1u64 << 24) as f32; // [0, 1)
            -8.0 + 14.0 * u.powi(6) + if i % 4099 == 7 { 6.0 } else { 0.0 }
        })
        .collect()
}

fn history() -> History {
    let prompt: Vec<u32> = (0..256u32).map(|i| (i * 7919) % VOCAB as u32).collect();
    History::new(&prompt)
}

fn sampling(c: &mut Criterion) {
    let logits = logits();
    let history = history();
    let mut g = common::group(c, "sampling_latency");
    g.throughput(Throughput::Elements(VOCAB as u64));
    let configs: [(&str, SamplingConfig); 4] = [
        ("greedy_per_token", SamplingConfig::default()),
        (
            "top_k_per_token",
            SamplingConfig {
                top_k: Some(50),
                seed: Some(1),
                ..Default::default()
            },
        ),
        (
            "top_p_per_token",
            SamplingConfig {
                top_p: Some(0.9),
                seed: Some(1),
                ..Default::default()
            },
        ),
        (
            "min_p_per_token",
            SamplingConfig {
                min_p: Some(0.05),
                seed: Some(1),
                ..Default::default()
            },
        ),
    ];
    for (name, cfg) in configs {
        let mut sampler = Sampler::new(&cfg).expect("sampler");
        g.bench_with_setup(
            name,
            VOCAB,
            || logits.clone(),
            |l| sampler.next_token(black_box(l), &history).expect("token"),
        );
    }
    g.finish();

    let mut g = common::group(c, "logit_processing");
    g.throughput(Throughput::Elements(VOCAB as u64));
    let cfg = SamplingConfig {
        repetition_penalty: Some(1.1),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(0.5),
        no_repeat_ngram_size: Some(3),
        temperature: Some(0.8),
        top_k: Some(50),
        top_p: Some(0.9),
        min_p: Some(0.05),
        seed: Some(1),
    };
    let mut chain = cfg.build_chain().expect("chain");
    assert_eq!(chain.len(), 7, "the chain is {:?}", chain.names());
    g.bench_with_setup(
        "seven_processor_chain_per_step",
        VOCAB,
        || logits.clone(),
        |l| chain.process(black_box(l), &history),
    );
    g.finish();
}

criterion_group!(benches, sampling);
criterion_main!(benches);
