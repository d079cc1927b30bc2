//! Provider-independent conversation types: the only model vocabulary the rest of flowerbox uses.
//!
//! Shapes follow the Anthropic Messages API (content blocks, tool_use / tool_result), because
//! that is what sessions store and what the scripted model server speaks; the OpenAI provider
//! converts to and from these at its edge. Nothing above `model/` imports wire types.

use serde::{Deserialize, Serialize};

use crate::role::Role;

/// The author of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The runner (prompts, tool results).
    User,
    /// The model.
    Assistant,
}

/// One content block of a message, in the Messages API's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Extended thinking; `signature` must be sent back unchanged.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Opaque signature from the API (empty when the provider gives none).
        #[serde(default)]
        signature: String,
    },
    /// A tool call proposed by the model.
    ToolUse {
        /// Call id, echoed by the matching result.
        id: String,
        /// Tool name as registered.
        name: String,
        /// Parsed JSON input (`{}` when the model sent no fragments).
        input: serde_json::Value,
    },
    /// The runner's answer to a tool call.
    ToolResult {
        /// The `id` of the [`ContentBlock::ToolUse`] this answers.
        tool_use_id: String,
        /// Result text as the model sees it.
        content: String,
        /// True for refusals, failures, malformed input.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(s: impl Into<String>) -> Self {
        ContentBlock::Text { text: s.into() }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: Speaker,
    /// Ordered content blocks.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(s: impl Into<String>) -> Self {
        Message {
            role: Speaker::User,
            content: vec![ContentBlock::text(s)],
        }
    }

    /// An assistant message with one text block.
    pub fn assistant_text(s: impl Into<String>) -> Self {
        Message {
            role: Speaker::Assistant,
            content: vec![ContentBlock::text(s)],
        }
    }

    /// All text blocks joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let ContentBlock::Text { text } = b {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = ToolCall> + '_ {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: input.clone(),
            }),
            _ => None,
        })
    }
}

/// A completed tool call: id, name and parsed input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed input.
    pub input: serde_json::Value,
}

/// A tool definition offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// Name the model calls.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: serde_json::Value,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model wants tool results.
    ToolUse,
    /// Output hit `max_tokens`.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider refused to continue.
    Refusal,
    /// Anything else the provider said.
    Other,
}

impl StopReason {
    /// Maps the wire string (`end_turn`, `tool_use`, ...) to the enum.
    pub fn from_wire(s: &str) -> StopReason {
        match s {
            "end_turn" | "stop" => StopReason::EndTurn,
            "tool_use" | "tool_calls" | "function_call" => StopReason::ToolUse,
            "max_tokens" | "length" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "refusal" | "content_filter" => StopReason::Refusal,
            _ => StopReason::Other,
        }
    }
}

/// Token usage of one model call. `None` means the provider did not say (unknown, not zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: Option<u64>,
    /// Output tokens.
    pub output_tokens: Option<u64>,
    /// Tokens written to the prompt cache.
    pub cache_creation_input_tokens: Option<u64>,
    /// Tokens read from the prompt cache.
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Context size of the request this usage belongs to: input + cache reads + cache writes
    /// (the prompt the model saw), in tokens.
    pub fn context_tokens(&self) -> u64 {
        self.input_tokens.unwrap_or(0)
            + self.cache_creation_input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0)
    }
}

/// Who sends a request: the role and the agent instance (`worker-2`). Sent as the
/// `x-flowerbox-role` and `x-flowerbox-agent` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Role.
    pub role: Role,
    /// Agent instance name.
    pub agent: String,
}

/// One request for one assistant turn.
#[derive(Debug, Clone)]
pub struct Request {
    /// Model id.
    pub model: String,
    /// System prompt blocks, in order; the provider puts a cache breakpoint on the last one.
    pub system: Vec<String>,
    /// The conversation so far, starting with a user message.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolDef>,
    /// Output cap in tokens.
    pub max_tokens: u32,
    /// Who asks.
    pub caller: Caller,
}

/// A completed assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Content blocks in order (text, thinking, tool_use).
    pub content: Vec<ContentBlock>,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Usage of the successful attempt.
    pub usage: Usage,
    /// Model id the provider reported (falls back to the requested id).
    pub model: String,
    /// Failed attempts before this one (retries), for the manifest's `errors[]`.
    pub retried_errors: Vec<String>,
    /// True when `stop_reason` is `max_tokens` and a tool_use block was cut off; such blocks
    /// are already removed from `content` and must never execute.
    pub truncated_tool_use: bool,
    /// Tool calls whose input was not a JSON object (a string, an array, unparsable JSON) in a
    /// turn that was not cut off. They stay in `content` with input `{}` (what the APIs accept
    /// back) and must not execute: the runtime answers each with an error result quoting what
    /// the model sent, so the model can correct itself.
    pub malformed_calls: Vec<MalformedCall>,
    /// The cost in USD the endpoint itself reported for this call (a gateway's `cost` field),
    /// if any; it takes precedence over the price table.
    pub reported_cost_usd: Option<f64>,
}

/// A tool call whose input was not a JSON object: the model's mistake, answered with an error
/// tool result instead of being executed or retried.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedCall {
    /// The call id (its `tool_use` block keeps it, with input `{}`).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// What the model sent as input, verbatim (cut to a few hundred characters).
    pub raw: String,
}

impl MalformedCall {
    /// A record of call `id` to `name` whose input text was `raw` (kept to 300 characters).
    pub fn new(id: impl Into<String>, name: impl Into<String>, raw: &str) -> Self {
        let raw = match raw.char_indices().nth(300) {
            Some((i, _)) => format!("{}…", &raw[..i]),
            None => raw.to_string(),
        };
        MalformedCall {
            id: id.into(),
            name: name.into(),
            raw,
        }
    }
}

impl Turn {
    /// The turn as an assistant message.
    pub fn to_message(&self) -> Message {
        Message {
            role: Speaker::Assistant,
            content: self.content.clone(),
        }
    }
}

/// What a provider reports while a turn streams. Deltas of an attempt that later fails are
/// followed by [`ModelEvent::Retrying`]; consumers must treat earlier deltas of that attempt
/// as void.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of text.
    TextDelta(String),
    /// A piece of thinking.
    ThinkingDelta(String),
    /// A tool call whose input is complete (emitted at `content_block_stop`). For display only:
    /// execute the calls of the returned [`Turn`], since a later failure voids this event.
    ToolCall(ToolCall),
    /// The attempt failed and will be retried after `delay_ms`.
    Retrying {
        /// 1-based attempt number that failed.
        attempt: u32,
        /// Attempts the retry policy allows in all ([`crate::model::RetryPolicy::max_attempts`]).
        of: u32,
        /// Wait before the next attempt, in milliseconds.
        delay_ms: u64,
        /// Why, one line.
        reason: String,
    },
    /// The endpoint is unreachable; waiting and probing (seed 001 "韧性"). One per state change.
    Waiting {
        /// One status line.
        status: String,
    },
    /// The turn completed.
    Done {
        /// Why it stopped.
        stop_reason: StopReason,
        /// Its usage.
        usage: Usage,
    },
}
