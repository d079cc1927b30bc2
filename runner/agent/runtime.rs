//! [`Runtime`]: runs one agent from a prompt, or a resumed session, to the end of its turn —
//! flower's `Runtime.run` (api.md "Runtime"). Retries after network failures, resumes after a
//! human interrupt, and hands off full contexts all happen inside one [`Runtime::run`] call.

use chrono::Utc;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::event::{Event, EventKind, EventSink};
use super::place::{role_mounts, Placement, SharedPlacement};
use super::session_loop::{AgentRun, LoopEnd};
use super::spec::AgentSpec;
use super::tools::{ToolLimits, ToolRegistry};
use super::workbench::Workbench;
use crate::channel::Human;
use crate::model::price::Cost;
use crate::model::{Provider, Role};
use crate::record::handoff::{window_for, Handoff, MAX_GENERATIONS};
use crate::record::manifest::{epoch_now, Manifest, ManifestEntry};
use crate::sandbox::{AgentBox, SandboxFactory};
use crate::session::{SessionMeta, SessionStore, TrimPolicy};

/// `StepResult.error` of a step stopped by the human (api.md `INTERRUPTED`).
pub const INTERRUPTED: &str = "interrupted-by-human";
/// Appended after the human's words when resuming from an interrupt.
pub const INTERRUPT_NOTE: &str =
    "(上一轮被人打断了。在飞的工具调用返回 interrupted 是打断的正常副作用,不是环境故障;\
需要的话重跑那条命令。)";
/// The prompt of a resume after a network failure.
pub const RESILIENCE_PROMPT: &str = "网络中断过,现在恢复了。接着刚才的工作继续,不要从头开始。";

/// The complete books of one finished step (api.md `StepResult`; the manifest row).
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// Step name as recorded (`干活#round2`).
    pub step: String,
    /// The last session that worked on it (handoffs retire earlier ones).
    pub session_id: Option<String>,
    /// It succeeded.
    pub ok: bool,
    /// Cost, accumulated across retries, handoffs and subagents.
    pub spend: Cost,
    /// Main-thread model turns, accumulated.
    pub num_turns: u32,
    /// The main thread's final text.
    pub text: String,
    /// Why it failed.
    pub error: Option<String>,
    /// Start, UTC.
    pub started_at: chrono::DateTime<Utc>,
    /// End, UTC.
    pub ended_at: chrono::DateTime<Utc>,
    /// Attempts (interrupts and handoffs do not count).
    pub attempts: u32,
    /// Model errors met on the way (never part of `text`).
    pub errors: Vec<String>,
    /// A resume happened mid-step.
    pub resumed: bool,
    /// Sessions retired by handoffs, in order.
    pub retired: Vec<String>,
    /// Context size of the main thread's last call, in tokens.
    pub context: u64,
}

/// The manifest row of a step result.
pub fn manifest_row(r: &StepResult, run: &str) -> ManifestEntry {
    let started = r.started_at.timestamp_millis() as f64 / 1000.0;
    let mut row = ManifestEntry::begin(r.step.clone(), run);
    row.session_id = r.session_id.clone();
    row.ok = r.ok;
    row.cost_usd = r.spend.exact();
    row.num_turns = u64::from(r.num_turns);
    row.text = r.text.clone();
    row.error = r.error.clone();
    row.started_at = started;
    row.attempts = r.attempts;
    row.errors = r.errors.clone();
    row.resumed = r.resumed;
    row.retired = r.retired.clone();
    row.context = (r.context > 0).then_some(r.context);
    row.end_at(r.ended_at.timestamp_millis() as f64 / 1000.0);
    row
}

impl StepResult {
    /// Seconds between start and end.
    pub fn duration_s(&self) -> f64 {
        ((self.ended_at - self.started_at).num_milliseconds() as f64 / 1000.0 * 100.0).round()
            / 100.0
    }
}

/// How to run one step.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Step name (manifest, lineage); the spec's name when `None`.
    pub step: Option<String>,
    /// Resume this session.
    pub resume: Option<String>,
    /// Fork the resumed session instead of continuing it.
    pub fork: bool,
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
    /// Runtime-level attempts after the provider's own retries gave up.
    pub max_attempts: u32,
    /// Text before every agent's rules in its system prompt.
    pub base_system: String,
    /// Context window for handoffs, in tokens (`--window`, else from the model name);
    /// `None` disables handoffs (`--no-handoff`).
    pub handoff_window: Option<u64>,
}

impl RuntimeConfig {
    /// Defaults for `workspace` and `model`.
    pub fn new(workspace: PathBuf, model: String, run_id: String) -> Self {
        let model_for_window = model.clone();
        RuntimeConfig {
            base_system: base_system(&workspace),
            workspace,
            model,
            max_tokens: 16_384,
            max_tokens_ceiling: 64_000,
            run_id,
            tool_limits: ToolLimits::default(),
            trim_large: true,
            max_attempts: 3,
            handoff_window: Some(window_for(&model_for_window, None)),
        }
    }
}

fn base_system(workspace: &std::path::Path) -> String {
    format!(
        "你是 flowerbox 里的一个 agent,在长程编码运行中承担一个角色。工作区在 {ws}。\
         你的命令(Bash)在你自己的 Docker 容器里执行,路径和宿主机上一模一样;文件工具只能碰你被挂载的目录。\
         工具报错是给你看的结果,读懂再决定下一步。",
        ws = workspace.display()
    )
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
    inflight: Mutex<HashMap<String, ManifestEntry>>,
    rescued: std::sync::atomic::AtomicBool,
    pub(crate) registry: ToolRegistry,
    pub(crate) placement: Arc<dyn Placement>,
    pub(crate) config: RuntimeConfig,
    interrupt: Mutex<(CancellationToken, Option<String>)>,
    counters: Mutex<HashMap<String, u32>>,
    started_agents: Mutex<Vec<String>>,
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
        let placement = Arc::new(SharedPlacement::new(
            config.workspace.clone(),
            workbench.as_ref().map(|w| w.root().to_path_buf()),
        ));
        Runtime {
            provider,
            store,
            sandboxes,
            workbench,
            human,
            events: std::sync::RwLock::new(vec![events]),
            manifest: None,
            inflight: Mutex::new(HashMap::new()),
            rescued: std::sync::atomic::AtomicBool::new(false),
            registry: ToolRegistry::standard(),
            placement,
            config,
            interrupt: Mutex::new((CancellationToken::new(), None)),
            counters: Mutex::new(HashMap::new()),
            started_agents: Mutex::new(Vec::new()),
        }
    }

    /// Replaces how workers are placed (worktrees with `--isolate`).
    pub fn with_placement(mut self, placement: Arc<dyn Placement>) -> Self {
        self.placement = placement;
        self
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
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

    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.interrupt
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Takes the pending interrupt message and arms a fresh token.
    fn take_interrupt(&self) -> Option<String> {
        let mut g = self.interrupt.lock().unwrap_or_else(|e| e.into_inner());
        if g.0.is_cancelled() {
            g.0 = CancellationToken::new();
        }
        g.1.take()
    }

    /// A fresh instance name: `worker-1`, `worker-2`, ... (per base name).
    pub fn instance_name(&self, base: &str) -> String {
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let n = c.entry(base.to_string()).or_insert(0);
        *n += 1;
        format!("{base}-{n}")
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
        for a in agents {
            if let Err(e) = self.sandboxes.release(&a).await {
                tracing::warn!(agent = %a, error = %e, "sandbox release failed");
            }
        }
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
        for mut row in rows {
            row.ok = false;
            row.error = Some(why.to_string());
            row.end_at(epoch_now());
            if let Err(e) = m.record(row) {
                tracing::error!(error = %e, "manifest write failed during rescue");
            }
        }
    }

    fn track(&self, result: &StepResult, done: bool) {
        let Some(m) = &self.manifest else { return };
        if self.rescued.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let row = manifest_row(result, m.run());
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if done {
            inflight.remove(&result.step);
        } else {
            inflight.insert(result.step.clone(), row.clone());
        }
        drop(inflight);
        match m.record(row) {
            Ok(Some(recovered)) => self.emit(
                "runner",
                Role::Coordinator,
                0,
                EventKind::Warning {
                    text: recovered.to_string(),
                },
            ),
            Ok(None) => {}
            Err(e) => self.emit(
                "runner",
                Role::Coordinator,
                0,
                EventKind::Error {
                    text: format!("manifest.json 写入失败:{e}"),
                },
            ),
        }
    }

    /// The policy resume uses to load a session.
    pub fn trim_policy(&self) -> TrimPolicy {
        let spill = match &self.workbench {
            Some(w) => w.spill(),
            None => self.config.workspace.join(".flower").join("spill"),
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
                self.workbench.as_ref().map(|w| w.root()),
            ),
            workdir: self.config.workspace.clone(),
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
        let started_at = Utc::now();
        let agent = match spec.role {
            Role::Once | Role::Coordinator | Role::Clarifier => spec.name.clone(),
            _ => self.instance_name(spec.role.as_str()),
        };
        let mut result = StepResult {
            step: step.clone(),
            session_id: None,
            ok: false,
            spend: Cost::default(),
            num_turns: 0,
            text: String::new(),
            error: None,
            started_at,
            ended_at: started_at,
            attempts: 1,
            errors: Vec::new(),
            resumed: opts.resume.is_some(),
            retired: Vec::new(),
            context: 0,
        };
        self.emit(
            &agent,
            spec.role,
            0,
            EventKind::StepStart { step: step.clone() },
        );
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
        self.track(&result, false);
        let abox = self.main_box(&agent, spec.role);
        let mut run = AgentRun::new(
            self.clone(),
            spec.clone(),
            agent.clone(),
            0,
            session,
            history,
            abox.clone(),
        );
        // Cost and turns of sessions retired by handoffs.
        let mut retired_spend = Cost::default();
        let mut retired_turns = 0;
        let mut next_prompt = prompt.to_string();
        loop {
            let end = run.turn(&next_prompt).await;
            result.spend = retired_spend + run.spend();
            result.num_turns = retired_turns + run.turns;
            result.context = run.context_tokens;
            result.errors.extend(run.take_errors());
            result.session_id = Some(run.session_id().to_string());
            match end {
                LoopEnd::Done => {
                    result.ok = true;
                    result.text = run.final_text();
                    break;
                }
                LoopEnd::Interrupted => {
                    // Not a failed attempt: resume the same session with the human's words.
                    let said = self.take_interrupt().unwrap_or_default();
                    next_prompt = if said.trim().is_empty() {
                        format!("继续。{INTERRUPT_NOTE}")
                    } else {
                        format!("{said}\n\n{INTERRUPT_NOTE}")
                    };
                    result.resumed = true;
                }
                LoopEnd::HandoffDue { prompt_too_long } => {
                    let Some(window) = self.config.handoff_window else {
                        result.error = Some("上下文满了,而换代被关掉了(--no-handoff)".into());
                        break;
                    };
                    if result.retired.len() as u32 >= MAX_GENERATIONS {
                        result.text = run.final_text();
                        result.error = Some(format!(
                            "换代已达上限({MAX_GENERATIONS} 代),上下文又满了:这一步停下,交接书在 notes/ 里"
                        ));
                        break;
                    }
                    let doc = self
                        .write_handoff(&mut run, &step, prompt, window, prompt_too_long)
                        .await;
                    result.errors.extend(run.take_errors());
                    retired_spend += run.spend();
                    retired_turns += run.turns;
                    let old = run.session_id().to_string();
                    let meta = SessionMeta {
                        parent: Some(old.clone()),
                        ..meta.clone()
                    };
                    let new_session = match self.store.create(&meta) {
                        Ok(id) => id,
                        Err(e) => {
                            result.error = Some(format!("sessions.db: {e}"));
                            break;
                        }
                    };
                    result.retired.push(old);
                    run = AgentRun::new(
                        self.clone(),
                        spec.clone(),
                        agent.clone(),
                        0,
                        new_session,
                        Vec::new(),
                        abox.clone(),
                    );
                    next_prompt = doc.successor_prompt();
                    result.session_id = Some(run.session_id().to_string());
                    self.track(&result, false);
                }
                LoopEnd::Failed { error, retryable } => {
                    if retryable && result.attempts < self.config.max_attempts {
                        result.attempts += 1;
                        result.resumed = true;
                        next_prompt = RESILIENCE_PROMPT.to_string();
                        self.emit(&agent, spec.role, 0, EventKind::Retry { reason: error });
                        continue;
                    }
                    result.text = run.final_text();
                    result.error = Some(error);
                    break;
                }
                LoopEnd::Stopped(reason) => {
                    result.text = run.final_text();
                    result.error = Some(reason);
                    break;
                }
            }
        }
        self.finish(result, spec, &agent)
    }

    /// Asks the current session for its handoff (budget-exempt), falls back to the degraded
    /// document, writes it to `notes/交接-<step>.md`, and tells the UI.
    async fn write_handoff(
        self: &Arc<Self>,
        run: &mut AgentRun,
        step: &str,
        original_prompt: &str,
        window: u64,
        prompt_too_long: bool,
    ) -> Handoff {
        let used = run.context_tokens;
        let mut why = String::new();
        let mut doc = None;
        if prompt_too_long {
            why = "上下文已经超出模型窗口,没法再让它写".into();
        } else {
            let answer = run
                .handoff_turn(&Handoff::request_prompt(used, window))
                .await;
            match answer {
                Ok(text) => {
                    let h = Handoff::parse(step, &text);
                    if h.is_complete() {
                        doc = Some(h);
                    } else {
                        why = format!("它写的交接书缺:{}", h.missing().join("、"));
                    }
                }
                Err(e) => why = e,
            }
        }
        let degraded = doc.is_none();
        let doc = doc.unwrap_or_else(|| Handoff::degraded(step, original_prompt, &why));
        let path = match &self.workbench {
            Some(wb) => match doc.write(&wb.notes()) {
                Ok(p) => p.display().to_string(),
                Err(e) => {
                    self.emit(
                        run.agent(),
                        run.role(),
                        0,
                        EventKind::Error {
                            text: format!("交接书落盘失败:{e}"),
                        },
                    );
                    String::new()
                }
            },
            None => String::new(),
        };
        let sections = [
            ("现在在做", &doc.doing),
            ("已定的事", &doc.decided),
            ("走不通的", &doc.deadends),
            ("下一步", &doc.next),
        ]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect();
        self.emit(
            run.agent(),
            run.role(),
            0,
            EventKind::Handoff {
                context_tokens: used,
                window,
                path,
                degraded,
                sections,
            },
        );
        doc
    }

    fn finish(&self, mut result: StepResult, spec: &AgentSpec, agent: &str) -> StepResult {
        result.ended_at = Utc::now();
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
                error: result.error.clone(),
            },
        );
        result
    }

    /// Creates, resumes or forks a session; returns (id, history to continue from).
    pub(crate) fn open_session(
        &self,
        meta: &SessionMeta,
        resume: Option<&str>,
        fork: bool,
    ) -> Result<(String, Vec<crate::model::Message>), String> {
        let store_err = |e: crate::session::SessionError| format!("sessions.db: {e}");
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
