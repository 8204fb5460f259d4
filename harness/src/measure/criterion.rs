//! Criterion executables: one run into its own `CRITERION_HOME` ([`run_criterion`]), the ids it
//! would run under a filter ([`list_ids`], [`exact_filter`]), and its output read back: every
//! `<CRITERION_HOME>/**/new/{benchmark,sample}.json` of the run (criterion 0.5–0.8 layout).
//! Only the raw samples are taken; the harness does its own statistics.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::build::{LOG_TAIL_LINES, tail};
use crate::results::{RawSample, Throughput};
use crate::vocab::ProcessFailure;

/// One benchmark as criterion recorded it in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub id: String,
    pub throughput: Option<Throughput>,
    pub sample: RawSample,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CriterionError {
    pub path: PathBuf,
    pub message: String,
}

#[derive(Deserialize)]
struct BenchmarkJson {
    full_id: String,
    #[serde(default)]
    throughput: Option<ThroughputJson>,
}

#[derive(Deserialize)]
enum ThroughputJson {
    Bytes(u64),
    BytesDecimal(u64),
    Elements(u64),
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct SampleJson {
    sampling_mode: String,
    iters: Vec<f64>,
    times: Vec<f64>,
}

/// All benchmarks under `home`, by id. `round` is stamped on each sample.
pub fn read_run(home: &Path, round: u32) -> Result<BTreeMap<String, Measured>, CriterionError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == home => {
                return Ok(out);
            }
            Err(e) => {
                return Err(CriterionError {
                    path: dir,
                    message: format!("cannot list: {e}"),
                });
            }
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if !p.is_dir() {
                continue;
            }
            if p.file_name().is_some_and(|n| n == "new") {
                if p.join("benchmark.json").is_file() {
                    let m = read_one(&p, round)?;
                    out.insert(m.id.clone(), m);
                }
            } else if p.file_name().is_none_or(|n| n != "report") {
                stack.push(p);
            }
        }
    }
    Ok(out)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, CriterionError> {
    let text = std::fs::read_to_string(path).map_err(|e| CriterionError {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    serde_json::from_str(&text).map_err(|e| CriterionError {
        path: path.to_path_buf(),
        message: format!("not a criterion file: {e}"),
    })
}

fn read_one(dir: &Path, round: u32) -> Result<Measured, CriterionError> {
    let b: BenchmarkJson = read_json(&dir.join("benchmark.json"))?;
    let s: SampleJson = read_json(&dir.join("sample.json"))?;
    if s.iters.len() != s.times.len() || s.iters.is_empty() {
        return Err(CriterionError {
            path: dir.join("sample.json"),
            message: format!(
                "{} iteration counts but {} times",
                s.iters.len(),
                s.times.len()
            ),
        });
    }
    let throughput = match b.throughput {
        Some(ThroughputJson::Bytes(n) | ThroughputJson::BytesDecimal(n)) => {
            Some(Throughput::Bytes(n))
        }
        Some(ThroughputJson::Elements(n)) => Some(Throughput::Elements(n)),
        _ => None,
    };
    Ok(Measured {
        id: b.full_id,
        throughput,
        sample: RawSample {
            round,
            sampling_mode: s.sampling_mode.to_lowercase(),
            iters: s.iters,
            times_ns: s.times,
            ..Default::default()
        },
    })
}

/// A criterion filter regex that runs exactly the given ids.
pub fn exact_filter(ids: &[&str]) -> String {
    let escaped: Vec<String> = ids.iter().map(|id| regex_escape(id)).collect();
    format!("^({})$", escaped.join("|"))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Runs one criterion executable into `home`, killed after `deadline` (`deadlines.bench_s`).
pub fn run_criterion(
    exe: &Path,
    args: &[String],
    filter: Option<&str>,
    home: &Path,
    on_line: &dyn Fn(&str),
    deadline: std::time::Duration,
) -> Result<(), ProcessFailure> {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    // Criterion resolves relative paths against the executable's cwd: run it in its home.
    std::fs::create_dir_all(home).map_err(|e| ProcessFailure {
        message: format!("cannot create {}: {e}", home.display()),
        log_tail: Vec::new(),
    })?;
    crate::process::own_group(&mut cmd)
        .env("CRITERION_HOME", home)
        .current_dir(exe.parent().unwrap_or(Path::new(".")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| ProcessFailure {
        message: format!("cannot run {}: {e}", exe.display()),
        log_tail: Vec::new(),
    })?;
    let watch = crate::process::Deadline::watch(&child, deadline);
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let lines = std::thread::scope(|s| {
        let err = s.spawn(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            on_line(&line);
            lines.push(line);
        }
        let mut err = err.join().unwrap_or_default();
        lines.append(&mut err);
        lines
    });
    let status = child.wait().map_err(|e| ProcessFailure {
        message: format!("{}: {e}", exe.display()),
        log_tail: Vec::new(),
    })?;
    if !status.success() {
        let message = if watch.fired() {
            watch.message(&exe.display().to_string(), "bench_s")
        } else {
            format!("{} exited with {status}", exe.display())
        };
        return Err(ProcessFailure {
            message,
            log_tail: tail(&lines, LOG_TAIL_LINES),
        });
    }
    Ok(())
}

/// The benchmark ids a criterion executable would run under `filter` (`--list`); empty when it
/// cannot list (the run stage then reports the failure).
pub fn list_ids(exe: &Path, filter: Option<&str>) -> Vec<String> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--bench", "--list"]);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    let Ok((out, _)) = crate::process::output(&mut cmd, crate::process::LIST_DEADLINE) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": benchmark"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, id: &str, sample: &str, throughput: &str) {
        let d = dir.join(id).join("new");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("benchmark.json"),
            format!(r#"{{"group_id":"g","function_id":"f","value_str":"p","throughput":{throughput},"full_id":"{id}","directory_name":"{id}","title":"{id}"}}"#),
        )
        .unwrap();
        std::fs::write(d.join("sample.json"), sample).unwrap();
    }

    #[test]
    fn reads_every_benchmark_with_mode_and_throughput() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            "add/f32/small",
            r#"{"sampling_mode":"Linear","iters":[1.0,2.0],"times":[10.0,20.0]}"#,
            r#"{"Elements":4096}"#,
        );
        write(
            t.path(),
            "matmul/f32_t1/32x1024x1024",
            r#"{"sampling_mode":"Flat","iters":[3.0,3.0],"times":[30.0,33.0]}"#,
            "null",
        );
        let m = read_run(t.path(), 4).unwrap();
        assert_eq!(m.len(), 2);
        let a = &m["add/f32/small"];
        assert_eq!(a.throughput, Some(Throughput::Elements(4096)));
        assert_eq!(a.sample.sampling_mode, "linear");
        assert_eq!(a.sample.round, 4);
        assert_eq!(a.sample.times_ns, vec![10.0, 20.0]);
        assert_eq!(m["matmul/f32_t1/32x1024x1024"].sample.sampling_mode, "flat");
    }

    #[test]
    fn a_missing_home_is_an_empty_run_and_a_corrupt_file_names_itself() {
        let t = tempfile::tempdir().unwrap();
        assert!(read_run(&t.path().join("absent"), 0).unwrap().is_empty());
        write(
            t.path(),
            "x/y",
            r#"{"sampling_mode":"Linear","iters":[1.0],"times":[]}"#,
            "null",
        );
        let e = read_run(t.path(), 0).unwrap_err().to_string();
        assert!(
            e.contains("sample.json") && e.contains("1 iteration counts but 0 times"),
            "{e}"
        );
    }

    #[test]
    fn exact_filter_escapes_ids() {
        let f = exact_filter(&["add/f32/small", "matmul/f32_t1/1x256x256"]);
        assert_eq!(f, r"^(add/f32/small|matmul/f32_t1/1x256x256)$");
        let r = regex_lite::Regex::new(&exact_filter(&["a.b(c)"])).unwrap();
        assert!(r.is_match("a.b(c)") && !r.is_match("axb(c)"));
    }
}
