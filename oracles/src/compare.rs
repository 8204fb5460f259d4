//! The comparison library: did a candidate decode (the engine, on some device and dtype) produce
//! the same tokens as a reference (the oracle or a golden)? On a mismatch it reports the first
//! diverging step, both tokens with their text, and the reference's top-1/top-2 logit margin at
//! that step, and classifies the divergence:
//!
//! - **near-tie flip**: the reference's top-1 and top-2 logits are closer than the stated
//!   tolerance and the candidate picked the reference's top-2. Two correct implementations that
//!   sum in different orders can legitimately disagree there.
//! - **real divergence**: anything else (a clear winner was not chosen, or the candidate stopped or
//!   continued where the reference did not).
//!
//! Pure functions over plain data, so the harness can use them on JSON read from any revision's
//! binaries (it never links the engine).

use std::fmt;

/// Near-tie tolerance for f32 candidates: engine-vs-oracle top-5 logit differences measured on
/// SmolLM2 f32 stay below 1e-4 (logits are O(10)); a margin under 1e-3 is within reach of
/// summation-order noise.
pub const NEAR_TIE_F32: f32 = 1e-3;
/// Near-tie tolerance for f16 candidates: f16 keeps ~3 significant digits, so logits of O(10)
/// carry errors of O(1e-2) after 30 layers.
pub const NEAR_TIE_F16: f32 = 5e-2;

/// The reference's view of one step: the top tokens `(id, logit)`, best first (at least two).
#[derive(Clone, Debug, PartialEq)]
pub struct StepTop {
    pub top: Vec<(u32, f32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DivergenceKind {
    NearTie,
    Real,
}

impl fmt::Display for DivergenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DivergenceKind::NearTie => "near-tie flip",
            DivergenceKind::Real => "real divergence",
        })
    }
}

/// Where and how two decodes part.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// Index into the generated ids (0 = the first new token).
    pub step: usize,
    /// The reference's token there (`None`: the reference had stopped).
    pub expected: Option<u32>,
    /// The candidate's token there (`None`: the candidate had stopped).
    pub got: Option<u32>,
    pub expected_text: String,
    pub got_text: String,
    /// Reference top-1 minus top-2 logit at `step` (`None` when the reference has no step data).
    pub margin: Option<f32>,
    pub tolerance: f32,
    pub kind: DivergenceKind,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tok = |id: Option<u32>, text: &str| match id {
            Some(id) => format!("{id} {text:?}"),
            None => "(stopped)".to_string(),
        };
        write!(
            f,
            "{} at step {}: expected {}, got {}",
            self.kind,
            self.step,
            tok(self.expected, &self.expected_text),
            tok(self.got, &self.got_text)
        )?;
        if let Some(m) = self.margin {
            write!(
                f,
                "; reference top-1/top-2 margin {m:.3e} (tolerance {:.1e})",
                self.tolerance
            )?;
        }
        Ok(())
    }
}

/// The outcome of [`compare`].
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Identical,
    Diverged(Divergence),
}

/// Compares `candidate` against `reference` generated ids. `steps[i]` is the reference's top list
/// at step `i`; `text` renders one token id (for messages); `tolerance` is the near-tie margin
/// ([`NEAR_TIE_F32`] or [`NEAR_TIE_F16`]).
pub fn compare(
    reference: &[u32],
    steps: &[StepTop],
    candidate: &[u32],
    text: &dyn Fn(u32) -> String,
    tolerance: f32,
) -> Verdict {
    let Some(step) =
        (0..reference.len().max(candidate.len())).find(|&i| reference.get(i) != candidate.get(i))
    else {
        return Verdict::Identical;
    };
    let expected = reference.get(step).copied();
    let got = candidate.get(step).copied();
    let top = steps.get(step).map(|s| s.top.as_slice()).unwrap_or(&[]);
    let margin = match top {
        [a, b, ..] => Some(a.1 - b.1),
        _ => None,
    };
    let near_tie = match (margin, top, got) {
        (Some(m), [_, second, ..], Some(g)) => m <= tolerance && g == second.0,
        _ => false,
    };
    Verdict::Diverged(Divergence {
        step,
        expected,
        got,
        expected_text: expected.map(text).unwrap_or_default(),
        got_text: got.map(text).unwrap_or_default(),
        margin,
        tolerance,
        kind: if near_tie {
            DivergenceKind::NearTie
        } else {
            DivergenceKind::Real
        },
    })
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

    #[test]
    fn identical() {
        let s = steps(&[&[(5, 3.0), (6, 1.0)], &[(7, 2.0), (8, 1.0)]]);
        assert_eq!(
            compare(&[5, 7], &s, &[5, 7], &text, NEAR_TIE_F32),
            Verdict::Identical
        );
    }

    #[test]
    fn near_tie_flip_to_the_runner_up() {
        let s = steps(&[&[(5, 3.0), (6, 1.0)], &[(7, 2.0004), (8, 2.0)]]);
        let Verdict::Diverged(d) = compare(&[5, 7], &s, &[5, 8], &text, NEAR_TIE_F32) else {
            panic!()
        };
        assert_eq!(
            (d.step, d.expected, d.got, d.kind),
            (1, Some(7), Some(8), DivergenceKind::NearTie)
        );
        assert!((d.margin.unwrap() - 0.0004).abs() < 1e-6);
        assert_eq!(d.expected_text, "<7>");
        assert!(
            d.to_string()
                .starts_with("near-tie flip at step 1: expected 7 \"<7>\", got 8 \"<8>\""),
            "{d}"
        );
    }

    #[test]
    fn clear_winner_missed_is_real() {
        let s = steps(&[&[(5, 3.0), (6, 1.0)]]);
        let Verdict::Diverged(d) = compare(&[5], &s, &[6], &text, NEAR_TIE_F32) else {
            panic!()
        };
        assert_eq!(d.kind, DivergenceKind::Real);
        assert_eq!(d.margin, Some(2.0));
    }

    #[test]
    fn small_margin_but_not_the_runner_up_is_real() {
        let s = steps(&[&[(5, 3.0), (6, 2.9999), (9, 1.0)]]);
        let Verdict::Diverged(d) = compare(&[5], &s, &[9], &text, NEAR_TIE_F32) else {
            panic!()
        };
        assert_eq!(d.kind, DivergenceKind::Real);
    }

    #[test]
    fn tolerance_matters() {
        let s = steps(&[&[(5, 3.0), (6, 2.99)]]);
        let v32 = compare(&[5], &s, &[6], &text, NEAR_TIE_F32);
        let v16 = compare(&[5], &s, &[6], &text, NEAR_TIE_F16);
        assert!(matches!(
            v32,
            Verdict::Diverged(Divergence {
                kind: DivergenceKind::Real,
                ..
            })
        ));
        assert!(matches!(
            v16,
            Verdict::Diverged(Divergence {
                kind: DivergenceKind::NearTie,
                ..
            })
        ));
    }

    #[test]
    fn early_stop_is_real_with_no_token() {
        let s = steps(&[&[(5, 3.0), (6, 1.0)], &[(7, 3.0), (8, 1.0)]]);
        let Verdict::Diverged(d) = compare(&[5, 7], &s, &[5], &text, NEAR_TIE_F32) else {
            panic!()
        };
        assert_eq!(
            (d.step, d.expected, d.got, d.kind),
            (1, Some(7), None, DivergenceKind::Real)
        );
        assert!(d.to_string().contains("got (stopped)"), "{d}");
    }
}
