//! The saved-run data model (`harness-results/1`): everything `compare` measured and decided, with
//! the raw criterion samples, so `harness report` can re-render a run and `harness merge` can join
//! shards. Every stage after `run` reads only these types; none of them knows about git or cargo.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::vocab::{Device, Dtype, ProcessFailure, Side, Stage};

pub const SCHEMA: &str = "harness-results/1";

pub use crate::stats::{Change, Status, ThresholdSource};

/// One criterion sample file of one round: `iters[i]` iterations took `times_ns[i]` in total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RawSample {
    pub round: u32,
    /// "linear" or "flat" (criterion's sampling mode).
    pub sampling_mode: String,
    pub iters: Vec<f64>,
    pub times_ns: Vec<f64>,
    /// The clock of `times_ns`: absent for wall time, [`THREAD_CPU`] for the measured thread's
    /// CPU time (harness/STATS.md, "The clock").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// The same samples' wall times, kept beside `times_ns` when those are CPU times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wall_ns: Vec<f64>,
    /// How many cores other processes kept busy, on average, while this round of a
    /// multi-threaded benchmark was measured (`host::others_cores`; both sides of a paired
    /// round share it). Absent for single-threaded rows (they need one CPU and are timed in their
    /// thread's CPU time where both sides report it) and in results written before it was read. Its mean over a row's
    /// rounds decides whether the row was crowded (`policy.crowded_cores`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_cores: Option<f64>,
}

/// [`RawSample::clock`] of samples timed in the measured thread's CPU time.
pub const THREAD_CPU: &str = "thread_cpu";

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
    /// Instructions per iteration on each side (callgrind; single-threaded benchmarks, when
    /// valgrind was there). Absent in results written before they were counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<InstructionCounts>,
}

impl BenchResult {
    /// The row's label: its status's, except a ✅ whose whole interval lies below −δ, which
    /// says "faster" (the speed-up holds at the level a ✅ is given at, short of 🟢's
    /// correction over the suite; its note says so): "no change" beside −25 % would say less
    /// than the row knows.
    pub fn label(&self) -> &'static str {
        if self.faster() {
            "faster"
        } else {
            self.status.label()
        }
    }

    /// A ✅ whose whole interval lies below −δ: shown apart from the unchanged rows.
    pub fn faster(&self) -> bool {
        self.status == Status::NoChange
            && self
                .change
                .as_ref()
                .is_some_and(|c| c.ci_high < -self.threshold)
    }
}

/// Instructions per iteration of one benchmark on each side (`measure::instructions`), or why
/// they could not be counted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstructionCounts {
    pub base: Option<f64>,
    pub head: Option<f64>,
    /// Why a side has no count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl InstructionCounts {
    /// head / base − 1, when both were counted.
    pub fn change(&self) -> Option<f64> {
        match (self.base, self.head) {
            (Some(b), Some(h)) if b > 0.0 => Some(h / b - 1.0),
            _ => None,
        }
    }
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

/// What `host::lost_time` saw: how much of a spinning thread's time the host took away.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LostTime {
    /// When it was taken ("before the rounds", "after the rounds").
    pub when: String,
    /// The CPU the probe ran on, where it was pinned.
    pub cpu: Option<usize>,
    pub seconds: f64,
    /// Share of the probe's wall time spent in gaps of at least `host::GAP_NS` between two clock
    /// reads of a thread that does nothing else.
    pub lost: f64,
    pub gaps: u64,
    pub longest_ms: f64,
    /// The steal time the kernel reported for that CPU over the same seconds (`/proc/stat`),
    /// as a share; `None` where it cannot be read or the probe was not pinned.
    pub steal: Option<f64>,
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
    /// Extra first-pass rounds for the benchmarks the first `rounds` left ❔ (0: off; absent in
    /// results written before they existed). In a replay: the saved noise rounds it kept.
    #[serde(default)]
    pub noise_rounds: u32,
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
    /// Set by `harness replay`: the saved run it re-decided and the policy it used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// Every field of the policy that decided this run (absent in results written before
    /// 2026-11-30, whose defaults had `max_threshold` 0.15). `harness replay` starts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::stats::Policy>,
    /// How each round measured a benchmark: paired sample by sample (harness/src/measure/serve.rs) or
    /// one criterion run per side, and which bench targets fell back to criterion runs and why.
    /// Absent in results written before paired sampling (criterion runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<String>,
    /// Whether the rounds sampled code placement (each round's own function order per side,
    /// harness/src/measure/placement.rs) or measured cargo's one link per side, and why. Absent
    /// in results written before placement was sampled (one link per side).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// A build or run failure of one side, with the tail of the tool's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub side: Side,
    pub stage: Stage,
    /// `message` and `log_tail`, at the top level of the JSON object as always.
    #[serde(flatten)]
    pub failure: ProcessFailure,
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
    /// End-to-end checks (correctness against the oracle and goldens, decode speed). Optional
    /// and absent from files written before it existed: the schema stays `harness-results/1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e: Option<E2eResults>,
    /// The paths under the gate's own files (`harness/`, `harness.yaml`, `.github/`) that the
    /// head changes: the PR check judges with the base's gate, so the report says these changes
    /// did not judge this PR. Absent from older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_changes: Vec<String>,
    /// How much time the host took from a spinning thread on the benchmarks' CPU just before
    /// and after the benchmark rounds (`host::lost_time`): the cause of many ❔ rows on a busy
    /// host. Absent from older files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_time: Vec<LostTime>,
}

/// One end-to-end correctness status, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum E2eStatus {
    /// 🔴 the engine's tokens differ from the oracle's or the golden's (a real divergence).
    Diverged,
    /// ⛔ the engine or the oracle failed to run (or the golden is missing).
    Failed,
    /// ⚠️ diverged at a step where the reference's top-1 and top-2 logits are within the
    /// near-tie tolerance and the engine picked the runner-up.
    NearTie,
    /// ⏭ not run (no CUDA device, model not provisioned): never a pass.
    NotRun,
    /// ✅ identical tokens.
    Identical,
}

impl E2eStatus {
    pub const ALL: [E2eStatus; 5] = [
        E2eStatus::Diverged,
        E2eStatus::Failed,
        E2eStatus::NearTie,
        E2eStatus::NotRun,
        E2eStatus::Identical,
    ];

    pub fn emoji(self) -> &'static str {
        match self {
            E2eStatus::Diverged => "🔴",
            E2eStatus::Failed => "⛔",
            E2eStatus::NearTie => "⚠️",
            E2eStatus::NotRun => "⏭",
            E2eStatus::Identical => "✅",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            E2eStatus::Diverged => "diverged",
            E2eStatus::Failed => "failed to run",
            E2eStatus::NearTie => "near-tie flip",
            E2eStatus::NotRun => "not run",
            E2eStatus::Identical => "identical",
        }
    }
}

/// Where the engine's tokens first differ from a reference's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eDivergence {
    /// "oracle" or "golden".
    pub reference: String,
    /// Index into the generated tokens (0 = the first new token).
    pub step: u32,
    /// The reference's token there (None: the reference had stopped).
    pub expected: Option<u32>,
    /// The engine's token there (None: the engine had stopped).
    pub got: Option<u32>,
    /// The tokens as text (empty when the tokenizer could not be read).
    pub expected_text: String,
    pub got_text: String,
    /// The reference's top-1 minus top-2 logit at that step.
    pub margin: Option<f64>,
    /// The near-tie tolerance for the check's dtype.
    pub tolerance: f64,
    pub near_tie: bool,
}

/// The engine's tokens against one reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum RefVerdict {
    Identical,
    Diverged,
    NotCompared { reason: String },
}

/// One side's correctness check of one case × device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eSideCheck {
    pub status: E2eStatus,
    /// The package hash the engine reported.
    #[serde(default)]
    pub model_sha256: Option<String>,
    /// The engine's generated tokens (as compared: cut after the reference's end of sequence).
    #[serde(default)]
    pub generated_ids: Vec<u32>,
    pub vs_oracle: RefVerdict,
    pub vs_golden: RefVerdict,
    /// The earliest divergence from either reference.
    #[serde(default)]
    pub divergence: Option<E2eDivergence>,
    /// Why ⏭ or ⛔, or a remark (e.g. a stale golden).
    #[serde(default)]
    pub note: Option<String>,
    /// The failing tool's last lines of output (⛔).
    #[serde(default)]
    pub log_tail: Vec<String>,
}

/// One end-to-end correctness row: a case's prompt on a device, base and head.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eCorrectness {
    /// `case/prompt/device-dtype`.
    pub id: String,
    pub model: String,
    pub device: Device,
    pub dtype: Dtype,
    /// The row's status: the head's.
    pub status: E2eStatus,
    /// None in single-revision runs (`harness e2e`).
    pub base: Option<E2eSideCheck>,
    pub head: E2eSideCheck,
    /// Identical on base but diverging on head: the PR changed the answer (the headline).
    pub introduced: bool,
}

/// CUDA-graph counters of one `engine profile` call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaGraphCounters {
    pub enabled: bool,
    pub captures: u64,
    pub replays: u64,
    pub fallbacks: u64,
}

/// One side of an end-to-end speed row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eSpeedSide {
    /// Per round: the lower quartile of that call's timed runs (ms per decode step).
    pub per_round_ms: Vec<f64>,
    /// Every timed run's ms per step, per round.
    pub runs_ms: Vec<Vec<f64>>,
    /// Median of `per_round_ms`: the number shown.
    pub median_ms_per_step: f64,
    /// `1000 / median_ms_per_step`.
    pub tok_s: f64,
    /// Median prefill time over the calls.
    pub prefill_ms: f64,
    /// Counters of the last call (None on CPU).
    #[serde(default)]
    pub cuda_graph: Option<CudaGraphCounters>,
    /// The runs of each round were paired requests to both sides' `engine profile --serve`
    /// (ABBA), not one call per side (absent in results written before: false).
    #[serde(default)]
    pub paired: bool,
}

/// What an end-to-end speed row times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeedMetric {
    /// ms per decode step (the row id is the check's; absent in results written before
    /// prefill rows existed).
    #[default]
    DecodeStep,
    /// ms of the prompt's prefill (row id `<check>/prefill`); `median_ms_per_step` and
    /// `per_round_ms` of its sides hold prefill times, `tok_s` prompt tokens per second.
    Prefill,
}

/// One end-to-end speed row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eSpeed {
    pub id: String,
    #[serde(default)]
    pub metric: SpeedMetric,
    pub device: Device,
    pub dtype: Dtype,
    /// The A/B status (None in single-revision runs and when not compared: see `not_run`).
    pub status: Option<Status>,
    /// Why the row was not measured or not compared (⏭).
    #[serde(default)]
    pub not_run: Option<String>,
    pub base: Option<E2eSpeedSide>,
    pub head: Option<E2eSpeedSide>,
    /// Change of ms per step, head relative to base (+0.05 = 5 % slower).
    pub change: Option<Change>,
    pub threshold: f64,
    pub threshold_source: ThresholdSource,
    pub rounds: u32,
    pub confirmed: bool,
    pub note: Option<String>,
    /// A change of CUDA-graph captures or fallbacks between base and head.
    #[serde(default)]
    pub graph_flag: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum E2eMode {
    /// Base vs head (`harness compare`).
    Compare,
    /// One revision (`harness e2e`): correctness and speed, no A/B.
    Single,
}

/// The end-to-end part of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E2eResults {
    pub mode: E2eMode,
    /// `--require-cuda`: a CUDA row not run makes the gate unable to run (exit 2).
    pub require_cuda: bool,
    pub correctness: Vec<E2eCorrectness>,
    pub speed: Vec<E2eSpeed>,
    /// The `engine profile` settings of every call (`--warmups … --runs … …`).
    pub profile_args: Vec<String>,
    /// Build failures of the engine/oracle binaries.
    #[serde(default)]
    pub failures: Vec<Failure>,
    /// A compare's speed rounds: whether each ran both engines relinked in function orders of
    /// its own (harness/src/measure/placement.rs), or the engines as built, and why. Absent in
    /// single-revision runs and in results from before placement was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

impl E2eResults {
    /// CUDA rows that did not run although `--require-cuda` was given.
    pub fn missing_cuda(&self) -> Vec<&E2eCorrectness> {
        if !self.require_cuda {
            return Vec::new();
        }
        self.correctness
            .iter()
            .filter(|c| c.device == Device::Cuda && c.status == E2eStatus::NotRun)
            .collect()
    }

    /// The end-to-end part's own outcome.
    pub fn outcome(&self) -> Outcome {
        // As for the benchmarks (`Results::decide`): without the base's binaries nothing could
        // be compared, so the gate could not run.
        if !self.missing_cuda().is_empty() || self.failures.iter().any(|f| f.side == Side::Base) {
            return Outcome::Error;
        }
        if self.failures.iter().any(|f| f.side == Side::Head)
            || self
                .correctness
                .iter()
                .any(|c| matches!(c.status, E2eStatus::Diverged | E2eStatus::Failed))
            || self
                .speed
                .iter()
                .any(|s| matches!(s.status, Some(Status::Regression | Status::Failed)))
        {
            return Outcome::Fail;
        }
        if self
            .correctness
            .iter()
            .any(|c| c.status == E2eStatus::NearTie)
            || self
                .speed
                .iter()
                .any(|s| s.status == Some(Status::PossibleRegression) || s.graph_flag.is_some())
        {
            return Outcome::Warn;
        }
        Outcome::Pass
    }

    pub fn counts(&self) -> Vec<(E2eStatus, usize)> {
        E2eStatus::ALL
            .iter()
            .map(|&s| (s, self.correctness.iter().filter(|c| c.status == s).count()))
            .collect()
    }
}

impl Outcome {
    /// How bad: Pass < Warn < Fail < Error.
    fn rank(self) -> u8 {
        match self {
            Outcome::Pass => 0,
            Outcome::Warn => 1,
            Outcome::Fail => 2,
            Outcome::Error => 3,
        }
    }

    /// The worse of two outcomes.
    pub fn worst(self, other: Outcome) -> Outcome {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

impl Results {
    /// The overall outcome with the end-to-end part: the worse of the benchmarks' and the
    /// end-to-end checks' (a run with only end-to-end checks is decided by them alone).
    pub fn decide_all(
        benches: &[BenchResult],
        failures: &[Failure],
        e2e: Option<&E2eResults>,
    ) -> Outcome {
        let benches_outcome = Results::decide(benches, failures);
        match e2e {
            Some(e) => benches_outcome.worst(e.outcome()),
            None => benches_outcome,
        }
    }

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
        if failures.iter().any(|f| f.side == Side::Base) {
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

/// Now, in seconds since the Unix epoch (`created_unix_s`).
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e2e_with_failure(side: Side) -> E2eResults {
        E2eResults {
            mode: E2eMode::Compare,
            require_cuda: false,
            correctness: Vec::new(),
            speed: Vec::new(),
            profile_args: Vec::new(),
            failures: vec![Failure {
                side,
                stage: Stage::Build,
                failure: ProcessFailure::bare(
                    "`cargo build --release --bin engine --bin oracle` failed",
                ),
            }],
            placement: None,
        }
    }

    #[test]
    fn an_e2e_build_failure_fails_on_head_and_cannot_run_on_base() {
        assert_eq!(e2e_with_failure(Side::Head).outcome(), Outcome::Fail);
        assert_eq!(e2e_with_failure(Side::Base).outcome(), Outcome::Error);
    }
}
