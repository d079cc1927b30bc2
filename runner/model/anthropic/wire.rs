//! Anthropic Messages wire format at the edge: the request body (with prompt-cache breakpoints)
//! and error bodies. Our [`ContentBlock`](crate::model::ContentBlock)s already have the API's
//! shape, so messages serialize directly.

use crate::model::retry::ApiError;
use crate::model::Request;
use serde_json::{json, Map, Value};

/// The API version sent as `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The streaming request body for `req` with `model`.
///
/// Prompt caching puts three of the four allowed `cache_control` breakpoints on the last system
/// block, the last tool definition and the last cacheable block of the latest message, so a
/// long run pays for its stable prefix (tools → system → history) once and each turn only for
/// what is new.
pub(crate) fn request_body(req: &Request, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    body.insert("stream".into(), json!(true));

    let mut system: Vec<Value> = req
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| json!({"type": "text", "text": s}))
        .collect();
    if let Some(last) = system.last_mut() {
        last["cache_control"] = ephemeral();
    }
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }

    // Never send an empty message (the API refuses one anywhere but last): a message whose
    // blocks were all left out goes, and its neighbours of one role are joined.
    let mut messages: Vec<(crate::model::Speaker, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let blocks = message_blocks(m);
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((role, arr)) if *role == m.role => arr.extend(blocks),
            _ => messages.push((m.role, blocks)),
        }
    }
    if let Some((_, last)) = messages.last_mut() {
        // Thinking blocks cannot carry cache_control.
        if let Some(block) = last.iter_mut().rev().find(|b| b["type"] != "thinking") {
            block["cache_control"] = ephemeral();
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    body.insert("messages".into(), Value::Array(messages));

    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    if let Some(last) = tools.last_mut() {
        last["cache_control"] = ephemeral();
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    Value::Object(body)
}

/// One message's blocks as the API wants them. Empty text blocks (rejected by the API) and
/// thinking blocks without a signature (which only another provider produces; the API would
/// refuse them) are left out.
fn message_blocks(m: &crate::model::Message) -> Vec<Value> {
    use crate::model::ContentBlock;
    m.content
        .iter()
        .filter(|b| match b {
            ContentBlock::Text { text } => !text.is_empty(),
            ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
            _ => true,
        })
        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
        .collect()
}

/// Reads `{"type":"error","error":{"type":..,"message":..}}`; any other body becomes the
/// message verbatim (one line). `prompt_too_long` is set for an `invalid_request_error` saying
/// the prompt is too long (the API has no separate error type for it).
pub(crate) fn parse_error(body: &str) -> ApiError {
    ApiError::from_body(body, api_error)
}

/// The `error` object of an error body or an `error` stream event.
pub(crate) fn api_error(e: &Value) -> ApiError {
    let kind = e.get("type").and_then(Value::as_str).map(str::to_string);
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // llama.cpp's server (its /v1/messages too) types it `exceed_context_size_error`.
    let prompt_too_long = kind.as_deref() == Some("exceed_context_size_error")
        || (kind.as_deref() == Some("invalid_request_error")
            && message.to_ascii_lowercase().contains("prompt is too long"));
    ApiError {
        kind,
        message,
        prompt_too_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Caller, ContentBlock, Message, Speaker, ToolDef};
    use crate::role::Role;

    fn req() -> Request {
        Request {
            model: "m".into(),
            system: vec!["base".into(), "role".into()],
            messages: vec![
                Message::user_text("hi"),
                Message {
                    role: Speaker::Assistant,
                    content: vec![
                        ContentBlock::text(""),
                        ContentBlock::ToolUse {
                            id: "t1".into(),
                            name: "Bash".into(),
                            input: json!({"command": "ls"}),
                        },
                    ],
                },
                Message {
                    role: Speaker::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "a\nb".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![
                ToolDef {
                    name: "Read".into(),
                    description: "r".into(),
                    input_schema: json!({}),
                },
                ToolDef {
                    name: "Bash".into(),
                    description: "b".into(),
                    input_schema: json!({}),
                },
            ],
            max_tokens: 1000,
            caller: Caller {
                role: Role::Worker,
                agent: "worker-1".into(),
            },
        }
    }

    #[test]
    fn body_has_cache_breakpoints_on_system_tools_and_latest_turn() {
        let b = request_body(&req(), "claude-x");
        assert_eq!(b["stream"], true);
        assert_eq!(b["model"], "claude-x");
        assert_eq!(b["max_tokens"], 1000);
        assert!(b["system"][0].get("cache_control").is_none());
        assert_eq!(b["system"][1]["cache_control"]["type"], "ephemeral");
        assert!(b["tools"][0].get("cache_control").is_none());
        assert_eq!(b["tools"][1]["cache_control"]["type"], "ephemeral");
        let msgs = b["messages"].as_array().unwrap();
        assert!(msgs[0]["content"][0].get("cache_control").is_none());
        assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
        assert_eq!(msgs[2]["content"][0]["cache_control"]["type"], "ephemeral");
        // The empty text block is dropped, the tool_use kept.
        assert_eq!(msgs[1]["content"].as_array().unwrap().len(), 1);
        assert_eq!(msgs[1]["content"][0]["input"]["command"], "ls");
        let count = b.to_string().matches("cache_control").count();
        assert_eq!(count, 3);
    }

    #[test]
    fn an_empty_message_is_never_sent() {
        // A turn cut off inside its only tool call, as an older flowerbox stored it.
        let mut r = req();
        r.messages = vec![
            Message::user_text("write it"),
            Message {
                role: Speaker::Assistant,
                content: vec![],
            },
            Message::user_text("[cut off]"),
        ];
        let b = request_body(&r, "m");
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 1, "{b}");
        assert_eq!(msgs[0]["role"], "user");
        assert_eq!(msgs[0]["content"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn empty_system_and_tools_are_omitted() {
        let mut r = req();
        r.system.clear();
        r.tools.clear();
        let b = request_body(&r, "m");
        assert!(b.get("system").is_none());
        assert!(b.get("tools").is_none());
    }

    #[test]
    fn error_bodies() {
        let e = parse_error(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert!(e.prompt_too_long);
        assert_eq!(e.kind.as_deref(), Some("invalid_request_error"));
        let e = parse_error("<html>bad gateway</html>");
        assert_eq!(e.kind, None);
        assert_eq!(e.message, "<html>bad gateway</html>");
    }
}
