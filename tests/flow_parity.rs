//! flower parity and honest records (issue 20), end to end: the real binary against the strict
//! `scripted-model`. Each test names the input that showed the gap.
//!
//! Sandbox: `--sandbox host` by default (`FLOWERBOX_TEST_SANDBOX=docker` for containers).

mod flow_support;

use flow_support::*;
use serde_json::json;

/// A brief with all four sections.
const BRIEF: &str = "## 目标\n写一个 hello.sh\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n不做 Web 界面\n\n## 未知与假设\n- 无\n";

/// The clarifier has flower's WebFetch, under the run's egress policy: a fetch of the host's
/// loopback is refused like an agent's.
#[test]
fn the_clarifier_fetches_under_the_egress_policy() {
    let p = Project::new();
    let model = ScriptedModel::start(&json!({"agents": [{"role": "clarifier", "turns": [
        {"content": [{"type": "tool_use", "name": "WebFetch",
                      "input": {"url": "http://127.0.0.1:9/spec.html"}}]},
        {"content": [{"type": "text", "text": BRIEF}]}]}]}));
    let r = p.run(
        &model,
        &[
            "--timeout",
            "0",
            "--clarify-only",
            "照 http://127.0.0.1:9/spec.html 写",
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let first = &requests_with(&model, "你是确认者")[0];
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"WebFetch"), "{tools:?}");
    assert!(!tools.contains(&"WebSearch"), "{tools:?}");
    let second = &requests_with(&model, "你是确认者")[1];
    let result = second["messages"][2]["content"][0].clone();
    assert_eq!(result["type"], "tool_result", "{result}");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"].to_string().contains("127.0.0.1"),
        "refused by the egress policy: {result}"
    );
}

/// A TodoWrite turn of the coordinator (a host-side tool: no container needed).
fn todo(n: u32, usage: Option<u64>) -> serde_json::Value {
    let mut turn = json!({"content": [
        {"type": "text", "text": format!("第 {n} 步")},
        {"type": "tool_use", "name": "TodoWrite",
         "input": {"todos": [{"content": format!("做第 {n} 件事"), "status": "in_progress"}]}}]});
    if let Some(tokens) = usage {
        turn["usage"] = json!({"input_tokens": tokens, "output_tokens": 20});
    }
    turn
}

/// `--no-handoff` near the window: flower falls back to compaction; so does flowerbox. The
/// oldest turns become one summary, the first prompt (brief) and the recent turns stay, and
/// the strict server accepts the compacted conversation (every tool_use still paired).
#[test]
fn no_handoff_near_the_window_compacts_instead_of_failing() {
    let p = Project::new();
    let model = ScriptedModel::start(&json!({"agents": [
        // The summary call: tool-free, over a transcript of the folded turns.
        {"role": "coordinator", "prompt": "把它压缩成一段摘要", "turns": [
            {"content": [{"type": "text", "text": "摘要:前两步各写了一条待办。"}]}]},
        // The coordinator after the compaction: its history starts with the summary, and holds
        // two assistant turns (the recent half), so its next turn is number 2.
        {"role": "coordinator", "prompt": "较早的对话已压缩成下面这段摘要", "turns": [
            {"content": [{"type": "text", "text": "不该到这里"}]},
            {"content": [{"type": "text", "text": "不该到这里"}]},
            {"content": [{"type": "text", "text": "压缩之后接着做完了。"}]}]},
        {"role": "coordinator", "turns": [
            todo(1, None), todo(2, None), todo(3, None),
            // 12,000 tokens in a 40,000 window: past window − 33,000 (floored at 10,000).
            todo(4, Some(12_000))]},
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]}]}));
    let r = p.run(
        &model,
        &[
            "--timeout",
            "0",
            "--no-goal",
            "--no-handoff",
            "--window",
            "40000",
            "写个 hello.sh",
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(
        r.out
            .contains("换代关着,压缩:较早的 4 条消息换成一段摘要,最近 4 条原样留着"),
        "{}",
        r.out
    );
    assert!(r.out.contains("压缩之后接着做完了。"), "{}", r.out);

    let summary_call = &requests_with(&model, "你负责压缩一段工作记录")[0];
    assert!(
        summary_call
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "{summary_call}"
    );
    let transcript = summary_call["messages"][0]["content"].to_string();
    assert!(
        transcript.contains("做第 1 件事") && transcript.contains("做第 2 件事"),
        "{transcript}"
    );
    assert!(
        !transcript.contains("做第 4 件事"),
        "recent turns are not folded: {transcript}"
    );

    let after: Vec<_> = requests_with(&model, "你是协调者")
        .into_iter()
        .filter(|b| {
            b["messages"]
                .to_string()
                .contains("较早的对话已压缩成下面这段摘要")
        })
        .collect();
    assert_eq!(after.len(), 1, "one request after the compaction");
    let msgs = after[0]["messages"].as_array().unwrap();
    let head = msgs[0]["content"].to_string();
    assert!(head.contains("写一个 hello.sh"), "the brief stays: {head}");
    assert!(head.contains("摘要:前两步各写了一条待办。"), "{head}");
    assert_eq!(msgs[1]["role"], "assistant");
    assert!(msgs[1].to_string().contains("做第 3 件事"), "{}", msgs[1]);
    assert!(msgs
        .last()
        .unwrap()
        .to_string()
        .contains("较早的对话刚被压缩成开头那段摘要"));

    // The books: one step, ok, the overflowing session retired (kept whole), lineage on the
    // compacted successor.
    let row = p
        .manifest()
        .into_iter()
        .find(|r| r["step"] == "干活")
        .unwrap();
    assert_eq!(row["ok"], true, "{row}");
    assert_eq!(row["retired"].as_array().unwrap().len(), 1, "{row}");
    assert_eq!(p.lineage()["steps"]["干活"], row["session_id"]);
}

/// A workflow file's `window` and `handoff` take effect (issue 20, custom workflows): with
/// `window = 40000` and `handoff = false` the coordinator's step compacts at 12,000 tokens, as
/// `go --window 40000 --no-handoff` does. Without `window` the step would run on the model's
/// 200,000 and ask for a fifth turn; with a handoff it would hand off instead.
#[test]
fn a_workflow_files_window_and_handoff_take_effect() {
    let p = Project::new();
    std::fs::write(
        p.ws.join("flows.toml"),
        "[main]\nwindow = 40000\nhandoff = false\ntimeout = 0\n\
         [[main.steps]]\nname = \"干活\"\nrole = \"coordinator\"\nprompt = \"写个 hello.sh\"\n",
    )
    .unwrap();
    let model = ScriptedModel::start(&json!({"agents": [
        {"role": "coordinator", "prompt": "把它压缩成一段摘要", "turns": [
            {"content": [{"type": "text", "text": "摘要:前两步各写了一条待办。"}]}]},
        {"role": "coordinator", "prompt": "较早的对话已压缩成下面这段摘要", "turns": [
            {"content": [{"type": "text", "text": "不该到这里"}]},
            {"content": [{"type": "text", "text": "不该到这里"}]},
            {"content": [{"type": "text", "text": "压缩之后接着做完了。"}]}]},
        {"role": "coordinator", "turns": [
            todo(1, None), todo(2, None), todo(3, None), todo(4, Some(12_000))]}]}));
    let r = p.run(&model, &["run", "flows:main"]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(
        r.out
            .contains("换代关着,压缩:较早的 4 条消息换成一段摘要,最近 4 条原样留着"),
        "{}",
        r.out
    );
    assert!(r.out.contains("压缩之后接着做完了。"), "{}", r.out);
}

/// UNREACHABLE with no 理由 section: the stop names the default reason, not an empty colon.
#[test]
fn unreachable_without_a_reason_prints_the_default_reason() {
    let p = Project::new();
    let mut s = scenario("flow_unreachable");
    let mut changed = false;
    for agent in s["agents"].as_array_mut().unwrap() {
        for turn in agent["turns"].as_array_mut().unwrap() {
            for block in turn["content"].as_array_mut().unwrap() {
                if block["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("UNREACHABLE"))
                {
                    block["text"] = json!("## 结论\nUNREACHABLE\n");
                    changed = true;
                }
            }
        }
    }
    assert!(changed);
    let model = ScriptedModel::start(&s);
    let r = p.run(&model, &["--timeout", "0", "写个 hello.sh"]);
    assert_eq!(r.code(), 1, "{r:?}");
    let all = format!("{}{}", r.out, r.err);
    assert!(
        all.contains("目标被判为无法达成,没人应答:判定者没写理由"),
        "{all}"
    );
    assert!(!all.contains("没人应答:\n"), "{all}");
}

/// A brief missing sections stops the run: the screen names them, and the books record the
/// step as failed with that reason (it used to be `ok: true, error: null`).
#[test]
fn a_brief_missing_sections_stops_and_says_which() {
    let p = Project::new();
    let model = ScriptedModel::start(&json!({"agents": [{"role": "clarifier", "turns": [
        {"content": [{"type": "text", "text": "## 目标\n写一个 hello.sh\n"}]}]}]}));
    let r = p.run(&model, &["--timeout", "0", "写个 hello.sh"]);
    assert_eq!(r.code(), 1, "{r:?}");
    assert!(r.err.contains("在步骤 '确认需求' 中止"), "{}", r.err);
    assert!(
        r.out
            .contains("需求确认书不完整,缺:验收标准、边界、未知与假设"),
        "{}",
        r.out
    );
    let row = p
        .manifest()
        .into_iter()
        .find(|r| r["step"] == "确认需求")
        .unwrap();
    assert_eq!(row["ok"], false, "{row}");
    assert_eq!(
        row["error"], "需求确认书不完整,缺:验收标准、边界、未知与假设",
        "{row}"
    );
}

/// `--clarify-only` with a request on a clarified directory: a no-op as in flower, said so;
/// the brief is not amended, no goal re-derivation is promised, the cost is never `$-0`.
#[test]
fn clarify_only_on_a_clarified_directory_leaves_the_brief_alone() {
    let p = Project::new();
    let model = ScriptedModel::start(&json!({"agents": [{"role": "clarifier", "turns": [
        {"content": [{"type": "text", "text": BRIEF}]}]}]}));
    assert_eq!(
        p.run(
            &model,
            &["--timeout", "0", "--clarify-only", "写个 hello.sh"]
        )
        .code(),
        0
    );
    let before = std::fs::read_to_string(p.note("需求.md")).unwrap();
    let r = p.run(&model, &["--timeout", "0", "--clarify-only", "顺便支持 Y"]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(p.note("需求.md")).unwrap(), before);
    assert!(r.out.contains("--clarify-only 不改它"), "{}", r.out);
    assert!(!r.out.contains("目标会按它重新设定"), "{}", r.out);
    let last = r.out.lines().last().unwrap();
    assert!(last.starts_with("总花费 $0.0000 · "), "{last}");
    assert_eq!(
        requests_with(&model, "你是确认者").len(),
        1,
        "asked nothing again"
    );
}

/// The workbench index is in the coordinator's system prompt, as in flower, and rebuilt when it
/// is woken: a script written between two runs is in the woken coordinator's index (issue 29
/// §2.2: it sat in the first user message, so a resumed session kept its first start's index).
/// Its workers have WebFetch, so it has WebFetch too (flower merges their web tools, §2.3).
#[test]
fn a_woken_coordinator_sees_the_current_workbench_index() {
    let p = Project::new();
    let model = ScriptedModel::start(&scenario("flow_go"));
    assert_eq!(
        p.run(&model, &["--timeout", "0", "写个 hello.sh"]).code(),
        0
    );
    let first = &requests_with(&model, "你是协调者")[0];
    assert!(
        first["system"].to_string().contains("# 工作台索引"),
        "{}",
        first["system"]
    );
    assert!(!first["messages"].to_string().contains("工作台索引"));
    assert!(!first["system"].to_string().contains("check-hello.sh"));
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"WebFetch"), "{tools:?}");
    drop(model);

    std::fs::write(
        p.ws.join(".flower/scripts/check-hello.sh"),
        "#!/bin/sh\n# desc: 检查 hello 和 bye\n./hello.sh\n",
    )
    .unwrap();
    let model = ScriptedModel::start(&scenario("flow_wake"));
    let r = p.run(&model, &["--timeout", "0", "顺便让它再打印 bye"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let woken = &requests_with(&model, "你是协调者")[0];
    assert!(
        woken["messages"]
            .to_string()
            .contains("人在唤醒时补充了一句"),
        "the resumed session: {}",
        woken["messages"]
    );
    let system = woken["system"].to_string();
    assert!(
        system.contains("scripts/check-hello.sh — 检查 hello 和 bye"),
        "{system}"
    );
    // Once: the block replaced the first start's, it is not in the history either.
    assert_eq!(system.matches("# 工作台索引").count(), 1, "{system}");
    assert!(!woken["messages"].to_string().contains("工作台索引"));
}
