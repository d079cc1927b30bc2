//! The terminal: line editor, sanitised output port, screen rendering, input thread, aside
//! oracle, Ctrl-C and signals, progress — assembled by [`Console`], the one object a `go`/`run`
//! driver starts (seed 000 "运行中怎么和它说话", "屏幕上都是什么", "Ctrl-C", "SIGHUP / SIGTERM").

use thiserror::Error;

pub mod aside;
pub mod console;
mod dispatch;
pub mod frontend;
pub mod input;
pub mod line_editor;
pub mod plain;
pub mod port;
pub mod progress;
pub mod render;
pub mod route;
pub mod sanitize;
pub mod stream;
pub mod tty;

pub use console::{Console, ConsoleOptions, ConsoleSignal};
pub use plain::{PlainFrontend, PlainPrinter};
pub use port::{OutputPort, PromptKind};
pub use progress::Spinner;

/// Terminal failures. None of them stops a run: the console falls back (line mode, plain
/// output) or reports.
#[derive(Debug, Error)]
pub enum TermError {
    /// stdin is not a terminal (cbreak impossible; line mode is used).
    #[error("stdin is not a terminal")]
    NotATerminal,
    /// termios failed.
    #[error("termios: {0}")]
    Termios(#[source] nix::Error),
    /// The signal listener could not be installed.
    #[error("signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The input thread could not be started.
    #[error("input thread: {0}")]
    Input(#[source] std::io::Error),
    /// [`Console::start`] was called outside a tokio runtime.
    #[error("the console needs a tokio runtime")]
    NoRuntime,
}
