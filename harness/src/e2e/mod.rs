//! End-to-end checks: greedy decodes of real prompts through each revision's own `engine` and
//! `oracle` binaries (never linked: invariant 1), judged for correctness against the oracle and
//! the ONNX Runtime goldens, and timed (`engine profile`) base vs head in interleaved rounds with
//! the same paired statistics as the micro-benchmarks.
//!
//! - [`plan_checks`]: `harness.yaml`'s cases × prompts (goldens or texts) × devices → [`Check`]s
//!   with ids `case/prompt/device-dtype`;
//! - [`SideEnv`]: one revision's binaries, tree (goldens, relative model paths) and scratch dir;
//!   models are resolved per side (`tiny` built by that revision's `engine tiny`, SmolLM2 via
//!   `engine fetch smollm2`, or a path);
//! - [`run_single`]: `harness e2e` (one revision: correctness, and speed without A/B);
//! - [`run_compare`]: the e2e part of `harness compare` (speed rounds through
//!   [`crate::gate::measure_and_decide`] with an [`E2eMeasurer`], then correctness from the very
//!   tokens the timed runs produced).
//!
//! Statuses: ✅ identical, 🔴 diverged (real), ⚠️ near-tie flip, ⛔ failed to run, ⏭ not run with
//! the reason (never a pass). Method: `harness/STATS.md`, "End-to-end checks".

pub mod contract;
pub mod correctness;
pub mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{E2E_MAX_RUNS, E2eConfig, GoldenSelection, MODEL_SMOLLM2, MODEL_TINY};
use crate::measure::clock::{self, Timing};
use crate::measure::serve::{SAMPLING_MODE_WARM, clocked_sample, pair_layout};
use crate::measure::{Affinity, Measured, Measurer, Placement, TargetPlan};
use crate::progress::Progress;
use crate::results::{
    BenchResult, CudaGraphCounters, E2eCorrectness, E2eMode, E2eResults, E2eSideCheck, E2eSpeed,
    E2eSpeedSide, E2eStatus, Failure, RawSample, RefVerdict, SpeedMetric, Status, ThresholdSource,
};
use crate::stats::{self, Policy};
use crate::vocab::{Device, Dtype};
use crate::vocab::{ProcessFailure, Side, Stage};
use contract::{Golden, Profile};
use correctness::{Reference, judge};
use tools::{ProfileRequest, Prompt, ToolFailure, Tools};

/// What a check decodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A golden case (`goldens/<model>/<name>.json`): its prompt ids, token count and tokens.
    Golden(String),
    /// A prompt text (engine vs oracle only).
    Text(String),
}

/// One case's prompt on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// `case/prompt/device-dtype`.
    pub id: String,
    pub case: String,
    pub model: String,
    pub input: Input,
    /// Explicit token count (else the golden's `max_new_tokens`, else `e2e.tokens`).
    pub tokens: Option<u32>,
    pub device: Device,
    pub dtype: Dtype,
    /// Whether the oracle decodes this input too (`oracle: false` in the case: the golden only).
    pub oracle: bool,
}

/// What a check without the oracle says in its place.
pub const ORACLE_OFF: &str =
    "oracle not run (`oracle: false` in this case): the golden is the reference";

/// The golden case names of `model` under `root/goldens/<model>/` (sorted file stems).
pub fn golden_names(root: &Path, model: &str) -> Vec<String> {
    let dir = root.join("goldens").join(model);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The checks of `cases` (all cases when empty), restricted to `devices` (all when empty).
/// `goldens: all` lists the golden files under `root` (the head's tree); an unknown case name
/// is an error listing the cases.
pub fn plan_checks(
    cfg: &E2eConfig,
    cases: &[String],
    devices: &[Device],
    root: &Path,
) -> Result<Vec<Check>, String> {
    let mut names: Vec<String> = if cases.is_empty() {
        cfg.cases.keys().cloned().collect()
    } else {
        cases.to_vec()
    };
    // `--case a --case a` is one case.
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let mut out = Vec::new();
    for name in &names {
        let case = cfg.cases.get(name).ok_or_else(|| {
            format!(
                "no end-to-end case named {name:?} in harness.yaml (cases: {})",
                cfg.cases.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        let mut inputs: Vec<(String, Input)> = Vec::new();
        match &case.goldens {
            Some(GoldenSelection::All(_)) => {
                let found = golden_names(root, &case.model);
                if found.is_empty() {
                    return Err(format!(
                        "e2e case {name}: `goldens: all` but {} has no golden files",
                        root.join("goldens").join(&case.model).display()
                    ));
                }
                inputs.extend(found.into_iter().map(|g| (g.clone(), Input::Golden(g))));
            }
            Some(GoldenSelection::Named(v)) => {
                inputs.extend(v.iter().map(|g| (g.clone(), Input::Golden(g.clone()))));
            }
            None => {}
        }
        inputs.extend(
            case.prompts
                .iter()
                .map(|(p, t)| (p.clone(), Input::Text(t.clone()))),
        );
        // Check ids are `case/input/device-dtype` and key every later map: one name, one input.
        let mut input_names = std::collections::BTreeSet::new();
        if let Some((dup, _)) = inputs.iter().find(|(n, _)| !input_names.insert(n.clone())) {
            return Err(format!(
                "e2e case {name}: {dup:?} is named twice (a golden listed twice, or a prompt named like a golden): rename one"
            ));
        }
        for device in &case.devices {
            if !devices.is_empty() && !devices.contains(device) {
                continue;
            }
            for (pname, input) in &inputs {
                out.push(Check {
                    id: format!("{name}/{pname}/{}-{}", device.name(), case.dtype.name()),
                    case: name.clone(),
                    model: case.model.clone(),
                    input: input.clone(),
                    tokens: case.tokens,
                    device: *device,
                    dtype: case.dtype,
                    oracle: case.oracle,
                });
            }
        }
    }
    Ok(out)
}

/// Why a side cannot run a check: ⏭ (with the reason) or ⛔ (with the tool's output).
#[derive(Clone, Debug, PartialEq)]
pub enum Blocked {
    NotRun(String),
    Failed {
        message: String,
        log_tail: Vec<String>,
    },
}

impl Blocked {
    fn from_tool(f: ToolFailure) -> Blocked {
        match f.not_run {
            Some(why) => Blocked::NotRun(why),
            None => Blocked::Failed {
                message: f.failure.message,
                log_tail: f.failure.log_tail,
            },
        }
    }

    fn side_check(&self) -> E2eSideCheck {
        let (status, note, log_tail) = match self {
            Blocked::NotRun(why) => (E2eStatus::NotRun, why.clone(), Vec::new()),
            Blocked::Failed { message, log_tail } => {
                (E2eStatus::Failed, message.clone(), log_tail.clone())
            }
        };
        let reason = match status {
            E2eStatus::NotRun => "not run".to_string(),
            _ => "failed to run".to_string(),
        };
        E2eSideCheck {
            status,
            model_sha256: None,
            generated_ids: Vec::new(),
            vs_oracle: RefVerdict::NotCompared {
                reason: reason.clone(),
            },
            vs_golden: RefVerdict::NotCompared { reason },
            divergence: None,
            note: Some(note),
            log_tail,
        }
    }

    fn reason(&self) -> String {
        match self {
            Blocked::NotRun(why) => why.clone(),
            Blocked::Failed { message, .. } => message.clone(),
        }
    }
}

/// Everything a check needs on one side, resolved before any timing.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub model_dir: PathBuf,
    pub golden: Option<Golden>,
    pub prompt_ids: Option<Vec<u32>>,
    pub text: Option<String>,
    pub tokens: u32,
}

/// One revision's side of the end-to-end checks.
pub struct SideEnv {
    pub side: Side,
    /// None: the side's binaries could not be built (every check ⛔ with `build_failure`).
    pub tools: Option<Tools>,
    pub build_failure: Option<String>,
    /// Set when this host cannot run CUDA at all (`host::cuda_unavailable`): CUDA checks are ⏭
    /// with this reason without running the engine.
    pub cuda_unavailable: Option<String>,
    /// The revision's tree: goldens and relative model paths.
    pub root: PathBuf,
    /// Scratch: the tiny model is built here.
    pub work: PathBuf,
    models: BTreeMap<(String, Dtype), Result<PathBuf, Blocked>>,
}

impl SideEnv {
    pub fn new(side: Side, tools: Result<Tools, String>, root: PathBuf, work: PathBuf) -> SideEnv {
        let (tools, build_failure) = match tools {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e)),
        };
        SideEnv {
            side,
            tools,
            build_failure,
            cuda_unavailable: None,
            root,
            work,
            models: BTreeMap::new(),
        }
    }

    fn model_dir(
        &mut self,
        cfg: &E2eConfig,
        model: &str,
        dtype: Dtype,
    ) -> Result<PathBuf, Blocked> {
        let key = (model.to_string(), dtype);
        if let Some(r) = self.models.get(&key) {
            return r.clone();
        }
        let tools = self.tools.clone().ok_or_else(|| Blocked::Failed {
            message: self.build_failure.clone().unwrap_or_default(),
            log_tail: Vec::new(),
        })?;
        let r = if model == MODEL_TINY {
            let out = self.work.join(format!("tiny-seed{}", cfg.tiny_seed));
            tools
                .tiny(cfg.tiny_seed, &out)
                .map(|()| out)
                .map_err(Blocked::from_tool)
        } else if model == MODEL_SMOLLM2 {
            tools
                .fetch_smollm2()
                .map(|(f32, f16)| if dtype == Dtype::F16 { f16 } else { f32 })
                .map_err(Blocked::from_tool)
        } else {
            let p = Path::new(model);
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                self.root.join(p)
            };
            if p.join("model.onnx").is_file() {
                Ok(p)
            } else {
                Err(Blocked::NotRun(format!(
                    "model package {} not found (no model.onnx)",
                    p.display()
                )))
            }
        };
        self.models.insert(key, r.clone());
        r
    }

    /// Resolves a check on this side: model, golden, prompt, token count.
    pub fn prepare(&mut self, cfg: &E2eConfig, check: &Check) -> Result<Prepared, Blocked> {
        if check.device == Device::Cuda
            && let Some(why) = &self.cuda_unavailable
        {
            return Err(Blocked::NotRun(why.clone()));
        }
        let model_dir = self.model_dir(cfg, &check.model, check.dtype)?;
        let (golden, prompt_ids, text) = match &check.input {
            Input::Golden(name) => {
                let path = self
                    .root
                    .join("goldens")
                    .join(&check.model)
                    .join(format!("{name}.json"));
                let text = std::fs::read_to_string(&path).map_err(|e| Blocked::Failed {
                    message: format!("cannot read golden {}: {e}", path.display()),
                    log_tail: Vec::new(),
                })?;
                let g =
                    contract::parse_golden(&text, &path).map_err(|message| Blocked::Failed {
                        message,
                        log_tail: Vec::new(),
                    })?;
                let ids = g.prompt_ids.clone();
                (Some(g), Some(ids), None)
            }
            Input::Text(t) => (None, None, Some(t.clone())),
        };
        let tokens = check
            .tokens
            .or(golden.as_ref().map(|g| g.max_new_tokens))
            .unwrap_or(cfg.tokens)
            .max(cfg.decode_skip.saturating_add(2));
        Ok(Prepared {
            model_dir,
            golden,
            prompt_ids,
            text,
            tokens,
        })
    }
}

fn prompt_of(p: &Prepared) -> Prompt<'_> {
    match (&p.prompt_ids, &p.text) {
        (Some(ids), _) => Prompt::Ids(ids),
        (None, Some(t)) => Prompt::Text(t),
        (None, None) => Prompt::Ids(&[]),
    }
}

fn profile_request<'a>(cfg: &E2eConfig, check: &Check, p: &'a Prepared) -> ProfileRequest<'a> {
    ProfileRequest {
        model: &p.model_dir,
        device: check.device,
        dtype: check.dtype,
        prompt: prompt_of(p),
        tokens: p.tokens,
        warmups: cfg.warmups,
        runs: cfg.runs,
        decode_skip: cfg.decode_skip,
        threads: cfg.threads,
    }
}

/// The oracle's decode, cached per (model, prompt, tokens): devices share it.
type OracleCache = BTreeMap<(PathBuf, String, u32), Result<contract::OracleDecode, ToolFailure>>;

/// Judges one side of a check from the engine's profile(s): the first call's tokens against
/// the oracle and the golden; later calls must give the same tokens (greedy is deterministic).
fn judge_side(
    tools: &Tools,
    check: &Check,
    p: &Prepared,
    profiles: &[Profile],
    oracle_cache: &mut OracleCache,
) -> E2eSideCheck {
    let first = &profiles[0];
    let prompt = prompt_of(p);
    let key = (
        p.model_dir.clone(),
        match prompt {
            Prompt::Ids(ids) => format!("{ids:?}"),
            Prompt::Text(t) => t.to_string(),
        },
        p.tokens,
    );
    let oracle = check.oracle.then(|| {
        oracle_cache
            .entry(key)
            .or_insert_with(|| tools.oracle(&p.model_dir, prompt, p.tokens))
            .clone()
    });
    let tokenizer = oracles::text::Tokenizer::open(&p.model_dir).ok();
    let text = |id: u32| -> String {
        tokenizer
            .as_ref()
            .and_then(|t| t.decode(&[id]).ok())
            .unwrap_or_default()
    };
    let mut notes: Vec<String> = Vec::new();
    let mut log_tail = Vec::new();
    let oracle_ref = match &oracle {
        None => Err(ORACLE_OFF.to_string()),
        Some(Ok(o)) => Ok(Reference {
            name: "oracle",
            generated_ids: &o.generated_ids,
            steps: &o.steps,
        }),
        Some(Err(f)) => {
            notes.push(format!("oracle failed: {}", f.failure.message));
            log_tail = f.failure.log_tail.clone();
            Err(format!("oracle failed: {}", f.failure.message))
        }
    };
    let golden_ref = match &p.golden {
        None => Err("no golden for a prompt case".to_string()),
        Some(g) if !g.model_sha256.is_empty() && g.model_sha256 != first.model_sha256 => {
            let why = format!(
                "golden made from another package (model sha256 {}…, this package {}…{})",
                g.model_sha256.chars().take(12).collect::<String>(),
                first.model_sha256.chars().take(12).collect::<String>(),
                if check.dtype == Dtype::F32 {
                    "; regenerate the goldens, see goldens/README.md"
                } else {
                    "; goldens are fp32"
                }
            );
            Err(why)
        }
        Some(g) => Ok(Reference {
            name: "golden",
            generated_ids: &g.generated_ids,
            steps: &g.steps,
        }),
    };
    if let (Err(why), Some(_)) = (&golden_ref, &p.golden)
        && check.dtype == Dtype::F32
    {
        notes.push(why.clone());
    }
    let j = judge(
        &first.generated_ids,
        p.tokens as usize,
        oracle_ref,
        golden_ref,
        check.dtype,
        &text,
    );
    let mut status = j.status;
    if matches!(oracle, Some(Err(_))) {
        // The three-way check is incomplete: never ✅.
        if status != E2eStatus::Diverged {
            status = E2eStatus::Failed;
        }
    }
    if let Some(Ok(o)) = &oracle {
        if !o.model_sha256.is_empty() && o.model_sha256 != first.model_sha256 {
            notes.push(format!(
                "the oracle and the engine hash the package differently ({} vs {})",
                o.model_sha256, first.model_sha256
            ));
        }
        if o.prompt_ids != first.prompt_ids {
            status = E2eStatus::Diverged;
            notes.push(format!(
                "the prompt tokenizes differently: engine {:?}, oracle {:?}",
                first.prompt_ids, o.prompt_ids
            ));
        }
    }
    if let Some((k, other)) = profiles
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, q)| q.generated_ids != first.generated_ids)
    {
        status = E2eStatus::Diverged;
        notes.push(format!(
            "nondeterministic: call {} generated {:?}, call 1 {:?}",
            k + 1,
            other.generated_ids,
            first.generated_ids
        ));
    }
    E2eSideCheck {
        status,
        model_sha256: Some(first.model_sha256.clone()),
        generated_ids: j.compared_ids,
        vs_oracle: j.vs_oracle,
        vs_golden: j.vs_golden,
        divergence: j.divergence,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        log_tail,
    }
}

/// The prefill row that goes with a check's decode-step row: the same availability (not run,
/// failed), its own samples and decision.
fn prefill_row(
    step: &E2eSpeed,
    collected: &crate::measure::Collected,
    by_id: &BTreeMap<&str, &BenchResult>,
    policy: &Policy,
    profiles: &[BTreeMap<String, Vec<(u32, Profile)>>; 2],
) -> Option<E2eSpeed> {
    let id = prefill_id(&step.id);
    let c = collected.benches.get(&id)?;
    let prompt_tokens = |s: usize| {
        profiles[s]
            .get(&step.id)
            .and_then(|v| v.first())
            .map_or(0, |(_, p)| p.prompt_ids.len())
    };
    let side = |samples: &[RawSample], s: usize| -> Option<E2eSpeedSide> {
        let (runs_ms, per_round_ms) = rounds_ms(samples);
        let median = stats::median(&per_round_ms)?;
        Some(E2eSpeedSide {
            per_round_ms,
            runs_ms,
            median_ms_per_step: median,
            tok_s: prompt_tokens(s) as f64 * 1e3 / median,
            prefill_ms: median,
            cuda_graph: None,
            paired: samples
                .iter()
                .all(|x| pair_layout(&x.sampling_mode).is_some()),
        })
    };
    let bench = by_id.get(id.as_str());
    let mut row = E2eSpeed {
        id,
        metric: SpeedMetric::Prefill,
        base: side(&c.base, 0),
        head: side(&c.head, 1),
        change: bench.and_then(|b| b.change),
        threshold: bench.map_or(policy.floor, |b| b.threshold),
        threshold_source: bench.map_or(ThresholdSource::Floor, |b| b.threshold_source),
        rounds: bench.map_or(0, |b| b.rounds),
        confirmed: bench.is_some_and(|b| b.confirmed),
        graph_flag: None,
        ..step.clone()
    };
    if row.not_run.is_none() && row.status != Some(Status::Failed) {
        row.status = bench.map(|b| b.status);
        row.note = bench.and_then(|b| b.note.clone());
    } else {
        row.change = None;
    }
    Some(row)
}

fn speed_side(profiles: &[(u32, Profile)]) -> Option<E2eSpeedSide> {
    if profiles.is_empty() {
        return None;
    }
    let runs_ms: Vec<Vec<f64>> = profiles
        .iter()
        .map(|(_, p)| p.runs.iter().map(|r| r.ms_per_step).collect())
        .collect();
    let per_round_ms: Vec<f64> = runs_ms.iter().filter_map(|r| round_ms(r)).collect();
    let median = stats::median(&per_round_ms).unwrap_or(f64::NAN);
    let prefill: Vec<f64> = profiles.iter().map(|(_, p)| p.prefill_ms).collect();
    Some(E2eSpeedSide {
        per_round_ms,
        runs_ms,
        median_ms_per_step: median,
        tok_s: 1e3 / median,
        prefill_ms: stats::median(&prefill).unwrap_or(f64::NAN),
        cuda_graph: profiles.last().and_then(|(_, p)| p.cuda_graph),
        paired: false,
    })
}

/// A speed row's recorded rounds: each round's timed decodes in ms, and each round's number
/// ([`round_ms`]).
fn rounds_ms(samples: &[RawSample]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let runs_ms: Vec<Vec<f64>> = samples
        .iter()
        .map(|x| x.times_ns.iter().map(|t| t / 1e6).collect())
        .collect();
    let per_round = runs_ms.iter().filter_map(|r| round_ms(r)).collect();
    (runs_ms, per_round)
}

/// One call's number: the lower quartile of its timed runs' ms per step, the same robust
/// per-round estimate as a criterion round's (STATS.md section 2).
pub fn round_ms(runs_ms: &[f64]) -> Option<f64> {
    let ones = vec![1.0; runs_ms.len()];
    stats::round_estimate(&ones, runs_ms)
}

/// Flags a change of CUDA-graph captures or fallbacks between base and head.
pub fn graph_flag(
    base: Option<CudaGraphCounters>,
    head: Option<CudaGraphCounters>,
) -> Option<String> {
    let (b, h) = (base?, head?);
    let mut parts = Vec::new();
    if b.enabled != h.enabled {
        parts.push(format!("graph enabled {} → {}", b.enabled, h.enabled));
    }
    if b.captures != h.captures {
        parts.push(format!("captures {} → {}", b.captures, h.captures));
    }
    if b.fallbacks != h.fallbacks {
        parts.push(format!("fallbacks {} → {}", b.fallbacks, h.fallbacks));
    }
    (!parts.is_empty()).then(|| format!("CUDA graph {}", parts.join(", ")))
}

/// `harness e2e`: one revision. Each check: one `engine profile` call (`runs` timed runs) and
/// the oracle, judged; speed shown without a comparison.
pub fn run_single(
    cfg: &E2eConfig,
    checks: &[Check],
    env: &mut SideEnv,
    require_cuda: bool,
    progress: &dyn Progress,
) -> E2eResults {
    let mut correctness = Vec::new();
    let mut speed = Vec::new();
    let mut oracle_cache = OracleCache::new();
    for (i, check) in checks.iter().enumerate() {
        progress.rounds(i as u64, checks.len() as u64, &check.id);
        let prepared = env.prepare(cfg, check);
        let outcome: Result<(Prepared, Profile), Blocked> = prepared.and_then(|p| {
            let tools = env.tools.as_ref().expect("prepared implies tools");
            let prof = tools
                .profile(&profile_request(cfg, check, &p))
                .map_err(Blocked::from_tool)?;
            Ok((p, prof))
        });
        let (head, spd) = match outcome {
            Ok((p, prof)) => {
                let tools = env.tools.as_ref().expect("tools");
                let c = judge_side(
                    tools,
                    check,
                    &p,
                    std::slice::from_ref(&prof),
                    &mut oracle_cache,
                );
                (c, speed_side(&[(0, prof)]))
            }
            Err(b) => (b.side_check(), None),
        };
        speed.push(E2eSpeed {
            id: check.id.clone(),
            metric: SpeedMetric::DecodeStep,
            device: check.device,
            dtype: check.dtype,
            // A check that failed to run is ⛔ here too, not ⏭ (as in `run_compare`).
            status: (head.status == E2eStatus::Failed).then_some(Status::Failed),
            not_run: (spd.is_none() && head.status != E2eStatus::Failed)
                .then(|| head.note.clone().unwrap_or_default()),
            base: None,
            head: spd,
            change: None,
            threshold: 0.0,
            threshold_source: ThresholdSource::Floor,
            rounds: 1,
            confirmed: false,
            note: (head.status == E2eStatus::Failed).then(|| head.note.clone().unwrap_or_default()),
            graph_flag: None,
        });
        correctness.push(E2eCorrectness {
            id: check.id.clone(),
            model: check.model.clone(),
            device: check.device,
            dtype: check.dtype,
            status: head.status,
            base: None,
            head,
            introduced: false,
        });
    }
    progress.rounds(checks.len() as u64, checks.len() as u64, "done");
    E2eResults {
        mode: E2eMode::Single,
        require_cuda,
        correctness,
        speed,
        profile_args: tools::profile_settings(cfg.warmups, cfg.runs, cfg.decode_skip, cfg.threads),
        failures: build_failures(&[env]),
        placement: None,
    }
}

fn build_failures(envs: &[&SideEnv]) -> Vec<Failure> {
    envs.iter()
        .filter_map(|e| {
            e.build_failure.as_ref().map(|m| Failure {
                side: e.side,
                stage: Stage::Build,
                failure: ProcessFailure::bare(format!("end-to-end binaries: {m}")),
            })
        })
        .collect()
}

/// The speed rounds' measurer: "bench target" = check id, and two rows per check: the check id
/// (ms per decode step) and [`prefill_id`] (ms of the prefill). When both sides' engines serve
/// (`engine profile --serve`), a round is **paired** like the micro-benchmarks': both engines
/// keep the model loaded and the harness asks them for one timed decode each in turn, ABBA,
/// `e2e.runs` times per side ([`E2eMeasurer::measure_pair`]); a one-thread CPU check runs both
/// on one CPU (`affinity`). Otherwise one `engine profile` call per side per round, its timed
/// runs as the samples. Every profile is kept for the correctness check and the report;
/// failures are kept with their classification (⏭ or ⛔).
pub struct E2eMeasurer<'a> {
    pub cfg: &'a E2eConfig,
    pub checks: BTreeMap<String, Check>,
    pub tools: [Option<Tools>; 2],
    /// Per side, per check id: resolved inputs, or why not.
    pub prepared: [BTreeMap<String, Result<Prepared, Blocked>>; 2],
    pub profiles: [BTreeMap<String, Vec<(u32, Profile)>>; 2],
    pub failed: [BTreeMap<String, Blocked>; 2],
    /// Where a one-thread CPU check's engines run.
    pub affinity: Affinity,
    /// Per side: whether its engine serves profiles (probed once).
    pub serves: [Option<bool>; 2],
    /// Which engine binaries a round runs: as built, or relinked in the round's function
    /// orders (`placement.sample`; the bench target's name here is `engine`).
    pub placement: Placement,
}

impl E2eMeasurer<'_> {
    /// `side`'s tools for round `round`: its engine relinked in the round's order when placement
    /// is sampled (one relink per side and round, shared by the round's checks).
    fn round_tools(&mut self, sides: &[Side], round: u32) -> Vec<Option<Tools>> {
        let built: Vec<Option<Tools>> = sides.iter().map(|s| self.tools[ix(*s)].clone()).collect();
        if built.iter().any(Option::is_none) {
            return built;
        }
        let engines: Vec<(Side, PathBuf)> = sides
            .iter()
            .zip(&built)
            .map(|(s, t)| (*s, t.as_ref().expect("checked").engine.clone()))
            .collect();
        let pairs: Vec<(Side, &Path)> = engines.iter().map(|(s, p)| (*s, p.as_path())).collect();
        let run = self.placement.exes("engine", &pairs, round);
        built
            .into_iter()
            .zip(run)
            .map(|(t, engine)| t.map(|t| Tools { engine, ..t }))
            .collect()
    }
}

/// The row id of a check's prefill time.
pub fn prefill_id(check: &str) -> String {
    format!("{check}/prefill")
}

/// A speed row's samples of one round: one per timed decode, ns.
fn row(id: String, round: u32, mode: &str, times_ms: Vec<f64>) -> Measured {
    Measured {
        id,
        throughput: None,
        sample: RawSample {
            round,
            sampling_mode: mode.into(),
            iters: vec![1.0; times_ms.len()],
            times_ns: times_ms.iter().map(|t| t * 1e6).collect(),
            ..RawSample::default()
        },
    }
}

fn ix(side: Side) -> usize {
    match side {
        Side::Base => 0,
        Side::Head => 1,
    }
}

impl Measurer for E2eMeasurer<'_> {
    fn has_target(&self, side: Side, target: &str) -> bool {
        matches!(self.prepared[ix(side)].get(target), Some(Ok(_)))
    }

    /// A CPU check whose engine runs more than one thread (`e2e.threads` other than 1).
    fn multi_threaded(&self, target: &str, _id: &str) -> bool {
        self.cfg.threads != 1
            && self
                .checks
                .get(target)
                .is_some_and(|c| c.device == Device::Cpu)
    }

    /// One unit per check, whatever the filter: a paired run measures both its rows.
    fn bench_ids(&self, side: Side, target: &str, _filter: Option<&str>) -> Option<Vec<String>> {
        self.has_target(side, target)
            .then(|| vec![target.to_string()])
    }

    fn can_pair(&mut self, side: Side, _target: &str) -> Result<(), String> {
        let s = ix(side);
        let serves = match self.serves[s] {
            Some(b) => b,
            None => {
                let b = self.tools[s].as_ref().is_some_and(Tools::can_serve_profile);
                self.serves[s] = Some(b);
                b
            }
        };
        if serves {
            Ok(())
        } else {
            Err(format!(
                "the {} engine has no `profile --serve` (its revision predates it)",
                side.name()
            ))
        }
    }

    /// Both engines relinked for the round before it starts (not between two timed decodes).
    fn begin_round(&mut self, round: u32, _targets: &[&str]) {
        self.round_tools(&Side::BOTH, round);
    }

    fn measure_pair(
        &mut self,
        target: &str,
        _id: &str,
        order: [Side; 2],
        round: u32,
    ) -> Result<Vec<(Side, Measured)>, (Side, ProcessFailure)> {
        let Some(check) = self.checks.get(target).cloned() else {
            return Err((order[0], ProcessFailure::bare(format!("no check {target}"))));
        };
        let cpu = (check.device == Device::Cpu)
            .then(|| self.affinity.cpu_for_threads(self.cfg.threads))
            .flatten();
        let mut servers = Vec::with_capacity(2);
        let round_tools = self.round_tools(&order, round);
        for (i, side) in order.into_iter().enumerate() {
            let s = ix(side);
            let (Some(Ok(p)), Some(tools)) =
                (self.prepared[s].get(target), round_tools[i].as_ref())
            else {
                return Err((
                    side,
                    ProcessFailure::bare(format!("{target} is not prepared on {}", side.name())),
                ));
            };
            match tools.profile_server(&profile_request(self.cfg, &check, p), cpu) {
                Ok(server) => servers.push(server),
                Err(f) => {
                    for server in servers {
                        let _ = server.fail(String::new());
                    }
                    let pf = f.failure.clone();
                    self.failed[s].insert(target.to_string(), Blocked::from_tool(f));
                    return Err((side, pf));
                }
            }
        }
        // ABBA over the requests, as the benchmarks' samples (measure/serve.rs). The first
        // decode after the other engine ran is not timed: it finds the caches holding the other
        // engine's model, and its prefill took ~40 % longer than the next one's on the tiny
        // model (harness/eval/results/noise/ground-truth/; STATS.md section 11).
        // The round is sized by time as well (`e2e.measurement_s`): after the `runs` minimum,
        // more pairs until the requests took that long, stopping only after whole ABBA quads so
        // both orders count alike.
        let mut runs: [Vec<tools::ServedRun>; 2] = Default::default();
        let mut failure = None;
        let mut last = None;
        let min_runs = self.cfg.runs.max(1);
        let budget = std::time::Duration::from_secs_f64(self.cfg.measurement_s);
        let started = std::time::Instant::now();
        'requests: for i in 0..E2E_MAX_RUNS.max(min_runs) {
            if i >= min_runs && (budget.is_zero() || (i % 2 == 0 && started.elapsed() >= budget)) {
                break;
            }
            let turn = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in turn {
                let warm = if last == Some(k) {
                    Ok(())
                } else {
                    servers[k].run().map(|_| ())
                };
                last = Some(k);
                match warm.and_then(|()| servers[k].run()) {
                    Ok(r) => runs[k].push(r),
                    Err(e) => {
                        failure = Some((k, e));
                        break 'requests;
                    }
                }
            }
        }
        let mut servers = servers.into_iter();
        let (a, b) = (servers.next().expect("two"), servers.next().expect("two"));
        let finished = match failure {
            Some((k, message)) => {
                let fs = [a, b].map(|srv| srv.fail(message.clone()));
                Err((k, fs[k].clone()))
            }
            None => match (a.finish(), b.finish()) {
                (Ok(pa), Ok(pb)) => Ok([pa, pb]),
                (Err(f), _) => Err((0, f)),
                (_, Err(f)) => Err((1, f)),
            },
        };
        let profiles = match finished {
            Ok(p) => p,
            Err((k, f)) => {
                let side = order[k];
                let pf = f.failure.clone();
                self.failed[ix(side)].insert(target.to_string(), Blocked::from_tool(f));
                return Err((side, pf));
            }
        };
        // Each row in the thread's CPU time where both engines report it for every run and
        // neither waits off the CPU more than the other (`measure::clock`); else wall time.
        let allowed =
            check.device == Device::Cpu && self.affinity.cpu_clock_for_threads(self.cfg.threads);
        let step = |r: &tools::ServedRun| Timing {
            wall: r.ms_per_step * 1e6,
            thread_cpu: r.cpu_ms_per_step.map(|t| t * 1e6),
            process_cpu: None,
        };
        let prefill = |r: &tools::ServedRun| Timing {
            wall: r.prefill_ms * 1e6,
            thread_cpu: r.cpu_prefill_ms.map(|t| t * 1e6),
            process_cpu: None,
        };
        let step_t = runs
            .each_ref()
            .map(|v| v.iter().map(step).collect::<Vec<_>>());
        let prefill_t = runs
            .each_ref()
            .map(|v| v.iter().map(prefill).collect::<Vec<_>>());
        let cpu_step = clock::choose(&step_t[0], &step_t[1], allowed).is_ok();
        let cpu_prefill = clock::choose(&prefill_t[0], &prefill_t[1], allowed).is_ok();
        let mut out = Vec::new();
        for (k, (side, prof)) in order.into_iter().zip(profiles).enumerate() {
            self.profiles[ix(side)]
                .entry(target.to_string())
                .or_default()
                .push((round, prof));
            for (id, times, cpu) in [
                (target.to_string(), &step_t[k], cpu_step),
                (prefill_id(target), &prefill_t[k], cpu_prefill),
            ] {
                let iters = vec![1.0; times.len()];
                let sample = clocked_sample(round, SAMPLING_MODE_WARM, iters, times, cpu);
                out.push((
                    side,
                    Measured {
                        id,
                        throughput: None,
                        sample,
                    },
                ));
            }
        }
        Ok(out)
    }

    fn measure(
        &mut self,
        side: Side,
        target: &str,
        _filter: Option<&str>,
        round: u32,
    ) -> Result<BTreeMap<String, Measured>, ProcessFailure> {
        let s = ix(side);
        let round_tools = self.round_tools(&[side], round);
        let (Some(check), Some(Ok(p)), Some(tools)) = (
            self.checks.get(target),
            self.prepared[s].get(target),
            round_tools[0].as_ref(),
        ) else {
            return Err(ProcessFailure {
                message: format!("{target} is not prepared on {}", side.name()),
                log_tail: Vec::new(),
            });
        };
        match tools.profile(&profile_request(self.cfg, check, p)) {
            Ok(prof) => {
                let steps: Vec<f64> = prof.runs.iter().map(|r| r.ms_per_step).collect();
                // A plain call reports one prefill time (the median of its runs).
                let prefill = vec![prof.prefill_ms]
                    .into_iter()
                    .filter(|t| *t > 0.0)
                    .collect();
                self.profiles[s]
                    .entry(target.to_string())
                    .or_default()
                    .push((round, prof));
                let mut out = BTreeMap::from([(
                    target.to_string(),
                    row(target.to_string(), round, "flat", steps),
                )]);
                let pre = row(prefill_id(target), round, "flat", prefill);
                if !pre.sample.times_ns.is_empty() {
                    out.insert(pre.id.clone(), pre);
                }
                Ok(out)
            }
            Err(f) => {
                let rf = ProcessFailure {
                    message: f.failure.message.clone(),
                    log_tail: f.failure.log_tail.clone(),
                };
                self.failed[s].insert(target.to_string(), Blocked::from_tool(f));
                Err(rf)
            }
        }
    }
}

/// Whether [`run_compare`] times the checks.
#[derive(Clone, Debug, PartialEq)]
pub enum SpeedRounds {
    /// Speed rounds: this many in the first pass, then as [`crate::gate::measure_and_decide`].
    Timed(u32),
    /// One round (each check decoded by both sides as a round does, for correctness only: no
    /// speed is decided); the speed rows are ⏭ without numbers, saying that `suite` does not
    /// time them (its `e2e_timed: false`).
    Untimed { suite: String },
}

/// The end-to-end part of `harness compare`: speed rounds (ABBA, first pass, confirmation rounds
/// for suspects, final pass: [`crate::gate::measure_and_decide`]) over every check both sides
/// can run, then each side's correctness from the tokens its timed runs produced. Untimed
/// ([`SpeedRounds::Untimed`]): one round, whose tokens are judged, and no speed decision.
pub fn run_compare(
    cfg: &E2eConfig,
    checks: &[Check],
    base: &mut SideEnv,
    head: &mut SideEnv,
    policy: &Policy,
    speed_rounds: SpeedRounds,
    require_cuda: bool,
    affinity: Affinity,
    placement: Placement,
    progress: &dyn Progress,
) -> E2eResults {
    let mut prepared: [BTreeMap<String, Result<Prepared, Blocked>>; 2] = Default::default();
    for check in checks {
        progress.stage(&format!("e2e: preparing {}", check.id));
        for env in [&mut *base, &mut *head] {
            let p = env.prepare(cfg, check);
            prepared[ix(env.side)].insert(check.id.clone(), p);
        }
    }
    let mut m = E2eMeasurer {
        cfg,
        checks: checks.iter().map(|c| (c.id.clone(), c.clone())).collect(),
        tools: [base.tools.clone(), head.tools.clone()],
        prepared,
        profiles: Default::default(),
        failed: Default::default(),
        affinity,
        serves: [None, None],
        placement,
    };
    let plan: Vec<TargetPlan> = checks
        .iter()
        .map(|c| TargetPlan {
            target: c.id.clone(),
            filter: None,
        })
        .collect();
    let (collected, benches) = match &speed_rounds {
        SpeedRounds::Timed(rounds) => {
            progress.stage(&format!(
                "e2e: {} check(s), {rounds} interleaved rounds of `engine profile`",
                checks.len()
            ));
            crate::gate::measure_and_decide(&mut m, &plan, policy, *rounds, None, None, progress)
        }
        SpeedRounds::Untimed { suite } => {
            progress.stage(&format!(
                "e2e: {} check(s), one round of decodes per side, for correctness (suite {suite} does not time them)",
                checks.len()
            ));
            let mut collected = crate::measure::Collected::default();
            crate::measure::run_rounds(
                &mut m,
                &plan,
                0,
                1,
                false,
                &mut collected,
                &mut |d, t, w| progress.rounds(d, t, w),
            );
            (collected, Vec::new())
        }
    };
    m.placement.clear();
    let placed = m.placement.describe();
    let by_id: BTreeMap<&str, &BenchResult> = benches.iter().map(|b| (b.id.as_str(), b)).collect();

    let mut oracle_cache: [OracleCache; 2] = Default::default();
    let mut correctness = Vec::new();
    let mut speed = Vec::new();
    for check in checks {
        progress.stage(&format!("e2e: checking {} against the oracle", check.id));
        let side_check = |s: usize, oc: &mut OracleCache| -> E2eSideCheck {
            let blocked = match &m.prepared[s][&check.id] {
                Err(b) => Some(b.clone()),
                Ok(_) => m.failed[s].get(&check.id).cloned(),
            };
            let profiles: Vec<Profile> = m.profiles[s]
                .get(&check.id)
                .map(|v| v.iter().map(|(_, p)| p.clone()).collect())
                .unwrap_or_default();
            match (blocked, &m.prepared[s][&check.id], &m.tools[s]) {
                (Some(b), _, _) if profiles.is_empty() => b.side_check(),
                (_, Ok(p), Some(tools)) if !profiles.is_empty() => {
                    let mut c = judge_side(tools, check, p, &profiles, oc);
                    if let Some(b) = m.failed[s].get(&check.id) {
                        // It ran, then failed in a later round: the tokens it gave are judged,
                        // and the failure makes the row ⛔ unless it already diverged.
                        if c.status != E2eStatus::Diverged {
                            c.status = E2eStatus::Failed;
                        }
                        let note = format!("a later call failed: {}", b.reason());
                        c.note = Some(match c.note {
                            Some(n) => format!("{n}; {note}"),
                            None => note,
                        });
                    }
                    c
                }
                _ => Blocked::Failed {
                    message: "no engine profile was recorded".into(),
                    log_tail: Vec::new(),
                }
                .side_check(),
            }
        };
        let [oc_base, oc_head] = &mut oracle_cache;
        let b = side_check(0, oc_base);
        let h = side_check(1, oc_head);
        let introduced = b.status == E2eStatus::Identical
            && matches!(h.status, E2eStatus::Diverged | E2eStatus::NearTie);
        let not_run_reason = |c: &E2eSideCheck| c.note.clone().unwrap_or_default();

        // The rows show what was decided on: the rounds' samples (paired requests, or each
        // call's timed runs), with the last call's CUDA-graph counters and prefill.
        let sides = |s: usize, samples: fn(&crate::measure::Collect) -> &Vec<RawSample>| {
            let profiles = m.profiles[s].get(&check.id).map_or(&[][..], |v| v);
            let mut side = speed_side(profiles)?;
            if let Some(c) = collected.benches.get(&check.id) {
                (side.runs_ms, side.per_round_ms) = rounds_ms(samples(c));
                side.paired = samples(c)
                    .iter()
                    .all(|x| pair_layout(&x.sampling_mode).is_some());
                if let Some(med) = stats::median(&side.per_round_ms) {
                    side.median_ms_per_step = med;
                    side.tok_s = 1e3 / med;
                }
            }
            Some(side)
        };
        let base_side = sides(0, |c| &c.base);
        let head_side = sides(1, |c| &c.head);
        let bench = by_id.get(check.id.as_str());
        let mut row = E2eSpeed {
            id: check.id.clone(),
            metric: SpeedMetric::DecodeStep,
            device: check.device,
            dtype: check.dtype,
            status: None,
            not_run: None,
            base: base_side.clone(),
            head: head_side.clone(),
            change: bench.and_then(|b| b.change),
            threshold: bench.map_or(policy.floor, |b| b.threshold),
            threshold_source: bench.map_or(ThresholdSource::Floor, |b| b.threshold_source),
            rounds: bench.map_or(0, |b| b.rounds),
            confirmed: bench.is_some_and(|b| b.confirmed),
            note: None,
            graph_flag: graph_flag(
                base_side.as_ref().and_then(|s| s.cuda_graph),
                head_side.as_ref().and_then(|s| s.cuda_graph),
            ),
        };
        match (h.status, b.status) {
            (E2eStatus::NotRun, _) => row.not_run = Some(not_run_reason(&h)),
            _ if m.failed[1].contains_key(&check.id) || head_side.is_none() => {
                row.status = Some(Status::Failed);
                row.note = Some(format!("head failed to run: {}", not_run_reason(&h)));
            }
            (_, E2eStatus::NotRun) => {
                row.not_run = Some(format!("base not run: {}", not_run_reason(&b)));
            }
            _ if m.failed[0].contains_key(&check.id) || base_side.is_none() => {
                row.not_run = Some(format!(
                    "not compared: base failed to run ({})",
                    not_run_reason(&b)
                ));
            }
            _ => {
                row.status = bench.map(|b| b.status);
                row.note = bench.and_then(|b| b.note.clone());
            }
        }
        if let SpeedRounds::Untimed { suite } = &speed_rounds
            && row.not_run.is_none()
            && row.status.is_none()
        {
            row.not_run = Some(format!(
                "not timed: suite {suite} checks these decodes for correctness only \
                 (`e2e_timed: false` in harness.yaml)"
            ));
            // One round's times decide nothing: no numbers beside the ⏭ to be read as a
            // comparison (a ⏭ row for want of a device has none either).
            (row.base, row.head, row.graph_flag) = (None, None, None);
        }
        if row.not_run.is_some() {
            row.change = None;
        }
        if let Some(flag) = &row.graph_flag
            && matches!(
                row.status,
                Some(Status::NoChange | Status::Improvement | Status::TooNoisy)
            )
        {
            row.status = Some(Status::PossibleRegression);
            row.note = Some(match row.note.take() {
                Some(n) => format!("{flag}; {n}"),
                None => format!("{flag}: check the decode step still runs as one graph"),
            });
        }
        let prefill = prefill_row(&row, &collected, &by_id, policy, &m.profiles);
        speed.push(row);
        speed.extend(prefill);
        correctness.push(E2eCorrectness {
            id: check.id.clone(),
            model: check.model.clone(),
            device: check.device,
            dtype: check.dtype,
            status: h.status,
            base: Some(b),
            head: h,
            introduced,
        });
    }
    E2eResults {
        mode: E2eMode::Compare,
        require_cuda,
        correctness,
        speed,
        profile_args: tools::profile_settings(cfg.warmups, cfg.runs, cfg.decode_skip, cfg.threads),
        failures: build_failures(&[base, head]),
        placement: Some(placed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn cfg() -> E2eConfig {
        let text = "packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [t, p]\ne2e:\n  cases:\n    t:\n      model: tiny\n      goldens: all\n      devices: [cpu, cuda]\n    p:\n      model: pkg\n      prompts: {hi: Hello}\n";
        Config::parse(text, Path::new("h.yaml"))
            .unwrap()
            .e2e
            .unwrap()
    }

    #[test]
    fn an_input_named_twice_is_an_error_and_a_case_named_twice_is_one() {
        let text = "packages: [engine]\ndefault_suite: s\nsuites:\n  s:\n    e2e: [t]\ne2e:\n  cases:\n    t:\n      model: tiny\n      goldens: [a]\n      prompts: {a: Hello}\n    p:\n      model: pkg\n      prompts: {hi: Hello}\n";
        let c = Config::parse(text, Path::new("h.yaml"))
            .unwrap()
            .e2e
            .unwrap();
        let dir = tempfile::TempDir::new().unwrap();
        let e = plan_checks(&c, &["t".into()], &[], dir.path()).unwrap_err();
        assert!(
            e.contains("e2e case t") && e.contains("\"a\" is named twice"),
            "{e}"
        );
        let checks = plan_checks(&c, &["p".into(), "p".into()], &[], dir.path()).unwrap();
        assert_eq!(checks.len(), 1);
    }

    #[test]
    fn checks_are_cases_times_prompts_times_devices() {
        let dir = tempfile::TempDir::new().unwrap();
        let g = dir.path().join("goldens/tiny");
        std::fs::create_dir_all(&g).unwrap();
        for n in ["b", "a"] {
            std::fs::write(g.join(format!("{n}.json")), "{}").unwrap();
        }
        std::fs::write(g.join("README.md"), "").unwrap();
        let all = plan_checks(&cfg(), &[], &[], dir.path()).unwrap();
        let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "p/hi/cpu-f32",
                "t/a/cpu-f32",
                "t/b/cpu-f32",
                "t/a/cuda-f32",
                "t/b/cuda-f32"
            ]
        );
        assert_eq!(all[1].input, Input::Golden("a".into()));
        let cuda = plan_checks(&cfg(), &["t".into()], &[Device::Cuda], dir.path()).unwrap();
        assert_eq!(cuda.len(), 2);
        assert!(cuda.iter().all(|c| c.device == Device::Cuda));
        let e = plan_checks(&cfg(), &["x".into()], &[], dir.path()).unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("cases: p, t"), "{e}");
        let empty = tempfile::TempDir::new().unwrap();
        let e = plan_checks(&cfg(), &["t".into()], &[], empty.path()).unwrap_err();
        assert!(e.contains("goldens: all"), "{e}");
    }

    #[test]
    fn graph_counter_changes_are_flagged() {
        let g = |captures, fallbacks| CudaGraphCounters {
            enabled: true,
            captures,
            replays: 30,
            fallbacks,
        };
        assert_eq!(graph_flag(Some(g(1, 0)), Some(g(1, 0))), None);
        assert_eq!(
            graph_flag(Some(g(1, 0)), Some(g(1, 31))).as_deref(),
            Some("CUDA graph fallbacks 0 → 31")
        );
        assert_eq!(
            graph_flag(Some(g(1, 0)), Some(g(3, 0))).as_deref(),
            Some("CUDA graph captures 1 → 3")
        );
        // CPU rows have no counters: nothing to flag.
        assert_eq!(graph_flag(None, None), None);
    }

    #[test]
    fn a_rounds_number_is_the_lower_quartile_of_its_runs() {
        assert_eq!(round_ms(&[1.0, 2.0, 3.0, 4.0, 5.0]), Some(2.0));
        assert_eq!(round_ms(&[]), None);
    }
}
