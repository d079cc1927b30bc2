//! [`StepResult`]: the complete books of one step, and its manifest row (seed 000
//! "runs/manifest.json" fields); [`StepError`]: why a step did not succeed.

use chrono::Utc;
use std::sync::{Arc, Mutex};

use crate::model::price::Cost;
use crate::model::ModelError;
use crate::record::manifest::ManifestEntry;
use crate::session::SessionError;

/// Why a step did not succeed. The display text is what the manifest's `error` and the screen
/// say; callers decide by the variant, never by the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StepError {
    /// The session store failed.
    #[error("sessions.db: {0}")]
    Store(#[source] StoreFailure),
    /// A model call failed for good (after every attempt of the provider's retry policy).
    #[error("{0}")]
    Model(ModelError),
    /// A record of the run could not be saved (issue 26 §3): whatever the step did, what a
    /// later start needs is not all on disk, so it is not done.
    #[error("有记录没存下,这一步不算完成")]
    Unsaved,
    /// The agent's turn limit was reached.
    #[error("到了轮数上限({0} 轮)")]
    TurnLimit(u32),
    /// The agent's budget was spent.
    #[error("预算用完:已花 {spent},上限 ${limit:.4}")]
    Budget {
        /// What was spent.
        spent: Cost,
        /// The limit, USD.
        limit: f64,
    },
    /// The output was cut off at `max_tokens` this many times in a row.
    #[error("输出连续 {0} 次在 max_tokens 处被截断")]
    CutOff(u32),
    /// The same calls got the same results this many turns in a row, and went on after the
    /// model was told (issue 29 §1.3).
    #[error("同样的调用({name})连续 {times} 次得到同样的结果,提醒过也没换办法:这一步停下")]
    Repeating {
        /// The (first) tool repeated.
        name: String,
        /// Identical turns in a row.
        times: u32,
    },
    /// The context is full and handoffs are off (`--no-handoff`).
    #[error("上下文满了,而换代被关掉了(--no-handoff)")]
    HandoffOff,
    /// The context is full again after this many generations.
    #[error("换代已达上限({0} 代),上下文又满了:这一步停下,交接书在 notes/ 里")]
    Generations(u32),
    /// Handoffs are off and the context is full again after this many compactions.
    #[error("压缩已达上限({count} 次),上下文又满了:窗口 {window} 对这一步太小,调大 --window")]
    Compactions {
        /// Compactions made.
        count: u32,
        /// The window, tokens.
        window: u64,
    },
    /// Handoffs are off, the context is full, and nothing older is left to compact.
    #[error(
        "上下文 {used} tokens 快满了,可较早的对话已经没有可压缩的了(窗口 {window}):这一步停下"
    )]
    NothingToCompact {
        /// The context, tokens.
        used: u64,
        /// The window, tokens.
        window: u64,
    },
    /// A plugin's `UserPromptSubmit` hook blocked the prompt (exit 2; its reason).
    #[error("插件的 UserPromptSubmit 钩子拦下了给 agent 的提示:{0}")]
    PromptBlocked(String),
}

impl From<SessionError> for StepError {
    fn from(e: SessionError) -> Self {
        StepError::Store(StoreFailure(Arc::new(e)))
    }
}

/// A session-store failure kept in a step's result. The store's error is not `Clone` and a
/// result is, so it is shared; two are equal when they are the same failure.
#[derive(Debug, Clone)]
pub struct StoreFailure(Arc<SessionError>);

impl StoreFailure {
    /// The store's error.
    pub fn error(&self) -> &SessionError {
        &self.0
    }
}

impl PartialEq for StoreFailure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for StoreFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl StepError {
    /// The agent stopped at one of its own limits (turns, budget).
    pub fn is_limit(&self) -> bool {
        matches!(self, StepError::TurnLimit(_) | StepError::Budget { .. })
    }
}

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
    pub error: Option<StepError>,
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

/// What an in-flight step has spent so far, counted at every model call of every depth
/// (subagents, retries and handoffs included), so a step stopped by a signal is recorded with
/// what it really cost, not with the zero it started with. Before its first call has answered
/// the cost is unknown, not zero (a call may be in flight and billed): `cost_usd` is null then,
/// as after `kill -9`.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    inner: Mutex<(Cost, u32)>,
    answered: std::sync::atomic::AtomicBool,
}

impl Meter {
    /// One model call: its cost, and whether it was a main-thread turn.
    pub(crate) fn add(&self, cost: Option<f64>, main_turn: bool) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.0.add(cost);
        self.answered
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if main_turn {
            g.1 += 1;
        }
    }

    /// Cost and main-thread turns so far.
    pub(crate) fn read(&self) -> (Cost, u32) {
        let (cost, turns) = *self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let answered = self.answered.load(std::sync::atomic::Ordering::SeqCst);
        (if answered { cost } else { cost.plus(None) }, turns)
    }
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
    row.error = r.error.as_ref().map(ToString::to_string);
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
    /// The books of step `step` starting now: nothing spent, not done yet, one attempt.
    pub fn new(step: String, resumed: bool) -> StepResult {
        let started_at = Utc::now();
        StepResult {
            step,
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
            resumed,
            retired: Vec::new(),
            context: 0,
        }
    }

    /// Seconds between start and end.
    pub fn duration_s(&self) -> f64 {
        ((self.ended_at - self.started_at).num_milliseconds() as f64 / 1000.0 * 100.0).round()
            / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_failure_keeps_the_store_error_as_its_cause() {
        let e = StepError::from(SessionError::Io(std::io::Error::other("disk I/O error")));
        assert_eq!(e.to_string(), "sessions.db: disk I/O error");
        let StepError::Store(failure) = &e else {
            panic!("{e:?}")
        };
        assert!(matches!(failure.error(), SessionError::Io(_)));
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("disk I/O error"));
        // A clone is the same failure; another with the same text is not.
        assert_eq!(e.clone(), e);
        let other = StepError::from(SessionError::Io(std::io::Error::other("disk I/O error")));
        assert_ne!(other, e);
    }

    #[test]
    fn a_meter_before_its_first_answer_reads_unknown_not_zero() {
        let m = Meter::default();
        assert_eq!(m.read().0.exact(), None);
        m.add(Some(0.25), true);
        assert_eq!(m.read(), (Cost::default().plus(Some(0.25)), 1));
        assert_eq!(m.read().0.exact(), Some(0.25));
    }
}
