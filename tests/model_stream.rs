//! The anthropic client over real HTTP against the `scripted-model` binary: every fault of the
//! issue, tool JSON assembly, UTF-8 split across network chunks, and the network-down wait.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod model_support;

use flowerbox::model::{
    ContentBlock, Message, ModelError, ModelEvent, RetryPolicy, Speaker, StopReason, ToolCall,
};
use flowerbox::role::Role;
use futures::StreamExt;
use model_support::{anthropic_at, fast, request, Events, ScriptedModel};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A one-entry scenario for workers whose turn 0 is `turn`.
fn worker(turn: Value) -> Value {
    json!({"agents": [{"role": "worker", "turns": [turn]}]})
}

fn hello_turn(fault: Value) -> Value {
    json!({"content": [{"type": "text", "text": "hello from the script"}], "fault": fault,
           "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 3}})
}

async fn call(
    server: &ScriptedModel,
    policy: RetryPolicy,
) -> (Result<flowerbox::model::Turn, ModelError>, Events) {
    let p = server.provider(policy);
    let events = Events::default();
    let ev = events.clone();
    let sink = move |e| ev.push(e);
    let r = p
        .stream_turn(
            &request(Role::Worker, "worker-1", "go"),
            &sink,
            &CancellationToken::new(),
        )
        .await;
    (r, events)
}

#[tokio::test]
async fn overloaded_529_then_success() {
    let server = ScriptedModel::start(&worker(hello_turn(json!({"status": 529, "times": 1}))));
    let (r, events) = call(&server, fast()).await;
    let turn = r.unwrap();
    assert_eq!(
        turn.content,
        vec![ContentBlock::text("hello from the script")]
    );
    assert_eq!(turn.stop_reason, StopReason::EndTurn);
    assert_eq!(turn.usage.input_tokens, Some(12));
    assert_eq!(turn.usage.cache_read_input_tokens, Some(3));
    assert_eq!(turn.retried_errors.len(), 1);
    assert!(
        turn.retried_errors[0].contains("HTTP 529 overloaded_error"),
        "{:?}",
        turn.retried_errors
    );
    assert!(events
        .all()
        .iter()
        .any(|e| matches!(e, ModelEvent::Retrying { attempt: 1, .. })));
    assert_eq!(server.recorded().len(), 2);
}

#[tokio::test]
async fn rate_limited_429_honours_retry_after() {
    let fault = json!({"status": 429, "headers": {"retry-after": "1"}, "times": 1});
    let server = ScriptedModel::start(&worker(hello_turn(fault)));
    let started = Instant::now();
    let (r, events) = call(&server, fast()).await;
    let elapsed = started.elapsed();
    assert!(r.is_ok(), "{r:?}");
    // The policy's own backoff is 10 ms: only retry-after explains a 1 s wait.
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    assert!(events
        .all()
        .iter()
        .any(|e| matches!(e, ModelEvent::Retrying { delay_ms: 1000, .. })));
}

#[tokio::test]
async fn rate_limited_beyond_the_cap_fails_at_once() {
    let fault = json!({"status": 429, "headers": {"retry-after": "7200"}, "times": 1});
    let server = ScriptedModel::start(&worker(hello_turn(fault)));
    let started = Instant::now();
    let (r, _) = call(&server, fast()).await;
    let err = r.unwrap_err();
    assert!(
        matches!(err, ModelError::RateLimitedUntil { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.starts_with("rate-limited until "), "{msg}");
    let until = msg.trim_start_matches("rate-limited until ");
    let until = chrono::DateTime::parse_from_rfc3339(until).unwrap();
    let ahead = until.to_utc() - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(110) && ahead < chrono::Duration::minutes(121),
        "{ahead}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(server.recorded().len(), 1, "not retried");
}

#[tokio::test]
async fn error_event_mid_stream_is_retried_from_the_start() {
    let fault = json!({"error_event": "overloaded_error", "after_events": 4, "times": 1});
    let server = ScriptedModel::start(&worker(hello_turn(fault)));
    let (r, events) = call(&server, fast()).await;
    let turn = r.unwrap();
    // Nothing of the broken attempt leaks into the turn.
    assert_eq!(
        turn.content,
        vec![ContentBlock::text("hello from the script")]
    );
    assert_eq!(turn.retried_errors.len(), 1);
    assert!(
        turn.retried_errors[0].contains("overloaded_error"),
        "{:?}",
        turn.retried_errors
    );
    // Deltas of the failed attempt came before its Retrying event.
    let all = events.all();
    let retry_at = all
        .iter()
        .position(|e| matches!(e, ModelEvent::Retrying { .. }))
        .unwrap();
    assert!(all[..retry_at]
        .iter()
        .any(|e| matches!(e, ModelEvent::TextDelta(_))));
    assert_eq!(server.recorded().len(), 2);
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_retried() {
    let turn = json!({"content": [{"type": "text", "text": "before the drop"},
        {"type": "tool_use", "name": "Bash", "input": {"command": "make test"}}],
        "fault": {"drop_after_events": 6, "times": 2}});
    let server = ScriptedModel::start(&worker(turn));
    let (r, events) = call(&server, fast()).await;
    let turn = r.unwrap();
    eprintln!("DROP {:?}", turn.retried_errors);
    assert_eq!(turn.retried_errors.len(), 2, "{:?}", turn.retried_errors);
    assert!(
        turn.retried_errors
            .iter()
            .all(|e| e.starts_with("stream broken")),
        "{:?}",
        turn.retried_errors
    );
    assert_eq!(turn.content.len(), 2);
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    let calls: Vec<ToolCall> = turn.to_message().tool_uses().collect();
    assert_eq!(calls[0].input, json!({"command": "make test"}));
    assert_eq!(calls[0].id, "toolu_s0_t0_b1");
    // The tool call was announced exactly once: broken attempts never reached its stop.
    let all = events.all();
    let announced = all
        .iter()
        .filter(|e| matches!(e, ModelEvent::ToolCall(_)))
        .count();
    assert_eq!(announced, 1);
    let retry_at = all
        .iter()
        .position(|e| matches!(e, ModelEvent::Retrying { .. }))
        .unwrap();
    assert!(
        all[..retry_at]
            .iter()
            .any(|e| matches!(e, ModelEvent::TextDelta(_))),
        "dropped mid-stream"
    );
    assert_eq!(server.recorded().len(), 3);
}

#[tokio::test]
async fn idle_stream_is_abandoned_and_retried() {
    let server = ScriptedModel::start(&worker(hello_turn(json!({"delay_ms": 5000, "times": 1}))));
    let policy = RetryPolicy {
        idle_timeout: Duration::from_millis(500),
        ..fast()
    };
    let started = Instant::now();
    let (r, _) = call(&server, policy).await;
    let turn = r.unwrap();
    eprintln!("IDLE {:?}", turn.retried_errors);
    assert!(
        turn.retried_errors[0].contains("idle") || turn.retried_errors[0].contains("no response"),
        "{:?}",
        turn.retried_errors
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "did not wait for the slow stream"
    );
}

#[tokio::test]
async fn max_tokens_inside_a_tool_call_drops_the_call() {
    let turn = json!({"content": [{"type": "text", "text": "writing the file"},
        {"type": "tool_use", "name": "Write", "input": {"path": "/w/a.txt", "content": "long long content"}}],
        "fault": {"truncate_tool_json": true, "times": 1}});
    let server = ScriptedModel::start(&worker(turn));
    let (r, events) = call(&server, fast()).await;
    let turn = r.unwrap();
    assert!(turn.truncated_tool_use);
    assert_eq!(turn.stop_reason, StopReason::MaxTokens);
    assert_eq!(turn.content, vec![ContentBlock::text("writing the file")]);
    assert!(
        turn.retried_errors.is_empty(),
        "a cut-off turn is complete, not retried"
    );
    assert!(!events
        .all()
        .iter()
        .any(|e| matches!(e, ModelEvent::ToolCall(_))));

    // The runtime's retry of the same turn (same k) gets the whole call once the fault is used.
    let (r, _) = call(&server, fast()).await;
    let turn = r.unwrap();
    assert!(!turn.truncated_tool_use);
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    assert_eq!(turn.to_message().tool_uses().count(), 1);
}

#[tokio::test]
async fn fragmented_and_interleaved_tool_json() {
    let inputs = [
        json!({"path": "/work/src/主要.rs", "old": "fn a() {}", "new": "fn b() { \"€\" }"}),
        json!({"command": "grep -rn 'ß' . | head -n 5", "timeout": 120}),
        json!({}),
    ];
    for interleave in [false, true] {
        let turn = json!({"interleave": interleave, "content": [
            {"type": "text", "text": "three at once"},
            {"type": "tool_use", "name": "Edit", "input": inputs[0]},
            {"type": "tool_use", "name": "Bash", "input": inputs[1]},
            {"type": "tool_use", "name": "TodoRead"}]});
        let server = ScriptedModel::start(&worker(turn));
        let (r, events) = call(&server, fast()).await;
        let turn = r.unwrap();
        let calls: Vec<ToolCall> = turn.to_message().tool_uses().collect();
        let got: Vec<(&str, &Value)> = calls.iter().map(|c| (c.name.as_str(), &c.input)).collect();
        assert_eq!(
            got,
            vec![
                ("Edit", &inputs[0]),
                ("Bash", &inputs[1]),
                ("TodoRead", &inputs[2])
            ]
        );
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["toolu_s0_t0_b1", "toolu_s0_t0_b2", "toolu_s0_t0_b3"]);
        let announced = events
            .all()
            .into_iter()
            .filter(|e| matches!(e, ModelEvent::ToolCall(_)))
            .count();
        assert_eq!(announced, 3, "interleave={interleave}");
    }
}

#[tokio::test]
async fn three_byte_characters_split_across_network_chunks() {
    let text = "价格 €42, 中文 ✓";
    let server = ScriptedModel::start(&worker(json!({"content": [{"type": "text", "text": text},
        {"type": "tool_use", "name": "Write", "input": {"content": "€中✓"}}]})));

    // The split really reaches the client: some chunk is not valid UTF-8 on its own.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.url))
        .header("x-flowerbox-role", "worker")
        .body(json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "go"}]}).to_string())
        .send()
        .await
        .unwrap();
    let chunks: Vec<bytes::Bytes> = resp.bytes_stream().map(|c| c.unwrap()).collect().await;
    assert!(
        chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
        "no chunk split a character"
    );
    assert!(String::from_utf8(chunks.concat()).is_ok());

    let (r, events) = call(&server, fast()).await;
    let turn = r.unwrap();
    assert_eq!(turn.content[0], ContentBlock::text(text));
    assert_eq!(events.text(), text);
    let call = turn.to_message().tool_uses().next().unwrap();
    assert_eq!(call.input, json!({"content": "€中✓"}));
}

#[tokio::test]
async fn port_closed_then_opened_waits_and_resumes() {
    // Reserve a port, then free it: connecting is refused until the server starts there.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let scenario = worker(hello_turn(Value::Null));
    let provider = anthropic_at(&format!("http://{addr}"), fast());
    let events = Events::default();
    let ev = events.clone();
    let task = tokio::spawn(async move {
        let sink = move |e| ev.push(e);
        provider
            .stream_turn(
                &request(Role::Worker, "worker-1", "go"),
                &sink,
                &CancellationToken::new(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !task.is_finished(),
        "the call must wait while the endpoint is down"
    );
    let server = ScriptedModel::start_on(&scenario, &addr.to_string());
    let turn = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        turn.content,
        vec![ContentBlock::text("hello from the script")]
    );
    eprintln!("DOWN {:?}", turn.retried_errors);
    assert!(!turn.retried_errors.is_empty());
    let waiting: Vec<String> = events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            ModelEvent::Waiting { status } => Some(status),
            _ => None,
        })
        .collect();
    let host = format!("127.0.0.1:{}", addr.port());
    assert_eq!(
        waiting,
        vec![
            format!("{host} 不可达,等待恢复(最多 1 分钟)"),
            format!("{host} 恢复,继续")
        ]
    );
    assert_eq!(server.recorded().len(), 1);
}

#[tokio::test]
async fn mismatch_is_an_immediate_invalid_request_naming_agent_and_k() {
    let server = ScriptedModel::start(&json!({"agents": [{"role": "judge", "turns": []}]}));
    let (r, _) = call(&server, fast()).await;
    let err = r.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ModelError::InvalidRequest { status: 400, .. }),
        "{err:?}"
    );
    assert!(msg.contains("worker-1") && msg.contains("k=0"), "{msg}");
    assert_eq!(server.recorded().len(), 1);
}

#[tokio::test]
async fn auth_fault_is_not_retried() {
    let fault = json!({"status": 401, "message": "invalid x-api-key", "times": 5});
    let server = ScriptedModel::start(&worker(hello_turn(fault)));
    let (r, _) = call(&server, fast()).await;
    let err = r.unwrap_err();
    assert!(err.is_auth(), "{err:?}");
    assert!(err.to_string().contains("invalid x-api-key"));
    assert_eq!(server.recorded().len(), 1);
}

#[tokio::test]
async fn turns_follow_the_assistant_count_and_requests_carry_cache_breakpoints() {
    let scenario = json!({"agents": [
        {"role": "worker", "prompt": "(?s)test agent.*fix it", "turns": [
            {"content": [{"type": "thinking", "thinking": "plan", "signature": "s1"},
                         {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]},
            {"content": [{"type": "text", "text": "fixed"}]}]},
        {"role": "worker", "turns": [{"content": [{"type": "text", "text": "other entry"}]}]}]});
    let server = ScriptedModel::start(&scenario);
    let p = server.provider(fast());
    let mut req = request(Role::Worker, "worker-1", "please fix it");
    req.tools.push(flowerbox::model::ToolDef {
        name: "Bash".into(),
        description: "run a command".into(),
        input_schema: json!({"type": "object"}),
    });
    let t0 = p
        .stream_turn(&req, &|_| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        t0.content[0],
        ContentBlock::Thinking {
            thinking: "plan".into(),
            signature: "s1".into()
        }
    );
    let call = t0.to_message().tool_uses().next().unwrap();
    req.messages.push(t0.to_message());
    req.messages.push(Message {
        role: Speaker::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: call.id,
            content: "a b".into(),
            is_error: false,
        }],
    });
    let t1 = p
        .stream_turn(&req, &|_| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(t1.content, vec![ContentBlock::text("fixed")]);

    let other = p
        .stream_turn(
            &request(Role::Worker, "worker-2", "something else"),
            &|_| {},
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(other.content, vec![ContentBlock::text("other entry")]);

    let rec = server.recorded();
    let body = &rec[1];
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(body["tools"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        body["messages"][2]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(body["messages"][1]["content"][0]["signature"], "s1");
}

#[tokio::test]
async fn parallel_agents_are_served_concurrently() {
    let agents: Vec<Value> = (0..6)
        .map(|i| json!({"agent": format!("worker-{i}"), "turns": [
            {"content": [{"type": "text", "text": format!("reply {i}")}], "fault": {"delay_ms": 50}}]}))
        .collect();
    let server = ScriptedModel::start(&json!({"agents": agents}));
    let p = server.provider(fast());
    let started = Instant::now();
    let calls = (0..6).map(|i| {
        let p = p.clone();
        async move {
            let req = request(Role::Worker, &format!("worker-{i}"), "go");
            p.stream_turn(&req, &|_| {}, &CancellationToken::new())
                .await
                .unwrap()
        }
    });
    let turns = futures::future::join_all(calls).await;
    for (i, t) in turns.iter().enumerate() {
        assert_eq!(t.content, vec![ContentBlock::text(format!("reply {i}"))]);
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn strict_by_default_lax_on_request() {
    // What the real API refuses: an empty assistant message that is not the last one.
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": "again"}]});
    let turn = json!({"content": [{"type": "text", "text": "ok"}]});
    let scenario = json!({"agents": [{"role": "worker", "turns": [turn, turn]}]});
    let post = |url: String| {
        let body = body.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/messages"))
                .header("x-flowerbox-role", "worker")
                .body(body.to_string())
                .send()
                .await
                .unwrap()
        }
    };
    let strict = ScriptedModel::start(&scenario);
    let resp = post(strict.url.clone()).await;
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert_eq!(
        err["error"]["message"],
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    );
    let lax = ScriptedModel::start_args(&scenario, &["--lax"]);
    assert_eq!(post(lax.url.clone()).await.status(), 200);
}
