//! Interrupted work is handed back (issue 20), end to end on the real engine: `go --isolate`
//! is killed with SIGKILL while its worker (which already wrote files in its container) waits
//! for the model; the next run commits what the worker left inside a container with the
//! worker's own mounts, brings it back to the worker's branch, keeps the worktree, and tells
//! the coordinator which worker, branch, worktree and files.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;
mod isogo_support;

use docker_support::{engine_or_skip, SERIAL};
use flow_support::{finish, requests_with, wait_until, ScriptedModel};
use isogo_support::{branches, go, repo_project, Killed, BRIEF};
use serde_json::json;
use std::process::Command;

#[tokio::test]
async fn a_killed_workers_files_come_back_on_its_branch_and_the_coordinator_is_told() {
    let Some(_engine) = engine_or_skip("isolate_handback").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project();

    // Run 1: the worker writes two files in its container, then its model call hangs.
    let model = ScriptedModel::start(&json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]},
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "写 hello.sh", "prompt": "写出 hello.sh", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "不会到这里"}]}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command":
                "printf '#!/bin/sh\\necho hello\\n' > hello.sh && mkdir -p doc && echo half > doc/wip.md"}}]},
            {"content": [{"type": "text", "text": "不会到这里"}], "fault": {"delay_ms": 120000}}]}]}));
    let child = Killed(go(&p, &model).spawn().unwrap());
    wait_until("the worker's second request", || {
        requests_with(&model, "回话格式固定四段").len() >= 2
    });
    drop(child);
    let dead = branches(&p);
    assert_eq!(dead.len(), 1, "{dead:?}");
    let branch = dead[0].clone();
    assert!(branch.ends_with("/worker-1"), "{branch}");
    drop(model);

    // Run 2: the coordinator resumes; no worker runs.
    let model = ScriptedModel::start(&json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [{"type": "text", "text": "unused"}]},
            {"content": [{"type": "text", "text": "看到了交还的活。"}]}]}]}));
    let r = finish(go(&p, &model).spawn().unwrap());
    assert_eq!(r.code(), 0, "{r:?}");

    // The worker's files are committed on its branch (not on main), the worktree kept.
    let show = |what: &str| {
        let out = Command::new("git")
            .args(["show", what])
            .current_dir(&p.ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git show {what}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(show(&format!("{branch}:doc/wip.md")), "half\n");
    assert!(show(&format!("{branch}:hello.sh")).contains("echo hello"));
    assert!(
        !p.ws.join("hello.sh").exists(),
        "not merged into the workspace"
    );
    assert_eq!(branches(&p), vec![branch.clone()], "kept, never deleted");

    // The coordinator was told which worker, which branch, which worktree, which files.
    let told = requests_with(&model, "你是协调者")[0]["messages"].to_string();
    assert!(told.contains("[上次被打断] 执行者 worker-1"), "{told}");
    assert!(told.contains(&branch), "{told}");
    assert!(
        told.contains("doc/wip.md") && told.contains("hello.sh"),
        "{told}"
    );
    assert!(told.contains(&format!("git merge {branch}")), "{told}");
    let worktree = p.ws.parent().unwrap().join(".flower-proj-worktrees");
    assert!(told.contains(&worktree.display().to_string()), "{told}");
    assert!(told.contains("它留下的改动已提交在分支"), "{told}");
    assert!(r.out.contains("上次被打断的 worker-1 的活交还了"), "{r:?}");
    assert!(
        !r.out.contains("上次运行的残留:留着 worktree"),
        "said once: {r:?}"
    );

    // Nothing of either run is left on the engine (once the last one's cleanup is done).
    let left = docker_support::cleanup::once_cleaned(|| {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label=flowerbox.workspace={}", p.ws.display()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    assert!(left.trim().is_empty(), "{left}");
}
