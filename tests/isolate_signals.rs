//! Interrupted workers are always handed back (issue 26 §1), end to end on the real engine with
//! real git and real signals:
//!
//! - `go --isolate` stopped with SIGTERM or SIGHUP while a worker that already committed (and
//!   wrote more) waits for the model: the next start commits what it left on its branch and
//!   tells the coordinator and the user, as after `kill -9`;
//! - `kill -9` while the worker's own git held `index.lock`: the lock of the dead run is removed,
//!   the files committed, the coordinator and the user told;
//! - `kill -9` while the worker's worktree was being checked out: the debris is removed, never
//!   reported as uncommitted changes.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;
mod isogo_support;

use docker_support::{engine_or_skip, SERIAL};
use flow_support::{finish, requests_with, wait_until, Project, Ran, ScriptedModel};
use flowerbox_testkit::git;
use isogo_support::{branches, go, repo_project_with, Killed, BRIEF};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A project whose workspace is a repository with `files` files in one commit and its own
/// identity.
fn repo_project(files: usize) -> Project {
    repo_project_with(|ws| {
        std::fs::write(ws.join(".gitignore"), "runs/\n").unwrap();
        for n in 0..files {
            let d = ws.join(format!("many/{:03}", n / 200));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("f{n}.txt")), format!("{n}\n")).unwrap();
        }
    })
}

/// Run 1: the coordinator dispatches one worker; the worker runs `command`, then its model
/// call hangs.
fn first_run(command: &str) -> Value {
    json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]},
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "写 hello.sh", "prompt": "写出 hello.sh", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "不会到这里"}]}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": command}}]},
            {"content": [{"type": "text", "text": "不会到这里"}], "fault": {"delay_ms": 120000}}]}]})
}

/// Run 2: the coordinator resumes; no worker runs.
fn second_run() -> ScriptedModel {
    ScriptedModel::start(&json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [{"type": "text", "text": "unused"}]},
            {"content": [{"type": "text", "text": "看到了交还的活。"}]}]}]}))
}

/// `git show <what>` in the workspace.
fn show(p: &Project, what: &str) -> String {
    let out = Command::new("git")
        .args(["show", what])
        .current_dir(&p.ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "git show {what}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Containers of the project's workspace still on the engine.
fn containers_left(p: &Project) -> String {
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=flowerbox.workspace={}", p.ws.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&left.stdout).trim().to_string()
}

/// Run 2 over what run 1 left: exit 0, and what the coordinator was told (its first request's
/// last message: the resumed tool results and the prompt, one user message).
fn resume(p: &Project) -> (Ran, String) {
    let model = second_run();
    let r = finish(go(p, &model).spawn().unwrap());
    assert_eq!(r.code(), 0, "{r:?}");
    let first = &requests_with(&model, "你是协调者")[0]["messages"];
    let last = first.as_array().and_then(|m| m.last()).unwrap().to_string();
    (r, last)
}

/// Run 1 stopped by `sig` while its worker (one commit made, two files uncommitted) waits for
/// the model; run 2 hands the worker back.
async fn stopped_worker_is_handed_back(sig: Signal) {
    let Some(_engine) = engine_or_skip("isolate_signals").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project(0);
    let model = ScriptedModel::start(&first_run(
        "printf '#!/bin/sh\\necho hello\\n' > hello.sh && git add hello.sh && \
         git commit -qm 'hello.sh' && mkdir -p doc && echo half > doc/wip.md && echo t > todo.txt",
    ));
    let mut child = Killed(go(&p, &model).spawn().unwrap());
    wait_until("the worker's second request", || {
        requests_with(&model, "回话格式固定四段").len() >= 2
    });
    kill(Pid::from_raw(child.0.id() as i32), sig).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after {sig}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.signal(), Some(sig as i32), "{status:?}");
    // The stop says what it left for the next start.
    let mut said = String::new();
    std::io::Read::read_to_string(child.0.stdout.as_mut().unwrap(), &mut said).unwrap();
    assert!(said.contains("worker-1 没做完就停了"), "{said}");
    let dead = branches(&p);
    assert_eq!(dead.len(), 1, "{dead:?}");
    let branch = dead[0].clone();
    assert!(branch.ends_with("/worker-1"), "{branch}");
    assert!(
        containers_left(&p).is_empty(),
        "the stop removes its containers"
    );
    drop(model);

    let (r, told) = resume(&p);
    // The worker's own commit and what it left uncommitted are both on its branch, not merged.
    assert!(show(&p, &format!("{branch}:hello.sh")).contains("echo hello"));
    assert_eq!(show(&p, &format!("{branch}:doc/wip.md")), "half\n");
    assert_eq!(show(&p, &format!("{branch}:todo.txt")), "t\n");
    assert!(!p.ws.join("hello.sh").exists(), "not merged");
    assert_eq!(branches(&p), vec![branch.clone()], "kept, never deleted");
    // The coordinator and the user are told which worker, branch and files: with the result
    // of the Agent call the stop cut off.
    assert!(told.contains("tool_result"), "{told}");
    assert!(told.contains("[上次被打断] 执行者 worker-1"), "{told}");
    assert!(told.contains("它留下的改动已提交在分支"), "{told}");
    assert!(
        told.contains(&branch) && told.contains("doc/wip.md") && told.contains("hello.sh"),
        "{told}"
    );
    assert!(r.out.contains("上次被打断的 worker-1 的活交还了"), "{r:?}");
    assert!(!r.out.contains("有没提交的改动"), "{r:?}");
    // The resumed run's containers go in its cleanup.
    let left = docker_support::cleanup::once_cleaned(|| containers_left(&p));
    assert!(left.is_empty(), "{left}");
}

#[tokio::test]
async fn sigterm_leaves_an_in_flight_worker_to_be_handed_back() {
    stopped_worker_is_handed_back(Signal::SIGTERM).await;
}

#[tokio::test]
async fn sighup_leaves_an_in_flight_worker_to_be_handed_back() {
    stopped_worker_is_handed_back(Signal::SIGHUP).await;
}

#[tokio::test]
async fn a_dead_runs_index_lock_is_removed_and_the_files_sealed_and_told() {
    let Some(_engine) = engine_or_skip("isolate_signals").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = repo_project(0);
    // The worker's files, and the lock its git holds when killed mid-`git add`.
    let model = ScriptedModel::start(&first_run(
        "mkdir -p doc && echo half > doc/wip.md && echo n > notes.txt && \
         : > \"$(git rev-parse --git-path index.lock)\" && ls \"$(git rev-parse --git-path index.lock)\"",
    ));
    let child = Killed(go(&p, &model).spawn().unwrap());
    wait_until("the worker's second request", || {
        requests_with(&model, "回话格式固定四段").len() >= 2
    });
    drop(child);
    let branch = branches(&p).pop().expect("the worker's branch");
    drop(model);

    let (r, told) = resume(&p);
    assert_eq!(show(&p, &format!("{branch}:doc/wip.md")), "half\n");
    assert_eq!(show(&p, &format!("{branch}:notes.txt")), "n\n");
    assert!(told.contains("[上次被打断] 执行者 worker-1"), "{told}");
    assert!(told.contains("它留下的改动已提交在分支"), "{told}");
    assert!(
        told.contains("doc/wip.md") && told.contains("notes.txt"),
        "{told}"
    );
    assert!(
        r.out.contains("去掉了它的 git 死后留下的锁 index.lock"),
        "{r:?}"
    );
    assert!(r.out.contains("上次被打断的 worker-1 的活交还了"), "{r:?}");
    // The resumed run's containers go in its cleanup.
    let left = docker_support::cleanup::once_cleaned(|| containers_left(&p));
    assert!(left.is_empty(), "{left}");
}

/// The worktree directory of the first run's worker, once it exists.
fn worker_dir(root: &Path) -> Option<PathBuf> {
    for run in std::fs::read_dir(root).ok()?.flatten() {
        let d = run.path().join("worker-1");
        if d.join(".git").exists() {
            return Some(d);
        }
    }
    None
}

/// Regular files below `dir`, `.git` excluded.
fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if e.file_name() == ".git" {
                continue;
            }
            if t.is_dir() {
                stack.push(e.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test]
async fn a_worktree_killed_while_being_made_is_removed_not_reported_as_changes() {
    let Some(_engine) = engine_or_skip("isolate_signals").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    // Enough files that the checkout takes a while: the kill lands in its middle.
    const FILES: usize = 30_000;
    let p = repo_project(FILES);
    let root = p.ws.parent().unwrap().join(".flower-proj-worktrees");
    let model = ScriptedModel::start(&first_run("echo never"));
    let mut child = Killed(go(&p, &model).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(180);
    let dir = loop {
        if let Some(d) = worker_dir(&root) {
            break d;
        }
        assert!(child.0.try_wait().unwrap().is_none(), "run 1 ended early");
        assert!(Instant::now() < deadline, "no worktree appeared");
        std::thread::sleep(Duration::from_millis(1));
    };
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let checked_out = count_files(&dir);
    assert!(
        checked_out < FILES + 2,
        "the kill came after the checkout ({checked_out} files): nothing to test"
    );
    drop(model);

    let (r, _) = resume(&p);
    assert!(!r.out.contains("有没提交的改动"), "{r:?}");
    assert!(r.out.contains("删掉了没建完的 worktree"), "{r:?}");
    assert!(!dir.exists(), "debris removed");
    assert!(branches(&p).is_empty(), "{:?}", branches(&p));
    git(&p.ws, &["fsck", "--strict"]);
    // The resumed run's containers go in its cleanup.
    let left = docker_support::cleanup::once_cleaned(|| containers_left(&p));
    assert!(left.is_empty(), "{left}");
}
