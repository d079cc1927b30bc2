//! The paths of a run's end beside its detached cleanup, on the real engine (issue 32,
//! figure 9; `sandbox::docker::reap`): when no cleanup program can be started, the run's end
//! removes everything itself before it returns; what a killed cleanup left (the run's
//! containers, its network, the exec service's private directory) goes with the next run's
//! start: the engine's part with its orphan sweep, the directory with the sweep of stale
//! exec-service copies once it is older than their grace. Fails when `CI=true` and the engine
//! is missing.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod reap_support;

use flowerbox::role::Role;
use flowerbox::sandbox::docker::labels::LABEL_RUN;
use flowerbox::sandbox::docker::{DeferredDocker, DockerOptions, Engine};
use flowerbox::sandbox::service::{ServiceSource, SERVICE_PATH};
use flowerbox::sandbox::{AgentBox, Demand, Mount, SandboxFactory, SandboxNotice};
use reap_support::docker_support::cleanup::once_cleaned_async;
use reap_support::docker_support::{
    agent_image, engine_or_skip, exec_ok, run_containers, run_id, run_networks, TestRun,
};
use reap_support::model_support::ScriptedModel;
use reap_support::{exec_dirs, succeeded, Run};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The host directory bind-mounted at [`SERVICE_PATH`] in container `id`: the exec service's
/// private copy's directory.
async fn service_dir(engine: &Engine, id: &str) -> PathBuf {
    let info = engine.docker().inspect_container(id, None).await.unwrap();
    let mounts = info.mounts.unwrap_or_default();
    let source = mounts
        .iter()
        .find(|m| m.destination.as_deref() == Some(SERVICE_PATH))
        .and_then(|m| m.source.clone())
        .expect("the exec service's binary is mounted");
    Path::new(&source).parent().unwrap().to_path_buf()
}

/// When the cleanup program cannot be started (the flowerbox binary the factory was given is
/// gone by the run's end), the run's end removes everything itself: right when
/// `teardown_at_exit` returns, none of the run's containers and networks is left on the engine
/// and the exec service's private directory is gone — no waiting. (The detached cleanup would
/// leave the pod to die after the return.)
#[tokio::test]
async fn without_a_cleanup_program_the_runs_end_removes_everything_itself() {
    let Some(engine) = engine_or_skip("cleanup_fallback").await else {
        return;
    };
    // The factory's flowerbox binary, through a link this test removes once the exec
    // service's private copy of it is made.
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("flowerbox");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_flowerbox"), &program).unwrap();
    let run = TestRun::with(&engine, "cleanup-fallback", |o| {
        o.exec_service = Some(ServiceSource::Path(program.clone()));
    })
    .await;
    let sb = run
        .factory
        .docker_sandbox(&run.agent("worker-1", Role::Worker, false))
        .await
        .expect("sandbox");
    let out = exec_ok(
        &*sb,
        "setsid sleep 1000 >/dev/null 2>&1 & echo started",
        &run.workspace,
    )
    .await;
    assert_eq!(out.stdout, "started\n", "{out:?}");
    assert!(
        sb.exec_service_pid().await.is_some(),
        "the exec service runs from its private copy"
    );
    let private = service_dir(&engine, &sb.container_id()).await;
    assert!(private.is_dir(), "{}", private.display());
    let made = run_containers(&engine, &run.run_id).await;
    let nets = run_networks(&engine, &run.run_id).await;
    assert!(made.len() >= 2, "the pod and the agent: {made:?}");
    assert!(!nets.is_empty(), "the run's network (egress open)");
    std::fs::remove_file(&program).unwrap();

    let run_dir = tempfile::tempdir().unwrap();
    run.factory
        .teardown_at_exit(run_dir.path())
        .await
        .expect("the run's end");

    let left = run_containers(&engine, &run.run_id).await;
    assert!(left.is_empty(), "containers left at the return: {left:?}");
    let left = run_networks(&engine, &run.run_id).await;
    assert!(left.is_empty(), "networks left at the return: {left:?}");
    assert!(
        !private.exists(),
        "the exec service's directory is left: {}",
        private.display()
    );
}

/// The containers (any state) and networks the label filter `label` selects: `(id, run)`,
/// the run being its `flowerbox.run` label.
async fn runs_where(engine: &Engine, label: &str) -> Vec<(String, String)> {
    use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions};
    use std::collections::HashMap;
    let filters = HashMap::from([("label".to_string(), vec![label.to_string()])]);
    let containers = engine
        .list_containers(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.labels));
    let networks = engine
        .docker()
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.id, n.labels));
    containers
        .chain(networks)
        .map(|(id, labels)| {
            let run = labels.and_then(|mut l| l.remove(LABEL_RUN));
            (id.unwrap_or_default(), run.unwrap_or_default())
        })
        .collect()
}

/// What a killed cleanup left — the run's containers (the pod alive) and its network, their
/// owner dead — goes with the next run's startup sweep in that workspace: by the time the
/// next run's first sandbox is there (it waits for the preflight, the sweep included), none
/// of it is on the engine, and the next run said what it swept.
#[tokio::test]
async fn the_next_runs_start_sweeps_what_a_killed_cleanup_left() {
    let Some(engine) = engine_or_skip("cleanup_killed_next_start").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    run.once_with_a_killed_cleanup(&engine).await;
    let left = runs_where(&engine, &run.label).await;
    let dead_runs: BTreeSet<String> = left.iter().map(|(_, r)| r.clone()).collect();
    assert!(left.len() >= 2, "the killed cleanup left: {left:?}");
    assert_eq!(dead_runs.len(), 1, "{left:?}");
    eprintln!("left by the killed cleanup: {left:?}");

    let next_id = run_id("cleanup-next");
    let mut opts = DockerOptions::new(next_id.clone(), &run.ws);
    opts.image = Some(agent_image(&engine).await);
    opts.show_progress = false;
    let next = DeferredDocker::open(opts, Demand::Soon).await.unwrap();
    let swept = Arc::new(Mutex::new(Vec::new()));
    let sink = swept.clone();
    next.on_notice(Arc::new(move |n| {
        if let SandboxNotice::Swept { line } = n {
            sink.lock().unwrap().push(line);
        }
    }));
    let agent = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(run.ws.clone(), false)],
        masked: Vec::new(),
        workdir: run.ws.clone(),
        policy: flowerbox::agent::place::role_policy(Role::Worker),
    };
    let sandboxed = next.sandbox(&agent).await;
    // Read before the next run's own end, which sweeps the workspace too.
    let after = runs_where(&engine, &run.label).await;
    let teardown = next.teardown().await;
    sandboxed.expect("the next run's sandbox");
    teardown.expect("the next run's teardown");
    let still: Vec<_> = after
        .iter()
        .filter(|(_, r)| dead_runs.contains(r))
        .collect();
    assert!(still.is_empty(), "left after the next start: {still:?}");
    assert!(
        after.iter().any(|(_, r)| *r == next_id),
        "the next run's own containers stay: {after:?}"
    );
    let swept = swept.lock().unwrap().clone();
    assert!(swept.len() >= left.len(), "{swept:?} for {left:?}");
    let rest = runs_where(&engine, &run.label).await;
    assert!(
        rest.is_empty(),
        "left after the next run's teardown: {rest:?}"
    );
}

/// Moves `dir`'s modification time back by `by` (what a directory made that long ago shows).
fn age(dir: &Path, by: Duration) {
    let f = std::fs::File::open(dir).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// The exec service's private directory a killed cleanup left (its run's lock dropped with
/// the run) goes with a later run's start in the same temporary directory once it is older
/// than the sweep's grace (60 s; its age set here, not waited for): by the time that run's
/// first command ran (its container mounts its own copy, made after the sweep).
#[tokio::test]
async fn a_killed_cleanups_exec_directory_goes_with_a_later_start() {
    let Some(engine) = engine_or_skip("cleanup_killed_exec_dir").await else {
        return;
    };
    let mut run = Run::new(&engine).await;
    run.once_with_a_killed_cleanup(&engine).await;
    let left = exec_dirs(&run.tmp);
    assert_eq!(left.len(), 1, "the killed cleanup left: {left:?}");
    let dead = run.tmp.join(&left[0]);
    assert!(dead.join("exec-service").is_file(), "{}", dead.display());
    age(&dead, Duration::from_secs(120));

    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "echo again"}}]},
        {"content": [{"type": "text", "text": "又好了"}]}]}]}));
    let out = run.next_once(&model).output().unwrap();
    succeeded(&out);
    let results = model.tool_results();
    assert!(
        results
            .iter()
            .any(|(tool, text, failed)| tool == "Bash" && text.contains("again") && !failed),
        "the later run's command ran: {results:?}"
    );
    assert!(
        !dead.exists(),
        "the killed cleanup's directory outlived the later start: {}",
        dead.display()
    );
    // The later run's own end (its cleanup sweeps the killed one's containers too).
    let rest = once_cleaned_async(|| run.left(&engine)).await;
    assert!(rest.is_empty(), "left after the later run: {rest:?}");
}
