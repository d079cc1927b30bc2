//! The aside oracle (seed 000 "`?` 开头 = 旁路问答", seed 001 "旁路顾问"): a line starting with
//! `?` (or the fullwidth `？`) is a question about the run, answered by a read-only agent that
//! never touches the running one.
//!
//! It runs on its own [`Runtime`] whose store is `<run_dir>/aside/sessions.db` and whose step
//! rows go to `<run_dir>/aside/manifest.json` ([`AsideSetup::open`]), so its cost and lineage
//! never mix into the main manifest. Role [`roles::oracle`]: `Read`, `Glob`, `Grep`, at
//! most 12 turns and $0.5. Its context is the recent event window — the last
//! [`ASIDE_WINDOW`] events, thinking and prompt events excluded, each cut to
//! [`ASIDE_EVENT_CHARS`] characters — plus where the workbench is. It runs concurrently (the
//! run does not wait a second); at exit the console waits up to [`ASIDE_WAIT`] for answers
//! still coming. What it says is thrown away after it is shown.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::agent::event::null_sink;
use crate::agent::{roles, Event, EventKind, RunOptions, Runtime, StepResult, Workbench};
use crate::channel::Absent;
use crate::record::manifest::Manifest;
use crate::sandbox::host::HostSandboxFactory;
use crate::session::{SessionError, SessionStore, SqliteSessionStore};

/// Events kept for the oracle's context.
pub const ASIDE_WINDOW: usize = 60;
/// Characters kept of each event.
pub const ASIDE_EVENT_CHARS: usize = 200;
/// Longest wait for pending answers at exit.
pub const ASIDE_WAIT: Duration = Duration::from_secs(120);
/// The oracle's step name; each question is step `旁路问答#<n>` in the aside manifest (the
/// manifest keeps one row per step name, and every question is its own step).
pub const ASIDE_STEP: &str = "旁路问答";

/// The aside manifest's step name of question `n` (from 1): `旁路问答#1`, `旁路问答#2`, …
pub fn aside_step(n: u32) -> String {
    format!("{ASIDE_STEP}#{n}")
}

/// Where the oracle keeps its books.
#[derive(Clone)]
pub struct AsideSetup {
    /// Its own session store (`<run_dir>/aside/sessions.db`).
    pub store: Arc<dyn SessionStore>,
    /// Its own manifest (`<run_dir>/aside/manifest.json`); `None` keeps none.
    pub manifest: Option<Arc<Manifest>>,
}

impl std::fmt::Debug for AsideSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsideSetup")
            .field(
                "manifest",
                &self.manifest.as_ref().map(|m| m.path().to_path_buf()),
            )
            .finish_non_exhaustive()
    }
}

impl AsideSetup {
    /// The aside directory of a run directory: `<run_dir>/aside`.
    pub fn dir(run_dir: &Path) -> PathBuf {
        run_dir.join("aside")
    }

    /// Opens (creating) `<run_dir>/aside/sessions.db` and `<run_dir>/aside/manifest.json`;
    /// `run_id` is the main run's marker, so aside rows name the run they were asked in.
    pub fn open(run_dir: &Path, run_id: &str) -> Result<AsideSetup, SessionError> {
        let dir = Self::dir(run_dir);
        crate::fsroot::own::create_dir_all(&dir)?;
        let store = SqliteSessionStore::open(dir.join("sessions.db"))?;
        Ok(AsideSetup {
            store: Arc::new(store),
            manifest: Some(Arc::new(Manifest::new(dir.join("manifest.json"), run_id))),
        })
    }
}

/// How one aside question ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AsideOutcome {
    /// The answer and its cost (`None` when unknown).
    Answer {
        /// The oracle's final text.
        text: String,
        /// Cost in USD.
        cost_usd: Option<f64>,
    },
    /// It failed: the failure line shows `<kind>: <message>`.
    Failed {
        /// Failure class (`ModelError`, `LimitReached`, `SessionError`, `NotReady`, `Panic`).
        kind: String,
        /// What happened.
        message: String,
    },
}

/// The first `n` characters of `text` on one line.
fn cut(text: &str, n: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.chars().take(n).collect()
}

/// One event as a line of the oracle's window; `None` for the events the window leaves out:
/// thinking and prompts (seed 000), and flowerbox's streaming pieces and usage records, which
/// only repeat what the complete text and the step end carry.
pub fn describe_event(ev: &Event) -> Option<String> {
    let body = match &ev.kind {
        EventKind::Thinking { .. }
        | EventKind::Prompt { .. }
        | EventKind::TextDelta { .. }
        | EventKind::Usage { .. } => return None,
        EventKind::StepStart { step } => format!("步骤开始:{step}"),
        EventKind::StepEnd {
            step,
            ok,
            turns,
            error,
            ..
        } => {
            let how = if *ok { "完成" } else { "失败" };
            match error {
                Some(e) => format!("步骤{how}:{step},{turns} 轮:{e}"),
                None => format!("步骤{how}:{step},{turns} 轮"),
            }
        }
        EventKind::Text { text } => format!("说:{text}"),
        EventKind::ToolCall { name, summary, .. } => {
            if summary.starts_with(name.as_str()) {
                format!("调用 {summary}")
            } else {
                format!("调用 {name}: {summary}")
            }
        }
        EventKind::ToolResult {
            name,
            is_error,
            text,
            ..
        } => {
            let tag = if *is_error { "报错" } else { "结果" };
            format!("{name} {tag}:{text}")
        }
        EventKind::Dispatch { child, description } => format!("派人 {child}:{description}"),
        EventKind::Question {
            question, options, ..
        } => {
            if options.is_empty() {
                format!("问人:{question}")
            } else {
                format!("问人:{question}(选项:{})", options.join(" / "))
            }
        }
        EventKind::Answer { outcome, text } => format!("提问结果 {outcome} {text}"),
        EventKind::Retry { reason } => format!("重试:{reason}"),
        EventKind::Handoff {
            context_tokens,
            path,
            ..
        } => format!("换代:上下文 {context_tokens} tokens,交接书 {path}"),
        EventKind::Compacted {
            context_tokens,
            folded,
            ..
        } => format!("压缩:上下文 {context_tokens} tokens,较早的 {folded} 条消息换成摘要"),
        EventKind::Warning { text } => format!("警告:{text}"),
        EventKind::Error { text } => format!("错误:{text}"),
        EventKind::GoalUnverifiable { total, items, .. } => {
            format!("目标 {total} 条里有 {} 条此环境无法验证", items.len())
        }
        EventKind::Inbox { text } => format!("人追加的需求已送达:{text}"),
    };
    let who = if ev.depth > 0 {
        format!("{}(子)", ev.agent)
    } else {
        ev.agent.clone()
    };
    Some(cut(&format!("[{who}] {body}"), ASIDE_EVENT_CHARS))
}

/// The last [`ASIDE_WINDOW`] described events.
#[derive(Debug, Default, Clone)]
pub struct EventWindow {
    lines: VecDeque<String>,
}

impl EventWindow {
    /// Adds one event (ignored when [`describe_event`] leaves it out).
    pub fn push(&mut self, ev: &Event) {
        if let Some(line) = describe_event(ev) {
            if self.lines.len() == ASIDE_WINDOW {
                self.lines.pop_front();
            }
            self.lines.push_back(line);
        }
    }

    /// The lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

/// The oracle's prompt: the window, where the workbench is, the question.
pub fn aside_prompt(window: &[String], workbench: Option<&Path>, question: &str) -> String {
    let mut out = format!(
        "那次运行还在跑。下面是它最近的事件(最多 {ASIDE_WINDOW} 条,旧的在前,每条截断到 {ASIDE_EVENT_CHARS} 字符):\n"
    );
    if window.is_empty() {
        out.push_str("(还没有事件)\n");
    }
    for (i, l) in window.iter().enumerate() {
        out.push_str(&format!("{}. {l}\n", i + 1));
    }
    match workbench {
        Some(root) => out.push_str(&format!(
            "\n工作台在 {root}:需求确认书 {root}/notes/需求.md,目标 {root}/notes/目标.md,\
             跨步骤记录 {root}/notes/,长产出 {root}/artifacts/,脚本 {root}/scripts/,\
             落盘的长工具结果 {root}/spill/,索引 {root}/INDEX.md。\n",
            root = root.display()
        )),
        None => out.push_str("\n这次运行没有工作台。\n"),
    }
    out.push_str(&format!("\n问题:{question}"));
    out
}

/// What a finished oracle step means for the screen.
pub fn outcome_of(res: &StepResult) -> AsideOutcome {
    if res.ok {
        return AsideOutcome::Answer {
            text: res.text.clone(),
            cost_usd: res.spend.exact(),
        };
    }
    let message = res.error.clone().unwrap_or_else(|| "未知错误".to_string());
    let kind = if message.starts_with("sessions.db") {
        "SessionError"
    } else if message.contains("轮数上限") || message.contains("预算用完") {
        "LimitReached"
    } else {
        "ModelError"
    };
    AsideOutcome::Failed {
        kind: kind.to_string(),
        message,
    }
}

/// Receives each outcome (the console renders it).
pub type AsideReport = Arc<dyn Fn(AsideOutcome) + Send + Sync>;

/// The oracle: keeps the event window, runs questions concurrently, tracks pending ones.
pub struct AsideOracle {
    /// Given up front, or opened under `run_dir` on the first question.
    setup: Mutex<Option<AsideSetup>>,
    run_dir: Option<PathBuf>,
    workbench: Option<Workbench>,
    tokio: Handle,
    report: AsideReport,
    window: Mutex<EventWindow>,
    main: Mutex<Option<Arc<Runtime>>>,
    runtime: Mutex<Option<Arc<Runtime>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    asked: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for AsideOracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsideOracle")
            .field("setup", &*lock(&self.setup))
            .field("run_dir", &self.run_dir)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsideOracle {
    /// An oracle whose questions run on `tokio` and whose outcomes go to `report`. Its books
    /// are `setup` when given, otherwise [`AsideSetup::open`] under `run_dir` on the first
    /// question (so a run without aside questions creates no `aside/`); with neither, every
    /// question fails with a `NotReady` line. `workbench` overrides the main runtime's for the
    /// description (normally the same one).
    pub fn new(
        setup: Option<AsideSetup>,
        run_dir: Option<PathBuf>,
        workbench: Option<Workbench>,
        tokio: Handle,
        report: AsideReport,
    ) -> Self {
        AsideOracle {
            setup: Mutex::new(setup),
            run_dir,
            workbench,
            tokio,
            report,
            window: Mutex::new(EventWindow::default()),
            main: Mutex::new(None),
            runtime: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            asked: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The main run's runtime: the oracle borrows its provider and settings (model,
    /// workspace), never its store or its sandboxes.
    pub fn attach(&self, main: Arc<Runtime>) {
        *lock(&self.main) = Some(main);
        *lock(&self.runtime) = None;
    }

    /// Feeds one event of the main run into the window.
    pub fn observe(&self, ev: &Event) {
        lock(&self.window).push(ev);
    }

    /// The current window (oldest first).
    pub fn window(&self) -> Vec<String> {
        lock(&self.window).lines()
    }

    fn workbench(&self) -> Option<Workbench> {
        self.workbench.clone().or_else(|| {
            lock(&self.main)
                .as_ref()
                .and_then(|m| m.workbench().cloned())
        })
    }

    /// The aside runtime, built on first use from the attached main runtime.
    fn aside_runtime(&self) -> Result<Arc<Runtime>, AsideOutcome> {
        let not_ready = |message: &str| AsideOutcome::Failed {
            kind: "NotReady".into(),
            message: message.into(),
        };
        let mut slot = lock(&self.runtime);
        if let Some(rt) = slot.as_ref() {
            return Ok(rt.clone());
        }
        let main = lock(&self.main)
            .clone()
            .ok_or_else(|| not_ready("运行还没开始,没有可问的上下文"))?;
        let mut setup = lock(&self.setup);
        if setup.is_none() {
            let run_dir = self
                .run_dir
                .as_ref()
                .ok_or_else(|| not_ready("这次运行没有旁路会话存储"))?;
            let opened = AsideSetup::open(run_dir, &main.config().run_id).map_err(|e| {
                AsideOutcome::Failed {
                    kind: "SessionError".into(),
                    message: e.to_string(),
                }
            })?;
            *setup = Some(opened);
        }
        let Some(setup) = setup.as_ref() else {
            return Err(not_ready("这次运行没有旁路会话存储"));
        };
        let mut rt = Runtime::new(
            main.config().clone(),
            main.provider.clone(),
            setup.store.clone(),
            // The oracle has no Bash: this factory is never asked for a sandbox.
            Arc::new(HostSandboxFactory::new()),
            self.workbench(),
            Arc::new(Absent),
            null_sink(),
        );
        if let Some(m) = &setup.manifest {
            rt = rt.with_manifest(m.clone());
        }
        let rt = Arc::new(rt);
        *slot = Some(rt.clone());
        Ok(rt)
    }

    /// Asks `question` in the background; the outcome goes to the report callback. Callable
    /// from any thread.
    pub fn ask(&self, question: &str) {
        let report = self.report.clone();
        let rt = match self.aside_runtime() {
            Ok(rt) => rt,
            Err(failed) => return report(failed),
        };
        let wb = self.workbench();
        let prompt = aside_prompt(&self.window(), wb.as_ref().map(|w| w.root()), question);
        let n = self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let work = self.tokio.spawn(async move {
            let spec = roles::oracle(ASIDE_STEP);
            let res = rt
                .run(
                    &spec,
                    &prompt,
                    RunOptions {
                        step: Some(aside_step(n)),
                        ..RunOptions::default()
                    },
                )
                .await;
            outcome_of(&res)
        });
        let watcher = self.tokio.spawn(async move {
            let outcome = match work.await {
                Ok(o) => o,
                Err(e) => AsideOutcome::Failed {
                    kind: "Panic".into(),
                    message: e.to_string(),
                },
            };
            report(outcome);
        });
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(watcher);
    }

    /// Questions still being answered.
    pub fn pending(&self) -> usize {
        lock(&self.tasks)
            .iter()
            .filter(|t| !t.is_finished())
            .count()
    }

    /// [`AsideOracle::wait`] for synchronous callers: polls every 50 ms (the answers run on the
    /// tokio runtime's workers, not on this thread), aborts what is left after `limit`.
    pub fn wait_blocking(&self, limit: Duration) -> usize {
        let deadline = std::time::Instant::now() + limit;
        while self.pending() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.tasks));
        let mut left = 0;
        for t in tasks.into_iter().filter(|t| !t.is_finished()) {
            left += 1;
            t.abort();
        }
        left
    }

    /// Waits up to `limit` for the pending answers (they are shown as they arrive); returns
    /// how many were still pending when the wait ended.
    pub async fn wait(&self, limit: Duration) -> usize {
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.tasks));
        let pending: Vec<JoinHandle<()>> = tasks.into_iter().filter(|t| !t.is_finished()).collect();
        if pending.is_empty() {
            return 0;
        }
        let aborts: Vec<_> = pending.iter().map(|t| t.abort_handle()).collect();
        let _ = tokio::time::timeout(limit, futures::future::join_all(pending)).await;
        let left = aborts.iter().filter(|a| !a.is_finished()).count();
        for a in aborts {
            a.abort();
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Role;

    fn ev(depth: u32, kind: EventKind) -> Event {
        Event {
            agent: if depth == 0 {
                "coordinator"
            } else {
                "worker-1"
            }
            .into(),
            role: Role::Coordinator,
            depth,
            kind,
        }
    }

    #[test]
    fn the_window_skips_thinking_and_prompts_and_keeps_the_last_60() {
        let mut w = EventWindow::default();
        w.push(&ev(0, EventKind::Thinking { text: "嗯".into() }));
        w.push(&ev(0, EventKind::Prompt { text: "p".into() }));
        w.push(&ev(0, EventKind::TextDelta { text: "d".into() }));
        assert!(w.lines().is_empty());
        for i in 0..70 {
            w.push(&ev(
                0,
                EventKind::Text {
                    text: format!("第 {i} 条"),
                },
            ));
        }
        let lines = w.lines();
        assert_eq!(lines.len(), ASIDE_WINDOW);
        assert_eq!(lines[0], "[coordinator] 说:第 10 条");
        assert_eq!(lines[59], "[coordinator] 说:第 69 条");
    }

    #[test]
    fn each_event_is_cut_to_200_characters_on_one_line() {
        let long = "长".repeat(500);
        let line = describe_event(&ev(
            1,
            EventKind::ToolResult {
                id: "t".into(),
                name: "Bash".into(),
                is_error: true,
                text: format!("第一行\n{long}"),
            },
        ))
        .unwrap();
        assert_eq!(line.chars().count(), ASIDE_EVENT_CHARS);
        assert!(line.starts_with("[worker-1(子)] Bash 报错:第一行 长长"));
        assert!(!line.contains('\n'));
    }

    #[test]
    fn tool_calls_are_described_once() {
        let call = |summary: &str| {
            describe_event(&ev(
                0,
                EventKind::ToolCall {
                    id: "t".into(),
                    name: "Bash".into(),
                    summary: summary.into(),
                },
            ))
            .unwrap()
        };
        assert_eq!(
            call("Bash: cargo test"),
            "[coordinator] 调用 Bash: cargo test"
        );
        assert_eq!(call("cargo test"), "[coordinator] 调用 Bash: cargo test");
    }

    #[test]
    fn the_prompt_holds_window_workbench_and_question() {
        let p = aside_prompt(
            &["[coordinator] 说:先写解析器".to_string()],
            Some(Path::new("/w/.flower")),
            "现在到哪一步了",
        );
        assert!(p.contains("1. [coordinator] 说:先写解析器\n"));
        assert!(p.contains("工作台在 /w/.flower"));
        assert!(p.contains("/w/.flower/notes/需求.md"));
        assert!(p.ends_with("问题:现在到哪一步了"));
        let p = aside_prompt(&[], None, "q");
        assert!(p.contains("(还没有事件)"));
        assert!(p.contains("这次运行没有工作台"));
    }

    #[test]
    fn outcomes() {
        let now = chrono::Utc::now();
        let mut r = StepResult {
            step: ASIDE_STEP.into(),
            session_id: None,
            ok: true,
            spend: Default::default(),
            num_turns: 1,
            text: "在第二轮".into(),
            error: None,
            started_at: now,
            ended_at: now,
            attempts: 1,
            errors: vec![],
            resumed: false,
            retired: vec![],
            context: 0,
        };
        r.spend.add(Some(0.0123));
        assert_eq!(
            outcome_of(&r),
            AsideOutcome::Answer {
                text: "在第二轮".into(),
                cost_usd: Some(0.0123)
            }
        );
        r.ok = false;
        r.error = Some("到了轮数上限(12 轮)".into());
        assert!(
            matches!(outcome_of(&r), AsideOutcome::Failed { kind, .. } if kind == "LimitReached")
        );
        r.error = Some("连不上 api".into());
        assert!(
            matches!(outcome_of(&r), AsideOutcome::Failed { kind, .. } if kind == "ModelError")
        );
    }
}
