//! How an image build shows that it is alive: a spinner when stderr is a terminal, plain lines
//! when it is not (a CI log, `2> build.log`, a pipe), nothing when the caller asked for quiet.
//!
//! indicatif draws nothing on a stderr that is not a terminal, so a first run in CI used to sit
//! silent for minutes while the base image was built. Plain mode prints every stage and, at most
//! every [`DETAIL_EVERY`], the build's latest output line, each with the elapsed time. Both go
//! through the output boundary ([`crate::shown`]): the build's output lines come from a
//! container and are cleaned on the way to the terminal like any other text.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::shown::Stream;

/// Least time between two detail lines in plain mode.
pub(super) const DETAIL_EVERY: Duration = Duration::from_secs(5);

/// How a build shows its progress on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    /// Nothing.
    Hidden,
    /// A spinner on a terminal, plain lines otherwise.
    Live,
    /// Only its stages and its end as plain lines, even on a terminal: the build runs in the
    /// background beside the run's own screen (a clarifier's questions, a model's streamed
    /// answer), which a redrawn spinner would overwrite.
    Stages,
}

/// The progress of one build.
pub(super) enum BuildProgress {
    /// stderr is a terminal: one spinner line, redrawn.
    Bar(ProgressBar),
    /// stderr is not a terminal: a line per stage, detail lines throttled.
    Lines(Mutex<Lines>),
    /// [`Shown::Stages`]: a line per stage, no detail lines.
    Stages(Mutex<Lines>),
    /// The caller asked for no progress at all.
    Hidden,
}

/// Plain-line state.
pub(super) struct Lines {
    out: Box<dyn Write + Send>,
    started: Instant,
    last_detail: Option<Instant>,
}

impl BuildProgress {
    /// Progress on stderr as `shown` says.
    #[allow(clippy::expect_used, reason = "a literal template")]
    pub(super) fn stderr(shown: Shown) -> Self {
        match shown {
            Shown::Hidden => return BuildProgress::Hidden,
            Shown::Stages => {
                return BuildProgress::Stages(Mutex::new(Lines::new(Box::new(
                    crate::shown::stderr(),
                ))))
            }
            Shown::Live => {}
        }
        if crate::shown::is_terminal(Stream::Stderr) {
            let bar = ProgressBar::with_draw_target(None, crate::shown::bar_target(Stream::Stderr));
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                    .expect("valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            return BuildProgress::Bar(bar);
        }
        Self::lines(Box::new(crate::shown::stderr()))
    }

    /// Plain lines into `out`.
    pub(super) fn lines(out: Box<dyn Write + Send>) -> Self {
        BuildProgress::Lines(Mutex::new(Lines::new(out)))
    }

    /// A new stage ("building base image …"): always shown.
    pub(super) fn stage(&self, msg: String) {
        match self {
            BuildProgress::Bar(bar) => bar.set_message(msg),
            BuildProgress::Lines(l) | BuildProgress::Stages(l) => {
                l.lock().unwrap_or_else(|e| e.into_inner()).line(&msg)
            }
            BuildProgress::Hidden => {}
        }
    }

    /// The build's latest output line: the spinner shows each; plain mode at most one per
    /// [`DETAIL_EVERY`].
    pub(super) fn detail(&self, msg: String) {
        match self {
            BuildProgress::Bar(bar) => bar.set_message(msg),
            BuildProgress::Lines(l) => {
                let mut l = l.lock().unwrap_or_else(|e| e.into_inner());
                let due = l.last_detail.is_none_or(|t| t.elapsed() >= DETAIL_EVERY);
                if due {
                    l.last_detail = Some(Instant::now());
                    l.line(&format!("  {msg}"));
                }
            }
            BuildProgress::Stages(_) | BuildProgress::Hidden => {}
        }
    }

    /// The build is over.
    pub(super) fn finish(&self, msg: String) {
        match self {
            BuildProgress::Bar(bar) => bar.finish_with_message(msg),
            BuildProgress::Lines(l) | BuildProgress::Stages(l) => {
                l.lock().unwrap_or_else(|e| e.into_inner()).line(&msg)
            }
            BuildProgress::Hidden => {}
        }
    }
}

impl Lines {
    fn new(out: Box<dyn Write + Send>) -> Self {
        Lines {
            out,
            started: Instant::now(),
            last_detail: None,
        }
    }

    fn line(&mut self, msg: &str) {
        let secs = self.started.elapsed().as_secs();
        // A log that cannot be written must not stop the build.
        let _ = writeln!(self.out, "- [{secs:>4} s] {msg}");
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_lines_show_every_stage_and_throttle_details() {
        let sink = Sink::default();
        let p = BuildProgress::lines(Box::new(sink.clone()));
        p.stage("building base image b:1 with debootstrap (about a minute)".into());
        p.detail("base image: I: Retrieving InRelease".into());
        for i in 0..1000 {
            p.detail(format!("base image: I: Unpacking {i}"));
        }
        p.stage("building agent image a:1 from b:1".into());
        p.finish("agent image a:1 ready (3 s)".into());
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            "- [   0 s] building base image b:1 with debootstrap (about a minute)"
        );
        assert_eq!(lines[1], "- [   0 s]   base image: I: Retrieving InRelease");
        assert!(lines[2].ends_with("building agent image a:1 from b:1"));
        assert!(lines[3].ends_with("agent image a:1 ready (3 s)"));
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
    }

    /// A build in the background (a deferred run's image) prints its stages and its end and
    /// nothing in between, never a redrawn line.
    #[test]
    fn a_background_build_shows_its_stages_only() {
        let sink = Sink::default();
        let p = BuildProgress::Stages(Mutex::new(Lines::new(Box::new(sink.clone()))));
        p.stage("building base image b:1".into());
        for i in 0..100 {
            p.detail(format!("base image: I: Unpacking {i}"));
        }
        p.finish("agent image a:1 ready (3 s)".into());
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with("building base image b:1"));
        assert!(lines[1].ends_with("agent image a:1 ready (3 s)"));
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
    }

    #[test]
    fn hidden_prints_nothing_and_stderr_off_a_terminal_is_lines() {
        BuildProgress::Hidden.stage("x".into());
        // The test harness's stderr is captured, not a terminal.
        if !crate::shown::is_terminal(Stream::Stderr) {
            assert!(matches!(
                BuildProgress::stderr(Shown::Live),
                BuildProgress::Lines(_)
            ));
        }
        assert!(matches!(
            BuildProgress::stderr(Shown::Hidden),
            BuildProgress::Hidden
        ));
    }
}
