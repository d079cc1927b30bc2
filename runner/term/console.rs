//! [`Console`]: the interactive terminal of a `go`/`run` run in one object — the event renderer,
//! the resident prompt, the input thread, the inbox receipts, the aside oracle, Ctrl-C and the
//! signals, the spinners (seed 000 "运行中怎么和它说话", "屏幕上都是什么", "Ctrl-C",
//! "SIGHUP / SIGTERM").
//!
//! # How a driver uses it
//!
//! Use it when stdin and stdout are terminals (`ConsoleOptions::detect` tells); otherwise the
//! plain printer does. Sketch of a `go`/`run` driver:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use flowerbox::app::{RunContext, RunSetup};
//! # async fn drive(
//! #     globals: flowerbox::cli::options::GlobalOptions,
//! #     creds: flowerbox::creds::Credentials,
//! #     channel: flowerbox::channel::HumanChannel,
//! #     credential_lines: Vec<String>,
//! # ) -> flowerbox::cli::error::ExitStatus {
//! use flowerbox::agent::runtime::INTERRUPTED;
//! use flowerbox::cli::error::ExitStatus;
//! use flowerbox::record::manifest::KILLED_BY_SIGNAL;
//! use flowerbox::term::{tty, Console, ConsoleOptions, ConsoleSignal};
//!
//! // Build first: the Docker image spinner (stderr) runs before the console owns the screen.
//! let ctx = RunContext::build(&globals, &creds, RunSetup {
//!     events: flowerbox::agent::event::null_sink(), // the console subscribes below
//!     human: Arc::new(channel.clone()),
//! #   workbench: None, trim_large: true, window: None, handoff: true, placement: None,
//! #   sandboxes: None,
//! }).await.expect("context");
//! let mut opts = ConsoleOptions::detect(globals.verbose); // ttys, NO_COLOR, $HOME
//! opts.run_dir = Some(globals.run_dir.clone()); // aside/ books open on the first `?`
//! // Inside tokio. Sets cbreak, starts the input thread and the signal listener, and connects
//! // the channel's question events.
//! let mut console = Console::start(opts, channel.clone()).expect("console");
//! if let Some(r) = console.terminal_restore() {
//!     tty::chain_panic_hook(r); // binary layer: the terminal comes back even on a panic
//! }
//! if globals.verbose {
//!     console.print_lines(&credential_lines); // -v: sanitised, through the one port
//! }
//! ctx.runtime.subscribe(console.event_sink()); // every event is rendered by the console
//! console.attach_runtime(ctx.runtime.clone()); // Ctrl-C interrupts it; `?` borrows its model
//! let mut work = tokio::spawn(async { /* the workflow over ctx.runtime */ });
//! loop {
//!     tokio::select! {
//!         _ = &mut work => {
//!             console.finish().await; // (等 N 条旁路问答收尾…), ≤120 s; restores the tty
//!             // print the closing line (render::closing_line) with console.print_rendered
//!             return ExitStatus::Success;
//!         }
//!         sig = console.next_signal() => match sig {
//!             ConsoleSignal::Interrupted => continue, // the console already interrupted
//!             ConsoleSignal::Quit => {
//!                 work.abort(); // first stop the step, then the books
//!                 ctx.runtime.rescue(INTERRUPTED);
//!                 ctx.shutdown().await; // containers removed, worktrees kept
//!                 console.close();
//!                 return ExitStatus::Interrupted; // 130, no panic text
//!             }
//!             ConsoleSignal::Terminate(s) => {
//!                 work.abort();
//!                 ctx.runtime.rescue(KILLED_BY_SIGNAL);
//!                 ctx.shutdown().await;
//!                 console.close();
//!                 // The command line re-raises it: 143 for SIGTERM, 129 for SIGHUP.
//!                 return ExitStatus::Signalled(s as i32);
//!             }
//!         },
//!     }
//! }
//! # }
//! ```
//!
//! Ctrl-C semantics: on a terminal the first press interrupts the round at once
//! ([`Runtime::interrupt`] with no words: in-flight tool calls return "interrupted", the step
//! resumes its session) and shows the three-line prompt; Enter = carry on, text = said to the
//! agent (a second, worded [`Runtime::interrupt`]), a second Ctrl-C = [`ConsoleSignal::Quit`].
//! When stdin is not a terminal the first Ctrl-C is already `Quit`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::aside::{AsideOracle, AsideOutcome, AsideSetup, ASIDE_WAIT};
use super::input::{InputEvent, InputMode, InputThread};
use super::port::{OutputPort, PortConfig, PromptKind};
use super::progress::{Activity, Progress, Spinner};
use super::render::{
    aside_answer, aside_failure, aside_waiting, inbox_receipt, interrupt_pending_note,
    interrupt_prompt, render, RenderOptions, Tally,
};
use super::route::{route, route_eof, Route};
use super::sanitize::{screen_width, Style};
use super::signals::SignalListener;
use super::tty::{CbreakGuard, TerminalRestore};
use super::TermError;
use crate::agent::{Event, EventKind, EventSink, Runtime, Workbench};
use crate::channel::HumanChannel;

/// Something the driver must act on, from [`Console::next_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleSignal {
    /// First Ctrl-C on a terminal: the console interrupted the round and shows the Ctrl-C
    /// prompt. Informational; the run goes on.
    Interrupted,
    /// Second Ctrl-C (first when stdin is not a terminal, or nothing can be interrupted): write
    /// the in-flight step to the manifest, remove the containers, [`Console::close`], exit 130
    /// (`ExitStatus::Interrupted`).
    Quit,
    /// SIGTERM or SIGHUP: write the in-flight step as `killed-by-signal`, remove the
    /// containers, keep the worktrees, [`Console::close`], then leave by the signal
    /// (`ExitStatus::Signalled` from a command-line driver, which re-raises it;
    /// [`super::signals::exit_by_signal`] elsewhere).
    Terminate(Signal),
}

/// Interrupts the current round; [`Runtime`] is one. Called from the signal task and the
/// input thread.
pub trait Interrupt: Send + Sync {
    /// Interrupts cooperatively and resumes with `message` (empty = say nothing).
    fn interrupt(&self, message: &str);
}

impl Interrupt for Runtime {
    fn interrupt(&self, message: &str) {
        Runtime::interrupt(self, message);
    }
}

/// How the console behaves.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// `-v`: subagent text, normal tool results, prompt events.
    pub verbose: bool,
    /// flowerbox's SGR colours (a terminal without `NO_COLOR`).
    pub color: bool,
    /// stdout is a terminal: prompt, spinners, cursor motion. Otherwise plain lines only.
    pub screen: bool,
    /// stdin is a terminal: cbreak input (with `screen`) and the two-step Ctrl-C. Otherwise the
    /// first Ctrl-C quits (seed 000: the custom Ctrl-C exists only on a terminal).
    pub keyboard: bool,
    /// Run the input thread (read stdin for the whole run).
    pub read_input: bool,
    /// The home directory, shown as `~`.
    pub home: Option<PathBuf>,
    /// The workbench described to the aside oracle (defaults to the attached runtime's).
    pub workbench: Option<Workbench>,
    /// The run directory (`-r`): the aside oracle opens `<run_dir>/aside/sessions.db` and
    /// `<run_dir>/aside/manifest.json` there on its first question, unless `aside` is given.
    pub run_dir: Option<PathBuf>,
    /// The aside oracle's own store and manifest, given up front (tests). With neither this
    /// nor `run_dir`, aside questions fail with a `NotReady` line.
    pub aside: Option<AsideSetup>,
}

impl ConsoleOptions {
    /// Options from the process: `screen` = stdout is a terminal, `keyboard` = stdin is one,
    /// `color` = screen and `NO_COLOR` unset, `home` = `$HOME`.
    pub fn detect(verbose: bool) -> Self {
        let screen = std::io::stdout().is_terminal();
        ConsoleOptions {
            verbose,
            color: screen && std::env::var_os("NO_COLOR").is_none(),
            screen,
            keyboard: std::io::stdin().is_terminal(),
            read_input: true,
            home: std::env::var_os("HOME").map(PathBuf::from),
            workbench: None,
            run_dir: None,
            aside: None,
        }
    }
}

/// State shared by the event sink, the input thread, the signal task and the driver.
struct Shared {
    port: OutputPort,
    progress: Progress,
    activity: Mutex<Activity>,
    tally: Mutex<Tally>,
    started: Instant,
    verbose: bool,
    home: Option<PathBuf>,
    channel: HumanChannel,
    aside: AsideOracle,
    interrupter: Mutex<Option<Arc<dyn Interrupt>>>,
    /// The Ctrl-C prompt is showing.
    interrupting: AtomicBool,
    /// stdin is a terminal.
    keyboard: bool,
    /// The input thread saw EOF.
    input_ended: AtomicBool,
    cbreak: Mutex<Option<CbreakGuard>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn render_options(&self) -> RenderOptions {
        RenderOptions {
            verbose: self.verbose,
            color: self.port.color(),
            width: screen_width(self.port.columns()),
            home: self.home.clone(),
        }
    }

    fn on_event(&self, ev: &Event) {
        self.aside.observe(ev);
        lock(&self.tally).observe(ev);
        lock(&self.activity).observe(ev);
        let opts = self.render_options();
        let mut lines = render(ev, &opts);
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

    fn on_input(&self, ev: InputEvent) {
        match ev {
            InputEvent::Line(line) => {
                if self.interrupting.swap(false, Ordering::SeqCst) {
                    self.port.set_prompt(self.resident_prompt());
                    let said = line.trim();
                    if !said.is_empty() {
                        if let Some(i) = lock(&self.interrupter).clone() {
                            i.interrupt(said);
                        }
                    }
                    return;
                }
                match route(&line, self.channel.oldest_pending().as_ref()) {
                    Route::Nothing => {}
                    Route::Skip { id } => {
                        self.channel.decline(&id);
                    }
                    Route::Answer { id, text } => {
                        if !self.channel.answer(&id, &text) {
                            // It timed out a moment ago: the words become a message.
                            self.to_inbox(&text);
                        }
                    }
                    Route::Aside { question } => self.aside.ask(&question),
                    Route::Inbox { text } => self.to_inbox(&text),
                }
            }
            InputEvent::Eof => {
                self.input_ended.store(true, Ordering::SeqCst);
                self.interrupting.store(false, Ordering::SeqCst);
                for id in route_eof(&self.channel.pending()) {
                    self.channel.decline(&id);
                }
                self.port.set_prompt(PromptKind::Hidden);
            }
        }
    }

    fn to_inbox(&self, text: &str) {
        if let Some(sent) = self.channel.send(text) {
            let line = inbox_receipt(sent.appended, &self.render_options());
            self.port.print_rendered(&[line]);
        }
    }

    fn on_aside(&self, outcome: AsideOutcome) {
        let opts = self.render_options();
        let lines = match outcome {
            AsideOutcome::Answer { text, cost_usd } => aside_answer(&text, cost_usd, &opts),
            AsideOutcome::Failed { kind, message } => aside_failure(&kind, &message, &opts),
        };
        self.port.print_rendered(&lines);
    }

    /// The prompt while no Ctrl-C prompt shows: resident in keys mode, none otherwise.
    fn resident_prompt(&self) -> PromptKind {
        if lock(&self.cbreak).is_some() && !self.input_ended.load(Ordering::SeqCst) {
            PromptKind::Resident
        } else {
            PromptKind::Hidden
        }
    }

    /// SIGINT: what it means now.
    fn on_sigint(&self) -> ConsoleSignal {
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
        let waiting = self.channel.pending().len();
        interrupter.interrupt("");
        let opts = self.render_options();
        let mut lines = interrupt_prompt(&opts);
        lines.extend(interrupt_pending_note(waiting, &opts));
        if lock(&self.cbreak).is_some() {
            self.port.set_prompt(PromptKind::Interrupt);
        } else {
            // Line mode: the `>` is printed once, the terminal echoes what is typed.
            lines.push(super::render::INTERRUPT_INPUT_PROMPT.trim_end().to_string());
        }
        self.port.print_rendered(&lines);
        ConsoleSignal::Interrupted
    }
}

/// The interactive terminal of one run. See the module doc for the driver's side.
pub struct Console {
    shared: Arc<Shared>,
    input: Option<InputThread>,
    signals: mpsc::UnboundedReceiver<ConsoleSignal>,
    signal_task: Option<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("port", &self.shared.port)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// Starts the console: the output port on stdout, cbreak mode (when stdin and stdout are
    /// terminals; set before the input thread starts), the input thread, the signal listener
    /// (SIGINT, SIGTERM, SIGHUP, and SIGCONT to re-apply cbreak after a stop), and connects
    /// `channel`'s events to the console's sink (unless a sink is already connected). Must be
    /// called inside a tokio runtime. (The "stdin is not a terminal" warning is the command
    /// line's: it prints it before the driver starts.)
    pub fn start(opts: ConsoleOptions, channel: HumanChannel) -> Result<Console, TermError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| TermError::NoRuntime)?;
        let pending_channel = channel.clone();
        let port = OutputPort::new(
            Box::new(std::io::stdout()),
            PortConfig {
                screen: opts.screen,
                color: opts.color,
                columns: Arc::new(terminal_columns),
                question_pending: Arc::new(move || pending_channel.has_pending()),
            },
        );
        Self::start_with(opts, channel, port, tokio)
    }

    /// [`Console::start`] with a given port (tests, other writers).
    pub fn start_with(
        opts: ConsoleOptions,
        channel: HumanChannel,
        port: OutputPort,
        tokio: tokio::runtime::Handle,
    ) -> Result<Console, TermError> {
        let mut listener = {
            let _enter = tokio.enter();
            SignalListener::new().map_err(|e| TermError::Signals(e.to_string()))?
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let progress = Progress::new(port.clone());
        let cbreak = if opts.read_input && opts.screen && opts.keyboard {
            CbreakGuard::enter().ok()
        } else {
            None
        };
        let keys = cbreak.is_some();
        let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| {
            let weak = weak.clone();
            let report = Arc::new(move |o: AsideOutcome| {
                if let Some(s) = weak.upgrade() {
                    s.on_aside(o);
                }
            });
            let aside = AsideOracle::new(
                opts.aside.clone(),
                opts.run_dir.clone(),
                opts.workbench.clone(),
                tokio.clone(),
                report,
            );
            Shared {
                port: port.clone(),
                progress: progress.clone(),
                activity: Mutex::new(Activity::new(progress.clone())),
                tally: Mutex::new(Tally::default()),
                started: Instant::now(),
                verbose: opts.verbose,
                home: opts.home.clone(),
                channel: channel.clone(),
                aside,
                interrupter: Mutex::new(None),
                interrupting: AtomicBool::new(false),
                keyboard: opts.keyboard,
                input_ended: AtomicBool::new(!opts.read_input),
                cbreak: Mutex::new(cbreak),
            }
        });
        let sink = Console::sink_of(&shared);
        channel.connect_events(sink);

        // cbreak is already set: start reading.
        let input = if opts.read_input {
            let s = shared.clone();
            let mode = if keys {
                InputMode::Keys
            } else {
                InputMode::Lines
            };
            if keys {
                port.set_prompt(PromptKind::Resident);
            }
            Some(
                InputThread::spawn(
                    std::io::stdin(),
                    mode,
                    port.clone(),
                    Box::new(move |ev| {
                        // A failure here must not kill the thread that reads the keyboard.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            s.on_input(ev)
                        }));
                    }),
                )
                .map_err(|e| TermError::Input(e.to_string()))?,
            )
        } else {
            None
        };

        let s = shared.clone();
        let cont = {
            let _enter = tokio.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(
                Signal::SIGCONT as i32,
            ))
            .ok()
        };
        let signal_task = tokio.spawn(async move {
            let mut cont = cont;
            loop {
                let sig = tokio::select! {
                    sig = listener.recv() => Some(sig),
                    Some(()) = recv_opt(&mut cont) => None,
                };
                let Some(sig) = sig else {
                    // Continued after Ctrl-Z: the shell may have reset the terminal.
                    if let Some(g) = lock(&s.cbreak).as_ref() {
                        let _ = g.reapply();
                    }
                    s.port.redraw();
                    continue;
                };
                let out = match sig {
                    Signal::SIGINT => s.on_sigint(),
                    other => ConsoleSignal::Terminate(other),
                };
                if tx.send(out).is_err() {
                    return;
                }
            }
        });

        Ok(Console {
            shared,
            input,
            signals: rx,
            signal_task: Some(signal_task),
            closed: false,
        })
    }

    fn sink_of(shared: &Arc<Shared>) -> EventSink {
        let weak = Arc::downgrade(shared);
        Arc::new(move |ev: Event| {
            let Some(s) = weak.upgrade() else { return };
            // A UI failure must never take down hours of work.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.on_event(&ev)));
        })
    }

    /// The sink to give [`Runtime::new`] (and anything else that emits events). Non-blocking
    /// apart from the terminal write; never panics.
    pub fn event_sink(&self) -> EventSink {
        Console::sink_of(&self.shared)
    }

    /// The run's runtime: Ctrl-C interrupts it, and the aside oracle borrows its provider and
    /// settings (never its store or sandboxes). Call again to replace.
    pub fn attach_runtime(&self, rt: Arc<Runtime>) {
        self.shared.aside.attach(rt.clone());
        *lock(&self.shared.interrupter) = Some(rt);
    }

    /// Replaces what Ctrl-C interrupts (tests, drivers without a [`Runtime`]).
    pub fn set_interrupter(&self, i: Arc<dyn Interrupt>) {
        *lock(&self.shared.interrupter) = Some(i);
    }

    /// The output port (the one writer).
    pub fn port(&self) -> &OutputPort {
        &self.shared.port
    }

    /// Render options for the current terminal (for [`super::render`] helpers such as the
    /// closing line and the wake banner).
    pub fn render_options(&self) -> RenderOptions {
        self.shared.render_options()
    }

    /// Prints untrusted lines, sanitised (the `-v` credential print goes here).
    pub fn print_lines<S: AsRef<str>>(&self, lines: &[S]) {
        self.shared.port.print_lines(lines);
    }

    /// Prints lines built by [`super::render`] helpers.
    pub fn print_rendered<S: AsRef<str>>(&self, lines: &[S]) {
        self.shared.port.print_rendered(lines);
    }

    /// Prints one untrusted line in a flowerbox style.
    pub fn print_styled(&self, style: Style, text: &str) {
        self.shared.port.print_styled(style, text);
    }

    /// A spinner with elapsed time above the prompt (image build, container start), removed
    /// when dropped. Inert when stdout is not a terminal.
    pub fn spinner(&self, label: &str) -> Spinner {
        self.shared.progress.spinner(label)
    }

    /// Restores the terminal from anywhere (a panic hook); `None` when cbreak is not set.
    pub fn terminal_restore(&self) -> Option<TerminalRestore> {
        lock(&self.shared.cbreak).as_ref().map(|g| g.restorer())
    }

    /// Whether keys are read in cbreak mode (the resident prompt is shown).
    pub fn is_cbreak(&self) -> bool {
        lock(&self.shared.cbreak).is_some()
    }

    /// Acts on a finished line exactly as the input thread does (routing table, inbox receipt,
    /// aside question, the Ctrl-C prompt's answer). For other input sources and tests.
    pub fn handle_line(&self, line: &str) {
        self.shared.on_input(InputEvent::Line(line.to_string()));
    }

    /// Acts on the end of input as the input thread does: pending questions are declined and
    /// the prompt is removed.
    pub fn handle_eof(&self) {
        self.shared.on_input(InputEvent::Eof);
    }

    /// Aside questions still being answered.
    pub fn asides_pending(&self) -> usize {
        self.shared.aside.pending()
    }

    /// The next signal to act on. Pending forever once the console is closed.
    pub async fn next_signal(&mut self) -> ConsoleSignal {
        match self.signals.recv().await {
            Some(s) => s,
            None => std::future::pending().await,
        }
    }

    /// Normal end: removes the spinners, waits up to 120 s for pending aside answers (after
    /// the `(等 N 条旁路问答收尾…)` line), then [`Console::close`].
    pub async fn finish(mut self) {
        lock(&self.shared.activity).clear();
        let n = self.shared.aside.pending();
        if n > 0 {
            let line = aside_waiting(n, &self.shared.render_options());
            self.shared.port.print_rendered(&[line]);
            self.shared.aside.wait(ASIDE_WAIT).await;
        }
        self.close();
    }

    /// Immediate end (quit, signal, error): stops the input thread, removes the prompt and
    /// the spinners, restores the terminal's original settings. Idempotent; also done on drop.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if let Some(mut t) = self.input.take() {
            t.stop();
        }
        lock(&self.shared.activity).clear();
        self.shared.port.clear_bottom();
        drop(lock(&self.shared.cbreak).take());
        if let Some(t) = self.signal_task.take() {
            t.abort();
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.close();
    }
}

/// Receives from an optional signal stream; pending forever without one.
async fn recv_opt(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s.as_mut() {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Terminal columns of stdout, 80 when unknown.
fn terminal_columns() -> usize {
    console::Term::stdout()
        .size_checked()
        .map(|(_, c)| c as usize)
        .filter(|c| *c > 0)
        .unwrap_or(80)
}
