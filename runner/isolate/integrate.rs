//! Committing what a worker left in its worktree, and integrating its branch into the
//! workspace's checked-out branch (DESIGN.md point 2, invariant 5).
//!
//! Integration is a three-way merge (fast-forward when the workspace's branch has not moved)
//! computed in memory; the workspace is touched only when the merge is clean AND no path the
//! branch touches or the merge would write holds uncommitted work of the user (staged,
//! modified, deleted, or an untracked/ignored file in the way). Then the files are checked out
//! safely (libgit2 refuses to overwrite anything that differs from HEAD) and the branch ref is
//! moved with a compare-and-swap. Nothing is ever stashed, reset or forced. Callers hold the
//! integration lock ([`super::WorkspaceRepo::lock`]).

use git2::{
    build::CheckoutBuilder, CheckoutNotificationType, Commit, IndexAddOption, MergeOptions, Oid,
    Repository, RepositoryState, Tree,
};
use std::collections::BTreeSet;
use std::path::Path;

use super::repo::{dirty_paths, signature, WorkspaceRepo};
use super::IsolateError;

/// What an integration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integration {
    /// The branch holds nothing the workspace's branch lacks.
    AlreadyMerged,
    /// Integrated: the workspace's branch now points at `commit`.
    Merged {
        /// True for a fast-forward, false for a merge commit.
        fast_forward: bool,
        /// The new tip of the workspace's branch.
        commit: Oid,
        /// Paths (relative to the working tree) the integration changed, sorted.
        files: Vec<String>,
        /// The branch integrated into (`main`, or `HEAD` when detached).
        into: String,
    },
    /// The three-way merge conflicts on these paths; nothing was touched.
    Conflict {
        /// Conflicting paths, sorted.
        paths: Vec<String>,
        /// The workspace's branch.
        into: String,
    },
    /// The user has uncommitted work in these paths, which the branch touches; nothing was
    /// touched.
    UserChanges {
        /// The paths, sorted.
        paths: Vec<String>,
        /// The workspace's branch.
        into: String,
    },
    /// The branch adds symlinks that leave the repository or lead into a guarded place
    /// ([`super::links`]); nothing was touched.
    Refused {
        /// `path -> target(why)` per link.
        links: Vec<String>,
        /// The workspace's branch.
        into: String,
    },
}

/// Commits everything uncommitted in the worktree at `worktree` (tracked changes, deletions,
/// untracked-not-ignored files; a merge the worker left uncommitted becomes a merge commit) on
/// its checked-out branch, which must be `branch`. Returns the new commit, or `None` when
/// there was nothing to commit.
///
/// # Errors
/// The worktree's HEAD is not `branch` (the worker switched branches); unresolved conflicts
/// in its index; git failures.
pub fn commit_worktree(
    worktree: &Path,
    branch: &str,
    agent: &str,
    message: &str,
) -> Result<Option<Oid>, IsolateError> {
    let mut repo = Repository::open(worktree).map_err(IsolateError::git(format!(
        "打不开 worktree {}",
        worktree.display()
    )))?;
    let mut merge_heads = Vec::new();
    if repo.state() == RepositoryState::Merge {
        repo.mergehead_foreach(|id| {
            merge_heads.push(*id);
            true
        })
        .map_err(IsolateError::git("读不出 MERGE_HEAD"))?;
    }
    let head = repo
        .head()
        .map_err(IsolateError::git("读不出 worktree 的 HEAD"))?;
    if head.name_bytes() != format!("refs/heads/{branch}").as_bytes() {
        return Err(IsolateError::Git {
            what: format!(
                "worktree {} 的 HEAD 不在分支 {branch} 上(执行者切了分支?),没有提交",
                worktree.display()
            ),
            source: git2::Error::from_str(&String::from_utf8_lossy(head.name_bytes())),
        });
    }
    let parent = head
        .peel_to_commit()
        .map_err(IsolateError::git("读不出 worktree 的提交"))?;
    let mut index = repo
        .index()
        .map_err(IsolateError::git("读不出 worktree 的索引"))?;
    if index.has_conflicts() {
        return Err(IsolateError::Git {
            what: format!("worktree {} 里有没解决的冲突,没有提交", worktree.display()),
            source: git2::Error::from_str("unmerged index entries"),
        });
    }
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .and_then(|_| index.update_all(["*"], None))
        .and_then(|_| index.write())
        .map_err(IsolateError::git("暂存 worktree 的改动失败"))?;
    let tree_id = index.write_tree().map_err(IsolateError::git("写不出树"))?;
    if tree_id == parent.tree_id() && merge_heads.is_empty() {
        return Ok(None);
    }
    let tree = repo
        .find_tree(tree_id)
        .map_err(IsolateError::git("读不出树"))?;
    let mut parents = vec![parent];
    for id in merge_heads {
        parents.push(
            repo.find_commit(id)
                .map_err(IsolateError::git("读不出 MERGE_HEAD 的提交"))?,
        );
    }
    let parent_refs: Vec<&Commit> = parents.iter().collect();
    let sig = signature(&repo, agent)?;
    let id = repo
        .commit(Some("HEAD"), &sig, &sig, message, &tree, &parent_refs)
        .map_err(IsolateError::git("提交 worktree 的改动失败"))?;
    repo.cleanup_state()
        .map_err(IsolateError::git("清不掉合并状态"))?;
    Ok(Some(id))
}

/// Paths that differ between two trees (both sides of renames), sorted.
fn changed_paths(repo: &Repository, a: &Tree, b: &Tree) -> Result<BTreeSet<String>, IsolateError> {
    let diff = repo
        .diff_tree_to_tree(Some(a), Some(b), None)
        .map_err(IsolateError::git("比较树失败"))?;
    let mut out = BTreeSet::new();
    for d in diff.deltas() {
        for f in [d.old_file(), d.new_file()] {
            if let Some(p) = f.path() {
                out.insert(p.to_string_lossy().into_owned());
            }
        }
    }
    Ok(out)
}

/// The user's uncommitted work among `paths`: a status other than unmodified (staged,
/// modified, deleted, typechange, untracked), or a file in the way where HEAD has none
/// (an ignored file the checkout would overwrite).
fn user_work_in(
    repo: &Repository,
    workdir: &Path,
    head_tree: &Tree,
    paths: &BTreeSet<String>,
) -> Result<Vec<String>, IsolateError> {
    let mut hit: BTreeSet<String> = dirty_paths(repo)?
        .into_iter()
        .filter(|p| paths.contains(p))
        .collect();
    for p in paths {
        if head_tree.get_path(Path::new(p)).is_err()
            && std::fs::symlink_metadata(workdir.join(p)).is_ok()
        {
            hit.insert(p.clone());
        }
    }
    Ok(hit.into_iter().collect())
}

/// Checks `tree` out over HEAD's tree safely; with `dry_run` nothing is written. Returns the
/// paths libgit2 reports as conflicting with the working tree.
fn checkout(repo: &Repository, tree: &Tree, dry_run: bool) -> Result<Vec<String>, IsolateError> {
    let conflicts = std::cell::RefCell::new(Vec::new());
    let result = {
        let mut cb = CheckoutBuilder::new();
        cb.safe();
        if dry_run {
            cb.dry_run();
        }
        cb.notify_on(CheckoutNotificationType::CONFLICT);
        cb.notify(|_, path, _, _, _| {
            if let Some(p) = path {
                conflicts
                    .borrow_mut()
                    .push(p.to_string_lossy().into_owned());
            }
            true
        });
        repo.checkout_tree(tree.as_object(), Some(&mut cb))
    };
    let conflicts = conflicts.into_inner();
    match result {
        Ok(()) => Ok(conflicts),
        Err(_) if !conflicts.is_empty() => Ok(conflicts),
        Err(e) => Err(IsolateError::git("检出合入结果失败")(e)),
    }
}

/// Integrates local branch `branch` into the workspace's checked-out branch (see the module
/// docs). `agent` names the committer when the repository has no identity.
///
/// # Errors
/// Git failures (the workspace is then unchanged, except in the one case the message says:
/// someone moved the branch between the checkout and the ref update).
pub fn integrate(
    ws: &WorkspaceRepo,
    branch: &str,
    agent: &str,
) -> Result<Integration, IsolateError> {
    integrate_guarded(ws, branch, agent, &[])
}

/// [`integrate`], refusing a branch that adds a symlink leading out of the repository, into
/// its `.git` or into one of `guards` (absolute: the workbench, the run directory).
///
/// # Errors
/// As [`integrate`].
pub fn integrate_guarded(
    ws: &WorkspaceRepo,
    branch: &str,
    agent: &str,
    guards: &[std::path::PathBuf],
) -> Result<Integration, IsolateError> {
    let repo = ws.open()?;
    let head = repo
        .head()
        .map_err(IsolateError::git("读不出工作区的 HEAD"))?;
    let (target_ref, into) = if head.is_branch() {
        let name = head.name().unwrap_or("HEAD").to_string();
        let short = String::from_utf8_lossy(head.shorthand_bytes()).into_owned();
        (name, short)
    } else {
        ("HEAD".to_string(), "HEAD".to_string())
    };
    let ours = head
        .peel_to_commit()
        .map_err(IsolateError::git("读不出工作区的提交"))?;
    let theirs = repo
        .find_branch(branch, git2::BranchType::Local)
        .and_then(|b| b.get().peel_to_commit())
        .map_err(IsolateError::git(format!("找不到分支 {branch}")))?;
    if ours.id() == theirs.id()
        || repo
            .graph_descendant_of(ours.id(), theirs.id())
            .map_err(IsolateError::git("比较提交失败"))?
    {
        return Ok(Integration::AlreadyMerged);
    }
    let base_id = repo
        .merge_base(ours.id(), theirs.id())
        .map_err(IsolateError::git("找不到共同祖先"))?;
    let base_tree = repo
        .find_commit(base_id)
        .and_then(|c| c.tree())
        .map_err(IsolateError::git("读不出共同祖先的树"))?;
    let ours_tree = ours.tree().map_err(IsolateError::git("读不出树"))?;
    let theirs_tree = theirs.tree().map_err(IsolateError::git("读不出树"))?;
    let fast_forward = base_id == ours.id();
    let result_tree = if fast_forward {
        theirs_tree.clone()
    } else {
        match three_way(&repo, &ours, &theirs)? {
            Ok(tree) => tree,
            Err(paths) => return Ok(Integration::Conflict { paths, into }),
        }
    };

    let links = super::links::check(
        &repo,
        &base_tree,
        &theirs_tree,
        &result_tree,
        &ws.workdir,
        guards,
    )?;
    if !links.is_empty() {
        return Ok(Integration::Refused { links, into });
    }
    let written = changed_paths(&repo, &ours_tree, &result_tree)?;
    let mut touched = changed_paths(&repo, &base_tree, &theirs_tree)?;
    touched.extend(written.iter().cloned());
    let mut blocked = user_work_in(&repo, &ws.workdir, &ours_tree, &touched)?;
    if blocked.is_empty() {
        blocked = checkout(&repo, &result_tree, true)?;
    }
    if !blocked.is_empty() {
        blocked.sort();
        blocked.dedup();
        return Ok(Integration::UserChanges {
            paths: blocked,
            into,
        });
    }

    let new_tip = if fast_forward {
        theirs.id()
    } else {
        let sig = signature(&repo, agent)?;
        repo.commit(
            None,
            &sig,
            &sig,
            &format!("flowerbox: 合入 {branch}"),
            &result_tree,
            &[&ours, &theirs],
        )
        .map_err(IsolateError::git("写不出合并提交"))?
    };
    let late = checkout(&repo, &result_tree, false)?;
    if !late.is_empty() {
        // The user changed a file between the dry run and now; nothing was written.
        return Ok(Integration::UserChanges { paths: late, into });
    }
    repo.reference_matching(
        &target_ref,
        new_tip,
        true,
        ours.id(),
        &format!("flowerbox: 合入 {branch}"),
    )
    .map_err(IsolateError::git(format!(
        "文件已按合入结果更新,但 {into} 在合入途中被别人移动了,没有指向合入提交 {new_tip};\
         用 `git status` 看一眼,分支 {branch} 还在"
    )))?;
    Ok(Integration::Merged {
        fast_forward,
        commit: new_tip,
        files: written.into_iter().collect(),
        into,
    })
}

/// The three-way merge of `theirs` into `ours`: the merged tree, or the conflicting paths.
fn three_way<'r>(
    repo: &'r git2::Repository,
    ours: &git2::Commit<'_>,
    theirs: &git2::Commit<'_>,
) -> Result<Result<git2::Tree<'r>, Vec<String>>, IsolateError> {
    let mut opts = MergeOptions::new();
    opts.find_renames(true);
    let mut index = repo
        .merge_commits(ours, theirs, Some(&opts))
        .map_err(IsolateError::git("三方合并失败"))?;
    if index.has_conflicts() {
        let mut paths = BTreeSet::new();
        for c in index
            .conflicts()
            .map_err(IsolateError::git("读不出冲突"))?
            .flatten()
        {
            for e in [c.ancestor, c.our, c.their].into_iter().flatten() {
                paths.insert(String::from_utf8_lossy(&e.path).into_owned());
            }
        }
        return Ok(Err(paths.into_iter().collect()));
    }
    let id = index
        .write_tree_to(repo)
        .map_err(IsolateError::git("写不出合并的树"))?;
    repo.find_tree(id)
        .map(Ok)
        .map_err(IsolateError::git("读不出合并的树"))
}

#[cfg(test)]
#[path = "integrate_tests.rs"]
mod tests;
