//! `go --probe-checks` (issue 27 §4), end to end: the real binary against `scripted-model`, on
//! the real engine. After a round whose checks are all green, flowerbox plants a defect in a
//! copy of the candidate (in a file this run wrote) and runs the checks again on the copy in
//! gate containers. The demo-like goal's check catches it; a deliberately weak check (`true`)
//! does not, and the judge and the record are told so. The workspace is the candidate the
//! checks ran on, byte for byte, after probing, and no copy or container is left.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;

use docker_support::{engine_or_skip, SERIAL};
use flow_support::*;
use serde_json::{json, Value};

use flowerbox::sandbox::files::identity::{identity, Exclusions};

const ASK: &str = "写个 hello.sh";

fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}

fn tool(name: &str, input: Value) -> Value {
    json!({"content": [{"type": "tool_use", "name": name, "input": input}]})
}

const BRIEF: &str = "## 目标\n写一个 hello.sh,运行它打印 hello\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n";

/// The demo-like goal: one item decided by a command.
const GOAL_CHECKED: &str = "## 目标\n工作区里有一个能直接运行的 hello.sh\n\n## 判定清单\n- 跑起来打印 hello 检查: `./hello.sh | grep -qx hello && test -x hello.sh`\n";

/// A goal whose only item is decided by reading (the weak `--check true` is the only check).
const GOAL_READ: &str =
    "## 目标\n工作区里有一个能直接运行的 hello.sh\n\n## 判定清单\n- 跑起来打印 hello\n";

const VERDICT_ACHIEVED: &str = "## 结论\nACHIEVED\n\n## 理由\n都看到了\n\n## 未通过\n无\n";

const VERDICT_NOT_YET: &str =
    "## 结论\nNOT_YET\n\n## 理由\n再看看\n\n## 未通过\n- 跑起来打印 hello\n";

/// Clarify, `goal`, a coordinator whose first round writes hello.sh (later rounds only say
/// so), one judge per round saying `verdicts[i]`.
fn scenario(goal: &str, verdicts: &[&str]) -> Value {
    let cmd = "printf 'echo hello\\n' > hello.sh && chmod +x hello.sh";
    let mut coordinator = vec![
        tool(
            "Agent",
            json!({"description": "第1件活", "prompt": format!("第1件活:{cmd}"),
                             "subagent_type": "coder"}),
        ),
        text("第 1 轮做完了"),
    ];
    for n in 2..=verdicts.len() {
        coordinator.push(text(&format!("第 {n} 轮:看过了,不用改")));
    }
    let mut v = json!({ "agents": [
        {"role": "clarifier", "turns": [text(BRIEF)]},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [text(goal)]},
        {"role": "coordinator", "turns": coordinator},
        {"role": "worker", "prompt": "第1件活", "turns": [
            tool("Bash", json!({"command": cmd})),
            text("结论:做了\n依据:跑了命令\n产出:hello.sh\n未验证:无")]},
    ]});
    for (i, verdict) in verdicts.iter().enumerate() {
        v["agents"].as_array_mut().unwrap().push(json!({"role": "judge",
            "agent": format!("judge-{}", i + 2), "prompt": "判定这一轮", "turns": [text(verdict)]}));
    }
    v
}

/// The judge row of round `n`.
fn judge_row(p: &Project, n: u32) -> Value {
    p.manifest()
        .into_iter()
        .find(|r| r["step"] == format!("干活·判定#{n}"))
        .unwrap_or_else(|| panic!("no judge row: {:?}", p.manifest()))
}

/// The workspace's content identity as the gates count it (the run's records left out).
fn workspace_digest(p: &Project) -> String {
    let exclude = Exclusions {
        dirs: vec![p.ws.join(".flower"), p.ws.join("runs")],
        files: Vec::new(),
    };
    identity(&p.ws, &exclude).unwrap().digest()
}

/// No container and no probe copy of this test's run is left.
fn nothing_left(p: &Project) {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", "label=flowerbox.run"])
        .args([
            "--filter",
            &format!("label=flowerbox.workspace={}", p.ws.display()),
        ])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "containers left: {out:?}");
    let copies: Vec<_> = std::fs::read_dir(p.ws.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("probe-"))
        .collect();
    assert!(copies.is_empty(), "probe copies left: {copies:?}");
}

/// The judge's prompt of round 1.
fn judge_prompt(model: &ScriptedModel) -> String {
    requests_with(model, "")
        .into_iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("判定这一轮"))
        .expect("a judge request")
}

#[tokio::test]
async fn the_demos_check_catches_the_planted_defect_and_the_workspace_is_untouched() {
    let Some(_engine) = engine_or_skip("flow_probes").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = Project::new();
    let model = ScriptedModel::start(&scenario(GOAL_CHECKED, &[VERDICT_ACHIEVED]));
    let r = p.run_in("docker", &model, &["--timeout", "0", "--probe-checks", ASK]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(r.out.contains("✓ 1/1 检查"), "{}", r.out);
    // The only site in hello.sh is its one statement: dropped, the check goes red.
    assert!(
        r.out
            .contains("✓ 探针:删掉 `hello.sh:1` 这一行 `echo hello` → 被 item-1 抓到"),
        "{}",
        r.out
    );
    let row = judge_row(&p, 1);
    let probe = &row["checks"]["probe"];
    assert_eq!(probe["outcome"], "caught", "{row}");
    assert_eq!(probe["site"], "hello.sh:1", "{row}");
    assert_eq!(probe["caught_by"], json!(["item-1"]), "{row}");
    // A caught probe is not news for the judge.
    assert!(!judge_prompt(&model).contains("探针"));
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.contains("✓ 探针:"), "{record}");
    // The workspace is the candidate the checks ran on, byte for byte.
    assert_eq!(
        row["checks"]["identity"].as_str().unwrap(),
        workspace_digest(&p),
        "{row}"
    );
    assert_eq!(
        std::fs::read_to_string(p.ws.join("hello.sh")).unwrap(),
        "echo hello\n"
    );
    nothing_left(&p);
}

#[tokio::test]
async fn a_weak_check_is_reported_as_not_catching_it() {
    let Some(_engine) = engine_or_skip("flow_probes").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = Project::new();
    let model = ScriptedModel::start(&scenario(GOAL_READ, &[VERDICT_NOT_YET, VERDICT_ACHIEVED]));
    let r = p.run_in(
        "docker",
        &model,
        &[
            "--timeout",
            "0",
            "--check",
            "true",
            // The workbench is seen as the judge sees it (a copy without it once made this
            // check "catch" every defect).
            "--check",
            "test -s .flower/notes/目标.md",
            "--probe-checks",
            ASK,
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(
        r.out
            .contains("✗ 探针:删掉 `hello.sh:1` 这一行 `echo hello` → 没有一条检查失败"),
        "{}",
        r.out
    );
    let row = judge_row(&p, 1);
    assert_eq!(row["checks"]["passed"], 2, "{row}");
    assert_eq!(row["checks"]["probe"]["outcome"], "missed", "{row}");
    assert_eq!(row["checks"]["probe"]["caught_by"], json!([]), "{row}");
    // The judge is told, in so many words, before it decides.
    let judged = judge_prompt(&model);
    assert!(judged.contains("检查抓不住的缺陷"), "{judged}");
    assert!(judged.contains("删掉 `hello.sh:1` 这一行"), "{judged}");
    // The coordinator's next round is told too; round 2 is probed again (still missed).
    let round2 = requests_with(&model, "你是协调者")
        .into_iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("检查抓不住的缺陷"))
        .expect("the round-2 prompt carries the missed probe");
    assert!(round2.contains("删掉 `hello.sh:1` 这一行"), "{round2}");
    assert_eq!(judge_row(&p, 2)["checks"]["probe"]["outcome"], "missed");
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.contains("✗ 探针:"), "{record}");
    assert_eq!(
        row["checks"]["identity"].as_str().unwrap(),
        workspace_digest(&p),
        "{row}"
    );
    nothing_left(&p);
}
