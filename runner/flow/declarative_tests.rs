//! Unit tests of workflow files: the shipped example loads, every mistake is a message naming
//! the step and field, and templates fill from the context.

use std::path::Path;

use super::declarative::load;
use super::template::{fill, placeholders};
use super::*;
use crate::role::Role;

const EXAMPLE: &str = include_str!("../../examples/flows.toml");

fn table(text: &str, name: &str) -> toml::Table {
    let mut doc: toml::Table = text.parse().unwrap();
    match doc.remove(name) {
        Some(toml::Value::Table(t)) => t,
        other => panic!("{other:?}"),
    }
}

fn err(text: &str) -> String {
    match load(&table(text, "main"), Path::new("/ws"), None) {
        Ok(d) => panic!("accepted: {:?}", d.steps),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_example_loads() {
    let main = load(&table(EXAMPLE, "main"), Path::new("/ws"), None).unwrap();
    let names: Vec<&str> = main.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["确认需求", "设定目标", "干活", "总结"]);
    assert_eq!(main.workbench.as_deref(), Some(Path::new("/ws/.flower")));
    assert_eq!(
        main.brief_path.as_deref(),
        Some(Path::new("/ws/.flower/notes/需求.md"))
    );
    assert_eq!(main.timeout_s, 1800.0);
    assert_eq!(main.max_asks, None);
    assert!(main.continuous);
    let work = &main.steps[2];
    assert_eq!(work.spec.role, Role::Coordinator);
    assert_eq!(work.retries, 2, "rounds = 3");
    assert!(work.gate.is_some() && work.on_reject.is_some());
    assert!(work.resume_prompt.is_some());
    let summary = &main.steps[3];
    assert_eq!(summary.spec.role, Role::Worker);
    assert_eq!(summary.spec.tools, ["Read", "Glob", "Grep"]);
    assert!(summary.gate.is_none());

    let review = load(&table(EXAMPLE, "review"), Path::new("/ws"), None).unwrap();
    assert!(!review.continuous);
    assert_eq!(review.workbench, None, "no mechanism, no -W: no workbench");
    let with_w = load(
        &table(EXAMPLE, "review"),
        Path::new("/ws"),
        Some("/runs/workbench".into()),
    )
    .unwrap();
    assert_eq!(
        with_w.workbench.as_deref(),
        Some(Path::new("/runs/workbench"))
    );
}

#[test]
fn mistakes_name_the_step_and_the_field() {
    let cases: &[(&str, &str)] = &[
        ("[main]\nstepz = []\n", "流程:unknown field `stepz`"),
        ("[main]\n", "steps:一个步骤都没有"),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrolee = \"worker\"\n",
            "步骤 1「A」的 rolee:agent 步骤没有这个字段",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nprompt = \"x\"\n",
            "步骤 1「A」的 role:agent 步骤要写 role",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"boss\"\nprompt = \"x\"\n",
            "步骤 1「A」的 role:不认识 \"boss\"",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"clarifier\"\nprompt = \"x\"\ntools = [\"Read\", \"Write\"]\n",
            "步骤 1「A」的 tools:这个角色不能有 Write",
        ),
        (
            // No container, so no MCP server either.
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"clarifier\"\nprompt = \"x\"\ntools = [\"Read\", \"mcp__db\"]\n",
            "步骤 1「A」的 tools:这个角色不能有 mcp__db",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"{{B}}\"\n[[main.steps]]\nname = \"B\"\nrole = \"worker\"\nprompt = \"x\"\n",
            "步骤 1「A」的 prompt:{{B}} 不是前面步骤的名字",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"coordinator\"\nprompt = \"x\"\ngoal = true\n",
            "步骤 1「A」的 goal:要判定就得先有一个 kind = \"goal\" 的步骤",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\nresume_from = \"Z\"\n",
            "步骤 1「A」的 resume_from:前面没有叫「Z」的步骤",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\nfork = true\n",
            "步骤 1「A」的 fork:只和 resume_from 一起用",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"y\"\n",
            "步骤 2「A」的 name:和前面的步骤重名",
        ),
        (
            "[main]\n[[main.steps]]\nkind = \"judge\"\n",
            "步骤 1 的 kind:不认识 \"judge\"",
        ),
        (
            "[main]\n[[main.steps]]\nkind = \"clarify\"\n",
            "步骤 1「确认需求」的 prompt:用了 {{ask}},可流程里没写 ask",
        ),
        (
            "[main]\n[[main.steps]]\nkind = \"clarify\"\nrole = \"worker\"\n",
            "步骤 1 的 role:clarify 步骤没有这个字段",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\non_fail = \"explode\"\n",
            "步骤 1「A」的 on_fail:不认识 \"explode\"",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\nretries = \"two\"\n",
            "步骤 1「A」的 字段:invalid type: string \"two\", expected u32",
        ),
        (
            "[main]\n[[main.steps]]\nname = \"A\"\nrole = \"worker\"\nprompt = \"x\"\nworkers = []\n",
            "步骤 1「A」的 workers:只有 coordinator 能派执行者",
        ),
        (
            "[main]\nask = \"x\"\n[[main.steps]]\nkind = \"clarify\"\n[[main.steps]]\nkind = \"goal\"\n[[main.steps]]\nname = \"W\"\nrole = \"coordinator\"\nprompt = \"x\"\ngoal = { rounds = 2, judge = true }\n",
            "步骤 3「W」的 goal:unknown field `judge`",
        ),
        (
            "[main]\nask = \"x\"\n[[main.steps]]\nkind = \"clarify\"\n[[main.steps]]\nkind = \"goal\"\n[[main.steps]]\nname = \"W\"\nrole = \"coordinator\"\nprompt = \"x\"\ngoal = { checks = [\"make\", \" \"] }\n",
            "步骤 3「W」的 goal:checks 的第 2 条是空的",
        ),
        (
            "[main]\nask = \"x\"\n[[main.steps]]\nkind = \"clarify\"\n[[main.steps]]\nkind = \"goal\"\n[[main.steps]]\nname = \"W\"\nrole = \"coordinator\"\nprompt = \"x\"\ngoal = { checks = \"make\" }\n",
            "步骤 3「W」的 goal:invalid type: string \"make\", expected a sequence",
        ),
    ];
    for (text, expected) in cases {
        let got = err(text);
        assert!(
            got.starts_with(expected),
            "{text}\n  got: {got}\n want: {expected}"
        );
    }
}

#[test]
fn a_goal_wrapped_step_gets_rounds_and_a_judge_that_may_run() {
    let d = load(
        &table(
            "[main]\nask = \"x\"\n[[main.steps]]\nkind = \"clarify\"\n[[main.steps]]\nkind = \"goal\"\ncan_run = true\n\
             [[main.steps]]\nname = \"W\"\nrole = \"coordinator\"\nprompt = \"{{确认需求}} {{goal}}\"\n\
             workers = [{ kind = \"tester\", description = \"跑测试\", tools = [\"Read\", \"Bash\", \"mcp__db\"] }]\n\
             goal = { rounds = 5, can_run = true, checks = [\"make test\"], probe_checks = true }\n",
            "main",
        ),
        Path::new("/ws"),
        None,
    )
    .unwrap();
    let w = &d.steps[2];
    assert_eq!(w.retries, 4);
    assert_eq!(w.spec.workers.len(), 1);
    assert_eq!(w.spec.workers[0].kind, "tester");
    // A worker may have the project's MCP tools (its servers run in its container).
    assert_eq!(w.spec.workers[0].spec.tools, ["Read", "Bash", "mcp__db"]);
}

#[test]
fn templates_fill_from_the_context() {
    assert_eq!(placeholders("a {{ x }} b {{y}}{{"), ["x", "y"]);
    let mut ctx = Ctx::default().with_var("ask", "做 X");
    ctx.outputs
        .insert("确认需求".into(), "## 目标\n做 X".into());
    let out = fill(
        "要:{{ask}}\n需求:{{确认需求}}\n缺:{{干活}}\n{{goal}}",
        &ctx,
        None,
    );
    assert_eq!(
        out,
        "要:做 X\n需求:## 目标\n做 X\n缺:(步骤「干活」没有产出)\n(步骤「goal」没有产出)"
    );
    assert_eq!(
        fill("{{ask}} 不闭合 {{", &Ctx::default(), Some("文件里的")),
        "文件里的 不闭合 {{"
    );
}

#[test]
fn isolate_window_and_handoff_are_workflow_settings() {
    let text = r#"
[main]
isolate = true
window = 200000
handoff = false
[[main.steps]]
name = "干活"
role = "coordinator"
prompt = "做"
"#;
    let d = load(&table(text, "main"), Path::new("/ws"), None).unwrap();
    assert!(d.isolate && !d.handoff);
    assert_eq!(d.window, Some(200_000));
    assert_eq!(
        d.workbench.as_deref(),
        Some(Path::new("/.flower-ws")),
        "with worktrees the workbench lives next to the repository"
    );
    let plain = load(
        &table(
            "[main]\n[[main.steps]]\nname = \"a\"\nrole = \"worker\"\nprompt = \"x\"\n",
            "main",
        ),
        Path::new("/ws"),
        None,
    )
    .unwrap();
    assert!(!plain.isolate && plain.handoff && plain.window.is_none());
    let e = err(
        "[main]\nwindow = -5\n[[main.steps]]\nname = \"a\"\nrole = \"worker\"\nprompt = \"x\"\n",
    );
    assert!(e.starts_with("window:") && e.contains("正的"), "{e}");
}

#[test]
fn when_conditions_name_earlier_steps_and_gate_the_step() {
    let text = r#"
[main]
[[main.steps]]
kind = "goal"
[[main.steps]]
name = "干活"
role = "coordinator"
prompt = "做"
goal = true
on_fail = "continue"
[[main.steps]]
name = "补救"
role = "worker"
prompt = "修"
when = { step = "干活", verdict = "NOT_YET" }
[[main.steps]]
name = "庆祝"
role = "worker"
prompt = "说一声"
when = { step = "干活", outcome = "ok" }
"#;
    let d = load(&table(text, "main"), Path::new("/ws"), None).unwrap();
    let (fix, party) = (&d.steps[2], &d.steps[3]);
    let mut ctx = Ctx::default();
    assert!(!(fix.when.as_ref().unwrap())(&mut ctx), "not judged yet");
    ctx.passed.insert("干活".into(), false);
    ctx.verdicts.insert(
        "干活".into(),
        crate::flow::verdict::Verdict::parse("## 结论\nNOT_YET\n## 理由\n差\n"),
    );
    assert!((fix.when.as_ref().unwrap())(&mut ctx));
    assert!(!(party.when.as_ref().unwrap())(&mut ctx));

    let step = |extra: &str| {
        format!("[main]\n[[main.steps]]\nname = \"a\"\nrole = \"worker\"\nprompt = \"x\"\n[[main.steps]]\nname = \"b\"\nrole = \"worker\"\nprompt = \"y\"\n{extra}\n")
    };
    let e = err(&step(r#"when = { step = "c", outcome = "ok" }"#));
    assert_eq!(e, "步骤 2「b」的 when:前面没有叫「c」的步骤");
    let e = err(&step(r#"when = { step = "a", verdict = "ACHIEVED" }"#));
    assert!(e.contains("「a」没有 goal"), "{e}");
    let e = err(&step(r#"when = { step = "a", outcome = "done" }"#));
    assert!(e.contains("可用 ok、failed、skipped"), "{e}");
    let e = err(&step(r#"when = "a""#));
    assert!(e.starts_with("步骤 2「b」的 when:要写成"), "{e}");
}
