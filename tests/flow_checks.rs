//! Checks before the judge (issue 27 §1–2), end to end: the real binary against
//! `scripted-model`, on the real engine. The goal's checklist carries a check and `--check`
//! adds one; flowerbox runs them in gate containers with the judge's read-only view before
//! every judge round. Green checks let ACHIEVED stand; a judge that claims ACHIEVED over a red
//! check is recorded NOT_YET with the check as the reason (its answer kept for audit) and the
//! coordinator's next round gets the check's output; a check that writes into the candidate
//! fails (refused by the read-only mount in a container; caught by the identity rule where
//! commands run on the host); a workflow file's checks run too; a woken run runs every check
//! again on what is there now.
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

/// The goal the goal setter writes: one item decided by a command, one by reading.
const GOAL: &str = "## 目标\n工作区里有一个能直接运行的 hello.sh\n\n## 判定清单\n- 跑起来打印 hello 检查: `./hello.sh | grep -qx hello && test -x hello.sh`\n- 脚本写得干净(只有一行)\n";

/// A scenario: clarify, the goal above, then `rounds` coordinator rounds (each dispatching one
/// worker with `commands[i]`) and one judge per round saying `verdicts[i]`.
fn scenario(commands: &[&str], verdicts: &[&str]) -> Value {
    let mut agents = opening(GOAL);
    let mut coordinator = Vec::new();
    for (i, cmd) in commands.iter().enumerate() {
        let (dispatch, worker) = round(i + 1, cmd);
        coordinator.push(dispatch);
        coordinator.push(text(&format!("第 {} 轮做完了", i + 1)));
        agents.push(worker);
    }
    agents.push(json!({"role": "coordinator", "turns": coordinator}));
    agents.extend(judges(verdicts));
    json!({ "agents": agents })
}

#[tokio::test]
async fn green_checks_let_achieved_stand() {
    let Some((_serial, p)) = begin("flow_checks").await else {
        return;
    };
    let model = ScriptedModel::start(&scenario(&[HELLO], &[VERDICT_ACHIEVED]));
    let r = p.run_in(
        "docker",
        &model,
        &[
            "--timeout",
            "0",
            "--check",
            "test \"$(cat hello.sh)\" = 'echo hello'",
            ASK,
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    // The goal's check and the user's, both green, before the judge decided.
    shows(&r, "✓ 2/2 检查");
    let row = judge_row(&p, 1);
    assert_eq!(row["checks"]["passed"], 2, "{row}");
    assert_eq!(row["checks"]["total"], 2, "{row}");
    assert_eq!(row["checks"]["overruled"], Value::Null, "{row}");
    assert_eq!(
        row["checks"]["identity"].as_str().unwrap().len(),
        64,
        "{row}"
    );
    // The judge read every check's result.
    let judge = judge_prompt(&model);
    assert!(judge.contains("2/2 通过"), "{judge}");
    assert!(judge.contains("item-1 `./hello.sh | grep -qx hello && test -x hello.sh`"));
    assert!(judge.contains("user-1"), "{judge}");
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.contains("## 干活·判定#1 — ACHIEVED"), "{record}");
    assert!(record.contains("检查:2/2 通过"), "{record}");
    no_containers_left(&p);
}

#[tokio::test]
async fn a_red_check_overrules_achieved_and_its_output_reaches_the_next_round() {
    let Some((_serial, p)) = begin("flow_checks").await else {
        return;
    };
    // Round 1 forgets the executable bit; the judge claims ACHIEVED anyway.
    let model = ScriptedModel::start(&scenario(
        &["printf 'echo hello\\n' > hello.sh", "chmod +x hello.sh"],
        &[VERDICT_ACHIEVED, VERDICT_ACHIEVED],
    ));
    let r = p.run_in("docker", &model, &["--timeout", "0", ASK]);
    assert_eq!(r.code(), 0, "{r:?}");
    shows(&r, "✗ 0/1 检查 · ✗ ./hello.sh");
    shows(&r, "✓ 1/1 检查");

    // Round 1: NOT_YET with the check as reason; the judge's ACHIEVED kept for audit.
    let one = judge_row(&p, 1);
    assert_eq!(one["checks"]["passed"], 0, "{one}");
    assert_eq!(one["checks"]["failed"], json!(["item-1"]), "{one}");
    assert_eq!(one["checks"]["overruled"], "ACHIEVED", "{one}");
    assert!(one["text"].as_str().unwrap().contains("ACHIEVED"), "{one}");
    let two = judge_row(&p, 2);
    assert_eq!(two["checks"]["passed"], 1, "{two}");
    assert_eq!(two["checks"]["overruled"], Value::Null, "{two}");
    assert_ne!(one["checks"]["identity"], two["checks"]["identity"]);
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.contains("## 干活·判定#1 — NOT_YET"), "{record}");
    assert!(record.contains("理由:检查 item-1 没过"), "{record}");
    assert!(
        record.contains("判定者原本的结论:ACHIEVED(检查红着,不算数)"),
        "{record}"
    );
    assert!(record.contains("## 干活·判定#2 — ACHIEVED"), "{record}");
    assert_eq!(
        p.steps_of(&p.runs_in_manifest()[0]),
        [
            "确认需求",
            "设定目标",
            "干活",
            "干活·判定#1",
            "干活#round2",
            "干活·判定#2"
        ]
    );

    // The judge saw the red check before deciding; the coordinator's round 2 got its output.
    let judged = judge_prompt(&model);
    assert!(judged.contains("0/1 通过") && judged.contains("不能判 ACHIEVED"));
    let round2 = requests_with(&model, "你是协调者")
        .into_iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("flowerbox 自己跑的检查有 1 条没过"))
        .expect("the round-2 prompt carries the red check");
    assert!(round2.contains("Permission denied"), "{round2}");
    assert!(round2.contains("检查 item-1 没过"), "{round2}");
    no_containers_left(&p);
}

#[tokio::test]
async fn a_check_that_writes_into_the_candidate_fails() {
    let Some((_serial, p)) = begin("flow_checks").await else {
        return;
    };
    // One round that writes hello.sh, judged ACHIEVED, with the user's `check`, in `sandbox`.
    let one_round = |p: &Project, sandbox: &str, check: &str| {
        let model = ScriptedModel::start(&scenario(&[HELLO], &[VERDICT_ACHIEVED]));
        let args = ["--timeout", "0", "--rounds", "1", "--check", check, ASK];
        p.run_in(sandbox, &model, &args)
    };
    // In a gate container the workspace is read-only: the write itself fails.
    let r = one_round(&p, "docker", "touch stamp.txt");
    assert_eq!(r.code(), 1, "{r:?}");
    assert!(!p.ws.join("stamp.txt").exists());
    shows(&r, "✗ 1/2 检查 · ✗ touch stamp.txt (exit 1");
    let row = judge_row(&p, 1);
    assert_eq!(row["checks"]["failed"], json!(["user-1"]), "{row}");
    assert_eq!(row["checks"]["overruled"], "ACHIEVED", "{row}");
    let record = std::fs::read_to_string(p.note("判定记录.md")).unwrap();
    assert!(record.to_lowercase().contains("read-only"), "{record}");
    no_containers_left(&p);

    // Where commands run on the host nothing refuses the write: the identity rule fails it,
    // whatever its exit status.
    let p = Project::new();
    let r = one_round(&p, "host", "date > stamp.txt; exit 0");
    assert_eq!(r.code(), 1, "{r:?}");
    shows(
        &r,
        "✗ date > stamp.txt; exit 0 (跑的时候现场变了(stamp.txt)",
    );
    let row = judge_row(&p, 1);
    assert_eq!(row["checks"]["overruled"], "ACHIEVED", "{row}");
}

#[tokio::test]
async fn a_workflow_files_checks_run_before_its_judge() {
    let Some((_serial, p)) = begin("flow_checks").await else {
        return;
    };
    std::fs::write(
        p.ws.join("flows.toml"),
        "[main]\nask = \"写个 hello.sh\"\ntimeout = 0\n\
         [[main.steps]]\nkind = \"clarify\"\n[[main.steps]]\nkind = \"goal\"\n\
         [[main.steps]]\nname = \"干活\"\nrole = \"coordinator\"\nprompt = \"{{goal}}\"\n\
         goal = { rounds = 1, checks = [\"test -x hello.sh\", \"grep -q bye hello.sh\"] }\n",
    )
    .unwrap();
    let model = ScriptedModel::start(&scenario(&[HELLO], &[VERDICT_ACHIEVED]));
    let r = p.run_in("docker", &model, &["run", "flows:main"]);
    assert_eq!(r.code(), 1, "{r:?}");
    shows(&r, "✗ 2/3 检查 · ✗ grep -q bye hello.sh (exit 1");
    let row = judge_row(&p, 1);
    assert_eq!(row["checks"]["failed"], json!(["flow-2"]), "{row}");
    assert_eq!(row["checks"]["overruled"], "ACHIEVED", "{row}");
    no_containers_left(&p);
}

#[tokio::test]
async fn a_woken_run_runs_the_checks_again_on_what_is_there_now() {
    let Some((_serial, p)) = begin("flow_checks").await else {
        return;
    };
    let mut s = scenario(&["printf 'echo hello\\n' > hello.sh"], &[VERDICT_ACHIEVED]);
    let agents = s["agents"].as_array_mut().unwrap();
    // The woken run: the coordinator carries on in its session, a new judge (judge-1 of the
    // new process: the goal is complete, nobody sets it again) says ACHIEVED again.
    for a in agents.iter_mut() {
        if a["role"] == "coordinator" {
            a["turns"]
                .as_array_mut()
                .unwrap()
                .push(text("接着看了现场,没有要做的了。"));
        }
    }
    agents.push(
        json!({"role": "judge", "agent": "judge-1", "prompt": "判定这一轮",
                       "turns": [text(VERDICT_ACHIEVED)]}),
    );
    let model = ScriptedModel::start(&s);
    let args = [
        "--timeout",
        "0",
        "--rounds",
        "1",
        "--check",
        "test -f ok.txt",
    ];
    let r = p.run_in("docker", &model, &[&args[..], &[ASK]].concat());
    assert_eq!(r.code(), 1, "{r:?}");
    let first = judge_row(&p, 1);
    assert_eq!(
        first["checks"]["failed"],
        json!(["item-1", "user-1"]),
        "{first}"
    );

    // The human fixes what the checks said; the woken run checks again, on the new files.
    std::fs::write(p.ws.join("ok.txt"), "").unwrap();
    std::fs::set_permissions(
        p.ws.join("hello.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let r = p.run_in("docker", &model, &args);
    assert_eq!(r.code(), 0, "{r:?}");
    shows(&r, "✓ 2/2 检查");
    let runs = p.runs_in_manifest();
    assert_eq!(runs.len(), 2);
    let again = p
        .manifest()
        .into_iter()
        .find(|row| row["run"] == runs[1] && row["step"] == "干活·判定#1")
        .unwrap();
    assert_eq!(again["checks"]["passed"], 2, "{again}");
    assert_ne!(again["checks"]["identity"], first["checks"]["identity"]);
    no_containers_left(&p);
}
