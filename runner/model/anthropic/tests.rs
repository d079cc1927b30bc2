//! Unit tests of the anthropic provider through the transport seam: SSE assembly, retries and
//! classification without a server.

use super::*;
use crate::model::testing::{request, sse, Canned, End, Events, FakeTransport};
use crate::model::{ContentBlock, ModelEvent, StopReason, ToolCall};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn msg_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-test", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 7}}})
}
fn text_start(i: u64) -> Value {
    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
}
fn text_delta(i: u64, t: &str) -> Value {
    json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}})
}
fn tool_start(i: u64, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}
fn json_delta(i: u64, frag: &str) -> Value {
    json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": frag}})
}
fn stop(i: u64) -> Value {
    json!({"type": "content_block_stop", "index": i})
}
fn msg_delta(reason: &str, out: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}, "usage": {"output_tokens": out}})
}
fn msg_stop() -> Value {
    json!({"type": "message_stop"})
}
fn ping() -> Value {
    json!({"type": "ping"})
}

fn simple_text_turn(text: &str) -> String {
    sse(&[
        msg_start(),
        ping(),
        text_start(0),
        text_delta(0, text),
        stop(0),
        msg_delta("end_turn", 3),
        msg_stop(),
    ])
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        jitter: 0.0,
        idle_timeout: Duration::from_millis(300),
        probe_interval: Duration::from_millis(1),
        max_offline_wait: Duration::from_secs(5),
        ..Default::default()
    }
}

fn provider(
    fake: Arc<FakeTransport>,
    policy: RetryPolicy,
    auth: AnthropicAuth,
) -> AnthropicProvider {
    let cfg = AnthropicConfig {
        base_url: "http://gateway.test:8080/".into(),
        auth,
        model: "claude-default".into(),
    };
    new_provider(cfg, policy, fake).unwrap()
}

async fn run(
    responses: Vec<Canned>,
    policy: RetryPolicy,
) -> (
    Result<Turn, ModelError>,
    Vec<ModelEvent>,
    Arc<FakeTransport>,
) {
    let fake = Arc::new(FakeTransport::new(responses));
    let p = provider(
        fake.clone(),
        policy,
        AnthropicAuth::ApiKey("sk-test".into()),
    );
    let events = Events::default();
    let sink = |e| events.push(e);
    let r = p
        .stream_turn(&request("hi"), &sink, &CancellationToken::new())
        .await;
    (r, events.all(), fake)
}

#[tokio::test]
async fn text_and_fragmented_tool_json_with_utf8_split_in_every_chunk() {
    let body = sse(&[
        msg_start(),
        text_start(0),
        text_delta(0, "写入 "),
        text_delta(0, "€uro"),
        stop(0),
        tool_start(1, "toolu_1", "Write"),
        json_delta(1, "{\"path\": \"/tmp/中"),
        json_delta(1, "文.txt\", \"n\""),
        json_delta(1, ": [1, 2]}"),
        stop(1),
        msg_delta("tool_use", 42),
        msg_stop(),
    ]);
    // One byte per network chunk: every multi-byte character arrives split.
    let (r, events, _) = run(vec![Canned::sse(&body, 1, End::Clean)], fast()).await;
    let turn = r.unwrap();
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    assert_eq!(turn.model, "claude-test");
    assert_eq!(
        turn.content,
        vec![
            ContentBlock::text("写入 €uro"),
            ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "Write".into(),
                input: json!({"path": "/tmp/中文.txt", "n": [1, 2]}),
            }
        ]
    );
    assert_eq!(turn.usage.input_tokens, Some(10));
    assert_eq!(turn.usage.output_tokens, Some(42));
    assert_eq!(turn.usage.cache_creation_input_tokens, Some(5));
    assert_eq!(turn.usage.cache_read_input_tokens, Some(7));
    assert!(turn.retried_errors.is_empty());
    let texts: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, "写入 €uro");
    assert!(events
        .iter()
        .any(|e| matches!(e, ModelEvent::ToolCall(ToolCall { name, .. }) if name == "Write")));
    assert!(matches!(
        events.last(),
        Some(ModelEvent::Done {
            stop_reason: StopReason::ToolUse,
            ..
        })
    ));
}

#[tokio::test]
async fn interleaved_tool_blocks_stay_separate_and_empty_input_is_object() {
    let body = sse(&[
        msg_start(),
        tool_start(0, "a", "Read"),
        tool_start(1, "b", "Bash"),
        tool_start(2, "c", "Glob"),
        json_delta(1, "{\"comm"),
        json_delta(0, "{\"path\":"),
        json_delta(1, "and\": \"ls\"}"),
        json_delta(0, " \"x\"}"),
        stop(1),
        stop(0),
        stop(2),
        msg_delta("tool_use", 9),
        msg_stop(),
    ]);
    let (r, _, _) = run(vec![Canned::sse(&body, 7, End::Clean)], fast()).await;
    let calls: Vec<ToolCall> = r.unwrap().to_message().tool_uses().collect();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        (calls[0].id.as_str(), &calls[0].input),
        ("a", &json!({"path": "x"}))
    );
    assert_eq!(
        (calls[1].id.as_str(), &calls[1].input),
        ("b", &json!({"command": "ls"}))
    );
    assert_eq!((calls[2].id.as_str(), &calls[2].input), ("c", &json!({})));
}

#[tokio::test]
async fn missing_message_stop_is_retried_from_scratch() {
    let partial = sse(&[msg_start(), text_start(0), text_delta(0, "half"), stop(0)]);
    let (r, events, fake) = run(
        vec![
            Canned::sse(&partial, 64, End::Clean),
            Canned::sse(&simple_text_turn("whole"), 64, End::Clean),
        ],
        fast(),
    )
    .await;
    let turn = r.unwrap();
    assert_eq!(turn.content, vec![ContentBlock::text("whole")]);
    assert_eq!(turn.retried_errors.len(), 1);
    assert!(
        turn.retried_errors[0].contains("message_stop"),
        "{:?}",
        turn.retried_errors
    );
    assert_eq!(fake.request_count(), 2);
    assert!(events
        .iter()
        .any(|e| matches!(e, ModelEvent::Retrying { attempt: 1, .. })));
}

#[tokio::test]
async fn reset_mid_stream_and_error_event_are_retried() {
    let partial = sse(&[msg_start(), text_start(0), text_delta(0, "half")]);
    let overloaded = sse(&[
        msg_start(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]);
    let (r, _, fake) = run(
        vec![
            Canned::sse(&partial, 5, End::Reset),
            Canned::sse(&overloaded, 64, End::Clean),
            Canned::sse(&simple_text_turn("ok"), 3, End::Clean),
        ],
        fast(),
    )
    .await;
    let turn = r.unwrap();
    assert_eq!(turn.content, vec![ContentBlock::text("ok")]);
    assert_eq!(turn.retried_errors.len(), 2, "{:?}", turn.retried_errors);
    assert!(turn.retried_errors[0].contains("reset"));
    assert!(turn.retried_errors[1].contains("overloaded_error"));
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn max_tokens_inside_tool_call_drops_the_call() {
    let body = sse(&[
        msg_start(),
        text_start(0),
        text_delta(0, "writing"),
        stop(0),
        tool_start(1, "t", "Write"),
        json_delta(1, "{\"path\": \"a\", \"content\": \"lo"),
        stop(1),
        msg_delta("max_tokens", 100),
        msg_stop(),
    ]);
    let (r, events, _) = run(vec![Canned::sse(&body, 11, End::Clean)], fast()).await;
    let turn = r.unwrap();
    assert!(turn.truncated_tool_use);
    assert_eq!(turn.stop_reason, StopReason::MaxTokens);
    assert_eq!(turn.content, vec![ContentBlock::text("writing")]);
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))));
}

#[tokio::test]
async fn unclosed_tool_block_at_max_tokens_is_dropped_too() {
    let body = sse(&[
        msg_start(),
        tool_start(0, "t", "Bash"),
        json_delta(0, "{\"command\": \"ec"),
        msg_delta("max_tokens", 100),
        msg_stop(),
    ]);
    let (r, _, _) = run(vec![Canned::sse(&body, 64, End::Clean)], fast()).await;
    let turn = r.unwrap();
    assert!(turn.truncated_tool_use);
    assert!(turn.content.is_empty());
}

#[tokio::test]
async fn thinking_blocks_keep_their_signature() {
    let body = sse(&[
        msg_start(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
        stop(0),
        text_start(1),
        text_delta(1, "done"),
        stop(1),
        msg_delta("end_turn", 5),
        msg_stop(),
    ]);
    let (r, events, _) = run(vec![Canned::sse(&body, 13, End::Clean)], fast()).await;
    let turn = r.unwrap();
    assert_eq!(
        turn.content[0],
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: "sig".into()
        }
    );
    assert!(events.contains(&ModelEvent::ThinkingDelta("hmm".into())));
}

#[tokio::test]
async fn auth_and_invalid_requests_are_not_retried() {
    let body =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let (r, _, fake) = run(vec![Canned::status(401, &[], body)], fast()).await;
    let err = r.unwrap_err();
    assert!(err.is_auth());
    assert!(err.to_string().contains("invalid x-api-key"), "{err}");
    assert_eq!(fake.request_count(), 1);

    let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}"#;
    let (r, _, fake) = run(vec![Canned::status(400, &[], body)], fast()).await;
    assert!(r.unwrap_err().is_prompt_too_long());
    assert_eq!(fake.request_count(), 1);

    let body =
        r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#;
    let (r, _, _) = run(vec![Canned::status(404, &[], body)], fast()).await;
    assert!(matches!(
        r.unwrap_err(),
        ModelError::Config { status: 404, .. }
    ));
}

#[tokio::test]
async fn rate_limit_beyond_cap_fails_at_once() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let (r, _, fake) = run(
        vec![Canned::status(429, &[("retry-after", "3600")], body)],
        fast(),
    )
    .await;
    match r.unwrap_err() {
        e @ ModelError::RateLimitedUntil { .. } => {
            assert!(e.to_string().starts_with("rate-limited until 20"), "{e}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn retry_after_within_cap_is_the_delay() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let (r, events, _) = run(
        vec![
            Canned::status(429, &[("retry-after-ms", "20")], body),
            Canned::sse(&simple_text_turn("ok"), 64, End::Clean),
        ],
        fast(),
    )
    .await;
    assert!(r.is_ok());
    assert!(events.contains(&ModelEvent::Retrying {
        attempt: 1,
        of: fast().max_attempts,
        delay_ms: 20,
        reason: "HTTP 429 rate_limit_error: slow down".into()
    }));
}

#[tokio::test]
async fn attempts_are_bounded() {
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let policy = RetryPolicy {
        max_attempts: 3,
        ..fast()
    };
    let canned = vec![Canned::status(529, &[], body); 3];
    let (r, _, fake) = run(canned, policy).await;
    match r.unwrap_err() {
        ModelError::Exhausted {
            attempts,
            errors,
            last,
            ..
        } => {
            assert_eq!(attempts, 3);
            assert_eq!(errors.len(), 3);
            assert!(last.contains("529"));
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn idle_stream_is_retried() {
    let partial = sse(&[msg_start(), text_start(0)]);
    let (r, _, _) = run(
        vec![
            Canned::sse(&partial, 64, End::Hang),
            Canned::sse(&simple_text_turn("ok"), 64, End::Clean),
        ],
        fast(),
    )
    .await;
    let turn = r.unwrap();
    assert!(
        turn.retried_errors[0].contains("idle"),
        "{:?}",
        turn.retried_errors
    );
}

#[tokio::test]
async fn network_down_waits_without_spending_attempts() {
    let fake = Arc::new(
        FakeTransport::new(vec![
            Canned::Connect,
            Canned::sse(&simple_text_turn("back"), 64, End::Clean),
        ])
        .with_probes(vec![Err("refused".into()), Err("refused".into())]),
    );
    let policy = RetryPolicy {
        max_attempts: 1,
        ..fast()
    };
    let p = provider(fake.clone(), policy, AnthropicAuth::None);
    let events = Events::default();
    let sink = |e| events.push(e);
    let turn = p
        .stream_turn(&request("hi"), &sink, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(turn.content, vec![ContentBlock::text("back")]);
    assert_eq!(turn.retried_errors.len(), 1);
    assert_eq!(*fake.probes.lock().unwrap(), 3);
    let waiting: Vec<String> = events
        .all()
        .into_iter()
        .filter_map(|e| match e {
            ModelEvent::Waiting { status } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(
        waiting,
        vec![
            "gateway.test:8080 不可达,等待恢复(最多 1 分钟)",
            "gateway.test:8080 恢复,继续"
        ]
    );
}

#[tokio::test]
async fn network_down_gives_up_after_the_offline_limit() {
    let probes = vec![Err("refused".to_string()); 1000];
    let fake = Arc::new(FakeTransport::new(vec![Canned::Connect]).with_probes(probes));
    let policy = RetryPolicy {
        probe_interval: Duration::from_millis(10),
        max_offline_wait: Duration::from_millis(50),
        ..fast()
    };
    let p = provider(fake, policy, AnthropicAuth::None);
    let err = p
        .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Unreachable { .. }), "{err:?}");
    // The last probe's failure is the cause, typed, down to the OS error; the message names
    // it once.
    let probe = std::error::Error::source(&err).expect("the probe's failure");
    let io = probe.source().expect("its OS error");
    assert_eq!(io.to_string(), "refused");
    assert_eq!(
        crate::model::error_chain(&err).matches("refused").count(),
        1,
        "{err}"
    );
}

#[tokio::test]
async fn cancel_interrupts_a_hanging_stream() {
    let fake = Arc::new(FakeTransport::new(vec![Canned::sse("", 1, End::Hang)]));
    let policy = RetryPolicy {
        idle_timeout: Duration::from_secs(3600),
        ..fast()
    };
    let p = provider(fake, policy, AnthropicAuth::None);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        c2.cancel();
    });
    let err = p
        .stream_turn(&request("hi"), &|_| {}, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Interrupted));
}

#[tokio::test]
async fn request_headers_and_model_fallback() {
    for (auth, header, value) in [
        (AnthropicAuth::ApiKey("k1".into()), "x-api-key", "k1"),
        (
            AnthropicAuth::Bearer("t1".into()),
            "authorization",
            "Bearer t1",
        ),
    ] {
        let fake = Arc::new(FakeTransport::new(vec![Canned::sse(
            &simple_text_turn("x"),
            64,
            End::Clean,
        )]));
        let p = provider(fake.clone(), fast(), auth);
        p.stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
            .await
            .unwrap();
        let reqs = fake.requests.lock().unwrap();
        let r = &reqs[0];
        assert_eq!(r.url, "http://gateway.test:8080/v1/messages");
        assert_eq!(r.header(header), Some(value));
        assert_eq!(r.header("anthropic-version"), Some(ANTHROPIC_VERSION));
        assert_eq!(r.header("x-flowerbox-role"), Some("worker"));
        assert_eq!(r.header("x-flowerbox-agent"), Some("worker-1"));
        assert_eq!(r.body["model"], "claude-default");
        assert_eq!(r.body["stream"], true);
    }
}

fn json_answer(body: &str) -> Canned {
    Canned::Resp {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        chunks: vec![bytes::Bytes::copy_from_slice(body.as_bytes())],
        end: End::Clean,
    }
}

#[tokio::test]
async fn a_complete_json_message_is_accepted_as_one_turn() {
    // What LiteLLM's mock mode answers to a streamed request: a whole Messages object.
    let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-mock",
        "content":[{"type":"text","text":"好的"},
                   {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],
        "stop_reason":"tool_use","usage":{"input_tokens":12,"output_tokens":3}}"#;
    let (r, events, fake) = run(vec![json_answer(body)], fast()).await;
    let turn = r.unwrap();
    assert_eq!(fake.request_count(), 1);
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    assert_eq!(turn.model, "claude-mock");
    assert_eq!(turn.usage.input_tokens, Some(12));
    assert_eq!(
        turn.content,
        vec![
            ContentBlock::text("好的"),
            ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "Bash".into(),
                input: json!({"command": "ls"})
            }
        ]
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, ModelEvent::TextDelta(t) if t == "好的")));
}

#[tokio::test]
async fn json_that_is_not_a_message_names_the_real_cause() {
    let (r, _, fake) = run(vec![json_answer(r#"{"hello":"world"}"#)], fast()).await;
    let err = r.unwrap_err();
    assert!(
        matches!(err, ModelError::BadResponse { status: 200, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("content"), "{err}");
    assert!(!err.to_string().contains("网关地址或模型名不对"), "{err}");
    assert_eq!(fake.request_count(), 1);
    let (r, _, _) = run(vec![json_answer("not json at all")], fast()).await;
    assert!(r.unwrap_err().to_string().contains("not JSON"));
    // An error object in a 200 JSON body is classified like an error event.
    let err_body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
    let (r, _, _) = run(vec![json_answer(err_body)], fast()).await;
    assert!(matches!(r.unwrap_err(), ModelError::InvalidRequest { .. }));
}

#[tokio::test]
async fn a_tool_input_that_is_not_an_object_is_the_models_mistake_not_a_network_failure() {
    // The input JSON parses, but to a string: one request, a turn, and the call marked
    // malformed so the runtime answers it with an error result.
    let body = sse(&[
        msg_start(),
        tool_start(0, "toolu_bad", "Bash"),
        json_delta(0, "\"not-an-"),
        json_delta(0, "object\""),
        stop(0),
        tool_start(1, "toolu_broken", "Read"),
        json_delta(1, "{\"file_path\": "),
        stop(1),
        msg_delta("tool_use", 9),
        msg_stop(),
    ]);
    let (r, events, fake) = run(vec![Canned::sse(&body, 16, End::Clean)], fast()).await;
    let turn = r.unwrap();
    assert_eq!(fake.request_count(), 1, "never retried");
    assert!(turn.retried_errors.is_empty());
    let ids: Vec<&str> = turn.malformed_calls.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["toolu_bad", "toolu_broken"]);
    assert_eq!(turn.malformed_calls[0].raw, "\"not-an-object\"");
    // The blocks stay, with an input the API accepts back.
    assert_eq!(
        turn.content[0],
        ContentBlock::ToolUse {
            id: "toolu_bad".into(),
            name: "Bash".into(),
            input: json!({})
        }
    );
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))));
}

#[tokio::test]
async fn a_stream_of_pings_alone_times_out() {
    // Pings every 20 ms forever: the idle timer (300 ms) counts only content events.
    let fake = Arc::new(FakeTransport::new(vec![
        Canned::pings(&sse(&[msg_start()]), Duration::from_millis(20)),
        Canned::sse(&simple_text_turn("after"), 64, End::Clean),
    ]));
    let p = provider(fake.clone(), fast(), AnthropicAuth::None);
    let turn = p
        .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(turn.content, vec![ContentBlock::text("after")]);
    assert_eq!(fake.request_count(), 2);
    assert!(
        turn.retried_errors[0].contains("keep-alive"),
        "{:?}",
        turn.retried_errors
    );
}

#[tokio::test]
async fn every_attempt_has_a_deadline_however_steadily_it_streams() {
    // Text deltas every 20 ms forever: always progress, never done.
    let endless = Canned::Drip {
        head: sse(&[msg_start(), text_start(0)]),
        every: Duration::from_millis(20),
        frame: sse(&[text_delta(0, "more ")]),
    };
    let fake = Arc::new(FakeTransport::new(vec![
        endless,
        Canned::sse(&simple_text_turn("done"), 64, End::Clean),
    ]));
    let policy = RetryPolicy {
        attempt_deadline: Duration::from_millis(400),
        ..fast()
    };
    let p = provider(fake.clone(), policy, AnthropicAuth::None);
    let turn = p
        .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(turn.content, vec![ContentBlock::text("done")]);
    assert!(
        turn.retried_errors[0].contains("deadline"),
        "{:?}",
        turn.retried_errors
    );
}

/// A gateway's own price of a call (issue 15): `usage.cost` in a streamed `message_delta`,
/// LiteLLM's `x-litellm-response-cost` header on a stream and on a complete answer; the body's
/// figure wins over the header's; a header that is not a price is ignored.
#[tokio::test]
async fn a_gateways_own_cost_is_kept_from_the_body_or_its_header() {
    let with_usage_cost = sse(&[
        msg_start(),
        text_start(0),
        text_delta(0, "ok"),
        stop(0),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 2, "cost": 0.0031}}),
        msg_stop(),
    ]);
    let streamed = |body: &str, header: Option<&str>| Canned::Resp {
        status: 200,
        headers: header
            .map(|h| vec![("x-litellm-response-cost".to_string(), h.to_string())])
            .unwrap_or_default(),
        chunks: vec![bytes::Bytes::copy_from_slice(body.as_bytes())],
        end: End::Clean,
    };
    let complete = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
        "content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn",
        "usage":{"input_tokens":3,"output_tokens":1}}"#;
    let mut complete_with_header = json_answer(complete);
    if let Canned::Resp { headers, .. } = &mut complete_with_header {
        headers.push(("x-litellm-response-cost".into(), " 0.0007 ".into()));
    }
    let cases = [
        (streamed(&with_usage_cost, None), Some(0.0031)),
        (streamed(&with_usage_cost, Some("0.9")), Some(0.0031)),
        (
            streamed(&simple_text_turn("ok"), Some("0.0005")),
            Some(0.0005),
        ),
        (streamed(&simple_text_turn("ok"), Some("free")), None),
        (streamed(&simple_text_turn("ok"), Some("-1")), None),
        (complete_with_header, Some(0.0007)),
    ];
    for (i, (canned, want)) in cases.into_iter().enumerate() {
        let (r, _, _) = run(vec![canned], fast()).await;
        assert_eq!(r.unwrap().reported_cost_usd, want, "case {i}");
    }
}
