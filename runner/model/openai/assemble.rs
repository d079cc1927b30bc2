//! Assembles Chat Completions stream chunks into one [`Turn`].
//!
//! Text and reasoning deltas stream through; `tool_calls` deltas are joined by their `index`
//! (id and name arrive once, `arguments` in fragments) and parsed when the stream ends; usage
//! comes from the final chunk (`stream_options.include_usage`). `data: [DONE]` ends the turn; a
//! clean end of body after a `finish_reason` is accepted too, since some servers omit `[DONE]`.

use crate::model::client::{Fed, TurnAssembler};
use crate::model::retry::{classify_stream_error, one_line, AttemptError};
use crate::model::{
    ContentBlock, EventSink, MalformedCall, ModelError, ModelEvent, StopReason, ToolCall, Turn,
    Usage,
};
use eventsource_stream::Event as SseEvent;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Default)]
struct ToolAcc {
    id: String,
    name: String,
    args: String,
}

/// Assembler state for one attempt.
#[derive(Debug)]
pub(crate) struct OpenAiAssembler {
    requested_model: String,
    model: Option<String>,
    text: String,
    reasoning: String,
    tools: BTreeMap<u64, ToolAcc>,
    finish: Option<StopReason>,
    usage: Usage,
    /// A gateway's own price of the call (`usage.cost`), when it sends one.
    cost: Option<f64>,
    /// Events seen in this attempt (0 at the end: the server sent an empty stream).
    events: u32,
}

impl OpenAiAssembler {
    /// A fresh assembler; `requested_model` is the fallback for `Turn.model`.
    pub(crate) fn new(requested_model: &str) -> Self {
        OpenAiAssembler {
            requested_model: requested_model.to_string(),
            model: None,
            text: String::new(),
            reasoning: String::new(),
            tools: BTreeMap::new(),
            finish: None,
            usage: Usage::default(),
            cost: None,
            events: 0,
        }
    }
}

/// The message when a 200 stream ended without a single event.
pub(crate) const EMPTY_STREAM: &str = "the server answered HTTP 200 with an empty event stream. \
Some servers cannot stream tool calls (llama-cpp-python logs `Automatic streaming tool choice is \
not supported`); set FLOWERBOX_OPENAI_STREAM=0 to ask for complete answers instead";

/// `prompt_tokens` includes cached tokens; we report them apart, like Anthropic does.
pub(crate) fn usage_from(u: &Value) -> Usage {
    let prompt = u["prompt_tokens"].as_u64();
    let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64();
    Usage {
        input_tokens: prompt.map(|p| p.saturating_sub(cached.unwrap_or(0))),
        output_tokens: u["completion_tokens"].as_u64(),
        cache_creation_input_tokens: None,
        cache_read_input_tokens: cached,
    }
}

impl TurnAssembler for OpenAiAssembler {
    fn feed(&mut self, ev: &SseEvent, sink: EventSink<'_>) -> Result<Fed, AttemptError> {
        self.events += 1;
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(Fed::Done);
        }
        if data.is_empty() {
            return Ok(Fed::KeepAlive);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| AttemptError::retry(format!("malformed chunk: {e}")))?;
        if let Some(err) = chunk.get("error") {
            return Err(classify_stream_error(super::wire::api_error(err)));
        }
        if let Some(m) = chunk["model"].as_str() {
            self.model = Some(m.to_string());
        }
        if chunk["usage"].is_object() {
            self.usage = usage_from(&chunk["usage"]);
            if let Some(c) = chunk["usage"]["cost"].as_f64() {
                self.cost = Some(c);
            }
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(if chunk["usage"].is_object() {
                Fed::Progress
            } else {
                Fed::KeepAlive
            });
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(t);
            sink(ModelEvent::TextDelta(t.to_string()));
        }
        // Reasoning servers (vLLM, DeepSeek, Ollama) name this field differently.
        for key in ["reasoning_content", "reasoning"] {
            if let Some(t) = delta[key].as_str().filter(|t| !t.is_empty()) {
                self.reasoning.push_str(t);
                sink(ModelEvent::ThinkingDelta(t.to_string()));
            }
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for (pos, call) in calls.iter().enumerate() {
                let index = call["index"].as_u64().unwrap_or(pos as u64);
                let acc = self.tools.entry(index).or_default();
                if let Some(id) = call["id"].as_str().filter(|s| !s.is_empty()) {
                    acc.id = id.to_string();
                }
                if let Some(name) = call["function"]["name"].as_str().filter(|s| !s.is_empty()) {
                    acc.name = name.to_string();
                }
                if let Some(args) = call["function"]["arguments"].as_str() {
                    acc.args.push_str(args);
                }
            }
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            self.finish = Some(StopReason::from_wire(r));
        }
        Ok(Fed::Progress)
    }

    fn finish(self, terminal: bool, sink: EventSink<'_>) -> Result<Turn, AttemptError> {
        if !terminal && self.events == 0 {
            return Err(AttemptError::Fatal(ModelError::BadResponse {
                status: 200,
                message: EMPTY_STREAM.to_string(),
            }));
        }
        if !terminal && self.finish.is_none() {
            return Err(AttemptError::retry("stream ended before [DONE]"));
        }
        let parts = Parts {
            model: self.model.unwrap_or(self.requested_model),
            text: self.text,
            reasoning: self.reasoning,
            calls: self
                .tools
                .into_iter()
                .map(|(i, a)| (i, a.id, a.name, a.args))
                .collect(),
            finish: self.finish,
            usage: self.usage,
            cost: self.cost,
        };
        Ok(parts.into_turn(sink))
    }
}

/// A turn's pieces, from a stream or a complete answer.
struct Parts {
    model: String,
    text: String,
    reasoning: String,
    /// (index, id, name, arguments text).
    calls: Vec<(u64, String, String, String)>,
    finish: Option<StopReason>,
    usage: Usage,
    cost: Option<f64>,
}

impl Parts {
    /// The turn; tool calls whose arguments are not a JSON object become malformed calls
    /// (answered with an error result), or are dropped as cut off when the turn hit its length.
    fn into_turn(self, sink: EventSink<'_>) -> Turn {
        let mut stop_reason = self.finish.unwrap_or(StopReason::Other);
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            content.push(ContentBlock::Thinking {
                thinking: self.reasoning,
                signature: String::new(),
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let mut truncated_tool_use = false;
        let mut malformed_calls = Vec::new();
        let mut calls = Vec::new();
        for (index, id, name, args) in self.calls {
            // Some servers send no id; the conversation still needs one per call.
            let id = if id.is_empty() {
                format!("call_{index}")
            } else {
                id
            };
            let input = if args.trim().is_empty() {
                Some(Value::Object(Default::default()))
            } else {
                serde_json::from_str::<Value>(&args)
                    .ok()
                    .filter(Value::is_object)
            };
            match input {
                Some(input) => calls.push((ToolCall { id, name, input }, true)),
                None if stop_reason == StopReason::MaxTokens => truncated_tool_use = true,
                None => {
                    // The model's mistake: an error result tells it, nothing is retried.
                    malformed_calls.push(MalformedCall::new(&id, &name, &args));
                    let input = Value::Object(Default::default());
                    calls.push((ToolCall { id, name, input }, false));
                }
            }
        }
        // Some servers say `stop` although they called tools.
        if !calls.is_empty() && stop_reason == StopReason::EndTurn {
            stop_reason = StopReason::ToolUse;
        }
        for (c, valid) in calls {
            if valid {
                sink(ModelEvent::ToolCall(c.clone()));
            }
            content.push(ContentBlock::ToolUse {
                id: c.id,
                name: c.name,
                input: c.input,
            });
        }
        Turn {
            content,
            stop_reason,
            usage: self.usage,
            model: self.model,
            retried_errors: Vec::new(),
            truncated_tool_use,
            malformed_calls,
            reported_cost_usd: self.cost,
        }
    }
}

/// A complete Chat Completions answer (`{"choices": [{"message": ..}], ..}`) as one turn: what
/// a server sends without streaming. An `{"error": ..}` body is classified like an error chunk;
/// anything else is a [`ModelError::BadResponse`] naming what came back.
pub(crate) fn complete_chat(
    body: &Value,
    requested_model: &str,
    sink: EventSink<'_>,
) -> Result<Turn, AttemptError> {
    if let Some(err) = body.get("error").filter(|_| body.get("choices").is_none()) {
        return Err(classify_stream_error(super::wire::api_error(err)));
    }
    let Some(choice) = body["choices"].get(0) else {
        return Err(AttemptError::Fatal(ModelError::BadResponse {
            status: 200,
            message: format!(
                "JSON without `choices`, not a Chat Completions answer: {}",
                one_line(&body.to_string())
            ),
        }));
    };
    let msg = &choice["message"];
    let text = msg["content"].as_str().unwrap_or_default().to_string();
    if !text.is_empty() {
        sink(ModelEvent::TextDelta(text.clone()));
    }
    let reasoning = ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| msg[*k].as_str().filter(|t| !t.is_empty()))
        .unwrap_or_default()
        .to_string();
    let calls = msg["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let args = match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (
                        i as u64,
                        c["id"].as_str().unwrap_or_default().to_string(),
                        c["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        args,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let parts = Parts {
        model: body["model"]
            .as_str()
            .unwrap_or(requested_model)
            .to_string(),
        text,
        reasoning,
        calls,
        finish: choice["finish_reason"].as_str().map(StopReason::from_wire),
        usage: if body["usage"].is_object() {
            usage_from(&body["usage"])
        } else {
            Usage::default()
        },
        cost: body["usage"]["cost"].as_f64(),
    };
    Ok(parts.into_turn(sink))
}
