//! Unit tests of workers prepared before they are asked for (issue 32 §2, §4): the agent loop
//! with an in-process fake provider that reports each `Agent` call to the stream's sink before
//! it returns the turn (as a real stream does at each block's end), and a factory that records,
//! in one log with the model's requests, every sandbox asked for and released. The same on the
//! real engine is `tests/flow_warm.rs`.

use async_trait::async_trait;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::runtime::{RunOptions, Runtime, RuntimeConfig};
use super::{roles, spec::AgentSpec};
use crate::agent::human::Absent;
use crate::model::testing::replay;
use crate::model::*;
use crate::sandbox::host::HostSandboxFactory;
use crate::sandbox::{AgentBox, Sandbox, SandboxError, SandboxFactory};
use crate::session::SqliteSessionStore;

const REPORT: &str = "结论:做完了\n依据:跑了\n产出:无\n未验证:无";

/// What happened, in order: `ask worker-1`, `release worker-2`, `request coordinator 1`,
/// `ended coordinator 1` (its turn is back).
type Log = Arc<Mutex<Vec<String>>>;

/// The coordinator's turns; before its first turn returns, the sink also sees `extra` calls
/// (the calls of an attempt that failed and was retried with other content).
struct Fake {
    coordinator: Vec<Vec<ContentBlock>>,
    extra: Vec<ToolCall>,
    log: Log,
}

#[async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn default_model(&self) -> &str {
        "fake-model"
    }
    async fn stream_turn(
        &self,
        req: &Request,
        sink: EventSink<'_>,
        _c: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        let k = req
            .messages
            .iter()
            .filter(|m| m.role == Speaker::Assistant)
            .count();
        let who = req.caller.agent.clone();
        self.log.lock().unwrap().push(format!("request {who} {k}"));
        if who != "coordinator" {
            // A worker's turn takes a while: a slot it holds stays taken meanwhile.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            return replay(req, Some(&[vec![ContentBlock::text(REPORT)]]), &who);
        }
        let turn = replay(req, Some(&self.coordinator), &who)?;
        if k == 0 {
            for call in &self.extra {
                sink(ModelEvent::ToolCall(call.clone()));
            }
        }
        for call in turn.to_message().tool_uses() {
            sink(ModelEvent::ToolCall(call));
        }
        // The rest of the message takes a while: what its calls started runs meanwhile (the
        // tests run on one thread, so only while this yields).
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        self.log.lock().unwrap().push(format!("ended {who} {k}"));
        Ok(turn)
    }
}

/// Host sandboxes, said to be containers (so workers are prepared), every call logged.
struct Recording {
    host: HostSandboxFactory,
    log: Log,
    boxes: Mutex<Vec<AgentBox>>,
}

#[async_trait]
impl SandboxFactory for Recording {
    fn commands_run(&self) -> crate::sandbox::CommandsRun {
        crate::sandbox::CommandsRun::InContainer
    }
    async fn sandbox(&self, spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.log.lock().unwrap().push(format!("ask {}", spec.agent));
        self.boxes.lock().unwrap().push(spec.clone());
        self.host.sandbox(spec).await
    }
    async fn release(&self, agent: &str) -> Result<(), SandboxError> {
        self.log.lock().unwrap().push(format!("release {agent}"));
        self.host.release(agent).await
    }
    async fn teardown(&self) -> Result<(), SandboxError> {
        self.host.teardown().await
    }
}

fn agent_call(id: &str, writes: Option<&[&str]>) -> ToolCall {
    let mut input = json!({"description": "做事", "prompt": "做一件事", "subagent_type": "coder"});
    if let Some(w) = writes {
        input["writes"] = json!(w);
    }
    ToolCall {
        id: id.into(),
        name: "Agent".into(),
        input,
    }
}

fn block(call: &ToolCall) -> ContentBlock {
    ContentBlock::ToolUse {
        id: call.id.clone(),
        name: call.name.clone(),
        input: call.input.clone(),
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    rt: Arc<Runtime>,
    log: Log,
    factory: Arc<Recording>,
    coordinator: AgentSpec,
}

fn setup(first: Vec<ToolCall>, extra: Vec<ToolCall>) -> Setup {
    setup_with(first, extra, |c| c, |rt| rt)
}

/// Places in the shared workspace, each made only after a pause (a worktree takes a while).
struct SlowPlacement(super::place::SharedPlacement);

#[async_trait]
impl super::place::Placement for SlowPlacement {
    async fn prepare(&self, agent: &str) -> Result<super::place::WorkerPlace, super::PlaceError> {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.0.prepare(agent).await
    }
    async fn finish(
        &self,
        agent: &str,
        place: &super::place::WorkerPlace,
        ok: bool,
        sandbox: Option<super::place::WorkerSandbox<'_>>,
    ) -> Option<String> {
        self.0.finish(agent, place, ok, sandbox).await
    }
}

fn setup_with(
    first: Vec<ToolCall>,
    extra: Vec<ToolCall>,
    config: impl FnOnce(RuntimeConfig) -> RuntimeConfig,
    runtime: impl FnOnce(Runtime) -> Runtime,
) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let log: Log = Arc::default();
    let fake = Arc::new(Fake {
        coordinator: vec![
            first.iter().map(block).collect(),
            vec![ContentBlock::text("都做完了")],
        ],
        extra,
        log: log.clone(),
    });
    let factory = Arc::new(Recording {
        host: HostSandboxFactory::new(),
        log: log.clone(),
        boxes: Mutex::default(),
    });
    let config = config(RuntimeConfig::new(
        ws,
        "fake-model".into(),
        "20260101-000000-abcdef".into(),
    ));
    let rt = Runtime::new(
        config,
        fake,
        Arc::new(SqliteSessionStore::open(dir.path().join("sessions.db")).unwrap()),
        factory.clone(),
        None,
        Arc::new(Absent),
        Arc::new(|_| {}),
    );
    let coordinator = roles::coordinator(
        "coordinator",
        "",
        vec![roles::worker("coder", "写代码", "你负责实现。")],
    );
    Setup {
        _dir: dir,
        rt: Arc::new(runtime(rt)),
        log,
        factory,
        coordinator,
    }
}

impl Setup {
    async fn run(&self) -> Vec<String> {
        let r = self
            .rt
            .run(&self.coordinator, "派一个人做事", RunOptions::default())
            .await;
        assert!(r.ok, "{r:?}");
        self.log.lock().unwrap().clone()
    }

    fn boxes_of(&self, agent: &str) -> Vec<AgentBox> {
        let boxes = self.factory.boxes.lock().unwrap();
        boxes.iter().filter(|b| b.agent == agent).cloned().collect()
    }
}

fn at(log: &[String], line: &str) -> usize {
    log.iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("no `{line}` in {log:#?}"))
}

/// §4: the worker of a streamed `Agent` call is asked for before the message's turn is back;
/// a worker prepared for a call that never ran (an attempt retried with other content) is
/// released before the coordinator's next request, and never runs.
#[tokio::test]
async fn a_streamed_call_is_prepared_and_an_unused_one_is_undone_before_the_next_turn() {
    // Disjoint scopes: both would start at once, both are prepared.
    let used = agent_call("a", Some(&["docs/"]));
    let stale = agent_call("old", Some(&["src/"]));
    let s = setup(vec![used], vec![stale]);
    let log = s.run().await;
    // worker-1 for the stale call (it streamed first), worker-2 for the call that ran.
    assert!(
        at(&log, "ask worker-2") < at(&log, "ended coordinator 0"),
        "{log:#?}"
    );
    assert!(
        at(&log, "ask worker-1") < at(&log, "ended coordinator 0"),
        "{log:#?}"
    );
    assert!(
        at(&log, "release worker-1") < at(&log, "request coordinator 1"),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.starts_with("request worker-1")),
        "{log:#?}"
    );
    // Every box asked for under one name is the same box: the dispatch's own.
    let boxes = s.boxes_of("worker-2");
    assert!(boxes.len() >= 2, "{boxes:#?}");
    assert!(boxes.windows(2).all(|w| w[0] == w[1]), "{boxes:#?}");
}

/// §2: the worker made warm before the coordinator runs is the one its first plain dispatch
/// takes (the same name, the same box).
#[tokio::test]
async fn the_warm_worker_is_taken_by_the_first_plain_dispatch() {
    let s = setup(vec![agent_call("a", None)], vec![]);
    s.rt.warm_worker(&s.coordinator);
    let log = s.run().await;
    // Asked for while the run had not even reached the coordinator's first message's end.
    assert!(
        at(&log, "ask worker-1") < at(&log, "ended coordinator 0"),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("worker-2")), "{log:#?}");
    let boxes = s.boxes_of("worker-1");
    assert!(boxes.windows(2).all(|w| w[0] == w[1]), "{boxes:#?}");
}

/// §2: a first dispatch the warm worker does not fit (a write scope) keeps the name order:
/// the warm one is released before the scoped worker of the same name is asked for, with its
/// own box.
#[tokio::test]
async fn a_warm_worker_that_does_not_fit_is_released_before_its_name_is_reused() {
    let s = setup(vec![agent_call("a", Some(&["src/"]))], vec![]);
    s.rt.warm_worker(&s.coordinator);
    let log = s.run().await;
    let asks: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, l)| *l == "ask worker-1")
        .map(|(i, _)| i)
        .collect();
    assert!(asks.len() >= 2, "{log:#?}");
    let released = at(&log, "release worker-1");
    assert!(asks[0] < released && released < asks[1], "{log:#?}");
    let boxes = s.boxes_of("worker-1");
    assert_ne!(boxes[0], boxes[1], "the scoped worker got the warm box");
    assert!(boxes[1..].windows(2).all(|w| w[0] == w[1]), "{boxes:#?}");
}

/// §2: a warm worker no dispatch took is released when the coordinator's step ends.
#[tokio::test]
async fn an_unused_warm_worker_goes_when_the_coordinators_step_ends() {
    let s = setup(vec![], vec![]);
    s.rt.warm_worker(&s.coordinator);
    let log = s.run().await;
    assert!(log.iter().any(|l| l == "release worker-1"), "{log:#?}");
    assert!(
        !log.iter().any(|l| l.starts_with("request worker")),
        "{log:#?}"
    );
}

/// The dispatches take their slots in the calls' order whether or not a worker was prepared:
/// with two slots and three calls, the two prepared workers (their places still being made when
/// the message ends) run first, and the third waits for a slot. (The prepared ones used to
/// await their places before taking a slot, and the unprepared third took one first: the
/// prepared containers then idled through a whole wave, figure 10 of `scripts/bench.sh`.)
#[tokio::test]
async fn prepared_workers_keep_their_turn_for_a_slot() {
    let calls: Vec<ToolCall> = ["a", "b", "c"]
        .iter()
        .map(|id| agent_call(id, None))
        .collect();
    let s = setup_with(
        calls,
        vec![],
        |mut c| {
            c.max_workers = 2;
            c
        },
        |rt| {
            let ws = rt.config().workspace.clone();
            rt.with_placement(Arc::new(SlowPlacement(super::place::SharedPlacement::new(
                ws, None, None,
            ))))
        },
    );
    let log = s.run().await;
    let third = at(&log, "request worker-3 0");
    assert!(at(&log, "request worker-1 0") < third, "{log:#?}");
    assert!(at(&log, "request worker-2 0") < third, "{log:#?}");
}
