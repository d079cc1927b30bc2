//! The console as a run's [`Frontend`] (the UI seam of [`crate::flow::frontend`]): what `go` and
//! `run` get when stdin is a terminal; and how a [`Notice`] looks on screen, for both frontends.
//!
//! Lifecycle as the driver calls it: the command line builds the console (events print as lines;
//! the terminal is untouched while the run's services are built and the Docker image may be
//! built with its own spinner); [`Frontend::attach`] takes the terminal (cbreak, input thread,
//! resident prompt, signal listener) and the run's controls (Ctrl-C, aside oracle);
//! [`Frontend::quit_requested`] resolves on the second Ctrl-C; [`Frontend::detach`] waits for
//! pending aside answers (≤ 120 s, not after a quit or a signal) and restores the terminal.

use async_trait::async_trait;

use super::console::Console;
use super::render::{closing_line, shorten_home, wake_banner, RenderOptions};
use crate::agent::EventSink;
use crate::flow::frontend::{Controls, Frontend, Notice};
use crate::shown::Line;

/// The lines of a notice (every kind but [`Notice::Totals`], which is the frontend's own
/// running tally).
pub fn notice_lines(notice: &Notice, opts: &RenderOptions) -> Vec<Line> {
    match notice {
        Notice::Archived(dir) => vec![Line::plain(format!(
            "<- 上一段已归档到 {}",
            shorten_home(dir, opts.home.as_deref())
        ))],
        Notice::Wake(info) => vec![wake_banner(info, opts)],
        Notice::Amended => {
            vec!["+ 收到 (已追加进确认书;目标会按它重新设定,协调者这一轮直接收到它)".into()]
        }
        Notice::AlreadyClarified => vec![
            "- 需求已经确认过(notes/需求.md 四段齐全):--clarify-only 不改它,这句话没记进确认书。要按它重新确认就加 --new"
                .into(),
        ],
        Notice::Recovered(text) => vec![Line::plain(format!("! {text}"))],
        Notice::Closing(c) => vec![
            Line::new(),
            closing_line(c.cost_usd, c.all_known, c.any_known, &c.manifest),
        ],
        Notice::Totals => Vec::new(),
    }
}

#[async_trait]
impl Frontend for Console {
    fn events(&self) -> EventSink {
        self.event_sink()
    }

    fn notice(&self, notice: &Notice) {
        let lines = match notice {
            Notice::Totals => vec![self.status_line()],
            other => notice_lines(other, &self.render_options()),
        };
        self.print_rendered(&lines);
    }

    fn attach(&self, controls: Controls) {
        if let Err(e) = self.start(controls.channel.clone()) {
            tracing::warn!(error = %e, "console: no interactive input");
        }
        self.set_interrupter(controls.interrupt);
        self.set_aside(controls.aside);
    }

    fn owns_interrupt(&self) -> bool {
        Console::owns_interrupt(self)
    }

    async fn quit_requested(&self) {
        Console::quit_requested(self).await
    }

    fn detach(&self) {
        self.finish_blocking();
    }
}
