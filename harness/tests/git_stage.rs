//! The git stage against throwaway repositories: revisions, merge-base, default branch, slots
//! (fresh, reused, repaired, locked), working-tree snapshots, and the promise that the user's
//! repository is never written to.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use git2::{BranchType, Repository, Signature};
use harness::git::{Checkout, GitError, Repo};
use tempfile::TempDir;

/// A user's repository in a tempdir, built with git2 (no `git` CLI needed).
struct Fixture {
    _dir: TempDir,
    root: PathBuf,
    repo: Repository,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = TempDir::new().unwrap();
        let root = dir.path().join("user");
        let repo = Repository::init(&root).unwrap();
        let root = root.canonicalize().unwrap();
        Fixture {
            _dir: dir,
            root,
            repo,
        }
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// Commit the given files (added or changed) and deletions on HEAD's branch.
    fn commit(&self, msg: &str, files: &[(&str, &str)], deleted: &[&str]) -> String {
        let mut index = self.repo.index().unwrap();
        for (rel, text) in files {
            self.write(rel, text);
            index.add_path(Path::new(rel)).unwrap();
        }
        for rel in deleted {
            fs::remove_file(self.root.join(rel)).unwrap();
            index.remove_path(Path::new(rel)).unwrap();
        }
        index.write().unwrap();
        let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::new("t", "t@example.com", &git2::Time::new(1_700_000_000, 0)).unwrap();
        let parent = self.repo.head().ok().map(|h| h.peel_to_commit().unwrap());
        let parents: Vec<_> = parent.iter().collect();
        let oid = self
            .repo
            .commit(Some("HEAD"), &sig, &sig, msg, &tree, &parents)
            .unwrap();
        oid.to_string()
    }

    fn branch(&self, name: &str, sha: &str) {
        let commit = self.repo.find_commit(sha.parse().unwrap()).unwrap();
        self.repo.branch(name, &commit, false).unwrap();
    }

    /// Switch HEAD to a branch and make the working tree match it.
    fn switch(&self, name: &str) {
        let refname = format!("refs/heads/{name}");
        let obj = self.repo.revparse_single(&refname).unwrap();
        self.repo
            .checkout_tree(&obj, Some(git2::build::CheckoutBuilder::new().force()))
            .unwrap();
        self.repo.set_head(&refname).unwrap();
    }

    fn open(&self) -> Repo {
        Repo::open(&self.root).unwrap()
    }

    fn cache(&self) -> PathBuf {
        self._dir.path().join("cache")
    }
}

/// Every file under `dir` with its bytes (symlinks as their target).
fn tree_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                out.insert(rel, target.as_os_str().as_encoded_bytes().to_vec());
            } else {
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The files of a checkout, without its `.git`.
fn files(dir: &Path) -> BTreeMap<String, String> {
    tree_bytes(dir)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".git"))
        .filter(|(_, b)| b != b"<dir>")
        .map(|(p, b)| (p.display().to_string(), String::from_utf8(b).unwrap()))
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn branches(repo: &Repository) -> Vec<String> {
    let mut names: Vec<String> = repo
        .branches(None)
        .unwrap()
        .map(|b| {
            let (b, kind) = b.unwrap();
            format!("{kind:?} {}", b.name().unwrap().unwrap())
        })
        .collect();
    names.sort();
    names
}

fn git_cli() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A repository with three commits on `main`, a lightweight and an annotated tag.
fn three_commits() -> (Fixture, [String; 3]) {
    let f = Fixture::new();
    let a = f.commit(
        "first",
        &[("a.txt", "a1\n"), ("src/lib.rs", "fn a() {}\n")],
        &[],
    );
    let b = f.commit("second: touch a", &[("a.txt", "a2\n")], &[]);
    let c = f.commit(
        "third: add b, drop lib",
        &[("b.txt", "b3\n")],
        &["src/lib.rs"],
    );
    {
        let commit = f.repo.find_commit(b.parse().unwrap()).unwrap();
        f.repo
            .tag_lightweight("light", commit.as_object(), false)
            .unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        f.repo
            .tag("v1", commit.as_object(), &sig, "release", false)
            .unwrap();
    }
    (f, [a, b, c])
}

#[test]
fn open_outside_a_repository_names_the_path() {
    let dir = TempDir::new().unwrap();
    let err = Repo::open(dir.path()).unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(msg.contains("not inside a git repository"), "{msg}");
}

#[test]
fn resolve_head_parent_tags_and_unknown() {
    let (f, [a, b, c]) = three_commits();
    // Discovery from a subdirectory.
    fs::create_dir_all(f.root.join("deep/er")).unwrap();
    let repo = Repo::open(&f.root.join("deep/er")).unwrap();

    let head = repo.resolve("HEAD").unwrap();
    assert_eq!(head.sha, c);
    assert_eq!(head.spec, "HEAD");
    assert_eq!(head.subject, "third: add b, drop lib");
    assert!(!head.dirty);
    assert_eq!(repo.resolve("HEAD~1").unwrap().sha, b);
    assert_eq!(repo.resolve("HEAD~2").unwrap().sha, a);
    assert_eq!(repo.resolve("light").unwrap().sha, b);
    let tagged = repo.resolve("v1").unwrap();
    assert_eq!(tagged.sha, b, "annotated tags peel to their commit");
    assert_eq!(tagged.subject, "second: touch a");
    assert_eq!(repo.resolve(&c[..10]).unwrap().sha, c);

    for bad in ["nope", "HEAD~3", "0123456789abcdef0123456789abcdef01234567"] {
        let err = repo.resolve(bad).unwrap_err();
        assert!(matches!(err, GitError::UnknownRevision { .. }), "{err:?}");
        let msg = err.to_string();
        assert_eq!(
            msg,
            format!("unknown revision `{bad}`"),
            "not shallow: no advice"
        );
    }
    let err = repo.resolve("HEAD:b.txt").unwrap_err();
    assert!(matches!(err, GitError::NotACommit { .. }), "{err:?}");
    assert!(err.to_string().contains("`HEAD:b.txt` is not a commit"));
}

#[test]
fn merge_base_of_two_branches_and_of_unrelated_histories() {
    let f = Fixture::new();
    let root = f.commit("root", &[("x", "0\n")], &[]);
    let fork = f.commit("fork point", &[("x", "1\n")], &[]);
    let main_tip = f.commit("main moves on", &[("x", "2\n")], &[]);
    let main = f.repo.head().unwrap().shorthand().unwrap().to_string();
    f.branch("feature", &fork);
    f.switch("feature");
    let feature_tip = f.commit("feature work", &[("y", "f\n")], &[]);
    let repo = f.open();

    assert_eq!(repo.merge_base(&main, "feature").unwrap(), fork);
    assert_eq!(repo.merge_base("feature", &main).unwrap(), fork);
    assert_eq!(repo.merge_base(&main_tip, &feature_tip).unwrap(), fork);
    assert_eq!(repo.merge_base(&root, "HEAD").unwrap(), root);

    let err = repo.merge_base("HEAD", "nope").unwrap_err();
    assert_eq!(err.to_string(), "unknown revision `nope`");

    // An orphan commit: no common history.
    let sig = Signature::now("t", "t@example.com").unwrap();
    let tree = f
        .repo
        .find_commit(root.parse().unwrap())
        .unwrap()
        .tree()
        .unwrap();
    let orphan = f
        .repo
        .commit(None, &sig, &sig, "orphan", &tree, &[])
        .unwrap();
    let err = repo.merge_base("HEAD", &orphan.to_string()).unwrap_err();
    assert!(
        matches!(err, GitError::NoMergeBase { shallow: false, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("no merge base between `HEAD` and `{orphan}`")
    );
}

#[test]
fn default_branch_detection_order() {
    let f = Fixture::new();
    let sha = f.commit("one", &[("x", "1\n")], &[]);
    // HEAD is on git's init default branch; rename it away from main/master.
    let mut current = f
        .repo
        .find_branch(
            f.repo.head().unwrap().shorthand().unwrap(),
            BranchType::Local,
        )
        .unwrap();
    current.rename("work", true).unwrap();
    let repo = f.open();
    let err = repo.default_branch().unwrap_err();
    assert!(matches!(err, GitError::NoDefaultBranch { .. }), "{err:?}");
    assert!(err.to_string().contains("pass --base"), "{err}");

    f.branch("master", &sha);
    assert_eq!(repo.default_branch().unwrap(), "master");
    f.branch("main", &sha);
    assert_eq!(repo.default_branch().unwrap(), "main");
    let oid = sha.parse().unwrap();
    f.repo
        .reference("refs/remotes/origin/master", oid, false, "test")
        .unwrap();
    assert_eq!(repo.default_branch().unwrap(), "origin/master");
    f.repo
        .reference("refs/remotes/origin/main", oid, false, "test")
        .unwrap();
    assert_eq!(repo.default_branch().unwrap(), "origin/main");
    f.repo
        .reference("refs/remotes/origin/trunk", oid, false, "test")
        .unwrap();
    f.repo
        .reference_symbolic(
            "refs/remotes/origin/HEAD",
            "refs/remotes/origin/trunk",
            false,
            "test",
        )
        .unwrap();
    assert_eq!(repo.default_branch().unwrap(), "origin/trunk");
    assert_eq!(repo.resolve("origin/trunk").unwrap().sha, sha);
    // A dangling origin/HEAD falls through to the list.
    f.repo
        .find_reference("refs/remotes/origin/trunk")
        .unwrap()
        .delete()
        .unwrap();
    assert_eq!(repo.default_branch().unwrap(), "origin/main");
}

#[test]
fn two_commits_into_two_slots_leave_the_user_repository_untouched() {
    let (f, [a, _b, c]) = three_commits();
    let before_git = tree_bytes(&f.root.join(".git"));
    let before_branches = branches(&f.repo);
    let repo = f.open();
    let cache = f.cache();

    let base = repo
        .checkout("base", Checkout::Commit(a.clone()), &cache)
        .unwrap();
    let head = repo
        .checkout("head", Checkout::Commit("HEAD".into()), &cache)
        .unwrap();
    assert_eq!(base.path, cache.join("worktrees/base"));
    assert_eq!(head.path, cache.join("worktrees/head"));
    assert_eq!((base.sha.as_str(), base.dirty), (a.as_str(), false));
    assert_eq!((head.sha.as_str(), head.dirty), (c.as_str(), false));
    assert_eq!(
        files(&base.path),
        map(&[("a.txt", "a1\n"), ("src/lib.rs", "fn a() {}\n")])
    );
    assert_eq!(
        files(&head.path),
        map(&[("a.txt", "a2\n"), ("b.txt", "b3\n")])
    );
    for (wt, sha) in [(&base, &a), (&head, &c)] {
        let slot = Repository::open(&wt.path).unwrap();
        assert!(slot.head_detached().unwrap(), "{}", wt.path.display());
        assert_eq!(slot.head().unwrap().target().unwrap().to_string(), *sha);
        assert!(branches(&slot).is_empty(), "no branch even in the slot");
        assert!(slot.statuses(None).unwrap().is_empty(), "slot is clean");
    }
    base.release().unwrap();
    drop(head);

    assert_eq!(branches(&f.repo), before_branches, "no branch created");
    assert!(
        f.repo.worktrees().unwrap().is_empty(),
        "no worktree registered"
    );
    assert!(
        tree_bytes(&f.root.join(".git")) == before_git,
        "the user's .git must be byte-for-byte unchanged"
    );
    if git_cli() {
        let list = git(&f.root, &["worktree", "list", "--porcelain"]);
        assert_eq!(list.matches("worktree ").count(), 1, "{list}");
        // The slot is a normal repository for git too (build scripts may call it).
        let head_sha = git(&cache.join("worktrees/head"), &["rev-parse", "HEAD"]);
        assert_eq!(head_sha.trim(), c);
        let status = git(&cache.join("worktrees/head"), &["status", "--porcelain"]);
        assert_eq!(status, "");
    } else {
        eprintln!("skipped: `git worktree list` cross-check (no git CLI)");
    }
    // The lock files are gone, the directories stay for reuse.
    let mut left: Vec<_> = fs::read_dir(cache.join("worktrees"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["base", "head"]);
}

#[test]
fn reuse_moves_a_slot_keeping_ignored_build_output() {
    let (f, [a, b, c]) = three_commits();
    let d = f.commit("ignore target", &[(".gitignore", "/target/\n")], &[]);
    let repo = f.open();
    let cache = f.cache();

    let wt = repo
        .checkout("s", Checkout::Commit(c.clone()), &cache)
        .unwrap();
    let path = wt.path.clone();
    // A file the next commit does not change keeps its mtime (cargo's fingerprints).
    let kept = path.join("b.txt");
    let mtime = fs::metadata(&kept).unwrap().modified().unwrap();
    wt.release().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));

    let wt = repo
        .checkout("s", Checkout::Commit(d.clone()), &cache)
        .unwrap();
    assert_eq!(
        (wt.path.as_path(), wt.sha.as_str()),
        (path.as_path(), d.as_str())
    );
    assert_eq!(fs::metadata(&kept).unwrap().modified().unwrap(), mtime);
    fs::create_dir_all(path.join("target")).unwrap();
    fs::write(path.join("target/artifact"), "built").unwrap();
    fs::write(path.join("stray.txt"), "untracked").unwrap();
    fs::write(path.join("a.txt"), "ed\n").unwrap(); // same size as "a2\n"
    fs::remove_file(path.join("b.txt")).unwrap();
    drop(wt);

    let wt = repo
        .checkout("s", Checkout::Commit(d.clone()), &cache)
        .unwrap();
    assert_eq!(
        files(&path),
        map(&[
            (".gitignore", "/target/\n"),
            ("a.txt", "a2\n"),
            ("b.txt", "b3\n"),
            ("target/artifact", "built"),
        ]),
        "forced back to the commit: edits undone, deletions restored, untracked removed, \
         ignored build output kept"
    );
    drop(wt);

    for (sha, expect) in [
        (&a, map(&[("a.txt", "a1\n"), ("src/lib.rs", "fn a() {}\n")])),
        (&b, map(&[("a.txt", "a2\n"), ("src/lib.rs", "fn a() {}\n")])),
        (&c, map(&[("a.txt", "a2\n"), ("b.txt", "b3\n")])),
    ] {
        let wt = repo
            .checkout("s", Checkout::Commit(sha.clone()), &cache)
            .unwrap();
        assert_eq!(wt.sha, *sha);
        let mut got = files(&wt.path);
        got.retain(|p, _| !p.starts_with("target/"));
        assert_eq!(got, expect, "{sha}");
        let slot = Repository::open(&wt.path).unwrap();
        assert!(slot.head_detached().unwrap());
        assert_eq!(slot.head().unwrap().target().unwrap().to_string(), *sha);
    }
}

#[test]
fn working_tree_snapshot_carries_changes_without_touching_the_user() {
    let f = Fixture::new();
    let base = f.commit(
        "base",
        &[
            (".gitignore", "/target/\n*.log\n"),
            ("keep.txt", "keep\n"),
            ("mod.txt", "abc\n"),
            ("gone.txt", "bye\n"),
            ("dir/gone2.txt", "bye too\n"),
            ("staged.txt", "old\n"),
        ],
        &[],
    );
    // Uncommitted state: same-size edit, deletions (one emptying a dir), untracked files in a new
    // dir, a staged-only change, an ignored file and an ignored dir.
    f.write("mod.txt", "xyz\n");
    fs::remove_file(f.root.join("gone.txt")).unwrap();
    fs::remove_file(f.root.join("dir/gone2.txt")).unwrap();
    f.write("new/deep/added.txt", "new file\n");
    f.write("staged.txt", "new\n");
    let mut index = f.repo.index().unwrap();
    index.add_path(Path::new("staged.txt")).unwrap();
    index.write().unwrap();
    f.write("debug.log", "ignored\n");
    f.write("target/out", "ignored\n");
    #[cfg(unix)]
    std::os::unix::fs::symlink("keep.txt", f.root.join("link")).unwrap();

    let before_git = tree_bytes(&f.root.join(".git"));
    let before_work = tree_bytes(&f.root);
    let before_branches = branches(&f.repo);
    let before_index: Vec<_> = f
        .repo
        .index()
        .unwrap()
        .iter()
        .map(|e| (e.path, e.id, e.mode))
        .collect();

    let repo = f.open();
    assert!(repo.is_dirty().unwrap());
    let rev = repo.resolve_working_tree().unwrap();
    assert_eq!(
        (rev.spec.as_str(), rev.sha.as_str(), rev.dirty),
        ("working tree", base.as_str(), true)
    );
    let cache = f.cache();
    let wt = repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap();
    assert_eq!(wt.sha, base);
    assert!(wt.dirty);
    let mut expect = map(&[
        (".gitignore", "/target/\n*.log\n"),
        ("keep.txt", "keep\n"),
        ("mod.txt", "xyz\n"),
        ("new/deep/added.txt", "new file\n"),
        ("staged.txt", "new\n"),
    ]);
    if cfg!(unix) {
        expect.insert("link".into(), "keep.txt".into());
    }
    assert_eq!(files(&wt.path), expect);
    assert!(!wt.path.join("dir").exists(), "emptied dir removed");
    let slot = Repository::open(&wt.path).unwrap();
    assert!(slot.head_detached().unwrap());
    drop(wt);

    assert!(
        tree_bytes(&f.root.join(".git")) == before_git,
        ".git unchanged"
    );
    assert!(tree_bytes(&f.root) == before_work, "working tree unchanged");
    assert_eq!(branches(&f.repo), before_branches);
    let after_index: Vec<_> = f
        .repo
        .index()
        .unwrap()
        .iter()
        .map(|e| (e.path, e.id, e.mode))
        .collect();
    assert_eq!(after_index, before_index);
    assert!(f.repo.worktrees().unwrap().is_empty());

    // Reusing the slot for the commit itself drops every carried change.
    let wt = repo
        .checkout("head", Checkout::Commit(base.clone()), &cache)
        .unwrap();
    assert!(!wt.dirty);
    assert_eq!(
        files(&wt.path),
        map(&[
            (".gitignore", "/target/\n*.log\n"),
            ("dir/gone2.txt", "bye too\n"),
            ("gone.txt", "bye\n"),
            ("keep.txt", "keep\n"),
            ("mod.txt", "abc\n"),
            ("staged.txt", "old\n"),
        ])
    );
}

#[test]
fn clean_working_tree_snapshot_is_not_dirty_and_skips_the_cache_dir() {
    let f = Fixture::new();
    let sha = f.commit("one", &[("x", "1\n")], &[]);
    f.write("ignored.log", "x");
    fs::write(f.root.join(".git/info/exclude"), "*.log\n").unwrap();
    let repo = f.open();
    assert!(!repo.is_dirty().unwrap(), "ignored files are not dirt");
    assert!(!repo.resolve_working_tree().unwrap().dirty);

    // A cache dir inside the (not ignoring) working tree is not carried into the snapshot.
    let cache = f.root.join("cache");
    let wt = repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap();
    assert_eq!((wt.sha.as_str(), wt.dirty), (sha.as_str(), false));
    assert_eq!(files(&wt.path), map(&[("x", "1\n")]));
    drop(wt);
    let wt = repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap();
    assert!(!wt.dirty);
    assert_eq!(files(&wt.path), map(&[("x", "1\n")]));

    drop(wt);
    // Only an untracked file: still a dirty snapshot.
    f.write("untracked", "u");
    assert!(repo.is_dirty().unwrap());
    let wt = repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap();
    assert!(wt.dirty);
    assert_eq!(files(&wt.path), map(&[("untracked", "u"), ("x", "1\n")]));
}

#[test]
fn a_slot_in_use_is_locked_and_a_dead_owner_lock_is_taken_over() {
    let (f, [a, _, c]) = three_commits();
    let repo = f.open();
    let cache = f.cache();
    let first = repo
        .checkout("base", Checkout::Commit(a.clone()), &cache)
        .unwrap();
    let err = repo
        .checkout("base", Checkout::Commit(c.clone()), &cache)
        .unwrap_err();
    assert!(matches!(err, GitError::Locked { .. }), "{err:?}");
    let msg = err.to_string();
    let lock = cache.join("worktrees/base.lock");
    assert!(msg.contains(&first.path.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("rm {}", lock.display())), "{msg}");
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert_eq!(
        files(&first.path).get("a.txt").unwrap(),
        "a1\n",
        "untouched"
    );
    // Other slots are free.
    repo.checkout("head", Checkout::Commit(c.clone()), &cache)
        .unwrap();
    first.release().unwrap();
    assert!(!lock.exists());
    drop(
        repo.checkout("base", Checkout::Commit(c.clone()), &cache)
            .unwrap(),
    );

    // A lock left by a process that no longer exists (crash, kill -9).
    if Path::new("/proc/self/stat").exists() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        fs::write(&lock, format!("pid={pid}\nboot={}\nstart=1\n", boot.trim())).unwrap();
        let wt = repo
            .checkout("base", Checkout::Commit(a.clone()), &cache)
            .unwrap();
        assert_eq!(files(&wt.path).get("a.txt").unwrap(), "a1\n");
        drop(wt);
    } else {
        eprintln!("skipped: stale-lock takeover (no /proc)");
    }
    // A lock nobody can vouch for is never broken silently.
    fs::write(&lock, "garbage").unwrap();
    let err = repo
        .checkout("base", Checkout::Commit(c), &cache)
        .unwrap_err();
    assert!(err.to_string().contains("owner unknown"), "{err}");
    assert!(lock.exists());
}

#[test]
fn foreign_directories_are_never_touched_and_broken_slots_are_rebuilt() {
    let (f, [a, _, c]) = three_commits();
    let repo = f.open();
    let cache = f.cache();

    // Something of the user's where a slot would go.
    let foreign = cache.join("worktrees/base");
    fs::create_dir_all(&foreign).unwrap();
    fs::write(foreign.join("precious.txt"), "mine").unwrap();
    let err = repo
        .checkout("base", Checkout::Commit(a.clone()), &cache)
        .unwrap_err();
    assert!(matches!(err, GitError::NotOurs { .. }), "{err:?}");
    assert!(err.to_string().contains(&foreign.display().to_string()));
    assert_eq!(
        fs::read_to_string(foreign.join("precious.txt")).unwrap(),
        "mine"
    );
    // Also a foreign git repository.
    Repository::init(&foreign).unwrap();
    assert!(matches!(
        repo.checkout("base", Checkout::Commit(a.clone()), &cache),
        Err(GitError::NotOurs { .. })
    ));
    assert!(foreign.join("precious.txt").exists());
    // An empty directory is fine to use.
    let empty = cache.join("worktrees/empty");
    fs::create_dir_all(&empty).unwrap();
    drop(
        repo.checkout("empty", Checkout::Commit(a.clone()), &cache)
            .unwrap(),
    );

    // Ours, but broken: HEAD and index destroyed.
    let wt = repo
        .checkout("head", Checkout::Commit(a.clone()), &cache)
        .unwrap();
    let path = wt.path.clone();
    drop(wt);
    fs::write(path.join(".git/HEAD"), "garbage").unwrap();
    fs::write(path.join(".git/index"), "garbage").unwrap();
    let wt = repo
        .checkout("head", Checkout::Commit(c.clone()), &cache)
        .unwrap();
    assert_eq!(
        files(&wt.path),
        map(&[("a.txt", "a2\n"), ("b.txt", "b3\n")])
    );
    drop(wt);

    // Ours, but its old HEAD's objects are gone (alternates broken, as after a gc).
    fs::write(path.join(".git/objects/info/alternates"), "/nonexistent\n").unwrap();
    let wt = repo
        .checkout("head", Checkout::Commit(a.clone()), &cache)
        .unwrap();
    assert_eq!(
        files(&wt.path),
        map(&[("a.txt", "a1\n"), ("src/lib.rs", "fn a() {}\n")])
    );
    drop(wt);

    // Ours, serving another repository (a cache dir shared by mistake): rebuilt for this one.
    let other = Fixture::new();
    let other_sha = other.commit("other", &[("o.txt", "o\n")], &[]);
    let wt = other
        .open()
        .checkout("head", Checkout::Commit(other_sha), &cache)
        .unwrap();
    assert_eq!(files(&wt.path), map(&[("o.txt", "o\n")]));
    drop(wt);
    let wt = repo.checkout("head", Checkout::Commit(c), &cache).unwrap();
    assert_eq!(
        files(&wt.path),
        map(&[("a.txt", "a2\n"), ("b.txt", "b3\n")])
    );
}

#[test]
fn bad_slot_names_and_bare_working_trees_are_errors() {
    let (f, [a, ..]) = three_commits();
    let repo = f.open();
    let cache = f.cache();
    for bad in ["", "../escape", "a/b", ".git"] {
        let err = repo
            .checkout(bad, Checkout::Commit(a.clone()), &cache)
            .unwrap_err();
        assert!(matches!(err, GitError::BadSlot { .. }), "{bad}: {err:?}");
    }
    assert!(!f._dir.path().join("escape").exists());
    let err = repo
        .checkout("x", Checkout::Commit("nope".into()), &cache)
        .unwrap_err();
    assert_eq!(err.to_string(), "unknown revision `nope`");

    let bare_dir = f._dir.path().join("bare.git");
    let bare = Repository::init_bare(&bare_dir).unwrap();
    let mut remote = bare.remote_anonymous(f.root.to_str().unwrap()).unwrap();
    remote
        .fetch(&["+refs/heads/*:refs/heads/*"], None, None)
        .unwrap();
    let bare_repo = Repo::open(&bare_dir).unwrap();
    let err = bare_repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap_err();
    assert!(matches!(err, GitError::Bare { .. }), "{err:?}");
    // Commits from a bare repository check out fine.
    let wt = bare_repo
        .checkout("base", Checkout::Commit(a), &cache)
        .unwrap();
    assert!(files(&wt.path).contains_key("src/lib.rs"));
}

#[test]
fn shallow_clone_errors_say_how_to_fetch_history() {
    if !git_cli() {
        eprintln!("skipped: shallow-clone errors need the git CLI to make a shallow clone");
        return;
    }
    let f = Fixture::new();
    f.commit("root", &[("x", "0\n")], &[]);
    let fork = f.commit("fork", &[("x", "1\n")], &[]);
    f.commit("main tip", &[("x", "2\n")], &[]);
    let main = f.repo.head().unwrap().shorthand().unwrap().to_string();
    f.branch("feature", &fork);
    f.switch("feature");
    f.commit("feature tip", &[("y", "f\n")], &[]);
    f.switch(&main);

    let clone = f._dir.path().join("shallow");
    let url = format!("file://{}", f.root.display());
    let out = Command::new("git")
        .args(["clone", "-q", "--depth", "1", "--no-single-branch", &url])
        .arg(&clone)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let repo = Repo::open(&clone).unwrap();
    assert!(repo.is_shallow());
    repo.resolve("HEAD").unwrap();
    let err = repo.resolve("HEAD~1").unwrap_err();
    assert!(
        matches!(err, GitError::UnknownRevision { shallow: true, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    for needle in [
        "unknown revision `HEAD~1`",
        "shallow clone",
        "git fetch --unshallow",
        "fetch-depth: 0",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in {msg}");
    }
    let err = repo
        .merge_base(&format!("origin/{main}"), "origin/feature")
        .unwrap_err();
    assert!(
        matches!(err, GitError::NoMergeBase { shallow: true, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("git fetch --unshallow"), "{err}");
    assert_eq!(repo.default_branch().unwrap(), format!("origin/{main}"));

    // A slot of a shallow clone is shallow too, so git inside it does not trip on the cut.
    let cache = f._dir.path().join("cache");
    let wt = repo
        .checkout("head", Checkout::WorkingTree, &cache)
        .unwrap();
    let log = git(&wt.path, &["log", "--oneline"]);
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[test]
fn changed_paths_between_commits_and_with_the_working_tree() {
    let (f, [a, b, c]) = three_commits();
    let repo = f.open();
    assert_eq!(repo.changed_paths(&a, &b, false).unwrap(), ["a.txt"]);
    // Added, deleted and changed alike, in git's order.
    assert_eq!(
        repo.changed_paths(&a, &c, false).unwrap(),
        ["a.txt", "b.txt", "src/lib.rs"]
    );
    assert!(repo.changed_paths(&c, &c, false).unwrap().is_empty());
    // Uncommitted changes count when the head is the working tree.
    f.write("harness.yaml", "x\n");
    assert!(repo.changed_paths(&c, &c, false).unwrap().is_empty());
    assert_eq!(repo.changed_paths(&c, &c, true).unwrap(), ["harness.yaml"]);
}
