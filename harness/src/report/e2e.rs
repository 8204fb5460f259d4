//! The end-to-end part of every rendering: the verdict's e2e clause, the headline ("this PR
//! changes the answer"), the correctness table and the speed table, for markdown and the
//! terminal. Cells are formatted here once, so both renderings agree.

use std::fmt::Write as _;

use super::format as fmt;
use super::md;
use crate::e2e::correctness::describe;
use crate::results::{
    CudaGraphCounters, E2eCorrectness, E2eMode, E2eResults, E2eSideCheck, E2eSpeed, E2eSpeedSide,
    E2eStatus, RefVerdict, Results, Status,
};
use crate::vocab::Side;

const EMPTY: &str = "—";

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The distinct reasons of the ⏭ rows, joined (`no usable CUDA device (…)`).
fn not_run_reasons(e: &E2eResults) -> String {
    let mut reasons: Vec<String> = e
        .correctness
        .iter()
        .filter(|c| c.status == E2eStatus::NotRun)
        .filter_map(|c| c.head.note.clone())
        .collect();
    reasons.sort();
    reasons.dedup();
    reasons.join("; ")
}

/// The e2e clause of the verdict line: what blocks, what was not run, or that all agree.
pub fn verdict_clause(e: &E2eResults) -> String {
    let missing = e.missing_cuda();
    if !missing.is_empty() {
        return format!(
            "could not run: {} not run although --require-cuda was given ({})",
            plural(missing.len(), "CUDA check", "CUDA checks"),
            not_run_reasons(e)
        );
    }
    let n = |s: E2eStatus| e.correctness.iter().filter(|c| c.status == s).count();
    let mut parts = Vec::new();
    if n(E2eStatus::Diverged) > 0 {
        let introduced = e
            .correctness
            .iter()
            .filter(|c| c.introduced && c.status == E2eStatus::Diverged)
            .count();
        let mut p = format!(
            "{} diverged",
            plural(n(E2eStatus::Diverged), "e2e check", "e2e checks")
        );
        let on_base = e
            .correctness
            .iter()
            .filter(|c| {
                c.status == E2eStatus::Diverged
                    && c.base
                        .as_ref()
                        .is_some_and(|b| b.status == E2eStatus::Diverged)
            })
            .count();
        if e.mode == E2eMode::Compare {
            let mut why = Vec::new();
            if introduced > 0 {
                why.push(format!("{introduced} introduced by this PR"));
            }
            if on_base > 0 {
                why.push(format!("{on_base} already on base"));
            }
            if !why.is_empty() {
                let _ = write!(p, " ({})", why.join(", "));
            }
        }
        parts.push(p);
    }
    if n(E2eStatus::Failed) > 0 {
        parts.push(format!(
            "{} failed to run",
            plural(n(E2eStatus::Failed), "e2e check", "e2e checks")
        ));
    }
    for f in e.failures.iter().filter(|f| f.side == Side::Head) {
        parts.push(format!("PR's e2e binaries failed to {}", f.stage));
    }
    if n(E2eStatus::NearTie) > 0 {
        parts.push(format!(
            "{} (e2e)",
            plural(n(E2eStatus::NearTie), "near-tie flip", "near-tie flips")
        ));
    }
    let speed = |s: Status| e.speed.iter().filter(|r| r.status == Some(s)).count();
    if speed(Status::Regression) > 0 {
        parts.push(format!(
            "e2e speed: {}",
            super::count_label(Status::Regression, speed(Status::Regression))
        ));
    }
    if speed(Status::Failed) > 0 {
        parts.push(format!("e2e speed: {} failed", speed(Status::Failed)));
    }
    if speed(Status::PossibleRegression) > 0 {
        parts.push(format!(
            "e2e speed: {}",
            super::count_label(
                Status::PossibleRegression,
                speed(Status::PossibleRegression)
            )
        ));
    }
    let identical = n(E2eStatus::Identical);
    if parts.is_empty() {
        if identical > 0 {
            parts.push(format!(
                "e2e: {} identical to the oracle and goldens",
                plural(identical, "check", "checks")
            ));
        } else {
            parts.push("e2e: nothing ran".to_string());
        }
    }
    if n(E2eStatus::NotRun) > 0 {
        parts.push(format!(
            "⏭ {} not run: {}",
            plural(n(E2eStatus::NotRun), "e2e check", "e2e checks"),
            not_run_reasons(e)
        ));
    }
    parts.join(", ")
}

/// Whether the e2e part holds a red item (a real divergence or a confirmed slowdown).
pub fn has_red(e: &E2eResults) -> bool {
    e.correctness
        .iter()
        .any(|c| c.status == E2eStatus::Diverged)
        || e.speed.iter().any(|s| s.status == Some(Status::Regression))
}

fn ref_cell(v: &RefVerdict) -> String {
    match v {
        RefVerdict::Identical => "✅".into(),
        RefVerdict::Diverged => "🔴".into(),
        RefVerdict::NotCompared { reason } => format!("⏭ {}", short_reason(reason)),
    }
}

/// The first clause of a reason, for a table cell (the full text is in the notes).
fn short_reason(r: &str) -> String {
    let first = r.split(" (").next().unwrap_or(r);
    let first = first.split("; ").next().unwrap_or(first);
    if first.chars().count() > 48 {
        format!("{}…", first.chars().take(47).collect::<String>())
    } else {
        first.to_string()
    }
}

fn side_cell(c: &E2eSideCheck) -> String {
    format!("{} {}", c.status.emoji(), c.status.label())
}

/// What went wrong first on this side: the divergence, else the note.
fn detail(c: &E2eSideCheck) -> Option<String> {
    match (&c.divergence, &c.note) {
        (Some(d), Some(n)) => Some(format!("{}; {n}", describe(d))),
        (Some(d), None) => Some(describe(d)),
        (None, Some(n)) => Some(n.clone()),
        (None, None) => None,
    }
}

/// Correctness rows worst first (introduced divergences first of all), then by id.
fn correctness_rows(e: &E2eResults) -> Vec<&E2eCorrectness> {
    let mut rows: Vec<&E2eCorrectness> = e.correctness.iter().collect();
    rows.sort_by(|a, b| {
        b.introduced
            .cmp(&a.introduced)
            .then(a.status.cmp(&b.status))
            .then(a.id.cmp(&b.id))
    });
    rows
}

fn speed_rank(s: &E2eSpeed) -> (u8, Option<Status>) {
    (u8::from(s.not_run.is_some()), s.status)
}

fn speed_rows(e: &E2eResults) -> Vec<&E2eSpeed> {
    let mut rows: Vec<&E2eSpeed> = e.speed.iter().collect();
    rows.sort_by(|a, b| {
        speed_rank(a)
            .cmp(&speed_rank(b))
            .then_with(|| {
                let k = |r: &E2eSpeed| r.change.map_or(f64::NEG_INFINITY, |c| c.estimate);
                k(b).total_cmp(&k(a))
            })
            .then(a.id.cmp(&b.id))
    });
    rows
}

fn graph_cell(g: Option<CudaGraphCounters>) -> String {
    match g {
        None => EMPTY.into(),
        Some(g) if !g.enabled => format!("off, {} fallbacks", g.fallbacks),
        Some(g) => format!(
            "{} · {} · {}",
            plural(g.captures as usize, "capture", "captures"),
            plural(g.replays as usize, "replay", "replays"),
            plural(g.fallbacks as usize, "fallback", "fallbacks")
        ),
    }
}

/// `(base, head)` time cells (per decode step) and tok/s (None for a side not measured).
fn speed_cells(s: &E2eSpeed) -> (String, String, Option<String>, Option<String>) {
    let ns = |x: &Option<E2eSpeedSide>| x.as_ref().map(|s| s.median_ms_per_step * 1e6);
    let (b, h) = match (ns(&s.base), ns(&s.head)) {
        (Some(b), Some(h)) => fmt::time_pair(b, h),
        (b, h) => (
            b.map_or(EMPTY.into(), fmt::time),
            h.map_or(EMPTY.into(), fmt::time),
        ),
    };
    let tok = |x: &Option<E2eSpeedSide>| {
        x.as_ref()
            .map(|s| format!("{} tok/s", fmt::number(s.tok_s)))
    };
    (b, h, tok(&s.base), tok(&s.head))
}

fn status_cell(s: &E2eSpeed) -> String {
    match (&s.not_run, s.status) {
        (Some(_), _) => "⏭ not run".into(),
        (None, Some(st)) => format!("{} {}", st.emoji(), st.label()),
        (None, None) => EMPTY.into(),
    }
}

/// Markdown: the headline block, when the PR changed an answer that base had right.
pub fn markdown_headline(results: &Results) -> Option<String> {
    let e = results.e2e.as_ref()?;
    let rows: Vec<&E2eCorrectness> = e.correctness.iter().filter(|c| c.introduced).collect();
    if rows.is_empty() {
        return None;
    }
    let mut s = String::from(
        "\n### 🔴 This PR changes the answer\n\nIdentical to the oracle and goldens on base, \
         diverging on this PR:\n\n",
    );
    // The headline is never cut by the comment's truncation: its length is bounded here.
    const SHOWN: usize = 10;
    for c in rows.iter().take(SHOWN) {
        let _ = writeln!(
            s,
            "- {}: {}",
            md::code(&md::cap(&c.id, 200)),
            md::text(&md::cap(&detail(&c.head).unwrap_or_default(), 300))
        );
    }
    if rows.len() > SHOWN {
        let _ = writeln!(
            s,
            "- and {} more (the correctness table below)",
            rows.len() - SHOWN
        );
    }
    Some(s)
}

/// Markdown: the correctness table and its notes.
pub fn markdown_correctness(results: &Results) -> Option<String> {
    let e = results.e2e.as_ref()?;
    let mut s = String::from("\n### End-to-end correctness\n\n");
    if e.correctness.is_empty() {
        s.push_str("No end-to-end checks were selected.\n");
        return Some(s);
    }
    let _ = writeln!(
        s,
        "Greedy tokens of `engine profile` vs the independent fp32 oracle (`oracle decode`) and the \
         ONNX Runtime goldens.\n"
    );
    let compare = e.mode == E2eMode::Compare;
    if compare {
        s.push_str(
            "| Status | Check | Base | PR | PR vs oracle | PR vs golden |\n|:--|:--|:--|:--|:-:|:-:|\n",
        );
    } else {
        s.push_str("| Status | Check | vs oracle | vs golden |\n|:--|:--|:-:|:-:|\n");
    }
    for c in correctness_rows(e) {
        let status = format!("{} {}", c.status.emoji(), c.status.label());
        let id = md::cell_code(&c.id);
        if compare {
            let base = c.base.as_ref().map_or(EMPTY.to_string(), side_cell);
            let _ = writeln!(
                s,
                "| {status} | {id} | {base} | {} | {} | {} |",
                side_cell(&c.head),
                md::text(&ref_cell(&c.head.vs_oracle)),
                md::text(&ref_cell(&c.head.vs_golden))
            );
        } else {
            let _ = writeln!(
                s,
                "| {status} | {id} | {} | {} |",
                md::text(&ref_cell(&c.head.vs_oracle)),
                md::text(&ref_cell(&c.head.vs_golden))
            );
        }
    }
    let mut notes = String::new();
    for c in correctness_rows(e) {
        let mut lines = Vec::new();
        if let Some(d) = detail(&c.head) {
            lines.push(format!("{}{}", if compare { "PR: " } else { "" }, d));
        }
        if let Some(b) = &c.base
            && b.status != E2eStatus::Identical
            && let Some(d) = detail(b)
        {
            lines.push(format!("base: {d}"));
        }
        if !lines.is_empty() {
            let _ = writeln!(
                notes,
                "- {} {}: {}",
                c.status.emoji(),
                md::code(&c.id),
                md::text(&lines.join(" · "))
            );
        }
        if !c.head.log_tail.is_empty() {
            let tail = super::log_tail(&c.head.log_tail, 12, 300);
            let _ = write!(notes, "\n{}", md::fenced("text", &tail, "  "));
        }
    }
    if !notes.is_empty() {
        let _ = write!(s, "\n{notes}");
    }
    for f in &e.failures {
        let _ = writeln!(
            s,
            "\n**{} e2e binaries failed to {}:** {}",
            f.side.word(),
            f.stage,
            md::text(&f.failure.message)
        );
    }
    Some(s)
}

/// Markdown: the speed table.
pub fn markdown_speed(results: &Results) -> Option<String> {
    let e = results.e2e.as_ref()?;
    if e.speed.is_empty() {
        return None;
    }
    let mut s = String::from("\n### End-to-end speed\n\n");
    let command = md::code(&format!("engine profile {}", e.profile_args.join(" ")));
    if e.mode == E2eMode::Compare {
        let _ = writeln!(
            s,
            "Time per decode step of {command}, base and PR interleaved in rounds \
             (paired change, interval and threshold as for the benchmarks above).\n"
        );
        if let Some(p) = &e.placement {
            let _ = writeln!(s, "Code placement of the engines: {}.\n", md::text(p));
        }
        s.push_str(
            "| Status | Check | Base | PR | Change | CI | Threshold | CUDA graph (base → PR) |\n\
             |:--|:--|--:|--:|--:|--:|--:|:--|\n",
        );
        for r in speed_rows(e) {
            let (b, h, bt, ht) = speed_cells(r);
            let (change, ci, thr) = match r.change {
                Some(c) if r.not_run.is_none() => (
                    fmt::change(c.estimate),
                    fmt::interval(c.ci_low, c.ci_high),
                    fmt::threshold(r.threshold, r.threshold_source),
                ),
                _ => (EMPTY.into(), EMPTY.into(), EMPTY.into()),
            };
            let bg = graph_cell(r.base.as_ref().and_then(|x| x.cuda_graph));
            let hg = graph_cell(r.head.as_ref().and_then(|x| x.cuda_graph));
            let graph = match (&r.graph_flag, bg == hg) {
                (Some(_), _) => format!("⚠️ {bg} → {hg}"),
                (None, true) => bg,
                (None, false) => format!("{bg} → {hg}"),
            };
            let join = |t: String, tp: Option<String>| match tp {
                Some(tp) => format!("{t}<br>{tp}"),
                None => t,
            };
            let (b, h) = (join(b, bt), join(h, ht));
            let _ = writeln!(
                s,
                "| {} | {} | {b} | {h} | {change} | {ci} | {thr} | {} |",
                status_cell(r),
                md::cell_code(&r.id),
                md::text(&graph)
            );
        }
    } else {
        let _ = writeln!(
            s,
            "Time per decode step of {command} (median of the timed runs; no \
             comparison in a single-revision run).\n"
        );
        s.push_str(
            "| Check | Per step | Runs (min … max) | tok/s | Prefill | CUDA graph |\n\
             |:--|--:|--:|--:|--:|:--|\n",
        );
        for r in speed_rows(e) {
            match &r.head {
                Some(h) => {
                    let all: Vec<f64> = h.runs_ms.iter().flatten().copied().collect();
                    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} … {} | {} | {} | {} |",
                        md::cell_code(&r.id),
                        fmt::time(h.median_ms_per_step * 1e6),
                        fmt::time(lo * 1e6),
                        fmt::time(hi * 1e6),
                        fmt::number(h.tok_s),
                        fmt::time(h.prefill_ms * 1e6),
                        graph_cell(h.cuda_graph)
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "| {} | ⏭ not run | {EMPTY} | {EMPTY} | {EMPTY} | {EMPTY} |",
                        md::cell_code(&r.id)
                    );
                }
            }
        }
    }
    let mut notes = String::new();
    for r in speed_rows(e) {
        let text = match (&r.not_run, &r.note) {
            (Some(why), _) => Some(format!("not run: {why}")),
            (None, Some(n)) => Some(n.clone()),
            _ => None,
        };
        if let Some(t) = text {
            let _ = writeln!(notes, "- {}: {}", md::code(&r.id), md::text(&t));
        }
    }
    if !notes.is_empty() {
        let _ = write!(s, "\n{notes}");
    }
    Some(s)
}

/// Terminal: both tables and their notes, plain text (colour is the caller's verdict line).
pub fn terminal(results: &Results) -> String {
    use comfy_table::{ContentArrangement, Table, presets};
    let Some(e) = results.e2e.as_ref() else {
        return String::new();
    };
    let mut out = String::new();
    let table = || {
        let mut t = Table::new();
        t.load_style(presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled);
        t.force_no_tty();
        t
    };
    let compare = e.mode == E2eMode::Compare;
    let _ = writeln!(out, "end-to-end correctness (engine vs oracle vs golden):");
    if e.correctness.is_empty() {
        out.push_str("  no checks selected\n");
    } else {
        let mut t = table();
        if compare {
            t.set_header(["Status", "Check", "Base", "PR", "vs oracle", "vs golden"]);
        } else {
            t.set_header(["Status", "Check", "vs oracle", "vs golden"]);
        }
        for c in correctness_rows(e) {
            let mut row = vec![
                format!("{} {}", c.status.emoji(), c.status.label()),
                md::plain(&c.id),
            ];
            if compare {
                row.push(c.base.as_ref().map_or(EMPTY.into(), side_cell));
                row.push(side_cell(&c.head));
            }
            row.push(ref_cell(&c.head.vs_oracle));
            row.push(ref_cell(&c.head.vs_golden));
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        for c in correctness_rows(e) {
            if let Some(d) = detail(&c.head) {
                let intro = if c.introduced {
                    " (introduced by this PR)"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "  {} {}{intro}: {}",
                    c.status.emoji(),
                    md::plain(&c.id),
                    md::plain(&d)
                );
            }
            for l in super::log_tail(&c.head.log_tail, 6, 200) {
                let _ = writeln!(out, "     │ {l}");
            }
        }
    }
    if !e.speed.is_empty() {
        let _ = writeln!(
            out,
            "end-to-end speed (per decode step, engine profile {}):",
            e.profile_args.join(" ")
        );
        let mut t = table();
        if compare {
            t.set_header([
                "Status",
                "Check",
                "Base",
                "PR",
                "Change",
                "CI",
                "Threshold",
                "CUDA graph",
            ]);
            for r in speed_rows(e) {
                let (b, h, bt, ht) = speed_cells(r);
                let (change, ci, thr) = match r.change {
                    Some(c) if r.not_run.is_none() => (
                        fmt::change(c.estimate),
                        fmt::interval(c.ci_low, c.ci_high),
                        fmt::threshold(r.threshold, r.threshold_source),
                    ),
                    _ => (EMPTY.into(), EMPTY.into(), EMPTY.into()),
                };
                let graph = match &r.graph_flag {
                    Some(f) => format!("⚠️ {f}"),
                    None => graph_cell(r.head.as_ref().and_then(|x| x.cuda_graph)),
                };
                let join = |t: String, tp: Option<String>| match tp {
                    Some(tp) => format!("{t} · {tp}"),
                    None => t,
                };
                t.add_row(vec![
                    status_cell(r),
                    md::plain(&r.id),
                    join(b, bt),
                    join(h, ht),
                    change,
                    ci,
                    thr,
                    graph,
                ]);
            }
        } else {
            t.set_header(["Check", "Per step", "tok/s", "Prefill", "CUDA graph"]);
            for r in speed_rows(e) {
                match &r.head {
                    Some(h) => t.add_row(vec![
                        md::plain(&r.id),
                        fmt::time(h.median_ms_per_step * 1e6),
                        fmt::number(h.tok_s),
                        fmt::time(h.prefill_ms * 1e6),
                        graph_cell(h.cuda_graph),
                    ]),
                    None => t.add_row(vec![
                        md::plain(&r.id),
                        "⏭ not run".into(),
                        EMPTY.into(),
                        EMPTY.into(),
                        EMPTY.into(),
                    ]),
                };
            }
        }
        let _ = writeln!(out, "{t}");
        for r in speed_rows(e) {
            if let Some(n) = r.note.as_ref().or(r.not_run.as_ref()) {
                let _ = writeln!(
                    out,
                    "  {} {}: {}",
                    status_cell(r),
                    md::plain(&r.id),
                    md::plain(n)
                );
            }
        }
    }
    for f in &e.failures {
        let _ = writeln!(
            out,
            "⛔ {} e2e binaries failed to {}: {}",
            f.side.word(),
            f.stage,
            md::plain(&f.failure.message)
        );
    }
    out
}
