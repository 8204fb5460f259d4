//! `harness.yaml`: what the gate runs for a repository (bench targets and suites, end-to-end cases,
//! rounds, criterion settings, statistics policy, per-benchmark thresholds, failure policy).
//! Parsed with serde-saphyr, unknown keys rejected, then validated; every error names the file and
//! the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::stats::Policy;
use crate::vocab::{Device, Dtype};

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
    /// Measure each benchmark on both sides at once, sample by sample (harness/src/measure/serve.rs),
    /// with the same warm-up, measurement time and sample count; criterion runs are used for a
    /// bench target either side cannot serve. `false`: criterion runs only.
    #[serde(default = "default_paired")]
    pub paired: bool,
    /// Pairs of processes per benchmark per round, one after the other, the samples split
    /// between them (paired sampling only). A process keeps one speed for its life (its
    /// physical pages; harness/STATS.md, "Per-process speed"), so more pairs per round average
    /// that out of the round's estimate.
    #[serde(default = "default_processes")]
    pub processes_per_round: u32,
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
fn default_paired() -> bool {
    true
}
fn default_processes() -> u32 {
    1
}

impl Default for CriterionSettings {
    fn default() -> Self {
        CriterionSettings {
            warm_up_s: default_warm_up(),
            measurement_s: default_measurement(),
            sample_size: default_sample_size(),
            nresamples: default_nresamples(),
            paired: default_paired(),
            processes_per_round: default_processes(),
        }
    }
}

/// A paired round's settings (`measure::serve`): how long each side warms up and measures, and in how many samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairSettings {
    pub warm_up: Duration,
    pub measurement: Duration,
    pub samples: u32,
    /// Pairs of processes per round (`processes_per_round`).
    pub processes: u32,
    /// How long one serving process may live (`deadlines.bench_s`).
    pub deadline: Duration,
    /// Whether the round may keep the serving thread's CPU time (`measure::clock`): set per
    /// benchmark by the measurer, from `affinity`.
    pub cpu_clock: bool,
}

impl CriterionSettings {
    /// Warm-up, measurement and sample count of a paired round (harness/src/measure/serve.rs).
    pub fn pair_settings(&self, deadlines: &Deadlines) -> PairSettings {
        PairSettings {
            warm_up: Duration::from_secs_f64(self.warm_up_s),
            measurement: Duration::from_secs_f64(self.measurement_s),
            samples: self.sample_size,
            processes: self.processes_per_round.max(1),
            deadline: deadlines.bench(),
            cpu_clock: false,
        }
    }

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
/// to run (`[]` = all of that target); and the end-to-end cases (names from `e2e.cases`) it runs.
/// A suite needs at least one of the two.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub benches: BTreeMap<String, Vec<String>>,
    /// End-to-end cases (keys of `e2e.cases`).
    #[serde(default)]
    pub e2e: Vec<String>,
    /// Whether the end-to-end cases' decodes are timed base vs head in interleaved rounds
    /// (default) or only checked for correctness: `false` runs one round of each check (the
    /// decodes `e2e.runs` / `e2e.measurement_s` ask for, per side), judges their tokens, decides
    /// no speed, and reports the speed rows ⏭ with the reason. For a suite whose
    /// benchmarks already time the same decode (the quick suite's `decode` bench times the tiny
    /// model's), where the speed rounds would only add time.
    #[serde(default)]
    pub e2e_timed: Option<bool>,
    /// Overrides `policy.rounds` for this suite (a quick suite runs fewer).
    #[serde(default)]
    pub rounds: Option<u32>,
    #[serde(default)]
    pub criterion: Option<CriterionSettings>,
    /// Paired-round settings for the benchmarks `affinity.multi_threaded` names (default: the
    /// suite's `criterion`). Two-thread products wait on the other vCPU's wake-up, so short
    /// samples are much noisier for them than for single-threaded ones (harness/STATS.md §1).
    #[serde(default)]
    pub criterion_multi_threaded: Option<CriterionSettings>,
    /// `policy.rule: resolution`: the wall-time budget of this suite's benchmark rounds, in
    /// minutes (building and the end-to-end stage come on top). Rounds past the fixed passes go
    /// to the rows still open, most promising first, while the budget lasts and `policy.looks`
    /// allows. None: the fixed passes only.
    #[serde(default)]
    pub budget_minutes: Option<f64>,
}

impl Suite {
    /// Whether this suite times its end-to-end checks (`e2e_timed`, default true).
    pub fn times_e2e(&self) -> bool {
        self.e2e_timed.unwrap_or(true)
    }
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
    /// End-to-end decode cases (correctness against the oracle and goldens, speed A/B).
    #[serde(default)]
    pub e2e: Option<E2eConfig>,
    /// Which CPUs the measured processes may run on (`measure::affinity`).
    #[serde(default)]
    pub affinity: AffinityConfig,
    /// Instruction counts beside the times (`measure::instructions`).
    #[serde(default)]
    pub instructions: InstructionsConfig,
    /// How long one child process may run (`process`).
    #[serde(default)]
    pub deadlines: Deadlines,
    /// Whether rounds sample code placement (`measure::placement`).
    #[serde(default)]
    pub placement: PlacementConfig,
}

/// `placement:` in harness.yaml.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// Link both sides' benchmarks again in a function order of each round's own (on by
    /// default): a change moves the rest of the program's code, and placement alone moved
    /// benchmarks of this repository by 4-12 % (`harness/src/placement.rs`). Off, each side is
    /// measured in the one placement cargo's link gave it, and the verdict cannot tell that
    /// placement from the change.
    #[serde(default = "yes")]
    pub sample: bool,
    /// The suites that sample it (default: every suite).
    #[serde(default)]
    pub suites: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            sample: true,
            suites: None,
        }
    }
}

impl PlacementConfig {
    /// Whether suite `name` samples placement.
    pub fn samples_in(&self, name: &str) -> bool {
        self.sample
            && self
                .suites
                .as_ref()
                .is_none_or(|s| s.iter().any(|x| x == name))
    }
}

/// `deadlines:` in harness.yaml: how long one child process may run before it is killed and
/// reported ⛔ "timed out after N s" with its output tail; the run goes on without it.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Deadlines {
    /// One `cargo build` of a revision (benches, or the e2e binaries). A cold build of this
    /// workspace takes about 10 minutes on 2 cores; 60 leaves room for a slow runner.
    pub build_s: f64,
    /// One benchmark on one pair of processes (a serving pair's whole round, or one criterion
    /// run). A round of one benchmark takes about a second. (Listings and probes of a bench
    /// executable have a fixed minute, `process::LIST_DEADLINE`.)
    pub bench_s: f64,
    /// One end-to-end call: an `engine profile` or `oracle decode` run, or one serving engine's
    /// whole session for a check (SmolLM2's CPU check takes about a minute per side).
    pub e2e_s: f64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            build_s: 3600.0,
            bench_s: 300.0,
            e2e_s: 900.0,
        }
    }
}

impl Deadlines {
    pub fn build(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.build_s)
    }
    pub fn bench(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.bench_s)
    }
    pub fn e2e(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.e2e_s)
    }
}

/// `instructions:` in harness.yaml.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstructionsConfig {
    /// Count instructions per iteration (valgrind's callgrind) of every benchmark not matched by
    /// `affinity.multi_threaded`, on both sides, after the timed rounds. Off by default: it
    /// needs valgrind and adds about a minute per 10 benchmarks.
    #[serde(default)]
    pub count: bool,
    /// The suites that count them (default: every suite). The repository's quick suite leaves
    /// them out: they would take about a minute of its 3.
    #[serde(default)]
    pub suites: Option<Vec<String>>,
    /// Which rows are counted: `attention` (the default), the rows time left ❔, ⚠️ or 🔴,
    /// where a count can change the verdict (❔ → ⚠️) or explain it; or `all`. Counting is about
    /// 8 s per row and side under callgrind, so counting every row of the full suite took longer
    /// than its rounds.
    #[serde(default)]
    pub rows: InstructionRows,
}

/// `instructions.rows`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionRows {
    #[default]
    Attention,
    All,
}

impl InstructionsConfig {
    /// Whether suite `name` counts instructions.
    pub fn counts_in(&self, name: &str) -> bool {
        self.count
            && self
                .suites
                .as_ref()
                .is_none_or(|s| s.iter().any(|x| x == name))
    }
}

/// Whether single-threaded measured processes are pinned to one CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pin {
    /// The scheduler places them (the default: a suite may hold multi-threaded benchmarks this
    /// file has not named).
    #[default]
    Off,
    /// Both sides' processes of a single-threaded benchmark (and of a one-thread end-to-end
    /// decode) run on one CPU, the same for both: the last CPU the harness itself may use.
    OneCpu,
}

/// `affinity:` in harness.yaml (harness/src/measure/affinity.rs says why it matters).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffinityConfig {
    #[serde(default)]
    pub pin: Pin,
    /// Regexes of the benchmark ids that run on more than one thread: never pinned, whatever
    /// `pin` says (pinning them to one CPU would measure something else), never timed in CPU
    /// time.
    #[serde(default)]
    pub multi_threaded: Vec<String>,
    /// The clock of single-threaded paired rows (benchmarks and one-thread CPU decodes):
    /// `thread_cpu` (the default) or `wall` (`measure::clock`).
    #[serde(default)]
    pub clock: Clock,
}

/// `affinity.clock`: what single-threaded paired rows are timed in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The measured thread's CPU time where both sides report it and it holds the whole work,
    /// else wall time, round by round (`measure::clock`): it leaves out what the host steals.
    #[default]
    ThreadCpu,
    /// Wall time always.
    Wall,
}

/// The model names the harness knows how to provision; anything else is a package path.
pub const MODEL_TINY: &str = "tiny";
pub const MODEL_SMOLLM2: &str = "smollm2-135m-instruct";

/// `goldens: all` or a list of golden case names (`goldens/<model>/<name>.json`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum GoldenSelection {
    All(String),
    Named(Vec<String>),
}

/// One end-to-end case: a model, what to decode (golden cases and/or named prompts), on which
/// devices, in which float type.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2eCase {
    /// `tiny` (built by each revision's `engine tiny`), `smollm2-135m-instruct` (provisioned by
    /// `engine fetch smollm2`), or a model package directory (relative to the repository root).
    pub model: String,
    /// Golden cases of the model (`all` or names): their prompt ids, token count and tokens.
    #[serde(default)]
    pub goldens: Option<GoldenSelection>,
    /// Named prompt texts (no golden: engine vs oracle only).
    #[serde(default)]
    pub prompts: BTreeMap<String, String>,
    /// New tokens per decode (default: the golden's `max_new_tokens`, else `e2e.tokens`).
    #[serde(default)]
    pub tokens: Option<u32>,
    #[serde(default = "default_devices")]
    pub devices: Vec<Device>,
    #[serde(default = "default_dtype")]
    pub dtype: Dtype,
    /// Decode every input with the oracle too (the default). `false` leaves the golden as the
    /// only reference, for prompts the naive fp32 oracle takes minutes over (a 3922-token SmolLM2
    /// prompt: 420 s on the 2-vCPU CI-class VM, per side of a compare, against a deadline of
    /// `deadlines.e2e_s` per call); the check then says the oracle was not run, and the case
    /// must use goldens, not prompts.
    #[serde(default = "default_oracle")]
    pub oracle: bool,
}

fn default_oracle() -> bool {
    true
}

fn default_devices() -> Vec<Device> {
    vec![Device::Cpu]
}
fn default_dtype() -> Dtype {
    Dtype::F32
}

/// The `e2e:` section: how `engine profile` is run, and the cases.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct E2eConfig {
    /// Timed decodes per side per round: paired requests to both sides' `engine profile
    /// --serve` in turn (ABBA), or, for a revision without `--serve`, the timed runs of its one
    /// `engine profile` call per round.
    #[serde(default = "default_e2e_runs")]
    pub runs: u32,
    /// Paired rounds only: after the `runs` minimum, more ABBA request pairs until the round's
    /// requests (both sides, the untimed decode after each switch included) took this long, at
    /// most [`E2E_MAX_RUNS`] per side. A run's timing is uneven on its own (on the 2-vCPU VM a
    /// 4 ms tiny-model run spreads 10-16 % in thread CPU time), so a fast model gets its round
    /// noise down by more runs, and a slow one (a SmolLM2 CPU run, about a second) stays at
    /// `runs`. 0: exactly `runs`.
    #[serde(default = "default_e2e_measurement")]
    pub measurement_s: f64,
    /// Untimed whole runs before them.
    #[serde(default = "default_e2e_warmups")]
    pub warmups: u32,
    /// Decode steps at the start of each run excluded from timing.
    #[serde(default = "default_decode_skip")]
    pub decode_skip: u32,
    /// CPU threads of the engine (0 = all cores; 1 keeps base and head from competing).
    #[serde(default = "default_e2e_threads")]
    pub threads: u32,
    /// New tokens for prompt cases without their own `tokens`.
    #[serde(default = "default_e2e_tokens")]
    pub tokens: u32,
    /// Seed of the `tiny` model (`engine tiny --seed`); the tiny goldens are made with seed 0.
    #[serde(default)]
    pub tiny_seed: u64,
    /// The cargo packages with the `engine` and `oracle` binaries.
    #[serde(default = "default_engine_package")]
    pub engine_package: String,
    #[serde(default = "default_oracle_package")]
    pub oracle_package: String,
    pub cases: BTreeMap<String, E2eCase>,
}

fn default_e2e_runs() -> u32 {
    3
}
fn default_e2e_measurement() -> f64 {
    1.5
}
/// The most timed decodes per side in one paired round, whatever `e2e.measurement_s` says.
pub const E2E_MAX_RUNS: u32 = 1000;
fn default_e2e_warmups() -> u32 {
    1
}
fn default_decode_skip() -> u32 {
    1
}
fn default_e2e_threads() -> u32 {
    1
}
fn default_e2e_tokens() -> u32 {
    32
}
fn default_engine_package() -> String {
    "engine".into()
}
fn default_oracle_package() -> String {
    "oracles".into()
}

impl E2eConfig {
    fn validate(&self) -> Result<(), (String, String)> {
        if self.runs == 0 {
            return Err(("e2e.runs".into(), "must be at least 1".into()));
        }
        if !(self.measurement_s.is_finite() && (0.0..=600.0).contains(&self.measurement_s)) {
            return Err((
                "e2e.measurement_s".into(),
                format!(
                    "{}: seconds of paired requests per round, from 0 (exactly `runs`) to 600",
                    self.measurement_s
                ),
            ));
        }
        if self.tokens < 2 || self.decode_skip.saturating_add(1) >= self.tokens {
            return Err((
                "e2e.tokens".into(),
                format!(
                    "{} tokens leave no timed decode step after decode_skip {} (need tokens >= decode_skip + 2)",
                    self.tokens, self.decode_skip
                ),
            ));
        }
        if self.cases.is_empty() {
            return Err(("e2e.cases".into(), "define at least one case".into()));
        }
        for (name, c) in &self.cases {
            let key = |k: &str| format!("e2e.cases.{name}.{k}");
            if name.is_empty() || name.contains(['/', ' ']) {
                return Err((
                    format!("e2e.cases.{name}"),
                    "case names are non-empty and have no '/' or spaces (they are part of row ids)"
                        .into(),
                ));
            }
            if c.model.trim().is_empty() {
                return Err((
                    key("model"),
                    format!("empty: use {MODEL_TINY}, {MODEL_SMOLLM2} or a package directory"),
                ));
            }
            let named = c.model == MODEL_TINY || c.model == MODEL_SMOLLM2;
            match &c.goldens {
                Some(GoldenSelection::All(s)) if s != "all" => {
                    return Err((
                        key("goldens"),
                        format!("{s:?}: expected `all` or a list of golden case names"),
                    ));
                }
                Some(GoldenSelection::Named(v)) if v.is_empty() => {
                    return Err((
                        key("goldens"),
                        "empty list: name at least one golden case, or write `all`".into(),
                    ));
                }
                Some(GoldenSelection::Named(v)) => {
                    if let Some(bad) = v.iter().find(|n| n.is_empty() || n.contains(['/', '.'])) {
                        return Err((
                            key("goldens"),
                            format!("{bad:?}: a golden case is a file stem such as capital_plain"),
                        ));
                    }
                }
                _ => {}
            }
            if c.goldens.is_some() && !named {
                return Err((
                    key("goldens"),
                    format!(
                        "goldens exist for the named models ({MODEL_TINY}, {MODEL_SMOLLM2}), not for the package path {:?}; use prompts",
                        c.model
                    ),
                ));
            }
            if !c.oracle && (c.goldens.is_none() || !c.prompts.is_empty()) {
                return Err((
                    key("oracle"),
                    "`oracle: false` leaves the golden as the only reference: give goldens and no prompts".into(),
                ));
            }
            if !c.oracle && c.dtype != Dtype::F32 {
                return Err((
                    key("oracle"),
                    "`oracle: false` needs dtype f32: the goldens are fp32, so an f16 check has only the oracle to compare with".into(),
                ));
            }
            if c.goldens.is_none() && c.prompts.is_empty() {
                return Err((
                    format!("e2e.cases.{name}"),
                    "give goldens (`all` or names) or prompts (name: text)".into(),
                ));
            }
            for (p, text) in &c.prompts {
                if p.is_empty() || p.contains(['/', ' ']) {
                    return Err((
                        key("prompts"),
                        format!("{p:?}: prompt names are non-empty and have no '/' or spaces"),
                    ));
                }
                if text.is_empty() {
                    return Err((key(&format!("prompts.{p}")), "empty prompt".into()));
                }
            }
            if let Some(t) = c.tokens
                && (t < 2 || self.decode_skip.saturating_add(1) >= t)
            {
                return Err((
                    key("tokens"),
                    format!(
                        "{t} tokens leave no timed decode step after e2e.decode_skip {}",
                        self.decode_skip
                    ),
                ));
            }
            if c.devices.is_empty() {
                return Err((
                    key("devices"),
                    "list at least one device (cpu, cuda)".into(),
                ));
            }
            let mut d = c.devices.clone();
            d.sort();
            d.dedup();
            if d.len() != c.devices.len() {
                return Err((key("devices"), "a device is listed twice".into()));
            }
            if c.dtype == Dtype::F16 && c.model == MODEL_TINY {
                return Err((key("dtype"), "the tiny model is built in f32 only".into()));
            }
        }
        Ok(())
    }
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
        for (key, names) in [
            ("instructions.suites", &self.instructions.suites),
            ("placement.suites", &self.placement.suites),
        ] {
            for name in names.iter().flatten() {
                if !self.suites.contains_key(name) {
                    return Err(bad(
                        key,
                        format!(
                            "no suite named {name:?} (suites: {})",
                            self.suite_names().join(", ")
                        ),
                    ));
                }
            }
        }
        for (i, re) in self.affinity.multi_threaded.iter().enumerate() {
            if let Err(e) = regex_lite::Regex::new(re) {
                return Err(bad(
                    &format!("affinity.multi_threaded[{i}]"),
                    format!("not a regex: {e}"),
                ));
            }
        }
        for (key, v) in [
            ("deadlines.build_s", self.deadlines.build_s),
            ("deadlines.bench_s", self.deadlines.bench_s),
            ("deadlines.e2e_s", self.deadlines.e2e_s),
        ] {
            if !(1.0..=86_400.0).contains(&v) {
                return Err(bad(
                    key,
                    format!("{v}: expected seconds between 1 and 86400"),
                ));
            }
        }
        for (name, suite) in &self.suites {
            if suite.benches.is_empty() && suite.e2e.is_empty() {
                return Err(bad(
                    &format!("suites.{name}"),
                    "list at least one bench target (benches) or end-to-end case (e2e)".into(),
                ));
            }
            for case in &suite.e2e {
                let known = self
                    .e2e
                    .as_ref()
                    .is_some_and(|e| e.cases.contains_key(case));
                if !known {
                    let names: Vec<String> = self
                        .e2e
                        .as_ref()
                        .map(|e| e.cases.keys().cloned().collect())
                        .unwrap_or_default();
                    return Err(bad(
                        &format!("suites.{name}.e2e"),
                        format!(
                            "no end-to-end case named {case:?} in e2e.cases (cases: {})",
                            if names.is_empty() {
                                "none".into()
                            } else {
                                names.join(", ")
                            }
                        ),
                    ));
                }
            }
            if let Some(r) = suite.rounds
                && r < 2
            {
                return Err(bad(
                    &format!("suites.{name}.rounds"),
                    format!("{r} rounds cannot give a paired interval; use at least 2"),
                ));
            }
            if let Some(b) = suite.budget_minutes
                && !(b > 0.0 && b.is_finite())
            {
                return Err(bad(
                    &format!("suites.{name}.budget_minutes"),
                    format!("{b}: expected a positive number of minutes"),
                ));
            }
            if let Some(c) = &suite.criterion {
                check_criterion(c, &format!("suites.{name}.criterion"))
                    .map_err(|(k, m)| bad(&k, m))?;
            }
            if let Some(c) = &suite.criterion_multi_threaded {
                check_criterion(c, &format!("suites.{name}.criterion_multi_threaded"))
                    .map_err(|(k, m)| bad(&k, m))?;
            }
            for (target, filters) in &suite.benches {
                for f in filters {
                    check_regex(f)
                        .map_err(|m| bad(&format!("suites.{name}.benches.{target}"), m))?;
                }
            }
        }
        if let Some(e2e) = &self.e2e {
            e2e.validate().map_err(|(k, m)| bad(&k, m))?;
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
                "no suite named {name:?} (suites: {})",
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
    if c.processes_per_round == 0 || c.processes_per_round * 2 > c.sample_size {
        return Err((
            format!("{key}.processes_per_round"),
            format!(
                "{} must be at least 1 and leave each pair of processes 2 samples of the {}",
                c.processes_per_round, c.sample_size
            ),
        ));
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

    #[test]
    fn the_repositorys_own_harness_yaml_loads_and_pins_single_threaded_benchmarks_only() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../harness.yaml");
        let cfg = Config::load(&path).unwrap();
        assert_eq!(cfg.affinity.pin, Pin::OneCpu);
        let a = crate::measure::Affinity::on_cpu(
            1,
            &cfg.affinity
                .multi_threaded
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(a.cpu_for_bench("matmul/f32_t2/32x512x512"), None);
        assert_eq!(a.cpu_for_bench("matmul/f32_t1/32x512x512"), Some(1));
        assert_eq!(
            a.cpu_for_bench("decode/tiny_tokens_per_second/32_tokens"),
            Some(1)
        );
    }

    #[test]
    fn a_bad_multi_threaded_regex_is_named() {
        let e = err(&format!("{MINIMAL}affinity:\n  multi_threaded: ['(']\n"));
        assert!(e.contains("affinity.multi_threaded[0]"), "{e}");
    }

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
        assert_eq!(c.suite("quick").unwrap().rounds, Some(8));
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
    fn placement_and_instructions_name_only_suites_that_exist() {
        for key in ["placement", "instructions"] {
            let e = err(&format!("{MINIMAL}{key}:\n  suites: [full, quik]\n"));
            assert!(
                e.contains(&format!("key `{key}.suites`")) && e.contains("\"quik\""),
                "{e}"
            );
        }
        let two = format!("{MINIMAL}  quick:\n    benches:\n      kernels: []\n");
        let c = Config::parse(
            &format!("{two}placement:\n  suites: [full]\n"),
            Path::new("h.yaml"),
        )
        .unwrap();
        assert!(c.placement.samples_in("full") && !c.placement.samples_in("quick"));
        let c = Config::parse(&two, Path::new("h.yaml")).unwrap();
        assert!(c.placement.samples_in("full") && c.placement.samples_in("quick"));
        let c = Config::parse(
            &format!("{two}placement:\n  sample: false\n  suites: [full]\n"),
            Path::new("h.yaml"),
        )
        .unwrap();
        assert!(!c.placement.samples_in("full"));
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

    const E2E: &str = "packages: [engine]\ndefault_suite: quick\nsuites:\n  quick:\n    e2e: [tiny]\ne2e:\n  cases:\n    tiny:\n      model: tiny\n      goldens: all\n";

    #[test]
    fn e2e_cases_parse_with_defaults() {
        let c = Config::parse(E2E, Path::new("h.yaml")).unwrap();
        let e = c.e2e.as_ref().unwrap();
        assert_eq!(
            (e.runs, e.warmups, e.decode_skip, e.threads, e.tokens),
            (3, 1, 1, 1, 32)
        );
        let t = &e.cases["tiny"];
        assert_eq!(t.goldens, Some(GoldenSelection::All("all".into())));
        assert_eq!(
            (t.devices.as_slice(), t.dtype, t.oracle),
            (&[Device::Cpu][..], Dtype::F32, true)
        );
        let off = E2E.replace("goldens: all\n", "goldens: all\n      oracle: false\n");
        let c = Config::parse(&off, Path::new("h.yaml")).unwrap();
        assert!(!c.e2e.as_ref().unwrap().cases["tiny"].oracle);
        assert_eq!(c.suites["quick"].e2e, ["tiny"]);
        assert!(
            c.suites["quick"].benches.is_empty(),
            "an e2e-only suite is valid"
        );

        let full = "packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [a]\ne2e:\n  runs: 5\n  cases:\n    a:\n      model: smollm2-135m-instruct\n      goldens: [capital_plain, haiku_chat]\n      prompts:\n        hi: Hello\n      devices: [cpu, cuda]\n      dtype: f16\n      tokens: 16\n";
        let c = Config::parse(full, Path::new("h.yaml")).unwrap();
        let a = &c.e2e.as_ref().unwrap().cases["a"];
        assert_eq!(
            a.goldens,
            Some(GoldenSelection::Named(vec![
                "capital_plain".into(),
                "haiku_chat".into()
            ]))
        );
        assert_eq!(
            (a.devices.len(), a.dtype, a.tokens),
            (2, Dtype::F16, Some(16))
        );
        assert_eq!(a.prompts["hi"], "Hello");
    }

    #[test]
    fn this_repositorys_quick_suite_runs_the_tiny_model_on_cpu() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let c = load_for_repo(&root).unwrap();
        let e2e = c.e2e.as_ref().unwrap();
        let quick = &c.suites["quick"].e2e;
        assert!(
            quick
                .iter()
                .any(|n| e2e.cases[n].model == MODEL_TINY
                    && e2e.cases[n].devices.contains(&Device::Cpu)),
            "{quick:?}"
        );
    }

    #[test]
    fn e2e_errors_name_the_key() {
        let with = |case: &str| {
            format!(
                "packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [a]\ne2e:\n  cases:\n    a:\n{case}"
            )
        };
        for (case, key) in [
            ("      model: tiny\n", "key `e2e.cases.a`"),
            (
                "      model: tiny\n      goldens: some\n",
                "key `e2e.cases.a.goldens`",
            ),
            (
                "      model: tiny\n      goldens: []\n",
                "key `e2e.cases.a.goldens`",
            ),
            (
                "      model: ./pkg\n      goldens: all\n",
                "key `e2e.cases.a.goldens`",
            ),
            (
                "      model: tiny\n      goldens: all\n      devices: []\n",
                "key `e2e.cases.a.devices`",
            ),
            (
                "      model: tiny\n      goldens: all\n      devices: [cpu, cpu]\n",
                "key `e2e.cases.a.devices`",
            ),
            (
                "      model: tiny\n      goldens: all\n      tokens: 1\n",
                "key `e2e.cases.a.tokens`",
            ),
            (
                "      model: tiny\n      goldens: all\n      dtype: f16\n",
                "key `e2e.cases.a.dtype`",
            ),
            (
                "      model: ''\n      prompts: {x: y}\n",
                "key `e2e.cases.a.model`",
            ),
            (
                "      model: p\n      prompts: {x: ''}\n",
                "key `e2e.cases.a.prompts.x`",
            ),
            (
                "      model: tiny\n      goldens: all\n      prompts: {x: y}\n      oracle: false\n",
                "key `e2e.cases.a.oracle`",
            ),
            (
                "      model: smollm2-135m-instruct\n      goldens: all\n      dtype: f16\n      devices: [cuda]\n      oracle: false\n",
                "key `e2e.cases.a.oracle`",
            ),
        ] {
            let e = err(&with(case));
            assert!(e.contains(key), "{case:?}: {e}");
        }
        let e = err(
            "packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [nope]\ne2e:\n  cases:\n    a:\n      model: tiny\n      goldens: all\n",
        );
        assert!(
            e.contains("key `suites.s.e2e`") && e.contains("\"nope\"") && e.contains("cases: a"),
            "{e}"
        );
        let e = err("packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [a]\n");
        assert!(e.contains("cases: none"), "{e}");
        let e =
            err("packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    description: nothing\n");
        assert!(e.contains("key `suites.s`") && e.contains("e2e"), "{e}");
        for bad in ["-1", "1e9", ".nan"] {
            let text = with("      model: tiny\n      goldens: all\n")
                .replace("e2e:\n", &format!("e2e:\n  measurement_s: {bad}\n"));
            let e = err(&text);
            assert!(e.contains("key `e2e.measurement_s`"), "{bad}: {e}");
        }
        let ok = with("      model: tiny\n      goldens: all\n")
            .replace("e2e:\n", "e2e:\n  measurement_s: 0\n");
        assert_eq!(
            Config::parse(&ok, Path::new("h.yaml"))
                .unwrap()
                .e2e
                .unwrap()
                .measurement_s,
            0.0
        );
        let e = err(&with(
            "      model: tiny\n      goldens: all\n      devices: [tpu]\n",
        ));
        assert!(e.contains("tpu"), "{e}");
        let e = err(&with("      model: tiny\n      golden: all\n"));
        assert!(e.contains("golden"), "{e}");
    }

    #[test]
    fn criterion_args_carry_the_settings() {
        let a = CriterionSettings::default().args();
        assert_eq!(a[0], "--bench");
        let i = a.iter().position(|x| x == "--sample-size").unwrap();
        assert_eq!(a[i + 1], "15");
    }

    #[test]
    fn paired_sampling_is_on_unless_turned_off_and_uses_the_round_settings() {
        let p = Path::new("harness.yaml");
        let on = Config::parse(MINIMAL, p).unwrap().criterion;
        assert!(on.paired);
        let s = on.pair_settings(&Deadlines::default());
        assert_eq!(s.warm_up.as_secs_f64(), on.warm_up_s);
        assert_eq!(s.measurement.as_secs_f64(), on.measurement_s);
        assert_eq!(s.samples, on.sample_size);
        let off = Config::parse(&format!("{MINIMAL}criterion:\n  paired: false\n"), p).unwrap();
        assert!(!off.criterion.paired);
        let e = err(&format!("{MINIMAL}criterion:\n  paired: sometimes\n"));
        assert!(e.contains("paired"), "the error names the key: {e}");
    }
}
