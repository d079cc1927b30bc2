//! The example streams of the providers' public documentation (`tests/fixtures/api_docs/`,
//! copied byte for byte) replayed over real HTTP through both clients, built by
//! `build_provider`: references written by someone else than the client's author.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod model_support;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use flowerbox::model::{
    build_provider, ContentBlock, ModelEvent, Provider, ProviderOptions, StopReason,
};
use model_support::{fast, request, Events};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/api_docs/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Answers each request with the next body, as an event stream.
async fn replay(State(bodies): State<Arc<Mutex<VecDeque<String>>>>) -> Response {
    let body = bodies.lock().unwrap().pop_front().expect("a body left");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

/// A server replaying `bodies` in order on both providers' paths; its base URL.
async fn serve(bodies: Vec<String>) -> String {
    let state = Arc::new(Mutex::new(VecDeque::from(bodies)));
    let app = Router::new()
        .route("/v1/messages", post(replay))
        .route("/v1/chat/completions", post(replay))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn anthropic(url: &str) -> Arc<dyn Provider> {
    let url = url.to_string();
    let get = move |k: &str| match k {
        "ANTHROPIC_BASE_URL" => Some(url.clone()),
        "ANTHROPIC_API_KEY" => Some("sk-test".into()),
        _ => None,
    };
    build_provider(
        &get,
        ProviderOptions {
            retry: fast(),
            transport: None,
        },
    )
    .unwrap()
}

fn openai(url: &str) -> Arc<dyn Provider> {
    let url = format!("{url}/v1");
    let get = move |k: &str| match k {
        "FLOWERBOX_PROVIDER" => Some("openai".into()),
        "OPENAI_BASE_URL" => Some(url.clone()),
        "OPENAI_MODEL" => Some("gpt-4o-mini".into()),
        _ => None,
    };
    build_provider(
        &get,
        ProviderOptions {
            retry: fast(),
            transport: None,
        },
    )
    .unwrap()
}

async fn turn(p: Arc<dyn Provider>) -> (flowerbox::model::Turn, Events) {
    let events = Events::default();
    let sink = {
        let e = events.clone();
        move |ev: ModelEvent| e.push(ev)
    };
    let t = p
        .stream_turn(
            &request(flowerbox::role::Role::Worker, "worker-1", "hi"),
            &sink,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    (t, events)
}

#[tokio::test]
async fn anthropic_basic_text_stream() {
    let url = serve(vec![fixture("anthropic_text.sse")]).await;
    let (t, events) = turn(anthropic(&url)).await;
    assert_eq!(t.content, vec![ContentBlock::text("Hello!")]);
    assert_eq!(t.stop_reason, StopReason::EndTurn);
    assert_eq!(t.model, "claude-sonnet-4-5-20250929");
    assert_eq!(t.usage.input_tokens, Some(25));
    assert_eq!(t.usage.output_tokens, Some(15));
    assert_eq!(events.text(), "Hello!");
}

#[tokio::test]
async fn anthropic_tool_use_with_input_json_delta() {
    let url = serve(vec![fixture("anthropic_tool_use.sse")]).await;
    let (t, _) = turn(anthropic(&url)).await;
    assert_eq!(t.stop_reason, StopReason::ToolUse);
    assert_eq!(
        t.content,
        vec![
            ContentBlock::text("Okay, let's check the weather for San Francisco, CA:"),
            ContentBlock::ToolUse {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into(),
                input: json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
            }
        ]
    );
    assert_eq!(t.usage.output_tokens, Some(89));
    assert!(t.malformed_calls.is_empty());
}

#[tokio::test]
async fn anthropic_extended_thinking_with_signature_delta() {
    let url = serve(vec![fixture("anthropic_thinking.sse")]).await;
    let (t, _) = turn(anthropic(&url)).await;
    assert_eq!(
        t.content,
        vec![
            ContentBlock::Thinking {
                thinking: "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3\n3. 27 * 400 = 10,800\n4. 27 * 50 = 1,350\n5. 27 * 3 = 81\n6. 10,800 + 1,350 + 81 = 12,231".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...".into(),
            },
            ContentBlock::text("27 * 453 = 12,231"),
        ]
    );
    // The example reports no usage: unknown, not zero.
    assert_eq!(t.usage.input_tokens, None);
    assert_eq!(t.usage.output_tokens, None);
}

#[tokio::test]
async fn anthropic_error_event_is_retried() {
    let url = serve(vec![
        fixture("anthropic_error.sse"),
        fixture("anthropic_text.sse"),
    ])
    .await;
    let (t, _) = turn(anthropic(&url)).await;
    assert_eq!(t.content, vec![ContentBlock::text("Hello!")]);
    assert_eq!(t.retried_errors.len(), 1);
    assert!(
        t.retried_errors[0].contains("overloaded_error"),
        "{:?}",
        t.retried_errors
    );
}

#[tokio::test]
async fn openai_chunk_objects_of_the_api_reference() {
    let body: String = fixture("openai_chunks.jsonl")
        .split("\n\n")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| format!("data: {c}\n\n"))
        .collect();
    let url = serve(vec![body]).await;
    let (t, events) = turn(openai(&url)).await;
    assert_eq!(t.content, vec![ContentBlock::text("Hello")]);
    assert_eq!(t.stop_reason, StopReason::EndTurn);
    assert_eq!(t.model, "gpt-4o-mini");
    assert_eq!(events.text(), "Hello");
}

#[tokio::test]
async fn openai_streamed_function_call_of_the_guide() {
    let body: String = fixture("openai_tool_calls.txt")
        .lines()
        .map(|delta| {
            if delta == "null" {
                r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_string() + "\n\n"
            } else {
                format!(
                    "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":{delta}}},\"finish_reason\":null}}]}}\n\n"
                )
            }
        })
        .chain(std::iter::once("data: [DONE]\n\n".to_string()))
        .collect();
    let url = serve(vec![body]).await;
    let (t, _) = turn(openai(&url)).await;
    assert_eq!(t.stop_reason, StopReason::ToolUse);
    assert_eq!(
        t.content,
        vec![ContentBlock::ToolUse {
            id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
            name: "get_weather".into(),
            input: json!({"location": "Paris, France"}),
        }]
    );
}
