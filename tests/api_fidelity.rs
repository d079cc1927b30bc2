//! The defects a real model would hit (issue 15 §2), each with its failing input, end to end:
//! the real binary against the strict `scripted-model` over HTTP (which answers what the real
//! APIs refuse with their 400), the host sandbox, both providers where the defect is the
//! provider's.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;

use flowerbox::model::{Message, Speaker};
use flowerbox::role::Role;
use flowerbox::session::{SessionMeta, SessionStore, SqliteSessionStore};
use model_support::ScriptedModel;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Which wire format `once` speaks to the scripted server.
#[derive(Clone, Copy, Debug)]
enum Wire {
    Anthropic,
    OpenAi,
}

fn once(
    model: &ScriptedModel,
    wire: Wire,
    ws: &Path,
    args: &[&str],
    extra: &[(&str, &str)],
) -> Output {
    let home = ws.join(".home");
    std::fs::create_dir_all(&home).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", &home)
        .env("FLOWER_NO_PROBE", "1")
        .current_dir(ws)
        .stdin(Stdio::null());
    match wire {
        Wire::Anthropic => c
            .env("ANTHROPIC_BASE_URL", &model.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
        Wire::OpenAi => c
            .env("FLOWERBOX_PROVIDER", "openai")
            .env("OPENAI_BASE_URL", format!("{}/v1", model.url))
            .env("OPENAI_MODEL", "local-model"),
    };
    for (k, v) in extra {
        c.env(k, v);
    }
    c.args(["--sandbox", "host", "once"]).args(args);
    c.output().unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// No message of any recorded request is empty.
fn no_empty_message(requests: &[Value]) {
    for (n, r) in requests.iter().enumerate() {
        for m in r["messages"].as_array().unwrap() {
            let empty = match &m["content"] {
                Value::Array(a) => a.is_empty(),
                Value::String(s) => s.is_empty() && m.get("tool_calls").is_none(),
                Value::Null => m.get("tool_calls").is_none(),
                _ => false,
            };
            assert!(!empty, "request {n} carries an empty message: {m}");
        }
    }
}

#[test]
fn a_turn_cut_inside_its_only_tool_call_is_never_sent_or_stored() {
    let big = "x".repeat(400);
    let scenario = json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Write",
            "input": {"file_path": "big.txt", "content": big}}],
         "fault": {"truncate_tool_json": true, "times": 1}},
        {"content": [{"type": "text", "text": "写好了"}]}]}]});
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let model = ScriptedModel::start(&scenario);
        let ws = tempfile::tempdir().unwrap();
        let out = once(&model, wire, ws.path(), &["-t", "Write", "写个大文件"], &[]);
        assert!(out.status.success(), "{wire:?}: {}", show(&out));
        let requests = model.recorded();
        // Cut, asked again with the note, written, done: no request refused by the strict server.
        assert_eq!(requests.len(), 3, "{wire:?}");
        no_empty_message(&requests);
        assert!(
            requests[1].to_string().contains("max_tokens"),
            "{}",
            requests[1]
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("big.txt")).unwrap(),
            big
        );
        let store = SqliteSessionStore::open(ws.path().join("runs/sessions.db")).unwrap();
        let id = stored_session(ws.path());
        for m in store.load_raw(&id).unwrap() {
            assert!(!m.content.is_empty(), "{wire:?}: stored an empty message");
        }
    }
}

/// The session id of `once`'s step, from the manifest.
fn stored_session(ws: &Path) -> String {
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("runs/manifest.json")).unwrap())
            .unwrap();
    manifest[0]["session_id"].as_str().unwrap().to_string()
}

#[test]
fn an_old_session_holding_an_empty_assistant_message_resumes() {
    // What an older flowerbox stored after a turn cut inside its only tool call.
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("runs")).unwrap();
    let store = SqliteSessionStore::open(ws.path().join("runs/sessions.db")).unwrap();
    let id = store
        .create(&SessionMeta {
            agent: "ad-hoc".into(),
            role: Role::Once,
            step: Some("ad-hoc".into()),
            parent: None,
            run: "20260101-000000-abcdef".into(),
        })
        .unwrap();
    for m in [
        Message::user_text("写个大文件"),
        Message {
            role: Speaker::Assistant,
            content: vec![],
        },
        Message::user_text("[你上一条输出在 max_tokens 处被截断,正在写的那个工具调用没有执行。]"),
    ] {
        store.append(&id, &m, None).unwrap();
    }
    drop(store);
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "接着来"}]}]}]}));
    let out = once(
        &model,
        Wire::Anthropic,
        ws.path(),
        &["--resume", &id, "继续"],
        &[],
    );
    assert!(out.status.success(), "{}", show(&out));
    let requests = model.recorded();
    assert_eq!(requests.len(), 1);
    no_empty_message(&requests);
    assert!(String::from_utf8_lossy(&out.stdout).contains("接着来"));
}

#[test]
fn a_tool_input_that_is_not_an_object_gets_an_error_result_and_the_run_goes_on() {
    let scenario = json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Read", "input": "not-an-object"}]},
        {"content": [{"type": "text", "text": "改好了"}]}]}]});
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let model = ScriptedModel::start(&scenario);
        let ws = tempfile::tempdir().unwrap();
        let out = once(&model, wire, ws.path(), &["读一下"], &[]);
        assert!(out.status.success(), "{wire:?}: {}", show(&out));
        let requests = model.recorded();
        assert_eq!(
            requests.len(),
            2,
            "{wire:?}: one paid request per turn, no retries"
        );
        let answer = requests[1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        let text = answer.to_string();
        assert!(text.contains("not-an-object"), "{wire:?}: {answer}");
        match wire {
            Wire::Anthropic => assert_eq!(answer["content"][0]["is_error"], true, "{answer}"),
            Wire::OpenAi => assert!(text.contains("[error]"), "{answer}"),
        }
        let manifest = std::fs::read_to_string(ws.path().join("runs/manifest.json")).unwrap();
        assert!(manifest.contains("\"ok\": true") || manifest.contains("\"ok\":true"));
    }
}

#[test]
fn a_whole_json_answer_to_a_streamed_request_is_one_turn() {
    let scenario = json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "先看看"},
                     {"type": "tool_use", "name": "Glob", "input": {"pattern": "*"}}],
         "fault": {"json_answer": true}},
        {"content": [{"type": "text", "text": "看完了"}], "fault": {"json_answer": true}}]}]});
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let model = ScriptedModel::start(&scenario);
        let ws = tempfile::tempdir().unwrap();
        let out = once(&model, wire, ws.path(), &["看看"], &[]);
        assert!(out.status.success(), "{wire:?}: {}", show(&out));
        assert_eq!(model.recorded().len(), 2);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("看完了"), "{stdout}");
    }
}

#[test]
fn openai_without_streaming_when_configured() {
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Glob", "input": {"pattern": "*"}}]},
        {"content": [{"type": "text", "text": "不流式也行"}]}]}]}));
    let ws = tempfile::tempdir().unwrap();
    let out = once(
        &model,
        Wire::OpenAi,
        ws.path(),
        &["看看"],
        &[
            ("FLOWERBOX_OPENAI_STREAM", "0"),
            ("FLOWERBOX_MAX_TOKENS", "777"),
        ],
    );
    assert!(out.status.success(), "{}", show(&out));
    let requests = model.recorded();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r["stream"], false, "{r}");
        assert_eq!(r["max_tokens"], 777, "{r}");
        assert_eq!(r["tool_choice"], "auto", "{r}");
    }
    assert!(String::from_utf8_lossy(&out.stdout).contains("不流式也行"));
}

#[test]
fn an_uncatalogued_model_gets_a_modest_max_tokens() {
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "好"}]}]}]}));
    let ws = tempfile::tempdir().unwrap();
    let out = once(&model, Wire::OpenAi, ws.path(), &["hi"], &[]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(model.recorded()[0]["max_tokens"], 4096);
}
