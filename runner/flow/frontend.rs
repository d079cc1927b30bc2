//! The UI seam of a run (seed 000 "运行中怎么和它说话", "屏幕上都是什么", "Ctrl-C"): what a
//! [`Frontend`] is told and what it may do back. The workflows know only this module; the
//! terminal (`crate::term`) implements it, and the command line picks which frontend a run gets.
//!
//! - **Told**: every [`Event`](crate::agent::Event) through [`Frontend::events`] (the runtime's
//!   and the question channel's), and the run's own moments as a typed [`Notice`] (the wake
//!   banner, the archive note, the closing line) — the frontend decides how they look.
//! - **May do** ([`Frontend::attach`], once the run's services exist): answer and write through
//!   the [`HumanChannel`], interrupt and resume the round through [`Interrupt`], ask the aside
//!   oracle through [`Aside`]. Nothing else of the run is reachable from a frontend.
//! - **Ctrl-C**: a frontend that handles SIGINT itself says so ([`Frontend::owns_interrupt`])
//!   and resolves [`Frontend::quit_requested`] on the second press; otherwise the driver treats
//!   SIGINT as flower's pipe mode does (the first one ends the run).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::agent::{EventSink, Runtime};
use crate::channel::HumanChannel;

/// Where a run's services tell their [`Notice`]s (the frontend's [`Frontend::notice`]).
pub type NoticeSink = Arc<dyn Fn(&Notice) + Send + Sync>;

/// `frontend`'s [`Frontend::notice`] as a [`NoticeSink`].
pub fn notice_sink(frontend: &Arc<dyn Frontend>) -> NoticeSink {
    let frontend = frontend.clone();
    Arc::new(move |n: &Notice| frontend.notice(n))
}

/// Events the frontend keeps for the aside oracle's context (the newest ones).
pub const ASIDE_WINDOW: usize = 60;
/// Characters kept of each event in that window.
pub const ASIDE_EVENT_CHARS: usize = 200;

/// What the wake banner reports (seed 000 "唤醒横幅").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeInfo {
    /// The workspace (home shown as `~`).
    pub workspace: PathBuf,
    /// Checks in the goal; shown only when there is a checklist.
    pub checks: Option<usize>,
    /// The work session's last context in tokens; shown only when known.
    pub work_context: Option<u64>,
    /// The wake count (this run included).
    pub woke: u32,
}

/// The totals of the closing line (`总花费 $X · 清单 <manifest>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Closing {
    /// Known cost of this process's steps, USD.
    pub cost_usd: f64,
    /// Every step's cost is known.
    pub all_known: bool,
    /// Some step's cost is known (neither: the total is unknown, not zero).
    pub any_known: bool,
    /// The manifest the steps are in.
    pub manifest: PathBuf,
}

/// A moment of the run that is not an agent's event.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// `--new` moved the previous run's brief, goal and lineage into this directory.
    Archived(PathBuf),
    /// This run continues the last one.
    Wake(WakeInfo),
    /// What the human said on a wake was appended to the brief (the goal is re-derived and
    /// the coordinator is told).
    Amended,
    /// `--clarify-only` on a directory whose brief is complete, with a request: the brief is
    /// left as it is (flower: a no-op; re-clarifying takes `--new`).
    AlreadyClarified,
    /// What the sandbox backend did while the run was set up that the human should know
    /// (containers of dead runs removed), one line each.
    Sandbox(Vec<String>),
    /// Removing the run's containers at its end failed (why).
    TeardownFailed(String),
    /// A record was damaged and what was done about it (moved aside, rebuilt), or a record
    /// that does not match the others; shown as a warning before the run goes on.
    Recovered(String),
    /// Configuration the next run reads from the workspace (`.env`, `.mcp.json`, the workflow
    /// file, ...) that this run created, changed or removed: named before the closing line,
    /// with the names (never the values) of the keys or servers that changed.
    ConfigChanged(Vec<super::watch::ConfigChange>),
    /// The run is over: the closing line.
    Closing(Closing),
    /// A single agent (`once`) is done: the running totals (context, cost, time).
    Totals,
}

/// Interrupts the current round (the first Ctrl-C) and lets it go on; [`Runtime`] is one.
/// Called from the frontend's signal task and input thread.
pub trait Interrupt: Send + Sync {
    /// Interrupts cooperatively and holds the interrupted work until [`Interrupt::resume`].
    fn pause(&self);
    /// Lets the held work resume with `message` (empty = say nothing).
    fn resume(&self, message: &str);
}

impl Interrupt for Runtime {
    fn pause(&self) {
        Runtime::pause(self);
    }
    fn resume(&self, message: &str) {
        Runtime::resume(self, message);
    }
}

/// Why an aside question got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsideFailure {
    /// The oracle cannot be asked yet (no run, no place for its books).
    NotReady(String),
    /// Its session store failed.
    Session(String),
    /// It hit its turn or budget limit.
    LimitReached(String),
    /// Its model call failed.
    Model(String),
    /// Its task died.
    Panic(String),
}

impl AsideFailure {
    /// The failure class as the screen names it (`NotReady`, `SessionError`, `LimitReached`,
    /// `ModelError`, `Panic`).
    pub fn kind(&self) -> &'static str {
        match self {
            AsideFailure::NotReady(_) => "NotReady",
            AsideFailure::Session(_) => "SessionError",
            AsideFailure::LimitReached(_) => "LimitReached",
            AsideFailure::Model(_) => "ModelError",
            AsideFailure::Panic(_) => "Panic",
        }
    }

    /// What happened.
    pub fn message(&self) -> &str {
        match self {
            AsideFailure::NotReady(m)
            | AsideFailure::Session(m)
            | AsideFailure::LimitReached(m)
            | AsideFailure::Model(m)
            | AsideFailure::Panic(m) => m,
        }
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
    /// It failed.
    Failed(AsideFailure),
}

/// Receives an aside outcome, from any thread.
pub type AsideReport = Arc<dyn Fn(AsideOutcome) + Send + Sync>;

/// The aside oracle as a frontend sees it (seed 000 "`?` 开头 = 旁路问答"): questions in, outcomes
/// out, never touching the running agents.
#[async_trait]
pub trait Aside: Send + Sync {
    /// Asks `question` in the background; `window` is the run's recent events as the frontend
    /// described them (oldest first, at most [`ASIDE_WINDOW`], each at most
    /// [`ASIDE_EVENT_CHARS`] characters). The outcome goes to `report`. Callable from any
    /// thread.
    fn ask(&self, question: &str, window: Vec<String>, report: AsideReport);
    /// Questions still being answered.
    fn pending(&self) -> usize;
    /// Waits up to `limit` for the pending answers (they are reported as they arrive); returns
    /// how many were still pending when the wait ended (those are dropped).
    async fn wait(&self, limit: Duration) -> usize;
    /// [`Aside::wait`] for synchronous callers (never on a tokio worker's only thread).
    fn wait_blocking(&self, limit: Duration) -> usize;
}

/// What a frontend may do to a run, handed over by [`Frontend::attach`].
#[derive(Clone)]
pub struct Controls {
    /// The question channel: answers, skips, unprompted lines (inbox + brief).
    pub channel: HumanChannel,
    /// The round, for Ctrl-C.
    pub interrupt: Arc<dyn Interrupt>,
    /// The aside oracle.
    pub aside: Arc<dyn Aside>,
}

/// What the human sees and types during a run. See the module doc.
#[async_trait]
pub trait Frontend: Send + Sync {
    /// The outlet for every event of the run.
    fn events(&self) -> EventSink;
    /// Shows a moment of the run that is not an event.
    fn notice(&self, notice: &Notice);
    /// The run's services exist: start taking input.
    fn attach(&self, _controls: Controls) {}
    /// Whether this frontend handles SIGINT itself (then the driver leaves it alone).
    fn owns_interrupt(&self) -> bool {
        false
    }
    /// Resolves when the human wants out (the second Ctrl-C); never, by default.
    async fn quit_requested(&self) {
        std::future::pending::<()>().await
    }
    /// The run is over: stop taking input.
    fn detach(&self) {}
}
