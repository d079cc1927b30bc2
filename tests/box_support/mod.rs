//! Shared pieces of the red-team tests that attack a run's containers directly through the
//! sandbox (`redteam_box`, `redteam_network`): a script run in a container, and the tally of
//! attempts and the ones that got through.
//!
//! Included with `mod` by crates that also include `docker_support` at their root.
#![allow(dead_code)]

use crate::docker_support::req;
use flowerbox::sandbox::Sandbox;
use std::path::Path;
use std::time::Duration;

/// `script` run by `sb` in `ws` (two minutes at most): its stdout, then its stderr.
pub async fn run(sb: &dyn Sandbox, ws: &Path, script: &str) -> String {
    let out = sb
        .exec(req(script, ws, Duration::from_secs(120)))
        .await
        .expect("exec");
    format!("{}{}", out.stdout, out.stderr)
}

/// Attempts and the ones that got through.
#[derive(Debug, Default)]
pub struct Tally {
    pub attempts: usize,
    pub succeeded: Vec<String>,
}

impl Tally {
    /// One attempt, named `label`.
    pub fn attempt(&mut self, label: &str, got_through: bool) {
        self.attempts += 1;
        if got_through {
            self.succeeded.push(label.to_string());
        }
    }

    /// The lines of a probe's output `out` that start with `got_through` or `refused` (and a
    /// space), each an attempt named `prefix` and the line; there must be `expected` of them.
    pub fn lines(
        &mut self,
        out: &str,
        got_through: &str,
        refused: &str,
        expected: usize,
        prefix: &str,
    ) {
        let (through, no) = (format!("{got_through} "), format!("{refused} "));
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&through) || l.starts_with(&no))
            .collect();
        assert_eq!(
            lines.len(),
            expected,
            "{prefix}the probe did not run through:\n{out}"
        );
        for l in lines {
            self.attempt(&format!("{prefix}{l}"), l.starts_with(&through));
        }
    }

    /// Says how the attacks on `what` went (`{area}, {what}: …{extra}`), then fails when none
    /// was made or one got through.
    pub fn assert_none(&self, area: &str, what: &str, extra: &str) {
        eprintln!(
            "{area}, {what}: {} attempts, {} succeeded{extra}",
            self.attempts,
            self.succeeded.len()
        );
        assert!(self.attempts > 0);
        assert!(
            self.succeeded.is_empty(),
            "{what}: got through: {:?}",
            self.succeeded
        );
    }
}
