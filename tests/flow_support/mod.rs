//! Shared helpers of the workflow integration tests: a temporary project (workspace, HOME) and
//! the real `flowerbox` binary run against a `scripted-model` server.
//!
//! The sandbox is one switch: `FLOWERBOX_TEST_SANDBOX` (default `host`; `docker` runs the same
//! tests with every agent in its own container once the Docker sandbox is built).
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../cli_support/mod.rs"]
pub mod cli_support;
#[path = "../model_support/mod.rs"]
pub mod model_support;

pub use model_support::ScriptedModel;

/// Generous bound that only catches hangs.
pub const HANG: Duration = Duration::from_secs(180);

/// The `--sandbox` the tests use.
pub fn sandbox() -> String {
    std::env::var("FLOWERBOX_TEST_SANDBOX").unwrap_or_else(|_| "host".into())
}

/// A scenario from `tests/scenarios/`.
pub fn scenario(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A temporary project: `<tmp>/home` and the workspace `<tmp>/proj`.
pub struct Project {
    /// Owns both directories.
    _scene: cli_support::Scene,
    /// HOME of the child.
    pub home: PathBuf,
    /// The workspace (also the current directory).
    pub ws: PathBuf,
}

/// What one run printed.
#[derive(Debug)]
pub struct Ran {
    /// Exit status.
    pub status: ExitStatus,
    /// stdout.
    pub out: String,
    /// stderr.
    pub err: String,
}

impl Ran {
    /// The exit code (panics on a signal death).
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }
}

impl Project {
    /// A fresh project.
    pub fn new() -> Self {
        let scene = cli_support::Scene::new();
        Project {
            home: scene.home.clone(),
            ws: scene.cwd.clone(),
            _scene: scene,
        }
    }

    /// `flowerbox --sandbox <sandbox> ARGS` in the workspace, against `model`, stdin empty.
    pub fn command(&self, model: &ScriptedModel, args: &[&str]) -> Command {
        self.command_in(&sandbox(), model, args)
    }

    /// `flowerbox --sandbox SANDBOX ARGS`, whatever `FLOWERBOX_TEST_SANDBOX` says.
    pub fn command_in(&self, sandbox: &str, model: &ScriptedModel, args: &[&str]) -> Command {
        let mut c = self._scene.flowerbox();
        c.env("FLOWER_NO_PROBE", "1")
            .env("ANTHROPIC_BASE_URL", &model.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
            .arg("--sandbox")
            .arg(sandbox)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs to the end (bounded by [`HANG`]).
    pub fn run(&self, model: &ScriptedModel, args: &[&str]) -> Ran {
        let child = self.command(model, args).spawn().expect("spawn flowerbox");
        finish(child)
    }

    /// [`Project::run`] with `--sandbox SANDBOX`, whatever `FLOWERBOX_TEST_SANDBOX` says.
    pub fn run_in(&self, sandbox: &str, model: &ScriptedModel, args: &[&str]) -> Ran {
        let child = self
            .command_in(sandbox, model, args)
            .spawn()
            .expect("spawn flowerbox");
        finish(child)
    }

    /// `<ws>/.flower/notes/<file>`.
    pub fn note(&self, file: &str) -> PathBuf {
        self.ws.join(".flower/notes").join(file)
    }

    /// `<ws>/runs/<file>`.
    pub fn runs(&self, file: &str) -> PathBuf {
        self.ws.join("runs").join(file)
    }

    /// `runs/lineage.json`, parsed.
    pub fn lineage(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.runs("lineage.json")).unwrap()).unwrap()
    }

    /// `runs/manifest.json`, parsed.
    pub fn manifest(&self) -> Vec<Value> {
        serde_json::from_str(&std::fs::read_to_string(self.runs("manifest.json")).unwrap()).unwrap()
    }

    /// The manifest's step names of the rows with run marker `run`, in file order.
    pub fn steps_of(&self, run: &str) -> Vec<String> {
        self.manifest()
            .iter()
            .filter(|r| r["run"] == run)
            .map(|r| r["step"].as_str().unwrap().to_string())
            .collect()
    }

    /// The run markers in the manifest, in order of first appearance.
    pub fn runs_in_manifest(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.manifest() {
            let m = r["run"].as_str().unwrap().to_string();
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }
}

/// Waits for `child` (bounded by [`HANG`], killed on overrun) and collects its output.
pub fn finish(mut child: Child) -> Ran {
    let deadline = Instant::now() + HANG;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "flowerbox hung; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    Ran {
        status,
        out: String::from_utf8_lossy(&stdout).into_owned(),
        err: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Polls `cond` until it holds (bounded by [`HANG`]).
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Request bodies of `model` whose system prompt contains `marker`.
pub fn requests_with(model: &ScriptedModel, marker: &str) -> Vec<Value> {
    model
        .recorded()
        .into_iter()
        .filter(|b| b["system"].to_string().contains(marker))
        .collect()
}
