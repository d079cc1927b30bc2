//! `flowerbox go --isolate` end to end: the real binary on the real engine against
//! `scripted-model`. The worker writes in its own worktree container, its branch is
//! integrated, the judge (own read-only container, `--judge-can-run`) runs the result, merged
//! worktrees and branches are gone afterwards and the workbench lives outside the repository.
//! A change to the workspace while the judge looks voids its ACHIEVED (DESIGN.md invariant 8).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;
mod isogo_support;

use docker_support::{engine_or_skip, SERIAL};
use flow_support::{finish, scenario, Project, Ran, ScriptedModel, HANG};
use flowerbox_testkit::git;
use isogo_support::repo_project;
use std::time::Instant;

/// `flowerbox --sandbox docker go --isolate --judge-can-run --timeout 0 ARGS… 写个 hello.sh`.
fn go(p: &Project, model: &ScriptedModel, extra: &[&str]) -> std::process::Child {
    let switches = ["go", "--isolate", "--judge-can-run", "--timeout", "0"];
    p.command_in(
        "docker",
        model,
        &[&switches[..], extra, &["写个 hello.sh"]].concat(),
    )
    .spawn()
    .expect("spawn flowerbox")
}

fn workbench(p: &Project) -> std::path::PathBuf {
    p.ws.parent().unwrap().join(".flower-proj")
}

#[tokio::test]
async fn go_isolate_works_in_worktrees_and_integrates() {
    let Some(_engine) = engine_or_skip("isolate_go").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project();
    let model = ScriptedModel::start(&scenario("isolate_go"));
    let started = Instant::now();
    let r: Ran = finish(go(&p, &model, &[]));
    eprintln!("go --isolate (docker): {:?}", started.elapsed());
    assert_eq!(r.code(), 0, "{r:?}");

    // The work arrived in the workspace through a commit on main.
    let hello = p.ws.join("hello.sh");
    assert_eq!(
        std::fs::read_to_string(&hello).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    let log = git(&p.ws, &["log", "--format=%an|%s", "main"]);
    assert!(log.contains("Test User|flowerbox worker-1"), "{log}");
    // The judge ran it in its own container and saw it pass.
    let judged = judge_run_result(&model);
    assert!(judged.contains("hello\njudged-ok"), "{judged}");
    // Merged worktree and branch are gone; the workbench is outside the repository.
    assert_eq!(git(&p.ws, &["branch", "--list", "flower/*"]), "");
    assert_eq!(git(&p.ws, &["worktree", "list"]).lines().count(), 1);
    assert!(workbench(&p).join("notes/需求.md").is_file());
    assert!(!p.ws.join(".flower").exists());
    let status = git(&p.ws, &["status", "--porcelain"]);
    assert_eq!(status, "?? runs/\n", "{status}");
    git(&p.ws, &["fsck", "--strict"]);
}

/// The text of the judge's `judge_run` tool result, as the model received it (not an error).
fn judge_run_result(model: &ScriptedModel) -> String {
    for body in model.recorded() {
        for m in body["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_result" && b["tool_use_id"] == "judge_run" {
                    assert_ne!(b["is_error"], true, "{b}");
                    return b["content"].to_string().replace("\\n", "\n");
                }
            }
        }
    }
    panic!("the judge's command never returned");
}

#[tokio::test]
async fn a_workspace_change_while_the_judge_looks_voids_achieved() {
    let Some(_engine) = engine_or_skip("isolate_go_void").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project();
    let model = ScriptedModel::start(&scenario("isolate_go"));
    let child = go(&p, &model, &["--rounds", "2"]);
    // While the judge's `sleep 3` runs (its step is in flight in the manifest), someone edits
    // the workspace.
    let manifest = p.runs("manifest.json");
    let deadline = Instant::now() + HANG;
    loop {
        let rows = std::fs::read_to_string(&manifest).unwrap_or_default();
        if rows.contains("干活·判定#1") {
            break;
        }
        assert!(Instant::now() < deadline, "the judge never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(p.ws.join("README.md"), "proj, edited during judging\n").unwrap();
    let r = finish(child);
    assert_eq!(r.code(), 0, "{r:?}");
    // The screen says so at once, naming the file.
    let void = r.out.find("作废").unwrap_or_else(|| panic!("{r:?}"));
    let line_start = r.out[..void].rfind('\n').map_or(0, |i| i + 1);
    assert!(r.out[line_start..void].contains("README.md"), "{r:?}");
    // The judge looked and said ACHIEVED, yet a second round ran: the verdict was void, and the
    // round-2 prompt says why, naming the changed file.
    assert!(judge_run_result(&model).contains("judged-ok"));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let steps: Vec<&str> = rows.iter().filter_map(|r| r["step"].as_str()).collect();
    assert!(
        steps.contains(&"干活#round2") && steps.contains(&"干活·判定#2"),
        "{steps:?}"
    );
    let round2 = model
        .recorded()
        .into_iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("判定期间工作区变了"))
        .expect("the round-2 prompt names the void");
    assert!(round2.contains("README.md"), "{round2}");
    // The worker's work is integrated all the same; nothing of it was lost.
    assert!(p.ws.join("hello.sh").is_file());
    assert_eq!(git(&p.ws, &["branch", "--list", "flower/*"]), "");
}

/// `run FILE:NAME` with `isolate = true`: the workflow's workers get worktrees like
/// `go --isolate`'s, their branches are integrated, and the workbench lives outside the
/// repository.
#[tokio::test]
async fn a_workflow_file_with_isolate_works_in_worktrees() {
    let Some(_engine) = engine_or_skip("isolate_run").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project();
    std::fs::write(
        p.ws.parent().unwrap().join("flows.toml"),
        "[main]\nisolate = true\n[[main.steps]]\nname = \"干活\"\nrole = \"coordinator\"\nprompt = \"写个 hello.sh\"\n",
    )
    .unwrap();
    let model = ScriptedModel::start(&serde_json::json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "写 hello.sh", "prompt": "写出 hello.sh", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "好了。"}]}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command":
                "printf 'echo hello\\n' > hello.sh && git rev-parse --abbrev-ref HEAD"}}]},
            {"content": [{"type": "text", "text": "结论:写好了\n依据:无\n产出:hello.sh\n未验证:无"}]}]}]}));
    let flows = p.ws.parent().unwrap().join("flows.toml");
    let target = format!("{}:main", flows.display());
    let r = p.run_in("docker", &model, &["run", &target]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(p.ws.join("hello.sh")).unwrap(),
        "echo hello\n"
    );
    // The worker was on its own branch, now merged and gone.
    let worker_result = model.recorded()[2]["messages"].to_string();
    assert!(worker_result.contains("flower/"), "{worker_result}");
    assert_eq!(git(&p.ws, &["branch", "--list", "flower/*"]), "");
    assert!(workbench(&p).is_dir() && !p.ws.join(".flower").exists());
}
