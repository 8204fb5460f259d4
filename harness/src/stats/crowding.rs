//! A multi-threaded row measured on a machine busy with other work (harness/STATS.md, "A busy
//! machine"). Such a row's samples are wall times of threads that shared the CPUs with other
//! processes: what the PR did to it on a quiet machine is neither shown nor ruled out, in
//! either direction (under one busy core of the 2-vCPU VM, two-thread rows 9 and 29 % slower
//! when quiet read +1 and +0 %, and a row the PR did not slow read +6 %). So its verdict
//! becomes ❔, with what it read as measured in the note. Single-threaded rows need one CPU,
//! are timed in their thread's CPU time where both sides report it, carry no reading and keep
//! their verdicts.

use super::types::Status;

/// Whether a row whose rounds ran while other processes kept `others_cores` busy on average
/// was crowded: at least `crowded_cores` (0: never).
pub fn crowded(others_cores: Option<f64>, crowded_cores: f64) -> bool {
    crowded_cores > 0.0 && others_cores.is_some_and(|o| o.is_finite() && o >= crowded_cores)
}

/// `(status, note)` of a row whose rounds ran while other processes kept `others_cores` busy on
/// average (`None` for a row without the reading): `Some` when that is at least `crowded_cores`
/// (0: never) and the row had a timing verdict to take away.
pub fn when_crowded(
    status: Status,
    others_cores: Option<f64>,
    rounds: usize,
    crowded_cores: f64,
) -> Option<(Status, String)> {
    let others = others_cores.filter(|o| o.is_finite())?;
    let timed = matches!(
        status,
        Status::Regression
            | Status::PossibleRegression
            | Status::TooNoisy
            | Status::Improvement
            | Status::NoChange
    );
    (timed && crowded(Some(others), crowded_cores)).then(|| {
        let read = if status == Status::TooNoisy {
            String::new()
        } else {
            format!(
                "; as measured it read {} {}",
                status.emoji(),
                status.label()
            )
        };
        (
            Status::TooNoisy,
            format!(
                "measured while other processes kept {others:.2} cores busy (mean over its \
                 {rounds} rounds; ❔ from {crowded_cores:.2}): a multi-threaded benchmark then \
                 shares its CPUs, so its time is not a quiet machine's and neither a slowdown \
                 nor its absence is shown; rerun on a quiet machine{read}"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crowded_row_is_too_noisy_whatever_it_read() {
        for s in [
            Status::Regression,
            Status::PossibleRegression,
            Status::NoChange,
            Status::Improvement,
            Status::TooNoisy,
        ] {
            let (status, note) = when_crowded(s, Some(0.98), 16, 0.25).unwrap();
            assert_eq!(status, Status::TooNoisy, "{s:?}");
            assert!(
                note.contains("0.98 cores") && note.contains("16 rounds"),
                "{note}"
            );
            assert_eq!(
                note.contains(&format!("as measured it read {}", s.emoji())),
                s != Status::TooNoisy,
                "{note}"
            );
        }
    }

    #[test]
    fn a_quiet_row_an_unread_one_and_one_without_timing_keep_their_verdict() {
        assert_eq!(when_crowded(Status::NoChange, Some(0.24), 8, 0.25), None);
        assert_eq!(when_crowded(Status::Regression, None, 8, 0.25), None);
        assert_eq!(
            when_crowded(Status::NoChange, Some(f64::NAN), 8, 0.25),
            None
        );
        assert_eq!(
            when_crowded(Status::NoChange, Some(1.0), 8, 0.0),
            None,
            "off"
        );
        for s in [Status::Failed, Status::Added, Status::Removed] {
            assert_eq!(when_crowded(s, Some(1.0), 8, 0.25), None, "{s:?}");
        }
    }
}
