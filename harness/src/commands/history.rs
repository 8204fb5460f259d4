//! `harness history add|list|show` and `harness trend`: the benchmark history on main and the
//! change points in it (`crate::history`, harness/STATS.md section 15); `harness alert`: an
//! issue per change point (`crate::alert`).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use super::read_results_limited;
use crate::history;
use crate::report::chart;
use crate::report::format::short_sha as short;
use crate::report::md;
use crate::stats::ChangePointConfig;
use crate::vocab::Side;

/// The history of benchmark results on main: one file per commit and host.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Add one side of a saved results.json (by default the head: the commit a push to main
    /// measured) to the history in DIR; the same commit again replaces its record.
    Add {
        /// The results.json of a `harness compare` run.
        #[arg(long)]
        results: PathBuf,
        /// The history directory.
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, value_enum, default_value = "head")]
        side: Side,
    },
    /// One line per record: host, commit, date, suite, benchmarks.
    List {
        #[arg(long)]
        dir: PathBuf,
    },
    /// One commit's benchmarks (every host that measured it).
    Show {
        #[arg(long)]
        dir: PathBuf,
        /// The commit (a prefix of at least 7 hex digits).
        sha: String,
    },
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.command {
        Command::Add { results, dir, side } => {
            let r = read_results_limited(&results, crate::post::MAX_INPUT_BYTES)?;
            let r = crate::post::vetted(r)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("{} cannot go into the history", results.display()))?;
            let record = history::record_of(&r, side)?;
            let path = history::add(&dir, &record)?;
            eprintln!(
                "added {} ({} benchmarks) as {}",
                short(&record.sha),
                record.benches.len(),
                path.display()
            );
        }
        Command::List { dir } => {
            let mut text = String::new();
            for r in history::load(&dir)? {
                text += &format!(
                    "{}  {}  {}  {:<6}  {:>3} benchmarks  {}\n",
                    r.host.fingerprint,
                    short(&r.sha),
                    unix_date(r.created_unix_s),
                    r.suite,
                    r.benches.len(),
                    md::plain(&md::cap(&r.subject, 72))
                );
            }
            super::out(&text)?;
        }
        Command::Show { dir, sha } => {
            if !crate::post::is_commit_id(&sha) {
                bail!("{sha:?} is not a commit id or prefix (7 to 64 hex digits)");
            }
            let records: Vec<_> = history::load(&dir)?
                .into_iter()
                .filter(|r| r.sha.starts_with(&sha.to_ascii_lowercase()))
                .collect();
            if records.is_empty() {
                bail!("no record of {sha} in {}", dir.display());
            }
            let mut text = String::new();
            for r in records {
                text += &format!(
                    "{} on {} ({})\n",
                    r.sha,
                    r.host.fingerprint,
                    md::plain(&md::cap(&r.host.cpu, 80))
                );
                for b in &r.benches {
                    text += &format!(
                        "  {:<48} {:>14.1} ns\n",
                        md::plain(&md::cap(&b.id, 120)),
                        b.median_ns
                    );
                }
            }
            super::out(&text)?;
        }
    }
    Ok(0)
}

/// Change points per benchmark in a history.
#[derive(clap::Args, Debug)]
pub struct TrendArgs {
    /// The history directory (`harness history add`).
    #[arg(long)]
    history: PathBuf,
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Also draw every series as an SVG chart (its medians, levels and change points) into
    /// this directory; the markdown page links each change point's chart by this path.
    #[arg(long)]
    charts: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Md,
    Json,
}

pub fn trend(args: TrendArgs) -> anyhow::Result<u8> {
    let records = history::load(&args.history)?;
    let trends = history::trends(&records, &ChangePointConfig::default());
    let mut charts = Vec::new();
    if let Some(dir) = &args.charts {
        for t in &trends {
            let name = chart::file_name(&[&t.host, &t.id], "svg");
            let series = chart::Series {
                host: &t.host,
                id: &t.id,
                shas: &t.shas,
                median_ns: &t.median_ns,
                changes: t
                    .change_points
                    .iter()
                    .map(|c| (c.point.index, c.point.ratio))
                    .collect(),
            };
            chart::write(dir, &name, &chart::trend_svg(&series)?)?;
            charts.push(format!("{}/{name}", dir.display()));
        }
        eprintln!("wrote {} charts to {}", charts.len(), dir.display());
    }
    let text = match args.format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&trends)?),
        Format::Md => markdown(records.len(), &trends, &charts),
    };
    super::out(&text)?;
    Ok(0)
}

/// Open (or update) one GitHub issue per change point of the history (`crate::alert`).
#[derive(clap::Args, Debug)]
pub struct AlertArgs {
    /// The history directory (`harness history add`).
    #[arg(long)]
    history: PathBuf,
    /// OWNER/NAME (default: GITHUB_REPOSITORY).
    #[arg(long, value_name = "OWNER/NAME")]
    repo: Option<String>,
    /// Where the trend charts are published (`harness trend --charts`): each issue links
    /// URL/<chart file>. An https:// URL the workflow builds from its own repository.
    #[arg(long, value_name = "URL")]
    chart_url: Option<String>,
    /// Only issues by this login are the alerts' (default: the token's own login; with
    /// Actions' GITHUB_TOKEN, github-actions[bot]). Marked issues by others are left alone.
    #[arg(long, value_name = "LOGIN")]
    issue_author: Option<String>,
    /// Print each alert's title and key, and open nothing (no token or network needed).
    #[arg(long)]
    dry_run: bool,
}

pub fn alert(args: AlertArgs) -> anyhow::Result<u8> {
    let chart_url = args
        .chart_url
        .as_deref()
        .map(crate::alert::check_chart_url)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let records = history::load(&args.history)?;
    let trends = history::trends(&records, &ChangePointConfig::default());
    let alerts = crate::alert::alerts(&trends, chart_url.as_deref());
    if args.dry_run {
        let mut text = String::new();
        for a in &alerts {
            text += &format!("{}  {}\n", a.key, a.title);
        }
        super::out(&text)?;
        return Ok(0);
    }
    let mut target = crate::post::PostTarget::from_env(args.repo.as_deref(), Some(0))?;
    target.pr = 0;
    let token = crate::post::Token::from_env()?;
    let o = crate::alert::sync_blocking(&target, &token, args.issue_author.as_deref(), &alerts)?;
    let list = |v: &[(String, u64)]| {
        v.iter()
            .map(|(_, n)| format!("#{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{}/{}: {} change points; opened {} [{}], updated {} [{}], closed and left alone {}, deferred to the next run {}",
        target.owner,
        target.repo,
        alerts.len(),
        o.opened.len(),
        list(&o.opened),
        o.updated.len(),
        list(&o.updated),
        o.closed.len(),
        o.deferred.len()
    );
    for (n, login) in &o.foreign {
        println!("issue #{n} carries an alert marker but was written by {login}: left alone");
    }
    Ok(0)
}

/// The trend page: one row per change point, every string from the history escaped; with
/// `charts` (one path per trend, in order) a link to the series' chart.
fn markdown(commits: usize, trends: &[history::Trend], charts: &[String]) -> String {
    let mut s = format!(
        "## Change points ({commits} commits, {} series; E-divisive with means, p ≤ 0.01)\n\n",
        trends.len()
    );
    let rows: Vec<_> = trends
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.change_points.iter().map(move |c| (i, t, c)))
        .collect();
    if rows.is_empty() {
        s += "No change of level in any series.\n";
        return s;
    }
    s += "| host | benchmark | between | change | p | commits in series | chart |\n";
    s += "|---|---|---|---:|---:|---:|---|\n";
    for (i, t, c) in rows {
        // The path is ours (a directory the user named and a file_name), never the id's text.
        let link = charts
            .get(i)
            .map(|p| format!("[chart]({})", p.replace(' ', "%20")))
            .unwrap_or_default();
        s += &format!(
            "| {} | {} | {}..{} | {:+.1} % | {:.3} | {} | {link} |\n",
            md::cell_code(&t.host),
            md::cell_code(&t.id),
            short(&c.before_sha),
            short(&c.sha),
            (c.point.ratio - 1.0) * 100.0,
            c.point.p_value,
            t.shas.len()
        );
    }
    s
}

/// `YYYY-MM-DD` of a unix time (UTC), by the civil-from-days algorithm (Hinnant).
fn unix_date(s: f64) -> String {
    let days = (s / 86_400.0).floor() as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates() {
        assert_eq!(super::unix_date(0.0), "1970-01-01");
        assert_eq!(super::unix_date(1_764_633_600.0), "2025-12-02");
    }
}
