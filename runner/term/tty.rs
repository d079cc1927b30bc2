//! The terminal's mode: cbreak while a run reads keys, the original settings back on every exit
//! path (seed 000 "逐字符输入模式与键位").
//!
//! cbreak, not raw: `ICANON` and `ECHO` off so every key reaches the line editor at once and
//! is drawn by flowerbox, `ISIG` left on so Ctrl-C still raises SIGINT (the Ctrl-C prompt
//! depends on it) and output processing (`OPOST`) untouched. The mode is set *before* the
//! input thread starts: set inside the thread, keys typed before it is scheduled would be
//! eaten by the line discipline ("输入丢了").
//!
//! [`CbreakGuard`] restores on drop (normal end, error, unwinding panic). For the paths that
//! skip destructors — a signal exit, `std::process::exit`, a panic with `panic = "abort"` — a
//! [`TerminalRestore`] (cloneable, `Send`) restores from anywhere; [`chain_panic_hook`] lets the
//! binary restore before the panic message is printed. No process-wide state is kept here: the
//! saved settings live in the guard and its restorers.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};

use super::TermError;

/// The width lines are laid out for when stdout does not say (a pipe, a CI log).
pub const UNKNOWN_COLUMNS: usize = 100;

/// The terminal's width in columns, when stdout is a terminal that says.
pub fn stdout_columns() -> Option<usize> {
    crate::shown::columns(crate::shown::Stream::Stdout)
}

/// The columns every frontend lays its lines out for (before
/// [`super::sanitize::screen_width`] clamps them): the terminal's, else [`UNKNOWN_COLUMNS`].
/// Asked again on every line, so a resized terminal is followed.
pub fn layout_columns() -> usize {
    stdout_columns().unwrap_or(UNKNOWN_COLUMNS)
}

/// Restores the terminal settings saved by [`CbreakGuard::enter`]. Cheap to clone; restoring
/// twice is harmless.
#[derive(Clone)]
pub struct TerminalRestore {
    saved: Arc<Mutex<Termios>>,
}

impl std::fmt::Debug for TerminalRestore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TerminalRestore")
    }
}

impl TerminalRestore {
    /// Puts the saved settings back on stdin's terminal (`TCSANOW`). Errors (the terminal hung
    /// up) are returned but there is nothing else to do about them.
    pub fn restore(&self) -> Result<(), TermError> {
        let saved = self.saved.lock().unwrap_or_else(|p| p.into_inner()).clone();
        termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &saved).map_err(TermError::Termios)
    }
}

/// cbreak mode on stdin's terminal for as long as the guard lives.
#[derive(Debug)]
pub struct CbreakGuard {
    restore: TerminalRestore,
}

impl CbreakGuard {
    /// Saves stdin's settings and switches to cbreak. `Err` when stdin is not a terminal or
    /// termios fails; the caller then falls back to line mode.
    pub fn enter() -> Result<CbreakGuard, TermError> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Err(TermError::NotATerminal);
        }
        let saved = termios::tcgetattr(&stdin).map_err(TermError::Termios)?;
        let mut t = saved.clone();
        cbreak(&mut t);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &t).map_err(TermError::Termios)?;
        Ok(CbreakGuard {
            restore: TerminalRestore {
                saved: Arc::new(Mutex::new(saved)),
            },
        })
    }

    /// A restorer for paths that skip this guard's destructor.
    pub fn restorer(&self) -> TerminalRestore {
        self.restore.clone()
    }

    /// Applies cbreak again (after the process was stopped and continued, when the shell put
    /// its own settings back).
    pub fn reapply(&self) -> Result<(), TermError> {
        let mut t = self
            .restore
            .saved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        cbreak(&mut t);
        termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &t).map_err(TermError::Termios)
    }
}

impl Drop for CbreakGuard {
    fn drop(&mut self) {
        let _ = self.restore.restore();
    }
}

/// cbreak: no canonical line editing, no echo, signals still generated, one byte at a time.
fn cbreak(t: &mut Termios) {
    t.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
    t.local_flags.insert(LocalFlags::ISIG);
    t.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    t.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
}

/// Chains a panic hook that restores the terminal before the previous hook prints the panic.
/// For the binary to call once after the console started (the library installs no hook).
pub fn chain_panic_hook(restore: TerminalRestore) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = restore.restore();
        previous(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cbreak_keeps_signals_and_output_processing() {
        // A termios value to edit: take it from a pty when one can be opened.
        let Ok(pty) = nix::pty::openpty(None, None) else {
            eprintln!("no pty available: skipping");
            return;
        };
        let mut t = termios::tcgetattr(&pty.slave).unwrap();
        let before = t.clone();
        cbreak(&mut t);
        assert!(!t.local_flags.contains(LocalFlags::ICANON));
        assert!(!t.local_flags.contains(LocalFlags::ECHO));
        assert!(t.local_flags.contains(LocalFlags::ISIG));
        assert_eq!(t.output_flags, before.output_flags);
        assert_eq!(t.control_chars[SpecialCharacterIndices::VMIN as usize], 1);
    }
}
