//! Signals, in one place (seed 000 "Ctrl-C", "SIGHUP / SIGTERM"): the listener a run uses to
//! survive long enough to keep its books, the wait of a driver without a terminal, leaving by
//! the signal, and the start prompt's Ctrl-C catcher.
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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

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
///
/// Every SIGINT counts: tokio's signal streams coalesce deliveries that arrive before the
/// stream is polled, so a quick double Ctrl-C on a busy machine would read as one press (the
/// console then waits at its prompt instead of quitting). A counter the signal handler bumps
/// on every delivery ([`sigints_delivered`]) says how many presses a wake-up stands for.
#[derive(Debug)]
pub struct SignalListener {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    /// SIGINT deliveries this listener has answered (a value of [`sigints_delivered`]).
    sigints_seen: u64,
}

/// SIGINT deliveries since the counter was installed (the first [`SignalListener`]).
static SIGINTS: AtomicU64 = AtomicU64::new(0);

/// Installs the SIGINT counter once per process.
fn count_sigints() -> std::io::Result<()> {
    // The first outcome, for every later listener too (an `io::Error` is not `Clone`).
    static INSTALLED: OnceLock<Result<(), Arc<std::io::Error>>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // SAFETY: the action only increments an atomic, which is async-signal-safe.
            unsafe {
                signal_hook_registry::register(nix::libc::SIGINT, || {
                    SIGINTS.fetch_add(1, Ordering::SeqCst);
                })
            }
            .map(|_| ())
            .map_err(Arc::new)
        })
        .clone()
        .map_err(|e| std::io::Error::new(e.kind(), e))
}

/// How many SIGINTs were delivered since the counter was installed.
pub fn sigints_delivered() -> u64 {
    SIGINTS.load(Ordering::SeqCst)
}

impl SignalListener {
    /// Starts listening. Must be called inside a tokio runtime.
    pub fn new() -> std::io::Result<SignalListener> {
        count_sigints()?;
        Ok(SignalListener {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            sigints_seen: sigints_delivered(),
        })
    }

    /// Takes one SIGINT delivery not yet answered, if there is one.
    fn take_sigint(&mut self) -> bool {
        if sigints_delivered() > self.sigints_seen {
            self.sigints_seen += 1;
            true
        } else {
            false
        }
    }

    /// The next signal (SIGINT, SIGTERM or SIGHUP), one SIGINT per delivery. Cancel-safe: a
    /// delivery is taken from the counter only when this returns it.
    pub async fn recv(&mut self) -> Signal {
        loop {
            if self.take_sigint() {
                return Signal::SIGINT;
            }
            tokio::select! {
                Some(()) = self.int.recv() => {
                    // The handler that counts may run just after tokio's own: look again
                    // briefly. A wake-up for presses already answered finds nothing new.
                    for _ in 0..5 {
                        if self.take_sigint() {
                            return Signal::SIGINT;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                Some(()) = self.term.recv() => return Signal::SIGTERM,
                Some(()) = self.hup.recv() => return Signal::SIGHUP,
            }
        }
    }
}

/// A stream of SIGCONT (the shell continued the process after Ctrl-Z), for a terminal that must
/// re-apply its settings. Must be called inside a tokio runtime.
pub fn on_continue() -> std::io::Result<tokio::signal::unix::Signal> {
    signal(SignalKind::from_raw(Signal::SIGCONT as i32))
}

/// Resolves with the signal number on SIGHUP or SIGTERM, and on SIGINT when `int` (nobody else
/// handles Ctrl-C): how a driver without a terminal learns it must stop. The handlers are
/// installed now, before the future is first polled: a signal that comes after this call is
/// caught (what starts containers early needs that); they replace the signals' default
/// actions, so await it. Must be called inside a Tokio runtime.
pub fn stop_signals(int: bool) -> impl std::future::Future<Output = i32> + Send {
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut intr = if int {
        signal(SignalKind::interrupt()).ok()
    } else {
        None
    };
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    async move {
        tokio::select! {
            _ = recv(&mut hup) => nix::libc::SIGHUP,
            _ = recv(&mut term) => nix::libc::SIGTERM,
            _ = recv(&mut intr) => nix::libc::SIGINT,
        }
    }
}

/// Restores the default action for `sig` and raises it; returns `128 + sig` if the process is
/// still alive (the binary's last step after a run ended by SIGHUP/SIGTERM).
pub fn reraise(sig: i32) -> i32 {
    if let Ok(s) = Signal::try_from(sig) {
        // SAFETY: installing the default disposition has no handler code to be unsafe about.
        let _ = unsafe { nix::sys::signal::signal(s, SigHandler::SigDfl) };
        let _ = raise(s);
    }
    128 + sig
}

/// Set by the SIGINT handler while a [`CatchSigint`] is alive. A signal handler can only reach
/// static state; this flag is the one piece, reset on every install.
static SIGINT_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: nix::libc::c_int) {
    SIGINT_SEEN.store(true, Ordering::SeqCst);
}

/// Catches SIGINT while alive (the start prompt: Ctrl-C there cancels instead of killing the
/// process) and restores the previous action when dropped.
pub struct CatchSigint {
    previous: SigAction,
}

impl CatchSigint {
    /// Installs the catcher.
    ///
    /// # Errors
    /// `sigaction` failed.
    pub fn install() -> std::io::Result<Self> {
        SIGINT_SEEN.store(false, Ordering::SeqCst);
        let action = SigAction::new(
            SigHandler::Handler(on_sigint),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let previous = unsafe { sigaction(Signal::SIGINT, &action) }?;
        Ok(Self { previous })
    }

    /// Whether SIGINT arrived since [`CatchSigint::install`].
    pub fn caught(&self) -> bool {
        SIGINT_SEEN.load(Ordering::SeqCst)
    }
}

impl Drop for CatchSigint {
    fn drop(&mut self) {
        // SAFETY: reinstates the action that was in place before `install`.
        let _ = unsafe { sigaction(Signal::SIGINT, &self.previous) };
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

    #[tokio::test]
    async fn two_quick_sigints_are_two() {
        // Both arrive before the listener is polled: tokio's stream coalesces them into one
        // wake-up, and the second press (the console's "quit") used to be lost.
        let mut l = SignalListener::new().unwrap();
        raise(Signal::SIGINT).unwrap();
        raise(Signal::SIGINT).unwrap();
        for n in 1..=2 {
            let got = tokio::time::timeout(std::time::Duration::from_secs(10), l.recv())
                .await
                .unwrap_or_else(|_| panic!("SIGINT {n} of 2 not delivered"));
            assert_eq!(got, Signal::SIGINT);
        }
        // Nothing more: a third recv waits.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(300), l.recv())
                .await
                .is_err()
        );
    }
}
