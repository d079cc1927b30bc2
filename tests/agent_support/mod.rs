//! Shared helpers of the agent-runtime integration tests: a workspace, a runtime over the real
//! `scripted-model` (HTTP), `sessions.db`, the manifest and the host sandbox.
#![allow(dead_code)]

#[path = "../model_support/mod.rs"]
pub mod model_support;

use flowerbox::agent::human::Absent;
use flowerbox::agent::{Event, Runtime, RuntimeConfig, Workbench};
use flowerbox::record::manifest::Manifest;
use flowerbox::sandbox::host::HostSandboxFactory;
use flowerbox::session::SqliteSessionStore;
pub use model_support::ScriptedModel;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A workspace with a workbench and a runtime pointed at a scripted model.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub runs: PathBuf,
    pub model: ScriptedModel,
    pub rt: Arc<Runtime>,
    pub events: Arc<Mutex<Vec<Event>>>,
}

/// Options for [`Harness::new`].
pub struct Opts {
    pub handoff_window: Option<u64>,
    pub model: &'static str,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            handoff_window: None,
            model: "claude-sonnet-4-5",
        }
    }
}

impl Harness {
    pub fn new(scenario: Value, opts: Opts) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let model = ScriptedModel::start(&scenario);
        let provider = model.provider(model_support::fast());
        let wb = Workbench::at(ws.join(".flower")).ensure().unwrap();
        let run_id = "20260101-000000-a1b2c3".to_string();
        let mut cfg = RuntimeConfig::new(ws.clone(), opts.model.into(), run_id.clone());
        cfg.handoff_window = opts.handoff_window;
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let rt = Runtime::new(
            cfg,
            provider,
            Arc::new(SqliteSessionStore::open(runs.join("sessions.db")).unwrap()),
            Arc::new(HostSandboxFactory::new()),
            Some(wb),
            Arc::new(Absent),
            Arc::new(move |e| ev.lock().unwrap().push(e)),
        )
        .with_manifest(Arc::new(Manifest::new(runs.join("manifest.json"), run_id)));
        Harness {
            dir,
            ws,
            runs,
            model,
            rt: Arc::new(rt),
            events,
        }
    }

    /// The tool_result blocks (content, is_error) of the last message of recorded request `i`.
    pub fn results(&self, i: usize) -> Vec<(String, bool)> {
        let req = &self.model.recorded()[i];
        let msgs = req["messages"].as_array().unwrap();
        let last = msgs.last().unwrap();
        last["content"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter(|b| b["type"] == "tool_result")
                    .map(|b| {
                        let content = match &b["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(a) => a
                                .iter()
                                .filter_map(|x| x["text"].as_str())
                                .collect::<Vec<_>>()
                                .join(""),
                            _ => String::new(),
                        };
                        (content, b["is_error"].as_bool().unwrap_or(false))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The manifest rows as JSON.
    pub fn manifest(&self) -> Vec<Value> {
        serde_json::from_str(&std::fs::read_to_string(self.runs.join("manifest.json")).unwrap())
            .unwrap()
    }
}
