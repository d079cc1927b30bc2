//! [`PlainPrinter`]: the non-interactive event outlet — rendered, sanitised lines to stdout, no
//! prompt, no spinners (pipes, CI, `once`). The interactive console replaces it on a terminal.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::agent::{Event, EventSink};
use crate::term::render::{render, RenderOptions, Tally};

/// Renders events to a writer (stdout by default) and keeps the running totals.
pub struct PlainPrinter {
    opts: RenderOptions,
    tally: Mutex<Tally>,
    out: Mutex<Box<dyn Write + Send>>,
    started: Instant,
}

impl PlainPrinter {
    /// A printer to stdout; colours only when stdout is a terminal and `NO_COLOR` is unset.
    pub fn stdout(verbose: bool) -> Arc<Self> {
        use std::io::IsTerminal;
        let tty = std::io::stdout().is_terminal();
        let color = tty && std::env::var_os("NO_COLOR").is_none();
        let width = if tty {
            terminal_columns().unwrap_or(100)
        } else {
            100
        };
        Self::new(
            RenderOptions {
                verbose,
                color,
                width: crate::term::sanitize::screen_width(width),
                home: std::env::var_os("HOME").map(Into::into),
            },
            Box::new(std::io::stdout()),
        )
    }

    /// A printer to any writer (tests).
    pub fn new(opts: RenderOptions, out: Box<dyn Write + Send>) -> Arc<Self> {
        Arc::new(PlainPrinter {
            opts,
            tally: Mutex::new(Tally::default()),
            out: Mutex::new(out),
            started: Instant::now(),
        })
    }

    /// The render options.
    pub fn options(&self) -> &RenderOptions {
        &self.opts
    }

    /// The outlet to give the runtime.
    pub fn sink(self: &Arc<Self>) -> EventSink {
        let me = self.clone();
        Arc::new(move |ev: Event| me.print_event(&ev))
    }

    /// Renders and prints one event.
    pub fn print_event(&self, ev: &Event) {
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(ev);
        let lines = render(ev, &self.opts);
        if !lines.is_empty() {
            self.print_lines(&lines);
        }
    }

    /// Prints lines as they are (already rendered or plain).
    pub fn print_lines(&self, lines: &[String]) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        for l in lines {
            // A closed stdout (a pipe to `head`) must not kill the run.
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
    }

    /// The status line: context, cost so far ("≥" when unknown), elapsed time.
    pub fn status_line(&self) -> String {
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .status_line(self.started.elapsed(), &self.opts)
    }

    /// Totals so far.
    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The terminal's width in columns, when stdout is one.
pub fn terminal_columns() -> Option<usize> {
    let mut ws: nix::libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; failure leaves it zeroed.
    let rc = unsafe { nix::libc::ioctl(nix::libc::STDOUT_FILENO, nix::libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}
