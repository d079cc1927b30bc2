//! `--isolate` on the real engine, driven through the runtime by the scripted model: workers
//! commit with git inside their own worktree containers, branches integrate serially,
//! same-line edits come back to the coordinator as a conflict with the paths, and every agent
//! container mounts the workbench, which lies outside the repository.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod isolate_support;

use flowerbox::agent::{roles, RunOptions};
use isolate_support::docker_support::{engine_or_skip, SERIAL};
use isolate_support::*;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// The worker's script: commit with git inside the container, prove the main working tree is
/// not visible, leave a file in the shared workbench.
fn commit_script(ws: &Path, wb: &Path) -> String {
    format!(
        "set -e\nme=$(basename \"$PWD\")\necho \"hello from $me\" > \"from-$me.txt\"\n\
         git status --short\ngit add -A\ngit commit -q -m \"work of $me\"\ngit log --oneline -1\n\
         test -e '{ws}/a.txt' && echo main-visible || echo main-hidden\n\
         touch '{wb}/artifacts/'\"$me.txt\"\nid -u",
        ws = ws.display(),
        wb = wb.display()
    )
}

#[tokio::test]
async fn two_parallel_workers_commit_in_their_own_containers_and_both_integrate() {
    let Some(engine) = engine_or_skip("isolate_two_workers").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = IsoRun::new(&engine, "iso-two", |ws, wb| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [
                    tool("Agent", json!({"description": "甲", "prompt": "写你的文件并提交"})),
                    tool("Agent", json!({"description": "乙", "prompt": "写你的文件并提交"}))]},
                {"content": [tool("Bash", json!({"command": format!("ls '{}'", wb.join("artifacts").display())}))]},
                {"content": [text("两个都合入了")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": commit_script(ws, wb)}))]},
                {"content": [text(REPORT)]}]}]})
    })
    .await;
    assert!(
        !run.wb.starts_with(&run.ws),
        "workbench inside the repository"
    );

    let started = Instant::now();
    let r = run
        .rt
        .run(
            &roles::coordinator("协调者", "", vec![]),
            "派两个人",
            RunOptions::default(),
        )
        .await;
    eprintln!("two-worker isolated step: {:?}", started.elapsed());
    assert!(r.ok, "{:?}", r.error);

    // Inside each container: git status/add/commit worked, the main working tree was not
    // visible, and the commit is on the worker's own branch.
    for w in ["worker-1", "worker-2"] {
        let bash = run.results_of(w, "Bash");
        assert_eq!(bash.len(), 1, "{w}: {bash:?}");
        let (is_error, out) = &bash[0];
        assert!(!is_error, "{w}: {out}");
        assert!(out.contains(&format!("?? from-{w}.txt")), "{w}: {out}");
        assert!(out.contains(&format!("work of {w}")), "{w}: {out}");
        assert!(out.contains("main-hidden"), "{w}: {out}");
        assert!(run.wb.join("artifacts").join(format!("{w}.txt")).is_file());
        assert!(
            run.ws.join(format!("from-{w}.txt")).is_file(),
            "{w} not integrated"
        );
    }
    // The coordinator was told, and saw the workbench through its own (read-only) container.
    let agent_results = run.results_of("协调者", "Agent");
    assert_eq!(agent_results.len(), 2);
    for (is_error, t) in &agent_results {
        assert!(
            !is_error && t.contains("[合入]") && t.contains("已合入 main"),
            "{t}"
        );
    }
    let glance = run.results_of("协调者", "Bash");
    assert!(glance[0].1.contains("worker-1.txt") && glance[0].1.contains("worker-2.txt"));

    // Every agent container mounts the workbench; workers also their worktree and the git dir,
    // read-only but for their own parts (issue 14: admin dir, object store, ref directory).
    let mounts = run.container_mounts(&engine).await;
    let wb = run.wb.display().to_string();
    let gitdir = run.ws.join(".git").display().to_string();
    let refs = run
        .ws
        .join(".git/refs/heads/flower")
        .join(&run.run_id)
        .display()
        .to_string();
    assert_eq!(
        mounts.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(),
        ["worker-1", "worker-2", "协调者"]
    );
    for (agent, m) in &mounts {
        let wb_mount = m.iter().find(|(p, _)| p == &wb);
        assert!(wb_mount.is_some(), "{agent}: {m:?}");
        if agent.starts_with("worker") {
            let admin = format!("{gitdir}/worktrees/flower-{}-{agent}", run.run_id);
            for (path, rw) in [
                (&gitdir, false),
                (&admin, true),
                (&format!("{admin}/gitdir"), false),
                (&format!("{gitdir}/objects"), true),
                (&refs, true),
            ] {
                assert!(
                    m.iter().any(|(p, w)| p == path && *w == rw),
                    "{agent}: {path} {rw}: {m:?}"
                );
            }
            assert!(
                m.iter().all(|(p, _)| p != &run.ws.display().to_string()),
                "{m:?}"
            );
            assert!(wb_mount.unwrap().1);
        } else {
            assert!(m.iter().all(|(_, rw)| !rw), "{agent}: {m:?}");
        }
    }

    // The host repository: both commits made inside containers are in main's history, the
    // working tree is clean, nothing under .git belongs to anyone else, and fsck passes.
    let log = git(&run.ws, &["log", "--format=%s", "main"]);
    assert!(
        log.contains("work of worker-1") && log.contains("work of worker-2"),
        "{log}"
    );
    assert_eq!(git(&run.ws, &["status", "--porcelain"]), "");
    let (uid, gid) = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let foreign = foreign_owned(&run.ws.join(".git"), uid, gid);
    assert!(foreign.is_empty(), "foreign-owned under .git: {foreign:?}");
    git(&run.ws, &["fsck", "--strict"]);

    run.rt.release_agents().await;
    let left = run.placement.close();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(git(&run.ws, &["branch", "--list", "flower/*"]), "");
    assert_eq!(git(&run.ws, &["worktree", "list"]).lines().count(), 1);
    assert!(!run
        .placement
        .root()
        .join(&run.run_id)
        .join("worker-1")
        .exists());
    git(&run.ws, &["fsck", "--strict"]);
}

#[tokio::test]
async fn same_line_edits_conflict_and_the_coordinator_hears_the_paths() {
    let Some(engine) = engine_or_skip("isolate_conflict").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let script = "me=$(basename \"$PWD\"); sed -i \"s/^two$/two by $me/\" a.txt && cat a.txt";
    let run = IsoRun::new(&engine, "iso-conflict", |_, _| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [
                    tool("Agent", json!({"description": "甲", "prompt": "改第二行"})),
                    tool("Agent", json!({"description": "乙", "prompt": "改第二行"}))]},
                {"content": [text("有一个冲突")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": script}))]},
                {"content": [text(REPORT)]}]}]})
    })
    .await;
    coordinate(&run.rt, "派两个人改同一行").await;
    let results = run.results_of("协调者", "Agent");
    assert_eq!(results.len(), 2, "{results:?}");
    let merged: Vec<&String> = results
        .iter()
        .map(|(_, t)| t)
        .filter(|t| t.contains("已合入 main"))
        .collect();
    let conflicted: Vec<&String> = results
        .iter()
        .map(|(_, t)| t)
        .filter(|t| t.contains("[合入失败]"))
        .collect();
    assert_eq!((merged.len(), conflicted.len()), (1, 1), "{results:?}");
    let report = conflicted[0];
    assert!(
        report.contains("冲突") && report.contains("- a.txt"),
        "{report}"
    );
    // The Agent result starts with `[worker-N]`.
    let loser = if report.starts_with("[worker-1]") {
        "worker-1"
    } else {
        "worker-2"
    };
    let winner = if loser == "worker-1" {
        "worker-2"
    } else {
        "worker-1"
    };
    let branch = format!("flower/{}/{loser}", run.run_id);
    assert!(report.contains(&branch), "{report}");

    // The workspace holds the winner's line and is otherwise untouched; the loser's branch and
    // worktree keep its line.
    assert_eq!(
        std::fs::read_to_string(run.ws.join("a.txt")).unwrap(),
        format!("one\ntwo by {winner}\nthree\n")
    );
    assert_eq!(git(&run.ws, &["status", "--porcelain"]), "");
    assert!(!run.ws.join(".git/MERGE_HEAD").exists());
    assert_eq!(
        git(&run.ws, &["show", &format!("{branch}:a.txt")]),
        format!("one\ntwo by {loser}\nthree\n")
    );
    let (_, loser_tree) = run.placement.worktree_of(loser).unwrap();
    assert!(std::fs::read_to_string(loser_tree.join("a.txt"))
        .unwrap()
        .contains(&format!("two by {loser}")));

    run.rt.release_agents().await;
    let kept = run.placement.close();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].contains(&branch), "{kept:?}");
    assert!(loser_tree.join("a.txt").is_file());
    assert_eq!(
        git(
            &run.ws,
            &["branch", "--list", "--format=%(refname:short)", "flower/*"]
        )
        .trim(),
        branch
    );
    git(&run.ws, &["fsck", "--strict"]);
}

/// A repository with `extensions.relativeWorktrees` (git ≥ 2.48): the container's git 2.39
/// cannot open it, so the worker's git fails and its work cannot be committed in its
/// container. The work is committed on the host (libgit2) once the container is gone, and
/// merged; nobody is told the worker switched branches (issue 29 §2.7).
#[tokio::test]
async fn relative_worktrees_are_sealed_on_the_host_and_merged() {
    let Some(engine) = engine_or_skip("isolate_relative").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = repo(dir.path());
    git(&ws, &["config", "core.repositoryformatversion", "1"]);
    git(&ws, &["config", "extensions.relativeWorktrees", "true"]);
    let script = "echo rel > rel.txt; git status --short; echo \"git=$?\"";
    let run = IsoRun::in_repo(&engine, "iso-relative", dir, ws, |_, _| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "甲", "prompt": "写 rel.txt"}))]},
                {"content": [text("合入了")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": script}))]},
                {"content": [text(REPORT)]}]}]})
    })
    .await;
    coordinate(&run.rt, "派一个人").await;
    // The container's git could not open the repository (what this test is about).
    let bash = run.results_of("worker-1", "Bash");
    assert!(!bash[0].1.contains("git=0"), "{bash:?}");
    let results = run.results_of("协调者", "Agent");
    assert_eq!(results.len(), 1, "{results:?}");
    let told = &results[0].1;
    assert!(told.contains("已合入 main"), "{told}");
    assert!(!told.contains("切了分支"), "{told}");
    assert_eq!(
        std::fs::read_to_string(run.ws.join("rel.txt")).unwrap(),
        "rel\n"
    );
    // The commit is the worker's, made by flowerbox (libgit2 reads the repository).
    let repo = git2::Repository::open(&run.ws).unwrap();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    let mut subjects = Vec::new();
    let mut c = Some(head);
    while let Some(commit) = c {
        subjects.push(String::from_utf8_lossy(commit.message_bytes()).into_owned());
        c = commit.parents().next();
    }
    assert!(
        subjects
            .iter()
            .any(|s| s.starts_with("flowerbox worker-1:")),
        "{subjects:?}"
    );
    run.rt.release_agents().await;
    let left = run.placement.close();
    assert!(left.is_empty(), "{left:?}");
}
