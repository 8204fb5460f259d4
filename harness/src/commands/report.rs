//! `harness report`: a saved results.json rendered again.

use std::path::PathBuf;

use super::{Format, exit_code, read_results, render};
use crate::config::FailOn;

/// Re-render a saved results.json.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    input: PathBuf,
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Exit status from the saved outcome under this policy (default: report only, 0).
    #[arg(long, value_enum)]
    fail_on: Option<FailOn>,
    /// Also draw each row's rounds, base beside head, as SVG pictures into this directory (what
    /// `compare --out` writes under `charts/`).
    #[arg(long)]
    charts: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let results = read_results(&args.input)?;
    if let Some(dir) = &args.charts {
        let n = super::write_round_charts(dir, &results)?;
        eprintln!("wrote {n} per-round pictures to {}", dir.display());
    }
    super::out(&render(&results, args.format))?;
    Ok(exit_code(
        results.outcome,
        args.fail_on.unwrap_or(FailOn::Never),
    ))
}
