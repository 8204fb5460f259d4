//! The decision policy: every default of the statistical method in one place, overridable from
//! `harness.yaml` (serde, unknown keys rejected). STATS.md explains each default against the
//! gate's targets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How measurements become statuses. `Policy::default()` is the documented method; a field left
/// out of `harness.yaml` keeps its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Two-sided confidence level of the intervals shown per benchmark.
    pub confidence: f64,
    /// Family-wise error rate across the suite: a 🔴 needs a Holm-adjusted p-value below it.
    pub alpha: f64,
    /// The smallest threshold (relative, 0.03 = 3 %): changes below it are never flagged, however
    /// certain (code-layout shifts of a few percent are real but not the PR's doing).
    pub floor: f64,
    /// Multiplier on a benchmark's noise (the standard deviation of its change estimate, from the
    /// calibration profile or else from this run's rounds): threshold =
    /// `max(floor, exp(noise_k · noise) − 1)`.
    pub noise_k: f64,
    /// A noise-derived threshold above this means the benchmark cannot be gated on this run: ❔
    /// unless the change is a significant one beyond even that threshold.
    pub max_threshold: f64,
    /// ❔ when the interval's half-width exceeds `wide_factor` × the threshold (the run is far
    /// noisier than the threshold assumes, e.g. a loaded run against a quiet profile).
    pub wide_factor: f64,
    /// Fewer valid paired rounds than this: ❔.
    pub min_rounds: usize,
    /// First pass: a slowdown with one-sided p below this (unadjusted) whose interval reaches past
    /// the threshold is a suspect and gets confirmation rounds.
    pub screen_alpha: f64,
    /// Final pass: the confirmation rounds alone must show a slowdown with one-sided p below this…
    pub confirm_alpha: f64,
    /// …and an estimate of at least this fraction of the threshold.
    pub confirm_fraction: f64,
    /// A profile entry calibrated from fewer A/A trials than this is ignored (spread is used).
    pub profile_min_trials: usize,
    /// Rounds of the first pass (each: base and head back to back, AB or BA).
    pub rounds: usize,
    /// Extra rounds run for the suspects only.
    pub confirmation_rounds: usize,
    /// Extra first-pass rounds for the benchmarks whose noise the first `rounds` left too large
    /// (❔ too noisy to tell, or a threshold above `noise_target`): they belong to the first pass
    /// (spread, suspects), and confirmation rounds, if any, come after them. 0 turns them off.
    pub noise_rounds: usize,
    /// A benchmark whose threshold after the first `rounds` is above this (relative) gets the
    /// noise rounds, whatever its estimate: its spread, not its change, chose it, and more
    /// rounds shrink a spread-derived threshold by √((rounds + noise_rounds) / rounds).
    pub noise_target: f64,
    /// Fixed thresholds per benchmark id (relative), still never below `floor`.
    pub thresholds: BTreeMap<String, f64>,
    /// Which rule turns a row's rounds into a status (STATS.md, "Verdicts against a
    /// resolution"). `threshold` is the method of sections 3-7; `resolution` decides every row
    /// against its resolution δ with rank intervals.
    pub rule: Rule,
    /// `rule: resolution`: the resolution δ of every row (relative, 0.03 = 3 %): ✅ rules out a
    /// slowdown of δ or more, 🔴 shows one beyond δ.
    pub resolution: f64,
    /// Per-benchmark resolutions: an exact id or a glob (`*` any run of characters but `/`,
    /// `**` any run, `?` one character but `/`) → δ. The longest matching pattern wins. A
    /// pattern that matches no benchmark of the suite is an error.
    pub resolutions: BTreeMap<String, f64>,
    /// `rule: resolution`: the chance a row whose true slowdown is δ or more is shown ✅, at
    /// most (spread over `looks`).
    pub ok_alpha: f64,
    /// `rule: resolution`: how many times a row's data may be looked at (the first pass, noise
    /// rounds, confirmation rounds, later batches); every bound is taken at `level / looks`, so
    /// the error rates hold whatever the looks decided (Bonferroni over looks).
    pub looks: usize,
    /// A multi-threaded row measured while other processes kept this many cores busy or more
    /// (the mean over its rounds of `RawSample::others_cores`) is ❔, whatever it read: it
    /// shared its CPUs, so its time is not a quiet machine's (`crowding`; STATS.md, "A busy
    /// machine"). 0 turns it off.
    pub crowded_cores: f64,
}

/// Which rule turns rounds into statuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A threshold from the noise (or the floor), Student t, Holm against "no change".
    #[default]
    Threshold,
    /// A resolution δ per row, Hodges–Lehmann estimates with signed-rank bounds.
    Resolution,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            confidence: 0.95,
            alpha: 0.05,
            floor: 0.03,
            noise_k: 2.5,
            max_threshold: 0.20,
            wide_factor: 2.0,
            min_rounds: 3,
            screen_alpha: 0.05,
            confirm_alpha: 0.05,
            confirm_fraction: 0.5,
            profile_min_trials: 5,
            rounds: 8,
            confirmation_rounds: 8,
            noise_rounds: 6,
            noise_target: 0.04,
            thresholds: BTreeMap::new(),
            rule: Rule::Threshold,
            resolution: 0.03,
            resolutions: BTreeMap::new(),
            ok_alpha: 0.05,
            looks: 4,
            crowded_cores: CROWDED_CORES,
        }
    }
}

/// `crowded_cores`' default: a quarter of a core, far above an idle 2-vCPU VM's 0.01 and far
/// below one busy process's 1.0 (STATS.md §18).
pub const CROWDED_CORES: f64 = 0.25;

/// A policy value out of range, named as `harness.yaml` spells it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("policy.{field} = {value}: expected {expected}")]
pub struct PolicyError {
    pub field: String,
    pub value: String,
    pub expected: String,
}

impl Policy {
    /// Checks every field; the first bad one is the error.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |field: &str, value: String, expected: &str| PolicyError {
            field: field.to_string(),
            value,
            expected: expected.to_string(),
        };
        let open_unit = [
            ("confidence", self.confidence),
            ("alpha", self.alpha),
            ("screen_alpha", self.screen_alpha),
            ("confirm_alpha", self.confirm_alpha),
        ];
        for (field, v) in open_unit {
            if !(v > 0.0 && v < 1.0) {
                return Err(bad(field, v.to_string(), "a probability in (0, 1)"));
            }
        }
        if !(self.floor >= 0.0 && self.floor < 1.0) {
            return Err(bad("floor", self.floor.to_string(), "a fraction in [0, 1)"));
        }
        if !(self.noise_k > 0.0 && self.noise_k.is_finite()) {
            return Err(bad(
                "noise_k",
                self.noise_k.to_string(),
                "a positive number",
            ));
        }
        if !(self.max_threshold > self.floor && self.max_threshold.is_finite()) {
            return Err(bad(
                "max_threshold",
                self.max_threshold.to_string(),
                "a fraction above floor",
            ));
        }
        // At or under `floor` every benchmark gets noise rounds: wasteful, not wrong, and a
        // harness.yaml with a large floor must not fail on a default it never set.
        if !(self.noise_target >= 0.0 && self.noise_target.is_finite()) {
            return Err(bad(
                "noise_target",
                self.noise_target.to_string(),
                "a non-negative fraction",
            ));
        }
        if !(self.wide_factor > 0.0 && self.wide_factor.is_finite()) {
            return Err(bad(
                "wide_factor",
                self.wide_factor.to_string(),
                "a positive number",
            ));
        }
        if !(0.0..=1.0).contains(&self.confirm_fraction) {
            return Err(bad(
                "confirm_fraction",
                self.confirm_fraction.to_string(),
                "a fraction in [0, 1]",
            ));
        }
        if self.min_rounds < 2 {
            return Err(bad("min_rounds", self.min_rounds.to_string(), "at least 2"));
        }
        for (field, v) in [
            ("rounds", self.rounds),
            ("confirmation_rounds", self.confirmation_rounds),
        ] {
            if v < self.min_rounds {
                return Err(bad(field, v.to_string(), "at least min_rounds"));
            }
        }
        if self.profile_min_trials < 2 {
            return Err(bad(
                "profile_min_trials",
                self.profile_min_trials.to_string(),
                "at least 2",
            ));
        }
        if !(self.ok_alpha > 0.0 && self.ok_alpha < 1.0) {
            return Err(bad(
                "ok_alpha",
                self.ok_alpha.to_string(),
                "a probability in (0, 1)",
            ));
        }
        if !(self.crowded_cores >= 0.0 && self.crowded_cores.is_finite()) {
            return Err(bad(
                "crowded_cores",
                self.crowded_cores.to_string(),
                "a non-negative number of cores",
            ));
        }
        if self.looks < 1 {
            return Err(bad("looks", self.looks.to_string(), "at least 1"));
        }
        let fraction = |v: f64| v > 0.0 && v < 1.0;
        if !fraction(self.resolution) {
            return Err(bad(
                "resolution",
                self.resolution.to_string(),
                "a fraction in (0, 1)",
            ));
        }
        for (pattern, &v) in &self.resolutions {
            if !fraction(v) {
                return Err(bad(
                    &format!("resolutions.{pattern}"),
                    v.to_string(),
                    "a fraction in (0, 1)",
                ));
            }
            if let Err(e) = glob_regex(pattern) {
                return Err(bad(&format!("resolutions.{pattern}"), pattern.clone(), &e));
            }
        }
        for (id, &v) in &self.thresholds {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(bad(
                    &format!("thresholds.{id}"),
                    v.to_string(),
                    "a non-negative fraction",
                ));
            }
        }
        Ok(())
    }

    /// The resolution δ of benchmark `id` and whether `resolutions` set it: the longest
    /// matching pattern's value, else `resolution`.
    pub fn resolution_for(&self, id: &str) -> (f64, bool) {
        self.resolutions
            .iter()
            .filter(|(p, _)| glob_regex(p).is_ok_and(|r| r.is_match(id)))
            .max_by_key(|(p, _)| p.len())
            .map_or((self.resolution, false), |(_, &v)| (v, true))
    }

    /// The `resolutions` patterns that match none of `ids` (a typo, or a benchmark that no
    /// longer exists): each is an error for the run.
    pub fn unmatched_resolutions(&self, ids: &[String]) -> Vec<String> {
        self.resolutions
            .keys()
            .filter(|p| glob_regex(p).is_ok_and(|r| !ids.iter().any(|id| r.is_match(id))))
            .cloned()
            .collect()
    }

    /// This policy with the fields of a JSON object replaced (`{"noise_k": 2}`; any field
    /// `harness.yaml`'s `policy:` takes), validated. An unknown field, a value of the wrong type
    /// or out of range is an error that names it.
    pub fn with_overrides(&self, json: &str) -> Result<Policy, String> {
        let over: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("policy overrides {json:?}: {e}"))?;
        let serde_json::Value::Object(over) = over else {
            return Err(format!(
                "policy overrides {json:?}: expected a JSON object such as {{\"noise_k\": 2}}"
            ));
        };
        let mut merged = serde_json::to_value(self).map_err(|e| e.to_string())?;
        if let serde_json::Value::Object(m) = &mut merged {
            m.extend(over);
        }
        let p: Policy = serde_json::from_value(merged)
            .map_err(|e| format!("policy overrides {json:?}: {e}"))?;
        p.validate().map_err(|e| e.to_string())?;
        Ok(p)
    }
}

/// A benchmark-id glob as an anchored regex: `**` any run of characters, `*` any run without
/// `/`, `?` one character but `/`, everything else literal.
fn glob_regex(pattern: &str) -> Result<regex_lite::Regex, String> {
    if pattern.is_empty() {
        return Err("a benchmark id or glob, not empty".into());
    }
    let mut re = String::from("^");
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex_lite::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex_lite::Regex::new(&re).map_err(|e| format!("a valid glob ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_named_fields_and_name_what_is_wrong() {
        let p = Policy::default()
            .with_overrides(r#"{"noise_k": 2, "floor": 0.02}"#)
            .unwrap();
        assert_eq!((p.noise_k, p.floor), (2.0, 0.02));
        assert_eq!(p.rounds, Policy::default().rounds);
        let e = Policy::default()
            .with_overrides(r#"{"noise_kk": 2}"#)
            .unwrap_err();
        assert!(e.contains("noise_kk"), "{e}");
        let e = Policy::default()
            .with_overrides(r#"{"alpha": 2}"#)
            .unwrap_err();
        assert!(e.contains("policy.alpha = 2"), "{e}");
        assert!(Policy::default().with_overrides("[1]").is_err());
        assert!(Policy::default().with_overrides("{").is_err());
    }

    #[test]
    fn defaults_are_valid() {
        Policy::default().validate().unwrap();
    }

    #[test]
    fn partial_override_keeps_other_defaults() {
        let p: Policy =
            serde_json::from_str(r#"{"floor": 0.025, "thresholds": {"a/b": 0.1}}"#).unwrap();
        assert_eq!(p.floor, 0.025);
        assert_eq!(p.thresholds["a/b"], 0.1);
        assert_eq!(p.alpha, Policy::default().alpha);
        p.validate().unwrap();
        assert!(serde_json::from_str::<Policy>(r#"{"flor": 0.02}"#).is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let p = Policy {
            alpha: 1.5,
            ..Policy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "policy.alpha = 1.5: expected a probability in (0, 1)"
        );
        let p = Policy {
            confirmation_rounds: 1,
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "confirmation_rounds");
        let p = Policy {
            confidence: f64::NAN,
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "confidence");
        let p = Policy {
            noise_target: -0.01,
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "noise_target");
        // A large floor alone is fine with the default noise_target under it.
        let p = Policy {
            floor: 0.08,
            max_threshold: 0.2,
            ..Policy::default()
        };
        assert_eq!(p.validate(), Ok(()));
        let mut p = Policy::default();
        p.thresholds.insert("x".into(), -0.1);
        assert_eq!(p.validate().unwrap_err().field, "thresholds.x");
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let p = Policy {
                crowded_cores: bad,
                ..Policy::default()
            };
            assert_eq!(p.validate().unwrap_err().field, "crowded_cores", "{bad}");
        }
        let off = Policy {
            crowded_cores: 0.0,
            ..Policy::default()
        };
        assert_eq!(off.validate(), Ok(()), "0 turns the rule off");
        let p: Policy = serde_json::from_str(r#"{"floor": 0.03}"#).unwrap();
        assert_eq!(
            p.crowded_cores, CROWDED_CORES,
            "a recorded policy without it"
        );
    }

    #[test]
    fn resolutions_match_ids_and_globs_the_longest_pattern_winning() {
        let p = Policy {
            resolutions: [
                ("matmul/*_t2/*".to_string(), 0.06),
                ("matmul/f32_t2/32x512x512".to_string(), 0.08),
                ("tokenization/**".to_string(), 0.05),
            ]
            .into(),
            ..Policy::default()
        };
        p.validate().unwrap();
        assert_eq!(p.resolution_for("matmul/f32_t2/32x512x512"), (0.08, true));
        assert_eq!(p.resolution_for("matmul/bf16_t2/1x256x256"), (0.06, true));
        assert_eq!(p.resolution_for("matmul/bf16_t1/1x256x256"), (0.03, false));
        assert_eq!(p.resolution_for("tokenization/encode/tiny"), (0.05, true));
        // `*` stops at `/`: no match across segments.
        assert_eq!(p.resolution_for("matmul/x/f32_t2/y"), (0.03, false));
        let ids: Vec<String> = ["matmul/f32_t2/32x512x512", "add/f32/small"]
            .map(String::from)
            .into();
        assert_eq!(p.unmatched_resolutions(&ids), ["tokenization/**"]);
    }

    #[test]
    fn bad_resolutions_name_the_pattern() {
        let mut p = Policy::default();
        p.resolutions.insert("add/**".into(), 1.5);
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("resolutions.add/**"), "{e}");
        p.resolutions.clear();
        p.resolution = 0.0;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("policy.resolution")
        );
        let p = Policy::default()
            .with_overrides(r#"{"rule": "resolution", "looks": 3}"#)
            .unwrap();
        assert_eq!((p.rule, p.looks), (Rule::Resolution, 3));
        assert!(
            Policy::default()
                .with_overrides(r#"{"rule": "vibes"}"#)
                .is_err()
        );
    }
}
