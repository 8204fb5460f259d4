//! Calibration profiles (`harness-noise-profile/1`): what A/A runs (the same revision on both
//! sides) showed about each benchmark's noise on one host, so `compare` can set per-benchmark
//! thresholds from measured noise instead of a guess. Files are read and written by the caller;
//! this module builds, checks and (de)serializes the data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::paired::{PairedT, log_ratios};
use super::policy::Policy;
use super::types::{BenchInput, Threshold, ThresholdSource};

pub const PROFILE_SCHEMA: &str = "harness-noise-profile/1";

/// One host's A/A noise, per benchmark. All spreads are in log-ratio units (`ln(head/base)`;
/// 0.01 ≈ 1 %).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NoiseProfile {
    pub schema: String,
    /// `HostInfo::fingerprint` of the host the trials ran on: the profile applies only there.
    pub fingerprint: String,
    pub created_unix_s: f64,
    /// A/A trials (complete runs) the profile was built from.
    pub trials: u32,
    /// Paired rounds per trial (the most any benchmark had).
    pub rounds_per_trial: u32,
    /// Whether the trials sampled code placement (harness/STATS.md §17): a profile without it
    /// holds no placement spread and would set too tight a threshold for a run that samples
    /// it (false in profiles written before placement was sampled).
    #[serde(default)]
    pub placement_sampled: bool,
    pub benches: BTreeMap<String, BenchNoise>,
}

/// One benchmark's A/A statistics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchNoise {
    /// Trials that gave this benchmark an estimate (at least two valid paired rounds).
    pub trials: u32,
    /// Valid paired rounds over those trials.
    pub rounds: u32,
    /// Root mean square of the trials' change estimates (mean log ratio per trial) around zero:
    /// the standard deviation of a change estimate when nothing changed, including any bias
    /// between the sides. This is the noise the threshold is set from.
    pub change_rms: f64,
    /// The largest |change estimate| of any trial.
    pub change_max_abs: f64,
    /// Pooled within-trial standard deviation of the per-round log ratios: round-to-round noise.
    pub round_sd: f64,
}

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("not a noise profile: {0}")]
    Json(#[from] serde_json::Error),
    #[error("noise profile schema is {found:?}, expected {expected:?}")]
    Schema {
        found: String,
        expected: &'static str,
    },
}

#[derive(Default)]
struct Acc {
    estimates: Vec<f64>,
    rounds: usize,
    ss: f64,
    df: usize,
}

impl NoiseProfile {
    /// Builds a profile from A/A trials: `trials[t]` is one complete A/A run, each `BenchInput`
    /// holding both sides' per-round estimates of that benchmark. Benchmarks with fewer than two
    /// valid paired rounds in a trial get nothing from that trial; a side missing is skipped.
    pub fn from_aa_trials(
        fingerprint: &str,
        created_unix_s: f64,
        trials: &[Vec<BenchInput>],
    ) -> NoiseProfile {
        let mut acc: BTreeMap<String, Acc> = BTreeMap::new();
        let mut rounds_per_trial = 0usize;
        for trial in trials {
            for input in trial {
                let (Some(base), Some(head)) = (&input.base, &input.head) else {
                    continue;
                };
                let d = log_ratios(base, head);
                let Some(t) = PairedT::new(&d) else {
                    continue;
                };
                rounds_per_trial = rounds_per_trial.max(base.len().min(head.len()));
                let a = acc.entry(input.id.clone()).or_default();
                a.estimates.push(t.mean);
                a.rounds += t.n;
                a.ss += t.sd * t.sd * t.df();
                a.df += t.n - 1;
            }
        }
        let benches = acc
            .into_iter()
            .map(|(id, a)| {
                let k = a.estimates.len() as f64;
                let noise = BenchNoise {
                    trials: a.estimates.len() as u32,
                    rounds: a.rounds as u32,
                    change_rms: (a.estimates.iter().map(|m| m * m).sum::<f64>() / k).sqrt(),
                    change_max_abs: a.estimates.iter().fold(0.0, |x, m| x.max(m.abs())),
                    round_sd: if a.df == 0 {
                        0.0
                    } else {
                        (a.ss / a.df as f64).sqrt()
                    },
                };
                (id, noise)
            })
            .collect();
        NoiseProfile {
            schema: PROFILE_SCHEMA.to_string(),
            fingerprint: fingerprint.to_string(),
            created_unix_s,
            trials: trials.len() as u32,
            rounds_per_trial: rounds_per_trial as u32,
            placement_sampled: false,
            benches,
        }
    }

    /// Whether this profile was calibrated on the host with this fingerprint.
    pub fn matches(&self, fingerprint: &str) -> bool {
        self.fingerprint == fingerprint
    }

    /// The benchmark's A/A statistics, when it was calibrated from at least
    /// `policy.profile_min_trials` trials.
    pub fn noise_for(&self, id: &str, policy: &Policy) -> Option<&BenchNoise> {
        self.benches
            .get(id)
            .filter(|n| n.trials as usize >= policy.profile_min_trials && n.change_rms.is_finite())
    }

    /// The threshold this profile sets for `id`: `max(floor, exp(noise_k · change_rms) − 1)`,
    /// source `Profile` (or `Floor` when the floor is higher). `None` when the profile lacks the
    /// benchmark or calibrated it from too few trials.
    pub fn threshold_for(&self, id: &str, policy: &Policy) -> Option<Threshold> {
        self.noise_for(id, policy)
            .map(|n| Threshold::from_noise(n.change_rms, ThresholdSource::Profile, policy))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a noise profile always serializes")
    }

    /// Parses a profile, checking the schema first so an old or foreign file says so.
    pub fn from_json(text: &str) -> Result<NoiseProfile, ProfileError> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        let found = value.get("schema").and_then(|s| s.as_str()).unwrap_or("");
        if found != PROFILE_SCHEMA {
            return Err(ProfileError::Schema {
                found: found.to_string(),
                expected: PROFILE_SCHEMA,
            });
        }
        Ok(serde_json::from_value(value)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(id: &str, base: &[f64], head: &[f64]) -> BenchInput {
        BenchInput {
            id: id.to_string(),
            base: Some(base.to_vec()),
            head: Some(head.to_vec()),
        }
    }

    fn two_trials() -> Vec<Vec<BenchInput>> {
        let e = std::f64::consts::E;
        // Trial 1: log ratios +0.01, +0.03 (mean 0.02); trial 2: −0.01, +0.01, 0.0 (mean 0).
        vec![
            vec![
                input("a", &[1.0, 1.0], &[0.01f64.exp(), 0.03f64.exp()]),
                input("gone", &[1.0], &[1.0]),
                BenchInput {
                    id: "new".into(),
                    base: None,
                    head: Some(vec![1.0, 1.0]),
                },
            ],
            vec![input(
                "a",
                &[e, e, e],
                &[e * (-0.01f64).exp(), e * 0.01f64.exp(), e],
            )],
        ]
    }

    #[test]
    fn aa_statistics_by_hand() {
        let p = NoiseProfile::from_aa_trials("fp", 1.5, &two_trials());
        assert_eq!(p.schema, PROFILE_SCHEMA);
        assert_eq!((p.trials, p.rounds_per_trial), (2, 3));
        assert_eq!(
            p.benches.len(),
            1,
            "one-round and one-sided benches carry no A/A statistic"
        );
        let a = &p.benches["a"];
        assert_eq!((a.trials, a.rounds), (2, 5));
        // RMS of (0.02, 0) = 0.02/√2; max |m| = 0.02.
        assert!((a.change_rms - 0.02 / 2f64.sqrt()).abs() < 1e-12);
        assert!((a.change_max_abs - 0.02).abs() < 1e-12);
        // Pooled sd: SS = 0.0002 + 0.0002 over 1 + 2 df.
        assert!((a.round_sd - (0.0004f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn threshold_needs_enough_trials() {
        let p = NoiseProfile::from_aa_trials("fp", 0.0, &two_trials());
        let strict = Policy::default();
        assert!(
            p.threshold_for("a", &strict).is_none(),
            "2 trials < profile_min_trials"
        );
        let lax = Policy {
            profile_min_trials: 2,
            noise_k: 10.0,
            ..Policy::default()
        };
        let t = p.threshold_for("a", &lax).unwrap();
        assert_eq!(t.source, ThresholdSource::Profile);
        assert!((t.value - (10.0 * 0.02 / 2f64.sqrt()).exp_m1()).abs() < 1e-12);
        assert!(p.threshold_for("missing", &lax).is_none());
        assert!(p.matches("fp") && !p.matches("other"));
    }

    #[test]
    fn json_round_trip_and_schema_check() {
        let p = NoiseProfile::from_aa_trials("fp", 1700000000.0, &two_trials());
        let back = NoiseProfile::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
        let old = p
            .to_json()
            .replace(PROFILE_SCHEMA, "harness-noise-profile/0");
        let err = NoiseProfile::from_json(&old).unwrap_err().to_string();
        assert_eq!(
            err,
            "noise profile schema is \"harness-noise-profile/0\", expected \"harness-noise-profile/1\""
        );
        assert!(NoiseProfile::from_json("{").is_err());
        assert!(NoiseProfile::from_json("[]").is_err());
    }
}
