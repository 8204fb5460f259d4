//! `harness post`: a saved results.json posted as the PR's sticky comment
//! ([`crate::post::post_from_env`]). The file is untrusted (it comes from a run that executed
//! pull-request code): read up to [`crate::post::MAX_INPUT_BYTES`], schema-checked, vetted
//! ([`crate::post::vetted`]), and every string escaped where the report renders it.

use std::path::PathBuf;

use anyhow::Context as _;

use super::read_results_limited;
use crate::post::{MAX_INPUT_BYTES, artifact_hint, comment_body_with_trends, history_url, vetted};

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
    /// Only a comment by this login is the sticky one (default: the token's own login; with
    /// Actions' GITHUB_TOKEN, github-actions[bot]). Marked comments by others are left alone.
    #[arg(long, value_name = "LOGIN")]
    comment_author: Option<String>,
    /// Print the exact body that would be posted, and post nothing (no token or network needed).
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let results = read_results_limited(&args.input, MAX_INPUT_BYTES)?;
    let results = vetted(results)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{} cannot be posted", args.input.display()))?;
    if args.dry_run {
        let env = |k: &str| std::env::var(k).ok();
        let body =
            comment_body_with_trends(&results, &artifact_hint(&env), history_url(&env).as_deref());
        super::out(&body)?;
        return Ok(0);
    }
    let (target, posted) = crate::post::post_from_env(
        &results,
        args.repo.as_deref(),
        args.pr,
        args.comment_author.as_deref(),
    )?;
    println!("{}: {posted}", target.describe());
    Ok(0)
}
