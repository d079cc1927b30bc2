//! The console's shared state and its reactions: to an event (render, status line, spinners,
//! aside window), to a typed line (the routing table, the Ctrl-C prompt's answer), to an aside
//! outcome, to SIGINT. Used by [`super::console::Console`], which owns the threads and tasks.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::aside::EventWindow;
use super::console::ConsoleSignal;
use super::input::InputEvent;
use super::port::{OutputPort, PromptKind};
use super::progress::{Activity, Progress};
use super::render::{
    aside_answer, aside_failure, inbox_receipt, interrupt_pending_note, interrupt_prompt, render,
    text_lines, RenderOptions, Tally, INTERRUPT_INPUT_PROMPT,
};
use super::route::{route, route_eof, Route};
use super::sanitize::screen_width;
use super::stream::Release;
use super::tty::CbreakGuard;
use crate::agent::{Event, EventKind};
use crate::channel::HumanChannel;
use crate::flow::frontend::{Aside, AsideFailure, AsideOutcome, AsideReport, Interrupt};

/// State shared by the event sink, the input thread, the signal task and the driver.
pub(super) struct Shared {
    pub(super) port: OutputPort,
    pub(super) progress: Progress,
    pub(super) activity: Mutex<Activity>,
    pub(super) tally: Mutex<Tally>,
    pub(super) started: Instant,
    pub(super) verbose: bool,
    pub(super) home: Option<PathBuf>,
    /// The question channel, once [`Console::start`] gave it.
    pub(super) channel: Arc<Mutex<Option<HumanChannel>>>,
    /// The run's aside oracle, once the driver gave it.
    pub(super) aside: Mutex<Option<Arc<dyn Aside>>>,
    /// The recent events, described for the oracle.
    pub(super) window: Mutex<EventWindow>,
    /// Where aside outcomes go (this state's [`Shared::on_aside`], weakly).
    pub(super) report: AsideReport,
    pub(super) interrupter: Mutex<Option<Arc<dyn Interrupt>>>,
    /// The Ctrl-C prompt is showing.
    pub(super) interrupting: AtomicBool,
    /// stdin is a terminal.
    pub(super) keyboard: bool,
    /// No input is read (not started, EOF seen, or `read_input` off).
    pub(super) input_ended: AtomicBool,
    pub(super) cbreak: Mutex<Option<CbreakGuard>>,
    /// A quit or a terminating signal arrived: the end is not a normal one (no aside wait).
    pub(super) aborted: AtomicBool,
    /// Streamed text released line by line when the output is not a screen.
    pub(super) lines: Mutex<super::stream::LineStream>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(super) fn render_options(&self) -> RenderOptions {
        RenderOptions {
            verbose: self.verbose,
            color: self.port.color(),
            width: screen_width(self.port.columns()),
            home: self.home.clone(),
        }
    }

    pub(super) fn channel(&self) -> Option<HumanChannel> {
        lock(&self.channel).clone()
    }

    pub(super) fn aside(&self) -> Option<Arc<dyn Aside>> {
        lock(&self.aside).clone()
    }

    fn ask_aside(&self, question: &str) {
        let report = self.report.clone();
        match self.aside() {
            Some(aside) => aside.ask(question, lock(&self.window).lines(), report),
            None => report(AsideOutcome::Failed(AsideFailure::NotReady(
                "运行还没开始,没有可问的上下文".into(),
            ))),
        }
    }

    pub(super) fn on_event(&self, ev: &Event) {
        lock(&self.window).push(ev);
        lock(&self.tally).observe(ev);
        lock(&self.activity).observe(ev);
        let opts = self.render_options();
        // Not a screen (a pipe, a CI log): the main thread's text goes out line by line as it
        // streams, not only when the turn ends.
        let release = if self.port.is_screen() {
            Release::Render
        } else {
            lock(&self.lines).observe(ev)
        };
        let mut lines = match release {
            Release::Render => render(ev, &opts),
            Release::Text(t) => text_lines(&t, &opts),
        };
        if ev.depth == 0 && matches!(ev.kind, EventKind::Text { .. }) {
            let run_time = self.started.elapsed();
            lines.push(lock(&self.tally).status_line(run_time, &opts));
        }
        if !lines.is_empty() {
            self.port.print_rendered(&lines);
        } else if matches!(
            ev.kind,
            EventKind::Question { .. } | EventKind::Answer { .. }
        ) {
            // The prompt text depends on whether a question is pending.
            self.port.redraw();
        }
    }

    pub(super) fn on_input(&self, ev: InputEvent) {
        let Some(channel) = self.channel() else {
            return;
        };
        match ev {
            InputEvent::Line(line) => {
                if self.interrupting.swap(false, Ordering::SeqCst) {
                    self.port.set_prompt(self.resident_prompt());
                    if let Some(i) = lock(&self.interrupter).clone() {
                        i.resume(line.trim());
                    }
                    return;
                }
                match route(&line, channel.oldest_pending().as_ref()) {
                    Route::Nothing => {}
                    Route::Skip { id } => {
                        channel.decline(&id);
                    }
                    Route::Answer { id, text } => {
                        if !channel.answer(&id, &text) {
                            // It timed out a moment ago: the words become a message.
                            self.to_inbox(&channel, &text);
                        }
                    }
                    Route::Aside { question } => self.ask_aside(&question),
                    Route::Inbox { text } => self.to_inbox(&channel, &text),
                }
            }
            InputEvent::Eof => {
                self.input_ended.store(true, Ordering::SeqCst);
                if self.interrupting.swap(false, Ordering::SeqCst) {
                    // Nobody can answer the Ctrl-C prompt any more: carry on, saying nothing.
                    if let Some(i) = lock(&self.interrupter).clone() {
                        i.resume("");
                    }
                }
                for id in route_eof(&channel.pending()) {
                    channel.decline(&id);
                }
                self.port.set_prompt(PromptKind::Hidden);
            }
        }
    }

    fn to_inbox(&self, channel: &HumanChannel, text: &str) {
        if let Some(sent) = channel.send(text) {
            let line = inbox_receipt(sent.appended, &self.render_options());
            self.port.print_rendered(&[line]);
        }
    }

    pub(super) fn on_aside(&self, outcome: AsideOutcome) {
        let opts = self.render_options();
        let lines = match outcome {
            AsideOutcome::Answer { text, cost_usd } => aside_answer(&text, cost_usd, &opts),
            AsideOutcome::Failed(failure) => {
                aside_failure(failure.kind(), failure.message(), &opts)
            }
        };
        self.port.print_rendered(&lines);
    }

    /// The prompt while no Ctrl-C prompt shows: resident in keys mode, none otherwise.
    pub(super) fn resident_prompt(&self) -> PromptKind {
        if lock(&self.cbreak).is_some() && !self.input_ended.load(Ordering::SeqCst) {
            PromptKind::Resident
        } else {
            PromptKind::Hidden
        }
    }

    /// SIGINT: what it means now.
    pub(super) fn on_sigint(&self) -> ConsoleSignal {
        let interrupter = lock(&self.interrupter).clone();
        let Some(interrupter) = interrupter else {
            return ConsoleSignal::Quit;
        };
        if !self.keyboard
            || self.input_ended.load(Ordering::SeqCst)
            || self.interrupting.swap(true, Ordering::SeqCst)
        {
            return ConsoleSignal::Quit;
        }
        lock(&self.activity).clear();
        // Counted before interrupting: the note speaks of the questions waiting at the press.
        let waiting = self.channel().map(|c| c.pending().len()).unwrap_or(0);
        // Held until the human answers the prompt (Enter, words) or presses Ctrl-C again.
        interrupter.pause();
        let opts = self.render_options();
        let mut lines = interrupt_prompt(&opts);
        lines.extend(interrupt_pending_note(waiting, &opts));
        if lock(&self.cbreak).is_some() {
            self.port.set_prompt(PromptKind::Interrupt);
        } else {
            // Line mode: the `>` is printed once, the terminal echoes what is typed.
            lines.push(INTERRUPT_INPUT_PROMPT.trim_end().into());
        }
        self.port.print_rendered(&lines);
        ConsoleSignal::Interrupted
    }
}
