//! The `openai` provider: Chat Completions with `stream: true` and tools, for vLLM, llama.cpp
//! server, Ollama and gateways (`FLOWERBOX_PROVIDER=openai`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`,
//! `OPENAI_MODEL`). It converts our conversation types at its edge (`wire`); retries and
//! waiting are the shared `model::client`'s.

mod assemble;
pub(crate) mod wire;

use super::client::{self, Driver, Endpoint, WireProtocol};
use super::retry::{ApiError, RetryPolicy};
use super::transport::{HttpRequest, HttpTransport};
use super::{EventSink, ModelError, Request, Turn};
use std::fmt;
use std::sync::Arc;

/// The API root when `OPENAI_BASE_URL` is unset (with `/v1`, as OpenAI-compatible servers
/// document their base URLs).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Everything the openai provider needs, resolved from configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// API root including `/v1` (`http://localhost:11434/v1`); requests go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as `authorization: Bearer KEY` when present (local servers need none).
    pub api_key: Option<String>,
    /// Model id used when a request leaves `model` empty.
    pub model: String,
    /// Ask for event streams (`true`, the default) or complete JSON answers
    /// (`FLOWERBOX_OPENAI_STREAM=0`, for servers that cannot stream tool calls).
    pub stream: bool,
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("stream", &self.stream)
            .finish()
    }
}

/// The openai [`Provider`](super::Provider): the one provider over Chat Completions.
pub(crate) type OpenAiProvider = Driver<OpenAiProtocol>;

/// A provider for `config`. Errors with [`ModelError::Setup`] when the base URL is not an
/// absolute http(s) URL.
pub(crate) fn new_provider(
    config: OpenAiConfig,
    policy: RetryPolicy,
    transport: Arc<dyn HttpTransport>,
) -> Result<OpenAiProvider, ModelError> {
    let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
    let endpoint = Endpoint::parse(&url)?;
    let proto = OpenAiProtocol { config, endpoint };
    Ok(Driver::new(proto, policy, transport))
}

/// Chat Completions' wire format.
pub(crate) struct OpenAiProtocol {
    config: OpenAiConfig,
    endpoint: Endpoint,
}

impl WireProtocol for OpenAiProtocol {
    const NAME: &'static str = "openai";
    type Assembler = assemble::OpenAiAssembler;

    /// llama.cpp's `/props`, else the `/models` listing.
    async fn server_context_window<'a>(&'a self, t: &'a dyn HttpTransport) -> Option<u64> {
        let cfg = &self.config;
        let mut headers = Vec::new();
        if let Some(key) = &cfg.api_key {
            headers.push(("authorization".to_string(), format!("Bearer {key}")));
        }
        let base = cfg.base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        let wait = std::time::Duration::from_secs(5);
        // llama.cpp's server: the context it was started with.
        if let Ok(props) = t.get_json(&format!("{root}/props"), &headers, wait).await {
            if let Some(n) = wire::served_context(&props) {
                return Some(n);
            }
        }
        let models = t
            .get_json(&format!("{base}/models"), &headers, wait)
            .await
            .ok()?;
        wire::model_context(&models, &cfg.model)
    }

    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn default_model(&self) -> &str {
        &self.config.model
    }

    fn build(&self, req: &Request) -> HttpRequest {
        let mut headers = client::stream_headers(req);
        if !self.config.stream {
            for (k, v) in headers.iter_mut() {
                if k == "accept" {
                    *v = "application/json".into();
                }
            }
        }
        if let Some(key) = &self.config.api_key {
            headers.push(("authorization".into(), format!("Bearer {key}")));
        }
        HttpRequest {
            url: self.endpoint.url.clone(),
            headers,
            body: wire::request_body(req, self.model(req), self.config.stream),
        }
    }

    fn streaming(&self) -> bool {
        self.config.stream
    }

    fn complete(
        &self,
        req: &Request,
        body: &serde_json::Value,
        sink: EventSink<'_>,
    ) -> Result<Turn, super::retry::AttemptError> {
        assemble::complete_chat(body, self.model(req), sink)
    }

    fn parse_error(&self, _status: u16, body: &str) -> ApiError {
        wire::parse_error(body)
    }

    fn assembler(&self, req: &Request) -> Self::Assembler {
        assemble::OpenAiAssembler::new(self.model(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::{request, sse_data, Canned, End, Events, FakeTransport};
    use crate::model::{ContentBlock, ModelEvent, StopReason};
    use serde_json::json;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    fn provider(fake: Arc<FakeTransport>) -> OpenAiProvider {
        let cfg = OpenAiConfig {
            base_url: "http://localhost:11434/v1".into(),
            api_key: Some("k".into()),
            model: "qwen".into(),
            stream: true,
        };
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(1),
            jitter: 0.0,
            ..Default::default()
        };
        new_provider(cfg, policy, fake).unwrap()
    }

    fn chunk(delta: serde_json::Value, finish: Option<&str>) -> serde_json::Value {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "qwen-served",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[tokio::test]
    async fn tool_call_deltas_join_by_index_and_usage_comes_last() {
        let body = sse_data(
            &[
                chunk(json!({"role": "assistant", "content": "看"}), None),
                chunk(json!({"content": "一下"}), None),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                    "function": {"name": "Bash", "arguments": ""}}]}),
                    None,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                    "function": {"name": "Read", "arguments": "{\"pa"}}]}),
                    None,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\":"}}]}),
                    None,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": " \"ls\"}"}}]}),
                    None,
                ),
                chunk(
                    json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\": \"中\"}"}}]}),
                    None,
                ),
                chunk(json!({}), Some("tool_calls")),
                json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 20,
                    "prompt_tokens_details": {"cached_tokens": 60}}}),
            ],
            true,
        );
        let fake = Arc::new(FakeTransport::new(vec![Canned::sse(&body, 5, End::Clean)]));
        let p = provider(fake.clone());
        let events = Events::default();
        let sink = |e| events.push(e);
        let turn = p
            .stream_turn(&request("hi"), &sink, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(turn.stop_reason, StopReason::ToolUse);
        assert_eq!(turn.model, "qwen-served");
        assert_eq!(turn.content[0], ContentBlock::text("看一下"));
        assert_eq!(
            turn.content[1],
            ContentBlock::ToolUse {
                id: "call_a".into(),
                name: "Bash".into(),
                input: json!({"command": "ls"})
            }
        );
        assert_eq!(
            turn.content[2],
            ContentBlock::ToolUse {
                id: "call_b".into(),
                name: "Read".into(),
                input: json!({"path": "中"})
            }
        );
        assert_eq!(turn.usage.input_tokens, Some(40));
        assert_eq!(turn.usage.cache_read_input_tokens, Some(60));
        assert_eq!(turn.usage.output_tokens, Some(20));
        assert_eq!(
            events
                .all()
                .iter()
                .filter(|e| matches!(e, ModelEvent::ToolCall(_)))
                .count(),
            2
        );
        let req = &fake.requests.lock().unwrap()[0];
        assert_eq!(req.url, "http://localhost:11434/v1/chat/completions");
        assert_eq!(req.header("authorization"), Some("Bearer k"));
        assert_eq!(req.header("x-flowerbox-agent"), Some("worker-1"));
        assert_eq!(req.body["model"], "qwen");
    }

    #[tokio::test]
    async fn broken_stream_is_retried_and_length_truncates_tool_calls() {
        let partial = sse_data(&[chunk(json!({"content": "par"}), None)], false);
        let full = sse_data(
            &[
                chunk(json!({"content": "ok"}), None),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "x", "function": {"name": "Write",
                    "arguments": "{\"content\": \"abc"}}]}),
                    None,
                ),
                chunk(json!({}), Some("length")),
            ],
            true,
        );
        let fake = Arc::new(FakeTransport::new(vec![
            Canned::sse(&partial, 64, End::Reset),
            Canned::sse(&full, 64, End::Clean),
        ]));
        let turn = provider(fake)
            .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(turn.retried_errors.len(), 1);
        assert!(turn.truncated_tool_use);
        assert_eq!(turn.stop_reason, StopReason::MaxTokens);
        assert_eq!(turn.content, vec![ContentBlock::text("ok")]);
    }

    #[tokio::test]
    async fn an_empty_stream_names_the_setting_that_avoids_it() {
        // llama-cpp-python's answer to a streamed request with tools: HTTP 200, empty body.
        let fake = Arc::new(FakeTransport::new(vec![Canned::sse("", 1, End::Clean)]));
        let err = provider(fake.clone())
            .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err, crate::model::ModelError::BadResponse { .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("FLOWERBOX_OPENAI_STREAM=0"),
            "{err}"
        );
        assert_eq!(
            fake.request_count(),
            1,
            "not retried: it answers the same every time"
        );
    }

    #[tokio::test]
    async fn a_gateways_own_cost_is_kept() {
        let body = sse_data(
            &[
                chunk(json!({"content": "ok"}), Some("stop")),
                json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 10,
                    "completion_tokens": 2, "cost": 0.00042}}),
            ],
            true,
        );
        let fake = Arc::new(FakeTransport::new(vec![Canned::sse(&body, 64, End::Clean)]));
        let turn = provider(fake)
            .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(turn.reported_cost_usd, Some(0.00042));
    }

    #[tokio::test]
    async fn eof_without_done_or_finish_is_incomplete() {
        let partial = sse_data(&[chunk(json!({"content": "par"}), None)], false);
        let done_less = sse_data(&[chunk(json!({"content": "fine"}), Some("stop"))], false);
        let fake = Arc::new(FakeTransport::new(vec![
            Canned::sse(&partial, 64, End::Clean),
            Canned::sse(&done_less, 64, End::Clean),
        ]));
        let turn = provider(fake)
            .stream_turn(&request("hi"), &|_| {}, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(turn.content, vec![ContentBlock::text("fine")]);
        assert!(turn.retried_errors[0].contains("[DONE]"));
        assert_eq!(turn.usage.input_tokens, None, "unknown usage stays unknown");
    }
}
