//! `harness compare`: the pipeline of one comparison. Resolves base and head, checks them out
//! into the cache's slots, builds both sides' benches, measures and decides
//! ([`crate::gate::measure_and_decide`]), runs the suite's end-to-end checks
//! ([`crate::e2e::run_compare`]) and assembles the [`Results`]. Each stage it calls is tested
//! alone; this module wires them and turns stage failures into report rows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

use super::e2e::{E2eOptions, e2e_tools, parse_side_bins};
use super::{Common, Format};
use crate::build::{BenchExes, build_side};
use crate::cache::{ProfileChoice, load_profile, slot_target_dir};
use crate::config::{Config, CriterionSettings, FailOn, InstructionRows};
use crate::e2e::{self, SideEnv};
use crate::gate::{describe_sampling, measure_and_decide, method};
use crate::git::{Checkout, Repo, resolve_checkout};
use crate::host;
use crate::measure::{Affinity, Placement, instructions};
use crate::measure::{
    Collected, CriterionMeasurer, TargetPlan, list_ids, parse_shard, plan_for, shard_plan,
};
use crate::progress::{Progress, Ui};
use crate::report::format::short_sha as short;
use crate::results::{
    BenchResult, InstructionCounts, Method, Results, Revision, SCHEMA, Status, now_unix,
};
use crate::stats::{NoiseProfile, Policy, Rule};
use crate::vocab::{Device, Side};

/// Compare base and head: build both, run interleaved rounds, decide, report.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Base revision (default: the merge-base of HEAD with the default branch).
    #[arg(long)]
    base: Option<String>,
    /// Head revision (default: the working tree, uncommitted changes included).
    #[arg(long)]
    head: Option<String>,
    #[command(flatten)]
    common: Common,
    #[arg(long, value_enum, default_value = "term")]
    format: Format,
    /// Write results.json, report.md and benchmark-action.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// When the exit status is 1 (default: harness.yaml's fail_on).
    #[arg(long, value_enum)]
    fail_on: Option<FailOn>,
    /// A calibration profile file (default: the cache's profile for this host, if any).
    #[arg(long, conflicts_with = "no_profile")]
    profile: Option<PathBuf>,
    /// Ignore calibration profiles: thresholds from the within-run spread.
    #[arg(long)]
    no_profile: bool,
    /// Measure only part i of n of the suite (1-based), for matrix jobs; join the parts'
    /// results.json with `harness merge`.
    #[arg(long, value_parser = parse_shard, value_name = "I/N")]
    shard: Option<(u32, u32)>,
    /// Prebuilt engine binaries instead of building them: base=PATH and head=PATH (or a bare
    /// PATH for both sides).
    #[arg(long, value_name = "[SIDE=]PATH")]
    engine_bin: Vec<String>,
    /// Prebuilt oracle binaries, like --engine-bin.
    #[arg(long, value_name = "[SIDE=]PATH")]
    oracle_bin: Vec<String>,
    /// Only end-to-end checks on this device (repeatable; default: every device a case lists).
    #[arg(long, value_enum)]
    device: Vec<Device>,
    /// A CUDA end-to-end check that cannot run (no GPU, engine without CUDA) is an error
    /// (exit 2) instead of ⏭.
    #[arg(long)]
    require_cuda: bool,
    /// Then post the report as the PR's sticky comment (see `harness post`; repository and
    /// PR from the Actions environment). A failure to post is printed and does not change
    /// the exit status, which stays the gate's.
    #[arg(long)]
    post: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let r = args.common.resolve()?;
    let e2e = E2eOptions {
        devices: args.device,
        require_cuda: args.require_cuda,
        engine_bin: parse_side_bins("--engine-bin", &args.engine_bin)
            .map_err(anyhow::Error::msg)?,
        oracle_bin: parse_side_bins("--oracle-bin", &args.oracle_bin)
            .map_err(anyhow::Error::msg)?,
    };
    let fail_on = args.fail_on.unwrap_or(r.config.fail_on);
    let opts = CompareOptions {
        repo_dir: r.repo_root.clone(),
        config: r.config,
        base: args.base,
        head: args.head,
        suite: r.suite,
        rounds: args.common.rounds,
        cache_dir: r.cache_dir.clone(),
        profile: match (args.profile, args.no_profile) {
            (Some(p), _) => ProfileChoice::File(p),
            (None, true) => ProfileChoice::Off,
            (None, false) => ProfileChoice::Auto,
        },
        shard: args.shard,
        e2e,
    };
    let results = compare(&opts, &Ui::new())?;
    let out = args.out.unwrap_or_else(|| r.cache_dir.join("last-run"));
    let code = super::finish(&results, &out, args.format, fail_on)?;
    if args.post {
        // The exit status is the gate's: a report that could not be posted is shown as an
        // error (and a warning annotation in Actions) but decides nothing.
        match crate::post::post_from_env(&results, None, None, None) {
            Ok((target, posted)) => eprintln!("{}: {posted}", target.describe()),
            Err(e) => {
                eprintln!("error: could not post the report: {e}");
                if crate::actions::in_actions() {
                    let msg = format!("could not post the report: {e}");
                    eprintln!(
                        "{}",
                        crate::actions::workflow_command("warning", "harness post", &msg)
                    );
                }
            }
        }
    }
    Ok(code)
}

#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Any directory inside the repository.
    pub repo_dir: PathBuf,
    pub config: Config,
    /// None: the merge-base of HEAD with the default branch.
    pub base: Option<String>,
    /// None: the working tree (with uncommitted changes if any, else HEAD).
    pub head: Option<String>,
    pub suite: String,
    pub rounds: Option<u32>,
    /// Per-repository cache dir (slots, target dirs, profiles, run scratch).
    pub cache_dir: PathBuf,
    pub profile: ProfileChoice,
    /// `(i, n)`: measure only the i-th of n disjoint parts of the suite (1-based).
    pub shard: Option<(u32, u32)>,
    /// The end-to-end part (the suite's `e2e` cases).
    pub e2e: E2eOptions,
}

/// Resolves base and head as `compare` would.
fn resolve_revisions(
    repo: &Repo,
    opts: &CompareOptions,
) -> anyhow::Result<(Revision, Checkout, Revision, Checkout)> {
    let (head, head_co) = resolve_checkout(repo, opts.head.as_deref())?;
    let base = match &opts.base {
        Some(spec) => repo.resolve(spec)?,
        None => {
            let branch = match &opts.config.default_branch {
                Some(b) => b.clone(),
                None => repo.default_branch()?,
            };
            // The merge-base of the head under test (not of HEAD: `--head` may name another
            // branch, e.g. the one a pre-push hook is pushing).
            let head_spec = opts.head.as_deref().unwrap_or("HEAD");
            let mb = repo.merge_base(&head.sha, &branch)?;
            let mut r = repo.resolve(&mb)?;
            r.spec = format!("merge-base({head_spec}, {branch})");
            r
        }
    };
    let base_co = Checkout::Commit(base.sha.clone());
    Ok((base, base_co, head, head_co))
}

/// The files that make the gate itself: a change to them in a PR is judged by the base's version
/// in the PR check (`.github/workflows/pr-bench.yml` builds the harness and reads harness.yaml
/// from the base commit).
pub const GATE_PATHS: [&str; 3] = ["harness/", "harness.yaml", ".github/"];

/// The head's changes to [`GATE_PATHS`] (at most 50 listed).
fn gate_changes(repo: &Repo, base: &Revision, head: &Revision) -> anyhow::Result<Vec<String>> {
    let mut paths: Vec<String> = repo
        .changed_paths(&base.sha, &head.sha, head.dirty)?
        .into_iter()
        .filter(|p| {
            GATE_PATHS
                .iter()
                .any(|g| p == g.trim_end_matches('/') || (g.ends_with('/') && p.starts_with(g)))
        })
        .collect();
    paths.truncate(50);
    Ok(paths)
}

/// `harness compare`: Ok(results) whatever the verdict; Err only when the gate could not start
/// (bad revision, unreadable config, broken cache).
pub fn compare(opts: &CompareOptions, progress: &dyn Progress) -> anyhow::Result<Results> {
    let t0 = Instant::now();
    let repo = Repo::open(&opts.repo_dir)?;
    let (base, base_co, head, head_co) = resolve_revisions(&repo, opts)?;
    let gate_changes = gate_changes(&repo, &base, &head)?;
    let suite = opts.config.suite(&opts.suite).map_err(anyhow::Error::msg)?;
    let plan = plan_for(&opts.config, &opts.suite)?;
    let targets: Vec<String> = plan.iter().map(|p| p.target.clone()).collect();
    let criterion = suite
        .criterion
        .clone()
        .unwrap_or_else(|| opts.config.criterion.clone());
    let policy = &opts.config.policy;
    let rounds = opts.rounds.or(suite.rounds).unwrap_or(policy.rounds as u32);
    if rounds < 2 {
        bail!("--rounds {rounds}: at least 2 rounds are needed for a paired interval");
    }
    let host = host::collect();
    let profile = load_profile(
        &opts.profile,
        &opts.cache_dir,
        &host,
        opts.config.placement.samples_in(&opts.suite),
    )?;
    std::fs::create_dir_all(&opts.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", opts.cache_dir.display()))?;

    progress.stage(&format!(
        "checking out base {} ({})",
        short(&base.sha),
        base.spec
    ));
    let base_wt = repo.checkout(Side::Base.name(), base_co, &opts.cache_dir)?;
    progress.stage(&format!(
        "checking out head {} ({})",
        short(&head.sha),
        head.spec
    ));
    let head_wt = repo.checkout(Side::Head.name(), head_co, &opts.cache_dir)?;

    // The end-to-end checks: in a sharded run, shard 1 carries them all.
    let e2e_checks = match (&opts.config.e2e, opts.shard) {
        (Some(cfg), shard) if !suite.e2e.is_empty() && shard.is_none_or(|(i, _)| i == 1) => Some(
            e2e::plan_checks(cfg, &suite.e2e, &opts.e2e.devices, &head_wt.path)
                .map_err(anyhow::Error::msg)?,
        ),
        _ => None,
    };
    // The policy each family decides under: under `rule: resolution` the PR's one error budget
    // `alpha` is split between the benchmarks and the end-to-end speed rows in proportion to
    // their rows (Bonferroni across the two Holm families), so a false 🔴 anywhere stays ≤ alpha.
    let (mut bench_policy, mut e2e_policy) = (policy.clone(), policy.clone());

    let mut failures = Vec::new();
    let mut round_infos = Vec::new();
    let mut benches = Vec::new();
    let mut sampling = None;
    let mut placement = None;
    let mut lost_time = Vec::new();
    if !targets.is_empty() {
        let base_exes = build_side(
            Side::Base,
            &base_wt.path,
            &slot_target_dir(&opts.cache_dir, Side::Base),
            &opts.config,
            &targets,
            progress,
        )
        .map_err(|f| failures.push(f))
        .ok();
        let head_exes = build_side(
            Side::Head,
            &head_wt.path,
            &slot_target_dir(&opts.cache_dir, Side::Head),
            &opts.config,
            &targets,
            progress,
        )
        .map_err(|f| failures.push(f))
        .ok();
        if let (Some(base_exes), Some(head_exes)) = (base_exes, head_exes) {
            if policy.rule == Rule::Resolution || !policy.resolutions.is_empty() {
                let ids = suite_ids(&plan, [&base_exes, &head_exes]);
                // Untimed end-to-end checks (`e2e_timed: false`) have no speed rows to decide.
                let e2e_ids: Vec<String> = if suite.times_e2e() {
                    e2e_checks.iter().flatten().map(|c| c.id.clone()).collect()
                } else {
                    Vec::new()
                };
                check_resolutions(policy, &opts.suite, &ids, &e2e_ids)?;
                (bench_policy, e2e_policy) = split_alpha(policy, ids.len(), e2e_ids.len());
            }
            // The time the host takes from the benchmarks' CPU, just before and after the
            // rounds: with many ❔ rows, the first thing to look at (a 2-vCPU VM here lost 2-10 %
            // of a spinning thread's time with its steal counter near 0).
            lost_time.push(super::probe_host(
                &opts.config.affinity,
                "before the benchmark rounds",
                progress,
            ));
            let (r, b, placed) = measure_benches(
                opts,
                &plan,
                base_exes,
                head_exes,
                &bench_policy,
                rounds,
                &criterion,
                &profile,
                progress,
            );
            for (t, why) in &r.unpaired {
                progress.stage(&format!(
                    "bench target {t}: criterion runs, not paired: {why}"
                ));
            }
            progress.stage(&format!("code placement {placed}"));
            placement = Some(placed);
            sampling = Some(describe_sampling(
                criterion.paired,
                &r.unpaired,
                &Affinity::from_config(&opts.config.affinity).describe(),
            ));
            lost_time.push(super::probe_host(
                &opts.config.affinity,
                "after the benchmark rounds",
                progress,
            ));
            failures.extend(r.failures);
            round_infos = r.rounds;
            benches = b;
        }
    }

    let e2e_results = match (&opts.config.e2e, e2e_checks) {
        (Some(cfg), Some(checks)) => {
            // No CUDA build and no CUDA run on a host without a driver: those checks are ⏭.
            let no_cuda = host::cuda_unavailable();
            let cuda = checks.iter().any(|c| c.device == Device::Cuda) && no_cuda.is_none();
            let work = opts.cache_dir.join("runs").join("e2e");
            let _ = std::fs::remove_dir_all(&work);
            let mut envs = Vec::new();
            for (side, wt) in [(Side::Base, &base_wt), (Side::Head, &head_wt)] {
                let tools = e2e_tools(
                    side,
                    &wt.path,
                    &slot_target_dir(&opts.cache_dir, side),
                    &opts.config,
                    &opts.e2e,
                    cuda,
                    progress,
                );
                let mut env = SideEnv::new(side, tools, wt.path.clone(), work.join(side.name()));
                env.cuda_unavailable = no_cuda.clone();
                envs.push(env);
            }
            let [mut b, mut h]: [SideEnv; 2] =
                envs.try_into().map_err(|_| anyhow::anyhow!("two sides"))?;
            // The engines' placement, sampled as the benchmarks' (STATS §17): a given
            // `--base-engine`/`--head-engine` was not linked by the harness and has no recipe,
            // which the description then says.
            let placement = match (&b.tools, &h.tools) {
                (Some(bt), Some(ht)) => Placement::new(
                    opts.config.placement.samples_in(&opts.suite),
                    [bt.engine.as_path(), ht.engine.as_path()],
                    &work.join("placement"),
                    opts.config.deadlines.build(),
                ),
                _ => Placement::off("a side has no engine binary"),
            };
            let r = e2e::run_compare(
                cfg,
                &checks,
                &mut b,
                &mut h,
                &e2e_policy,
                if suite.times_e2e() {
                    e2e::SpeedRounds::Timed(rounds)
                } else {
                    e2e::SpeedRounds::Untimed {
                        suite: opts.suite.clone(),
                    }
                },
                opts.e2e.require_cuda,
                Affinity::from_config(&opts.config.affinity),
                placement,
                progress,
            );
            let _ = std::fs::remove_dir_all(&work);
            Some(r)
        }
        _ => None,
    };
    base_wt.release()?;
    head_wt.release()?;

    let outcome = Results::decide_all(&benches, &failures, e2e_results.as_ref());
    let profile_desc = profile.as_ref().map(|(p, path)| {
        format!(
            "{} (host {}, {} A/A trials)",
            path.display(),
            p.fingerprint,
            p.trials
        )
    });
    let mut reproduce = vec![format!(
        "harness compare --base {} --head {} --suite {} --rounds {rounds}{}",
        base.sha,
        if head.dirty {
            "<working tree>".to_string()
        } else {
            head.sha.clone()
        },
        opts.suite,
        opts.shard
            .map(|(i, n)| format!(" --shard {i}/{n}"))
            .unwrap_or_default()
    )];
    if !targets.is_empty() {
        reproduce.push(format!(
            "cargo bench -p {} -- {}",
            opts.config.packages.join(" -p "),
            criterion.args()[1..].join(" ")
        ));
    }
    if let Some(e) = &e2e_results {
        for (side, rev) in [(Side::Base, &base), (Side::Head, &head)] {
            if !rev.dirty {
                reproduce.push(format!(
                    "harness e2e --rev {} --suite {}  # {}: correctness and speed alone",
                    rev.sha,
                    opts.suite,
                    side.word()
                ));
            }
        }
        reproduce.push(format!(
            "engine profile --model MODEL --ep DEVICE --prompt-ids IDS --tokens N {} --json",
            e.profile_args.join(" ")
        ));
    }
    Ok(Results {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_unix_s: now_unix(),
        suite: opts.suite.clone(),
        shard: opts.shard,
        base,
        head,
        host,
        method: Method {
            sampling,
            placement,
            // The benchmarks' policy (its alpha their share under `rule: resolution`): what a
            // replay of the benchmark rows must start from to decide as this run did.
            ..method(&bench_policy, rounds, &criterion, profile_desc)
        },
        rounds: round_infos,
        benches,
        failures,
        outcome,
        wall_s: t0.elapsed().as_secs_f64(),
        reproduce,
        e2e: e2e_results,
        gate_changes,
        lost_time,
    })
}

/// The benchmarks' and the end-to-end speed rows' policies: under `rule: resolution` with both
/// families present, `alpha` split between them in proportion to their rows (the two Holm
/// families' error rates add up to at most `alpha`); otherwise both are `policy`.
fn split_alpha(policy: &Policy, bench_rows: usize, e2e_rows: usize) -> (Policy, Policy) {
    let (mut bench, mut e2e) = (policy.clone(), policy.clone());
    if policy.rule == Rule::Resolution && bench_rows > 0 && e2e_rows > 0 {
        e2e.alpha = policy.alpha * e2e_rows as f64 / (bench_rows + e2e_rows) as f64;
        bench.alpha = policy.alpha - e2e.alpha;
    }
    (bench, e2e)
}

/// Every benchmark id the suite's plan selects, listed from both sides' executables before any
/// round (`--list`), sorted and without repeats.
fn suite_ids(plan: &[TargetPlan], exes: [&BenchExes; 2]) -> Vec<String> {
    let mut ids: Vec<String> = plan
        .iter()
        .flat_map(|tp| {
            exes.iter()
                .filter_map(|e| e.by_target.get(&tp.target))
                .flat_map(|exe| list_ids(exe, tp.filter.as_deref()))
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// `policy.resolutions` patterns must each match a row of the suite (a benchmark or an
/// end-to-end check): a pattern that matches nothing is a typo or a stale id, and the gate
/// refuses to run rather than silently decide those rows at the default resolution.
fn check_resolutions(
    policy: &Policy,
    suite: &str,
    bench_ids: &[String],
    e2e_ids: &[String],
) -> anyhow::Result<()> {
    let ids: Vec<String> = bench_ids.iter().chain(e2e_ids).cloned().collect();
    let unmatched = policy.unmatched_resolutions(&ids);
    if !unmatched.is_empty() {
        bail!(
            "policy.resolutions: {} match(es) no benchmark or end-to-end check of suite {suite}: {}",
            unmatched.len(),
            unmatched.join(", ")
        );
    }
    Ok(())
}

/// Shards the plan, runs the interleaved rounds of the bench executables and decides.
fn measure_benches(
    opts: &CompareOptions,
    plan: &[TargetPlan],
    base_exes: BenchExes,
    head_exes: BenchExes,
    policy: &Policy,
    rounds: u32,
    criterion: &CriterionSettings,
    profile: &Option<(NoiseProfile, PathBuf)>,
    progress: &dyn Progress,
) -> (Collected, Vec<BenchResult>, String) {
    let plan = match opts.shard {
        None => plan.to_vec(),
        Some(shard) => {
            let ids_of = |tp: &TargetPlan| -> Vec<String> {
                let mut ids = Vec::new();
                for exes in [&base_exes, &head_exes] {
                    if let Some(exe) = exes.by_target.get(&tp.target) {
                        ids.extend(list_ids(exe, tp.filter.as_deref()));
                    }
                }
                ids
            };
            let p = shard_plan(plan, &ids_of, shard);
            progress.stage(&format!(
                "shard {}/{}: {} bench target(s)",
                shard.0,
                shard.1,
                p.len()
            ));
            p
        }
    };
    let work_dir = opts.cache_dir.join("runs").join("current");
    let _ = std::fs::remove_dir_all(&work_dir);
    let placement = Placement::new(
        opts.config.placement.samples_in(&opts.suite),
        base_exes
            .by_target
            .values()
            .chain(head_exes.by_target.values())
            .map(PathBuf::as_path),
        &work_dir.join("placement"),
        opts.config.deadlines.build(),
    );
    let mut m = CriterionMeasurer {
        base: base_exes,
        head: head_exes,
        args: criterion.args(),
        work_dir: work_dir.clone(),
        on_line: Box::new(|_| {}),
        pair: criterion
            .paired
            .then(|| criterion.pair_settings(&opts.config.deadlines)),
        pair_multi_threaded: opts
            .config
            .suite(&opts.suite)
            .ok()
            .and_then(|s| s.criterion_multi_threaded.as_ref())
            .filter(|_| criterion.paired)
            .map(|c| c.pair_settings(&opts.config.deadlines)),
        serves: BTreeMap::new(),
        affinity: Affinity::from_config(&opts.config.affinity),
        deadline: opts.config.deadlines.bench(),
        placement,
    };
    let r = measure_and_decide(
        &mut m,
        &plan,
        policy,
        rounds,
        profile.as_ref().map(|(p, _)| p),
        opts.config
            .suite(&opts.suite)
            .ok()
            .and_then(|s| s.budget_minutes)
            .map(|m| std::time::Duration::from_secs_f64(m * 60.0)),
        progress,
    );
    let (collected, mut benches) = r;
    if opts.config.instructions.counts_in(&opts.suite) {
        count_instructions(
            &m,
            &collected,
            &mut benches,
            &opts.config.affinity,
            opts.config.instructions.rows,
            &work_dir,
            &opts.cache_dir,
            progress,
        );
    }
    m.placement.clear();
    let placed = m.placement.describe();
    let _ = std::fs::remove_dir_all(&work_dir);
    (collected, benches, placed)
}

/// Instruction counts of the single-threaded benchmarks both sides ran (not `⛔`, 🆕, ➖; with
/// `instructions.rows: attention` only the ❔, ⚠️ and 🔴 rows), after the timed rounds so
/// valgrind never slows them, and the verdict rule of
/// `stats::with_instructions` applied. Without valgrind each row says so in its counts' error.
fn count_instructions(
    m: &CriterionMeasurer,
    collected: &Collected,
    benches: &mut [BenchResult],
    affinity: &crate::config::AffinityConfig,
    rows: InstructionRows,
    work_dir: &Path,
    cache_dir: &Path,
    progress: &dyn Progress,
) {
    let affinity = Affinity::from_config(affinity);
    let valgrind = instructions::valgrind_for_counting(cache_dir, progress);
    let todo: Vec<usize> = benches
        .iter()
        .enumerate()
        .filter(|(_, b)| {
            !affinity.is_multi_threaded(&b.id)
                && !matches!(b.status, Status::Failed | Status::Added | Status::Removed)
                && (rows == InstructionRows::All
                    || matches!(
                        b.status,
                        Status::TooNoisy | Status::PossibleRegression | Status::Regression
                    ))
                && b.base.is_some()
                && b.head.is_some()
        })
        .map(|(i, _)| i)
        .collect();
    let work = work_dir.join("callgrind");
    let mut methods = std::collections::HashMap::new();
    let mut counter = valgrind.map(|v| {
        let cache = instructions::CountCache::new(cache_dir.join("instructions"), &v);
        (v, cache)
    });
    for (k, &i) in todo.iter().enumerate() {
        let b = &mut benches[i];
        progress.rounds(
            k as u64,
            todo.len() as u64,
            &format!("instructions {}", b.id),
        );
        let Some((valgrind, cache)) = counter.as_mut() else {
            b.instructions = Some(InstructionCounts {
                base: None,
                head: None,
                error: Some("valgrind not found: instructions not counted".into()),
            });
            continue;
        };
        let Some(target) = collected.benches.get(&b.id).map(|c| c.target.clone()) else {
            continue;
        };
        let ns = b.base.as_ref().map_or(f64::NAN, |s| s.median_ns);
        let n = instructions::iterations_for(ns);
        let mut errors = Vec::new();
        // Both sides by one method (instructions::Method::for_pair); an executable is read once.
        let mut method_of = |exes: &crate::build::BenchExes| match exes.by_target.get(&target) {
            Some(e) => *methods
                .entry(e.clone())
                .or_insert_with(|| instructions::Method::of(e)),
            None => instructions::Method::TwoProcesses,
        };
        let method = instructions::Method::for_pair(method_of(&m.base), method_of(&m.head));
        let mut side = |exes: &crate::build::BenchExes, name: &str| {
            let exe = exes.by_target.get(&target)?;
            match cache.per_iteration(valgrind, exe, &b.id, n, method, &work) {
                Ok(x) => Some(x),
                Err(e) => {
                    errors.push(format!("{name}: {e}"));
                    None
                }
            }
        };
        let counts = InstructionCounts {
            base: side(&m.base, "base"),
            head: side(&m.head, "head"),
            error: (!errors.is_empty()).then(|| errors.join("; ")),
        };
        b.instructions = Some(counts);
        crate::gate::apply_instructions(b);
    }
    if !todo.is_empty() {
        progress.rounds(todo.len() as u64, todo.len() as u64, "instructions done");
    }
    let _ = std::fs::remove_dir_all(&work);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_error_budget_is_split_between_benchmarks_and_end_to_end_rows() {
        let mut p = Policy {
            rule: Rule::Resolution,
            ..Policy::default()
        };
        let (b, e) = split_alpha(&p, 55, 3);
        assert!((b.alpha + e.alpha - p.alpha).abs() < 1e-15);
        assert!((e.alpha - 0.05 * 3.0 / 58.0).abs() < 1e-15);
        // One family alone keeps the whole budget; the threshold rule is left as it was.
        assert_eq!(split_alpha(&p, 55, 0).0.alpha, 0.05);
        p.rule = Rule::Threshold;
        assert_eq!(split_alpha(&p, 55, 3).1.alpha, 0.05);
    }
}
