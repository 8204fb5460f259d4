//! The engine against the independent fp32 oracle (crate `oracles`, which shares no kernel code
//! with the engine) on the tiny model: the same greedy tokens for 32 steps from three prompts,
//! the same top-5 ids and logits at every step, last-step logits within 1e-4, and the same
//! prompt handling (tokenizer, ChatML rendering, EOS ids) and package hash.

use std::collections::BTreeSet;
use std::time::Instant;

use engine::CpuBackend;
use engine::package::Package;
use engine::session::{GenerateOptions, Session};
use engine::text::{TextCodec, render_chatml};
use engine::tiny::{self, TinyConfig};
use oracles::Oracle;

/// Logit agreement between an f32 engine and the f64-accumulating oracle.
const LOGIT_TOL: f32 = 1e-4;
const TOKENS: usize = 32;
const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "Once upon a time there was",
    "Numbers like 12, 345 and 2024 are",
];

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vocabulary sizes differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn oracle_and_engine_agree_on_tiny() {
    let tmp = tempfile::tempdir().unwrap();
    tiny::write_package(tmp.path(), 0, &TinyConfig::default()).unwrap();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let session = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let oracle = Oracle::open(tmp.path()).unwrap();
    let oracle_tok = oracles::text::Tokenizer::open(tmp.path()).unwrap();

    let eos = package.eos_token_ids().unwrap_or_default();
    assert_eq!(oracle.eos_token_ids(), eos.as_slice());
    assert_eq!(
        oracle.model_sha256(),
        package.model.sha256().unwrap(),
        "the package hash of the goldens"
    );
    assert_eq!(
        oracles::text::render_chatml(tiny::CHAT_TEMPLATE, "Hi").unwrap(),
        render_chatml(tiny::CHAT_TEMPLATE, "Hi").unwrap()
    );

    let mut full_length = 0;
    for prompt in PROMPTS {
        let ids = codec.encode(prompt).unwrap();
        assert_eq!(
            oracle_tok.encode(prompt).unwrap(),
            ids,
            "{prompt:?}: tokenizers disagree"
        );
        let opts = GenerateOptions {
            max_new_tokens: TOKENS,
            eos_token_ids: eos.clone(),
            use_kv_cache: true,
            sampling: Default::default(),
        };
        let g = session.generate(&ids, &opts, true).unwrap();
        let t0 = Instant::now();
        let d = oracle.decode(&ids, TOKENS).unwrap();
        eprintln!(
            "{prompt:?}: oracle decoded {} tokens in {:.3} s",
            d.generated_ids.len(),
            t0.elapsed().as_secs_f64()
        );

        assert_eq!(
            d.generated_ids, g.generated_ids,
            "{prompt:?}: greedy tokens differ"
        );
        assert_eq!(d.stopped_on_eos, g.stopped_on_eos, "{prompt:?}");
        assert_eq!(d.steps.len(), g.logits.len(), "{prompt:?}");
        for (step, (s, logits)) in d.steps.iter().zip(&g.logits).enumerate() {
            let mut order: Vec<u32> = (0..logits.len() as u32).collect();
            order.sort_by(|&a, &b| {
                logits[b as usize]
                    .total_cmp(&logits[a as usize])
                    .then(a.cmp(&b))
            });
            for (k, &(id, logit)) in s.top.iter().enumerate() {
                let engine_logit = logits[id as usize];
                assert!(
                    (logit - engine_logit).abs() < LOGIT_TOL,
                    "{prompt:?} step {step}: top-{k} id {id} has logit {logit} (oracle) vs {engine_logit} (engine)"
                );
                // Ranks may only swap where the two are closer than the tolerance.
                if order[k] != id {
                    let gap = (logits[order[k] as usize] - engine_logit).abs();
                    assert!(
                        gap < LOGIT_TOL,
                        "{prompt:?} step {step}: rank {k} is {id} (oracle) vs {} (engine)",
                        order[k]
                    );
                }
            }
        }
        let last = g.logits.last().unwrap();
        let worst = max_abs_diff(&d.last_logits, last);
        eprintln!("{prompt:?}: worst last-step logit difference {worst:.2e}");
        assert!(
            worst < LOGIT_TOL,
            "{prompt:?}: last-step logits differ by {worst}"
        );
        if d.generated_ids.len() == TOKENS {
            full_length += 1;
        }
    }
    assert!(
        full_length >= 2,
        "most prompts must run the full {TOKENS} tokens, not stop on EOS at once"
    );
}

/// The oracle on its own against the ONNX Runtime goldens of the tiny model: same package hash,
/// same greedy tokens, same top-5 ids, top-5 logits within `LOGIT_TOL`.
#[test]
fn oracle_matches_tiny_onnxruntime_goldens() {
    let tmp = tempfile::tempdir().unwrap();
    tiny::write_package(tmp.path(), 0, &TinyConfig::default()).unwrap();
    let oracle = Oracle::open(tmp.path()).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../goldens/tiny");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.retain(|p| p.extension().is_some_and(|x| x == "json"));
    cases.sort();
    assert!(!cases.is_empty(), "no goldens in {}", dir.display());
    for path in cases {
        let g: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let case = path.file_stem().unwrap().to_string_lossy().into_owned();
        let ids = |v: &serde_json::Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        assert_eq!(
            g["model_sha256"].as_str().unwrap(),
            oracle.model_sha256(),
            "{case}: golden of another model"
        );
        let n = g["max_new_tokens"].as_u64().unwrap() as usize;
        let d = oracle.decode(&ids(&g["prompt_ids"]), n).unwrap();
        assert_eq!(
            d.generated_ids,
            ids(&g["generated_ids"]),
            "{case}: tokens differ from ORT"
        );
        let mut worst = 0.0f32;
        for (step, (s, gs)) in d
            .steps
            .iter()
            .zip(g["steps"].as_array().unwrap())
            .enumerate()
        {
            for (k, ((id, logit), want)) in
                s.top.iter().zip(gs["top"].as_array().unwrap()).enumerate()
            {
                let (want_id, want_logit) = (
                    want[0].as_u64().unwrap() as u32,
                    want[1].as_f64().unwrap() as f32,
                );
                let diff = (logit - want_logit).abs();
                worst = worst.max(diff);
                assert!(
                    *id == want_id || diff < LOGIT_TOL,
                    "{case} step {step}: rank {k} is id {id} (oracle) vs {want_id} (ORT)"
                );
                assert!(
                    diff < LOGIT_TOL,
                    "{case} step {step}: rank {k} logit {logit} (oracle) vs {want_logit} (ORT)"
                );
            }
        }
        eprintln!(
            "tiny/{case}: {} tokens identical to ORT, worst top-5 logit difference {worst:.2e}",
            d.generated_ids.len()
        );
    }
}

/// The oracle implements exactly the ops the engine supports, so every op the engine can run has
/// a reference (and the oracle claims nothing the engine lacks).
#[test]
fn oracle_covers_the_engine_op_set() {
    fn set(ops: &[(&'static str, &'static str)]) -> BTreeSet<(&'static str, &'static str)> {
        ops.iter().copied().collect()
    }
    let (engine_ops, oracle_ops) = (set(engine::ops::SUPPORTED), set(oracles::ops::SUPPORTED));
    let missing: Vec<_> = engine_ops.difference(&oracle_ops).collect();
    let extra: Vec<_> = oracle_ops.difference(&engine_ops).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "oracle lacks {missing:?}; oracle has extra {extra:?}"
    );
}
