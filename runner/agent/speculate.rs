//! Dispatches begun before they are asked for (issue 32 §4). A coordinator's `Agent` call is
//! known when its block ends in the stream (`ModelEvent::ToolCall` at `content_block_stop`),
//! before the message ends and long before the call runs; from there the worker's name, its
//! place and its container are prepared in the background, so the dispatch finds them ready.
//!
//! What is prepared is exactly what the dispatch would make: the same code makes the place
//! (narrowed to the call's write scope) and the [`crate::sandbox::AgentBox`], and the dispatch
//! takes a prepared worker only for a call of the same worker type and the same `writes`. The container is the
//! factory's own start for that box ([`crate::sandbox::SandboxFactory::sandbox`]): the
//! worker's first command joins it, teardown waits for it, and a factory refuses a second box
//! under the same agent name, so a container made for one place is never handed to another.
//!
//! It is speculative: a message that fails later (a broken stream retried), a call refused
//! (the guard, a hook) or never run leaves its preparation unused, and every unused one is
//! undone when the message's calls have run and when the turn ends ([`Speculations::settle`]):
//! its start waited for, its container released, its place given back. Only a worker that would
//! start at once is prepared ([`super::fanout::WorkerSlots::would_start_now`]) and only when
//! commands run in containers (on the host there is nothing to start early). With `--isolate`
//! the place is the worker's worktree, made early from the same branch (nothing merges between
//! the message's stream and its dispatch); an unused one is given back, worktree and branch
//! ([`super::place::Placement::abandon`]).

use std::sync::Mutex;
use tokio::task::JoinHandle;

use super::place::WorkerPlace;
use super::runtime::Runtime;
use super::scope::WriteScope;
use super::tools::ToolError;
use crate::sandbox::{Sandbox, SandboxError};

/// A worker prepared before its dispatch.
pub(crate) struct Prepared {
    /// Its instance name (`worker-3`), taken when the call arrived.
    pub(crate) agent: String,
    /// Its place, narrowed to its write scope.
    pub(crate) place: WorkerPlace,
    /// The start of its container, when its worker runs commands.
    pub(crate) started: Option<JoinHandle<Result<std::sync::Arc<dyn Sandbox>, SandboxError>>>,
}

/// A preparation in flight (or done) for one call.
pub(crate) type Preparing = JoinHandle<Result<Prepared, ToolError>>;

/// One preparation and what it was made for.
pub(crate) struct Held {
    /// The worker type it was made for.
    kind: String,
    /// The call's `writes`, as given.
    writes: Option<Vec<String>>,
    /// The call's write scope (for [`Speculations::scopes`]).
    scope: Option<WriteScope>,
    /// Its name, known at once (for undoing one that never finished).
    agent: String,
    task: Preparing,
}

/// The preparations of one agent's turn, in the order their calls arrived.
#[derive(Default)]
pub(crate) struct Speculations {
    held: Mutex<Vec<Held>>,
}

impl Held {
    /// `task`, preparing `agent` for a call of worker type `kind` with `writes` (`scope`).
    pub(crate) fn new(
        kind: &str,
        writes: Option<Vec<String>>,
        scope: Option<WriteScope>,
        agent: String,
        task: Preparing,
    ) -> Held {
        Held {
            kind: kind.to_string(),
            writes,
            scope,
            agent,
            task,
        }
    }

    /// The worker's name.
    pub(crate) fn agent(&self) -> &str {
        &self.agent
    }

    /// True when it was made for a call of type `kind` with `writes`.
    pub(crate) fn serves(&self, kind: &str, writes: Option<&Vec<String>>) -> bool {
        self.kind == kind && self.writes.as_ref() == writes
    }

    /// The preparation.
    pub(crate) fn into_task(self) -> Preparing {
        self.task
    }
}

impl Speculations {
    /// The scopes of the preparations not yet taken.
    pub(crate) fn scopes(&self) -> Vec<Option<WriteScope>> {
        self.lock().iter().map(|h| h.scope.clone()).collect()
    }

    /// Keeps `task`, preparing `agent` for a call of worker type `kind` with `writes`.
    pub(crate) fn hold(
        &self,
        kind: &str,
        writes: Option<Vec<String>>,
        scope: Option<WriteScope>,
        agent: String,
        task: Preparing,
    ) {
        self.lock()
            .push(Held::new(kind, writes, scope, agent, task));
    }

    /// The first preparation made for a call of type `kind` with `writes`, taken: its worker's
    /// name and the preparation.
    pub(crate) fn take(
        &self,
        kind: &str,
        writes: Option<&Vec<String>>,
    ) -> Option<(String, Preparing)> {
        let mut held = self.lock();
        let i = held.iter().position(|h| h.serves(kind, writes))?;
        let h = held.remove(i);
        Some((h.agent, h.task))
    }

    /// Undoes every preparation not taken (module doc): each one's container start waited for
    /// and its container released, its place given back.
    pub(crate) async fn settle(&self, rt: &Runtime) {
        let unused: Vec<Held> = std::mem::take(&mut *self.lock());
        futures::future::join_all(unused.into_iter().map(|h| undo(rt, h))).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Undoes one unused preparation.
pub(crate) async fn undo(rt: &Runtime, held: Held) {
    tracing::info!(agent = %held.agent, "a worker prepared early was not dispatched: undone");
    let prepared = match held.task.await {
        Ok(Ok(p)) => p,
        // Nothing was made (the place failed), or the preparation died: a start it may have
        // begun is the factory's, released below all the same.
        _ => {
            release(rt, &held.agent).await;
            return;
        }
    };
    if let Some(started) = prepared.started {
        // Released only once its start ended: a release before would find no container and
        // the start would then leave one (teardown would still remove it).
        let _ = started.await;
    }
    release(rt, &prepared.agent).await;
    rt.placement.abandon(&prepared.agent, &prepared.place).await;
}

async fn release(rt: &Runtime, agent: &str) {
    if let Err(e) = rt.sandboxes.release(agent).await {
        tracing::warn!(agent, error = %e, "releasing a worker prepared early failed");
    }
}
