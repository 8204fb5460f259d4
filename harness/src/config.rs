//! `harness.yaml`: what the gate runs for a repository (bench targets and suites, rounds, criterion
//! settings, statistics policy, per-benchmark thresholds, failure policy). Parsed with
//! serde-saphyr, unknown keys rejected, then validated; every error names the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::stats::Policy;

/// The file name looked up at the repository root.
pub const FILE_NAME: &str = "harness.yaml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// When the gate's exit status is non-zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum FailOn {
    /// Fail on a confirmed regression (🔴) or a head that fails to build/run (⛔).
    Red,
    /// Also fail on a possible regression (⚠️).
    Warn,
    /// Report only: exit 0 whatever the result (2 still means the gate could not run).
    Never,
}

/// Short criterion settings for one round (criterion's own CLI flags).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriterionSettings {
    #[serde(default = "default_warm_up")]
    pub warm_up_s: f64,
    #[serde(default = "default_measurement")]
    pub measurement_s: f64,
    #[serde(default = "default_sample_size")]
    pub sample_size: u32,
    #[serde(default = "default_nresamples")]
    pub nresamples: u32,
}

fn default_warm_up() -> f64 {
    0.3
}
fn default_measurement() -> f64 {
    1.0
}
fn default_sample_size() -> u32 {
    15
}
fn default_nresamples() -> u32 {
    1000
}

impl Default for CriterionSettings {
    fn default() -> Self {
        CriterionSettings {
            warm_up_s: default_warm_up(),
            measurement_s: default_measurement(),
            sample_size: default_sample_size(),
            nresamples: default_nresamples(),
        }
    }
}

impl CriterionSettings {
    /// The arguments passed to every criterion executable of a round.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--bench".into(),
            "--noplot".into(),
            "--warm-up-time".into(),
            format!("{}", self.warm_up_s),
            "--measurement-time".into(),
            format!("{}", self.measurement_s),
            "--sample-size".into(),
            self.sample_size.to_string(),
            "--nresamples".into(),
            self.nresamples.to_string(),
        ]
    }
}

/// A named set of benchmarks: per bench target (the `[[bench]]` name), the criterion id regexes
/// to run (`[]` or absent = all of that target).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    #[serde(default)]
    pub description: Option<String>,
    pub benches: BTreeMap<String, Vec<String>>,
    /// Overrides `policy.rounds` for this suite (a quick suite runs fewer).
    #[serde(default)]
    pub rounds: Option<u32>,
    #[serde(default)]
    pub criterion: Option<CriterionSettings>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Cargo packages whose benches are built (`cargo bench -p NAME --no-run`).
    pub packages: Vec<String>,
    /// The branch the base defaults to the merge-base with (else detected: origin/HEAD, main,
    /// master).
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default = "default_suite")]
    pub default_suite: String,
    pub suites: BTreeMap<String, Suite>,
    #[serde(default)]
    pub criterion: CriterionSettings,
    /// The statistical method (rounds, confirmation rounds, floor, per-benchmark thresholds …);
    /// see `harness/STATS.md`. Omitted keys keep their defaults.
    #[serde(default)]
    pub policy: Policy,
    #[serde(default = "default_fail_on")]
    pub fail_on: FailOn,
}

fn default_suite() -> String {
    "full".into()
}
fn default_fail_on() -> FailOn {
    FailOn::Red
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates `text` (`path` is only used in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let cfg: Config = serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        if self.packages.is_empty() {
            return Err(bad("packages", "list at least one cargo package".into()));
        }
        if self.suites.is_empty() {
            return Err(bad("suites", "define at least one suite".into()));
        }
        if !self.suites.contains_key(&self.default_suite) {
            return Err(bad(
                "default_suite",
                format!(
                    "no suite named {:?} (suites: {})",
                    self.default_suite,
                    self.suite_names().join(", ")
                ),
            ));
        }
        check_criterion(&self.criterion, "criterion").map_err(|(k, m)| bad(&k, m))?;
        for (name, suite) in &self.suites {
            if suite.benches.is_empty() {
                return Err(bad(
                    &format!("suites.{name}.benches"),
                    "list at least one bench target".into(),
                ));
            }
            if let Some(r) = suite.rounds
                && r < 2
            {
                return Err(bad(
                    &format!("suites.{name}.rounds"),
                    format!("{r} rounds cannot give a paired interval; use at least 2"),
                ));
            }
            if let Some(c) = &suite.criterion {
                check_criterion(c, &format!("suites.{name}.criterion"))
                    .map_err(|(k, m)| bad(&k, m))?;
            }
            for (target, filters) in &suite.benches {
                for f in filters {
                    check_regex(f)
                        .map_err(|m| bad(&format!("suites.{name}.benches.{target}"), m))?;
                }
            }
        }
        self.policy.validate().map_err(|e| {
            bad(
                &format!("policy.{}", e.field),
                format!("{} is out of range: expected {}", e.value, e.expected),
            )
        })?;
        Ok(())
    }

    pub fn suite_names(&self) -> Vec<String> {
        self.suites.keys().cloned().collect()
    }

    /// The suite called `name`, or an error listing the suites.
    pub fn suite(&self, name: &str) -> Result<&Suite, String> {
        self.suites.get(name).ok_or_else(|| {
            format!(
                "no suite named {name:?} in {FILE_NAME} (suites: {})",
                self.suite_names().join(", ")
            )
        })
    }
}

fn check_criterion(c: &CriterionSettings, key: &str) -> Result<(), (String, String)> {
    if !(c.warm_up_s.is_finite() && c.warm_up_s > 0.0) {
        return Err((
            format!("{key}.warm_up_s"),
            "must be a positive number of seconds".into(),
        ));
    }
    if !(c.measurement_s.is_finite() && c.measurement_s > 0.0) {
        return Err((
            format!("{key}.measurement_s"),
            "must be a positive number of seconds".into(),
        ));
    }
    if c.sample_size < 10 {
        return Err((
            format!("{key}.sample_size"),
            format!("{} is below criterion's minimum of 10", c.sample_size),
        ));
    }
    if c.nresamples == 0 {
        return Err((format!("{key}.nresamples"), "must be at least 1".into()));
    }
    Ok(())
}

/// Benchmark-id patterns are criterion filter regexes: checked here with `regex-lite` (same
/// syntax for what ids need) so a typo is reported against its key before any build starts.
fn check_regex(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("empty pattern".into());
    }
    regex_lite::Regex::new(p)
        .map(|_| ())
        .map_err(|e| format!("invalid pattern {p:?}: {e}"))
}

/// The repository's config: `harness.yaml` at `root`, or an error saying it is missing.
pub fn load_for_repo(root: &Path) -> Result<Config, ConfigError> {
    Config::load(&root.join(FILE_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "packages: [engine]\nsuites:\n  full:\n    benches:\n      kernels: []\n";

    fn err(text: &str) -> String {
        Config::parse(text, Path::new("harness.yaml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn this_repositorys_config_loads() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let c = load_for_repo(&root).unwrap();
        assert_eq!(c.packages, ["engine"]);
        assert!(c.suites.contains_key("quick") && c.suites.contains_key("full"));
        assert!(!c.suites["full"].benches.contains_key("gemm_reference"));
        assert_eq!(c.suite("quick").unwrap().rounds, Some(4));
    }

    #[test]
    fn defaults_fill_what_is_omitted() {
        let c = Config::parse(MINIMAL, Path::new("h.yaml")).unwrap();
        assert_eq!(c.default_suite, "full");
        assert_eq!(c.fail_on, FailOn::Red);
        assert_eq!(c.criterion, CriterionSettings::default());
        assert_eq!(c.policy, Policy::default());
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = err("packages: [engine]\nsuites: {}\n");
        assert!(e.contains("harness.yaml: key `suites`"), "{e}");
        let e = err(&format!("{MINIMAL}default_suite: quick\n"));
        assert!(
            e.contains("key `default_suite`") && e.contains("\"quick\""),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}criterion:\n  sample_size: 3\n"));
        assert!(e.contains("key `criterion.sample_size`"), "{e}");
        let e = err(
            "packages: [engine]\nsuites:\n  full:\n    benches:\n      kernels: ['(unclosed']\n",
        );
        assert!(e.contains("key `suites.full.benches.kernels`"), "{e}");
        let e = err(&format!("{MINIMAL}policy:\n  confidence: 2.0\n"));
        assert!(e.contains("key `policy.confidence`"), "{e}");
        let e = err("packages: []\nsuites:\n  full:\n    benches:\n      kernels: []\n");
        assert!(e.contains("key `packages`"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_types_are_parse_errors_naming_the_file() {
        let e = err(&format!("{MINIMAL}roundz: 3\n"));
        assert!(
            e.starts_with("harness.yaml:") && e.contains("roundz"),
            "{e}"
        );
        let e = err(&format!("{MINIMAL}fail_on: sometimes\n"));
        assert!(e.contains("sometimes") || e.contains("fail_on"), "{e}");
    }

    #[test]
    fn criterion_args_carry_the_settings() {
        let a = CriterionSettings::default().args();
        assert_eq!(a[0], "--bench");
        let i = a.iter().position(|x| x == "--sample-size").unwrap();
        assert_eq!(a[i + 1], "15");
    }
}
