//! The Messages API's request rules, as the real API enforces them: the scripted server answers
//! a request that breaks one with HTTP 400, `invalid_request_error` and the real message text,
//! so a client that passes the tests passes the real API too.
//!
//! Rules and texts come from Anthropic's public Messages API, tool-use, extended-thinking and
//! prompt-caching documentation and the error bodies the API returns (quoted in public issue
//! threads); a path such as `messages.3.content.1` names the offending place the way the API
//! does. What is checked:
//!
//! - `model`, `max_tokens` (a positive integer within the model's output cap when the model is
//!   catalogued) and `messages` are present;
//! - every message has non-empty content, except an optional final assistant message; text
//!   blocks are non-empty and not whitespace only; a final assistant message does not end in
//!   whitespace;
//! - every `tool_use` input is an object, its id unique; every `tool_use` is answered by a
//!   `tool_result` with its id in the next message, the results first in that message; no
//!   `tool_result` answers an id the previous message did not use;
//! - at most four `cache_control` breakpoints, none on an empty text block;
//! - tool names match `^[a-zA-Z0-9_-]{1,64}$` and are unique; `input_schema` is an object
//!   schema (`type: object`, no `oneOf`/`allOf`/`anyOf` at the top);
//! - thinking blocks carry the signature the server gave them (passed back unchanged); with
//!   `thinking` enabled the final assistant message of a tool loop starts with one; with it
//!   disabled a final assistant message holds none.

use serde_json::Value;

/// What the real API answers a request that breaks one of its rules: the message of its HTTP
/// 400 (`invalid_request_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal(message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Refusal(message.to_string())
    }
}

/// Checks one request body. `Err` is the message of the 400 the real API would send;
/// `signed(thinking, signature)` tells whether this server issued `signature` for `thinking`.
pub fn check_messages_request(
    req: &Value,
    signed: &dyn Fn(&str, &str) -> bool,
) -> Result<(), Refusal> {
    let Some(model) = req["model"].as_str() else {
        return Err(Refusal::from("model: Field required"));
    };
    let max_tokens = match &req["max_tokens"] {
        Value::Null => return Err(Refusal::from("max_tokens: Field required")),
        v => v
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or("max_tokens: Input should be greater than or equal to 1")?,
    };
    if let Some(cap) = flowerbox::model::catalog::max_output_tokens(model) {
        if max_tokens > u64::from(cap) {
            return Err(Refusal::from(format!(
                "max_tokens: {max_tokens} > {cap}, which is the maximum allowed number of output tokens for {model}"
            )));
        }
    }
    let Some(messages) = req["messages"].as_array() else {
        return Err(Refusal::from("messages: Field required"));
    };
    check_cache_control(req)?;
    check_system(&req["system"])?;
    check_tools(&req["tools"])?;
    let thinking_on = req["thinking"]["type"]
        .as_str()
        .is_some_and(|t| t != "disabled");
    let last = messages.len().saturating_sub(1);
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err(Refusal::from(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            )));
        }
        let blocks = blocks_of(&m["content"]);
        let final_assistant = i == last && role == "assistant";
        if blocks.is_empty() && !final_assistant {
            return Err(Refusal::from(format!(
                "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
            )));
        }
        for (j, b) in blocks.iter().enumerate() {
            check_block(i, j, b, role, signed)?;
        }
        if final_assistant {
            let text_end = blocks.last().and_then(|b| b["text"].as_str());
            if text_end.is_some_and(|t| t.ends_with(char::is_whitespace)) {
                return Err(Refusal::from(
                    "messages: final assistant content cannot end with trailing whitespace",
                ));
            }
            if !thinking_on {
                if let Some(j) = blocks.iter().position(|b| b["type"] == "thinking") {
                    return Err(Refusal::from(format!(
                        "messages.{i}.content.{j}: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."
                    )));
                }
            }
        }
    }
    check_tool_pairs(messages)?;
    if thinking_on {
        check_thinking_loop(messages)?;
    }
    Ok(())
}

/// A message's content as blocks (a plain string is one text block).
fn blocks_of(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

fn check_system(system: &Value) -> Result<(), Refusal> {
    if let Some(blocks) = system.as_array() {
        for b in blocks {
            if b["text"].as_str().is_some_and(str::is_empty) {
                return Err(Refusal::from(
                    "system: text content blocks must be non-empty",
                ));
            }
        }
    }
    Ok(())
}

fn check_block(
    i: usize,
    j: usize,
    b: &Value,
    role: &str,
    signed: &dyn Fn(&str, &str) -> bool,
) -> Result<(), Refusal> {
    match b["type"].as_str().unwrap_or_default() {
        "text" => {
            let text = b["text"].as_str().unwrap_or_default();
            if text.is_empty() {
                return Err(Refusal::from(
                    "messages: text content blocks must be non-empty",
                ));
            }
            if text.trim().is_empty() {
                return Err(Refusal::from(
                    "messages: text content blocks must contain non-whitespace text",
                ));
            }
        }
        "tool_use" => {
            if role != "assistant" {
                return Err(Refusal::from(format!(
                    "messages.{i}.content.{j}.type: `tool_use` blocks can only be in `assistant` messages"
                )));
            }
            if !b["input"].is_object() {
                return Err(Refusal::from(format!(
                    "messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
                )));
            }
        }
        "tool_result" if role != "user" => {
            return Err(Refusal::from(format!(
                "messages.{i}.content.{j}.type: `tool_result` blocks can only be in `user` messages"
            )));
        }
        "thinking" => {
            let thinking = b["thinking"].as_str().unwrap_or_default();
            let signature = b["signature"].as_str().unwrap_or_default();
            if role != "assistant" || !signed(thinking, signature) {
                return Err(Refusal::from(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Every `tool_use` answered first thing in the next message; no result for an unknown id;
/// ids unique.
fn check_tool_pairs(messages: &[Value]) -> Result<(), Refusal> {
    let mut seen = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = blocks_of(&m["content"]);
        let uses: Vec<String> = blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b["type"] == "tool_use")
            .map(|(j, b)| {
                let id = b["id"].as_str().unwrap_or_default().to_string();
                if seen.insert(id.clone()) {
                    Ok(id)
                } else {
                    Err(Refusal::from(format!(
                        "messages.{i}.content.{j}: `tool_use` ids must be unique"
                    )))
                }
            })
            .collect::<Result<_, _>>()?;
        // Results in this message must answer the previous message's calls.
        if m["role"] == "user" {
            let prev: Vec<String> = i
                .checked_sub(1)
                .map(|p| blocks_of(&messages[p]["content"]))
                .unwrap_or_default()
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_string))
                .collect();
            for (j, b) in blocks.iter().enumerate() {
                if b["type"] != "tool_result" {
                    continue;
                }
                let id = b["tool_use_id"].as_str().unwrap_or_default();
                if !prev.iter().any(|p| p == id) {
                    return Err(Refusal::from(format!(
                        "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )));
                }
            }
        }
        if uses.is_empty() {
            continue;
        }
        let Some(next) = messages.get(i + 1) else {
            // The final assistant message: its calls are what the model is continuing.
            continue;
        };
        let next_blocks = blocks_of(&next["content"]);
        let answered: Vec<&str> = next_blocks
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str())
            .collect();
        let missing: Vec<&str> = uses
            .iter()
            .map(String::as_str)
            .filter(|u| !answered.contains(u))
            .collect();
        if next["role"] != "user" || !missing.is_empty() {
            let ids = if next["role"] != "user" {
                uses.join(", ")
            } else {
                missing.join(", ")
            };
            return Err(Refusal::from(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
            )));
        }
        let leading = next_blocks
            .iter()
            .take_while(|b| b["type"] == "tool_result")
            .count();
        if leading < uses.len() {
            return Err(Refusal::from(format!(
                "messages.{}: Did not find {} `tool_result` block(s) at the beginning of this message. Messages following `tool_use` blocks must begin with a matching number of `tool_result` blocks.",
                i + 1,
                uses.len()
            )));
        }
    }
    Ok(())
}

/// With thinking on, the last assistant message of an open tool loop (the conversation ends in
/// its tool results) must start with a thinking block.
fn check_thinking_loop(messages: &[Value]) -> Result<(), Refusal> {
    let Some(i) = messages.iter().rposition(|m| m["role"] == "assistant") else {
        return Ok(());
    };
    let blocks = blocks_of(&messages[i]["content"]);
    let in_loop = blocks.iter().any(|b| b["type"] == "tool_use") && i + 1 == messages.len() - 1;
    if in_loop {
        if let Some(first) = blocks.first().filter(|b| b["type"] != "thinking") {
            let found = first["type"].as_str().unwrap_or_default();
            return Err(Refusal::from(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            )));
        }
    }
    Ok(())
}

/// Tool names and schemas.
fn check_tools(tools: &Value) -> Result<(), Refusal> {
    let Some(tools) = tools.as_array() else {
        return Ok(());
    };
    let mut names = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let name = t["name"].as_str().unwrap_or_default();
        let ok = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
        if !ok {
            return Err(Refusal::from(format!(
                "tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )));
        }
        if !names.insert(name) {
            return Err(Refusal::from("tools: Tool names must be unique."));
        }
        let schema = &t["input_schema"];
        if schema.is_null() {
            return Err(Refusal::from(format!(
                "tools.{i}.custom.input_schema: Field required"
            )));
        }
        if ["oneOf", "allOf", "anyOf"]
            .iter()
            .any(|k| schema.get(k).is_some())
        {
            return Err(Refusal::from(format!(
                "tools.{i}.custom.input_schema: input_schema does not support oneOf, allOf, or anyOf at the top level"
            )));
        }
        if schema["type"] != "object" {
            return Err(Refusal::from(format!(
                "tools.{i}.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12). Learn more about tool use at https://docs.claude.com/en/docs/tool-use."
            )));
        }
    }
    Ok(())
}

/// At most four breakpoints in the whole request; none on an empty text block.
fn check_cache_control(req: &Value) -> Result<(), Refusal> {
    let mut marks: Vec<&Value> = Vec::new();
    for t in req["tools"].as_array().into_iter().flatten() {
        if t.get("cache_control").is_some() {
            marks.push(t);
        }
    }
    for b in req["system"].as_array().into_iter().flatten() {
        if b.get("cache_control").is_some() {
            marks.push(b);
        }
    }
    for m in req["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b.get("cache_control").is_some() {
                marks.push(b);
            }
        }
    }
    if marks
        .iter()
        .any(|b| b["type"] == "text" && b["text"].as_str().is_some_and(str::is_empty))
    {
        return Err(Refusal::from(
            "cache_control cannot be set for empty text blocks",
        ));
    }
    if marks.len() > 4 {
        return Err(Refusal::from(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {}.",
            marks.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
