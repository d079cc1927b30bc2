//! Teardown on SIGINT, SIGTERM and SIGHUP (issue "Lifecycle"): containers must not outlive a
//! run that was told to stop. The caller decides what to do afterwards (exit code 130/143...).

use nix::sys::signal::Signal;
use std::future::Future;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

use crate::sandbox::SandboxFactory;

/// Installs handlers for SIGINT, SIGTERM and SIGHUP now (inside a Tokio runtime) and returns a
/// future that waits for the first of them, tears `factory` down and yields the signal.
/// From this call on, those signals no longer terminate the process by default, so await the
/// future (typically in a `select!` against the run) and exit afterwards.
///
/// Errors: installing a handler failed. A failed teardown is logged, not returned.
pub fn teardown_on_signal(
    factory: Arc<dyn SandboxFactory>,
) -> std::io::Result<impl Future<Output = Signal> + Send> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(async move {
        let sig = tokio::select! {
            _ = int.recv() => Signal::SIGINT,
            _ = term.recv() => Signal::SIGTERM,
            _ = hup.recv() => Signal::SIGHUP,
        };
        if let Err(e) = factory.teardown().await {
            tracing::warn!("teardown after {sig}: {e}");
        }
        sig
    })
}
