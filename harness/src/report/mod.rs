//! The report stage: renders a [`Results`] for people (terminal table, markdown PR comment) and for
//! machines (JSON, github-action-benchmark). Pure functions of the saved run: no git, no cargo, no
//! environment except [`use_color`].
//!
//! - [`terminal`]: a comfy-table for stdout, coloured by status when asked;
//! - [`markdown`] / [`markdown_truncated`]: the PR comment (sticky via [`MARKER`]) and step summary;
//! - [`json`]: the saved run itself (`harness-results/1`), pretty-printed;
//! - [`github_action_benchmark`]: `customSmallerIsBetter` entries for charting history.
//!
//! Every rendering lists benchmarks worst-first ([`worst_first`]) and formats numbers through
//! [`format`], so the terminal and the comment never disagree.

pub mod chart;
mod e2e;
mod export;
pub mod format;
mod markdown;
pub mod md;
mod term;

#[cfg(test)]
pub(crate) mod fixtures;

use std::ffi::OsStr;

use crate::results::{BenchResult, Outcome, Results, Status};
use crate::vocab::Side;

pub use export::{github_action_benchmark, json};
pub use markdown::{markdown, markdown_truncated};
pub use term::terminal;

/// Hidden first line of the markdown report: the poster finds its earlier comment by it and edits
/// that comment in place instead of adding a new one.
pub const MARKER: &str = "<!-- decoder-gate:report -->";

/// GitHub's limit on an issue or PR comment body, for [`markdown_truncated`].
pub const GITHUB_COMMENT_LIMIT: usize = 65_536;

/// Whether to colour output for a stream: never when `NO_COLOR` is set to anything non-empty
/// (<https://no-color.org>), always when `CLICOLOR_FORCE` is set to anything but `0`, otherwise
/// only on a terminal.
pub fn use_color(stream_is_tty: bool) -> bool {
    color_choice(
        stream_is_tty,
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("CLICOLOR_FORCE").as_deref(),
    )
}

/// [`use_color`] with the environment passed in, so tests need not mutate the process environment.
fn color_choice(
    stream_is_tty: bool,
    no_color: Option<&OsStr>,
    clicolor_force: Option<&OsStr>,
) -> bool {
    if no_color.is_some_and(|v| !v.is_empty()) {
        return false;
    }
    if clicolor_force.is_some_and(|v| !v.is_empty() && v != "0") {
        return true;
    }
    stream_is_tty
}

/// The benchmarks in report order: status worst-first (the declaration order of [`Status`]), then
/// within a status the largest slowdown first (benchmarks without a change estimate last), then
/// by id, so equal inputs always render identically.
pub fn worst_first(results: &Results) -> Vec<&BenchResult> {
    let mut benches: Vec<&BenchResult> = results.benches.iter().collect();
    benches.sort_by(|a, b| {
        a.status
            .cmp(&b.status)
            .then_with(|| {
                let key = |r: &BenchResult| r.change.map(|c| c.estimate).filter(|e| !e.is_nan());
                match (key(a), key(b)) {
                    (Some(x), Some(y)) => y.total_cmp(&x),
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (None, None) => std::cmp::Ordering::Equal,
                }
            })
            .then_with(|| a.id.cmp(&b.id))
    });
    benches
}

/// `1 regression`, `2 possible regressions`, `3 too noisy`: a count with the status label,
/// pluralised where English does.
pub fn count_label(status: Status, n: usize) -> String {
    let label = status.label();
    let plural = n != 1
        && matches!(
            status,
            Status::Regression | Status::PossibleRegression | Status::Improvement
        );
    format!("{n} {label}{}", if plural { "s" } else { "" })
}

/// What a ✅ meant in this run, when the rule says more than "within the threshold": under
/// `rule: resolution`, that a slowdown of the row's resolution or more is ruled out.
fn ok_meaning(results: &Results) -> Option<String> {
    let policy = results.method.policy.as_ref()?;
    if policy.rule != crate::stats::Rule::Resolution || results.benches.is_empty() {
        return None;
    }
    let level = 1.0 - policy.ok_alpha / policy.looks as f64;
    let own = if policy.resolutions.is_empty() {
        String::new()
    } else {
        " (rows with a resolution of their own show it in the Threshold column)".to_string()
    };
    Some(format!(
        "✅ means a slowdown of {} or more is ruled out for that row{own}, each bound at {}; \
         ❔ means it could not be ruled out, and the row shows the interval.",
        format::percent(policy.resolution),
        format::level(level)
    ))
}

/// What the folded ✅ rows have in common, after "✅ N benchmarks": under `rule: resolution`
/// that a slowdown of δ or more is ruled out (the run's δ, or "their resolution" when rows
/// have their own), else "with no change beyond the threshold".
fn ok_summary(results: &Results) -> String {
    match results.method.policy.as_ref() {
        Some(p) if p.rule == crate::stats::Rule::Resolution => {
            if p.resolutions.is_empty() {
                format!(
                    "where a slowdown of {} or more is ruled out",
                    format::percent(p.resolution)
                )
            } else {
                "where a slowdown of their resolution or more is ruled out".to_string()
            }
        }
        _ => "with no change beyond the threshold".to_string(),
    }
}

/// The non-zero status counts, worst first: `🔴 1 regression · ⚠️ 2 possible regressions`.
fn counts_line(results: &Results) -> String {
    let parts: Vec<String> = results
        .counts()
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(s, n)| format!("{} {}", s.emoji(), count_label(s, n)))
        .collect();
    let total = results.benches.len();
    let noun = if total == 1 {
        "benchmark"
    } else {
        "benchmarks"
    };
    if parts.is_empty() {
        format!("{total} {noun}")
    } else {
        format!("{total} {noun}: {}", parts.join(" · "))
    }
}

/// Placeholder for a cell that has no value on this row (the base of an added benchmark).
const EMPTY: &str = "—";

/// The formatted cells of one benchmark row, shared by the terminal and markdown tables.
struct Cells {
    base: String,
    head: String,
    base_throughput: Option<String>,
    head_throughput: Option<String>,
    change: String,
    ci: String,
    threshold: String,
}

impl Cells {
    fn of(b: &BenchResult) -> Cells {
        let base_ns = b.base.as_ref().map(|s| s.median_ns);
        let head_ns = b.head.as_ref().map(|s| s.median_ns);
        let (base, head) = match (base_ns, head_ns) {
            (Some(x), Some(y)) => format::time_pair(x, y),
            (x, y) => (
                x.map_or(EMPTY.into(), format::time),
                y.map_or(EMPTY.into(), format::time),
            ),
        };
        let tp = |ns: Option<f64>| Some(format::throughput(b.throughput?, ns?));
        let (change, ci, threshold) = match b.change {
            Some(c) => (
                format::change(c.estimate),
                format::interval(c.ci_low, c.ci_high),
                format::threshold(b.threshold, b.threshold_source),
            ),
            // Nothing was compared, so no threshold was applied either.
            None => (EMPTY.into(), EMPTY.into(), EMPTY.into()),
        };
        Cells {
            base,
            head,
            base_throughput: tp(base_ns),
            head_throughput: tp(head_ns),
            change,
            ci,
            threshold,
        }
    }
}

/// Whether any row has instruction counts (the table then has an Instructions column).
fn has_instructions(benches: &[&BenchResult]) -> bool {
    benches.iter().any(|b| b.instructions.is_some())
}

/// A row's Instructions cell: the change and both counts per iteration (`+1.6 % (12 345 → 12 543)`),
/// `–` for a row with none, `not counted` when a side could not be counted.
fn instructions_cell(b: &BenchResult) -> String {
    let Some(ic) = &b.instructions else {
        return EMPTY.into();
    };
    match (ic.base, ic.head, ic.change()) {
        (Some(x), Some(y), Some(c)) => format!(
            "{} ({} → {})",
            format::change(c),
            format::number(x),
            format::number(y)
        ),
        _ => "not counted".into(),
    }
}

/// Whether this is a single-revision end-to-end run (`harness e2e`).
/// Whether `results` is a single-revision (`harness e2e`) run rather than a comparison.
pub fn single_revision(results: &Results) -> bool {
    results
        .e2e
        .as_ref()
        .is_some_and(|e| e.mode == crate::results::E2eMode::Single)
}

/// The report's title: `Benchmark gate`, or `End-to-end checks` for a single-revision run.
fn title(results: &Results) -> &'static str {
    if single_revision(results) {
        "End-to-end checks"
    } else {
        "Benchmark gate"
    }
}

/// The verdict: an emoji and a short sentence, e.g. `🔴` `1 regression`. Derived from the
/// recorded [`Outcome`] plus the counts, never re-decided here. With end-to-end checks, their
/// clause follows the benchmarks' (or stands alone when no benchmark ran).
fn verdict(results: &Results) -> (&'static str, String) {
    let Some(e) = &results.e2e else {
        return bench_verdict(results, results.outcome);
    };
    let mut parts = Vec::new();
    let bench_outcome = Results::decide(&results.benches, &results.failures);
    if !(results.benches.is_empty() && results.failures.is_empty()) {
        parts.push(format!(
            "benchmarks: {}",
            bench_verdict(results, bench_outcome).1
        ));
    }
    parts.push(e2e::verdict_clause(e));
    let red = e2e::has_red(e)
        || results
            .benches
            .iter()
            .any(|b| b.status == Status::Regression);
    let emoji = match results.outcome {
        Outcome::Error => "⛔",
        Outcome::Fail if red => "🔴",
        Outcome::Fail => "⛔",
        Outcome::Warn => "⚠️",
        Outcome::Pass => "✅",
    };
    (emoji, parts.join("; "))
}

/// The benchmarks' verdict under `outcome`.
fn bench_verdict(results: &Results, outcome: Outcome) -> (&'static str, String) {
    let n = |s: Status| results.benches.iter().filter(|b| b.status == s).count();
    let mut text = match outcome {
        Outcome::Error => {
            let why: Vec<String> = results
                .failures
                .iter()
                .filter(|f| f.side == Side::Base)
                .map(|f| format!("base failed to {}", f.stage))
                .collect();
            let head = if why.is_empty() {
                "could not run".to_string()
            } else {
                format!("could not run ({})", why.join(", "))
            };
            return ("⛔", with_shard(results, head));
        }
        Outcome::Fail => {
            let mut parts = Vec::new();
            for s in [
                Status::Regression,
                Status::Failed,
                Status::PossibleRegression,
            ] {
                if n(s) > 0 {
                    parts.push(count_label(s, n(s)));
                }
            }
            for f in &results.failures {
                parts.push(format!("{} failed to {}", f.side.word(), f.stage));
            }
            if parts.is_empty() {
                parts.push("failed".to_string());
            }
            let emoji = if n(Status::Regression) > 0 {
                "🔴"
            } else {
                "⛔"
            };
            return (emoji, with_shard(results, parts.join(", ")));
        }
        Outcome::Warn => count_label(Status::PossibleRegression, n(Status::PossibleRegression)),
        Outcome::Pass if results.benches.is_empty() => {
            // No silent pass: nothing compared is not "no regressions".
            return ("❔", with_shard(results, "no benchmarks compared".into()));
        }
        Outcome::Pass => "no regressions".to_string(),
    };
    if n(Status::TooNoisy) > 0 {
        text.push_str(&format!(" ({} too noisy to tell)", n(Status::TooNoisy)));
    }
    let emoji = if outcome == Outcome::Warn {
        "⚠️"
    } else {
        "✅"
    };
    (emoji, with_shard(results, text))
}

fn with_shard(results: &Results, text: String) -> String {
    match results.shard {
        Some((i, n)) => format!("{text} (shard {i}/{n})"),
        None => text,
    }
}

/// Removes ANSI escape sequences (a tool's coloured output) from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // CSI: parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The last `max_lines` lines of a failure log, without colour codes, each cut to `max_width`
/// characters: enough to see the error, bounded so one failure cannot fill the comment.
fn log_tail(lines: &[String], max_lines: usize, max_width: usize) -> Vec<String> {
    let skip = lines.len().saturating_sub(max_lines);
    lines[skip..]
        .iter()
        .map(|l| {
            // ANSI sequences, then every other control character (`\r`, backspace, BEL).
            let l = md::plain(l);
            if l.chars().count() > max_width {
                let cut: String = l.chars().take(max_width).collect();
                format!("{cut}…")
            } else {
                l
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_says_what_no_change_means_under_the_resolution_rule() {
        let mut r = fixtures::mixed();
        assert_eq!(ok_meaning(&r), None);
        assert!(!markdown(&r).contains("is ruled out"));
        r.method.policy = Some(crate::stats::Policy {
            rule: crate::stats::Rule::Resolution,
            ..crate::stats::Policy::default()
        });
        let line = ok_meaning(&r).unwrap();
        assert_eq!(
            line,
            "✅ means a slowdown of 3.0 % or more is ruled out for that row, each bound at \
             98.75 %; ❔ means it could not be ruled out, and the row shows the interval."
        );
        assert!(markdown(&r).contains(&line));
        assert!(terminal(&r, false).contains(&line));
    }

    use super::*;
    use crate::report::fixtures;

    #[test]
    fn no_color_wins_and_clicolor_force_forces() {
        let on = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        let zero = Some(OsStr::new("0"));
        assert!(color_choice(true, None, None));
        assert!(!color_choice(false, None, None));
        // NO_COLOR: any non-empty value disables, an empty one does not.
        assert!(!color_choice(true, on, None));
        assert!(!color_choice(true, Some(OsStr::new("false")), None));
        assert!(color_choice(true, empty, None));
        // CLICOLOR_FORCE colours a pipe, except when empty or 0, and loses to NO_COLOR.
        assert!(color_choice(false, None, on));
        assert!(!color_choice(false, None, zero));
        assert!(!color_choice(false, None, empty));
        assert!(!color_choice(true, on, on));
    }

    #[test]
    fn worst_first_orders_by_status_then_slowdown_then_id() {
        let r = fixtures::mixed();
        let order: Vec<(Status, &str)> = worst_first(&r)
            .iter()
            .map(|b| (b.status, b.id.as_str()))
            .collect();
        let statuses: Vec<Status> = order.iter().map(|o| o.0).collect();
        let mut sorted = statuses.clone();
        sorted.sort();
        assert_eq!(statuses, sorted, "statuses not worst-first: {order:?}");
        assert_eq!(statuses[0], Status::Failed);
        assert_eq!(*statuses.last().unwrap(), Status::NoChange);
        // Within ✅ the larger estimate comes first; the fixture's input order is different.
        let no_change: Vec<f64> = worst_first(&r)
            .iter()
            .filter(|b| b.status == Status::NoChange)
            .map(|b| b.change.unwrap().estimate)
            .collect();
        assert!(no_change.len() >= 3);
        assert!(no_change.windows(2).all(|w| w[0] >= w[1]), "{no_change:?}");
    }

    #[test]
    fn worst_first_is_stable_for_equal_estimates() {
        let mut r = fixtures::clean_pass(4);
        for b in &mut r.benches {
            b.change.as_mut().unwrap().estimate = 0.0;
        }
        r.benches.reverse();
        let ids: Vec<&str> = worst_first(&r)
            .iter()
            .filter(|b| b.status == Status::NoChange)
            .map(|b| b.id.as_str())
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn verdicts_follow_the_outcome() {
        assert_eq!(
            verdict(&fixtures::mixed()),
            (
                "🔴",
                "1 regression, 1 failed, 1 possible regression, PR failed to run".into()
            )
        );
        assert_eq!(
            verdict(&fixtures::clean_pass(3)),
            ("✅", "no regressions".into())
        );
        assert_eq!(
            verdict(&fixtures::base_build_failure()),
            ("⛔", "could not run (base failed to build)".into())
        );
        let mut warn = fixtures::clean_pass(3);
        warn.benches[0].status = Status::PossibleRegression;
        warn.benches[1].status = Status::PossibleRegression;
        warn.benches[2].status = Status::TooNoisy;
        warn.outcome = Results::decide(&warn.benches, &warn.failures);
        warn.shard = Some((2, 4));
        assert_eq!(
            verdict(&warn),
            (
                "⚠️",
                "2 possible regressions (1 too noisy to tell) (shard 2/4)".into()
            )
        );
        let mut empty = fixtures::clean_pass(0);
        empty.outcome = Outcome::Pass;
        assert_eq!(verdict(&empty), ("❔", "no benchmarks compared".into()));
    }

    #[test]
    fn counts_skip_zeros_and_pluralise() {
        assert_eq!(
            counts_line(&fixtures::mixed()),
            "10 benchmarks: ⛔ 1 failed · 🔴 1 regression · ⚠️ 1 possible regression · ❔ 1 too noisy · ➖ 1 removed · 🆕 1 added · 🟢 1 improvement · ✅ 3 no change"
        );
        assert_eq!(count_label(Status::Improvement, 2), "2 improvements");
        assert_eq!(count_label(Status::NoChange, 2), "2 no change");
    }

    #[test]
    fn log_tails_are_bounded_and_uncoloured() {
        let lines: Vec<String> = (0..50)
            .map(|i| format!("\u{1b}[1;31merror\u{1b}[0m {i}"))
            .collect();
        let tail = log_tail(&lines, 3, 8);
        assert_eq!(tail, ["error 47", "error 48", "error 49"]);
        let long = log_tail(&["x".repeat(20)], 3, 5);
        assert_eq!(long, ["xxxxx…"]);
    }
}
