//! `harness hook install|uninstall`: the git pre-push hook that runs the quick suite on every
//! pushed branch and blocks the push on a confirmed regression.
//!
//! # Design
//!
//! - **Where.** The hooks directory git itself runs hooks from: `core.hooksPath` when set
//!   (relative to the working tree's root, like git), else `hooks/` in the repository's common
//!   directory, so a linked worktree installs into the main repository's hooks, which every
//!   worktree shares.
//! - **Ours.** The script carries the line [`MARKER`]; install replaces only a hook that has it,
//!   unless `--force`, which first renames the other hook to `pre-push.bak` (or `.bak.1`, … so no
//!   earlier backup is overwritten). Uninstall removes only a hook with the marker.
//! - **Which harness.** The script runs the absolute path of the binary that installed it (the one
//!   that was just proven to work), falling back to `harness` on `PATH` when that file is gone
//!   (`cargo clean`, a moved checkout).
//! - **What it decides.** For each pushed branch it runs
//!   `harness compare --suite quick --base <remote sha> --head <local sha> --fail-on red`; a new
//!   branch (or a remote commit this clone does not have) omits `--base`, so the harness compares
//!   against its default base, the merge-base of `HEAD` (the pushed commit, when pushing the
//!   checked-out branch) with the default branch. Exit 1 (a confirmed 🔴 regression, or a head
//!   that no longer builds) blocks the push; exit 2 (could not run: no cargo, no `quick` suite,
//!   …) prints a warning and lets the push through: the hook is an early warning on the
//!   developer's machine, the PR check in CI is the gate nobody can skip, and a push must not
//!   hang on a broken local toolchain. `git push --no-verify` skips the hook.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, Repository};

/// The line that marks a pre-push hook as installed by us.
pub const MARKER: &str = "# decoder-gate pre-push hook";

const HOOK: &str = "pre-push";

pub type Result<T, E = HookError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{path} is not inside a git repository")]
    NotARepository {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("cannot read core.hooksPath of {path}")]
    Config {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error(
        "{path} exists and was not installed by harness; move it away, or pass --force to replace \
         it (it is kept as {})",
        backup.display()
    )]
    Foreign { path: PathBuf, backup: PathBuf },
    #[error("the harness binary's path {path} is not UTF-8, so the hook cannot name it")]
    NonUtf8Exe { path: PathBuf },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> HookError {
    let path = path.to_path_buf();
    move |source| HookError::Io { what, path, source }
}

/// What `install` found in the hook's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Previous {
    /// No pre-push hook.
    None,
    /// Our hook (rewritten, e.g. to point at this binary).
    Ours,
    /// Another hook, replaced under `--force` and kept at `backup`.
    Foreign { backup: PathBuf },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    pub path: PathBuf,
    pub previous: Previous,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uninstalled {
    /// Our hook was removed; `backup` is a `pre-push.bak` left by `install --force`, if any.
    Removed {
        path: PathBuf,
        backup: Option<PathBuf>,
    },
    /// There is no pre-push hook.
    NotInstalled { path: PathBuf },
    /// The pre-push hook is not ours: left alone.
    Foreign { path: PathBuf },
}

/// The directory git runs `repo_dir`'s hooks from.
pub fn hooks_dir(repo_dir: &Path) -> Result<PathBuf> {
    let repo = Repository::discover(repo_dir).map_err(|source| HookError::NotARepository {
        path: repo_dir.to_path_buf(),
        source,
    })?;
    let config_err = |source| HookError::Config {
        path: repo.path().to_path_buf(),
        source,
    };
    let config = repo.config().map_err(config_err)?;
    let hooks_path = match config.get_path("core.hooksPath") {
        Ok(p) => Some(p),
        Err(e) if e.code() == ErrorCode::NotFound => None,
        Err(e) => return Err(config_err(e)),
    };
    Ok(resolve_hooks_dir(&repo, hooks_path.as_deref()))
}

/// `core.hooksPath` (`hooks_path`) resolved like git: relative to the directory hooks run in
/// (the working tree's root; a bare repository's directory); unset, the common dir's `hooks/`.
fn resolve_hooks_dir(repo: &Repository, hooks_path: Option<&Path>) -> PathBuf {
    match hooks_path {
        Some(p) => repo.workdir().unwrap_or(repo.path()).join(p),
        None => repo.commondir().join("hooks"),
    }
}

/// Install the pre-push hook into `repo_dir`'s hooks directory, running `harness_exe`.
pub fn install(repo_dir: &Path, harness_exe: &Path, force: bool) -> Result<Installed> {
    let exe = harness_exe.to_str().ok_or_else(|| HookError::NonUtf8Exe {
        path: harness_exe.to_path_buf(),
    })?;
    let dir = hooks_dir(repo_dir)?;
    let path = dir.join(HOOK);
    let previous = match existing(&path)? {
        None => Previous::None,
        Some(true) => Previous::Ours,
        Some(false) => {
            let backup = free_backup_name(&path);
            if !force {
                return Err(HookError::Foreign { path, backup });
            }
            fs::rename(&path, &backup).map_err(io_err("cannot move away", &path))?;
            Previous::Foreign { backup }
        }
    };
    fs::create_dir_all(&dir).map_err(io_err("cannot create", &dir))?;
    // Written next to its place and renamed: a concurrent push never runs half a script.
    let tmp = dir.join(format!(".{HOOK}.harness-tmp"));
    fs::write(&tmp, script(exe)).map_err(io_err("cannot write", &tmp))?;
    make_executable(&tmp)?;
    fs::rename(&tmp, &path).map_err(io_err("cannot write", &path))?;
    Ok(Installed { path, previous })
}

/// Remove our pre-push hook from `repo_dir`'s hooks directory; anything else is left alone.
pub fn uninstall(repo_dir: &Path) -> Result<Uninstalled> {
    let path = hooks_dir(repo_dir)?.join(HOOK);
    match existing(&path)? {
        None => Ok(Uninstalled::NotInstalled { path }),
        Some(false) => Ok(Uninstalled::Foreign { path }),
        Some(true) => {
            fs::remove_file(&path).map_err(io_err("cannot remove", &path))?;
            let bak = backup_name(&path, 0);
            let backup = bak.exists().then_some(bak);
            Ok(Uninstalled::Removed { path, backup })
        }
    }
}

/// `None` when there is no hook at `path`, else whether it carries our marker.
fn existing(path: &Path) -> Result<Option<bool>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(
            String::from_utf8_lossy(&bytes)
                .lines()
                .any(|l| l.trim_end() == MARKER),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A dangling symlink is still a hook someone put there.
            match fs::symlink_metadata(path) {
                Ok(_) => Ok(Some(false)),
                Err(_) => Ok(None),
            }
        }
        Err(e) => Err(io_err("cannot read", path)(e)),
    }
}

fn backup_name(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    if n > 0 {
        name.push(format!(".{n}"));
    }
    PathBuf::from(name)
}

/// `pre-push.bak`, else the first free `pre-push.bak.N`.
fn free_backup_name(path: &Path) -> PathBuf {
    (0..)
        .map(|n| backup_name(path, n))
        .find(|p| fs::symlink_metadata(p).is_err())
        .expect("an unused backup name")
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(io_err("cannot make executable", path))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<()> {
    Ok(())
}

/// `s` as one single-quoted POSIX shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The hook script (POSIX sh) running the harness at `exe`.
pub fn script(exe: &str) -> String {
    SCRIPT.replace("@HARNESS@", &sh_quote(exe))
}

const SCRIPT: &str = r#"#!/bin/sh
# decoder-gate pre-push hook
# Installed by `harness hook install`; remove it with `harness hook uninstall`.
#
# For each branch pushed, runs the quick suite of harness.yaml on the pushed commit against the
# commit the remote has:
#   harness compare --suite quick --base <remote sha> --head <local sha> --fail-on red
# (a new branch: against its merge-base with the default branch). Exit 1 from the harness (a
# confirmed regression, or a head that does not build) blocks the push. Exit 2 (it could not run)
# only warns and lets the push through: the PR check in CI is the gate that cannot be skipped.
# Skip this hook once: git push --no-verify

harness=@HARNESS@
if [ ! -x "$harness" ]; then
    harness=$(command -v harness) || {
        echo "decoder-gate pre-push: warning: no harness binary ($harness is gone, none on PATH): this push is not checked; reinstall with: harness hook install" >&2
        exit 0
    }
fi

# git writes "<local ref> <local sha> <remote ref> <remote sha>" per ref on stdin.
refs=$(cat)
blocked=
while read -r local_ref local_sha remote_ref remote_sha; do
    case $local_ref in refs/heads/*) ;; *) continue ;; esac # tags, notes: nothing to measure
    case $local_sha in *[!0]*) ;; *) continue ;; esac       # a branch deletion
    [ "$local_sha" = "$remote_sha" ] && continue
    set -- --head "$local_sha"
    case $remote_sha in
        *[!0]*)
            # A remote commit this clone lacks (not fetched yet): the merge-base instead.
            if git cat-file -e "$remote_sha^{commit}" 2>/dev/null; then
                set -- "$@" --base "$remote_sha"
            fi
            ;;
    esac
    echo "decoder-gate pre-push: quick suite for $local_ref -> $remote_ref (skip with git push --no-verify)" >&2
    "$harness" compare --suite quick "$@" --fail-on red </dev/null >&2
    status=$?
    case $status in
        0) ;;
        1) blocked="$blocked $local_ref" ;;
        *) echo "decoder-gate pre-push: warning: the harness could not run (exit $status, see above): $local_ref is pushed unchecked" >&2 ;;
    esac
done <<EOF
$refs
EOF

if [ -n "$blocked" ]; then
    echo "decoder-gate pre-push: push blocked: the quick suite failed the gate for$blocked (a regression or a broken build, see the report above)." >&2
    echo "decoder-gate pre-push: fix it, or push anyway with: git push --no-verify" >&2
    exit 1
fi
exit 0
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn init(dir: &Path) -> Repository {
        Repository::init(dir).unwrap()
    }

    /// A repository whose hooks directory is pinned by its own (local) core.hooksPath, so no
    /// global or system core.hooksPath of the machine running the tests can send writes
    /// outside the temporary directory.
    fn init_pinned(dir: &Path) -> PathBuf {
        let repo = init(dir);
        let hooks = dir.join(".git/hooks");
        repo.config()
            .unwrap()
            .set_str("core.hooksPath", hooks.to_str().unwrap())
            .unwrap();
        hooks
    }

    #[test]
    fn hooks_dir_is_the_common_dirs_unless_core_hooks_path() {
        let t = tempfile::tempdir().unwrap();
        let repo = init(&t.path().join("r"));
        let common = repo.path().canonicalize().unwrap();
        let dir = resolve_hooks_dir(&repo, None);
        assert_eq!(dir.parent().unwrap().canonicalize().unwrap(), common);
        assert_eq!(dir.file_name().unwrap(), "hooks");

        // A linked worktree shares the main repository's hooks.
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo
            .find_tree(repo.index().unwrap().write_tree().unwrap())
            .unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &[])
            .unwrap();
        repo.worktree("wt", &t.path().join("wt"), None).unwrap();
        let wt = Repository::open(t.path().join("wt")).unwrap();
        let wt_dir = resolve_hooks_dir(&wt, None);
        assert_eq!(
            wt_dir.parent().unwrap().canonicalize().unwrap(),
            common,
            "{wt_dir:?}"
        );

        // core.hooksPath, read from the repository's config (its local value outranks any
        // global one): absolute as is, relative to the working tree's root, also from a
        // linked worktree.
        let mut cfg = repo.config().unwrap();
        cfg.set_str("core.hooksPath", ".githooks").unwrap();
        assert_eq!(
            hooks_dir(&t.path().join("r")).unwrap(),
            repo.workdir().unwrap().join(".githooks")
        );
        assert_eq!(
            hooks_dir(&t.path().join("wt")).unwrap(),
            wt.workdir().unwrap().join(".githooks")
        );
        let abs = t.path().join("elsewhere");
        cfg.set_str("core.hooksPath", abs.to_str().unwrap())
            .unwrap();
        assert_eq!(hooks_dir(&t.path().join("r")).unwrap(), abs);
    }

    #[test]
    fn install_replaces_ours_refuses_foreign_and_uninstall_removes_only_ours() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("r");
        let pinned = init_pinned(&r);
        let hooks = hooks_dir(&r).unwrap();
        assert_eq!(hooks, pinned);
        let hook = hooks.join("pre-push");
        let exe = Path::new("/opt/it's here/harness");

        assert_eq!(
            uninstall(&r).unwrap(),
            Uninstalled::NotInstalled { path: hook.clone() }
        );
        let i = install(&r, exe, false).unwrap();
        assert_eq!((i.path.clone(), i.previous), (hook.clone(), Previous::None));
        let text = fs::read_to_string(&hook).unwrap();
        assert!(text.starts_with("#!/bin/sh\n# decoder-gate pre-push hook\n"));
        assert!(
            text.contains(r"harness='/opt/it'\''s here/harness'"),
            "{text}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&hook).unwrap().permissions().mode();
            assert_eq!(mode & 0o111, 0o111, "not executable: {mode:o}");
        }
        assert_eq!(install(&r, exe, false).unwrap().previous, Previous::Ours);
        assert_eq!(
            uninstall(&r).unwrap(),
            Uninstalled::Removed {
                path: hook.clone(),
                backup: None
            }
        );
        assert!(!hook.exists());

        // Someone else's hook: refused (the error names it), kept by uninstall, backed up by
        // --force without overwriting an earlier backup.
        fs::write(&hook, "#!/bin/sh\nexec lint\n").unwrap();
        fs::write(hooks.join("pre-push.bak"), "older backup").unwrap();
        let e = install(&r, exe, false).unwrap_err();
        assert!(matches!(e, HookError::Foreign { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains(hook.to_str().unwrap()) && msg.contains("--force"),
            "{msg}"
        );
        assert_eq!(
            uninstall(&r).unwrap(),
            Uninstalled::Foreign { path: hook.clone() }
        );
        assert_eq!(fs::read_to_string(&hook).unwrap(), "#!/bin/sh\nexec lint\n");
        let i = install(&r, exe, true).unwrap();
        let backup = hooks.join("pre-push.bak.1");
        assert_eq!(
            i.previous,
            Previous::Foreign {
                backup: backup.clone()
            }
        );
        assert_eq!(
            fs::read_to_string(&backup).unwrap(),
            "#!/bin/sh\nexec lint\n"
        );
        assert_eq!(
            fs::read_to_string(hooks.join("pre-push.bak")).unwrap(),
            "older backup"
        );
        assert!(fs::read_to_string(&hook).unwrap().contains(MARKER));
        assert_eq!(
            uninstall(&r).unwrap(),
            Uninstalled::Removed {
                path: hook.clone(),
                backup: Some(hooks.join("pre-push.bak"))
            }
        );
        assert!(backup.exists() && hooks.join("pre-push.bak").exists());
    }

    #[test]
    fn the_script_is_valid_sh() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("pre-push");
        fs::write(&p, script("/x/harness")).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(&p)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
