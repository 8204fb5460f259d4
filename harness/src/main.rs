//! The `harness` command line: clap parses the flags into one subcommand's arguments and
//! [`harness::commands`] runs it; the exit status is the contract's (0 passed or report-only,
//! 1 gate failed, 2 could not run, which is also what an error here means).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use harness::commands::{
    calibrate, compare, e2e, history, hook, merge, noise, post, replay, report,
};

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

#[derive(Subcommand)]
enum Cmd {
    /// Compare base and head: build both, run interleaved rounds, decide, report.
    Compare(compare::Args),
    /// End-to-end checks of one revision (nightly): engine tokens vs the oracle and the goldens,
    /// and decode speed (no comparison). Exit 0 all ran and agree, 1 a check diverged or failed,
    /// 2 could not run (with --require-cuda: a CUDA check could not run).
    E2e(e2e::Args),
    /// Post a saved results.json as the PR's sticky comment (update the report's comment, else
    /// create it). Token from GITHUB_TOKEN, API from GITHUB_API_URL. Exit 0 posted, 2 not.
    Post(post::Args),
    /// Join the results.json of several shards into one report.
    Merge(merge::Args),
    /// A/A runs of one revision → a per-benchmark noise profile for this host.
    Calibrate(calibrate::Args),
    /// Is this machine quiet enough? A/A rounds of one revision (or a saved run, --from), and
    /// per benchmark the per-round sd of the A/A log ratio, tail share, lag-1 autocorrelation,
    /// bimodality and the effect of a switch between sides; --against KEY=VALUE measures a
    /// second way of measuring in the same run, for before/after figures.
    Noise(noise::Args),
    /// Decide a saved results.json again under another policy, from the criterion samples it
    /// recorded: nothing is built or measured. For tuning the method on real runs (what would
    /// this run have shown with `noise_k: 2`, or with its first 4 rounds?). A replay cannot add
    /// rounds, and a benchmark that only becomes a suspect under the new policy has no
    /// confirmation rounds, so it is at most ⚠️ (harness/STATS.md, section 9).
    Replay(replay::Args),
    /// Re-render a saved results.json.
    Report(report::Args),
    /// The benchmark history on main: `add` a run's commit, `list`, `show` one commit.
    History(history::Args),
    /// Change points per benchmark in a history (E-divisive with means; harness/STATS.md
    /// section 15): the commits where a series' level moved, with size and p-value.
    Trend(history::TrendArgs),
    /// Open or update one GitHub issue per change point of a history (token from GITHUB_TOKEN).
    Alert(history::AlertArgs),
    /// The git pre-push hook: runs the quick suite on every pushed branch and blocks the push on
    /// a regression (skip once with `git push --no-verify`).
    Hook(hook::Args),
}

fn main() -> ExitCode {
    // rustc runs the harness as its linker in the slots' builds (harness/src/placement.rs):
    // before clap, which would read the linker's arguments as the harness's.
    let mut argv = std::env::args_os();
    if argv.nth(1).as_deref() == Some(std::ffi::OsStr::new(harness::placement::LINK_ARG)) {
        let code = harness::placement::link_main(argv.collect());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    harness::placement::this_is_the_harness();
    let outcome = match Cli::parse().command {
        Cmd::Compare(a) => compare::run(a),
        Cmd::E2e(a) => e2e::run(a),
        Cmd::Post(a) => post::run(a),
        Cmd::Merge(a) => merge::run(a),
        Cmd::Calibrate(a) => calibrate::run(a),
        Cmd::Noise(a) => noise::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Hook(a) => hook::run(a),
        Cmd::History(a) => history::run(a),
        Cmd::Trend(a) => history::trend(a),
        Cmd::Alert(a) => history::alert(a),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
