//! Chat Completions wire format at the edge: our conversation types converted to `messages` /
//! `tools`, and error bodies read.

use crate::model::retry::ApiError;
use crate::model::{ContentBlock, Request, Speaker};
use serde_json::{json, Value};

/// The request body for `req` with `model`, streamed unless `stream` is false.
///
/// System blocks become one `system` message; a user message's tool results become `tool`
/// messages (placed first, since they must follow the assistant's `tool_calls`), its text a
/// `user` message; an assistant message's text and tool uses become one message with
/// `tool_calls`. Thinking blocks have no Chat Completions form and are left out.
/// `stream_options.include_usage` asks for usage in the final chunk. `tool_choice: "auto"` goes
/// with every tools list: it is OpenAI's default, but some servers (llama-cpp-python) leave the
/// tools out of the prompt entirely without it. Messages that would be empty are never sent.
pub(crate) fn request_body(req: &Request, model: &str, stream: bool) -> Value {
    let mut messages = Vec::new();
    let system: Vec<&str> = req
        .system
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if !system.is_empty() {
        messages.push(json!({"role": "system", "content": system.join("\n\n")}));
    }
    for m in &req.messages {
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        for b in &m.content {
            match b {
                ContentBlock::Text { text } if !text.is_empty() => texts.push(text.as_str()),
                ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()},
                })),
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let content = if *is_error {
                        format!("[error] {content}")
                    } else {
                        content.clone()
                    };
                    messages.push(
                        json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}),
                    );
                }
                _ => {}
            }
        }
        let text = texts.join("\n");
        match m.role {
            Speaker::User if !text.is_empty() => {
                messages.push(json!({"role": "user", "content": text}));
            }
            Speaker::User => {}
            // An assistant message with neither text nor calls (a turn cut off inside its only
            // tool call, stored by an older flowerbox) is not sent.
            Speaker::Assistant if text.is_empty() && calls.is_empty() => {}
            Speaker::Assistant => {
                let mut msg = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": req.max_tokens,
        "stream": stream,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema}})
            })
            .collect();
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = json!("auto");
    }
    body
}

/// The context length in llama.cpp's `GET /props` (`default_generation_settings.n_ctx`, or
/// `n_ctx` at the top in some versions).
pub(crate) fn served_context(props: &Value) -> Option<u64> {
    props["default_generation_settings"]["n_ctx"]
        .as_u64()
        .or_else(|| props["n_ctx"].as_u64())
        .filter(|n| *n > 0)
}

/// The context length `GET /v1/models` gives for `model` (the entry with its id, else the only
/// entry): vLLM's `max_model_len`, OpenRouter-style `context_length`/`context_window`, or
/// llama.cpp's `meta.n_ctx_train`.
pub(crate) fn model_context(models: &Value, model: &str) -> Option<u64> {
    let data = models["data"].as_array()?;
    let entry = data
        .iter()
        .find(|m| m["id"].as_str() == Some(model))
        .or_else(|| (data.len() == 1).then(|| &data[0]))?;
    ["max_model_len", "context_length", "context_window"]
        .iter()
        .find_map(|k| entry[*k].as_u64())
        .or_else(|| entry["meta"]["n_ctx_train"].as_u64())
        .filter(|n| *n > 0)
}

/// Reads `{"error": {"message", "type", "code"}}`; any other body becomes the message verbatim.
/// `prompt_too_long` comes from the code `context_length_exceeded`, or, for servers that copy
/// OpenAI's text but not its code (vLLM), from the phrase "maximum context length".
pub(crate) fn parse_error(body: &str) -> ApiError {
    ApiError::from_body(body, api_error)
}

/// The `error` object of an error body or an error chunk.
pub(crate) fn api_error(e: &Value) -> ApiError {
    if let Some(s) = e.as_str() {
        return ApiError {
            kind: None,
            message: s.to_string(),
            prompt_too_long: false,
        };
    }
    let message = e["message"].as_str().unwrap_or_default().to_string();
    let code = e["code"].as_str().unwrap_or_default();
    let kind = e["type"].as_str().map(str::to_string);
    // llama.cpp's server types it `exceed_context_size_error`.
    let prompt_too_long = code == "context_length_exceeded"
        || kind.as_deref() == Some("exceed_context_size_error")
        || message
            .to_ascii_lowercase()
            .contains("maximum context length");
    ApiError {
        kind,
        message,
        prompt_too_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::request;
    use crate::model::{Message, ToolDef};

    #[test]
    fn conversation_converts_to_chat_messages() {
        let mut r = request("do it");
        r.tools.push(ToolDef {
            name: "Bash".into(),
            description: "run".into(),
            input_schema: json!({"type": "object"}),
        });
        r.messages.push(Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "t".into(),
                    signature: String::new(),
                },
                ContentBlock::text("running"),
                ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "ls"}),
                },
            ],
        });
        r.messages.push(Message {
            role: Speaker::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "boom".into(),
                    is_error: true,
                },
                ContentBlock::text("and then?"),
            ],
        });
        let b = request_body(&r, "qwen", true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["tool_choice"], "auto");
        assert_eq!(b["tools"][0]["function"]["parameters"]["type"], "object");
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(m[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(m[1], json!({"role": "user", "content": "do it"}));
        assert_eq!(m[2]["content"], "running");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"command\":\"ls\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "[error] boom"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "and then?"}));
    }

    #[test]
    fn servers_say_their_context_length() {
        let props = json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1});
        assert_eq!(served_context(&props), Some(8192));
        assert_eq!(served_context(&json!({"n_ctx": 4096})), Some(4096));
        assert_eq!(served_context(&json!({})), None);
        let vllm = json!({"data": [{"id": "qwen", "max_model_len": 32768}]});
        assert_eq!(model_context(&vllm, "qwen"), Some(32768));
        let llama = json!({"data": [{"id": "x.gguf", "meta": {"n_ctx_train": 131072}}]});
        assert_eq!(model_context(&llama, "other"), Some(131072));
        let two = json!({"data": [{"id": "a", "max_model_len": 1}, {"id": "b"}]});
        assert_eq!(model_context(&two, "c"), None);
    }

    #[test]
    fn context_length_errors_are_recognised() {
        let e = parse_error(
            r#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert!(e.prompt_too_long);
        let e = parse_error(
            r#"{"error":{"message":"This model's maximum context length is 32768 tokens","type":"BadRequestError","code":400}}"#,
        );
        assert!(e.prompt_too_long);
        assert!(!parse_error("oops").prompt_too_long);
        let e = parse_error(
            r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#,
        );
        assert!(e.prompt_too_long);
    }
}
