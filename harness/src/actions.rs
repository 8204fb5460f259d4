//! GitHub Actions outputs of a run: the markdown report appended to the job's step summary
//! (`$GITHUB_STEP_SUMMARY`) and one workflow-command annotation per benchmark that needs
//! attention (`::error` for 🔴 and ⛔, `::warning` for ⚠️), escaped per the workflow-commands
//! format so an id or note cannot break out of its command.

use std::io::Write as _;
use std::path::Path;

use crate::report::{self, format};
use crate::results::{BenchResult, Results, Status};

/// GitHub's limit on one step's summary.
pub const STEP_SUMMARY_LIMIT: usize = 1024 * 1024;

/// Whether this process runs in a GitHub Actions job (`GITHUB_ACTIONS=true`).
pub fn in_actions() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// Appends the markdown report (whole, or cut to [`STEP_SUMMARY_LIMIT`] with a pointer to
/// `artifact_hint`) to the step summary file at `path`.
pub fn append_step_summary(
    path: &Path,
    results: &Results,
    artifact_hint: &str,
) -> anyhow::Result<()> {
    // Leave room for the separating newline.
    let text = report::markdown_truncated(results, STEP_SUMMARY_LIMIT - 1, artifact_hint);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)?;
        f.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            f.write_all(b"\n")?;
        }
        Ok(())
    };
    write().map_err(|e| {
        anyhow::anyhow!(
            "cannot append to the step summary {} (GITHUB_STEP_SUMMARY): {e}",
            path.display()
        )
    })
}

/// The workflow commands for the rows that need attention, worst first: `::error` for 🔴
/// regressions and ⛔ failures, `::warning` for ⚠️ possible regressions.
pub fn annotations(results: &Results) -> Vec<String> {
    let mut out: Vec<String> = report::worst_first(results)
        .into_iter()
        .filter_map(|b| {
            let command = match b.status {
                Status::Regression | Status::Failed => "error",
                Status::PossibleRegression => "warning",
                _ => return None,
            };
            let title = format!("{} {}: {}", b.status.emoji(), b.status.label(), b.id);
            Some(workflow_command(command, &title, &message(b)))
        })
        .collect();
    out.extend(e2e_annotations(results));
    out
}

/// The end-to-end rows that need attention: a divergence or failure (error), a near-tie flip,
/// a CUDA check not run under `--require-cuda` (error), a speed 🔴/⛔ (error) or ⚠️ (warning).
fn e2e_annotations(results: &Results) -> Vec<String> {
    use crate::results::E2eStatus;
    let Some(e) = &results.e2e else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in &e.correctness {
        let command = match c.status {
            E2eStatus::Diverged | E2eStatus::Failed => "error",
            E2eStatus::NearTie => "warning",
            E2eStatus::NotRun if e.require_cuda && c.device == crate::vocab::Device::Cuda => {
                "error"
            }
            _ => continue,
        };
        let mut msg = match &c.head.divergence {
            Some(d) => crate::e2e::correctness::describe(d),
            None => c.head.note.clone().unwrap_or_default(),
        };
        if c.introduced {
            msg.push_str(" (identical on base: introduced by this PR)");
        }
        let title = format!("{} e2e {}: {}", c.status.emoji(), c.status.label(), c.id);
        out.push(workflow_command(command, &title, &msg));
    }
    for s in &e.speed {
        let command = match s.status {
            Some(Status::Regression | Status::Failed) => "error",
            Some(Status::PossibleRegression) => "warning",
            _ => continue,
        };
        let st = s.status.unwrap_or(Status::Failed);
        let mut msg = match s.change {
            Some(c) => format!(
                "{}: time per decode step {} {} vs threshold {}",
                s.id,
                format::change(c.estimate),
                format::interval(c.ci_low, c.ci_high),
                format::threshold(s.threshold, s.threshold_source)
            ),
            None => s.id.clone(),
        };
        if let Some(n) = &s.note {
            msg.push('\n');
            msg.push_str(n);
        }
        let title = format!("{} e2e speed {}: {}", st.emoji(), st.label(), s.id);
        out.push(workflow_command(command, &title, &msg));
    }
    out
}

/// One workflow command line, `::{command} title={title}::{message}`, both parts escaped.
pub fn workflow_command(command: &str, title: &str, message: &str) -> String {
    format!(
        "::{command} title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

/// `group/f/p: +12.3 % [+8.0, +16.1] vs threshold ±3.0 % (profile)`, then the row's note.
fn message(b: &BenchResult) -> String {
    let mut text = match b.change {
        Some(c) => format!(
            "{}: {} {} vs threshold {}",
            b.id,
            format::change(c.estimate),
            format::interval(c.ci_low, c.ci_high),
            format::threshold(b.threshold, b.threshold_source)
        ),
        None => format!("{}: {}", b.id, b.status.label()),
    };
    if let Some(note) = &b.note {
        text.push('\n');
        text.push_str(note);
    }
    text
}

/// A command's message: `%`, CR and LF escaped (they would end or corrupt the command).
fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A command property (`title=…`): as [`escape_data`], plus `:` and `,`, which delimit
/// properties.
fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Change, HostInfo, Method, Revision, SideResult, ThresholdSource};

    /// A run with one benchmark per status (the report's own fixtures are private to it).
    fn run_with(statuses: &[Status]) -> Results {
        let side = SideResult {
            per_round_ns: vec![100.0],
            median_ns: 100.0,
            samples: vec![],
        };
        let benches: Vec<BenchResult> = statuses
            .iter()
            .enumerate()
            .map(|(i, &status)| BenchResult {
                id: format!("group/{}/{i}", status.label().replace(' ', "_")),
                status,
                base: Some(side.clone()),
                head: Some(side.clone()),
                change: Some(Change {
                    estimate: 0.08,
                    ci_low: 0.05,
                    ci_high: 0.11,
                    confidence: 0.95,
                    p_value: 0.01,
                    p_adjusted: 0.02,
                }),
                threshold: 0.03,
                threshold_source: ThresholdSource::Profile,
                throughput: None,
                rounds: 6,
                confirmed: false,
                note: None,
                instructions: None,
            })
            .collect();
        let rev = Revision {
            spec: "main".into(),
            sha: "0".repeat(40),
            subject: "s".into(),
            dirty: false,
        };
        Results {
            schema: crate::results::SCHEMA.into(),
            tool_version: "0".into(),
            created_unix_s: 0.0,
            suite: "quick".into(),
            shard: None,
            base: rev.clone(),
            head: rev,
            host: HostInfo::default(),
            method: Method {
                rounds: 6,
                confirmation_rounds: 4,
                noise_rounds: 0,
                order: "ABBA".into(),
                criterion_args: vec![],
                confidence: 0.95,
                alpha: 0.05,
                correction: "holm".into(),
                floor: 0.01,
                profile: None,
                replay: None,
                policy: None,
                sampling: None,
                placement: None,
            },
            rounds: vec![],
            outcome: Results::decide(&benches, &[]),
            benches,
            failures: vec![],
            wall_s: 1.0,
            reproduce: vec![],
            e2e: None,
            gate_changes: vec![],
            lost_time: vec![],
        }
    }

    fn mixed() -> Results {
        run_with(&Status::ALL)
    }

    #[test]
    fn escaping_follows_the_workflow_command_format() {
        assert_eq!(escape_data("50% a\r\nb: c, d"), "50%25 a%0D%0Ab: c, d");
        assert_eq!(
            escape_property("50% a\r\nb: c, d"),
            "50%25 a%0D%0Ab%3A c%2C d"
        );
        // `%` goes first, so an escape is never escaped twice.
        assert_eq!(escape_data("%0A"), "%250A");
    }

    #[test]
    fn annotations_for_rows_that_need_attention_only() {
        let mut r = mixed();
        let regression = r
            .benches
            .iter_mut()
            .find(|b| b.status == Status::Regression)
            .unwrap();
        regression.id = "matmul/gemm,f32:1024".into();
        regression.note = Some("confirmed in 4 extra rounds\n100% of rounds slower".into());
        let lines = annotations(&r);
        let errors = lines.iter().filter(|l| l.starts_with("::error ")).count();
        let warnings = lines.iter().filter(|l| l.starts_with("::warning ")).count();
        let count = |s: Status| r.benches.iter().filter(|b| b.status == s).count();
        assert_eq!(errors, count(Status::Regression) + count(Status::Failed));
        assert_eq!(warnings, count(Status::PossibleRegression));
        let line = lines
            .iter()
            .find(|l| l.contains("matmul/gemm"))
            .expect("the regression is annotated");
        assert!(
            line.starts_with("::error title=🔴 regression%3A matmul/gemm%2Cf32%3A1024::"),
            "{line}"
        );
        // The message keeps `:`/`,` but not raw line breaks or a bare `%`.
        let (_, msg) = line.split_once("::matmul").unwrap();
        assert!(msg.starts_with("/gemm,f32:1024: +"), "{msg}");
        assert!(msg.contains("%0A100%25 of rounds slower"), "{msg}");
        assert!(lines.iter().all(|l| !l.contains('\n') && !l.contains('\r')));
        assert!(
            annotations(&run_with(&[
                Status::NoChange,
                Status::Improvement,
                Status::TooNoisy
            ]))
            .is_empty()
        );
    }

    #[test]
    fn step_summary_is_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.md");
        std::fs::write(&path, "earlier step\n").unwrap();
        let r = mixed();
        append_step_summary(&path, &r, "the artifact").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("earlier step\n"));
        assert!(text.contains(&report::markdown(&r)));
    }
}
