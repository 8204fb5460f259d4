//! The saved-run data model (`harness-results/1`): everything `compare` measured and decided, with
//! the raw criterion samples, so `harness report` can re-render a run and `harness merge` can join
//! shards. Every stage after `run` reads only these types; none of them knows about git or cargo.

use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "harness-results/1";

/// One benchmark's status, in the DESIGN.md vocabulary. The declaration order is the report's
/// worst-first order.
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

/// One criterion sample file of one round: `iters[i]` iterations took `times_ns[i]` in total.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawSample {
    pub round: u32,
    /// "linear" or "flat" (criterion's sampling mode).
    pub sampling_mode: String,
    pub iters: Vec<f64>,
    pub times_ns: Vec<f64>,
}

/// One side (base or head) of one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SideResult {
    /// The per-round estimates (ns per iteration), in round order.
    pub per_round_ns: Vec<f64>,
    /// Median over rounds (ns per iteration): the number shown in the Base / PR columns.
    pub median_ns: f64,
    pub samples: Vec<RawSample>,
}

/// Criterion's declared throughput per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Throughput {
    Bytes(u64),
    Elements(u64),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// `group/function/param`, criterion's full id.
    pub id: String,
    pub status: Status,
    pub base: Option<SideResult>,
    pub head: Option<SideResult>,
    pub change: Option<Change>,
    /// Relative threshold used for the decision (0.03 = 3 %).
    pub threshold: f64,
    pub threshold_source: ThresholdSource,
    pub throughput: Option<Throughput>,
    /// Rounds that entered the estimate (including confirmation rounds).
    pub rounds: u32,
    /// Whether confirmation rounds were run for this benchmark.
    pub confirmed: bool,
    /// A short human explanation (why ⚠️ rather than 🔴, why ❔, the error of a ⛔).
    pub note: Option<String>,
}

/// A revision under test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// What the user asked for (`main`, `HEAD~1`, `working tree`).
    pub spec: String,
    /// The commit (for a dirty working tree: the commit it is based on).
    pub sha: String,
    /// The commit's subject line.
    pub subject: String,
    /// The working tree with uncommitted changes was measured.
    pub dirty: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub cpu: String,
    pub cores: u32,
    pub os: String,
    pub kernel: String,
    pub rustc: String,
    pub mem_gib: f64,
    /// Stable hash of what makes timings comparable (CPU model, cores, OS, memory): the key of
    /// calibration profiles.
    pub fingerprint: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundInfo {
    pub index: u32,
    /// "AB" (base first) or "BA".
    pub order: String,
    pub confirmation: bool,
    pub started_unix_s: f64,
    pub duration_s: f64,
    /// 1, 5 and 15 minute load averages at the start of the round.
    pub load_avg: [f64; 3],
}

/// How the run was measured and decided (shown in the report's method section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Method {
    pub rounds: u32,
    pub confirmation_rounds: u32,
    pub order: String,
    pub criterion_args: Vec<String>,
    pub confidence: f64,
    /// Family-wise error rate across the suite.
    pub alpha: f64,
    /// The multiple-comparison correction, e.g. "holm".
    pub correction: String,
    pub floor: f64,
    /// The calibration profile used (its file and fingerprint), or None.
    pub profile: Option<String>,
}

/// A build or run failure of one side, with the tail of the tool's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// "base" or "head".
    pub side: String,
    /// "build" or "run".
    pub stage: String,
    pub message: String,
    pub log_tail: Vec<String>,
}

/// The gate's overall decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing blocks the merge.
    Pass,
    /// Possible regressions, nothing confirmed.
    Warn,
    /// A confirmed regression (or a correctness failure).
    Fail,
    /// The gate could not run (a side failed to build, nothing measured).
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub schema: String,
    pub tool_version: String,
    pub created_unix_s: f64,
    pub suite: String,
    /// `(index, count)` of a shard, 1-based index.
    pub shard: Option<(u32, u32)>,
    pub base: Revision,
    pub head: Revision,
    pub host: HostInfo,
    pub method: Method,
    pub rounds: Vec<RoundInfo>,
    pub benches: Vec<BenchResult>,
    pub failures: Vec<Failure>,
    pub outcome: Outcome,
    pub wall_s: f64,
    /// Commands that reproduce this run.
    pub reproduce: Vec<String>,
}

impl Results {
    /// Count of benchmarks per status, in `Status::ALL` order (zeros included).
    pub fn counts(&self) -> Vec<(Status, usize)> {
        Status::ALL
            .iter()
            .map(|&s| (s, self.benches.iter().filter(|b| b.status == s).count()))
            .collect()
    }

    /// The overall outcome from the benchmark statuses and failures. A base that cannot be
    /// built or run leaves nothing to compare against: the gate could not run. A head that cannot
    /// be built or run is the PR's fault: the gate fails.
    pub fn decide(benches: &[BenchResult], failures: &[Failure]) -> Outcome {
        if failures.iter().any(|f| f.side == "base") {
            return Outcome::Error;
        }
        if !failures.is_empty()
            || benches
                .iter()
                .any(|b| matches!(b.status, Status::Regression | Status::Failed))
        {
            return Outcome::Fail;
        }
        if benches
            .iter()
            .any(|b| b.status == Status::PossibleRegression)
        {
            return Outcome::Warn;
        }
        Outcome::Pass
    }
}
