//! `flowerbox once` in its Docker container, end to end: the real binary, the real
//! `scripted-model` over HTTP, the real engine (fails when `CI=true` and the engine is missing).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;

mod docker_support;

use docker_support::{agent_image, engine_or_skip};
use model_support::ScriptedModel;
use serde_json::json;
use std::process::{Command, Stdio};

fn flowerbox(model: &ScriptedModel, home: &std::path::Path, ws: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-secret")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .current_dir(ws)
        .stdin(Stdio::null());
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        c.env("DOCKER_HOST", host);
    }
    c
}

/// `flowerbox once -t TOOLS PROMPT` on `image` in a fresh workspace (returned with its canonical
/// path); it must exit 0.
fn once_ok(
    model: &ScriptedModel,
    image: &str,
    tools: &str,
    prompt: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    once_in(model, image, home.path(), &ws_path, tools, prompt);
    (ws, ws_path)
}

/// `flowerbox once -t TOOLS PROMPT` on `image` with `home` in `ws`; it must exit 0.
fn once_in(
    model: &ScriptedModel,
    image: &str,
    home: &std::path::Path,
    ws: &std::path::Path,
    tools: &str,
    prompt: &str,
) {
    let out = flowerbox(model, home, ws)
        .env("FLOWERBOX_IMAGE", image)
        .args(["once", "-t", tools, prompt])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A script saved with Windows line endings fails in the container with "required file not
/// found" (exit 127) or "bad interpreter" (126); the tool result names the CRLF cause and the
/// fix, read from the file's bytes.
#[tokio::test]
async fn a_crlf_script_in_the_container_gets_the_line_ending_hint() {
    let Some(engine) = engine_or_skip("crlf_hint").await else {
        return;
    };
    let image = agent_image(&engine).await;
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Write",
                      "input": {"file_path": "run.sh", "content": "#!/bin/bash\r\necho hi\r\n"}}]},
        {"content": [{"type": "tool_use", "name": "Bash",
                      "input": {"command": "chmod +x run.sh\n./run.sh"}}]},
        {"content": [{"type": "text", "text": "看到了"}]}]}]}));
    let (_ws, ws_path) = once_ok(&model, &image, "Write,Bash", "跑脚本");
    let result = model.recorded()[2]["messages"][4]["content"][0].clone();
    let text = result["content"].as_str().unwrap_or_default().to_string();
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        text.contains("[退出码 126]") || text.contains("[退出码 127]"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "[{} 的行尾是 CRLF",
            ws_path.join("run.sh").display()
        )),
        "{text}"
    );
    assert!(text.contains("sed -i 's/\\r$//'"), "{text}");
}

/// A `once -t Bash` whose model thinks for ten minutes before its first reply, started in a
/// fresh workspace: (the model, the workspace and HOME, the workspace's `flowerbox.workspace`
/// label, the process).
async fn thinking_once(
    engine: &flowerbox::sandbox::docker::Engine,
) -> (
    ScriptedModel,
    [tempfile::TempDir; 2],
    String,
    std::process::Child,
) {
    let image = agent_image(engine).await;
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"think_ms": 600_000, "content": [{"type": "text", "text": "想完了"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    let label = format!("flowerbox.workspace={}", ws_path.display());
    let child = flowerbox(&model, home.path(), &ws_path)
        .env("FLOWERBOX_IMAGE", &image)
        .args(["once", "-t", "Bash", "想一想"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (model, [ws, home], label, child)
}

/// Stops `child` with SIGTERM; no container of `label` may be left.
async fn stop_leaving_none(
    engine: &flowerbox::sandbox::docker::Engine,
    child: std::process::Child,
    label: &str,
) -> std::process::Output {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let left = docker_support::containers_where(engine, "label", label.to_string()).await;
    assert!(
        left.is_empty(),
        "containers left: {left:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Issue 17: `once` starts its pod and the agent's container while the model thinks. A run
/// stopped (SIGTERM) while those starts are in flight — the pod just created, the agent's
/// container not yet — leaves no container and no network of its workspace behind: teardown
/// waits for the starts in flight and removes what they made.
#[tokio::test]
async fn a_run_stopped_while_its_containers_start_leaves_none() {
    let Some(engine) = engine_or_skip("stopped_while_starting").await else {
        return;
    };
    // The model never answers within the test: every container is started early, for the
    // Bash the agent may run.
    let (_model, _dirs, label, mut child) = thinking_once(&engine).await;
    // The first container of the run exists: its starts are in flight now.
    while docker_support::containers_where(&engine, "label", label.clone())
        .await
        .is_empty()
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "once ended before any container was created"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let out = stop_leaving_none(&engine, child, &label).await;
    assert!(!out.status.success(), "{out:?}");
    let nets = docker_support::run_networks_where(&engine, label).await;
    assert!(nets.is_empty(), "networks left: {nets:?}");
}

/// An agent leaves `.git -> <a host directory>` in a workspace that had no repository; the next
/// run's writing container must not get that directory mounted (the engine follows a bind
/// source's links: with `~/.config/flower` it would hand over the API key). The run decides
/// the `.git` to protect once, at its start, and never mounts a link out of the workspace.
#[tokio::test]
async fn a_git_link_left_by_an_agent_mounts_nothing_of_the_host_into_the_next_run() {
    let Some(engine) = engine_or_skip("git_link").await else {
        return;
    };
    let image = agent_image(&engine).await;
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret_dir = outside.path().canonicalize().unwrap().join("flower");
    std::fs::create_dir(&secret_dir).unwrap();
    let secret = format!("sk-ant-host-secret-{}", std::process::id());
    std::fs::write(
        secret_dir.join(".env"),
        format!("ANTHROPIC_API_KEY={secret}\n"),
    )
    .unwrap();
    let run = |command: String| {
        let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": command}}]},
            {"content": [{"type": "text", "text": "好了"}]}]}]}));
        once_in(&model, &image, home.path(), &ws_path, "Bash", "看看");
        let result = model.recorded()[1]["messages"][2]["content"][0]["content"].to_string();
        (result, serde_json::to_string(&model.recorded()).unwrap())
    };
    let (planted, _) = run(format!(
        "ln -s {} .git && echo planted",
        secret_dir.display()
    ));
    assert!(planted.contains("planted"), "{planted}");
    // The run quarantines what its agent planted (issue 25 §2); a link left by a run that
    // crashed before its sweep is still there for the next run: put it back as such a run would.
    let git = ws_path.join(".git");
    if std::fs::symlink_metadata(&git).is_ok() {
        assert!(std::fs::symlink_metadata(&git)
            .unwrap()
            .file_type()
            .is_symlink());
    } else {
        std::os::unix::fs::symlink(&secret_dir, &git).unwrap();
    }
    let (read, everything) = run(format!(
        "cat {0}/.env; ls -la {0}; echo rc=$?",
        secret_dir.display()
    ));
    assert!(read.contains("No such file"), "{read}");
    assert!(
        !everything.contains(&secret),
        "the host's secret reached a request: {read}"
    );
}

/// Issue 29 §1.2: `run_in_background` in the agent's container: an id at once, the output
/// read in parts with TaskOutput, another command stopped with TaskStop (gone from the
/// container's process list).
#[tokio::test]
async fn a_background_command_in_the_container_is_read_and_stopped() {
    let Some(engine) = engine_or_skip("background").await else {
        return;
    };
    let image = agent_image(&engine).await;
    let tool = |name: &str, input: serde_json::Value| json!({"content": [{"type": "tool_use", "name": name, "input": input}]});
    let count = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '^sleep 3[0]0'; true";
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        tool("Bash", json!({"command": "sh -c 'echo start; sleep 2; echo end'", "run_in_background": true})),
        tool("Bash", json!({"command": "sleep 300", "run_in_background": true})),
        tool("TaskOutput", json!({"task_id": "bash_1"})),
        tool("TaskOutput", json!({"task_id": "bash_1", "block": true, "timeout": 20000})),
        tool("Bash", json!({"command": count})),
        tool("TaskStop", json!({"task_id": "bash_2"})),
        tool("Bash", json!({"command": count})),
        {"content": [{"type": "text", "text": "好了"}]}]}]}));
    let _ws = once_ok(&model, &image, "Bash", "后台跑");
    let result = |i: usize| {
        let msgs = model.recorded()[i]["messages"].clone();
        let last = msgs.as_array().unwrap().last().unwrap().clone();
        last["content"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(result(1).contains("task_id bash_1"), "{}", result(1));
    let first = result(3);
    assert!(
        first.starts_with("[bash_1:运行中]") && first.contains("start"),
        "{first}"
    );
    assert!(!first.contains("end"), "{first}");
    assert_eq!(result(4), "[bash_1:已结束,退出码 0]\nend");
    assert_eq!(result(5), "1", "the long one runs");
    assert!(result(6).starts_with("已停下 bash_2"), "{}", result(6));
    assert_eq!(result(7), "0", "the long one is stopped");
}

/// An image the engine does not have (`--image`, never pulled) stops `go` and a `once` that
/// can run commands before anything of the run is written: no `runs/`, no workbench (issue
/// 29 §2.9). (A text-only `once` needs no image: issue 32 §1.)
#[tokio::test]
async fn a_missing_image_stops_the_start_before_anything_is_written() {
    let Some(_engine) = engine_or_skip("missing_image").await else {
        return;
    };
    let model = ScriptedModel::start(&json!({"agents": []}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    for args in [
        &[
            "--image",
            "flowerbox-test-missing:none",
            "once",
            "-t",
            "Bash",
            "-W",
            "看一眼",
        ][..],
        &[
            "--image",
            "flowerbox-test-missing:none",
            "做 X",
            "--timeout",
            "0",
        ][..],
    ] {
        let out = flowerbox(&model, home.path(), &ws_path)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("flowerbox-test-missing:none"), "{err}");
        for left in ["runs", ".flower"] {
            assert!(!ws_path.join(left).exists(), "{args:?} left {left}");
        }
    }
    assert!(model.recorded().is_empty(), "no model call");
}

/// Seconds since the epoch, as the engine's event filters take them.
fn epoch_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Every container event the engine recorded between `since` and now (plus a second) for a
/// container labelled `label` (`key=value`).
async fn container_events(
    engine: &flowerbox::sandbox::docker::Engine,
    since: u64,
    label: String,
) -> Vec<String> {
    use bollard::query_parameters::EventsOptions;
    use futures::StreamExt;
    let filters = std::collections::HashMap::from([
        ("type".to_string(), vec!["container".to_string()]),
        ("label".to_string(), vec![label]),
    ]);
    let opts = EventsOptions {
        since: Some(since.to_string()),
        until: Some((epoch_secs() + 1).to_string()),
        filters: Some(filters),
    };
    let events: Vec<_> = engine.docker().events(Some(opts)).collect().await;
    events
        .into_iter()
        .map(|e| format!("{:?}", e.unwrap().action))
        .collect()
}

/// Issue 32 §1: `once` with its default tools (Read, Glob, Grep, every project MCP tool; no
/// stdio server configured) runs no command, so it creates nothing on the engine: no pod, no
/// fence, no agent container, not even the disk probe's. The engine's own event log says so.
#[tokio::test]
async fn a_text_only_once_creates_no_container() {
    let Some(engine) = engine_or_skip("text_only_once").await else {
        return;
    };
    let image = agent_image(&engine).await;
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Read", "input": {"file_path": "a.txt"}}]},
        {"content": [{"type": "text", "text": "读完了"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(ws_path.join("a.txt"), "文件内容\n").unwrap();
    let since = epoch_secs();
    let out = flowerbox(&model, home.path(), &ws_path)
        .env("FLOWERBOX_IMAGE", &image)
        .args(["once", "读 a.txt"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("读完了"));
    // The file tool read the file on the host.
    let result = &model.recorded()[1]["messages"][2]["content"][0];
    assert!(
        result["content"].to_string().contains("文件内容"),
        "{result}"
    );
    for label in ["flowerbox.workspace", "flowerbox.disk-probe"] {
        let events =
            container_events(&engine, since, format!("{label}={}", ws_path.display())).await;
        assert!(events.is_empty(), "{label}: {events:?}\n{stderr}");
    }
}

/// Issue 32 §1: a text-only `once` never needs the engine, so one that is down (a
/// `DOCKER_HOST` with no socket) does not stop it: it answers. (A `once` that can run a
/// command still stops at start, see `cli_exit`.)
#[test]
fn a_text_only_once_answers_with_the_engine_down() {
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "不用容器也答得了"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = flowerbox(&model, home.path(), ws.path())
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["--sandbox", "docker", "once", "你好"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("不用容器也答得了"));
    assert!(!stderr.contains("docker.sock"), "{stderr}");
}

/// Containers (any state) carrying every one of `labels` (`key=value`).
async fn labelled(engine: &flowerbox::sandbox::docker::Engine, labels: Vec<String>) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptions;
    let filters = std::collections::HashMap::from([("label".to_string(), labels)]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let listed = engine.list_containers(opts).await.unwrap();
    listed.into_iter().filter_map(|c| c.id).collect()
}

/// Issue 32 §1: an agent that can run a command gets its container while the model produces
/// its first turn, not after: with the first reply held back (the model "thinks" for ten
/// minutes), the agent's own container appears while that one request is still unanswered.
#[tokio::test]
async fn a_bash_agents_container_is_made_while_its_first_turn_is_awaited() {
    let Some(engine) = engine_or_skip("container_during_first_turn").await else {
        return;
    };
    let (model, _dirs, label, mut child) = thinking_once(&engine).await;
    let labels = vec![label.clone(), "flowerbox.agent=ad-hoc".to_string()];
    while labelled(&engine, labels.clone()).await.is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "once ended before its agent's container was made"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The one request of the first turn, still unanswered (its reply is minutes away).
    assert_eq!(model.recorded().len(), 1);
    assert!(child.try_wait().unwrap().is_none());
    stop_leaving_none(&engine, child, &label).await;
}
