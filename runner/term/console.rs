//! [`Console`]: the interactive terminal of a `go`/`run` run in one object — the event renderer,
//! the resident prompt, the input thread, the inbox receipts, the aside oracle, Ctrl-C and the
//! signals, the spinners (seed 000 "运行中怎么和它说话", "屏幕上都是什么", "Ctrl-C",
//! "SIGHUP / SIGTERM").
//!
//! # How a driver uses it
//!
//! `go` and `run` use it as the run's frontend ([`super::frontend`]: the command line picks the
//! console when stdin is a terminal, and the workflow driver calls the seam). Any other driver
//! uses it directly. Two phases: [`Console::new`] gives the event sink and changes nothing on
//! the terminal (so the Docker image build can draw its own spinner), [`Console::start`] takes
//! the terminal over once the question channel exists. Sketch of a driver:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # async fn drive(
//! #     settings: flowerbox::flow::RunSettings,
//! #     channel: flowerbox::channel::HumanChannel,
//! #     credential_lines: Vec<String>,
//! # ) -> flowerbox::flow::RunEnd {
//! use flowerbox::agent::runtime::INTERRUPTED;
//! use flowerbox::flow::aside::AsideOracle;
//! use flowerbox::flow::{RunContext, RunEnd, RunSetup};
//! use flowerbox::record::manifest::KILLED_BY_SIGNAL;
//! use flowerbox::term::{tty, Console, ConsoleOptions, ConsoleSignal};
//!
//! let console = Console::new(ConsoleOptions::detect(false)).expect("inside tokio");
//! console.print_lines(&credential_lines); // -v: sanitised, through the one port
//! let ctx = RunContext::build(&settings, RunSetup {
//!     events: console.event_sink(), // every event is rendered by the console
//!     human: Arc::new(channel.clone()),
//! #   workbench: None, trim_large: true, window: None, handoff: true, placement: None,
//! #   sandboxes: None, notices: Arc::new(|_: &flowerbox::flow::frontend::Notice| {}),
//! }).await.expect("context"); // the image spinner (stderr) runs here, before start()
//! // cbreak (before the input thread), input thread, resident prompt, signal listener.
//! console.start(channel.clone()).expect("console");
//! if let Some(r) = console.terminal_restore() {
//!     tty::chain_panic_hook(r); // binary layer: the terminal comes back even on a panic
//! }
//! console.set_interrupter(ctx.runtime.clone()); // Ctrl-C interrupts the round
//! console.set_aside(Arc::new(AsideOracle::new(
//!     ctx.runtime.clone(), // `?` borrows its model, never its store or sandboxes
//!     None,
//!     Some(settings.run_dir.clone()),
//!     tokio::runtime::Handle::current(),
//! )));
//! let mut work = tokio::spawn(async { /* the workflow over ctx.runtime */ });
//! loop {
//!     tokio::select! {
//!         _ = &mut work => {
//!             console.finish().await; // (等 N 条旁路问答收尾…), ≤120 s; restores the tty
//!             // show the closing line (render::closing_line) with console.print_rendered
//!             return RunEnd::Finished;
//!         }
//!         sig = console.next_signal() => match sig {
//!             ConsoleSignal::Interrupted => continue, // the console already interrupted
//!             ConsoleSignal::Quit => {
//!                 work.abort(); // first stop the step, then the books
//!                 ctx.runtime.rescue(INTERRUPTED);
//!                 ctx.shutdown().await; // containers removed, worktrees kept
//!                 console.close();
//!                 return RunEnd::Interrupted; // 130, no panic text
//!             }
//!             ConsoleSignal::Terminate(s) => {
//!                 work.abort();
//!                 ctx.runtime.rescue(KILLED_BY_SIGNAL);
//!                 ctx.shutdown().await;
//!                 console.close();
//!                 // The command line re-raises it: 143 for SIGTERM, 129 for SIGHUP.
//!                 return RunEnd::Signalled(s as i32);
//!             }
//!         },
//!     }
//! }
//! # }
//! ```
//!
//! Ctrl-C semantics: on a terminal the first press interrupts the round at once and holds it
//! (`Runtime::pause`: in-flight tool calls return "interrupted", nothing more is spent) and
//! shows the three-line prompt; Enter = carry on, text = said to the agent (both
//! `Runtime::resume`, the step resumes its session), a second Ctrl-C = [`ConsoleSignal::Quit`].
//! When stdin is not a terminal the first Ctrl-C is already `Quit`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::aside::{EventWindow, ASIDE_WAIT};
use super::dispatch::{lock, Shared};
use super::input::{InputEvent, InputMode, InputThread};
use super::port::{OutputPort, PortConfig, PromptKind};
use super::progress::{Activity, Progress, Spinner};
use super::render::{aside_waiting, RenderOptions, Tally};
use super::tty::{CbreakGuard, TerminalRestore};
use super::TermError;
use crate::agent::{Event, EventSink};
use crate::channel::HumanChannel;
use crate::flow::frontend::{Aside, AsideOutcome, AsideReport, Interrupt};
use crate::signals::SignalListener;

/// Something the driver must act on, from [`Console::next_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleSignal {
    /// First Ctrl-C on a terminal: the console interrupted the round and shows the Ctrl-C
    /// prompt; the round is held until the prompt is answered. Informational for the driver.
    Interrupted,
    /// Second Ctrl-C (first when stdin is not a terminal, or nothing can be interrupted): write
    /// the in-flight step to the manifest, remove the containers, [`Console::close`], exit 130
    /// (`RunEnd::Interrupted`).
    Quit,
    /// SIGTERM or SIGHUP: write the in-flight step as `killed-by-signal`, remove the
    /// containers, keep the worktrees, [`Console::close`], then leave by the signal
    /// (`RunEnd::Signalled` to a command-line driver, which re-raises it;
    /// [`crate::signals::exit_by_signal`] elsewhere).
    Terminate(Signal),
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
}

impl ConsoleOptions {
    /// Options from the process: `screen` = stdout is a terminal, `keyboard` = stdin is one,
    /// `color` = screen and `NO_COLOR` unset, `home` = `$HOME`.
    pub fn detect(verbose: bool) -> Self {
        let screen = crate::shown::is_terminal(crate::shown::Stream::Stdout);
        ConsoleOptions {
            verbose,
            color: screen && std::env::var_os("NO_COLOR").is_none(),
            screen,
            keyboard: std::io::stdin().is_terminal(),
            read_input: true,
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }
}

/// The interactive terminal of one run. See the module doc for the driver's side. Every
/// method takes `&self`, so it can be shared (`Arc<Console>`) between the driver's branches.
pub struct Console {
    shared: Arc<Shared>,
    keys_wanted: bool,
    read_input: bool,
    tokio: tokio::runtime::Handle,
    input: Mutex<Option<InputThread>>,
    signals: tokio::sync::Mutex<mpsc::UnboundedReceiver<ConsoleSignal>>,
    signal_tx: Mutex<Option<mpsc::UnboundedSender<ConsoleSignal>>>,
    signal_task: Mutex<Option<JoinHandle<()>>>,
    started: AtomicBool,
    closed: AtomicBool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("port", &self.shared.port)
            .field("closed", &self.closed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Console {
    /// A console on stdout. Changes nothing on the terminal yet: events print as lines (so
    /// whatever runs before [`Console::start`] — the Docker image build with its own spinner —
    /// keeps the screen to itself). Must be called inside a tokio runtime.
    pub fn new(opts: ConsoleOptions) -> Result<Console, TermError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| TermError::NoRuntime)?;
        let slot: Arc<Mutex<Option<HumanChannel>>> = Arc::new(Mutex::new(None));
        let pending = slot.clone();
        let port = OutputPort::with_terminal(
            crate::shown::stdout(),
            PortConfig {
                screen: opts.screen,
                color: opts.color,
                columns: Arc::new(super::tty::layout_columns),
                question_pending: Arc::new(move || {
                    lock(&pending).as_ref().is_some_and(|c| c.has_pending())
                }),
            },
        );
        Ok(Self::build(opts, port, tokio, slot))
    }

    /// [`Console::new`] with a given port (tests, other writers).
    pub fn with_port(
        opts: ConsoleOptions,
        port: OutputPort,
        tokio: tokio::runtime::Handle,
    ) -> Console {
        Self::build(opts, port, tokio, Arc::new(Mutex::new(None)))
    }

    fn build(
        opts: ConsoleOptions,
        port: OutputPort,
        tokio: tokio::runtime::Handle,
        channel: Arc<Mutex<Option<HumanChannel>>>,
    ) -> Console {
        let progress = Progress::new(port.clone());
        let shared = Arc::new_cyclic(|weak: &std::sync::Weak<Shared>| {
            let weak = weak.clone();
            let report: AsideReport = Arc::new(move |o: AsideOutcome| {
                if let Some(s) = weak.upgrade() {
                    s.on_aside(o);
                }
            });
            Shared {
                port: port.clone(),
                progress: progress.clone(),
                activity: Mutex::new(Activity::new(progress.clone())),
                tally: Mutex::new(Tally::default()),
                started: Instant::now(),
                verbose: opts.verbose,
                home: opts.home.clone(),
                channel,
                aside: Mutex::new(None),
                window: Mutex::new(EventWindow::default()),
                report,
                interrupter: Mutex::new(None),
                interrupting: AtomicBool::new(false),
                keyboard: opts.keyboard,
                input_ended: AtomicBool::new(true),
                cbreak: Mutex::new(None),
                aborted: AtomicBool::new(false),
                lines: Mutex::new(super::stream::LineStream::default()),
            }
        });
        let (tx, rx) = mpsc::unbounded_channel();
        Console {
            shared,
            keys_wanted: opts.read_input && opts.screen && opts.keyboard,
            read_input: opts.read_input,
            tokio,
            input: Mutex::new(None),
            signals: tokio::sync::Mutex::new(rx),
            signal_tx: Mutex::new(Some(tx)),
            signal_task: Mutex::new(None),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Takes over the terminal for the run: remembers `channel` (answers, inbox, the prompt
    /// text), connects its events to the console (unless a sink is connected already), sets
    /// cbreak when stdin and stdout are terminals — *before* the input thread starts — then
    /// starts the input thread (keys, or whole lines from a pipe), shows the resident prompt,
    /// and listens for SIGINT, SIGTERM, SIGHUP (and SIGCONT, to re-apply cbreak after Ctrl-Z).
    /// Idempotent.
    pub fn start(&self, channel: HumanChannel) -> Result<(), TermError> {
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let shared = &self.shared;
        *lock(&shared.channel) = Some(channel.clone());
        channel.connect_events(self.event_sink());
        let mut listener = {
            let _enter = self.tokio.enter();
            SignalListener::new().map_err(TermError::Signals)?
        };
        if self.keys_wanted {
            *lock(&shared.cbreak) = CbreakGuard::enter().ok();
        }
        let keys = lock(&shared.cbreak).is_some();
        if self.read_input {
            shared.input_ended.store(false, Ordering::SeqCst);
            if keys {
                shared.port.set_prompt(PromptKind::Resident);
            }
            let s = shared.clone();
            let mode = if keys {
                InputMode::Keys
            } else {
                InputMode::Lines
            };
            let thread = InputThread::spawn(
                std::io::stdin(),
                mode,
                shared.port.clone(),
                Box::new(move |ev| {
                    // A failure here must not kill the thread that reads the keyboard.
                    let _ =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.on_input(ev)));
                }),
            )
            .map_err(TermError::Input)?;
            *lock(&self.input) = Some(thread);
        }

        let Some(tx) = lock(&self.signal_tx).take() else {
            return Ok(());
        };
        let s = shared.clone();
        let cont = {
            let _enter = self.tokio.enter();
            crate::signals::on_continue().ok()
        };
        let task = self.tokio.spawn(async move {
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
                if out != ConsoleSignal::Interrupted {
                    // Set here, not where the driver reads it: the driver may act on its own
                    // signal handling first, and the end must still skip the aside wait.
                    s.aborted.store(true, Ordering::SeqCst);
                }
                if tx.send(out).is_err() {
                    return;
                }
            }
        });
        *lock(&self.signal_task) = Some(task);
        Ok(())
    }

    fn sink_of(shared: &Arc<Shared>) -> EventSink {
        let weak = Arc::downgrade(shared);
        Arc::new(move |ev: Event| {
            let Some(s) = weak.upgrade() else { return };
            // A UI failure must never take down hours of work.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.on_event(&ev)));
        })
    }

    /// The event outlet (for `RunSetup::events` or `Runtime::subscribe`). Non-blocking apart
    /// from the terminal write; never panics.
    pub fn event_sink(&self) -> EventSink {
        Console::sink_of(&self.shared)
    }

    /// What Ctrl-C interrupts (the run's round). Call again to replace.
    pub fn set_interrupter(&self, i: Arc<dyn Interrupt>) {
        *lock(&self.shared.interrupter) = Some(i);
    }

    /// Where `?` questions go (the run's aside oracle). Until one is set they fail as not
    /// ready. Call again to replace.
    pub fn set_aside(&self, aside: Arc<dyn Aside>) {
        *lock(&self.shared.aside) = Some(aside);
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

    /// The status line: context, cost so far ("≥" when unknown), elapsed time.
    pub fn status_line(&self) -> crate::shown::Line {
        let opts = self.shared.render_options();
        lock(&self.shared.tally).status_line(self.shared.started.elapsed(), &opts)
    }

    /// Prints untrusted lines, sanitised (the `-v` credential print goes here).
    pub fn print_lines<S: AsRef<str>>(&self, lines: &[S]) {
        self.shared.port.print_lines(lines);
    }

    /// Prints lines built by [`super::render`] helpers.
    pub fn print_rendered<L: Clone + Into<crate::shown::Line>>(&self, lines: &[L]) {
        self.shared.port.print_rendered(lines);
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

    /// Whether this console handles Ctrl-C itself (stdin is a terminal): the first press
    /// interrupts, the second is [`ConsoleSignal::Quit`].
    pub fn owns_interrupt(&self) -> bool {
        self.shared.keyboard
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
        self.shared.aside().map_or(0, |a| a.pending())
    }

    /// The next signal to act on (after [`Console::start`]). Pending forever once closed.
    pub async fn next_signal(&self) -> ConsoleSignal {
        let got = self.signals.lock().await.recv().await;
        match got {
            Some(s) => s,
            None => std::future::pending().await,
        }
    }

    /// Resolves on [`ConsoleSignal::Quit`] (the second Ctrl-C); `Interrupted` is handled by
    /// the console and `Terminate` is left to the driver's own SIGHUP/SIGTERM handling.
    pub async fn quit_requested(&self) {
        loop {
            if self.next_signal().await == ConsoleSignal::Quit {
                return;
            }
        }
    }

    /// Normal end: removes the spinners, waits up to 120 s for pending aside answers (after
    /// the `(等 N 条旁路问答收尾…)` line), then [`Console::close`].
    pub async fn finish(&self) {
        lock(&self.shared.activity).clear();
        if let Some(aside) = self.shared.aside() {
            let n = aside.pending();
            if n > 0 {
                let line = aside_waiting(n, &self.shared.render_options());
                self.shared.port.print_rendered(&[line]);
                aside.wait(ASIDE_WAIT).await;
            }
        }
        self.close();
    }

    /// [`Console::finish`] for synchronous callers: blocks this thread (never a tokio worker's
    /// only thread: the answers run on the runtime's workers) while aside answers arrive. After
    /// a Quit or Terminate it does not wait.
    pub fn finish_blocking(&self) {
        lock(&self.shared.activity).clear();
        if let Some(aside) = self.shared.aside() {
            let n = aside.pending();
            let aborted = || self.shared.aborted.load(Ordering::SeqCst);
            if n > 0 && !aborted() {
                let line = aside_waiting(n, &self.shared.render_options());
                self.shared.port.print_rendered(&[line]);
                // Polled, so a signal that arrives meanwhile ends the wait at once.
                let deadline = std::time::Instant::now() + ASIDE_WAIT;
                while aside.pending() > 0 && !aborted() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
            aside.wait_blocking(std::time::Duration::ZERO);
        }
        self.close();
    }

    /// Immediate end (quit, signal, error): stops the input thread, removes the prompt and
    /// the spinners, restores the terminal's original settings. Idempotent; also done on drop.
    /// Output still works afterwards, as plain lines.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let thread = lock(&self.input).take();
        if let Some(mut t) = thread {
            t.stop();
        }
        self.shared.input_ended.store(true, Ordering::SeqCst);
        lock(&self.shared.activity).clear();
        self.shared.port.clear_bottom();
        drop(lock(&self.shared.cbreak).take());
        if let Some(t) = lock(&self.signal_task).take() {
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
