//! The run's end on the real engine (issue 32, figure 9): the binary's `once` returns once
//! every process of the run is dead — a background process its Bash call left included — and
//! the removal of its containers, network and private exec-service binary finishes in a
//! detached cleanup process, which outlives a kill of the binary's process group; a cleanup
//! killed itself leaves only what `flowerbox gc` removes (the owner is dead). Fails when
//! `CI=true` and the engine is missing.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;

mod docker_support;

use docker_support::cleanup::once_cleaned_async;
use docker_support::{agent_image, containers_where, engine_or_skip, run_networks_where};
use flowerbox::sandbox::docker::Engine;
use model_support::ScriptedModel;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Bash call: processes that sleep and ones that keep writing a ticker file in the
/// workspace, left running in the background as a job, in a session of their own (`setsid`),
/// immune to hangups (`nohup`) and double-forked (orphaned at once: the pod's init adopts it).
const LEAVES_PROCESSES: &str = "sleep 1000 >/dev/null 2>&1 &\n\
     setsid sleep 1000 >/dev/null 2>&1 &\n\
     nohup sleep 1000 >/dev/null 2>&1 &\n\
     (while :; do date +%s%N > ticker; sleep 0.05; done) >/dev/null 2>&1 &\n\
     setsid sh -c 'while :; do date +%s%N > ticker-setsid; sleep 0.05; done' >/dev/null 2>&1 &\n\
     nohup sh -c 'while :; do date +%s%N > ticker-nohup; sleep 0.05; done' >/dev/null 2>&1 &\n\
     (sh -c 'while :; do date +%s%N > ticker-orphan; sleep 0.05; done' >/dev/null 2>&1 &)\n\
     sleep 0.3; echo started";

/// The tickers [`LEAVES_PROCESSES`] keeps writing.
const TICKERS: [&str; 4] = ["ticker", "ticker-setsid", "ticker-nohup", "ticker-orphan"];

/// The roles of the run's containers that run only flowerbox's own processes (the pod's
/// under a uid no agent has): the run's end leaves them to the cleanup.
const INFRA_ROLES: [&str; 3] = ["pod", "proxy", "fence"];

/// One `once` of the binary in a fresh workspace, with a temporary directory of its own (where
/// its private exec-service binary goes).
struct Run {
    _model: ScriptedModel,
    _dirs: [tempfile::TempDir; 3],
    ws: PathBuf,
    tmp: PathBuf,
    /// `flowerbox.workspace=<ws>`: every container and network of the run.
    label: String,
    cmd: Command,
}

impl Run {
    async fn new(engine: &Engine) -> Run {
        Run::running_command(engine, LEAVES_PROCESSES).await
    }

    /// A run whose agent's one Bash call runs `command`.
    async fn running_command(engine: &Engine, command: &str) -> Run {
        let image = agent_image(engine).await;
        let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash",
                          "input": {"command": command}}]},
            {"content": [{"type": "text", "text": "好了"}]}]}]}));
        let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
        let ws = dirs[0].path().canonicalize().unwrap();
        let tmp = dirs[2].path().canonicalize().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", dirs[1].path())
            .env("TMPDIR", &tmp)
            .env("FLOWER_NO_PROBE", "1")
            .env("FLOWERBOX_IMAGE", &image)
            .env("ANTHROPIC_BASE_URL", &model.url)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-secret")
            .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
            .current_dir(&ws)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Ok(host) = std::env::var("DOCKER_HOST") {
            cmd.env("DOCKER_HOST", host);
        }
        Run {
            _model: model,
            _dirs: dirs,
            label: format!("flowerbox.workspace={}", ws.display()),
            ws,
            tmp,
            cmd,
        }
    }

    fn once(&mut self) -> &mut Command {
        self.cmd.args(["once", "-t", "Bash", "留两个后台进程"])
    }

    /// Containers of the run that are running and can run an agent's code (all but
    /// [`INFRA_ROLES`]).
    async fn running(&self, engine: &Engine) -> Vec<String> {
        self.running_roles(engine)
            .await
            .into_iter()
            .filter(|(_, role)| !INFRA_ROLES.contains(&role.as_str()))
            .map(|(id, role)| format!("{id} ({role})"))
            .collect()
    }

    /// Containers of the run that are running, with their role.
    async fn running_roles(&self, engine: &Engine) -> Vec<(String, String)> {
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
    async fn left(&self, engine: &Engine) -> Vec<String> {
        let mut left = containers_where(engine, "label", self.label.clone()).await;
        left.extend(run_networks_where(engine, self.label.clone()).await);
        left.extend(exec_dirs(&self.tmp));
        left
    }

    /// The run's background writers wrote their tickers and have stopped writing them.
    fn ticker_stopped(&self) {
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
}

/// The private exec-service directories in `tmp`.
fn exec_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("flowerbox-exec-"))
        .collect()
}

fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Right when the binary has exited, no container of the run that can run an agent's code
/// runs and the files its background processes (a job, `setsid`, `nohup`) kept writing stay as
/// they are, although the pod may still live (the cleanup removes it); within the deadline
/// every container, the network and the private binary's directory of the run are gone.
#[tokio::test]
async fn the_runs_end_kills_every_process_and_the_cleanup_removes_the_rest() {
    let Some(engine) = engine_or_skip("reap_end").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    let started = std::time::Instant::now();
    let out = run.once().output().unwrap();
    let took = started.elapsed();
    succeeded(&out);
    let running = run.running(&engine).await;
    assert!(running.is_empty(), "running after the exit: {running:?}");
    eprintln!("once took {} ms", took.as_millis());
    run.ticker_stopped();
    eprintln!(
        "still running once the tickers stopped: {:?}",
        run.running_roles(&engine).await
    );
    let left = once_cleaned_async(|| run.left(&engine)).await;
    let log = std::fs::read_to_string(run.ws.join("runs/flowerbox.log")).unwrap();
    assert!(left.is_empty(), "left by the cleanup: {left:?}\n{log}");
    // It was the detached cleanup's doing: its lines are in the run's log.
    let log = std::fs::read_to_string(run.ws.join("runs/flowerbox.log")).unwrap();
    assert!(log.contains("cleanup of the run's end"), "{log}");
}

/// The cleanup lives in a session of its own: killing the binary's process group (a terminal's
/// Ctrl-C, a CI job's kill) at its exit does not stop it.
#[tokio::test]
async fn the_cleanup_outlives_a_kill_of_the_process_group() {
    let Some(engine) = engine_or_skip("reap_group_killed").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    let child = run.once().process_group(0).spawn().unwrap();
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let out = child.wait_with_output().unwrap();
    // Whatever is left in the group dies with it (none of the run's: the cleanup is not in it).
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    succeeded(&out);
    let running = run.running(&engine).await;
    assert!(running.is_empty(), "running after the exit: {running:?}");
    let left = once_cleaned_async(|| run.left(&engine)).await;
    assert!(left.is_empty(), "left after the group's kill: {left:?}");
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

/// A cleanup killed before it removed anything leaves the run's containers (the agents' dead,
/// every process they started with them, the pod alive) and its network to a dead owner:
/// `flowerbox gc` removes them all. (Stopped at once, so the binary still hands it its plan
/// whole and exits; killed once the binary is gone.)
#[tokio::test]
async fn what_a_killed_cleanup_leaves_goes_with_gc() {
    let Some(engine) = engine_or_skip("reap_cleanup_killed").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    let mut child = run.once().stdout(Stdio::null()).spawn().unwrap();
    let parent = child.id();
    let mut stopped = None;
    let status = loop {
        if stopped.is_none() {
            stopped = cleanup_of(parent, &run.ws);
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
    let running = run.running(&engine).await;
    assert!(running.is_empty(), "running after the exit: {running:?}");
    // Every process an agent started is dead while the pod still lives (the stopped cleanup
    // would have killed it): the agents' containers took them with them.
    run.ticker_stopped();
    let alive = run.running_roles(&engine).await;
    assert!(alive.iter().any(|(_, role)| role == "pod"), "{alive:?}");
    let left = containers_where(&engine, "label", run.label.clone()).await;
    let nets = run_networks_where(&engine, run.label.clone()).await;
    assert!(
        !left.is_empty(),
        "the cleanup removed them before it stopped"
    );
    eprintln!("left by the killed cleanup: {left:?}, networks {nets:?}");
    let mut gc = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    gc.env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", run._dirs[1].path())
        .current_dir(&run.ws)
        .stdin(Stdio::null())
        .arg("gc");
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        gc.env("DOCKER_HOST", host);
    }
    let out = gc.output().unwrap();
    succeeded(&out);
    let mut left = containers_where(&engine, "label", run.label.clone()).await;
    left.extend(run_networks_where(&engine, run.label.clone()).await);
    assert!(
        left.is_empty(),
        "left after gc: {left:?}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// An agent whose container died before the run's end (here it killed its container's main
/// process, which runs under its uid, after starting a background writer) leaves no process
/// alive once the binary exits. On Podman that container's cleanup is refused while the Bash
/// call's exec session still runs, so it stays `stopped` with the writer alive, and the end's
/// kill is refused (500): the synchronous removal that follows kills the writer.
#[tokio::test]
async fn an_agent_container_dead_before_the_end_leaves_no_process() {
    let Some(engine) = engine_or_skip("reap_dead_agent").await else {
        return;
    };
    let mut run = Run::running_command(
        &engine,
        "(while :; do date +%s%N > ticker-late; sleep 0.05; done) >/dev/null 2>&1 &\n\
         sleep 0.3; pkill -KILL -x -u \"$(id -u)\" sleep; sleep 1; echo done",
    )
    .await;
    let out = run.once().output().unwrap();
    let log = std::fs::read_to_string(run.ws.join("runs/flowerbox.log")).unwrap_or_default();
    let read = || std::fs::read(run.ws.join("ticker-late")).expect("the writer wrote");
    let before = read();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        read(),
        before,
        "a process of the dead agent's container outlived the command\n{}\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = once_cleaned_async(|| run.left(&engine)).await;
    assert!(left.is_empty(), "left after the run: {left:?}");
}
