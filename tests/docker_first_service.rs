//! A worker's first exec service starts with its container on the local Docker engine (issue
//! 32, figure 10): no Docker exec before the first command's result; killed from inside, the
//! container lives on and the next command works (the restart is an exec); what the service
//! writes leaves no log on the engine; a service that cannot run is told at once, not after the
//! hello's wait.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::*;
use flowerbox::sandbox::docker::{DockerSandbox, Engine};
use flowerbox::sandbox::service::ServiceSource;
use flowerbox::sandbox::{Sandbox, SandboxError, SandboxFactory};
use futures::StreamExt;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

/// The container's exec instances the engine knows, whether it runs, and its log driver.
async fn inspect(engine: &Engine, sb: &DockerSandbox) -> (Vec<String>, bool, String) {
    let info = engine
        .docker()
        .inspect_container(&sb.container_id(), None)
        .await
        .unwrap();
    let running = info.state.and_then(|s| s.running).unwrap_or(false);
    let driver = info
        .host_config
        .and_then(|h| h.log_config)
        .and_then(|l| l.typ)
        .unwrap_or_default();
    (info.exec_ids.unwrap_or_default(), running, driver)
}

#[tokio::test]
async fn the_first_service_comes_with_the_container_and_a_killed_one_is_restarted_by_exec() {
    let Some(engine) = engine_or_skip("first_service").await else {
        return;
    };
    let run = TestRun::new(&engine, "first-svc").await;
    let sb = worker(&run).await;
    let out = exec_ok(&*sb, "echo one", &run.workspace).await;
    assert_eq!(out.stdout, "one\n", "{out:?}");
    let first = sb.exec_service().await.expect("the exec service runs");
    let (execs, running, driver) = inspect(&engine, &sb).await;
    assert!(running);
    if engine.kind().is_podman() {
        // Podman keeps the exec (its exec sessions and conmon): nothing of this applies.
        assert_eq!(execs.len(), 1, "{execs:?}");
        run.factory.teardown().await.unwrap();
        return;
    }
    assert!(
        execs.is_empty(),
        "no Docker exec before the first command's result: {execs:?}"
    );
    // Its frames before the socket and its stderr land in no log on the engine's disk.
    assert_eq!(driver, "none");
    let logs = engine
        .docker()
        .logs(
            &sb.container_id(),
            Some(bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                ..Default::default()
            }),
        )
        .next()
        .await;
    assert!(
        !matches!(logs, Some(Ok(_))),
        "nothing to read as a log: {logs:?}"
    );

    // Killed by the agent's own command: a tool error; the container lives on with its
    // `sleep`, and the next command has a new service, started by an exec.
    let killed = sb
        .exec(req(
            &format!("kill -KILL {first}; sleep 5; echo survived"),
            &run.workspace,
            Duration::from_secs(60),
        ))
        .await;
    assert!(
        matches!(killed, Err(SandboxError::Backend(_))),
        "{killed:?}"
    );
    let (_, running, _) = inspect(&engine, &sb).await;
    assert!(running, "the container outlives its first service");
    let out = exec_ok(&*sb, "echo again", &run.workspace).await;
    assert_eq!(out.stdout, "again\n", "{out:?}");
    let second = sb.exec_service().await.expect("a new service");
    assert_ne!(second, first);
    let (execs, running, _) = inspect(&engine, &sb).await;
    assert!(running);
    assert!(!execs.is_empty(), "the restart is a Docker exec");
    // The first one is gone, reaped (no zombie left under the container's `sleep`).
    let ps = exec_ok(&*sb, "ps -eo pid=,stat=", &run.workspace).await;
    assert!(
        !ps.stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&first.to_string())),
        "{ps:?}"
    );
    run.factory.teardown().await.unwrap();
}

/// A service that cannot run (a loader's complaint on stderr, then its end) is a failed start
/// told at once, though the container's stream does not end with it; commands go on.
#[tokio::test]
async fn a_first_service_that_cannot_run_is_told_at_once() {
    let Some(engine) = engine_or_skip("first_service_fails").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-service");
    std::fs::write(
        &fake,
        format!("{FAKE_SERVICE_HEAD}echo 'version GLIBC_9.99 not found' >&2\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = TestRun::with(&engine, "first-svc-fails", |o| {
        o.exec_service = Some(ServiceSource::Path(fake.clone()));
    })
    .await;
    let started = Instant::now();
    let sb = worker(&run).await;
    let why = sb.exec_service().await.expect_err("no service");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "told after {:?}",
        started.elapsed()
    );
    assert!(why.contains("GLIBC_9.99"), "{why}");
    let out = exec_ok(&*sb, "echo still", &run.workspace).await;
    assert_eq!(out.stdout, "still\n", "{out:?}");
    let (_, running, _) = inspect(&engine, &sb).await;
    assert!(running);
    run.factory.teardown().await.unwrap();
}
