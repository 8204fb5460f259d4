//! `harness noise`: how quiet this machine's measurements are. A/A rounds of one revision (one
//! build, the same executables on both sides, measured exactly as `compare` measures), and per
//! benchmark the diagnostics of `stats::diagnose`: per-round sd of the A/A log ratio, tail share,
//! lag-1 autocorrelation, bimodality, the effect of a switch between sides. `--against KEY=VALUE`
//! measures a second way of measuring in the same run, round by round in turn with the
//! configured one (ABBA over the two), so a change to the measurement is judged by before/after
//! figures taken under the same conditions. `--from FILE` reads a saved run instead (a
//! `harness compare` results.json, or the JSON this command writes) and measures nothing.
//! For users: "is my runner quiet enough?"; for us: where the noise comes from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use super::Common;
use crate::build::build_side;
use crate::cache::slot_target_dir;
use crate::config::{AffinityConfig, CriterionSettings, Pin};
use crate::git::{Checkout, Repo};
use crate::host;
use crate::measure::serve::{SAMPLING_MODE_WARM, pair_layout};
use crate::measure::{
    Affinity, Collected, CriterionMeasurer, Placement, instructions, plan_for, run_rounds,
};
use crate::progress::{Progress, Ui};
use crate::report::format::short_sha as short;
use crate::results::{HostInfo, RawSample, Results, RoundInfo, now_unix};
use crate::stats::{BIMODAL_BC, NoiseRound, NoiseRow, TAIL_FACTOR, diagnose};
use crate::vocab::Side;

pub const SCHEMA: &str = "harness-noise/1";

/// Output format of `harness noise`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NoiseFormat {
    Md,
    Json,
}

/// A/A rounds of one revision → per-benchmark noise diagnostics.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Revision to measure (default: HEAD).
    #[arg(long)]
    rev: Option<String>,
    /// Measure a second variant in the same run, rounds alternating with the configured one:
    /// `pin=off|one_cpu`, `warm_up_s=S`, `measurement_s=S`, `sample_size=N`,
    /// `processes_per_round=K` (repeat the flag to change several).
    #[arg(long = "against", value_name = "KEY=VALUE")]
    against: Vec<String>,
    /// Analyse a saved run instead of measuring: a `harness compare` results.json or a file this
    /// command wrote with `--out`.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Where to write the JSON (diagnostics and every raw sample, so `--from` can read it again).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also count each single-threaded benchmark's instructions per iteration this many times
    /// (callgrind, after the rounds) and report their spread: counts are held to 0.1 %.
    #[arg(long, default_value_t = 0, value_name = "N")]
    instructions: u32,
    /// A benchmark is quiet when its per-round sd is at most this (0.03 = 3 %).
    #[arg(long, default_value_t = 0.03)]
    target: f64,
    #[arg(long, value_enum, default_value = "md")]
    format: NoiseFormat,
    #[command(flatten)]
    common: Common,
}

/// One way of measuring and what it saw.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    /// The settings it measured with, in words.
    pub setup: String,
    pub rows: Vec<NoiseRow>,
    /// Per benchmark: each side's raw samples (base = the A of A/A).
    #[serde(default)]
    pub samples: BTreeMap<String, [Vec<RawSample>; 2]>,
    #[serde(default)]
    pub rounds: Vec<RoundInfo>,
    /// Per benchmark: instructions per iteration of each repeated count (`--instructions N`),
    /// or why they could not be counted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instructions: BTreeMap<String, Result<Vec<f64>, String>>,
}

/// (max − min) / median of repeated instruction counts.
pub fn spread(counts: &[f64]) -> Option<f64> {
    let med = crate::stats::median(counts)?;
    let max = counts.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let min = counts.iter().cloned().fold(f64::INFINITY, f64::min);
    (med > 0.0 && counts.len() > 1).then(|| (max - min) / med)
}

/// A benchmark's repeated counts: (spread, how many, median), or why there are none.
type Spread = Result<(f64, usize, f64), String>;

/// What `harness noise` writes (`--out`) and prints (`--format json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NoiseRun {
    pub schema: String,
    pub created_unix_s: f64,
    /// What was measured: the revision, or the saved run read.
    pub source: String,
    pub suite: String,
    pub host: HostInfo,
    /// How much time the host took from a spinning thread on the benchmarks' CPU, before and
    /// after the rounds (`host::lost_time`). Empty for a saved run that has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_time: Vec<crate::results::LostTime>,
    pub target: f64,
    pub variants: Vec<Variant>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let run = match &args.from {
        Some(path) => from_file(path, args.target)?,
        None => measure(&args, &Ui::new())?,
    };
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(out, serde_json::to_string_pretty(&run)?)
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    match args.format {
        NoiseFormat::Md => super::out(&markdown(&run))?,
        NoiseFormat::Json => {
            // Without the raw samples: --out keeps those.
            let mut lean = run.clone();
            for v in &mut lean.variants {
                v.samples.clear();
            }
            super::out(&format!("{}\n", serde_json::to_string_pretty(&lean)?))?;
        }
    }
    Ok(0)
}

/// The rounds of each benchmark as `diagnose` takes them: per round, the side that went first
/// first (the round's order), paired when both samples were.
fn noise_rounds(
    samples: &BTreeMap<String, [Vec<RawSample>; 2]>,
    rounds: &[RoundInfo],
) -> Vec<(String, Vec<NoiseRound>)> {
    let base_first = |r: u32| {
        rounds
            .iter()
            .find(|i| i.index == r)
            .map(|i| i.order != "BA")
            .unwrap_or(r.is_multiple_of(2))
    };
    samples
        .iter()
        .map(|(id, [base, head])| {
            let rs = base
                .iter()
                .filter_map(|b| {
                    let h = head.iter().find(|h| h.round == b.round)?;
                    let per = |s: &RawSample| -> Vec<f64> {
                        s.times_ns
                            .iter()
                            .zip(&s.iters)
                            .map(|(t, n)| t / n)
                            .collect()
                    };
                    let (first, second) = if base_first(b.round) {
                        (per(b), per(h))
                    } else {
                        (per(h), per(b))
                    };
                    Some(NoiseRound {
                        first,
                        second,
                        base_first: base_first(b.round),
                        layout: pair_layout(&b.sampling_mode)
                            .filter(|_| b.sampling_mode == h.sampling_mode),
                    })
                })
                .collect();
            (id.clone(), rs)
        })
        .collect()
}

fn variant(
    name: &str,
    setup: String,
    samples: BTreeMap<String, [Vec<RawSample>; 2]>,
    rounds: Vec<RoundInfo>,
) -> Variant {
    let rows = noise_rounds(&samples, &rounds)
        .iter()
        .map(|(id, rs)| diagnose(id, rs))
        .collect();
    Variant {
        name: name.into(),
        setup,
        rows,
        samples,
        rounds,
        instructions: BTreeMap::new(),
    }
}

/// A saved `harness compare` run or `harness noise` output (either gzip-compressed), analysed
/// again.
pub fn from_file(path: &Path, target: f64) -> anyhow::Result<NoiseRun> {
    let text = super::read_saved_text(path, u64::MAX)?;
    if let Ok(mut run) = serde_json::from_str::<NoiseRun>(&text)
        && run.schema == SCHEMA
    {
        for v in &mut run.variants {
            let instructions = std::mem::take(&mut v.instructions);
            *v = variant(
                &v.name,
                v.setup.clone(),
                std::mem::take(&mut v.samples),
                std::mem::take(&mut v.rounds),
            );
            v.instructions = instructions;
        }
        run.target = target;
        run.source = format!("{} ({})", path.display(), run.source);
        return Ok(run);
    }
    let r: Results = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: neither a {SCHEMA} file nor a harness-results/1 file",
            path.display()
        )
    })?;
    let mut samples: BTreeMap<String, [Vec<RawSample>; 2]> = r
        .benches
        .iter()
        .filter_map(|b| {
            Some((
                b.id.clone(),
                [
                    b.base.as_ref()?.samples.clone(),
                    b.head.as_ref()?.samples.clone(),
                ],
            ))
        })
        .collect();
    // End-to-end speed rows: each round's timed decodes (ms) as that round's samples.
    for row in r.e2e.iter().flat_map(|e| &e.speed) {
        let (Some(b), Some(h)) = (&row.base, &row.head) else {
            continue;
        };
        let side = |s: &crate::results::E2eSpeedSide| -> Vec<RawSample> {
            s.runs_ms
                .iter()
                .enumerate()
                .map(|(i, ms)| RawSample {
                    round: i as u32,
                    // Paired end-to-end decodes drop each side's first request after a switch
                    // (since 2026-12-01): the warm layout.
                    sampling_mode: if s.paired { SAMPLING_MODE_WARM } else { "flat" }.into(),
                    iters: vec![1.0; ms.len()],
                    times_ns: ms.iter().map(|t| t * 1e6).collect(),
                    ..Default::default()
                })
                .collect()
        };
        samples.insert(format!("e2e {}", row.id), [side(b), side(h)]);
    }
    Ok(NoiseRun {
        schema: SCHEMA.into(),
        created_unix_s: now_unix(),
        source: format!(
            "{} ({} {} vs {})",
            path.display(),
            r.suite,
            short(&r.base.sha),
            short(&r.head.sha)
        ),
        suite: r.suite.clone(),
        host: r.host.clone(),
        lost_time: r.lost_time.clone(),
        target,
        variants: vec![variant(
            "saved",
            r.method.sampling.clone().unwrap_or_default(),
            samples,
            r.rounds.clone(),
        )],
    })
}

/// A way of measuring: the criterion settings and the affinity.
#[derive(Clone, Debug)]
struct Setup {
    criterion: CriterionSettings,
    /// The suite's settings for multi-threaded rows; `--against` drops it (its changes apply
    /// to every row).
    criterion_multi_threaded: Option<CriterionSettings>,
    affinity: AffinityConfig,
    /// Sample code placement (`placement.sample`): each round's own function order per side.
    placement: bool,
}

impl Setup {
    fn describe(&self) -> String {
        let c = &self.criterion;
        format!(
            "{}; warm-up {} s, measurement {} s, {} samples, {} process pair(s) per round; {}; \
             code placement {}",
            if c.paired { "paired" } else { "criterion runs" },
            c.warm_up_s,
            c.measurement_s,
            c.sample_size,
            c.processes_per_round,
            Affinity::from_config(&self.affinity).describe(),
            if self.placement { "sampled" } else { "fixed" }
        )
    }

    /// This setup with `key=value` changes.
    fn with(&self, changes: &[String]) -> anyhow::Result<Setup> {
        let mut s = self.clone();
        s.criterion_multi_threaded = None;
        for kv in changes {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("--against {kv:?}: expected KEY=VALUE");
            };
            let num = || {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .with_context(|| format!("--against {kv}: {v:?} is not a positive number"))
            };
            match k {
                "pin" => {
                    s.affinity.pin = match v {
                        "off" => Pin::Off,
                        "one_cpu" => Pin::OneCpu,
                        _ => bail!("--against {kv}: pin is `off` or `one_cpu`"),
                    }
                }
                "warm_up_s" => s.criterion.warm_up_s = num()?,
                "processes_per_round" => {
                    let n = num()?;
                    if n.fract() != 0.0 {
                        bail!("--against {kv}: processes_per_round is a whole number");
                    }
                    s.criterion.processes_per_round = n as u32;
                }
                "measurement_s" => s.criterion.measurement_s = num()?,
                "placement" => {
                    s.placement = match v {
                        "sampled" => true,
                        "fixed" => false,
                        _ => bail!("--against {kv}: placement is `sampled` or `fixed`"),
                    }
                }
                "sample_size" => {
                    let n = num()?;
                    if n.fract() != 0.0 || n < 2.0 {
                        bail!("--against {kv}: sample_size is a whole number ≥ 2");
                    }
                    s.criterion.sample_size = n as u32;
                }
                _ => bail!(
                    "--against {kv}: unknown key {k:?} (pin, warm_up_s, measurement_s, \
                     sample_size, processes_per_round, placement)"
                ),
            }
        }
        Ok(s)
    }
}

fn measure(args: &Args, progress: &dyn Progress) -> anyhow::Result<NoiseRun> {
    let r = args.common.resolve()?;
    let config = &r.config;
    let suite = config.suite(&r.suite).map_err(anyhow::Error::msg)?;
    let criterion = suite
        .criterion
        .clone()
        .unwrap_or_else(|| config.criterion.clone());
    let rounds = args
        .common
        .rounds
        .or(suite.rounds)
        .unwrap_or(config.policy.rounds as u32);
    if rounds < 2 {
        bail!("--rounds {rounds}: a per-round sd needs at least 2 rounds");
    }
    let configured = Setup {
        criterion,
        criterion_multi_threaded: suite.criterion_multi_threaded.clone(),
        affinity: config.affinity.clone(),
        placement: config.placement.samples_in(&r.suite),
    };
    let mut setups = vec![("configured", configured.clone())];
    if !args.against.is_empty() {
        setups.push(("against", configured.with(&args.against)?));
    }
    let plan = plan_for(config, &r.suite)?;
    if plan.is_empty() {
        bail!(
            "suite {:?} has no benchmarks to measure (its end-to-end checks are not measured by `harness noise`)",
            r.suite
        );
    }
    let targets: Vec<String> = plan.iter().map(|p| p.target.clone()).collect();
    let repo = Repo::open(&r.repo_root)?;
    let rev = repo.resolve(args.rev.as_deref().unwrap_or("HEAD"))?;
    std::fs::create_dir_all(&r.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", r.cache_dir.display()))?;
    let wt = repo.checkout(
        Side::Base.name(),
        Checkout::Commit(rev.sha.clone()),
        &r.cache_dir,
    )?;
    let exes = build_side(
        Side::Base,
        &wt.path,
        &slot_target_dir(&r.cache_dir, Side::Base),
        config,
        &targets,
        progress,
    )
    .map_err(|f| anyhow::anyhow!("{}\n{}", f.failure.message, f.failure.log_tail.join("\n")))?;
    wt.release()?;
    let work_dir = r.cache_dir.join("runs").join("noise");
    let mut collected: Vec<Collected> = vec![Collected::default(); setups.len()];
    let mut measurers: Vec<CriterionMeasurer> = setups
        .iter()
        .enumerate()
        .map(|(i, (_, s))| CriterionMeasurer {
            base: exes.clone(),
            head: exes.clone(),
            args: s.criterion.args(),
            work_dir: work_dir.clone(),
            on_line: Box::new(|_| {}),
            pair: s
                .criterion
                .paired
                .then(|| s.criterion.pair_settings(&config.deadlines)),
            pair_multi_threaded: s
                .criterion_multi_threaded
                .as_ref()
                .filter(|_| s.criterion.paired)
                .map(|c| c.pair_settings(&config.deadlines)),
            serves: BTreeMap::new(),
            affinity: Affinity::from_config(&s.affinity),
            deadline: config.deadlines.bench(),
            // Both sides are the one build: an A/A of two function orders per round.
            placement: Placement::new(
                s.placement,
                exes.by_target.values().map(PathBuf::as_path),
                &work_dir.join(format!("placement-{i}")),
                config.deadlines.build(),
            ),
        })
        .collect();
    let n = setups.len();
    let mut lost_time = vec![super::probe_host(
        &config.affinity,
        "before the rounds",
        progress,
    )];
    for round in 0..rounds {
        // The variants in turn, ABBA over rounds, so a drift of the machine hits both alike.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..n).collect()
        } else {
            (0..n).rev().collect()
        };
        for v in order {
            progress.stage(&format!(
                "A/A round {}/{rounds} of {}{}",
                round + 1,
                short(&rev.sha),
                if n > 1 {
                    format!(" ({})", setups[v].0)
                } else {
                    String::new()
                }
            ));
            let _ = std::fs::remove_dir_all(&work_dir);
            run_rounds(
                &mut measurers[v],
                &plan,
                round,
                1,
                false,
                &mut collected[v],
                &mut |d, t, w| progress.rounds(d, t, w),
            );
            if let Some(f) = collected[v].failures.first() {
                bail!(
                    "A/A round {}: {}\n{}",
                    round + 1,
                    f.failure.message,
                    f.failure.log_tail.join("\n")
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work_dir);
    lost_time.push(super::probe_host(
        &config.affinity,
        "after the rounds",
        progress,
    ));
    let mut variants: Vec<Variant> = setups
        .iter()
        .zip(collected)
        .map(|((name, s), c)| {
            let samples = c
                .benches
                .into_iter()
                .map(|(id, b)| (id, [b.base, b.head]))
                .collect();
            variant(name, s.describe(), samples, c.rounds)
        })
        .collect();
    if args.instructions > 0 {
        let affinity = Affinity::from_config(&config.affinity);
        let v = &mut variants[0];
        let ids: Vec<(String, String, f64)> = v
            .samples
            .iter()
            .filter(|(id, _)| !affinity.is_multi_threaded(id))
            .filter_map(|(id, [base, _])| {
                let target = plan_target(&exes, id)?;
                let per: Vec<f64> = base
                    .iter()
                    .flat_map(|s| s.times_ns.iter().zip(&s.iters).map(|(t, n)| t / n))
                    .collect();
                Some((id.clone(), target, crate::stats::median(&per)?))
            })
            .collect();
        let work = r.cache_dir.join("runs").join("noise-callgrind");
        let valgrind = instructions::valgrind_for_counting(&r.cache_dir, progress);
        for (k, (id, target, ns)) in ids.iter().enumerate() {
            progress.rounds(k as u64, ids.len() as u64, &format!("instructions {id}"));
            let exe = &exes.by_target[target];
            let n = instructions::iterations_for(*ns);
            let method = instructions::Method::of(exe);
            let counts: Result<Vec<f64>, String> = match &valgrind {
                None => Err("valgrind not found (tools/valgrind.sh installs it)".into()),
                // Never from the count cache: the repeats are what is measured here.
                Some(vg) => (0..args.instructions)
                    .map(|_| instructions::per_iteration(vg, exe, id, n, method, &work))
                    .collect(),
            };
            v.instructions.insert(id.clone(), counts);
        }
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(NoiseRun {
        schema: SCHEMA.into(),
        created_unix_s: now_unix(),
        source: format!("{} {}", short(&rev.sha), rev.subject),
        suite: r.suite.clone(),
        host: host::collect(),
        lost_time,
        target: args.target,
        variants,
    })
}

/// The bench target whose executable lists `id` (the first that does).
fn plan_target(exes: &crate::build::BenchExes, id: &str) -> Option<String> {
    exes.by_target
        .iter()
        .find(|(_, exe)| crate::measure::list_ids(exe, None).iter().any(|x| x == id))
        .map(|(t, _)| t.clone())
}

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1} %", v * 100.0))
        .unwrap_or_else(|| "–".into())
}

/// The report: a summary line per variant, then one table (per benchmark, each variant's
/// figures side by side when there are two).
pub fn markdown(run: &NoiseRun) -> String {
    let mut s = format!(
        "## Noise: A/A of {} (suite {})\n\nHost: {}, {} cores. A benchmark is quiet when the \
         per-round sd of its A/A log ratio is ≤ {:.1} %.\n\n",
        run.source,
        run.suite,
        run.host.cpu,
        run.host.cores,
        run.target * 100.0
    );
    for l in &run.lost_time {
        s.push_str(&format!(
            "- Time the host took, {}.\n",
            host::describe_lost(l)
        ));
    }
    if !run.lost_time.is_empty() {
        s.push('\n');
    }
    for v in &run.variants {
        let quiet = v
            .rows
            .iter()
            .filter(|r| r.sd_log_ratio.is_some_and(|x| x <= run.target))
            .count();
        let mut sds: Vec<f64> = v.rows.iter().filter_map(|r| r.sd_log_ratio).collect();
        sds.sort_by(f64::total_cmp);
        s.push_str(&format!(
            "- **{}** ({}): {quiet} of {} benchmarks quiet; per-round sd median {}, worst {}.\n",
            v.name,
            v.setup,
            v.rows.len(),
            pct(crate::stats::median(&sds)),
            pct(sds.last().copied()),
        ));
    }
    s.push_str(&format!(
        "\nColumns: **sd** per-round sd of the A/A log ratio; **|med|** median per-round |log \
         ratio| (one side steadily slower); **tail** samples > {:.0} % over their round's median; \
         **lag-1** autocorrelation of the pairs within rounds (± band); **BC** bimodality \
         coefficient of the centred log times (> {:.2}: two speeds or a heavy tail); **switch** \
         first sample after the other side ran vs the next (95 % interval).\n\n",
        (TAIL_FACTOR - 1.0) * 100.0,
        BIMODAL_BC
    ));
    let names: Vec<&str> = run.variants.iter().map(|v| v.name.as_str()).collect();
    let cols = ["sd", "|med|", "tail", "lag-1", "BC", "switch"];
    let mut header = "| benchmark | rounds |".to_string();
    let mut rule = "|---|---:|".to_string();
    for n in &names {
        for c in cols {
            if names.len() > 1 {
                header.push_str(&format!(" {c} ({n}) |"));
            } else {
                header.push_str(&format!(" {c} |"));
            }
            rule.push_str("---:|");
        }
    }
    s.push_str(&header);
    s.push('\n');
    s.push_str(&rule);
    s.push('\n');
    let mut ids: Vec<&str> = run
        .variants
        .first()
        .map(|v| v.rows.iter().map(|r| r.id.as_str()).collect())
        .unwrap_or_default();
    // Noisiest first (by the first variant's sd).
    let sd_of = |id: &str| {
        run.variants
            .first()
            .and_then(|v| v.rows.iter().find(|r| r.id == id))
            .and_then(|r| r.sd_log_ratio)
            .unwrap_or(f64::INFINITY)
    };
    ids.sort_by(|a, b| sd_of(b).total_cmp(&sd_of(a)).then(a.cmp(b)));
    for id in ids {
        let rounds = run.variants[0]
            .rows
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.rounds)
            .unwrap_or(0);
        let mut line = format!("| `{}` | {rounds} |", id.replace('`', "'"));
        for v in &run.variants {
            match v.rows.iter().find(|r| r.id == id) {
                Some(r) => {
                    let mark = if r.sd_log_ratio.is_some_and(|x| x <= run.target) {
                        ""
                    } else {
                        " ⚠"
                    };
                    line.push_str(&format!(
                        " {}{mark} | {} | {} | {} | {} | {} |",
                        pct(r.sd_log_ratio),
                        pct(r.median_abs_log_ratio),
                        pct(r.tail_share),
                        match (r.lag1, r.lag1_band) {
                            (Some(l), Some(b)) => format!("{l:+.2} (±{b:.2})"),
                            _ => "–".into(),
                        },
                        r.bimodality
                            .map(|b| format!("{b:.2}"))
                            .unwrap_or_else(|| "–".into()),
                        r.switch_effect
                            .map(|e| format!(
                                "{:+.1} % [{:+.1}, {:+.1}]",
                                e.estimate * 100.0,
                                e.lo * 100.0,
                                e.hi * 100.0
                            ))
                            .unwrap_or_else(|| "–".into()),
                    ));
                }
                None => line.push_str(&" – |".repeat(cols.len())),
            }
        }
        s.push_str(&line);
        s.push('\n');
    }
    for v in &run.variants {
        if v.instructions.is_empty() {
            continue;
        }
        let spreads: Vec<(String, Spread)> = v
            .instructions
            .iter()
            .map(|(id, c)| {
                let r = match c {
                    Ok(c) => match (spread(c), crate::stats::median(c)) {
                        (Some(sp), Some(m)) => Ok((sp, c.len(), m)),
                        _ => Err("fewer than 2 counts".into()),
                    },
                    Err(e) => Err(e.clone()),
                };
                (id.clone(), r)
            })
            .collect();
        let held = spreads
            .iter()
            .filter(|(_, r)| matches!(r, Ok((sp, _, _)) if *sp <= 0.001))
            .count();
        s.push_str(&format!(
            "\n### Instruction counts ({})\n\n{held} of {} single-threaded benchmarks within 0.1 % over repeated counts (callgrind, the serve loop only; spread = (max − min) / median).\n\n| benchmark | counts | instructions / iteration | spread |\n|---|---:|---:|---:|\n",
            v.name,
            spreads.len()
        ));
        for (id, r) in &spreads {
            match r {
                Ok((sp, k, m)) => s.push_str(&format!(
                    "| `{}` | {k} | {m:.1} | {:.4} %{} |\n",
                    id.replace('`', "'"),
                    sp * 100.0,
                    if *sp > 0.001 { " ⚠" } else { "" }
                )),
                Err(e) => s.push_str(&format!(
                    "| `{}` | – | – | {} |\n",
                    id.replace('`', "'"),
                    e.replace('|', "/")
                )),
            }
        }
        s.push('\n');
    }
    s
}
