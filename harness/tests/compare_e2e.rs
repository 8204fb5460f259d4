//! End to end on a throwaway repository: a tiny crate with three criterion benches and commits
//! where one bench gets 2× slower, one 2× faster, one stays the same, plus a commit that does not
//! compile. Runs the real `harness` binary (real worktree slots, real cargo builds, real
//! criterion runs, each round's executables relinked in a function order of its own) and checks
//! statuses, exit codes under each `--fail-on` policy, calibration, and that the repository is
//! left exactly as it was (no worktree, no branch, clean status).
//! Then the pre-push hook on the same repository, with the real `git push` to a local bare
//! remote: the installed hook runs the real `harness compare --suite quick`; it blocks the push
//! of a 2× regression (the remote keeps its commit) and lets an unchanged commit through;
//! `--no-verify` skips it; a hook that is not ours is neither overwritten without `--force` nor
//! removed by uninstall.
//!
//! One test function, one repository, on purpose: the builds dominate (criterion is compiled
//! once per worktree slot, and the slots' target dirs belong to the repository), so every later
//! comparison, the hook's included, reuses the warm slot target dirs. Two repositories cost two
//! more cold criterion builds of CI's 30-minute budget.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use git2::{Repository, Signature};
use harness::results::{Outcome, Results, Status};
use harness::vocab::{Side, Stage};

mod common;
use common::{BENCH, CARGO_TOML, bench_per_request, lib_rs};

const HARNESS_YAML: &str = r#"packages: [fixture]
default_branch: main
default_suite: full
criterion:
  warm_up_s: 0.1
  measurement_s: 0.3
  sample_size: 10
  nresamples: 500
policy:
  rounds: 6
  confirmation_rounds: 6
  # The test calibrates with 3 trials (5 by default) to keep CI short.
  profile_min_trials: 3
affinity:
  pin: one_cpu
# Real callgrind runs of the fixture's serve loop (tools/valgrind.sh installs valgrind in CI).
instructions:
  count: true
  # Every row, so the unchanged bench's count is checked too (the default counts ❔/⚠️/🔴 only).
  rows: all
suites:
  # What the pre-push hook runs: two of the three benches, fewer rounds.
  quick:
    rounds: 4
    benches:
      work: ['^work/(slow|same)/']
  full:
    benches:
      work: []
"#;

const FOREIGN_HOOK: &str = "#!/bin/sh\n# someone else's hook\nexit 0\n";

struct Fixture {
    dir: tempfile::TempDir,
    root: PathBuf,
    /// The cache root (`--cache-dir`, and `HARNESS_CACHE_DIR` for the hook).
    cache: PathBuf,
    remote: PathBuf,
    repo: Repository,
}

impl Fixture {
    fn commit(&self, lib: &str, msg: &str) -> String {
        std::fs::write(self.root.join("src/lib.rs"), lib).unwrap();
        let mut index = self.repo.index().unwrap();
        index
            .add_all(["*"].iter(), git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.write().unwrap();
        let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parent = self.repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        self.repo
            .commit(Some("HEAD"), &sig, &sig, msg, &tree, &parents)
            .unwrap()
            .to_string()
    }

    /// Runs the harness; `repo_args` adds `--repo` and `--cache-dir` (compare, calibrate).
    fn harness(&self, args: &[&str], repo_args: bool) -> (i32, String, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_harness"));
        cmd.args(args).env("NO_COLOR", "1");
        if repo_args {
            cmd.arg("--repo")
                .arg(&self.root)
                .arg("--cache-dir")
                .arg(&self.cache);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `git` in the fixture repository, isolated from the user's and the system's git config (a
    /// global core.hooksPath would move the hooks).
    fn git_cmd<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&self, args: I) -> Command {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&self.root)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .env("NO_COLOR", "1")
            .env("HARNESS_CACHE_DIR", &self.cache);
        cmd
    }

    fn git(&self, args: &[&str]) -> String {
        let out = self.git_cmd(args).output().unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    fn push(&self, extra: &[&str]) -> Output {
        self.git_cmd(["push", "origin", "main"].iter().chain(extra))
            .output()
            .unwrap()
    }

    fn remote_main(&self) -> String {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&self.remote)
            .args(["rev-parse", "refs/heads/main"])
            .output()
            .unwrap();
        text(&out.stdout).trim().to_string()
    }

    /// `harness hook ...` with a HOME of its own, so libgit2 reads no global core.hooksPath.
    fn hook(&self, args: &[&str]) -> (i32, String, String) {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .arg("hook")
            .args(args)
            .current_dir(&self.root)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &home)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }

    fn compare(&self, base: &str, head: &str, out: &Path, fail_on: &str) -> (i32, Results, String) {
        self.compare_with(base, head, out, fail_on, Some("--no-profile"))
    }

    fn compare_with(
        &self,
        base: &str,
        head: &str,
        out: &Path,
        fail_on: &str,
        profile_flag: Option<&str>,
    ) -> (i32, Results, String) {
        let (code, _stdout, stderr) = self.harness(
            &[
                "compare",
                "--base",
                base,
                "--head",
                head,
                "--format",
                "md",
                // `--rounds=6` (the fixture's policy.rounds) is a no-op filler when no profile
                // flag is wanted.
                profile_flag.unwrap_or("--rounds=6"),
                "--fail-on",
                fail_on,
                "--out",
                out.to_str().unwrap(),
            ],
            true,
        );
        let results = std::fs::read_to_string(out.join("results.json"))
            .unwrap_or_else(|e| panic!("no results.json (exit {code}): {e}\n{stderr}"));
        (code, serde_json::from_str(&results).unwrap(), stderr)
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("benches")).unwrap();
    std::fs::write(root.join("Cargo.toml"), CARGO_TOML).unwrap();
    std::fs::write(root.join("benches/work.rs"), BENCH).unwrap();
    std::fs::write(root.join("harness.yaml"), HARNESS_YAML).unwrap();
    std::fs::write(root.join(".gitignore"), "/target\nCargo.lock\n").unwrap();
    std::fs::write(root.join("README.md"), "fixture\n").unwrap();
    let repo = Repository::init_opts(
        &root,
        git2::RepositoryInitOptions::new().initial_head("main"),
    )
    .unwrap();
    // Pinned by the repository's own config: `harness hook` (libgit2) also reads the machine's
    // system config, and a core.hooksPath there must not send the test's hooks out of its
    // temporary directory. (The unset case is covered by the unit tests of `hook`.)
    let hooks = root.join(".git/hooks");
    repo.config()
        .unwrap()
        .set_str("core.hooksPath", hooks.to_str().unwrap())
        .unwrap();
    let cache = dir.path().join("cache");
    let remote = dir.path().join("remote.git");
    Repository::init_bare(&remote).unwrap();
    repo.remote("origin", remote.to_str().unwrap()).unwrap();
    Fixture {
        dir,
        root,
        cache,
        remote,
        repo,
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(unix)]
fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn status_of(r: &Results, id: &str) -> Status {
    r.benches
        .iter()
        .find(|b| b.id == id)
        .unwrap_or_else(|| {
            panic!(
                "no benchmark {id} in {:?}",
                r.benches.iter().map(|b| &b.id).collect::<Vec<_>>()
            )
        })
        .status
}

/// Whether some round started with a 1-minute load at or above the core count.
fn loaded(r: &Results) -> bool {
    r.rounds
        .iter()
        .any(|x| x.load_avg[0] >= r.host.cores as f64)
}

fn branches(repo: &Repository) -> Vec<String> {
    repo.branches(None)
        .unwrap()
        .map(|b| b.unwrap().0.name().unwrap().unwrap().to_string())
        .collect()
}

#[test]
fn compare_end_to_end_on_a_throwaway_repository() {
    let f = fixture();
    let base = f.commit(&lib_rs(20_000, 20_000, 20_000), "base");
    // The head's serve loop answers each request in a function of its own, so its instructions
    // are counted in one process; the base's has none and is counted a process per sample.
    // Both ways must agree on the unchanged bench.
    std::fs::write(f.root.join("benches/work.rs"), bench_per_request()).unwrap();
    let head = f.commit(
        &lib_rs(40_000, 10_000, 20_000),
        "slow 2x slower, fast 2x faster; serve loop per request",
    );
    let broken = f.commit("pub fn spin(n: u64) -> u64 { n +* }\n", "does not compile");
    let branches_before = branches(&f.repo);
    let runs = f.dir.path().join("runs");

    // Base vs head: 🔴 / 🟢 / ✅, exit 1 under fail-on red.
    let (code, r, stderr) = f.compare(&base, &head, &runs.join("ab"), "red");
    assert_eq!(status_of(&r, "work/slow/x"), Status::Regression, "{stderr}");
    assert_eq!(status_of(&r, "work/fast/x"), Status::Improvement);
    // Unchanged is ✅. On a machine loaded past its core count during the run the gate may
    // honestly answer ❔ (too noisy to tell) instead: allowed only then, and said visibly.
    match status_of(&r, "work/same/x") {
        Status::NoChange => {}
        Status::TooNoisy if loaded(&r) => {
            eprintln!("note: work/same/x was ❔ (too noisy) under load; accepted")
        }
        other => panic!("work/same/x: {other:?} (load per round: {:?})", r.rounds),
    }
    let slow = r.benches.iter().find(|b| b.id == "work/slow/x").unwrap();
    let c = slow.change.unwrap();
    assert!(
        c.estimate > 0.6 && c.estimate < 1.5,
        "2x slower measured as {c:?}"
    );
    assert!(slow.confirmed, "a 🔴 needs confirmation rounds");
    // Measured paired, sample by sample: the fixture's bench serves the protocol.
    let sampling = r.method.sampling.as_deref().unwrap_or_default();
    assert!(
        sampling.starts_with("paired") && !sampling.contains("criterion runs for"),
        "{sampling}"
    );
    assert!(
        slow.base
            .as_ref()
            .unwrap()
            .samples
            .iter()
            .all(|s| s.sampling_mode == "paired"),
        "{:?}",
        slow.base
    );
    // Every round ran both sides relinked in function orders of its own (placement.sample's
    // default), through the recipes the slots' linker wrapper kept: one relink per side and
    // round at least, none failed.
    let placed = r.method.placement.as_deref().unwrap_or_default();
    assert!(
        placed.starts_with("sampled") && placed.contains("relinks") && !placed.contains("stopped"),
        "{placed}"
    );
    // Instructions per iteration beside the times, from callgrind: the slow bench does twice
    // the multiply-adds, the unchanged one the same to well under 0.1 %.
    let instr = |id: &str| {
        r.benches
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.instructions.clone())
            .unwrap_or_else(|| panic!("{id}: no instruction counts"))
    };
    let (s, same, fast) = (
        instr("work/slow/x"),
        instr("work/same/x"),
        instr("work/fast/x"),
    );
    assert!(s.error.is_none(), "{s:?}");
    let c = s.change().unwrap();
    assert!(
        (c - 1.0).abs() < 0.02,
        "slow: instructions {s:?} change {c}"
    );
    assert!(same.change().unwrap().abs() < 0.001, "same: {same:?}");
    assert!(
        (fast.change().unwrap() + 0.5).abs() < 0.01,
        "fast: {fast:?}"
    );
    // The two ways of counting, on the executables this run built: the head's serve loop gives
    // callgrind one count per request, so three samples come back apart and the last two differ
    // by exactly n iterations of `same` (the per-iteration count the base's two processes gave);
    // the base's loop gives one total for the process.
    let vg = harness::measure::instructions::find_valgrind().expect("valgrind");
    let mut exes = Vec::new();
    for e in walkdir(&f.cache) {
        let name = e.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("work-") && !name.contains('.') && e.parent().unwrap().ends_with("deps")
        {
            exes.push(e);
        }
    }
    let work = f.dir.path().join("callgrind");
    let mut by_parts = std::collections::BTreeMap::new();
    for exe in &exes {
        let parts = harness::measure::instructions::sample_counts(
            &vg,
            exe,
            "work/same/x",
            &[64, 64, 128],
            &work,
        )
        .unwrap();
        by_parts.insert(parts.len(), parts);
    }
    assert_eq!(
        by_parts.keys().copied().collect::<Vec<_>>(),
        vec![1, 3],
        "{exes:?}: {by_parts:?}"
    );
    let p = &by_parts[&3];
    let one_process = (p[2] - p[1]) as f64 / 64.0;
    let base_same = same.base.unwrap();
    assert!(
        (one_process / base_same - 1.0).abs() < 0.001,
        "one process {one_process} per iteration, two processes {base_same}"
    );
    assert_eq!(r.outcome, Outcome::Fail);
    assert_eq!(code, 1);
    assert_eq!(r.base.sha, base);
    assert_eq!(r.head.sha, head);
    let md = std::fs::read_to_string(runs.join("ab/report.md")).unwrap();
    assert!(md.contains("🔴") && md.contains("work/slow/x"), "{md}");
    assert!(md.contains("| Instructions |"), "{md}");

    // The exit-code contract under each policy, from the saved run.
    let saved = runs.join("ab/results.json");
    let saved = saved.to_str().unwrap();
    for (policy, want) in [("red", 1), ("warn", 1), ("never", 0)] {
        let (code, out, err) = f.harness(
            &[
                "report",
                "--input",
                saved,
                "--format",
                "md",
                "--fail-on",
                policy,
            ],
            false,
        );
        assert_eq!(code, want, "report --fail-on {policy}: {err}");
        assert!(out.contains("work/slow/x"));
    }
    // A/A: no 🔴, exit 0.
    let (code, aa, stderr) = f.compare(&base, &base, &runs.join("aa"), "red");
    assert!(
        aa.benches.iter().all(|b| b.status != Status::Regression),
        "A/A flagged a regression: {:?}\n{stderr}",
        aa.benches
            .iter()
            .map(|b| (&b.id, b.status, b.change))
            .collect::<Vec<_>>()
    );
    assert_eq!(code, 0, "fail-on red passes an A/A run ({:?})", aa.outcome);

    // Calibration: A/A trials make a profile for this host; compare then says it used it and
    // takes every threshold from it: max(floor, exp(noise_k · change_rms) − 1) per benchmark,
    // checked against the profile file itself (a threshold from this run's own spread would
    // differ). Also compare's own exit status under fail-on never: 0 despite the 🔴.
    let (code, stdout, stderr) = f.harness(
        &[
            "calibrate",
            "--rev",
            &base,
            "--trials",
            "3",
            "--rounds",
            "4",
        ],
        true,
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("calibration profile for host"), "{stdout}");
    let profile_path = stdout.trim().rsplit(": ").next().unwrap().to_string();
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile_path).unwrap()).unwrap();
    let (code, r, stderr) = f.compare_with(&base, &head, &runs.join("profiled"), "never", None);
    assert_eq!(code, 0, "fail-on never exits 0 on a 🔴\n{stderr}");
    let used = r.method.profile.clone().unwrap_or_default();
    assert!(
        used.contains(&r.host.fingerprint),
        "profile not used: {used:?}\n{stderr}"
    );
    for b in &r.benches {
        let rms = profile["benches"][&b.id]["change_rms"]
            .as_f64()
            .unwrap_or_else(|| panic!("{} not in the profile: {profile}", b.id));
        let want = (2.5 * rms).exp_m1().max(0.03);
        assert!(
            (b.threshold - want).abs() < 1e-9
                && matches!(
                    b.threshold_source,
                    harness::results::ThresholdSource::Profile
                        | harness::results::ThresholdSource::Floor
                ),
            "{}: threshold {} ({:?}), the profile gives {want}",
            b.id,
            b.threshold,
            b.threshold_source
        );
    }
    assert_eq!(status_of(&r, "work/slow/x"), Status::Regression);
    let md = std::fs::read_to_string(runs.join("profiled/report.md")).unwrap();
    assert!(
        md.contains(&r.host.fingerprint),
        "the report does not name the profile"
    );

    // A head that does not compile: ⛔ with the compiler's words, gate failed (1).
    let (code, r, _) = f.compare(&base, &broken, &runs.join("broken-head"), "red");
    assert_eq!(code, 1);
    assert_eq!(r.outcome, Outcome::Fail);
    assert_eq!(r.failures.len(), 1);
    assert_eq!(r.failures[0].side, Side::Head);
    assert_eq!(r.failures[0].stage, Stage::Build);
    assert!(
        r.failures[0]
            .failure
            .log_tail
            .iter()
            .any(|l| l.contains("error")),
        "{:?}",
        r.failures[0].failure.log_tail
    );
    let md = std::fs::read_to_string(runs.join("broken-head/report.md")).unwrap();
    assert!(md.contains("⛔"), "{md}");
    // Even under fail-on never a broken base means the gate could not run (2).
    let (code, r, _) = f.compare(&broken, &base, &runs.join("broken-base"), "never");
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(code, 2);

    // Nothing left behind in the user's repository.
    assert!(
        f.repo.worktrees().unwrap().is_empty(),
        "a worktree was left registered"
    );
    assert_eq!(branches(&f.repo), branches_before);
    assert_eq!(f.repo.head().unwrap().target().unwrap().to_string(), broken);
    let statuses = f
        .repo
        .statuses(Some(git2::StatusOptions::new().include_untracked(true)))
        .unwrap();
    assert!(statuses.is_empty(), "the working tree changed");

    // A head whose slow bench never returns (2^64 steps of spin): killed at its deadline
    // (`deadlines.bench_s: 5` in a copy of the config), ⛔ with the timeout and its own row; the
    // other rows are measured and decided as usual.
    let hang = f.commit(&lib_rs(u64::MAX, 20_000, 20_000), "slow never returns");
    let config = f.dir.path().join("hang.yaml");
    std::fs::write(
        &config,
        format!("{HARNESS_YAML}\ndeadlines:\n  bench_s: 5\n"),
    )
    .unwrap();
    let out = runs.join("hang");
    let start = std::time::Instant::now();
    let (code, _, stderr) = f.harness(
        &[
            "compare",
            "--base",
            &base,
            "--head",
            &hang,
            "--config",
            config.to_str().unwrap(),
            "--no-profile",
            "--format",
            "md",
            "--fail-on",
            "red",
            "--out",
            out.to_str().unwrap(),
        ],
        true,
    );
    let took = start.elapsed();
    let r: Results =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_ne!(code, 0, "{stderr}");
    let timed_out: Vec<&str> = r
        .failures
        .iter()
        .map(|f| f.failure.message.as_str())
        .filter(|m| m.contains("work/slow/x") && m.contains("timed out after 5 s"))
        .collect();
    assert_eq!(timed_out.len(), 1, "{:?}\n{stderr}", r.failures);
    assert_eq!(status_of(&r, "work/slow/x"), Status::Failed);
    for id in ["work/fast/x", "work/same/x"] {
        let b = r.benches.iter().find(|b| b.id == id).unwrap();
        assert!(
            b.status != Status::Failed && b.rounds >= 2,
            "{id}: {:?} after {} rounds",
            b.status,
            b.rounds
        );
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("timed out after 5 s"), "{md}");
    // One kill, not one per round: the hung bench is not run again.
    assert!(took < std::time::Duration::from_secs(240), "{took:?}");
    f.git(&["reset", "-q", "--hard", &broken]);

    pre_push_hook(&f, &base);
}

/// The pre-push hook on the fixture repository (its slots are warm from the comparisons above).
fn pre_push_hook(f: &Fixture, base: &str) {
    f.git(&["reset", "-q", "--hard", base]);
    let hooks = f.root.join(".git/hooks");
    let hook = hooks.join("pre-push");
    let last_run = harness::cache::repo_cache_dir(&f.cache, &f.root).join("last-run");

    // Someone else's pre-push hook: install refuses (exit 2, naming the file and --force),
    // uninstall leaves it alone, install --force keeps it as pre-push.bak.
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(&hook, FOREIGN_HOOK).unwrap();
    make_executable(&hook);
    let (code, _, err) = f.hook(&["install"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pre-push") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), FOREIGN_HOOK);
    let (code, out, err) = f.hook(&["uninstall"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("left it alone"), "{out}");
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), FOREIGN_HOOK);
    let (code, out, err) = f.hook(&["install", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pre-push.bak"), "{out}");
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-push.bak")).unwrap(),
        FOREIGN_HOOK
    );
    let script = std::fs::read_to_string(&hook).unwrap();
    assert!(script.contains(harness::hook::MARKER), "{script}");
    assert!(script.contains(env!("CARGO_BIN_EXE_harness")), "{script}");

    // `--no-verify` skips the hook: the base reaches the remote and nothing was measured (the
    // comparisons above all wrote to --out, so a last-run dir can only come from the hook).
    let out = f.push(&["--no-verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(f.remote_main(), base);
    assert!(!last_run.exists(), "the hook ran despite --no-verify");

    // A 2× regression of work/slow: the hook's quick suite reds it and the push is refused.
    std::fs::write(f.root.join("src/lib.rs"), lib_rs(40_000, 20_000, 20_000)).unwrap();
    f.git(&["commit", "-q", "-am", "slow 2x slower"]);
    let out = f.push(&[]);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "the push of a regression went through:\n{err}"
    );
    assert!(
        err.contains("work/slow/x") && err.contains("1 regression"),
        "{err}"
    );
    assert!(err.contains("git push --no-verify"), "{err}");
    assert_eq!(f.remote_main(), base, "the remote moved");
    assert!(last_run.exists(), "the hook did not use HARNESS_CACHE_DIR");

    // An unchanged commit (README only) on top of the base: the push goes through.
    f.git(&["reset", "-q", "--hard", base]);
    std::fs::write(f.root.join("README.md"), "fixture, documented\n").unwrap();
    f.git(&["commit", "-q", "-am", "docs only"]);
    let docs = f.git(&["rev-parse", "HEAD"]);
    let out = f.push(&[]);
    assert!(
        out.status.success(),
        "an unchanged commit was blocked:\n{}",
        text(&out.stderr)
    );
    assert_eq!(f.remote_main(), docs);

    // Uninstall removes our hook and nothing else; a second one says there is none.
    let (code, out, err) = f.hook(&["uninstall"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed"), "{out}");
    assert!(!hook.exists());
    assert!(hooks.join("pre-push.bak").exists());
    let (code, out, _) = f.hook(&["uninstall"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to remove"), "{out}");
}

/// Every file under `dir`, depth first.
fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
