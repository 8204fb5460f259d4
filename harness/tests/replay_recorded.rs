//! No silent change of the gate's decisions. Every saved run under `harness/eval/results/`
//! (`results.json`, or `results.json.gz` where it is kept compressed) is replayed as recorded
//! (its own policy, its own rounds, no profile) and:
//! - the whole set's statuses must equal the committed snapshot `snapshots/
//!   replay_recorded__replayed_statuses.snap` (one line per run: its outcome and every row that
//!   is not ✅). Runs saved under earlier code or policies (before the recorded policy covered
//!   every field) need not replay to what they were saved with, so the snapshot, not the saved
//!   file, is the reference; a change that moves any verdict shows as a snapshot diff naming
//!   the run and the row, and updating it is a decision the commit has to explain;
//! - the runs made under the current defaults and estimators (`noise/aa-full-final`, a full A/A
//!   from empty caches after the two-median rounds of 2026-12-02) must also replay to exactly the
//!   statuses they were saved with. (The `2026-11-30-rounds8` runs did until the round estimator
//!   changed; they now replay through the snapshot like every other run.)
//!
//! The samples are real measurements from this repository's evaluation, not scripted ones.
//!
//! Committing a newly saved run adds its line to the snapshot, so the commit that adds results
//! also runs `INSTA_UPDATE=always cargo test -p harness --test replay_recorded` and checks that
//! the snapshot's diff only adds lines (a changed line is a moved verdict, above).

use std::path::{Path, PathBuf};

use harness::results::{Results, Status};

fn saved_runs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            saved_runs(&p, out);
        } else if matches!(
            p.file_name().and_then(|n| n.to_str()),
            Some("results.json" | "results.json.gz")
        ) {
            out.push(p);
        }
    }
}

struct Replayed {
    rel: String,
    saved: Results,
    replayed: Results,
}

fn replay_all() -> Vec<Replayed> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/results");
    let mut files = Vec::new();
    saved_runs(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 100,
        "expected the committed evaluation runs under {}, found {}",
        root.display(),
        files.len()
    );
    files
        .iter()
        .map(|f| {
            let text = harness::commands::read_saved_text(f, u64::MAX).unwrap();
            let saved: Results = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not a results file: {e}", f.display()));
            let (policy, _) =
                harness::gate::replay_base_policy(&saved, None, Path::new("/nonexistent")).unwrap();
            let replayed = harness::gate::replay(&saved, &policy, None, None, "test")
                .unwrap_or_else(|e| panic!("{}: replay failed: {e:#}", f.display()));
            // Named as the run's results.json whether it is kept compressed or not, so
            // compressing a saved run changes no snapshot line.
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            let rel = rel.strip_suffix(".gz").unwrap_or(&rel).to_string();
            Replayed {
                rel,
                saved,
                replayed,
            }
        })
        .collect()
}

#[test]
fn every_saved_evaluation_run_replays_to_the_committed_statuses() {
    let mut text = String::new();
    for r in replay_all() {
        let others: Vec<String> = r
            .replayed
            .benches
            .iter()
            .filter(|b| b.status != Status::NoChange)
            .map(|b| format!("{} {:?}", b.id, b.status))
            .collect();
        let no_change = r.replayed.benches.len() - others.len();
        text.push_str(&format!(
            "{}: {:?}, {no_change} NoChange{}{}\n",
            r.rel,
            r.replayed.outcome,
            if others.is_empty() { "" } else { "; " },
            others.join("; ")
        ));
    }
    insta::assert_snapshot!("replayed_statuses", text);
}

/// Where the runs made under the current defaults are.
const CURRENT: &str = "noise/aa-full-final/";

#[test]
fn runs_under_the_current_defaults_replay_to_exactly_what_they_saved() {
    let mut changed = Vec::new();
    let mut rows = 0;
    let mut runs = 0;
    for r in replay_all()
        .into_iter()
        .filter(|r| r.rel.starts_with(CURRENT))
    {
        runs += 1;
        let (saved, replayed) = (&r.saved, &r.replayed);
        assert_eq!(saved.benches.len(), replayed.benches.len(), "{}", r.rel);
        for (a, b) in saved.benches.iter().zip(&replayed.benches) {
            rows += 1;
            if a.id != b.id || a.status != b.status {
                changed.push(format!(
                    "{}: {} {:?} → {} {:?}",
                    r.rel, a.id, a.status, b.id, b.status
                ));
            }
        }
        if saved.outcome != replayed.outcome {
            changed.push(format!(
                "{}: outcome {:?} → {:?}",
                r.rel, saved.outcome, replayed.outcome
            ));
        }
    }
    assert!(runs >= 1, "expected the runs under {CURRENT}, found {runs}");
    eprintln!("{runs} saved runs, {rows} rows replayed");
    assert!(
        changed.is_empty(),
        "{} of {rows} rows changed status on replay:\n{}",
        changed.len(),
        changed.join("\n")
    );
}
