//! A Podman without `catatonit` (issue 29 §2.10): every agent container starts with the
//! engine's init, so every container start fails there; `doctor` must fail, naming catatonit
//! and how to get it. Runs against the service named by `FLOWERBOX_TEST_PODMAN_NO_INIT` (a
//! `unix://` socket of `PODMAN_HIDE_INIT=1 scripts/podman-service.sh start`, run as root: such a
//! Podman; `.ci/run` starts one), with the agent image, or the image named by
//! `FLOWERBOX_TEST_PODMAN_NO_INIT_IMAGE`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use flowerbox::sandbox::docker::checks::checks;
use flowerbox::sandbox::docker::Engine;
use flowerbox::sandbox::doctor::CheckStatus;
use std::time::Duration;

const VAR: &str = "FLOWERBOX_TEST_PODMAN_NO_INIT";

#[tokio::test]
async fn doctor_fails_on_a_podman_without_its_init() {
    let Ok(host) = std::env::var(VAR) else {
        eprintln!("SKIPPED Podman without catatonit: {VAR} names no such Podman socket");
        return;
    };
    let engine = Engine::connect(Some(&host), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{VAR}={host}: {e}"));
    assert!(engine.kind().is_podman(), "{:?}", engine.kind());
    let image = match std::env::var(format!("{VAR}_IMAGE")) {
        Ok(image) => image,
        Err(_) => docker_support::agent_image(&engine).await,
    };
    let ws = tempfile::tempdir().unwrap();
    let lines = checks(
        Some(&host),
        Some(&image),
        Duration::from_secs(10),
        ws.path(),
        false,
    )
    .await;
    let init = lines
        .iter()
        .find(|c| c.name == "init")
        .unwrap_or_else(|| panic!("no init line: {lines:?}"));
    assert_eq!(init.status, CheckStatus::Fail, "{init}");
    assert!(
        init.detail.contains("catatonit") && init.detail.contains("apt-get install catatonit"),
        "{init}"
    );
    assert!(
        flowerbox::sandbox::doctor::exit_code(&lines) != 0,
        "{lines:?}"
    );
}
