//! Where agents work: each role's mounts (DESIGN.md role table), and the [`Placement`] seam that
//! gives each worker its place — the shared workspace, or its own git worktree with `--isolate`
//! (the isolation layer implements it).

use async_trait::async_trait;
use std::path::PathBuf;

use crate::model::Role;
use crate::sandbox::Mount;

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
}

/// Gives workers their place and integrates their work when they end.
#[async_trait]
pub trait Placement: Send + Sync {
    /// Prepares the place of a new worker named `agent`. `Err` is a message for the coordinator.
    async fn prepare(&self, agent: &str) -> Result<WorkerPlace, String>;

    /// Called after the worker ended (`ok` = it finished its turn). Returns a report for the
    /// coordinator (merge result, conflicts), appended to the `Agent` tool result.
    async fn finish(&self, agent: &str, place: &WorkerPlace, ok: bool) -> Option<String>;
}

/// The default placement: every worker writes in the shared workspace.
pub struct SharedPlacement {
    workspace: PathBuf,
    workbench: Option<PathBuf>,
}

impl SharedPlacement {
    /// Workers get `workspace` and `workbench` read-write.
    pub fn new(workspace: PathBuf, workbench: Option<PathBuf>) -> Self {
        SharedPlacement {
            workspace,
            workbench,
        }
    }
}

#[async_trait]
impl Placement for SharedPlacement {
    async fn prepare(&self, _agent: &str) -> Result<WorkerPlace, String> {
        Ok(WorkerPlace {
            workdir: self.workspace.clone(),
            mounts: role_mounts(Role::Worker, &self.workspace, self.workbench.as_deref()),
            branch: None,
        })
    }

    async fn finish(&self, _agent: &str, _place: &WorkerPlace, _ok: bool) -> Option<String> {
        None
    }
}

/// The mounts of a role over the shared workspace: workers and `once` write; everyone else
/// reads. The workbench is listed only when it is not inside the workspace already.
pub fn role_mounts(
    role: Role,
    workspace: &std::path::Path,
    workbench: Option<&std::path::Path>,
) -> Vec<Mount> {
    let read_only = !matches!(role, Role::Worker | Role::Once);
    let mut v = vec![Mount {
        path: workspace.to_path_buf(),
        read_only,
    }];
    if let Some(wb) = workbench {
        if !wb.starts_with(workspace) {
            v.push(Mount {
                path: wb.to_path_buf(),
                read_only,
            });
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
                role_mounts(role, ws, Some(wb)).iter().all(|m| m.read_only),
                "{role}"
            );
        }
        let w = role_mounts(Role::Worker, ws, Some(wb));
        assert_eq!(w.len(), 2);
        assert!(w.iter().all(|m| !m.read_only));
        // A workbench inside the workspace is covered by the workspace mount.
        assert_eq!(
            role_mounts(Role::Worker, ws, Some(Path::new("/w/p/.flower"))).len(),
            1
        );
    }
}
