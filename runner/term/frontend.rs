//! The console as the workflow driver's [`Frontend`] (the UI seam of [`crate::flow::drive`]):
//! what `go` and `run` use when stdin is a terminal.
//!
//! Lifecycle as the driver calls it: [`console_frontend`] builds the console (events print as
//! lines; the terminal is untouched while the run context is built and the Docker image may be
//! built with its own spinner); [`Frontend::attach`] takes the terminal (cbreak, input thread,
//! resident prompt, signal listener) and attaches the runtime (Ctrl-C, aside oracle);
//! [`Frontend::quit_requested`] resolves on the second Ctrl-C; [`Frontend::detach`] waits for
//! pending aside answers (≤ 120 s, not after a quit or a signal) and restores the terminal.

use std::sync::Arc;

use async_trait::async_trait;

use super::console::{Console, ConsoleOptions};
use super::render::RenderOptions;
use crate::agent::{EventSink, Runtime};
use crate::channel::HumanChannel;
use crate::cli::options::GlobalOptions;
use crate::flow::drive::Frontend;

#[async_trait]
impl Frontend for Console {
    fn events(&self) -> EventSink {
        self.event_sink()
    }

    fn render_options(&self) -> RenderOptions {
        Console::render_options(self)
    }

    fn print(&self, lines: &[String]) {
        self.print_rendered(lines);
    }

    fn attach(&self, channel: &HumanChannel, runtime: &Arc<Runtime>) {
        if let Err(e) = self.start(channel.clone()) {
            tracing::warn!(error = %e, "console: no interactive input");
        }
        self.attach_runtime(runtime.clone());
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

/// The console for a `go`/`run` run whose stdin is a terminal, or `None` when it cannot be
/// built (no tokio runtime): the driver then falls back to plain output.
pub fn console_frontend(globals: &GlobalOptions) -> Option<Arc<dyn Frontend>> {
    let mut opts = ConsoleOptions::detect(globals.verbose);
    opts.keyboard = globals.interactive;
    opts.run_dir = Some(globals.run_dir.clone());
    match Console::new(opts) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            tracing::warn!(error = %e, "console unavailable");
            None
        }
    }
}
