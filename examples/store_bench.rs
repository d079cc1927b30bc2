//! The persistence figures of `scripts/bench.sh` (issue 10), each a median over repeated runs
//! with its spread:
//!
//! 4. resuming a session of 10,000 messages from `sessions.db`: load + prune/expire/trim
//!    (`SqliteSessionStore::load_with_report`, trim on, cold spill directory) vs the raw load,
//!    each in a fresh child process; again with the spill files already written (a second
//!    resume); and the resuming process's peak RSS vs a process that only opens the database;
//! 6. the writes one tool call can cause: spilling a large result
//!    (`agent::spill::maybe_spill`, 8,000 characters) vs a plain file write of the same text,
//!    `Manifest::record` into a manifest that holds 100 rows of other runs vs a plain write of
//!    the same bytes, and the durable `sessions.db` append of one message (measured while
//!    building the session of figure 4).
//!
//! Usage: `store_bench [--repeat N] [--calls N] [--messages N] [--only 4|6] [--json FILE]`.
//! Internal: `--child resume|raw|open DB SESSION SPILL` (one measurement in a child process).
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{ms, print_table, wait_with_peak_rss, write_part, Figure, Stats};
use flowerbox::agent::spill::maybe_spill;
use flowerbox::model::{ContentBlock, Message, Speaker};
use flowerbox::record::manifest::{Manifest, ManifestEntry};
use flowerbox::role::Role;
use flowerbox::session::{SessionMeta, SessionStore, SqliteSessionStore, TrimPolicy};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A tool result of `chars` characters, different for every `seed`.
fn result_text(seed: usize, chars: usize) -> String {
    let line = format!("{seed:06} build output: compiling module {seed} of the project ... ok\n");
    line.repeat(chars / line.len() + 1)[..chars].to_string()
}

/// Writes one session of `n` messages (a prompt, then assistant tool calls and their results,
/// every tenth result 3,000 characters, the rest 200; a final reply) and returns its id and the
/// time of each durable append in µs.
fn build_session(store: &SqliteSessionStore, n: usize) -> (String, Vec<f64>) {
    let meta = SessionMeta {
        agent: "worker-1".into(),
        role: Role::Worker,
        step: Some("干活".into()),
        parent: None,
        run: "20260101-000000-bench0".into(),
    };
    let session = store.create(&meta).expect("create");
    let mut times = Vec::with_capacity(n);
    let mut append = |m: &Message, ctx: Option<u64>| {
        let t = Instant::now();
        store.append(&session, m, ctx).expect("append");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    };
    append(&Message::user_text("把这个项目修到能编译、测试全过"), None);
    let pairs = (n.saturating_sub(2)) / 2;
    for i in 0..pairs {
        let (name, input) = match i % 3 {
            0 => (
                "Bash",
                json!({"command": format!("cargo build -p part{i}")}),
            ),
            1 => ("Bash", json!({"command": "ls -la src"})),
            _ => ("Read", json!({"file_path": format!("/w/src/m{i}.rs")})),
        };
        let id = format!("toolu_bench_{i}");
        let call = Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::text(format!("第 {i} 步:看一下结果再决定。")),
                ContentBlock::ToolUse {
                    id: id.clone(),
                    name: name.into(),
                    input,
                },
            ],
        };
        append(&call, Some(20_000 + i as u64));
        let size = if i % 10 == 0 { 3000 } else { 200 };
        let result = Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id,
                content: result_text(i, size),
                is_error: false,
            }],
        };
        append(&result, None);
    }
    for _ in 0..n.saturating_sub(1 + 2 * pairs) {
        append(&Message::assistant_text("修好了,测试全过。"), Some(90_000));
    }
    (session, times)
}

/// Runs this example as a child doing one measurement; returns (its printed ms, peak RSS MiB).
fn child(mode: &str, db: &Path, session: &str, spill: &Path) -> (f64, f64) {
    let exe = std::env::current_exe().expect("current_exe");
    let out = tempfile::NamedTempFile::new().unwrap();
    let c = Command::new(exe)
        .args(["--child", mode])
        .arg(db)
        .arg(session)
        .arg(spill)
        .stdout(out.reopen().unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let (code, kib) = wait_with_peak_rss(c);
    assert_eq!(code, Some(0), "child {mode} failed");
    let text = std::fs::read_to_string(out.path()).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("child output");
    (v["ms"].as_f64().unwrap(), kib as f64 / 1024.0)
}

/// The child side of [`child`]: prints `{"ms": …, "messages": …, …}`.
fn child_main(mode: &str, db: &Path, session: &str, spill: &Path) {
    let store = SqliteSessionStore::open(db).expect("open");
    let t = Instant::now();
    let out = match mode {
        "open" => json!({"ms": ms(t.elapsed())}),
        "raw" => {
            let msgs = store.load_raw(session).expect("load_raw");
            json!({"ms": ms(t.elapsed()), "messages": msgs.len()})
        }
        "resume" => {
            let policy = TrimPolicy::new(spill.to_path_buf(), true);
            let (msgs, report) = store.load_with_report(session, &policy).expect("load");
            // The spill files are written off the load's path: counted until they are there.
            store.spill_written().expect("spill files");
            let elapsed = ms(t.elapsed());
            json!({"ms": elapsed, "messages": msgs.len(), "report": report.summary()})
        }
        other => panic!("unknown child mode {other}"),
    };
    println!("{out}");
}

fn resume(repeat: usize, messages: usize, dir: &Path) -> (Vec<Figure>, Stats) {
    let db = dir.join("sessions.db");
    let store = SqliteSessionStore::open(&db).expect("sessions.db");
    let started = Instant::now();
    let (session, appends) = build_session(&store, messages);
    let stored = store.load_raw(&session).expect("load_raw").len();
    assert_eq!(stored, messages);
    eprintln!(
        "built a session of {stored} messages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drop(store);
    let (mut load, mut raw, mut rss, mut rss_open) = (vec![], vec![], vec![], vec![]);
    let mut warm = vec![];
    for i in 0..repeat {
        let spill = dir.join(format!("spill-{i}")); // cold: trim writes every spill file
        let (t, m) = child("resume", &db, &session, &spill);
        load.push(t);
        rss.push(m);
        warm.push(child("resume", &db, &session, &spill).0); // the files are there now
        raw.push(child("raw", &db, &session, &spill).0);
        rss_open.push(child("open", &db, &session, &spill).1);
    }
    let figures = vec![
        Figure::new(
            "4",
            "resume 10,000 messages: load + prune/expire/trim",
            "ms",
            Stats::of(&load),
        )
        .vs("load_raw (no rewrite)", Stats::of(&raw))
        .note(format!(
            "{messages} messages, {:.1} MB sessions.db; every 10th result 3,000 chars; cold spill dir (one fsynced file per trimmed result)",
            std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64 / 1e6
        )),
        Figure::new(
            "4c",
            "resume again (spill files already written)",
            "ms",
            Stats::of(&warm),
        )
        .vs("load_raw (no rewrite)", Stats::of(&raw))
        .note("trim finds its content-addressed spill files and writes nothing"),
        Figure::new(
            "4b",
            "peak RSS of the resuming process",
            "MiB",
            Stats::of(&rss),
        )
        .vs("process that only opens sessions.db", Stats::of(&rss_open)),
    ];
    (figures, Stats::of(&appends))
}

fn micro(calls: usize, dir: &Path) -> Vec<Figure> {
    // Spill: a fresh 8,000-character result per call (a new file each time).
    let spill = dir.join("spill");
    let plain = dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (mut sp, mut fw) = (Vec::new(), Vec::new());
    for i in 0..calls {
        let text = result_text(1_000_000 + i, 8000);
        let copy = text.clone();
        let t = Instant::now();
        let pointer = maybe_spill(text, &spill);
        sp.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(pointer.len() < 2000, "not spilled");
        let t = Instant::now();
        std::fs::write(plain.join(format!("{i}.txt")), &copy).unwrap();
        fw.push(t.elapsed().as_secs_f64() * 1e6);
    }

    // Manifest: 100 rows of earlier runs in the file, then one row of this run per call.
    let path = dir.join("runs/manifest.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    for r in 0..10 {
        let m = Manifest::new(&path, format!("20260101-0000{r:02}-old{r:03}"));
        for s in 0..10 {
            let mut e = ManifestEntry::begin(format!("干活#round{s}"), "");
            e.text = "结论:做完了\n依据:测试全过".into();
            m.record(e).unwrap();
        }
    }
    let m = Manifest::new(&path, "20260101-010000-bench1");
    let mut row = ManifestEntry::begin("干活", "");
    let (mut rec, mut raw) = (Vec::new(), Vec::new());
    let copy = dir.join("manifest-copy.json");
    for i in 0..calls {
        row.num_turns = i as u64;
        let t = Instant::now();
        m.record(row.clone()).unwrap();
        rec.push(t.elapsed().as_secs_f64() * 1e6);
        let bytes = std::fs::read(&path).unwrap();
        let t = Instant::now();
        std::fs::write(&copy, &bytes).unwrap();
        raw.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let rows = flowerbox::record::manifest::read_manifest(&path)
        .unwrap()
        .len();
    vec![
        Figure::new(
            "6",
            "spill of one large tool result (8,000 chars)",
            "µs",
            Stats::of(&sp),
        )
        .vs("fs::write of the same text", Stats::of(&fw))
        .note(format!(
            "{calls} calls; sha256 name + write + rename + pointer"
        )),
        Figure::new(
            "6b",
            "Manifest::record (file lock, merge, atomic write)",
            "µs",
            Stats::of(&rec),
        )
        .vs("fs::write of the same bytes", Stats::of(&raw))
        .note(format!("{calls} calls into a manifest of {rows} rows")),
    ]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut repeat, mut calls, mut messages) = (5usize, 300usize, 10_000usize);
    let (mut only, mut json_out) = (None::<String>, None::<PathBuf>);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--repeat" => repeat = val().parse().expect("--repeat N"),
            "--calls" => calls = val().parse().expect("--calls N"),
            "--messages" => messages = val().parse().expect("--messages N"),
            "--only" => only = Some(val()),
            "--json" => json_out = Some(PathBuf::from(val())),
            "--child" => {
                let (mode, db, session, spill) = (val(), val(), val(), val());
                return child_main(&mode, Path::new(&db), &session, Path::new(&spill));
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let wants = |id: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == id))
    };
    let dir = tempfile::tempdir().unwrap();
    let mut figures = Vec::new();
    let mut appends = None;
    if wants("4") {
        let (f, a) = resume(repeat, messages, dir.path());
        figures.extend(f);
        appends = Some(a);
    }
    if wants("6") {
        figures.extend(micro(calls, dir.path()));
        if let Some(a) = appends {
            figures.push(
                Figure::new(
                    "6c",
                    "sessions.db append of one message (durable)",
                    "µs",
                    a,
                )
                .note("WAL, synchronous=FULL, BEGIN IMMEDIATE; measured while building figure 4's session"),
            );
        }
    }
    print_table(&figures);
    if let Some(path) = json_out {
        let extra = json!({"repeat": repeat, "calls": calls, "messages": messages});
        write_part(&path, "store_bench", extra, &figures);
        eprintln!("wrote {}", path.display());
    }
}
