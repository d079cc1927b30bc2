//! The agent runtime over real HTTP (the `scripted-model` binary) with the host sandbox:
//! the tool loop, guards, confinement, spill, budget, subagents and handoffs.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod agent_support;

use agent_support::{Harness, Opts};
use flowerbox::agent::{roles, EventKind, RunOptions};
use serde_json::json;
use std::time::{Duration, Instant};

fn tool(name: &str, input: serde_json::Value) -> serde_json::Value {
    json!({"type": "tool_use", "name": name, "input": input})
}
fn text(t: &str) -> serde_json::Value {
    json!({"type": "text", "text": t})
}

#[tokio::test]
async fn tool_loop_runs_calls_in_parallel_and_answers_every_failure_as_a_tool_error() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": [
            {"content": [
                text("两件事并行"),
                tool("Bash", json!({"command": "sleep 1; echo one"})),
                tool("Bash", json!({"command": "sleep 1; echo two"})),
                tool("Write", json!({"file_path": "notes.txt", "content": "你好\n"})),
                tool("Teleport", json!({"to": "mars"})),
                tool("Read", json!({"path_typo": "notes.txt"})),
                tool("Read", json!({"file_path": "../../../../etc/passwd"})),
                tool("Read", json!({"file_path": secret.to_str().unwrap()})),
                tool("Read", json!({"file_path": "link/secret.txt"}))]},
            {"content": [tool("Read", json!({"file_path": "notes.txt"}))]},
            {"content": [text("全做完了")]}]}]}),
        Opts::default(),
    );
    std::os::unix::fs::symlink(outside.path(), h.ws.join("link")).unwrap();
    let spec = roles::once(
        "",
        ["Read", "Write", "Bash"].map(String::from).to_vec(),
        None,
    );
    let t = Instant::now();
    let r = h.rt.run(&spec, "做事", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.text, "全做完了");
    assert_eq!(r.num_turns, 3);
    // The two one-second commands overlapped.
    assert!(
        t.elapsed() < Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
    let res = h.results(1);
    assert_eq!(res.len(), 8);
    assert_eq!(res[0], ("one".into(), false));
    assert_eq!(res[1], ("two".into(), false));
    assert!(!res[2].1);
    assert!(res[3].1 && res[3].0.contains("Teleport"), "{:?}", res[3]);
    assert!(res[4].1 && res[4].0.contains("file_path"), "{:?}", res[4]);
    for (i, r) in res[5..].iter().enumerate() {
        assert!(r.1, "escape {i} was not refused: {r:?}");
        assert!(
            !r.0.contains("top secret") && !r.0.contains("root:"),
            "{r:?}"
        );
    }
    assert!(h.results(2)[0].0.contains("你好"));
}

#[tokio::test]
async fn roles_are_enforced_by_the_runtime() {
    let h = Harness::new(
        json!({"agents": [
            {"role": "judge", "turns": [
                {"content": [tool("Write", json!({"file_path": "x", "content": "fixed"})),
                             tool("Bash", json!({"command": "touch y"}))]},
                {"content": [text("## 结论\nNOT_YET")]}]},
            {"role": "coordinator", "turns": [
                {"content": [tool("Bash", json!({"command": "rm -rf x"})),
                             tool("Bash", json!({"command": "git status && rm x"})),
                             tool("Bash", json!({"command": "git status && git log --oneline | head"})),
                             tool("Edit", json!({"file_path": "a", "old_string": "a", "new_string": "b"}))]},
                {"content": [text("看过了")]}]}]}),
        Opts::default(),
    );
    let git = |args: &[&str]| {
        assert!(std::process::Command::new("git")
            .args(args)
            .current_dir(&h.ws)
            .output()
            .unwrap()
            .status
            .success())
    };
    git(&["init", "-q"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first",
    ]);
    std::fs::write(h.ws.join("x"), "keep").unwrap();

    let r =
        h.rt.run(
            &roles::judge("判定", "", false),
            "判一下",
            RunOptions::default(),
        )
        .await;
    assert!(r.ok);
    let res = h.results(1);
    assert!(res.iter().all(|r| r.1), "{res:?}");
    assert!(res[0].0.contains("白名单"));

    let r =
        h.rt.run(
            &roles::coordinator("协调者", "", vec![]),
            "看一眼",
            RunOptions::default(),
        )
        .await;
    assert!(r.ok);
    let res = h.results(3);
    assert!(res[0].1 && res[1].1, "{res:?}");
    assert!(!res[2].1 && res[2].0.contains("first"), "{res:?}");
    assert!(res[3].1);
    assert_eq!(std::fs::read_to_string(h.ws.join("x")).unwrap(), "keep");
    assert!(!h.ws.join("y").exists());
}

#[tokio::test]
async fn a_50kb_output_is_spilled_and_the_next_request_stays_small() {
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": [
            {"content": [tool("Bash", json!({"command": "seq 1 12000"}))]},
            {"content": [text("看完了")]}]}]}),
        Opts::default(),
    );
    let r =
        h.rt.run(
            &roles::once("", vec!["Bash".into()], None),
            "数数",
            RunOptions::default(),
        )
        .await;
    assert!(r.ok);
    let res = h.results(1);
    // The pointer names the full output file (never a second spill of the capped text).
    assert!(
        res[0]
            .0
            .starts_with("[输出共 60894 字节,太长不放进上下文;全文落盘在 "),
        "{}",
        &res[0].0[..80]
    );
    let body = serde_json::to_string(&h.model.recorded()[1]).unwrap();
    assert!(body.len() < 8_000, "second request is {} bytes", body.len());
    let spilled: Vec<_> = std::fs::read_dir(h.ws.join(".flower/spill"))
        .unwrap()
        .flatten()
        .collect();
    assert!(spilled.iter().any(|e| std::fs::read_to_string(e.path())
        .unwrap()
        .contains("\n11999\n")));
}

#[tokio::test]
async fn budget_stops_before_the_next_call_and_the_manifest_says_so() {
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": [
            {"content": [tool("Bash", json!({"command": "true"}))],
             "usage": {"input_tokens": 100000, "output_tokens": 1000}},
            {"content": [text("不该走到这里")]}]}]}),
        Opts::default(),
    );
    let spec = roles::once("", vec!["Bash".into()], Some(0.01));
    let r = h.rt.run(&spec, "花钱", RunOptions::default()).await;
    assert!(!r.ok);
    assert!(
        r.error.as_ref().unwrap().to_string().contains("预算用完"),
        "{:?}",
        r.error
    );
    assert_eq!(
        h.model.recorded().len(),
        1,
        "no call may start past the budget"
    );
    let row = &h.manifest()[0];
    assert_eq!(row["ok"], false);
    assert!(row["error"].as_str().unwrap().contains("预算"));
    assert!(row["cost_usd"].as_f64().unwrap() > 0.01);
}

#[tokio::test]
async fn a_dispatched_worker_reports_back_to_the_coordinator() {
    let report = "## 结论\n写好了\n## 依据\ncat out.txt 看到 ok\n## 产出\nout.txt\n## 未验证\n无";
    let h = Harness::new(
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "写文件", "prompt": "写 out.txt,内容 ok"}))]},
                {"content": [text("收到报告")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Write", json!({"file_path": "out.txt", "content": "ok"}))]},
                {"content": [text(report)]}]}]}),
        Opts::default(),
    );
    let r =
        h.rt.run(
            &roles::coordinator("协调者", "", vec![]),
            "派个人",
            RunOptions::default(),
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
    let coordinator_second = h
        .model
        .recorded()
        .into_iter()
        .find(|q| {
            q["messages"].as_array().unwrap().len() == 3
                && q["system"].to_string().contains("协调者")
        })
        .expect("coordinator's second request");
    let tr = &coordinator_second["messages"][2]["content"][0];
    assert!(tr.to_string().contains("写好了"), "{tr}");
    assert_eq!(std::fs::read_to_string(h.ws.join("out.txt")).unwrap(), "ok");
    assert!(r.spend.known_usd > 0.0);
}

fn handoff_doc() -> &'static str {
    "## 现在在做\n在改 parser\n## 已定的事\n用 nom\n## 走不通的\n正则不行\n## 下一步\n跑 cargo test\n## 现场\nsrc/parser.rs"
}

#[tokio::test]
async fn a_full_context_hands_off_to_a_new_session() {
    let h = Harness::new(
        json!({"agents": [
            {"prompt": "你在接手上一代会话", "turns": [{"content": [text("接手完成")]}]},
            {"role": "once", "turns": [
                {"content": [tool("Bash", json!({"command": "true"}))], "usage": {"input_tokens": 30000, "output_tokens": 10}},
                {"content": [text(handoff_doc())]}]}]}),
        Opts {
            handoff_window: Some(60_000),
            ..Opts::default()
        },
    );
    let r =
        h.rt.run(
            &roles::once("", vec!["Bash".into()], None),
            "长活",
            RunOptions {
                step: Some("干活".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.text, "接手完成");
    assert_eq!(r.retired.len(), 1);
    assert_ne!(r.retired[0], r.session_id.clone().unwrap());
    let doc = std::fs::read_to_string(h.ws.join(".flower/notes/交接-干活.md")).unwrap();
    for s in [
        "现在在做",
        "已定的事",
        "走不通的",
        "下一步",
        "现场",
        "在改 parser",
        "跑 cargo test",
    ] {
        assert!(doc.contains(s), "{s} missing in {doc}");
    }
    let last = h.model.recorded().pop().unwrap();
    assert!(last["messages"][0].to_string().contains("在改 parser"));
    assert_eq!(h.manifest()[0]["retired"][0], r.retired[0]);
    let ev = h.events.lock().unwrap();
    assert!(ev.iter().any(|e| matches!(
        &e.kind,
        EventKind::Handoff {
            degraded: false,
            ..
        }
    )));
}

#[tokio::test]
async fn a_missing_handoff_document_is_degraded_and_eight_generations_brake() {
    let h = Harness::new(
        json!({"agents": [
            {"prompt": "你在接手上一代会话", "turns": [
                {"content": [tool("Bash", json!({"command": "true"}))], "usage": {"input_tokens": 30000, "output_tokens": 10}},
                {"content": [text("我不想写交接书")]}]},
            {"role": "once", "turns": [
                {"content": [tool("Bash", json!({"command": "true"}))], "usage": {"input_tokens": 30000, "output_tokens": 10}},
                {"content": [text("随便说点")]}]}]}),
        Opts {
            handoff_window: Some(60_000),
            ..Opts::default()
        },
    );
    let r =
        h.rt.run(
            &roles::once("", vec!["Bash".into()], None),
            "停不下来的活",
            RunOptions {
                step: Some("干活".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(!r.ok);
    assert_eq!(r.retired.len(), 8);
    assert!(
        r.error.as_ref().unwrap().to_string().contains("8 代"),
        "{:?}",
        r.error
    );
    let doc = std::fs::read_to_string(h.ws.join(".flower/notes/交接-干活.md")).unwrap();
    assert!(doc.contains("降级") || doc.contains("没能写出"), "{doc}");
    let archived = std::fs::read_dir(h.ws.join(".flower/notes/archive/交接"))
        .unwrap()
        .count();
    assert_eq!(archived, 7);
    let ev = h.events.lock().unwrap();
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(&e.kind, EventKind::Handoff { degraded: true, .. }))
            .count(),
        8
    );
}

#[tokio::test]
async fn sixty_one_identical_failing_reads_are_told_once_then_the_step_ends() {
    let read = || json!({"content": [tool("Read", json!({"file_path": "missing.txt"}))]});
    let turns: Vec<serde_json::Value> = (0..61).map(|_| read()).collect();
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": turns}]}),
        Opts::default(),
    );
    let spec = roles::once("", vec!["Read".into()], None);
    let r = h.rt.run(&spec, "读文件", RunOptions::default()).await;
    assert!(!r.ok);
    let err = r.error.as_ref().unwrap().to_string();
    assert!(err.contains("同样的调用(Read)连续 6 次"), "{err}");
    // Told once, with the fifth identical result; the sixth ends the step.
    let reqs = h.model.recorded();
    assert_eq!(reqs.len(), 6, "the step ends at the sixth identical turn");
    let told = |i: usize| {
        reqs[i]["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["text"].as_str().is_some_and(|t| t.contains("连续 5 次")))
    };
    assert!(told(5));
    assert_eq!((1..5).filter(|&i| told(i)).count(), 0);
    let row = &h.manifest()[0];
    assert_eq!(row["ok"], false);
    assert!(row["error"].as_str().unwrap().contains("提醒过也没换办法"));
    assert!(h.events.lock().unwrap().iter().any(|e| matches!(
        &e.kind,
        EventKind::Warning { text } if text.contains("已提醒它换办法")
    )));
}

#[tokio::test]
async fn an_unanswered_question_asked_again_and_again_is_bounded() {
    let ask = || json!({"content": [tool(roles::ASK_TOOL, json!({"question": "用哪个数据库?"}))]});
    // Stubborn: asks 32 times (nobody answers: the harness's human is absent, as --timeout 0).
    let turns: Vec<serde_json::Value> = (0..32).map(|_| ask()).collect();
    let h = Harness::new(
        json!({"agents": [{"role": "clarifier", "turns": turns}]}),
        Opts::default(),
    );
    let spec = roles::clarifier("clarifier", "", false);
    let r = h.rt.run(&spec, "做个网站", RunOptions::default()).await;
    assert!(!r.ok);
    assert!(r.error.as_ref().unwrap().to_string().contains("连续 6 次"));
    assert_eq!(h.model.recorded().len(), 6);
    let note = &h.model.recorded()[5]["messages"];
    assert!(note.to_string().contains("未知与假设"), "{note}");

    // Told once, it takes the assumption path: the brief comes back and the step succeeds.
    let mut turns: Vec<serde_json::Value> = (0..5).map(|_| ask()).collect();
    turns.push(json!({"content": [text(
        "## 目标\n网站\n## 验收标准\n能打开\n## 边界\n不做登录\n## 未知与假设\n假设用 SQLite"
    )]}));
    let h = Harness::new(
        json!({"agents": [{"role": "clarifier", "turns": turns}]}),
        Opts::default(),
    );
    let r = h.rt.run(&spec, "做个网站", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    assert!(r.text.contains("假设用 SQLite"));
}

#[tokio::test]
async fn a_background_command_returns_an_id_at_once_and_is_read_and_stopped() {
    let bg = |cmd: &str| json!({"content": [tool("Bash", json!({"command": cmd, "run_in_background": true}))]});
    let h = Harness::new(
        json!({"agents": [{"role": "worker", "turns": [
            bg("sh -c 'echo start; sleep 2; echo end'"),
            bg("sleep 300; echo never"),
            {"content": [tool("TaskOutput", json!({"task_id": "bash_1"}))]},
            {"content": [tool("TaskOutput", json!({"bash_id": "bash_1", "block": true, "timeout": 20000}))]},
            {"content": [tool("TaskStop", json!({"shell_id": "bash_2"}))]},
            {"content": [tool("TaskOutput", json!({"task_id": "bash_2"}))]},
            {"content": [tool("TaskOutput", json!({"task_id": "bash_9"}))]},
            {"content": [text("## 结论\n好了\n## 依据\n读过\n## 产出\n无\n## 未验证\n无")]}]}]}),
        Opts::default(),
    );
    let spec = roles::worker("worker", "", "").spec;
    let t = Instant::now();
    let r = h.rt.run(&spec, "后台跑", RunOptions::default()).await;
    assert!(r.ok, "{:?}", r.error);
    let one = |i: usize| h.results(i).remove(0);
    let (started, err) = one(1);
    assert!(!err && started.contains("task_id bash_1"), "{started}");
    let log = started
        .split("输出写进 ")
        .nth(1)
        .and_then(|s| s.split('。').next())
        .unwrap()
        .to_string();
    assert!(
        log.starts_with(h.ws.join(".flower").to_str().unwrap()),
        "{log}"
    );
    let (second, _) = one(2);
    let pid: i32 = second
        .split("进程 ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    let (first_read, err) = one(3);
    assert!(!err, "{first_read}");
    assert!(
        first_read.starts_with("[bash_1:运行中]") && first_read.contains("start"),
        "{first_read}"
    );
    assert!(!first_read.contains("end"), "it did not wait: {first_read}");
    let (second_read, _) = one(4);
    assert_eq!(
        second_read, "[bash_1:已结束,退出码 0]\nend",
        "only what is new"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start\nend\n");
    let (stopped, err) = one(5);
    assert!(!err && stopped.starts_with("已停下 bash_2"), "{stopped}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the stopped command still runs"
    );
    let (after, _) = one(6);
    assert!(after.starts_with("[bash_2:已被 TaskStop 停下]"), "{after}");
    let (unknown, err) = one(7);
    assert!(err && unknown.contains("bash_9"), "{unknown}");
    assert!(t.elapsed() < Duration::from_secs(60));
    // The worker's whitelist offered them without listing them.
    let offered: Vec<String> = h.model.recorded()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.contains(&"TaskOutput".into()) && offered.contains(&"TaskStop".into()));
}

/// A session of `n` Bash calls whose results are 3,000 characters each; returns its id.
fn session_of_large_results(h: &Harness, n: usize) -> String {
    use flowerbox::model::{ContentBlock, Message, Speaker};
    use flowerbox::session::SessionMeta;
    let store = h.rt.store();
    let meta = SessionMeta {
        agent: "ad-hoc".into(),
        role: flowerbox::role::Role::Worker,
        step: None,
        parent: None,
        run: "20260101-000000-a1b2c3".into(),
    };
    let id = store.create(&meta).unwrap();
    store
        .append(&id, &Message::user_text("编译这个项目"), None)
        .unwrap();
    for i in 0..n {
        let tid = format!("toolu_big_{i}");
        let call = Message {
            role: Speaker::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: tid.clone(),
                name: "Bash".into(),
                input: json!({"command": format!("cargo build -p part{i}")}),
            }],
        };
        store.append(&id, &call, None).unwrap();
        let result = Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: tid,
                content: format!("{i:04} compiling ...\n").repeat(150),
                is_error: false,
            }],
        };
        store.append(&id, &result, None).unwrap();
    }
    store
        .append(&id, &Message::assistant_text("编好了。"), None)
        .unwrap();
    id
}

/// Issue 32: a resumed history's spill files are written while the model is asked; once the
/// model accepted the history, every file a pointer names is there, whole, when the step ends.
#[tokio::test]
async fn the_spill_files_of_an_accepted_resumed_history_are_there_when_the_step_ends() {
    let turns: Vec<serde_json::Value> = (0..=26)
        .map(|_| json!({"content": [text("好的。")]}))
        .collect();
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": turns}]}),
        Opts::default(),
    );
    let id = session_of_large_results(&h, 25);
    let r =
        h.rt.run(
            &roles::once("", vec!["Read".into()], None),
            "继续",
            RunOptions {
                resume: Some(id),
                ..Default::default()
            },
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
    let sent = h.model.recorded()[0].to_string();
    let pointers: Vec<&str> = sent
        .split("完整内容在 ")
        .skip(1)
        .map(|s| s.split(",需要时").next().unwrap())
        .collect();
    assert_eq!(
        pointers.len(),
        5,
        "25 large results, the 20 most recent kept"
    );
    for (i, p) in pointers.iter().enumerate() {
        let text = std::fs::read_to_string(p).unwrap();
        assert_eq!(text, format!("{i:04} compiling ...\n").repeat(150));
    }
}

/// Issue 32: a resumed history the model refuses as too long hands off at once (degraded:
/// nothing to ask), and the spill files it never showed are not waited for: the step goes on
/// in the new session and no temporary file is left in the spill directory.
#[tokio::test]
async fn a_resumed_history_refused_as_too_long_hands_off_without_waiting_for_its_spills() {
    let mut turns: Vec<serde_json::Value> = (0..=26)
        .map(|_| json!({"content": [text("接着做。")]}))
        .collect();
    turns[26]["fault"] = json!({"status": 413, "times": 1});
    let h = Harness::new(
        json!({"agents": [{"role": "once", "turns": turns}]}),
        Opts {
            handoff_window: Some(200_000),
            ..Opts::default()
        },
    );
    let id = session_of_large_results(&h, 25);
    let r =
        h.rt.run(
            &roles::once("", vec!["Read".into()], None),
            "继续",
            RunOptions {
                resume: Some(id.clone()),
                step: Some("干活".into()),
                ..Default::default()
            },
        )
        .await;
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(r.retired, [id]);
    assert!(h
        .events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Handoff { degraded: true, .. })));
    let names: Vec<String> = std::fs::read_dir(h.ws.join(".flower/spill"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.len() <= 5, "{names:?}");
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}
