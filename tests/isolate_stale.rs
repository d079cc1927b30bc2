//! A crashed run's worktree does not block the next run: a helper process (this test binary
//! re-executed in helper mode) creates a worker worktree, commits in its container and is
//! killed with SIGKILL; the worktree directory is then deleted by hand. The next run prunes the
//! stale registration, keeps the crashed run's unmerged branch, and its own worker commits and
//! integrates as usual.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod child_support;
mod isolate_support;

use child_support::{helper, spawn_lines, wait_for};
use flowerbox::agent::Placement;
use flowerbox::isolate::{IsolateOptions, WorktreePlacement};
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory};
use flowerbox::sandbox::{AgentBox, SandboxFactory};
use isolate_support::docker_support::{agent_image, engine_or_skip, exec_ok, run_id, SERIAL};
use isolate_support::*;
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

const HELPER_ENV: &str = "FLOWERBOX_TEST_ISO_OWNER";

/// Helper mode: own a run with one worker worktree whose container committed, then wait to be
/// killed.
#[tokio::test]
#[ignore = "helper process for the stale-worktree test, started by it"]
async fn crashed_owner() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '|');
    let (run, image, ws) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        PathBuf::from(parts.next().unwrap()),
    );
    let wb = flowerbox::agent::Workbench::locate(&ws, true);
    let placement = WorktreePlacement::open(IsolateOptions::new(&ws, &wb)).expect("open");
    placement.bind_run(run);
    let place = placement.prepare("worker-1").await.expect("prepare");
    let mut opts = DockerOptions::new(run, &ws);
    opts.image = Some(image.into());
    opts.show_progress = false;
    let factory = DockerSandboxFactory::connect(opts).await.expect("connect");
    let sb = factory
        .sandbox(&AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: place.mounts.clone(),
            masked: Vec::new(),
            workdir: place.workdir.clone(),
            policy: flowerbox::sandbox::SandboxPolicy::writer(),
        })
        .await
        .expect("sandbox");
    let out = exec_ok(
        &*sb,
        "echo crash > crash.txt && git add -A && git commit -q -m crashed-work && git log --oneline -1",
        &place.workdir,
    )
    .await;
    assert!(out.success(), "{out:?}");
    println!("READY {}", place.workdir.display());
    std::future::pending::<()>().await;
}

/// Kills the helper when the test ends early (a panic must not leave it running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_crashed_runs_deleted_worktree_does_not_block_the_next_run() {
    let Some(engine) = engine_or_skip("isolate_stale").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let image = agent_image(&engine).await;
    let dir = tempfile::tempdir().unwrap();
    let ws = repo(dir.path());
    std::fs::create_dir_all(flowerbox::agent::Workbench::locate(&ws, true)).unwrap();
    let crashed_run = run_id("iso-crashed");

    let mut c = helper("crashed_owner");
    c.env(
        HELPER_ENV,
        format!("{crashed_run}|{image}|{}", ws.display()),
    )
    .stderr(Stdio::inherit());
    let (child, rx) = spawn_lines("crashed_owner", c);
    let mut child = KillOnDrop(child);
    let ready = wait_for(&rx, Duration::from_secs(180), |l| l.contains("READY "));
    let crashed_tree = PathBuf::from(ready.split_once("READY ").unwrap().1.trim());
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    // The user deletes the leftover directory by hand.
    std::fs::remove_dir_all(&crashed_tree).unwrap();
    let crashed_branch = format!("flower/{crashed_run}/worker-1");
    let listed = |ws: &std::path::Path| {
        git(ws, &["worktree", "list", "--porcelain"]).contains(&crashed_tree.display().to_string())
    };
    assert!(
        listed(&ws),
        "the crashed worktree should still be registered"
    );

    let script = "git status --short && echo next > next.txt && git add -A && \
                  git commit -q -m next-work && git worktree list";
    let run = IsoRun::in_repo(&engine, "iso-next", dir, ws.clone(), |_, _| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "接着干", "prompt": "提交 next.txt"}))]},
                {"content": [text("好了")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": script}))]},
                {"content": [text(REPORT)]}]}]})
    })
    .await;
    // The crashed run's container is an orphan of a dead owner: swept.
    let swept = run.factory.sweep_orphans().await.unwrap();
    assert!(swept.iter().any(|l| l.contains(&crashed_run)), "{swept:?}");
    // Opening the placement pruned the stale registration and kept the unmerged branch.
    let warnings = run.placement.warnings().join("\n");
    assert!(
        warnings.contains(&format!(
            "上次运行的残留:清掉了 worktree {}({crashed_branch}) 的失效登记(目录已经没了)",
            crashed_tree.display()
        )),
        "{warnings}"
    );
    assert!(
        warnings.contains(&format!(
            "上次运行的残留:留着分支 {crashed_branch}:有没合入的提交"
        )),
        "{warnings}"
    );
    assert!(!listed(&ws));
    assert!(git(&ws, &["show", &format!("{crashed_branch}:crash.txt")]).contains("crash"));

    coordinate(&run.rt, "接着干").await;
    let bash = run.results_of("worker-1", "Bash");
    assert!(!bash[0].0, "{:?}", bash);
    assert!(
        !bash[0].1.contains(&crashed_tree.display().to_string()),
        "{bash:?}"
    );
    let agent = run.results_of("协调者", "Agent");
    assert!(agent[0].1.contains("已合入 main"), "{agent:?}");
    assert!(ws.join("next.txt").is_file());
    git(&ws, &["fsck", "--strict"]);
    run.rt.release_agents().await;
    assert!(run.placement.close().is_empty());
    // The crashed run's work is still there, on its branch.
    assert_eq!(
        git(
            &ws,
            &["branch", "--list", "--format=%(refname:short)", "flower/*"]
        )
        .trim(),
        crashed_branch
    );
}
