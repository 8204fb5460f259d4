//! The markdown report: the PR comment and the job's step summary.
//!
//! Layout, most important first: [`MARKER`], verdict header, revisions, counts; build/run
//! failures with the tool's last lines; the benchmark table worst-first (when it is long, the ✅
//! rows fold into a `<details>` block below the rows that need attention); notes; the end-to-end
//! hooks; then folded host, method, reproduce and "what this cannot catch" sections.
//!
//! The document is built as a list of [`Block`]s that are never split, so
//! [`markdown_truncated`] can cut at a table-row boundary and still close what it opened.

use std::fmt::Write as _;

use super::format as fmt;
use super::{Cells, MARKER, counts_line, log_tail, md, verdict, worst_first};
use crate::results::{BenchResult, Results, Status};

/// With more rows than this, the ✅ rows fold into a `<details>` block.
const FOLD_NO_CHANGE_ABOVE: usize = 10;
/// Lines of a failure log shown, and the width each is cut to.
const LOG_LINES: usize = 40;
const LOG_WIDTH: usize = 300;

const TABLE_HEADER: &str = "| Status | Benchmark | Base | PR | Change | CI | Threshold |\n\
                            |:--|:--|--:|--:|--:|--:|--:|\n";
const DETAILS_END: &str = "\n</details>\n";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Marker, verdict, revisions, counts: always kept.
    Head,
    /// One benchmark row (the first of a table carries the table header).
    Row,
    Other,
}

/// An unsplittable piece of the document. `closer` is what must follow if the document is cut
/// right after this block (the `</details>` of a fold the block sits in).
struct Block {
    text: String,
    kind: Kind,
    closer: &'static str,
}

impl Block {
    fn new(kind: Kind, text: String) -> Self {
        Block {
            text,
            kind,
            closer: "",
        }
    }
}

/// The full markdown report.
pub fn markdown(results: &Results) -> String {
    document(results).iter().map(|b| b.text.as_str()).collect()
}

/// The markdown report cut to at most `max_chars` bytes of UTF-8 (bytes bound both characters
/// and UTF-16 units, so the result fits whichever GitHub counts; see
/// [`GITHUB_COMMENT_LIMIT`](super::GITHUB_COMMENT_LIMIT)). A report that fits is returned whole.
/// Otherwise it is cut at a block boundary (a table row, a note, a section), an open `<details>`
/// is closed, and a line saying how many rows are shown and pointing at `artifact_hint` (e.g.
/// "the `bench-report` artifact of this run") is appended. The marker, verdict and counts are
/// always kept, even if they alone exceed `max_chars`.
pub fn markdown_truncated(results: &Results, max_chars: usize, artifact_hint: &str) -> String {
    let blocks = document(results);
    let full_len: usize = blocks.iter().map(|b| b.text.len()).sum();
    if full_len <= max_chars {
        return blocks.into_iter().map(|b| b.text).collect();
    }
    let total_rows = blocks.iter().filter(|b| b.kind == Kind::Row).count();
    let pointer = |shown: usize| {
        format!(
            "\n> ✂️ **Report truncated** to fit the comment size limit: {shown} of {total_rows} \
             benchmark rows shown. Full report: {artifact_hint}\n"
        )
    };
    // `shown` ≤ `total_rows`, so this is the longest the pointer can be.
    let pointer_budget = pointer(total_rows).len();
    let mut out = String::new();
    let mut shown = 0;
    let mut closer = "";
    for b in &blocks {
        let fits = out.len() + b.text.len() + b.closer.len() + pointer_budget <= max_chars;
        if b.kind != Kind::Head && !fits {
            break;
        }
        out.push_str(&b.text);
        closer = b.closer;
        shown += usize::from(b.kind == Kind::Row);
    }
    out.push_str(closer);
    out.push_str(&pointer(shown));
    out
}

fn document(results: &Results) -> Vec<Block> {
    let mut blocks = vec![Block::new(Kind::Head, head(results))];
    // The report's headline: an answer the PR changed.
    if let Some(b) = super::e2e::markdown_headline(results) {
        blocks.push(Block::new(Kind::Head, b));
    }
    if let Some(b) = failures(results) {
        blocks.push(Block::new(Kind::Other, b));
    }
    table(results, &mut blocks);
    notes(results, &mut blocks);
    // End-to-end sections, between the benchmark table and the folded details.
    for section in [e2e_correctness(results), e2e_speed(results)]
        .into_iter()
        .flatten()
    {
        blocks.push(Block::new(Kind::Other, section));
    }
    for section in [
        host(results),
        method(results),
        reproduce(results),
        cannot_catch(results),
    ] {
        blocks.push(Block::new(Kind::Other, section));
    }
    blocks
}

/// The end-to-end correctness table (generated tokens vs the fp32 oracle and the ORT goldens);
/// `None` when the run had no end-to-end part ("what this cannot catch" then says that wrong
/// answers go unseen).
fn e2e_correctness(results: &Results) -> Option<String> {
    super::e2e::markdown_correctness(results)
}

/// The end-to-end speed table (time per decode step and tok/s, base vs PR, CUDA-graph counters).
fn e2e_speed(results: &Results) -> Option<String> {
    super::e2e::markdown_speed(results)
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn details(summary: &str, body: &str) -> String {
    format!("\n<details><summary>{summary}</summary>\n\n{body}\n</details>\n")
}

fn head(results: &Results) -> String {
    let (emoji, text) = verdict(results);
    let rev = |r: &crate::results::Revision| {
        format!(
            "{} {} ({})",
            md::code(fmt::short_sha(&r.sha)),
            md::text(&r.subject),
            md::code(&r.spec)
        )
    };
    // Paragraphs, separated by blank lines.
    let mut paragraphs = vec![if super::single_revision(results) {
        format!("**Revision** {}", rev(&results.head))
    } else {
        format!(
            "**Base** {} → **PR** {}",
            rev(&results.base),
            rev(&results.head)
        )
    }];
    let sides: &[(&str, &crate::results::Revision)] = if super::single_revision(results) {
        &[("checked", &results.head)]
    } else {
        &[("base", &results.base), ("PR", &results.head)]
    };
    if !results.gate_changes.is_empty() {
        let shown: Vec<String> = results
            .gate_changes
            .iter()
            .take(5)
            .map(|p| md::code(p))
            .collect();
        let more = results.gate_changes.len().saturating_sub(shown.len());
        let workflows = results
            .gate_changes
            .iter()
            .any(|p| p.starts_with(".github/"));
        paragraphs.push(format!(
            "> ⚠️ **This PR changes the gate itself:** {}{}. The PR check judges every pull \
             request with the base's harness and harness.yaml, so changes to those did not judge \
             this one; they apply once merged (`harness compare` on this branch runs them).{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
            if workflows {
                " Changes under `.github/` are different: GitHub ran this PR's own workflow \
                 files for this check, so review them before trusting this report."
            } else {
                ""
            }
        ));
    }
    for &(name, r) in sides {
        if r.dirty {
            paragraphs.push(format!(
                "> ⚠️ **Dirty working tree:** the {name} side was measured with uncommitted \
                 changes on top of {}; no commit reproduces these numbers.",
                md::code(fmt::short_sha(&r.sha))
            ));
        }
    }
    if !results.benches.is_empty() {
        paragraphs.push(counts_line(results));
    }
    if let Some(line) = super::ok_meaning(results) {
        paragraphs.push(line);
    }
    if let Some(e) = &results.e2e {
        let parts: Vec<String> = e
            .counts()
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(s, n)| format!("{} {n} {}", s.emoji(), s.label()))
            .collect();
        if !parts.is_empty() {
            paragraphs.push(format!(
                "{} end-to-end checks: {}",
                e.correctness.len(),
                parts.join(" · ")
            ));
        }
    }
    format!(
        "{MARKER}\n## {emoji} {}: {}\n\n{}\n",
        super::title(results),
        // The e2e clause quotes notes from the run (why a check was not run).
        md::text(&text),
        paragraphs.join("\n\n")
    )
}

fn failures(results: &Results) -> Option<String> {
    if results.failures.is_empty() {
        return None;
    }
    let mut s = String::from("\n### ⛔ Build and run failures\n");
    for f in &results.failures {
        let _ = writeln!(
            s,
            "\n**{} failed to {}:** {}\n",
            capitalized(f.side.word()),
            f.stage,
            md::text(&f.failure.message)
        );
        let tail = log_tail(&f.failure.log_tail, LOG_LINES, LOG_WIDTH);
        if tail.is_empty() {
            s.push_str("(no output was captured)\n");
        } else {
            if f.failure.log_tail.len() > tail.len() {
                let _ = writeln!(s, "Last {} lines of the output:\n", tail.len());
            }
            s.push_str(&md::fenced("text", &tail, ""));
        }
    }
    Some(s)
}

/// The bench table's header, with an Instructions column when `instr`.
fn table_header(instr: bool) -> String {
    if instr {
        "| Status | Benchmark | Base | PR | Change | CI | Threshold | Instructions |\n\
         |:--|:--|--:|--:|--:|--:|--:|--:|\n"
            .into()
    } else {
        TABLE_HEADER.into()
    }
}

fn row(b: &BenchResult, instr: bool) -> String {
    let c = Cells::of(b);
    // Throughput goes on a second line of the time cell: the columns stay narrow.
    let side = |time: &str, tp: &Option<String>| match tp {
        Some(tp) => format!("{time}<br>{tp}"),
        None => time.to_string(),
    };
    let extra = if instr {
        format!(" {} |", super::instructions_cell(b))
    } else {
        String::new()
    };
    format!(
        "| {} {} | {} | {} | {} | {} | {} | {} |{extra}\n",
        b.status.emoji(),
        b.label(),
        md::cell_code(&b.id),
        side(&c.base, &c.base_throughput),
        side(&c.head, &c.head_throughput),
        c.change,
        c.ci,
        c.threshold,
    )
}

fn table(results: &Results, blocks: &mut Vec<Block>) {
    let benches = worst_first(results);
    if benches.is_empty() && results.e2e.is_some() {
        // An end-to-end-only run: its tables follow.
        return;
    }
    if benches.is_empty() {
        blocks.push(Block::new(
            Kind::Other,
            "\nNo benchmarks were compared.\n".into(),
        ));
        return;
    }
    let instr = super::has_instructions(&benches);
    let header = table_header(instr);
    let fold = benches.len() > FOLD_NO_CHANGE_ABOVE;
    let (shown, folded): (Vec<&BenchResult>, Vec<&BenchResult>) = benches
        .into_iter()
        .partition(|b| !(fold && b.status == Status::NoChange && !b.faster()));
    for (i, b) in shown.iter().enumerate() {
        let prefix = if i == 0 {
            format!("\n{header}")
        } else {
            String::new()
        };
        blocks.push(Block::new(Kind::Row, prefix + &row(b, instr)));
    }
    for (i, b) in folded.iter().enumerate() {
        let prefix = if i == 0 {
            let n = folded.len();
            let noun = if n == 1 { "benchmark" } else { "benchmarks" };
            format!(
                "\n<details><summary>✅ {n} {noun} {}</summary>\n\n{header}",
                super::ok_summary(results)
            )
        } else {
            String::new()
        };
        blocks.push(Block {
            text: prefix + &row(b, instr),
            kind: Kind::Row,
            closer: DETAILS_END,
        });
    }
    if !folded.is_empty() {
        blocks.push(Block::new(Kind::Other, DETAILS_END.into()));
    }
}

fn notes(results: &Results, blocks: &mut Vec<Block>) {
    let noted: Vec<&BenchResult> = worst_first(results)
        .into_iter()
        .filter(|b| b.note.is_some() || b.confirmed)
        .collect();
    for (i, b) in noted.iter().enumerate() {
        let mut text = if i == 0 {
            String::from("\n**Notes**\n\n")
        } else {
            String::new()
        };
        let mut parts = Vec::new();
        if let Some(note) = &b.note {
            parts.push(md::text(note));
        }
        if b.confirmed {
            parts.push(format!(
                "confirmation rounds run ({} rounds in the estimate)",
                b.rounds
            ));
        }
        let _ = writeln!(
            text,
            "- {} {}: {}",
            b.status.emoji(),
            md::code(&b.id),
            parts.join("; ")
        );
        blocks.push(Block::new(Kind::Other, text));
    }
}

fn host(results: &Results) -> String {
    let h = &results.host;
    let mut body = String::new();
    let _ = writeln!(body, "- **CPU:** {} ({} cores)", md::text(&h.cpu), h.cores);
    let _ = writeln!(
        body,
        "- **OS:** {}, kernel {}",
        md::text(&h.os),
        md::text(&h.kernel)
    );
    let _ = writeln!(body, "- **Memory:** {:.1} GiB", h.mem_gib);
    let _ = writeln!(body, "- **Toolchain:** {}", md::text(&h.rustc));
    let _ = writeln!(body, "- **Host fingerprint:** {}", md::code(&h.fingerprint));
    for l in &results.lost_time {
        // Escaped: a results file can come from a pull request's artifacts.
        let _ = writeln!(
            body,
            "- **Time the host took:** {}",
            md::text(&crate::host::describe_lost(l))
        );
    }
    if !results.rounds.is_empty() {
        let others = others_by_round(results);
        let crowded = results
            .method
            .policy
            .as_ref()
            .map_or(crate::stats::Policy::default().crowded_cores, |p| {
                p.crowded_cores
            });
        let (others_head, others_rule, others_why) = if others.is_empty() {
            ("", "", String::new())
        } else {
            (
                " Others' cores |",
                "--:|",
                format!(
                    "; others' cores: how many cores other processes kept busy while the \
                     round's multi-threaded rows were measured, mean (⚠️: {crowded:.2} or more; \
                     a row whose mean over its rounds reaches it is ❔)"
                ),
            )
        };
        let _ = write!(
            body,
            "\nLoad averages at the start of each round (⚠️: 1-minute load at or above the \
             core count, so the sides competed for CPU){others_why}:\n\n\
             | Round | Order | Kind | Load 1 / 5 / 15 min |{others_head} Duration |\n\
             |--:|:--|:--|--:|{others_rule}--:|\n",
        );
        for r in &results.rounds {
            let busy = if r.load_avg[0] >= f64::from(h.cores.max(1)) {
                " ⚠️"
            } else {
                ""
            };
            let other = if others.is_empty() {
                String::new()
            } else {
                match others.get(&r.index) {
                    Some(&o) if crowded > 0.0 && o >= crowded => format!(" {o:.2} ⚠️ |"),
                    Some(o) => format!(" {o:.2} |"),
                    None => " |".into(),
                }
            };
            let _ = writeln!(
                body,
                "| {} | {} | {} | {:.2} / {:.2} / {:.2}{busy} |{other} {} |",
                r.index,
                md::text(&r.order),
                if r.confirmation {
                    "confirmation"
                } else {
                    "measurement"
                },
                r.load_avg[0],
                r.load_avg[1],
                r.load_avg[2],
                fmt::duration(r.duration_s),
            );
        }
    }
    details(
        &format!(
            "Host: {}, {} cores, {}",
            md::text(&h.cpu),
            h.cores,
            md::text(&h.os)
        ),
        &body,
    )
}

/// Per round index, the mean `others_cores` of the multi-threaded rows' samples of that round
/// (empty when no sample carries one).
fn others_by_round(results: &Results) -> std::collections::BTreeMap<u32, f64> {
    let mut sums: std::collections::BTreeMap<u32, (f64, u32)> = Default::default();
    for b in &results.benches {
        for side in [&b.base, &b.head].into_iter().flatten() {
            for x in &side.samples {
                if let Some(o) = x.others_cores.filter(|o| o.is_finite()) {
                    let e = sums.entry(x.round).or_default();
                    e.0 += o;
                    e.1 += 1;
                }
            }
        }
    }
    sums.into_iter()
        .map(|(r, (sum, n))| (r, sum / f64::from(n)))
        .collect()
}

fn method(results: &Results) -> String {
    let m = &results.method;
    let mut body = String::new();
    if let Some(e) = results
        .e2e
        .as_ref()
        .filter(|_| super::single_revision(results))
    {
        let _ = writeln!(
            body,
            "- **End-to-end checks of one revision:** per check one {} call, its tokens compared with `oracle decode` and the golden (exact; a divergence is classified near-tie or real with the reference's top-1/top-2 margin), its timed runs shown without a comparison{}",
            md::code(&format!("engine profile {}", e.profile_args.join(" "))),
            if e.require_cuda {
                "; `--require-cuda`: a CUDA check that cannot run is an error"
            } else {
                ""
            }
        );
        let _ = writeln!(
            body,
            "- **Run:** {}, harness {}, {} wall time",
            md::text(&results.suite),
            md::text(&results.tool_version),
            fmt::duration(results.wall_s)
        );
        return details("Method", &body);
    }
    let confirmation = if m.confirmation_rounds == 0 {
        "no confirmation rounds".to_string()
    } else {
        format!(
            "plus up to {} confirmation rounds for benchmarks suspected after the first pass \
             (nothing is 🔴 without them)",
            m.confirmation_rounds
        )
    };
    let noise = if m.noise_rounds == 0 {
        String::new()
    } else {
        // Results written before the policy was recorded (method.policy) have no target: say
        // only what is known.
        let target = m
            .policy
            .as_ref()
            .map(|p| {
                format!(
                    " (a threshold above {}, or ❔)",
                    fmt::percent(p.noise_target)
                )
            })
            .unwrap_or_default();
        format!(
            "; up to {} more for benchmarks the first {} left too noisy to tell{target}",
            m.noise_rounds, m.rounds
        )
    };
    let _ = writeln!(
        body,
        "- **Rounds:** {} interleaved in {} order (base and PR alternate, so drift and \
         contention hit both){noise}, {confirmation}",
        m.rounds,
        md::text(&m.order),
    );
    let args = if m.criterion_args.is_empty() {
        "(none)".to_string()
    } else {
        md::code(&m.criterion_args.join(" "))
    };
    if let Some(s) = &m.sampling {
        let _ = writeln!(body, "- **Sampling:** {}", md::text(s));
    }
    if let Some(p) = &m.placement {
        let _ = writeln!(body, "- **Code placement:** {}", md::text(p));
    }
    let _ = writeln!(body, "- **Criterion arguments per round:** {args}");
    let _ = writeln!(
        body,
        "- **Decision:** paired change across rounds with a {} confidence interval; family-wise \
         α = {} over the suite with the {} correction",
        fmt::level(m.confidence),
        m.alpha,
        md::text(&m.correction)
    );
    let thresholds = match &m.profile {
        Some(p) => format!("calibration profile {}", md::code(p)),
        None => "none: thresholds from within-run spread (run `harness calibrate` on this host \
                 for per-benchmark thresholds)"
            .to_string(),
    };
    let _ = writeln!(body, "- **Noise profile:** {thresholds}");
    let _ = writeln!(
        body,
        "- **Threshold floor:** {} (no threshold is set below it)",
        fmt::percent(m.floor)
    );
    let shard = match results.shard {
        Some((i, n)) => format!(", shard {i}/{n}"),
        None => String::new(),
    };
    let _ = writeln!(
        body,
        "- **Run:** suite {}{shard}, harness {}, {} wall time",
        md::code(&results.suite),
        md::text(&results.tool_version),
        fmt::duration(results.wall_s)
    );
    if let Some(r) = &m.replay {
        let _ = writeln!(
            body,
            "- **Replayed, not measured:** {} (`harness replay`)",
            md::text(r)
        );
    }
    details("Method", &body)
}

fn reproduce(results: &Results) -> String {
    let body = if results.reproduce.is_empty() {
        "No reproduce commands were recorded for this run.\n".to_string()
    } else {
        md::fenced("sh", &results.reproduce, "")
    };
    details("Reproduce", &body)
}

fn cannot_catch(results: &Results) -> String {
    let thresholds: Vec<f64> = results
        .benches
        .iter()
        .filter(|b| b.change.is_some())
        .map(|b| b.threshold)
        .collect();
    let range = match (
        thresholds.iter().copied().reduce(f64::min),
        thresholds.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) if fmt::percent(lo) == fmt::percent(hi) => {
            format!(" (±{} here)", fmt::percent(lo))
        }
        (Some(lo), Some(hi)) => format!(" (±{} to ±{} here)", fmt::percent(lo), fmt::percent(hi)),
        _ => String::new(),
    };
    let noisy = results
        .benches
        .iter()
        .filter(|b| b.status == Status::TooNoisy)
        .count();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "- **Regressions smaller than the threshold** shown on each row{range}: they are \
         reported ✅."
    );
    let _ = writeln!(
        body,
        "- **Changes masked by noise:** a ❔ row{} can hide a real change as large as its \
         interval.",
        if noisy > 0 {
            format!(" ({noisy} in this run)")
        } else {
            " (none in this run)".to_string()
        }
    );
    let _ = writeln!(
        body,
        "- **Code paths no benchmark exercises:** the suite {} only times what its benchmarks \
         call.",
        md::code(&results.suite)
    );
    let _ = writeln!(
        body,
        "- **Effects on other hardware:** these numbers come from this runner's CPU ({}, {} \
         cores); other CPUs, core counts, memory systems and GPUs can behave differently.",
        md::text(&results.host.cpu),
        results.host.cores
    );
    let _ = writeln!(
        body,
        "- **Memory use, allocations and binary size:** only time per iteration is measured."
    );
    let _ = writeln!(
        body,
        "- **Added and removed benchmarks** (🆕, ➖): nothing to compare them with."
    );
    if e2e_correctness(results).is_none() {
        let _ = writeln!(
            body,
            "- **Wrong answers:** micro-benchmarks time code, they do not check its output; this \
             report has no end-to-end correctness check."
        );
    }
    details("What this cannot catch", &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn markdown_mixed() {
        insta::assert_snapshot!(markdown(&fixtures::mixed()));
    }

    #[test]
    fn markdown_clean_pass_folds_no_change_rows() {
        let mut r = fixtures::clean_pass(14);
        r.benches[5].status = Status::Improvement;
        let c = r.benches[5].change.as_mut().unwrap();
        (c.estimate, c.ci_low, c.ci_high) = (-0.052, -0.061, -0.043);
        let base_ns = r.benches[5].base.as_ref().unwrap().median_ns;
        r.benches[5].head.as_mut().unwrap().median_ns = base_ns * 0.948;
        r.outcome = Results::decide(&r.benches, &r.failures);
        insta::assert_snapshot!(markdown(&r));
    }

    #[test]
    fn the_folded_rows_say_what_their_check_mark_means() {
        let mut r = fixtures::clean_pass(14);
        assert!(markdown(&r).contains("✅ 14 benchmarks with no change beyond the threshold"));
        let mut p = crate::stats::Policy {
            rule: crate::stats::Rule::Resolution,
            ..crate::stats::Policy::default()
        };
        r.method.policy = Some(p.clone());
        let md = markdown(&r);
        assert!(
            md.contains(
                "✅ 14 benchmarks where a slowdown of 3.0 % or more is ruled out</summary>"
            ),
            "{md}"
        );
        assert!(!md.contains("beyond the threshold"), "{md}");
        p.resolutions.insert("bench/*".into(), 0.05);
        r.method.policy = Some(p);
        assert!(markdown(&r).contains(
            "✅ 14 benchmarks where a slowdown of their resolution or more is ruled out"
        ));
    }

    #[test]
    fn the_method_names_the_noise_target_when_the_policy_is_recorded() {
        let mut r = fixtures::clean_pass(3);
        let line = |r: &Results| {
            markdown(r)
                .lines()
                .find(|l| l.starts_with("- **Rounds:**"))
                .unwrap()
                .to_string()
        };
        assert!(!line(&r).contains("threshold above"), "{}", line(&r));
        r.method.policy = Some(crate::stats::Policy::default());
        assert!(
            line(&r).contains(
                "up to 6 more for benchmarks the first 6 left too noisy to tell \
                               (a threshold above 4.0 %, or ❔)"
            ),
            "{}",
            line(&r)
        );
    }

    #[test]
    fn the_round_table_shows_the_others_cores_only_when_read() {
        let mut r = fixtures::mixed();
        let plain = markdown(&r);
        assert!(!plain.contains("Others' cores"), "no reading, no column");
        // Rounds 1 and 3 of one benchmark read, both sides alike; round 3 crowded.
        let b = r
            .benches
            .iter_mut()
            .find(|b| b.base.is_some() && b.head.is_some())
            .unwrap();
        for side in [b.base.as_mut().unwrap(), b.head.as_mut().unwrap()] {
            side.samples = [1, 3]
                .map(|round| crate::results::RawSample {
                    round,
                    others_cores: Some(if round == 3 { 0.96 } else { 0.02 }),
                    ..Default::default()
                })
                .to_vec();
        }
        let md = markdown(&r);
        assert!(md.contains("Others' cores |"), "{md}");
        let row = |i: u32| {
            md.lines()
                .find(|l| l.starts_with(&format!("| {i} |")))
                .unwrap()
                .to_string()
        };
        assert!(row(1).contains("| 0.02 |"), "{}", row(1));
        assert!(row(3).contains("| 0.96 ⚠️ |"), "{}", row(3));
        assert_eq!(
            row(2),
            "| 2 | BA | measurement | 0.35 / 0.42 / 0.51 | | 38.7 s |"
        );
    }

    #[test]
    fn markdown_could_not_run() {
        insta::assert_snapshot!(markdown(&fixtures::base_build_failure()));
    }

    #[test]
    fn markdown_with_e2e() {
        insta::assert_snapshot!(markdown(&fixtures::with_e2e()));
    }

    #[test]
    fn e2e_results_round_trip_through_json_and_annotate() {
        let r = fixtures::with_e2e();
        let back: Results = serde_json::from_str(&crate::report::json(&r)).unwrap();
        assert_eq!(back, r);
        // A file written before the e2e field existed still reads (same schema).
        let mut old: serde_json::Value = serde_json::from_str(&crate::report::json(&r)).unwrap();
        old.as_object_mut().unwrap().remove("e2e");
        let old: Results = serde_json::from_value(old).unwrap();
        assert_eq!(old.e2e, None);
        let notes = crate::actions::annotations(&r);
        assert!(
            notes.iter().any(|n| n.starts_with(
                "::error title=🔴 e2e diverged%3A tiny/capital_plain/cpu-f32::step 3"
            )),
            "{notes:#?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("::error title=🔴 e2e speed regression"))
        );
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("::warning title=⚠️ e2e near-tie flip"))
        );
    }

    #[test]
    fn markdown_single_revision_e2e() {
        insta::assert_snapshot!(markdown(&fixtures::single_e2e()));
    }

    #[test]
    fn e2e_headline_comes_first_and_the_verdict_counts_it() {
        let md = markdown(&fixtures::with_e2e());
        let verdict = md.lines().nth(1).unwrap();
        assert!(verdict.starts_with("## 🔴 Benchmark gate:"), "{verdict}");
        assert!(
            verdict.contains("1 e2e check diverged (1 introduced by this PR)")
                && verdict.contains("⏭ 1 e2e check not run: no usable CUDA device"),
            "{verdict}"
        );
        let headline = md.find("### 🔴 This PR changes the answer").unwrap();
        assert!(headline < md.find("| Status | Benchmark |").unwrap());
        assert!(!md.contains("this report has no end-to-end correctness check"));
        assert!(
            markdown(&fixtures::mixed())
                .contains("this report has no end-to-end correctness check")
        );
    }

    #[test]
    fn marker_appears_once_at_the_top() {
        for r in [
            fixtures::mixed(),
            fixtures::clean_pass(14),
            fixtures::base_build_failure(),
        ] {
            let md = markdown(&r);
            assert!(md.starts_with(MARKER), "{md}");
            assert_eq!(md.matches(MARKER).count(), 1);
            assert_eq!(
                md.matches("<details>").count(),
                md.matches("</details>").count()
            );
        }
    }

    #[test]
    fn short_tables_are_not_folded() {
        let md = markdown(&fixtures::clean_pass(FOLD_NO_CHANGE_ABOVE));
        assert!(!md.contains("with no change beyond the threshold"));
        assert_eq!(md.matches("| ✅ no change |").count(), FOLD_NO_CHANGE_ABOVE);
        let md = markdown(&fixtures::clean_pass(FOLD_NO_CHANGE_ABOVE + 1));
        assert!(md.contains("✅ 11 benchmarks with no change beyond the threshold"));
    }

    #[test]
    fn a_speedup_short_of_green_says_faster_and_stays_out_of_the_fold() {
        let mut r = fixtures::clean_pass(FOLD_NO_CHANGE_ABOVE + 3);
        let fast = &mut r.benches[4];
        fast.change = Some(crate::stats::Change {
            estimate: -0.25,
            ci_low: -0.33,
            ci_high: -0.24,
            ..fast.change.unwrap()
        });
        let id = fast.id.clone();
        let md = markdown(&r);
        let row = md.lines().find(|l| l.contains(&id)).unwrap();
        assert!(row.starts_with("| ✅ faster |"), "{row}");
        let fold = md.find("<details><summary>✅").unwrap();
        assert!(
            md.find(row).unwrap() < fold,
            "the faster row is shown above the fold"
        );
        assert!(md.contains("✅ 12 benchmarks with no change beyond the threshold"));
        assert_eq!(md.matches("| ✅ faster |").count(), 1);
        // An interval reaching past −δ is not "faster".
        r.benches[4].change.as_mut().unwrap().ci_high = -r.benches[4].threshold / 2.0;
        assert_eq!(markdown(&r).matches("| ✅ faster |").count(), 0);
    }

    #[test]
    fn untrusted_text_is_escaped() {
        let md = markdown(&fixtures::mixed());
        assert!(md.contains("&lt;dependencies&gt; and the &#42;results&#42; data model"));
        assert!(md.contains(r"`sample/top_k\|p/50`"));
        // The log's own ``` cannot close the fence around it.
        let md = markdown(&fixtures::base_build_failure());
        assert!(md.contains("````text\n"));
    }

    #[test]
    fn a_change_to_the_gate_itself_is_said_at_the_top() {
        let mut r = fixtures::mixed();
        assert!(!markdown(&r).contains("changes the gate itself"));
        r.gate_changes = (0..7).map(|i| format!("harness/src/f{i}.rs")).collect();
        r.gate_changes.push("harness.yaml".into());
        let md = markdown(&r);
        assert!(!md.contains("review them before trusting"));
        let note = md
            .lines()
            .find(|l| l.contains("changes the gate itself"))
            .expect("the note");
        assert!(
            note.contains("`harness/src/f0.rs`") && note.contains("and 3 more"),
            "{note}"
        );
        assert!(note.contains("base's harness and harness.yaml"));
        // Before the table, right under the verdict.
        assert!(md.find(note).unwrap() < md.find("| Status |").unwrap());
        r.gate_changes.push(".github/workflows/pr-bench.yml".into());
        assert!(markdown(&r).contains("review them before trusting this report"));
    }

    /// Free text an attacker would put in a results.json: a mention, an image, links, HTML, a
    /// table-cell and code-span breaker, a fence breaker, a heading, ANSI and bidi controls.
    const HOSTILE: &str = "@octocat @acme/security #1 <img src=https://evil.example/p.png> \
        <a href=\"https://evil.example\">x</a> [click](https://evil.example) \
        ![i](https://evil.example/i.png) https://evil.example www.evil.example a@evil.example \
        `` ` `` | </details></summary> <!-- \n```\n# heading\n\u{1b}[31mred\u{202e}";

    /// `results` with every string that can hold free text replaced by [`HOSTILE`] (a string
    /// whose replacement no longer parses, an enum or a number, is kept).
    fn hostile(results: &Results) -> Results {
        fn paths(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
            match v {
                serde_json::Value::String(_) => out.push(at),
                serde_json::Value::Array(a) => {
                    for (i, x) in a.iter().enumerate() {
                        paths(x, format!("{at}/{i}"), out);
                    }
                }
                serde_json::Value::Object(o) => {
                    for (k, x) in o {
                        paths(
                            x,
                            format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                            out,
                        );
                    }
                }
                _ => {}
            }
        }
        let mut v = serde_json::to_value(results).unwrap();
        let mut all = Vec::new();
        paths(&v, String::new(), &mut all);
        let mut replaced = 0;
        for p in all {
            let old = v.pointer(&p).cloned().unwrap();
            *v.pointer_mut(&p).unwrap() = serde_json::Value::String(HOSTILE.into());
            if serde_json::from_value::<Results>(v.clone()).is_ok() {
                replaced += 1;
            } else {
                *v.pointer_mut(&p).unwrap() = old;
            }
        }
        assert!(replaced > 20, "only {replaced} strings replaced");
        serde_json::from_value(v).unwrap()
    }

    /// What the rendered markdown makes live: links and images (by URL), HTML tag names, and
    /// the text outside code that GitHub would turn into a mention, reference or link.
    fn live(md: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
        use pulldown_cmark::{Event, Options, Parser, Tag};
        let (mut links, mut tags, mut autolinked) = (Vec::new(), Vec::new(), Vec::new());
        let tag_re = regex_lite::Regex::new(r"<\s*/?\s*([A-Za-z][A-Za-z0-9-]*)").unwrap();
        let auto_re =
            regex_lite::Regex::new(r"(?i)(^|[^\w])@[a-z0-9]|#[0-9]|https?://|www\.").unwrap();
        let decode = |h: &str| {
            let h = regex_lite::Regex::new(r"&#([0-9]+);").unwrap().replace_all(
                h,
                |c: &regex_lite::Captures| {
                    char::from_u32(c[1].parse().unwrap_or(32))
                        .unwrap_or(' ')
                        .to_string()
                },
            );
            h.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&")
        };
        let mut in_code_block = false;
        for e in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
            match e {
                // Nothing in a fenced block is linked.
                Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
                Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code_block = false,
                Event::Text(_) if in_code_block => {}
                Event::Start(Tag::Link { dest_url, .. }) => links.push(dest_url.to_string()),
                Event::Start(Tag::Image { dest_url, .. }) => {
                    links.push(format!("image {dest_url}"))
                }
                Event::Html(h) | Event::InlineHtml(h) => {
                    tags.extend(tag_re.captures_iter(&h).map(|c| c[1].to_lowercase()));
                    // GitHub links mentions in an HTML block's text too (after decoding it).
                    let text = regex_lite::Regex::new(r"<[^>]*>")
                        .unwrap()
                        .replace_all(&h, " ");
                    let text = decode(&text);
                    if auto_re.is_match(&text) {
                        autolinked.push(text.to_string());
                    }
                    if h.contains("<!--") && !h.contains(MARKER) {
                        tags.push("comment".into());
                    }
                }
                Event::Text(t) if auto_re.is_match(&t) => autolinked.push(t.to_string()),
                _ => {}
            }
        }
        (links, tags, autolinked)
    }

    #[test]
    fn hostile_strings_anywhere_in_the_results_render_inert() {
        for fixture in [
            fixtures::mixed(),
            fixtures::with_e2e(),
            fixtures::single_e2e(),
            fixtures::base_build_failure(),
        ] {
            let (links0, mut tags0, _) = live(&markdown(&fixture));
            let bad = hostile(&fixture);
            let md = markdown(&bad);
            let (links, mut tags, autolinked) = live(&md);
            assert_eq!(links, links0, "a link or image from the results:\n{md}");
            tags.sort();
            tags0.sort();
            // The report's own <details>/<summary>/<br> and nothing else.
            let allowed = ["br", "details", "sub", "summary"];
            assert!(
                tags.iter().all(|t| allowed.contains(&t.as_str())),
                "HTML from the results: {tags:?}\n{md}"
            );
            assert_eq!(
                tags.iter().filter(|t| *t == "details").count(),
                tags0.iter().filter(|t| *t == "details").count(),
                "{md}"
            );
            assert!(
                autolinked.is_empty(),
                "would be linked: {autolinked:?}\n{md}"
            );
            assert!(!md.contains('\u{1b}') && !md.contains('\u{202e}'));
            // The hostile heading stays inside its fence or line: no new heading.
            assert_eq!(
                md.lines().filter(|l| l.starts_with("# ")).count(),
                0,
                "{md}"
            );
        }
    }

    /// A suite big enough to overflow a GitHub comment.
    fn huge() -> Results {
        let mut r = fixtures::mixed();
        let template = r.benches[2].clone();
        for i in 0..1500 {
            let mut b = template.clone();
            b.id = format!("generated/{i:04}/a-rather-long-parameter-string-{i}");
            b.status = if i % 3 == 0 {
                Status::PossibleRegression
            } else {
                Status::NoChange
            };
            b.note = None;
            r.benches.push(b);
        }
        r
    }

    #[test]
    fn truncation_keeps_the_marker_and_cuts_at_a_row() {
        let r = huge();
        let full = markdown(&r);
        assert!(full.len() > crate::report::GITHUB_COMMENT_LIMIT);
        let hint = "the `bench-report` artifact of this run";
        for limit in [crate::report::GITHUB_COMMENT_LIMIT, 20_000, 5_000] {
            let cut = markdown_truncated(&r, limit, hint);
            assert!(cut.len() <= limit, "{} > {limit}", cut.len());
            assert!(cut.starts_with(MARKER));
            assert!(cut.contains(hint));
            let (body, pointer) = cut.rsplit_once("\n> ✂️ ").unwrap();
            assert!(pointer.contains("benchmark rows shown"));
            // Everything before the pointer is the full report up to a boundary, plus at most
            // the `</details>` that closes a fold.
            let body = body.strip_suffix(DETAILS_END).unwrap_or(body);
            assert!(full.starts_with(body));
            assert!(
                body.ends_with("|\n"),
                "not cut after a row: {:?}",
                &body[body.len() - 80..]
            );
            assert_eq!(
                cut.matches("<details>").count(),
                cut.matches("</details>").count()
            );
            // Every table line is a whole row.
            for line in cut.lines().filter(|l| l.starts_with("| ")) {
                assert!(
                    line.ends_with('|') && line.matches(" | ").count() >= 6,
                    "{line}"
                );
            }
        }
    }

    #[test]
    fn truncation_counts_the_rows_it_shows() {
        let r = huge();
        let cut = markdown_truncated(&r, 30_000, "the artifact");
        let rows = cut
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| Status"))
            .count();
        let total = r.benches.len();
        assert!(
            cut.contains(&format!("{rows} of {total} benchmark rows shown")),
            "{rows} rows"
        );
    }

    #[test]
    fn a_report_that_fits_is_not_truncated() {
        let r = fixtures::mixed();
        assert_eq!(markdown_truncated(&r, 1 << 20, "x"), markdown(&r));
    }

    #[test]
    fn a_tiny_limit_still_keeps_the_head() {
        let cut = markdown_truncated(&huge(), 10, "the artifact");
        assert!(cut.starts_with(MARKER));
        assert!(cut.contains("Benchmark gate:"));
        assert!(cut.contains("0 of 1510 benchmark rows shown"));
    }
}
