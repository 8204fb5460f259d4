//! The git stage: resolves revisions and the merge-base, and checks revisions out into reusable
//! measurement directories ("worktrees", one per slot) without ever writing to the user's
//! repository.
//!
//! # Design
//!
//! - **The user's repository is read-only to us.** No branch, ref, worktree registration, index,
//!   stash or working-tree file of it is ever written, not even transiently, so nothing can be
//!   left behind by a crash, a Ctrl-C or a `kill -9`. (libgit2's `git_worktree_add` needs a branch
//!   and writes `.git/worktrees/<name>`; keeping that only for the length of a run would still leave
//!   both behind whenever a run dies, and re-registering a kept directory is fragile.)
//! - **A slot is a small repository of our own** at `<cache_dir>/worktrees/<slot>`, whose
//!   `.git/objects/info/alternates` points at the user's object database (like
//!   `git clone --shared`): no object is copied, and the checkout is an ordinary git checkout with a
//!   detached `HEAD`, so `git status`/`git rev-parse HEAD` (build scripts) work inside it. The slot
//!   repository never gets a branch either: its `HEAD` is unborn until the first detach.
//!   `.git/harness-slot` marks the directory as ours and names the object database it serves; a
//!   directory without the marker is never deleted or written to.
//! - **Reuse.** The caller passes a per-repository cache dir; a slot's path is stable across runs,
//!   so a per-slot cargo target dir next to it stays warm. Moving a slot to another commit is a
//!   forced checkout of the commit's tree that removes untracked files but keeps ignored ones
//!   (build output): only files that differ are rewritten, so their mtimes, and cargo's
//!   fingerprints, of unchanged files survive.
//! - **Repair.** A slot of ours that no longer opens or checks out (a corrupted `.git`, a commit of
//!   its old `HEAD` garbage-collected from the user's repository, a cache dir that served another
//!   repository) is removed and created afresh: only inside the cache dir, only with the marker.
//! - **Locking.** One run owns a slot at a time: `<cache_dir>/worktrees/<slot>.lock` names the owning
//!   process (pid, boot id, start time), is created exclusively and removed by
//!   [`Worktree::release`] or on drop. A lock whose process is provably gone (Linux: other boot, no
//!   such pid, or a different start time) is taken over; otherwise the error names the slot, the
//!   owner and the `rm` command to clear it.
//! - **Working-tree snapshots.** [`Checkout::WorkingTree`] checks `HEAD` out into the slot, then
//!   copies in every path `git status` reports (modified, staged, untracked and not ignored) from
//!   the user's working tree and deletes the ones gone there: the slot holds exactly what the user
//!   sees, while the user's files, index and stash are only read. Submodules and nested
//!   repositories are not carried; paths inside the cache dir are skipped.
//! - **Shallow clones.** Unknown revisions and failed merge-bases on a shallow clone say that the
//!   commit may be missing from the shallow history and how to fetch it. A slot copies the user's
//!   `shallow` file so history walks inside it behave like in the user's repository.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository, StatusOptions};

use crate::results::Revision;

/// The spec recorded for a measured working tree.
pub const WORKING_TREE_SPEC: &str = "working tree";

/// The marker file in a slot's `.git` directory; holds the object directory the slot serves.
const MARKER: &str = "harness-slot";

/// Default-branch candidates after `origin/HEAD`, in order.
const DEFAULT_BRANCHES: [&str; 4] = ["origin/main", "origin/master", "main", "master"];

pub type Result<T, E = GitError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{path} is not inside a git repository")]
    NotARepository {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("unknown revision `{spec}`{}", shallow_advice(*shallow))]
    UnknownRevision {
        spec: String,
        shallow: bool,
        #[source]
        source: git2::Error,
    },
    #[error("revision `{spec}` is not a commit")]
    NotACommit {
        spec: String,
        #[source]
        source: git2::Error,
    },
    #[error("no merge base between `{a}` and `{b}`{}", shallow_advice(*shallow))]
    NoMergeBase {
        a: String,
        b: String,
        shallow: bool,
        #[source]
        source: git2::Error,
    },
    #[error(
        "cannot find the default branch in {path}: none of origin/HEAD, {} exists; pass --base",
        DEFAULT_BRANCHES.join(", ")
    )]
    NoDefaultBranch { path: PathBuf },
    #[error("{path} is a bare repository: it has no working tree to measure")]
    Bare { path: PathBuf },
    #[error("invalid worktree slot name `{slot}`: use letters, digits, `-`, `_` and `.`")]
    BadSlot { slot: String },
    #[error(
        "worktree {path} is in use by another harness run ({owner}); wait for it to finish, or if \
         no harness run is active remove the lock: rm {}",
        lock.display()
    )]
    Locked {
        path: PathBuf,
        lock: PathBuf,
        owner: String,
    },
    #[error(
        "{path} exists but is not a harness worktree; move it away or use another cache dir \
         (harness never deletes what it did not create)"
    )]
    NotOurs { path: PathBuf },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{what} in {path}")]
    Git {
        what: String,
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
}

fn shallow_advice(shallow: bool) -> &'static str {
    if shallow {
        "; this repository is a shallow clone, so the commit may be missing from its history: \
         fetch the full history with `git fetch --unshallow` (GitHub Actions: `fetch-depth: 0` in \
         actions/checkout)"
    } else {
        ""
    }
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> GitError {
    let path = path.to_path_buf();
    move |source| GitError::Io { what, path, source }
}

/// What to put into a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checkout {
    /// A commit (a sha, or any revision `resolve` accepts), detached.
    Commit(String),
    /// `HEAD` plus the user's uncommitted changes and untracked, non-ignored files.
    WorkingTree,
}

/// A checked-out slot, owned by this process until released or dropped. The directory stays for
/// the next run; only the slot lock goes.
#[derive(Debug)]
pub struct Worktree {
    /// `<cache_dir>/worktrees/<slot>`.
    pub path: PathBuf,
    /// The commit checked out (for a working-tree snapshot: `HEAD`).
    pub sha: String,
    /// Uncommitted changes were copied in on top of `sha`.
    pub dirty: bool,
    lock: SlotLock,
}

impl Worktree {
    /// Give the slot up (removes its lock file); the directory is kept for reuse.
    pub fn release(mut self) -> Result<()> {
        self.lock.release()
    }
}

/// A git repository opened for reading.
pub struct Repo {
    repo: Repository,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("path", &self.repo.path())
            .finish()
    }
}

impl Repo {
    /// Open the repository containing `path` (searching upwards, like git).
    pub fn open(path: &Path) -> Result<Repo> {
        let repo = Repository::discover(path).map_err(|source| GitError::NotARepository {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Repo { repo })
    }

    /// The working tree's root (`None` for a bare repository).
    pub fn workdir(&self) -> Option<&Path> {
        self.repo.workdir()
    }

    /// The `.git` directory (the repository itself when bare).
    pub fn git_dir(&self) -> &Path {
        self.repo.path()
    }

    pub fn is_shallow(&self) -> bool {
        self.repo.is_shallow()
    }

    /// Resolve a revision (`HEAD~1`, a branch, a tag, a sha) to a commit.
    pub fn resolve(&self, spec: &str) -> Result<Revision> {
        let commit = self.commit(spec)?;
        Ok(Revision {
            spec: spec.to_string(),
            sha: commit.id().to_string(),
            subject: subject(&commit),
            dirty: false,
        })
    }

    /// The working tree as a revision: `HEAD`'s commit, `dirty` when it has uncommitted changes.
    pub fn resolve_working_tree(&self) -> Result<Revision> {
        let commit = self.commit("HEAD")?;
        Ok(Revision {
            spec: WORKING_TREE_SPEC.to_string(),
            sha: commit.id().to_string(),
            subject: subject(&commit),
            dirty: self.is_dirty()?,
        })
    }

    /// The branch a pull request merges into, as a revision `resolve` accepts: the target of
    /// `origin/HEAD`, else the first of `origin/main`, `origin/master`, `main`, `master` that
    /// exists. Remote-tracking branches come first because a local `main` is often stale.
    pub fn default_branch(&self) -> Result<String> {
        if let Ok(head) = self.repo.find_reference("refs/remotes/origin/HEAD")
            && let Ok(Some(target)) = head.symbolic_target()
            && let Some(name) = target.strip_prefix("refs/remotes/")
            && self.repo.find_reference(target).is_ok()
        {
            return Ok(name.to_string());
        }
        for name in DEFAULT_BRANCHES {
            let full = if name.starts_with("origin/") {
                format!("refs/remotes/{name}")
            } else {
                format!("refs/heads/{name}")
            };
            if self.repo.find_reference(&full).is_ok() {
                return Ok(name.to_string());
            }
        }
        Err(GitError::NoDefaultBranch {
            path: self.repo.path().to_path_buf(),
        })
    }

    /// The best common ancestor of two revisions, as a sha.
    pub fn merge_base(&self, a: &str, b: &str) -> Result<String> {
        let (ca, cb) = (self.commit(a)?, self.commit(b)?);
        self.repo
            .merge_base(ca.id(), cb.id())
            .map(|oid| oid.to_string())
            .map_err(|source| GitError::NoMergeBase {
                a: a.to_string(),
                b: b.to_string(),
                shallow: self.repo.is_shallow(),
                source,
            })
    }

    /// Whether the working tree differs from `HEAD`: staged or unstaged changes to tracked files,
    /// or untracked files that are not ignored (submodules are not looked at).
    pub fn is_dirty(&self) -> Result<bool> {
        Ok(!self.changes()?.is_empty())
    }

    /// Check `what` out into the slot `<cache_dir>/worktrees/<slot>`, creating it or moving an
    /// existing one. The slot is locked until the returned [`Worktree`] is released or dropped.
    pub fn checkout(&self, slot: &str, what: Checkout, cache_dir: &Path) -> Result<Worktree> {
        check_slot_name(slot)?;
        let slots = cache_dir.join("worktrees");
        fs::create_dir_all(&slots).map_err(io_err("cannot create", &slots))?;
        let path = slots.join(slot);
        let lock = SlotLock::acquire(&slots.join(format!("{slot}.lock")), &path)?;

        let (commit, snapshot) = match &what {
            Checkout::Commit(spec) => (self.commit(spec)?, false),
            Checkout::WorkingTree => {
                if self.repo.workdir().is_none() {
                    return Err(GitError::Bare {
                        path: self.repo.path().to_path_buf(),
                    });
                }
                (self.commit("HEAD")?, true)
            }
        };
        let oid = commit.id();

        let objects = self.objects_dir()?;
        let (slot_repo, reused) = prepare_slot(&path, &objects)?;
        self.sync_shallow(&slot_repo)?;
        if let Err(err) = move_slot(&slot_repo, oid, &path) {
            if !reused {
                return Err(err);
            }
            // An existing slot that cannot move (its old HEAD's objects gone, a damaged index):
            // it is ours (marker checked), so start it afresh.
            drop(slot_repo);
            remove_slot(&path)?;
            let (slot_repo, _) = prepare_slot(&path, &objects)?;
            self.sync_shallow(&slot_repo)?;
            move_slot(&slot_repo, oid, &path)?;
        }
        let dirty = if snapshot {
            self.apply_changes(&path, cache_dir)?
        } else {
            false
        };
        Ok(Worktree {
            path,
            sha: oid.to_string(),
            dirty,
            lock,
        })
    }

    /// The paths that differ between commit `base` and `head` (a commit, or with `working_tree`
    /// the working tree as `git status` sees it on top of `head`), in git's order.
    pub fn changed_paths(&self, base: &str, head: &str, working_tree: bool) -> Result<Vec<String>> {
        let git_err = |what: &str| {
            let path = self.repo.path().to_path_buf();
            let what = what.to_string();
            move |source| GitError::Git { what, path, source }
        };
        let base_tree = self
            .commit(base)?
            .tree()
            .map_err(git_err("cannot read a tree"))?;
        let head_tree = self
            .commit(head)?
            .tree()
            .map_err(git_err("cannot read a tree"))?;
        let diff = self
            .repo
            .diff_tree_to_tree(Some(&base_tree), Some(&head_tree), None)
            .map_err(git_err("cannot diff base and head"))?;
        let mut out: Vec<String> = diff
            .deltas()
            .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()))
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if working_tree {
            out.extend(
                self.changes()?
                    .into_iter()
                    .map(|p| p.to_string_lossy().into_owned()),
            );
            out.sort();
            out.dedup();
        }
        Ok(out)
    }

    fn commit(&self, spec: &str) -> Result<git2::Commit<'_>> {
        let object =
            self.repo
                .revparse_single(spec)
                .map_err(|source| GitError::UnknownRevision {
                    spec: spec.to_string(),
                    shallow: self.repo.is_shallow(),
                    source,
                })?;
        object
            .peel_to_commit()
            .map_err(|source| GitError::NotACommit {
                spec: spec.to_string(),
                source,
            })
    }

    fn objects_dir(&self) -> Result<PathBuf> {
        let dir = self.repo.commondir().join("objects");
        dir.canonicalize().map_err(io_err("cannot read", &dir))
    }

    /// The relative path of every entry `git status` shows (staged, unstaged or untracked alike),
    /// in git's sorted order: a deleted `a` comes before an added `a/b`.
    fn changes(&self) -> Result<Vec<PathBuf>> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(true);
        let statuses = self
            .repo
            .statuses(Some(&mut opts))
            .map_err(|source| GitError::Git {
                what: "cannot read the status".to_string(),
                path: self.repo.path().to_path_buf(),
                source,
            })?;
        Ok(statuses
            .iter()
            .filter_map(|entry| rel_path(entry.path_bytes()))
            .collect())
    }

    /// Make the slot's files equal to the user's working tree for every changed path. Returns
    /// whether anything was carried over.
    fn apply_changes(&self, slot: &Path, cache_dir: &Path) -> Result<bool> {
        let Some(workdir) = self.repo.workdir() else {
            return Ok(false);
        };
        let cache = cache_dir.canonicalize().ok();
        let mut applied = false;
        for rel in self.changes()? {
            let src = workdir.join(&rel);
            let in_cache = match (&cache, src.canonicalize()) {
                (Some(cache), Ok(src)) => src.starts_with(cache),
                _ => false,
            };
            if in_cache {
                continue;
            }
            let dst = slot.join(&rel);
            match fs::symlink_metadata(&src) {
                Ok(meta) if meta.is_dir() => continue, // a nested repository: not ours to carry
                Ok(meta) => {
                    copy_entry(&src, &dst, meta.file_type().is_symlink())?;
                    applied = true;
                }
                Err(e) if is_absent(&e) => {
                    remove_entry(&dst, slot)?;
                    applied = true;
                }
                Err(e) => return Err(io_err("cannot read", &src)(e)),
            }
        }
        Ok(applied)
    }

    /// Mirror the user's `shallow` file into the slot so history walks there stop where ours do.
    fn sync_shallow(&self, slot_repo: &Repository) -> Result<()> {
        let ours = self.repo.commondir().join("shallow");
        let theirs = slot_repo.path().join("shallow");
        if ours.exists() {
            fs::copy(&ours, &theirs).map_err(io_err("cannot write", &theirs))?;
        } else {
            remove_file_if_exists(&theirs)?;
        }
        Ok(())
    }
}

fn subject(commit: &git2::Commit<'_>) -> String {
    String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default()).into_owned()
}

fn check_slot_name(slot: &str) -> Result<()> {
    let ok = !slot.is_empty()
        && !slot.starts_with('.')
        && slot
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(GitError::BadSlot {
            slot: slot.to_string(),
        })
    }
}

/// Open an existing slot of ours serving `objects`, or create one. Returns whether it existed.
fn prepare_slot(path: &Path, objects: &Path) -> Result<(Repository, bool)> {
    let marker = path.join(".git").join(MARKER);
    match fs::symlink_metadata(path) {
        Err(e) if is_absent(&e) => {}
        Err(e) => return Err(io_err("cannot read", path)(e)),
        Ok(meta) if !meta.is_dir() => {
            return Err(GitError::NotOurs {
                path: path.to_path_buf(),
            });
        }
        Ok(_) if marker.is_file() => {
            let serves = fs::read(&marker).map_err(io_err("cannot read", &marker))?;
            if serves == objects.as_os_str().as_encoded_bytes()
                && let Ok(repo) = Repository::open(path)
                && repo.workdir().is_some()
            {
                return Ok((repo, true));
            }
            // Ours, but broken or serving another repository.
            remove_slot(path)?;
        }
        Ok(_) => {
            let mut entries = fs::read_dir(path).map_err(io_err("cannot read", path))?;
            if entries.next().is_some() {
                return Err(GitError::NotOurs {
                    path: path.to_path_buf(),
                });
            }
        }
    }
    let git_err = |what: &str| {
        let path = path.to_path_buf();
        let what = what.to_string();
        move |source| GitError::Git { what, path, source }
    };
    Repository::init(path).map_err(git_err("cannot create a repository"))?;
    let alternates = path.join(".git/objects/info/alternates");
    let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    fs::write(&alternates, line).map_err(io_err("cannot write", &alternates))?;
    fs::write(&marker, objects.as_os_str().as_encoded_bytes())
        .map_err(io_err("cannot write", &marker))?;
    // Reopen so the object database is loaded with the alternates in place.
    let repo = Repository::open(path).map_err(git_err("cannot open the new repository"))?;
    Ok((repo, false))
}

/// Remove a slot directory: only ever called on `<cache_dir>/worktrees/<slot>` carrying our marker.
fn remove_slot(path: &Path) -> Result<()> {
    fs::remove_dir_all(path).map_err(io_err("cannot remove the broken worktree", path))
}

/// Force the slot's files, index and detached `HEAD` to `oid`, deleting untracked files but
/// keeping ignored ones.
fn move_slot(repo: &Repository, oid: Oid, path: &Path) -> Result<()> {
    let sha = oid.to_string();
    let git_err = |what: String| {
        let path = path.to_path_buf();
        move |source| GitError::Git { what, path, source }
    };
    let commit = repo
        .find_commit(oid)
        .map_err(git_err(format!("cannot find commit {sha}")))?;
    let mut opts = CheckoutBuilder::new();
    opts.force().remove_untracked(true).remove_ignored(false);
    repo.checkout_tree(commit.as_object(), Some(&mut opts))
        .map_err(git_err(format!("cannot check out {sha}")))?;
    repo.set_head_detached(oid)
        .map_err(git_err(format!("cannot detach HEAD at {sha}")))
}

/// A status path as a relative path of normal components only (never `..` or absolute).
fn rel_path(bytes: &[u8]) -> Option<PathBuf> {
    #[cfg(unix)]
    let path = {
        use std::os::unix::ffi::OsStrExt;
        Path::new(OsStr::from_bytes(bytes))
    };
    #[cfg(not(unix))]
    let path = Path::new(OsStr::new(std::str::from_utf8(bytes).ok()?));
    let normal = path.components().all(|c| matches!(c, Component::Normal(_)));
    (normal && path.components().next().is_some()).then(|| path.to_path_buf())
}

fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn remove_file_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if !is_absent(&e) => Err(io_err("cannot remove", path)(e)),
        _ => Ok(()),
    }
}

/// Copy a file or symlink from the user's working tree into a slot, replacing what is there.
fn copy_entry(src: &Path, dst: &Path, symlink: bool) -> Result<()> {
    match fs::symlink_metadata(dst) {
        Ok(meta) if meta.is_dir() => {
            fs::remove_dir_all(dst).map_err(io_err("cannot remove", dst))?
        }
        Ok(_) => fs::remove_file(dst).map_err(io_err("cannot remove", dst))?,
        Err(_) => {}
    }
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).map_err(io_err("cannot create", parent))?;
    }
    if symlink {
        let target = fs::read_link(src).map_err(io_err("cannot read", src))?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, dst).map_err(io_err("cannot write", dst))?;
        #[cfg(not(unix))]
        fs::write(dst, target.as_os_str().as_encoded_bytes())
            .map_err(io_err("cannot write", dst))?;
    } else {
        fs::copy(src, dst).map_err(io_err("cannot copy into the worktree", src))?;
    }
    Ok(())
}

/// Delete a path from a slot, then its parent directories that became empty (git has no empty
/// directories), stopping at the slot root.
fn remove_entry(dst: &Path, root: &Path) -> Result<()> {
    match fs::symlink_metadata(dst) {
        Ok(meta) if meta.is_dir() => {
            fs::remove_dir_all(dst).map_err(io_err("cannot remove", dst))?
        }
        Ok(_) => remove_file_if_exists(dst)?,
        Err(_) => return Ok(()),
    }
    let mut dir = dst.parent();
    while let Some(d) = dir {
        if d == root || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// An exclusive claim on a slot: a lock file naming this process, removed on release or drop.
#[derive(Debug)]
struct SlotLock {
    path: PathBuf,
    held: bool,
}

impl SlotLock {
    fn acquire(lock: &Path, slot: &Path) -> Result<SlotLock> {
        let me = Owner::current();
        for attempt in 0..2 {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(lock)
            {
                Ok(mut file) => {
                    let held = SlotLock {
                        path: lock.to_path_buf(),
                        held: true,
                    };
                    file.write_all(me.to_string().as_bytes())
                        .map_err(io_err("cannot write", lock))?;
                    return Ok(held);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let text = fs::read_to_string(lock).unwrap_or_default();
                    let owner = Owner::parse(&text);
                    if attempt == 0 && owner.as_ref().is_some_and(Owner::is_gone) {
                        remove_file_if_exists(lock)?;
                        continue;
                    }
                    return Err(GitError::Locked {
                        path: slot.to_path_buf(),
                        lock: lock.to_path_buf(),
                        owner: owner
                            .map_or("owner unknown".to_string(), |o| format!("pid {}", o.pid)),
                    });
                }
                Err(e) => return Err(io_err("cannot create", lock)(e)),
            }
        }
        Err(GitError::Locked {
            path: slot.to_path_buf(),
            lock: lock.to_path_buf(),
            owner: "owner unknown".to_string(),
        })
    }

    fn release(&mut self) -> Result<()> {
        if std::mem::take(&mut self.held) {
            remove_file_if_exists(&self.path)?;
        }
        Ok(())
    }
}

impl Drop for SlotLock {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// Who holds a slot lock: enough to tell on Linux whether that process still exists.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    pid: u32,
    /// `/proc/sys/kernel/random/boot_id` (empty where unknown).
    boot: String,
    /// Field 22 of `/proc/<pid>/stat` (empty where unknown): tells a reused pid apart.
    start: String,
}

impl Owner {
    fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            pid,
            boot: boot_id(),
            start: start_time(pid).unwrap_or_default(),
        }
    }

    fn parse(text: &str) -> Option<Owner> {
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(Owner {
            pid: field("pid")?.parse().ok()?,
            boot: field("boot")?,
            start: field("start")?,
        })
    }

    /// Provably dead: only decidable where `/proc` tells (Linux); elsewhere assume alive.
    fn is_gone(&self) -> bool {
        if self.boot.is_empty() || boot_id().is_empty() {
            return false;
        }
        if self.boot != boot_id() {
            return true;
        }
        match start_time(self.pid) {
            None => true,
            Some(start) => !self.start.is_empty() && start != self.start,
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "pid={}\nboot={}\nstart={}",
            self.pid, self.boot, self.start
        )
    }
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A process's start time from `/proc/<pid>/stat`; `None` when there is no such process (or no
/// `/proc`).
fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line; the command name (field 2) may contain
/// spaces and parentheses, so count from the last `)`.
fn parse_start_time(stat: &str) -> Option<String> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_string)
}

/// The revision a `--head`/`--rev` names and how to check it out; none given: the working tree
/// when it has uncommitted changes (measured as they are), else HEAD.
pub fn resolve_checkout(repo: &Repo, spec: Option<&str>) -> anyhow::Result<(Revision, Checkout)> {
    let r = match spec {
        None if repo.is_dirty()? => {
            return Ok((repo.resolve_working_tree()?, Checkout::WorkingTree));
        }
        None => repo.resolve("HEAD")?,
        Some(spec) => repo.resolve(spec)?,
    };
    let co = Checkout::Commit(r.sha.clone());
    Ok((r, co))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_slot_names() {
        for ok in ["base", "head", "pr-12", "a.b_c"] {
            assert!(check_slot_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "/abs"] {
            let err = check_slot_name(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn git_status_paths_stay_relative() {
        assert_eq!(rel_path(b"src/lib.rs"), Some(PathBuf::from("src/lib.rs")));
        assert_eq!(rel_path(b"nested/"), Some(PathBuf::from("nested")));
        assert_eq!(rel_path(b"../evil"), None);
        assert_eq!(rel_path(b"/etc/passwd"), None);
        assert_eq!(rel_path(b""), None);
    }

    #[test]
    fn git_stat_start_time_survives_odd_command_names() {
        let stat = "4242 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 19 20";
        assert_eq!(parse_start_time(stat).as_deref(), Some("987654"));
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn git_lock_owner_round_trips_and_detects_the_living() {
        let me = Owner::current();
        assert_eq!(Owner::parse(&me.to_string()), Some(me.clone()));
        assert!(!me.is_gone(), "this process is alive");
        assert_eq!(Owner::parse("pid=x\nboot=\nstart="), None);
        if !me.boot.is_empty() {
            let other_boot = Owner {
                boot: "another-boot".into(),
                ..me.clone()
            };
            assert!(other_boot.is_gone());
            let reused_pid = Owner {
                start: "1".into(),
                ..me
            };
            assert!(reused_pid.is_gone());
        }
    }
}
