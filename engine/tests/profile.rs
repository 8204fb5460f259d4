//! `engine profile` on the tiny model: the `engine-profile/1` JSON has every contract field with
//! the right types, its greedy ids equal `engine generate`'s, and bad requests fail clearly.

use std::path::Path;
use std::process::Command;

use engine::tiny::{self, TinyConfig};
use serde_json::Value;

fn engine() -> Command {
    Command::new(env!("CARGO_BIN_EXE_engine"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run engine");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn tiny_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    tiny::write_package(dir.path(), 0, &TinyConfig::default()).unwrap();
    dir
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn profile_json(dir: &Path, extra: &[&str]) -> Value {
    let out = run_ok(
        engine()
            .args(["profile", "--model"])
            .arg(dir)
            .args(["--ep", "cpu", "--dtype", "f32", "--prompt", "hello world"])
            .args(["--tokens", "12", "--warmups", "1", "--runs", "3"])
            .args(["--decode-skip", "2", "--threads", "1", "--json"])
            .args(extra),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn profile_json_follows_the_contract_and_matches_generate() {
    let dir = tiny_dir();
    let v = profile_json(dir.path(), &[]);
    assert_eq!(v["schema"], "engine-profile/1");
    assert_eq!(v["model"], dir.path().display().to_string());
    let sha = engine::package::Package::open(dir.path())
        .unwrap()
        .model
        .sha256()
        .unwrap();
    assert_eq!(v["model_sha256"], sha.as_str());
    assert_eq!(v["ep"], "cpu");
    assert_eq!(v["dtype"], "f32");
    assert_eq!(v["threads"], 1);
    assert_eq!(v["layers"], TinyConfig::default().layers as u64);
    assert!(!ids(&v["prompt_ids"]).is_empty());
    let generated = ids(&v["generated_ids"]);
    assert_eq!(generated.len(), 12, "exactly --tokens ids, EOS ignored");
    assert!(v["prefill_ms"].as_f64().unwrap() > 0.0);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for r in runs {
        let ms = r["ms_per_step"].as_f64().unwrap();
        let tok_s = r["tok_s"].as_f64().unwrap();
        assert!(ms > 0.0 && (tok_s * ms / 1e3 - 1.0).abs() < 1e-9, "{r}");
    }
    let med = v["median_ms_per_step"].as_f64().unwrap();
    let mut ms: Vec<f64> = runs
        .iter()
        .map(|r| r["ms_per_step"].as_f64().unwrap())
        .collect();
    ms.sort_by(f64::total_cmp);
    assert_eq!(med, ms[1]);
    assert!(v["median_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["cuda_graph"].is_null(), "null on cpu");
    assert!(v["device_kv"].is_null(), "null on cpu");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for k in [
        "schema",
        "model",
        "model_sha256",
        "ep",
        "dtype",
        "threads",
        "layers",
        "prompt_ids",
        "generated_ids",
        "prefill_ms",
        "runs",
        "median_ms_per_step",
        "median_tok_s",
        "cuda_graph",
        "device_kv",
    ] {
        assert!(keys.contains(&k), "missing key {k} in {v}");
    }

    // The same greedy ids as `engine generate` (which stops on EOS unless told not to).
    let g: Value = serde_json::from_str(
        run_ok(
            engine()
                .args(["generate", "--model"])
                .arg(dir.path())
                .args(["--prompt", "hello world", "--max-tokens", "12"])
                .args(["--ignore-eos", "--threads", "1", "--json"]),
        )
        .trim(),
    )
    .unwrap();
    assert_eq!(ids(&g["generated_ids"]), generated);
    assert_eq!(ids(&g["prompt_ids"]), ids(&v["prompt_ids"]));

    // --prompt-ids gives the same run.
    let list: Vec<String> = ids(&v["prompt_ids"]).iter().map(u64::to_string).collect();
    let out = run_ok(
        engine()
            .args(["profile", "--model"])
            .arg(dir.path())
            .args(["--prompt-ids", &list.join(","), "--tokens", "12"])
            .args(["--warmups", "0", "--runs", "1", "--threads", "1", "--json"]),
    );
    let w: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&w["generated_ids"]), generated);
}

#[test]
fn profile_text_output_reports_throughput() {
    let dir = tiny_dir();
    let out = run_ok(
        engine()
            .args(["profile", "--model"])
            .arg(dir.path())
            .args(["--prompt", "hi", "--tokens", "4", "--runs", "1"])
            .args(["--warmups", "0", "--threads", "1"]),
    );
    assert!(
        out.contains("throughput: ") && out.contains(" tok/s, "),
        "{out}"
    );
    assert!(out.contains(" ms/step"), "{out}");
    assert!(!out.contains("cuda_graph"), "{out}");
}

fn fails_with(cmd: &mut Command, needle: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
    assert!(err.contains(needle), "{cmd:?}: want {needle:?} in {err}");
}

#[test]
fn profile_rejects_a_dtype_other_than_the_packages() {
    let dir = tiny_dir();
    fails_with(
        engine()
            .args(["profile", "--model"])
            .arg(dir.path())
            .args(["--dtype", "f16", "--prompt", "hi", "--tokens", "4"]),
        "--dtype f16 does not match the package's dtype f32",
    );
    fails_with(
        engine().args(["profile", "--model"]).arg(dir.path()).args([
            "--prompt",
            "hi",
            "--tokens",
            "4",
            "--decode-skip",
            "3",
        ]),
        "--decode-skip 3 leaves no timed step",
    );
}

#[cfg(not(feature = "cuda"))]
#[test]
fn profile_cuda_without_the_feature_is_a_clear_error() {
    let dir = tiny_dir();
    fails_with(
        engine()
            .args(["profile", "--model"])
            .arg(dir.path())
            .args(["--ep", "cuda", "--prompt", "hi", "--tokens", "4"]),
        "engine was built without the `cuda` feature",
    );
}

/// `engine profile --serve` through the real binary: `ready`, one `run` answer per request with
/// the same tokens as a plain profile, and at end of input the `engine-profile/1` report of the
/// served runs; a request that is not `run` fails with it named.
#[test]
fn profile_serve_answers_each_run_request_then_reports_the_served_runs() {
    use std::io::Write;
    let dir = tiny_dir();
    let plain = profile_json(dir.path(), &[]);
    let mut child = engine()
        .args(["profile", "--model"])
        .arg(dir.path())
        .args(["--ep", "cpu", "--prompt", "hello world", "--tokens", "12"])
        .args([
            "--warmups",
            "1",
            "--decode-skip",
            "2",
            "--threads",
            "1",
            "--serve",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"run\nrun\nrun\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "engine-profile-serve ready", "{text}");
    assert_eq!(lines.len(), 5, "ready, 3 runs, done: {text}");
    for l in &lines[1..4] {
        let json = l.strip_prefix("engine-profile-serve run ").expect(l);
        let v: Value = serde_json::from_str(json).unwrap();
        assert_eq!(ids(&v["generated_ids"]), ids(&plain["generated_ids"]));
        assert!(v["prefill_ms"].as_f64().unwrap() > 0.0);
        assert!(v["ms_per_step"].as_f64().unwrap() > 0.0);
    }
    let done = lines[4]
        .strip_prefix("engine-profile-serve done ")
        .expect(lines[4]);
    let v: Value = serde_json::from_str(done).unwrap();
    assert_eq!(v["schema"], "engine-profile/1");
    assert_eq!(v["runs"].as_array().unwrap().len(), 3);
    assert_eq!(ids(&v["generated_ids"]), ids(&plain["generated_ids"]));

    let mut child = engine()
        .args(["profile", "--model"])
        .arg(dir.path())
        .args(["--prompt", "hello world", "--tokens", "4", "--serve"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected `run`, got \"go\""), "{err}");
}

/// `--trace`: where a CPU decode step goes, op type by op type. The ops and the time outside
/// them add up to the step; every decode step of the timed runs is counted; tracing changes no
/// token; the text names MatMul and the outside time; `--trace --json` is refused.
#[test]
fn trace_accounts_for_every_decode_step_and_changes_no_token() {
    let dir = tiny_dir();
    let opts = |trace| engine::profile::ProfileOptions {
        model: dir.path().to_path_buf(),
        ep: engine::profile::Ep::Cpu,
        dtype: None,
        prompt: engine::profile::Prompt::Text("hello world".into()),
        tokens: 12,
        warmups: 1,
        runs: 3,
        decode_skip: 2,
        threads: 2,
        cuda_graph: true,
        generic: false,
        trace,
    };
    let (plain, none) = engine::profile::profile_traced(&opts(false)).unwrap();
    assert!(none.is_none());
    let (traced, t) = engine::profile::profile_traced(&opts(true)).unwrap();
    let t = t.expect("a trace");
    assert_eq!(traced.generated_ids, plain.generated_ids);
    // 3 timed runs of 11 decode steps (the skipped ones are traced too: they are steps).
    assert_eq!(t.steps, 33);
    let in_ops: f64 = t.ops.iter().map(|o| o.ms_per_run).sum();
    assert!(
        t.ops.iter().all(|o| o.ms_per_run >= 0.0 && o.nodes > 0),
        "{t:?}"
    );
    assert!(t.outside_ms_per_step >= 0.0, "{t:?}");
    assert!(
        (in_ops + t.outside_ms_per_step - t.ms_per_step).abs() < 1e-9,
        "{t:?}"
    );
    let matmul = t
        .ops
        .iter()
        .find(|o| o.op_type == "MatMul")
        .expect("MatMul");
    assert!(matmul.ms_per_run > 0.0);
    assert!(t.slowest_other.iter().all(|(_, op, _)| op != "MatMul"));
    let text = engine::profile::render_trace(&t);
    assert!(text.starts_with("trace: 33 decode steps"), "{text}");
    assert!(
        text.contains("MatMul") && text.contains("(outside the ops)"),
        "{text}"
    );

    let out = engine()
        .args(["profile", "--model"])
        .arg(dir.path())
        .args(["--prompt", "hi", "--trace", "--json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
