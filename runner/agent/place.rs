//! Where agents work: each role's mounts (DESIGN.md role table), and the [`Placement`] seam that
//! gives each worker its place — the shared workspace, or its own git worktree with `--isolate`
//! (the isolation layer implements it).

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

use crate::role::Role;
use crate::sandbox::{AgentBox, Mount, Sandbox, SandboxError, SandboxFactory, SandboxPolicy, Seat};

/// A worker's place: its working directory and mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPlace {
    /// Working directory (the workspace, or the worker's worktree).
    pub workdir: PathBuf,
    /// Mounts, workspace/worktree first.
    pub mounts: Vec<Mount>,
    /// The git branch of the worker's own worktree (`--isolate`), `None` in the shared
    /// workspace. Its first message names it.
    pub branch: Option<String>,
    /// What the worker is told about git in its place (in its first message).
    pub note: Option<String>,
}

/// The sandbox of a worker that has ended, for [`Placement::finish`]: its container (created
/// on demand when the worker never ran a command).
#[derive(Clone, Copy)]
pub struct WorkerSandbox<'a> {
    /// The run's sandboxes.
    pub factory: &'a dyn SandboxFactory,
    /// The worker's box.
    pub spec: &'a AgentBox,
}

impl WorkerSandbox<'_> {
    /// The worker's sandbox (the same container its commands ran in).
    pub async fn get(&self) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.factory.sandbox(self.spec).await
    }
}

/// Why a worker got no place: the placement's own error, whose text the coordinator reads as
/// the `Agent` call's result.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PlaceError(pub Box<dyn std::error::Error + Send + Sync>);

/// Gives workers their place and integrates their work when they end.
#[async_trait]
pub trait Placement: Send + Sync {
    /// Prepares the place of a new worker named `agent`.
    ///
    /// # Errors
    /// The place could not be made (the coordinator is told why).
    async fn prepare(&self, agent: &str) -> Result<WorkerPlace, PlaceError>;

    /// Called after the worker ended (`ok` = it finished its turn), with its sandbox when it
    /// has one. Returns a report for the coordinator (merge result, conflicts), appended to
    /// the `Agent` tool result.
    async fn finish(
        &self,
        agent: &str,
        place: &WorkerPlace,
        ok: bool,
        sandbox: Option<WorkerSandbox<'_>>,
    ) -> Option<String>;

    /// Gives back the place of worker `agent` that never ran (prepared before its dispatch,
    /// which never came: `agent::speculate`), its sandbox already released: nothing of it is
    /// kept (its worktree and branch, if any). The default has nothing to give back.
    async fn abandon(&self, agent: &str, place: &WorkerPlace) {
        let _ = (agent, place);
    }

    /// True when workers write the shared workspace itself (false: each has a place of its
    /// own, such as a worktree); the workspace is then swept for planted repositories.
    fn shares_workspace(&self) -> bool {
        true
    }

    /// Lines for the user that the last [`Placement::finish`] calls left (a refused
    /// integration), taken once.
    fn take_notices(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What a worker in the shared workspace is told: the repository is read-only.
pub const SHARED_GIT_NOTE: &str = "git:工作区的 .git 是只读的,git status/diff/log 照常能用,\
提交、建分支、改 git 配置都会失败。提交不归你管,改动留在工作区就行。";

/// The default placement: every worker writes in the shared workspace.
pub struct SharedPlacement {
    workspace: PathBuf,
    /// The repository's `.git` as [`workspace_git`] found it when the run started.
    git: Option<PathBuf>,
    workbench: Option<PathBuf>,
}

impl SharedPlacement {
    /// Workers get `workspace` and `workbench` read-write, and `git` (see [`workspace_git`])
    /// read-only on top.
    pub fn new(workspace: PathBuf, git: Option<PathBuf>, workbench: Option<PathBuf>) -> Self {
        SharedPlacement {
            workspace,
            git,
            workbench,
        }
    }
}

#[async_trait]
impl Placement for SharedPlacement {
    async fn prepare(&self, _agent: &str) -> Result<WorkerPlace, PlaceError> {
        let mounts = role_mounts(
            Role::Worker,
            &self.workspace,
            self.git.as_deref(),
            self.workbench.as_deref(),
        );
        // Only a repository whose `.git` lies in the workspace has one to protect and show.
        let note = self.git.is_some().then(|| SHARED_GIT_NOTE.to_string());
        Ok(WorkerPlace {
            workdir: self.workspace.clone(),
            mounts,
            note,
            branch: None,
        })
    }

    async fn finish(
        &self,
        _agent: &str,
        _place: &WorkerPlace,
        _ok: bool,
        _sandbox: Option<WorkerSandbox<'_>>,
    ) -> Option<String> {
        None
    }
}

/// The workspace's own `.git` to protect, decided once, when the run starts (before any of its
/// containers exists): a directory or a file (a worktree's `gitdir:` pointer) at `.git`; for a
/// symbolic link, its target, and only when that lies inside the workspace (a container sees it
/// there). Never decided again while the run goes on: an agent that turns `.git` into a link
/// to a host directory (`~/.config/flower`, `~/.ssh`) would otherwise have the engine follow it
/// and mount that directory into the next writing container.
pub fn workspace_git(workspace: &std::path::Path) -> Option<PathBuf> {
    let git = workspace.join(".git");
    let meta = std::fs::symlink_metadata(&git).ok()?;
    if meta.file_type().is_symlink() {
        let root = std::fs::canonicalize(workspace).ok()?;
        let target = std::fs::canonicalize(&git).ok()?;
        return (target.starts_with(&root) && target != root).then_some(target);
    }
    (meta.is_dir() || meta.is_file()).then_some(git)
}

/// The sandbox policy of a role, decided here once for every backend (issue 30 §1): workers
/// and `once` write as the run's user; every other role is read-only, under a uid of its own
/// (judges and gate checks in the judge's seat, the rest in the coordinator's).
pub fn role_policy(role: Role) -> SandboxPolicy {
    match role {
        Role::Worker | Role::Once => SandboxPolicy::writer(),
        Role::Judge => SandboxPolicy::read_only(Seat::Judge),
        Role::Coordinator | Role::Clarifier | Role::Oracle => {
            SandboxPolicy::read_only(Seat::Coordinator)
        }
    }
}

/// The mounts of a role over the shared workspace: workers and `once` write; everyone else
/// reads. A writing role gets the repository's `git` ([`workspace_git`], when it has one)
/// read-only on top (DESIGN.md threat model 2: no agent plants a hook, `core.fsmonitor` or a
/// ref that the user's next `git` on the host would run or follow). The workbench is listed
/// only when it is not inside the workspace already.
pub fn role_mounts(
    role: Role,
    workspace: &std::path::Path,
    git: Option<&std::path::Path>,
    workbench: Option<&std::path::Path>,
) -> Vec<Mount> {
    let read_only = role_policy(role).is_read_only();
    let mut v = vec![Mount::same(workspace.to_path_buf(), read_only)];
    if let (false, Some(git)) = (read_only, git) {
        v.push(Mount::same(git.to_path_buf(), true));
    }
    if let Some(wb) = workbench {
        if !wb.starts_with(workspace) {
            v.push(Mount::same(wb.to_path_buf(), read_only));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn rights_by_role() {
        let ws = Path::new("/w/p");
        let wb = Path::new("/w/.flower-p");
        for role in [
            Role::Coordinator,
            Role::Judge,
            Role::Clarifier,
            Role::Oracle,
        ] {
            assert!(
                role_mounts(role, ws, None, Some(wb))
                    .iter()
                    .all(|m| m.read_only),
                "{role}"
            );
        }
        let w = role_mounts(Role::Worker, ws, None, Some(wb));
        assert_eq!(w.len(), 2);
        assert!(w.iter().all(|m| !m.read_only));
        // A workbench inside the workspace is covered by the workspace mount.
        assert_eq!(
            role_mounts(Role::Worker, ws, None, Some(Path::new("/w/p/.flower"))).len(),
            1
        );
    }

    #[tokio::test]
    async fn a_writing_role_gets_the_repositorys_git_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        assert_eq!(workspace_git(&ws), None);
        let plain = SharedPlacement::new(ws.clone(), workspace_git(&ws), None);
        let place = plain.prepare("worker-1").await.unwrap();
        assert_eq!(place.mounts.len(), 1);
        assert_eq!(place.note, None);
        std::fs::create_dir(ws.join(".git")).unwrap();
        // Decided when the run started: a `.git` made during the run changes nothing.
        assert_eq!(plain.prepare("worker-1").await.unwrap().mounts.len(), 1);
        let git = workspace_git(&ws);
        assert_eq!(git.as_deref(), Some(ws.join(".git").as_path()));
        for role in [Role::Worker, Role::Once] {
            let m = role_mounts(role, &ws, git.as_deref(), None);
            assert_eq!(m.len(), 2, "{role}");
            assert!(!m[0].read_only && m[1].read_only && m[1].inside == ws.join(".git"));
        }
        assert_eq!(role_mounts(Role::Judge, &ws, git.as_deref(), None).len(), 1);
        let shared = SharedPlacement::new(ws.clone(), git, None);
        let place = shared.prepare("worker-1").await.unwrap();
        assert_eq!(place.mounts.len(), 2);
        assert_eq!(place.note.as_deref(), Some(SHARED_GIT_NOTE));
    }

    #[test]
    fn a_git_link_out_of_the_workspace_is_never_mounted() {
        // What an agent leaves behind: `.git -> ~/.config/flower`. The engine follows a bind
        // source's links, so mounting it would hand the next container the API key's file.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("proj");
        let secret = root.join("config-flower");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::os::unix::fs::symlink(&secret, ws.join(".git")).unwrap();
        assert_eq!(workspace_git(&ws), None);
        std::fs::remove_file(ws.join(".git")).unwrap();
        std::os::unix::fs::symlink("..", ws.join(".git")).unwrap();
        assert_eq!(workspace_git(&ws), None);
        // A link to a directory inside the workspace protects that directory.
        std::fs::remove_file(ws.join(".git")).unwrap();
        std::fs::create_dir(ws.join(".realgit")).unwrap();
        std::os::unix::fs::symlink(".realgit", ws.join(".git")).unwrap();
        assert_eq!(workspace_git(&ws), Some(ws.join(".realgit")));
    }
}
