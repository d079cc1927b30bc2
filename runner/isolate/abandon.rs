//! Giving back a worktree no worker ran in (issue 32 §4): a worker prepared before its
//! dispatch (`agent::speculate`) whose call never ran. Its worktree was made like any other,
//! from the branch the workspace is on; nothing ran there (its container, if any, was released
//! first), so its directory, registration, worker state and branch go, and the run's close
//! never sees it.

use super::{remove, IsolateError, WorktreePlacement};

impl WorktreePlacement {
    /// Removes `agent`'s worktree, its branch and its git state; nothing when it has none.
    pub(super) async fn abandon_tree(&self, agent: &str) -> Result<(), IsolateError> {
        let tree = self
            .trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
        let Some(tree) = tree else {
            return Ok(());
        };
        let _gate = self.gate.lock().await;
        let repo = self.repo.clone();
        tokio::task::spawn_blocking(move || {
            let _lock = repo.lock()?;
            remove(&repo.open()?, &tree.name, &tree.branch)
        })
        .await
        .map_err(|source| IsolateError::Crashed {
            what: "删 worktree ",
            source,
        })?
    }
}
