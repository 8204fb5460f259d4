//! Code placement: where the linker puts each function, and the means to change only that.
//!
//! A benchmark's speed depends on where its code lies (which functions share a cache line, a
//! page, a branch-predictor or µop-cache set), and any change to a program moves the rest of
//! its code. Measured here with the same compiled benchmarks linked in other function orders
//! (harness/eval/noise/README.md, "Does the link order alone move a row by δ?"): with the code
//! bytes unchanged, 5 of 10 rows moved beyond ±3 % on an Intel Xeon (`top_p` −7 %, the sampling
//! chain −10 %) and 5 of 9 on an AMD EPYC (`top_k` +9 %, `gather/bf16/small` +9 %, the chain
//! −12 %), the method's A/A within ±0.5 % on those rows. A gate that measures one link per side
//! reports the PR's move of the code as its effect; `measure::placement` samples placement
//! instead, a fresh function order per side and round.
//!
//! This module is the link side of that:
//! - [`wrapper`] installs a linker wrapper beside a target dir, which cargo is told to use for
//!   the target (`CARGO_TARGET_<TRIPLE>_LINKER`, [`cargo_env`]): a two-line script that runs
//!   the harness binary as `harness __link ARGS…` ([`link_main`]). It runs the real linker with
//!   the arguments unchanged (the executable is the same bytes as without it), then keeps a
//!   **recipe** beside every executable it linked into a `deps` dir: the arguments, `PATH`, the
//!   working directory, and
//!   hard links to the object files rustc deletes after linking (its codegen units, `*.rcgu.o`,
//!   and its temporary directory `deps/rustcXXXXXX/`).
//! - [`Recipe::of`] reads the recipe of a built executable (checked to be that link's: size and
//!   modification time) and [`Recipe::link`] links it again, optionally with lld's
//!   `--shuffle-sections=*=SEED`: rustc puts every function in a section of its own and links
//!   x86_64-unknown-linux-gnu with its own lld since Rust 1.90 (`-fuse-ld=lld`), so a seed
//!   reorders every function of the program, the engine's included, and nothing is compiled
//!   again. A relink is stripped (`--strip-all`: no debug sections or symbol table, which are
//!   not loaded and only cost link time).
//!
//! The wrapper is installed for every build of a slot, whether or not a run samples placement:
//! cargo keeps the linker in its fingerprints (cargo#9647), so a linker that came and went would
//! rebuild the slot's whole dependency tree. A revision whose cargo configuration names a linker
//! of its own keeps it: no wrapper, and no recipes ([`configured_linker`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::vocab::ProcessFailure;

/// The hidden first argument under which the harness binary acts as the linker.
pub const LINK_ARG: &str = "__link";
/// The linker the wrapper stands in for (`cc` when unset: rustc's on Linux).
pub const REAL_LINKER_ENV: &str = "HARNESS_REAL_LINKER";
/// The wrapper's file name in a target dir.
const WRAPPER_NAME: &str = "harness-link";
/// Beside `deps/NAME`: `deps/NAME.placement/`, the recipe of its last link.
const RECIPE_SUFFIX: &str = ".placement";
const RECIPE_FILE: &str = "recipe.json";
/// What a failed recipe left instead (the reason), read by [`Recipe::of`].
const RECIPE_ERROR_FILE: &str = "error.txt";

/// The harness executable, when this process is one ([`link_main`] is its `__link`): set by
/// `main`, so that a library user (a test binary) never installs a wrapper that runs itself.
static HARNESS_EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Declares this process the harness binary (called by `main`).
pub fn this_is_the_harness() {
    if let Ok(exe) = std::env::current_exe() {
        let _ = HARNESS_EXE.set(exe);
    }
}

/// The harness executable, if this process is one.
pub fn harness_exe() -> Option<&'static Path> {
    HARNESS_EXE.get().map(PathBuf::as_path)
}

/// Cargo's variable for the linker of the target the harness was built for (the host's, which
/// is what `cargo bench` builds for without `--target`).
pub fn linker_var() -> String {
    format!(
        "CARGO_TARGET_{}_LINKER",
        env!("HARNESS_HOST_TARGET")
            .to_uppercase()
            .replace(['-', '.'], "_")
    )
}

/// Whether relinking in another function order is possible for this host's target at all:
/// rustc links with lld (whose `--shuffle-sections` it needs) on x86_64 Linux with glibc.
pub fn supported() -> bool {
    env!("HARNESS_HOST_TARGET") == "x86_64-unknown-linux-gnu"
}

/// Installs (or refreshes) the linker wrapper of `target_dir`, running `harness` (this
/// executable). None where placement cannot be sampled (another target, or a revision at
/// `worktree` that configures its own linker), or the wrapper cannot be written: then cargo links
/// as it would without the harness.
pub fn wrapper(target_dir: &Path, worktree: &Path, harness: &Path) -> Option<PathBuf> {
    if !supported() || configured_linker(worktree).is_some() {
        return None;
    }
    // Absolute: cargo resolves a relative linker path against its own directory, the worktree.
    let target_dir = std::path::absolute(target_dir).ok()?;
    let path = target_dir.join(WRAPPER_NAME);
    let script = format!(
        "#!/bin/sh\n# Written by the regression gate (harness/src/placement.rs): links as the \
         real linker does and keeps a recipe to link again.\nexec {} {LINK_ARG} \"$@\"\n",
        // A path the script cannot spell exactly would break every link: no wrapper then.
        sh_quote(harness.to_str()?)
    );
    if std::fs::read_to_string(&path).ok().as_deref() == Some(script.as_str()) {
        return Some(path);
    }
    std::fs::create_dir_all(&target_dir).ok()?;
    let tmp = target_dir.join(format!("{WRAPPER_NAME}.{}", std::process::id()));
    std::fs::write(&tmp, script).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).ok()?;
    }
    std::fs::rename(&tmp, &path).ok()?;
    Some(path)
}

/// The variables that make cargo link through `wrapper`: the target's linker, and the linker the
/// wrapper runs (one the caller's environment already named, else `cc`).
pub fn cargo_env(wrapper: &Path) -> Vec<(String, OsString)> {
    let var = linker_var();
    let mut env = vec![(var.clone(), wrapper.as_os_str().to_owned())];
    if let Some(user) = std::env::var_os(&var).filter(|u| Path::new(u) != wrapper) {
        env.push((REAL_LINKER_ENV.to_string(), user));
    }
    env
}

/// Where a linker of the user's own is configured for the workspace at `dir`, if anywhere: a
/// cargo configuration file (cargo reads `.cargo/config{,.toml}` in `dir` and every directory
/// above it, and in `$CARGO_HOME`) or the rustflags variables (`-C linker=`). Read
/// conservatively: any line of a configuration file that mentions `linker` outside a comment
/// counts (a `[target.…]` table's key, a dotted key, an inline table, `-C linker` in
/// `rustflags`), as does any rustflags variable that mentions it.
pub fn configured_linker(dir: &Path) -> Option<String> {
    for (var, value) in std::env::vars_os() {
        let var = var.to_string_lossy();
        let rustflags = var == "RUSTFLAGS"
            || var == "CARGO_ENCODED_RUSTFLAGS"
            || (var.starts_with("CARGO_") && var.ends_with("_RUSTFLAGS"));
        if rustflags && value.to_string_lossy().contains("linker") {
            return Some(format!("${var}"));
        }
    }
    let mut dirs: Vec<PathBuf> = dir.ancestors().map(|d| d.join(".cargo")).collect();
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    dirs.extend(home);
    for d in dirs {
        for name in ["config.toml", "config"] {
            let f = d.join(name);
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            let names_linker = text
                .lines()
                .any(|l| l.split('#').next().unwrap_or("").contains("linker"));
            if names_linker {
                return Some(f.display().to_string());
            }
        }
    }
    None
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `harness __link ARGS…`: what rustc runs as its linker through the wrapper. Runs the real
/// linker with `args` unchanged and returns its exit status; after a successful link of an
/// executable into a `deps` dir it keeps that link's recipe (a failure to keep it is written
/// where [`Recipe::of`] reports it, and never fails the build). Its child runs under the build's
/// deadline: cargo's whole process group, this process included, is killed at `build_s`.
pub fn link_main(args: Vec<OsString>) -> i32 {
    let real = std::env::var_os(REAL_LINKER_ENV).unwrap_or_else(|| "cc".into());
    let status = match Command::new(&real).args(&args).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "error: the harness's linker wrapper cannot run the linker {}: {e}",
                real.to_string_lossy()
            );
            return 1;
        }
    };
    if !status.success() {
        return status.code().unwrap_or(1);
    }
    if let Some(out) = output_of(&args).filter(|o| wants_recipe(o)) {
        let dir = recipe_dir(&out);
        if let Err(e) = save_recipe(&real, &args, &out, &dir) {
            let _ = std::fs::remove_dir_all(&dir);
            if std::fs::create_dir_all(&dir).is_ok() {
                let _ = std::fs::write(dir.join(RECIPE_ERROR_FILE), e);
            }
        }
    }
    0
}

/// The `-o` operand of a linker command line.
fn output_of(args: &[OsString]) -> Option<PathBuf> {
    let i = args.iter().position(|a| a == "-o")?;
    args.get(i + 1).map(PathBuf::from)
}

/// An executable of a crate (cargo's `deps/NAME-HASH`, no extension), not a build script
/// (`build/…`) or a shared library (`.so`).
fn wants_recipe(out: &Path) -> bool {
    out.parent().and_then(Path::file_name) == Some(OsStr::new("deps"))
        && out
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|n| !n.contains('.'))
}

/// For an executable cargo uplifted out of `deps/` (`release/engine`, a hard link of
/// `release/deps/engine-HASH`): the recipe directory of the `deps` executable it is, found by
/// name, size and modification time (a hard link shares both). None when `exe` has its own.
fn uplifted_from(exe: &Path) -> Option<PathBuf> {
    if recipe_dir(exe).exists() {
        return None;
    }
    let name = exe.file_name()?.to_str()?;
    let meta = std::fs::metadata(exe).ok()?;
    let deps = exe.parent()?.join("deps");
    std::fs::read_dir(&deps).ok()?.flatten().find_map(|e| {
        let file = e.file_name();
        let n = file.to_str()?;
        let stem = n.strip_suffix(RECIPE_SUFFIX)?;
        let hash = stem.strip_prefix(name)?.strip_prefix('-')?;
        if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let m = std::fs::metadata(deps.join(stem)).ok()?;
        (m.len() == meta.len() && mtime_ns(&m) == mtime_ns(&meta)).then(|| e.path())
    })
}

fn recipe_dir(exe: &Path) -> PathBuf {
    let mut name = exe.file_name().unwrap_or_default().to_owned();
    name.push(RECIPE_SUFFIX);
    exe.with_file_name(name)
}

/// How an executable was linked: enough to link it again ([`Recipe::link`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recipe {
    /// The linker driver (`cc`), found through `path`.
    pub program: String,
    /// Its arguments without `-o OUT`, the object files rustc deletes replaced by the recipe's
    /// own links to them.
    pub args: Vec<String>,
    /// `PATH` as rustc set it for the linker (its own `gcc-ld` first).
    pub path: String,
    /// The directory the linker ran in: relative inputs (a build script's search path) resolve
    /// against it.
    #[serde(default)]
    pub cwd: String,
    /// The executable's size and modification time just after this link: a recipe whose
    /// executable has been linked again since (outside the wrapper) is not used.
    pub exe_len: u64,
    pub exe_mtime_ns: i128,
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(-1)
}

/// Keeps the link of `out` whose arguments were `args`: hard links (else copies) of the files
/// rustc deletes after linking, and `recipe.json`, written last.
fn save_recipe(real: &OsStr, args: &[OsString], out: &Path, dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    let objs = dir.join("objs");
    std::fs::create_dir_all(&objs).map_err(|e| format!("cannot create {}: {e}", objs.display()))?;
    let deps = out.parent().unwrap_or(Path::new("."));
    let mut kept = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let a = args[i]
            .to_str()
            .ok_or_else(|| format!("linker argument {} is not UTF-8", i + 1))?;
        if a == "-o" {
            i += 2;
            continue;
        }
        if a.starts_with('@') {
            return Err(format!(
                "rustc passed the linker a response file ({a}); its contents are not kept"
            ));
        }
        kept.push(match ephemeral(Path::new(a), deps) {
            Some(p) => keep(&p, &objs, kept.len())?,
            None => a.to_string(),
        });
        i += 1;
    }
    let meta = std::fs::metadata(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let recipe = Recipe {
        program: real
            .to_str()
            .ok_or("the linker's name is not UTF-8")?
            .to_string(),
        args: kept,
        path: std::env::var("PATH").unwrap_or_default(),
        cwd: std::env::current_dir()
            .ok()
            .and_then(|d| d.to_str().map(str::to_string))
            .unwrap_or_default(),
        exe_len: meta.len(),
        exe_mtime_ns: mtime_ns(&meta),
    };
    let json = serde_json::to_string_pretty(&recipe).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!("{RECIPE_FILE}.tmp"));
    std::fs::write(&tmp, json).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join(RECIPE_FILE)).map_err(|e| format!("{}: {e}", dir.display()))
}

/// A path among the linker's arguments that rustc removes after the link: one of its codegen
/// units (`deps/*.rcgu.o`) or anything in its temporary directory (`deps/rustcXXXXXX/…`).
fn ephemeral(p: &Path, deps: &Path) -> Option<PathBuf> {
    if !p.exists() {
        return None;
    }
    let rel = p.strip_prefix(deps).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let in_temp = first.starts_with("rustc") && rel.components().count() > 1;
    let unit = rel.components().count() == 1 && first.ends_with(".rcgu.o");
    (in_temp || unit).then(|| p.to_path_buf())
}

/// A hard link (else a copy) of `p` (a file, or a directory of files) in `objs`, named by its
/// argument position so that equal names cannot collide.
fn keep(p: &Path, objs: &Path, index: usize) -> Result<String, String> {
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    let to = objs.join(format!("{index}-{name}"));
    link_or_copy(p, &to)?;
    to.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{} is not UTF-8", to.display()))
}

fn link_or_copy(from: &Path, to: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("cannot keep {}: {e}", from.display());
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(err)?;
        for entry in std::fs::read_dir(from).map_err(err)? {
            let entry = entry.map_err(err)?;
            link_or_copy(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).map_err(err)?;
    }
    Ok(())
}

impl Recipe {
    /// The recipe of `exe`'s last link, checked: kept by the wrapper, for this very link, and
    /// through lld. The error says why not, naming the executable.
    pub fn of(exe: &Path) -> Result<Recipe, String> {
        // Cargo links a binary into `deps/NAME-HASH` and hard-links it up to `NAME` (the
        // `engine` the e2e checks run): the recipe lies beside the one in `deps`.
        let dir = match uplifted_from(exe) {
            Some(d) => d,
            None => recipe_dir(exe),
        };
        if let Ok(e) = std::fs::read_to_string(dir.join(RECIPE_ERROR_FILE)) {
            return Err(format!("the link of {} kept no recipe: {e}", exe.display()));
        }
        let text = std::fs::read_to_string(dir.join(RECIPE_FILE)).map_err(|_| {
            format!(
                "{} has no link recipe (it was not linked through the harness's wrapper)",
                exe.display()
            )
        })?;
        let r: Recipe = serde_json::from_str(&text)
            .map_err(|e| format!("{}: {e}", dir.join(RECIPE_FILE).display()))?;
        let meta = std::fs::metadata(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
        if meta.len() != r.exe_len || mtime_ns(&meta) != r.exe_mtime_ns {
            return Err(format!(
                "the link recipe beside {} is older than the executable",
                exe.display()
            ));
        }
        if !r.args.iter().any(|a| a == "-fuse-ld=lld") {
            return Err(format!(
                "{} was not linked by lld, whose --shuffle-sections placement sampling needs",
                exe.display()
            ));
        }
        Ok(r)
    }

    /// Links the recipe again into `out`: with `seed`, every input section (every function) in
    /// lld's shuffled order for that seed, stripped; without, exactly as it was linked.
    pub fn link(
        &self,
        seed: Option<u64>,
        out: &Path,
        deadline: Duration,
    ) -> Result<(), ProcessFailure> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .arg("-o")
            .arg(out)
            .env("PATH", &self.path);
        if !self.cwd.is_empty() {
            cmd.current_dir(&self.cwd);
        }
        if let Some(s) = seed {
            cmd.arg(format!("-Wl,--shuffle-sections=*={s}"))
                .arg("-Wl,--strip-all");
        }
        let what = format!("linking {} again", out.display());
        let (o, timed_out) =
            crate::process::output(&mut cmd, deadline).map_err(|e| ProcessFailure {
                message: format!("{what}: cannot run {}: {e}", self.program),
                log_tail: Vec::new(),
            })?;
        let tail = || {
            let text = String::from_utf8_lossy(&o.stderr);
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines[lines.len().saturating_sub(10)..].to_vec()
        };
        if timed_out {
            return Err(ProcessFailure {
                message: crate::process::timed_out(&what, deadline, "build_s"),
                log_tail: tail(),
            });
        }
        if !o.status.success() {
            return Err(ProcessFailure {
                message: format!("{what} failed ({})", o.status),
                log_tail: tail(),
            });
        }
        // On disk before anything is timed: its pages are not written back during a benchmark.
        std::fs::File::open(out)
            .and_then(|f| f.sync_all())
            .map_err(|e| ProcessFailure::bare(format!("{what}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executables_in_deps_get_a_recipe() {
        assert!(wants_recipe(Path::new("/t/release/deps/kernels-0123abcd")));
        assert!(!wants_recipe(Path::new(
            "/t/release/deps/libserde_derive-01.so"
        )));
        assert!(!wants_recipe(Path::new(
            "/t/release/build/engine-01/build_script_build-01"
        )));
        assert!(!wants_recipe(Path::new("/t/release/engine")));
    }

    #[test]
    fn the_files_rustc_deletes_are_recognised() {
        let dir = tempfile::TempDir::new().unwrap();
        let deps = dir.path().join("deps");
        std::fs::create_dir_all(deps.join("rustcAbC123/raw-dylibs")).unwrap();
        for f in [
            "k-01.k.5f-cgu.00.rcgu.o",
            "rustcAbC123/symbols.o",
            "libx-01.rlib",
        ] {
            std::fs::write(deps.join(f), b"x").unwrap();
        }
        let e = |p: &str| ephemeral(&deps.join(p), &deps).is_some();
        assert!(e("k-01.k.5f-cgu.00.rcgu.o"));
        assert!(e("rustcAbC123/symbols.o"));
        assert!(e("rustcAbC123/raw-dylibs"));
        assert!(!e("libx-01.rlib"), "a dependency's rlib stays where it is");
        assert!(!e("gone.rcgu.o"), "only what exists");
        assert!(ephemeral(Path::new("/usr/lib/crt1.o"), &deps).is_none());
    }

    #[test]
    fn a_linker_in_cargo_configuration_is_found_and_comments_are_not() {
        let dir = tempfile::TempDir::new().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".cargo")).unwrap();
        let cfg = ws.join(".cargo/config.toml");
        std::fs::write(&cfg, "[build]\n# linker = \"mold\"\njobs = 2\n").unwrap();
        // CARGO_HOME/HOME of the test process may hold a config of their own: only the
        // workspace's file is asserted on.
        assert_ne!(configured_linker(&ws), Some(cfg.display().to_string()));
        // CARGO_HOME/HOME's own config, or the test environment's rustflags, may name one:
        // only the workspace's file is asserted on.
        let ours = Some(cfg.display().to_string());
        for text in [
            "[target.x86_64-unknown-linux-gnu]\nlinker = \"clang\"\n",
            "target.x86_64-unknown-linux-gnu.linker = \"clang\"\n",
            "[target]\nx86_64-unknown-linux-gnu = { linker = \"clang\" }\n",
            "[build]\nrustflags = [\"-C\", \"linker=clang\"]\n",
        ] {
            std::fs::write(&cfg, text).unwrap();
            assert_eq!(configured_linker(&ws), ours, "{text}");
        }
    }

    #[test]
    fn the_wrapper_quotes_the_harness_path() {
        assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
