//! `harness post`: a saved results.json posted as the PR's sticky comment
//! ([`crate::post::post_from_env`]).

use std::path::PathBuf;

use super::read_results;

/// Post a saved results.json as the PR's sticky comment (update the report's comment, else
/// create it). Token from GITHUB_TOKEN, API from GITHUB_API_URL. Exit 0 posted, 2 not.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long)]
    input: PathBuf,
    /// Pull request number (default: from the event at GITHUB_EVENT_PATH).
    #[arg(long)]
    pr: Option<u64>,
    /// OWNER/NAME (default: GITHUB_REPOSITORY).
    #[arg(long, value_name = "OWNER/NAME")]
    repo: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let results = read_results(&args.input)?;
    let (target, posted) = crate::post::post_from_env(&results, args.repo.as_deref(), args.pr)?;
    println!("{}: {posted}", target.describe());
    Ok(0)
}
