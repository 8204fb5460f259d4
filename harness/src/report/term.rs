//! The terminal report: verdict, a comfy-table of every benchmark worst-first, notes, failures and
//! one host/method line. Colour (by status) only when the caller asks for it: see
//! [`use_color`](super::use_color).

use std::fmt::Write as _;

use comfy_table::{Cell, CellAlignment, Color, ContentArrangement, Table, presets};

use super::format as fmt;
use super::md::plain;
use super::{Cells, counts_line, log_tail, verdict, worst_first};
use crate::results::{Results, Status};

/// Lines of a failure log shown in the terminal: a pointer, the full tail is in the JSON.
const LOG_LINES: usize = 12;
const LOG_WIDTH: usize = 200;

fn status_color(status: Status) -> Option<Color> {
    match status {
        Status::Failed | Status::Regression => Some(Color::Red),
        Status::PossibleRegression | Status::TooNoisy => Some(Color::Yellow),
        Status::Improvement | Status::NoChange => Some(Color::Green),
        Status::Added | Status::Removed => None,
    }
}

/// ANSI SGR code for the verdict line, by its emoji.
fn verdict_sgr(emoji: &str) -> &'static str {
    match emoji {
        "⛔" | "🔴" => "1;31",
        "⚠️" | "❔" => "1;33",
        _ => "1;32",
    }
}

/// The terminal report. With `color` false the output has no escape codes at all.
pub fn terminal(results: &Results, color: bool) -> String {
    let mut out = String::new();
    let (emoji, text) = verdict(results);
    // The e2e clause of the verdict quotes notes from the run.
    let line = format!("{emoji} {}: {}", super::title(results), plain(&text));
    if color {
        let _ = writeln!(out, "\u{1b}[{}m{line}\u{1b}[0m", verdict_sgr(emoji));
    } else {
        let _ = writeln!(out, "{line}");
    }
    let rev = |r: &crate::results::Revision| {
        let dirty = if r.dirty {
            " + uncommitted changes"
        } else {
            ""
        };
        format!(
            "{} ({}{dirty}) {}",
            plain(fmt::short_sha(&r.sha)),
            plain(&r.spec),
            plain(&r.subject)
        )
    };
    if super::single_revision(results) {
        let _ = writeln!(out, "revision {}", rev(&results.head));
    } else {
        let _ = writeln!(
            out,
            "base {}\n  PR {}",
            rev(&results.base),
            rev(&results.head)
        );
    }
    if !results.gate_changes.is_empty() {
        let _ = writeln!(
            out,
            "note: this PR changes the gate itself ({}{}): the PR check judges it with the base's \
             harness and harness.yaml",
            results
                .gate_changes
                .iter()
                .take(3)
                .map(|p| plain(p))
                .collect::<Vec<_>>()
                .join(", "),
            if results.gate_changes.len() > 3 {
                ", …"
            } else {
                ""
            }
        );
    }
    let benches = worst_first(results);
    if benches.is_empty() && results.e2e.is_some() {
        // An end-to-end-only run: its tables follow.
    } else if benches.is_empty() {
        out.push_str("no benchmarks were compared\n");
    } else {
        let _ = writeln!(out, "{}", counts_line(results));
        if let Some(line) = super::ok_meaning(results) {
            let _ = writeln!(out, "{line}");
        }
        out.push_str(&table(&benches, color));
        out.push('\n');
    }

    let noted: Vec<_> = benches.iter().filter(|b| b.note.is_some()).collect();
    if !noted.is_empty() {
        out.push_str("notes:\n");
        for b in noted {
            let note = b.note.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {}: {}",
                b.status.emoji(),
                plain(&b.id),
                plain(note)
            );
        }
    }
    for f in &results.failures {
        let _ = writeln!(
            out,
            "⛔ {} failed to {}: {}",
            f.side.word(),
            f.stage,
            plain(&f.failure.message)
        );
        for l in log_tail(&f.failure.log_tail, LOG_LINES, LOG_WIDTH) {
            let _ = writeln!(out, "   │ {l}");
        }
    }

    out.push_str(&super::e2e::terminal(results));

    let h = &results.host;
    let _ = writeln!(
        out,
        "host: {}, {} cores, {:.1} GiB, {}, {}",
        plain(&h.cpu),
        h.cores,
        h.mem_gib,
        plain(&h.os),
        plain(&h.rustc)
    );
    let m = &results.method;
    if super::single_revision(results) {
        let _ = writeln!(
            out,
            "method: one `engine profile` call per check, no comparison; {} wall",
            fmt::duration(results.wall_s)
        );
        return out;
    }
    let thresholds = match &m.profile {
        Some(p) => format!("profile {}", plain(p)),
        None => "none: thresholds from within-run spread".into(),
    };
    let _ = writeln!(
        out,
        "method: {} rounds {} + up to {} for noisy + up to {} confirmation, {} CI, α {} ({}), floor {}, noise profile: \
         {thresholds}; {} wall",
        m.rounds,
        plain(&m.order),
        m.noise_rounds,
        m.confirmation_rounds,
        fmt::level(m.confidence),
        m.alpha,
        plain(&m.correction),
        fmt::percent(m.floor),
        fmt::duration(results.wall_s),
    );
    out
}

fn table(benches: &[&crate::results::BenchResult], color: bool) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    // The caller decided about colour; do not let comfy-table look at stdout itself.
    table.force_no_tty();
    if color {
        table.enforce_styling();
    }
    let instr = super::has_instructions(benches);
    let mut header = vec![
        "Status",
        "Benchmark",
        "Base",
        "PR",
        "Change",
        "CI",
        "Threshold",
    ];
    if instr {
        header.push("Instructions");
    }
    table.set_header(header);
    for b in benches {
        let c = Cells::of(b);
        let side = |time: String, tp: Option<String>| match tp {
            Some(tp) => format!("{time} · {tp}"),
            None => time,
        };
        let paint = |cell: Cell| match status_color(b.status) {
            Some(col) if color => cell.fg(col),
            _ => cell,
        };
        let mut cells = vec![
            paint(Cell::new(format!("{} {}", b.status.emoji(), b.label()))),
            Cell::new(plain(&b.id)),
            Cell::new(side(c.base, c.base_throughput)),
            Cell::new(side(c.head, c.head_throughput)),
            paint(Cell::new(c.change)),
            Cell::new(c.ci),
            Cell::new(c.threshold),
        ];
        if instr {
            cells.push(Cell::new(super::instructions_cell(b)));
        }
        table.add_row(cells);
    }
    for i in 2..if instr { 8 } else { 7 } {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures;

    #[test]
    fn terminal_mixed() {
        insta::assert_snapshot!(terminal(&fixtures::mixed(), false));
    }

    #[test]
    fn terminal_could_not_run() {
        insta::assert_snapshot!(terminal(&fixtures::base_build_failure(), false));
    }

    #[test]
    fn terminal_clean_pass_without_profile() {
        insta::assert_snapshot!(terminal(&fixtures::clean_pass(4), false));
    }

    #[test]
    fn terminal_with_e2e() {
        insta::assert_snapshot!(terminal(&fixtures::with_e2e(), false));
    }

    #[test]
    fn colour_only_when_asked() {
        let r = fixtures::mixed();
        let plain = terminal(&r, false);
        assert!(!plain.contains('\u{1b}'), "escape codes without colour");
        let coloured = terminal(&r, true);
        assert!(coloured.starts_with("\u{1b}[1;31m🔴 Benchmark gate"));
        // Red for the regression, yellow for the possible one, green for no change.
        for sgr in ["\u{1b}[38;5;9m", "\u{1b}[38;5;11m", "\u{1b}[38;5;10m"] {
            assert!(coloured.contains(sgr), "missing {sgr:?} in\n{coloured}");
        }
    }
}
