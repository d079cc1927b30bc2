//! Assembles Anthropic stream events (`message_start`, `content_block_*`, `message_delta`,
//! `message_stop`, `ping`, `error`) into one [`Turn`].
//!
//! Blocks are kept per `index`, so interleaved blocks stay separate. Tool input arrives as
//! `input_json_delta` fragments that are joined as text and parsed once at `content_block_stop`
//! (no fragments → `{}`); the SSE decoder below has already joined UTF-8 characters that the
//! network split. Without `message_stop` nothing is complete.

use crate::model::client::{Fed, TurnAssembler};
use crate::model::retry::{classify_stream_error, AttemptError};
use crate::model::{
    ContentBlock, EventSink, MalformedCall, ModelError, ModelEvent, StopReason, ToolCall, Turn,
    Usage,
};
use eventsource_stream::Event as SseEvent;
use serde_json::Value;
use std::collections::BTreeMap;

/// One content block being streamed.
#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Tool {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    /// Block types we do not model (server tools, redacted thinking); dropped.
    Other,
}

/// Assembler state for one attempt.
#[derive(Debug)]
pub(crate) struct AnthropicAssembler {
    requested_model: String,
    model: Option<String>,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<StopReason>,
    usage: Usage,
    /// A gateway's own price of the call (`usage.cost`), when it sends one.
    cost: Option<f64>,
}

impl AnthropicAssembler {
    /// A fresh assembler; `requested_model` is the fallback for `Turn.model`.
    pub(crate) fn new(requested_model: &str) -> Self {
        AnthropicAssembler {
            requested_model: requested_model.to_string(),
            model: None,
            blocks: BTreeMap::new(),
            stop_reason: None,
            usage: Usage::default(),
            cost: None,
        }
    }

    fn block(&mut self, data: &Value) -> Result<&mut Block, AttemptError> {
        let index = data["index"]
            .as_u64()
            .ok_or_else(|| AttemptError::retry("event without index"))?;
        self.blocks
            .get_mut(&index)
            .ok_or_else(|| AttemptError::retry(format!("delta for unknown block {index}")))
    }
}

/// Copies the usage fields present in `u` (absent ones keep their value).
pub(crate) fn merge_usage(usage: &mut Usage, u: &Value) {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(v) = get("input_tokens") {
        usage.input_tokens = Some(v);
    }
    if let Some(v) = get("output_tokens") {
        usage.output_tokens = Some(v);
    }
    if let Some(v) = get("cache_creation_input_tokens") {
        usage.cache_creation_input_tokens = Some(v);
    }
    if let Some(v) = get("cache_read_input_tokens") {
        usage.cache_read_input_tokens = Some(v);
    }
}

/// Parses joined tool JSON; whitespace-only means no fragments, i.e. `{}`.
fn parse_tool_input(json: &str) -> Option<Value> {
    if json.trim().is_empty() {
        return Some(Value::Object(Default::default()));
    }
    serde_json::from_str::<Value>(json)
        .ok()
        .filter(Value::is_object)
}

impl TurnAssembler for AnthropicAssembler {
    fn feed(&mut self, ev: &SseEvent, sink: EventSink<'_>) -> Result<Fed, AttemptError> {
        if ev.data.trim().is_empty() {
            return Ok(if ev.event == "message_stop" {
                Fed::Done
            } else {
                Fed::KeepAlive
            });
        }
        let data: Value = serde_json::from_str(&ev.data)
            .map_err(|e| AttemptError::retry(format!("malformed {} event: {e}", ev.event)))?;
        let kind = data["type"]
            .as_str()
            .unwrap_or(ev.event.as_str())
            .to_string();
        match kind.as_str() {
            "message_start" => {
                let msg = &data["message"];
                self.model = msg["model"].as_str().map(str::to_string);
                merge_usage(&mut self.usage, &msg["usage"]);
            }
            "content_block_start" => {
                let index = data["index"]
                    .as_u64()
                    .ok_or_else(|| AttemptError::retry("content_block_start without index"))?;
                let cb = &data["content_block"];
                let s = |k: &str| cb[k].as_str().unwrap_or_default().to_string();
                let block = match cb["type"].as_str() {
                    Some("text") => {
                        let text = s("text");
                        if !text.is_empty() {
                            sink(ModelEvent::TextDelta(text.clone()));
                        }
                        Block::Text(text)
                    }
                    Some("thinking") => Block::Thinking {
                        thinking: s("thinking"),
                        signature: s("signature"),
                    },
                    // The start event's `input` is always `{}`; the real input follows as
                    // fragments.
                    Some("tool_use") => Block::Tool {
                        id: s("id"),
                        name: s("name"),
                        json: String::new(),
                        input: None,
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                let text = |k: &str| delta[k].as_str().unwrap_or_default();
                match (self.block(&data)?, delta["type"].as_str()) {
                    (Block::Text(t), Some("text_delta")) => {
                        t.push_str(text("text"));
                        sink(ModelEvent::TextDelta(text("text").to_string()));
                    }
                    (Block::Thinking { thinking, .. }, Some("thinking_delta")) => {
                        thinking.push_str(text("thinking"));
                        sink(ModelEvent::ThinkingDelta(text("thinking").to_string()));
                    }
                    (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                        signature.push_str(text("signature"));
                    }
                    (Block::Tool { json, .. }, Some("input_json_delta")) => {
                        json.push_str(text("partial_json"));
                    }
                    // Citations and deltas of blocks we drop.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Block::Tool {
                    id,
                    name,
                    json,
                    input,
                } = self.block(&data)?
                {
                    // Unparsable input stays `None`: cut off by max_tokens, or a broken turn.
                    *input = parse_tool_input(json);
                    if let Some(v) = input {
                        sink(ModelEvent::ToolCall(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            input: v.clone(),
                        }));
                    }
                }
            }
            "message_delta" => {
                if let Some(r) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(StopReason::from_wire(r));
                }
                merge_usage(&mut self.usage, &data["usage"]);
                if let Some(c) = data["usage"]["cost"].as_f64() {
                    self.cost = Some(c);
                }
            }
            "message_stop" => return Ok(Fed::Done),
            "error" => {
                return Err(classify_stream_error(super::wire::api_error(
                    &data["error"],
                )));
            }
            // `ping` and event types added after this was written.
            _ => return Ok(Fed::KeepAlive),
        }
        Ok(Fed::Progress)
    }

    fn finish(self, terminal: bool, _sink: EventSink<'_>) -> Result<Turn, AttemptError> {
        if !terminal {
            return Err(AttemptError::retry("stream ended before message_stop"));
        }
        let stop_reason = self.stop_reason.unwrap_or(StopReason::Other);
        let mut content = Vec::new();
        let mut truncated_tool_use = false;
        let mut malformed_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(text) if !text.is_empty() => content.push(ContentBlock::Text { text }),
                Block::Thinking {
                    thinking,
                    signature,
                } => content.push(ContentBlock::Thinking {
                    thinking,
                    signature,
                }),
                Block::Tool {
                    id,
                    name,
                    input: Some(input),
                    ..
                } => content.push(ContentBlock::ToolUse { id, name, input }),
                Block::Tool {
                    id,
                    name,
                    json,
                    input: None,
                } => {
                    if stop_reason == StopReason::MaxTokens {
                        // Cut off mid-call: never executed; the runtime tells the model.
                        truncated_tool_use = true;
                    } else {
                        // The model's mistake, not the network's: answered with an error
                        // result, never retried.
                        malformed_calls.push(MalformedCall::new(id.clone(), name.clone(), &json));
                        content.push(ContentBlock::ToolUse {
                            id,
                            name,
                            input: Value::Object(Default::default()),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(Turn {
            content,
            stop_reason,
            usage: self.usage,
            model: self.model.unwrap_or(self.requested_model),
            retried_errors: Vec::new(),
            truncated_tool_use,
            malformed_calls,
            reported_cost_usd: self.cost,
        })
    }
}

/// A complete Messages API answer (`{"type": "message", "content": [..], ..}`) as one turn, the
/// way a non-streamed response or LiteLLM's mock mode sends it. An `{"type": "error"}` body is
/// classified like an `error` event; anything else is a [`ModelError::BadResponse`] naming what
/// came back.
pub(crate) fn complete_message(
    body: &Value,
    requested_model: &str,
    sink: EventSink<'_>,
) -> Result<Turn, AttemptError> {
    if body["type"] == "error" || (body.get("error").is_some() && body.get("content").is_none()) {
        return Err(classify_stream_error(super::wire::api_error(
            &body["error"],
        )));
    }
    let Some(blocks) = body["content"].as_array() else {
        return Err(AttemptError::Fatal(ModelError::BadResponse {
            status: 200,
            message: format!(
                "JSON without a `content` array, not a Messages API message: {}",
                crate::model::retry::one_line(&body.to_string())
            ),
        }));
    };
    let stop_reason = body["stop_reason"]
        .as_str()
        .map(StopReason::from_wire)
        .unwrap_or(StopReason::Other);
    let mut usage = Usage::default();
    merge_usage(&mut usage, &body["usage"]);
    let mut content = Vec::new();
    let mut malformed_calls = Vec::new();
    for b in blocks {
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
        match b["type"].as_str() {
            Some("text") => {
                let text = s("text");
                if !text.is_empty() {
                    sink(ModelEvent::TextDelta(text.clone()));
                    content.push(ContentBlock::Text { text });
                }
            }
            Some("thinking") => content.push(ContentBlock::Thinking {
                thinking: s("thinking"),
                signature: s("signature"),
            }),
            Some("tool_use") => {
                let (id, name) = (s("id"), s("name"));
                let input = match &b["input"] {
                    Value::Object(_) => b["input"].clone(),
                    other => {
                        malformed_calls.push(MalformedCall::new(&id, &name, &other.to_string()));
                        Value::Object(Default::default())
                    }
                };
                if malformed_calls.iter().all(|m| m.id != id) {
                    sink(ModelEvent::ToolCall(ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                    }));
                }
                content.push(ContentBlock::ToolUse { id, name, input });
            }
            _ => {}
        }
    }
    Ok(Turn {
        content,
        stop_reason,
        usage,
        model: body["model"]
            .as_str()
            .unwrap_or(requested_model)
            .to_string(),
        retried_errors: Vec::new(),
        truncated_tool_use: false,
        malformed_calls,
        reported_cost_usd: body["usage"]["cost"].as_f64(),
    })
}
