//! [`HumanChannel`]: the question channel between agents and the human (seed 003 "der
//! Frage-Kanal", seed 000 "超时", "你敲的东西去哪了").
//!
//! Agents call [`Human::ask`], which blocks until the human answers, skips, the timeout
//! passes, or — without blocking — the budget refuses. Long runs are normally unattended, so
//! every way of not getting an answer settles with a fixed text telling the model to decide
//! itself and record the assumption in 未知与假设. The UI side (terminal input thread, a web
//! handler) calls [`HumanChannel::answer`], [`HumanChannel::decline`] and
//! [`HumanChannel::send`] from any thread: state sits behind a `std::sync::Mutex` and replies
//! travel over a `tokio::sync::oneshot`, whose `send` is synchronous and thread-safe.
//!
//! The three "0 / None" semantics differ: `max_asks: None` is unlimited and `Some(0)` forbids
//! asking; `timeout_s: None` waits forever and `Some(t <= 0)` settles as timeout at once,
//! without showing the question or emitting an event; [`HumanChannel::remaining`] is −1 when
//! unlimited.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::agent::human::{AskOutcome, Asker, Human};
use crate::agent::{Event, EventKind, EventSink};
use crate::role::Role;

/// Where what the human says during a run is written down, so that it survives step
/// boundaries: the workflows append it to the brief (`notes/需求.md`). The channel only calls
/// it; what the file looks like is the implementor's business.
pub trait Amend: Send + Sync {
    /// Appends `text`; `Ok(false)` when nothing was appended.
    ///
    /// # Errors
    /// The file could not be written (the channel records it and carries on).
    fn amend(&self, text: &str) -> std::io::Result<bool>;
    /// What is amended, for messages.
    fn target(&self) -> &Path;
}

/// How the channel behaves; `Default` is flower's: unlimited asks, 30 minutes, no files.
#[derive(Clone)]
pub struct HumanConfig {
    /// Hard question budget; `None` unlimited, `Some(0)` asking forbidden (`--asks`, where any
    /// negative value means `None`).
    pub max_asks: Option<u32>,
    /// Seconds to wait for an answer; `None` forever, `<= 0` (or NaN) settles as timeout at
    /// once (`--timeout`, default 1800).
    pub timeout_s: Option<f64>,
    /// Every question with its outcome, and every message the human sends, is appended here
    /// (`notes/问答记录.md`); it never enters any context.
    pub log_path: Option<PathBuf>,
    /// What the human says during the run is appended here, usually the brief
    /// (`notes/需求.md`), so it survives step boundaries.
    pub amend: Option<Arc<dyn Amend>>,
}

impl std::fmt::Debug for HumanConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HumanConfig")
            .field("max_asks", &self.max_asks)
            .field("timeout_s", &self.timeout_s)
            .field("log_path", &self.log_path)
            .field(
                "amend",
                &self.amend.as_ref().map(|a| a.target().to_path_buf()),
            )
            .finish()
    }
}

impl Default for HumanConfig {
    fn default() -> Self {
        HumanConfig {
            max_asks: None,
            timeout_s: Some(1800.0),
            log_path: None,
            amend: None,
        }
    }
}

/// A question waiting for the human, as the UI sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingQuestion {
    /// `q1`, `q2`, … in asking order.
    pub id: String,
    /// The asking agent's instance name.
    pub agent: String,
    /// The question text (unsanitised model output).
    pub question: String,
    /// Options, possibly empty; the human may also answer freely.
    pub options: Vec<String>,
    /// When it was asked.
    pub asked_at: Instant,
}

impl PendingQuestion {
    /// The option a typed number selects: `"2"` → the second option, when in range (seed 000:
    /// "纯数字,且在选项范围内 → 换成对应的那个选项").
    pub fn option_for(&self, typed: &str) -> Option<&str> {
        let t = typed.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: usize = t.parse().ok()?;
        self.options.get(n.checked_sub(1)?).map(String::as_str)
    }
}

/// Receipt of [`HumanChannel::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// `m1`, `m2`, … in sending order.
    pub id: String,
    /// Whether it was appended by the config's `amend` (decides the terminal's receipt text).
    pub appended: bool,
}

/// One settled question, for [`HumanChannel::transcript`].
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// Question id (`-` for an empty question, which gets none).
    pub id: String,
    /// The asking agent.
    pub agent: String,
    /// The question.
    pub question: String,
    /// Its options.
    pub options: Vec<String>,
    /// How it ended.
    pub outcome: AskOutcome,
}

/// How a reply arrives from the UI side.
enum Reply {
    Answer(String),
    Decline,
}

/// A waiting question and the way to wake its asker.
struct Pending {
    info: PendingQuestion,
    tx: oneshot::Sender<Reply>,
}

/// Mutable state, behind one lock.
#[derive(Default)]
struct State {
    /// Questions counted against the budget.
    asked: u32,
    /// Last question number handed out.
    next_ask: u64,
    /// Last message number handed out.
    next_mail: u64,
    /// Questions waiting, oldest first.
    pending: Vec<Pending>,
    /// Messages not yet taken by `inbox`, oldest first.
    mail: VecDeque<String>,
    /// Every settled question.
    history: Vec<Exchange>,
}

/// Shared between clones and threads.
struct Inner {
    config: HumanConfig,
    state: Mutex<State>,
    on_event: Mutex<Option<EventSink>>,
    /// Panics raised by `on_event`, recorded instead of stopping the run.
    ui_errors: Mutex<Vec<String>>,
    /// Failures writing the log or the amendment file (the run goes on).
    io_errors: Mutex<Vec<String>>,
    /// Serialises appends to the log file.
    log_lock: Mutex<()>,
}

/// The question channel. Cheap to clone; every clone is the same channel.
#[derive(Clone)]
pub struct HumanChannel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HumanChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HumanChannel")
            .field("config", &self.inner.config)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (the state stays
/// consistent: every critical section is a few plain field updates).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HumanChannel {
    /// A channel with `config` and no UI callback yet.
    pub fn new(config: HumanConfig) -> Self {
        HumanChannel {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(State::default()),
                on_event: Mutex::new(None),
                ui_errors: Mutex::new(Vec::new()),
                io_errors: Mutex::new(Vec::new()),
                log_lock: Mutex::new(()),
            }),
        }
    }

    /// Sets the UI callback (push mode), replacing any previous one. It receives
    /// [`EventKind::Question`], [`EventKind::Answer`] and [`EventKind::Inbox`] events; it must
    /// not block. A panic inside it is recorded in [`HumanChannel::ui_errors`].
    #[cfg(test)]
    pub(crate) fn set_on_event(&self, sink: EventSink) {
        *lock(&self.inner.on_event) = Some(sink);
    }

    /// Sets the UI callback only when none is set (how a workflow wires its sink without
    /// overriding one the caller chose). Returns whether it was set.
    pub fn connect_events(&self, sink: EventSink) -> bool {
        let mut slot = lock(&self.inner.on_event);
        if slot.is_some() {
            return false;
        }
        *slot = Some(sink);
        true
    }

    /// Questions left: −1 when unlimited, otherwise `max_asks − asked` (never negative).
    pub fn remaining(&self) -> i64 {
        let asked = lock(&self.inner.state).asked;
        self.remaining_after(asked)
    }

    fn remaining_after(&self, asked: u32) -> i64 {
        match self.inner.config.max_asks {
            None => -1,
            Some(max) => i64::from(max.saturating_sub(asked)),
        }
    }

    /// The wait for one question; `None` forever, `Some(ZERO)` settle at once.
    fn wait(&self) -> Option<Duration> {
        let t = self.inner.config.timeout_s?;
        if t.is_nan() || t <= 0.0 {
            return Some(Duration::ZERO);
        }
        // Seconds beyond any real run (and infinity) mean forever.
        Duration::try_from_secs_f64(t).ok()
    }

    /// Asks the human and waits (see the module doc). `agent` names the asker for the screen
    /// and the log. Cancelling the returned future withdraws the question.
    pub async fn ask_question(
        &self,
        asker: Asker<'_>,
        question: &str,
        options: &[String],
    ) -> AskOutcome {
        let agent = asker.agent;
        let question = question.trim();
        let options: Vec<String> = options
            .iter()
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty())
            .collect();
        if question.is_empty() {
            self.settle("-", asker, question, &options, AskOutcome::Empty, false);
            return AskOutcome::Empty;
        }
        let wait = self.wait();
        let (id, remaining, rx) = {
            let mut st = lock(&self.inner.state);
            if let Some(max) = self.inner.config.max_asks {
                if st.asked >= max {
                    drop(st);
                    self.settle("-", asker, question, &options, AskOutcome::OverBudget, true);
                    return AskOutcome::OverBudget;
                }
            }
            st.asked += 1;
            st.next_ask += 1;
            let id = format!("q{}", st.next_ask);
            if wait == Some(Duration::ZERO) {
                drop(st);
                // Unattended: no queue, no event, not on screen; still in the log.
                self.settle(&id, asker, question, &options, AskOutcome::Timeout, false);
                return AskOutcome::Timeout;
            }
            let (tx, rx) = oneshot::channel();
            st.pending.push(Pending {
                info: PendingQuestion {
                    id: id.clone(),
                    agent: agent.to_string(),
                    question: question.to_string(),
                    options: options.clone(),
                    asked_at: Instant::now(),
                },
                tx,
            });
            let remaining = self.remaining_after(st.asked);
            (id, remaining, rx)
        };
        let guard = Withdraw { ch: self, id: &id };
        self.emit(
            asker,
            EventKind::Question {
                question: question.to_string(),
                options: options.clone(),
                remaining,
            },
        );
        let mut rx = rx;
        let outcome = match wait {
            None => reply_outcome((&mut rx).await.ok()),
            Some(d) => match tokio::time::timeout(d, &mut rx).await {
                Ok(r) => reply_outcome(r.ok()),
                Err(_) => match self.take_pending(&id) {
                    Some(_) => AskOutcome::Timeout,
                    // Answered in the same instant: the reply was sent under the lock before
                    // the entry disappeared, so it is already in the channel.
                    None => reply_outcome(rx.try_recv().ok()),
                },
            },
        };
        std::mem::forget(guard); // settled: nothing to withdraw
        self.settle(&id, asker, question, &options, outcome.clone(), true);
        outcome
    }

    /// Questions waiting for an answer, oldest first.
    pub fn pending(&self) -> Vec<PendingQuestion> {
        lock(&self.inner.state)
            .pending
            .iter()
            .map(|p| p.info.clone())
            .collect()
    }

    /// Whether a question is waiting (decides the prompt text and whether a line is an answer).
    pub fn has_pending(&self) -> bool {
        !lock(&self.inner.state).pending.is_empty()
    }

    /// The oldest waiting question.
    pub fn oldest_pending(&self) -> Option<PendingQuestion> {
        lock(&self.inner.state)
            .pending
            .first()
            .map(|p| p.info.clone())
    }

    /// Answers question `id`. A number within the options selects that option; blank text is
    /// a skip. Returns `false` when the question is no longer waiting (answered, timed out,
    /// withdrawn). Callable from any thread.
    pub fn answer(&self, id: &str, text: &str) -> bool {
        let mut st = lock(&self.inner.state);
        let Some(pos) = st.pending.iter().position(|p| p.info.id == id) else {
            return false;
        };
        let p = st.pending.remove(pos);
        let reply = if text.trim().is_empty() {
            Reply::Decline
        } else {
            let chosen = p.info.option_for(text).map(str::to_string);
            Reply::Answer(chosen.unwrap_or_else(|| text.trim().to_string()))
        };
        // Sent while holding the lock: a timeout that finds the entry gone finds the reply.
        p.tx.send(reply).is_ok()
    }

    /// Skips question `id`: the model decides itself and records the assumption. Returns
    /// `false` when it is no longer waiting. Callable from any thread.
    pub fn decline(&self, id: &str) -> bool {
        let mut st = lock(&self.inner.state);
        let Some(pos) = st.pending.iter().position(|p| p.info.id == id) else {
            return false;
        };
        st.pending.remove(pos).tx.send(Reply::Decline).is_ok()
    }

    /// Answers the oldest waiting question. `false` when none is waiting any more — the
    /// terminal then treats the line as a message ([`HumanChannel::send`]).
    #[cfg(test)]
    pub(crate) fn answer_oldest(&self, text: &str) -> bool {
        match self.oldest_pending() {
            Some(p) => self.answer(&p.id, text),
            None => false,
        }
    }

    /// Declines the oldest waiting question (empty line, or EOF on stdin).
    #[cfg(test)]
    pub(crate) fn decline_oldest(&self) -> bool {
        match self.oldest_pending() {
            Some(p) => self.decline(&p.id),
            None => false,
        }
    }

    /// The human says something unprompted: queued for the agent's next `inbox` call (it never
    /// interrupts), appended through the config's `amend` and logged. `None` for blank text. Callable from
    /// any thread.
    pub fn send(&self, text: &str) -> Option<Sent> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        let id = {
            let mut st = lock(&self.inner.state);
            st.next_mail += 1;
            st.mail.push_back(text.to_string());
            format!("m{}", st.next_mail)
        };
        let appended = match &self.inner.config.amend {
            Some(amend) => match amend.amend(text) {
                Ok(done) => done,
                Err(e) => {
                    self.io_error(format!("追加到 {} 失败:{e}", amend.target().display()));
                    false
                }
            },
            None => false,
        };
        let note = if appended {
            "已追加进确认书"
        } else {
            "没有确认书可落盘"
        };
        self.log(&format!(
            "\n### {id} · {} · 人主动说\n{text}\n({note})\n",
            now()
        ));
        Some(Sent { id, appended })
    }

    /// Messages sent but not yet taken by `inbox`.
    pub fn pending_mail(&self) -> Vec<String> {
        lock(&self.inner.state).mail.iter().cloned().collect()
    }

    /// Every settled question so far.
    #[cfg(test)]
    pub(crate) fn history(&self) -> Vec<Exchange> {
        lock(&self.inner.state).history.clone()
    }

    /// The settled questions as markdown, in the log file's format.
    #[cfg(test)]
    pub(crate) fn transcript(&self) -> String {
        self.history().iter().map(log_entry).collect()
    }

    /// Panics raised by the UI callback, as messages.
    #[cfg(test)]
    pub(crate) fn ui_errors(&self) -> Vec<String> {
        lock(&self.inner.ui_errors).clone()
    }

    /// Failures writing the log or the amendment file.
    #[cfg(test)]
    pub(crate) fn io_errors(&self) -> Vec<String> {
        lock(&self.inner.io_errors).clone()
    }

    /// Removes a waiting question without replying; returns it if it was still waiting.
    fn take_pending(&self, id: &str) -> Option<Pending> {
        let mut st = lock(&self.inner.state);
        let pos = st.pending.iter().position(|p| p.info.id == id)?;
        Some(st.pending.remove(pos))
    }

    /// Records, logs and (when `show`) emits the outcome of one question.
    fn settle(
        &self,
        id: &str,
        asker: Asker<'_>,
        question: &str,
        options: &[String],
        outcome: AskOutcome,
        show: bool,
    ) {
        let ex = Exchange {
            id: id.to_string(),
            agent: asker.agent.to_string(),
            question: question.to_string(),
            options: options.to_vec(),
            outcome: outcome.clone(),
        };
        self.log(&log_entry(&ex));
        lock(&self.inner.state).history.push(ex);
        if show {
            let text = match &outcome {
                AskOutcome::Answered(a) => a.clone(),
                _ => String::new(),
            };
            self.emit(
                asker,
                EventKind::Answer {
                    outcome: outcome.kind().to_string(),
                    text,
                },
            );
        }
    }

    /// Sends an event to the UI callback; a panic in it is recorded, never propagated.
    fn emit(&self, asker: Asker<'_>, kind: EventKind) {
        let Some(sink) = lock(&self.inner.on_event).clone() else {
            return;
        };
        let ev = Event {
            agent: asker.agent.to_string(),
            role: asker.role,
            depth: asker.depth,
            kind,
        };
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| sink(ev))) {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "UI 回调 panic".to_string());
            lock(&self.inner.ui_errors).push(msg);
        }
    }

    /// Appends to the log file when configured; failures are recorded.
    fn log(&self, entry: &str) {
        let Some(path) = &self.inner.config.log_path else {
            return;
        };
        let _serial = lock(&self.inner.log_lock);
        // What was asked and answered is the model's and the human's text: cleaned on the way
        // into the note.
        if let Err(e) = crate::shown::notes::append(path, "", entry) {
            self.io_error(format!("写问答记录 {} 失败:{e}", path.display()));
        }
    }

    fn io_error(&self, msg: String) {
        tracing::warn!("{msg}");
        lock(&self.inner.io_errors).push(msg);
    }
}

/// What a reply (or a vanished sender, which only a withdrawal causes) means.
fn reply_outcome(reply: Option<Reply>) -> AskOutcome {
    match reply {
        Some(Reply::Answer(a)) => AskOutcome::Answered(a),
        Some(Reply::Decline) | None => AskOutcome::Skipped,
    }
}

/// Withdraws a waiting question when the asking future is dropped (the agent was cancelled),
/// so no stale question keeps the answer prompt on screen.
struct Withdraw<'a> {
    ch: &'a HumanChannel,
    id: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.ch.take_pending(self.id);
    }
}

#[async_trait]
impl Human for HumanChannel {
    async fn ask(&self, asker: Asker<'_>, question: &str, options: &[String]) -> AskOutcome {
        self.ask_question(asker, question, options).await
    }

    /// Takes every queued message (oldest first) and tells the UI each was delivered.
    fn inbox(&self) -> Vec<String> {
        let taken: Vec<String> = lock(&self.inner.state).mail.drain(..).collect();
        for text in &taken {
            // Delivered to whoever looked; the screen shows the delivery, not the reader.
            self.emit(
                Asker::new("inbox", Role::Coordinator),
                EventKind::Inbox { text: text.clone() },
            );
        }
        taken
    }

    fn remaining(&self) -> i64 {
        HumanChannel::remaining(self)
    }
}

/// Local time for log entries.
fn now() -> String {
    chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// One question's entry in `问答记录.md`.
fn log_entry(ex: &Exchange) -> String {
    let mut out = format!(
        "\n### {} · {} · {} · {}\n问:{}\n",
        ex.id,
        now(),
        ex.agent,
        ex.outcome.kind(),
        ex.question
    );
    if !ex.options.is_empty() {
        let opts: Vec<String> = ex
            .options
            .iter()
            .enumerate()
            .map(|(i, o)| format!("{}) {o}", i + 1))
            .collect();
        let _ = writeln!(out, "选项:{}", opts.join(" / "));
    }
    let answer = match &ex.outcome {
        AskOutcome::Answered(a) => a.as_str(),
        AskOutcome::Timeout => "(无人应答)",
        AskOutcome::OverBudget => "(提问额度用完)",
        AskOutcome::Skipped => "(已跳过)",
        AskOutcome::Empty => "(问题是空的)",
    };
    let _ = writeln!(out, "答:{answer}");
    out
}

#[cfg(test)]
#[path = "human_tests.rs"]
mod tests;
