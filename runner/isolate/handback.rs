//! Interrupted work is handed back (issue 20): a run killed while a worker was busy (`kill -9`,
//! a crash) never ran that worker's `finish`, so what it wrote sits uncommitted in its
//! worktree. The next `--isolate` run, before anything else of the repository is swept:
//!
//! 1. finds every flowerbox worktree still locked by a dead owner whose directory and worker
//!    state exist ([`find_interrupted`]);
//! 2. commits what it left **inside a container** with that worker's own mounts (its worktree,
//!    the repository's `.git` read-only but for its own parts), exactly as a finishing worker's
//!    work is committed ([`super::seal`]): the host never walks a worktree a process of the
//!    dead run may still be changing;
//! 3. brings the commits back with [`adopt`] (forward only), then lets the sweep unlock and
//!    keep the worktree (its branch is not merged: nothing is deleted);
//! 4. tells the coordinator which worker, which branch, which worktree and which files, so it
//!    can integrate the branch or redo the work.
//!
//! With `--sandbox host` (no containment, by choice) the commit is made on the host, as a
//! finishing worker's is.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{BranchType, Repository};

use super::adopt::{adopt, Adopted, Policy};
use super::fsafe::remove_tree;
use super::repo::WorkspaceRepo;
use super::seal::{seal, SealError, Sealed};
use super::state::WorkerState;
use super::sweep::{sweep_one, SweepReport};
use super::worktree::{checked_out_branch, is_merged, owner_lock, NAME_PREFIX};
use crate::record::owner::Liveness;
use crate::role::Role;
use crate::sandbox::{AgentBox, Mount, SandboxError, SandboxFactory};

/// Most changed paths named per worker.
const PATHS_SHOWN: usize = 20;

/// A worktree a dead run left behind while its worker was at work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The worker (`worker-2`).
    pub agent: String,
    /// The dead run's id.
    pub run: String,
    /// The worktree's admin name.
    pub name: String,
    /// Its branch (`flower/<run>/<agent>`).
    pub branch: String,
    /// Its directory.
    pub path: PathBuf,
    /// The worker's own git state.
    pub git: WorkerState,
}

/// Why what an interrupted worker left was not committed.
#[derive(Debug, thiserror::Error)]
enum NotSealed {
    /// Committing on the host (`--sandbox host`) failed.
    #[error(transparent)]
    Host(super::IsolateError),
    /// The host commit's task did not finish.
    #[error(transparent)]
    Task(tokio::task::JoinError),
    /// No container could be started for it.
    #[error("没能给它起容器:{0}")]
    NoContainer(#[source] SandboxError),
    /// Committing in the container failed.
    #[error(transparent)]
    Seal(SealError),
}

/// What handing back told whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandedBack {
    /// For the terminal: one line per worker handed back or not.
    pub screen: Vec<String>,
    /// For the coordinator: one paragraph per worker whose work waits on its branch.
    pub coordinator: Vec<String>,
}

/// The worktrees of `repo` locked by a dead flowerbox owner, with their directory and worker
/// state (blocking, reads only; a worktree whose liveness cannot be decided is not one).
pub fn find_interrupted(repo: &WorkspaceRepo) -> Vec<Interrupted> {
    let Ok(r) = repo.open() else {
        return Vec::new();
    };
    let Ok(names) = r.worktrees() else {
        return Vec::new();
    };
    names
        .iter()
        .flatten()
        .flatten()
        .filter(|n| n.starts_with(NAME_PREFIX))
        .filter_map(|name| {
            // One its maker never finished had no worker: the sweep removes it.
            if super::creating::read(&repo.commondir, name).is_some() {
                return None;
            }
            let lock = owner_lock(&r, name)?;
            if !matches!(lock.owner.liveness(), Liveness::Dead(_)) {
                return None;
            }
            let wt = r.find_worktree(name).ok()?;
            wt.validate().ok()?;
            let git = WorkerState::open(&repo.commondir, name)?;
            let branch = checked_out_branch(&repo.commondir, name)?;
            Some(Interrupted {
                agent: lock.agent,
                run: lock.run,
                name: name.to_string(),
                branch,
                path: wt.path().to_path_buf(),
                git,
            })
        })
        .collect()
}

/// Names of `list`, for the sweep to leave alone until they are handed back.
pub fn names(list: &[Interrupted]) -> HashSet<String> {
    list.iter().map(|i| i.name.clone()).collect()
}

/// Hands back every interrupted worker of `list` (see the [module docs](self)). `mounts` gives
/// a worker's mounts for its worktree and state; `masked` is what every container hides (the
/// run directory).
pub async fn hand_back(
    repo: &WorkspaceRepo,
    list: Vec<Interrupted>,
    mounts: impl Fn(&Path, &WorkerState) -> Vec<Mount>,
    factory: &dyn SandboxFactory,
    masked: &[PathBuf],
) -> HandedBack {
    let mut out = HandedBack::default();
    for i in list {
        let message = format!("flowerbox {}: 运行 {} 被打断时留下的改动", i.agent, i.run);
        let cleared = clear_stale_locks(&i);
        if !cleared.is_empty() {
            out.screen.push(format!(
                "上次被打断的 {}:去掉了它的 git 死后留下的锁 {}",
                i.agent,
                cleared.join("、")
            ));
        }
        let sealed = if factory.commands_run() != crate::sandbox::CommandsRun::InContainer {
            host_seal(&i, message).await
        } else {
            let abox = AgentBox {
                agent: format!("{}-handback", i.agent),
                role: Role::Worker,
                mounts: mounts(&i.path, &i.git),
                masked: masked.to_vec(),
                workdir: i.path.clone(),
                policy: crate::sandbox::SandboxPolicy::writer(),
            };
            let result = match factory.sandbox(&abox).await {
                Ok(sb) => seal(sb.as_ref(), &i.path, &i.branch, &i.agent, &message)
                    .await
                    .map_err(NotSealed::Seal),
                Err(e) => Err(NotSealed::NoContainer(e)),
            };
            let released = factory.release(&abox.agent).await;
            if let Err(e) = &released {
                tracing::warn!(agent = %abox.agent, error = %e, "hand-back container not removed");
            }
            match result {
                // The container's git cannot open the repository (`extensions.relativeWorktrees`
                // and a git older than 2.48): with the hand-back container gone (the killed
                // run's went at this start's sweep), libgit2 commits on the host.
                Err(NotSealed::Seal(SealError::Unreadable(_))) if released.is_ok() => {
                    host_seal(&i, message).await
                }
                other => other,
            }
        };
        let (r, item) = (repo.clone(), i.clone());
        let settled = tokio::task::spawn_blocking(move || settle(&r, &item))
            .await
            .unwrap_or_else(|e| Settled::failed(e.to_string()));
        tracing::info!(agent = %i.agent, branch = %i.branch, ?sealed, ?settled, "interrupted worker handed back");
        describe(&i, sealed, settled, &mut out);
    }
    out
}

/// Commits what interrupted worker `i` left with libgit2 on the host: only where no process
/// of it can be left (no containers, or its containers removed).
async fn host_seal(i: &Interrupted, message: String) -> Result<Sealed, NotSealed> {
    let (path, branch, agent) = (i.path.clone(), i.branch.clone(), i.agent.clone());
    tokio::task::spawn_blocking(move || {
        super::integrate::commit_worktree(&path, &branch, &agent, &message)
            .map(|c| Sealed {
                committed: c.is_some(),
                ..Sealed::default()
            })
            .map_err(NotSealed::Host)
    })
    .await
    .unwrap_or_else(|e| Err(NotSealed::Task(e)))
}

/// The lock files a git of the worker leaves when it dies mid-`add`, mid-`commit` or mid-ref
/// update: its worktree's `index.lock`, `HEAD.lock`, `ORIG_HEAD.lock`, and its branch's lock in
/// its own ref directory.
const GIT_LOCKS: [&str; 3] = ["index.lock", "HEAD.lock", "ORIG_HEAD.lock"];

/// Removes the git locks of interrupted worker `i` (see [`GIT_LOCKS`]) and returns their names.
/// Stale by construction, not by age: the worktree's owner lock names a process that is
/// provably dead ([`find_interrupted`]), and that run's containers — the only other place its
/// git ran — were removed by this start's orphan sweep (they carry the same dead owner) before
/// any hand-back. Nothing is followed: a link is unlinked itself.
fn clear_stale_locks(i: &Interrupted) -> Vec<String> {
    let admin = i.git.commondir.join("worktrees").join(&i.name);
    let leaf = i.branch.rsplit('/').next().unwrap_or(&i.branch);
    let refs = i.git.dir().join("refs");
    let branch_lock = format!("{leaf}.lock");
    let mut cleared = Vec::new();
    let candidates = GIT_LOCKS
        .iter()
        .map(|n| (admin.as_path(), n.to_string()))
        .chain(std::iter::once((refs.as_path(), branch_lock)));
    for (dir, name) in candidates {
        if std::fs::symlink_metadata(dir.join(&name)).is_err() {
            continue;
        }
        match remove_tree(dir, std::ffi::OsStr::new(&name)) {
            Ok(()) => cleared.push(name),
            Err(e) => {
                tracing::warn!(lock = %dir.join(&name).display(), error = %e, "stale git lock not removed")
            }
        }
    }
    if !cleared.is_empty() {
        tracing::info!(agent = %i.agent, ?cleared, "stale git locks of a dead run removed");
    }
    cleared
}

/// Where an interrupted worker's branch stands after its commits came back.
#[derive(Debug)]
struct Settled {
    /// The branch has commits no other branch holds: the changed paths (vs. HEAD's base).
    unmerged: Option<Vec<String>>,
    /// Lines of the sweep (kept, failed).
    lines: Vec<String>,
    /// Bringing the commits back failed.
    error: Option<String>,
}

impl Settled {
    fn failed(e: String) -> Self {
        Settled {
            unmerged: None,
            lines: Vec::new(),
            error: Some(e),
        }
    }
}

/// Brings the worker's commits back (forward only), lets the sweep settle its worktree (kept
/// and unlocked when unmerged, removed when merged and clean), and reads what the branch
/// holds. Blocking; under the integration lock.
fn settle(ws: &WorkspaceRepo, i: &Interrupted) -> Settled {
    let run = || -> Result<Settled, super::IsolateError> {
        let _lock = ws.lock()?;
        let repo = ws.open()?;
        let error = match adopt(ws, &i.git, Policy::FastForward) {
            Ok(Adopted::Diverged { tip }) => Some(format!(
                "它在容器里的分支走到了 {},和宿主机上的分支分叉了",
                &tip.to_string()[..10]
            )),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        let mut report = SweepReport::default();
        sweep_one(ws, &repo, &i.name, Some(&i.branch), &mut report);
        let unmerged = changed_paths(&repo, &i.branch);
        Ok(Settled {
            unmerged,
            // What is kept is said once, as the hand-back; failures are said as they are.
            lines: report.failed,
            error,
        })
    };
    run().unwrap_or_else(|e| Settled::failed(e.to_string()))
}

/// The paths branch `branch` changed since it left the checked-out branch, when it holds
/// commits no other branch does; `None` when it is merged (or gone).
fn changed_paths(repo: &Repository, branch: &str) -> Option<Vec<String>> {
    let tip = repo
        .find_branch(branch, BranchType::Local)
        .ok()?
        .get()
        .target()?;
    if is_merged(repo, tip).unwrap_or(false) {
        return None;
    }
    let head = repo.head().ok()?.target()?;
    let base = repo.merge_base(head, tip).ok()?;
    let old = repo.find_commit(base).ok()?.tree().ok()?;
    let new = repo.find_commit(tip).ok()?.tree().ok()?;
    let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), None).ok()?;
    Some(
        diff.deltas()
            .filter_map(|d| d.new_file().path().or(d.old_file().path()))
            .map(|p| p.display().to_string())
            .collect(),
    )
}

/// `paths` as a capped list for a report.
fn listed(paths: &[String]) -> String {
    let mut shown: Vec<String> = paths
        .iter()
        .take(PATHS_SHOWN)
        .map(|p| format!("- {p}"))
        .collect();
    if paths.len() > PATHS_SHOWN {
        shown.push(format!("- …… 另有 {} 个", paths.len() - PATHS_SHOWN));
    }
    shown.join("\n")
}

fn describe(i: &Interrupted, sealed: Result<Sealed, NotSealed>, s: Settled, out: &mut HandedBack) {
    if let Some(e) = &s.error {
        out.screen.push(format!(
            "上次被打断的 {}:提交没取回({e});它们还在 {}",
            i.agent,
            i.git.dir().display()
        ));
    }
    out.screen
        .extend(s.lines.iter().map(|l| format!("上次运行的残留:{l}")));
    // What could not be committed is said, with its files, whether or not the branch holds
    // anything: "nothing staged" is never read as clean.
    let uncommitted = match &sealed {
        Ok(x) if x.left => Some(format!(
            "有 {} 个文件没能提交(git 加不进去),还在 worktree {} 里:\n{}",
            x.left_files.len(),
            i.path.display(),
            listed(&x.left_files)
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "它留下的改动没能提交({e}),原样留在 worktree {} 里",
            i.path.display()
        )),
    };
    if let Some(u) = &uncommitted {
        out.screen.push(format!("上次被打断的 {}:{u}", i.agent));
    }
    let committed = match &sealed {
        Ok(x) if x.committed => format!("它留下的改动已提交在分支 {} 上", i.branch),
        _ => format!("它自己提交过的改动在分支 {} 上", i.branch),
    };
    let branch_part = match &s.unmerged {
        Some(paths) => {
            out.screen.push(format!(
                "上次被打断的 {} 的活交还了:分支 {}(worktree {}),{} 个文件,没合入",
                i.agent,
                i.branch,
                i.path.display(),
                paths.len()
            ));
            Some(format!(
                "{committed}(worktree {} 留着),还没合入工作区。它动过的文件:\n{}\n\
                 要用这些改动:派一个执行者,让它在自己的 worktree 里 `git merge {}`、看过再提交,它合入时会一起带进来;用不上就重做。",
                i.path.display(),
                listed(paths),
                i.branch
            ))
        }
        None => None,
    };
    if branch_part.is_none() && uncommitted.is_none() {
        return;
    }
    let mut para = format!(
        "[上次被打断] 执行者 {}(运行 {})没做完就被打断了。",
        i.agent, i.run
    );
    if let Some(b) = branch_part {
        para.push_str(&b);
    }
    if let Some(u) = uncommitted {
        if !para.ends_with('。') {
            para.push('\n');
        }
        para.push_str(&format!("没提交的:{u}"));
    }
    out.coordinator.push(para);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interrupted() -> Interrupted {
        Interrupted {
            agent: "worker-1".into(),
            run: "r1".into(),
            name: "flower-r1-worker-1".into(),
            branch: "flower/r1/worker-1".into(),
            path: PathBuf::from("/w/.flower-proj-worktrees/r1/worker-1"),
            git: WorkerState {
                commondir: PathBuf::from("/w/proj/.git"),
                name: "flower-r1-worker-1".into(),
                branch: "flower/r1/worker-1".into(),
            },
        }
    }

    fn settled(unmerged: Option<Vec<String>>) -> Settled {
        Settled {
            unmerged,
            lines: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn files_a_seal_could_not_commit_are_named_even_when_the_branch_holds_nothing() {
        // "Nothing staged" (a lock git could not take) is never read as clean.
        let mut out = HandedBack::default();
        let sealed = Sealed {
            committed: false,
            left: true,
            left_files: vec!["doc/wip.md".into(), "notes.txt".into()],
        };
        describe(&interrupted(), Ok(sealed), settled(None), &mut out);
        assert_eq!(out.coordinator.len(), 1, "{out:?}");
        let para = &out.coordinator[0];
        assert!(para.starts_with("[上次被打断] 执行者 worker-1"), "{para}");
        assert!(
            para.contains("2 个文件没能提交") && para.contains("- doc/wip.md"),
            "{para}"
        );
        assert!(
            out.screen
                .iter()
                .any(|l| l.contains("worker-1") && l.contains("- notes.txt")),
            "{out:?}"
        );
        // Clean and merged: nothing to say.
        let mut quiet = HandedBack::default();
        describe(
            &interrupted(),
            Ok(Sealed::default()),
            settled(None),
            &mut quiet,
        );
        assert_eq!(quiet, HandedBack::default());
        // Committed and unmerged: the branch and its files.
        let mut back = HandedBack::default();
        let done = Sealed {
            committed: true,
            ..Sealed::default()
        };
        describe(
            &interrupted(),
            Ok(done),
            settled(Some(vec!["hello.sh".into()])),
            &mut back,
        );
        assert!(back.coordinator[0].contains("它留下的改动已提交在分支 flower/r1/worker-1"));
        assert!(back.coordinator[0].contains("- hello.sh"));
        assert!(!back.coordinator[0].contains("没提交的"), "{back:?}");
    }
}
