//! The Chat Completions side of the scripted server (`POST /v1/chat/completions`): the same
//! scenario turns as `chat.completion.chunk`s (`data:` lines, `data: [DONE]`) or, for a request
//! with `stream: false`, one `chat.completion` object. Thinking becomes `reasoning_content`;
//! tool input goes out as `arguments` fragments, the first chunk of a call carrying its id and
//! name, the rest `id`/`name` null (as OpenAI's own streaming example does).

use crate::events::{split_str, tool_id, TurnMeta};
use crate::scenario::{ScriptedBlock, ScriptedTurn};
use bytes::Bytes;
use rand::rngs::StdRng;
use serde_json::{json, Value};

/// `finish_reason` for the turn.
fn finish_reason(turn: &ScriptedTurn, truncate: bool) -> &'static str {
    if truncate {
        return "length";
    }
    match turn.stop_reason() {
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        _ => "stop",
    }
}

fn usage(turn: &ScriptedTurn, meta: &TurnMeta<'_>) -> Value {
    let u = &turn.usage;
    let cached = u.cache_read_input_tokens.unwrap_or(0);
    let prompt = u.input_tokens.unwrap_or(meta.input_estimate) + cached;
    let completion = u.output_tokens.unwrap_or(1);
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached}})
}

/// The chunks of one streamed turn (usage in a last chunk without choices, as
/// `stream_options.include_usage` asks). With `truncate`, the first call gets half its
/// arguments, later blocks are left out and `finish_reason` is `length`.
pub(crate) fn chat_chunks(
    turn: &ScriptedTurn,
    meta: &TurnMeta<'_>,
    truncate: bool,
    rng: &mut StdRng,
) -> Vec<Value> {
    let id = format!("chatcmpl-scripted-{}-{}", meta.entry, meta.k);
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": meta.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let mut call = 0u64;
    for (index, b) in turn.content.iter().enumerate() {
        match b {
            ScriptedBlock::Text { text } => {
                for t in split_str(text, 3, rng) {
                    out.push(chunk(json!({"content": t}), None));
                }
            }
            ScriptedBlock::Thinking { thinking, .. } => {
                for t in split_str(thinking, 3, rng) {
                    out.push(chunk(json!({"reasoning_content": t}), None));
                }
            }
            ScriptedBlock::ToolUse {
                name,
                input,
                id: fixed,
            } => {
                let cid = fixed
                    .clone()
                    .unwrap_or_else(|| tool_id(meta.entry, meta.k, index));
                let mut args = input.to_string();
                if truncate {
                    let half = args
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(args.chars().count() / 2)
                        .unwrap_or(0);
                    args.truncate(half);
                }
                out.push(chunk(
                    json!({"tool_calls": [{"index": call, "id": cid, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
                for f in split_str(&args, 4, rng) {
                    out.push(chunk(
                        json!({"tool_calls": [{"index": call, "id": null, "type": null,
                            "function": {"name": null, "arguments": f}}]}),
                        None,
                    ));
                }
                call += 1;
                if truncate {
                    break;
                }
            }
        }
    }
    out.push(chunk(json!({}), Some(finish_reason(turn, truncate))));
    out.push(
        json!({"id": id, "object": "chat.completion.chunk", "created": 0,
        "model": meta.model, "choices": [], "usage": usage(turn, meta)}),
    );
    out
}

/// The turn as one `chat.completion` object (a `stream: false` request, or a `json_answer`
/// fault).
pub(crate) fn chat_completion(turn: &ScriptedTurn, meta: &TurnMeta<'_>) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for (index, b) in turn.content.iter().enumerate() {
        match b {
            ScriptedBlock::Text { text: t } => text.push_str(t),
            ScriptedBlock::Thinking { thinking, .. } => reasoning.push_str(thinking),
            ScriptedBlock::ToolUse { name, input, id } => calls.push(json!({
                "id": id.clone().unwrap_or_else(|| tool_id(meta.entry, meta.k, index)),
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()}})),
        }
    }
    let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({"id": format!("chatcmpl-scripted-{}-{}", meta.entry, meta.k),
        "object": "chat.completion", "created": 0, "model": meta.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn, false)}],
        "usage": usage(turn, meta)})
}

/// One chunk as an SSE `data:` line.
pub(crate) fn encode_data(chunk: &Value) -> Bytes {
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// The Chat Completions text of a `system` message (string or text parts).
pub(crate) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use rand::SeedableRng;

    #[test]
    fn chunks_join_to_the_turn() {
        let s = Scenario::parse(
            r#"{"agents": [{"turns": [{"content": [{"type": "text", "text": "看一下"},
            {"type": "tool_use", "name": "Bash", "input": {"command": "ls 中"}}]}]}]}"#,
        )
        .unwrap();
        let turn = &s.agents[0].turns[0];
        let meta = TurnMeta {
            entry: 0,
            k: 0,
            model: "m",
            input_estimate: 5,
        };
        let chunks = chat_chunks(turn, &meta, false, &mut StdRng::seed_from_u64(1));
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "看一下");
        let args: String = chunks
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"command": "ls 中"})
        );
        let finish = &chunks[chunks.len() - 2]["choices"][0]["finish_reason"];
        assert_eq!(finish, "tool_calls");
        let whole = chat_completion(turn, &meta);
        assert_eq!(whole["choices"][0]["message"]["content"], "看一下");
        assert_eq!(
            whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
            "Bash"
        );
    }
}
