//! `harness alert`: one GitHub issue per change point on main (`harness trend`'s), opened by the
//! history job after each push or nightly, updated while it stays open, never re-opened.
//!
//! Which issue belongs to which change point: its body starts with [`MARKER`] followed by a key
//! (a hash of host, benchmark and the commit where the level changed), and it was **written by
//! the alerting login**. Anyone can open an issue with a marker in it; matched by the marker
//! alone, the job would edit that person's issue, so issues by others are never touched (as the
//! PR comment's [`Poster::upsert`](crate::post::Poster::upsert) does). An issue that is closed
//! is a decision someone made: it is neither edited nor opened again for the same key.
//!
//! What counts as new: every change point whose key has no issue yet. A change point found one
//! commit later once more commits arrive gets a new key, so a new issue; the old one says where
//! it was first seen. At most [`MAX_NEW`] issues are opened per run (a history that suddenly
//! shows many, after a runner change say, should not flood the tracker): the rest are listed
//! and opened by the next runs.
//!
//! Every string in an issue comes from the history (benchmark ids from main's code): escaped
//! and bounded as in the PR report; chart links are built from `--chart-url`, which the
//! workflow sets from its own repository, and a [`chart::file_name`], never from an id as is.

use serde::Deserialize;

use crate::history::{Trend, TrendPoint};
use crate::post::{Method, PostError, PostTarget, Poster, RetryPolicy, Token};
use crate::report::chart;
use crate::report::format::short_sha;
use crate::report::md;

/// The hidden first line of an alert issue's body; the key follows it.
pub const MARKER: &str = "<!-- harness-change-point ";
/// The label every alert issue carries (and the listing filters on).
pub const LABEL: &str = "performance-change-point";
/// Most issues opened by one run.
pub const MAX_NEW: usize = 10;
/// Issues per page when listing (GitHub's maximum), and at most this many pages.
const PER_PAGE: u32 = 100;
const MAX_PAGES: usize = 50;

/// One change point as an issue: its key, title and body.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub key: String,
    pub title: String,
    pub body: String,
}

/// The key of a change point: 16 hex digits of a hash of host, benchmark and commit.
pub fn key(host: &str, id: &str, sha: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in [host, id, sha] {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks `--chart-url` (see [`crate::post::plain_https_url`]).
pub fn check_chart_url(url: &str) -> Result<String, String> {
    crate::post::plain_https_url(url).map_err(|e| format!("--chart-url {e}"))
}

fn alert(t: &Trend, c: &TrendPoint, chart_url: Option<&str>) -> Alert {
    let change = (c.point.ratio - 1.0) * 100.0;
    // A title is plain text on GitHub; angle brackets are dropped anyway, so no client that
    // renders titles as HTML can be fed a tag.
    let id: String = md::plain(&md::cap(&t.id, 100))
        .chars()
        .filter(|c| *c != '<' && *c != '>')
        .collect();
    let title = format!(
        "Performance change point: {} {:+.1} % at {}",
        id,
        change,
        short_sha(&c.sha)
    );
    let chart = chart_url
        .map(|u| {
            format!(
                "\n[Trend chart]({u}/{})\n",
                chart::file_name(&[&t.host, &t.id], "svg")
            )
        })
        .unwrap_or_default();
    let body = format!(
        "{MARKER}{key} -->\n\
         The level of a benchmark on main changed (`harness trend`: E-divisive with means, \
         permutation test).\n\n\
         | host | benchmark | between | change | p | before | after | commits in series |\n\
         |---|---|---|---:|---:|---:|---:|---:|\n\
         | {host} | {id} | {before}..{sha} | {change:+.1} % | {p:.3} | {b:.1} ns | {a:.1} ns | {n} |\n\
         {chart}\n\
         The suspect commits are those after `{before}` up to and including `{sha}`. Close this \
         issue when it is explained; it will not be reopened for this change point.\n",
        key = key(&t.host, &t.id, &c.sha),
        host = md::cell_code(&t.host),
        id = md::cell_code(&t.id),
        before = short_sha(&c.before_sha),
        sha = short_sha(&c.sha),
        p = c.point.p_value,
        b = c.point.before,
        a = c.point.after,
        n = t.shas.len(),
    );
    Alert {
        key: key(&t.host, &t.id, &c.sha),
        title,
        body,
    }
}

/// Every change point of `trends` as an alert, strongest change first.
pub fn alerts(trends: &[Trend], chart_url: Option<&str>) -> Vec<Alert> {
    let mut v: Vec<(f64, Alert)> = trends
        .iter()
        .flat_map(|t| {
            t.change_points
                .iter()
                .map(move |c| ((c.point.ratio.ln()).abs(), alert(t, c, chart_url)))
        })
        .collect();
    v.sort_by(|a, b| b.0.total_cmp(&a.0));
    v.into_iter().map(|(_, a)| a).collect()
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// (key, issue number) opened.
    pub opened: Vec<(String, u64)>,
    /// (key, issue number) whose open issue was updated.
    pub updated: Vec<(String, u64)>,
    /// Keys with a closed issue: left alone.
    pub closed: Vec<String>,
    /// Keys not opened this run ([`MAX_NEW`]).
    pub deferred: Vec<String>,
    /// Issues with a marker written by someone else: (number, login), never touched.
    pub foreign: Vec<(u64, String)>,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    #[serde(default)]
    state: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    user: Option<IssueUser>,
    /// Present on pull requests, which the issues listing includes.
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct IssueUser {
    login: String,
}

/// The key an issue body carries, if it starts with the marker.
fn key_of(body: &str) -> Option<&str> {
    let rest = body.trim_start().strip_prefix(MARKER)?;
    let k = rest.split_whitespace().next()?;
    (k.len() == 16 && k.chars().all(|c| c.is_ascii_hexdigit())).then_some(k)
}

async fn existing(
    poster: &Poster,
    target: &PostTarget,
    author: &str,
) -> Result<(Vec<(String, u64, bool)>, Vec<(u64, String)>), PostError> {
    let mut next = Some(format!(
        "/repos/{}/{}/issues?state=all&labels={LABEL}&per_page={PER_PAGE}",
        target.owner, target.repo
    ));
    let (mut own, mut foreign) = (Vec::new(), Vec::new());
    let mut pages = 0;
    while let Some(uri) = next.take() {
        pages += 1;
        let (text, link) = poster.request(Method::Get, &uri, None).await?;
        let issues: Vec<Issue> = serde_json::from_str(&text).map_err(|e| PostError::Answer {
            request: format!("GET /repos/{}/{}/issues", target.owner, target.repo),
            message: format!("not a list of issues: {e}"),
        })?;
        for i in issues.iter().filter(|i| i.pull_request.is_none()) {
            let Some(k) = i.body.as_deref().and_then(key_of) else {
                continue;
            };
            let login = i.user.as_ref().map_or("", |u| u.login.as_str());
            if login.eq_ignore_ascii_case(author) {
                own.push((k.to_string(), i.number, i.state == "open"));
            } else {
                foreign.push((i.number, login.to_string()));
            }
        }
        if pages < MAX_PAGES {
            next = link.as_deref().and_then(crate::post::next_link);
        }
    }
    Ok((own, foreign))
}

/// Opens or updates one issue per alert on `target`'s repository (its `pr` is not used).
pub async fn sync(
    poster: &Poster,
    target: &PostTarget,
    alerts: &[Alert],
) -> Result<Outcome, PostError> {
    let author = poster.author().await?;
    let (own, foreign) = existing(poster, target, &author).await?;
    let mut out = Outcome {
        foreign,
        ..Default::default()
    };
    for a in alerts {
        // The oldest own issue of the key (GitHub lists newest first).
        match own.iter().rev().find(|(k, _, _)| *k == a.key) {
            Some((_, n, true)) => {
                let path = format!("/repos/{}/{}/issues/{n}", target.owner, target.repo);
                let payload = serde_json::json!({ "title": a.title, "body": a.body });
                poster.request(Method::Patch, &path, Some(&payload)).await?;
                out.updated.push((a.key.clone(), *n));
            }
            Some((_, _, false)) => out.closed.push(a.key.clone()),
            None if out.opened.len() >= MAX_NEW => out.deferred.push(a.key.clone()),
            None => {
                let path = format!("/repos/{}/{}/issues", target.owner, target.repo);
                let payload =
                    serde_json::json!({ "title": a.title, "body": a.body, "labels": [LABEL] });
                let text = poster.post_once(&path, &payload).await?;
                let created: Issue =
                    serde_json::from_str(&text).map_err(|e| PostError::Answer {
                        request: format!("POST {path}"),
                        message: format!("not an issue: {e}"),
                    })?;
                out.opened.push((a.key.clone(), created.number));
            }
        }
    }
    Ok(out)
}

/// [`sync`] on a current-thread runtime (blocking), as `post` does.
pub fn sync_blocking(
    target: &PostTarget,
    token: &Token,
    author: Option<&str>,
    alerts: &[Alert],
) -> Result<Outcome, PostError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PostError::Runtime)?;
    rt.block_on(async {
        let mut poster = Poster::new(target.clone(), token.clone(), RetryPolicy::default())?;
        if let Some(a) = author {
            poster = poster.with_author(a);
        }
        sync(&poster, target, alerts).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_back_only_from_the_first_line() {
        let k = key("h", "add/f32/large", "abc");
        assert_eq!(k.len(), 16);
        assert_eq!(key_of(&format!("{MARKER}{k} -->\nx")), Some(k.as_str()));
        assert_eq!(key_of(&format!("quote: {MARKER}{k} -->")), None);
        assert_eq!(key_of(&format!("{MARKER}not-hex -->")), None);
        assert_ne!(key("h", "a", "b"), key("h", "a", "c"));
    }

    #[test]
    fn chart_urls_must_be_plain_https() {
        assert!(check_chart_url("https://github.com/o/r/blob/bench-history/charts/").is_ok());
        for bad in [
            "http://x",
            "https://x/a b",
            "https://x/)[y](z",
            "javascript:alert(1)",
        ] {
            assert!(check_chart_url(bad).is_err(), "{bad}");
        }
    }
}
