//! A worker ready before the coordinator asks for one (issue 32 §2). While the run clarifies
//! and sets its goal, the coordinator's first worker type is prepared under the name the next
//! worker will get: its place and its container (with its exec service started), exactly as its
//! dispatch would make them ([`super::speculate`] does the making). The next worker name taken
//! decides its fate: a dispatch of that type without `writes` takes it; any other dispatch
//! (another type, a write scope) has it undone first (its container released) and makes its
//! own, so names follow the same order as without it. Unused when the coordinator's step ends,
//! it is undone then; teardown removes it like any other container in the worst case.
//!
//! Only in the shared workspace (with `--isolate` it would make, and when unused remove, a
//! worktree and a branch in the user's repository on every run), only when commands run in
//! containers, and only for a worker type that runs commands.
//! Its cost is one idle container of the run (see DESIGN.md "Start early").

use std::sync::Arc;

use super::dispatch::{prepare_early, workers_of};
use super::runtime::Runtime;
use super::spec::AgentSpec;
use super::speculate::{undo, Held, Preparing};
use crate::role::Role;
use crate::sandbox::CommandsRun;

/// The next worker's name, and what was prepared for it.
pub(crate) struct NextWorker {
    /// The worker's name (`worker-3`), taken.
    pub(crate) agent: String,
    /// The warm worker, when it was made under this name for this kind of dispatch.
    pub(crate) warm: Option<Preparing>,
    /// The warm worker made under this name for another kind of dispatch: undo it before
    /// anything of the worker is made (its container holds the name).
    pub(crate) stale: Option<Held>,
}

impl Runtime {
    /// Prepares the first worker type of `coordinator` in the background under the next worker
    /// name (module doc); nothing when one is warm already or none can be.
    pub fn warm_worker(self: &Arc<Self>, coordinator: &AgentSpec) {
        let Some(def) = workers_of(coordinator).into_iter().next() else {
            return;
        };
        if self.sandboxes.commands_run() != CommandsRun::InContainer
            || !self.placement.shares_workspace()
            || !self.runs_commands(&def.spec)
        {
            return;
        }
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        if warm.is_some() {
            return;
        }
        let next = counters.get(&def.spec.role).copied().unwrap_or(0) + 1;
        let agent = format!("{}-{next}", def.spec.role.as_str());
        tracing::info!(%agent, kind = %def.kind, "a worker is prepared before it is asked for");
        let task = tokio::spawn(prepare_early(
            self.clone(),
            def.clone(),
            agent.clone(),
            None,
        ));
        *warm = Some(Held::new(&def.kind, None, None, agent, task));
    }

    /// Takes the next name of `role` for a dispatch of worker type `kind` with `writes`, with
    /// the warm worker made under that name (module doc).
    pub(crate) fn next_worker(
        &self,
        role: Role,
        kind: &str,
        writes: Option<&Vec<String>>,
    ) -> NextWorker {
        let agent = self.instance_name(role);
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        match warm.take() {
            Some(h) if h.agent() == agent && h.serves(kind, writes) => NextWorker {
                agent,
                warm: Some(h.into_task()),
                stale: None,
            },
            Some(h) if h.agent() == agent => NextWorker {
                agent,
                warm: None,
                stale: Some(h),
            },
            other => {
                *warm = other;
                NextWorker {
                    agent,
                    warm: None,
                    stale: None,
                }
            }
        }
    }

    /// Undoes the warm worker when no dispatch took it (the coordinator's step ended).
    pub(crate) async fn settle_warm(&self) {
        let unused = self.warm.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = unused {
            undo(self, h).await;
        }
    }
}
