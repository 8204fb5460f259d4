//! Instruction counts per iteration of a single-threaded benchmark, from valgrind's callgrind:
//! a second, deterministic view of a change beside the timings (harness/STATS.md, "Instruction
//! counts"). Hardware counters cannot be read on the VMs this runs on (`perf stat` says "not
//! supported"), so the counts come from valgrind's simulated CPU.
//!
//! How: the bench executable serves the benchmark as for paired sampling
//! (`HARNESS_BENCH_SERVE`, engine/benches/common/group.rs) under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=*common::group::serve*`, so
//! only what runs inside the serve loop is counted (building the inputs, loading a tokenizer,
//! the process start are not). **One process** is asked for three samples, `n`, `n` and `2n`
//! iterations, and callgrind writes its counts out after each (`--dump-after` the serve loop's
//! per-request function): the second and third differ by exactly `n` iterations, their fixed
//! cost (reading the request, two clock reads, writing the answer) cancels, and the first
//! takes the process's one-time costs (lazy initialisation, the first touch of buffers) out
//! of both. Per iteration = (I(2n) − I(n)) / n.
//!
//! One process rather than two (`n` in one, `2n` in another, the method until 2026-12-04, still
//! used for both sides of a pair when either executable lacks the per-request function,
//! [`Method::for_pair`]): a process can hold state that its start draws at random and that
//! changes the count. Two processes then count 2·c₂ − c₁ with independent c₁, c₂ (variance 5σ²);
//! one process counts its own c (σ²). `tokenization/decode`, 12 counts each way on one
//! executable: sd 0.122 % from two processes, 0.041 % from one
//! (harness/eval/results/noise/instructions-one-process/).
//!
//! **Fixed seeds.** That random state was the `tokenizers` crate's hash seeds: ahash draws them
//! once per process through the `getrandom` crate, which finds the C library's `getrandom` with
//! `dlsym` (as Rust's standard library does for its `HashMap` keys). The counted process gets a
//! `getrandom` of the harness's own preloaded (`LD_PRELOAD`, [`fixed_getrandom`]): one fixed
//! byte stream (src/measure/fixed_getrandom.c, built by build.rs), the same for both sides, so
//! their counts differ by code alone. `tokenization/decode`, 12 one-process counts on one
//! executable: sd 0.080 % with the system's `getrandom`, all twelve equal with the fixed one
//! (harness/eval/results/noise/instructions-fixed-seed/). Only counted processes get it; timed
//! ones draw as the product does.
//!
//! Valgrind runs the program about 50× slower, so `n` is sized from the measured time per
//! iteration to a few milliseconds of native work, and every run has a deadline.
//!
//! A count depends only on the executable's bytes, the benchmark and valgrind, so
//! [`CountCache`] keeps them in the harness cache: a base commit that many pull requests share is
//! counted once. That holds while the benchmark's process runs nothing beside it: a one-thread
//! `CpuBackend` used to start an idle rayon worker whose start-up allocations interleaved with
//! the benchmark thread's by timing, leaving the heap in one of several states, so glibc's
//! malloc took other paths in the loop (`malloc_consolidate` on every iteration in one state)
//! and `reduce_mean/f32/small` counted 19 603 or 20 277 per iteration in two processes (the A/A
//! of 2026-12-03). Without the worker, repeated counts agree to the instruction
//! (harness/eval/noise/README.md).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

/// The function whose calls are counted: the serve loop of engine/benches/common/group.rs.
pub const TOGGLE: &str = "*common::group::serve*";
/// The serve loop's per-request function, after each return of which callgrind writes its
/// counts out (engine/benches/common/group.rs, `one_request`).
pub const DUMP_AFTER: &str = "*common::group::one_request*";

/// How a benchmark's instructions per iteration are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// One process serves n, n and 2n iterations, callgrind writing its counts out after each
    /// request: (I₃ − I₂) / n.
    OneProcess,
    /// One process serves n iterations, another 2n: (I(2n) − I(n)) / n. The only way for a bench
    /// executable without the per-request function (before 2026-12-04).
    TwoProcesses,
}

impl Method {
    /// The method an executable can be counted by: one process when its symbols name the serve
    /// loop's per-request function, else two. Reads the file (a few MiB); an unreadable file
    /// gets two processes, whose own run then says what is wrong.
    pub fn of(exe: &Path) -> Method {
        const NAME: &[u8] = b"one_request";
        match std::fs::read(exe) {
            Ok(bytes) if bytes.windows(NAME.len()).any(|w| w == NAME) => Method::OneProcess,
            _ => Method::TwoProcesses,
        }
    }

    /// The method both sides of a comparison are counted by: one process only when both can be,
    /// so that a pair's counts differ by the code alone. On one executable the two agree closely
    /// where nothing random enters the loop (`matmul/f16_t1/32x1024x1024`: 11 377 071 and
    /// 11 377 187 per iteration at n = 1), and they differ in spread where something does
    /// (`tokenization/decode`: sd 0.041 % against 0.122 % over 12 counts each;
    /// harness/eval/noise/README.md).
    pub fn for_pair(base: Method, head: Method) -> Method {
        if base == Method::OneProcess && head == Method::OneProcess {
            Method::OneProcess
        } else {
            Method::TwoProcesses
        }
    }

    /// Part of a cached count's key.
    fn key(self) -> &'static str {
        match self {
            Method::OneProcess => "one process: n, n, 2n",
            Method::TwoProcesses => "two processes: n; 2n",
        }
    }
}
/// Native time one counted sample aims at (the `2n` run takes twice that).
pub const TARGET_NS: f64 = 4e6;
/// The longest one valgrind run may take.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// valgrind on the PATH, when it runs.
pub struct Valgrind {
    pub path: PathBuf,
    /// What `valgrind --version` said (part of a cached count's key).
    pub version: String,
    /// The fixed `getrandom` preloaded into every counted process ([`fixed_getrandom`]); `None`
    /// counts with the system's (part of a cached count's key).
    pub preload: Option<PathBuf>,
}

impl Valgrind {
    /// With the fixed `getrandom` written into `dir` and preloaded into every counted process.
    /// Where it cannot be written the counts go on with the system's `getrandom`, and say so in
    /// the returned warning.
    pub fn with_fixed_getrandom(mut self, dir: &Path) -> (Valgrind, Option<String>) {
        // The loader splits LD_PRELOAD at spaces and colons, so such a path would name nothing.
        let written = fixed_getrandom(dir).and_then(|p| match p.to_str() {
            Some(t) if !t.contains([' ', ':']) => Ok(p),
            _ => Err(format!(
                "{} cannot go into LD_PRELOAD (a space or colon in the path)",
                p.display()
            )),
        });
        match written {
            Ok(p) => {
                self.preload = Some(p);
                (self, None)
            }
            Err(e) => (
                self,
                Some(format!(
                    "{e}: instructions counted with the system's getrandom (a tokenizer row's \
                     count can then move by a few tenths of a percent between processes)"
                )),
            ),
        }
    }

    /// Part of a cached count's key: the preloaded library's file name, which holds its bytes'
    /// hash ([`fixed_getrandom`]), so another stream is another key.
    fn seeds_key(&self) -> String {
        match self.preload.as_ref().and_then(|p| p.file_name()) {
            Some(name) => format!("getrandom: {}", name.to_string_lossy()),
            None => "getrandom: the system's".into(),
        }
    }
}

/// valgrind on the PATH with the fixed `getrandom` written into `<cache_dir>/instructions/`, as
/// every counting command uses it; a library that cannot be written is said through `progress`
/// and the counts go on with the system's `getrandom`.
pub fn valgrind_for_counting(
    cache_dir: &Path,
    progress: &dyn crate::progress::Progress,
) -> Option<Valgrind> {
    find_valgrind().map(|v| {
        let (v, warning) = v.with_fixed_getrandom(&cache_dir.join("instructions"));
        if let Some(w) = warning {
            progress.stage(&format!("warning: {w}"));
        }
        v
    })
}

/// The shared library of src/measure/fixed_getrandom.c, as build.rs compiled it (Linux only).
#[cfg(fixed_getrandom)]
const FIXED_GETRANDOM: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libfixed_getrandom.so"
)));
#[cfg(not(fixed_getrandom))]
const FIXED_GETRANDOM: Option<&[u8]> = None;

/// Writes the fixed `getrandom` library into `dir` (once: the file is named by its bytes' hash,
/// written to a temporary file and renamed into place) and returns its path.
pub fn fixed_getrandom(dir: &Path) -> Result<PathBuf, String> {
    use sha2::{Digest, Sha256};
    let bytes = FIXED_GETRANDOM
        .ok_or("no fixed getrandom library on this platform (it is built on Linux only)")?;
    let sha = format!("{:x}", Sha256::digest(bytes));
    let path = dir.join(format!("fixed-getrandom-{}.so", &sha[..16]));
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(bytes)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// valgrind on the PATH, when `valgrind --version` runs.
pub fn find_valgrind() -> Option<Valgrind> {
    let out = Command::new("valgrind")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| Valgrind {
        path: PathBuf::from("valgrind"),
        version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        preload: None,
    })
}

/// Counts kept on disk under `<cache>/instructions/`, one file per (valgrind version, the
/// `getrandom` the counted process had, executable sha256, benchmark id, `n`, method).
pub struct CountCache {
    dir: PathBuf,
    valgrind_version: String,
    seeds: String,
    exe_sha: HashMap<PathBuf, Option<String>>,
}

impl CountCache {
    pub fn new(dir: PathBuf, valgrind: &Valgrind) -> CountCache {
        CountCache {
            dir,
            valgrind_version: valgrind.version.clone(),
            seeds: valgrind.seeds_key(),
            exe_sha: HashMap::new(),
        }
    }

    /// The cache file of (`exe`, `id`, `n`, `method`), or `None` when the executable cannot be
    /// read.
    fn file(&mut self, exe: &Path, id: &str, n: u64, method: Method) -> Option<PathBuf> {
        use sha2::{Digest, Sha256};
        let exe_sha = self
            .exe_sha
            .entry(exe.to_path_buf())
            .or_insert_with(|| {
                std::fs::read(exe)
                    .ok()
                    .map(|bytes| format!("{:x}", Sha256::digest(&bytes)))
            })
            .clone()?;
        let mut h = Sha256::new();
        let n = n.to_string();
        for part in [
            method.key(),
            self.valgrind_version.as_str(),
            self.seeds.as_str(),
            exe_sha.as_str(),
            id,
            n.as_str(),
        ] {
            h.update(part.as_bytes());
            h.update([0u8]);
        }
        Some(self.dir.join(format!("{:x}.json", h.finalize())))
    }

    /// A count from the cache, else measured ([`per_iteration`]) and kept.
    pub fn per_iteration(
        &mut self,
        valgrind: &Valgrind,
        exe: &Path,
        id: &str,
        n: u64,
        method: Method,
        work: &Path,
    ) -> Result<f64, String> {
        let file = self.file(exe, id, n, method);
        if let Some(x) = file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x > 0.0)
        {
            return Ok(x);
        }
        let x = per_iteration(valgrind, exe, id, n, method, work)?;
        if let Some(f) = file {
            // A cache that cannot be written only costs a recount next time.
            let _ = std::fs::create_dir_all(&self.dir)
                .and_then(|()| std::fs::write(&f, format!("{x}\n")));
        }
        Ok(x)
    }
}

/// Iterations per counted sample for a benchmark taking `ns_per_iter` natively: the power of
/// two nearest to [`TARGET_NS`] of native work.
///
/// A power of two, not the exact quotient: a count per iteration depends a little on `n`, the
/// iterations it spans (a heap event such as glibc's `malloc_consolidate`, a few thousand
/// instructions, falls inside the `n` counted iterations or not; `matvec/f32/576x1536` counted
/// 232 829 per iteration at n = 20 and 233 074 at n = 360, 0.1 % apart), so both sides of a
/// comparison are counted at one `n` and the cache keys counts by it. Rounded to a power of
/// two, the `n` of a benchmark stays the same from run to run while its time moves by less
/// than ±41 %, so a base counted once keeps being found.
pub fn iterations_for(ns_per_iter: f64) -> u64 {
    if ns_per_iter.is_finite() && ns_per_iter > 0.0 {
        let exact = (TARGET_NS / ns_per_iter).clamp(1.0, 1_048_576.0);
        1u64 << (exact.log2().round() as u32)
    } else {
        1
    }
}

/// Instructions per iteration of benchmark `id` of `exe`, by `method` ([`Method::of`] says which
/// the executable allows; asked for one process, an executable without the per-request function
/// is an error). `work` holds the callgrind output files (removed after reading).
pub fn per_iteration(
    valgrind: &Valgrind,
    exe: &Path,
    id: &str,
    n: u64,
    method: Method,
    work: &Path,
) -> Result<f64, String> {
    let (one, two) = match method {
        Method::OneProcess => match sample_counts(valgrind, exe, id, &[n, n, 2 * n], work)?[..] {
            [_, one, two] => (one, two),
            _ => {
                return Err(format!(
                    "{id}: callgrind wrote no count per request (the executable's serve loop \
                     has no `one_request`)"
                ));
            }
        },
        Method::TwoProcesses => (
            count(valgrind, exe, id, n, work)?,
            count(valgrind, exe, id, 2 * n, work)?,
        ),
    };
    if two <= one {
        return Err(format!(
            "{id}: {} instructions for {} iterations and {one} for {n}: not counted as iterations",
            two,
            2 * n
        ));
    }
    Ok((two - one) as f64 / n as f64)
}

/// Instructions counted inside the serve loop for one sample of `n` iterations, alone in its
/// process.
pub fn count(
    valgrind: &Valgrind,
    exe: &Path,
    id: &str,
    n: u64,
    work: &Path,
) -> Result<u64, String> {
    // With one sample, the first count is that sample's whether callgrind wrote counts out per
    // request (then the process's exit, counted apart, is left out of both n and 2n) or not.
    let all = sample_counts(valgrind, exe, id, &[n], work)?;
    Ok(all[0])
}

/// One callgrind run of `exe` serving `id`, asked for one sample per entry of `samples`: the
/// instructions of each sample, in order, when callgrind wrote its counts out after each
/// (`--dump-after`); else (an executable without the per-request function) one total.
pub fn sample_counts(
    valgrind: &Valgrind,
    exe: &Path,
    id: &str,
    samples: &[u64],
    work: &Path,
) -> Result<Vec<u64>, String> {
    std::fs::create_dir_all(work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let stem = format!("callgrind.{}.{}", std::process::id(), samples.len());
    let remove_outputs = || {
        if let Ok(dir) = std::fs::read_dir(work) {
            for e in dir.flatten() {
                if e.file_name().to_string_lossy().starts_with(&stem) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    };
    remove_outputs();
    // Whatever the run ends in, its output files go.
    let result = run_and_read(valgrind, exe, id, samples, &work.join(&stem));
    remove_outputs();
    match result {
        Ok(v) if v.iter().all(|&x| x == 0) => Err(format!(
            "{id}: callgrind counted nothing inside `{TOGGLE}` (a bench executable from before \
             the serve loop could be counted)"
        )),
        r => r,
    }
}

/// [`sample_counts`]'s callgrind run, writing to `out` (and `out.1`, `out.2`, … per request).
fn run_and_read(
    valgrind: &Valgrind,
    exe: &Path,
    id: &str,
    samples: &[u64],
    out: &Path,
) -> Result<Vec<u64>, String> {
    let mut cmd = Command::new(&valgrind.path);
    if let Some(lib) = &valgrind.preload {
        // valgrind passes it on to the counted program (and adds its own preloads beside it).
        cmd.env("LD_PRELOAD", lib);
    }
    let mut child = cmd
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={TOGGLE}"))
        .arg(format!("--dump-after={DUMP_AFTER}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(["--bench", "--list"])
        .env(super::serve::SERVE_ENV, id)
        .current_dir(exe.parent().unwrap_or(Path::new(".")))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run valgrind on {}: {e}", exe.display()))?;
    // The requests, then end of input: the serve loop answers them in order and the process
    // exits. They are a few short lines, well inside a pipe's buffer.
    if let Some(mut stdin) = child.stdin.take() {
        for n in samples {
            let _ = writeln!(stdin, "{n}");
        }
    }
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    });
    let status = match child.wait_timeout(DEADLINE) {
        Ok(Some(s)) => s,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "valgrind on {id} did not finish within {} s",
                DEADLINE.as_secs()
            ));
        }
        Err(e) => return Err(format!("valgrind on {id}: {e}")),
    };
    let err = reader.join().unwrap_or_default();
    if !status.success() {
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "valgrind on {id} exited with {status}: {}",
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    // A library the loader could not map (a noexec mount, say) is skipped with a message and
    // the program runs on: its count would hold the system's seeds under the fixed key.
    if let Some(lib) = &valgrind.preload
        && err.contains("cannot be preloaded")
    {
        return Err(format!(
            "valgrind on {id}: {} was not preloaded: {}",
            lib.display(),
            err.lines()
                .find(|l| l.contains("cannot be preloaded"))
                .unwrap_or_default()
                .trim()
        ));
    }
    // With dumps, callgrind names them `<out>.1`, `<out>.2`, … in order, and writes what is left
    // at the exit to `<out>` itself (or another numbered part); without, only `<out>`.
    let read = |p: &Path| -> Result<u64, String> {
        let text = std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read callgrind output {}: {e}", p.display()))?;
        totals(&text).ok_or_else(|| format!("no totals in callgrind output {}", p.display()))
    };
    let mut parts: Vec<u64> = Vec::new();
    for k in 1..=samples.len() {
        let p = PathBuf::from(format!("{}.{k}", out.display()));
        if !p.exists() {
            break;
        }
        parts.push(read(&p).map_err(|e| format!("{id}: {e}"))?);
    }
    if parts.len() == samples.len() {
        Ok(parts)
    } else if parts.is_empty() && out.exists() {
        read(out).map(|x| vec![x]).map_err(|e| format!("{id}: {e}"))
    } else {
        Err(format!(
            "{id}: callgrind wrote {} of {} samples' counts",
            parts.len(),
            samples.len()
        ))
    }
}

/// The first event's total of a callgrind output file (`summary:` or `totals:` line).
pub fn totals(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|x| x.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_read_the_first_event_of_summary_or_totals() {
        assert_eq!(
            totals("events: Ir\nfl=x\n0 5\nsummary: 12345\n"),
            Some(12345)
        );
        assert_eq!(totals("events: Ir Dr\ntotals: 77 3\n"), Some(77));
        assert_eq!(totals("events: Ir\n"), None);
    }

    const M: Method = Method::OneProcess;

    #[test]
    fn the_cache_keys_counts_by_the_executables_bytes_and_the_benchmark() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"one program").unwrap();
        std::fs::write(&b, b"one program").unwrap();
        let mut c = CountCache {
            dir: dir.path().join("cache"),
            valgrind_version: "valgrind-3.19.0".into(),
            seeds: "getrandom: fixed-getrandom-0123456789abcdef.so".into(),
            exe_sha: HashMap::new(),
        };
        let fa = c.file(&a, "g/f/p", 10, M).unwrap();
        assert_eq!(
            c.file(&b, "g/f/p", 10, M).unwrap(),
            fa,
            "same bytes, same key"
        );
        assert_ne!(c.file(&a, "g/f/q", 10, M).unwrap(), fa, "another benchmark");
        assert_ne!(c.file(&a, "g/f/p", 20, M).unwrap(), fa, "other iterations");
        let other = dir.path().join("c");
        std::fs::write(&other, b"another program").unwrap();
        assert_ne!(c.file(&other, "g/f/p", 10, M).unwrap(), fa, "other bytes");
        c.valgrind_version = "valgrind-3.22.0".into();
        c.exe_sha.clear();
        assert_ne!(c.file(&a, "g/f/p", 10, M).unwrap(), fa, "another valgrind");
        c.valgrind_version = "valgrind-3.19.0".into();
        c.seeds = "getrandom: the system's".into();
        assert_ne!(c.file(&a, "g/f/p", 10, M).unwrap(), fa, "other seeds");
        c.seeds = "getrandom: fixed-getrandom-fedcba9876543210.so".into();
        assert_ne!(c.file(&a, "g/f/p", 10, M).unwrap(), fa, "another library");
        c.seeds = "getrandom: fixed-getrandom-0123456789abcdef.so".into();
        assert_eq!(c.file(&a, "g/f/p", 10, M).unwrap(), fa);
        assert!(
            c.file(&dir.path().join("missing"), "g/f/p", 10, M)
                .is_none()
        );
        assert_ne!(
            c.file(&a, "g/f/p", 10, Method::TwoProcesses).unwrap(),
            c.file(&a, "g/f/p", 10, M).unwrap(),
            "another method"
        );
        // A cached count is used without running valgrind (there is none at this path).
        c.valgrind_version = "valgrind-3.19.0".into();
        c.exe_sha.clear();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        std::fs::write(&fa, "1234.5\n").unwrap();
        let none = Valgrind {
            path: PathBuf::from("/no/valgrind"),
            version: "valgrind-3.19.0".into(),
            preload: None,
        };
        let got = c.per_iteration(&none, &a, "g/f/p", 10, M, dir.path());
        assert_eq!(got, Ok(1234.5));
        let miss = c.per_iteration(&none, &a, "g/f/q", 10, M, dir.path());
        assert!(miss.is_err(), "{miss:?}");
        let other_n = c.per_iteration(&none, &a, "g/f/p", 20, M, dir.path());
        assert!(
            other_n.is_err(),
            "a count at another n is not reused: {other_n:?}"
        );
    }

    /// Run as a child by `the_fixed_getrandom_gives_every_process_the_same_hash_keys` (ignored
    /// otherwise): prints a hash by the standard library's `HashMap` keys, which it draws
    /// through `getrandom` as ahash does.
    #[test]
    #[ignore = "a child of the_fixed_getrandom_gives_every_process_the_same_hash_keys"]
    fn print_hash_keys_when_asked() {
        if std::env::var_os("HARNESS_TEST_PRINT_HASH_KEYS").is_some() {
            use std::hash::BuildHasher;
            let keys = std::collections::hash_map::RandomState::new().hash_one(0u8);
            println!("hash-keys {keys}");
        }
    }

    #[cfg(fixed_getrandom)]
    #[test]
    fn the_fixed_getrandom_gives_every_process_the_same_hash_keys() {
        let dir = tempfile::tempdir().unwrap();
        let lib = fixed_getrandom(dir.path()).unwrap();
        assert_eq!(fixed_getrandom(dir.path()).unwrap(), lib, "found again");
        let keys = |preload: bool| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.args([
                "--exact",
                "measure::instructions::tests::print_hash_keys_when_asked",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("HARNESS_TEST_PRINT_HASH_KEYS", "1")
            .env_remove("LD_PRELOAD");
            if preload {
                cmd.env("LD_PRELOAD", &lib);
            }
            let out = cmd.output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.lines()
                // After libtest's "test … ... " on the same line.
                .find_map(|l| l.split("hash-keys ").nth(1))
                .map(|k| k.trim().to_string())
                .unwrap_or_else(|| panic!("no keys printed: {text}"))
        };
        let fixed = (keys(true), keys(true));
        assert_eq!(fixed.0, fixed.1, "the same keys in every preloaded process");
        let system = (keys(false), keys(false));
        assert_ne!(system.0, system.1, "the system's getrandom draws anew");
        assert_ne!(fixed.0, system.0);
    }

    #[test]
    fn one_process_only_when_both_sides_have_the_per_request_function() {
        let dir = tempfile::tempdir().unwrap();
        let (new, old) = (dir.path().join("new"), dir.path().join("old"));
        std::fs::write(&new, b"\x7fELF...common::group::one_request...serve").unwrap();
        std::fs::write(&old, b"\x7fELF...common::group::serve...").unwrap();
        assert_eq!(Method::of(&new), Method::OneProcess);
        assert_eq!(Method::of(&old), Method::TwoProcesses);
        assert_eq!(
            Method::of(&dir.path().join("missing")),
            Method::TwoProcesses
        );
        let (one, two) = (Method::OneProcess, Method::TwoProcesses);
        assert_eq!(Method::for_pair(one, one), one);
        assert_eq!(Method::for_pair(one, two), two);
        assert_eq!(Method::for_pair(two, one), two);
        assert_eq!(Method::for_pair(two, two), two);
    }

    #[test]
    fn a_counted_sample_is_a_few_ms_of_native_work() {
        // 4000 iterations of 1 µs: the nearest power of two is 4096.
        assert_eq!(iterations_for(1000.0), 4096);
        // 202 and 190 µs (one benchmark's medians in two runs): one n, 16 (19.8 and 21.1).
        assert_eq!(iterations_for(202e3), 16);
        assert_eq!(iterations_for(190e3), 16);
        assert_eq!(iterations_for(1e9), 1);
        assert_eq!(iterations_for(0.01), 1 << 20);
        assert_eq!(iterations_for(f64::NAN), 1);
    }
}
