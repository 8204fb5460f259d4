//! Instruction counts per iteration of a single-threaded benchmark, from valgrind's callgrind:
//! a second, deterministic view of a change beside the timings (harness/STATS.md, "Instruction
//! counts"). Hardware counters cannot be read on the VMs this runs on (`perf stat` says "not
//! supported"), so the counts come from valgrind's simulated CPU.
//!
//! How: the bench executable serves the benchmark as for paired sampling
//! (`HARNESS_BENCH_SERVE`, engine/benches/common/group.rs) under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=*common::group::serve*`, so
//! only what runs inside the serve loop is counted (building the inputs, loading a tokenizer,
//! the process start are not), and is asked for **one** sample of `n` iterations, then its
//! stdin closes. Two such processes, `n` and `2n` iterations, differ by exactly `n` iterations:
//! the sample's own fixed cost (reading the request, two clock reads, writing the answer) is in
//! both and cancels. Per iteration = (I(2n) − I(n)) / n.
//!
//! Valgrind runs the program about 50× slower, so `n` is sized from the measured time per
//! iteration to a few milliseconds of native work, and every run has a deadline.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

/// The function whose calls are counted: the serve loop of engine/benches/common/group.rs.
pub const TOGGLE: &str = "*common::group::serve*";
/// Native time one counted sample aims at (the `2n` run takes twice that).
pub const TARGET_NS: f64 = 4e6;
/// The longest one valgrind run may take.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// valgrind on the PATH, when it runs.
pub fn find_valgrind() -> Option<PathBuf> {
    let out = Command::new("valgrind")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| PathBuf::from("valgrind"))
}

/// Iterations per counted sample for a benchmark taking `ns_per_iter` natively.
pub fn iterations_for(ns_per_iter: f64) -> u64 {
    if ns_per_iter.is_finite() && ns_per_iter > 0.0 {
        ((TARGET_NS / ns_per_iter).round() as u64).clamp(1, 1_000_000)
    } else {
        1
    }
}

/// Instructions per iteration of benchmark `id` of `exe`, from two callgrind runs of `n` and
/// `2n` iterations. `work` holds the callgrind output files (removed after reading).
pub fn per_iteration(
    valgrind: &Path,
    exe: &Path,
    id: &str,
    n: u64,
    work: &Path,
) -> Result<f64, String> {
    let one = count(valgrind, exe, id, n, work)?;
    let two = count(valgrind, exe, id, 2 * n, work)?;
    if two <= one {
        return Err(format!(
            "{id}: {} instructions for {} iterations and {one} for {n}: not counted as iterations",
            two,
            2 * n
        ));
    }
    Ok((two - one) as f64 / n as f64)
}

/// Instructions counted inside the serve loop for one sample of `n` iterations.
pub fn count(valgrind: &Path, exe: &Path, id: &str, n: u64, work: &Path) -> Result<u64, String> {
    std::fs::create_dir_all(work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let out = work.join(format!("callgrind.{}.{n}.out", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut child = Command::new(valgrind)
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={TOGGLE}"))
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
    // One request, then end of input: the serve loop answers it and the process exits.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{n}");
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
    let text =
        std::fs::read_to_string(&out).map_err(|e| format!("no callgrind output for {id}: {e}"))?;
    let _ = std::fs::remove_file(&out);
    match totals(&text) {
        Some(0) | None => Err(format!(
            "{id}: callgrind counted nothing inside `{TOGGLE}` (a bench executable from before \
             the serve loop could be counted)"
        )),
        Some(x) => Ok(x),
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

    #[test]
    fn a_counted_sample_is_a_few_ms_of_native_work() {
        assert_eq!(iterations_for(1000.0), 4000);
        assert_eq!(iterations_for(1e9), 1);
        assert_eq!(iterations_for(0.01), 1_000_000);
        assert_eq!(iterations_for(f64::NAN), 1);
    }
}
