//! [`Runtime`]: runs one agent from a prompt, or a resumed session, to the end of its turn —
//! flower's `Runtime.run` (api.md "Runtime"). Resumes after a human interrupt and handoffs of
//! full contexts happen inside one [`Runtime::run`] call; retries after network failures are
//! the provider's alone ([`crate::model::RetryPolicy`], issue 26 §4: one owner of the count).

use chrono::Utc;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::event::{Event, EventKind, EventSink};
use super::human::Human;
use super::place::{role_mounts, role_policy, workspace_git, Placement, SharedPlacement};
use super::plant::{Moved, PlantGuard};
use super::session_loop::AgentRun;
use super::spec::AgentSpec;
use super::step_run::StepRun;
use super::tools::{ToolLimits, ToolRegistry};
use super::workbench::Workbench;
use crate::model::price::Cost;
use crate::model::Provider;
use crate::record::handoff::context_window;
use crate::record::manifest::{epoch_now, DiskGauge, Manifest, ManifestEntry};
use crate::record::Unsaved;
use crate::role::Role;

use super::result::Meter;
pub use super::result::{manifest_row, StepError, StepResult};
use crate::sandbox::{AgentBox, SandboxFactory};
use crate::session::{SessionMeta, SessionStore, TrimPolicy};

/// `StepResult.error` of a step stopped by the human (api.md `INTERRUPTED`).
pub const INTERRUPTED: &str = "interrupted-by-human";
/// Appended after the human's words when resuming from an interrupt.
pub const INTERRUPT_NOTE: &str =
    "(上一轮被人打断了。在飞的工具调用返回 interrupted 是打断的正常副作用,不是环境故障;\
需要的话重跑那条命令。)";

/// Called with a step's session id as soon as it is known, and again whenever a handoff
/// replaces the session (lineage is written from it, so a crash mid-step still resumes).
pub type SessionHook = Arc<dyn Fn(&str) + Send + Sync>;

/// How to run one step.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Step name (manifest, lineage); the spec's name when `None`.
    pub step: Option<String>,
    /// Resume this session.
    pub resume: Option<String>,
    /// Fork the resumed session instead of continuing it.
    pub fork: bool,
    /// Told the session id as soon as it exists (and after each handoff).
    pub on_session: Option<SessionHook>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("step", &self.step)
            .field("resume", &self.resume)
            .field("fork", &self.fork)
            .field("on_session", &self.on_session.is_some())
            .finish()
    }
}

/// Settings of a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Canonical workspace.
    pub workspace: PathBuf,
    /// Model id used when a spec names none.
    pub model: String,
    /// Output cap of a model call, in tokens.
    pub max_tokens: u32,
    /// Largest `max_tokens` a cut-off retry may raise it to.
    pub max_tokens_ceiling: u32,
    /// This process's run marker.
    pub run_id: String,
    /// Tool limits.
    pub tool_limits: ToolLimits,
    /// Replace large old tool results with spill pointers on resume.
    pub trim_large: bool,
    /// Text before every agent's rules in its system prompt.
    pub base_system: String,
    /// Context window for handoffs, in tokens (`--window`, else the catalogue's, else the
    /// server's, else from the model name: [`context_window`]); `None` disables handoffs
    /// (`--no-handoff`).
    pub handoff_window: Option<u64>,
    /// Context window for compaction, in tokens: set when handoffs are off (`--no-handoff`),
    /// flower's fallback; `None` otherwise.
    pub compact_window: Option<u64>,
    /// Directories masked in every agent's box (canonical): the run directory.
    pub masked: Vec<PathBuf>,
    /// The masked directories' (device, inode), taken before any agent ran.
    pub masked_ids: Vec<(u64, u64)>,
    /// The run's disk use as its watcher last measured it, written into each manifest row.
    pub disk: Option<Arc<DiskGauge>>,
    /// Where `.git` entries agents planted are moved (`runs/quarantine/<run>`, masked);
    /// `None`: no sweep ([`super::plant`]).
    pub quarantine: Option<PathBuf>,
    /// How many workers run at once (`--max-workers`; the default from the machine, see
    /// [`super::fanout`]); the rest wait for a slot.
    pub max_workers: usize,
    /// The process exits once the run ends (the command line): the containers of the step
    /// that ends the run are left to the run's end (killed at once, removed by a detached
    /// cleanup: [`crate::sandbox::SandboxFactory::teardown_at_exit`]) rather than removed
    /// before it. `false` for a caller that lives on.
    pub exits_after: bool,
}

impl RuntimeConfig {
    /// Defaults for `workspace` and `model`.
    pub fn new(workspace: PathBuf, model: String, run_id: String) -> Self {
        let model_for_window = model.clone();
        RuntimeConfig {
            base_system: super::roles::base_system(
                &workspace,
                super::roles::CommandsRun::InContainer,
            ),
            workspace,
            model,
            max_tokens: crate::model::config::DEFAULT_MAX_TOKENS,
            max_tokens_ceiling: 64_000,
            run_id,
            tool_limits: ToolLimits::default(),
            trim_large: true,
            handoff_window: Some(context_window(&model_for_window, None, None)),
            compact_window: None,
            masked: Vec::new(),
            masked_ids: Vec::new(),
            disk: None,
            quarantine: None,
            max_workers: super::fanout::default_max_workers(
                super::fanout::Capacity::of_this_machine(),
                crate::sandbox::Limits::default().memory_bytes as u64,
            ),
            exits_after: false,
        }
    }
}

/// The agent runtime. Cheap to share (`Arc<Runtime>`); one per workflow run.
pub struct Runtime {
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) sandboxes: Arc<dyn SandboxFactory>,
    pub(crate) workbench: Option<Workbench>,
    pub(crate) human: Arc<dyn Human>,
    events: std::sync::RwLock<Vec<EventSink>>,
    manifest: Option<Arc<Manifest>>,
    /// What the run could not save (issue 26 §3): the driver stops the run once it trips.
    unsaved: Arc<Unsaved>,
    inflight: Mutex<HashMap<String, ManifestEntry>>,
    /// What each in-flight step has spent so far (by step name).
    meters: Mutex<HashMap<String, Arc<Meter>>>,
    rescued: std::sync::atomic::AtomicBool,
    pub(crate) registry: ToolRegistry,
    pub(crate) placement: Arc<dyn Placement>,
    /// The project's MCP servers, per agent; `None` when the run has none.
    pub(crate) mcp: Option<Arc<crate::mcp::McpHub>>,
    /// The plugins' skills, agent types and hooks (empty when there are none).
    pub(crate) plugins: Arc<crate::plugin::Plugins>,
    /// Roles already told that they get no hooks (no container).
    pub(crate) no_hooks_said: Mutex<std::collections::HashSet<String>>,
    pub(crate) config: RuntimeConfig,
    /// The workspace's `.git` to mount read-only into writing roles, decided once when the
    /// runtime was made (`place::workspace_git`).
    workspace_git: Option<std::path::PathBuf>,
    interrupt: Mutex<(CancellationToken, Option<String>)>,
    /// `true` from [`Runtime::pause`] to [`Runtime::resume`]: an interrupted step waits for the
    /// human's words before it resumes (seed 000 "Ctrl-C": the prompt is a chance to speak).
    hold: tokio::sync::watch::Sender<bool>,
    /// The last instance number of each role.
    pub(super) counters: Mutex<HashMap<Role, u32>>,
    /// The worker prepared before the coordinator asks for one ([`super::warm`]).
    pub(super) warm: Mutex<Option<super::speculate::Held>>,
    started_agents: Mutex<Vec<String>>,
    /// Moves the `.git` entries agents plant out of the user's way ([`super::plant`]).
    plants: Option<Arc<PlantGuard>>,
    /// The run's worker slots ([`super::fanout`]).
    pub(crate) workers: super::fanout::WorkerSlots,
}

impl Runtime {
    /// A runtime over the given services. Workers share the workspace until
    /// [`Runtime::with_placement`] installs another placement.
    pub fn new(
        config: RuntimeConfig,
        provider: Arc<dyn Provider>,
        store: Arc<dyn SessionStore>,
        sandboxes: Arc<dyn SandboxFactory>,
        workbench: Option<Workbench>,
        human: Arc<dyn Human>,
        events: EventSink,
    ) -> Self {
        // The repository's `.git` is decided here, once, before any container of the run.
        let workspace_git = workspace_git(&config.workspace);
        // The `.git` entries there now are the user's; taken before any container starts.
        let plants = config.quarantine.clone().map(|q| {
            Arc::new(PlantGuard::new(
                &config.workspace,
                workbench.as_ref().map(|w| w.root()),
                q,
                &config.masked_ids,
            ))
        });
        let placement = Arc::new(SharedPlacement::new(
            config.workspace.clone(),
            workspace_git.clone(),
            workbench.as_ref().map(|w| w.root().to_path_buf()),
        ));
        Runtime {
            workspace_git,
            provider,
            store,
            sandboxes,
            workbench,
            human,
            events: std::sync::RwLock::new(vec![events]),
            manifest: None,
            unsaved: Arc::new(Unsaved::new()),
            inflight: Mutex::new(HashMap::new()),
            meters: Mutex::new(HashMap::new()),
            rescued: std::sync::atomic::AtomicBool::new(false),
            registry: ToolRegistry::standard(),
            placement,
            mcp: None,
            plugins: Arc::new(crate::plugin::Plugins::default()),
            no_hooks_said: Mutex::new(std::collections::HashSet::new()),
            interrupt: Mutex::new((CancellationToken::new(), None)),
            hold: tokio::sync::watch::Sender::new(false),
            counters: Mutex::new(HashMap::new()),
            warm: Mutex::new(None),
            started_agents: Mutex::new(Vec::new()),
            plants,
            workers: super::fanout::WorkerSlots::new(config.max_workers),
            config,
        }
    }

    /// Replaces how workers are placed (worktrees with `--isolate`).
    pub fn with_placement(mut self, placement: Arc<dyn Placement>) -> Self {
        if !placement.shares_workspace() {
            if let Some(g) = &self.plants {
                g.workspace_not_shared();
            }
        }
        self.placement = placement;
        self
    }

    /// Gives the plugins' skills (to agents that can read), agent types (to coordinators) and
    /// hooks (run in agents' containers).
    pub fn with_plugins(mut self, plugins: Arc<crate::plugin::Plugins>) -> Self {
        self.plugins = plugins;
        self
    }

    /// Offers the project's MCP servers (`.mcp.json`, `--mcp-config`) to agents whose whitelist
    /// admits them.
    pub fn with_mcp(mut self, hub: Arc<crate::mcp::McpHub>) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// The MCP servers, if any.
    pub fn mcp(&self) -> Option<&Arc<crate::mcp::McpHub>> {
        self.mcp.as_ref()
    }

    /// True when `spec`'s agent can run a command in this run, so it gets a sandbox
    /// ([`AgentSpec::runs_commands`] with the run's MCP servers and plugins).
    pub fn runs_commands(&self, spec: &AgentSpec) -> bool {
        let servers = self.mcp.as_ref().map_or(&[][..], |h| h.servers());
        spec.runs_commands(servers, &self.plugins)
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The workspace's `.git` as the run found it at its start (read-only to every agent).
    pub fn workspace_git(&self) -> Option<&std::path::Path> {
        self.workspace_git.as_deref()
    }

    /// The workbench, if any.
    pub fn workbench(&self) -> Option<&Workbench> {
        self.workbench.as_ref()
    }

    /// The session store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The sandbox factory.
    pub fn sandboxes(&self) -> &Arc<dyn SandboxFactory> {
        &self.sandboxes
    }

    /// Interrupts the current turn cooperatively (any thread): in-flight tool calls return
    /// "interrupted", and the step resumes its session with `message` (empty = say nothing).
    pub fn interrupt(&self, message: &str) {
        let mut g = self.interrupt.lock().unwrap_or_else(|e| e.into_inner());
        g.1 = Some(message.to_string());
        g.0.cancel();
    }

    /// Interrupts the current turn like [`Runtime::interrupt`] and holds the interrupted step
    /// until [`Runtime::resume`]: the first Ctrl-C stops the spending while the human decides
    /// what to say. Subagents are not held (their half-done work is dropped anyway).
    pub fn pause(&self) {
        self.hold.send_replace(true);
        self.interrupt("");
    }

    /// Ends a [`Runtime::pause`]: the held step resumes its session with `message` (empty = say
    /// nothing). Without a pause it only sets the words an interrupted step resumes with.
    pub fn resume(&self, message: &str) {
        self.interrupt.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(message.to_string());
        self.hold.send_replace(false);
    }

    /// Waits while a [`Runtime::pause`] holds the run.
    pub(super) async fn held(&self) {
        let mut rx = self.hold.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = rx.wait_for(|held| !*held).await;
    }

    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.interrupt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Takes the pending interrupt message and arms a fresh token.
    pub(super) fn take_interrupt(&self) -> Option<String> {
        let mut g = self.interrupt.lock().unwrap_or_else(|e| e.into_inner());
        if g.0.is_cancelled() {
            g.0 = CancellationToken::new();
        }
        g.1.take()
    }

    /// A fresh instance name of `role`: `worker-1`, `worker-2`, `judge-1`, ... (numbered per
    /// role).
    pub fn instance_name(&self, role: Role) -> String {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let n = c.entry(role).or_insert(0);
        *n += 1;
        format!("{}-{n}", role.as_str())
    }

    pub(crate) fn note_agent(&self, agent: &str) {
        self.started_agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(agent.to_string());
    }

    /// Removes the sandboxes (containers) of every agent started so far — called when the step
    /// that owns them is done (after its judge).
    pub async fn release_agents(&self) {
        let agents: Vec<String> = std::mem::take(
            &mut *self
                .started_agents
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        // Concurrently (issue 17: one after another cost 0.55 s a round); each agent's MCP
        // servers before its container.
        futures::future::join_all(agents.iter().map(|a| async move {
            if let Some(hub) = &self.mcp {
                hub.release(a).await;
            }
            if let Err(e) = self.sandboxes.release(a).await {
                tracing::warn!(agent = %a, error = %e, "sandbox release failed");
            }
        }))
        .await;
        // The step's agents are gone: what they planted goes before the user looks.
        self.sweep_plants(&[]).await;
    }

    /// Moves the `.git` entries agents planted in the shared workspace, the workbench and the
    /// worktrees `kept` into the run's quarantine ([`super::plant`]), one warning line each.
    /// Called when a step's containers are gone and, by the driver, after every container of
    /// the run is gone (with the kept worktrees). Returns what was moved.
    pub async fn sweep_plants(&self, kept: &[PathBuf]) -> Vec<Moved> {
        let Some(guard) = self.plants.clone() else {
            return Vec::new();
        };
        let kept = kept.to_vec();
        let (moved, lines) = tokio::task::spawn_blocking(move || guard.sweep(&kept))
            .await
            .unwrap_or_else(|e| (Vec::new(), vec![format!("查放下的 git 仓库时崩了:{e}")]));
        for text in lines {
            self.emit("runner", Role::Coordinator, 0, EventKind::Warning { text });
        }
        moved
    }

    pub(crate) fn emit(&self, agent: &str, role: Role, depth: u32, kind: EventKind) {
        let ev = Event {
            agent: agent.to_string(),
            role,
            depth,
            kind,
        };
        for sink in self.events.read().unwrap_or_else(|e| e.into_inner()).iter() {
            sink(ev.clone());
        }
    }

    /// Adds another event outlet (a console attached after construction, the aside oracle's
    /// event window). Every event goes to every outlet, in subscription order.
    pub fn subscribe(&self, sink: EventSink) {
        self.events
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(sink);
    }

    /// Records every step in `manifest` (`runs/manifest.json`), in-flight steps included.
    pub fn with_manifest(mut self, manifest: Arc<Manifest>) -> Self {
        self.manifest = Some(manifest);
        self
    }

    /// The manifest writer, if any.
    pub fn manifest(&self) -> Option<&Arc<Manifest>> {
        self.manifest.as_ref()
    }

    /// What the run could not save: tripped by the first failure of any record.
    pub fn unsaved(&self) -> &Arc<Unsaved> {
        &self.unsaved
    }

    /// Reports that `what` could not be saved (issue 26 §3): the run stops and exits 1 naming
    /// it ([`Unsaved`]).
    pub fn not_saved(&self, what: &str, why: &dyn std::fmt::Display) {
        self.unsaved.report(what, why);
    }

    /// Gets the books as complete as possible before the process dies (SIGHUP/SIGTERM, second
    /// Ctrl-C): every in-flight step is written to the manifest with `error` set to `why`
    /// (`killed-by-signal`, `interrupted-by-human`). Small synchronous writes only.
    pub fn rescue(&self, why: &str) {
        let Some(m) = &self.manifest else { return };
        // Later step endings (a task still unwinding) must not overwrite these rows.
        self.rescued
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let rows: Vec<ManifestEntry> = self
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let meters = self.meters.lock().unwrap_or_else(|e| e.into_inner());
        for mut row in rows {
            if let Some(m) = meters.get(&row.step) {
                let (spend, turns) = m.read();
                row.cost_usd = spend.exact();
                row.num_turns = row.num_turns.max(u64::from(turns));
            }
            row.ok = false;
            row.error = Some(why.to_string());
            row.end_at(epoch_now());
            if let Some(bytes) = self.config.disk.as_ref().and_then(|g| g.get()) {
                row.disk_bytes = Some(bytes);
            }
            if let Err(e) = m.record(row) {
                self.not_saved(crate::record::layout::MANIFEST, &e);
            }
        }
    }

    /// The step `label` ended, but what it produced was not accepted (a workflow's gate
    /// rejected its last attempt): its manifest row becomes `ok: false` with `why`.
    pub fn mark_failed(&self, label: &str, why: &str) {
        let Some(m) = &self.manifest else { return };
        let amended = m.amend(label, |row| {
            row.ok = false;
            row.error = Some(why.to_string());
        });
        if let Err(e) = amended {
            self.not_saved(crate::record::layout::MANIFEST, &e);
        }
    }

    pub(super) fn track(&self, result: &StepResult, done: bool) {
        let Some(m) = &self.manifest else { return };
        if self.rescued.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut row = manifest_row(result, m.run());
        row.disk_bytes = self.config.disk.as_ref().and_then(|g| g.get());
        // While in flight the file holds what must stand if this process dies unrecorded
        // (kill -9): cut off, cost and end unknown. The in-memory row keeps what is known,
        // for a rescue (a signal) to complete.
        let written = if done {
            row.clone()
        } else {
            row.clone().in_flight()
        };
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if done {
            inflight.remove(&result.step);
            self.meters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&result.step);
        } else {
            inflight.insert(result.step.clone(), row.clone());
        }
        drop(inflight);
        match m.record(written) {
            Ok(Some(recovered)) => self.emit(
                "runner",
                Role::Coordinator,
                0,
                EventKind::Warning {
                    text: recovered.to_string(),
                },
            ),
            Ok(None) => {}
            Err(e) => self.not_saved(crate::record::layout::MANIFEST, &e),
        }
    }

    /// The policy resume uses to load a session.
    pub fn trim_policy(&self) -> TrimPolicy {
        let spill = match &self.workbench {
            Some(w) => w.spill(),
            None => self
                .config
                .workspace
                .join(crate::record::layout::WORKBENCH)
                .join("spill"),
        };
        TrimPolicy::new(spill, self.config.trim_large)
    }

    /// The box of a main-thread agent of `role` (no worktree).
    pub fn main_box(&self, agent: &str, role: Role) -> AgentBox {
        AgentBox {
            agent: agent.to_string(),
            role,
            mounts: role_mounts(
                role,
                &self.config.workspace,
                self.workspace_git.as_deref(),
                self.workbench.as_ref().map(|w| w.root()),
            ),
            masked: self.config.masked.clone(),
            workdir: self.config.workspace.clone(),
            policy: role_policy(role),
        }
    }

    /// Runs one step: `spec` with `prompt`, new or resumed, to the end of its turn. Never
    /// panics on model or tool failures: they end up in the result. The step is in the
    /// manifest from its first moment (in flight) to its end.
    pub async fn run(
        self: &Arc<Self>,
        spec: &AgentSpec,
        prompt: &str,
        opts: RunOptions,
    ) -> StepResult {
        let step = opts.step.clone().unwrap_or_else(|| spec.name.clone());
        let agent = match spec.role {
            Role::Once | Role::Coordinator | Role::Clarifier => spec.name.clone(),
            _ => self.instance_name(spec.role),
        };
        let mut result = StepResult::new(step.clone(), opts.resume.is_some());
        self.emit(
            &agent,
            spec.role,
            0,
            EventKind::StepStart { step: step.clone() },
        );
        // On an engine without this machine's disk the step's agents read the workbench's
        // volume: the notes flowerbox wrote here go there first.
        if let (Some(wb), true) = (&self.workbench, self.sandboxes.engine_disk().is_some()) {
            super::mirror::push_notes(wb, self.sandboxes.files().as_ref()).await;
        }
        if self.runs_commands(spec) {
            // Its container goes with the next release_agents() (after the step's judge).
            self.note_agent(&agent);
        }
        self.take_interrupt();

        let meta = SessionMeta {
            agent: agent.clone(),
            role: spec.role,
            step: Some(step.clone()),
            parent: None,
            run: self.config.run_id.clone(),
        };
        let (session, history) = match self.open_session(&meta, opts.resume.as_deref(), opts.fork) {
            Ok(v) => v,
            Err(e) => {
                result.error = Some(e);
                return self.finish(result, spec, &agent);
            }
        };
        result.session_id = Some(session.clone());
        if let Some(hook) = &opts.on_session {
            hook(&session);
        }
        let meter = Arc::new(Meter::default());
        self.meters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(step.clone(), meter.clone());
        self.track(&result, false);
        let abox = self.main_box(&agent, spec.role);
        let run = AgentRun::new(
            self.clone(),
            spec.clone(),
            agent.clone(),
            0,
            session,
            history,
            abox.clone(),
        )
        .with_meter(Some(meter.clone()));
        let mut step_run = StepRun {
            rt: self,
            spec,
            agent: agent.clone(),
            meta,
            abox,
            meter,
            opts: &opts,
            run,
            retired_spend: Cost::default(),
            retired_turns: 0,
        };
        step_run.drive(prompt, &mut result).await;
        if spec.has(crate::model::ToolName::Agent) {
            // The dispatching step is over: a worker prepared for it and not taken goes.
            self.settle_warm().await;
        }
        self.finish(result, spec, &agent)
    }

    fn finish(&self, mut result: StepResult, spec: &AgentSpec, agent: &str) -> StepResult {
        result.ended_at = Utc::now();
        // Every spill file a history loaded for the step pointed to is there before the step
        // is over (the model may have quoted a pointer).
        if let Err(e) = self.store.spill_written() {
            self.not_saved("会话", &e);
        }
        if result.ok && self.unsaved.is_tripped() {
            // Never `+ 完成` over a transcript that is not on disk (issue 26 §3).
            result.ok = false;
            result.error = Some(StepError::Unsaved);
        }
        self.track(&result, true);
        self.emit(
            agent,
            spec.role,
            0,
            EventKind::StepEnd {
                step: result.step.clone(),
                ok: result.ok,
                cost_usd: result.spend.exact(),
                turns: result.num_turns,
                context_tokens: result.context,
                error: result.error.as_ref().map(ToString::to_string),
            },
        );
        result
    }

    /// A new session holding `history` (a compacted conversation), so a resume continues it.
    pub(super) fn seed_session(
        &self,
        meta: &SessionMeta,
        history: &[crate::model::Message],
    ) -> Result<String, crate::session::SessionError> {
        let id = self.store.create(meta)?;
        for m in history {
            self.store.append(&id, m, None)?;
        }
        Ok(id)
    }

    /// Creates, resumes or forks a session; returns (id, history to continue from).
    pub(crate) fn open_session(
        &self,
        meta: &SessionMeta,
        resume: Option<&str>,
        fork: bool,
    ) -> Result<(String, Vec<crate::model::Message>), StepError> {
        let store_err = |e: crate::session::SessionError| {
            self.not_saved("会话", &e);
            StepError::from(e)
        };
        if let Some(id) = resume {
            if self.store.meta(id).map_err(store_err)?.is_some() {
                let id = if fork {
                    self.store.fork(id).map_err(store_err)?
                } else {
                    id.to_string()
                };
                let history = self
                    .store
                    .load(&id, &self.trim_policy())
                    .map_err(store_err)?;
                return Ok((id, history));
            }
            self.emit(
                &meta.agent,
                meta.role,
                0,
                EventKind::Warning {
                    text: format!("会话 {id} 查不到,开新会话"),
                },
            );
        }
        let id = self.store.create(meta).map_err(store_err)?;
        Ok((id, Vec::new()))
    }
}
