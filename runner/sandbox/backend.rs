//! The backend seam: where a run's commands execute, as one value the command line picks
//! (`--sandbox docker|host`) and everything else asks — the run's preflight here; the doctor's
//! checks and `gc` next to it. A new backend (a remote engine, Podman, Kubernetes) is one more
//! implementation, with no edit to the callers. DESIGN.md "Backends and scale-out".

use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;

use super::doctor::Check;
use super::gc::GcReport;
use super::{SandboxError, SandboxFactory};

/// Where an agent's commands run, as its system prompt says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandsRun {
    /// In the agent's own container (`--sandbox docker`, the default).
    InContainer,
    /// As host processes of the invoking user (`--sandbox host`).
    OnHost,
}

/// When a run's agents will need a sandbox, as far as the start can tell (issue 32 §1): it
/// decides what a backend does before the run begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// Agents of this run will run commands (`go`, `run`, a `once` with Bash, a stdio MCP
    /// server or plugin hooks): reach the backend now, so one that cannot serve the run stops
    /// its start before anything of the run is written; prepare the rest in the background.
    Soon,
    /// No agent of this run can run a command (a text-only `once`): touch nothing until one
    /// asks; a run that never does costs nothing and never depends on the backend.
    OnFirstUse,
}

/// What a backend has ready for one run.
pub struct Preflight {
    /// Hands each agent its sandbox; torn down at the end of the run.
    pub factory: Arc<dyn SandboxFactory>,
    /// What the preflight did that the human should know (containers of dead runs removed).
    pub notes: Vec<String>,
}

/// One way to run agents' commands.
#[async_trait]
pub trait SandboxBackend: Send + Sync {
    /// `docker` or `host` (logs, `-v`).
    fn name(&self) -> &'static str;

    /// Where commands run, for the agents' system prompts.
    fn commands_run(&self) -> CommandsRun;

    /// Opens run `run_id` in `workspace`. With [`Demand::Soon`]: reach the engine now (a dead
    /// one is an error, never a fall-back to the host); with [`Demand::OnFirstUse`]: nothing
    /// yet. The rest (removing what dead runs of this workspace left, proving the engine sees
    /// the workspace, the image) comes before the first agent's sandbox, never before the
    /// first model turn; a failure there loses the run ([`SandboxFactory::lost`]).
    ///
    /// # Errors
    /// The backend cannot serve the run.
    async fn open_run(
        &self,
        run_id: &str,
        workspace: &Path,
        demand: Demand,
    ) -> Result<Preflight, SandboxError>;

    /// A factory for one of `flowerbox doctor`'s checks (run `run_id` in `workspace`: the MCP
    /// check starts stdio servers in it). Reaches the engine as a run does but never builds
    /// the image (a missing one is [`SandboxError::NoImage`]) and sweeps nothing; the caller
    /// tears it down.
    ///
    /// # Errors
    /// The backend cannot serve the check.
    async fn open_check(
        &self,
        run_id: &str,
        workspace: &Path,
    ) -> Result<Arc<dyn SandboxFactory>, SandboxError>;

    /// `flowerbox doctor`'s checks of this backend: can it run agents in `workspace` (for
    /// Docker: the engine, the image, its tools, the read-only roles' users, the exec service)?
    async fn checks(&self, workspace: &Path) -> Vec<Check>;

    /// `flowerbox doctor`'s last line: what dead runs of `workspace` left in this backend, when
    /// it can leave anything.
    async fn leftovers(&self, workspace: &Path) -> Option<Check>;

    /// `flowerbox gc`'s part of this backend: removes what dead runs left (of `workspace`, or
    /// of every workspace when `None`) and lists what it kept.
    ///
    /// # Errors
    /// The backend cannot be reached or listed.
    async fn gc(&self, workspace: Option<&Path>) -> Result<GcReport, SandboxError>;
}
