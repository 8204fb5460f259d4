//! The `harness` subcommands, one file each: its clap arguments (raw flags), their resolution
//! against `harness.yaml` and the repository (resolved options, errors naming the flag), and the
//! pipeline it runs. What every command shares lives here once: the common flags, the output
//! formats, and [`finish`], the one sequence from a run's [`Results`] to the exit status
//! (write the files → print the report → annotate in GitHub Actions → map the outcome to the
//! exit-code contract: 0 passed or report-only, 1 gate failed, 2 could not run).

pub mod calibrate;
pub mod compare;
pub mod e2e;
pub mod history;
pub mod hook;
pub mod merge;
pub mod noise;
pub mod post;
pub mod replay;
pub mod report;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum;

use crate::cache::{default_cache_root, repo_cache_dir};
use crate::config::{self, Config, FailOn};
use crate::git::Repo;
use crate::results::{Outcome, Results, SCHEMA};

/// How a report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Term,
    Md,
    Json,
}

/// Flags of the commands that read `harness.yaml` and measure a repository.
#[derive(clap::Args, Clone, Debug)]
pub struct Common {
    /// harness.yaml to use (default: the repository root's).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Suite from harness.yaml (default: its `default_suite`).
    #[arg(long)]
    pub suite: Option<String>,
    /// Rounds of the first pass (default: the suite's, else policy.rounds).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Cache root for slots, target dirs and profiles (default: $HARNESS_CACHE_DIR or
    /// ~/.cache/decoder-gate/harness).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// The repository (default: the current directory).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
}

/// [`Common`] resolved: the repository's root, its validated config and suite, its cache dir.
pub struct Resolved {
    pub repo_root: PathBuf,
    pub config: Config,
    pub suite: String,
    pub cache_dir: PathBuf,
}

impl Common {
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let repo = Repo::open(&self.repo)?;
        let repo_root = repo.workdir().map(|p| p.to_path_buf()).with_context(|| {
            format!(
                "{} is a bare repository: nothing to build",
                self.repo.display()
            )
        })?;
        let config_path = self
            .config
            .clone()
            .unwrap_or_else(|| repo_root.join(config::FILE_NAME));
        let config = Config::load(&config_path)?;
        let suite = self
            .suite
            .clone()
            .unwrap_or_else(|| config.default_suite.clone());
        config
            .suite(&suite)
            .map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
        let root = self.cache_dir.clone().unwrap_or_else(default_cache_root);
        let cache_dir = repo_cache_dir(&root, &repo_root);
        Ok(Resolved {
            repo_root,
            config,
            suite,
            cache_dir,
        })
    }
}

/// Where a results file that `merge` or `replay` makes goes, and the exit status it gives.
#[derive(clap::Args, Clone, Debug)]
pub struct Output {
    #[arg(long, value_enum, default_value = "md")]
    pub format: Format,
    /// Also write results.json, report.md and benchmark-action.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Exit status under this policy (default: report only, 0).
    #[arg(long, value_enum)]
    pub fail_on: Option<FailOn>,
}

impl Output {
    /// Writes `results` to `--out` if given, prints it in `--format`; the exit status.
    pub fn emit(&self, results: &Results) -> anyhow::Result<u8> {
        if let Some(out) = &self.out {
            write_outputs(out, results)?;
        }
        out(&render(results, self.format))?;
        Ok(exit_code(
            results.outcome,
            self.fail_on.unwrap_or(FailOn::Never),
        ))
    }
}

/// The end of a command that measured something: the outputs written to `out` (and its
/// results.json named on stderr), the report printed in `format`, the step summary and
/// annotations in GitHub Actions; the exit status under `fail_on`.
pub fn finish(
    results: &Results,
    out: &Path,
    format: Format,
    fail_on: FailOn,
) -> anyhow::Result<u8> {
    write_outputs(out, results)?;
    self::out(&render(results, format))?;
    eprintln!("results: {}", out.join("results.json").display());
    github_actions_outputs(results);
    Ok(exit_code(results.outcome, fail_on))
}

/// The exit-code contract: 2 could not run, 1 the gate failed under `fail_on`, else 0.
pub fn exit_code(outcome: Outcome, fail_on: FailOn) -> u8 {
    match (outcome, fail_on) {
        (Outcome::Error, _) => 2,
        (_, FailOn::Never) => 0,
        (Outcome::Fail, _) => 1,
        (Outcome::Warn, FailOn::Warn) => 1,
        _ => 0,
    }
}

pub fn render(results: &Results, format: Format) -> String {
    match format {
        Format::Term => crate::report::terminal(
            results,
            crate::report::use_color(std::io::stdout().is_terminal()),
        ),
        Format::Md => crate::report::markdown(results),
        Format::Json => crate::report::json(results),
    }
}

fn write_outputs(dir: &Path, results: &Results) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let w = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    w("results.json", crate::report::json(results))?;
    w("report.md", crate::report::markdown(results))?;
    w(
        "benchmark-action.json",
        serde_json::to_string_pretty(&crate::report::github_action_benchmark(results))?,
    )?;
    let n = write_round_charts(&dir.join("charts"), results)?;
    if n > 0 {
        eprintln!(
            "wrote {n} per-round pictures (base vs head) to {}",
            dir.join("charts").display()
        );
    }
    Ok(())
}

/// One SVG per row measured on both sides: every round's value of base and head
/// (`report::chart::rounds_svg`), named by `chart::file_name` of the row id. Returns how many.
fn write_round_charts(dir: &Path, results: &Results) -> anyhow::Result<usize> {
    use crate::report::chart;
    let mut n = 0;
    let verdict = |status: crate::stats::Status, change: Option<&crate::stats::Change>| match change
    {
        Some(c) => format!(
            "{status:?}: {} {} %",
            crate::report::format::change(c.estimate),
            crate::report::format::interval(c.ci_low, c.ci_high)
        ),
        None => format!("{status:?}"),
    };
    for b in &results.benches {
        let (Some(base), Some(head)) = (&b.base, &b.head) else {
            continue;
        };
        let svg = chart::rounds_svg(
            &b.id,
            &base.per_round_ns,
            &head.per_round_ns,
            false,
            &verdict(b.status, b.change.as_ref()),
        )?;
        chart::write(dir, &chart::file_name(&[&b.id], "svg"), &svg)?;
        n += 1;
    }
    for r in results.e2e.iter().flat_map(|e| &e.speed) {
        let (Some(base), Some(head), Some(status)) = (&r.base, &r.head, r.status) else {
            continue;
        };
        let svg = chart::rounds_svg(
            &r.id,
            &base.per_round_ms,
            &head.per_round_ms,
            true,
            &verdict(status, r.change.as_ref()),
        )?;
        chart::write(dir, &chart::file_name(&[&r.id], "svg"), &svg)?;
        n += 1;
    }
    Ok(n)
}

/// In a GitHub Actions job: the markdown report appended to the step summary, and an annotation
/// per 🔴/⛔/⚠️ row on **stderr**: the runner reads workflow commands from both streams, and
/// stdout holds only the report in the requested format (`--format json > results.json` stays
/// valid JSON inside Actions).
fn github_actions_outputs(results: &Results) {
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let hint = crate::post::artifact_hint(&|k| std::env::var(k).ok());
        let path = Path::new(&path);
        if let Err(e) = crate::actions::append_step_summary(path, results, &hint) {
            eprintln!("warning: {e:#}");
        }
    }
    if crate::actions::in_actions() {
        for line in crate::actions::annotations(results) {
            eprintln!("{line}");
        }
    }
}

/// Reads a saved `results.json`, checking its schema; a gzip-compressed one (`results.json.gz`,
/// how `harness/eval/results/` keeps its runs) is recognised by its magic bytes.
pub fn read_results(input: &Path) -> anyhow::Result<Results> {
    read_results_limited(input, u64::MAX)
}

/// Writes a command's report to stdout. A reader that has gone away (`harness trend | head`)
/// ends the output quietly: `print!` would panic on the broken pipe.
pub fn out(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to stdout"),
    }
}

/// [`read_results`], refusing a file over `max` bytes (see [`read_saved_text`]).
pub fn read_results_limited(input: &Path, max: u64) -> anyhow::Result<Results> {
    let text = read_saved_text(input, max)?;
    let results: Results = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a harness results file", input.display()))?;
    if results.schema != SCHEMA {
        anyhow::bail!(
            "{}: schema {:?}, this harness reads {:?}",
            input.display(),
            results.schema,
            SCHEMA
        );
    }
    Ok(results)
}

/// The text of a saved file, plain or gzip-compressed (recognised by its magic bytes; how
/// `harness/eval/results/` keeps its large runs). A file over `max` bytes is refused before it is
/// read, and one whose text (after decompression, for a gzip file) grows past `max` while being
/// read is refused too: a small compressed file cannot expand into an unbounded read.
pub fn read_saved_text(input: &Path, max: u64) -> anyhow::Result<String> {
    use std::io::{BufRead as _, Read as _};
    let file =
        std::fs::File::open(input).with_context(|| format!("cannot read {}", input.display()))?;
    let size = file
        .metadata()
        .with_context(|| format!("cannot read {}", input.display()))?
        .len();
    if size > max {
        anyhow::bail!(
            "{} is {size} bytes, over the {max}-byte limit for a results file here: refused \
             unread",
            input.display()
        );
    }
    let mut reader = std::io::BufReader::new(file);
    let gzip = reader
        .fill_buf()
        .with_context(|| format!("cannot read {}", input.display()))?
        .starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn std::io::Read> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(reader))
    } else {
        Box::new(reader)
    };
    let mut text = String::new();
    reader
        .take(max.saturating_add(1))
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", input.display()))?;
    if text.len() as u64 > max {
        anyhow::bail!(
            "{} {} past the {max}-byte limit for a results file here: refused",
            input.display(),
            if gzip {
                "decompresses"
            } else {
                "grew while being read"
            }
        );
    }
    Ok(text)
}

/// `host::lost_time` on the CPU single-threaded benchmarks are pinned to (unpinned where
/// `affinity` pins nothing), announced on `progress`: taken before and after the rounds of
/// `compare` and `noise`.
fn probe_host(
    affinity: &config::AffinityConfig,
    when: &str,
    progress: &dyn crate::progress::Progress,
) -> crate::results::LostTime {
    let cpu = crate::measure::Affinity::from_config(affinity).cpu_for_threads(1);
    progress.stage(&format!(
        "probing the time the host takes ({} s)",
        crate::host::PROBE_S
    ));
    crate::host::lost_time(when, cpu, crate::host::PROBE_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved run of the corpus, kept compressed (`harness/eval/results/`).
    fn saved_gz() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("eval/results/corpus/quiet/mimalloc-dropped/run-001/results.json.gz")
    }

    #[test]
    fn a_compressed_results_file_reads_as_its_text() {
        use std::io::Read as _;
        let gz = saved_gz();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("results.json");
        std::fs::write(&plain, &text).unwrap();
        let (a, b) = (read_results(&gz).unwrap(), read_results(&plain).unwrap());
        assert!(!a.benches.is_empty());
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
    }

    #[test]
    fn the_limit_applies_to_the_decompressed_text() {
        let gz = saved_gz();
        let size = std::fs::metadata(&gz).unwrap().len();
        let e = read_results_limited(&gz, size * 2).unwrap_err().to_string();
        assert!(e.contains("decompresses past"), "{e}");
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        use FailOn::*;
        assert_eq!(exit_code(Outcome::Error, Never), 2);
        assert_eq!(exit_code(Outcome::Fail, Never), 0);
        assert_eq!(exit_code(Outcome::Fail, Red), 1);
        assert_eq!(exit_code(Outcome::Warn, Red), 0);
        assert_eq!(exit_code(Outcome::Warn, Warn), 1);
        assert_eq!(exit_code(Outcome::Pass, Warn), 0);
    }
}
