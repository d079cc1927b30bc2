//! Issue 26 §3 and §4 through the real binary: a save that fails for real (a full filesystem)
//! stops the run with exit 1 naming what was not saved; a start that cannot write its log leaves
//! no `runs/`; a persistent HTTP 500 makes exactly the requests the message says, said once.
//!
//! The full filesystem is a size-limited tmpfs mounted over the workspace in a private mount
//! namespace (`unshare --user --map-root-user --mount`): nothing outside the test's child sees
//! it, and it goes away with the child. Where user namespaces are not allowed the tests say so
//! and fail under `CI=true`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use serde_json::{json, Value};
use std::process::{Command, Stdio};

mod flow_support;
use flow_support::{finish, Project, ScriptedModel};

/// Whether this machine lets the test mount a tmpfs in a private namespace; panics under CI
/// when it does not (a test that cannot run must not pass there).
fn namespaces_work() -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "unshare --user --mount is unavailable: the full-disk tests cannot run"
        );
        eprintln!("skipped: unshare --user --mount is unavailable here");
    }
    ok
}

/// `flowerbox ARGS` (with `p`'s environment against `model`) inside a private mount namespace
/// where the workspace is a fresh tmpfs of `size` (e.g. `2m`), after `prepare` (shell run in
/// the workspace first). Prints `RUNS=<names in runs/ or none>` after the run.
fn run_on_tmpfs(
    p: &Project,
    model: &ScriptedModel,
    size: &str,
    prepare: &str,
    args: &[&str],
) -> flow_support::Ran {
    let c = p.command_in("host", model, args);
    let std_cmd = c.get_program().to_owned();
    let argv: Vec<String> = std::iter::once(std_cmd)
        .chain(c.get_args().map(|a| a.to_owned()))
        .map(|a| a.into_string().unwrap())
        .collect();
    let ws = p.ws.to_str().unwrap();
    // Screen output goes to a file beside the workspace (not full): a pipe nobody reads
    // while the child runs would stop it.
    let out = p.ws.parent().unwrap().join("screen.txt");
    let out = out.to_str().unwrap();
    let script = format!(
        "set -e; mount -t tmpfs -o size={size} tmpfs '{ws}'; cd '{ws}'; {prepare}\n\
         set +e; \"$@\" >'{out}'; rc=$?; tail -c 4000 '{out}'\n\
         if [ -d runs ]; then echo \"RUNS=$(ls -A runs | tr '\\n' ' ')\" >&2; else echo RUNS=none >&2; fi\n\
         exit $rc"
    );
    let mut outer = Command::new("unshare");
    outer
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .args(&argv)
        .env_clear();
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            outer.env(k, v);
        }
    }
    outer
        .current_dir(&p.ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    finish(outer.spawn().expect("spawn unshare"))
}

/// A model whose first answer is `bytes` of text: too big for the session store on a small disk.
fn big_answer(bytes: usize) -> Value {
    json!({"agents": [{"turns": [
        {"content": [{"type": "text", "text": "长".repeat(bytes / 3)}], "stop_reason": "end_turn"}
    ]}]})
}

/// Issue 26 §3: with the disk full, the session failed to save, the run printed `+ 完成` and
/// exited 0. Now it stops with exit 1 and names the record that was not saved.
#[test]
fn a_session_that_cannot_be_saved_fails_the_run() {
    if !namespaces_work() {
        return;
    }
    let p = Project::new();
    let model = ScriptedModel::start(&big_answer(3 << 20));
    let r = run_on_tmpfs(&p, &model, "2m", "", &["once", "说点什么"]);
    let all = format!("{}{}", r.out, r.err);
    assert_eq!(r.code(), 1, "{all}");
    assert!(all.contains("没存下 会话"), "{all}");
    assert!(!all.contains("+ 完成"), "{all}");
    assert_eq!(all.matches("没存下 会话").count(), 1, "said once: {all}");
}

/// Issue 26 §3 as found: `go`'s work step ended with `+ 完成 干活` and exit 0 while its
/// transcript could not be saved. Now the run stops there, exit 1, naming the session.
#[test]
fn go_stops_when_its_work_cannot_be_saved() {
    if !namespaces_work() {
        return;
    }
    let p = Project::new();
    let mut scenario = flow_support::scenario("flow_go");
    // The coordinator's last words are too big for what is left of the disk.
    let coordinator = scenario["agents"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|a| a["role"] == "coordinator")
        .unwrap();
    let last = coordinator["turns"]
        .as_array_mut()
        .unwrap()
        .last_mut()
        .unwrap();
    last["content"][0]["text"] = json!("长".repeat(2 << 20));
    let model = ScriptedModel::start(&scenario);
    let r = run_on_tmpfs(&p, &model, "4m", "", &["--timeout", "0", "写个 hello.sh"]);
    let all = format!("{}{}", r.out, r.err);
    assert_eq!(r.code(), 1, "{all}");
    assert!(all.contains("没存下 会话"), "{all}");
    assert!(!all.contains("+ 完成 干活"), "{all}");
}

/// Issue 26 §3: a start that could not write its log left an empty `runs/` behind.
#[test]
fn a_start_that_cannot_write_its_log_leaves_no_runs_directory() {
    if !namespaces_work() {
        return;
    }
    let p = Project::new();
    let model = ScriptedModel::start(&big_answer(10));
    // Fill the filesystem to the last page.
    let fill = "dd if=/dev/zero of=.fill bs=4k 2>/dev/null || true";
    let r = run_on_tmpfs(&p, &model, "1m", fill, &["once", "说点什么"]);
    assert_eq!(r.code(), 1, "{}{}", r.out, r.err);
    assert!(
        r.err.contains("写不进日志") || r.err.contains("打不开日志"),
        "{}",
        r.err
    );
    assert!(r.err.contains("RUNS=none"), "{}", r.err);
}

/// A model that answers every request with HTTP 500; `retry-after: 0` replaces the backoff,
/// so the tests take no time.
fn always_500() -> ScriptedModel {
    ScriptedModel::start(&json!({"agents": [{"turns": [
        {"content": [{"type": "text", "text": "不会到这"}],
         "fault": {"status": 500, "headers": {"retry-after": "0"}}}
    ]}]}))
}

/// Issue 26 §4: a persistent HTTP 500 made 18 requests (runtime retries × provider attempts)
/// while the message said "after 6 attempts", three times. Now one policy owns the count: the
/// requests made are the number the message gives, and `go` says it once.
#[test]
fn a_persistent_500_makes_the_requests_the_message_says_once() {
    let p = Project::new();
    let model = always_500();
    let r = p.run_in("host", &model, &["--timeout", "0", "做 X"]);
    let all = format!("{}{}", r.out, r.err);
    assert_eq!(r.code(), 1, "{all}");
    let made = model.recorded().len();
    assert_eq!(made, 6, "{all}");
    let said = format!("{made} 次请求都没成功");
    assert_eq!(all.matches(&said).count(), 1, "said once: {all}");
    assert_eq!(all.matches("模型调用失败").count(), 1, "{all}");
    assert!(all.contains("第 5/6 次请求失败"), "{all}");
    assert!(!all.contains("第 6/6"), "no retry after the last: {all}");
}

/// The same through `once`: six requests; the screen says it once, and the exit message on
/// stderr is the run's own line.
#[test]
fn once_makes_the_requests_its_message_says() {
    let p = Project::new();
    let model = always_500();
    let r = p.run_in("host", &model, &["once", "说点什么"]);
    assert_eq!(r.code(), 1, "{}{}", r.out, r.err);
    assert_eq!(model.recorded().len(), 6);
    assert_eq!(r.out.matches("6 次请求都没成功").count(), 1, "{}", r.out);
    assert_eq!(r.err.matches("6 次请求都没成功").count(), 1, "{}", r.err);
}

/// Issue 26 §4: a `sessions.db` of another program (its own `sessions` table) printed the
/// whole failed migration, 26 lines. Now one line says what it is (and one how to go on).
#[test]
fn a_foreign_sessions_table_is_named_in_one_line() {
    let p = Project::new();
    let db = p.runs("sessions.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE sessions (token TEXT, expires INTEGER);")
        .unwrap();
    let model = ScriptedModel::start(&big_answer(10));
    let r = p.run_in("host", &model, &["once", "说点什么"]);
    assert_eq!(r.code(), 1, "{}{}", r.out, r.err);
    assert!(
        r.err.contains("不是 flowerbox 建的 sessions 表"),
        "{}",
        r.err
    );
    assert!(r.err.lines().count() <= 2, "{}", r.err);
    assert!(!r.err.contains("CREATE"), "{}", r.err);
}
