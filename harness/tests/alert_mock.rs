//! `harness alert`'s issue sync against a local mock of the GitHub REST API (wiremock on
//! 127.0.0.1): a new change point opens one labelled issue, an open one of the bot's own is
//! updated, a closed one is left closed, a marked issue by someone else and a pull request are
//! never touched, and hostile benchmark ids are escaped in what is sent.

use std::time::Duration;

use harness::alert::{self, Alert, LABEL, MARKER};
use harness::history::{Trend, TrendPoint};
use harness::post::{PostTarget, Poster, RetryPolicy, Token};
use harness::stats::ChangePoint;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const TOKEN: &str = "ghs_FAKEtoken0123456789abcdefXYZ";
const BOT: &str = "gate-bot";
const ISSUES: &str = "/repos/acme/engine/issues";

fn target(server: &MockServer) -> PostTarget {
    PostTarget {
        api_base: server.uri(),
        owner: "acme".into(),
        repo: "engine".into(),
        pr: 0,
    }
}

fn poster(server: &MockServer) -> Poster {
    let fast = RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(10),
    };
    Poster::new(target(server), Token::new(TOKEN.into()).unwrap(), fast)
        .unwrap()
        .with_author(BOT)
}

fn trend(id: &str, change_at: usize, ratio: f64) -> Trend {
    let shas: Vec<String> = (0..20).map(|i| format!("{:040x}", i + 1)).collect();
    Trend {
        host: "host-a".into(),
        id: id.into(),
        median_ns: (0..20)
            .map(|i| if i < change_at { 100.0 } else { 100.0 * ratio })
            .collect(),
        change_points: vec![TrendPoint {
            sha: shas[change_at].clone(),
            before_sha: shas[change_at - 1].clone(),
            point: ChangePoint {
                index: change_at,
                p_value: 0.005,
                q: 10.0,
                before: 100.0,
                after: 100.0 * ratio,
                ratio,
                order: 1,
            },
        }],
        shas,
    }
}

fn issue(number: u64, body: &str, login: &str, state: &str) -> serde_json::Value {
    serde_json::json!({"number": number, "state": state, "body": body, "user": {"login": login}})
}

async fn sent(server: &MockServer, verb: &str) -> Vec<(String, serde_json::Value)> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r: &Request| r.method.as_str() == verb)
        .map(|r| {
            (
                r.url.path().to_string(),
                serde_json::from_slice(&r.body).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn opens_new_updates_open_leaves_closed_and_foreign_alone() {
    let trends = vec![
        trend("add/f32/large", 12, 1.02),
        trend("gather/f16/large", 8, 1.10),
        trend("kv_cache/append", 5, 0.80),
        trend("x/<img src=x onerror=alert(1)>|`", 10, 1.05),
    ];
    let alerts: Vec<Alert> = alert::alerts(
        &trends,
        Some("https://github.com/acme/engine/blob/bench-history/charts"),
    );
    assert_eq!(alerts.len(), 4);
    let key = |id: &str| {
        let t = trends.iter().find(|t| t.id == id).unwrap();
        alert::key(&t.host, &t.id, &t.change_points[0].sha)
    };
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ISSUES))
        .and(query_param("labels", LABEL))
        .and(query_param("state", "all"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([
            // The bot's open issue for the gather step: updated.
            issue(
                11,
                &format!("{MARKER}{} -->\nold text", key("gather/f16/large")),
                BOT,
                "open"
            ),
            // The bot's closed issue for the kv_cache step: a decision, left alone.
            issue(
                12,
                &format!("{MARKER}{} -->\n", key("kv_cache/append")),
                BOT,
                "closed"
            ),
            // Someone else's issue with the add step's marker: never edited, and it does not
            // stop the bot's own issue from being opened.
            issue(
                13,
                &format!("{MARKER}{} -->\nfake", key("add/f32/large")),
                "mallory",
                "open"
            ),
            // A pull request with a marker: not an issue.
            serde_json::json!({"number": 14, "state": "open", "user": {"login": BOT},
                "body": format!("{MARKER}{} -->", key("add/f32/large")), "pull_request": {}}),
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{ISSUES}/11")))
        .respond_with(ResponseTemplate::new(200).set_body_json(issue(11, "", BOT, "open")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(ISSUES))
        .respond_with(ResponseTemplate::new(201).set_body_json(issue(21, "", BOT, "open")))
        .expect(2)
        .mount(&server)
        .await;

    let out = alert::sync(&poster(&server), &target(&server), &alerts)
        .await
        .unwrap();
    assert_eq!(out.updated, vec![(key("gather/f16/large"), 11)]);
    assert_eq!(out.closed, vec![key("kv_cache/append")]);
    let mut opened: Vec<String> = out.opened.iter().map(|(k, _)| k.clone()).collect();
    opened.sort();
    let mut want = vec![
        key("add/f32/large"),
        key("x/<img src=x onerror=alert(1)>|`"),
    ];
    want.sort();
    assert_eq!(opened, want);
    assert_eq!(out.foreign, vec![(13, "mallory".to_string())]);

    let posts = sent(&server, "POST").await;
    for (_, v) in &posts {
        assert_eq!(v["labels"], serde_json::json!([LABEL]));
        let body = v["body"].as_str().unwrap();
        assert!(body.starts_with(MARKER), "{body}");
        // Parsed as GitHub would: no HTML, and the one link is the chart's.
        use pulldown_cmark::{Event, Options, Parser, Tag};
        for ev in Parser::new_ext(body, Options::ENABLE_TABLES) {
            match ev {
                Event::Html(h) | Event::InlineHtml(h) => {
                    assert!(h.starts_with(MARKER), "HTML from an id: {h}\n{body}")
                }
                Event::Start(Tag::Image { .. }) => panic!("an image: {body}"),
                Event::Start(Tag::Link { dest_url, .. }) => assert!(
                    dest_url
                        .starts_with("https://github.com/acme/engine/blob/bench-history/charts/"),
                    "{dest_url}"
                ),
                _ => {}
            }
        }
        assert!(
            body.contains("https://github.com/acme/engine/blob/bench-history/charts/"),
            "{body}"
        );
        assert!(!v["title"].as_str().unwrap().contains("<img"));
    }
    let patches = sent(&server, "PATCH").await;
    assert!(patches[0].1["body"].as_str().unwrap().contains("+10.0 %"));
    server.verify().await;
}

#[tokio::test]
async fn opens_at_most_max_new_per_run() {
    let trends: Vec<Trend> = (0..alert::MAX_NEW + 3)
        .map(|i| trend(&format!("bench/{i}"), 10, 1.0 + 0.01 * (i + 1) as f64))
        .collect();
    let alerts = alert::alerts(&trends, None);
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ISSUES))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(ISSUES))
        .respond_with(ResponseTemplate::new(201).set_body_json(issue(30, "", BOT, "open")))
        .expect(alert::MAX_NEW as u64)
        .mount(&server)
        .await;
    let out = alert::sync(&poster(&server), &target(&server), &alerts)
        .await
        .unwrap();
    assert_eq!(out.opened.len(), alert::MAX_NEW);
    assert_eq!(out.deferred.len(), 3);
    // The strongest changes go first: the deferred ones are the three smallest.
    let smallest: Vec<String> = alerts[alert::MAX_NEW..]
        .iter()
        .map(|a| a.key.clone())
        .collect();
    assert_eq!(out.deferred, smallest);
    assert!(
        alerts[alert::MAX_NEW].title.contains("+3.0 %"),
        "{}",
        alerts[alert::MAX_NEW].title
    );
    server.verify().await;
}
