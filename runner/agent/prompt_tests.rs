//! The prompts every role starts from: system prompt plus tools large enough to be a prompt
//! cache entry (1,024 tokens, the documented minimum) and the same for every session of a role,
//! so caching pays from the first turn; what `--sandbox host` and `--isolate` make true is said.
//!
//! Tokens are estimated as UTF-8 bytes / 4 (the scripted server's estimate); today's Claude
//! tokenizers count at least that many for this text (mostly CJK, 3 bytes a character), so the
//! estimate errs low. `FLOWERBOX_DUMP_PREFIXES=FILE cargo test --lib prompt_tests` writes each
//! role's prefix as a request line for `scripts/prompt-tokens.py`.

use std::sync::Arc;

use super::place::WorkerPlace;
use super::roles::{self, base_system, CommandsRun};
use super::runtime::{Runtime, RuntimeConfig};
use super::session_loop::AgentRun;
use super::spec::AgentSpec;
use super::workbench::Workbench;
use crate::agent::human::Absent;
use crate::role::Role;
use crate::sandbox::host::HostSandboxFactory;
use crate::sandbox::AgentBox;
use crate::session::SqliteSessionStore;

/// The cache entry minimum of the documentation (Claude Sonnet/Opus), in tokens.
const MIN_CACHEABLE: usize = 1024;

/// A provider nothing calls here.
struct NoProvider;

#[async_trait::async_trait]
impl crate::model::Provider for NoProvider {
    fn name(&self) -> &str {
        "none"
    }
    fn default_model(&self) -> &str {
        "claude-sonnet-4-5"
    }
    async fn stream_turn(
        &self,
        _req: &crate::model::Request,
        _sink: crate::model::EventSink<'_>,
        _cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<crate::model::Turn, crate::model::ModelError> {
        Err(crate::model::ModelError::Interrupted)
    }
}

struct Rt {
    _dir: tempfile::TempDir,
    rt: Arc<Runtime>,
}

fn runtime() -> Rt {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("proj");
    std::fs::create_dir_all(&ws).unwrap();
    let wb = Workbench::at(dir.path().join(".flower-proj"))
        .ensure()
        .unwrap();
    let rt = Runtime::new(
        RuntimeConfig::new(
            ws,
            "claude-sonnet-4-5".into(),
            "20260101-000000-abcdef".into(),
        ),
        Arc::new(NoProvider),
        Arc::new(SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap()),
        Arc::new(HostSandboxFactory::new()),
        Some(wb),
        Arc::new(Absent),
        Arc::new(|_| {}),
    );
    Rt {
        _dir: dir,
        rt: Arc::new(rt),
    }
}

/// Every role as the workflows build it, with a name for the report.
fn specs() -> Vec<(&'static str, AgentSpec)> {
    let coder = roles::worker(
        "coder",
        "写代码与测试。要动手实现的活派给它。",
        crate::flow::starter::WORKER_PROMPT,
    );
    vec![
        ("clarifier", roles::clarifier("clarifier", "", true)),
        (
            "coordinator",
            roles::coordinator("coordinator", "", vec![coder.clone()]),
        ),
        ("worker", coder.spec),
        ("judge", roles::judge("judge", "", false)),
        ("judge --judge-can-run", roles::judge("judge", "", true)),
        ("oracle", roles::oracle("旁路问答")),
        (
            "once (default tools)",
            roles::once("", vec!["Read".into(), "Glob".into(), "Grep".into()], None),
        ),
    ]
}

/// System blocks and tools of `spec` run as `agent` in `workdir`, as one JSON request prefix.
fn prefix(
    rt: &Arc<Runtime>,
    spec: &AgentSpec,
    agent: &str,
    workdir: &std::path::Path,
) -> serde_json::Value {
    let abox = AgentBox {
        agent: agent.into(),
        role: spec.role,
        mounts: vec![],
        workdir: workdir.to_path_buf(),
        policy: crate::agent::place::role_policy(spec.role),
        masked: vec![],
    };
    let run = AgentRun::new(
        rt.clone(),
        spec.clone(),
        agent.into(),
        0,
        "s".into(),
        vec![],
        abox,
    );
    let (system, tools) = run.request_prefix();
    serde_json::json!({
        "system": system.iter().map(|s| serde_json::json!({"type": "text", "text": s})).collect::<Vec<_>>(),
        "tools": tools,
        "messages": [],
    })
}

fn estimate(v: &serde_json::Value) -> usize {
    let text: String = v["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["text"].as_str().unwrap().to_string())
        .chain(v["tools"].as_array().unwrap().iter().map(|t| t.to_string()))
        .collect();
    text.len() / 4
}

#[test]
fn every_role_starts_from_one_cacheable_prefix() {
    let t = runtime();
    let mut dump = Vec::new();
    let mut small = Vec::new();
    for (name, spec) in specs() {
        let ws = t.rt.config.workspace.clone();
        let a = prefix(&t.rt, &spec, &format!("{}-1", spec.role), &ws);
        // Another session of the role, elsewhere (another worker in its own worktree).
        let b = prefix(
            &t.rt,
            &spec,
            &format!("{}-2", spec.role),
            &ws.join("wt/worker-2"),
        );
        assert_eq!(
            a, b,
            "{name}: the prefix differs between sessions of the role"
        );
        let tokens = estimate(&a);
        if tokens < MIN_CACHEABLE {
            small.push(format!("{name} ≈ {tokens}"));
        }
        dump.push(a.to_string());
    }
    if let Ok(path) = std::env::var("FLOWERBOX_DUMP_PREFIXES") {
        std::fs::write(path, dump.join("\n") + "\n").unwrap();
    }
    assert!(
        small.is_empty(),
        "system prompt + tools under the {MIN_CACHEABLE} tokens a cache entry needs: {small:?}"
    );
}

#[test]
fn the_prompt_says_where_commands_really_run() {
    let ws = std::path::Path::new("/srv/proj");
    let docker = base_system(ws, CommandsRun::InContainer);
    assert!(docker.contains("Docker 容器"), "{docker}");
    let host = base_system(ws, CommandsRun::OnHost);
    assert!(!host.contains("Docker 容器里执行"), "{host}");
    assert!(host.contains("--sandbox host"), "{host}");
    assert!(host.contains("/srv/proj"));
    // Every role gets the tool-use habits, whatever it is.
    for (name, spec) in specs() {
        let t = runtime();
        let p = prefix(&t.rt, &spec, "x-1", &t.rt.config.workspace.clone());
        let system = p["system"].to_string();
        assert!(system.contains("绝对路径"), "{name}");
        if spec.allows("Edit") {
            assert!(system.contains("先读后改"), "{name}");
        }
        assert_eq!(
            spec.role == Role::Worker,
            system.contains("回话格式固定四段"),
            "{name}"
        );
    }
}

#[test]
fn an_isolated_worker_is_told_its_worktree_branch_and_the_workbench() {
    let t = runtime();
    let place = WorkerPlace {
        workdir: "/srv/.flower-proj-worktrees/run/worker-3".into(),
        mounts: vec![],
        branch: Some("flower/run/worker-3".into()),
        note: None,
    };
    let note = super::dispatch::place_note_for(&t.rt, &place);
    assert!(
        note.contains("/srv/.flower-proj-worktrees/run/worker-3"),
        "{note}"
    );
    assert!(note.contains("分支 flower/run/worker-3"), "{note}");
    assert!(
        note.contains(&t.rt.config.workspace.display().to_string()),
        "{note}"
    );
    assert!(note.contains(".flower-proj"), "{note}");
    let shared = WorkerPlace {
        workdir: t.rt.config.workspace.clone(),
        mounts: vec![],
        branch: None,
        note: None,
    };
    let note = super::dispatch::place_note_for(&t.rt, &shared);
    assert!(note.contains("主工作区"), "{note}");
    assert!(!note.contains("worktree"), "{note}");
    // The place's git note (a read-only .git in the shared workspace) is a line of its own.
    let read_only = WorkerPlace {
        note: Some(super::place::SHARED_GIT_NOTE.into()),
        ..shared
    };
    let note = super::dispatch::place_note_for(&t.rt, &read_only);
    assert!(
        note.contains(&format!("- {}", super::place::SHARED_GIT_NOTE)),
        "{note}"
    );
}
