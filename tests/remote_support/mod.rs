//! Shared by the tests against the second engine (`remote_engine`, `remote_run`): the engine
//! `FLOWERBOX_TEST_SECOND_ENGINE` names (`scripts/second-engine.sh start`), a run's leftovers
//! removed there, and the caller's repository.
#![allow(dead_code)]

use flowerbox::sandbox::docker::image::default_image;
use flowerbox::sandbox::docker::Engine;
use std::process::{Command, Stdio};
use std::time::Duration;

pub const VAR: &str = "FLOWERBOX_TEST_SECOND_ENGINE";

/// The second engine and the agent image on it, or `None` (visibly) when `VAR` is unset. A
/// set `VAR` whose engine does not answer, or lacks the image, fails.
pub async fn second_engine(test: &str) -> Option<(String, Engine, String)> {
    let Ok(host) = std::env::var(VAR) else {
        eprintln!("SKIPPED {test}: {VAR} names no second engine (scripts/second-engine.sh start)");
        return None;
    };
    let engine = Engine::connect(Some(&host), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{VAR}={host}: {e}"));
    let image = std::env::var(format!("{VAR}_IMAGE")).unwrap_or_else(|_| default_image());
    let present = engine.docker().inspect_image(&image).await.is_ok();
    assert!(
        present,
        "{image} is not on {host}: scripts/second-engine.sh load {image}"
    );
    Some((host, engine, image))
}

/// Removes every container, then every volume, labelled with run `run` on the second engine
/// when dropped (a failed assertion included), through the CLI.
pub struct RunOnEngine {
    /// The engine.
    pub host: String,
    /// The run id.
    pub run: String,
}

impl Drop for RunOnEngine {
    fn drop(&mut self) {
        let label = format!("label=flowerbox.run={}", self.run);
        let script = format!(
            "docker ps -aq --filter {label} | xargs -r docker rm -f -v; \
             docker volume ls -q --filter {label} | xargs -r docker volume rm -f"
        );
        let _ = Command::new("sh")
            .args(["-c", &script])
            .env("DOCKER_HOST", &self.host)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The caller's repository: `a.txt` committed on `main`, in a directory of its own (canonical).
pub fn caller_repo() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let git = |args: &[&str]| flowerbox_testkit::git_with_identity(&ws, args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    (dir, ws)
}
