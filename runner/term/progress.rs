//! Progress spinners with elapsed time (indicatif) for the waits of a long run: building the
//! agent image, starting a container, a model turn in flight, a long Bash command.
//!
//! They share the bottom area with the resident prompt: each [`Spinner`] is an indicatif
//! `ProgressBar` whose draw target is a *slot* — a `TermLike` that does not touch the
//! terminal but hands each rendered frame to the [`OutputPort`], which draws the spinner lines
//! above the prompt and keeps them there while event lines scroll by. When stdout is not a
//! terminal no bar is created at all ([`Spinner`] is inert), so logs never see a spinner.
//!
//! [`Activity`] turns the event stream into the two event-driven spinners: "model turn in
//! flight" per agent (from its prompt, or from the last result of a tool batch, until its
//! usage arrives) and "long Bash" (a Bash call still running after
//! [`BASH_SPINNER_AFTER`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::port::OutputPort;
use crate::agent::{Event, EventKind};
use crate::model::ToolName;

/// A Bash command gets a spinner once it has run this long (short ones would only flicker).
pub const BASH_SPINNER_AFTER: Duration = Duration::from_secs(2);
/// Spinner frames per second.
const TICK: Duration = Duration::from_millis(120);
/// ASCII only (seed 000: icons are ASCII; glyph fallback crashed terminals).
const TICK_CHARS: &str = "-\\|/ ";
/// Label of the model-turn spinner.
pub const MODEL_LABEL: &str = "等模型回话";

/// Creates spinners drawn through one port.
#[derive(Debug, Clone)]
pub struct Progress {
    port: OutputPort,
    next_id: Arc<AtomicU64>,
}

impl Progress {
    /// Spinners for `port`; inert when the port is not a screen.
    pub fn new(port: OutputPort) -> Self {
        Progress {
            port,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// A spinner showing `  <frame> <label> <elapsed>` until dropped or finished.
    pub fn spinner(&self, label: &str) -> Spinner {
        self.spinner_after(label, Duration::ZERO)
    }

    /// A spinner that appears only once `delay` has passed (for waits that are usually short).
    pub fn spinner_after(&self, label: &str, delay: Duration) -> Spinner {
        if !self.port.is_screen() {
            return Spinner { inner: None };
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let closed = Arc::new(AtomicBool::new(false));
        let slot = Slot {
            id,
            port: self.port.clone(),
            show_at: Instant::now() + delay,
            closed: closed.clone(),
            frame: Mutex::new(String::new()),
        };
        let bar = ProgressBar::with_draw_target(
            None,
            ProgressDrawTarget::term_like_with_hz(Box::new(slot), 10),
        );
        let style = ProgressStyle::with_template("  {spinner} {msg} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .tick_chars(TICK_CHARS);
        bar.set_style(style);
        bar.set_message(label.to_string());
        bar.enable_steady_tick(TICK);
        Spinner {
            inner: Some(SpinnerInner {
                bar,
                id,
                port: self.port.clone(),
                closed,
            }),
        }
    }
}

struct SpinnerInner {
    bar: ProgressBar,
    id: u64,
    port: OutputPort,
    closed: Arc<AtomicBool>,
}

/// One spinner; removed from the screen when dropped (or [`Spinner::finish`]ed).
pub struct Spinner {
    inner: Option<SpinnerInner>,
}

impl fmt::Debug for Spinner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spinner")
            .field("visible", &self.inner.is_some())
            .finish()
    }
}

impl Spinner {
    /// Time since the spinner started.
    pub fn elapsed(&self) -> Duration {
        self.inner
            .as_ref()
            .map(|i| i.bar.elapsed())
            .unwrap_or_default()
    }

    /// Removes the spinner (same as dropping it).
    pub fn finish(self) {}
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(i) = self.inner.take() {
            i.closed.store(true, Ordering::SeqCst);
            i.bar.finish_and_clear();
            i.port.set_spinner(i.id, None);
        }
    }
}

/// The draw target of one spinner: collects indicatif's frame and publishes it to the port.
struct Slot {
    id: u64,
    port: OutputPort,
    show_at: Instant,
    closed: Arc<AtomicBool>,
    frame: Mutex<String>,
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

impl TermLike for Slot {
    fn width(&self) -> u16 {
        // One column short of the terminal, so a spinner line never wraps.
        self.port
            .columns()
            .saturating_sub(1)
            .clamp(20, u16::MAX as usize) as u16
    }
    fn move_cursor_up(&self, _n: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _n: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _n: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _n: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        let mut f = self.frame.lock().unwrap_or_else(|p| p.into_inner());
        f.push_str(s);
        f.push('\n');
        Ok(())
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.frame
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        let frame = std::mem::take(&mut *self.frame.lock().unwrap_or_else(|p| p.into_inner()));
        if self.closed.load(Ordering::SeqCst) {
            return Ok(());
        }
        // One bar, one line: the frame is "line + filler spaces".
        let line = frame
            .lines()
            .find(|l| !l.trim().is_empty())
            .map(str::trim_end);
        match line {
            Some(l) if Instant::now() >= self.show_at => {
                self.port.set_spinner(self.id, Some(l.to_string()))
            }
            Some(_) => {}
            None => self.port.set_spinner(self.id, None),
        }
        Ok(())
    }
}

/// Event-driven spinners: a model turn in flight (per agent) and long Bash commands.
#[derive(Debug)]
pub struct Activity {
    progress: Progress,
    /// Model-turn spinner per agent.
    model: HashMap<String, Spinner>,
    /// Tool calls not yet answered, per agent.
    outstanding: HashMap<String, HashSet<String>>,
    /// Bash spinners by call id.
    bash: HashMap<String, Spinner>,
}

impl Activity {
    /// Spinners through `progress`.
    pub fn new(progress: Progress) -> Self {
        Activity {
            progress,
            model: HashMap::new(),
            outstanding: HashMap::new(),
            bash: HashMap::new(),
        }
    }

    fn start_model(&mut self, ev: &Event) {
        let label = if ev.depth == 0 {
            MODEL_LABEL.to_string()
        } else {
            format!("{} {MODEL_LABEL}", ev.agent)
        };
        let s = self.progress.spinner(&label);
        self.model.insert(ev.agent.clone(), s);
    }

    /// Updates the spinners from one event.
    pub fn observe(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::Prompt { .. } => self.start_model(ev),
            EventKind::Usage { .. }
            | EventKind::TextDelta { .. }
            | EventKind::Text { .. }
            | EventKind::Error { .. } => {
                self.model.remove(&ev.agent);
            }
            EventKind::ToolCall { id, name, summary } => {
                self.model.remove(&ev.agent);
                self.outstanding
                    .entry(ev.agent.clone())
                    .or_default()
                    .insert(id.clone());
                if ToolName::Bash.is(name) {
                    let cmd = summary.strip_prefix("Bash:").unwrap_or(summary).trim();
                    let cmd: String = cmd.lines().next().unwrap_or("").chars().take(60).collect();
                    let s = self
                        .progress
                        .spinner_after(format!("Bash {cmd}").trim_end(), BASH_SPINNER_AFTER);
                    self.bash.insert(id.clone(), s);
                }
            }
            EventKind::ToolResult { id, .. } => {
                self.bash.remove(id);
                let done = match self.outstanding.get_mut(&ev.agent) {
                    Some(set) => {
                        set.remove(id);
                        set.is_empty()
                    }
                    None => false,
                };
                if done {
                    self.outstanding.remove(&ev.agent);
                    // The batch is answered: the agent's next model call is in flight.
                    self.start_model(ev);
                }
            }
            EventKind::StepEnd { .. } => self.clear(),
            _ => {}
        }
    }

    /// Removes every spinner (step end, interrupt, end of run).
    pub fn clear(&mut self) {
        self.model.clear();
        self.bash.clear();
        self.outstanding.clear();
    }

    /// Agents with a model turn in flight (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn model_in_flight(&self) -> Vec<String> {
        let mut v: Vec<String> = self.model.keys().cloned().collect();
        v.sort();
        v
    }

    /// Bash calls being watched.
    #[cfg(test)]
    pub(crate) fn bash_running(&self) -> usize {
        self.bash.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::term::port::PortConfig;

    use flowerbox_testkit::SharedBuf as Buf;

    fn port(screen: bool) -> (OutputPort, Buf) {
        let buf = Buf::default();
        let p = OutputPort::new(
            Box::new(buf.clone()),
            PortConfig {
                screen,
                color: false,
                columns: Arc::new(|| 80),
                question_pending: Arc::new(|| false),
            },
        );
        (p, buf)
    }

    fn ev(agent: &str, depth: u32, kind: EventKind) -> Event {
        Event {
            agent: agent.into(),
            role: Role::Coordinator,
            depth,
            kind,
        }
    }

    fn call(id: &str, name: &str) -> EventKind {
        EventKind::ToolCall {
            id: id.into(),
            name: name.into(),
            summary: format!("{name}: x"),
        }
    }

    fn result(id: &str) -> EventKind {
        EventKind::ToolResult {
            id: id.into(),
            name: "Bash".into(),
            is_error: false,
            text: String::new(),
        }
    }

    #[test]
    fn model_turn_spinner_follows_the_loop() {
        let (p, _) = port(true);
        let mut a = Activity::new(Progress::new(p));
        let c = "coordinator";
        a.observe(&ev(c, 0, EventKind::Prompt { text: "go".into() }));
        assert_eq!(a.model_in_flight(), vec![c]);
        a.observe(&ev(c, 0, call("t1", "Read")));
        a.observe(&ev(c, 0, call("t2", "Bash")));
        assert!(a.model_in_flight().is_empty());
        assert_eq!(a.bash_running(), 1);
        a.observe(&ev(c, 0, result("t2")));
        assert!(a.model_in_flight().is_empty(), "t1 still running");
        assert_eq!(a.bash_running(), 0);
        a.observe(&ev(c, 0, result("t1")));
        assert_eq!(a.model_in_flight(), vec![c]);
        a.observe(&ev(
            c,
            0,
            EventKind::Usage {
                usage: Default::default(),
                cost_usd: None,
                context_tokens: 1,
            },
        ));
        assert!(a.model_in_flight().is_empty());
        // A subagent gets its own.
        a.observe(&ev("worker-1", 1, EventKind::Prompt { text: "x".into() }));
        assert_eq!(a.model_in_flight(), vec!["worker-1"]);
        a.observe(&ev(
            c,
            0,
            EventKind::StepEnd {
                step: "s".into(),
                ok: true,
                cost_usd: None,
                turns: 1,
                context_tokens: 0,
                error: None,
            },
        ));
        assert!(a.model_in_flight().is_empty());
    }

    #[test]
    fn a_spinner_draws_above_the_prompt_and_disappears() {
        let (p, buf) = port(true);
        let progress = Progress::new(p.clone());
        let s = progress.spinner("构建镜像");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = buf.text();
            if out.contains("构建镜像 0s") || out.contains("构建镜像 1s") {
                break;
            }
            assert!(Instant::now() < deadline, "spinner never drawn: {out:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(s);
        buf.clear();
        p.print_rendered(&["after"]);
        let out = buf.text();
        assert!(!out.contains("构建镜像"), "{out:?}");
    }

    #[test]
    fn no_spinner_without_a_screen() {
        let (p, buf) = port(false);
        let progress = Progress::new(p);
        let s = progress.spinner("启动容器");
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        assert!(buf.is_empty());
    }
}
