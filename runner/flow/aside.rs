//! The aside oracle (seed 000 "`?` 开头 = 旁路问答", seed 001 "旁路顾问"): a question about the
//! run, answered by a read-only agent that never touches the running one. The frontend sees it
//! as an [`Aside`]; this module is its only implementation.
//!
//! It runs on its own [`Runtime`] whose store is `<run_dir>/aside/sessions.db` and whose step
//! rows go to `<run_dir>/aside/manifest.json` ([`AsideSetup::open`], on the first question),
//! so its cost and lineage never mix into the main manifest. It borrows the main runtime's
//! provider and settings (model, workspace), never its store or sandboxes. Role
//! [`roles::oracle`]: `Read`, `Glob`, `Grep`, at most 12 turns and $0.5. Its context is the
//! frontend's window of recent events plus where the workbench is. Questions run concurrently
//! (the run does not wait a second); what it says is thrown away after it is shown.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::frontend::{
    Aside, AsideFailure, AsideOutcome, AsideReport, ASIDE_EVENT_CHARS, ASIDE_WINDOW,
};
use crate::agent::event::null_sink;
use crate::agent::human::Absent;
use crate::agent::{roles, RunOptions, Runtime, StepError, StepResult};
use crate::record::manifest::Manifest;
use crate::sandbox::host::HostSandboxFactory;
use crate::session::{SessionError, SessionStore, SqliteSessionStore};

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
    ///
    /// # Errors
    /// The directory or the store cannot be created or opened.
    pub fn open(run_dir: &Path, run_id: &str) -> Result<AsideSetup, SessionError> {
        let dir = Self::dir(run_dir);
        crate::fsroot::own::create_dir_all(&dir)?;
        let store = SqliteSessionStore::open(crate::record::layout::sessions_db(&dir))?;
        Ok(AsideSetup {
            store: Arc::new(store),
            manifest: Some(Arc::new(Manifest::new(
                crate::record::layout::manifest(&dir),
                run_id,
            ))),
        })
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
    let message = res
        .error
        .as_ref()
        .map_or_else(|| "未知错误".to_string(), ToString::to_string);
    AsideOutcome::Failed(match &res.error {
        Some(StepError::Store(_)) => AsideFailure::Session(message),
        Some(e) if e.is_limit() => AsideFailure::LimitReached(message),
        _ => AsideFailure::Model(message),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The oracle of one run: builds its runtime on the first question, runs questions
/// concurrently, tracks the pending ones.
pub struct AsideOracle {
    main: Arc<Runtime>,
    /// Given up front, or opened under `run_dir` on the first question.
    setup: Mutex<Option<AsideSetup>>,
    run_dir: Option<PathBuf>,
    tokio: Handle,
    runtime: Mutex<Option<Arc<Runtime>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    asked: AtomicU32,
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

impl AsideOracle {
    /// The oracle of the run `main` drives; its questions run on `tokio`. Its books are
    /// `setup` when given, otherwise [`AsideSetup::open`] under `run_dir` on the first question
    /// (so a run without aside questions creates no `aside/`); with neither, every question
    /// fails as not ready.
    pub fn new(
        main: Arc<Runtime>,
        setup: Option<AsideSetup>,
        run_dir: Option<PathBuf>,
        tokio: Handle,
    ) -> Self {
        AsideOracle {
            main,
            setup: Mutex::new(setup),
            run_dir,
            tokio,
            runtime: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            asked: AtomicU32::new(0),
        }
    }

    /// The aside runtime, built on first use from the main runtime.
    fn aside_runtime(&self) -> Result<Arc<Runtime>, AsideFailure> {
        let mut slot = lock(&self.runtime);
        if let Some(rt) = slot.as_ref() {
            return Ok(rt.clone());
        }
        let mut setup = lock(&self.setup);
        if setup.is_none() {
            let run_dir = self
                .run_dir
                .as_ref()
                .ok_or_else(|| AsideFailure::NotReady("这次运行没有旁路会话存储".into()))?;
            let opened = AsideSetup::open(run_dir, &self.main.config().run_id)
                .map_err(|e| AsideFailure::Session(e.to_string()))?;
            *setup = Some(opened);
        }
        let Some(setup) = setup.as_ref() else {
            return Err(AsideFailure::NotReady("这次运行没有旁路会话存储".into()));
        };
        let main = &self.main;
        let mut rt = Runtime::new(
            main.config().clone(),
            main.provider.clone(),
            setup.store.clone(),
            // The oracle has no Bash: this factory is never asked for a sandbox.
            Arc::new(HostSandboxFactory::new()),
            main.workbench().cloned(),
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
}

#[async_trait]
impl Aside for AsideOracle {
    fn ask(&self, question: &str, window: Vec<String>, report: AsideReport) {
        let rt = match self.aside_runtime() {
            Ok(rt) => rt,
            Err(failed) => return report(AsideOutcome::Failed(failed)),
        };
        let wb = self.main.workbench().cloned();
        let prompt = aside_prompt(&window, wb.as_ref().map(|w| w.root()), question);
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
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
                Err(e) => AsideOutcome::Failed(AsideFailure::Panic(e.to_string())),
            };
            report(outcome);
        });
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(watcher);
    }

    fn pending(&self) -> usize {
        lock(&self.tasks)
            .iter()
            .filter(|t| !t.is_finished())
            .count()
    }

    async fn wait(&self, limit: Duration) -> usize {
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

    /// Polls every 50 ms (the answers run on the tokio runtime's workers, not on this thread),
    /// aborts what is left after `limit`.
    fn wait_blocking(&self, limit: Duration) -> usize {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        r.error = Some(StepError::TurnLimit(12));
        assert!(matches!(
            outcome_of(&r),
            AsideOutcome::Failed(f) if f.kind() == "LimitReached"
        ));
        r.error = Some(StepError::Model(crate::model::ModelError::Setup(
            "连不上 api".into(),
        )));
        assert!(matches!(
            outcome_of(&r),
            AsideOutcome::Failed(f) if f.kind() == "ModelError" && f.message() == "连不上 api"
        ));
        r.error = Some(StepError::from(crate::session::SessionError::Io(
            std::io::Error::other("disk I/O error"),
        )));
        assert!(matches!(
            outcome_of(&r),
            AsideOutcome::Failed(f) if f.kind() == "SessionError"
        ));
        r.error = Some(StepError::Budget {
            spent: Default::default(),
            limit: 0.5,
        });
        assert!(matches!(
            outcome_of(&r),
            AsideOutcome::Failed(f) if f.kind() == "LimitReached"
        ));
        r.error = Some(StepError::CutOff(3));
        assert!(matches!(
            outcome_of(&r),
            AsideOutcome::Failed(f) if f.kind() == "ModelError"
        ));
    }
}
