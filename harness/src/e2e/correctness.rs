//! The correctness judgement of one side of one end-to-end check (pure): the engine's greedy
//! tokens against the oracle's and the golden's, through `oracles::compare` (first diverging step,
//! both tokens as text, the reference's top-1/top-2 margin, near-tie flip or real divergence).
//!
//! `engine profile` decodes exactly the requested number of tokens and ignores end-of-sequence
//! ids (every timed run does the same work), while the oracle and the goldens stop after an EOS id
//! (kept). So when a reference is shorter than requested, the engine's tokens are compared up to
//! the reference's length: having matched the reference's EOS, the engine would have stopped there.

use oracles::compare::{self as oc, NEAR_TIE_F16, NEAR_TIE_F32, Verdict};

use super::contract::StepTop;
use crate::results::{E2eDivergence, E2eStatus, RefVerdict};
use crate::vocab::Dtype;

/// A reference decode: the oracle's or a golden's.
#[derive(Clone, Copy, Debug)]
pub struct Reference<'a> {
    /// "oracle" or "golden".
    pub name: &'static str,
    pub generated_ids: &'a [u32],
    pub steps: &'a [StepTop],
}

/// What one reference could not be compared for, or the reference itself.
pub type RefInput<'a> = Result<Reference<'a>, String>;

/// The near-tie tolerance for a dtype (the engine's; the references are fp32).
pub fn tolerance(dtype: Dtype) -> f32 {
    match dtype {
        Dtype::F32 => NEAR_TIE_F32,
        Dtype::F16 => NEAR_TIE_F16,
    }
}

/// The judgement.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    pub status: E2eStatus,
    pub vs_oracle: RefVerdict,
    pub vs_golden: RefVerdict,
    /// The earliest divergence (the oracle's on a tie).
    pub divergence: Option<E2eDivergence>,
    /// The engine's tokens as compared (cut after the longest reference that stopped early).
    pub compared_ids: Vec<u32>,
}

/// Judges `engine_ids` (exactly `requested` tokens, EOS ignored) against the oracle and the
/// golden. A reference given as `Err(reason)` is not compared (shown with the reason); with
/// neither reference there is nothing to judge by: ⛔.
pub fn judge(
    engine_ids: &[u32],
    requested: usize,
    oracle: RefInput<'_>,
    golden: RefInput<'_>,
    dtype: Dtype,
    text: &dyn Fn(u32) -> String,
) -> Judgement {
    let tol = tolerance(dtype);
    let mut divergences: Vec<E2eDivergence> = Vec::new();
    let mut compared_len = 0usize;
    let mut one = |r: &RefInput<'_>| -> RefVerdict {
        let r = match r {
            Ok(r) => r,
            Err(reason) => {
                return RefVerdict::NotCompared {
                    reason: reason.clone(),
                };
            }
        };
        let cut = if r.generated_ids.len() < requested {
            r.generated_ids.len().min(engine_ids.len())
        } else {
            engine_ids.len()
        };
        compared_len = compared_len.max(cut);
        let steps: Vec<oc::StepTop> = r
            .steps
            .iter()
            .map(|s| oc::StepTop { top: s.top.clone() })
            .collect();
        match oc::compare(r.generated_ids, &steps, &engine_ids[..cut], text, tol) {
            Verdict::Identical => RefVerdict::Identical,
            Verdict::Diverged(d) => {
                divergences.push(E2eDivergence {
                    reference: r.name.to_string(),
                    step: d.step as u32,
                    expected: d.expected,
                    got: d.got,
                    expected_text: d.expected_text,
                    got_text: d.got_text,
                    margin: d.margin.map(f64::from),
                    tolerance: f64::from(d.tolerance),
                    near_tie: d.kind == oc::DivergenceKind::NearTie,
                });
                RefVerdict::Diverged
            }
        }
    };
    let vs_oracle = one(&oracle);
    let vs_golden = one(&golden);
    // The earliest divergence; on equal steps the oracle's (pushed first, stable sort).
    divergences.sort_by_key(|d| d.step);
    let status = if divergences.iter().any(|d| !d.near_tie) {
        E2eStatus::Diverged
    } else if !divergences.is_empty() {
        E2eStatus::NearTie
    } else if oracle.is_err() && golden.is_err() {
        E2eStatus::Failed
    } else {
        E2eStatus::Identical
    };
    // A real divergence is the one to show, even if a near-tie flip came earlier vs the other
    // reference.
    let divergence = divergences
        .iter()
        .find(|d| !d.near_tie)
        .or(divergences.first())
        .cloned();
    Judgement {
        status,
        vs_oracle,
        vs_golden,
        divergence,
        compared_ids: engine_ids[..compared_len.min(engine_ids.len())].to_vec(),
    }
}

/// One line describing a divergence: `step 3 (vs oracle): expected 411 " Paris", got 8 " the";
/// top-1/top-2 margin 3.181 (tolerance 1.0e-3): real divergence`.
pub fn describe(d: &E2eDivergence) -> String {
    let tok = |id: Option<u32>, text: &str| match id {
        Some(id) if text.is_empty() => format!("{id}"),
        Some(id) => format!("{id} {text:?}"),
        None => "(stopped)".into(),
    };
    let margin = match d.margin {
        Some(m) => format!(
            "; top-1/top-2 margin {m:.3} (tolerance {:.1e})",
            d.tolerance
        ),
        None => String::new(),
    };
    format!(
        "step {} (vs {}): expected {}, got {}{margin}: {}",
        d.step,
        d.reference,
        tok(d.expected, &d.expected_text),
        tok(d.got, &d.got_text),
        if d.near_tie {
            "near-tie flip"
        } else {
            "real divergence"
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(tops: &[&[(u32, f32)]]) -> Vec<StepTop> {
        tops.iter().map(|t| StepTop { top: t.to_vec() }).collect()
    }

    fn text(id: u32) -> String {
        format!("<{id}>")
    }

    fn r<'a>(name: &'static str, ids: &'a [u32], s: &'a [StepTop]) -> RefInput<'a> {
        Ok(Reference {
            name,
            generated_ids: ids,
            steps: s,
        })
    }

    #[test]
    fn identical_to_both_references() {
        let s = steps(&[
            &[(5, 3.0), (6, 1.0)],
            &[(7, 3.0), (8, 1.0)],
            &[(9, 3.0), (1, 1.0)],
        ]);
        let j = judge(
            &[5, 7, 9],
            3,
            r("oracle", &[5, 7, 9], &s),
            r("golden", &[5, 7, 9], &s),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::Identical);
        assert_eq!(
            (j.vs_oracle, j.vs_golden),
            (RefVerdict::Identical, RefVerdict::Identical)
        );
        assert_eq!(j.divergence, None);
    }

    #[test]
    fn a_changed_token_is_a_real_divergence_at_its_step() {
        let s = steps(&[
            &[(5, 3.0), (6, 1.0)],
            &[(7, 3.0), (8, 1.0)],
            &[(9, 3.0), (1, 1.0)],
        ]);
        let j = judge(
            &[5, 8, 9],
            3,
            r("oracle", &[5, 7, 9], &s),
            r("golden", &[5, 7, 9], &s),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::Diverged);
        let d = j.divergence.unwrap();
        assert_eq!(
            (d.step, d.expected, d.got, d.near_tie),
            (1, Some(7), Some(8), false)
        );
        assert_eq!(d.reference, "oracle");
        assert_eq!(d.margin, Some(2.0));
        assert_eq!(
            (d.expected_text.as_str(), d.got_text.as_str()),
            ("<7>", "<8>")
        );
        let line = describe(&d);
        assert!(
            line.starts_with("step 1 (vs oracle): expected 7 \"<7>\", got 8 \"<8>\""),
            "{line}"
        );
        assert!(line.ends_with("real divergence"), "{line}");
    }

    #[test]
    fn a_runner_up_within_the_tolerance_is_a_near_tie() {
        let s = steps(&[&[(5, 3.0), (6, 2.9995)]]);
        let j = judge(
            &[6, 1],
            2,
            r("oracle", &[5, 1], &s),
            Err("no golden".into()),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::NearTie);
        assert!(j.divergence.unwrap().near_tie);
        assert_eq!(
            j.vs_golden,
            RefVerdict::NotCompared {
                reason: "no golden".into()
            }
        );
        // The f16 tolerance is wider: a 0.01 margin is a near tie in f16, real in f32.
        let s = steps(&[&[(5, 3.0), (6, 2.99)]]);
        let f32 = judge(
            &[6, 1],
            2,
            r("oracle", &[5, 1], &s),
            Err("x".into()),
            Dtype::F32,
            &text,
        );
        let f16 = judge(
            &[6, 1],
            2,
            r("oracle", &[5, 1], &s),
            Err("x".into()),
            Dtype::F16,
            &text,
        );
        assert_eq!(
            (f32.status, f16.status),
            (E2eStatus::Diverged, E2eStatus::NearTie)
        );
    }

    #[test]
    fn the_engine_continuing_past_the_references_eos_is_not_a_divergence() {
        // The reference stopped after its EOS (id 2) at step 2 of 4 requested; the engine, which
        // ignores EOS, went on.
        let s = steps(&[&[(5, 3.0), (6, 1.0)], &[(2, 3.0), (8, 1.0)]]);
        let j = judge(
            &[5, 2, 9, 9],
            4,
            r("oracle", &[5, 2], &s),
            r("golden", &[5, 2], &s),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::Identical, "{j:?}");
        assert_eq!(j.compared_ids, [5, 2]);
        // But an engine that made fewer tokens than the reference stopped early: real.
        let j = judge(
            &[5],
            4,
            r("oracle", &[5, 2], &s),
            Err("x".into()),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::Diverged);
        assert_eq!(j.divergence.unwrap().got, None);
    }

    #[test]
    fn the_earliest_divergence_is_reported_and_a_real_one_wins() {
        let s = steps(&[
            &[(5, 3.0), (6, 1.0)],
            &[(7, 3.0), (8, 1.0)],
            &[(9, 3.0), (1, 1.0)],
        ]);
        // Vs the golden the engine parts at step 1, vs the oracle only at step 2.
        let j = judge(
            &[5, 7, 1],
            3,
            r("oracle", &[5, 7, 9], &s),
            r("golden", &[5, 8, 9], &s),
            Dtype::F32,
            &text,
        );
        let d = j.divergence.unwrap();
        assert_eq!((d.reference.as_str(), d.step), ("golden", 1));
        assert_eq!(
            (j.vs_oracle, j.vs_golden),
            (RefVerdict::Diverged, RefVerdict::Diverged)
        );
    }

    #[test]
    fn nothing_to_compare_with_is_a_failure_not_a_pass() {
        let j = judge(
            &[5],
            1,
            Err("oracle failed".into()),
            Err("no golden".into()),
            Dtype::F32,
            &text,
        );
        assert_eq!(j.status, E2eStatus::Failed);
    }
}
