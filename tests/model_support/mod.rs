//! Shared helpers of the model integration tests: a `scripted-model` process per test (killed
//! on drop), fast retry policies and event collection.
#![allow(dead_code)]

use flowerbox::model::{
    build_provider, Caller, Message, ModelEvent, Provider, ProviderOptions, Request, RetryPolicy,
};
use flowerbox::role::Role;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running `scripted-model` with its scenario and record files.
pub struct ScriptedModel {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    record: PathBuf,
    _dir: tempfile::TempDir,
}

impl ScriptedModel {
    /// Starts the binary on a free port.
    pub fn start(scenario: &Value) -> Self {
        Self::start_on(scenario, "127.0.0.1:0")
    }

    /// Starts the binary listening on `listen`.
    pub fn start_on(scenario: &Value, listen: &str) -> Self {
        Self::start_with(scenario, listen, &[])
    }

    /// Starts the binary on a free port with extra arguments (`--lax`).
    pub fn start_args(scenario: &Value, args: &[&str]) -> Self {
        Self::start_with(scenario, "127.0.0.1:0", args)
    }

    fn start_with(scenario: &Value, listen: &str, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let scenario_path = dir.path().join("scenario.json");
        std::fs::write(&scenario_path, scenario.to_string()).unwrap();
        let record = dir.path().join("record.jsonl");
        let mut child = Command::new(flowerbox_testkit::scripted_model_bin())
            .arg("--scenario")
            .arg(&scenario_path)
            .arg("--listen")
            .arg(listen)
            .arg("--record")
            .arg(&record)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn scripted-model");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "first stdout line: {line:?}"
        );
        ScriptedModel {
            child,
            url,
            record,
            _dir: dir,
        }
    }

    /// Request bodies received so far, in order. A line the server is still writing (no
    /// newline yet) is not a body yet: a test polling this while requests arrive must not
    /// trip over half a line.
    pub fn recorded(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.record).unwrap_or_default();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every tool result the model received ([`tool_results`] of [`ScriptedModel::recorded`]).
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        tool_results(&self.recorded())
    }

    /// An anthropic provider pointed at this server through the public constructor.
    pub fn provider(&self, policy: RetryPolicy) -> Arc<dyn Provider> {
        anthropic_at(&self.url, policy)
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An anthropic provider for `base_url` built by `build_provider` from a lookup closure.
pub fn anthropic_at(base_url: &str, policy: RetryPolicy) -> Arc<dyn Provider> {
    let base = base_url.to_string();
    let get = move |k: &str| match k {
        "ANTHROPIC_BASE_URL" => Some(base.clone()),
        "ANTHROPIC_API_KEY" => Some("sk-test".into()),
        "ANTHROPIC_MODEL" => Some("claude-sonnet-4-5".into()),
        _ => None,
    };
    build_provider(
        &get,
        ProviderOptions {
            retry: policy,
            transport: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Millisecond backoff, no jitter, a short idle timeout and quick probes.
pub fn fast() -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        jitter: 0.0,
        idle_timeout: Duration::from_secs(10),
        probe_interval: Duration::from_millis(100),
        probe_timeout: Duration::from_secs(1),
        max_offline_wait: Duration::from_secs(60),
        ..Default::default()
    }
}

/// A request from `role`/`agent` with one user message.
pub fn request(role: Role, agent: &str, text: &str) -> Request {
    Request {
        model: String::new(),
        system: vec!["You are a test agent.".into()],
        messages: vec![Message::user_text(text)],
        tools: vec![],
        max_tokens: 1024,
        caller: Caller {
            role,
            agent: agent.into(),
        },
    }
}

/// Collects sink events.
#[derive(Default, Clone)]
pub struct Events(Arc<Mutex<Vec<ModelEvent>>>);

impl Events {
    /// Records one event.
    pub fn push(&self, e: ModelEvent) {
        self.0.lock().unwrap().push(e);
    }

    /// Everything recorded.
    pub fn all(&self) -> Vec<ModelEvent> {
        self.0.lock().unwrap().clone()
    }

    /// Text deltas joined.
    pub fn text(&self) -> String {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t),
                _ => None,
            })
            .collect()
    }
}

/// Every tool result in the request bodies `reqs`, each once (requests repeat the history), in
/// order, with the name of its tool: `(name, text, is_error)`. A string content is its text,
/// any other content its JSON.
pub fn tool_results(reqs: &[Value]) -> Vec<(String, String, bool)> {
    let mut names = std::collections::BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for req in reqs {
        for m in req["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                match b["type"].as_str() {
                    Some("tool_use") => {
                        names.insert(b["id"].to_string(), b["name"].as_str().unwrap().to_string());
                    }
                    Some("tool_result") if seen.insert(b["tool_use_id"].to_string()) => {
                        let text = match &b["content"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        out.push((
                            names
                                .get(&b["tool_use_id"].to_string())
                                .cloned()
                                .unwrap_or_default(),
                            text,
                            b["is_error"].as_bool().unwrap_or(false),
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    out
}
