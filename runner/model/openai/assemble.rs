//! Assembles Chat Completions stream chunks into one [`Turn`].
//!
//! Text and reasoning deltas stream through; `tool_calls` deltas are joined by their `index`
//! (id and name arrive once, `arguments` in fragments) and parsed when the stream ends; usage
//! comes from the final chunk (`stream_options.include_usage`). `data: [DONE]` ends the turn; a
//! clean end of body after a `finish_reason` is accepted too, since some servers omit `[DONE]`.

use crate::model::client::TurnAssembler;
use crate::model::retry::{classify_stream_error, AttemptError};
use crate::model::{ContentBlock, EventSink, ModelEvent, StopReason, ToolCall, Turn, Usage};
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
        }
    }
}

/// `prompt_tokens` includes cached tokens; we report them apart, like Anthropic does.
fn usage_from(u: &Value) -> Usage {
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
    fn feed(&mut self, ev: &SseEvent, sink: EventSink<'_>) -> Result<bool, AttemptError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
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
        }
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(false);
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
        Ok(false)
    }

    fn finish(self, terminal: bool, sink: EventSink<'_>) -> Result<Turn, AttemptError> {
        if !terminal && self.finish.is_none() {
            return Err(AttemptError::retry("stream ended before [DONE]"));
        }
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
        let mut calls = Vec::new();
        for (index, acc) in self.tools {
            let input = if acc.args.trim().is_empty() {
                Some(Value::Object(Default::default()))
            } else {
                serde_json::from_str::<Value>(&acc.args)
                    .ok()
                    .filter(Value::is_object)
            };
            match input {
                Some(input) => {
                    // Some servers send no id; the conversation still needs one per call.
                    let id = if acc.id.is_empty() {
                        format!("call_{index}")
                    } else {
                        acc.id
                    };
                    calls.push(ToolCall {
                        id,
                        name: acc.name,
                        input,
                    });
                }
                None if stop_reason == StopReason::MaxTokens => truncated_tool_use = true,
                None => {
                    return Err(AttemptError::retry(format!(
                        "tool call {}: arguments are not a JSON object",
                        acc.name
                    )))
                }
            }
        }
        // Some servers say `stop` although they called tools.
        if !calls.is_empty() && stop_reason == StopReason::EndTurn {
            stop_reason = StopReason::ToolUse;
        }
        for c in calls {
            sink(ModelEvent::ToolCall(c.clone()));
            content.push(ContentBlock::ToolUse {
                id: c.id,
                name: c.name,
                input: c.input,
            });
        }
        Ok(Turn {
            content,
            stop_reason,
            usage: self.usage,
            model: self.model.unwrap_or(self.requested_model),
            retried_errors: Vec::new(),
            truncated_tool_use,
        })
    }
}
