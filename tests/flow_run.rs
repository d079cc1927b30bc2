//! `flowerbox run FILE:NAME` end to end: the shipped `examples/flows.toml:main` runs against
//! `scripted-model` (clarify → goal → judged work → summary), and a file with a mistake is
//! refused before anything runs, naming the step and the field.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod flow_support;

use flow_support::*;

fn example() -> String {
    format!("{}/examples/flows.toml:main", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_example_workflow_runs() {
    let p = Project::new();
    let model = ScriptedModel::start(&scenario("flow_run"));
    let r = p.run(&model, &["run", &example()]);
    assert_eq!(r.code(), 0, "{r:?}");
    let runs = p.runs_in_manifest();
    assert_eq!(
        p.steps_of(&runs[0]),
        ["确认需求", "设定目标", "干活", "干活·判定#1", "总结"]
    );
    assert!(p.note("需求.md").exists() && p.note("目标.md").exists());
    // Templates were filled: the work step got the brief and the goal, the summary the
    // coordinator's final words.
    let work = requests_with(&model, "你是协调者")[0]["messages"].to_string();
    assert!(work.contains("写一个 hello.sh,运行它打印 hello"), "{work}");
    assert!(work.contains("test -x hello.sh"), "{work}");
    let summary = requests_with(&model, "回话格式固定四段")[0]["messages"].to_string();
    assert!(summary.contains("做完了:hello.sh 在工作区。"), "{summary}");
    assert_eq!(p.lineage()["woke"], 1);
    let last = r.out.lines().last().unwrap();
    assert!(
        last.starts_with("总花费 $") && last.contains("清单 "),
        "{last}"
    );
}

#[test]
fn a_bad_workflow_file_is_refused_before_anything_runs() {
    let p = Project::new();
    let model = ScriptedModel::start(&serde_json::json!({"agents": []}));
    std::fs::write(
        p.ws.join("flows.toml"),
        "[main]\n[[main.steps]]\nname = \"干活\"\nrole = \"coordinator\"\nprompt = \"{{确认需求}}\"\n",
    )
    .unwrap();
    let r = p.run(&model, &["run", "flows:main"]);
    assert_eq!(r.code(), 1);
    assert_eq!(
        r.err,
        "导入 'flows' 失败:'main' 步骤 1「干活」的 prompt:{{确认需求}} 不是前面步骤的名字(可用:ask、brief、goal)\n"
    );
    assert!(model.recorded().is_empty());
    assert!(!p.runs("manifest.json").exists());
}

/// A workflow file's `when` on an earlier step's outcome, and a worker whose answer lacks the
/// four sections: the re-ask is said on screen (it used to surface only as the scripted
/// server's "asks for turn k=2" error).
#[test]
fn when_conditions_pick_the_steps_and_the_report_re_ask_is_visible() {
    let p = Project::new();
    std::fs::write(
        p.ws.join("flows.toml"),
        r#"
[main]
handoff = false
window = 400000

[[main.steps]]
name = "测试"
role = "worker"
prompt = "跑测试"
max_turns = 1
on_fail = "continue"

[[main.steps]]
name = "修"
role = "worker"
prompt = "修一下"
when = { step = "测试", outcome = "failed" }

[[main.steps]]
name = "收尾"
role = "worker"
prompt = "收尾"
when = { step = "测试", outcome = "ok" }
"#,
    )
    .unwrap();
    let model = ScriptedModel::start(&serde_json::json!({"agents": [
        {"role": "worker", "prompt": "跑测试", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "exit 1"}}]}]},
        {"role": "worker", "prompt": "修一下", "turns": [
            {"content": [{"type": "text", "text": "修好了"}]},
            {"content": [{"type": "text", "text": "结论:修好了\n依据:重跑通过\n产出:无\n未验证:无"}]}]}]}));
    let r = p.run(&model, &["run", "flows:main"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let runs = p.runs_in_manifest();
    assert_eq!(
        p.steps_of(&runs[0]),
        ["测试", "修"],
        "收尾 skipped by its when"
    );
    assert!(
        r.out
            .contains("的回话不是四段报告(缺少:结论、依据、产出、未验证)"),
        "{}",
        r.out
    );
}
