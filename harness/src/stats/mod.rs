//! The stats stage: pure functions from per-round timings to statuses. Per round, a robust
//! ns/iteration from criterion's samples ([`round_estimate`]); per benchmark, a paired estimate of
//! the change across rounds with a Student t interval ([`PairedT`]); a threshold from the host's
//! calibration profile ([`NoiseProfile`]) or this run's spread, never below a floor; Holm control
//! across the suite ([`holm`]); noise rounds for what the first pass left ❔ ([`noisy`]); confirmation rounds for suspects before anything is 🔴
//! ([`analyze`], [`Phase`], [`suspects`]). Under `policy.rule: resolution` (this repository's
//! rule) the decision is `resolution`'s instead: every row against its resolution δ with
//! signed-rank bounds (`rank`). Beside the decision: `noise` (the diagnostics of `harness
//! noise`), `instructions` (instruction counts into a verdict), `crowding`
//! (a multi-threaded row measured on a busy machine is ❔), `changepoint` (E-divisive over a
//! history). The method, its defaults and its references are in `harness/STATS.md`.

mod aggregate;
mod changepoint;
mod crowding;
mod decide;
mod instructions;
mod noise;
mod notes;
mod paired;
mod policy;
mod profile;
mod rank;
mod resolution;
mod types;

#[cfg(test)]
mod sim;

pub use aggregate::{
    PairLayout, ROUND_QUANTILE, Summary, mean, median, paired_log_ratio, quantile, round_estimate,
    std_dev, summarize,
};
pub use changepoint::{ChangePoint, ChangePointConfig, e_divisive};
pub use crowding::{crowded, when_crowded};
pub use decide::{analyze, noisy, suspects};
pub use instructions::{INSTRUCTION_STEP, with_instructions};
pub use noise::{BIMODAL_BC, Interval, NoiseRound, NoiseRow, TAIL_FACTOR, bimodality, diagnose};
pub use paired::{PairedT, holm, log_ratios, t_quantile, t_sf};
pub use policy::{Policy, PolicyError, Rule};
pub use profile::{BenchNoise, NoiseProfile, PROFILE_SCHEMA, ProfileError};
pub use rank::{RankAnalysis, SignedRank, walsh_averages};
pub use types::{BenchInput, Change, Decision, Phase, Status, Threshold, ThresholdSource};

/// The multiple-comparison correction, as `results::Method::correction` names it.
pub const CORRECTION: &str = "holm";
