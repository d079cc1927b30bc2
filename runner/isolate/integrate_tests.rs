//! Unit tests of committing and integrating, on real repositories (the git CLI sets the scene,
//! libgit2 does the work, and the git CLI checks the result).

use super::*;
use crate::isolate::repo::open_workspace_repo;
use crate::isolate::repo::tests::{git, repo_with_commit};
use crate::isolate::worktree::{add, NewWorktree};
use crate::record::owner::Owner;
use std::fs;
use std::path::PathBuf;

struct Scene {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    repo: WorkspaceRepo,
    root: PathBuf,
}

fn scene() -> Scene {
    let (dir, ws) = repo_with_commit();
    let root = dir
        .path()
        .canonicalize()
        .unwrap()
        .join(".flower-proj-worktrees");
    let repo = open_workspace_repo(&ws).unwrap();
    Scene {
        _dir: dir,
        ws,
        repo,
        root,
    }
}

impl Scene {
    fn worker(&self, agent: &str) -> NewWorktree {
        let r = self.repo.open().unwrap();
        add(&r, &self.root, "r1", agent, &Owner::current().unwrap()).unwrap()
    }

    fn head(&self) -> String {
        git(&self.ws, &["rev-parse", "HEAD"]).trim().to_string()
    }

    fn status(&self) -> String {
        git(&self.ws, &["status", "--porcelain"])
    }
}

#[test]
fn commit_worktree_takes_everything_but_ignored_files() {
    let s = scene();
    fs::write(s.ws.join(".gitignore"), "*.log\n").unwrap();
    git(&s.ws, &["add", ".gitignore"]);
    git(&s.ws, &["commit", "-q", "-m", "ignore logs"]);
    let w = s.worker("worker-1");
    assert_eq!(
        commit_worktree(&w.path, &w.branch, "worker-1", "m").unwrap(),
        None
    );
    fs::write(w.path.join("new.sh"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(w.path.join("new.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(w.path.join("b.txt")).unwrap();
    fs::write(w.path.join("a.txt"), "ONE\n").unwrap();
    fs::write(w.path.join("build.log"), "noise").unwrap();
    let id = commit_worktree(&w.path, &w.branch, "worker-1", "flowerbox worker-1")
        .unwrap()
        .unwrap();
    let files = git(&s.ws, &["ls-tree", "-r", &id.to_string()]);
    assert!(
        files.contains("100755 blob") && files.contains("new.sh"),
        "{files}"
    );
    assert!(
        !files.contains("b.txt") && !files.contains("build.log"),
        "{files}"
    );
    assert_eq!(git(&w.path, &["status", "--porcelain"]), "");
    assert_eq!(git(&s.ws, &["rev-parse", &w.branch]).trim(), id.to_string());
    // The workspace did not move.
    assert!(git(&s.ws, &["log", "--oneline"]).lines().count() == 2);
}

#[test]
fn commit_worktree_refuses_a_switched_branch() {
    let s = scene();
    let w = s.worker("worker-1");
    git(&w.path, &["checkout", "-q", "-b", "elsewhere"]);
    fs::write(w.path.join("x"), "x").unwrap();
    let e = commit_worktree(&w.path, &w.branch, "worker-1", "m").unwrap_err();
    assert!(e.to_string().contains("切了分支"), "{e}");
}

#[test]
fn fast_forward_then_three_way_merge() {
    let s = scene();
    let w1 = s.worker("worker-1");
    let w2 = s.worker("worker-2");
    fs::write(w1.path.join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    fs::write(w2.path.join("c.txt"), "c\n").unwrap();
    commit_worktree(&w1.path, &w1.branch, "worker-1", "w1").unwrap();
    commit_worktree(&w2.path, &w2.branch, "worker-2", "w2").unwrap();

    let first = integrate(&s.repo, &w1.branch, "worker-1").unwrap();
    let Integration::Merged {
        fast_forward: true,
        files,
        into,
        ..
    } = &first
    else {
        panic!("{first:?}")
    };
    assert_eq!(files, &["a.txt"]);
    assert_eq!(into, "main");
    assert_eq!(s.head(), git(&s.ws, &["rev-parse", &w1.branch]).trim());
    assert!(fs::read_to_string(s.ws.join("a.txt"))
        .unwrap()
        .contains("four"));

    let second = integrate(&s.repo, &w2.branch, "worker-2").unwrap();
    assert!(
        matches!(&second, Integration::Merged { fast_forward: false, files, .. } if files == &["c.txt"]),
        "{second:?}"
    );
    let parents = git(&s.ws, &["log", "-1", "--format=%P"]);
    assert_eq!(parents.split_whitespace().count(), 2);
    assert_eq!(s.status(), "");
    assert!(s.ws.join("c.txt").is_file());
    assert_eq!(
        integrate(&s.repo, &w2.branch, "worker-2").unwrap(),
        Integration::AlreadyMerged
    );
    git(&s.ws, &["fsck", "--strict"]);
}

#[test]
fn a_conflict_touches_nothing_and_keeps_both_sides() {
    let s = scene();
    let w = s.worker("worker-1");
    fs::write(w.path.join("a.txt"), "one\nTWO (worker)\nthree\n").unwrap();
    commit_worktree(&w.path, &w.branch, "worker-1", "w").unwrap();
    let branch_tip = git(&s.ws, &["rev-parse", &w.branch]);
    fs::write(s.ws.join("a.txt"), "one\nTWO (main)\nthree\n").unwrap();
    git(&s.ws, &["commit", "-q", "-am", "main edits"]);
    let head = s.head();
    fs::write(s.ws.join("b.txt"), "user is typing\n").unwrap();
    let status = s.status();

    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert_eq!(
        r,
        Integration::Conflict {
            paths: vec!["a.txt".into()],
            into: "main".into()
        }
    );
    assert_eq!(s.head(), head);
    assert_eq!(s.status(), status);
    assert_eq!(
        fs::read_to_string(s.ws.join("a.txt")).unwrap(),
        "one\nTWO (main)\nthree\n"
    );
    assert_eq!(git(&s.ws, &["rev-parse", &w.branch]), branch_tip);
    assert!(!s.ws.join(".git/MERGE_HEAD").exists());
    assert!(fs::read_to_string(w.path.join("a.txt"))
        .unwrap()
        .contains("worker"));
}

#[test]
fn the_users_uncommitted_work_stops_the_integration() {
    let s = scene();
    let w = s.worker("worker-1");
    fs::write(w.path.join("a.txt"), "worker\n").unwrap();
    fs::write(w.path.join("new.txt"), "from worker\n").unwrap();
    fs::write(w.path.join("secret.env"), "worker env\n").unwrap();
    commit_worktree(&w.path, &w.branch, "worker-1", "w").unwrap();
    let head = s.head();

    // Modified tracked file.
    fs::write(s.ws.join("a.txt"), "user's edit\n").unwrap();
    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert!(
        matches!(&r, Integration::UserChanges { paths, .. } if paths == &["a.txt"]),
        "{r:?}"
    );
    assert_eq!(
        fs::read_to_string(s.ws.join("a.txt")).unwrap(),
        "user's edit\n"
    );
    assert_eq!(s.head(), head);
    git(&s.ws, &["checkout", "a.txt"]);

    // Untracked and ignored files where the branch adds files.
    fs::write(s.ws.join("new.txt"), "user's own\n").unwrap();
    fs::write(s.ws.join(".git/info/exclude"), "*.env\n").unwrap();
    fs::write(s.ws.join("secret.env"), "user env\n").unwrap();
    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert!(
        matches!(&r, Integration::UserChanges { paths, .. } if paths == &["new.txt", "secret.env"]),
        "{r:?}"
    );
    assert_eq!(
        fs::read_to_string(s.ws.join("new.txt")).unwrap(),
        "user's own\n"
    );
    assert_eq!(
        fs::read_to_string(s.ws.join("secret.env")).unwrap(),
        "user env\n"
    );
    assert_eq!(s.head(), head);

    // Staged change in a touched path.
    fs::remove_file(s.ws.join("new.txt")).unwrap();
    fs::remove_file(s.ws.join("secret.env")).unwrap();
    fs::write(s.ws.join("a.txt"), "staged\n").unwrap();
    git(&s.ws, &["add", "a.txt"]);
    fs::write(s.ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert!(matches!(r, Integration::UserChanges { .. }), "{r:?}");
    assert_eq!(git(&s.ws, &["diff", "--cached", "--name-only"]), "a.txt\n");
}

#[test]
fn unrelated_user_work_survives_an_integration() {
    let s = scene();
    let w = s.worker("worker-1");
    fs::write(w.path.join("a.txt"), "worker\n").unwrap();
    commit_worktree(&w.path, &w.branch, "worker-1", "w").unwrap();
    fs::write(s.ws.join("b.txt"), "user edit, not staged\n").unwrap();
    fs::write(s.ws.join("staged.txt"), "user staged\n").unwrap();
    git(&s.ws, &["add", "staged.txt"]);
    fs::write(s.ws.join("notes.md"), "untracked\n").unwrap();
    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert!(matches!(r, Integration::Merged { .. }), "{r:?}");
    assert_eq!(fs::read_to_string(s.ws.join("a.txt")).unwrap(), "worker\n");
    assert_eq!(
        fs::read_to_string(s.ws.join("b.txt")).unwrap(),
        "user edit, not staged\n"
    );
    let status = s.status();
    assert!(status.contains(" M b.txt"), "{status}");
    assert!(status.contains("A  staged.txt"), "{status}");
    assert!(status.contains("?? notes.md"), "{status}");
    assert!(!status.contains("a.txt"), "{status}");
}

#[test]
fn a_detached_workspace_head_moves_itself() {
    let s = scene();
    git(&s.ws, &["checkout", "-q", "--detach"]);
    let w = s.worker("worker-1");
    fs::write(w.path.join("d.txt"), "d\n").unwrap();
    commit_worktree(&w.path, &w.branch, "worker-1", "w").unwrap();
    let r = integrate(&s.repo, &w.branch, "worker-1").unwrap();
    assert!(
        matches!(&r, Integration::Merged { into, .. } if into == "HEAD"),
        "{r:?}"
    );
    assert_eq!(s.head(), git(&s.ws, &["rev-parse", &w.branch]).trim());
    assert!(s.ws.join("d.txt").is_file());
    // main did not move.
    assert_ne!(git(&s.ws, &["rev-parse", "main"]).trim(), s.head());
}

#[test]
fn a_merge_the_worker_left_uncommitted_becomes_a_merge_commit() {
    let s = scene();
    let w1 = s.worker("worker-1");
    fs::write(w1.path.join("a.txt"), "one\nTWO-1\nthree\n").unwrap();
    commit_worktree(&w1.path, &w1.branch, "worker-1", "w1").unwrap();
    let w2 = s.worker("worker-2");
    fs::write(w2.path.join("a.txt"), "one\nTWO-2\nthree\n").unwrap();
    commit_worktree(&w2.path, &w2.branch, "worker-2", "w2").unwrap();
    assert!(matches!(
        integrate(&s.repo, &w1.branch, "worker-1").unwrap(),
        Integration::Merged { .. }
    ));
    assert!(matches!(
        integrate(&s.repo, &w2.branch, "worker-2").unwrap(),
        Integration::Conflict { .. }
    ));
    // A third worker resolves it: merges worker-2's branch and resolves, without committing.
    let w3 = s.worker("worker-3");
    // An identity of its own: on a machine with none configured `git merge` stops before it
    // records MERGE_HEAD, and the test would prove nothing (seen on a fresh Debian machine).
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=W", "-c", "user.email=w@example.invalid"])
        .args(["merge", "--no-edit", &w2.branch])
        .current_dir(&w3.path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let merging = std::process::Command::new("git")
        .args(["rev-parse", "-q", "--verify", "MERGE_HEAD"])
        .current_dir(&w3.path)
        .output()
        .unwrap();
    assert!(
        merging.status.success(),
        "the merge must stop at the conflict: {out:?}"
    );
    fs::write(w3.path.join("a.txt"), "one\nTWO-1+2\nthree\n").unwrap();
    git(&w3.path, &["add", "a.txt"]);
    commit_worktree(&w3.path, &w3.branch, "worker-3", "resolve").unwrap();
    assert!(matches!(
        integrate(&s.repo, &w3.branch, "worker-3").unwrap(),
        Integration::Merged { .. }
    ));
    assert_eq!(
        integrate(&s.repo, &w2.branch, "worker-2").unwrap(),
        Integration::AlreadyMerged
    );
    assert!(fs::read_to_string(s.ws.join("a.txt"))
        .unwrap()
        .contains("TWO-1+2"));
}

#[test]
fn a_branch_with_a_symlink_out_of_the_repository_or_a_git_directory_is_not_merged() {
    let s = scene();
    let runs = s.ws.join("runs");
    let wb = s.ws.parent().unwrap().join(".flower-proj");
    type Plant = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(&str, Plant)> = vec![
        (
            "abs",
            Box::new(|p| std::os::unix::fs::symlink("/etc", p.join("l")).unwrap()),
        ),
        (
            "up",
            Box::new(|p| {
                std::os::unix::fs::symlink("../../../.flower-proj/evil", p.join("l")).unwrap()
            }),
        ),
        (
            "runs",
            Box::new(|p| std::os::unix::fs::symlink("runs/x", p.join("l")).unwrap()),
        ),
        (
            "bare",
            Box::new(|p| {
                fs::create_dir_all(p.join("evil.git/refs")).unwrap();
                fs::write(p.join("evil.git/refs/keep"), "").unwrap();
                fs::write(p.join("evil.git/HEAD"), "ref: refs/heads/main\n").unwrap();
                fs::write(p.join("evil.git/config"), "[core]\n\tworktree = ..\n").unwrap();
            }),
        ),
    ];
    for (name, plant) in cases {
        let w = s.worker(name);
        plant(&w.path);
        commit_worktree(&w.path, &w.branch, name, "w").unwrap();
        let tip = git(&s.ws, &["rev-parse", &w.branch]);
        let head = s.head();
        let r = integrate_guarded(&s.repo, &w.branch, name, &[runs.clone(), wb.clone()]).unwrap();
        match &r {
            Integration::Refused { links, into } => {
                assert_eq!(into, "main");
                assert_eq!(links.len(), 1, "{name}: {links:?}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(s.head(), head, "{name}");
        assert_eq!(s.status(), "", "{name}");
        assert_eq!(git(&s.ws, &["rev-parse", &w.branch]), tip, "{name}");
    }
    // A link that stays inside is merged.
    let w = s.worker("inside");
    std::os::unix::fs::symlink("a.txt", w.path.join("l")).unwrap();
    commit_worktree(&w.path, &w.branch, "inside", "w").unwrap();
    assert!(matches!(
        integrate_guarded(&s.repo, &w.branch, "inside", &[runs, wb]).unwrap(),
        Integration::Merged { .. }
    ));
}
