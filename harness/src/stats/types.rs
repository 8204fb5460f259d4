//! The types the decision functions share, and the ones a saved run records from them: the
//! status vocabulary, a change estimate with its interval, a threshold and its source, and one
//! benchmark's per-round input. Pure data; `results` re-exports what it serializes.

use serde::{Deserialize, Serialize};

use super::policy::Policy;

/// One benchmark's status (the meanings are the report's contract with its reader: ARCHITECTURE.md,
/// "Contracts"). The declaration order is the report's worst-first order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// ⛔ failed to build or run on either side.
    Failed,
    /// 🔴 a confirmed regression beyond the threshold.
    Regression,
    /// ⚠️ a possible regression: above the threshold but not confirmed.
    PossibleRegression,
    /// ❔ too noisy to tell.
    TooNoisy,
    /// ➖ present on base only.
    Removed,
    /// 🆕 present on head only.
    Added,
    /// 🟢 an improvement beyond the threshold.
    Improvement,
    /// ✅ no change beyond the threshold.
    NoChange,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Status::Failed,
        Status::Regression,
        Status::PossibleRegression,
        Status::TooNoisy,
        Status::Removed,
        Status::Added,
        Status::Improvement,
        Status::NoChange,
    ];

    pub fn emoji(self) -> &'static str {
        match self {
            Status::Failed => "⛔",
            Status::Regression => "🔴",
            Status::PossibleRegression => "⚠️",
            Status::TooNoisy => "❔",
            Status::Removed => "➖",
            Status::Added => "🆕",
            Status::Improvement => "🟢",
            Status::NoChange => "✅",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Status::Failed => "failed",
            Status::Regression => "regression",
            Status::PossibleRegression => "possible regression",
            Status::TooNoisy => "too noisy",
            Status::Removed => "removed",
            Status::Added => "added",
            Status::Improvement => "improvement",
            Status::NoChange => "no change",
        }
    }
}

/// Where a benchmark's noise threshold came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThresholdSource {
    /// The A/A calibration profile matching this host.
    Profile,
    /// The spread within this run (no profile for this benchmark).
    Spread,
    /// The fixed floor (the measured noise was below it).
    Floor,
    /// Set for this benchmark in harness.yaml.
    Config,
}

/// A paired change estimate, head relative to base: `+0.05` is 5 % slower (more time per
/// iteration). Intervals are on the same scale.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub estimate: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// Confidence level of `[ci_low, ci_high]`, e.g. 0.95.
    pub confidence: f64,
    /// Two-sided p-value of "no change", before and after the multiple-comparison correction.
    pub p_value: f64,
    pub p_adjusted: f64,
}

/// One benchmark's per-round estimates (ns per iteration, e.g. from
/// [`round_estimate`](super::round_estimate)), paired by index: `base[i]` and `head[i]` were
/// measured back to back in round `i`. A side that is `None` does not exist on that revision
/// (🆕 / ➖); a round whose value is invalid (NaN, ≤ 0) is dropped with its pair. Failures (⛔)
/// are the caller's: they never reach the stats.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchInput {
    pub id: String,
    pub base: Option<Vec<f64>>,
    pub head: Option<Vec<f64>>,
}

/// A relative threshold and where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    /// Relative (0.03 = 3 %): changes within ±threshold are not flagged.
    pub value: f64,
    pub source: ThresholdSource,
    /// The noise-derived value before the floor, `exp(noise_k · noise) − 1` (0 for `Config`).
    pub derived: f64,
}

impl Threshold {
    /// `max(floor, exp(noise_k · noise) − 1)` for a noise (standard deviation of the change
    /// estimate, log-ratio units) from `source`; the source becomes `Floor` when the floor wins.
    pub fn from_noise(noise: f64, source: ThresholdSource, policy: &Policy) -> Threshold {
        let derived = (policy.noise_k * noise).exp_m1();
        if derived >= policy.floor {
            Threshold {
                value: derived,
                source,
                derived,
            }
        } else {
            Threshold {
                value: policy.floor,
                source: ThresholdSource::Floor,
                derived,
            }
        }
    }

    pub(super) fn floor(policy: &Policy) -> Threshold {
        Threshold {
            value: policy.floor,
            source: ThresholdSource::Floor,
            derived: 0.0,
        }
    }

    /// Log-ratio form, `ln(1 + value)`, the scale the tests run on.
    pub(super) fn log(&self) -> f64 {
        self.value.ln_1p()
    }
}

/// Which pass of the decision this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// After the first `policy.rounds` rounds: nothing is 🔴; would-be regressions are ⚠️ and
    /// marked as suspects for confirmation rounds.
    First,
    /// After the confirmation rounds: rounds with index `≥ first_rounds` are confirmation rounds
    /// (only suspects have them). 🔴 needs them.
    Final { first_rounds: usize },
}

/// One benchmark's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub id: String,
    pub status: Status,
    /// `None` for 🆕 / ➖ and when fewer than two rounds pair up.
    pub change: Option<Change>,
    /// Relative threshold used (0.03 = 3 %).
    pub threshold: f64,
    pub threshold_source: ThresholdSource,
    /// Why this status, with the numbers (always set for ⚠️, ❔ and 🔴).
    pub note: Option<String>,
    /// Valid paired rounds in the estimate, confirmation rounds included.
    pub rounds: usize,
    /// Of those, confirmation rounds.
    pub confirmation_rounds: usize,
    /// First pass only: needs confirmation rounds (see [`suspects`]).
    pub suspect: bool,
}
