//! `harness compare` and `harness calibrate`: the pipeline glue. Resolves the revisions, checks
//! them out into the cache's slots, builds both, runs the interleaved rounds, decides (first pass,
//! confirmation rounds for suspects, final pass) and assembles [`Results`]. Every stage it calls
//! is tested alone; this module only wires them and turns stage failures into report rows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use crate::build::{BenchExes, BinsRequest, BuildRequest, build_benches, build_e2e_bins};
use crate::config::{Config, CriterionSettings};
use crate::criterion::exact_filter;
use crate::e2e::tools::Tools;
use crate::e2e::{self, SideEnv};
use crate::git::{Checkout, Repo, WORKING_TREE_SPEC};
use crate::host;
use crate::results::{
    BenchResult, Failure, HostInfo, Method, Results, Revision, SCHEMA, SideResult, Status,
};
use crate::run::{Collect, Collected, CriterionMeasurer, Measurer, TargetPlan, run_rounds};
use crate::stats::{self, BenchInput, NoiseProfile, Phase, Policy};
use crate::vocab::Device;
use crate::vocab::{Side, Stage};

/// Where progress goes: a bar on a TTY, plain lines otherwise.
pub trait Progress: Sync {
    fn stage(&self, msg: &str);
    fn rounds(&self, done: u64, total: u64, what: &str);
    fn line(&self, _line: &str) {}
}

/// Which calibration profile to use.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileChoice {
    /// The profile in the cache whose fingerprint matches this host, if any.
    Auto,
    /// This file (an error if it does not exist or does not match the host).
    File(PathBuf),
    /// None: thresholds from the within-run spread.
    Off,
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

/// Options of the end-to-end checks shared by `compare` and `e2e`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct E2eOptions {
    /// Only these devices (empty: every device a case lists).
    pub devices: Vec<Device>,
    /// A CUDA check that does not run is an error (exit 2), not ⏭.
    pub require_cuda: bool,
    /// Prebuilt binaries per side (`[base, head]`): that side's are not built.
    pub engine_bin: [Option<PathBuf>; 2],
    pub oracle_bin: [Option<PathBuf>; 2],
}

/// Parses `--engine-bin`/`--oracle-bin` values of `compare`: `base=PATH`, `head=PATH`, or a bare
/// `PATH` for both sides (an A/A run of one binary). Returns `[base, head]`.
pub fn parse_side_bins(flag: &str, values: &[String]) -> Result<[Option<PathBuf>; 2], String> {
    let mut out: [Option<PathBuf>; 2] = [None, None];
    for v in values {
        let (slots, path): (&[usize], &str) = match v.split_once('=') {
            Some(("base", p)) => (&[0], p),
            Some(("head", p)) => (&[1], p),
            _ => (&[0, 1], v.as_str()),
        };
        if path.is_empty() {
            return Err(format!(
                "{flag} {v:?}: expected base=PATH, head=PATH or PATH"
            ));
        }
        for &i in slots {
            if out[i].is_some() {
                return Err(format!(
                    "{flag}: the {} binary is given twice",
                    ["base", "head"][i]
                ));
            }
            out[i] = Some(PathBuf::from(path));
        }
    }
    Ok(out)
}

/// Checks a prebuilt binary exists, naming the flag.
fn prebuilt(flag: &str, p: &Path) -> Result<PathBuf, String> {
    if p.is_file() {
        Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
    } else {
        Err(format!("{flag} {}: no such file", p.display()))
    }
}

/// One side's `engine`/`oracle`: the prebuilt ones when given, else built in its worktree with
/// its slot's target dir.
pub fn e2e_tools(
    side: Side,
    dir: &Path,
    target_dir: &Path,
    config: &Config,
    opts: &E2eOptions,
    cuda: bool,
    progress: &dyn Progress,
) -> Result<Tools, String> {
    let i = match side {
        Side::Base => 0,
        Side::Head => 1,
    };
    let e2e = config
        .e2e
        .as_ref()
        .ok_or("harness.yaml has no e2e section")?;
    let given_engine = opts.engine_bin[i]
        .as_deref()
        .map(|p| prebuilt("--engine-bin", p))
        .transpose()?;
    let given_oracle = opts.oracle_bin[i]
        .as_deref()
        .map(|p| prebuilt("--oracle-bin", p))
        .transpose()?;
    if let (Some(engine), Some(oracle)) = (&given_engine, &given_oracle) {
        return Ok(Tools {
            engine: engine.clone(),
            oracle: oracle.clone(),
        });
    }
    progress.stage(&format!(
        "building {} engine and oracle (release{}) in {}",
        side.name(),
        if cuda { ", cuda" } else { "" },
        dir.display()
    ));
    let on_line = |l: &str| progress.line(l);
    let bins = build_e2e_bins(&BinsRequest {
        dir,
        target_dir,
        engine_package: &e2e.engine_package,
        oracle_package: &e2e.oracle_package,
        cuda,
        on_line: &on_line,
    })
    .map_err(|f| {
        let mut m = f.message;
        for l in crate::build::tail(&f.log_tail, 8) {
            m.push('\n');
            m.push_str(&l);
        }
        m
    })?;
    Ok(Tools {
        engine: given_engine.unwrap_or(bins.engine),
        oracle: given_oracle.unwrap_or(bins.oracle),
    })
}

/// Parses `i/n` (1 ≤ i ≤ n).
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--shard {s:?}: expected i/n with 1 <= i <= n, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if i == 0 || n == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Restricts `plan` to shard `(i, n)`: the suite's benchmark ids (listed from both sides'
/// executables, sorted) are dealt round-robin, so shards are disjoint, cover the suite, and
/// differ in size by at most one benchmark. Targets with no id in this shard are dropped.
pub fn shard_plan(
    plan: &[TargetPlan],
    ids_of: &dyn Fn(&TargetPlan) -> Vec<String>,
    (i, n): (u32, u32),
) -> Vec<TargetPlan> {
    let mut all: Vec<(String, String)> = plan
        .iter()
        .flat_map(|tp| {
            ids_of(tp)
                .into_iter()
                .map(|id| (id, tp.target.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort();
    all.dedup();
    let mine: Vec<&(String, String)> = all
        .iter()
        .enumerate()
        .filter(|(k, _)| *k as u32 % n == i - 1)
        .map(|(_, x)| x)
        .collect();
    plan.iter()
        .filter_map(|tp| {
            let ids: Vec<&str> = mine
                .iter()
                .filter(|(_, t)| *t == tp.target)
                .map(|(id, _)| id.as_str())
                .collect();
            (!ids.is_empty()).then(|| TargetPlan {
                target: tp.target.clone(),
                filter: Some(exact_filter(&ids)),
            })
        })
        .collect()
}

/// The per-repository cache dir under `root`: `<root>/<repo name>-<hash of its path>`.
pub fn repo_cache_dir(root: &Path, repo_root: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let canon = repo_root
        .canonicalize()
        .unwrap_or_else(|_| repo_root.to_path_buf());
    let h = Sha256::digest(canon.to_string_lossy().as_bytes());
    let name = canon
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into());
    root.join(format!(
        "{name}-{}",
        h.iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// The cache root: `$HARNESS_CACHE_DIR`, else `$XDG_CACHE_HOME/decoder-gate/harness`, else
/// `~/.cache/decoder-gate/harness`.
pub fn default_cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("HARNESS_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("decoder-gate").join("harness")
}

fn profile_path(cache_dir: &Path, fingerprint: &str) -> PathBuf {
    cache_dir
        .join("profiles")
        .join(format!("{fingerprint}.json"))
}

fn load_profile(
    choice: &ProfileChoice,
    cache_dir: &Path,
    host: &HostInfo,
) -> anyhow::Result<Option<(NoiseProfile, PathBuf)>> {
    let path = match choice {
        ProfileChoice::Off => return Ok(None),
        ProfileChoice::Auto => {
            let p = profile_path(cache_dir, &host.fingerprint);
            if !p.is_file() {
                return Ok(None);
            }
            p
        }
        ProfileChoice::File(p) => p.clone(),
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read calibration profile {}", path.display()))?;
    let profile = NoiseProfile::from_json(&text)
        .with_context(|| format!("calibration profile {}", path.display()))?;
    if !profile.matches(&host.fingerprint) {
        if matches!(choice, ProfileChoice::File(_)) {
            bail!(
                "calibration profile {} was made on another host (fingerprint {}, this host {}); run `harness calibrate` here",
                path.display(),
                profile.fingerprint,
                host.fingerprint
            );
        }
        return Ok(None);
    }
    Ok(Some((profile, path)))
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The bench plan of a suite: one entry per bench target, its filters joined into one regex.
pub fn plan_for(config: &Config, suite: &str) -> anyhow::Result<Vec<TargetPlan>> {
    let s = config.suite(suite).map_err(anyhow::Error::msg)?;
    Ok(s.benches
        .iter()
        .map(|(target, filters)| TargetPlan {
            target: target.clone(),
            filter: match filters.len() {
                0 => None,
                1 => Some(filters[0].clone()),
                _ => Some(
                    filters
                        .iter()
                        .map(|f| format!("(?:{f})"))
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
            },
        })
        .collect())
}

/// The revision a `--head`/`--rev` names and how to check it out; none given: the working tree
/// when it has uncommitted changes (measured as they are), else HEAD.
fn resolve_checkout(repo: &Repo, spec: Option<&str>) -> anyhow::Result<(Revision, Checkout)> {
    let r = match spec {
        None if repo.is_dirty()? => {
            return Ok((repo.resolve_working_tree()?, Checkout::WorkingTree));
        }
        None => repo.resolve("HEAD")?,
        Some(spec) => repo.resolve(spec)?,
    };
    let co = Checkout::Commit(r.sha.clone());
    Ok((r, co))
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

/// Per benchmark, the per-round estimates of both sides paired by round index.
fn inputs_from(collected: &Collected) -> Vec<BenchInput> {
    collected
        .benches
        .iter()
        .map(|(id, c)| {
            let est = |s: &[crate::results::RawSample]| -> BTreeMap<u32, f64> {
                s.iter()
                    .filter_map(|x| {
                        stats::round_estimate(&x.iters, &x.times_ns).map(|e| (x.round, e))
                    })
                    .collect()
            };
            let (b, h) = (est(&c.base), est(&c.head));
            let (base, head) = match (c.base.is_empty(), c.head.is_empty()) {
                (false, false) => {
                    // Index i is round i on both sides; a round missing on one side (or with
                    // unusable samples) is NaN there, and the stats drop that pair. Keeping the
                    // indices aligned keeps confirmation rounds at index >= first-pass rounds.
                    let last = b.keys().chain(h.keys()).max().copied().unwrap_or(0);
                    let side = |m: &BTreeMap<u32, f64>| -> Vec<f64> {
                        (0..=last)
                            .map(|r| m.get(&r).copied().unwrap_or(f64::NAN))
                            .collect()
                    };
                    let base = side(&b);
                    let mut head = side(&h);
                    // A paired round's log ratio is the median over its sample pairs
                    // (`stats::paired_log_ratio`); the decision only ever uses ln(head / base),
                    // so the head's value for it is base · e^(that ratio).
                    for (r, hv) in head.iter_mut().enumerate() {
                        if let Some(d) = paired_ratio(&c.base, &c.head, r as u32) {
                            *hv = base[r] * d.exp();
                        }
                    }
                    (Some(base), Some(head))
                }
                (false, true) => (Some(b.values().copied().collect()), None),
                (true, false) => (None, Some(h.values().copied().collect())),
                (true, true) => (None, None),
            };
            BenchInput {
                id: id.clone(),
                base,
                head,
            }
        })
        .collect()
}

/// Round `r`'s paired log ratio, when both sides' samples of that round were taken paired.
fn paired_ratio(
    base: &[crate::results::RawSample],
    head: &[crate::results::RawSample],
    r: u32,
) -> Option<f64> {
    fn of(s: &[crate::results::RawSample], r: u32) -> Option<&crate::results::RawSample> {
        s.iter()
            .find(|x| x.round == r && x.sampling_mode == crate::serve::SAMPLING_MODE)
    }
    let (b, h) = (of(base, r)?, of(head, r)?);
    stats::paired_log_ratio((&b.iters, &b.times_ns), (&h.iters, &h.times_ns))
}

fn side_result(samples: &[crate::results::RawSample]) -> Option<SideResult> {
    if samples.is_empty() {
        return None;
    }
    let per_round_ns: Vec<f64> = samples
        .iter()
        .filter_map(|s| stats::round_estimate(&s.iters, &s.times_ns))
        .collect();
    let median_ns = stats::median(&per_round_ns).unwrap_or(f64::NAN);
    Some(SideResult {
        per_round_ns,
        median_ns,
        samples: samples.to_vec(),
    })
}

/// One plan entry per target that has any of `ids`, filtered to exactly those ids.
fn plan_of(collected: &Collected, ids: &[String]) -> Vec<TargetPlan> {
    let mut by_target: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for id in ids {
        if let Some(c) = collected.benches.get(id) {
            by_target.entry(&c.target).or_default().push(id);
        }
    }
    by_target
        .iter()
        .map(|(t, ids)| TargetPlan {
            target: t.to_string(),
            filter: Some(exact_filter(ids)),
        })
        .collect()
}

/// Runs the measurement and decision on already-built executables: the part shared by
/// `compare` and `calibrate`, and what tests drive with a scripted [`Measurer`]. First pass
/// (`rounds`), noise rounds for what it left ❔, confirmation rounds for the suspects, final pass.
pub fn measure_and_decide(
    m: &mut dyn Measurer,
    plan: &[TargetPlan],
    policy: &Policy,
    rounds: u32,
    profile: Option<&NoiseProfile>,
    progress: &dyn Progress,
) -> (Collected, Vec<BenchResult>) {
    let mut collected = Collected::default();
    run_rounds(m, plan, 0, rounds, false, &mut collected, &mut |d, t, w| {
        progress.rounds(d, t, w)
    });
    let mut first = stats::analyze(&inputs_from(&collected), profile, policy, Phase::First);
    // Noise rounds: more first-pass rounds for what the first `rounds` left ❔ because of its
    // noise (STATS.md, section 6). Their round indices come before the confirmation rounds'.
    let mut first_rounds = rounds;
    let noisy = stats::noisy(&first, policy);
    if !noisy.is_empty() {
        progress.stage(&format!(
            "{} benchmark(s) too noisy after {rounds} rounds (a threshold above {}, or ❔): {} \
             more rounds for them: {}",
            noisy.len(),
            crate::report::format::percent(policy.noise_target),
            policy.noise_rounds,
            noisy.join(", ")
        ));
        run_rounds(
            m,
            &plan_of(&collected, &noisy),
            rounds,
            policy.noise_rounds as u32,
            false,
            &mut collected,
            &mut |d, t, w| progress.rounds(d, t, w),
        );
        first_rounds = rounds + policy.noise_rounds as u32;
        first = stats::analyze(&inputs_from(&collected), profile, policy, Phase::First);
    }
    let suspects = stats::suspects(&first);
    let decisions = if suspects.is_empty() || policy.confirmation_rounds == 0 {
        first
    } else {
        progress.stage(&format!(
            "confirming {} suspect(s) with {} more rounds: {}",
            suspects.len(),
            policy.confirmation_rounds,
            suspects.join(", ")
        ));
        run_rounds(
            m,
            &plan_of(&collected, &suspects),
            first_rounds,
            policy.confirmation_rounds as u32,
            true,
            &mut collected,
            &mut |d, t, w| progress.rounds(d, t, w),
        );
        stats::analyze(
            &inputs_from(&collected),
            profile,
            policy,
            Phase::Final {
                first_rounds: first_rounds as usize,
            },
        )
    };
    let benches = bench_results(&collected, decisions);
    (collected, benches)
}

/// The policy a replay of `saved` starts from, and where it came from: `config`'s (an explicit
/// `--config`), else the one `saved` recorded, else `local`'s (./harness.yaml) when it exists,
/// else today's built-in defaults, which may differ from those the run had.
pub fn replay_base_policy(
    saved: &Results,
    config: Option<&Path>,
    local: &Path,
) -> anyhow::Result<(Policy, String)> {
    Ok(match (config, &saved.method.policy) {
        (Some(p), _) => (
            Config::load(p)?.policy,
            format!("the policy of {}", p.display()),
        ),
        (None, Some(recorded)) => (recorded.clone(), "the policy it recorded".to_string()),
        (None, None) if local.is_file() => (
            Config::load(local)?.policy,
            format!("the policy of {} (it recorded none)", local.display()),
        ),
        (None, None) => (
            Policy::default(),
            "today's built-in policy (it recorded none)".to_string(),
        ),
    })
}

/// `harness replay`: a saved comparison decided again under `policy`, from the criterion samples
/// it recorded; nothing is built or measured. For tuning the method on real runs (harness/eval):
/// "what would this A/A run, or this PR, have shown with `noise_k: 2`, or with 4 rounds?"
///
/// What a replay cannot do, and how it says so: it cannot add rounds. `first_rounds` (default:
/// all the saved first-pass rounds, noise rounds included) may only truncate the first pass.
/// Confirmation rounds exist only for the saved run's suspects: a benchmark that becomes a
/// suspect under `policy` without recorded confirmation rounds cannot be confirmed, so it is at
/// most ⚠️, and its note says why; a policy asking for more confirmation rounds than were
/// recorded uses those recorded. Rows the saved run marked ⛔ stay ⛔. The thresholds come from
/// `profile` when given, else from the spread, whatever the saved run used
/// (`method.replay` records it).
pub fn replay(
    saved: &Results,
    policy: &Policy,
    first_rounds: Option<u32>,
    profile: Option<(&NoiseProfile, &str)>,
    source: &str,
) -> anyhow::Result<Results> {
    policy
        .validate()
        .map_err(|e| anyhow::anyhow!("replay policy: {e}"))?;
    let recorded_first = saved
        .rounds
        .iter()
        .filter(|r| !r.confirmation)
        .map(|r| r.index + 1)
        .max()
        .unwrap_or(saved.method.rounds);
    // The saved run's regular first-pass rounds; those above them were noise rounds, which only
    // its noisy benchmarks had (absent when none was noisy).
    let regular = saved.method.rounds.min(recorded_first);
    let first = first_rounds.unwrap_or(recorded_first);
    if first < 2 {
        bail!("--rounds {first}: at least 2 rounds are needed for a paired interval");
    }
    if first > recorded_first {
        bail!(
            "--rounds {first}: {source} has {recorded_first} first-pass rounds; a replay cannot add rounds"
        );
    }
    let confirmation_limit = recorded_first + policy.confirmation_rounds as u32;
    // The samples of `keep`'s rounds, per benchmark. ⛔ rows stay in the family, as they were
    // in the saved run's analysis, and are carried over as saved below.
    let collect = |keep: &dyn Fn(&str, u32) -> bool| -> Collected {
        let mut c = Collected::default();
        for b in &saved.benches {
            let side = |s: &Option<SideResult>| -> Vec<crate::results::RawSample> {
                s.iter()
                    .flat_map(|s| s.samples.iter())
                    .filter(|x| keep(&b.id, x.round))
                    .cloned()
                    .collect()
            };
            c.benches.insert(
                b.id.clone(),
                Collect {
                    target: String::new(),
                    throughput: b.throughput,
                    base: side(&b.base),
                    head: side(&b.head),
                },
            );
        }
        c
    };
    let prof = profile.map(|(p, _)| p);
    let first_pass = collect(&|_, r| r < first);
    let firsts = stats::analyze(&inputs_from(&first_pass), prof, policy, Phase::First);
    let suspects = stats::suspects(&firsts);
    let (collected, decisions) = if suspects.is_empty() || policy.confirmation_rounds == 0 {
        (first_pass, firsts)
    } else {
        let all = collect(&|id, r| {
            r < first
                || (r >= recorded_first
                    && r < confirmation_limit
                    && suspects.iter().any(|s| s == id))
        });
        let d = stats::analyze(
            &inputs_from(&all),
            prof,
            policy,
            Phase::Final {
                first_rounds: recorded_first as usize,
            },
        );
        (all, d)
    };
    let mut benches = bench_results(&collected, decisions);
    for b in benches.iter_mut() {
        let unconfirmable = suspects.contains(&b.id)
            && policy.confirmation_rounds > 0
            && !b.confirmed
            && b.status != Status::Regression;
        if unconfirmable {
            let why = "replay: no confirmation rounds were recorded for this benchmark (it was not \
                       a suspect in the saved run), so it cannot be confirmed here";
            b.note = Some(match b.note.take() {
                Some(n) => format!("{n}; {why}"),
                None => why.to_string(),
            });
        }
    }
    // ⛔ rows as saved, in the saved order.
    let mut by_id: BTreeMap<String, BenchResult> =
        benches.into_iter().map(|b| (b.id.clone(), b)).collect();
    let benches: Vec<BenchResult> = saved
        .benches
        .iter()
        .map(|b| match by_id.remove(&b.id) {
            Some(r) if b.status != Status::Failed => r,
            _ => b.clone(),
        })
        .collect();
    let outcome = Results::decide_all(&benches, &saved.failures, saved.e2e.as_ref());
    let mut method = saved.method.clone();
    // Rounds past the regular ones are the saved noise rounds the replay kept, not regular ones.
    method.rounds = first.min(regular);
    method.noise_rounds = first - method.rounds;
    method.confirmation_rounds = policy.confirmation_rounds as u32;
    method.confidence = policy.confidence;
    method.alpha = policy.alpha;
    method.floor = policy.floor;
    method.policy = Some(policy.clone());
    method.profile = profile
        .map(|(p, path)| format!("{path} (host {}, {} A/A trials)", p.fingerprint, p.trials));
    method.replay = Some(format!(
        "replayed from {source} (its first pass: {}; used: {first}) under policy {}",
        match recorded_first - regular {
            0 => format!("{regular} rounds"),
            n => format!("{regular} rounds + {n} noise rounds"),
        },
        serde_json::to_string(policy).unwrap_or_default()
    ));
    Ok(Results {
        created_unix_s: now_unix(),
        method,
        benches,
        outcome,
        ..saved.clone()
    })
}

/// The report rows of `decisions`: each with both sides' samples and per-round estimates; a
/// benchmark of a target that failed to run on a side is ⛔ whatever its numbers said.
fn bench_results(collected: &Collected, decisions: Vec<stats::Decision>) -> Vec<BenchResult> {
    decisions
        .into_iter()
        .map(|d| {
            let c: &Collect = &collected.benches[&d.id];
            let failed_side = collected
                .failed_targets
                .iter()
                .find(|(_, t)| *t == c.target)
                .map(|(s, _)| s.name());
            let (status, note) = match failed_side {
                Some(side) => (
                    Status::Failed,
                    Some(format!("bench target {} failed to run on {side}", c.target)),
                ),
                None => (d.status, d.note),
            };
            BenchResult {
                id: d.id,
                status,
                base: side_result(&c.base),
                head: side_result(&c.head),
                change: d.change,
                threshold: d.threshold,
                threshold_source: d.threshold_source,
                throughput: c.throughput,
                rounds: d.rounds as u32,
                confirmed: d.confirmation_rounds > 0,
                note,
            }
        })
        .collect()
}

fn method(
    policy: &Policy,
    rounds: u32,
    criterion: &CriterionSettings,
    profile: Option<String>,
) -> Method {
    Method {
        rounds,
        confirmation_rounds: policy.confirmation_rounds as u32,
        noise_rounds: policy.noise_rounds as u32,
        order: "ABBA (AB on even rounds, BA on odd), one benchmark at a time".into(),
        criterion_args: criterion.args(),
        confidence: policy.confidence,
        alpha: policy.alpha,
        correction: stats::CORRECTION.into(),
        floor: policy.floor,
        profile,
        replay: None,
        policy: Some(policy.clone()),
        sampling: None,
    }
}

/// `Method.sampling`: paired or criterion runs, and the bench targets that fell back.
fn describe_sampling(paired: bool, unpaired: &BTreeMap<String, String>) -> String {
    if !paired {
        return "criterion runs: one per benchmark and side (criterion.paired: false)".into();
    }
    let mut s = "paired: both sides serve each benchmark and its samples alternate ABBA, \
                 about measurement / sample_size apart (harness/src/serve.rs)"
        .to_string();
    if !unpaired.is_empty() {
        let list: Vec<String> = unpaired
            .iter()
            .map(|(t, why)| format!("{t} ({why})"))
            .collect();
        s.push_str("; criterion runs for ");
        s.push_str(&list.join(", "));
    }
    s
}

fn build_side(
    side: Side,
    dir: &Path,
    target_dir: &Path,
    config: &Config,
    targets: &[String],
    progress: &dyn Progress,
) -> Result<BenchExes, Failure> {
    progress.stage(&format!("building {side} in {}", dir.display()));
    let on_line = |l: &str| progress.line(l);
    build_benches(&BuildRequest {
        dir,
        target_dir,
        packages: &config.packages,
        benches: targets,
        on_line: &on_line,
    })
    .map_err(|failure| Failure {
        side,
        stage: Stage::Build,
        failure,
    })
}

/// `harness compare`: Ok(results) whatever the verdict; Err only when the gate could not start
/// (bad revision, unreadable config, broken cache).
pub fn compare(opts: &CompareOptions, progress: &dyn Progress) -> anyhow::Result<Results> {
    let t0 = Instant::now();
    let repo = Repo::open(&opts.repo_dir)?;
    let (base, base_co, head, head_co) = resolve_revisions(&repo, opts)?;
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
    let profile = load_profile(&opts.profile, &opts.cache_dir, &host)?;
    std::fs::create_dir_all(&opts.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", opts.cache_dir.display()))?;

    progress.stage(&format!(
        "checking out base {} ({})",
        short(&base.sha),
        base.spec
    ));
    let base_wt = repo.checkout("base", base_co, &opts.cache_dir)?;
    progress.stage(&format!(
        "checking out head {} ({})",
        short(&head.sha),
        head.spec
    ));
    let head_wt = repo.checkout("head", head_co, &opts.cache_dir)?;

    let mut failures = Vec::new();
    let mut round_infos = Vec::new();
    let mut benches = Vec::new();
    let mut sampling = None;
    if !targets.is_empty() {
        let base_exes = build_side(
            Side::Base,
            &base_wt.path,
            &opts.cache_dir.join("target").join("base"),
            &opts.config,
            &targets,
            progress,
        )
        .map_err(|f| failures.push(f))
        .ok();
        let head_exes = build_side(
            Side::Head,
            &head_wt.path,
            &opts.cache_dir.join("target").join("head"),
            &opts.config,
            &targets,
            progress,
        )
        .map_err(|f| failures.push(f))
        .ok();
        if let (Some(base_exes), Some(head_exes)) = (base_exes, head_exes) {
            let (r, b) = measure_benches(
                opts, &plan, base_exes, head_exes, policy, rounds, &criterion, &profile, progress,
            );
            for (t, why) in &r.unpaired {
                progress.stage(&format!(
                    "bench target {t}: criterion runs, not paired: {why}"
                ));
            }
            sampling = Some(describe_sampling(criterion.paired, &r.unpaired));
            failures.extend(r.failures);
            round_infos = r.rounds;
            benches = b;
        }
    }

    // The end-to-end checks: in a sharded run, shard 1 carries them all.
    let e2e_cases = &suite.e2e;
    let e2e_results = match (&opts.config.e2e, opts.shard) {
        (Some(cfg), shard) if !e2e_cases.is_empty() && shard.is_none_or(|(i, _)| i == 1) => {
            let checks = e2e::plan_checks(cfg, e2e_cases, &opts.e2e.devices, &head_wt.path)
                .map_err(anyhow::Error::msg)?;
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
                    &opts.cache_dir.join("target").join(side.name()),
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
            let r = e2e::run_compare(
                cfg,
                &checks,
                &mut b,
                &mut h,
                policy,
                rounds,
                opts.e2e.require_cuda,
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
        for (side, rev) in [("base", &base), ("PR", &head)] {
            if !rev.dirty {
                reproduce.push(format!(
                    "harness e2e --rev {} --suite {}  # {side}: correctness and speed alone",
                    rev.sha, opts.suite
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
            ..method(policy, rounds, &criterion, profile_desc)
        },
        rounds: round_infos,
        benches,
        failures,
        outcome,
        wall_s: t0.elapsed().as_secs_f64(),
        reproduce,
        e2e: e2e_results,
    })
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
) -> (Collected, Vec<BenchResult>) {
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
    let mut m = CriterionMeasurer {
        base: base_exes,
        head: head_exes,
        args: criterion.args(),
        work_dir: work_dir.clone(),
        on_line: Box::new(|_| {}),
        pair: criterion.paired.then(|| criterion.pair_settings()),
        serves: BTreeMap::new(),
    };
    let r = measure_and_decide(
        &mut m,
        &plan,
        policy,
        rounds,
        profile.as_ref().map(|(p, _)| p),
        progress,
    );
    let _ = std::fs::remove_dir_all(&work_dir);
    r
}

/// What `harness e2e` runs.
#[derive(Clone, Debug)]
pub struct E2eRunOptions {
    pub repo_dir: PathBuf,
    pub config: Config,
    /// The cases (empty: every case of `e2e.cases`).
    pub cases: Vec<String>,
    /// Label of the selection for the report (`suite quick`, `all cases`).
    pub selection: String,
    /// None: the working tree (uncommitted changes included), else HEAD.
    pub rev: Option<String>,
    pub cache_dir: PathBuf,
    /// `engine_bin[1]` / `oracle_bin[1]` are the prebuilt binaries, if given.
    pub e2e: E2eOptions,
}

/// `harness e2e`: the end-to-end checks of one revision (nightly): correctness against the
/// oracle and the goldens, and decode speed without a comparison. With both prebuilt binaries
/// and no `--rev`, nothing is checked out or built: goldens and relative model paths are read
/// from the repository's working tree.
pub fn e2e_single(opts: &E2eRunOptions, progress: &dyn Progress) -> anyhow::Result<Results> {
    let t0 = Instant::now();
    let cfg = opts.config.e2e.as_ref().with_context(|| {
        format!(
            "{} has no e2e section: nothing to check",
            crate::config::FILE_NAME
        )
    })?;
    let repo = Repo::open(&opts.repo_dir)?;
    let prebuilt = opts.e2e.engine_bin[1].is_some() && opts.e2e.oracle_bin[1].is_some();
    let (rev, checkout) = resolve_checkout(&repo, opts.rev.as_deref())?;
    std::fs::create_dir_all(&opts.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", opts.cache_dir.display()))?;
    let worktree = if prebuilt && opts.rev.is_none() {
        None
    } else {
        progress.stage(&format!("checking out {} ({})", short(&rev.sha), rev.spec));
        Some(repo.checkout("head", checkout, &opts.cache_dir)?)
    };
    let root = match &worktree {
        Some(wt) => wt.path.clone(),
        None => repo
            .workdir()
            .map(Path::to_path_buf)
            .context("a bare repository has no goldens to read")?,
    };
    let checks =
        e2e::plan_checks(cfg, &opts.cases, &opts.e2e.devices, &root).map_err(anyhow::Error::msg)?;
    if checks.is_empty() {
        bail!(
            "no end-to-end checks selected ({}{})",
            opts.selection,
            if opts.e2e.devices.is_empty() {
                String::new()
            } else {
                format!(
                    ", devices {}",
                    opts.e2e
                        .devices
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    let no_cuda = host::cuda_unavailable();
    let cuda = checks.iter().any(|c| c.device == Device::Cuda) && no_cuda.is_none();
    let tools = e2e_tools(
        Side::Head,
        &root,
        &opts.cache_dir.join("target").join("head"),
        &opts.config,
        &opts.e2e,
        cuda,
        progress,
    );
    let work = opts.cache_dir.join("runs").join("e2e-single");
    let _ = std::fs::remove_dir_all(&work);
    let mut env = SideEnv::new(Side::Head, tools, root, work.clone());
    env.cuda_unavailable = no_cuda;
    progress.stage(&format!("e2e: {} check(s)", checks.len()));
    let e2e = e2e::run_single(cfg, &checks, &mut env, opts.e2e.require_cuda, progress);
    let _ = std::fs::remove_dir_all(&work);
    if let Some(wt) = worktree {
        wt.release()?;
    }
    let mut reproduce = vec![format!(
        "harness e2e{}{}{}",
        match &opts.rev {
            Some(_) => format!(" --rev {}", rev.sha),
            None if prebuilt => " --engine-bin ENGINE --oracle-bin ORACLE".to_string(),
            // No --rev: the working tree, as this run checked it.
            None => String::new(),
        },
        opts.e2e
            .devices
            .iter()
            .map(|d| format!(" --device {}", d.name()))
            .collect::<String>(),
        if opts.e2e.require_cuda {
            " --require-cuda"
        } else {
            ""
        }
    )];
    reproduce.push(format!(
        "engine profile --model MODEL --ep DEVICE --prompt-ids IDS --tokens N {} --json",
        e2e.profile_args.join(" ")
    ));
    let outcome = Results::decide_all(&[], &[], Some(&e2e));
    Ok(Results {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_unix_s: now_unix(),
        suite: opts.selection.clone(),
        shard: None,
        base: rev.clone(),
        head: rev,
        host: host::collect(),
        method: Method {
            rounds: 1,
            confirmation_rounds: 0,
            noise_rounds: 0,
            order: "single revision (no A/B)".into(),
            criterion_args: Vec::new(),
            confidence: opts.config.policy.confidence,
            alpha: opts.config.policy.alpha,
            correction: stats::CORRECTION.into(),
            floor: opts.config.policy.floor,
            profile: None,
            replay: None,
            policy: Some(opts.config.policy.clone()),
            sampling: None,
        },
        rounds: Vec::new(),
        benches: Vec::new(),
        failures: Vec::new(),
        outcome,
        wall_s: t0.elapsed().as_secs_f64(),
        reproduce,
        e2e: Some(e2e),
    })
}

/// `harness calibrate`: `trials` A/A comparisons of one revision (one build, the same
/// executables on both sides), folded into a noise profile saved under the cache's `profiles/`
/// keyed by this host's fingerprint. Returns the profile and its path.
pub fn calibrate(
    opts: &CompareOptions,
    rev: Option<&str>,
    trials: u32,
    progress: &dyn Progress,
) -> anyhow::Result<(NoiseProfile, PathBuf)> {
    if trials < 2 {
        bail!("--trials {trials}: a noise profile needs at least 2 A/A trials");
    }
    let repo = Repo::open(&opts.repo_dir)?;
    let r = repo.resolve(rev.unwrap_or("HEAD"))?;
    let plan = plan_for(&opts.config, &opts.suite)?;
    let targets: Vec<String> = plan.iter().map(|p| p.target.clone()).collect();
    let suite = opts.config.suite(&opts.suite).map_err(anyhow::Error::msg)?;
    let criterion = suite
        .criterion
        .clone()
        .unwrap_or_else(|| opts.config.criterion.clone());
    let rounds = opts
        .rounds
        .or(suite.rounds)
        .unwrap_or(opts.config.policy.rounds as u32);
    let host = host::collect();
    std::fs::create_dir_all(&opts.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", opts.cache_dir.display()))?;
    let wt = repo.checkout("base", Checkout::Commit(r.sha.clone()), &opts.cache_dir)?;
    let exes = build_side(
        Side::Base,
        &wt.path,
        &opts.cache_dir.join("target").join("base"),
        &opts.config,
        &targets,
        progress,
    )
    .map_err(|f| anyhow::anyhow!("{}\n{}", f.failure.message, f.failure.log_tail.join("\n")))?;
    wt.release()?;
    let work_dir = opts.cache_dir.join("runs").join("calibrate");
    let mut all_trials = Vec::new();
    for t in 0..trials {
        progress.stage(&format!(
            "A/A trial {}/{trials} of {}",
            t + 1,
            short(&r.sha)
        ));
        let _ = std::fs::remove_dir_all(&work_dir);
        let mut m = CriterionMeasurer {
            base: exes.clone(),
            head: exes.clone(),
            args: criterion.args(),
            work_dir: work_dir.clone(),
            on_line: Box::new(|_| {}),
            pair: criterion.paired.then(|| criterion.pair_settings()),
            serves: BTreeMap::new(),
        };
        let mut collected = Collected::default();
        run_rounds(
            &mut m,
            &plan,
            0,
            rounds,
            false,
            &mut collected,
            &mut |d, tt, w| progress.rounds(d, tt, w),
        );
        if let Some(f) = collected.failures.first() {
            bail!(
                "A/A trial {}: {}\n{}",
                t + 1,
                f.failure.message,
                f.failure.log_tail.join("\n")
            );
        }
        all_trials.push(inputs_from(&collected));
    }
    let _ = std::fs::remove_dir_all(&work_dir);
    let profile = NoiseProfile::from_aa_trials(&host.fingerprint, now_unix(), &all_trials);
    let path = profile_path(&opts.cache_dir, &host.fingerprint);
    std::fs::create_dir_all(path.parent().expect("has parent"))
        .with_context(|| format!("cannot create {}", path.display()))?;
    std::fs::write(&path, profile.to_json())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok((profile, path))
}

/// The benchmark ids a criterion executable would run under `filter` (`--list`); empty when it
/// cannot list (the run stage then reports the failure).
pub fn list_ids(exe: &Path, filter: Option<&str>) -> Vec<String> {
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--bench", "--list"]);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    let Ok(out) = cmd.stderr(std::process::Stdio::null()).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": benchmark"))
        .map(str::to_string)
        .collect()
}

/// `harness merge`: one report from the results of several shards of the same comparison.
/// Base, head and suite must agree; benchmarks and failures are joined (an id measured by two
/// shards is an error: the shards overlapped), rounds concatenated, the outcome re-decided.
/// Statuses stay as each shard decided them (Holm ran within each shard).
pub fn merge(parts: Vec<Results>) -> anyhow::Result<Results> {
    let mut it = parts.into_iter();
    let Some(mut out) = it.next() else {
        bail!("nothing to merge: give at least one --input");
    };
    let mut seen: std::collections::BTreeSet<String> =
        out.benches.iter().map(|b| b.id.clone()).collect();
    let mut shards: Vec<(u32, u32)> = out.shard.into_iter().collect();
    for r in it {
        if r.base.sha != out.base.sha || r.head.sha != out.head.sha || r.suite != out.suite {
            bail!(
                "cannot merge results of different comparisons: {}..{} ({}) vs {}..{} ({})",
                short(&out.base.sha),
                short(&out.head.sha),
                out.suite,
                short(&r.base.sha),
                short(&r.head.sha),
                r.suite
            );
        }
        if r.host.fingerprint != out.host.fingerprint {
            out.host.cpu = format!(
                "{} (and others: shards ran on different hosts)",
                out.host.cpu
            );
        }
        for b in r.benches {
            if !seen.insert(b.id.clone()) {
                bail!(
                    "benchmark {} appears in two shards: the shards overlap",
                    b.id
                );
            }
            out.benches.push(b);
        }
        out.failures.extend(r.failures);
        out.rounds.extend(r.rounds);
        out.wall_s = out.wall_s.max(r.wall_s);
        shards.extend(r.shard);
        out.reproduce.extend(r.reproduce);
        out.e2e = match (out.e2e.take(), r.e2e) {
            (Some(mut a), Some(b)) => {
                a.correctness.extend(b.correctness);
                a.speed.extend(b.speed);
                a.failures.extend(b.failures);
                a.require_cuda |= b.require_cuda;
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
    out.reproduce.dedup();
    shards.sort();
    shards.dedup();
    if let Some(&(_, n)) = shards.first()
        && (shards.len() as u32 != n || shards.iter().any(|&(_, m)| m != n))
    {
        let have: Vec<String> = shards.iter().map(|(i, n)| format!("{i}/{n}")).collect();
        bail!(
            "incomplete or mixed shards: got {}, expected 1..{n} of {n}",
            have.join(", ")
        );
    }
    out.shard = None;
    out.outcome = Results::decide_all(&out.benches, &out.failures, out.e2e.as_ref());
    Ok(out)
}

pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

/// What the report calls a dirty working tree.
pub fn describe(rev: &Revision) -> String {
    if rev.dirty {
        format!(
            "{} {} ({WORKING_TREE_SPEC}, uncommitted changes)",
            short(&rev.sha),
            rev.subject
        )
    } else {
        format!("{} {}", short(&rev.sha), rev.subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::criterion::Measured;
    use crate::results::{Failure, Outcome, RawSample, ThresholdSource};
    use crate::vocab::ProcessFailure;

    #[test]
    fn a_paired_round_decides_on_the_median_of_its_sample_pairs() {
        let sample = |mode: &str, times: [f64; 5]| RawSample {
            round: 0,
            sampling_mode: mode.into(),
            iters: vec![1.0; 5],
            times_ns: times.to_vec(),
        };
        // The machine slows through the round (head's samples 110 → 198, each taken next to
        // base's), and base's first two samples were disturbed (300 instead of 100 and 120).
        // Pairs: 0.37×, 0.44×, 1.1×, 1.1×, 1.1×: the median pair says 1.1×. The sides' lower
        // quartiles say 132 / 160 = 0.825×: the disturbance took away base's fast samples.
        let base = [300.0, 300.0, 140.0, 160.0, 180.0];
        let head = [110.0, 132.0, 154.0, 176.0, 198.0];
        let ratio = |mode: &str| {
            let mut c = Collected::default();
            c.benches.insert(
                "g/x".into(),
                crate::run::Collect {
                    target: "t".into(),
                    throughput: None,
                    base: vec![sample(mode, base)],
                    head: vec![sample(mode, head)],
                },
            );
            let i = &inputs_from(&c)[0];
            i.head.as_ref().unwrap()[0] / i.base.as_ref().unwrap()[0]
        };
        assert!((ratio("paired") - 1.1).abs() < 1e-9, "{}", ratio("paired"));
        // Criterion runs were not taken pairwise: each side's lower quartile.
        assert!(
            (ratio("linear") - 132.0 / 160.0).abs() < 1e-9,
            "{}",
            ratio("linear")
        );
    }

    struct Quiet;
    impl Progress for Quiet {
        fn stage(&self, _: &str) {}
        fn rounds(&self, _: u64, _: u64, _: &str) {}
    }

    /// One target `t` whose benchmarks answer `ns(id, side, round)`; records (id, round) of
    /// every measurement.
    struct Script {
        ns: fn(&str, Side, u32) -> f64,
        ids: Vec<&'static str>,
        measured: Vec<(String, u32)>,
    }

    impl Measurer for Script {
        fn has_target(&self, _: Side, _: &str) -> bool {
            true
        }
        fn bench_ids(&self, _: Side, _: &str, filter: Option<&str>) -> Option<Vec<String>> {
            let re = filter.map(|f| regex_lite::Regex::new(f).unwrap());
            let ids = self
                .ids
                .iter()
                .filter(|id| re.as_ref().is_none_or(|r| r.is_match(id)));
            Some(ids.map(|s| s.to_string()).collect())
        }
        fn measure(
            &mut self,
            side: Side,
            target: &str,
            filter: Option<&str>,
            round: u32,
        ) -> Result<BTreeMap<String, Measured>, ProcessFailure> {
            let mut out = BTreeMap::new();
            for id in self.bench_ids(side, target, filter).unwrap() {
                if side == Side::Base {
                    self.measured.push((id.clone(), round));
                }
                let ns = (self.ns)(&id, side, round);
                let sample = RawSample {
                    round,
                    sampling_mode: "flat".into(),
                    iters: vec![1.0; 4],
                    times_ns: vec![ns; 4],
                };
                let m = Measured {
                    id: id.clone(),
                    throughput: None,
                    sample,
                };
                out.insert(id, m);
            }
            Ok(out)
        }
    }

    /// `quiet`: no change. `noisy`: ±25 % per round in the first six rounds (a spread threshold
    /// far above max_threshold: ❔), exactly equal after. `slow`: +20 % with a little noise (a
    /// suspect, confirmed). `lucky`: −6 % in four rounds, 0 in two: an estimate of −3.9 %,
    /// past its 3.2 % threshold, t = 3.2 and Holm-adjusted p ≈ 0.08, so ❔, and not for noise
    /// rounds (its threshold is under `noise_target`; chosen for a large estimate, they would be
    /// optional stopping). `spread`: +8.3 % with ±8 % per round, so a six-round threshold of
    /// 9.4 % (above `noise_target`): noise rounds bring it to 6.2 %, and the slowdown is caught.
    fn scripted_ns(id: &str, side: Side, round: u32) -> f64 {
        let wobble: f64 = if round.is_multiple_of(2) { 1.0 } else { -1.0 };
        match (id, side) {
            (_, Side::Base) => 100.0,
            ("t/noisy", Side::Head) if round < 6 => 100.0 * (0.25 * wobble).exp(),
            ("t/slow", Side::Head) => 120.0 * (0.01 * wobble).exp(),
            ("t/slower", Side::Head) => 140.0 * (0.01 * wobble).exp(),
            ("t/spread", Side::Head) => 100.0 * (0.08 + 0.08 * wobble).exp(),
            ("t/lucky", Side::Head) if round < 6 && round != 1 && round != 4 => {
                100.0 * (-0.06f64).exp()
            }
            _ => 100.0,
        }
    }

    fn run_script(noise_rounds: usize) -> (Script, Vec<BenchResult>) {
        let mut m = Script {
            ns: scripted_ns,
            ids: vec!["t/quiet", "t/noisy", "t/slow", "t/lucky", "t/spread"],
            measured: Vec::new(),
        };
        let policy = Policy {
            noise_rounds,
            ..Policy::default()
        };
        let plan = [TargetPlan {
            target: "t".into(),
            filter: None,
        }];
        let (_, benches) = measure_and_decide(&mut m, &plan, &policy, 6, None, &Quiet);
        (m, benches)
    }

    fn rounds_of(m: &Script, id: &str) -> Vec<u32> {
        m.measured
            .iter()
            .filter(|x| x.0 == id)
            .map(|x| x.1)
            .collect()
    }

    #[test]
    fn noise_rounds_go_to_the_too_noisy_and_confirmation_rounds_come_after_them() {
        let (m, benches) = run_script(Policy::default().noise_rounds);
        let status = |id: &str| benches.iter().find(|b| b.id == id).unwrap().status;
        // Rounds 0-5 for everyone; 6-11 (noise) for t/noisy and t/spread only; 12-19
        // (confirmation, the default 8) for the suspects t/slow and t/spread only.
        assert_eq!(rounds_of(&m, "t/quiet"), (0..6).collect::<Vec<_>>());
        assert_eq!(rounds_of(&m, "t/noisy"), (0..12).collect::<Vec<_>>());
        assert_eq!(status("t/lucky"), Status::TooNoisy);
        // Its threshold is under noise_target, so no noise rounds for it.
        let lucky = benches.iter().find(|b| b.id == "t/lucky").unwrap();
        assert!((lucky.threshold - 0.032).abs() < 0.001, "{lucky:?}");
        assert!(
            (lucky.change.unwrap().estimate + 0.039).abs() < 0.001,
            "{lucky:?}"
        );
        assert_eq!(rounds_of(&m, "t/lucky"), (0..6).collect::<Vec<_>>());
        let slow: Vec<u32> = (0..6).chain(12..20).collect();
        assert_eq!(rounds_of(&m, "t/slow"), slow);
        assert_eq!(rounds_of(&m, "t/spread"), (0..20).collect::<Vec<_>>());
        let spread = benches.iter().find(|b| b.id == "t/spread").unwrap();
        assert_eq!(spread.status, Status::Regression, "{spread:?}");
        assert!(spread.threshold < 0.065, "{spread:?}");
        assert_eq!(status("t/quiet"), Status::NoChange);
        assert_eq!(status("t/noisy"), Status::NoChange, "12 rounds can tell");
        assert_eq!(status("t/slow"), Status::Regression);
        let noisy = benches.iter().find(|b| b.id == "t/noisy").unwrap();
        assert_eq!(noisy.rounds, 12);
        assert!(!noisy.confirmed);
    }

    /// A saved scripted comparison under `policy`, as `harness compare` would write it.
    fn saved_run(policy: &Policy, ids: Vec<&'static str>) -> Results {
        let mut m = Script {
            ns: scripted_ns,
            ids,
            measured: Vec::new(),
        };
        let plan = [TargetPlan {
            target: "t".into(),
            filter: None,
        }];
        let (collected, benches) = measure_and_decide(&mut m, &plan, policy, 6, None, &Quiet);
        let rev = Revision {
            spec: "x".into(),
            sha: "0".repeat(40),
            subject: "s".into(),
            dirty: false,
        };
        Results {
            schema: crate::results::SCHEMA.into(),
            tool_version: "test".into(),
            created_unix_s: 0.0,
            suite: "s".into(),
            shard: None,
            base: rev.clone(),
            head: rev,
            host: HostInfo::default(),
            method: method(policy, 6, &CriterionSettings::default(), None),
            rounds: collected.rounds,
            outcome: Results::decide_all(&benches, &[], None),
            benches,
            failures: vec![],
            wall_s: 1.0,
            reproduce: vec![],
            e2e: None,
        }
    }

    fn by_id<'a>(r: &'a Results, id: &str) -> &'a BenchResult {
        r.benches.iter().find(|b| b.id == id).unwrap()
    }

    #[test]
    fn a_replay_under_the_same_policy_gives_the_saved_decisions() {
        // Without noise rounds, so that the saved first pass is exactly 6 rounds long.
        let policy = Policy {
            noise_rounds: 0,
            ..Policy::default()
        };
        let saved = saved_run(&policy, vec!["t/quiet", "t/noisy", "t/slow", "t/slower"]);
        assert_eq!(by_id(&saved, "t/slow").status, Status::Regression);
        let r = replay(&saved, &policy, None, None, "saved.json").unwrap();
        assert_eq!(r.benches, saved.benches);
        assert_eq!(r.outcome, saved.outcome);
        // A ⛔ row (its target failed on a side) stays as saved; the others are unchanged.
        let mut failed = saved.clone();
        failed.benches[0].status = Status::Failed;
        failed.benches[0].note = Some("bench target t failed to run on head".into());
        let rf = replay(&failed, &policy, None, None, "saved.json").unwrap();
        assert_eq!(rf.benches, failed.benches);
        let note = r.method.replay.as_deref().unwrap();
        assert!(
            note.contains("saved.json") && note.contains("\"noise_k\":2.5"),
            "{note}"
        );
        // Fewer first-pass rounds: the confirmation rounds are still the recorded ones.
        let r4 = replay(&saved, &policy, Some(4), None, "saved.json").unwrap();
        assert_eq!(by_id(&r4, "t/quiet").rounds, 4);
        assert_eq!(by_id(&r4, "t/slow").rounds, 4 + 8);
        assert_eq!(by_id(&r4, "t/slow").status, Status::Regression);
        assert_eq!(r4.method.rounds, 4);
        let e = replay(&saved, &policy, Some(7), None, "saved.json").unwrap_err();
        assert!(e.to_string().contains("cannot add rounds"), "{e}");
        assert!(replay(&saved, &policy, Some(1), None, "saved.json").is_err());
        // A saved suspect that is none under the variant (a fixed 50 % threshold) while another
        // still is: the first one's confirmation rounds are not used.
        let fixed = Policy::default()
            .with_overrides(r#"{"thresholds": {"t/slow": 0.5}}"#)
            .unwrap();
        let r = replay(&saved, &fixed, None, None, "saved.json").unwrap();
        let slow = by_id(&r, "t/slow");
        assert_eq!(
            (slow.status, slow.rounds, slow.confirmed),
            (Status::NoChange, 6, false)
        );
        let slower = by_id(&r, "t/slower");
        assert_eq!((slower.status, slower.rounds), (Status::Regression, 14));
    }

    #[test]
    fn a_replay_counts_the_saved_noise_rounds_apart_from_the_regular_ones() {
        // Saved under the defaults: 6 regular rounds, then 6 noise rounds for t/noisy and
        // t/spread, then confirmation rounds.
        let policy = Policy::default();
        let saved = saved_run(&policy, vec!["t/quiet", "t/noisy", "t/slow", "t/spread"]);
        assert_eq!(by_id(&saved, "t/noisy").rounds, 12);
        let r = replay(&saved, &policy, None, None, "saved.json").unwrap();
        assert_eq!(r.benches, saved.benches);
        assert_eq!(
            (r.method.rounds, r.method.noise_rounds),
            (6, policy.noise_rounds as u32)
        );
        let note = r.method.replay.as_deref().unwrap();
        assert!(
            note.contains("6 rounds + 6 noise rounds; used: 12"),
            "{note}"
        );
        // Truncated into the noise rounds, then to the regular rounds only.
        let r9 = replay(&saved, &policy, Some(9), None, "saved.json").unwrap();
        assert_eq!((r9.method.rounds, r9.method.noise_rounds), (6, 3));
        assert_eq!(by_id(&r9, "t/noisy").rounds, 9);
        let r6 = replay(&saved, &policy, Some(6), None, "saved.json").unwrap();
        assert_eq!((r6.method.rounds, r6.method.noise_rounds), (6, 0));
        assert_eq!(by_id(&r6, "t/noisy").rounds, 6);
    }

    #[test]
    fn a_replay_starts_from_the_recorded_policy_unless_a_config_is_given() {
        let recorded = Policy {
            noise_k: 3.0,
            ..Policy::default()
        };
        let mut saved = saved_run(&recorded, vec!["t/quiet"]);
        assert_eq!(saved.method.policy.as_ref(), Some(&recorded));
        let none = Path::new("/nonexistent/harness.yaml");
        let (p, from) = replay_base_policy(&saved, None, none).unwrap();
        assert_eq!(
            (p, from.as_str()),
            (recorded.clone(), "the policy it recorded")
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("harness.yaml");
        std::fs::write(
            &cfg,
            "packages: [engine]\nsuites:\n  full:\n    benches:\n      kernels: []\n\
             policy:\n  noise_k: 2\n",
        )
        .unwrap();
        let (p, from) = replay_base_policy(&saved, Some(&cfg), none).unwrap();
        assert_eq!(p.noise_k, 2.0);
        assert!(from.contains("harness.yaml"), "{from}");
        // A results file from before policies were recorded.
        saved.method.policy = None;
        assert_eq!(
            replay_base_policy(&saved, None, none).unwrap().0,
            Policy::default()
        );
        assert_eq!(
            replay_base_policy(&saved, None, &cfg).unwrap().0.noise_k,
            2.0
        );
        assert!(replay_base_policy(&saved, Some(none), none).is_err());
    }

    #[test]
    fn a_suspect_without_recorded_confirmation_rounds_is_at_most_a_warning() {
        // Saved under a 25 % floor: the +20 % of t/slow is no suspect, so it has no
        // confirmation rounds on record.
        let high = Policy {
            floor: 0.25,
            max_threshold: 0.5,
            ..Policy::default()
        };
        let saved = saved_run(&high, vec!["t/quiet", "t/noisy", "t/slow", "t/lucky"]);
        assert_eq!(by_id(&saved, "t/slow").status, Status::NoChange);
        assert!(saved.rounds.iter().all(|r| !r.confirmation));
        let r = replay(&saved, &Policy::default(), None, None, "saved.json").unwrap();
        let slow = by_id(&r, "t/slow");
        assert_eq!(slow.status, Status::PossibleRegression);
        assert!(!slow.confirmed);
        assert!(
            slow.note
                .as_deref()
                .unwrap()
                .contains("no confirmation rounds were recorded"),
            "{:?}",
            slow.note
        );
        assert_eq!(r.outcome, Outcome::Warn);
    }

    #[test]
    fn without_noise_rounds_the_noisy_benchmark_stays_too_noisy() {
        let (m, benches) = run_script(0);
        let noisy = benches.iter().find(|b| b.id == "t/noisy").unwrap();
        assert_eq!(noisy.status, Status::TooNoisy);
        assert_eq!(rounds_of(&m, "t/noisy"), (0..6).collect::<Vec<_>>());
        let slow: Vec<u32> = (0..6).chain(6..14).collect();
        assert_eq!(rounds_of(&m, "t/slow"), slow);
        // Six rounds give t/spread a 9.4 % threshold; its +8.3 % stays inside.
        let spread = benches.iter().find(|b| b.id == "t/spread").unwrap();
        assert_eq!(spread.status, Status::NoChange, "{spread:?}");
        assert!(spread.threshold > 0.085, "{spread:?}");
    }

    #[test]
    fn shard_specs_parse_or_name_the_flag() {
        assert_eq!(parse_shard("2/4"), Ok((2, 4)));
        for bad in ["0/4", "5/4", "1/0", "x/2", "3", ""] {
            let e = parse_shard(bad).unwrap_err();
            assert!(e.starts_with("--shard"), "{e}");
        }
    }

    #[test]
    fn shards_are_disjoint_cover_the_suite_and_balance() {
        let plan = vec![
            TargetPlan {
                target: "kernels".into(),
                filter: None,
            },
            TargetPlan {
                target: "decode".into(),
                filter: Some("^decode/".into()),
            },
        ];
        let ids_of = |tp: &TargetPlan| -> Vec<String> {
            match tp.target.as_str() {
                "kernels" => (0..7).map(|i| format!("add/f32/{i}")).collect(),
                _ => vec!["decode/tiny/32".into()],
            }
        };
        let n = 3;
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        for i in 1..=n {
            let p = shard_plan(&plan, &ids_of, (i, n));
            let mut count = 0;
            for tp in &p {
                let re = regex_lite::Regex::new(tp.filter.as_ref().unwrap()).unwrap();
                for id in ids_of(tp) {
                    if re.is_match(&id) {
                        seen.push(id);
                        count += 1;
                    }
                }
            }
            sizes.push(count);
        }
        seen.sort();
        let mut all: Vec<String> = plan.iter().flat_map(ids_of).collect();
        all.sort();
        assert_eq!(seen, all, "every id exactly once over the shards");
        assert!(
            sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
            "{sizes:?}"
        );
    }

    fn part(shard: (u32, u32), ids: &[&str], status: Status) -> Results {
        Results {
            schema: SCHEMA.into(),
            tool_version: "0".into(),
            created_unix_s: 0.0,
            suite: "full".into(),
            shard: Some(shard),
            base: Revision {
                spec: "main".into(),
                sha: "a".repeat(40),
                subject: "base".into(),
                dirty: false,
            },
            head: Revision {
                spec: "pr".into(),
                sha: "b".repeat(40),
                subject: "head".into(),
                dirty: false,
            },
            host: HostInfo::default(),
            method: method(&Policy::default(), 6, &CriterionSettings::default(), None),
            rounds: Vec::new(),
            benches: ids
                .iter()
                .map(|id| BenchResult {
                    id: id.to_string(),
                    status,
                    base: None,
                    head: None,
                    change: None,
                    threshold: 0.03,
                    threshold_source: ThresholdSource::Floor,
                    throughput: None,
                    rounds: 6,
                    confirmed: false,
                    note: None,
                })
                .collect(),
            failures: Vec::new(),
            outcome: Outcome::Pass,
            wall_s: shard.0 as f64,
            reproduce: vec![format!("harness compare --shard {}/{}", shard.0, shard.1)],
            e2e: None,
        }
    }

    #[test]
    fn merge_joins_shards_and_redecides() {
        let a = part((1, 2), &["x/1", "x/2"], Status::NoChange);
        let mut b = part((2, 2), &["y/1"], Status::Regression);
        b.outcome = Outcome::Fail;
        let m = merge(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(m.benches.len(), 3);
        assert_eq!(m.outcome, Outcome::Fail);
        assert_eq!(m.shard, None);
        assert_eq!(m.wall_s, 2.0);
        assert_eq!(m.reproduce.len(), 2);

        let e = merge(vec![a.clone()]).unwrap_err().to_string();
        assert!(e.contains("incomplete"), "{e}");
        let e = merge(vec![a.clone(), a.clone()]).unwrap_err().to_string();
        assert!(e.contains("appears in two shards"), "{e}");
        let mut other = b.clone();
        other.head.sha = "c".repeat(40);
        let e = merge(vec![a.clone(), other]).unwrap_err().to_string();
        assert!(e.contains("different comparisons"), "{e}");
        let mut failing = b;
        failing.benches.clear();
        failing.failures.push(Failure {
            side: Side::Head,
            stage: Stage::Build,
            failure: ProcessFailure::new("boom", Vec::new()),
        });
        assert_eq!(merge(vec![a, failing]).unwrap().outcome, Outcome::Fail);
    }
}
