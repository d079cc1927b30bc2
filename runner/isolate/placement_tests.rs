//! Unit tests of the placement on the host (no containers): places, reports, close.

use super::*;
use crate::isolate::repo::tests::{git, repo_with_commit};
use std::fs;

fn placement(ws: &Path, wb: &Path) -> WorktreePlacement {
    fs::create_dir_all(wb).unwrap();
    let p = WorktreePlacement::open(IsolateOptions::new(ws, wb)).unwrap();
    p.bind_run("r1");
    p
}

#[tokio::test]
async fn prepare_gives_worktree_and_workbench_read_write_and_git_read_only_but_its_own_parts() {
    let (dir, ws) = repo_with_commit();
    let wb = dir.path().canonicalize().unwrap().join(".flower-proj");
    let p = placement(&ws, &wb);
    let place = p.prepare("worker-1").await.unwrap();
    let (branch, path) = p.worktree_of("worker-1").unwrap();
    assert_eq!(branch, "flower/r1/worker-1");
    assert_eq!(
        path,
        dir.path()
            .canonicalize()
            .unwrap()
            .join(".flower-proj-worktrees/r1/worker-1")
    );
    assert_eq!(place.workdir, path);
    let git = ws.join(".git");
    let admin = git.join("worktrees/flower-r1-worker-1");
    let state = git.join("flowerbox/worktrees/flower-r1-worker-1");
    let m = |p: PathBuf, read_only: bool, shadow: Option<PathBuf>| match shadow {
        Some(host) => Mount::shadow(host, p, read_only),
        None => Mount::same(p, read_only),
    };
    assert_eq!(
        place.mounts,
        vec![
            m(path.clone(), false, None),
            m(path.join(".git"), true, None),
            m(git.clone(), true, None),
            m(admin.clone(), false, None),
            m(admin.join("gitdir"), true, None),
            m(admin.join("commondir"), true, None),
            m(admin.join("locked"), true, None),
            m(admin.join("config.worktree"), true, None),
            m(
                git.join("refs/heads/flower/r1"),
                false,
                Some(state.join("refs"))
            ),
            m(
                git.join("logs/refs/heads/flower/r1"),
                false,
                Some(state.join("logs"))
            ),
            m(git.join("objects"), false, Some(state.join("objects"))),
            m(state.join("main-objects"), true, Some(git.join("objects"))),
            m(wb.clone(), false, None),
        ]
    );
    // Every target exists on the host (the engine must not create one inside `.git`), the
    // worker's copy of its branch points where the branch does, and the store's alternates
    // name the read-only view of the real objects.
    for mount in &place.mounts {
        assert!(mount.inside.exists(), "{}", mount.inside.display());
    }
    let head = git2::Repository::open(&ws)
        .unwrap()
        .refname_to_id("refs/heads/flower/r1/worker-1")
        .unwrap();
    assert_eq!(
        fs::read_to_string(state.join("refs/worker-1"))
            .unwrap()
            .trim(),
        head.to_string()
    );
    assert_eq!(
        fs::read_to_string(state.join("objects/info/alternates")).unwrap(),
        format!("{}\n", state.join("main-objects").display())
    );
    assert!(place
        .note
        .as_deref()
        .unwrap()
        .contains("flower/r1/worker-1"));
    assert!(!path.starts_with(&ws) && !path.starts_with(&wb));
    assert!(p.warnings().is_empty(), "{:?}", p.warnings());
}

#[tokio::test]
async fn unbound_placement_refuses_and_subdir_workspaces_map_into_the_worktree() {
    let (dir, ws) = repo_with_commit();
    fs::create_dir(ws.join("app")).unwrap();
    fs::write(ws.join("app/main.py"), "print(1)\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "app"]);
    let wb = dir.path().join("wb");
    fs::create_dir_all(&wb).unwrap();
    let p = WorktreePlacement::open(IsolateOptions::new(ws.join("app"), &wb)).unwrap();
    assert!(p
        .prepare("worker-1")
        .await
        .unwrap_err()
        .to_string()
        .contains("bind_run"));
    p.bind_run("r2");
    let place = p.prepare("worker-1").await.unwrap();
    assert!(place.workdir.ends_with("r2/worker-1/app"));
    assert!(place.workdir.join("main.py").is_file());
}

#[tokio::test]
async fn two_workers_integrate_serially_and_close_removes_merged_worktrees() {
    let (dir, ws) = repo_with_commit();
    let p = Arc::new(placement(&ws, &dir.path().join("wb")));
    let a = p.prepare("worker-1").await.unwrap();
    let b = p.prepare("worker-2").await.unwrap();
    fs::write(a.workdir.join("from1.txt"), "1\n").unwrap();
    fs::write(b.workdir.join("from2.txt"), "2\n").unwrap();
    let (ra, rb) = tokio::join!(
        p.finish("worker-1", &a, true, None),
        p.finish("worker-2", &b, true, None)
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra.contains("已合入 main"), "{ra}");
    assert!(rb.contains("已合入 main"), "{rb}");
    assert!(ws.join("from1.txt").is_file() && ws.join("from2.txt").is_file());
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    let lines = p.close();
    assert!(lines.is_empty(), "{lines:?}");
    assert!(!a.workdir.exists() && !b.workdir.exists());
    assert_eq!(git(&ws, &["branch", "--list", "flower/*"]), "");
    assert_eq!(git(&ws, &["worktree", "list"]).lines().count(), 1);
    git(&ws, &["fsck", "--strict"]);
}

#[tokio::test]
async fn a_conflict_is_reported_with_paths_and_everything_is_kept() {
    let (dir, ws) = repo_with_commit();
    let p = placement(&ws, &dir.path().join("wb"));
    let a = p.prepare("worker-1").await.unwrap();
    let b = p.prepare("worker-2").await.unwrap();
    fs::write(a.workdir.join("a.txt"), "one\nTWO by 1\nthree\n").unwrap();
    fs::write(b.workdir.join("a.txt"), "one\nTWO by 2\nthree\n").unwrap();
    assert!(p
        .finish("worker-1", &a, true, None)
        .await
        .unwrap()
        .contains("已合入"));
    let r = p.finish("worker-2", &b, true, None).await.unwrap();
    assert!(r.contains("冲突") && r.contains("- a.txt"), "{r}");
    assert!(
        r.contains("flower/r1/worker-2") && r.contains("git merge"),
        "{r}"
    );
    assert_eq!(
        fs::read_to_string(ws.join("a.txt")).unwrap(),
        "one\nTWO by 1\nthree\n"
    );
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    let theirs = git(&ws, &["show", "flower/r1/worker-2:a.txt"]);
    assert!(theirs.contains("TWO by 2"));
    let lines = p.close();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("flower/r1/worker-2") && lines[0].contains("没合入"));
    assert!(b.workdir.join("a.txt").is_file());
    assert!(!a.workdir.exists());
    // Kept worktrees are unlocked for the user's own git commands.
    let repo = git2::Repository::open(&ws).unwrap();
    let wt = repo.find_worktree("flower-r1-worker-2").unwrap();
    assert!(matches!(
        wt.is_locked().unwrap(),
        git2::WorktreeLockStatus::Unlocked
    ));
}

#[tokio::test]
async fn an_unfinished_worker_is_committed_but_not_integrated() {
    let (dir, ws) = repo_with_commit();
    let p = placement(&ws, &dir.path().join("wb"));
    let a = p.prepare("worker-1").await.unwrap();
    fs::write(a.workdir.join("half.txt"), "half\n").unwrap();
    let r = p.finish("worker-1", &a, false, None).await.unwrap();
    assert!(r.contains("没做完") && r.contains("已提交"), "{r}");
    assert!(!ws.join("half.txt").exists());
    assert!(git(&ws, &["show", "flower/r1/worker-1:half.txt"]).contains("half"));
    assert_eq!(p.close().len(), 1);
    assert!(a.workdir.join("half.txt").is_file());
}

#[tokio::test]
async fn a_worker_with_no_changes_reports_so_and_is_cleaned_up() {
    let (dir, ws) = repo_with_commit();
    let p = placement(&ws, &dir.path().join("wb"));
    let a = p.prepare("worker-1").await.unwrap();
    let r = p.finish("worker-1", &a, true, None).await.unwrap();
    assert!(r.contains("没有留下新的改动"), "{r}");
    assert!(p.close().is_empty());
    assert!(!a.workdir.exists());
}

#[tokio::test]
async fn an_unknown_agent_gets_no_report() {
    let (dir, ws) = repo_with_commit();
    let p = placement(&ws, &dir.path().join("wb"));
    let place = WorkerPlace {
        workdir: ws.clone(),
        mounts: vec![],
        note: None,
        branch: None,
    };
    assert_eq!(p.finish("worker-9", &place, true, None).await, None);
}

#[tokio::test]
async fn a_worker_still_at_work_at_close_is_left_for_the_next_start_to_hand_back() {
    let (dir, ws) = repo_with_commit();
    let wb = dir.path().join("wb");
    fs::create_dir_all(&wb).unwrap();
    // The owner recorded in the lock: a process that is gone (this run, after its stop).
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let mut opts = IsolateOptions::new(&ws, &wb);
    opts.owner = Some(Owner {
        pid,
        ..Owner::current().unwrap()
    });
    let p = WorktreePlacement::open(opts).unwrap();
    p.bind_run("r1");
    let a = p.prepare("worker-1").await.unwrap();
    let b = p.prepare("worker-2").await.unwrap();
    fs::write(b.workdir.join("done.txt"), "d\n").unwrap();
    assert!(p
        .finish("worker-2", &b, true, None)
        .await
        .unwrap()
        .contains("已合入"));
    fs::write(a.workdir.join("half.txt"), "half\n").unwrap();
    // The run stops while worker-1 works (its `finish` never runs).
    let lines = p.close();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("worker-1 没做完就停了") && lines[0].contains("flower/r1/worker-1"),
        "{lines:?}"
    );
    assert!(!b.workdir.exists(), "the finished one is cleaned up");
    // Exactly as `kill -9` leaves it: locked by the (dead) owner, worker state kept, files
    // untouched; the next start finds it to hand back.
    assert!(a.workdir.join("half.txt").is_file());
    let found = super::find_interrupted(p.repo());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].agent, "worker-1");
    assert_eq!(found[0].branch, "flower/r1/worker-1");
}
