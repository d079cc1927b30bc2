//! The Chat Completions request rules the scripted server enforces on
//! `POST /v1/chat/completions`, with OpenAI's error texts (HTTP 400, `invalid_request_error`,
//! `param` naming the message): a `tool` message answers a `tool_calls` id of the assistant
//! message before it; every `tool_calls` id is answered by the `tool` messages right after;
//! `function.arguments` is a string; `messages` and `model` are present.

use serde_json::Value;

/// A refusal: the message and the `param` it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRefusal {
    /// OpenAI's message text.
    pub message: String,
    /// The offending parameter (`messages.[3].role`), if any.
    pub param: Option<String>,
}

fn refuse(message: impl Into<String>, param: Option<String>) -> ChatRefusal {
    ChatRefusal {
        message: message.into(),
        param,
    }
}

/// Checks one Chat Completions request body.
pub fn check_chat_request(req: &Value) -> Result<(), ChatRefusal> {
    if req["model"].as_str().is_none() {
        return Err(refuse("you must provide a model parameter", None));
    }
    let Some(messages) = req["messages"].as_array() else {
        return Err(refuse(
            "Missing required parameter: 'messages'.",
            Some("messages".into()),
        ));
    };
    // Ids of the last assistant message's calls still waiting for their `tool` message.
    let mut open: Vec<String> = Vec::new();
    let mut open_at = 0usize;
    // True while the messages right after an assistant message with calls are `tool` ones.
    let mut answering = false;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            if !answering || !open.iter().any(|o| o == id) {
                return Err(refuse(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    Some(format!("messages.[{i}].role")),
                ));
            }
            open.retain(|o| o != id);
            continue;
        }
        if !open.is_empty() {
            return Err(refuse(
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    open.join(", ")
                ),
                Some(format!("messages.[{open_at}].role")),
            ));
        }
        answering = false;
        if role == "assistant" {
            if let Some(calls) = m["tool_calls"].as_array() {
                for (j, c) in calls.iter().enumerate() {
                    if !c["function"]["arguments"].is_string() {
                        return Err(refuse(
                            format!(
                                "Invalid type for 'messages[{i}].tool_calls[{j}].function.arguments': expected a string, but got an object instead."
                            ),
                            Some(format!("messages[{i}].tool_calls[{j}].function.arguments")),
                        ));
                    }
                    open.push(c["id"].as_str().unwrap_or_default().to_string());
                }
                answering = !calls.is_empty();
                open_at = i + 1;
            }
        }
    }
    if !open.is_empty() {
        return Err(refuse(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                open.join(", ")
            ),
            Some(format!("messages.[{open_at}].role")),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "Bash", "arguments": "{}"}})
    }

    #[test]
    fn tool_messages_answer_the_previous_calls() {
        let ok = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "user", "content": "more"}]});
        check_chat_request(&ok).unwrap();

        let missing = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "user", "content": "more"}]});
        let e = check_chat_request(&missing).unwrap_err();
        assert!(
            e.message.ends_with("did not have response messages: b"),
            "{e:?}"
        );
        assert_eq!(e.param.as_deref(), Some("messages.[2].role"));

        let stray = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "a", "content": "A"}]});
        let e = check_chat_request(&stray).unwrap_err();
        assert!(
            e.message.contains("role 'tool' must be a response"),
            "{e:?}"
        );
        assert_eq!(e.param.as_deref(), Some("messages.[1].role"));

        let object_args = json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                "function": {"name": "Bash", "arguments": {"command": "ls"}}}]},
            {"role": "tool", "tool_call_id": "a", "content": "A"}]});
        assert!(check_chat_request(&object_args)
            .unwrap_err()
            .message
            .contains("expected a string"));
    }
}
