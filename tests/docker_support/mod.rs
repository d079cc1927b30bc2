//! Shared setup for the Docker integration tests: the engine gate (fail when `CI=true`, skip
//! visibly otherwise), the one agent image every test shares, a serialising lock for heavy
//! tests, run fixtures that clean up in `Drop`, and the runner image the wrapper tests build.
#![allow(dead_code)]

pub mod cleanup;
pub mod proxy;

use flowerbox::role::Role;
use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::sandbox::{AgentBox, ExecOutput, ExecRequest, Mount, Sandbox, SandboxFactory};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Heavy tests (many containers, timing-sensitive) take this lock.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The engine, or `None` (with a visible message) when it is missing outside CI. In CI a
/// missing engine fails the test.
pub async fn engine_or_skip(test: &str) -> Option<Engine> {
    match Engine::connect(None, Duration::from_secs(5)).await {
        Ok(e) => Some(e),
        Err(e) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{test}: CI=true but the Docker engine is unusable: {e}");
            }
            eprintln!("SKIPPED {test}: no Docker engine ({e})");
            None
        }
    }
}

/// For tests that drive the `flowerbox` binary outside any runtime: the engine is there and
/// the agent image built, or the test is skipped (`CI=true`: fails).
pub fn engine_ready(test: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match engine_or_skip(test).await {
            Some(e) => {
                agent_image(&e).await;
                true
            }
            None => false,
        }
    })
}

/// The shared agent image (built from nothing on first use, then reused by tag).
pub async fn agent_image(engine: &Engine) -> String {
    let ensured = ensure_image(engine, None, true).await.expect("agent image");
    if ensured.built {
        eprintln!(
            "built {} in {:.1} s (base built: {})",
            ensured.image,
            ensured.elapsed.as_secs_f64(),
            ensured.base_built
        );
    }
    ensured.image
}

/// A unique run id for this test.
/// The first lines of a fake exec service (a `/bin/sh` script standing in for flowerbox's
/// binary): a writing agent's commands without the service run as `BINARY __enter-domain
/// [--required] -- COMMAND…`, which the stand-in runs as is (it enters no Landlock domain).
pub const FAKE_SERVICE_HEAD: &str = "#!/bin/sh\n\
    if [ \"$1\" = __enter-domain ]; then shift; [ \"$1\" = --required ] && shift; shift; exec \"$@\"; fi\n";

pub fn run_id(test: &str) -> String {
    format!(
        "t{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
    .replace(' ', "")
        + "-"
        + test
}

/// A workspace directory whose name has spaces and non-ASCII characters.
pub fn odd_workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("wö rk space");
    std::fs::create_dir(&ws).unwrap();
    let ws = std::fs::canonicalize(ws).unwrap();
    (dir, ws)
}

/// A factory for one test run; torn down in `Drop` when the test forgot or panicked.
pub struct TestRun {
    pub factory: Arc<DockerSandboxFactory>,
    pub workspace: PathBuf,
    pub run_id: String,
    _dir: tempfile::TempDir,
}

impl TestRun {
    pub async fn new(engine: &Engine, test: &str) -> TestRun {
        Self::with(engine, test, |_| {}).await
    }

    /// Like [`TestRun::new`], with the options adjusted by `adjust`.
    pub async fn with(
        engine: &Engine,
        test: &str,
        adjust: impl FnOnce(&mut DockerOptions),
    ) -> TestRun {
        let image = agent_image(engine).await;
        let (dir, workspace) = odd_workspace();
        let run_id = run_id(test);
        let mut opts = DockerOptions::new(run_id.clone(), &workspace);
        opts.image = Some(image);
        opts.show_progress = false;
        adjust(&mut opts);
        let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
        TestRun {
            factory,
            workspace,
            run_id,
            _dir: dir,
        }
    }

    pub fn agent(&self, agent: &str, role: Role, read_only: bool) -> AgentBox {
        AgentBox {
            agent: agent.into(),
            role,
            mounts: vec![Mount::same(self.workspace.clone(), read_only)],
            masked: Vec::new(),
            workdir: self.workspace.clone(),
            policy: flowerbox::agent::place::role_policy(role),
        }
    }

    pub async fn sandbox(&self, agent: &str, role: Role) -> Arc<dyn Sandbox> {
        self.factory
            .sandbox(&self.agent(agent, role, false))
            .await
            .expect("sandbox")
    }
}

impl Drop for TestRun {
    fn drop(&mut self) {
        teardown_blocking(&self.factory);
    }
}

/// Tears `factory`'s run down from a `Drop`, whether or not a runtime is current: on a thread of
/// its own with its own runtime, waiting for it. Errors are ignored (the next start sweeps).
pub fn teardown_blocking(factory: &Arc<DockerSandboxFactory>) {
    let factory = factory.clone();
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = rt.block_on(factory.teardown());
    })
    .join();
}

/// A request with sane defaults.
pub fn req(cmd: &str, cwd: &Path, timeout: Duration) -> ExecRequest {
    ExecRequest {
        command: cmd.into(),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        timeout,
        output_cap: 16 * 1024,
        spill_dir: None,
        cancel: CancellationToken::new(),
    }
}

/// Runs `cmd` and returns the output (panics on sandbox errors).
/// The sandbox of a writing worker (`worker-1`) of `run`.
pub async fn worker(run: &TestRun) -> Arc<flowerbox::sandbox::docker::DockerSandbox> {
    run.factory
        .docker_sandbox(&run.agent("worker-1", Role::Worker, false))
        .await
        .expect("sandbox")
}

/// The pid (in the pod) of `sb`'s live exec service, started when needed.
pub async fn service_pid(sb: &flowerbox::sandbox::docker::DockerSandbox) -> u32 {
    sb.exec_service_pid()
        .await
        .expect("the exec service runs (build the flowerbox binary: cargo test builds it)")
}

pub async fn exec_ok(sb: &dyn Sandbox, cmd: &str, cwd: &Path) -> ExecOutput {
    sb.exec(req(cmd, cwd, Duration::from_secs(60)))
        .await
        .expect("exec")
}

/// Ids of every container labelled with this run (any state), via the engine.
pub async fn run_containers(engine: &Engine, run_id: &str) -> Vec<String> {
    containers_where(engine, "label", format!("flowerbox.run={run_id}")).await
}

/// Ids of every network labelled with this run (one with `--egress open|proxy`).
pub async fn run_networks(engine: &Engine, run_id: &str) -> Vec<String> {
    run_networks_where(engine, format!("flowerbox.run={run_id}")).await
}

/// Ids of every network the label filter `label` (`key=value`) selects.
pub async fn run_networks_where(engine: &Engine, label: String) -> Vec<String> {
    use bollard::query_parameters::ListNetworksOptions;
    use std::collections::HashMap;
    let filters = HashMap::from([("label".to_string(), vec![label])]);
    engine
        .docker()
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters),
        }))
        .await
        .expect("list networks")
        .into_iter()
        .filter_map(|n| n.id)
        .collect()
}

/// Ids of every container (any state) that the engine's list filter `filter` (`label`,
/// `name`...) with `value` selects.
pub async fn containers_where(engine: &Engine, filter: &str, value: String) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptions;
    use std::collections::HashMap;
    let filters = HashMap::from([(filter.to_string(), vec![value])]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    engine
        .list_containers(opts)
        .await
        .expect("list containers")
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// A file of this repository by its relative path.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The runner image built once per test process by `docker/build.sh` from this test's
/// `flowerbox` binary on the shared agent image; returns its content tag.
pub async fn runner_image(engine: &Engine) -> String {
    static IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    IMAGE
        .get_or_init(|| async {
            let base = agent_image(engine).await;
            let out = tokio::process::Command::new(repo_file("docker/build.sh"))
                .args(["--bin", env!("CARGO_BIN_EXE_flowerbox"), "--base", &base])
                .args(["--tag", "flowerbox-runner:test"])
                .stderr(Stdio::inherit())
                .output()
                .await
                .expect("run docker/build.sh");
            assert!(out.status.success(), "docker/build.sh failed");
            let tag = String::from_utf8(out.stdout).unwrap().trim().to_string();
            assert!(tag.starts_with("flowerbox-runner:"), "{tag}");
            tag
        })
        .await
        .clone()
}

/// Removes whatever the runs of the workspace it holds left on the engine (only that
/// workspace's), when dropped: `flowerbox gc` scoped to it.
pub struct Sweep(pub PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let _ = gc_command(&self.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `flowerbox --sandbox docker -w WS gc`: the only way the tests run `gc`, always scoped to a
/// workspace the test made. Without `-w`, gc removes every workspace's dead runs on the engine,
/// a developer's own among them (issue 18 "Tests that are safe on a shared engine").
pub fn gc_command(ws: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    c.args(["--sandbox", "docker", "-w"])
        .arg(ws)
        .arg("gc")
        .stdin(Stdio::null());
    c
}
