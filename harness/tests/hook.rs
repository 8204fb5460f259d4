//! The pre-push hook end to end, with the real `git push`: a throwaway repository with a tiny
//! criterion crate (the fixture of `compare_e2e.rs`) and a local bare remote. The installed hook
//! runs the real `harness compare --suite quick`: it blocks the push of a 2× regression (the
//! remote keeps its commit) and lets an unchanged commit through; `--no-verify` skips it; a hook
//! that is not ours is neither overwritten without `--force` nor removed by uninstall.
//!
//! One test function on purpose: the builds dominate (criterion is compiled once per slot), and
//! the second push reuses the warm slot target dirs.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{BENCH, CARGO_TOML, lib_rs};

/// The fixture's config plus a `quick` suite (what the hook runs): two of the three benches.
const HARNESS_YAML: &str = r#"packages: [fixture]
default_branch: main
default_suite: full
criterion:
  warm_up_s: 0.1
  measurement_s: 0.3
  sample_size: 10
  nresamples: 500
policy:
  rounds: 4
  confirmation_rounds: 6
suites:
  quick:
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
    remote: PathBuf,
    cache: PathBuf,
}

impl Fixture {
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

    fn commit(&self, msg: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
        self.git(&["rev-parse", "HEAD"])
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
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
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
    let remote = dir.path().join("remote.git");
    let cache = dir.path().join("cache");
    let f = Fixture {
        dir,
        root,
        remote,
        cache,
    };
    f.git(&["init", "-q", "-b", "main"]);
    // Pinned by the repository's own config: `harness hook` (libgit2) also reads the machine's
    // system config, and a core.hooksPath there must not send the test's hooks out of its
    // temporary directory. (The unset case is covered by the unit tests of `hook`.)
    let hooks = f.root.join(".git/hooks");
    f.git(&["config", "core.hooksPath", hooks.to_str().unwrap()]);
    f.git(&["init", "-q", "--bare", f.remote.to_str().unwrap()]);
    f.git(&["remote", "add", "origin", f.remote.to_str().unwrap()]);
    f
}

fn push(f: &Fixture, extra: &[&str]) -> Output {
    f.git_cmd(["push", "origin", "main"].iter().chain(extra))
        .output()
        .unwrap()
}

#[cfg(unix)]
fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn pre_push_hook_blocks_a_regression_and_lets_an_unchanged_commit_through() {
    let f = fixture();
    std::fs::write(f.root.join("src/lib.rs"), lib_rs(20_000, 20_000, 20_000)).unwrap();
    let base = f.commit("base");
    let hooks = f.root.join(".git/hooks");
    let hook = hooks.join("pre-push");

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

    // `--no-verify` skips the hook: the base reaches the remote and nothing was measured.
    let out = push(&f, &["--no-verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(f.remote_main(), base);
    assert!(!f.cache.exists(), "the hook ran despite --no-verify");

    // A 2× regression of work/slow: the hook's quick suite reds it and the push is refused.
    std::fs::write(f.root.join("src/lib.rs"), lib_rs(40_000, 20_000, 20_000)).unwrap();
    let slow = f.commit("slow 2x slower");
    let out = push(&f, &[]);
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
    assert!(f.cache.exists(), "the hook did not use HARNESS_CACHE_DIR");

    // An unchanged commit (README only) on top of the base: the push goes through.
    f.git(&["reset", "-q", "--hard", &base]);
    std::fs::write(f.root.join("README.md"), "fixture, documented\n").unwrap();
    let docs = f.commit("docs only");
    assert_ne!(docs, slow);
    let out = push(&f, &[]);
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
