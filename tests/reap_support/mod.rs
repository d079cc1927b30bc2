//! Shared setup of the tests of a run's end on the real engine (`tests/docker_reap.rs`,
//! `tests/docker_cleanup.rs`): one `once` of the binary in a fresh workspace whose Bash call
//! leaves background processes, what it leaves on the engine and in its temporary directory,
//! and a way to kill its detached cleanup before that removed anything.
#![allow(dead_code)]

#[path = "../docker_support/mod.rs"]
pub mod docker_support;
#[path = "../model_support/mod.rs"]
pub mod model_support;

use docker_support::{agent_image, containers_where, run_networks_where};
use flowerbox::sandbox::docker::Engine;
use model_support::ScriptedModel;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Bash call: processes that sleep and ones that keep writing a ticker file in the
/// workspace, left running in the background as a job, in a session of their own (`setsid`),
/// immune to hangups (`nohup`) and double-forked (orphaned at once: the pod's init adopts it).
pub const LEAVES_PROCESSES: &str = "sleep 1000 >/dev/null 2>&1 &\n\
     setsid sleep 1000 >/dev/null 2>&1 &\n\
     nohup sleep 1000 >/dev/null 2>&1 &\n\
     (while :; do date +%s%N > ticker; sleep 0.05; done) >/dev/null 2>&1 &\n\
     setsid sh -c 'while :; do date +%s%N > ticker-setsid; sleep 0.05; done' >/dev/null 2>&1 &\n\
     nohup sh -c 'while :; do date +%s%N > ticker-nohup; sleep 0.05; done' >/dev/null 2>&1 &\n\
     (sh -c 'while :; do date +%s%N > ticker-orphan; sleep 0.05; done' >/dev/null 2>&1 &)\n\
     sleep 0.3; echo started";

/// The tickers [`LEAVES_PROCESSES`] keeps writing.
pub const TICKERS: [&str; 4] = ["ticker", "ticker-setsid", "ticker-nohup", "ticker-orphan"];

/// The roles of the run's containers that run only flowerbox's own processes (the pod's
/// under a uid no agent has): the run's end leaves them to the cleanup.
pub const INFRA_ROLES: [&str; 3] = ["pod", "proxy", "fence"];

/// One `once` of the binary in a fresh workspace, with a home and a temporary directory of its
/// own (where its private exec-service binary goes).
pub struct Run {
    _model: ScriptedModel,
    _dirs: [tempfile::TempDir; 3],
    pub ws: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    image: String,
    /// `flowerbox.workspace=<ws>`: every container and network of the run.
    pub label: String,
    cmd: Command,
}

impl Run {
    pub async fn new(engine: &Engine) -> Run {
        Run::running_command(engine, LEAVES_PROCESSES).await
    }

    /// A run whose agent's one Bash call runs `command`.
    pub async fn running_command(engine: &Engine, command: &str) -> Run {
        Run::with_turns(
            engine,
            json!([
                {"content": [{"type": "tool_use", "name": "Bash",
                              "input": {"command": command}}]},
                {"content": [{"type": "text", "text": "好了"}]}]),
        )
        .await
    }

    /// As [`Run::running_command`], each event of the agent's last answer coming `pause_ms` late.
    pub async fn running_command_slow_end(engine: &Engine, command: &str, pause_ms: u64) -> Run {
        Run::with_turns(
            engine,
            json!([
                {"content": [{"type": "tool_use", "name": "Bash",
                              "input": {"command": command}}]},
                {"content": [{"type": "text", "text": "好了"}],
                 "fault": {"delay_ms": pause_ms}}]),
        )
        .await
    }

    /// A run whose agent answers `turns`.
    async fn with_turns(engine: &Engine, turns: serde_json::Value) -> Run {
        let image = agent_image(engine).await;
        let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": turns}]}));
        let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
        let ws = dirs[0].path().canonicalize().unwrap();
        let home = dirs[1].path().canonicalize().unwrap();
        let tmp = dirs[2].path().canonicalize().unwrap();
        let cmd = binary(&ws, &home, &tmp, &image, &model.url);
        Run {
            _model: model,
            _dirs: dirs,
            label: format!("flowerbox.workspace={}", ws.display()),
            ws,
            home,
            tmp,
            image,
            cmd,
        }
    }

    pub fn once(&mut self) -> &mut Command {
        self.cmd.args(["once", "-t", "Bash", "留两个后台进程"])
    }

    /// A second `once` in the same workspace, home and temporary directory, whose agent may
    /// run Bash (so the run reaches the engine at its start) and answers `model`'s script.
    pub fn next_once(&self, model: &ScriptedModel) -> Command {
        let mut cmd = binary(&self.ws, &self.home, &self.tmp, &self.image, &model.url);
        cmd.args(["once", "-t", "Bash", "再来一次"]);
        cmd
    }

    /// Containers of the run that are running and can run an agent's code (all but
    /// [`INFRA_ROLES`]).
    pub async fn running(&self, engine: &Engine) -> Vec<String> {
        self.running_roles(engine)
            .await
            .into_iter()
            .filter(|(_, role)| !INFRA_ROLES.contains(&role.as_str()))
            .map(|(id, role)| format!("{id} ({role})"))
            .collect()
    }

    /// Containers of the run that are running, with their role.
    pub async fn running_roles(&self, engine: &Engine) -> Vec<(String, String)> {
        use bollard::query_parameters::ListContainersOptions;
        let filters =
            std::collections::HashMap::from([("label".to_string(), vec![self.label.clone()])]);
        let opts = ListContainersOptions {
            all: false,
            filters: Some(filters),
            ..Default::default()
        };
        let listed = engine.list_containers(opts).await.unwrap();
        listed
            .into_iter()
            .filter_map(|c| {
                let role = c.labels?.get("flowerbox.role")?.clone();
                Some((c.id?, role))
            })
            .collect()
    }

    /// Everything of the run on the engine or in its temporary directory.
    pub async fn left(&self, engine: &Engine) -> Vec<String> {
        let mut left = self.left_on_engine(engine).await;
        left.extend(exec_dirs(&self.tmp));
        left
    }

    /// The run's containers (any state) and networks on the engine.
    pub async fn left_on_engine(&self, engine: &Engine) -> Vec<String> {
        let mut left = containers_where(engine, "label", self.label.clone()).await;
        left.extend(run_networks_where(engine, self.label.clone()).await);
        left
    }

    /// The run's background writers wrote their tickers and have stopped writing them.
    /// No ticker was written after `exited` (the binary's exit), looked at 500 ms later, so a
    /// writer that outlived the exit would have written by then.
    pub fn tickers_quiet_since(&self, exited: std::time::SystemTime) {
        std::thread::sleep(Duration::from_millis(500));
        for ticker in TICKERS {
            let written = std::fs::metadata(self.ws.join(ticker))
                .and_then(|m| m.modified())
                .expect("the background writer wrote");
            assert!(
                written <= exited,
                "{ticker}: written {:?} after the binary exited",
                written.duration_since(exited).unwrap_or_default()
            );
        }
    }

    /// What still runs of the run's containers that can run an agent's code once the engine
    /// had a moment (at most 5 s) to see them dead: the run's end kills their processes in
    /// the pod without the engine, which reports each container dead shortly after.
    pub async fn running_after_a_moment(&self, engine: &Engine) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let running = self.running(engine).await;
            if running.is_empty() || std::time::Instant::now() >= deadline {
                return running;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The engine's `kill` events for the run's agent containers (all but [`INFRA_ROLES`])
    /// before `until`: the run's end asks the engine to kill only what it could not end in
    /// the pod.
    pub async fn engine_kills_before(
        &self,
        engine: &Engine,
        until: std::time::SystemTime,
    ) -> Vec<String> {
        use bollard::query_parameters::EventsOptions;
        use futures::StreamExt;
        let secs = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                .to_string()
        };
        let filters = std::collections::HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("event".to_string(), vec!["kill".to_string()]),
            ("label".to_string(), vec![self.label.clone()]),
        ]);
        let until_ns = until
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        let events: Vec<_> = engine
            .docker()
            .events(Some(EventsOptions {
                since: Some(secs(until - Duration::from_secs(600))),
                until: Some(secs(until + Duration::from_secs(1))),
                filters: Some(filters),
            }))
            .collect()
            .await;
        events
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.time_nano.unwrap_or(i64::MAX) < until_ns)
            .filter_map(|e| {
                let attrs = e.actor?.attributes?;
                let role = attrs.get("flowerbox.role")?.clone();
                (!INFRA_ROLES.contains(&role.as_str())).then(|| {
                    format!(
                        "{} ({role})",
                        attrs.get("name").cloned().unwrap_or_default()
                    )
                })
            })
            .collect()
    }

    pub fn ticker_stopped(&self) {
        let read = |t: &str| std::fs::read(self.ws.join(t)).expect("the background writer wrote");
        let before = TICKERS.map(read);
        std::thread::sleep(Duration::from_millis(500));
        for (ticker, before) in TICKERS.iter().zip(before) {
            assert_eq!(
                read(ticker),
                before,
                "{ticker}: a process of the run outlived the command"
            );
        }
    }

    /// Runs [`Run::once`] and kills its detached cleanup before that removed anything:
    /// stopped as soon as it runs (so the binary still hands it its plan whole and exits),
    /// killed once the binary is gone. Returns once the binary exited successfully and the
    /// engine reports every container that ran an agent's code dead; the rest of the run is left on the engine
    /// and its private exec-service directory in [`Run::tmp`], owned by a dead process.
    pub async fn once_with_a_killed_cleanup(&mut self, engine: &Engine) {
        let ws = self.ws.clone();
        let mut child = self.once().stdout(Stdio::null()).spawn().unwrap();
        let parent = child.id();
        let mut stopped = None;
        let status = loop {
            if stopped.is_none() {
                stopped = cleanup_of(parent, &ws);
                if let Some(pid) = stopped {
                    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
                }
            }
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        assert!(status.success(), "{status:?}");
        let pid = stopped.expect("the run's end started a cleanup");
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        let running = self.running_after_a_moment(engine).await;
        assert!(running.is_empty(), "running after the exit: {running:?}");
    }
}

/// The `flowerbox` binary in `ws` with nothing of the caller's environment but `PATH` (and
/// `DOCKER_HOST`), its model at `model_url`.
fn binary(ws: &Path, home: &Path, tmp: &Path, image: &str, model_url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("FLOWER_NO_PROBE", "1")
        .env("FLOWERBOX_IMAGE", image)
        .env("ANTHROPIC_BASE_URL", model_url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-secret")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        cmd.env("DOCKER_HOST", host);
    }
    cmd
}

/// The private exec-service directories in `tmp`.
pub fn exec_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("flowerbox-exec-"))
        .collect()
}

pub fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether process `pid` runs the cleanup.
fn is_cleanup(pid: &str) -> bool {
    let subcommand = flowerbox::sandbox::docker::reap::SUBCOMMAND.as_bytes();
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == subcommand))
}

/// The cleanup process of the run of process `parent` in `ws`, if one lives: among the
/// children of `parent`'s threads while it lives (found as soon as it runs), else by its
/// working directory (the run's).
fn cleanup_of(parent: u32, ws: &Path) -> Option<nix::unistd::Pid> {
    let child = std::fs::read_dir(format!("/proc/{parent}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|pid| is_cleanup(pid));
    let pid = child.or_else(|| {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid = e.file_name().to_str()?.to_string();
            let here = std::fs::read_link(e.path().join("cwd")).ok()? == ws;
            (here && is_cleanup(&pid)).then_some(pid)
        })
    })?;
    Some(nix::unistd::Pid::from_raw(pid.parse().ok()?))
}
