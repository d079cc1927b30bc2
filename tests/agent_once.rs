//! `flowerbox once` end to end: the real binary, the real `scripted-model` over HTTP, the host
//! sandbox (Docker-backed runs of `once` are in `tests/docker_once.rs`).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;

use model_support::ScriptedModel;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    c
}

#[test]
fn once_runs_a_real_tool_loop_and_shows_real_time_and_cost() {
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "写一个脚本再跑它"},
                     {"type": "tool_use", "name": "Write", "input": {"file_path": "hello.sh", "content": "echo \"hi $((6*7))\"\n"}}]},
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "sleep 1.1; bash hello.sh"}}]},
        {"content": [{"type": "tool_use", "name": "Read", "input": {"file_path": "hello.sh"}}]},
        {"content": [{"type": "text", "text": "脚本输出 hi 42"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = flowerbox(&model, home.path(), ws.path())
        .args([
            "--sandbox",
            "host",
            "once",
            "-t",
            "Read,Bash,Write",
            "写个脚本",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("脚本输出 hi 42"), "{stdout}");
    // Real time and cost, not flower's 0:00 / $0.00.
    let status = stdout.lines().last().unwrap();
    assert!(
        status.contains("0:01") || status.contains("0:02"),
        "{status}"
    );
    assert!(
        !status.contains("$0.00 ") && status.contains('$'),
        "{status}"
    );
    let bash_result = &model.recorded()[2]["messages"][4]["content"][0];
    assert!(bash_result.to_string().contains("hi 42"), "{bash_result}");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path().join("runs/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest[0]["step"], "ad-hoc");
    assert_eq!(manifest[0]["num_turns"], 4);
    let cost = manifest[0]["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0);
    // The status line's figure is the step's, at the step line's precision (it used to say
    // `累计 $0.00` under a step of `$0.0015`).
    assert!(status.contains(&format!("累计 ${cost:.4}")), "{status}");
    assert!(stdout.contains(&format!("· ${cost:.4}")), "{stdout}");
    // The secret never reached a command's environment or the log.
    let log = std::fs::read_to_string(ws.path().join("runs/flowerbox.log")).unwrap_or_default();
    assert!(!log.contains("sk-ant-test-secret"));
}

#[test]
fn sigterm_records_the_step_as_killed_and_exits_by_the_signal() {
    // Its own argument (the pid as the fraction), so no other test's sleep matches, not even
    // this test run from another checkout on the same machine.
    let sleep = format!("sleep 30.{:06}", std::process::id() % 1_000_000);
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": sleep}}]},
        {"content": [{"type": "text", "text": "不会到这里"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut child = flowerbox(&model, home.path(), ws.path())
        .args(["--sandbox", "host", "once", "-t", "Bash", "睡一觉"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the Bash call is in flight (the first request was recorded).
    let t = Instant::now();
    while model.recorded().is_empty() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(nix::libc::SIGTERM), "{status:?}");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path().join("runs/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest[0]["error"], "killed-by-signal");
    assert_eq!(manifest[0]["ok"], false);
    // The `sleep` process group is gone too (its own argument, so no other test's sleep
    // matches; a killed process may take a moment to be reaped once its parent is gone).
    let t = Instant::now();
    let survivors = loop {
        let ps = Command::new("pgrep")
            .args(["-f", &format!("^{sleep}$")])
            .output()
            .unwrap();
        if ps.stdout.is_empty() || t.elapsed() > Duration::from_secs(5) {
            break ps.stdout;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        survivors.is_empty(),
        "sleep survived: {}",
        String::from_utf8_lossy(&survivors)
    );
}

#[test]
fn resume_of_an_unknown_session_is_refused_before_any_model_call() {
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "第一次"}]},
        {"content": [{"type": "text", "text": "接着"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        flowerbox(&model, home.path(), ws.path())
            .args(["--sandbox", "host", "once"])
            .args(args)
            .output()
            .unwrap()
    };
    let first = run(&["开头"]);
    assert!(first.status.success(), "{first:?}");
    let requests = model.recorded().len();
    for args in [
        &["--resume", "nope", "接着"][..],
        &["--resume", "nope", "--fork", "接着"],
    ] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(
            stderr.contains("--resume nope:") && stderr.contains("sessions.db 里没有这条会话"),
            "{stderr}"
        );
    }
    assert_eq!(
        model.recorded().len(),
        requests,
        "no model call for a refused resume"
    );
    // A known id still continues it.
    let db = ws.path().join("runs/sessions.db");
    let id = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT id FROM sessions", [], |r| r.get::<_, String>(0))
        .unwrap();
    let out = run(&["--resume", &id, "接着"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("接着"),
        "{out:?}"
    );
}
