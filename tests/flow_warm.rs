//! Workers prepared before they are asked for (issue 32 §2, §4): `flowerbox go` against the
//! real engine and a scripted model. The coordinator's first worker is warm while the run
//! clarifies. A coordinator's `Agent` call is whole in the stream before its message ends, and
//! the worker's container is made from there: with the message's end held back, a container
//! with that worker's mounts exists on the engine before any request of the worker (which can
//! only come after the message ended). A worker prepared for an attempt that broke (its
//! stream failed after the call, the retry dispatched the same call) is undone before the
//! coordinator's next turn, while the dispatched worker's container is still there. Proven by
//! order (the engine's events, the model's requests), never by timing; nothing is left after.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;
mod isogo_support;

use docker_support::{engine_or_skip, gc_command, SERIAL};
use flow_support::{finish, requests_with, Project, Ran, ScriptedModel};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRIEF: &str =
    "## 目标\n跑一下 true\n\n## 验收标准\n- 跑过了\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n";

/// What only a worker's system prompt holds.
const WORKER: &str = "回话格式固定四段";

fn agent_call() -> Value {
    json!({"type": "tool_use", "name": "Agent", "input": {
        "description": "跑 true", "prompt": "跑一下 true", "subagent_type": "coder"}})
}

/// The scenario with the coordinator's `turns`; the worker runs `true` and reports.
fn scenario(coordinator: Value) -> Value {
    json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text": BRIEF}]}]},
        {"role": "coordinator", "turns": coordinator},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "true"}}]},
            {"content": [{"type": "text", "text": "结论:跑过了\n依据:true 退出 0\n产出:无\n未验证:无"}]}]}]})
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn workspace_label(p: &Project) -> String {
    let ws = std::fs::canonicalize(&p.ws).unwrap();
    format!("label=flowerbox.workspace={}", ws.display())
}

/// The containers (any state) of this workspace labelled `flowerbox.agent=<agent>`.
fn containers_of(p: &Project, agent: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-aq",
        "--filter",
        &workspace_label(p),
        "--filter",
        &format!("label=flowerbox.agent={agent}"),
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// The engine's `create` and `destroy` events of this workspace's containers, as
/// `create worker-2` lines, recorded from before the run starts.
struct Events {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Events {
    fn watch(p: &Project) -> Events {
        let mut child = Command::new("docker")
            .args(["events", "--filter", "type=container", "--filter"])
            .arg(workspace_label(p))
            .args(["--filter", "event=create", "--filter", "event=destroy"])
            .args([
                "--format",
                "{{.Action}} {{index .Actor.Attributes \"flowerbox.agent\"}}",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker events");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, seen) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                seen.lock().unwrap().push(line);
            }
        });
        // `docker events` subscribes asynchronously: give it a moment before the run starts.
        std::thread::sleep(Duration::from_millis(500));
        Events { child, lines }
    }

    fn seen(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded, the run still going) until `done`.
fn wait_for(child: &mut Child, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while !done() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before {what}"
        );
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM to the run; it must leave no container of the workspace.
fn stop_leaving_none(p: &Project, child: Child) -> Ran {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let r = finish(child);
    let left = docker(&["ps", "-aq", "--filter", &workspace_label(p)]);
    assert!(left.trim().is_empty(), "left behind: {left}\n{r:?}");
    r
}

/// On a failed check: kills the run, reaps it and has `gc` remove what it left.
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
        // Reaped here: a zombie's pid still exists, and gc keeps what a live owner has.
        let _ = nix::sys::wait::waitpid(pid, None);
        if let Ok(log) = std::fs::read_to_string(self.p.runs("flowerbox.log")) {
            eprintln!("--- flowerbox.log ---\n{log}");
        }
        let _ = gc_command(&self.p.ws).output();
    }
}

fn engine_present(test: &str) -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(engine_or_skip(test)).is_some()
}

fn go(p: &Project, model: &ScriptedModel) -> Child {
    go_with(p, model, &[])
}

fn go_with(p: &Project, model: &ScriptedModel, extra: &[&str]) -> Child {
    let args = ["go", "--no-goal", "--timeout", "0"];
    p.command_in(
        "docker",
        model,
        &[&args[..], extra, &["跑一下 true"]].concat(),
    )
    .spawn()
    .unwrap()
}

/// `id`'s bind mounts as `destination rw` lines; none once it is gone (the warm worker that
/// did not fit goes while the test looks).
fn mounts_of(id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{range .Mounts}}{{.Destination}} {{.RW}}\n{{end}}",
            id,
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The worker's container is made while the coordinator's message is still streaming: its
/// `Agent` block (a worker that may write `src/` only) is out, the message's end is held back
/// for ten minutes, and a container with exactly that worker's mounts (`src/` writable) exists
/// before the worker sent anything (it can only start once the message ended). A run stopped
/// then leaves nothing, the prepared container included.
#[test]
fn a_workers_container_is_made_before_the_coordinators_message_ends() {
    let _serial = SERIAL.blocking_lock();
    if !engine_present("warm_before_message_end") {
        return;
    }
    let p = Project::new();
    std::fs::create_dir_all(p.ws.join("src")).unwrap();
    let mut call = agent_call();
    call["input"]["writes"] = json!(["src/"]);
    let model = ScriptedModel::start(&scenario(json!([
        {"content": [call], "hold_end_ms": 600_000},
        {"content": [{"type": "text", "text": "做完了。"}]}])));
    let mut child = go(&p, &model);
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    let src = format!(
        "{} true",
        std::fs::canonicalize(p.ws.join("src")).unwrap().display()
    );
    wait_for(&mut child, "the scoped worker's container", || {
        containers_of(&p, "worker-1")
            .iter()
            .any(|id| mounts_of(id).contains(&src))
    });
    assert!(
        requests_with(&model, WORKER).is_empty(),
        "the worker ran: the coordinator's message had ended"
    );
    // The worker kept warm for a plain dispatch did not fit this one: it went first.
    wait_for(&mut child, "one container of worker-1", || {
        containers_of(&p, "worker-1").len() == 1
    });
    let r = stop_leaving_none(&p, child);
    assert!(requests_with(&model, WORKER).is_empty(), "{r:?}");
}

/// Issue 32 §2: the coordinator's first worker is ready before the coordinator is even asked:
/// with the clarifier's answer held back for ten minutes, worker-1's container (a plain
/// worker's: the workspace writable) is there. Stopped then, the run leaves nothing.
#[test]
fn the_first_worker_is_warm_while_the_run_clarifies() {
    let _serial = SERIAL.blocking_lock();
    if !engine_present("warm_while_clarifying") {
        return;
    }
    let p = Project::new();
    let mut s = scenario(json!([{"content": [agent_call()]},
        {"content": [{"type": "text", "text": "做完了。"}]}]));
    s["agents"][0]["turns"][0]["think_ms"] = json!(600_000);
    let model = ScriptedModel::start(&s);
    let mut child = go(&p, &model);
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    let ws = format!("{} true", std::fs::canonicalize(&p.ws).unwrap().display());
    wait_for(&mut child, "worker-1's container", || {
        containers_of(&p, "worker-1")
            .iter()
            .any(|id| mounts_of(id).contains(&ws))
    });
    // Only the clarifier was asked, and it has not answered.
    assert_eq!(model.recorded().len(), 1);
    stop_leaving_none(&p, child);
}

/// A worker prepared for an attempt that broke after its `Agent` block (an overloaded error
/// where the message would end) is not the one dispatched: the retry's call takes the first
/// worker prepared for it, and the other is undone before the coordinator's next request:
/// created and destroyed on the engine by then, while the dispatched worker's container is
/// still there (it goes when the coordinator's step ends).
#[test]
fn a_worker_prepared_for_a_broken_attempt_is_removed_before_the_next_turn() {
    let _serial = SERIAL.blocking_lock();
    if !engine_present("warm_unused_removed") {
        return;
    }
    let p = Project::new();
    let events = Events::watch(&p);
    let model = ScriptedModel::start(&scenario(json!([
        {"content": [agent_call()],
         "fault": {"error_event": "overloaded_error", "before_end": true, "times": 1}},
        {"think_ms": 600_000, "content": [{"type": "text", "text": "做完了。"}]}])));
    let mut child = go(&p, &model);
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    // The coordinator's next request: it holds the dispatched worker's report.
    wait_for(&mut child, "the coordinator's second turn", || {
        model
            .tool_results()
            .iter()
            .any(|(_, text, _)| text.contains("[worker-1]"))
    });
    let seen = events.seen();
    assert!(
        seen.iter().any(|l| l == "create worker-2"),
        "no second worker was prepared: {seen:?}"
    );
    assert!(
        seen.iter().any(|l| l == "destroy worker-2"),
        "the unused worker is still there: {seen:?}"
    );
    assert!(containers_of(&p, "worker-2").is_empty());
    assert_eq!(containers_of(&p, "worker-1").len(), 1, "{seen:?}");
    // Only worker-1 ever ran.
    assert_eq!(requests_with(&model, WORKER).len(), 2);
    stop_leaving_none(&p, child);
}

/// The same with `--isolate`: the unused worker's worktree and branch were made (the log says
/// so) and are gone, with its container, before the coordinator's next request.
#[test]
fn a_worktree_prepared_for_a_broken_attempt_goes_with_its_branch() {
    let _serial = SERIAL.blocking_lock();
    if !engine_present("warm_unused_worktree") {
        return;
    }
    let p = isogo_support::repo_project();
    let events = Events::watch(&p);
    let model = ScriptedModel::start(&scenario(json!([
        {"content": [agent_call()],
         "fault": {"error_event": "overloaded_error", "before_end": true, "times": 1}},
        {"think_ms": 600_000, "content": [{"type": "text", "text": "做完了。"}]}])));
    let mut child = go_with(&p, &model, &["--isolate"]);
    let _leftovers = Leftovers {
        p: &p,
        pid: child.id(),
    };
    wait_for(&mut child, "the coordinator's second turn", || {
        model
            .tool_results()
            .iter()
            .any(|(_, text, _)| text.contains("[worker-1]"))
    });
    let log = std::fs::read_to_string(p.runs("flowerbox.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("worktree created") && l.contains("agent=\"worker-2\"")),
        "no worktree was prepared for worker-2:\n{log}"
    );
    let seen = events.seen();
    assert!(seen.iter().any(|l| l == "destroy worker-2"), "{seen:?}");
    let branches = isogo_support::branches(&p);
    assert!(
        !branches.iter().any(|b| b.ends_with("worker-2")),
        "{branches:?}"
    );
    let trees = flowerbox_testkit::git(&p.ws, &["worktree", "list", "--porcelain"]);
    assert!(!trees.contains("worker-2"), "{trees}");
    assert!(trees.contains("worker-1"), "{trees}");
    stop_leaving_none(&p, child);
}

/// The attack a container made early invites: a container made for one box handed to an agent
/// of the same name with another (here: the workspace writable instead of read-only). The
/// engine's factory refuses the second box; the container keeps the first box's mounts (a
/// write fails in it); once the name's container is released, the second box gets a container
/// of its own.
#[tokio::test]
async fn a_container_made_for_one_box_is_never_handed_to_another() {
    use flowerbox::role::Role;
    use flowerbox::sandbox::{SandboxError, SandboxFactory};
    let Some(engine) = docker_support::engine_or_skip("warm_other_box").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = docker_support::TestRun::new(&engine, "warm_other_box").await;
    let reading = run.agent("worker-1", Role::Worker, true);
    let writing = run.agent("worker-1", Role::Worker, false);
    let made = run.factory.sandbox(&reading).await.expect("sandbox");
    let refused = run.factory.sandbox(&writing).await.map(|_| ());
    assert!(
        matches!(refused, Err(SandboxError::Container(_))),
        "{refused:?}"
    );
    let touch = |sb: std::sync::Arc<dyn flowerbox::sandbox::Sandbox>| {
        let ws = run.workspace.clone();
        async move {
            let req = docker_support::req("touch written", &ws, Duration::from_secs(30));
            sb.exec(req).await.expect("exec")
        }
    };
    let out = touch(made.clone()).await;
    assert!(!out.success(), "the read-only container wrote: {out:?}");
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    drop(made);
    run.factory.release("worker-1").await.unwrap();
    let own = run.factory.sandbox(&writing).await.expect("sandbox");
    assert!(touch(own).await.success());
    assert!(run.workspace.join("written").exists());
}
