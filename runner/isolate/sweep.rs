//! What crashed (or finished) runs left in a repository: flowerbox worktrees (`flower-*`) and
//! branches (`flower/*`). Run at the start of an `--isolate` run and by `flowerbox gc`.
//!
//! Rules (invariant 5): a worktree locked by a live (or undecidable) owner, or locked by
//! someone else, is not touched. Otherwise: commits the worker made in its container that its
//! run never brought back are brought back first, forward only ([`adopt`] with
//! [`Policy::FastForward`]; a branch that moved elsewhere since keeps both, listed); a
//! registration whose directory is gone is pruned (that is all that could block a later run); a
//! worktree that is clean and whose branch is merged is removed with its branch; a branch with
//! unmerged commits, or a worktree with uncommitted changes, is kept and listed — never
//! deleted. Removal never follows a link (a crashed run's containers may still be running).

use git2::{BranchType, Repository, WorktreeLockStatus};
use std::collections::HashSet;
use std::path::Path;

use super::adopt::{adopt, import_all, Adopted, Policy};
use super::repo::WorkspaceRepo;
use super::state::WorkerState;
use super::worktree::{
    checked_out_branch, delete_branch, drop_gitlinks, is_clean, is_merged, remove, unregister,
    OwnerLock, BRANCH_PREFIX, NAME_PREFIX,
};
use super::IsolateError;
use crate::record::owner::Liveness;
use crate::sandbox::gc::GcReport;

/// What a sweep did, one line per item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Worktrees and branches removed, registrations pruned.
    pub removed: Vec<String>,
    /// Kept: unmerged branches, dirty worktrees, worktrees locked by someone else or by an
    /// owner whose liveness cannot be decided.
    pub kept: Vec<String>,
    /// Kept because a live run owns them (its own business, no warning at the start of a run).
    pub live: Vec<String>,
    /// Removals that failed.
    pub failed: Vec<String>,
}

/// Sweeps the repository containing `workspace` (nothing to do outside a repository). Takes
/// the integration lock, so it never races a live run's worktree creation or integration.
///
/// # Errors
/// The repository cannot be opened or listed.
pub fn sweep(workspace: &Path) -> Result<SweepReport, IsolateError> {
    sweep_except(workspace, &HashSet::new())
}

/// [`sweep`], leaving the worktrees named in `skip` (and their branches) alone: interrupted
/// workers whose work is handed back first ([`super::handback`]).
///
/// # Errors
/// As [`sweep`].
pub fn sweep_except(workspace: &Path, skip: &HashSet<String>) -> Result<SweepReport, IsolateError> {
    let ws = match super::open_workspace_repo(workspace) {
        Ok(ws) => ws,
        Err(IsolateError::NotARepository(_) | IsolateError::Unborn(_) | IsolateError::Bare(_)) => {
            return Ok(SweepReport::default())
        }
        Err(e) => return Err(e),
    };
    let _lock = ws.lock()?;
    let repo = ws.open()?;
    let mut report = SweepReport::default();
    // Worktrees whose maker died making them go first: no worker ran there.
    let unfinished = super::creating::sweep_unfinished(&ws.commondir, &repo, &mut report);
    let mut in_worktrees = HashSet::new();
    let names = repo
        .worktrees()
        .map_err(IsolateError::git("列不出 worktree"))?;
    let registered: Vec<String> = names
        .iter()
        .filter_map(|n| n.ok().flatten())
        .filter(|n| n.starts_with(NAME_PREFIX))
        .map(str::to_string)
        .collect();
    for name in &registered {
        let branch = checked_out_branch(&ws.commondir, name);
        if let Some(b) = &branch {
            in_worktrees.insert(b.clone());
        }
        if skip.contains(name) || unfinished.contains(name) {
            continue;
        }
        sweep_one(&ws, &repo, name, branch.as_deref(), &mut report);
    }
    // Worker states whose registration is gone (pruned by hand): their commits come back.
    for name in WorkerState::names(&ws.commondir) {
        if registered.contains(&name) || unfinished.contains(&name) {
            continue;
        }
        if let Some(st) = WorkerState::open(&ws.commondir, &name) {
            if bring_back(&ws, &st, &mut report) {
                if let Err(e) = st.remove() {
                    report.failed.push(e.to_string());
                }
            }
        }
    }
    // Branches whose worktree is gone already.
    let branches = repo
        .branches(Some(BranchType::Local))
        .map_err(IsolateError::git("列不出分支"))?;
    for (b, _) in branches.flatten() {
        let Some(name) = b.name().ok().flatten().map(str::to_string) else {
            continue;
        };
        if !name.starts_with(BRANCH_PREFIX) || in_worktrees.contains(&name) {
            continue;
        }
        let Some(tip) = b.get().target() else {
            continue;
        };
        match is_merged(&repo, tip) {
            Ok(true) => match delete_branch(&repo, &name) {
                Ok(()) => report.removed.push(format!("删掉了已合入的分支 {name}")),
                Err(e) => report.failed.push(format!("删不掉分支 {name}:{e}")),
            },
            _ => report.kept.push(format!("留着分支 {name}:有没合入的提交")),
        }
    }
    Ok(report)
}

/// Brings a dead worker's commits back ([`adopt`], forward only), and every object of its store
/// (what a kept worktree's index names). True when the real branch now holds everything its
/// state had (the state may go).
fn bring_back(ws: &WorkspaceRepo, st: &WorkerState, report: &mut SweepReport) -> bool {
    if let Err(e) = ws.open().and_then(|r| import_all(&r, st, &ws.limits)) {
        report
            .failed
            .push(format!("取不回 {} 在容器里的对象:{e}", st.branch));
        return false;
    }
    match adopt(ws, st, Policy::FastForward) {
        Ok(Adopted::Unchanged) => true,
        Ok(Adopted::Moved { to, .. }) => {
            report.removed.push(format!(
                "取回了 {} 在容器里的提交(到 {})",
                st.branch,
                &to.to_string()[..10]
            ));
            true
        }
        Ok(Adopted::Diverged { tip }) => {
            report.kept.push(format!(
                "留着 {} 的容器副本:它走到了 {},和宿主机上的分支分叉了(在 {})",
                st.branch,
                &tip.to_string()[..10],
                st.dir().display()
            ));
            false
        }
        Err(e) => {
            report
                .failed
                .push(format!("取不回 {} 在容器里的提交:{e}", st.branch));
            false
        }
    }
}

/// Whether worktree `wt` is left alone: locked by someone else, by a live run, or by an
/// owner whose liveness is unknown (each said in `report`). A dead owner's lock is not.
fn held(wt: &git2::Worktree, what: &str, report: &mut SweepReport) -> bool {
    match wt.is_locked() {
        Ok(WorktreeLockStatus::Locked(reason)) => {
            match reason.as_deref().and_then(OwnerLock::parse) {
                None => {
                    report.kept.push(match reason.filter(|r| !r.is_empty()) {
                        Some(r) => format!("留着 {what}:被别人锁着({r})"),
                        None => format!("留着 {what}:被别人锁着"),
                    });
                    return true;
                }
                Some(lock) => match lock.owner.liveness() {
                    Liveness::Dead(_) => {}
                    Liveness::Alive => {
                        report
                            .live
                            .push(format!("留着 {what}:运行 {} 还在跑", lock.run));
                        return true;
                    }
                    Liveness::Unknown(why) => {
                        report.kept.push(format!("留着 {what}:{why}"));
                        return true;
                    }
                },
            }
        }
        Ok(WorktreeLockStatus::Unlocked) => {}
        Err(e) => {
            report.failed.push(format!("看不出 {what} 锁没锁:{e}"));
            return true;
        }
    }
    false
}

/// Settles one registered worktree `name` (see the module rules); lines go to `report`.
pub(super) fn sweep_one(
    ws: &WorkspaceRepo,
    repo: &Repository,
    name: &str,
    branch: Option<&str>,
    report: &mut SweepReport,
) {
    let Ok(wt) = repo.find_worktree(name) else {
        return;
    };
    let what = format!(
        "worktree {}({})",
        wt.path().display(),
        branch.unwrap_or("没有分支")
    );
    if held(&wt, &what, report) {
        return;
    }
    let state = WorkerState::open(&ws.commondir, name);
    if let Some(st) = &state {
        if !bring_back(ws, st, report) {
            // Unlock so the user can handle it with plain `git worktree` commands.
            if let Ok(links) = drop_gitlinks(&ws.commondir, name) {
                if !links.is_empty() {
                    report
                        .kept
                        .push(super::placement::gitlinks_note(wt.path(), &links));
                }
            }
            let _ = wt.unlock();
            return;
        }
    }
    let tip = branch.and_then(|b| {
        repo.find_branch(b, BranchType::Local)
            .ok()
            .and_then(|r| r.get().target())
    });
    let merged = match tip {
        Some(t) => is_merged(repo, t).unwrap_or(false),
        None => false,
    };
    if wt.validate().is_err() {
        // The directory is gone: only the registration is left. Pruning it loses nothing.
        match unregister(repo, name, None, false) {
            Ok(()) => report
                .removed
                .push(format!("清掉了 {what} 的失效登记(目录已经没了)")),
            Err(e) => {
                report.failed.push(format!("清不掉 {what} 的失效登记:{e}"));
                return;
            }
        }
        if let Some(b) = branch {
            if merged {
                match delete_branch(repo, b) {
                    Ok(()) => report.removed.push(format!("删掉了已合入的分支 {b}")),
                    Err(e) => report.failed.push(format!("删不掉分支 {b}:{e}")),
                }
            } else if tip.is_some() {
                report.kept.push(format!("留着分支 {b}:有没合入的提交"));
            }
        }
        return;
    }
    let clean = is_clean(wt.path()).unwrap_or(false);
    match (merged, clean, branch) {
        (true, true, Some(b)) => match remove(repo, name, b) {
            Ok(()) => report.removed.push(format!("删掉了已合入的 {what}")),
            Err(e) => report.failed.push(format!("删不掉已合入的 {what}:{e}")),
        },
        _ => {
            // Unlock so the user can handle it with plain `git worktree` commands; the real
            // branch holds everything now.
            match drop_gitlinks(&ws.commondir, name) {
                Ok(links) if !links.is_empty() => report
                    .kept
                    .push(super::placement::gitlinks_note(wt.path(), &links)),
                Ok(_) => {}
                Err(e) => report.failed.push(e.to_string()),
            }
            let _ = wt.unlock();
            if let Some(st) = &state {
                if let Err(e) = st.remove() {
                    report.failed.push(e.to_string());
                }
            }
            let why = match (merged, clean) {
                (false, _) => "有没合入的提交",
                (true, _) => "有没提交的改动",
            };
            report.kept.push(format!("留着 {what}:{why}"));
        }
    }
}

/// `flowerbox gc`'s worktree part: [`sweep`] of the repository containing `workspace`, as
/// lines of a [`GcReport`] (nothing outside a repository). Blocking (git). Removed: stale
/// registrations, merged clean worktrees of dead owners, merged branches; kept and listed: live
/// runs' worktrees, unmerged branches, worktrees with uncommitted changes. A failure to open the
/// repository is one `failed` line.
pub fn worktree_report(workspace: &Path) -> GcReport {
    match sweep(workspace) {
        Ok(r) => GcReport {
            removed: r.removed,
            kept: r.live.into_iter().chain(r.kept).collect(),
            failed: r.failed,
        },
        Err(e) => GcReport {
            failed: vec![format!("清理不了 {} 的 worktree:{e}", workspace.display())],
            ..Default::default()
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::isolate::repo::open_workspace_repo;
    use crate::isolate::repo::tests::{git, repo_with_commit};
    use crate::isolate::worktree::{add, NewWorktree};
    use crate::record::owner::Owner;

    /// An owner whose process has exited.
    pub(crate) fn dead_owner() -> Owner {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        Owner {
            pid,
            ..Owner::current().unwrap()
        }
    }

    #[test]
    fn sweep_keeps_live_and_unmerged_work_and_clears_the_rest() {
        let (dir, ws) = repo_with_commit();
        let root = dir.path().canonicalize().unwrap().join("wt");
        let r = open_workspace_repo(&ws).unwrap();
        let repo = r.open().unwrap();
        let dead = dead_owner();
        let live = add(&repo, &root, "live", "worker-1", &Owner::current().unwrap()).unwrap();
        let merged = add(&repo, &root, "dead", "worker-1", &dead).unwrap();
        let unmerged = add(&repo, &root, "dead", "worker-2", &dead).unwrap();
        std::fs::write(unmerged.path.join("u.txt"), "u").unwrap();
        git(&unmerged.path, &["add", "u.txt"]);
        git(&unmerged.path, &["commit", "-q", "-m", "u"]);
        let dirty = add(&repo, &root, "dead", "worker-3", &dead).unwrap();
        std::fs::write(dirty.path.join("wip.txt"), "wip").unwrap();
        let gone_unmerged = add(&repo, &root, "dead", "worker-4", &dead).unwrap();
        std::fs::write(gone_unmerged.path.join("g.txt"), "g").unwrap();
        git(&gone_unmerged.path, &["add", "g.txt"]);
        git(&gone_unmerged.path, &["commit", "-q", "-m", "g"]);
        std::fs::remove_dir_all(&gone_unmerged.path).unwrap();
        let foreign = add(&repo, &root, "dead", "worker-5", &dead).unwrap();
        let fw = repo.find_worktree(&foreign.name).unwrap();
        fw.unlock().unwrap();
        fw.lock(Some("on a usb stick")).unwrap();

        let rep = sweep(&ws).unwrap();
        assert!(rep.failed.is_empty(), "{rep:?}");
        let all = format!("{rep:?}");
        // Live run and foreign lock: untouched.
        assert!(live.path.is_dir() && foreign.path.is_dir(), "{all}");
        // Merged and clean: gone with its branch.
        assert!(!merged.path.exists(), "{all}");
        assert!(repo.find_branch(&merged.branch, BranchType::Local).is_err());
        // Unmerged and dirty: kept (and unlocked).
        assert!(unmerged.path.join("u.txt").is_file());
        assert!(dirty.path.join("wip.txt").is_file());
        // Directory deleted by hand: registration pruned, unmerged branch kept.
        assert!(repo.find_worktree(&gone_unmerged.name).is_err());
        assert!(repo
            .find_branch(&gone_unmerged.branch, BranchType::Local)
            .is_ok());
        // What the user reads, paths and branches verbatim.
        let what = |t: &NewWorktree| format!("worktree {}({})", t.path.display(), t.branch);
        let mut removed = rep.removed.clone();
        removed.sort();
        let mut expected = vec![
            format!("删掉了已合入的 {}", what(&merged)),
            format!("清掉了 {} 的失效登记(目录已经没了)", what(&gone_unmerged)),
        ];
        expected.sort();
        assert_eq!(removed, expected);
        let mut kept = rep.kept.clone();
        kept.sort();
        let mut expected = vec![
            format!("留着 {}:有没合入的提交", what(&unmerged)),
            format!("留着 {}:有没提交的改动", what(&dirty)),
            format!("留着分支 {}:有没合入的提交", gone_unmerged.branch),
            format!("留着 {}:被别人锁着(on a usb stick)", what(&foreign)),
        ];
        expected.sort();
        assert_eq!(kept, expected);
        assert_eq!(rep.live, [format!("留着 {}:运行 live 还在跑", what(&live))]);
        git(&ws, &["worktree", "list"]);
        git(&ws, &["fsck"]);
        // A second sweep changes nothing more.
        let again = sweep(&ws).unwrap();
        assert!(again.removed.is_empty(), "{again:?}");
    }

    /// A commit made as the worker's container makes it: objects in its own store, its copy
    /// of the branch moved; nothing in the repository.
    fn commit_in_store(ws: &Path, wt: &NewWorktree, file: &str) -> git2::Oid {
        let run = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=W", "-c", "user.email=w@example.invalid"])
                .args(args)
                .current_dir(&wt.path)
                .env("GIT_OBJECT_DIRECTORY", wt.state.objects())
                .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", ws.join(".git/objects"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        std::fs::write(wt.path.join(file), "w\n").unwrap();
        run(&["add", file]);
        let tree = run(&["write-tree"]);
        let id = run(&["commit-tree", &tree, "-p", "HEAD", "-m", file]);
        std::fs::write(
            wt.state.dir().join("refs").join("worker-1"),
            format!("{id}\n"),
        )
        .unwrap();
        git2::Oid::from_str(&id).unwrap()
    }

    #[test]
    fn a_crashed_workers_commits_come_back_from_its_store() {
        let (dir, ws) = repo_with_commit();
        let root = dir.path().canonicalize().unwrap().join("wt");
        let r = open_workspace_repo(&ws).unwrap();
        let repo = r.open().unwrap();
        let dead = dead_owner();
        let wt = add(&repo, &root, "dead", "worker-1", &dead).unwrap();
        let mine = commit_in_store(&ws, &wt, "w.txt");
        // A second worker's registration was pruned by hand; its state stayed.
        let gone = add(&repo, &root, "gone", "worker-1", &dead).unwrap();
        let theirs = commit_in_store(&ws, &gone, "g.txt");
        let gone_state = gone.state.dir();
        std::fs::remove_dir_all(&gone.path).unwrap();
        std::fs::remove_dir_all(ws.join(".git/worktrees").join(&gone.name)).unwrap();
        assert!(repo.find_worktree(&gone.name).is_err() && gone_state.is_dir());

        let rep = sweep(&ws).unwrap();
        assert!(rep.failed.is_empty(), "{rep:?}");
        let tip = |b: &str| repo.refname_to_id(&format!("refs/heads/{b}")).unwrap();
        assert_eq!(tip(&wt.branch), mine);
        assert_eq!(tip(&gone.branch), theirs);
        assert!(rep
            .removed
            .iter()
            .any(|l| l.starts_with(&format!("取回了 {}", wt.branch))));
        // Unmerged: worktree and branch kept, the state dropped (the branch holds it all).
        assert!(wt.path.join("w.txt").is_file());
        assert!(!wt.state.dir().exists() && !gone_state.exists(), "{rep:?}");
        assert!(
            rep.kept.iter().any(|l| l.contains("有没合入的提交")),
            "{rep:?}"
        );
        git(&ws, &["fsck", "--strict"]);
    }

    #[test]
    fn sweep_outside_a_repository_is_empty() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(sweep(d.path()).unwrap(), SweepReport::default());
    }

    #[test]
    fn worktree_sweep_lists_unmerged_work_and_ignores_plain_directories() {
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(worktree_report(plain.path()), GcReport::default());

        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("proj");
        std::fs::create_dir(&ws).unwrap();
        git(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("a"), "a").unwrap();
        git(&ws, &["add", "a"]);
        git(&ws, &["commit", "-q", "-m", "a"]);
        // A branch left by a finished run: one unmerged, one merged.
        git(&ws, &["branch", "flower/r0/worker-1"]);
        git(&ws, &["checkout", "-q", "-b", "flower/r0/worker-2"]);
        std::fs::write(ws.join("b"), "b").unwrap();
        git(&ws, &["add", "b"]);
        git(&ws, &["commit", "-q", "-m", "b"]);
        git(&ws, &["checkout", "-q", "main"]);
        let r = worktree_report(&ws);
        assert!(r.failed.is_empty(), "{r:?}");
        assert_eq!(r.removed, ["删掉了已合入的分支 flower/r0/worker-1"]);
        assert_eq!(r.kept, ["留着分支 flower/r0/worker-2:有没合入的提交"]);
    }
}
