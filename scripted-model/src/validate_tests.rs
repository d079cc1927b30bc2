//! Each rule of [`check_messages_request`] against the request that breaks it, with the real
//! API's message.

use super::*;
use serde_json::json;

fn any_sig(_: &str, s: &str) -> bool {
    s == "sig"
}

fn check(req: Value) -> Result<(), String> {
    check_messages_request(&req, &any_sig).map_err(|r| r.0)
}

fn req(messages: Value) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages})
}

fn use_(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}})
}

fn result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
}

fn err(r: Result<(), String>) -> String {
    r.expect_err("the real API refuses this")
}

#[test]
fn a_valid_tool_loop_passes() {
    let r = req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "looking"}, use_("a"), use_("b")]},
        {"role": "user", "content": [result("b"), result("a"), {"type": "text", "text": "more"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "sig"},
            {"type": "text", "text": "done"}]},
        {"role": "user", "content": "next"}
    ]));
    check(r).unwrap();
}

#[test]
fn empty_content_is_refused_except_a_final_assistant_message() {
    let e = err(check(req(json!([
        {"role": "user", "content": "write it"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": "[cut off]"}
    ]))));
    assert_eq!(
        e,
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    );
    check(req(
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": []}]),
    ))
    .unwrap();
    let e = err(check(req(json!([{"role": "user", "content": ""}]))));
    assert!(e.starts_with("messages.0: all messages"), "{e}");
}

#[test]
fn text_blocks_must_hold_text() {
    let e = err(check(req(
        json!([{"role": "user", "content": [{"type": "text", "text": ""}]}]),
    )));
    assert_eq!(e, "messages: text content blocks must be non-empty");
    let e = err(check(req(
        json!([{"role": "user", "content": [{"type": "text", "text": " \n"}]}]),
    )));
    assert_eq!(
        e,
        "messages: text content blocks must contain non-whitespace text"
    );
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Sure "}
    ]))));
    assert!(e.contains("trailing whitespace"), "{e}");
}

#[test]
fn every_tool_use_is_answered_first_in_the_next_message() {
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use_("a"), use_("b")]},
        {"role": "user", "content": [result("a")]}
    ]))));
    assert_eq!(
        e,
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: b. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    );
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use_("a")]},
        {"role": "user", "content": [{"type": "text", "text": "first"}, result("a")]}
    ]))));
    assert!(
        e.starts_with("messages.2: Did not find 1 `tool_result` block(s)"),
        "{e}"
    );
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        {"role": "user", "content": [result("ghost")]}
    ]))));
    assert!(
        e.starts_with(
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: ghost."
        ),
        "{e}"
    );
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use_("a"), use_("a")]},
        {"role": "user", "content": [result("a")]}
    ]))));
    assert_eq!(e, "messages.1.content.1: `tool_use` ids must be unique");
}

#[test]
fn a_tool_input_must_be_an_object() {
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Bash", "input": "not-an-object"}]},
        {"role": "user", "content": [result("a")]}
    ]))));
    assert_eq!(
        e,
        "messages.1.content.0.tool_use.input: Input should be a valid dictionary"
    );
}

#[test]
fn at_most_four_cache_breakpoints_none_on_empty_text() {
    let cc = json!({"type": "ephemeral"});
    let mut r = req(json!([{"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": cc},
        {"type": "text", "text": "b", "cache_control": cc}]}]));
    r["system"] = json!([{"type": "text", "text": "s", "cache_control": cc}]);
    r["tools"] = json!([{"name": "A", "input_schema": {"type": "object"}, "cache_control": cc},
                        {"name": "B", "input_schema": {"type": "object"}, "cache_control": cc}]);
    assert_eq!(
        err(check(r)),
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    let mut r = req(json!([{"role": "user", "content": "x"}]));
    r["system"] = json!([{"type": "text", "text": "", "cache_control": cc}]);
    assert!(err(check(r)).contains("empty text blocks"));
}

#[test]
fn tools_are_named_and_described_as_documented() {
    let mut r = req(json!([{"role": "user", "content": "x"}]));
    r["tools"] = json!([{"name": "mcp__human__ask", "input_schema": {"type": "object"}},
                        {"name": "has space", "input_schema": {"type": "object"}}]);
    assert_eq!(
        err(check(r.clone())),
        "tools.1.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'"
    );
    r["tools"] = json!([{"name": "A", "input_schema": {"type": "object"}},
                        {"name": "A", "input_schema": {"type": "object"}}]);
    assert_eq!(err(check(r.clone())), "tools: Tool names must be unique.");
    r["tools"] = json!([{"name": "A", "input_schema": {"type": "string"}}]);
    assert!(err(check(r.clone())).contains("JSON schema is invalid"));
    r["tools"] = json!([{"name": "A", "input_schema": {"anyOf": []}}]);
    assert!(err(check(r.clone())).contains("oneOf, allOf, or anyOf"));
    r["tools"] = json!([{"name": "A"}]);
    assert_eq!(err(check(r)), "tools.0.custom.input_schema: Field required");
}

#[test]
fn max_tokens_within_the_models_cap() {
    let mut r = req(json!([{"role": "user", "content": "x"}]));
    r["max_tokens"] = json!(64_001);
    assert_eq!(
        err(check(r.clone())),
        "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5"
    );
    r["model"] = json!("my-local-model");
    check(r.clone()).unwrap();
    r.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(err(check(r)), "max_tokens: Field required");
}

#[test]
fn thinking_blocks_come_back_unchanged() {
    let convo = |sig: &str| {
        req(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": sig}, use_("a")]},
            {"role": "user", "content": [result("a")]}
        ]))
    };
    check(convo("sig")).unwrap();
    assert_eq!(
        err(check(convo("forged"))),
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );
    // With thinking on, the final assistant message of a tool loop starts with thinking.
    let mut r = req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "go"}, use_("a")]},
        {"role": "user", "content": [result("a")]}
    ]));
    r["thinking"] = json!({"type": "enabled", "budget_tokens": 2000});
    assert!(err(check(r)).starts_with(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."
    ));
    // With it off, a final (prefilled) assistant message holds none.
    let e = err(check(req(json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "sig"}]}
    ]))));
    assert!(e.contains("When thinking is disabled"), "{e}");
}
