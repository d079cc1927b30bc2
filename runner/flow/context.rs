//! [`RunContext`]: every service one run needs, built in one place from the run's settings
//! ([`RunSettings`]: what the command line chose) — the model provider, `runs/sessions.db`, the
//! sandboxes of the chosen backend, the workbench, `runs/manifest.json` and the [`Runtime`] over
//! them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::FlowError;
use super::frontend::{Notice, NoticeSink};
use super::watch::{ConfigWatch, Watched};
use crate::agent::human::Human;
use crate::agent::{EventSink, Placement, Runtime, RuntimeConfig, Workbench};
use crate::mcp::McpHub;
use crate::model::{build_provider, Provider, ProviderOptions};
use crate::record::handoff::context_window;
use crate::record::manifest::Manifest;
use crate::record::steps::new_run_marker;
use crate::sandbox::egress::EgressPolicy;
use crate::sandbox::{Demand, Preflight, SandboxBackend, SandboxFactory};
use crate::session::SqliteSessionStore;

/// The configuration values a model provider is built from (credentials, endpoint, model and
/// the model-call knobs), by name; `None` when unset.
pub type ModelConfig = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What the command line chose for a run, in the run's terms.
#[derive(Clone)]
pub struct RunSettings {
    /// The agents' working directory (absolute, canonical, exists).
    pub workspace: PathBuf,
    /// Sessions, manifest, lineage, log (absolute; created by the builder).
    pub run_dir: PathBuf,
    /// Where agents may connect (WebFetch applies it; the backend's pods enforce it).
    pub egress: EgressPolicy,
    /// How many workers run at once; `None` = from the machine (`--max-workers`).
    pub max_workers: Option<usize>,
    /// Where commands run.
    pub sandbox: Arc<dyn SandboxBackend>,
    /// The model provider's configuration, resolved when the services are built.
    pub model: ModelConfig,
    /// The project's MCP servers (`.mcp.json`, `--mcp-config`), already loaded and checked;
    /// each run gets its own [`McpHub`] over them.
    pub mcp_servers: Vec<crate::mcp::ServerConfig>,
    /// Timeouts of those servers.
    pub mcp: crate::mcp::McpSettings,
    /// The plugins (`.flowerbox/plugins/*`, `--plugin-dir`), already loaded.
    pub plugins: Arc<crate::plugin::Plugins>,
    /// The configuration files the next run reads from the workspace: watched over the run,
    /// and named at its end when an agent created, changed or removed one.
    pub watched: Vec<Watched>,
    /// What a worker's branch may bring back (`--isolate`).
    pub objects: crate::isolate::ObjectLimits,
    /// What the run's agents may add to the disk.
    pub disk: super::disk::DiskBudget,
    /// The backend's run, opened by [`RunSettings::open_sandboxes`] before anything of the run
    /// was written; the first [`RunContext::build`] takes it.
    pub opened: Option<Arc<OpenedSandboxes>>,
    /// The process exits once the run ends (the command line): the run's end
    /// ([`RunContext::shutdown_at_exit`]) may leave the removal of its containers to a
    /// detached cleanup. `false` for a caller that lives on.
    pub exits_after: bool,
}

/// A backend's run opened ahead of the run's files: its run marker and what the backend has
/// ready, taken once.
pub struct OpenedSandboxes {
    run_id: String,
    ready: std::sync::Mutex<Option<Preflight>>,
}

impl OpenedSandboxes {
    fn take(&self) -> Option<(String, Preflight)> {
        let ready = self
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some((self.run_id.clone(), ready))
    }
}

impl RunSettings {
    /// Opens the backend's run now, before the run writes anything. With [`Demand::Soon`]
    /// (for Docker: the engine pinged) a start the engine cannot serve (Docker down, a bad
    /// `DOCKER_HOST`) leaves no `runs/` and no workbench behind (issue 29 §2.9); with
    /// [`Demand::OnFirstUse`] (a run whose agents run no command) the backend is not touched
    /// at all (issue 32 §1). A start that fails later in [`RunContext::build`] tears this run
    /// down (its background sweep and probe end first); one that fails before it leaves it to
    /// the factory's drop.
    ///
    /// Errors: the model provider's configuration is unusable; [`FlowError::Sandbox`] when the
    /// backend cannot serve the run.
    pub async fn open_sandboxes(mut self, demand: Demand) -> Result<RunSettings, FlowError> {
        // A configuration the run cannot use is said first: it costs no engine round (and no
        // image build).
        let get = |k: &str| (self.model)(k);
        build_provider(&get, ProviderOptions::default())?;
        crate::model::config::max_tokens_setting(&get)?;
        let run_id = new_run_marker();
        let ready = self
            .sandbox
            .open_run(&run_id, &self.workspace, demand)
            .await?;
        self.opened = Some(Arc::new(OpenedSandboxes {
            run_id,
            ready: std::sync::Mutex::new(Some(ready)),
        }));
        Ok(self)
    }
}

/// What differs between the drivers (`go`, `run`, `once`, the aside oracle).
pub struct RunSetup {
    /// Workbench root, `None` for none (`once` without `-W`). Created by the builder.
    pub workbench: Option<PathBuf>,
    /// Replace large old tool results with pointers on resume (`-T`; on by default on `go`).
    pub trim_large: bool,
    /// `--window`, when given.
    pub window: Option<u64>,
    /// Handoffs enabled (not `--no-handoff`).
    pub handoff: bool,
    /// The human on the other end.
    pub human: Arc<dyn Human>,
    /// The first event outlet (more can subscribe later).
    pub events: EventSink,
    /// Where the run's own moments go (the frontend's notices): the library prints nothing.
    pub notices: NoticeSink,
    /// How workers are placed; the shared workspace when `None`.
    pub placement: Option<Arc<dyn Placement>>,
    /// Sandboxes to use instead of opening the settings' backend (tests inject their own).
    pub sandboxes: Option<Arc<dyn SandboxFactory>>,
}

/// The services of one run.
pub struct RunContext {
    /// This process's run marker (`YYYYmmdd-HHMMSS-<6 hex>`).
    pub run_id: String,
    /// The runtime.
    pub runtime: Arc<Runtime>,
    /// `runs/manifest.json`.
    pub manifest: Arc<Manifest>,
    /// The sandboxes (torn down by [`RunContext::shutdown`]).
    pub sandboxes: Arc<dyn SandboxFactory>,
    /// The model provider.
    pub provider: Arc<dyn Provider>,
    /// The workbench, if any.
    pub workbench: Option<Workbench>,
    /// The workspace's configuration files as they were before any agent ran.
    pub config_watch: ConfigWatch,
    /// The run's disk use as last measured ([`super::disk::DiskWatch`]), for every manifest
    /// row.
    pub disk: Arc<crate::record::manifest::DiskGauge>,
    /// Where the run's own moments go.
    notices: NoticeSink,
    /// The run directory when the process exits after the run ([`RunSettings::exits_after`]).
    exit_dir: Option<PathBuf>,
}

impl RunContext {
    /// Builds the services. Errors: a bad provider configuration, an unopenable
    /// `sessions.db`, a backend that cannot serve the run (an unreachable Docker engine is
    /// never a silent fall-back to host execution).
    pub async fn build(settings: &RunSettings, setup: RunSetup) -> Result<RunContext, FlowError> {
        // Before anything of this run can write the workspace.
        let config_watch = ConfigWatch::start(
            &settings.watched,
            &settings.workspace,
            std::slice::from_ref(&settings.run_dir),
        );
        let get = |k: &str| (settings.model)(k);
        let provider = build_provider(&get, ProviderOptions::default())?;
        let max_tokens_setting = crate::model::config::max_tokens_setting(&get)?;
        crate::fsroot::own::create_dir_all(&settings.run_dir).map_err(|e| FlowError::Io {
            what: format!("建不出 {}", settings.run_dir.display()),
            source: e,
        })?;
        let opened = settings.opened.as_ref().and_then(|o| o.take());
        let (run_id, opened) = match opened {
            Some((id, ready)) => (id, Some(ready)),
            None => (new_run_marker(), None),
        };
        let store = match open_store(settings, &setup.notices).await {
            Ok(store) => store,
            Err(e) => return Err(close_opened(opened, e).await),
        };
        let workbench = match &setup.workbench {
            Some(root) => match open_workbench(settings, root) {
                Ok(w) => Some(w),
                Err(e) => return Err(close_opened(opened, e).await),
            },
            None => None,
        };
        let sandboxes = match setup.sandboxes.clone() {
            Some(s) => s,
            None => open_sandboxes(settings, &run_id, opened, &setup.notices).await?,
        };
        let mut config = runtime_config(settings, provider.default_model(), &run_id);
        config.trim_large = setup.trim_large;
        let disk = Arc::new(crate::record::manifest::DiskGauge::default());
        config.disk = Some(disk.clone());
        size_windows(&mut config, provider.as_ref(), &setup, max_tokens_setting).await;
        let manifest = Arc::new(Manifest::new(
            crate::record::layout::manifest(&settings.run_dir),
            run_id.clone(),
        ));
        let runtime = Runtime::new(
            config,
            provider.clone(),
            Arc::new(store),
            sandboxes.clone(),
            workbench.clone(),
            setup.human,
            setup.events,
        )
        .with_manifest(manifest.clone());
        let runtime = with_services(runtime, settings, setup.placement);
        warn_of_sandbox_notices(&runtime, sandboxes.as_ref());
        Ok(RunContext {
            run_id,
            runtime,
            manifest,
            sandboxes,
            provider,
            workbench,
            config_watch,
            disk,
            notices: setup.notices,
            exit_dir: settings.exits_after.then(|| settings.run_dir.clone()),
        })
    }

    /// The notice naming the workspace's configuration files this run's agents created,
    /// changed or removed (`None` when none): shown at the end of the run, before the next run
    /// trusts them. Call it once no agent runs any more.
    pub fn config_notice(&self) -> Option<Notice> {
        let changes = self.config_watch.changes();
        for c in &changes {
            tracing::warn!(path = %c.path.display(), change = ?c.change, added = ?c.added, changed = ?c.changed, removed = ?c.removed, "workspace configuration changed during the run");
        }
        (!changes.is_empty()).then_some(Notice::ConfigChanged(changes))
    }

    /// Stops the MCP servers and removes every container of the run (and its pod), then moves
    /// what agents planted as `.git` in the workspace and the workbench into the run's
    /// quarantine; worktrees are kept.
    pub async fn shutdown(&self) {
        self.close(false).await;
    }

    /// [`RunContext::shutdown`] at the run's end when the process exits right after it
    /// ([`RunSettings::exits_after`]): returns once every process of the run is dead (so the
    /// sweep of what agents planted still comes after them all), while the removal of its
    /// containers, networks and volumes may finish in a detached cleanup
    /// ([`SandboxFactory::teardown_at_exit`]). Otherwise the same as `shutdown`.
    pub async fn shutdown_at_exit(&self) {
        self.close(true).await;
    }

    async fn close(&self, at_exit: bool) {
        if let Some(hub) = self.runtime.mcp() {
            hub.shutdown().await;
        }
        let torn_down = match (&self.exit_dir, at_exit) {
            (Some(run_dir), true) => self.sandboxes.teardown_at_exit(run_dir).await,
            _ => self.sandboxes.teardown().await,
        };
        if let Err(e) = torn_down {
            tracing::error!(error = %e, "sandbox teardown failed");
            (self.notices)(&Notice::TeardownFailed(e.to_string()));
        }
        // Every process of the run is dead: no agent can plant again behind this sweep.
        self.runtime.sweep_plants(&[]).await;
    }
}

/// `<run_dir>/sessions.db`. When it cannot be opened the run cannot start, but what a crashed
/// run left (its containers) goes first.
async fn open_store(
    settings: &RunSettings,
    notices: &NoticeSink,
) -> Result<SqliteSessionStore, FlowError> {
    let e = match SqliteSessionStore::open(crate::record::layout::sessions_db(&settings.run_dir)) {
        Ok(s) => return Ok(s),
        Err(e) => e,
    };
    match settings.sandbox.gc(Some(&settings.workspace)).await {
        Ok(report) if !report.removed.is_empty() => notices(&Notice::Sandbox(report.removed)),
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "orphan sweep failed"),
    }
    Err(FlowError::Store(e))
}

/// The workbench at `root` (a path of the user's, never followed through a link an agent
/// planted beneath the workspace), created.
fn open_workbench(settings: &RunSettings, root: &Path) -> Result<Workbench, FlowError> {
    let root = crate::fsroot::own::trusted_dir(root, &settings.workspace);
    Workbench::at(root.clone())
        .ensure()
        .map_err(|e| FlowError::Io {
            what: format!("建不出工作台 {}", root.display()),
            source: e,
        })
}

/// A start that failed after the backend's run was opened ahead of it: that run is torn down
/// (its background work — a dead run's containers being swept, the disk probe — ends first,
/// else the process's exit would cut a sweep in half and leave containers behind); `e` back.
async fn close_opened(opened: Option<Preflight>, e: FlowError) -> FlowError {
    if let Some(ready) = opened {
        if let Err(te) = ready.factory.teardown().await {
            tracing::warn!(error = %te, "teardown after a failed start");
        }
    }
    e
}

/// The sandboxes of the settings' backend for run `run_id`: the run `opened` ahead of the
/// run's files, else opened now (its preflight's lines are said).
async fn open_sandboxes(
    settings: &RunSettings,
    run_id: &str,
    opened: Option<Preflight>,
    notices: &NoticeSink,
) -> Result<Arc<dyn SandboxFactory>, FlowError> {
    let ready = match opened {
        Some(ready) => ready,
        None => {
            settings
                .sandbox
                .open_run(run_id, &settings.workspace, Demand::Soon)
                .await?
        }
    };
    if !ready.notes.is_empty() {
        notices(&Notice::Sandbox(ready.notes));
    }
    Ok(ready.factory)
}

/// The runtime's configuration from the run's settings (windows and output caps come after,
/// from the model: [`size_windows`]).
fn runtime_config(settings: &RunSettings, model: &str, run_id: &str) -> RuntimeConfig {
    let mut config = RuntimeConfig::new(
        settings.workspace.clone(),
        model.to_string(),
        run_id.to_string(),
    );
    config.tool_limits.egress = settings.egress.clone();
    if let Some(n) = settings.max_workers {
        config.max_workers = n;
    }
    // Every agent's container and file tools hide the run directory (DESIGN.md "Threat
    // model" 1): the records flowerbox trusts are not theirs to read or plant links in.
    config.masked = vec![settings.run_dir.clone()];
    config.masked_ids = crate::fsroot::own::identity(&settings.run_dir)
        .into_iter()
        .collect();
    // What agents plant as `.git` where the user looks is moved here (issue 25 §2).
    config.quarantine = Some(settings.run_dir.join("quarantine").join(run_id));
    config.base_system =
        crate::agent::roles::base_system(&settings.workspace, settings.sandbox.commands_run());
    config.exits_after = settings.exits_after;
    config
}

/// The handoff (or compaction) window and the output cap of `config.model`: a model outside
/// the catalogue is sized by what its server says about its context.
async fn size_windows(
    config: &mut RuntimeConfig,
    provider: &dyn Provider,
    setup: &RunSetup,
    max_tokens_setting: Option<u32>,
) {
    let model = config.model.clone();
    let catalogued = crate::model::catalog::lookup(&model).is_some();
    let server_window = if catalogued {
        None
    } else {
        provider.server_context_window().await
    };
    let window = context_window(&model, setup.window, server_window);
    // Near the window a step hands off, or with `--no-handoff` compacts (flower's
    // fallback): never both, so every drop of the context has one cause.
    config.handoff_window = setup.handoff.then_some(window);
    config.compact_window = (!setup.handoff).then_some(window);
    config.max_tokens =
        crate::model::config::max_tokens_for(max_tokens_setting, &model, server_window);
    match crate::model::catalog::max_output_tokens(&model) {
        Some(cap) => {
            config.max_tokens_ceiling = cap;
            config.max_tokens = config.max_tokens.min(cap);
        }
        None => {
            // Doubling after a cut-off stays within what the server can hold.
            config.max_tokens_ceiling = match server_window {
                Some(w) => (w / 2).max(u64::from(config.max_tokens)) as u32,
                None => config.max_tokens.max(config.max_tokens_ceiling),
            };
        }
    }
}

/// The runtime with the run's placement, MCP servers and plugins.
fn with_services(
    mut runtime: Runtime,
    settings: &RunSettings,
    placement: Option<Arc<dyn Placement>>,
) -> Arc<Runtime> {
    if let Some(p) = placement {
        runtime = runtime.with_placement(p);
    }
    if !settings.mcp_servers.is_empty() {
        let cap = crate::agent::tools::ToolLimits::default().bash_output_cap;
        runtime = runtime.with_mcp(Arc::new(McpHub::new(
            settings.mcp_servers.clone(),
            settings.mcp.clone(),
            settings.egress.clone(),
            cap,
        )));
    }
    Arc::new(runtime.with_plugins(settings.plugins.clone()))
}

/// What the sandboxes notice (a container or the pod gone, the engine away, a slower exec) is
/// the human's: a warning line, wherever the run's events go.
fn warn_of_sandbox_notices(runtime: &Arc<Runtime>, sandboxes: &dyn SandboxFactory) {
    let weak = Arc::downgrade(runtime);
    sandboxes.on_notice(Arc::new(move |notice| {
        if let Some(rt) = weak.upgrade() {
            rt.emit(
                "runner",
                crate::role::Role::Coordinator,
                0,
                crate::agent::EventKind::Warning {
                    text: notice.to_string(),
                },
            );
        }
    }));
}
