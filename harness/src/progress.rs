//! Where a long run's progress goes: the [`Progress`] trait every stage reports to, and [`Ui`],
//! its implementation for the command line (stderr): a bar on a TTY, and plain lines otherwise
//! (one per stage and per round), so a CI log shows the run moving.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Where progress goes: a bar on a TTY, plain lines otherwise.
pub trait Progress: Sync {
    fn stage(&self, msg: &str);
    fn rounds(&self, done: u64, total: u64, what: &str);
    fn line(&self, _line: &str) {}
}

/// Progress that goes nowhere (tests, library callers that print their own).
pub struct Silent;

impl Progress for Silent {
    fn stage(&self, _msg: &str) {}
    fn rounds(&self, _done: u64, _total: u64, _what: &str) {}
}

/// Progress on stderr: a bar on a TTY, plain lines otherwise ([`PlainLines`]).
pub struct Ui {
    bar: Option<ProgressBar>,
    plain: std::sync::Mutex<PlainLines>,
}

/// The plain progress lines of a log that is not a terminal (CI): one when a round starts, and
/// at least one a minute while a round runs (the full suite's first pass is ten minutes of
/// rounds of a minute or more each), each with the units done, the units of the pass and the
/// time the pass has left at its pace so far, so a long pass never looks like a hang.
#[derive(Debug, Default)]
pub struct PlainLines {
    /// When the current pass (a run of calls with one `total`) started.
    started: Option<Instant>,
    total: u64,
    last_key: Option<String>,
    last_print: Option<Instant>,
}

/// At most this long between two plain lines while units are done.
pub const PLAIN_EVERY: Duration = Duration::from_secs(60);

impl PlainLines {
    /// The line to print for this report, if any.
    pub fn report(&mut self, now: Instant, done: u64, total: u64, what: &str) -> Option<String> {
        if what == "done" || (total > 0 && done >= total) {
            self.started = None;
            self.last_key = None;
            return Some(format!("[{total}/{total}] {what}"));
        }
        if self.started.is_none() || total != self.total || done == 0 {
            self.started = Some(now);
            self.total = total;
        }
        // "round 3 paired matmul/…" and "round 3 base tiny/…" both belong to round 3.
        let key = what
            .strip_prefix("round ")
            .and_then(|r| r.split_whitespace().next())
            .map(|n| format!("round {n}"))
            .unwrap_or_else(|| what.to_string());
        let due = self.last_key.as_deref() != Some(key.as_str())
            || self
                .last_print
                .is_none_or(|t| now.duration_since(t) >= PLAIN_EVERY);
        if !due {
            return None;
        }
        self.last_key = Some(key);
        self.last_print = Some(now);
        let elapsed = self
            .started
            .map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        let left = if done > 0 && elapsed >= 5.0 {
            let min = elapsed / done as f64 * (total - done) as f64 / 60.0;
            format!(", about {min:.1} min left in this pass")
        } else {
            String::new()
        };
        Some(format!("[{done}/{total}] {what}{left}"))
    }
}

impl Ui {
    pub fn new() -> Ui {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
                )
                .expect("valid template"),
            );
            b
        });
        Ui {
            bar,
            plain: std::sync::Mutex::new(PlainLines::default()),
        }
    }
}

impl Default for Ui {
    fn default() -> Ui {
        Ui::new()
    }
}

impl Progress for Ui {
    fn stage(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }
    fn rounds(&self, done: u64, total: u64, what: &str) {
        match &self.bar {
            Some(b) => {
                b.set_length(total);
                b.set_position(done);
                b.set_message(what.to_string());
                if done >= total {
                    b.finish_and_clear();
                }
            }
            None => {
                let line = self.plain.lock().unwrap_or_else(|e| e.into_inner()).report(
                    Instant::now(),
                    done,
                    total,
                    what,
                );
                if let Some(line) = line {
                    eprintln!("{line}");
                }
            }
        }
    }
    fn line(&self, line: &str) {
        if let Some(b) = &self.bar {
            let l = line.trim();
            if l.starts_with("Compiling") || l.starts_with("Finished") {
                b.set_message(l.to_string());
                b.tick();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_come_once_per_round_and_at_least_once_a_minute_with_the_time_left() {
        let mut p = PlainLines::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(
            p.report(at(0), 0, 100, "round 1 paired add/f32/small")
                .as_deref(),
            Some("[0/100] round 1 paired add/f32/small")
        );
        // The same round, within the minute: nothing.
        assert_eq!(
            p.report(at(10), 5, 100, "round 1 paired add/f32/medium"),
            None
        );
        // The same round, a minute after the last line: a line, with the pace so far
        // (10 units in 70 s: 90 more take 10.5 min).
        assert_eq!(
            p.report(at(70), 10, 100, "round 1 paired add/f32/large")
                .as_deref(),
            Some("[10/100] round 1 paired add/f32/large, about 10.5 min left in this pass")
        );
        // A new round prints at once.
        let l = p
            .report(at(80), 11, 100, "round 2 paired add/f32/small")
            .unwrap();
        assert!(l.starts_with("[11/100] round 2 paired"), "{l}");
        assert_eq!(p.report(at(81), 12, 100, "round 2 base tiny/a"), None);
        assert_eq!(
            p.report(at(90), 100, 100, "done").as_deref(),
            Some("[100/100] done")
        );
        // A new pass (another total) starts its own clock.
        let l = p.report(at(95), 0, 12, "round 9 paired x").unwrap();
        assert_eq!(l, "[0/12] round 9 paired x");
        let l = p
            .report(at(300), 6, 12, "instructions add/f32/small")
            .unwrap();
        assert!(l.ends_with("about 3.4 min left in this pass"), "{l}");
    }
}
