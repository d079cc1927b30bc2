//! A run killed with SIGKILL and restarted resumes from `sessions.db` with exactly the context
//! the model saw, trimmed as specified, and the stored rows unchanged byte for byte.
//!
//! The "run" is a child process: this test binary re-executed with `FLOWERBOX_PERSIST_CHILD`
//! set, running the ignored `child` test, which appends a scripted conversation and reports
//! progress on stdout.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::model::{ContentBlock, Message, Speaker};
use flowerbox::role::Role;
use flowerbox::session::{
    NoticeKind, SessionMeta, SessionStore, SqliteSessionStore, TrimPolicy, INTERRUPTED_NOTE,
};
use flowerbox_testkit::{bash_call as bash, tool_call as call, tool_result as result};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod child_support;
use child_support::{helper, spawn_lines, wait_for};

const ENV_MODE: &str = "FLOWERBOX_PERSIST_CHILD";
const ENV_DB: &str = "FLOWERBOX_PERSIST_DB";
const ENV_SESSION: &str = "FLOWERBOX_PERSIST_SESSION";
const ENV_DIR: &str = "FLOWERBOX_PERSIST_DIR";
/// Generous bound that only catches hangs.
const HANG: Duration = Duration::from_secs(120);

enum Item {
    Msg(Message, Option<u64>),
    Notice(NoticeKind, &'static str),
}

/// The scripted run. It ends with a call whose tool never returns: the process dies mid-tool.
fn script() -> Vec<Item> {
    use Item::*;
    vec![
        Msg(Message::user_text("把 data/ 的规模摸清楚"), None),
        Msg(bash("g1", "git status -s"), Some(21_000)),
        Msg(result("g1", " M a.txt"), None),
        Notice(
            NoticeKind::NetworkError,
            "overloaded_error 529, retrying in 4s",
        ),
        Msg(
            call("r1", "Read", json!({ "file_path": "/w/data/big1.txt" })),
            Some(22_000),
        ),
        Msg(result("r1", &"A".repeat(3000)), None),
        Msg(bash("g2", "ls -la data"), Some(23_000)),
        Msg(result("g2", "total 3"), None),
        Msg(bash("b1", "cargo test"), Some(24_000)),
        Msg(result("b1", &"B".repeat(2500)), None),
        Msg(bash("g3", "git log --oneline | head"), Some(25_000)),
        Msg(result("g3", "abc123 init"), None),
        Msg(
            Message {
                role: Speaker::Assistant,
                content: vec![
                    ContentBlock::text("继续看 big2"),
                    ContentBlock::ToolUse {
                        id: "r2".into(),
                        name: "Read".into(),
                        input: json!({ "file_path": "/w/data/big2.txt" }),
                    },
                ],
            },
            Some(26_000),
        ),
        Msg(result("r2", &"C".repeat(4000)), None),
        Msg(bash("g4", "ps aux | grep python"), Some(27_000)),
        Msg(result("g4", "python3 server.py"), None),
        Msg(bash("k1", "python3 long_job.py"), Some(28_000)),
    ]
}

/// A long generated conversation for the kill-at-any-moment run.
fn long_script(n: usize) -> Vec<Message> {
    let mut v = vec![Message::user_text("长跑")];
    for i in 0..n {
        let id = format!("t{i}");
        let (tool, body) = match i % 3 {
            0 => (bash(&id, "git status"), format!("M f{i}")),
            1 => (
                call(&id, "Read", json!({ "file_path": format!("/w/{i}") })),
                "x".repeat(2000 + i),
            ),
            _ => (bash(&id, "cargo build"), format!("built {i}")),
        };
        v.push(tool);
        v.push(result(&id, &body));
    }
    v
}

fn meta() -> SessionMeta {
    SessionMeta {
        agent: "coordinator".into(),
        role: Role::Coordinator,
        step: Some("干活".into()),
        parent: None,
        run: "20260101-000000-000001".into(),
    }
}

/// The child side. Ignored in normal runs; the parent runs it with `--ignored`.
#[test]
#[ignore = "child process of the persistence tests"]
fn child() {
    let Ok(mode) = std::env::var(ENV_MODE) else {
        return;
    };
    let store = SqliteSessionStore::open(std::env::var(ENV_DB).unwrap()).unwrap();
    let session = std::env::var(ENV_SESSION).unwrap();
    let dir = PathBuf::from(std::env::var(ENV_DIR).unwrap());
    match mode.as_str() {
        "scripted" => {
            // What the model is sent: the in-memory conversation, saved after every append.
            let mut seen: Vec<String> = Vec::new();
            for item in script() {
                match item {
                    Item::Msg(m, ctx) => {
                        store.append(&session, &m, ctx).unwrap();
                        seen.push(serde_json::to_string(&m).unwrap());
                        std::fs::write(dir.join("seen.json"), serde_json::to_vec(&seen).unwrap())
                            .unwrap();
                    }
                    Item::Notice(k, t) => store.append_notice(&session, k, t).unwrap(),
                }
            }
            println!("MIDTOOL");
            // The tool never returns; the parent kills us here.
            std::thread::sleep(HANG);
        }
        "continuous" => {
            for (i, m) in long_script(400).iter().enumerate() {
                store.append(&session, m, None).unwrap();
                println!("APPENDED {i}");
            }
            std::thread::sleep(HANG);
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn_child(
    mode: &str,
    db: &Path,
    session: &str,
    dir: &Path,
) -> (Child, mpsc::Receiver<String>) {
    let mut c = helper("child");
    c.env(ENV_MODE, mode)
        .env(ENV_DB, db)
        .env(ENV_SESSION, session)
        .env(ENV_DIR, dir)
        .stderr(Stdio::inherit());
    spawn_lines("child", c)
}

fn sigkill(mut child: Child) {
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success());
}

fn payload_digest(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT session_id, seq, kind, notice_kind, payload FROM entries ORDER BY session_id, seq").unwrap();
    let mut h = Sha256::new();
    let rows = stmt
        .query_map([], |r| {
            Ok(format!(
                "{}|{}|{}|{:?}|{}",
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?
            ))
        })
        .unwrap();
    for row in rows {
        h.update(row.unwrap().as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

fn expiry(cmd: &str, age: usize) -> String {
    format!("[`{cmd}` 的结果已过期(第 {age} 轮前),当前状态可能已变。需要请重新执行]")
}

#[test]
fn sigkill_mid_tool_then_resume_gives_exactly_what_the_model_saw_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs/sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    let session = store.create(&meta()).unwrap();
    drop(store);

    let (child, rx) = spawn_child("scripted", &db, &session, dir.path());
    wait_for(&rx, HANG, |l| l == "MIDTOOL");
    sigkill(child);

    // The restarted process.
    let store = SqliteSessionStore::open(&db).unwrap();
    let seen: Vec<String> =
        serde_json::from_slice(&std::fs::read(dir.path().join("seen.json")).unwrap()).unwrap();
    let raw = store.load_raw_json(&session).unwrap();
    assert_eq!(
        raw, seen,
        "stored rows must be exactly what the model was sent"
    );
    let seen_msgs: Vec<Message> = seen
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    assert_eq!(store.last_context(&session).unwrap(), Some(28_000));

    let spill = dir.path().join(".flower/spill");
    let policy = TrimPolicy {
        trim_large: true,
        keep_recent: 2,
        min_chars: 2000,
        keep_ephemeral: 2,
        spill_dir: spill.clone(),
    };
    let before = payload_digest(&db);
    let loaded = store.load(&session, &policy).unwrap();
    // The spill files are written off the load's path; what reads a pointer waits for them.
    store.spill_written().unwrap();
    assert_eq!(payload_digest(&db), before, "load must not modify any row");

    // Expected, built by hand: the notice is gone; of the 4 ephemeral results the 2 oldest
    // expire (ages 4 and 3); of the 3 large results the oldest is spilled; the call that never
    // returned is answered by the interrupted note.
    let a = "A".repeat(3000);
    let a_path = spill.join(format!(
        "{}.txt",
        &hex::encode(Sha256::digest(a.as_bytes()))[..16]
    ));
    let mut expected = seen_msgs.clone();
    expected[2] = result("g1", &expiry("git status -s", 4));
    expected[4] = result(
        "r1",
        &format!(
            "[工具结果已归档:3000 字符。完整内容在 {},需要时用 Read 读取]",
            a_path.display()
        ),
    );
    expected[6] = result("g2", &expiry("ls -la data", 3));
    expected.push(result("k1", INTERRUPTED_NOTE));
    assert_eq!(loaded, expected);
    assert_eq!(std::fs::read_to_string(&a_path).unwrap(), a);
    assert!(!serde_json::to_string(&loaded)
        .unwrap()
        .contains("overloaded_error"));

    // Trimming is reversible: without trim the large result is back, verbatim.
    let untrimmed = store
        .load(
            &session,
            &TrimPolicy {
                trim_large: false,
                ..policy.clone()
            },
        )
        .unwrap();
    assert_eq!(untrimmed[4], seen_msgs[4]);

    // A fork carries the same history under a new id.
    let fork = store.fork(&session).unwrap();
    assert_ne!(fork, session);
    assert_eq!(store.load_raw_json(&fork).unwrap(), raw);
    assert_eq!(store.load(&fork, &policy).unwrap(), expected);

    // The resumed run continues from there.
    let next = result("k1", "job finished");
    store.append(&session, &next, None).unwrap();
    store
        .append(
            &session,
            &Message::assistant_text("规模摸清了"),
            Some(29_000),
        )
        .unwrap();
    let resumed = store.load(&session, &policy).unwrap();
    assert_eq!(resumed.len(), expected.len() + 1);
    assert_eq!(resumed[16], next);
    assert_eq!(resumed[17], Message::assistant_text("规模摸清了"));
    assert_eq!(
        store.load_raw_json(&fork).unwrap(),
        raw,
        "the fork does not see the original's new messages"
    );
}

#[test]
fn sigkill_at_an_arbitrary_moment_leaves_a_valid_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs/sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    let session = store.create(&meta()).unwrap();
    drop(store);

    let (child, rx) = spawn_child("continuous", &db, &session, dir.path());
    // A different moment on every run.
    let at: usize = rand::random_range(50..600);
    let line = wait_for(&rx, HANG, |l| {
        l.strip_prefix("APPENDED ")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= at)
    });
    sigkill(child);
    let reported: usize = line["APPENDED ".len()..].parse().unwrap();

    let store = SqliteSessionStore::open(&db).unwrap();
    let script = long_script(400);
    let raw = store.load_raw_json(&session).unwrap();
    eprintln!(
        "killed after {} of {} appends (last reported {reported})",
        raw.len(),
        script.len()
    );
    assert!(
        raw.len() > reported,
        "every reported append is durable ({} rows, reported {reported})",
        raw.len()
    );
    let expected_raw: Vec<String> = script[..raw.len()]
        .iter()
        .map(|m| serde_json::to_string(m).unwrap())
        .collect();
    assert_eq!(
        raw, expected_raw,
        "the rows are a byte-exact prefix of what was appended"
    );

    let policy = TrimPolicy::new(dir.path().join("spill"), true);
    let loaded = store.load(&session, &policy).unwrap();
    // The spill files are written off the load's path; what reads a pointer waits for them.
    store.spill_written().unwrap();
    // Valid for the API: every call is answered by the next message, each exactly once.
    for (i, m) in loaded.iter().enumerate() {
        let uses: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        if uses.is_empty() {
            continue;
        }
        let next = &loaded[i + 1];
        assert_eq!(next.role, Speaker::User);
        let mut answered: Vec<&str> = next
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        answered.sort();
        let mut want = uses.clone();
        want.sort();
        assert_eq!(answered, want, "message {i}");
    }
    // Every trimmed result points at a file holding the original text.
    let mut trimmed = 0;
    let mut expired = 0;
    if raw.len().is_multiple_of(2) {
        // Killed between a call and its result: the call is answered by the interrupted note.
        assert_eq!(loaded.len(), raw.len() + 1);
        assert_eq!(
            loaded.last().unwrap().content[0],
            result(&format!("t{}", raw.len() / 2 - 1), INTERRUPTED_NOTE).content[0]
        );
    } else {
        assert_eq!(loaded.len(), raw.len());
    }
    for (orig, got) in script[..raw.len()].iter().zip(&loaded) {
        if orig == got {
            continue;
        }
        let (
            ContentBlock::ToolResult { content: o, .. },
            ContentBlock::ToolResult { content: g, .. },
        ) = (&orig.content[0], &got.content[0])
        else {
            panic!("only tool results may change: {got:?}");
        };
        if g.starts_with("[工具结果已归档") {
            let path = g
                .split("完整内容在 ")
                .nth(1)
                .unwrap()
                .split(",需要时")
                .next()
                .unwrap();
            assert_eq!(&std::fs::read_to_string(path).unwrap(), o);
            trimmed += 1;
        } else {
            assert!(g.starts_with("[`git status` 的结果已过期"), "{g}");
            expired += 1;
        }
    }
    // With flower's defaults: all but the 20 most recent large results are trimmed, all but
    // the 6 most recent `git status` results expire.
    let stored = &script[..raw.len()];
    let results = |pred: &dyn Fn(&str) -> bool| {
        stored
            .iter()
            .filter(|m| matches!(&m.content[0], ContentBlock::ToolResult { content, .. } if pred(content)))
            .count()
    };
    assert_eq!(trimmed, results(&|c| c.len() >= 2000).saturating_sub(20));
    assert_eq!(
        expired,
        results(&|c| c.starts_with("M f")).saturating_sub(6)
    );
    assert_eq!(store.load_raw_json(&session).unwrap(), raw);
}
