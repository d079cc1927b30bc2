//! [`PlainPrinter`]: the non-interactive event outlet — rendered, sanitised lines to stdout, no
//! prompt, no spinners (pipes, CI, `once`) — and [`PlainFrontend`], the run's frontend over it.
//! The interactive console replaces both on a terminal.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;

use super::render::{render, text_lines, RenderOptions, Tally};
use super::stream::{LineStream, Release};
use crate::agent::{Event, EventSink};
use crate::flow::frontend::{Frontend, Notice};
use crate::shown::{Line, Stream, Terminal};

/// Renders events to a writer (stdout by default) and keeps the running totals.
pub struct PlainPrinter {
    opts: RenderOptions,
    tally: Mutex<Tally>,
    /// The output boundary: text cleaned, styles applied by it.
    out: Mutex<Terminal>,
    started: Instant,
    /// Streamed text released line by line (stdout is not a terminal); `None` prints text
    /// when its turn ends.
    lines: Option<Mutex<LineStream>>,
}

impl PlainPrinter {
    /// A printer to stdout; colours only when stdout is a terminal and `NO_COLOR` is unset.
    pub fn stdout(verbose: bool) -> Arc<Self> {
        let tty = crate::shown::is_terminal(Stream::Stdout);
        let color = tty && std::env::var_os("NO_COLOR").is_none();
        let width = super::tty::layout_columns();
        let printer = Self::build(
            RenderOptions {
                verbose,
                color,
                width: super::sanitize::screen_width(width),
                home: std::env::var_os("HOME").map(Into::into),
            },
            crate::shown::stdout(),
            !tty,
        );
        Arc::new(printer)
    }

    /// A printer to any writer (tests); text shows when its turn ends.
    pub fn new(opts: RenderOptions, out: Box<dyn Write + Send>) -> Arc<Self> {
        Arc::new(Self::build(opts, Terminal::new(out), false))
    }

    /// A printer to any writer that streams the main thread's text line by line.
    pub fn streaming(opts: RenderOptions, out: Box<dyn Write + Send>) -> Arc<Self> {
        Arc::new(Self::build(opts, Terminal::new(out), true))
    }

    fn build(opts: RenderOptions, out: Terminal, stream_lines: bool) -> Self {
        PlainPrinter {
            opts,
            tally: Mutex::new(Tally::default()),
            out: Mutex::new(out),
            started: Instant::now(),
            lines: stream_lines.then(|| Mutex::new(LineStream::default())),
        }
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
        let release = match &self.lines {
            Some(l) => l.lock().unwrap_or_else(|e| e.into_inner()).observe(ev),
            None => Release::Render,
        };
        let lines = match release {
            Release::Render => render(ev, &self.opts),
            Release::Text(t) => text_lines(&t, &self.opts),
        };
        if !lines.is_empty() {
            self.print_lines(&lines);
        }
    }

    /// Prints lines (rendered, or plain text: cleaned on the way out either way).
    pub fn print_lines(&self, lines: &[Line]) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        for l in lines {
            // A closed stdout (a pipe to `head`) must not kill the run.
            let _ = out.line(l, self.opts.color);
            let _ = out.text("\n");
        }
        let _ = out.flush();
    }

    /// The status line: context, cost so far ("≥" when unknown), elapsed time.
    pub fn status_line(&self) -> Line {
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

/// The non-interactive frontend: a [`PlainPrinter`], no input (questions settle by
/// `--timeout`), Ctrl-C left to the driver.
pub struct PlainFrontend {
    printer: Arc<PlainPrinter>,
}

impl PlainFrontend {
    /// A plain frontend on stdout.
    pub fn stdout(verbose: bool) -> Self {
        PlainFrontend {
            printer: PlainPrinter::stdout(verbose),
        }
    }

    /// A plain frontend over any printer (tests).
    pub fn new(printer: Arc<PlainPrinter>) -> Self {
        PlainFrontend { printer }
    }
}

#[async_trait]
impl Frontend for PlainFrontend {
    fn events(&self) -> EventSink {
        self.printer.sink()
    }
    fn notice(&self, notice: &Notice) {
        let lines = match notice {
            Notice::Totals => vec![self.printer.status_line()],
            other => super::frontend::notice_lines(other, self.printer.options()),
        };
        self.printer.print_lines(&lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::EventKind;
    use crate::role::Role;

    /// A writer tests can read back.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn ev(kind: EventKind) -> Event {
        Event {
            agent: "ad-hoc".into(),
            role: Role::Once,
            depth: 0,
            kind,
        }
    }

    #[test]
    fn without_a_terminal_text_goes_out_line_by_line_while_it_streams() {
        let buf = Buf::default();
        let p = PlainPrinter::streaming(RenderOptions::default(), Box::new(buf.clone()));
        p.print_event(&ev(EventKind::TextDelta {
            text: "正在编译\n还".into(),
        }));
        // The first line is out before the turn ends.
        assert_eq!(buf.text(), "  正在编译\n");
        p.print_event(&ev(EventKind::TextDelta {
            text: "差一步".into(),
        }));
        p.print_event(&ev(EventKind::Text {
            text: "正在编译\n还差一步".into(),
        }));
        assert_eq!(buf.text(), "  正在编译\n  还差一步\n");
        // A printer for tests (or a terminal) prints the block when the turn ends.
        let buf = Buf::default();
        let p = PlainPrinter::new(RenderOptions::default(), Box::new(buf.clone()));
        p.print_event(&ev(EventKind::TextDelta { text: "a\n".into() }));
        assert_eq!(buf.text(), "");
        p.print_event(&ev(EventKind::Text { text: "a\n".into() }));
        assert_eq!(buf.text(), "  a\n");
    }
}
