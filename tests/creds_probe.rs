//! The credential probe against a local HTTP server (axum on 127.0.0.1): the request it sends
//! and the verdict for every answer the seed classifies — 200, 401, 403, 404, 400 with and
//! without a "not found" phrase, 500, no answer (timeout) and a closed port.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use flowerbox::creds::probe::{probe, ProbeSettings, Verdict, FALLBACK_MODEL};
use flowerbox::creds::{Credentials, Source};

/// What the server saw.
#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    body: serde_json::Value,
}

/// A server answering every POST /v1/messages with `status`/`body` after `delay`.
struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn serve(status: u16, body: &str, delay: Duration) -> Server {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let body = body.to_string();
    let app = Router::new().route(
        "/v1/messages",
        post(move |headers: HeaderMap, raw: String| {
            let log = log.clone();
            let body = body.clone();
            async move {
                log.lock().unwrap().push(Seen {
                    headers,
                    body: serde_json::from_str(&raw).unwrap_or_default(),
                });
                tokio::time::sleep(delay).await;
                (StatusCode::from_u16(status).unwrap(), body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { base, seen }
}

fn creds(base: &str, pairs: &[(&str, &str)]) -> Credentials {
    let mut c = Credentials::empty();
    c.claim("ANTHROPIC_BASE_URL", base, &Source::Process);
    for (k, v) in pairs {
        c.claim(k, v, &Source::Process);
    }
    c
}

fn fast() -> ProbeSettings {
    ProbeSettings {
        timeout: Duration::from_millis(400),
    }
}

async fn verdict_for(status: u16, body: &str) -> Verdict {
    let server = serve(status, body, Duration::ZERO).await;
    probe(
        &creds(&server.base, &[("ANTHROPIC_API_KEY", "sk-ant-k")]),
        &fast(),
    )
    .await
}

#[tokio::test]
async fn ok_200() {
    assert_eq!(verdict_for(200, r#"{"type":"message"}"#).await, Verdict::Ok);
}

#[tokio::test]
async fn auth_401_and_403() {
    assert_eq!(
        verdict_for(401, r#"{"error":{"message":"invalid x-api-key"}}"#).await,
        Verdict::Auth(r#"{"error":{"message":"invalid x-api-key"}}"#.into())
    );
    assert!(matches!(verdict_for(403, "forbidden").await, Verdict::Auth(b) if b == "forbidden"));
}

#[tokio::test]
async fn config_404() {
    assert!(matches!(verdict_for(404, "no route").await, Verdict::Config(b) if b == "no route"));
}

#[tokio::test]
async fn config_400_only_with_a_not_found_phrase() {
    let with =
        r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#;
    assert!(matches!(verdict_for(400, with).await, Verdict::Config(_)));
    let unknown = r#"{"error":{"message":"Unknown model 'x'"}}"#;
    assert!(matches!(
        verdict_for(400, unknown).await,
        Verdict::Config(_)
    ));
    let without = r#"{"type":"error","error":{"type":"invalid_request_error","message":"model: max_tokens: too large"}}"#;
    assert_eq!(verdict_for(400, without).await, Verdict::Ok);
}

#[tokio::test]
async fn server_error_500_is_net() {
    assert!(
        matches!(verdict_for(500, "upstream exploded").await, Verdict::Net(m) if m == "HTTP 500: upstream exploded")
    );
}

#[tokio::test]
async fn no_answer_is_net_after_the_timeout() {
    let server = serve(200, "{}", Duration::from_secs(30)).await;
    let started = Instant::now();
    let v = probe(
        &creds(&server.base, &[("ANTHROPIC_AUTH_TOKEN", "tok")]),
        &fast(),
    )
    .await;
    assert!(
        matches!(v, Verdict::Net(ref m) if m.contains("没有回应")),
        "{v:?}"
    );
    // Generous bound: catches a probe that ignores its timeout, not a timing target.
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn closed_port_is_net() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let v = probe(&creds(&base, &[("ANTHROPIC_AUTH_TOKEN", "tok")]), &fast()).await;
    assert!(
        matches!(v, Verdict::Net(ref m) if !m.is_empty() && m.chars().count() <= 80),
        "{v:?}"
    );
}

#[tokio::test]
async fn malformed_base_url_is_config() {
    let v = probe(
        &creds("not a url", &[("ANTHROPIC_AUTH_TOKEN", "tok")]),
        &fast(),
    )
    .await;
    assert!(matches!(v, Verdict::Config(_)), "{v:?}");
}

#[tokio::test]
async fn no_token_is_auth_without_a_request() {
    let server = serve(200, "{}", Duration::ZERO).await;
    let v = probe(&creds(&server.base, &[]), &fast()).await;
    assert!(matches!(v, Verdict::Auth(_)));
    assert!(server.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn api_key_goes_in_x_api_key() {
    let server = serve(200, "{}", Duration::ZERO).await;
    let base = format!("{}/", server.base); // a trailing slash is tolerated
    probe(
        &creds(
            &base,
            &[
                ("ANTHROPIC_API_KEY", "sk-ant-key"),
                ("ANTHROPIC_AUTH_TOKEN", "also-here"),
                ("ANTHROPIC_MODEL", "main-model"),
            ],
        ),
        &fast(),
    )
    .await;
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.headers["x-api-key"], "sk-ant-key");
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.body["max_tokens"], 16);
    assert_eq!(seen.body["model"], "main-model");
    assert_eq!(seen.body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn auth_token_goes_in_bearer_and_haiku_model_wins() {
    let server = serve(200, "{}", Duration::ZERO).await;
    probe(
        &creds(
            &server.base,
            &[
                ("ANTHROPIC_AUTH_TOKEN", "gw-token"),
                ("ANTHROPIC_MODEL", "main-model"),
                ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "small-model"),
            ],
        ),
        &fast(),
    )
    .await;
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.headers["authorization"], "Bearer gw-token");
    assert!(seen.headers.get("x-api-key").is_none());
    assert_eq!(seen.body["model"], "small-model");

    let server = serve(200, "{}", Duration::ZERO).await;
    probe(
        &creds(&server.base, &[("ANTHROPIC_AUTH_TOKEN", "t")]),
        &fast(),
    )
    .await;
    assert_eq!(server.seen.lock().unwrap()[0].body["model"], FALLBACK_MODEL);
}
