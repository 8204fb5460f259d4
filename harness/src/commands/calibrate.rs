//! `harness calibrate`: A/A runs of one revision (one build, the same executables on both
//! sides), folded into a per-benchmark noise profile saved in the cache under this host's
//! fingerprint, where `harness compare` finds it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};

use super::Common;
use super::compare::CompareOptions;
use super::e2e::E2eOptions;
use crate::build::build_side;
use crate::cache::{ProfileChoice, profile_path, slot_target_dir};
use crate::gate::inputs_from;
use crate::git::{Checkout, Repo};
use crate::host;
use crate::measure::{Collected, CriterionMeasurer, plan_for, run_rounds};
use crate::progress::{Progress, Ui};
use crate::report::format::short_sha as short;
use crate::results::now_unix;
use crate::stats::NoiseProfile;
use crate::vocab::Side;

/// A/A runs of one revision → a per-benchmark noise profile for this host.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Revision to calibrate on (default: HEAD).
    #[arg(long)]
    rev: Option<String>,
    /// A/A trials.
    #[arg(long, default_value_t = 5)]
    trials: u32,
    #[command(flatten)]
    common: Common,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let r = args.common.resolve()?;
    let opts = CompareOptions {
        repo_dir: r.repo_root,
        config: r.config,
        base: None,
        head: None,
        suite: r.suite,
        rounds: args.common.rounds,
        cache_dir: r.cache_dir,
        profile: ProfileChoice::Off,
        shard: None,
        e2e: E2eOptions::default(),
    };
    let (profile, path) = calibrate(&opts, args.rev.as_deref(), args.trials, &Ui::new())?;
    println!(
        "calibration profile for host {} ({} benchmarks, {} A/A trials): {}",
        profile.fingerprint,
        profile.benches.len(),
        profile.trials,
        path.display()
    );
    Ok(0)
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
    let wt = repo.checkout(
        Side::Base.name(),
        Checkout::Commit(r.sha.clone()),
        &opts.cache_dir,
    )?;
    let exes = build_side(
        Side::Base,
        &wt.path,
        &slot_target_dir(&opts.cache_dir, Side::Base),
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
            pair: criterion
                .paired
                .then(|| criterion.pair_settings(&opts.config.deadlines)),
            pair_multi_threaded: suite
                .criterion_multi_threaded
                .as_ref()
                .filter(|_| criterion.paired)
                .map(|c| c.pair_settings(&opts.config.deadlines)),
            serves: BTreeMap::new(),
            affinity: crate::measure::Affinity::from_config(&opts.config.affinity),
            deadline: opts.config.deadlines.bench(),
            // A profile calibrated as the suite's runs measure: with placement sampled, its
            // thresholds hold the spread of function orders too.
            placement: crate::measure::Placement::new(
                opts.config.placement.samples_in(&opts.suite),
                exes.by_target.values().map(std::path::PathBuf::as_path),
                &work_dir.join("placement"),
                opts.config.deadlines.build(),
            ),
        };
        let mut collected = Collected::default();
        let own = trial_rounds(t, rounds);
        run_rounds(
            &mut m,
            &plan,
            own.start,
            own.len() as u32,
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
    let mut profile = NoiseProfile::from_aa_trials(&host.fingerprint, now_unix(), &all_trials);
    profile.placement_sampled = opts.config.placement.samples_in(&opts.suite);
    let path = profile_path(&opts.cache_dir, &host.fingerprint);
    std::fs::create_dir_all(path.parent().expect("has parent"))
        .with_context(|| format!("cannot create {}", path.display()))?;
    std::fs::write(&path, profile.to_json())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok((profile, path))
}

/// The round numbers trial `t` (from 0) runs: its own, so that with placement sampled every
/// trial draws function orders of its own (seeds follow the round) and the profile holds the
/// spread of placement, not one draw of it repeated.
fn trial_rounds(t: u32, rounds: u32) -> std::ops::Range<u32> {
    t * rounds..(t + 1) * rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::placement::seed;
    use crate::vocab::Side;

    #[test]
    fn every_trial_draws_function_orders_no_other_trial_drew() {
        let mut seen = std::collections::BTreeSet::new();
        for t in 0..6 {
            let r = trial_rounds(t, 7);
            assert_eq!(r.len(), 7);
            for round in r {
                for side in Side::BOTH {
                    assert!(
                        seen.insert(seed(side, round)),
                        "trial {t} round {round} repeats"
                    );
                }
            }
        }
    }
}
