//! Damaged state is recovered, loudly (issue 20): a garbage `lineage.json` after `kill -9`, a
//! `sessions.db` that lost its sessions, a half-truncated `sessions.db` — the real binary
//! against the strict `scripted-model`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod flow_support;

use flow_support::*;
use flowerbox::flow::brief::Brief;

const ASK: &str = "写个 hello.sh";

/// A child killed (SIGKILL) and reaped when the test ends, also when an assertion panics.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `flow_kill_1` and kills it with SIGKILL while its worker's model call hangs; returns
/// the work step's session.
fn killed_in_round_1(p: &Project, sandbox: &str) -> String {
    killed_after(p, sandbox, scenario("flow_kill_1"), 1)
}

/// Runs `s` and kills it with SIGKILL once the worker sent `requests` model requests.
fn killed_after(p: &Project, sandbox: &str, s: serde_json::Value, requests: usize) -> String {
    let model = ScriptedModel::start(&s);
    let child = Killed(
        p.command_in(sandbox, &model, &["--timeout", "0", ASK])
            .spawn()
            .unwrap(),
    );
    wait_until("the worker's request", || {
        requests_with(&model, "回话格式固定四段").len() >= requests
    });
    wait_until("the work session in lineage", || {
        std::fs::read_to_string(p.runs("lineage.json")).is_ok_and(|t| t.contains("\"干活\""))
    });
    let sid = p.lineage()["steps"]["干活"].as_str().unwrap().to_string();
    drop(child);
    sid
}

/// A garbage `lineage.json` is moved aside with a message and rebuilt from `sessions.db`: the
/// wake resumes the old coordinator session, and the request typed again is not appended to
/// the brief a second time.
#[test]
fn a_garbage_lineage_is_rebuilt_and_the_wake_goes_on() {
    let p = Project::new();
    let before = killed_in_round_1(&p, &sandbox());
    std::fs::write(p.runs("lineage.json"), b"\x00\x01 not json {{{").unwrap();

    let model = ScriptedModel::start(&scenario("flow_kill_2"));
    let r = p.run(&model, &["--timeout", "0", ASK]);
    assert_eq!(r.code(), 0, "{r:?}");
    let said = r
        .out
        .lines()
        .find(|l| l.starts_with("! ") && l.contains("lineage.json 坏了"))
        .unwrap_or_else(|| panic!("not said:\n{}", r.out));
    assert!(
        said.contains("原文件移到") && said.contains("按 sessions.db 重建了血缘"),
        "{said}"
    );
    assert_eq!(
        p.lineage()["steps"]["干活"],
        before.as_str(),
        "the old session resumed"
    );
    let first = &requests_with(&model, "你是协调者")[0];
    assert!(
        first["messages"].to_string().contains("接着上次的工作继续"),
        "{first}"
    );
    let brief = Brief::load(&p.note("需求.md")).unwrap().unwrap();
    assert!(brief.amendments.is_empty(), "appended again: {brief:?}");
    let kept = std::fs::read_dir(p.ws.join("runs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("lineage.json.corrupt-")
        });
    assert!(kept, "the damaged file is kept");
}

/// Sessions `lineage.json` names that `sessions.db` no longer has: said before the steps
/// start over.
#[test]
fn sessions_missing_from_the_store_are_named_first() {
    let p = Project::new();
    killed_in_round_1(&p, &sandbox());
    for f in ["sessions.db", "sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(p.runs(f));
    }
    let model = ScriptedModel::start(&scenario("flow_go"));
    let r = p.run(&model, &["--timeout", "0"]);
    let said = r
        .out
        .lines()
        .position(|l| l.contains("在 sessions.db 里查不到:") && l.contains("干活"))
        .unwrap_or_else(|| panic!("not said:\n{}", r.out));
    let work = r
        .out
        .lines()
        .position(|l| l.starts_with("== 干活"))
        .unwrap();
    assert!(said < work, "said before the work starts over:\n{}", r.out);
}

/// A half-truncated `sessions.db`: every start says it is damaged and that `--new` starts over;
/// `--new` moves it aside and runs.
#[test]
fn a_truncated_store_is_named_and_new_moves_it_aside() {
    let p = Project::new();
    let model = ScriptedModel::start(&scenario("flow_go"));
    assert_eq!(p.run(&model, &["--timeout", "0", ASK]).code(), 0);
    let db = p.runs("sessions.db");
    let size = std::fs::metadata(&db).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.set_len(size / 2).unwrap();
    drop(f);
    for f in ["sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(p.runs(f));
    }
    let r = p.run(&model, &["--timeout", "0"]);
    assert_eq!(r.code(), 1, "{r:?}");
    assert!(r.err.contains("sessions.db 坏了"), "{}", r.err);
    assert!(r.err.contains("加 --new 把它移到一边从头开始"), "{}", r.err);

    let r = p.run(&model, &["--timeout", "0", "--new", "--clarify-only", ASK]);
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(
        r.out.contains("坏了") && r.out.contains("原文件移到"),
        "{}",
        r.out
    );
    let aside = std::fs::read_dir(p.ws.join("runs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sessions.db.corrupt-")
        })
        .count();
    assert_eq!(aside, 1, "moved, never deleted");
}

/// The containers of this workspace, by the `docker` command line (the engine is required:
/// `CI=true` fails without it, elsewhere the test says it skipped).
fn workspace_containers(ws: &std::path::Path) -> Option<Vec<String>> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=flowerbox.workspace={}", ws.display()))
        .output();
    match out {
        Ok(o) if o.status.success() => Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
        ),
        other => {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true but docker is unusable: {other:?}"
            );
            eprintln!("SKIPPED: no Docker engine ({other:?})");
            None
        }
    }
}

/// A run killed with SIGKILL leaves its containers; the next start meets a damaged
/// `sessions.db` and cannot begin — and still removes them.
#[test]
fn a_start_that_fails_on_a_damaged_store_still_sweeps_a_dead_runs_containers() {
    let p = Project::new();
    if workspace_containers(&p.ws).is_none() {
        return;
    }
    // The worker runs a command (its container exists), then its next model call hangs.
    let mut s = scenario("flow_kill_1");
    for agent in s["agents"].as_array_mut().unwrap() {
        if agent["role"] == "worker" {
            agent["turns"] = serde_json::json!([
                {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "true"}}]},
                {"content": [{"type": "text", "text": "不会到这里"}], "fault": {"delay_ms": 60000}}]);
        }
    }
    killed_after(&p, "docker", s, 2);
    let left = workspace_containers(&p.ws).unwrap();
    assert!(!left.is_empty(), "kill -9 leaves the containers");
    // What the killed run wrote is still in the write-ahead log; the database file itself is
    // overwritten (a disk that lost it).
    std::fs::write(p.runs("sessions.db"), vec![0x5a; 16 * 1024]).unwrap();
    for f in ["sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(p.runs(f));
    }
    let model = ScriptedModel::start(&scenario("flow_kill_2"));
    let r = p.run_in("docker", &model, &["--timeout", "0"]);
    assert_eq!(r.code(), 1, "{r:?}");
    assert!(r.err.contains("sessions.db 坏了"), "{}", r.err);
    assert_eq!(
        workspace_containers(&p.ws).unwrap(),
        Vec::<String>::new(),
        "{r:?}"
    );
}
