//! Unit tests of the SQLite session store.

use super::*;
use crate::model::{ContentBlock, Speaker};
use serde_json::json;

fn meta() -> SessionMeta {
    SessionMeta {
        agent: "worker-1".into(),
        role: Role::Worker,
        step: Some("干活".into()),
        parent: None,
        run: "20260101-120000-abcdef".into(),
    }
}

fn open() -> (tempfile::TempDir, SqliteSessionStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(dir.path().join("runs/sessions.db")).unwrap();
    (dir, store)
}

#[test]
fn opens_in_wal_with_foreign_keys_and_the_latest_schema() {
    let (dir, store) = open();
    let conn = store.lock();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fk, 1);
    drop(conn);
    assert_eq!(store.schema_version().unwrap(), 1);
    // Reopening migrates nothing twice.
    drop(store);
    let again = SqliteSessionStore::open(dir.path().join("runs/sessions.db")).unwrap();
    assert_eq!(again.schema_version().unwrap(), 1);
}

#[test]
fn messages_round_trip_exactly_and_notices_stay_out_of_both_loads() {
    let (dir, store) = open();
    let id = store.create(&meta()).unwrap();
    let msgs = vec![
        Message::user_text("写个 md 转 html 的脚本 \u{1F600} \"quoted\" \\ back"),
        Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hm".into(),
                    signature: "sig==".into(),
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "ls", "n": 1.5e-7, "nested": {"z": [1, 2, null]}}),
                },
            ],
        },
        Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "a\nb".into(),
                is_error: true,
            }],
        },
    ];
    store.append(&id, &msgs[0], None).unwrap();
    store
        .append_notice(&id, NoticeKind::NetworkError, "503")
        .unwrap();
    store.append(&id, &msgs[1], Some(12_345)).unwrap();
    store.append(&id, &msgs[2], None).unwrap();
    let json: Vec<String> = msgs
        .iter()
        .map(|m| serde_json::to_string(m).unwrap())
        .collect();
    assert_eq!(store.load_raw_json(&id).unwrap(), json);
    assert_eq!(store.load_raw(&id).unwrap(), msgs);
    let policy = TrimPolicy::new(dir.path().join("spill"), true);
    assert_eq!(store.load(&id, &policy).unwrap(), msgs);
    let entries = store.entries(&id).unwrap();
    assert_eq!(
        entries[1],
        Entry::Notice(NoticeKind::NetworkError, "503".into())
    );
    assert_eq!(store.last_context(&id).unwrap(), Some(12_345));
}

#[test]
fn unknown_sessions_are_not_found() {
    let (dir, store) = open();
    let policy = TrimPolicy::new(dir.path().join("spill"), false);
    assert!(matches!(
        store.append("nope", &Message::user_text("x"), None),
        Err(SessionError::NotFound(_))
    ));
    assert!(matches!(
        store.append_notice("nope", NoticeKind::Interrupted, "x"),
        Err(SessionError::NotFound(_))
    ));
    assert!(matches!(
        store.load("nope", &policy),
        Err(SessionError::NotFound(_))
    ));
    assert!(matches!(
        store.load_raw("nope"),
        Err(SessionError::NotFound(_))
    ));
    assert!(matches!(store.fork("nope"), Err(SessionError::NotFound(_))));
    assert_eq!(store.meta("nope").unwrap(), None);
    assert_eq!(store.last_context("nope").unwrap(), None);
    assert!(!store.has_session("nope").unwrap());
}

#[test]
fn fork_copies_history_and_meta_and_then_diverges() {
    let (_dir, store) = open();
    let id = store.create(&meta()).unwrap();
    store.append(&id, &Message::user_text("one"), None).unwrap();
    store
        .append(&id, &Message::assistant_text("two"), Some(99))
        .unwrap();
    store
        .append_notice(&id, NoticeKind::Interrupted, "Ctrl-C")
        .unwrap();
    let fork = store.fork(&id).unwrap();
    assert_ne!(fork, id);
    assert_eq!(
        store.load_raw_json(&fork).unwrap(),
        store.load_raw_json(&id).unwrap()
    );
    assert_eq!(store.entries(&fork).unwrap(), store.entries(&id).unwrap());
    assert_eq!(store.meta(&fork).unwrap(), Some(meta()));
    assert_eq!(store.last_context(&fork).unwrap(), Some(99));
    store
        .append(&fork, &Message::user_text("only in the fork"), None)
        .unwrap();
    assert_eq!(store.load_raw(&id).unwrap().len(), 2);
    assert_eq!(store.load_raw(&fork).unwrap().len(), 3);
}

/// A session of a prompt, then one `git status` call per result in `results`, each answered.
fn session_of_calls(store: &SqliteSessionStore, results: impl Iterator<Item = String>) -> String {
    let id = store.create(&meta()).unwrap();
    store.append(&id, &Message::user_text("go"), None).unwrap();
    for (i, content) in results.enumerate() {
        let tid = format!("t{i}");
        let call = Message {
            role: Speaker::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: tid.clone(),
                name: "Bash".into(),
                input: json!({"command": "git status"}),
            }],
        };
        store.append(&id, &call, None).unwrap();
        let result = Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: tid,
                content,
                is_error: false,
            }],
        };
        store.append(&id, &result, None).unwrap();
    }
    id
}

#[test]
fn load_never_modifies_rows() {
    let (dir, store) = open();
    let results = (0..10).map(|i| "x".repeat(if i % 2 == 0 { 3000 } else { 10 }));
    let id = session_of_calls(&store, results);
    let before = store.load_raw_json(&id).unwrap();
    let policy = TrimPolicy {
        keep_recent: 1,
        keep_ephemeral: 1,
        ..TrimPolicy::new(dir.path().join("spill"), true)
    };
    let (loaded, report) = store.load_with_report(&id, &policy).unwrap();
    assert!(report.trimmed > 0 && report.expired > 0, "{report:?}");
    assert_ne!(loaded, store.load_raw(&id).unwrap());
    assert_eq!(store.load_raw_json(&id).unwrap(), before);
}

/// Issue 32: a trimming load leaves its spill batch pending (the model can be asked before the
/// files are written and the disk caught up); the files are there once `spill_written`
/// returned, and creating a session waits for the whole batch first.
#[test]
fn a_trimming_load_defers_its_spill_sync_to_the_next_new_session() {
    let (dir, store) = open();
    let id = session_of_calls(&store, (0..3).map(|i| format!("{i}").repeat(3000)));
    let policy = TrimPolicy {
        keep_recent: 0,
        ..TrimPolicy::new(dir.path().join("spill"), true)
    };
    let pending = || store.spills.lock().unwrap().len();
    assert_eq!(pending(), 0);
    let (_, report) = store.load_with_report(&id, &policy).unwrap();
    assert_eq!(report.trimmed, 3);
    assert_eq!(pending(), 1);
    store.spill_written().unwrap();
    assert_eq!(pending(), 1, "written, not yet known to be synced");
    assert_eq!(
        std::fs::read_dir(dir.path().join("spill")).unwrap().count(),
        3
    );
    store.create(&meta()).unwrap();
    assert_eq!(pending(), 0);
    // Without trim nothing is written, nothing is pending.
    store
        .load_with_report(&id, &TrimPolicy::new(dir.path().join("spill"), false))
        .unwrap();
    assert_eq!(pending(), 0);
}

/// Issue 32: a history the model refused before seeing it gives up its spill batch: nothing
/// stays pending, no temporary file stays behind, and a later load writes every file again.
#[test]
fn a_discarded_spill_batch_leaves_whole_files_or_none() {
    let (dir, store) = open();
    let id = session_of_calls(&store, (0..40).map(|i| format!("{i:02}").repeat(1500)));
    let spill = dir.path().join("spill");
    let policy = TrimPolicy {
        keep_recent: 0,
        ..TrimPolicy::new(spill.clone(), true)
    };
    let (loaded, report) = store.load_with_report(&id, &policy).unwrap();
    assert_eq!(report.trimmed, 40);
    store.spill_discard("another session");
    assert_eq!(store.spills.lock().unwrap().len(), 1);
    store.spill_discard(&id);
    assert_eq!(store.spills.lock().unwrap().len(), 0);
    store.create(&meta()).unwrap();
    let names: Vec<String> = std::fs::read_dir(&spill)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    assert!(names.len() <= 40);
    // Written again by the next load, the same pointers.
    let (again, _) = store.load_with_report(&id, &policy).unwrap();
    store.spill_barrier().unwrap();
    assert_eq!(again, loaded);
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 40);
}

/// Issue 32: the spill barrier runs before the new session's row is written (what a
/// compaction or a handoff stores next can point to the spill files); seen from another
/// connection while the pending sync runs, and a failed sync creates nothing.
#[test]
fn a_new_session_is_written_only_after_the_pending_spill_syncs() {
    let (dir, store) = open();
    store.create(&meta()).unwrap();
    let db = dir.path().join("runs/sessions.db");
    let count = move || -> i64 {
        let other = Connection::open(&db).unwrap();
        other
            .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
            .unwrap()
    };
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (log, c) = (seen.clone(), count.clone());
    store.defer_spill_sync(Box::new(move || {
        log.lock().unwrap().push(c());
        Ok(())
    }));
    store.create(&meta()).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [1],
        "the sync ran before the row was written"
    );
    assert_eq!(count(), 2);

    store.defer_spill_sync(Box::new(|| Err(std::io::Error::other("disk gone"))));
    assert!(matches!(store.create(&meta()), Err(SessionError::Io(_))));
    assert_eq!(count(), 2);
}

#[test]
fn meta_round_trips() {
    let (_dir, store) = open();
    let m = SessionMeta {
        parent: Some("p".into()),
        step: None,
        role: Role::Coordinator,
        ..meta()
    };
    let id = store.create(&m).unwrap();
    assert_eq!(store.meta(&id).unwrap(), Some(m));
    assert!(store.has_session(&id).unwrap());
}
