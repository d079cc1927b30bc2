//! Test helpers for the workflow engine: an in-process fake provider whose answers are chosen
//! by role, agent and prompt (turn k = assistant messages already in the request, like the
//! scripted server), and a runtime over a temporary workspace with a real `sessions.db`,
//! manifest and the host sandbox.

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use crate::agent::human::Human;
use crate::agent::{Event, EventKind, Runtime, RuntimeConfig, Workbench};
use crate::model::testing::replay;
use crate::model::*;
use crate::record::manifest::Manifest;
use crate::record::LineageFile;
use crate::role::Role;
use crate::sandbox::host::HostSandboxFactory;
use crate::session::SqliteSessionStore;

/// One scripted agent.
pub(super) struct Rule {
    /// Must equal the caller's role.
    pub role: Role,
    /// The caller's agent name must start with this.
    pub agent: &'static str,
    /// The first user message must contain this.
    pub prompt: &'static str,
    /// Turn k's content.
    pub turns: Vec<Vec<ContentBlock>>,
}

/// A text turn.
pub(super) fn say(text: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

/// A tool-call turn.
pub(super) fn call(name: &str, input: serde_json::Value) -> Vec<ContentBlock> {
    vec![ContentBlock::ToolUse {
        id: format!("t{}", uuid::Uuid::new_v4().simple()),
        name: name.into(),
        input,
    }]
}

/// The fake provider.
pub(super) struct Fake {
    rules: Vec<Rule>,
    /// Every request, in order.
    pub seen: Mutex<Vec<Request>>,
}

impl Fake {
    /// Requests from agents whose name starts with `agent`.
    pub(super) fn requests(&self, agent: &str) -> Vec<Request> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.caller.agent.starts_with(agent))
            .cloned()
            .collect()
    }
}

/// The first user message's text.
pub(super) fn first_user(req: &Request) -> String {
    req.messages.first().map(Message::text).unwrap_or_default()
}

/// The last user message's text.
pub(super) fn last_user(req: &Request) -> String {
    req.messages
        .iter()
        .rev()
        .find(|m| m.role == Speaker::User)
        .map(Message::text)
        .unwrap_or_default()
}

#[async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn default_model(&self) -> &str {
        "claude-sonnet-4-5"
    }
    async fn stream_turn(
        &self,
        req: &Request,
        _sink: EventSink<'_>,
        _c: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        self.seen.lock().unwrap().push(req.clone());
        let first = first_user(req);
        let script = self
            .rules
            .iter()
            .find(|r| {
                r.role == req.caller.role
                    && req.caller.agent.starts_with(r.agent)
                    && first.contains(r.prompt)
            })
            .map(|r| r.turns.as_slice());
        let who = format!("{} ({})", req.caller.agent, req.caller.role);
        replay(req, script, &who)
    }
}

/// A temporary workspace with its runtime.
pub(super) struct Bench {
    _dir: tempfile::TempDir,
    /// The workspace.
    pub ws: PathBuf,
    /// `<ws>/runs`.
    pub runs: PathBuf,
    /// The fake provider.
    pub fake: Arc<Fake>,
    /// Every event.
    pub events: Arc<Mutex<Vec<Event>>>,
}

impl Bench {
    /// A workspace whose agents answer by `rules`.
    pub(super) fn new(rules: Vec<Rule>) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        Bench {
            runs: ws.join("runs"),
            ws,
            _dir: dir,
            fake: Arc::new(Fake {
                rules,
                seen: Mutex::new(Vec::new()),
            }),
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A runtime (a new "process": its own run marker) with `human` on the other end.
    pub(super) fn runtime(&self, human: Arc<dyn Human>) -> Arc<Runtime> {
        let wb = Workbench::at(self.ws.join(".flower")).ensure().unwrap();
        std::fs::create_dir_all(&self.runs).unwrap();
        let store = SqliteSessionStore::open(self.runs.join("sessions.db")).unwrap();
        let run_id = crate::record::steps::new_run_marker();
        let ev = self.events.clone();
        let rt = Runtime::new(
            RuntimeConfig::new(self.ws.clone(), "claude-sonnet-4-5".into(), run_id.clone()),
            self.fake.clone(),
            Arc::new(store),
            Arc::new(HostSandboxFactory::new()),
            Some(wb),
            human,
            Arc::new(move |e| ev.lock().unwrap().push(e)),
        )
        .with_manifest(Arc::new(Manifest::new(
            self.runs.join("manifest.json"),
            run_id,
        )));
        Arc::new(rt)
    }

    /// This workspace's lineage file.
    pub(super) fn lineage(&self) -> LineageFile {
        LineageFile::new(self.runs.join("lineage.json"), &self.ws)
    }

    /// `notes/<file>` of the workbench.
    pub(super) fn note(&self, file: &str) -> PathBuf {
        self.ws.join(".flower/notes").join(file)
    }

    /// The step names `rt` recorded, in order.
    pub(super) fn steps(rt: &Runtime) -> Vec<String> {
        rt.manifest()
            .unwrap()
            .rows()
            .into_iter()
            .map(|r| r.step)
            .collect()
    }

    /// Events of one kind, by a projection.
    pub(super) fn events_where<T>(&self, f: impl Fn(&EventKind) -> Option<T>) -> Vec<T> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| f(&e.kind))
            .collect()
    }
}
