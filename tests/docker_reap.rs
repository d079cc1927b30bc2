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

mod reap_support;

use reap_support::docker_support::cleanup::once_cleaned_async;
use reap_support::docker_support::{
    containers_where, engine_or_skip, gc_command, run_networks_where,
};
use reap_support::{succeeded, Run};
use std::os::unix::process::CommandExt;
use std::time::Duration;

/// Nothing the agent's background processes (a job, `setsid`, `nohup`, double-forked) kept
/// writing was written after the binary exited, although the pod may still live (the cleanup
/// removes it); they were ended in the pod by the agent's exec service, not by the engine (no
/// `kill` event before the exit), and the engine soon reports every agent container dead;
/// within the deadline every container, the network and the private binary's directory of the
/// run are gone.
#[tokio::test]
async fn the_runs_end_kills_every_process_and_the_cleanup_removes_the_rest() {
    let Some(engine) = engine_or_skip("reap_end").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    let started = std::time::Instant::now();
    let out = run.once().output().unwrap();
    let exited = std::time::SystemTime::now();
    let took = started.elapsed();
    succeeded(&out);
    run.tickers_quiet_since(exited);
    // Ended in the pod by the agent's exec service: the engine killed none of them.
    let kills = run.engine_kills_before(&engine, exited).await;
    assert!(kills.is_empty(), "killed through the engine: {kills:?}");
    let running = run.running_after_a_moment(&engine).await;
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
    let running = run.running_after_a_moment(&engine).await;
    assert!(running.is_empty(), "running after the exit: {running:?}");
    let left = once_cleaned_async(|| run.left(&engine)).await;
    assert!(left.is_empty(), "left after the group's kill: {left:?}");
}

/// A cleanup killed before it removed anything leaves the run's containers (the agents' dead,
/// every process they started with them, the pod alive) and its network to a dead owner:
/// `flowerbox gc` removes them all ([`Run::once_with_a_killed_cleanup`]).
#[tokio::test]
async fn what_a_killed_cleanup_leaves_goes_with_gc() {
    let Some(engine) = engine_or_skip("reap_cleanup_killed").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    run.once_with_a_killed_cleanup(&engine).await;
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
    // Scoped to the run's workspace: a bare `gc` would take every workspace's dead runs on a
    // shared engine.
    let out = gc_command(&run.ws).env("HOME", &run.home).output().unwrap();
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

/// An agent's process that stops its exec service (same uid) before the run's end cannot keep
/// anything alive: the service does not answer the end in the pod, and the engine kills the
/// container (a `kill` event before the exit), which takes every process of the uid in it.
#[tokio::test]
async fn a_stopped_exec_service_leaves_the_end_to_the_engine() {
    let Some(engine) = engine_or_skip("reap_stopped_service").await else {
        return;
    };
    // Docker only: on Podman the fallback is the same code, but a container whose exec session
    // (the stopped service) still runs is not cleaned up after the kill, which then ends in the
    // synchronous removal after the kill's 20 s wait (a kill event or none): slow, not different.
    if engine.kind().is_podman() {
        eprintln!("reap_stopped_service: Docker only");
        return;
    }
    // The command's shell is the service's child: `$PPID` is the service. It is stopped once
    // the command has returned, and the answer after it comes later (each of its events is
    // 300 ms late).
    let command = format!(
        "{}\n(sleep 0.5; kill -STOP $PPID) >/dev/null 2>&1 &",
        reap_support::LEAVES_PROCESSES
    );
    let mut run = Run::running_command_slow_end(&engine, &command, 300).await;
    let out = run.once().output().unwrap();
    let exited = std::time::SystemTime::now();
    succeeded(&out);
    run.tickers_quiet_since(exited);
    let kills = run.engine_kills_before(&engine, exited).await;
    let log = std::fs::read_to_string(run.ws.join("runs/flowerbox.log")).unwrap_or_default();
    assert!(
        !kills.is_empty(),
        "the engine killed nothing before the exit\n{log}"
    );
    let left = once_cleaned_async(|| run.left(&engine)).await;
    assert!(left.is_empty(), "left after the run: {left:?}");
}
