//! A dead container, pod or engine in a whole run (issue 26 §2): `flowerbox go` against the
//! real engine and a scripted model whose worker runs `sleep 30` (a 120 s timeout), then
//! `echo after`. Once the worker's container shows the `sleep`, the test kills that container,
//! removes it, stops the run's pod, or cuts the engine's socket away. The worker's tool result
//! must say its container went (not that it timed out), its next command must run in a new
//! container, the screen must say what happened, and the run's exit code must be right: 0
//! after a recovery, 1 when the engine stays away (the step in flight recorded as not done).
//! And a run whose coordinator ends at once (a resumed one, typically) says nothing about a
//! slower exec: its container going while its exec service starts is not a fallback.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;

use docker_support::proxy::EngineProxy;
use docker_support::{engine_or_skip, gc_command, SERIAL};
use flow_support::{finish, requests_with, Project, Ran, ScriptedModel};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const BRIEF: &str = "## 目标\n睡一会儿再写 after\n\n## 验收标准\n- 有 after\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n";

/// The worker sleeps 30 s, then writes `after`; the coordinator waits for it.
fn scenario() -> Value {
    json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]},
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "睡一会儿", "prompt": "先睡 30 秒,再写 after", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "做完了。"}]}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "sleep 30; echo done"}}]},
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "echo after | tee after.txt"}}]},
            {"content": [{"type": "text", "text": "结论:写好了\n依据:tee 打出了 after\n产出:after.txt\n未验证:无"}]}]}]})
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The running container of this workspace labelled `flowerbox.<key>=<value>`.
fn container(ws: &std::path::Path, key: &str, value: &str) -> Option<String> {
    let ws = std::fs::canonicalize(ws).unwrap();
    let out = docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=flowerbox.workspace={}", ws.display()),
        "--filter",
        &format!("label=flowerbox.{key}={value}"),
    ]);
    out.lines().next().map(str::to_string)
}

/// Waits (bounded) until worker-1's container runs `sleep 30`; its id.
fn sleeping_worker(p: &Project) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(id) = container(&p.ws, "agent", "worker-1") {
            let top = Command::new("docker").args(["top", &id]).output().unwrap();
            if String::from_utf8_lossy(&top.stdout).contains("sleep 30") {
                return id;
            }
        }
        assert!(Instant::now() < deadline, "the worker never slept");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn engine_present(test: &str) -> Option<docker_support::proxy::EngineProxy> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let engine = rt.block_on(engine_or_skip(test))?;
    let socket = engine
        .endpoint()
        .socket_path()
        .expect("a unix-socket engine");
    Some(EngineProxy::start(&socket))
}

/// What the worker was told after each of its commands (its requests after the first).
fn worker_results(model: &ScriptedModel) -> Vec<String> {
    requests_with(model, "回话格式固定四段")
        .iter()
        .skip(1)
        .map(|r| {
            r["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// On a failed check: kills the run (when it still runs), shows its log and has `gc` remove
/// what it left (containers, network), so a failure leaves nothing on the shared engine.
struct Leftovers<'a> {
    p: &'a Project,
    pid: u32,
}

impl Drop for Leftovers<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        // Reaped by its `Child` (if still held) or already gone; give the kernel a moment.
        std::thread::sleep(Duration::from_millis(200));
        if let Ok(log) = std::fs::read_to_string(self.p.runs("flowerbox.log")) {
            eprintln!("--- flowerbox.log ---\n{log}");
        }
        match gc_command(&self.p.ws).output() {
            Ok(out) if out.status.success() => {}
            other => eprintln!("gc after the failure: {other:?}"),
        }
    }
}

/// Nothing of the workspace's runs is left (once the last run's cleanup is done).
fn no_containers_left(p: &Project) {
    let ws = std::fs::canonicalize(&p.ws).unwrap();
    let left = docker_support::cleanup::once_cleaned(|| {
        docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=flowerbox.workspace={}", ws.display()),
        ])
    });
    assert!(left.trim().is_empty(), "left behind: {left}");
}

/// Runs the scenario, does `to_it` to the worker's container (given its id) while it sleeps,
/// and checks the recovery: exit 0, the tool result, the new container, the screen line.
/// `screen` and `said` list what may be said: `docker rm -f` first kills (the engine reports
/// the death, then the removal), so "stopped (exit code 137)" or "was removed" are both true.
fn recovers(
    test: &str,
    to_it: impl FnOnce(&Project, &str),
    screen: &[&str],
    said: &[&str],
) -> Option<Ran> {
    engine_present(test)?;
    let p = Project::new();
    let model = ScriptedModel::start(&scenario());
    let child = p
        .command_in(
            "docker",
            &model,
            &["go", "--no-goal", "--timeout", "0", "睡一会儿"],
        )
        .spawn()
        .unwrap();
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    let id = sleeping_worker(&p);
    to_it(&p, &id);
    let r = finish(child);
    assert_eq!(r.code(), 0, "{r:?}");
    let results = worker_results(&model);
    assert_eq!(results.len(), 2, "{results:?}");
    // The sleep's result: the container went, said at once (not a timeout).
    assert!(results[0].contains("\"is_error\":true"), "{}", results[0]);
    assert!(
        said.iter().any(|s| results[0].contains(s)),
        "{}",
        results[0]
    );
    assert!(results[0].contains("did not time out"), "{}", results[0]);
    // The next command ran, in a new container, and the worker was told.
    assert!(results[1].contains("after"), "{}", results[1]);
    assert!(
        results[1].contains("runs in a new container"),
        "{}",
        results[1]
    );
    assert!(p.ws.join("after.txt").exists());
    let log = std::fs::read_to_string(p.ws.join("runs/flowerbox.log")).unwrap_or_default();
    assert!(screen.iter().any(|s| r.out.contains(s)), "{r:?}\n{log}");
    no_containers_left(&p);
    Some(r)
}

#[test]
fn a_worker_container_killed_under_a_command_is_made_again_and_the_run_ends_well() {
    let _serial = SERIAL.blocking_lock();
    recovers(
        "flow_liveness_kill",
        |_, id| {
            docker(&["kill", id]);
        },
        &["worker-1 的容器停了,退出码 137"],
        &["stopped (exit code 137)"],
    );
}

#[test]
fn a_worker_container_removed_under_a_command_is_made_again_and_the_run_ends_well() {
    let _serial = SERIAL.blocking_lock();
    recovers(
        "flow_liveness_rm",
        |_, id| {
            docker(&["rm", "-f", id]);
        },
        &["worker-1 的容器被删掉了", "worker-1 的容器停了,退出码 137"],
        &["was removed", "stopped (exit code 137)"],
    );
}

#[test]
fn a_pod_stopped_under_a_command_is_made_again_and_the_run_ends_well() {
    let _serial = SERIAL.blocking_lock();
    let Some(r) = recovers(
        "flow_liveness_pod",
        |p, _| {
            let pod = container(&p.ws, "role", "pod").expect("the run's pod");
            docker(&["stop", &pod]);
        },
        &["这次运行的 pod 停了"],
        &["stopped with the run's pod"],
    ) else {
        return;
    };
    // One line for the pod, none for each container in it.
    assert!(!r.out.contains("的容器停了"), "{r:?}");
}

#[test]
fn an_engine_that_stays_away_stops_the_run_with_exit_1_and_the_step_not_done() {
    let _serial = SERIAL.blocking_lock();
    let Some(proxy) = engine_present("flow_liveness_engine") else {
        return;
    };
    let p = Project::new();
    let model = ScriptedModel::start(&scenario());
    let child = p
        .command_in(
            "docker",
            &model,
            &["go", "--no-goal", "--timeout", "0", "睡一会儿"],
        )
        .env("DOCKER_HOST", &proxy.host)
        .spawn()
        .unwrap();
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    sleeping_worker(&p);
    proxy.cut();
    let r = finish(child);
    assert_eq!(r.code(), 1, "{r:?}");
    assert!(r.out.contains("连不上 Docker 引擎"), "said at once: {r:?}");
    assert!(
        r.err.contains("连不上 Docker 引擎"),
        "the reason at exit: {r:?}"
    );
    // The step in flight is not done; nothing of the run says it is.
    let rows = p.manifest();
    let work: Vec<&Value> = rows.iter().filter(|r| r["step"] == "干活").collect();
    assert_eq!(work.len(), 1, "{rows:?}");
    assert_eq!(work[0]["ok"], false, "{rows:?}");
    assert_eq!(work[0]["error"], "sandbox-lost", "{rows:?}");
    let heard = worker_results(&model);
    assert!(
        heard.is_empty(),
        "the worker never heard back: {heard:?} {r:?}"
    );
    // What the run could not remove, `gc` removes (its owner is gone).
    let gc = gc_command(&p.ws).output().unwrap();
    assert!(gc.status.success(), "{gc:?}");
    no_containers_left(&p);
}

/// Before: a coordinator whose step ends at once had its container removed while its exec
/// service was starting, and the engine's "cannot exec in a stopped container" was taken for a
/// broken service (56 of 71 resumes in issue 26). Three such runs say nothing of the sort.
#[test]
fn a_coordinator_that_ends_at_once_leaves_no_exec_fallback_behind() {
    let _serial = SERIAL.blocking_lock();
    if engine_present("flow_liveness_release").is_none() {
        return;
    }
    for _ in 0..3 {
        let p = Project::new();
        let model = ScriptedModel::start(&json!({"agents": [
            {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]},
            {"role": "coordinator", "turns": [{"content": [{"type": "text", "text": "没什么要做的。"}]}]}]}));
        let r = p.run_in(
            "docker",
            &model,
            &["go", "--no-goal", "--timeout", "0", "看看"],
        );
        assert_eq!(r.code(), 0, "{r:?}");
        assert!(!r.out.contains("exec 服务"), "{r:?}");
        let log = std::fs::read_to_string(p.runs("flowerbox.log")).unwrap();
        assert!(!log.contains("exec service unavailable"), "{log}");
        assert!(!log.contains("exec service did not start"), "{log}");
        no_containers_left(&p);
    }
}
