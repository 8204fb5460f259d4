//! The build stage: `cargo bench --no-run --message-format=json-render-diagnostics` in a
//! revision's worktree with that revision's own persistent target dir (linked through
//! `placement`'s wrapper), collecting the bench executables from cargo's JSON messages. A failed
//! build is a value ([`ProcessFailure`], with the compiler's last lines), never a crash of the
//! gate.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::config::Config;
use crate::progress::Progress;
use crate::results::Failure;
use crate::vocab::{ProcessFailure, Side, Stage};

/// How many lines of compiler output a failure keeps.
pub const LOG_TAIL_LINES: usize = 30;

/// The bench executables of one revision, by `[[bench]]` target name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BenchExes {
    pub by_target: BTreeMap<String, PathBuf>,
}

/// What to build.
#[derive(Clone)]
pub struct BuildRequest<'a> {
    /// The worktree (cargo runs there).
    pub dir: &'a Path,
    /// The revision's persistent target dir.
    pub target_dir: &'a Path,
    pub packages: &'a [String],
    /// Bench target names to build (empty: every bench target of the packages).
    pub benches: &'a [String],
    /// Where cargo's stderr goes line by line (progress), besides being kept for the failure.
    pub on_line: &'a (dyn Fn(&str) + Sync),
    /// How long the build may take (`deadlines.build_s`).
    pub deadline: Duration,
}

/// Builds the bench executables. Bench targets that the suite names but the revision lacks are
/// simply absent from the result (they show up as 🆕/➖), not an error — unless none at all exist.
pub fn build_benches(req: &BuildRequest<'_>) -> Result<BenchExes, ProcessFailure> {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(req.dir)
        .arg("bench")
        .arg("--no-run")
        .arg("--message-format=json-render-diagnostics");
    for p in req.packages {
        cmd.arg("-p").arg(p);
    }
    // Only the targets that exist in this revision can be named; cargo errors on unknown ones.
    let existing = existing_bench_targets(req.dir, req.packages);
    let wanted: Vec<&String> = if req.benches.is_empty() {
        Vec::new()
    } else {
        req.benches
            .iter()
            .filter(|b| existing.as_ref().is_none_or(|e| e.contains(*b)))
            .collect()
    };
    if !req.benches.is_empty() && wanted.is_empty() {
        return Ok(BenchExes::default());
    }
    for b in &wanted {
        cmd.arg("--bench").arg(b);
    }
    let (stdout, _) = run_cargo(
        cmd,
        "cargo bench --no-run",
        req.dir,
        req.target_dir,
        req.on_line,
        req.deadline,
    )?;
    Ok(parse_cargo_messages(&stdout))
}

/// The `engine` and `oracle` executables of one revision.
#[derive(Clone, Debug, PartialEq)]
pub struct E2eBins {
    pub engine: PathBuf,
    pub oracle: PathBuf,
}

/// What to build for the end-to-end checks.
#[derive(Clone)]
pub struct BinsRequest<'a> {
    pub dir: &'a Path,
    pub target_dir: &'a Path,
    /// The packages with the `engine` and `oracle` binaries.
    pub engine_package: &'a str,
    pub oracle_package: &'a str,
    /// Build the engine with its `cuda` feature (only when this revision's engine has one).
    pub cuda: bool,
    pub on_line: &'a (dyn Fn(&str) + Sync),
    /// How long the build may take (`deadlines.build_s`).
    pub deadline: Duration,
}

/// `cargo build --release --bin engine --bin oracle` in the worktree, with the same persistent
/// target dir as its benches (the bench profile inherits release, so the dependencies are built
/// once). The engine's `cuda` feature is turned on when asked and the revision has it (a revision
/// from before the CUDA backend builds without it: its CUDA checks then say so, ⏭).
pub fn build_e2e_bins(req: &BinsRequest<'_>) -> Result<E2eBins, ProcessFailure> {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(req.dir)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .args(["-p", req.engine_package, "-p", req.oracle_package])
        .args(["--bin", "engine", "--bin", "oracle"]);
    if req.cuda && package_has_feature(req.dir, req.engine_package, "cuda") {
        cmd.arg("--features")
            .arg(format!("{}/cuda", req.engine_package));
    }
    let (stdout, stderr_lines) = run_cargo(
        cmd,
        "cargo build --release --bin engine --bin oracle",
        req.dir,
        req.target_dir,
        req.on_line,
        req.deadline,
    )?;
    let bins = parse_bin_messages(&stdout);
    match (bins.get("engine"), bins.get("oracle")) {
        (Some(e), Some(o)) => Ok(E2eBins {
            engine: e.clone(),
            oracle: o.clone(),
        }),
        _ => Err(ProcessFailure {
            message: format!(
                "cargo built no `engine` and `oracle` executables in {}",
                req.dir.display()
            ),
            log_tail: tail(&stderr_lines, LOG_TAIL_LINES),
        }),
    }
}

/// Runs a prepared cargo command (`what`, for the error) in `dir` with `target_dir` as its target
/// dir and returns its stdout (cargo's JSON messages) and stderr lines; stderr is streamed line by
/// line to `on_line`, and its tail goes into the failure when cargo exits non-zero.
/// A build past `deadline` is killed with its compilers (`crate::process`).
fn run_cargo(
    mut cmd: Command,
    what: &str,
    dir: &Path,
    target_dir: &Path,
    on_line: &(dyn Fn(&str) + Sync),
    deadline: Duration,
) -> Result<(String, Vec<String>), ProcessFailure> {
    // Every build of a slot links through the placement wrapper (it keeps each executable's
    // link recipe; `crate::placement` says why always): the same linker for the benches and
    // the e2e binaries, which share the target dir and cargo's fingerprints.
    if let Some(w) =
        crate::placement::harness_exe().and_then(|h| crate::placement::wrapper(target_dir, dir, h))
    {
        cmd.envs(crate::placement::cargo_env(&w));
    }
    crate::process::own_group(&mut cmd)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| ProcessFailure {
        message: format!("cannot run cargo in {}: {e}", dir.display()),
        log_tail: Vec::new(),
    })?;
    let watch = crate::process::Deadline::watch(&child, deadline);
    let stderr = child.stderr.take().expect("piped");
    let (stdout, stderr_lines) = std::thread::scope(|s| {
        let err = s.spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                on_line(&line);
                lines.push(line);
            }
            lines
        });
        let mut stdout = String::new();
        let _ = child
            .stdout
            .take()
            .expect("piped")
            .read_to_string(&mut stdout);
        (stdout, err.join().unwrap_or_default())
    });
    let status = child.wait().map_err(|e| ProcessFailure {
        message: format!("cargo in {}: {e}", dir.display()),
        log_tail: Vec::new(),
    })?;
    if watch.fired() {
        return Err(ProcessFailure {
            message: watch.message(&format!("`{what}` in {}", dir.display()), "build_s"),
            log_tail: tail(&stderr_lines, LOG_TAIL_LINES),
        });
    }
    if !status.success() {
        return Err(ProcessFailure {
            message: format!("`{what}` failed in {} ({status})", dir.display()),
            log_tail: tail(&stderr_lines, LOG_TAIL_LINES),
        });
    }
    Ok((stdout, stderr_lines))
}

/// Whether `package` in the workspace at `dir` declares `feature` (from `cargo metadata`).
fn package_has_feature(dir: &Path, package: &str, feature: &str) -> bool {
    cargo_metadata(dir).is_some_and(|v| {
        v["packages"].as_array().is_some_and(|ps| {
            ps.iter()
                .any(|p| p["name"] == package && p["features"].get(feature).is_some())
        })
    })
}

/// `cargo metadata --no-deps` of the workspace at `dir` (None when cargo fails: the build that
/// follows reports cargo's own error).
fn cargo_metadata(dir: &Path) -> Option<serde_json::Value> {
    // `--no-deps` reads only the workspace's manifests: seconds at most.
    let (out, _) = crate::process::output(
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(dir)
            .args(["metadata", "--format-version", "1", "--no-deps"]),
        Duration::from_secs(120),
    )
    .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The `bin` executables in cargo's `--message-format=json` stdout, by target name.
pub fn parse_bin_messages(stdout: &str) -> BTreeMap<String, PathBuf> {
    artifacts(stdout, "bin")
}

/// The executables of targets of `kind` ("bin", "bench") among cargo's `compiler-artifact`
/// messages, by target name.
fn artifacts(stdout: &str, kind: &str) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let of_kind = v["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == kind));
        if let (true, Some(exe), Some(name)) = (
            of_kind,
            v["executable"].as_str(),
            v["target"]["name"].as_str(),
        ) {
            out.insert(name.to_string(), PathBuf::from(exe));
        }
    }
    out
}

/// The `[[bench]]` target names of `packages` in the workspace at `dir`, from `cargo metadata`
/// (None if cargo metadata fails: then cargo's own error is reported by the build).
fn existing_bench_targets(dir: &Path, packages: &[String]) -> Option<Vec<String>> {
    let v = cargo_metadata(dir)?;
    let mut names = Vec::new();
    for p in v["packages"].as_array()? {
        if !packages.iter().any(|n| p["name"] == n.as_str()) {
            continue;
        }
        for t in p["targets"].as_array()? {
            if t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bench"))
            {
                names.push(t["name"].as_str()?.to_string());
            }
        }
    }
    Some(names)
}

/// The bench executables in cargo's `--message-format=json` stdout.
pub fn parse_cargo_messages(stdout: &str) -> BenchExes {
    BenchExes {
        by_target: artifacts(stdout, "bench"),
    }
}

pub fn tail(lines: &[String], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Builds one side's bench executables, reporting to `progress`; a failure is that side's
/// ⛔ row.
pub fn build_side(
    side: Side,
    dir: &Path,
    target_dir: &Path,
    config: &Config,
    targets: &[String],
    progress: &dyn Progress,
) -> Result<BenchExes, Failure> {
    progress.stage(&format!("building {side} in {}", dir.display()));
    let on_line = |l: &str| progress.line(l);
    build_benches(&BuildRequest {
        dir,
        target_dir,
        packages: &config.packages,
        benches: targets,
        on_line: &on_line,
        deadline: config.deadlines.build(),
    })
    .map_err(|failure| Failure {
        side,
        stage: Stage::Build,
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hung build (here a fake cargo whose "compiler" never returns) is killed with its whole
    /// process group at `deadlines.build_s`, and the failure says so with the log's tail.
    #[test]
    fn a_hung_build_is_killed_at_its_deadline_with_its_compilers() {
        let dir = tempfile::TempDir::new().unwrap();
        let pid_file = dir.path().join("rustc.pid");
        let cargo = crate::process::test_script(
            &dir.path().join("cargo"),
            &format!(
                "#!/bin/sh\n[ $# -eq 0 ] && exit 0\necho '   Compiling engine v0.1.0' >&2\n\
                 sleep 600 & echo $! > '{}'\nwait\n",
                pid_file.display()
            ),
        );
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "--release"]);
        let start = std::time::Instant::now();
        let err = run_cargo(
            cmd,
            "cargo build",
            dir.path(),
            &dir.path().join("target"),
            &|_| {},
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert!(
            err.message.contains("timed out after 1 s") && err.message.contains("build_s"),
            "{}",
            err.message
        );
        assert_eq!(err.log_tail, ["   Compiling engine v0.1.0"]);
        // The "compiler" (a grandchild) went with it, not left running.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let alive = || {
            std::fs::read_to_string(&stat)
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        };
        for _ in 0..100 {
            if !alive() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(), "the grandchild {} still runs", pid.trim());
    }

    #[test]
    fn finds_bench_executables_only() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"engine"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["bench"],"name":"kernels"},"executable":"/t/release/deps/kernels-abc"}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"engine"},"executable":"/t/release/engine"}
not json
{"reason":"build-finished","success":true}"#;
        let exes = parse_cargo_messages(msgs);
        assert_eq!(exes.by_target.len(), 1);
        assert_eq!(
            exes.by_target["kernels"],
            PathBuf::from("/t/release/deps/kernels-abc")
        );
    }

    #[test]
    fn finds_the_engine_and_oracle_binaries() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"engine"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"engine"},"executable":"/t/release/engine"}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"oracle"},"executable":"/t/release/oracle"}"#;
        let bins = parse_bin_messages(msgs);
        assert_eq!(bins.len(), 2);
        assert_eq!(bins["oracle"], PathBuf::from("/t/release/oracle"));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let lines: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        assert_eq!(tail(&lines, 3), vec!["47", "48", "49"]);
        assert_eq!(tail(&lines[..2], 3), vec!["0", "1"]);
    }
}
