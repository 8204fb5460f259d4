//! The post stage: the markdown report as one sticky PR comment on GitHub, through octocrab.
//!
//! Two steps, like the rest of the CLI: [`PostTarget`] + [`Token`] are resolved from flags and the
//! Actions environment before any request (errors name the flag or variable to set), then
//! [`Poster::upsert`] lists the PR's comments, updates the one that starts with
//! [`report::MARKER`] or creates it. [`post`] is the blocking entry point: it builds a
//! current-thread tokio runtime for the duration of the call, so the rest of the harness stays
//! synchronous.
//!
//! Which comment: the *oldest* comment **written by the poster's own login** whose body starts
//! with the marker (the marker is the report's hidden first line). The login is `--comment-author`
//! when given, else the token's own (`GET /user`); Actions' `GITHUB_TOKEN` may not read `/user`
//! ("Resource not accessible by integration"), and its comments are `github-actions[bot]`'s, so
//! that refusal means that login. Anyone can write a comment that starts with the marker: matched
//! by the marker alone, the bot would edit that person's comment, which they could then edit back
//! into a fake ✅. A comment by anyone else that carries the marker is left alone, and the posted
//! body ends with a note that says so ([`Upserted::foreign`]). Oldest, because it keeps the
//! report where reviewers first saw it; "starts with", so a comment that merely quotes the
//! marker is never edited.
//!
//! Failures: 5xx answers, 429 and 403 rate limits are retried with exponential backoff
//! ([`RetryPolicy`]); 401/403/404 become errors that say which permission or setting is missing.
//! A create (POST) that fails is not blindly re-sent: the next attempt lists the comments again,
//! so a POST that GitHub applied before answering 5xx is updated rather than duplicated.
//!
//! The token lives only in [`Token`] and octocrab's client: its `Debug` is redacted, it never
//! enters an error message, and text GitHub sends back is scrubbed of it before it is shown.

use std::fmt;
use std::time::Duration;

use octocrab::Octocrab;
use serde::Deserialize;

use crate::report;
use crate::results::Results;

/// GitHub's public REST API, when `GITHUB_API_URL` is not set.
pub const DEFAULT_API_URL: &str = "https://api.github.com";

/// Comments per page when listing (GitHub's maximum).
const PER_PAGE: u32 = 100;
/// At most this many pages are read (10 000 comments): a bound, not an expected size.
const MAX_PAGES: usize = 100;
/// GitHub's answer is cut to this many characters in an error message (a proxy's HTML page can
/// be long).
const MAX_MESSAGE: usize = 300;
/// Characters of the comment limit kept free for the note about foreign marked comments.
const NOTE_RESERVE: usize = 1_000;
/// The login of comments written with Actions' `GITHUB_TOKEN`.
pub const ACTIONS_LOGIN: &str = "github-actions[bot]";

#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error(
        "no repository to post to: pass --repo OWNER/NAME or set GITHUB_REPOSITORY (set by GitHub Actions)"
    )]
    NoRepository,
    #[error("repository {given:?} (from {from}) is not of the form OWNER/NAME")]
    BadRepository { given: String, from: &'static str },
    #[error(
        "no pull request number: pass --pr N, or run in an Actions job whose event has one ({why})"
    )]
    NoPullRequest { why: String },
    #[error("cannot read the Actions event {path} (GITHUB_EVENT_PATH): {message}")]
    Event { path: String, message: String },
    #[error(
        "GITHUB_TOKEN is not set: export a token that may write PR comments (in Actions: `env: GITHUB_TOKEN: ${{{{ secrets.GITHUB_TOKEN }}}}`)"
    )]
    NoToken,
    #[error(
        "GITHUB_TOKEN is empty or holds characters an HTTP header cannot carry (a line break inside it?)"
    )]
    BadToken,
    #[error("cannot set up the GitHub client for {api_base}: {message}")]
    Client { api_base: String, message: String },
    #[error(
        "GITHUB_TOKEN was rejected (401) by {api_base} on {request}: {message}; the token is invalid or expired (in Actions pass `secrets.GITHUB_TOKEN`, for GitHub Enterprise check GITHUB_API_URL)"
    )]
    Unauthorized {
        api_base: String,
        request: String,
        message: String,
    },
    #[error(
        "GitHub refused {request} (403): {message}; the token may not write PR comments: give the workflow `permissions: pull-requests: write`, and note that pull requests from forks get a read-only token (post from a `workflow_run` job instead)"
    )]
    Forbidden { request: String, message: String },
    #[error(
        "GitHub answered 404 to {request}: {message}; repository {owner}/{repo} or PR #{pr} does not exist or the token cannot see it (check --repo / --pr, GITHUB_REPOSITORY, GITHUB_EVENT_PATH, GITHUB_API_URL)"
    )]
    NotFound {
        request: String,
        message: String,
        owner: String,
        repo: String,
        pr: u64,
    },
    #[error("GitHub rate-limited {request} ({status}) on all {attempts} attempts: {message}")]
    RateLimited {
        request: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    #[error("GitHub answered {status} to {request}: {message}")]
    Status {
        request: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    #[error("{request} failed: {message}")]
    Transport { request: String, message: String },
    #[error("unexpected answer to {request}: {message}")]
    Answer { request: String, message: String },
    #[error("cannot start the async runtime for posting: {0}")]
    Runtime(std::io::Error),
}

/// Where the comment goes: `{api_base}/repos/{owner}/{repo}/issues/{pr}/comments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostTarget {
    /// REST API root without a trailing slash: `https://api.github.com`, or a GitHub Enterprise
    /// server's `https://HOST/api/v3`.
    pub api_base: String,
    pub owner: String,
    pub repo: String,
    /// The pull request (or issue) number.
    pub pr: u64,
}

impl PostTarget {
    /// Flags first, then the Actions environment: `GITHUB_REPOSITORY`, the PR number from the
    /// event file at `GITHUB_EVENT_PATH` ([`pr_from_event`]), `GITHUB_API_URL`.
    pub fn from_env(repo: Option<&str>, pr: Option<u64>) -> Result<PostTarget, PostError> {
        PostTarget::resolve(repo, pr, &|k| std::env::var(k).ok())
    }

    /// [`PostTarget::from_env`] with the environment passed in, for tests.
    pub fn resolve(
        repo: Option<&str>,
        pr: Option<u64>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<PostTarget, PostError> {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let (full, from) = match repo {
            Some(r) => (r.to_string(), "--repo"),
            None => (
                var("GITHUB_REPOSITORY").ok_or(PostError::NoRepository)?,
                "GITHUB_REPOSITORY",
            ),
        };
        let (owner, name) = split_repo(&full).ok_or_else(|| PostError::BadRepository {
            given: full.clone(),
            from,
        })?;
        let pr = match pr {
            Some(n) => n,
            None => {
                let path = var("GITHUB_EVENT_PATH").ok_or_else(|| PostError::NoPullRequest {
                    why: "GITHUB_EVENT_PATH is not set".into(),
                })?;
                let text = std::fs::read_to_string(&path).map_err(|e| PostError::Event {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                pr_from_event(&text).map_err(|why| match why {
                    EventPr::NotJson(message) => PostError::Event { path, message },
                    EventPr::Missing => PostError::NoPullRequest {
                        why: format!(
                            "event {} ({}) has no pull_request.number, issue.number or \
                             workflow_run.pull_requests[0].number; a workflow_run for a PR \
                             from a fork lists no PR: hand the number over in an artifact",
                            var("GITHUB_EVENT_NAME").unwrap_or_else(|| "?".into()),
                            path
                        ),
                    },
                })?
            }
        };
        let api_base = var("GITHUB_API_URL")
            .unwrap_or_else(|| DEFAULT_API_URL.into())
            .trim_end_matches('/')
            .to_string();
        Ok(PostTarget {
            api_base,
            owner: owner.into(),
            repo: name.into(),
            pr,
        })
    }

    /// `owner/repo#pr`.
    pub fn describe(&self) -> String {
        format!("{}/{}#{}", self.owner, self.repo, self.pr)
    }
}

fn split_repo(full: &str) -> Option<(&str, &str)> {
    let (owner, name) = full.trim().split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(owner) && ok(name)).then_some((owner, name))
}

/// Why [`pr_from_event`] found no number.
#[derive(Debug, PartialEq, Eq)]
pub enum EventPr {
    NotJson(String),
    Missing,
}

/// The PR number in an Actions event payload (the JSON file at `GITHUB_EVENT_PATH`), by event:
/// `pull_request`/`pull_request_target` → `pull_request.number` (or the top-level `number`);
/// `issue_comment` → `issue.number`; `workflow_run` (the follow-up job that posts for fork PRs) →
/// `workflow_run.pull_requests[0].number`, which GitHub leaves empty for PRs from forks.
pub fn pr_from_event(json: &str) -> Result<u64, EventPr> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| EventPr::NotJson(e.to_string()))?;
    [
        "/pull_request/number",
        "/number",
        "/issue/number",
        "/workflow_run/pull_requests/0/number",
    ]
    .iter()
    .find_map(|p| v.pointer(p).and_then(serde_json::Value::as_u64))
    .ok_or(EventPr::Missing)
}

/// The API token. Its `Debug` is redacted and nothing in this module formats it into text.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    /// The token from `GITHUB_TOKEN`.
    pub fn from_env() -> Result<Token, PostError> {
        Token::new(std::env::var("GITHUB_TOKEN").map_err(|_| PostError::NoToken)?)
    }

    /// Surrounding whitespace (a trailing newline from `$(cat file)`) is dropped; a token that is
    /// then empty or holds bytes an HTTP header cannot carry is refused rather than sent.
    pub fn new(token: String) -> Result<Token, PostError> {
        let t = token.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(PostError::BadToken);
        }
        Ok(Token(t.to_string()))
    }

    /// `text` with every occurrence of the token replaced by `***`.
    fn scrub(&self, text: &str) -> String {
        text.replace(&self.0, "***")
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Bounded retries with exponential backoff: attempt `k` (0-based) that fails transiently waits
/// `base_delay × 2^k`, or GitHub's `retry-after` if longer, never more than `max_delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries per request, the first included.
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, waiting 1 s, 2 s, 4 s (up to 60 s when GitHub asks for longer).
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self
            .base_delay
            .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX));
        backoff
            .max(retry_after.unwrap_or_default())
            .min(self.max_delay)
    }
}

/// What [`Poster::upsert`] did, and which marked comments by others it left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upserted {
    pub posted: Posted,
    /// The login the sticky comment is matched by.
    pub author: String,
    /// Comments that start with the marker but were written by someone else: `(id, login)`.
    pub foreign: Vec<(u64, String)>,
}

impl fmt::Display for Upserted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (as {})", self.posted, self.author)?;
        if !self.foreign.is_empty() {
            let list: Vec<String> = self
                .foreign
                .iter()
                .map(|(id, login)| format!("{id} by {login}"))
                .collect();
            write!(
                f,
                "; left alone {} comment(s) with the report's marker written by others: {}",
                self.foreign.len(),
                list.join(", ")
            )?;
        }
        Ok(())
    }
}

/// What was done with the sticky comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Posted {
    Created { id: u64, url: String },
    Updated { id: u64, url: String },
}

impl fmt::Display for Posted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Posted::Created { id, url } => write!(f, "created comment {id}: {url}"),
            Posted::Updated { id, url } => write!(f, "updated comment {id}: {url}"),
        }
    }
}

/// The comment body: the markdown report, cut to GitHub's comment limit (less room for the
/// note [`Poster::upsert`] may add) with a pointer to the full report (`artifact_hint`, see
/// [`artifact_hint`]).
pub fn comment_body(results: &Results, artifact_hint: &str) -> String {
    comment_body_with_trends(results, artifact_hint, None)
}

/// [`comment_body`] followed by [`trend_links`] when the history's URL is known (the comment
/// job sets `HARNESS_HISTORY_URL` from its own repository; see [`history_url`]).
pub fn comment_body_with_trends(
    results: &Results,
    artifact_hint: &str,
    history_url: Option<&str>,
) -> String {
    let links = history_url
        .map(|u| trend_links(results, u))
        .unwrap_or_default();
    let mut body = report::markdown_truncated(
        results,
        report::GITHUB_COMMENT_LIMIT - NOTE_RESERVE - links.len(),
        artifact_hint,
    );
    body.push_str(&links);
    body
}

/// Most flagged rows linked to their trend.
const MAX_TREND_LINKS: usize = 12;

/// A URL that goes into markdown links as is: `https://` and letters, digits and `- . _ ~ / :
/// %` only (no spaces, brackets or parentheses that could end the link), at most 300 chars;
/// returned without a trailing slash.
pub fn plain_https_url(url: &str) -> Result<String, String> {
    let ok = url.starts_with("https://")
        && url.len() <= 300
        && url
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~/:%".contains(c));
    if ok {
        Ok(url.trim_end_matches('/').to_string())
    } else {
        Err(format!(
            "{url:?} must be an https:// URL of letters, digits and - . _ ~ / : %"
        ))
    }
}

/// `HARNESS_HISTORY_URL` when set and plain ([`plain_https_url`]): where the
/// `bench-history` branch is browsed, e.g. `https://github.com/OWNER/NAME/blob/bench-history`.
/// A malformed value is ignored with a warning: the report still posts.
pub fn history_url(env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let v = env("HARNESS_HISTORY_URL").filter(|v| !v.trim().is_empty())?;
    match plain_https_url(v.trim()) {
        Ok(u) => Some(u),
        Err(e) => {
            eprintln!("warning: HARNESS_HISTORY_URL {e}: ignored");
            None
        }
    }
}

/// Links from each flagged row (🔴, ⚠️, ❔, 🟢) to its series on main: the chart that `harness
/// trend --charts` draws for this host and benchmark on the history branch, and the trend page.
/// The link targets are the history URL and a `chart::file_name` (never an id's text); the ids
/// are shown as escaped code. A host the history has not measured has no chart: the page says
/// which host the charts are for.
pub fn trend_links(results: &Results, history_url: &str) -> String {
    use crate::report::{chart, md};
    use crate::stats::Status;
    let flagged: Vec<&str> = report::worst_first(results)
        .into_iter()
        .filter(|b| {
            matches!(
                b.status,
                Status::Regression
                    | Status::PossibleRegression
                    | Status::TooNoisy
                    | Status::Improvement
            )
        })
        .map(|b| b.id.as_str())
        .collect();
    if flagged.is_empty() {
        return String::new();
    }
    let host = &results.host.fingerprint;
    let mut s = format!(
        "\n**Trends on main** ([change points]({history_url}/trend.md); charts for host {}):",
        md::code(&md::cap(host, 40))
    );
    for id in flagged.iter().take(MAX_TREND_LINKS) {
        s += &format!(
            " [{}]({history_url}/charts/{})",
            md::code(&md::cap(id, 80)),
            chart::file_name(&[host, id], "svg")
        );
    }
    if flagged.len() > MAX_TREND_LINKS {
        s += &format!(" and {} more", flagged.len() - MAX_TREND_LINKS);
    }
    s.push('\n');
    s
}

/// The note appended to the body when comments by others carry the marker.
fn foreign_note(author: &str, foreign: &[(u64, String)]) -> String {
    use crate::report::md;
    let mut logins: Vec<&str> = foreign.iter().map(|(_, l)| l.as_str()).collect();
    logins.sort_unstable();
    logins.dedup();
    let shown: Vec<String> = logins.iter().take(5).map(|l| md::code(l)).collect();
    format!(
        "\n\n---\n<sub>{} other comment(s) on this pull request start with this report's marker \
         but were written by {}{}, not by {}: they are not this report and were left alone.</sub>\n",
        foreign.len(),
        shown.join(", "),
        if logins.len() > 5 { ", …" } else { "" },
        md::code(author)
    )
}

/// The most `harness post` reads of a results.json (`--input`): a real one is well under 1 MiB;
/// the file comes from a run that executed pull-request code.
pub const MAX_INPUT_BYTES: u64 = 8 * 1024 * 1024;

/// A results.json from an artifact made fit to post: its commit ids must be commit ids (hex, 7 to
/// 64 characters; they are put into commands and links) and its suite a plain name, or it is
/// refused with the field named; the "Reproduce" commands it carries are replaced by ones built
/// from those ids, so the artifact cannot suggest a command of its choosing. Every other string
/// is escaped where it is rendered ([`report::md`]).
pub fn vetted(mut results: Results) -> Result<Results, String> {
    for (field, rev) in [("base", &results.base), ("head", &results.head)] {
        if !is_commit_id(&rev.sha) {
            return Err(format!(
                "{field}.sha {:?} is not a commit id (7-64 hex digits)",
                report::md::cap(&rev.sha, 80)
            ));
        }
    }
    let single = report::single_revision(&results);
    // A single-revision run's suite is a label ("e2e of suite quick"), not used in a command.
    let suite_ok = single
        || !results.suite.is_empty()
            && results.suite.len() <= 64
            && results
                .suite
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !suite_ok {
        return Err(format!(
            "suite {:?} is not a suite name (letters, digits, - _ ., at most 64)",
            report::md::cap(&results.suite, 80)
        ));
    }
    results.reproduce = reproduce(&results, single);
    Ok(results)
}

/// 7 to 64 hex digits: a commit id as results files and the history hold them.
pub(crate) fn is_commit_id(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commands that reproduce a vetted run, from its commit ids and suite alone.
fn reproduce(r: &Results, single: bool) -> Vec<String> {
    let dirty = |rev: &crate::results::Revision| {
        if rev.dirty {
            "  # measured with uncommitted changes on top of this commit"
        } else {
            ""
        }
    };
    if single {
        vec![format!(
            "harness e2e --rev {}{}",
            r.head.sha,
            dirty(&r.head)
        )]
    } else {
        vec![format!(
            "harness compare --base {} --head {} --suite {}{}",
            r.base.sha,
            r.head.sha,
            r.suite,
            dirty(&r.head)
        )]
    }
}

/// Where a truncated report points: the run's page when the Actions variables name it
/// (`GITHUB_SERVER_URL`/`GITHUB_REPOSITORY`/actions/runs/`GITHUB_RUN_ID`), else the artifact's
/// name alone.
pub fn artifact_hint(env: &dyn Fn(&str) -> Option<String>) -> String {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    match (
        var("GITHUB_SERVER_URL"),
        var("GITHUB_REPOSITORY"),
        var("GITHUB_RUN_ID"),
    ) {
        (Some(server), Some(repo), Some(run)) => format!(
            "the `results.json` artifact of [run {run}]({}/{repo}/actions/runs/{run})",
            server.trim_end_matches('/')
        ),
        _ => "the `results.json` artifact".into(),
    }
}

/// Resolve the target and token from flags and the environment, then create or update the
/// sticky comment. Blocking: runs its own current-thread runtime.
/// `author`: the login whose marked comment is the sticky one (`None`: the token's own).
pub fn post_from_env(
    results: &Results,
    repo: Option<&str>,
    pr: Option<u64>,
    author: Option<&str>,
) -> Result<(PostTarget, Upserted), PostError> {
    let target = PostTarget::from_env(repo, pr)?;
    let token = Token::from_env()?;
    let env = |k: &str| std::env::var(k).ok();
    let hint = artifact_hint(&env);
    let posted = post(
        results,
        &target,
        &token,
        author,
        &hint,
        history_url(&env).as_deref(),
    )?;
    Ok((target, posted))
}

/// Create or update the sticky comment for `results` on `target` (blocking).
pub fn post(
    results: &Results,
    target: &PostTarget,
    token: &Token,
    author: Option<&str>,
    artifact_hint: &str,
    history_url: Option<&str>,
) -> Result<Upserted, PostError> {
    let body = comment_body_with_trends(results, artifact_hint, history_url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PostError::Runtime)?;
    rt.block_on(async {
        let mut poster = Poster::new(target.clone(), token.clone(), RetryPolicy::default())?;
        if let Some(a) = author {
            poster = poster.with_author(a);
        }
        poster.upsert(&body).await
    })
}

/// One GitHub comment as listed or returned by the API (only the fields used).
#[derive(Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    html_url: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    user: Option<User>,
}

#[derive(Deserialize)]
struct User {
    login: String,
}

/// A request that did not succeed, as [`Poster::attempt`] saw it.
struct Failed {
    error: PostError,
    /// Worth another attempt (5xx, rate limit, a dropped connection on an idempotent request).
    transient: bool,
    retry_after: Option<Duration>,
}

/// Posts to one PR with octocrab's client (auth header, base URI, rustls). Requests are
/// relative paths, so octocrab sends them to `api_base` with the token; pagination links are
/// absolute and octocrab sends the token only to `api_base`'s host.
pub struct Poster {
    client: Octocrab,
    target: PostTarget,
    token: Token,
    retry: RetryPolicy,
    /// The sticky comment's author; `None`: looked up from the token.
    author: Option<String>,
}

impl fmt::Debug for Poster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Poster")
            .field("target", &self.target)
            .field("token", &self.token)
            .field("retry", &self.retry)
            .field("author", &self.author)
            .finish_non_exhaustive()
    }
}

impl Poster {
    /// Must be called inside a tokio runtime (octocrab spawns its request buffer there), and the
    /// poster used on that runtime.
    pub fn new(target: PostTarget, token: Token, retry: RetryPolicy) -> Result<Poster, PostError> {
        let client_error = |message: String| PostError::Client {
            api_base: target.api_base.clone(),
            message,
        };
        let client = Octocrab::builder()
            .base_uri(target.api_base.as_str())
            .map_err(|e| client_error(first_line(&e.to_string())))?
            .personal_token(token.0.clone())
            .set_connect_timeout(Some(Duration::from_secs(15)))
            .set_read_timeout(Some(Duration::from_secs(60)))
            .build()
            .map_err(|e| client_error(token.scrub(&error_chain(&e))))?;
        Ok(Poster {
            client,
            target,
            token,
            retry,
            author: None,
        })
    }

    /// Match the sticky comment by this login instead of the token's own (`--comment-author`).
    pub fn with_author(mut self, login: &str) -> Poster {
        self.author = Some(login.trim().to_string());
        self
    }

    /// The login the sticky comment must have: the configured one, else the token's (`GET
    /// /user`), else, when GitHub says an integration token may not read `/user` (Actions'
    /// `GITHUB_TOKEN`), [`ACTIONS_LOGIN`].
    pub(crate) async fn author(&self) -> Result<String, PostError> {
        if let Some(a) = &self.author {
            return Ok(a.clone());
        }
        match self.request(Method::Get, "/user", None).await {
            Ok((text, _)) => serde_json::from_str::<User>(&text)
                .map(|u| u.login)
                .map_err(|e| PostError::Answer {
                    request: "GET /user".into(),
                    message: format!("no login: {e}"),
                }),
            Err(PostError::Forbidden { message, .. })
                if message.to_ascii_lowercase().contains("integration") =>
            {
                Ok(ACTIONS_LOGIN.into())
            }
            Err(e) => Err(e),
        }
    }

    fn comments_path(&self) -> String {
        let t = &self.target;
        format!("/repos/{}/{}/issues/{}/comments", t.owner, t.repo, t.pr)
    }

    /// Update the oldest comment by the author that starts with [`report::MARKER`], else create
    /// one; marked comments by others are left alone and named in a note at the body's end.
    pub async fn upsert(&self, body: &str) -> Result<Upserted, PostError> {
        let author = self.author().await?;
        let mut attempt = 0;
        loop {
            let (own, foreign) = self.find_marked(&author).await?;
            let body = if foreign.is_empty() {
                body.to_string()
            } else {
                format!("{body}{}", foreign_note(&author, &foreign))
            };
            let payload = serde_json::json!({ "body": body });
            let done = |posted| Upserted {
                posted,
                author: author.clone(),
                foreign: foreign.clone(),
            };
            if let Some(id) = own {
                let path = format!(
                    "/repos/{}/{}/issues/comments/{id}",
                    self.target.owner, self.target.repo
                );
                let (c, _) = self.request(Method::Patch, &path, Some(&payload)).await?;
                let c = self.comment(Method::Patch, &path, &c)?;
                return Ok(done(Posted::Updated {
                    id: c.id,
                    url: c.html_url.unwrap_or_default(),
                }));
            }
            let path = self.comments_path();
            match self.attempt(Method::Post, &path, Some(&payload)).await {
                Ok((c, _)) => {
                    let c = self.comment(Method::Post, &path, &c)?;
                    return Ok(done(Posted::Created {
                        id: c.id,
                        url: c.html_url.unwrap_or_default(),
                    }));
                }
                // A failed create may have been applied: list again before the next try.
                Err(f) if f.transient && attempt + 1 < self.retry.attempts => {
                    tokio::time::sleep(self.retry.delay(attempt, f.retry_after)).await;
                    attempt += 1;
                }
                Err(f) => return Err(self.exhausted(f, attempt + 1)),
            }
        }
    }

    /// The id of the oldest comment by `author` whose body starts with the marker, and every
    /// marked comment by others (a fake report is usually planted after the real one, so the
    /// listing reads every page, up to `MAX_PAGES`).
    async fn find_marked(
        &self,
        author: &str,
    ) -> Result<(Option<u64>, Vec<(u64, String)>), PostError> {
        let mut next = Some(format!("{}?per_page={PER_PAGE}", self.comments_path()));
        let mut pages = 0;
        let mut foreign = Vec::new();
        let mut own = None;
        while let Some(uri) = next.take() {
            pages += 1;
            let (text, link) = self.request(Method::Get, &uri, None).await?;
            let comments: Vec<Comment> =
                serde_json::from_str(&text).map_err(|e| PostError::Answer {
                    request: format!("GET {}", self.comments_path()),
                    message: format!("not a list of comments: {e}"),
                })?;
            for c in &comments {
                let marked = c
                    .body
                    .as_deref()
                    .is_some_and(|b| b.trim_start().starts_with(report::MARKER));
                if !marked {
                    continue;
                }
                let login = c.user.as_ref().map_or("", |u| u.login.as_str());
                if !login.eq_ignore_ascii_case(author) {
                    foreign.push((c.id, login.to_string()));
                } else if own.is_none() {
                    own = Some(c.id);
                }
            }
            if pages < MAX_PAGES {
                next = link.as_deref().and_then(next_link);
            }
        }
        Ok((own, foreign))
    }

    fn comment(&self, method: Method, path: &str, text: &str) -> Result<Comment, PostError> {
        serde_json::from_str(text).map_err(|e| PostError::Answer {
            request: format!("{} {path}", method.name()),
            message: format!("not a comment: {e}"),
        })
    }

    /// One request with retries; returns the body and the `link` header. A POST is retried only
    /// by callers that can tell whether a failed one was applied (see [`Poster::upsert`]).
    pub(crate) async fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(String, Option<String>), PostError> {
        let mut attempt = 0;
        loop {
            match self.attempt(method, uri, body).await {
                Ok(ok) => return Ok(ok),
                Err(f) if f.transient && attempt + 1 < self.retry.attempts => {
                    tokio::time::sleep(self.retry.delay(attempt, f.retry_after)).await;
                    attempt += 1;
                }
                Err(f) => return Err(self.exhausted(f, attempt + 1)),
            }
        }
    }

    /// One POST, never re-sent: a create that failed may have been applied, so the caller lists
    /// again before trying anew (as [`Poster::upsert`] does).
    pub(crate) async fn post_once(
        &self,
        uri: &str,
        body: &serde_json::Value,
    ) -> Result<String, PostError> {
        self.attempt(Method::Post, uri, Some(body))
            .await
            .map(|(text, _)| text)
            .map_err(|f| self.exhausted(f, 1))
    }

    /// A transient failure's error, saying how many attempts were made.
    fn exhausted(&self, f: Failed, attempts: u32) -> PostError {
        match f.error {
            PostError::RateLimited {
                request,
                status,
                message,
                ..
            } => PostError::RateLimited {
                request,
                status,
                attempts,
                message,
            },
            PostError::Status {
                request,
                status,
                message,
                ..
            } if attempts > 1 => PostError::Status {
                request,
                status,
                attempts,
                message: format!("{message} (after {attempts} attempts)"),
            },
            e => e,
        }
    }

    /// One request, no retry: a 2xx body and `link` header, or the failure classified.
    async fn attempt(
        &self,
        method: Method,
        uri: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(String, Option<String>), Failed> {
        // Errors show the path without the host or the query string.
        let shown = uri
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or(uri);
        let request = format!(
            "{} {}",
            method.name(),
            shown.split('?').next().unwrap_or(shown)
        );
        let sent = match method {
            Method::Get => self.client._get(uri).await,
            Method::Post => self.client._post(uri, body).await,
            Method::Patch => self.client._patch(uri, body).await,
        };
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                return Err(Failed {
                    error: PostError::Transport {
                        request,
                        message: self.token.scrub(&error_chain(&e)),
                    },
                    // A POST that timed out may have been applied; `upsert` lists again first.
                    transient: true,
                    retry_after: None,
                });
            }
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let link = header("link");
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let out_of_quota = header("x-ratelimit-remaining").is_some_and(|v| v.trim() == "0");
        let text = self
            .client
            .body_to_string(response)
            .await
            .map_err(|e| Failed {
                error: PostError::Transport {
                    request: request.clone(),
                    message: self.token.scrub(&error_chain(&e)),
                },
                transient: true,
                retry_after: None,
            })?;
        if (200..300).contains(&status) {
            return Ok((text, link));
        }
        let message = self.token.scrub(&github_message(&text));
        let rate_limited = status == 429
            || (status == 403
                && (retry_after.is_some()
                    || out_of_quota
                    || message.to_ascii_lowercase().contains("rate limit")));
        let (error, transient) = if rate_limited {
            (
                PostError::RateLimited {
                    request,
                    status,
                    attempts: 1,
                    message,
                },
                true,
            )
        } else {
            let t = &self.target;
            let error = match status {
                401 => PostError::Unauthorized {
                    api_base: t.api_base.clone(),
                    request,
                    message,
                },
                403 => PostError::Forbidden { request, message },
                404 => PostError::NotFound {
                    request,
                    message,
                    owner: t.owner.clone(),
                    repo: t.repo.clone(),
                    pr: t.pr,
                },
                _ => PostError::Status {
                    request,
                    status,
                    attempts: 1,
                    message,
                },
            };
            (error, status >= 500)
        };
        Err(Failed {
            error,
            transient,
            retry_after,
        })
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Method {
    Get,
    Post,
    Patch,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
        }
    }
}

/// The `rel="next"` target of an RFC 8288 `link` header:
/// `<https://api.github.com/…?page=2>; rel="next", <…>; rel="last"`.
pub(crate) fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        is_next.then(|| target.to_string())
    })
}

/// GitHub's `message` (and the first `errors[].message`) from an error body; other bodies are
/// shown as text, on one line and cut short.
fn github_message(body: &str) -> String {
    let text = match serde_json::from_str::<serde_json::Value>(body) {
        Ok(v) => {
            let msg = v.get("message").and_then(|m| m.as_str()).unwrap_or("");
            let detail = v
                .pointer("/errors/0/message")
                .and_then(|m| m.as_str())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            format!("{msg}{detail}")
        }
        Err(_) => body.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    let text = text.trim();
    if text.is_empty() {
        return "no message".into();
    }
    if text.chars().count() > MAX_MESSAGE {
        let cut: String = text.chars().take(MAX_MESSAGE).collect();
        return format!("{cut}…");
    }
    text.to_string()
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// An error and its sources on one line (octocrab's own `Display` adds a backtrace).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![first_line(&e.to_string())];
    let mut source = e.source();
    while let Some(s) = source {
        let line = first_line(&s.to_string());
        if !parts.iter().any(|p| p.contains(&line)) {
            parts.push(line);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn pr_numbers_from_each_event_kind() {
        let pull_request = r#"{"action":"synchronize","number":17,"pull_request":{"number":17}}"#;
        assert_eq!(pr_from_event(pull_request), Ok(17));
        assert_eq!(pr_from_event(r#"{"number":9}"#), Ok(9));
        let issue_comment = r#"{"action":"created","issue":{"number":23,"pull_request":{}}}"#;
        assert_eq!(pr_from_event(issue_comment), Ok(23));
        let workflow_run =
            r#"{"workflow_run":{"id":1,"pull_requests":[{"number":41},{"number":42}]}}"#;
        assert_eq!(pr_from_event(workflow_run), Ok(41));
        // A workflow_run for a fork's PR lists none.
        let fork_run = r#"{"workflow_run":{"id":1,"pull_requests":[]}}"#;
        assert_eq!(pr_from_event(fork_run), Err(EventPr::Missing));
        assert_eq!(
            pr_from_event(r#"{"ref":"refs/heads/main"}"#),
            Err(EventPr::Missing)
        );
        assert!(matches!(pr_from_event("{"), Err(EventPr::NotJson(_))));
    }

    #[test]
    fn target_from_flags_then_environment() {
        let dir = tempfile::tempdir().unwrap();
        let event = dir.path().join("event.json");
        std::fs::write(&event, r#"{"pull_request":{"number":5}}"#).unwrap();
        let event = event.to_str().unwrap();
        let e = env(&[
            ("GITHUB_REPOSITORY", "acme/engine"),
            ("GITHUB_EVENT_PATH", event),
            ("GITHUB_API_URL", "https://ghe.example.com/api/v3/"),
        ]);
        let t = PostTarget::resolve(None, None, &e).unwrap();
        assert_eq!(
            t,
            PostTarget {
                api_base: "https://ghe.example.com/api/v3".into(),
                owner: "acme".into(),
                repo: "engine".into(),
                pr: 5
            }
        );
        // Flags win over the environment.
        let t = PostTarget::resolve(Some("me/fork"), Some(8), &e).unwrap();
        assert_eq!((t.owner.as_str(), t.repo.as_str(), t.pr), ("me", "fork", 8));
        // No GITHUB_API_URL: the public API.
        let t = PostTarget::resolve(Some("a/b"), Some(1), &env(&[])).unwrap();
        assert_eq!(t.api_base, DEFAULT_API_URL);
    }

    #[test]
    fn target_errors_name_the_flag_and_variable() {
        let err = |r: Result<PostTarget, PostError>| r.unwrap_err().to_string();
        let none = env(&[]);
        let e = err(PostTarget::resolve(None, Some(1), &none));
        assert!(
            e.contains("--repo") && e.contains("GITHUB_REPOSITORY"),
            "{e}"
        );
        let e = err(PostTarget::resolve(Some("justname"), Some(1), &none));
        assert!(e.contains("\"justname\"") && e.contains("--repo"), "{e}");
        let e = err(PostTarget::resolve(
            None,
            Some(1),
            &env(&[("GITHUB_REPOSITORY", "a/b/c")]),
        ));
        assert!(
            e.contains("GITHUB_REPOSITORY") && e.contains("OWNER/NAME"),
            "{e}"
        );
        let e = err(PostTarget::resolve(Some("a/b"), None, &none));
        assert!(e.contains("--pr") && e.contains("GITHUB_EVENT_PATH"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let event = dir.path().join("event.json");
        std::fs::write(&event, r#"{"workflow_run":{"pull_requests":[]}}"#).unwrap();
        let with_event = env(&[
            ("GITHUB_EVENT_PATH", event.to_str().unwrap()),
            ("GITHUB_EVENT_NAME", "workflow_run"),
        ]);
        let e = err(PostTarget::resolve(Some("a/b"), None, &with_event));
        assert!(
            e.contains("--pr") && e.contains("workflow_run") && e.contains("fork"),
            "{e}"
        );
        let missing = env(&[("GITHUB_EVENT_PATH", "/nonexistent/event.json")]);
        let e = err(PostTarget::resolve(Some("a/b"), None, &missing));
        assert!(e.contains("/nonexistent/event.json"), "{e}");
    }

    #[test]
    fn token_is_trimmed_checked_and_never_shown() {
        let t = Token::new("ghp_secretvalue123\n".into()).unwrap();
        assert_eq!(t.0, "ghp_secretvalue123");
        assert_eq!(format!("{t:?}"), "Token(***)");
        assert_eq!(
            t.scrub("bad credentials for ghp_secretvalue123"),
            "bad credentials for ***"
        );
        assert!(matches!(Token::new("  ".into()), Err(PostError::BadToken)));
        assert!(matches!(
            Token::new("ab\ncd".into()),
            Err(PostError::BadToken)
        ));
        let target = PostTarget::resolve(Some("a/b"), Some(1), &env(&[])).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let poster = rt
            .block_on(async { Poster::new(target, t, RetryPolicy::default()) })
            .unwrap();
        let shown = format!("{poster:?}");
        assert!(!shown.contains("secretvalue"), "{shown}");
    }

    #[test]
    fn next_link_follows_rel_next_only() {
        let h = r#"<https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=3>; rel="next", <https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=5>; rel="last""#;
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://api.github.com/repositories/1/issues/2/comments?per_page=100&page=3")
        );
        let last_page = r#"<https://x/c?page=1>; rel="prev", <https://x/c?page=1>; rel="first""#;
        assert_eq!(next_link(last_page), None);
        assert_eq!(next_link(""), None);
    }

    #[test]
    fn backoff_doubles_honours_retry_after_and_is_capped() {
        let p = RetryPolicy::default();
        let s = Duration::from_secs;
        assert_eq!(p.delay(0, None), s(1));
        assert_eq!(p.delay(1, None), s(2));
        assert_eq!(p.delay(2, None), s(4));
        assert_eq!(p.delay(0, Some(s(10))), s(10));
        assert_eq!(p.delay(1, Some(s(3600))), s(60));
        assert_eq!(p.delay(40, None), s(60));
    }

    #[test]
    fn github_messages_are_short_and_one_line() {
        assert_eq!(
            github_message(
                r#"{"message":"Validation Failed","errors":[{"message":"body is too long"}]}"#
            ),
            "Validation Failed (body is too long)"
        );
        assert_eq!(
            github_message("<html>\n<body>Bad gateway</body>\n</html>"),
            "<html> <body>Bad gateway</body> </html>"
        );
        assert_eq!(github_message(""), "no message");
        assert!(github_message(&"x".repeat(1000)).chars().count() <= MAX_MESSAGE + 1);
    }

    #[test]
    fn trend_links_point_only_at_the_history() {
        use crate::stats::Status;
        let mut r = crate::report::fixtures::results_with(&[
            ("x/<img src=x>](javascript:alert(1))", Status::Regression),
            ("add/f32/large", Status::NoChange),
            ("gather/f16/large", Status::TooNoisy),
        ]);
        r.host.fingerprint = "c04e336f61921f56".into();
        let url = "https://github.com/acme/engine/blob/bench-history";
        let s = trend_links(&r, url);
        assert!(
            !s.contains("add/f32/large"),
            "unflagged rows are not linked: {s}"
        );
        use pulldown_cmark::{Event, Parser, Tag};
        let mut links = 0;
        for ev in Parser::new(&s) {
            match ev {
                Event::Html(h) | Event::InlineHtml(h) => panic!("HTML {h} in {s}"),
                Event::Start(Tag::Link { dest_url, .. }) => {
                    assert!(dest_url.starts_with(url), "{dest_url}");
                    links += 1;
                }
                _ => {}
            }
        }
        assert_eq!(links, 3, "the trend page and two rows: {s}");
        assert!(history_url(&env(&[("HARNESS_HISTORY_URL", "https://x/a)(b")])).is_none());
        assert_eq!(
            history_url(&env(&[("HARNESS_HISTORY_URL", "https://x/y/")])).as_deref(),
            Some("https://x/y")
        );
        assert!(comment_body_with_trends(&r, "a", Some(url)).ends_with(&s));
    }

    #[test]
    fn hint_points_at_the_run_when_known() {
        let e = env(&[
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "acme/engine"),
            ("GITHUB_RUN_ID", "99"),
        ]);
        assert_eq!(
            artifact_hint(&e),
            "the `results.json` artifact of [run 99](https://github.com/acme/engine/actions/runs/99)"
        );
        assert_eq!(artifact_hint(&env(&[])), "the `results.json` artifact");
    }
}
