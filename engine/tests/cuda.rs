//! CUDA against the CPU: every `Backend` primitive × float dtype on `CudaBackend` vs
//! `CpuBackend` within named tolerance tiers; the generic executor on CUDA and the fused llama
//! decoder (graphs on and off) give the CPU's greedy tokens on the tiny model; the fused decoder
//! reproduces the ORT goldens (f32) and reports f16 divergences with their triage.
//!
//! Without a GPU every test prints "skipped: no CUDA device" and returns; `cuda_canary` fails
//! instead under `REQUIRE_CUDA=1`, so a GPU job can never pass by skipping.
//!
//! Against the oracle: `ENGINE_TEST_BACKEND=cuda cargo test --release -p engine --features cuda
//! --test differential` runs the whole differential suite (every op × dtype as a one-node model,
//! named tolerance tiers) on `CudaBackend` instead of the CPU (tests/common/mod.rs).
#![cfg(feature = "cuda")]

mod common;

use common::rand_vals;
use std::path::{Path, PathBuf};

use engine::backend::cuda::{CudaBackend, is_available};
use engine::backend::{Backend, BinaryOp, SliceDim, UnaryOp};
use engine::decode::LlamaDecoder;
use engine::package::Package;
use engine::session::{GenerateOptions, Session};
use engine::tiny::{self, TinyConfig};
use engine::{CpuBackend, DType, Data, Tensor, convert};
use half::{bf16, f16};
use serde_json::Value;

/// Tolerance tiers, relative to max(1, |want|).
const EXACT: f32 = 0.0;
/// One f32 rounding or a transcendental a few ulps apart (CUDA libm vs Rust's).
const F32_CLOSE: f32 = 2e-6;
/// Sums whose order differs (matmul, norms, softmax) in f32.
const F32_SUM: f32 = 2e-5;
const F16_TIER: f32 = 4e-3;
const BF16_TIER: f32 = 3e-2;

fn skip() -> bool {
    if is_available() {
        return false;
    }
    println!("skipped: no CUDA device");
    true
}

#[test]
fn cuda_canary() {
    let required = std::env::var("REQUIRE_CUDA").is_ok_and(|v| v == "1");
    if let Err(e) = engine::backend::cuda::check_available() {
        assert!(!required, "REQUIRE_CUDA=1 but no usable GPU: {e}");
        println!("skipped: no CUDA device ({e})");
        return;
    }
    println!("cuda available");
}

fn typed(shape: &[usize], v: &[f32], d: DType) -> Tensor {
    let data = match d {
        DType::F16 => Data::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        DType::BF16 => Data::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        _ => Data::F32(v.to_vec()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn tier(d: DType, f32_tol: f32) -> f32 {
    match d {
        DType::F16 => F16_TIER,
        DType::BF16 => BF16_TIER,
        _ => f32_tol,
    }
}

#[track_caller]
fn close(what: &str, got: &Tensor, want: &Tensor, tol: f32) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * b.abs().max(1.0);
        assert!(ok, "{what}: index {i}: cuda {a}, cpu {b} (tolerance {tol})");
    }
}

#[test]
fn every_primitive_and_dtype_matches_the_cpu() {
    if skip() {
        return;
    }
    let gpu = CudaBackend::new().unwrap();
    let cpu = CpuBackend::new(0).unwrap();
    let both = |t: &Tensor| (gpu.upload(t).unwrap(), t.clone());
    for d in [DType::F32, DType::F16, DType::BF16] {
        let x = typed(&[3, 4, 5], &rand_vals(60, 1, -2.0, 2.0), d);
        let pos = typed(&[3, 4, 5], &rand_vals(60, 2, 0.1, 3.0), d);
        let y = typed(&[4, 1], &rand_vals(4, 3, -2.0, 2.0), d);
        let (gx, _) = both(&x);
        let (gp, _) = both(&pos);
        let (gy, _) = both(&y);
        use UnaryOp::*;
        for op in [
            Neg,
            Abs,
            Exp,
            Sigmoid,
            Tanh,
            Cos,
            Sin,
            Erf,
            Floor,
            Ceil,
            Round,
            Sign,
            Relu,
            Softplus,
            Silu,
            LeakyRelu(0.1),
            Elu(1.0),
            HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
        ] {
            let got = gpu.download(&gpu.unary(op, &gx).unwrap()).unwrap();
            close(
                &format!("{op:?} {d}"),
                &got,
                &cpu.unary(op, &x).unwrap(),
                tier(d, F32_CLOSE),
            );
        }
        for op in [Sqrt, Reciprocal, Log] {
            let got = gpu.download(&gpu.unary(op, &gp).unwrap()).unwrap();
            close(
                &format!("{op:?} {d}"),
                &got,
                &cpu.unary(op, &pos).unwrap(),
                tier(d, F32_CLOSE),
            );
        }
        use BinaryOp::*;
        for op in [
            Add,
            Sub,
            Mul,
            Div,
            Max,
            Min,
            Mod { fmod: true },
            Mod { fmod: false },
        ] {
            let got = gpu.download(&gpu.binary(op, &gx, &gy).unwrap()).unwrap();
            close(
                &format!("{op:?} {d}"),
                &got,
                &cpu.binary(op, &x, &y).unwrap(),
                tier(d, F32_CLOSE),
            );
        }
        let got = gpu.download(&gpu.binary(Pow, &gp, &gy).unwrap()).unwrap();
        close(
            &format!("Pow {d}"),
            &got,
            &cpu.binary(Pow, &pos, &y).unwrap(),
            tier(d, F32_SUM),
        );
        for axis in [0, 1, 2] {
            for log in [false, true] {
                let got = gpu.download(&gpu.softmax(&gx, axis, log).unwrap()).unwrap();
                close(
                    &format!("softmax {axis} {log} {d}"),
                    &got,
                    &cpu.softmax(&x, axis, log).unwrap(),
                    tier(d, F32_SUM),
                );
            }
        }
        let g5 = typed(&[5], &rand_vals(5, 4, 0.5, 1.5), d);
        let got = gpu
            .download(
                &gpu.rms_norm(&gx, &gpu.upload(&g5).unwrap(), 2, 1e-5)
                    .unwrap(),
            )
            .unwrap();
        close(
            &format!("rms_norm {d}"),
            &got,
            &cpu.rms_norm(&x, &g5, 2, 1e-5).unwrap(),
            tier(d, F32_SUM),
        );
        for (sa, sb) in [
            (vec![7, 9], vec![9, 5]),
            (vec![2, 3, 7, 9], vec![9, 5]),
            (vec![2, 7, 9], vec![2, 9, 5]),
            (vec![2, 7, 9], vec![1, 9, 5]),
            // One row against a weight (the matrix-vector kernel for f32): columns not a
            // multiple of its 32, rows not of its 8 warps, and a batch of one.
            (vec![1, 77], vec![77, 70]),
            (vec![1, 1, 300], vec![300, 33]),
        ] {
            let a = typed(&sa, &rand_vals(sa.iter().product(), 5, -1.0, 1.0), d);
            let b = typed(&sb, &rand_vals(sb.iter().product(), 6, -1.0, 1.0), d);
            let got = gpu
                .download(
                    &gpu.matmul(&gpu.upload(&a).unwrap(), &gpu.upload(&b).unwrap())
                        .unwrap(),
                )
                .unwrap();
            close(
                &format!("matmul {sa:?}x{sb:?} {d}"),
                &got,
                &cpu.matmul(&a, &b).unwrap(),
                tier(d, F32_SUM),
            );
        }
        // Layout ops are copies: exact.
        let got = gpu
            .download(&gpu.transpose(&gx, &[2, 0, 1]).unwrap())
            .unwrap();
        close(
            &format!("transpose {d}"),
            &got,
            &cpu.transpose(&x, &[2, 0, 1]).unwrap(),
            EXACT,
        );
        // Moving only size-1 dims is a view on the GPU (no copy); with a dim of size > 1
        // crossing another, a copy. Both must equal the CPU's transpose.
        let heads = typed(&[1, 1, 3, 4], &rand_vals(12, 91, -2.0, 2.0), d);
        let lanes = typed(&[1, 3, 1, 4], &rand_vals(12, 92, -2.0, 2.0), d);
        for (t, perm) in [
            (&heads, [0, 2, 1, 3]),
            (&heads, [2, 0, 1, 3]),
            (&lanes, [0, 2, 1, 3]),
            (&lanes, [0, 3, 2, 1]),
        ] {
            let got = gpu
                .download(&gpu.transpose(&gpu.upload(t).unwrap(), &perm).unwrap())
                .unwrap();
            close(
                &format!("transpose {:?} by {perm:?} {d}", t.shape()),
                &got,
                &cpu.transpose(t, &perm).unwrap(),
                EXACT,
            );
        }
        let dims = [
            SliceDim {
                start: 2,
                step: -1,
                len: 2,
            },
            SliceDim {
                start: 1,
                step: 2,
                len: 2,
            },
            SliceDim {
                start: 0,
                step: 1,
                len: 5,
            },
        ];
        let got = gpu.download(&gpu.slice(&gx, &dims).unwrap()).unwrap();
        close(
            &format!("slice {d}"),
            &got,
            &cpu.slice(&x, &dims).unwrap(),
            EXACT,
        );
        let got = gpu.download(&gpu.expand(&gy, &[2, 4, 3]).unwrap()).unwrap();
        close(
            &format!("expand {d}"),
            &got,
            &cpu.expand(&y, &[2, 4, 3]).unwrap(),
            EXACT,
        );
        let got = gpu.download(&gpu.concat(&[&gx, &gx], 1).unwrap()).unwrap();
        close(
            &format!("concat {d}"),
            &got,
            &cpu.concat(&[&x, &x], 1).unwrap(),
            EXACT,
        );
        let idx = Tensor::i64(&[2, 2], vec![0, -1, 3, 1]).unwrap();
        let got = gpu
            .download(&gpu.gather(&gx, &gpu.upload(&idx).unwrap(), 1).unwrap())
            .unwrap();
        close(
            &format!("gather {d}"),
            &got,
            &cpu.gather(&x, &idx, 1).unwrap(),
            EXACT,
        );
        // Host-routed primitives still give the CPU's answers.
        let got = gpu.download(&gpu.cast(&gx, DType::F32).unwrap()).unwrap();
        close(
            &format!("cast {d}"),
            &got,
            &cpu.cast(&x, DType::F32).unwrap(),
            EXACT,
        );
        let got = gpu.download(&gpu.trilu(&gx, 0, true).unwrap()).unwrap();
        close(
            &format!("trilu {d}"),
            &got,
            &cpu.trilu(&x, 0, true).unwrap(),
            EXACT,
        );
        let got = gpu
            .download(
                &gpu.reduce(engine::backend::ReduceOp::Sum, &gx, &[1], true)
                    .unwrap(),
            )
            .unwrap();
        close(
            &format!("reduce {d}"),
            &got,
            &cpu.reduce(engine::backend::ReduceOp::Sum, &x, &[1], true)
                .unwrap(),
            EXACT,
        );
    }
}

fn tiny_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    tiny::write_package(dir.path(), 0, &TinyConfig::default()).unwrap();
    dir
}

fn cpu_greedy(package: &Package, prompt: &[u32], n: usize) -> Vec<u32> {
    let s = Session::new(package, CpuBackend::new(0).unwrap()).unwrap();
    s.generate(prompt, &opts(n), false).unwrap().generated_ids
}

fn opts(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        eos_token_ids: Vec::new(),
        use_kv_cache: true,
        sampling: Default::default(),
    }
}

#[test]
fn tiny_greedy_tokens_match_the_cpu_on_both_cuda_paths() {
    if skip() {
        return;
    }
    let dir = tiny_dir();
    let package = Package::open(dir.path()).unwrap();
    let prompt = [5u32, 17, 42, 99, 3];
    let want = cpu_greedy(&package, &prompt, 40);
    // The generic executor on CudaBackend.
    let s = Session::new(&package, CudaBackend::new().unwrap()).unwrap();
    assert_eq!(
        s.generate(&prompt, &opts(40), false).unwrap().generated_ids,
        want,
        "executor on cuda"
    );
    for graph in [false, true] {
        let mut dec = LlamaDecoder::new(&package, graph).unwrap();
        for run in 0..2 {
            let got = dec.generate(&prompt, 40).unwrap().generated_ids;
            assert_eq!(got, want, "fused decoder, graph={graph}, run {run}");
        }
        let g = dec.graph_stats();
        println!("tiny graph={graph}: {g:?}");
        if graph {
            assert_eq!((g.captures, g.fallbacks), (1, 0), "{g:?}");
        }
    }
}

/// The generic executor on the GPU with its decode step captured (`--generic` on a package the
/// fused path knows): the CPU's greedy tokens, for several decodes that share one window and one
/// that needs another; one capture per window, every later step a replay, no fallback; without
/// graphs the same tokens and no capture. A trace reports every op of the step as captured or
/// folded, none on the host.
#[test]
fn tiny_generic_decoder_captures_its_step_and_matches_the_cpu() {
    if skip() {
        return;
    }
    let dir = tiny_dir();
    let package = Package::open(dir.path()).unwrap();
    let prompt = [5u32, 17, 42, 99, 3];
    let want = cpu_greedy(&package, &prompt, 40);
    let long: Vec<u32> = (0..70u32).map(|i| (i * 37 + 11) % 500 + 5).collect();
    let want_long = cpu_greedy(&package, &long, 30);
    let mut dec = engine::decode::cuda_decoder(&package, true, true).unwrap();
    for run in 0..3 {
        let got = dec.decode(&prompt, 40).unwrap().generated_ids;
        assert_eq!(got, want, "generic, graph, run {run}");
    }
    let (g, _) = dec.device_stats();
    let g = g.unwrap();
    println!("generic graph: {g:?}");
    assert_eq!((g.captures, g.fallbacks), (1, 0), "{g:?}");
    // 39 steps per run: specialise, probe, then captured; later runs replay from step one.
    assert_eq!(g.replays, 37 + 39 + 39, "{g:?}");
    // A longer request: a window of another length, captured once more.
    assert_eq!(dec.decode(&long, 30).unwrap().generated_ids, want_long);
    let (g, _) = dec.device_stats();
    assert_eq!((g.as_ref().unwrap().captures, g.unwrap().fallbacks), (2, 0));

    let mut eager = engine::decode::cuda_decoder(&package, false, true).unwrap();
    assert_eq!(eager.decode(&prompt, 40).unwrap().generated_ids, want);
    let (g, _) = eager.device_stats();
    assert_eq!(g.unwrap().captures, 0);

    dec.set_trace(true).unwrap();
    assert_eq!(
        dec.decode(&prompt, 40).unwrap().generated_ids,
        want,
        "traced"
    );
    let t = dec.trace().unwrap();
    let c = t.capture.unwrap();
    println!("{}", c.graph);
    assert!(c.graph.contains("one CUDA graph"), "{}", c.graph);
    let host: Vec<_> = c.ops.iter().flat_map(|o| o.host.clone()).collect();
    assert!(host.is_empty(), "{host:?}");
    let count = |f: fn(&engine::session::OpCapture) -> usize| c.ops.iter().map(f).sum::<usize>();
    assert!(count(|o| o.captured) > 0 && count(|o| o.folded) > 0);
    let shape = c.ops.iter().find(|o| o.op_type == "Shape").unwrap();
    assert_eq!(
        shape.captured, 0,
        "Shape is folded for the window: {shape:?}"
    );
}

/// A prompt longer than one batched-prefill chunk (4096 rows) and than many 256-key attention
/// splits: the chunked prefill, the split (flash-decoding) attention and its combine, and the
/// cache growing past several 1024-position steps, against the CPU's greedy tokens. The tiny
/// package says 2048 positions; this copy of it says 8192.
#[test]
fn tiny_long_prompt_matches_the_cpu() {
    if skip() {
        return;
    }
    let dir = tiny_dir();
    let cfg = dir.path().join("genai_config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("\"context_length\": 2048"), "{text}");
    std::fs::write(
        &cfg,
        text.replace("\"context_length\": 2048", "\"context_length\": 8192"),
    )
    .unwrap();
    let package = Package::open(dir.path()).unwrap();
    let prompt: Vec<u32> = (0..4500u32).map(|i| (i * 7919 + 13) % 500 + 5).collect();
    let want = cpu_greedy(&package, &prompt, 24);
    for graph in [false, true] {
        let mut dec = LlamaDecoder::new(&package, graph).unwrap();
        let got = dec.generate(&prompt, 24).unwrap().generated_ids;
        assert_eq!(got, want, "fused decoder, graph={graph}, 4500-token prompt");
        // A short prompt after the long one: the cache and split counters start clean.
        let short = [5u32, 17, 42, 99, 3];
        let want_short = cpu_greedy(&package, &short, 24);
        assert_eq!(
            dec.generate(&short, 24).unwrap().generated_ids,
            want_short,
            "graph={graph}, short prompt after the long one"
        );
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Runs every golden of `model` through the fused decoder on `dir`; returns lines of findings
/// and the number of exact (full-length) agreements.
fn golden_cases(model: &str, dir: &Path, graph: bool, f16: bool) -> (Vec<String>, usize, usize) {
    let gdir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../goldens")
        .join(model);
    let package = Package::open(dir).unwrap();
    let mut dec = LlamaDecoder::new(&package, graph).unwrap();
    let mut lines = Vec::new();
    let (mut agree, mut total) = (0, 0);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&gdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let g: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let want = ids(&g["generated_ids"]);
        let got = dec
            .generate(&ids(&g["prompt_ids"]), want.len())
            .unwrap()
            .generated_ids;
        total += 1;
        let case = f.file_stem().unwrap().to_string_lossy().into_owned();
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => {
                agree += 1;
                lines.push(format!(
                    "{model}/{case} graph={graph} f16={f16}: {} / {} tokens identical",
                    want.len(),
                    want.len()
                ));
            }
            Some(i) => {
                let top = &g["steps"][i]["top"];
                let margin = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
                let near = margin < if f16 { 0.25 } else { 0.01 };
                lines.push(format!(
                    "{model}/{case} graph={graph} f16={f16}: first divergence at token {i} of {} (golden {} vs cuda {}); golden top-2 margin there {margin:.4} => {}",
                    want.len(), want[i], got[i], if near { "near-tie" } else { "REAL divergence" }
                ));
            }
        }
    }
    let g = dec.graph_stats();
    lines.push(format!("{model} graph={graph} f16={f16}: counters {g:?}"));
    (lines, agree, total)
}

#[test]
fn goldens_on_the_fused_decoder() {
    if skip() {
        return;
    }
    let tiny = tiny_dir();
    let mut failures = Vec::new();
    for graph in [false, true] {
        let (lines, agree, total) = golden_cases("tiny", tiny.path(), graph, false);
        lines.iter().for_each(|l| println!("{l}"));
        if agree != total {
            failures.push(format!("tiny graph={graph}: {agree}/{total}"));
        }
    }
    let cache = convert::cache_dir();
    let f32_dir = convert::smollm2_dir(&cache, DType::F32);
    let f16_dir = convert::smollm2_dir(&cache, DType::F16);
    if !f32_dir.is_dir() {
        // The CPU goldens test provisions SmolLM2; here its absence must not look like a pass.
        panic!(
            "SmolLM2 not provisioned at {}: run `engine fetch smollm2`",
            f32_dir.display()
        );
    }
    for graph in [false, true] {
        let (lines, agree, total) = golden_cases("smollm2-135m-instruct", &f32_dir, graph, false);
        lines.iter().for_each(|l| println!("{l}"));
        if agree != total {
            failures.push(format!("smollm2 f32 graph={graph}: {agree}/{total}"));
        }
    }
    if f16_dir.is_dir() {
        let (lines, agree, total) = golden_cases("smollm2-135m-instruct", &f16_dir, true, true);
        lines.iter().for_each(|l| println!("{l}"));
        println!("smollm2 f16: {agree}/{total} cases identical to the f32 goldens (report only)");
    }
    assert!(failures.is_empty(), "{failures:?}");
}
