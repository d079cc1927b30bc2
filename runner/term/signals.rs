//! Signals a run must survive long enough to keep its books (seed 000 "Ctrl-C", "SIGHUP /
//! SIGTERM").
//!
//! A crashed terminal sends SIGHUP, whose default action ends the process before any cleanup:
//! the manifest misses the step in flight and, in flowerbox, containers would leak. So the
//! driver listens ([`SignalListener`]), writes the in-flight step as `killed-by-signal`, removes
//! the run's containers, keeps the worktrees, restores the terminal, and then leaves *by the
//! signal* ([`exit_by_signal`]: default disposition restored and the signal raised again, so
//! the parent sees "killed by SIGTERM", exit status 143 in a shell). The same applies to
//! `once` (flower's `once` lacked it).
//!
//! Ctrl-C is SIGINT. With a listener installed the default action (end the process) no longer
//! happens; the console decides: first press interrupts the round, second press quits with
//! [`EXIT_INTERRUPTED`] (130), cleanly, after the same bookkeeping.

use nix::sys::signal::{raise, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use tokio::signal::unix::{signal, SignalKind};

/// Exit status of a run the human quit with Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// The status a shell reports for a process ended by `sig` (143 for SIGTERM, 129 for SIGHUP).
pub fn signal_exit_code(sig: Signal) -> i32 {
    128 + sig as i32
}

/// Listens for SIGINT, SIGTERM and SIGHUP. Installing it replaces their default actions for
/// the whole process, so every path that creates one must act on what it receives.
#[derive(Debug)]
pub struct SignalListener {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl SignalListener {
    /// Starts listening. Must be called inside a tokio runtime.
    pub fn new() -> std::io::Result<SignalListener> {
        Ok(SignalListener {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal (SIGINT, SIGTERM or SIGHUP). Cancel-safe.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
        }
    }
}

/// Ends the process by `sig`: restores its default disposition, unblocks it and raises it.
/// Falls back to `exit(128 + sig)` if the process somehow survives. Call it last, after the
/// books are written and the terminal is restored.
pub fn exit_by_signal(sig: Signal) -> ! {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_DFL has no handler code to be unsafe about; the process is ending.
    unsafe {
        let _ = sigaction(sig, &default);
    }
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = set.thread_unblock();
    let _ = raise(sig);
    std::process::exit(signal_exit_code(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(signal_exit_code(Signal::SIGTERM), 143);
        assert_eq!(signal_exit_code(Signal::SIGHUP), 129);
        assert_eq!(signal_exit_code(Signal::SIGINT), EXIT_INTERRUPTED);
    }

    #[tokio::test]
    async fn the_listener_receives_a_raised_signal() {
        let mut l = SignalListener::new().unwrap();
        // SIGHUP to ourselves: the listener replaced the default action, so we survive it.
        raise(Signal::SIGHUP).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), l.recv())
            .await
            .expect("signal not delivered");
        assert_eq!(got, Signal::SIGHUP);
    }
}
