//! The user's side of the git red-team tests: a plain `git status` on the host where an agent
//! may have planted a repository (its marker proves a planted command ran), the positive
//! control that proves the marker would appear, and the count of the attempts an attack
//! script announced.

use flowerbox_testkit::git;
use std::path::Path;

/// A plain `git status` in `dir` on the host, as the user would run it (no global or system
/// config, `HOME` at `home`). Its outcome is not the point: what it runs is.
pub fn host_status(dir: &Path, home: &Path) {
    let _ = std::process::Command::new("git")
        .arg("status")
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output();
}

/// The detection works: the same `git status` in `dir/control` does run a planted fsmonitor.
pub fn positive_control(dir: &Path) {
    let ws = dir.join("control");
    std::fs::create_dir(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    let mark = dir.join("CONTROL-MARK");
    git(
        &ws,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch '{}'; false", mark.display()),
        ],
    );
    host_status(&ws, dir);
    assert!(
        mark.exists(),
        "the control fsmonitor did not run: the check would prove nothing"
    );
}

/// Counts the attempts an attack script announced (`ATTEMPT <name>` lines), each exactly once,
/// and checks it ran to its end (`DONE`).
pub fn attempts_made(out: &str, expected: &[&str]) -> usize {
    assert!(
        out.contains("DONE"),
        "the attack script did not finish: {out}"
    );
    for name in expected {
        assert_eq!(
            out.matches(&format!("ATTEMPT {name}\n")).count(),
            1,
            "{name} not attempted: {out}"
        );
    }
    expected.len()
}

/// Says how the attack of `test` in `mode` went, then fails on any success.
pub fn conclude(test: &str, mode: &str, attempts: usize, breaches: &[String]) {
    eprintln!(
        "{test} {mode}: {attempts} attempts, {} succeeded {breaches:?}",
        breaches.len()
    );
    assert!(
        breaches.is_empty(),
        "{attempts} attempts, succeeded: {breaches:?}"
    );
}
