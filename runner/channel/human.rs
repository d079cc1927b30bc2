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
use crate::model::Role;

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
    pub fn set_on_event(&self, sink: EventSink) {
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

    /// The configuration.
    pub fn config(&self) -> &HumanConfig {
        &self.inner.config
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
    pub fn answer_oldest(&self, text: &str) -> bool {
        match self.oldest_pending() {
            Some(p) => self.answer(&p.id, text),
            None => false,
        }
    }

    /// Declines the oldest waiting question (empty line, or EOF on stdin).
    pub fn decline_oldest(&self) -> bool {
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
    pub fn history(&self) -> Vec<Exchange> {
        lock(&self.inner.state).history.clone()
    }

    /// The settled questions as markdown, in the log file's format.
    pub fn transcript(&self) -> String {
        self.history().iter().map(log_entry).collect()
    }

    /// Panics raised by the UI callback, as messages.
    pub fn ui_errors(&self) -> Vec<String> {
        lock(&self.inner.ui_errors).clone()
    }

    /// Failures writing the log or the amendment file.
    pub fn io_errors(&self) -> Vec<String> {
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
        if let Err(e) = crate::fsroot::own::append(path, entry.as_bytes()) {
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A channel whose events are collected.
    fn channel(cfg: HumanConfig) -> (HumanChannel, Arc<Mutex<Vec<EventKind>>>) {
        let ch = HumanChannel::new(cfg);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        ch.set_on_event(Arc::new(move |ev: Event| lock(&s).push(ev.kind)));
        (ch, seen)
    }

    fn opts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Waits (bounded) until a question is pending; catches hangs, asserts no timing.
    async fn until_pending(ch: &HumanChannel) -> PendingQuestion {
        for _ in 0..500 {
            if let Some(p) = ch.oldest_pending() {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no question became pending");
    }

    fn kinds(seen: &Arc<Mutex<Vec<EventKind>>>) -> Vec<String> {
        lock(seen)
            .iter()
            .map(|k| match k {
                EventKind::Question { remaining, .. } => format!("question:{remaining}"),
                EventKind::Answer { outcome, .. } => format!("answer:{outcome}"),
                EventKind::Inbox { text } => format!("inbox:{text}"),
                _ => "other".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn answered_with_a_number_maps_to_the_option() {
        let (ch, seen) = channel(HumanConfig {
            max_asks: Some(5),
            ..HumanConfig::default()
        });
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(
                    Asker::new("clarifier", Role::Clarifier),
                    "CLI 还是库?",
                    &opts(&["CLI", "库"]),
                )
                .await
            })
        };
        let p = until_pending(&ch).await;
        assert_eq!(p.options, opts(&["CLI", "库"]));
        assert!(ch.has_pending());
        assert!(ch.answer(&p.id, " 2 "));
        assert_eq!(asker.await.unwrap(), AskOutcome::Answered("库".into()));
        assert!(!ch.has_pending());
        assert!(!ch.answer(&p.id, "again"), "no longer waiting");
        assert_eq!(ch.remaining(), 4);
        assert_eq!(kinds(&seen), vec!["question:4", "answer:answered"]);
        let second = lock(&seen)[1].clone();
        match second {
            EventKind::Answer { text, .. } => assert_eq!(text, "库"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn numbers_outside_the_options_are_free_text() {
        let (ch, _) = channel(HumanConfig::default());
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(
                    Asker::new("coordinator", Role::Coordinator),
                    "几个?",
                    &opts(&["一", "二"]),
                )
                .await
            })
        };
        until_pending(&ch).await;
        assert!(ch.answer_oldest("7"));
        assert_eq!(asker.await.unwrap(), AskOutcome::Answered("7".into()));
    }

    #[tokio::test]
    async fn over_budget_refuses_without_blocking_or_showing() {
        let (ch, seen) = channel(HumanConfig {
            max_asks: Some(0),
            timeout_s: None,
            ..HumanConfig::default()
        });
        assert_eq!(ch.remaining(), 0);
        assert_eq!(
            ch.ask_question(Asker::new("clarifier", Role::Clarifier), "问?", &[])
                .await,
            AskOutcome::OverBudget
        );
        assert!(!ch.has_pending());
        assert_eq!(kinds(&seen), vec!["answer:over_budget"]);

        let (ch, _) = channel(HumanConfig {
            max_asks: Some(1),
            timeout_s: Some(0.0),
            ..HumanConfig::default()
        });
        assert_eq!(
            ch.ask_question(Asker::new("a", Role::Coordinator), "一", &[])
                .await,
            AskOutcome::Timeout
        );
        assert_eq!(
            ch.ask_question(Asker::new("a", Role::Coordinator), "二", &[])
                .await,
            AskOutcome::OverBudget
        );
        assert_eq!(ch.remaining(), 0);
        assert_eq!(
            AskOutcome::OverBudget.tool_text(),
            crate::agent::human::OVER_BUDGET_TEXT
        );
    }

    #[tokio::test]
    async fn unlimited_budget_reports_minus_one() {
        let (ch, seen) = channel(HumanConfig {
            timeout_s: Some(-1.0),
            ..HumanConfig::default()
        });
        for _ in 0..3 {
            ch.ask_question(Asker::new("a", Role::Coordinator), "q", &[])
                .await;
        }
        assert_eq!(ch.remaining(), -1);
        assert!(kinds(&seen).is_empty());
    }

    #[tokio::test]
    async fn timeout_zero_settles_at_once_without_events_but_is_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("notes/问答记录.md");
        for t in [0.0, -5.0, f64::NAN] {
            let (ch, seen) = channel(HumanConfig {
                timeout_s: Some(t),
                log_path: Some(log.clone()),
                ..HumanConfig::default()
            });
            let out = ch
                .ask_question(
                    Asker::new("clarifier", Role::Clarifier),
                    "要不要 Web?",
                    &opts(&["要", "不要"]),
                )
                .await;
            assert_eq!(out, AskOutcome::Timeout, "timeout_s = {t}");
            assert!(kinds(&seen).is_empty(), "nothing shown for timeout_s = {t}");
            assert!(!ch.has_pending());
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.matches("问:要不要 Web?").count(), 3);
        assert!(text.contains("· clarifier · timeout\n"));
        assert!(text.contains("选项:1) 要 / 2) 不要"));
        assert!(text.contains("答:(无人应答)"));
    }

    #[tokio::test]
    async fn timeout_expires_and_withdraws_the_question() {
        let (ch, seen) = channel(HumanConfig {
            timeout_s: Some(0.05),
            ..HumanConfig::default()
        });
        let out = ch
            .ask_question(Asker::new("judge-1", Role::Judge), "怎么办?", &[])
            .await;
        assert_eq!(out, AskOutcome::Timeout);
        assert!(!ch.has_pending());
        assert_eq!(kinds(&seen), vec!["question:-1", "answer:timeout"]);
        assert!(!ch.answer("q1", "late"), "a late answer is refused");
    }

    #[tokio::test]
    async fn none_timeout_waits_until_answered() {
        let (ch, _) = channel(HumanConfig {
            timeout_s: None,
            ..HumanConfig::default()
        });
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(Asker::new("a", Role::Coordinator), "等我", &[])
                    .await
            })
        };
        until_pending(&ch).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(ch.has_pending(), "still waiting with no timeout");
        assert!(ch.answer_oldest("好"));
        assert_eq!(asker.await.unwrap(), AskOutcome::Answered("好".into()));
    }

    #[tokio::test]
    async fn skipped_by_decline_or_blank_answer() {
        let (ch, seen) = channel(HumanConfig::default());
        for how in ["decline", "blank"] {
            let asker = {
                let ch = ch.clone();
                tokio::spawn(async move {
                    ch.ask_question(Asker::new("a", Role::Coordinator), "跳吗?", &[])
                        .await
                })
            };
            let p = until_pending(&ch).await;
            match how {
                "decline" => assert!(ch.decline(&p.id)),
                _ => assert!(ch.answer(&p.id, "   ")),
            }
            assert_eq!(asker.await.unwrap(), AskOutcome::Skipped, "{how}");
        }
        assert_eq!(
            kinds(&seen),
            vec![
                "question:-1",
                "answer:skipped",
                "question:-1",
                "answer:skipped"
            ]
        );
        assert!(!ch.decline_oldest(), "nothing left to decline");
    }

    #[tokio::test]
    async fn empty_question_is_refused_and_not_counted() {
        let (ch, seen) = channel(HumanConfig {
            max_asks: Some(1),
            ..HumanConfig::default()
        });
        assert_eq!(
            ch.ask_question(Asker::new("a", Role::Coordinator), "  \n", &[])
                .await,
            AskOutcome::Empty
        );
        assert_eq!(ch.remaining(), 1);
        assert!(kinds(&seen).is_empty());
    }

    #[tokio::test]
    async fn answered_from_a_plain_std_thread() {
        let (ch, _) = channel(HumanConfig::default());
        let ui = {
            let ch = ch.clone();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    if let Some(p) = ch.oldest_pending() {
                        let digit = p.option_for("1").is_some();
                        return (ch.answer_oldest("1"), digit);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                (false, false)
            })
        };
        let out = ch
            .ask_question(
                Asker::new("clarifier", Role::Clarifier),
                "选一个",
                &opts(&["纯命令行", "Web 界面"]),
            )
            .await;
        assert_eq!(ui.join().unwrap(), (true, true));
        assert_eq!(out, AskOutcome::Answered("纯命令行".into()));
    }

    #[tokio::test]
    async fn cancelled_ask_withdraws_its_question() {
        let (ch, _) = channel(HumanConfig::default());
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(Asker::new("a", Role::Coordinator), "会被取消", &[])
                    .await
            })
        };
        until_pending(&ch).await;
        asker.abort();
        let _ = asker.await;
        assert!(!ch.has_pending());
    }

    #[tokio::test]
    async fn panicking_ui_callback_is_recorded_and_the_run_goes_on() {
        let ch = HumanChannel::new(HumanConfig {
            timeout_s: Some(0.02),
            ..HumanConfig::default()
        });
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        ch.set_on_event(Arc::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            panic!("前端炸了");
        }));
        assert_eq!(
            ch.ask_question(Asker::new("a", Role::Coordinator), "q", &[])
                .await,
            AskOutcome::Timeout
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(ch.ui_errors(), vec!["前端炸了", "前端炸了"]);
    }

    #[test]
    fn connect_events_keeps_a_callback_set_by_the_caller() {
        let ch = HumanChannel::new(HumanConfig::default());
        assert!(ch.connect_events(crate::agent::event::null_sink()));
        assert!(!ch.connect_events(crate::agent::event::null_sink()));
    }

    /// Appends each text as one line (the workflows' brief amender is tested in `flow`).
    struct Lines(PathBuf);

    impl Amend for Lines {
        fn amend(&self, text: &str) -> std::io::Result<bool> {
            crate::fsroot::own::append(&self.0, format!("{text}\n").as_bytes()).map(|_| true)
        }
        fn target(&self) -> &Path {
            &self.0
        }
    }

    #[test]
    fn send_queues_mail_appends_to_brief_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let brief = dir.path().join("notes/需求.md");
        let log = dir.path().join("notes/问答记录.md");
        let (ch, seen) = channel(HumanConfig {
            amend: Some(Arc::new(Lines(brief.clone()))),
            log_path: Some(log.clone()),
            ..HumanConfig::default()
        });
        assert_eq!(ch.send("  "), None);
        let sent = std::thread::spawn({
            let ch = ch.clone();
            move || ch.send("顺便统计总字节数")
        })
        .join()
        .unwrap()
        .unwrap();
        assert_eq!(
            sent,
            Sent {
                id: "m1".into(),
                appended: true
            }
        );
        assert_eq!(ch.send("再加一条").unwrap().id, "m2");
        assert_eq!(ch.pending_mail(), vec!["顺便统计总字节数", "再加一条"]);

        assert_eq!(
            std::fs::read_to_string(&brief).unwrap(),
            "顺便统计总字节数\n再加一条\n"
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("人主动说\n顺便统计总字节数\n(已追加进确认书)"),
            "{text}"
        );

        assert_eq!(Human::inbox(&ch), vec!["顺便统计总字节数", "再加一条"]);
        assert!(Human::inbox(&ch).is_empty(), "taken once");
        assert_eq!(
            kinds(&seen),
            vec!["inbox:顺便统计总字节数", "inbox:再加一条"]
        );
    }

    #[test]
    fn send_without_amend_path_is_queued_but_not_appended() {
        let ch = HumanChannel::new(HumanConfig::default());
        let sent = ch.send("加需求").unwrap();
        assert!(!sent.appended);
        assert_eq!(ch.pending_mail(), vec!["加需求"]);
    }

    #[test]
    fn unwritable_files_are_recorded_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let ch = HumanChannel::new(HumanConfig {
            amend: Some(Arc::new(Lines(file.join("需求.md")))), // parent is a file
            log_path: Some(file.join("log.md")),
            ..HumanConfig::default()
        });
        let sent = ch.send("说一句").unwrap();
        assert!(!sent.appended);
        assert_eq!(ch.io_errors().len(), 2);
    }

    #[tokio::test]
    async fn every_outcome_lands_in_the_log_with_its_state() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("问答记录.md");
        let (ch, _) = channel(HumanConfig {
            max_asks: Some(2),
            timeout_s: Some(0.02),
            log_path: Some(log.clone()),
            ..HumanConfig::default()
        });
        let asker = {
            let ch = ch.clone();
            tokio::spawn(async move {
                ch.ask_question(
                    Asker::new("clarifier", Role::Clarifier),
                    "语言?",
                    &opts(&["Rust", "Go"]),
                )
                .await
            })
        };
        // Answer it from the test while the 20 ms timeout may race: either outcome is logged.
        let answered = loop {
            if let Some(p) = ch.oldest_pending() {
                break ch.answer(&p.id, "1");
            }
            if asker.is_finished() {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let first = asker.await.unwrap();
        assert_eq!(answered, first == AskOutcome::Answered("Rust".into()));
        ch.ask_question(Asker::new("clarifier", Role::Clarifier), "第二个", &[])
            .await;
        ch.ask_question(Asker::new("clarifier", Role::Clarifier), "第三个", &[])
            .await;
        ch.ask_question(Asker::new("clarifier", Role::Clarifier), "", &[])
            .await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("· clarifier · timeout\n问:第二个\n答:(无人应答)\n"),
            "{text}"
        );
        assert!(
            text.contains("· clarifier · over_budget\n问:第三个\n答:(提问额度用完)\n"),
            "{text}"
        );
        assert!(text.contains("· clarifier · empty\n"), "{text}");
        assert_eq!(ch.history().len(), 4);
        assert_eq!(ch.transcript().matches("### ").count(), 4);
    }

    #[tokio::test]
    async fn events_carry_the_askers_role_and_depth() {
        let ch = HumanChannel::new(HumanConfig {
            timeout_s: Some(0.01),
            ..HumanConfig::default()
        });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        ch.set_on_event(Arc::new(move |ev: Event| {
            lock(&s).push((ev.role, ev.depth))
        }));
        let worker = Asker {
            agent: "worker-2",
            role: Role::Worker,
            depth: 1,
        };
        assert_eq!(ch.ask_question(worker, "q", &[]).await, AskOutcome::Timeout);
        assert_eq!(
            *lock(&seen),
            vec![(Role::Worker, 1), (Role::Worker, 1)],
            "question and answer"
        );
    }
}
