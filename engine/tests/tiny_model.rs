//! The tiny model end to end: deterministic package files, tokenizer and chat template, and the
//! KV-cache decode path against a full recompute.

use std::collections::BTreeMap;
use std::path::Path;

use engine::exec::ExecOptions;
use engine::package::Package;
use engine::session::{GenerateOptions, Session};
use engine::text::TextCodec;
use engine::tiny::{self, TinyConfig};
use engine::{CpuBackend, sha256_file};

fn hashes(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                sha256_file(&e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn tiny_is_byte_identical_across_builds_and_seed_sensitive() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    tiny::write_package(&a, 7, &TinyConfig::default()).unwrap();
    tiny::write_package(&b, 7, &TinyConfig::default()).unwrap();
    tiny::write_package(&c, 8, &TinyConfig::default()).unwrap();
    let (ha, hb, hc) = (hashes(&a), hashes(&b), hashes(&c));
    let names: Vec<&str> = ha.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "genai_config.json",
            "model.onnx",
            "model.onnx.data",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    assert_eq!(ha, hb, "same seed must give byte-identical files");
    assert_ne!(
        ha["model.onnx.data"], hc["model.onnx.data"],
        "another seed must change the weights"
    );
    assert_eq!(
        ha["tokenizer.json"], hc["tokenizer.json"],
        "the tokenizer does not depend on the seed"
    );
}

fn tiny_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    tiny::write_package(tmp.path(), 0, &TinyConfig::default()).unwrap();
    tmp
}

#[test]
fn tokenizer_round_trips_and_splits_digits() {
    let tmp = tiny_dir();
    let codec = TextCodec::open(tmp.path()).unwrap();
    for text in [
        "The capital of France is",
        "café 世界 🙂 \u{4} bytes",
        "<|im_start|>user\nhi<|im_end|>",
    ] {
        let ids = codec.encode(text).unwrap();
        assert_eq!(codec.decode(&ids).unwrap(), text);
    }
    let ids = codec.encode("2024").unwrap();
    assert_eq!(ids.len(), 4, "digits are split one per token: {ids:?}");
    assert_eq!(codec.encode("<|im_end|>").unwrap(), vec![tiny::EOS_ID]);
    assert_eq!(codec.eos_token_id(), Some(tiny::EOS_ID));
    // Merges learned from the corpus make common words shorter than their bytes.
    assert!(codec.encode(" the").unwrap().len() < 4);
}

#[test]
fn chat_template_renders_chatml_with_default_system() {
    let tmp = tiny_dir();
    let codec = TextCodec::open(tmp.path()).unwrap();
    assert_eq!(
        codec.apply_chat_template("Hi").unwrap(),
        "<|im_start|>system\nYou are a tiny test model.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn kv_cache_decode_equals_full_recompute_for_32_tokens() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let session = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let prompt = codec.encode("Once upon a time there was").unwrap();
    let run = |use_kv_cache| {
        let opts = GenerateOptions {
            max_new_tokens: 32,
            eos_token_ids: vec![],
            use_kv_cache,
            sampling: Default::default(),
        };
        session.generate(&prompt, &opts, true).unwrap()
    };
    let cached = run(true);
    let full = run(false);
    assert_eq!(cached.generated_ids.len(), 32);
    assert_eq!(cached.generated_ids, full.generated_ids, "token for token");
    for (step, (a, b)) in cached.logits.iter().zip(&full.logits).enumerate() {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-4, "step {step}: logits differ by {worst}");
    }
    // The model is not degenerate: it does not emit one token over and over.
    let distinct: std::collections::BTreeSet<_> = cached.generated_ids.iter().collect();
    assert!(distinct.len() > 3, "{:?}", cached.generated_ids);
}

/// A decode at one fixed, left-padded cache length (`generate_window`, what a captured device
/// step runs) gives the growing cache's tokens, and logits within rounding: the padding's
/// attention weights are exact zeros. The specialised plan runs fewer steps than the graph
/// (the shape arithmetic is folded once). A window too small for the request is an error.
/// The tiny graph spells RoPE with Split (q and k), SwiGLU's gate, the scaled and masked
/// softmax, its post-attention norm as Pow/ReduceMean/…/Mul after the residual Add, and the
/// keys' GQA repeat as Unsqueeze/Expand/Reshape before `q · kᵀ`: the executor fuses those 6 runs
/// per layer into one step each (`exec/fuse.rs`; the values' repeat is a Tile and stays), and on
/// the CPU the fused plan decodes the same logits, bit for bit.
#[test]
fn the_fused_plan_decodes_the_unfused_plans_logits() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let fused = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let plain = Session::with_options(
        &package,
        CpuBackend::new(1).unwrap(),
        ExecOptions {
            fuse_patterns: false,
        },
    )
    .unwrap();
    let layers = package.io.layers.len();
    assert_eq!(
        plain.executor().num_steps() - fused.executor().num_steps(),
        layers * (5 + 5 + 2 + 2 + 6 + 3),
        "per layer: two RoPE runs of 6 nodes, a gate of 3, a softmax of 3, a residual Add and \
         norm of 7 and a GQA MatMul of 4"
    );
    let prompt = codec.encode("Once upon a time there was").unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 16,
        eos_token_ids: vec![],
        use_kv_cache: true,
        sampling: Default::default(),
    };
    let a = fused.generate(&prompt, &opts, true).unwrap();
    let b = plain.generate(&prompt, &opts, true).unwrap();
    assert_eq!(a.generated_ids, b.generated_ids);
    let bits = |l: &[Vec<f32>]| -> Vec<Vec<u32>> {
        l.iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    assert_eq!(bits(&a.logits), bits(&b.logits), "logits, bit for bit");
}

#[test]
fn a_fixed_window_decodes_as_the_growing_cache() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let session = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let prompt = codec.encode("Once upon a time there was").unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 32,
        eos_token_ids: vec![],
        use_kv_cache: true,
        sampling: Default::default(),
    };
    let grown = session.generate(&prompt, &opts, true).unwrap();
    for window in [prompt.len() + 32, 64, 100] {
        let fixed = session
            .generate_window(&prompt, &opts, window, true)
            .unwrap();
        assert_eq!(
            fixed.generated_ids, grown.generated_ids,
            "window {window}: token for token"
        );
        assert_eq!(fixed.logits.len(), grown.logits.len());
        for (step, (a, b)) in fixed.logits.iter().zip(&grown.logits).enumerate() {
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            assert!(
                worst < 1e-4,
                "window {window}, step {step}: logits differ by {worst}"
            );
        }
    }
    let err = session
        .generate_window(&prompt, &opts, prompt.len() + 31, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot hold"), "{err}");
}

/// `generate` feeds each step's `present` back as the next `past` instead of gathering it from
/// the pages it also writes: that is only sound while the pages hold exactly those values.
#[test]
fn the_pages_hold_what_each_step_reads_next() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let session = Session::new(&package, CpuBackend::new(2).unwrap()).unwrap();
    let prompt = codec.encode("Once upon a time there was").unwrap();
    let mut pool = session.page_pool(prompt.len() + 40).unwrap();
    let seq = pool.alloc_sequence().unwrap();
    let (mut logits, mut past) = session
        .forward(&prompt, &session.empty_cache().unwrap())
        .unwrap();
    session.store_present(&mut pool, seq, &past, 0).unwrap();
    // 40 steps cross two page boundaries (16 tokens a page).
    let mut decoded = Vec::new();
    for step in 0..40 {
        let gathered = session.gather_cache(&pool, seq).unwrap();
        assert_eq!(gathered.len, past.len);
        for (l, ((k, v), (gk, gv))) in past.layers.iter().zip(&gathered.layers).enumerate() {
            assert_eq!(k, gk, "step {step} layer {l}: keys");
            assert_eq!(v, gv, "step {step} layer {l}: values");
        }
        let next = engine::session::argmax(&logits);
        decoded.push(next);
        let present;
        (logits, present) = session.forward(&[next], &past).unwrap();
        session
            .store_present(&mut pool, seq, &present, past.len)
            .unwrap();
        past = present;
    }
    // And generate itself still decodes what the loop above decodes (whose every past equalled
    // the pages' gather, so it is the page-gathering decode).
    let opts = GenerateOptions {
        max_new_tokens: 8,
        eos_token_ids: vec![],
        use_kv_cache: true,
        sampling: Default::default(),
    };
    let g = session.generate(&prompt, &opts, false).unwrap();
    let manual = &decoded[..8];
    assert_eq!(g.generated_ids, manual);
}

#[test]
fn generation_stops_on_eos() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let session = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let prompt = codec.encode("The capital of France is").unwrap();
    let free = session
        .generate(
            &prompt,
            &GenerateOptions {
                max_new_tokens: 8,
                eos_token_ids: vec![],
                use_kv_cache: true,
                sampling: Default::default(),
            },
            false,
        )
        .unwrap();
    // Declare the third generated token an end-of-sequence id: generation stops right there.
    let stop = free.generated_ids[2];
    let first = free.generated_ids.iter().position(|&t| t == stop).unwrap();
    let stopped = session
        .generate(
            &prompt,
            &GenerateOptions {
                max_new_tokens: 8,
                eos_token_ids: vec![stop],
                use_kv_cache: true,
                sampling: Default::default(),
            },
            false,
        )
        .unwrap();
    assert!(stopped.stopped_on_eos);
    assert_eq!(stopped.generated_ids, free.generated_ids[..=first]);
}

#[test]
fn threads_do_not_change_tokens() {
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let prompt = codec.encode("Hello, world!").unwrap();
    let opts = GenerateOptions {
        max_new_tokens: 16,
        eos_token_ids: vec![],
        use_kv_cache: true,
        sampling: Default::default(),
    };
    let one = Session::new(&package, CpuBackend::new(1).unwrap())
        .unwrap()
        .generate(&prompt, &opts, false)
        .unwrap();
    let two = Session::new(&package, CpuBackend::new(2).unwrap())
        .unwrap()
        .generate(&prompt, &opts, false)
        .unwrap();
    assert_eq!(one.generated_ids, two.generated_ids);
}

/// Sampling goes through the session: a seed reproduces a run, another seed changes it, and the
/// processors act on real decode steps (no-repeat-ngram really prevents repeats; the greedy tiny
/// model otherwise repeats itself, e.g. `[114, 114, 26, 411, 411, 411, …]`).
#[test]
fn sampling_in_the_session_is_seeded_and_processors_apply() {
    use engine::sampling::SamplingConfig;
    let tmp = tiny_dir();
    let package = Package::open(tmp.path()).unwrap();
    let codec = TextCodec::open(tmp.path()).unwrap();
    let prompt = codec.encode("The capital of France is").unwrap();
    let session = Session::new(&package, CpuBackend::new(1).unwrap()).unwrap();
    let run = |sampling: SamplingConfig| {
        let opts = GenerateOptions {
            max_new_tokens: 24,
            eos_token_ids: vec![],
            use_kv_cache: true,
            sampling,
        };
        session.generate(&prompt, &opts, true).unwrap()
    };
    let hot = |seed| SamplingConfig {
        temperature: Some(1.5),
        seed: Some(seed),
        ..Default::default()
    };
    let a = run(hot(7));
    assert_eq!(
        a.generated_ids,
        run(hot(7)).generated_ids,
        "same seed, same tokens"
    );
    assert_ne!(
        a.generated_ids,
        run(hot(8)).generated_ids,
        "another seed, other tokens"
    );
    // Kept logits are the model's own, not the processed ones: greedy over them is the greedy run.
    let greedy = run(SamplingConfig::default());
    assert!(
        greedy.generated_ids.windows(2).any(|w| w[0] == w[1]),
        "{:?}",
        greedy.generated_ids
    );
    assert_eq!(
        greedy.generated_ids,
        greedy
            .logits
            .iter()
            .map(|l| engine::session::argmax(l))
            .collect::<Vec<_>>()
    );
    let no_repeat = run(SamplingConfig {
        no_repeat_ngram_size: Some(1),
        ..Default::default()
    });
    let all: Vec<u32> = prompt
        .iter()
        .chain(&no_repeat.generated_ids)
        .copied()
        .collect();
    let mut seen = std::collections::HashSet::new();
    assert!(
        all.iter().all(|id| seen.insert(*id)),
        "a token repeated: {all:?}"
    );
}
