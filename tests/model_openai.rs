//! The openai provider over real HTTP against a small fake of the Chat Completions streaming
//! format (an axum handler in this test), selected through `build_provider`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod model_support;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use flowerbox::model::{
    build_provider, ContentBlock, ModelError, ModelEvent, ProviderOptions, StopReason, ToolDef,
};
use flowerbox::role::Role;
use model_support::{fast, request, Events};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Headers of interest and the body of one request.
type Seen = (Vec<(String, String)>, Value);

/// What the fake saw and how it answers.
#[derive(Default)]
struct Fake {
    /// Every request, in order.
    seen: Mutex<Vec<Seen>>,
    /// Leading requests answered with 503.
    fail_first: Mutex<u32>,
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "local-served",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

async fn completions(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    let picked = ["authorization", "x-flowerbox-role", "x-flowerbox-agent"]
        .iter()
        .filter_map(|h| Some((h.to_string(), headers.get(*h)?.to_str().ok()?.to_string())))
        .collect();
    fake.seen.lock().unwrap().push((picked, body));
    {
        let mut left = fake.fail_first.lock().unwrap();
        if *left > 0 {
            *left -= 1;
            let err = json!({"error": {"message": "model is loading", "type": "server_error", "code": null}});
            return (StatusCode::SERVICE_UNAVAILABLE, err.to_string()).into_response();
        }
    }
    let chunks = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "先看"}), None),
        chunk(json!({"content": "目录 €"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "Bash", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\": \"ls"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
            "function": {"name": "Read", "arguments": "{\"path\": \"中.txt\"}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": " -la\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "local-served", "choices": [],
               "usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366}}),
    ];
    let mut sse = String::new();
    for c in &chunks {
        sse.push_str(&format!("data: {c}\n\n"));
    }
    sse.push_str("data: [DONE]\n\n");
    // Several network chunks, one of them cut inside a 3-byte character.
    let bytes = sse.into_bytes();
    let cut = bytes.iter().position(|b| *b >= 0xC0).unwrap() + 1;
    let parts = vec![
        Ok::<_, std::io::Error>(Bytes::copy_from_slice(&bytes[..cut])),
        Ok(Bytes::copy_from_slice(&bytes[cut..])),
    ];
    let mut resp = Response::new(axum::body::Body::from_stream(futures::stream::iter(parts)));
    resp.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    resp
}

async fn start(fake: Arc<Fake>) -> String {
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn chat_completions_stream_with_tools_and_usage() {
    let fake = Arc::new(Fake {
        fail_first: Mutex::new(1),
        ..Default::default()
    });
    let base = start(fake.clone()).await;
    let get = move |k: &str| match k {
        "FLOWERBOX_PROVIDER" => Some("openai".to_string()),
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("sk-local".into()),
        "OPENAI_MODEL" => Some("qwen2.5-coder".into()),
        _ => None,
    };
    let provider = build_provider(
        &get,
        ProviderOptions {
            retry: fast(),
            transport: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(provider.name(), "openai");

    let mut req = request(Role::Coordinator, "coordinator", "list the files");
    req.tools.push(ToolDef {
        name: "Bash".into(),
        description: "run".into(),
        input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
    });
    let events = Events::default();
    let ev = events.clone();
    let sink = move |e| ev.push(e);
    let turn = provider
        .stream_turn(&req, &sink, &CancellationToken::new())
        .await
        .unwrap();

    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    assert_eq!(turn.model, "local-served");
    assert_eq!(turn.content[0], ContentBlock::text("先看目录 €"));
    assert_eq!(
        turn.content[1],
        ContentBlock::ToolUse {
            id: "call_1".into(),
            name: "Bash".into(),
            input: json!({"command": "ls -la"})
        }
    );
    assert_eq!(
        turn.content[2],
        ContentBlock::ToolUse {
            id: "call_2".into(),
            name: "Read".into(),
            input: json!({"path": "中.txt"})
        }
    );
    assert_eq!(turn.usage.input_tokens, Some(321));
    assert_eq!(turn.usage.output_tokens, Some(45));
    assert_eq!(turn.retried_errors.len(), 1);
    assert!(
        turn.retried_errors[0].contains("503")
            && turn.retried_errors[0].contains("model is loading")
    );
    assert_eq!(events.text(), "先看目录 €");
    assert!(events.all().iter().any(|e| matches!(
        e,
        ModelEvent::Done {
            stop_reason: StopReason::ToolUse,
            ..
        }
    )));
    // A local model is not in the price table: its cost is unknown, not zero.
    assert_eq!(
        flowerbox::model::price::cost_usd(&turn.model, &turn.usage),
        None
    );

    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let (headers, body) = &seen[1];
    let h = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(h("authorization"), Some("Bearer sk-local"));
    assert_eq!(h("x-flowerbox-role"), Some("coordinator"));
    assert_eq!(h("x-flowerbox-agent"), Some("coordinator"));
    assert_eq!(body["model"], "qwen2.5-coder");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["tools"][0]["type"], "function");
    // Whenever tools are offered (llama-cpp-python drops them from the prompt without it).
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"][0]["function"]["name"], "Bash");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "list the files"})
    );
}

#[tokio::test]
async fn unknown_provider_name_is_an_error() {
    let get = |k: &str| (k == "FLOWERBOX_PROVIDER").then(|| "opneai".to_string());
    let err = build_provider(&get, ProviderOptions::default())
        .err()
        .expect("must fail");
    assert!(matches!(err, ModelError::Setup(_)));
    assert!(err.to_string().contains("opneai"));
}

#[tokio::test]
async fn a_local_server_says_its_context_length() {
    // llama.cpp's server: GET /props at the root (the base URL ends in /v1).
    let app = Router::new().route(
        "/props",
        axum::routing::get(|| async {
            axum::Json(json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let base = format!("http://{addr}/v1");
    let get = move |k: &str| match k {
        "FLOWERBOX_PROVIDER" => Some("openai".to_string()),
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_MODEL" => Some("local".into()),
        _ => None,
    };
    let p = build_provider(&get, ProviderOptions::default()).unwrap();
    assert_eq!(p.server_context_window().await, Some(8192));
    // So an uncatalogued model asks for a quarter of it.
    assert_eq!(
        flowerbox::model::config::max_tokens_for(None, "local", Some(8192)),
        2048
    );
    // A server that says nothing: unknown.
    let fake = Arc::new(Fake::default());
    let base = start(fake).await;
    let get = move |k: &str| match k {
        "FLOWERBOX_PROVIDER" => Some("openai".to_string()),
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_MODEL" => Some("local".into()),
        _ => None,
    };
    let p = build_provider(&get, ProviderOptions::default()).unwrap();
    assert_eq!(p.server_context_window().await, None);
}
