//! Where a long run's progress goes: the [`Progress`] trait every stage reports to, and [`Ui`],
//! its implementation for the command line (stderr): a bar on a TTY, and plain lines otherwise
//! (one per stage and per round), so a CI log shows the run moving.

use std::io::IsTerminal;

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

/// Progress on stderr: a bar on a TTY, one line per stage and round otherwise.
pub struct Ui {
    bar: Option<ProgressBar>,
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
        Ui { bar }
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
                if what.starts_with("round") && what.contains(" base ") || what == "done" {
                    eprintln!("[{done}/{total}] {what}");
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
