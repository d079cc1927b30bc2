//! Several processes on one `runs/`: four writers of `sessions.db` never see "database is
//! locked"; two writers of `manifest.json` and `lineage.json`, one of them SIGKILLed, leave
//! valid JSON with no lost row; an unparseable manifest is backed up and reported.
//!
//! Child processes are this test binary re-executed with `FLOWERBOX_PERSIST_CHILD` set,
//! running the ignored `child` test.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::model::Message;
use flowerbox::record::manifest::read_manifest;
use flowerbox::record::steps::new_run_marker;
use flowerbox::record::{LineageFile, Manifest, ManifestEntry};
use flowerbox::role::Role;
use flowerbox::session::{SessionMeta, SessionStore, SqliteSessionStore};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod child_support;
use child_support::{helper, spawn_lines, wait_for};

const ENV_MODE: &str = "FLOWERBOX_PERSIST_CHILD";
const ENV_DIR: &str = "FLOWERBOX_PERSIST_DIR";
const ENV_ID: &str = "FLOWERBOX_PERSIST_ID";
const ENV_SESSION: &str = "FLOWERBOX_PERSIST_SESSION";
/// Generous bound that only catches hangs.
const HANG: Duration = Duration::from_secs(300);
const DB_TXNS: usize = 500;
const RECORD_UPDATES: usize = 200;

fn meta(agent: &str) -> SessionMeta {
    SessionMeta {
        agent: agent.into(),
        role: Role::Worker,
        step: None,
        parent: None,
        run: "r".into(),
    }
}

#[test]
#[ignore = "child process of the persistence tests"]
fn child() {
    let Ok(mode) = std::env::var(ENV_MODE) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var(ENV_DIR).unwrap());
    let id = std::env::var(ENV_ID).unwrap();
    match mode.as_str() {
        "db" => {
            let shared = std::env::var(ENV_SESSION).unwrap();
            let store = SqliteSessionStore::open(dir.join("runs/sessions.db")).unwrap();
            println!("READY");
            // Half the transactions append to a session all four share, half create and fill
            // this process's own sessions; a few reads in between.
            for i in 0..DB_TXNS {
                let res = if i % 2 == 0 {
                    store.append(
                        &shared,
                        &Message::user_text(format!("{id} {i}")),
                        Some(i as u64),
                    )
                } else if i % 10 == 1 {
                    store.create(&meta(&id)).map(|_| ())
                } else {
                    store.append(&shared, &Message::assistant_text(format!("{id} {i}")), None)
                };
                if let Err(e) = res {
                    eprintln!("DBERROR {e}");
                    std::process::exit(3);
                }
                if i % 50 == 0 {
                    store.last_context(&shared).unwrap();
                }
            }
            println!("DONE");
        }
        "records" => {
            let run = new_run_marker();
            let manifest = Manifest::new(dir.join("runs/manifest.json"), &run);
            let lineage = LineageFile::new(dir.join("runs/lineage.json"), &dir);
            println!("RUN {run}");
            for i in 0..RECORD_UPDATES {
                let mut e = ManifestEntry::begin(format!("{id}-step{i}"), &run);
                e.num_turns = i as u64;
                e.cost_usd = if i % 7 == 0 { None } else { Some(0.01) };
                if let Some(w) = manifest.record(e).unwrap() {
                    panic!("manifest found corrupt: {w}");
                }
                lineage
                    .remember(&format!("{id}-step{i}"), &format!("{id}-session{i}"))
                    .unwrap();
                println!("DONE {i}");
            }
            println!("FINISHED");
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn(mode: &str, dir: &Path, id: &str, session: &str) -> (Child, mpsc::Receiver<String>) {
    let mut c = helper("child");
    c.env(ENV_MODE, mode)
        .env(ENV_DIR, dir)
        .env(ENV_ID, id)
        .env(ENV_SESSION, session)
        .stderr(Stdio::piped());
    spawn_lines("child", c)
}

fn finish(child: Child) -> (bool, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn four_processes_write_one_sessions_db_without_lock_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(dir.path().join("runs/sessions.db")).unwrap();
    let shared = store.create(&meta("shared")).unwrap();

    let started = Instant::now();
    let children: Vec<_> = (0..4)
        .map(|k| spawn("db", dir.path(), &format!("p{k}"), &shared))
        .collect();
    let mut procs = Vec::new();
    for (child, rx) in children {
        wait_for(&rx, HANG, |l| l == "READY");
        procs.push((child, rx));
    }
    for (child, rx) in procs {
        let (ok, stderr) = finish(child);
        assert!(ok, "child failed: {stderr}");
        assert!(!stderr.contains("locked"), "{stderr}");
        assert!(!stderr.contains("DBERROR"), "{stderr}");
        assert!(rx.iter().any(|l| l == "DONE"));
    }
    eprintln!("4 x {DB_TXNS} transactions took {:?}", started.elapsed());

    let msgs = store.load_raw(&shared).unwrap();
    let per_child_appends = (0..DB_TXNS).filter(|i| i % 2 == 0 || i % 10 != 1).count();
    assert_eq!(msgs.len(), 4 * per_child_appends);
    // Each process's messages appear in the order it appended them.
    for k in 0..4 {
        let mine: Vec<usize> = msgs
            .iter()
            .filter_map(|m| {
                m.text()
                    .strip_prefix(&format!("p{k} "))
                    .map(|n| n.parse().unwrap())
            })
            .collect();
        let want: Vec<usize> = (0..DB_TXNS).filter(|i| i % 2 == 0 || i % 10 != 1).collect();
        assert_eq!(mine, want, "p{k}");
    }
    let conn = rusqlite::Connection::open(dir.path().join("runs/sessions.db")).unwrap();
    let (n, max): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), MAX(seq) FROM entries WHERE session_id = ?1",
            [&shared],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(n, max + 1, "sequence numbers are dense");
    let sessions: i64 = conn
        .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        sessions as usize,
        1 + 4 * (0..DB_TXNS).filter(|i| i % 2 == 1 && i % 10 == 1).count()
    );
}

#[test]
fn two_processes_share_manifest_and_lineage_and_a_killed_one_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, rx_a) = spawn("records", dir.path(), "A", "");
    let (b, rx_b) = spawn("records", dir.path(), "B", "");
    let run_a = wait_for(&rx_a, HANG, |l| l.starts_with("RUN "))[4..].to_string();
    let run_b = wait_for(&rx_b, HANG, |l| l.starts_with("RUN "))[4..].to_string();
    assert_ne!(run_a, run_b);

    // Kill B while both are busy writing.
    let last = wait_for(&rx_b, HANG, |l| {
        l.strip_prefix("DONE ")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= 60)
    });
    b.kill_and_reap();
    let b_done: usize = last[5..].parse().unwrap();
    let b_done = rx_b
        .try_iter()
        .filter_map(|l| l.strip_prefix("DONE ").and_then(|n| n.parse().ok()))
        .max()
        .unwrap_or(b_done);

    let (ok, stderr) = finish(a);
    assert!(ok, "A failed: {stderr}");
    assert!(rx_a.iter().any(|l| l == "FINISHED"));

    // The manifest is valid JSON holding all of A's rows and every row B finished.
    let text = std::fs::read_to_string(dir.path().join("runs/manifest.json")).unwrap();
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&text).expect("manifest.json is valid JSON");
    let steps_of = |run: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r["run"] == run)
            .map(|r| r["step"].as_str().unwrap().to_string())
            .collect()
    };
    let a_steps = steps_of(&run_a);
    assert_eq!(
        a_steps,
        (0..RECORD_UPDATES)
            .map(|i| format!("A-step{i}"))
            .collect::<Vec<_>>()
    );
    let b_steps = steps_of(&run_b);
    assert!(
        b_steps.len() > b_done,
        "B finished {} writes, manifest has {}",
        b_done + 1,
        b_steps.len()
    );
    assert_eq!(
        b_steps,
        (0..b_steps.len())
            .map(|i| format!("B-step{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(rows.len(), a_steps.len() + b_steps.len());
    // Unknown cost stays null.
    assert!(rows.iter().any(|r| r["cost_usd"].is_null()));
    assert_eq!(
        read_manifest(&dir.path().join("runs/manifest.json"))
            .unwrap()
            .len(),
        rows.len()
    );

    // Lineage: valid, merged, nothing of A lost, everything B finished present.
    let lin = LineageFile::new(dir.path().join("runs/lineage.json"), dir.path())
        .load()
        .expect("lineage.json valid");
    for i in 0..RECORD_UPDATES {
        assert_eq!(lin.steps[&format!("A-step{i}")], format!("A-session{i}"));
    }
    for i in 0..=b_done {
        assert_eq!(lin.steps[&format!("B-step{i}")], format!("B-session{i}"));
    }
    // No stray temporary files are taken for data.
    assert_eq!(data_names(&dir.path().join("runs")), RUN_DIR_DATA);
}

/// What the run directory holds besides temporaries.
const RUN_DIR_DATA: [&str; 4] = [
    "lineage.json",
    "lineage.json.lock",
    "manifest.json",
    "manifest.json.lock",
];

/// The sorted names in `dir` that are not a writer's temporaries: a writer killed between
/// creating its temporary (`.NAME.<16 hex>.flowerbox-tmp`, runner/fsroot/sys.rs) and renaming
/// it into place leaves it behind.
fn data_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".tmp") && !n.ends_with(".flowerbox-tmp"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_writers_temporary_is_not_data() {
    // The failing input of the flaky run: B killed mid-replace left this behind.
    let dir = tempfile::tempdir().unwrap();
    for n in RUN_DIR_DATA
        .iter()
        .chain(&[".manifest.json.3f9a0c5e7d21b846.flowerbox-tmp"])
    {
        std::fs::write(dir.path().join(n), "").unwrap();
    }
    assert_eq!(data_names(dir.path()), RUN_DIR_DATA);
}

trait KillAndReap {
    fn kill_and_reap(self);
}

impl KillAndReap for Child {
    fn kill_and_reap(mut self) {
        self.kill().unwrap(); // SIGKILL on Unix
        assert!(!self.wait().unwrap().success());
    }
}

#[test]
fn an_unparseable_manifest_is_backed_up_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs/manifest.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "[{\"step\": \"干活\", \"run\": \"x\"},").unwrap();
    let m = Manifest::new(&path, new_run_marker());
    let report = m
        .record(ManifestEntry::begin("干活", ""))
        .unwrap()
        .expect("the corruption is reported");
    assert_eq!(report.path, path);
    assert_eq!(
        std::fs::read_to_string(&report.backup).unwrap(),
        "[{\"step\": \"干活\", \"run\": \"x\"},"
    );
    let rows = read_manifest(&path).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].run, m.run());
}
