//! `harness post` against a local mock of the GitHub REST API (wiremock on 127.0.0.1): create,
//! update across pages, permission errors, retries, truncation, and a token that never shows.

use std::time::Duration;

use harness::post::{PostError, PostTarget, Posted, Poster, RetryPolicy, Token, comment_body};
use harness::report::{GITHUB_COMMENT_LIMIT, MARKER};
use harness::results::{
    BenchResult, Change, HostInfo, Method, Results, Revision, SideResult, Status, ThresholdSource,
};
use wiremock::matchers::{header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Distinctive, so a leak anywhere is found by a plain substring search.
const TOKEN: &str = "ghs_FAKEtoken0123456789abcdefXYZ";
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
        },
        rounds: vec![],
        benches,
        failures: vec![],
        outcome,
        wall_s: 60.0,
        reproduce: vec!["harness compare".into()],
        e2e: None,
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
    Poster::new(target(server), Token::new(TOKEN.into()).unwrap(), fast()).unwrap()
}

fn comment(id: u64, body: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "html_url": format!("https://github.com/acme/engine/pull/7#issuecomment-{id}"),
        "body": body,
        "user": {"login": "someone"},
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

#[tokio::test]
async fn creates_the_comment_when_none_carries_the_marker() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(COMMENTS))
        .and(query_param("per_page", "100"))
        .and(header("authorization", format!("Bearer {TOKEN}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            comment(1, "LGTM"),
            // Quotes the marker but does not start with it: a person's comment, never edited.
            comment(2, &format!("why does the bot write {MARKER}?")),
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(COMMENTS))
        .respond_with(ResponseTemplate::new(201).set_body_json(comment(99, "")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;

    let r = small();
    let body = comment_body(&r, "the artifact");
    let posted = poster(&server).upsert(&body).await.unwrap();
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
    let posted = poster(&server).upsert(&body).await.unwrap();
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

    let posted = poster(&server).upsert("body").await.unwrap();
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
    let posted = poster(&server).upsert("body").await.unwrap();
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
        .args(["--repo", "acme/engine", "--pr", "7"])
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
