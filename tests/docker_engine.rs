//! A dead or unreachable engine gives its own clear message, naming DOCKER_HOST and
//! `--sandbox host`, before anything is created. These need no running engine.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::sandbox::docker::{
    DockerOptions, DockerSandboxFactory, Endpoint, Engine, EngineError, HostSource,
};
use flowerbox::sandbox::SandboxError;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const PROBE_ENV: &str = "FLOWERBOX_TEST_ENGINE_PROBE";

fn assert_clear(msg: &str, what: &str) {
    assert!(msg.contains(what), "expected {what:?} in: {msg}");
    assert!(
        msg.contains("DOCKER_HOST") && msg.contains("--sandbox host"),
        "{msg}"
    );
}

#[tokio::test]
async fn missing_socket_is_reported_before_anything_is_created() {
    let ws = tempfile::tempdir().unwrap();
    let mut opts = DockerOptions::new("never", ws.path());
    opts.docker_host = Some("unix:///nonexistent/docker.sock".into());
    let started = Instant::now();
    let err = DockerSandboxFactory::connect(opts)
        .await
        .expect_err("must fail");
    assert!(started.elapsed() < Duration::from_secs(10));
    let SandboxError::EngineUnavailable(fault) = &err else {
        panic!("wrong error: {err:?}")
    };
    // The typed cause crosses the seam: its kind for any caller, the engine's own error for
    // the backend.
    assert_eq!(
        fault.kind(),
        flowerbox::sandbox::EngineErrorKind::Unavailable
    );
    assert!(matches!(
        fault
            .inner()
            .downcast_ref::<flowerbox::sandbox::docker::EngineError>(),
        Some(flowerbox::sandbox::docker::EngineError::SocketNotFound { .. })
    ));
    assert_clear(&err.to_string(), "找不到 socket /nonexistent/docker.sock");
}

#[tokio::test]
async fn socket_without_listener_means_engine_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docker.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // the file stays, nobody listens
    let endpoint = Endpoint {
        host: format!("unix://{}", path.display()),
        source: HostSource::Env,
    };
    let err = Engine::connect_to(endpoint, Duration::from_secs(5))
        .await
        .expect_err("must fail");
    assert!(matches!(err, EngineError::Refused { .. }), "{err:?}");
    assert_clear(&err.to_string(), "拒绝连接");
    assert!(err
        .to_string()
        .contains(&format!("DOCKER_HOST=unix://{}", path.display())));
}

#[tokio::test]
async fn silent_engine_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap(); // accepts, never answers
    let endpoint = Endpoint {
        host: format!("unix://{}", path.display()),
        source: HostSource::Default,
    };
    let started = Instant::now();
    let err = Engine::connect_to(endpoint, Duration::from_millis(700))
        .await
        .expect_err("must fail");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(err, EngineError::Timeout { .. }), "{err:?}");
    assert_clear(&err.to_string(), "秒内没回应");
}

/// Helper mode: run as an unprivileged user, try the socket named in the env, print the error.
#[tokio::test]
#[ignore = "helper process for socket_without_permission_is_reported, started by it"]
async fn permission_probe() {
    let Ok(host) = std::env::var(PROBE_ENV) else {
        return;
    };
    let endpoint = Endpoint {
        host,
        source: HostSource::Env,
    };
    match Engine::connect_to(endpoint, Duration::from_secs(5)).await {
        Ok(_) => println!("PROBE connected"),
        Err(e) => println!(
            "PROBE {}: {e}",
            matches!(e, EngineError::PermissionDenied { .. })
        ),
    }
}

#[tokio::test]
async fn socket_without_permission_is_reported() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED socket_without_permission_is_reported: needs root to start an unprivileged probe");
        return;
    }
    // A socket only root may open, and a copy of this binary anyone may run.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.path().join("root-only.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let exe = dir.path().join("probe");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["--exact", "permission_probe", "--ignored", "--nocapture"])
        .env(PROBE_ENV, format!("unix://{}", sock.display()))
        .current_dir(dir.path());
    std::os::unix::process::CommandExt::uid(&mut cmd, 65534);
    std::os::unix::process::CommandExt::gid(&mut cmd, 65534);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("PROBE"))
        .unwrap_or_else(|| panic!("no probe output: {stdout}"));
    assert!(line.starts_with("PROBE true: "), "{line}");
    assert_clear(line, "没有权限打开 socket");
}
