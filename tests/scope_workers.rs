//! Write scopes (issue 27 §3) on the real engine, in one shared checkout (no `--isolate`),
//! driven through the runtime by the scripted model: two workers with disjoint `writes` run at
//! the same time (each sees the other's start file while it runs), a write outside the scope
//! fails with a read-only error through Bash and through the Write tool and the result names the
//! scope, and workers whose scopes overlap run one after the other (the later one waits, said
//! once on screen and in its tool result).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod isolate_support;

use flowerbox::agent::human::Absent;
use flowerbox::agent::{roles, Event, EventKind, RunOptions, Runtime, RuntimeConfig, Workbench};
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory};
use flowerbox::session::SqliteSessionStore;
use isolate_support::docker_support::{self, agent_image, engine_or_skip, run_id, SERIAL};
use isolate_support::{coordinate, repo, results_of, text, tool, ScriptedModel, REPORT};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A worker's first Bash: write its start time, wait (at most 30 s) until `other` exists,
/// write its end time.
fn meet(me: &str, other: &str) -> String {
    format!(
        "date +%s.%N > {me}/start; for i in $(seq 300); do [ -e {other}/start ] && break; \
         sleep 0.1; done; date +%s.%N > {me}/end"
    )
}

/// A worker's Bash that holds its scope for two seconds.
fn hold(file: &str) -> String {
    format!("date +%s.%N > {file}.start; sleep 2; date +%s.%N > {file}.end")
}

fn stamp(path: &Path) -> f64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

fn worker(marker: &str, turns: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"role": "worker", "prompt": marker, "turns": turns})
}

/// The coordinator of `model`'s scenario run through the runtime on the engine, in the
/// repository `ws` with up to four workers, every container removed after; the run must end
/// well. Its events.
async fn scoped_run(
    engine: &flowerbox::sandbox::docker::Engine,
    ws: &Path,
    id: &str,
    model: &ScriptedModel,
) -> Vec<Event> {
    std::fs::create_dir_all(ws.join("runs")).unwrap();
    let image = agent_image(engine).await;
    let wb = Workbench::at(Workbench::locate(ws, true)).ensure().unwrap();
    let mut opts = DockerOptions::new(id.to_string(), ws);
    opts.image = Some(image);
    opts.show_progress = false;
    let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
    let provider = model.provider(isolate_support::model_support::fast());
    let mut cfg = RuntimeConfig::new(ws.to_path_buf(), "claude-sonnet-4-5".into(), id.to_string());
    cfg.max_workers = 4;
    let events: Arc<Mutex<Vec<Event>>> = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let rt = Arc::new(Runtime::new(
        cfg,
        provider,
        Arc::new(SqliteSessionStore::open(ws.join("runs/sessions.db")).unwrap()),
        factory.clone(),
        Some(wb),
        Arc::new(Absent),
        Arc::new(move |e| ev.lock().unwrap().push(e)),
    ));
    let r = rt
        .run(
            &roles::coordinator("协调者", "", vec![]),
            "派人",
            RunOptions::default(),
        )
        .await;
    rt.release_agents().await;
    docker_support::teardown_blocking(&factory);
    assert!(r.ok, "{:?}", r.error);
    let events = events.lock().unwrap().clone();
    events
}

#[tokio::test]
async fn scoped_workers_run_in_parallel_stay_in_scope_and_overlapping_ones_serialise() {
    let Some(engine) = engine_or_skip("scope_workers").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = repo(dir.path());
    let id = run_id("scope-workers");
    let scenario = json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [
                tool("Agent", json!({"description": "甲", "prompt": "TASK-A", "writes": ["a/"]})),
                tool("Agent", json!({"description": "乙", "prompt": "TASK-B", "writes": ["b/"]}))]},
            {"content": [
                tool("Agent", json!({"description": "丙", "prompt": "TASK-C", "writes": ["c/"]})),
                tool("Agent", json!({"description": "丁", "prompt": "TASK-D", "writes": ["c/sub/"]}))]},
            {"content": [tool("Agent", json!({"description": "坏", "prompt": "TASK-X", "writes": ["../up"]}))]},
            {"content": [text("都做完了")]}]},
        worker("TASK-A", vec![
            json!({"content": [tool("Bash", json!({"command": meet("a", "b")}))]}),
            json!({"content": [tool("Bash", json!({"command": "echo x > outside.txt"}))]}),
            json!({"content": [tool("Write", json!({"file_path": "b/from-a.txt", "content": "x"}))]}),
            json!({"content": [tool("Write", json!({"file_path": "a/ok.txt", "content": "ok"}))]}),
            json!({"content": [text(REPORT)]})]),
        worker("TASK-B", vec![
            json!({"content": [tool("Bash", json!({"command": meet("b", "a")}))]}),
            json!({"content": [text(REPORT)]})]),
        worker("TASK-C", vec![
            json!({"content": [tool("Bash", json!({"command": hold("c/C")}))]}),
            json!({"content": [text(REPORT)]})]),
        worker("TASK-D", vec![
            json!({"content": [tool("Bash", json!({"command": hold("c/sub/D")}))]}),
            json!({"content": [text(REPORT)]})]),
    ]});

    let model = ScriptedModel::start(&scenario);
    let events = scoped_run(&engine, &ws, &id, &model).await;
    let results = |agent: &str, name: &str| results_of(&events, agent, name);

    // Disjoint scopes ran at the same time: each interval contains the other's start.
    let (a0, a1) = (stamp(&ws.join("a/start")), stamp(&ws.join("a/end")));
    let (b0, b1) = (stamp(&ws.join("b/start")), stamp(&ws.join("b/end")));
    assert!(a0 < b1 && b0 < a1, "a {a0}..{a1}, b {b0}..{b1}");

    // Out of scope: the kernel's read-only error through Bash, the file tools' refusal through
    // Write, both naming the scope; in scope works.
    let who = events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::ToolResult { name, .. } if name == "Write"))
        .map(|e| e.agent.clone())
        .expect("worker A wrote");
    let a = results(&who, "Bash");
    let (is_error, out) = &a[1];
    assert!(
        *is_error && out.contains("Read-only file system") && out.contains("写权限范围:a/"),
        "{out}"
    );
    let w = results(&who, "Write");
    assert!(
        w[0].0 && w[0].1.contains("不在写权限范围里") && w[0].1.contains("a/"),
        "{w:?}"
    );
    assert!(!w[1].0, "{w:?}");
    assert!(!ws.join("outside.txt").exists() && !ws.join("b/from-a.txt").exists());
    assert_eq!(std::fs::read_to_string(ws.join("a/ok.txt")).unwrap(), "ok");

    // Overlapping scopes ran one after the other; the later one was told it waited, and the
    // screen said so once.
    let (c0, c1) = (stamp(&ws.join("c/C.start")), stamp(&ws.join("c/C.end")));
    let (d0, d1) = (
        stamp(&ws.join("c/sub/D.start")),
        stamp(&ws.join("c/sub/D.end")),
    );
    assert!(c1 <= d0 || d1 <= c0, "c {c0}..{c1}, d {d0}..{d1}");
    let agent = results("协调者", "Agent");
    assert_eq!(agent.len(), 5, "{agent:?}");
    assert_eq!(
        agent[2..4]
            .iter()
            .filter(|(_, t)| t.contains("先等了"))
            .count(),
        1,
        "{agent:?}"
    );
    assert!(agent[..2].iter().all(|(e, t)| !e && !t.contains("先等了")));
    let waits = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Warning { text } if text.contains("写权限范围和正在跑的执行者重叠")))
        .count();
    assert_eq!(waits, 1);
    // A bad scope is the coordinator's tool error, and no worker ran.
    assert!(agent[4].0 && agent[4].1.contains(".."), "{:?}", agent[4]);
    assert!(results("worker-5", "Bash").is_empty());
    drop(model);
}

/// With `--isolate` the scope applies inside the worker's worktree: in scope is integrated, out
/// of scope fails read-only, and the runner still commits the worker's work.
#[tokio::test]
async fn with_isolate_the_scope_applies_inside_the_worktree() {
    let Some(engine) = engine_or_skip("scope_isolate").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = isolate_support::IsoRun::new(&engine, "scope-iso", |_, _| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "甲", "prompt": "TASK-A", "writes": ["a/"]}))]},
                {"content": [text("好了")]}]},
            worker("TASK-A", vec![
                json!({"content": [tool("Bash", json!({"command": "echo in > a/in.txt && echo out > out.txt"}))]}),
                json!({"content": [text(REPORT)]})])]})
    })
    .await;
    coordinate(&run.rt, "派人").await;
    let bash = run.results_of("worker-1", "Bash");
    assert!(
        bash[0].0
            && bash[0].1.contains("Read-only file system")
            && bash[0].1.contains("写权限范围:a/"),
        "{bash:?}"
    );
    assert_eq!(
        std::fs::read_to_string(run.ws.join("a/in.txt")).unwrap(),
        "in\n"
    );
    assert!(!run.ws.join("out.txt").exists());
    let agent = run.results_of("协调者", "Agent");
    assert!(!agent[0].0 && agent[0].1.contains("已合入"), "{agent:?}");
}

/// The mounts of a box that ran: `(root, mount point, read-write)` of each line of
/// `/proc/self/mountinfo` (octal escapes such as `\040` undone).
fn mount_table(out: &str) -> Vec<(String, String, bool)> {
    let unescape = |s: &str| {
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match (b[i], b.get(i + 1..i + 4)) {
                (b'\\', Some(o)) if o.iter().all(u8::is_ascii_digit) => {
                    out.push(u8::from_str_radix(std::str::from_utf8(o).unwrap(), 8).unwrap());
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let opts = f.get(5)?;
            Some((
                unescape(f.get(3)?),
                unescape(f.get(4)?),
                opts.split(',').any(|o| o == "rw"),
            ))
        })
        .collect()
}

/// A scoped worker's scope holds against the other workers only inside its Landlock domain,
/// which it enters through the exec service's binary: a run without that binary refuses the
/// scoped worker (saying why) rather than run it unchecked, while an unscoped writer still runs.
#[tokio::test]
async fn a_scoped_worker_that_cannot_enter_its_domain_is_refused() {
    use flowerbox::agent::scope::{narrow, WriteScope};
    use flowerbox::role::Role;
    use flowerbox::sandbox::{AgentBox, Mount, SandboxFactory};

    let Some(engine) = engine_or_skip("scope_workers_no_domain").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = docker_support::TestRun::with(&engine, "scope-no-domain", |o| {
        o.exec_service = None;
    })
    .await;
    let ws = run.workspace.clone();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let worker = |agent: &str, mounts| AgentBox {
        agent: agent.into(),
        role: Role::Worker,
        mounts,
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    };
    let mut mounts = vec![Mount::same(ws.clone(), false)];
    narrow(
        &ws,
        &WriteScope::parse(&["src/".to_string()]).unwrap(),
        &mut mounts,
        None,
    )
    .unwrap();
    let refused = run.factory.sandbox(&worker("worker-1", mounts)).await;
    let Err(e) = refused else {
        panic!("a scoped worker ran without its Landlock domain");
    };
    assert!(e.to_string().contains("Landlock"), "{e}");
    let plain = run
        .factory
        .sandbox(&worker("worker-2", vec![Mount::same(ws.clone(), false)]))
        .await
        .unwrap();
    let out = docker_support::exec_ok(&*plain, "echo ok", &ws).await;
    assert_eq!(out.stdout, "ok\n", "{out:?}");
}

/// Red team (issue 27 §3): while the host narrows a worker to `src/` and the engine mounts it,
/// a racer that can write the workspace (as a worker's background process can) swaps `src`
/// with a symlink as fast as it can (`renameat2(RENAME_EXCHANGE)`: the path is always one or
/// the other), first a symlink to a directory outside the workspace, then one to the
/// workspace's `.git`. Every box the engine makes is used: the container writes through every
/// path the scope could have landed at and prints its mount table. No read-write mount of the
/// outside directory or of `.git` ever appears, nothing is ever written there, and what the
/// container wrote is in the scope directory. Refusals (the host saw the link) are fine.
#[tokio::test]
async fn a_racing_symlink_swap_never_moves_a_scope_mount_out_of_the_scope() {
    use flowerbox::agent::scope::{narrow, WriteScope};
    use flowerbox::role::Role;
    use flowerbox::sandbox::{AgentBox, Mount, SandboxFactory};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let Some(engine) = engine_or_skip("scope_workers").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = docker_support::TestRun::new(&engine, "scope-race").await;
    let ws = run.workspace.clone();
    let tmp = ws.parent().unwrap().to_path_buf();
    let outside = tmp.join("outside");
    let git_dir = ws.join(".git");
    let (src, swap) = (ws.join("src"), ws.join("src.swap"));
    for d in [&outside, &git_dir, &src] {
        std::fs::create_dir_all(d).unwrap();
    }
    let scope = WriteScope::parse(&["src/".to_string()]).unwrap();
    let (mut made, mut refused, mut n) = (0, 0, 0);
    let mut tables = Vec::new();
    for target in [&outside, &git_dir] {
        // Put the directory back at `src`, the link to this round's target beside it.
        if std::fs::symlink_metadata(&src)
            .unwrap()
            .file_type()
            .is_symlink()
        {
            std::fs::rename(&swap, ws.join("src.tmp")).unwrap();
            std::fs::rename(&src, &swap).unwrap();
            std::fs::rename(ws.join("src.tmp"), &src).unwrap();
        }
        let _ = std::fs::remove_file(&swap);
        std::os::unix::fs::symlink(target, &swap).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicUsize::new(0));
        let racer = {
            let (stop, swaps, src, swap) = (stop.clone(), swaps.clone(), src.clone(), swap.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // `EBUSY` while a container has the directory mounted: try again.
                    if rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &src,
                        rustix::fs::CWD,
                        &swap,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .is_ok()
                    {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                    // Each state held a moment, the directory longer than the link: the
                    // host's look mostly passes, the engine's mount (later) often meets the link.
                    let held = if swaps.load(Ordering::Relaxed) % 2 == 0 {
                        1500
                    } else {
                        400
                    };
                    std::thread::sleep(std::time::Duration::from_micros(held));
                }
            })
        };
        // 25 attempts per target; on a loaded machine the engine's mount may meet the link
        // every time (each refused, rightly): then more, until one box is made, so the
        // mount tables below are never checked on nothing (CI saw 0 of 50 made, twice).
        let (made_before, mut attempts) = (made, 0);
        while attempts < 25 || (made == made_before && attempts < 150) {
            attempts += 1;
            n += 1;
            let agent = format!("worker-{n}");
            let mut mounts = vec![Mount::same(ws.clone(), false)];
            if let Err(e) = narrow(&ws, &scope, &mut mounts, None) {
                eprintln!("{agent}: refused by the host: {e}");
                refused += 1;
                // A refusal here takes microseconds: without a pause the attempts would all
                // fall into one state of the racer (CI saw 25 refusals within 1 swap).
                tokio::time::sleep(std::time::Duration::from_millis(3)).await;
                continue;
            }
            let abox = AgentBox {
                agent: agent.clone(),
                role: Role::Worker,
                mounts,
                masked: Vec::new(),
                workdir: ws.clone(),
                policy: flowerbox::sandbox::SandboxPolicy::writer(),
            };
            let sb = match run.factory.sandbox(&abox).await {
                Ok(sb) => sb,
                Err(e) => {
                    eprintln!("{agent}: no box: {e}");
                    refused += 1;
                    continue;
                }
            };
            made += 1;
            let paths = [&src, &swap, &outside, &git_dir]
                .map(|p| format!("'{}'", p.display()))
                .join(" ");
            let script = format!(
                "for d in {paths}; do touch \"$d/w-{n}\" 2>/dev/null; done; cat /proc/self/mountinfo"
            );
            let out = docker_support::exec_ok(&*sb, &script, &ws).await;
            eprintln!(
                "{agent}: made, exit {:?}, {}",
                out.exit_code,
                out.stderr.trim()
            );
            tables.push(mount_table(&out.stdout));
            run.factory.release(&agent).await.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        racer.join().unwrap();
        eprintln!(
            "scope race via {}: {} swaps",
            target.display(),
            swaps.load(Ordering::Relaxed)
        );
    }
    eprintln!("scope race: {made} boxes made, {refused} refused");
    assert!(made > 0, "no box was ever made: the test attacked nothing");
    // The kernel's record of every mount: nothing read-write has the outside directory or
    // `.git` as its root. (The root is the source's path on its filesystem, which may be a
    // suffix of the host's path: compare the last components.)
    let tail = |p: &Path| {
        let parts: Vec<_> = p.components().rev().take(2).collect();
        parts
            .into_iter()
            .rev()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    };
    let (out_tail, git_tail) = (tail(&outside), tail(&git_dir));
    for table in &tables {
        assert!(
            table.iter().any(|(root, _, rw)| *rw && (root.ends_with("/src") || root.ends_with("/src.swap"))),
            "the scope is mounted read-write: {table:?}"
        );
        for (root, point, rw) in table {
            assert!(
                !(*rw && (root.ends_with(&out_tail) || root.ends_with(&git_tail))),
                "read-write mount of {root} at {point}"
            );
        }
    }
    // Nothing written outside the scope; every box wrote into it.
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("w-"))
            .collect()
    };
    assert_eq!(names(&outside), Vec::<String>::new());
    assert_eq!(names(&git_dir), Vec::<String>::new());
    let real = if std::fs::symlink_metadata(&src).unwrap().is_dir() {
        &src
    } else {
        &swap
    };
    assert!(!names(real).is_empty(), "{:?}", names(real));
}

/// Red team (DESIGN.md threat model 3, issue 27 §3): the workers' containers share the pod's
/// PID namespace and uid, so a scoped worker sees another worker's processes. Worker A (scope
/// `a/`) waits until worker B (scope `b/`) runs, then tries to write through every process's
/// `/proc/<pid>/root` and `cwd` into B's scope. Every attempt is counted; nothing may land
/// outside `a/`.
///
/// Closed (red team 2026-12-06) by construction: every writing agent's processes live in a
/// Landlock domain of their own (`sandbox::service::domain`, entered by its exec service and by
/// each exec without it), which refuses ptrace-mode access (`/proc/<pid>/root`, `cwd`, `mem`)
/// to a process outside the domain.
#[tokio::test]
async fn a_scoped_worker_cannot_write_another_workers_scope_through_proc() {
    let Some(out) = proc_attack("scope-proc", Vec::new()).await else {
        return;
    };
    assert!(
        out.contains("PARENT=") && out.contains("__exec-service"),
        "{out}"
    );
}

/// The same attack on the path without the exec service: worker A kills its own service
/// until the host stops restarting it, so its next command runs as a Docker exec of its own
/// (its parent is no longer the service), which enters a domain of its own too.
#[tokio::test]
async fn a_scoped_worker_that_kills_its_service_is_still_contained() {
    // The host starts a service three times (the first and two restarts after deaths).
    let kill = || json!({"content": [tool("Bash", json!({"command": "kill -9 $PPID"}))]});
    let Some(out) = proc_attack("scope-proc-direct", vec![kill(), kill(), kill()]).await else {
        return;
    };
    assert!(
        out.contains("PARENT=") && !out.contains("__exec-service"),
        "{out}"
    );
}

/// Worker A (scope `a/`) takes `first` turns, then writes through every process's `/proc/<pid>/root` and
/// `cwd` it sees while worker B (scope `b/`) runs; asserts that it tried and that nothing
/// landed, and returns what both commands said (A's says `PARENT=` and its parent's command
/// line). `None`: no engine.
async fn proc_attack(name: &str, first: Vec<serde_json::Value>) -> Option<String> {
    let engine = engine_or_skip("scope_workers_proc").await?;
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = repo(dir.path());
    let id = run_id(name);
    let attack = "echo \"PARENT=$(tr '\\0' ' ' </proc/$PPID/cmdline)\"; \
        for i in $(seq 300); do [ -e b/start ] && break; sleep 0.1; done; ws=$(pwd); \
        for p in $(ls /proc | grep -E '^[0-9]+$'); do [ \"$p\" = \"$$\" ] && continue; \
          for via in \"/proc/$p/root$ws/b\" \"/proc/$p/cwd/b\" \"/proc/$p/root$ws\" \"/proc/$p/cwd\"; do \
            echo TRY; echo pwned 2>/dev/null > \"$via/via-proc-$p\" && echo \"WROTE $via\"; \
          done; done; touch a/done; true";
    let mut a_turns = first;
    a_turns.push(json!({"content": [tool("Bash", json!({"command": attack}))]}));
    a_turns.push(json!({"content": [text(REPORT)]}));
    let scenario = json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [
                tool("Agent", json!({"description": "甲", "prompt": "TASK-A", "writes": ["a/"]})),
                tool("Agent", json!({"description": "乙", "prompt": "TASK-B", "writes": ["b/"]}))]},
            {"content": [text("都做完了")]}]},
        worker("TASK-A", a_turns),
        worker("TASK-B", vec![
            json!({"content": [tool("Bash", json!({"command":
                "date > b/start; for i in $(seq 300); do [ -e a/done ] && break; sleep 0.1; done"}))]}),
            json!({"content": [text(REPORT)]})]),
    ]});
    std::fs::create_dir_all(ws.join("a")).unwrap();
    let model = ScriptedModel::start(&scenario);
    let events = scoped_run(&engine, &ws, &id, &model).await;
    let out: String = ["worker-1", "worker-2"]
        .iter()
        .flat_map(|w| results_of(&events, w, "Bash"))
        .map(|(_, t)| t)
        .collect();
    let attempts = out.matches("TRY").count();
    let landed: Vec<String> = walkdir(&ws)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("via-proc-"))
        })
        .map(|p| p.display().to_string())
        .collect();
    eprintln!(
        "scope red team, /proc of another worker ({name}): {attempts} attempts, {} succeeded\n{out}",
        landed.len()
    );
    assert!(attempts > 0 && ws.join("b/start").exists(), "{out}");
    assert!(landed.is_empty(), "{landed:#?}\n{out}");
    Some(out)
}

/// Every file beneath `dir` (symlinks not followed).
fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walkdir(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
