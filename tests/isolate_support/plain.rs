//! A run in the shared workspace (no `--isolate`): the workspace is the repository root, the
//! agents' containers mount it directly, and no placement brings anything back.

use super::docker_support::{self, agent_image};
use super::model_support::{self, ScriptedModel};
use flowerbox::agent::human::Absent;
use flowerbox::agent::{Event, EventKind, Runtime, RuntimeConfig, Workbench};
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::session::SqliteSessionStore;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Runtime, sandboxes and model of one run in the shared workspace, torn down in `Drop`.
pub struct PlainRun {
    pub rt: Arc<Runtime>,
    pub factory: Arc<DockerSandboxFactory>,
    pub events: Arc<Mutex<Vec<Event>>>,
    pub run_id: String,
    _model: ScriptedModel,
}

impl PlainRun {
    /// A run over `ws` answering with `scenario`, its id named after `test`.
    pub async fn new(engine: &Engine, test: &str, ws: &Path, scenario: Value) -> Self {
        Self::build(engine, test, ws, false, scenario).await
    }

    /// [`PlainRun::new`] as the driver sets it up: the run directory `runs/` masked from every
    /// agent and planted repositories moved into `runs/quarantine/<run>`.
    pub async fn guarded(engine: &Engine, test: &str, ws: &Path, scenario: Value) -> Self {
        Self::build(engine, test, ws, true, scenario).await
    }

    async fn build(engine: &Engine, test: &str, ws: &Path, guarded: bool, scenario: Value) -> Self {
        let image = agent_image(engine).await;
        let wb = Workbench::at(Workbench::locate(ws, false))
            .ensure()
            .unwrap();
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let run_id = docker_support::run_id(test);
        let mut opts = DockerOptions::new(run_id.clone(), ws);
        opts.image = Some(image);
        opts.show_progress = false;
        let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
        let model = ScriptedModel::start(&scenario);
        let mut cfg =
            RuntimeConfig::new(ws.to_path_buf(), "claude-sonnet-4-5".into(), run_id.clone());
        if guarded {
            super::guard(&mut cfg, &runs, &run_id);
        }
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let rt = Runtime::new(
            cfg,
            model.provider(model_support::fast()),
            Arc::new(SqliteSessionStore::open(runs.join("sessions.db")).unwrap()),
            factory.clone(),
            Some(wb),
            Arc::new(Absent),
            Arc::new(move |e| ev.lock().unwrap().push(e)),
        );
        PlainRun {
            rt: Arc::new(rt),
            factory,
            events,
            run_id,
            _model: model,
        }
    }

    /// The result `(is_error, text)` of the tool call with id `id`.
    pub fn result(&self, id: &str) -> (bool, String) {
        super::result(&self.events, id)
    }

    /// The warning lines shown so far.
    pub fn warnings(&self) -> Vec<String> {
        super::warnings(&self.events)
    }

    /// What the first Bash call printed (empty when none ran).
    pub fn bash_output(&self) -> String {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::ToolResult { name, text, .. } if name == "Bash" => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }
}

impl Drop for PlainRun {
    fn drop(&mut self) {
        docker_support::teardown_blocking(&self.factory);
    }
}
