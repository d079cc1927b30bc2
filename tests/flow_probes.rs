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

mod checks_support;
mod docker_support;
mod flow_support;

use checks_support::*;
use flow_support::*;
use serde_json::{json, Value};

use flowerbox::sandbox::files::identity::{identity, Exclusions};

/// The demo-like goal: one item decided by a command.
const GOAL_CHECKED: &str = "## 目标\n工作区里有一个能直接运行的 hello.sh\n\n## 判定清单\n- 跑起来打印 hello 检查: `./hello.sh | grep -qx hello && test -x hello.sh`\n";

/// A goal whose only item is decided by reading (the weak `--check true` is the only check).
const GOAL_READ: &str =
    "## 目标\n工作区里有一个能直接运行的 hello.sh\n\n## 判定清单\n- 跑起来打印 hello\n";

const VERDICT_NOT_YET: &str =
    "## 结论\nNOT_YET\n\n## 理由\n再看看\n\n## 未通过\n- 跑起来打印 hello\n";

/// Clarify, `goal`, a coordinator whose first round writes hello.sh (later rounds only say
/// so), one judge per round saying `verdicts[i]`.
fn scenario(goal: &str, verdicts: &[&str]) -> Value {
    let (dispatch, worker) = round(1, HELLO);
    let mut coordinator = vec![dispatch, text("第 1 轮做完了")];
    for n in 2..=verdicts.len() {
        coordinator.push(text(&format!("第 {n} 轮:看过了,不用改")));
    }
    let mut agents = opening(goal);
    agents.push(json!({"role": "coordinator", "turns": coordinator}));
    agents.push(worker);
    agents.extend(judges(verdicts));
    json!({ "agents": agents })
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
    no_containers_left(p);
    let copies: Vec<_> = std::fs::read_dir(p.ws.join("runs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("probe-"))
        .collect();
    assert!(copies.is_empty(), "probe copies left: {copies:?}");
}

#[tokio::test]
async fn the_demos_check_catches_the_planted_defect_and_the_workspace_is_untouched() {
    let Some((_serial, p)) = begin("flow_probes").await else {
        return;
    };
    let model = ScriptedModel::start(&scenario(GOAL_CHECKED, &[VERDICT_ACHIEVED]));
    let r = p.run_in("docker", &model, &["--timeout", "0", "--probe-checks", ASK]);
    assert_eq!(r.code(), 0, "{r:?}");
    shows(&r, "✓ 1/1 检查");
    // The only site in hello.sh is its one statement: dropped, the check goes red.
    shows(
        &r,
        "✓ 探针:删掉 `hello.sh:1` 这一行 `echo hello` → 被 item-1 抓到",
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
    let Some((_serial, p)) = begin("flow_probes").await else {
        return;
    };
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
    shows(
        &r,
        "✗ 探针:删掉 `hello.sh:1` 这一行 `echo hello` → 没有一条检查失败",
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
