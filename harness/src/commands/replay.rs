//! `harness replay`: a saved results.json decided again under another policy, from the samples
//! it recorded ([`crate::gate::replay`]); nothing is built or measured.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{Output, read_results};
use crate::config;
use crate::gate::{replay, replay_base_policy};
use crate::stats::NoiseProfile;

/// Decide a saved results.json again under another policy, from the criterion samples it
/// recorded: nothing is built or measured. For tuning the method on real runs (what would
/// this run have shown with `noise_k: 2`, or with its first 4 rounds?). A replay cannot add
/// rounds, and a benchmark that only becomes a suspect under the new policy has no
/// confirmation rounds, so it is at most ⚠️ (harness/STATS.md, section 9).
#[derive(clap::Args, Debug)]
pub struct Args {
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
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let saved = read_results(&args.input)?;
    let (mut base_policy, from) =
        replay_base_policy(&saved, args.config.as_deref(), Path::new(config::FILE_NAME))?;
    if let Some(json) = &args.policy {
        base_policy = base_policy
            .with_overrides(json)
            .map_err(anyhow::Error::msg)?;
    }
    let profile = match &args.profile {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read calibration profile {}", p.display()))?;
            let prof = NoiseProfile::from_json(&text)
                .with_context(|| format!("calibration profile {}", p.display()))?;
            Some((prof, p.display().to_string()))
        }
        None => None,
    };
    let replayed = replay(
        &saved,
        &base_policy,
        args.rounds,
        profile.as_ref().map(|(p, s)| (p, s.as_str())),
        &format!("{}, starting from {from}", args.input.display()),
    )?;
    args.output.emit(&replayed)
}
