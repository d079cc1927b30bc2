//! Child processes that are this test binary re-executed to run one of its ignored helper
//! tests, reporting progress on stdout line by line.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// This test binary, set to run only the ignored test `name`, single-threaded, output shown.
/// The caller adds the helper's environment and its stderr.
pub fn helper(name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    c
}

/// Spawns [`helper`]`(name)` as configured by the caller, with stdout piped. Its stdout lines
/// arrive on the receiver, without the `test NAME ... ` libtest prints right before the test's
/// first line. The pipe is drained to the end even when nobody listens any more, so the
/// child never blocks or fails on a full or closed stdout.
pub fn spawn_lines(name: &str, mut cmd: Command) -> (Child, mpsc::Receiver<String>) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let prefix = format!("test {name} ... ");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let line = line
                .strip_prefix(&prefix)
                .map(str::to_string)
                .unwrap_or(line);
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// The first line from `rx` that satisfies `pred`; panics when none came `within` (a bound
/// that only catches hangs) or the child's stdout ended.
pub fn wait_for(
    rx: &mpsc::Receiver<String>,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("child hung or died before reporting");
        if pred(&line) {
            return line;
        }
    }
}
