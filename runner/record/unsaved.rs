//! The run's one latch for persistence failures (issue 26 §3: a failed save is a failure).
//!
//! Sessions (`sessions.db`), the manifest, lineage and the notes are what a later start
//! continues from; a run that cannot keep them must not go on as if it could, nor end as if it
//! had finished. Every writer that fails reports here ([`Unsaved::report`]); the first report
//! trips the latch, and the driver stops the run at once ([`Unsaved::tripped`]) and exits 1
//! with [`Unsaved::message`]: what was not saved and why. Later reports only add what else was
//! lost, so the message names every kind of record once.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

/// What a run could not save: the first failure of each kind of record, in order.
#[derive(Debug, Default)]
pub struct Unsaved {
    /// (what, why) per kind of record that failed, first failure only.
    failures: Mutex<Vec<(String, String)>>,
    /// Cancelled by the first report.
    tripped: CancellationToken,
}

impl Unsaved {
    /// A latch nothing has tripped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `what` (`会话` / `manifest.json` / `lineage.json` / a note's name) could
    /// not be saved because of `why`. Returns true when this is the run's first failure (the
    /// caller may say it on screen once).
    pub fn report(&self, what: &str, why: &dyn std::fmt::Display) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let first = failures.is_empty();
        if !failures.iter().any(|(w, _)| w == what) {
            failures.push((what.to_string(), why.to_string()));
        }
        drop(failures);
        tracing::error!(what, error = %why, "not saved");
        self.tripped.cancel();
        first
    }

    /// Whether anything failed to save.
    pub fn is_tripped(&self) -> bool {
        self.tripped.is_cancelled()
    }

    /// Resolves once anything failed to save.
    pub async fn tripped(&self) {
        self.tripped.cancelled().await
    }

    /// The exit message: every record that was not saved, with its first error; `None` when
    /// everything was saved.
    pub fn message(&self) -> Option<String> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.is_empty() {
            return None;
        }
        let mut text = String::from("运行停了:有记录没存下,接着跑要靠的东西不全。");
        for (what, why) in failures.iter() {
            text.push_str(&format!("\n  没存下 {what}:{why}"));
        }
        text.push_str("\n腾出磁盘空间(或修好写不进的目录)再接着跑。");
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_trips_and_every_kind_is_named_once() {
        let u = Unsaved::new();
        assert!(!u.is_tripped());
        assert_eq!(u.message(), None);
        assert!(u.report("会话", &"database or disk is full"));
        assert!(u.is_tripped());
        assert!(!u.report("会话", &"again"));
        assert!(!u.report("manifest.json", &"No space left on device"));
        let m = u.message().unwrap();
        assert!(m.contains("没存下 会话:database or disk is full"), "{m}");
        assert!(
            m.contains("没存下 manifest.json:No space left on device"),
            "{m}"
        );
        assert!(!m.contains("again"), "{m}");
    }

    #[tokio::test]
    async fn tripped_resolves_after_a_report() {
        let u = std::sync::Arc::new(Unsaved::new());
        let w = u.clone();
        let waiter = tokio::spawn(async move { w.tripped().await });
        u.report("lineage.json", &"read-only file system");
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
