//! How instruction counts enter a verdict. Time stays the gate: counts only ever turn an
//! inconclusive row (❔) into a possible regression (⚠️), never anything else, because a change
//! in instructions is not a change in time (a memory- or dependency-bound change moves time
//! without instructions; a cheaper instruction mix moves instructions without time), but it is
//! deterministic evidence that the code on the row's path changed (harness/STATS.md,
//! "Instruction counts").

use super::types::Status;

/// The smallest rise in instructions per iteration that is reported as a reason for ⚠️ (1 %:
/// ten times the run-to-run variation the counts are held to).
pub const INSTRUCTION_STEP: f64 = 0.01;

/// `(status, note)` of a row once its instruction counts (per iteration, base and head) are
/// known: `Some` only when a ❔ row's instructions rose by at least [`INSTRUCTION_STEP`].
pub fn with_instructions(status: Status, base: f64, head: f64) -> Option<(Status, String)> {
    if !(base > 0.0 && head > 0.0 && base.is_finite() && head.is_finite()) {
        return None;
    }
    let change = head / base - 1.0;
    (status == Status::TooNoisy && change >= INSTRUCTION_STEP).then(|| {
        (
            Status::PossibleRegression,
            format!(
                "instructions per iteration +{:.1} % ({:.0} → {:.0}, callgrind) while time is \
                 inconclusive",
                change * 100.0,
                base,
                head
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_inconclusive_row_with_one_percent_more_instructions_becomes_possible() {
        let (s, note) = with_instructions(Status::TooNoisy, 1000.0, 1010.0).unwrap();
        assert_eq!(s, Status::PossibleRegression);
        assert!(note.contains("+1.0 %"), "{note}");
        assert_eq!(with_instructions(Status::TooNoisy, 1000.0, 1009.0), None);
        assert_eq!(with_instructions(Status::TooNoisy, 1000.0, 900.0), None);
        for s in [
            Status::Regression,
            Status::NoChange,
            Status::Improvement,
            Status::PossibleRegression,
            Status::Failed,
        ] {
            assert_eq!(with_instructions(s, 1000.0, 2000.0), None, "{s:?}");
        }
        assert_eq!(with_instructions(Status::TooNoisy, 0.0, 2000.0), None);
    }
}
