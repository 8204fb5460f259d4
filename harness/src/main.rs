//! The `harness` command line (glue only): parse flags, resolve them against `harness.yaml`,
//! call the library, print the report, map the outcome to the exit-code contract
//! (0 passed or report-only, 1 gate failed, 2 could not run).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use harness::compare::{
    CompareOptions, E2eOptions, E2eRunOptions, ProfileChoice, Progress, default_cache_root,
    parse_side_bins, repo_cache_dir,
};
use harness::config::{self, Config, FailOn};
use harness::git::Repo;
use harness::report;
use harness::results::{Outcome, Results};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "harness",
    version,
    about = "Regression gate: base vs PR benchmarks, interleaved, with calibrated thresholds"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Term,
    Md,
    Json,
}

#[derive(clap::Args, Clone, Debug)]
struct Common {
    /// harness.yaml to use (default: the repository root's).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Suite from harness.yaml (default: its `default_suite`).
    #[arg(long)]
    suite: Option<String>,
    /// Rounds of the first pass (default: the suite's, else policy.rounds).
    #[arg(long)]
    rounds: Option<u32>,
    /// Cache root for slots, target dirs and profiles (default: $HARNESS_CACHE_DIR or
    /// ~/.cache/decoder-gate/harness).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The repository (default: the current directory).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
}

/// Where a results file that `merge` or `replay` makes goes, and the exit status it gives.
#[derive(clap::Args, Clone, Debug)]
struct Output {
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Also write results.json, report.md and benchmark-action.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit status under this policy (default: report only, 0).
    #[arg(long, value_enum)]
    fail_on: Option<FailOn>,
}

impl Output {
    /// Writes `results` to `--out` if given, prints it in `--format`; the exit status.
    fn emit(&self, results: &Results) -> anyhow::Result<u8> {
        if let Some(out) = &self.out {
            write_outputs(out, results)?;
        }
        print!("{}", render(results, self.format));
        Ok(exit_code(
            results.outcome,
            self.fail_on.unwrap_or(FailOn::Never),
        ))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Compare base and head: build both, run interleaved rounds, decide, report.
    Compare {
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
        #[arg(long, value_parser = harness::compare::parse_shard, value_name = "I/N")]
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
        device: Vec<harness::vocab::Device>,
        /// A CUDA end-to-end check that cannot run (no GPU, engine without CUDA) is an error
        /// (exit 2) instead of ⏭.
        #[arg(long)]
        require_cuda: bool,
        /// Then post the report as the PR's sticky comment (see `harness post`; repository and
        /// PR from the Actions environment). A failure to post is printed and does not change
        /// the exit status, which stays the gate's.
        #[arg(long)]
        post: bool,
    },
    /// End-to-end checks of one revision (nightly): engine tokens vs the oracle and the goldens,
    /// and decode speed (no comparison). Exit 0 all ran and agree, 1 a check diverged or failed,
    /// 2 could not run (with --require-cuda: a CUDA check could not run).
    E2e {
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
        device: Vec<harness::vocab::Device>,
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
    },
    /// Post a saved results.json as the PR's sticky comment (update the report's comment, else
    /// create it). Token from GITHUB_TOKEN, API from GITHUB_API_URL. Exit 0 posted, 2 not.
    Post {
        #[arg(long)]
        input: PathBuf,
        /// Pull request number (default: from the event at GITHUB_EVENT_PATH).
        #[arg(long)]
        pr: Option<u64>,
        /// OWNER/NAME (default: GITHUB_REPOSITORY).
        #[arg(long, value_name = "OWNER/NAME")]
        repo: Option<String>,
    },
    /// Join the results.json of several shards into one report.
    Merge {
        /// A shard's results.json (repeat for each shard).
        #[arg(long, required = true)]
        input: Vec<PathBuf>,
        #[command(flatten)]
        output: Output,
    },
    /// A/A runs of one revision → a per-benchmark noise profile for this host.
    Calibrate {
        /// Revision to calibrate on (default: HEAD).
        #[arg(long)]
        rev: Option<String>,
        /// A/A trials.
        #[arg(long, default_value_t = 5)]
        trials: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Decide a saved results.json again under another policy, from the criterion samples it
    /// recorded: nothing is built or measured. For tuning the method on real runs (what would
    /// this run have shown with `noise_k: 2`, or with its first 4 rounds?). A replay cannot add
    /// rounds, and a benchmark that only becomes a suspect under the new policy has no
    /// confirmation rounds, so it is at most ⚠️ (harness/STATS.md, section 9).
    Replay {
        /// The saved results.json.
        #[arg(long)]
        input: PathBuf,
        /// harness.yaml whose `policy` to start from (default: the policy the saved run
        /// recorded; for results that recorded none, ./harness.yaml if there is one, else the
        /// built-in defaults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Policy fields to override, as a JSON object, e.g. '{"noise_k": 2, "floor": 0.02}'.
        #[arg(long)]
        policy: Option<String>,
        /// Use only the first N first-pass rounds (default: every one recorded).
        #[arg(long)]
        rounds: Option<u32>,
        /// A calibration profile for the thresholds (default: none; thresholds from the spread).
        #[arg(long)]
        profile: Option<PathBuf>,
        #[command(flatten)]
        output: Output,
    },
    /// Re-render a saved results.json.
    Report {
        #[arg(long)]
        input: PathBuf,
        #[arg(long, value_enum, default_value = "md")]
        format: Format,
        /// Exit status from the saved outcome under this policy (default: report only, 0).
        #[arg(long, value_enum)]
        fail_on: Option<FailOn>,
    },
    /// The git pre-push hook: runs the quick suite on every pushed branch and blocks the push on
    /// a regression (skip once with `git push --no-verify`).
    Hook {
        #[command(subcommand)]
        action: HookAction,
    },
}

#[derive(Subcommand)]
enum HookAction {
    /// Write the pre-push hook (into core.hooksPath if set, else the repository's hooks/).
    Install {
        /// Replace a pre-push hook that harness did not install (it is kept as pre-push.bak).
        #[arg(long)]
        force: bool,
        /// The repository (default: the current directory).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
    /// Remove the pre-push hook if harness installed it; any other hook is left alone.
    Uninstall {
        /// The repository (default: the current directory).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
}

/// Progress on stderr: a bar on a TTY, one line per stage and round otherwise.
struct Ui {
    bar: Option<ProgressBar>,
}

impl Ui {
    fn new() -> Ui {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
                )
                .expect("valid template"),
            );
            b
        });
        Ui { bar }
    }
}

impl Progress for Ui {
    fn stage(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }
    fn rounds(&self, done: u64, total: u64, what: &str) {
        match &self.bar {
            Some(b) => {
                b.set_length(total);
                b.set_position(done);
                b.set_message(what.to_string());
                if done >= total {
                    b.finish_and_clear();
                }
            }
            None => {
                if what.starts_with("round") && what.contains(" base ") || what == "done" {
                    eprintln!("[{done}/{total}] {what}");
                }
            }
        }
    }
    fn line(&self, line: &str) {
        if let Some(b) = &self.bar {
            let l = line.trim();
            if l.starts_with("Compiling") || l.starts_with("Finished") {
                b.set_message(l.to_string());
                b.tick();
            }
        }
    }
}

struct Resolved {
    repo_root: PathBuf,
    config: Config,
    suite: String,
    cache_dir: PathBuf,
}

fn resolve_common(c: &Common) -> anyhow::Result<Resolved> {
    let repo = Repo::open(&c.repo)?;
    let repo_root = repo.workdir().map(|p| p.to_path_buf()).with_context(|| {
        format!(
            "{} is a bare repository: nothing to build",
            c.repo.display()
        )
    })?;
    let config_path = c
        .config
        .clone()
        .unwrap_or_else(|| repo_root.join(config::FILE_NAME));
    let config = Config::load(&config_path)?;
    let suite = c
        .suite
        .clone()
        .unwrap_or_else(|| config.default_suite.clone());
    config.suite(&suite).map_err(anyhow::Error::msg)?;
    let root = c.cache_dir.clone().unwrap_or_else(default_cache_root);
    let cache_dir = repo_cache_dir(&root, &repo_root);
    Ok(Resolved {
        repo_root,
        config,
        suite,
        cache_dir,
    })
}

fn exit_code(outcome: Outcome, fail_on: FailOn) -> u8 {
    match (outcome, fail_on) {
        (Outcome::Error, _) => 2,
        (_, FailOn::Never) => 0,
        (Outcome::Fail, _) => 1,
        (Outcome::Warn, FailOn::Warn) => 1,
        _ => 0,
    }
}

fn render(results: &Results, format: Format) -> String {
    match format {
        Format::Term => {
            report::terminal(results, report::use_color(std::io::stdout().is_terminal()))
        }
        Format::Md => report::markdown(results),
        Format::Json => report::json(results),
    }
}

fn write_outputs(dir: &std::path::Path, results: &Results) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let w = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    w("results.json", report::json(results))?;
    w("report.md", report::markdown(results))?;
    w(
        "benchmark-action.json",
        serde_json::to_string_pretty(&report::github_action_benchmark(results))?,
    )?;
    Ok(())
}

/// In a GitHub Actions job: the markdown report appended to the step summary, and an annotation
/// per 🔴/⛔/⚠️ row on stdout (where the runner reads workflow commands).
fn github_actions_outputs(results: &Results) {
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let hint = harness::post::artifact_hint(&|k| std::env::var(k).ok());
        let path = std::path::Path::new(&path);
        if let Err(e) = harness::actions::append_step_summary(path, results, &hint) {
            eprintln!("warning: {e:#}");
        }
    }
    if harness::actions::in_actions() {
        for line in harness::actions::annotations(results) {
            println!("{line}");
        }
    }
}

/// Reads a saved `results.json`, checking its schema.
fn read_results(input: &std::path::Path) -> anyhow::Result<Results> {
    let text = std::fs::read_to_string(input)
        .with_context(|| format!("cannot read {}", input.display()))?;
    let results: Results = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a harness results file", input.display()))?;
    if results.schema != harness::results::SCHEMA {
        anyhow::bail!(
            "{}: schema {:?}, this harness reads {:?}",
            input.display(),
            results.schema,
            harness::results::SCHEMA
        );
    }
    Ok(results)
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Cmd::Hook { action } => hook(action),
        Cmd::Compare {
            base,
            head,
            common,
            format,
            out,
            fail_on,
            profile,
            no_profile,
            shard,
            engine_bin,
            oracle_bin,
            device,
            require_cuda,
            post,
        } => {
            let r = resolve_common(&common)?;
            let e2e = E2eOptions {
                devices: device,
                require_cuda,
                engine_bin: parse_side_bins("--engine-bin", &engine_bin)
                    .map_err(anyhow::Error::msg)?,
                oracle_bin: parse_side_bins("--oracle-bin", &oracle_bin)
                    .map_err(anyhow::Error::msg)?,
            };
            let fail_on = fail_on.unwrap_or(r.config.fail_on);
            let opts = CompareOptions {
                repo_dir: r.repo_root.clone(),
                config: r.config,
                base,
                head,
                suite: r.suite,
                rounds: common.rounds,
                cache_dir: r.cache_dir.clone(),
                profile: match (profile, no_profile) {
                    (Some(p), _) => ProfileChoice::File(p),
                    (None, true) => ProfileChoice::Off,
                    (None, false) => ProfileChoice::Auto,
                },
                shard,
                e2e,
            };
            let ui = Ui::new();
            let results = harness::compare::compare(&opts, &ui)?;
            let out = out.unwrap_or_else(|| r.cache_dir.join("last-run"));
            write_outputs(&out, &results)?;
            print!("{}", render(&results, format));
            eprintln!("results: {}", out.join("results.json").display());
            github_actions_outputs(&results);
            if post {
                // The exit status is the gate's: a report that could not be posted is shown as
                // an error (and a warning annotation in Actions) but decides nothing.
                match harness::post::post_from_env(&results, None, None) {
                    Ok((target, posted)) => eprintln!("{}: {posted}", target.describe()),
                    Err(e) => {
                        eprintln!("error: could not post the report: {e}");
                        if harness::actions::in_actions() {
                            let msg = format!("could not post the report: {e}");
                            println!(
                                "{}",
                                harness::actions::workflow_command("warning", "harness post", &msg)
                            );
                        }
                    }
                }
            }
            Ok(exit_code(results.outcome, fail_on))
        }
        Cmd::Calibrate {
            rev,
            trials,
            common,
        } => {
            let r = resolve_common(&common)?;
            let opts = CompareOptions {
                repo_dir: r.repo_root,
                config: r.config,
                base: None,
                head: None,
                suite: r.suite,
                rounds: common.rounds,
                cache_dir: r.cache_dir,
                profile: ProfileChoice::Off,
                shard: None,
                e2e: E2eOptions::default(),
            };
            let ui = Ui::new();
            let (profile, path) = harness::compare::calibrate(&opts, rev.as_deref(), trials, &ui)?;
            println!(
                "calibration profile for host {} ({} benchmarks, {} A/A trials): {}",
                profile.fingerprint,
                profile.benches.len(),
                profile.trials,
                path.display()
            );
            Ok(0)
        }
        Cmd::E2e {
            rev,
            engine_bin,
            oracle_bin,
            device,
            case,
            require_cuda,
            common,
            format,
            out,
            fail_on,
        } => {
            let explicit_suite = common.suite.clone();
            let r = resolve_common(&common)?;
            let fail_on = fail_on.unwrap_or(r.config.fail_on);
            let (cases, selection) = match (case.is_empty(), &explicit_suite) {
                (false, _) => (case.clone(), format!("cases {}", case.join(", "))),
                (true, Some(s)) => {
                    let suite = r.config.suite(s).map_err(anyhow::Error::msg)?;
                    if suite.e2e.is_empty() {
                        anyhow::bail!("--suite {s}: the suite has no e2e cases");
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
                rev,
                cache_dir: r.cache_dir.clone(),
                e2e: E2eOptions {
                    devices: device,
                    require_cuda,
                    engine_bin: [None, engine_bin],
                    oracle_bin: [None, oracle_bin],
                },
            };
            let ui = Ui::new();
            let results = harness::compare::e2e_single(&opts, &ui)?;
            let out = out.unwrap_or_else(|| r.cache_dir.join("last-e2e"));
            write_outputs(&out, &results)?;
            print!("{}", render(&results, format));
            eprintln!("results: {}", out.join("results.json").display());
            github_actions_outputs(&results);
            Ok(exit_code(results.outcome, fail_on))
        }
        Cmd::Report {
            input,
            format,
            fail_on,
        } => {
            let results = read_results(&input)?;
            print!("{}", render(&results, format));
            Ok(exit_code(results.outcome, fail_on.unwrap_or(FailOn::Never)))
        }
        Cmd::Replay {
            input,
            config,
            policy,
            rounds,
            profile,
            output,
        } => {
            let saved = read_results(&input)?;
            let (mut base_policy, from) = harness::compare::replay_base_policy(
                &saved,
                config.as_deref(),
                std::path::Path::new(config::FILE_NAME),
            )?;
            if let Some(json) = &policy {
                base_policy = base_policy
                    .with_overrides(json)
                    .map_err(anyhow::Error::msg)?;
            }
            let profile = match &profile {
                Some(p) => {
                    let text = std::fs::read_to_string(p).with_context(|| {
                        format!("cannot read calibration profile {}", p.display())
                    })?;
                    let prof = harness::stats::NoiseProfile::from_json(&text)
                        .with_context(|| format!("calibration profile {}", p.display()))?;
                    Some((prof, p.display().to_string()))
                }
                None => None,
            };
            let replayed = harness::compare::replay(
                &saved,
                &base_policy,
                rounds,
                profile.as_ref().map(|(p, s)| (p, s.as_str())),
                &format!("{}, starting from {from}", input.display()),
            )?;
            output.emit(&replayed)
        }
        Cmd::Post { input, pr, repo } => {
            let results = read_results(&input)?;
            let (target, posted) = harness::post::post_from_env(&results, repo.as_deref(), pr)?;
            println!("{}: {posted}", target.describe());
            Ok(0)
        }
        Cmd::Merge { input, output } => {
            let parts = input
                .iter()
                .map(|p| read_results(p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let merged = harness::compare::merge(parts)?;
            output.emit(&merged)
        }
    }
}

fn hook(action: HookAction) -> anyhow::Result<u8> {
    use harness::hook::{self, Previous, Uninstalled};
    match action {
        HookAction::Install { force, repo } => {
            let exe = std::env::current_exe().context("cannot find this harness binary")?;
            let installed = hook::install(&repo, &exe, force)?;
            let path = installed.path.display();
            match installed.previous {
                Previous::None => println!("installed the pre-push hook {path}"),
                Previous::Ours => println!("updated the pre-push hook {path}"),
                Previous::Foreign { backup } => println!(
                    "installed the pre-push hook {path}; the hook it replaced is kept as {}",
                    backup.display()
                ),
            }
            println!(
                "every `git push` now runs `{} compare --suite quick` and is blocked on a \
                 regression; skip it once with `git push --no-verify`, remove it with `harness \
                 hook uninstall`",
                exe.display()
            );
        }
        HookAction::Uninstall { repo } => match hook::uninstall(&repo)? {
            Uninstalled::Removed { path, backup } => {
                println!("removed the pre-push hook {}", path.display());
                if let Some(b) = backup {
                    println!(
                        "the hook it once replaced is still at {} (restore it with: mv {} {})",
                        b.display(),
                        b.display(),
                        path.display()
                    );
                }
            }
            Uninstalled::NotInstalled { path } => {
                println!("no pre-push hook at {}: nothing to remove", path.display())
            }
            Uninstalled::Foreign { path } => println!(
                "{} was not installed by harness: left it alone",
                path.display()
            ),
        },
    }
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
