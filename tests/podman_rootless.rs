//! Rootless Podman against the real service named by `FLOWERBOX_TEST_PODMAN_ROOTLESS` (a
//! `unix://` socket of `scripts/podman-service.sh start` run as an ordinary user; `.ci/run`
//! starts one). flowerbox must recognise it as rootless (Podman 4.3 does not say so in `/info`)
//! and, on a cgroup v1 host, where rootless Podman ignores memory and pids limits, refuse it
//! before creating anything — never run a weaker sandbox.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::*;
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory, Engine, EngineKind};
use flowerbox::sandbox::SandboxError;
use std::time::Duration;

const VAR: &str = "FLOWERBOX_TEST_PODMAN_ROOTLESS";

#[tokio::test]
async fn rootless_podman_is_recognised_and_refused_on_cgroup_v1() {
    let Ok(host) = std::env::var(VAR) else {
        eprintln!("SKIPPED rootless Podman: {VAR} names no rootless Podman socket");
        return;
    };
    let engine = Engine::connect(Some(&host), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{VAR}={host}: {e}"));
    let kind = engine.kind().clone();
    assert!(kind.is_rootless_podman(), "{kind:?}");
    let (_dir, ws) = odd_workspace();
    let run = run_id("rootless");
    let mut opts = DockerOptions::new(run.clone(), &ws);
    opts.docker_host = Some(host.clone());
    opts.show_progress = false;
    let connected = DockerSandboxFactory::connect(opts).await;
    match kind {
        EngineKind::Podman {
            cgroup_v1: true, ..
        } => {
            let err = connected.expect_err("rootless Podman on cgroup v1 must be refused");
            assert!(
                matches!(&err, SandboxError::Unsupported(m)
                    if m.contains("rootless") && m.contains("cgroup v1") && m.contains("--sandbox host")),
                "{err}"
            );
            assert_eq!(Some(err.to_string()), kind.refusal());
            // Refused before anything was created.
            assert!(run_containers(&engine, &run).await.is_empty());
            // And the doctor says so, as a failed line.
            let line = flowerbox::sandbox::docker::checks::podman_check(&kind).unwrap();
            assert_eq!(line.status, flowerbox::sandbox::doctor::CheckStatus::Fail);
        }
        _ => {
            // cgroup v2: limits hold, so flowerbox runs there (keep-id user namespace).
            let factory = connected.expect("rootless Podman on cgroup v2 is used");
            assert_eq!(factory.engine().kind(), &kind);
        }
    }
}
