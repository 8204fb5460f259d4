//! `harness e2e`: the end-to-end checks of one revision (nightly: engine tokens vs the oracle
//! and the goldens, decode speed, no comparison), and the end-to-end options `compare` shares:
//! prebuilt `--engine-bin`/`--oracle-bin` per side, or each side's binaries built in its slot.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};

use super::{Common, Format};
use crate::build::{BinsRequest, build_e2e_bins};
use crate::cache::slot_target_dir;
use crate::config::{Config, FailOn};
use crate::e2e::tools::Tools;
use crate::e2e::{self, SideEnv};
use crate::git::{Repo, resolve_checkout};
use crate::host;
use crate::progress::{Progress, Ui};
use crate::report::format::short_sha as short;
use crate::results::{Method, Results, SCHEMA, now_unix};
use crate::stats;
use crate::vocab::{Device, PerSide, Side};

/// End-to-end checks of one revision (nightly): engine tokens vs the oracle and the goldens,
/// and decode speed (no comparison). Exit 0 all ran and agree, 1 a check diverged or failed,
/// 2 could not run (with --require-cuda: a CUDA check could not run).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Revision to check (default: the working tree; with both --engine-bin and --oracle-bin,
    /// nothing is built and goldens are read from the working tree).
    #[arg(long, conflicts_with_all = ["engine_bin", "oracle_bin"])]
    rev: Option<String>,
    /// A prebuilt engine binary (e.g. target/release/engine built with --features cuda).
    #[arg(long)]
    engine_bin: Option<PathBuf>,
    /// A prebuilt oracle binary.
    #[arg(long)]
    oracle_bin: Option<PathBuf>,
    /// Only checks on this device (repeatable; default: every device a case lists).
    #[arg(long, value_enum)]
    device: Vec<Device>,
    /// Only this case of harness.yaml's e2e.cases (repeatable; default: the --suite's e2e
    /// cases, else every case).
    #[arg(long)]
    case: Vec<String>,
    /// A CUDA check that cannot run (no GPU, engine built without CUDA, model missing) is an
    /// error (exit 2) instead of ⏭.
    #[arg(long)]
    require_cuda: bool,
    #[command(flatten)]
    common: Common,
    #[arg(long, value_enum, default_value = "term")]
    format: Format,
    /// Write results.json and report.md here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// When the exit status is 1 (default: harness.yaml's fail_on).
    #[arg(long, value_enum)]
    fail_on: Option<FailOn>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let explicit_suite = args.common.suite.clone();
    let r = args.common.resolve()?;
    let fail_on = args.fail_on.unwrap_or(r.config.fail_on);
    let case = args.case;
    let (cases, selection) = match (case.is_empty(), &explicit_suite) {
        (false, _) => (case.clone(), format!("cases {}", case.join(", "))),
        (true, Some(s)) => {
            let suite = r.config.suite(s).map_err(anyhow::Error::msg)?;
            if suite.e2e.is_empty() {
                bail!("--suite {s}: the suite has no e2e cases");
            }
            (suite.e2e.clone(), format!("e2e of suite {s}"))
        }
        (true, None) => (Vec::new(), "e2e".to_string()),
    };
    let opts = E2eRunOptions {
        repo_dir: r.repo_root.clone(),
        config: r.config,
        cases,
        selection,
        rev: args.rev,
        cache_dir: r.cache_dir.clone(),
        e2e: E2eOptions {
            devices: args.device,
            require_cuda: args.require_cuda,
            engine_bin: PerSide::new(None, args.engine_bin),
            oracle_bin: PerSide::new(None, args.oracle_bin),
        },
    };
    let results = e2e_single(&opts, &Ui::new())?;
    let out = args.out.unwrap_or_else(|| r.cache_dir.join("last-e2e"));
    super::finish(&results, &out, args.format, fail_on)
}

/// Options of the end-to-end checks shared by `compare` and `e2e`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct E2eOptions {
    /// Only these devices (empty: every device a case lists).
    pub devices: Vec<Device>,
    /// A CUDA check that does not run is an error (exit 2), not ⏭.
    pub require_cuda: bool,
    /// Prebuilt binaries per side: that side's are not built.
    pub engine_bin: PerSide<Option<PathBuf>>,
    pub oracle_bin: PerSide<Option<PathBuf>>,
}

/// Parses `--engine-bin`/`--oracle-bin` values of `compare`: `base=PATH`, `head=PATH`, or a bare
/// `PATH` for both sides (an A/A run of one binary).
pub fn parse_side_bins(flag: &str, values: &[String]) -> Result<PerSide<Option<PathBuf>>, String> {
    let mut out: PerSide<Option<PathBuf>> = PerSide::default();
    for v in values {
        let (sides, path): (&[Side], &str) = match v.split_once('=') {
            Some((s, p)) if s == Side::Base.name() => (&[Side::Base], p),
            Some((s, p)) if s == Side::Head.name() => (&[Side::Head], p),
            _ => (&Side::BOTH, v.as_str()),
        };
        if path.is_empty() {
            return Err(format!(
                "{flag} {v:?}: expected base=PATH, head=PATH or PATH"
            ));
        }
        for &side in sides {
            if out[side].is_some() {
                return Err(format!("{flag}: the {side} binary is given twice"));
            }
            out[side] = Some(PathBuf::from(path));
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
    let e2e = config
        .e2e
        .as_ref()
        .ok_or("harness.yaml has no e2e section")?;
    let given_engine = opts.engine_bin[side]
        .as_deref()
        .map(|p| prebuilt("--engine-bin", p))
        .transpose()?;
    let given_oracle = opts.oracle_bin[side]
        .as_deref()
        .map(|p| prebuilt("--oracle-bin", p))
        .transpose()?;
    if let (Some(engine), Some(oracle)) = (&given_engine, &given_oracle) {
        return Ok(Tools {
            engine: engine.clone(),
            oracle: oracle.clone(),
            deadline: config.deadlines.e2e(),
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
        deadline: config.deadlines.build(),
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
        deadline: config.deadlines.e2e(),
    })
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
    /// `engine_bin.head` / `oracle_bin.head` are the prebuilt binaries, if given.
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
    let prebuilt = opts.e2e.engine_bin.head.is_some() && opts.e2e.oracle_bin.head.is_some();
    let (rev, checkout) = resolve_checkout(&repo, opts.rev.as_deref())?;
    std::fs::create_dir_all(&opts.cache_dir)
        .with_context(|| format!("cannot create cache dir {}", opts.cache_dir.display()))?;
    let worktree = if prebuilt && opts.rev.is_none() {
        None
    } else {
        progress.stage(&format!("checking out {} ({})", short(&rev.sha), rev.spec));
        Some(repo.checkout(Side::Head.name(), checkout, &opts.cache_dir)?)
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
        &slot_target_dir(&opts.cache_dir, Side::Head),
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
            placement: None,
        },
        rounds: Vec::new(),
        benches: Vec::new(),
        failures: Vec::new(),
        outcome,
        wall_s: t0.elapsed().as_secs_f64(),
        reproduce,
        e2e: Some(e2e),
        gate_changes: vec![],
        lost_time: vec![],
    })
}
