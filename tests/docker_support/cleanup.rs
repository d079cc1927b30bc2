//! Waiting for a run's detached cleanup: the binary's run returns once every process of the
//! run is dead, and the removal of its containers, networks and volumes finishes in a process
//! of its own (`sandbox::docker::reap`). A test that checks "nothing of the run is left" after
//! the binary exited polls until it is so, within a deadline: a wait, never a fixed sleep and
//! no timing assertion.

use std::time::{Duration, Instant};

/// How long a cleanup may take (it usually takes well under a second; a loaded CI engine more).
pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(60);

/// What is left of a run, as a test reads it: nothing when it says so.
pub trait Leftovers {
    /// Nothing is left.
    fn none(&self) -> bool;
}

impl Leftovers for String {
    fn none(&self) -> bool {
        self.trim().is_empty()
    }
}

impl<T> Leftovers for Vec<T> {
    fn none(&self) -> bool {
        self.is_empty()
    }
}

/// Asks `left` until it says nothing is left, at most [`CLEANUP_DEADLINE`]; its last answer
/// (what is still left when the deadline passed).
pub fn once_cleaned<T: Leftovers>(mut left: impl FnMut() -> T) -> T {
    let deadline = Instant::now() + CLEANUP_DEADLINE;
    loop {
        let now = left();
        if now.none() || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`once_cleaned`] for an asynchronous question (the engine's API).
pub async fn once_cleaned_async<T, F, Fut>(mut left: F) -> T
where
    T: Leftovers,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = Instant::now() + CLEANUP_DEADLINE;
    loop {
        let now = left().await;
        if now.none() || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
