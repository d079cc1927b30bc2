//! A dead container, pod or engine is noticed in seconds (issue 26 §2), on the real engine.
//! Each test runs `sleep 30` (a 120 s timeout) in a worker's container and, once the
//! container shows the process, does to it from outside what a user or a crash would:
//! `docker kill`, `docker rm -f`, `docker stop` of the run's pod, the engine's socket cut
//! away (a forwarder in front of it, [`proxy::EngineProxy`]). The command must come back as
//! an error saying what happened, not as a timeout (no clock is read: a command that waited
//! for its timeout would say "timed out"), the human is told once, and the next command runs
//! in a new container (a new pod, its network rules loaded first), or the run's sandboxes are
//! lost when the engine stays away. Also: the exec service's first words decide whether it
//! runs, and anything else on its stream is kept as the reason for the slower way, said once.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::proxy::EngineProxy;
use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{DockerSandbox, Engine};
use flowerbox::sandbox::notice::Gone;
use flowerbox::sandbox::service::ServiceSource;
use flowerbox::sandbox::{ExecOutput, Sandbox, SandboxError, SandboxFactory, SandboxNotice};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// What a run's sandboxes said.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<SandboxNotice>>>);

impl Notices {
    fn listen(run: &TestRun) -> Notices {
        let n = Notices::default();
        let sink = n.0.clone();
        run.factory
            .on_notice(Arc::new(move |notice| sink.lock().unwrap().push(notice)));
        n
    }

    fn all(&self) -> Vec<SandboxNotice> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (bounded) until a notice `pred` holds has come.
    async fn wait_for(&self, what: &str, pred: impl Fn(&SandboxNotice) -> bool) {
        for _ in 0..600 {
            if self.all().iter().any(&pred) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no notice {what}: {:?}", self.all());
    }
}

async fn worker(run: &TestRun, agent: &str) -> Arc<DockerSandbox> {
    run.factory
        .docker_sandbox(&run.agent(agent, Role::Worker, false))
        .await
        .expect("sandbox")
}

/// Starts `sleep 30; echo done` (120 s timeout) and returns once the container shows it.
async fn sleeping(
    engine: &Engine,
    sb: &Arc<DockerSandbox>,
    run: &TestRun,
) -> JoinHandle<Result<ExecOutput, SandboxError>> {
    let (s, ws) = (sb.clone(), run.workspace.clone());
    let cmd = tokio::spawn(async move {
        s.exec(req("sleep 30; echo done", &ws, Duration::from_secs(120)))
            .await
    });
    shows(engine, &sb.container_id(), "sleep 30").await;
    cmd
}

/// Waits (bounded) until `docker top` of `id` lists a process whose command has `what`.
async fn shows(engine: &Engine, id: &str, what: &str) {
    for _ in 0..300 {
        let top = engine
            .docker()
            .top_processes(id, None::<bollard::query_parameters::TopOptions>)
            .await;
        if let Ok(t) = top {
            if t.processes
                .unwrap_or_default()
                .iter()
                .any(|p| p.iter().any(|c| c.contains(what)))
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} never showed in {id}");
}

fn docker(args: &[&str]) {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(out.status.success(), "docker {args:?}: {out:?}");
}

/// The command's error: the container went, said as such (not a timeout). `why` lists what
/// may be said: `docker rm -f` first kills (the engine reports the death, then the removal).
fn went(result: Result<ExecOutput, SandboxError>, why: &[&str]) {
    match result {
        Err(SandboxError::ContainerGone(text)) => {
            assert!(why.iter().any(|w| text.contains(w)), "{text}");
            assert!(text.contains("did not time out"), "{text}");
        }
        other => panic!("expected the container's end, got {other:?}"),
    }
}

/// The next command runs, in a new container, and says so.
async fn runs_again(sb: &Arc<DockerSandbox>, run: &TestRun, old: &str) {
    let out = exec_ok(&**sb, "echo next", &run.workspace).await;
    assert_eq!(out.stdout, "next\n", "{out:?}");
    assert!(out.notes[0].contains("runs in a new container"), "{out:?}");
    assert_ne!(sb.container_id(), old, "a new container");
    let again = exec_ok(&**sb, "echo again", &run.workspace).await;
    assert!(again.notes.is_empty(), "said once: {again:?}");
}

async fn killed_under_a_command(action: &[&str], service: bool, why: &[&str], gone: &[Gone]) {
    let Some(engine) = engine_or_skip("liveness_container").await else {
        return;
    };
    let run = TestRun::with(&engine, "live-ctr", |o| {
        if !service {
            o.exec_service = None;
        }
    })
    .await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    assert_eq!(sb.exec_service_pid().await.is_some(), service);
    let old = sb.container_id();
    let cmd = sleeping(&engine, &sb, &run).await;
    let mut args = action.to_vec();
    args.push(&old);
    docker(&args);
    went(cmd.await.unwrap(), why);
    notices
        .wait_for("for worker-1's container", |n| {
            matches!(n, SandboxNotice::ContainerGone { agent, why, .. }
                if agent == "worker-1" && gone.contains(why))
        })
        .await;
    runs_again(&sb, &run, &old).await;
    assert_eq!(
        sb.exec_service_pid().await.is_some(),
        service,
        "the new container runs commands as the old one did"
    );
    // The dead one is gone from the engine; nothing else was said.
    assert!(engine.docker().inspect_container(&old, None).await.is_err());
    let said = notices.all();
    assert_eq!(said.len(), 1, "{said:?}");
}

const KILLED: Gone = Gone::Stopped {
    exit_code: Some(137),
    oom: false,
};

#[tokio::test]
async fn docker_kill_under_a_command_is_an_error_at_once_and_a_new_container_follows() {
    killed_under_a_command(&["kill"], true, &["stopped (exit code 137)"], &[KILLED]).await;
}

#[tokio::test]
async fn docker_kill_under_a_command_without_the_exec_service_too() {
    killed_under_a_command(&["kill"], false, &["stopped (exit code 137)"], &[KILLED]).await;
}

const REMOVED: &[&str] = &["was removed", "stopped (exit code 137)"];

#[tokio::test]
async fn docker_rm_f_under_a_command_is_an_error_at_once_and_a_new_container_follows() {
    killed_under_a_command(&["rm", "-f"], true, REMOVED, &[Gone::Removed, KILLED]).await;
}

#[tokio::test]
async fn docker_rm_f_under_a_command_without_the_exec_service_too() {
    killed_under_a_command(&["rm", "-f"], false, REMOVED, &[Gone::Removed, KILLED]).await;
}

/// The run's pod (role `pod`) and its gateway on the run network.
async fn pod_of(engine: &Engine, run_id: &str) -> (String, String) {
    for id in run_containers(engine, run_id).await {
        let info = engine.docker().inspect_container(&id, None).await.unwrap();
        let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
        let running = info.state.and_then(|s| s.running) == Some(true);
        if labels.get("flowerbox.role").map(String::as_str) != Some("pod") || !running {
            continue;
        }
        let gateway = info
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default()
            .into_values()
            .find_map(|e| e.gateway.filter(|g| !g.is_empty()))
            .expect("the pod is on the run network");
        return (id, gateway);
    }
    panic!("no running pod for {run_id}");
}

#[tokio::test]
async fn a_stopped_pod_is_said_once_and_made_again_with_its_rules_before_any_agent() {
    let Some(engine) = engine_or_skip("liveness_pod").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    // A service on the host, which the pod's rules keep out of reach.
    let host = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let run = TestRun::new(&engine, "live-pod").await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    let coordinator = run
        .factory
        .docker_sandbox(&run.agent("coordinator", Role::Coordinator, true))
        .await
        .unwrap();
    // A background process the worker leaves running: lost with the pod, and said so.
    let bg = exec_ok(&*sb, "sleep 1000 & echo started", &run.workspace).await;
    assert!(bg.notes.iter().any(|n| n.contains("sleep 1000")), "{bg:?}");
    assert!(exec_ok(&*coordinator, "true", &run.workspace)
        .await
        .success());
    let (pod, gateway) = pod_of(&engine, &run.run_id).await;
    let (old, old_coordinator) = (sb.container_id(), coordinator.container_id());
    let cmd = sleeping(&engine, &sb, &run).await;
    docker(&["stop", &pod]);
    went(cmd.await.unwrap(), &["stopped with the run's pod"]);
    notices
        .wait_for("for the pod", |n| {
            matches!(n, SandboxNotice::PodGone { .. })
        })
        .await;
    let said = notices.all();
    assert_eq!(
        said.len(),
        1,
        "one line for the pod and all in it: {said:?}"
    );
    let SandboxNotice::PodGone { lost, .. } = &said[0] else {
        unreachable!()
    };
    assert!(
        lost.iter()
            .any(|p| p.starts_with("worker-1: ") && p.contains("sleep 1000")),
        "{lost:?}"
    );
    runs_again(&sb, &run, &old).await;
    let (new_pod, new_gateway) = pod_of(&engine, &run.run_id).await;
    assert_ne!(new_pod, pod, "a new pod");
    // The new pod's rules were in before the agent joined: the host stays out of reach.
    for (label, to) in [("old gateway", &gateway), ("gateway", &new_gateway)] {
        let probe = format!(
            "if timeout 3 bash -c 'exec 3<>/dev/tcp/{to}/{port}' 2>/dev/null; then echo CONNECTED; else echo REFUSED; fi"
        );
        let out = exec_ok(&*sb, &probe, &run.workspace).await;
        assert_eq!(out.stdout, "REFUSED\n", "{label}: {out:?}");
    }
    assert!(
        matches!(host.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the host service was reached"
    );
    // The other agent's container went with the pod and comes back too.
    runs_again(&coordinator, &run, &old_coordinator).await;
    let ps = exec_ok(&*sb, "ps -eo args=", &run.workspace).await;
    assert!(!ps.stdout.contains("sleep 1000"), "{ps:?}");
    assert_eq!(notices.all().len(), 1, "{:?}", notices.all());
}

/// A run on the engine behind `proxy`, whose grace is `grace`.
async fn behind(engine: &Engine, proxy: &EngineProxy, grace: Duration) -> TestRun {
    let host = proxy.host.clone();
    TestRun::with(engine, "live-engine", move |o| {
        o.docker_host = Some(host);
        o.engine_grace = grace;
    })
    .await
}

fn engine_socket(engine: &Engine) -> std::path::PathBuf {
    engine
        .endpoint()
        .socket_path()
        .expect("these tests need the engine on a unix socket")
}

#[tokio::test]
async fn an_engine_away_for_a_moment_is_waited_for_and_the_run_goes_on() {
    let Some(engine) = engine_or_skip("liveness_engine_back").await else {
        return;
    };
    let proxy = EngineProxy::start(&engine_socket(&engine));
    let run = behind(&engine, &proxy, Duration::from_secs(120)).await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    let id = sb.container_id();
    let cmd = sleeping(&engine, &sb, &run).await;
    proxy.cut();
    notices
        .wait_for("that the engine is away", |n| {
            matches!(n, SandboxNotice::EngineDown { .. })
        })
        .await;
    // The command waits for the engine; it is not over while the engine is away.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !cmd.is_finished(),
        "the command did not wait for the engine"
    );
    proxy.restore();
    match cmd.await.unwrap() {
        Err(SandboxError::Unanswered { .. }) => {}
        other => panic!("{other:?}"),
    }
    notices
        .wait_for("that the engine is back", |n| {
            matches!(n, SandboxNotice::EngineBack { .. })
        })
        .await;
    // The same container goes on; what the command started was killed.
    assert_eq!(sb.container_id(), id);
    let out = exec_ok(&*sb, "ps -eo args=", &run.workspace).await;
    assert!(out.success() && !out.stdout.contains("sleep 30"), "{out:?}");
    assert!(out.notes.is_empty(), "{out:?}");
}

#[tokio::test]
async fn an_engine_that_stays_away_loses_the_run() {
    let Some(engine) = engine_or_skip("liveness_engine_lost").await else {
        return;
    };
    let proxy = EngineProxy::start(&engine_socket(&engine));
    let run = behind(&engine, &proxy, Duration::from_secs(3)).await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    let cmd = sleeping(&engine, &sb, &run).await;
    let factory = run.factory.clone();
    let lost = tokio::spawn(async move { factory.lost().await });
    proxy.cut();
    let result = cmd.await.unwrap();
    assert!(
        matches!(&result, Err(SandboxError::Lost(m)) if m.contains("连不上 Docker 引擎")),
        "{result:?}"
    );
    let lost = lost.await.unwrap();
    assert!(matches!(&lost, SandboxError::Lost(_)), "{lost:?}");
    // Later commands do not run either.
    let later = sb
        .exec(req("true", &run.workspace, Duration::from_secs(10)))
        .await;
    assert!(matches!(later, Err(SandboxError::Lost(_))), "{later:?}");
    assert!(notices
        .all()
        .iter()
        .any(|n| matches!(n, SandboxNotice::EngineDown { .. })));
    // Back, so the test's containers can go.
    proxy.restore();
    run.factory.teardown().await.unwrap();
    assert!(run_containers(&engine, &run.run_id).await.is_empty());
}

/// A fake service binary: a shell script that prints `first` and exits.
fn fake_service(first: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-service");
    std::fs::write(
        &fake,
        format!("{FAKE_SERVICE_HEAD}printf '{first}'\nexit 1\n"),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, fake)
}

/// Issue 26: the engine's words where the service's first bytes belong were read as a frame
/// length (`exec service frame of 1667329646 bytes`) and the real reason was lost. Words
/// before the preamble are the reason now, shown once, and commands go on the slower way.
#[tokio::test]
async fn words_before_the_preamble_are_the_reason_and_the_slower_way_is_said_once() {
    let Some(engine) = engine_or_skip("liveness_words").await else {
        return;
    };
    let engine_words =
        "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown";
    let (_dir, fake) = fake_service(&format!("{engine_words}\\r\\n"));
    let run = TestRun::with(&engine, "live-words", |o| {
        o.exec_service = Some(ServiceSource::Path(fake.clone()));
    })
    .await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    for i in 0..4 {
        let out = exec_ok(&*sb, &format!("echo run{i}"), &run.workspace).await;
        assert_eq!(out.stdout, format!("run{i}\n"), "{out:?}");
    }
    assert_eq!(sb.exec_service().await, Err(engine_words.to_string()));
    let said = notices.all();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        matches!(&said[0], SandboxNotice::SlowExec { agent, reason }
            if agent == "worker-1" && reason == engine_words),
        "{said:?}"
    );
    assert!(
        said[0].to_string().contains("flowerbox doctor"),
        "{}",
        said[0]
    );
}

/// The cause of most of issue 26's "exec service" lines on resume: an agent whose step ended
/// at once (a resumed coordinator that only answers) had its container removed while the
/// service was still starting in it; the engine's "cannot exec in a stopped container" was
/// then taken for a broken service. A container flowerbox removes ends its service's start,
/// and no fallback is said.
#[tokio::test]
async fn a_container_released_while_its_service_starts_is_no_fallback() {
    let Some(engine) = engine_or_skip("liveness_release").await else {
        return;
    };
    let run = TestRun::new(&engine, "live-release").await;
    let notices = Notices::listen(&run);
    for i in 0..6 {
        let agent = format!("coordinator-{i}");
        let _sb = run
            .factory
            .docker_sandbox(&run.agent(&agent, Role::Coordinator, true))
            .await
            .unwrap();
        run.factory.release(&agent).await.unwrap();
    }
    // Starts still in flight have ended by now (they end with their container).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(notices.all(), Vec::new());
}

/// The run's pod ends again and again (from outside: `docker kill`; no agent can end it from
/// inside, its processes run under a uid no agent has, `redteam_pod`). Each time the worker's
/// command is an error saying the pod went and the pod is made again, three times; the fourth
/// time the run's sandboxes are lost (the run stops with exit 1), not made again for ever.
#[tokio::test]
async fn a_pod_that_ends_again_and_again_loses_the_run_after_three_new_pods() {
    let Some(engine) = engine_or_skip("liveness_pod_killer").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = TestRun::new(&engine, "live-podkill").await;
    let notices = Notices::listen(&run);
    let sb = worker(&run, "worker-1").await;
    // The worker's own try: refused, and the pod lives on (its command ends normally).
    let tried = exec_ok(
        &*sb,
        "kill $(ps -eo pid=,ppid=,args= | awk '$2 == 1 && $3 == \"sleep\" {print $1}') 2>&1 \
         || echo refused",
        &run.workspace,
    )
    .await;
    assert!(tried.stdout.contains("refused"), "{tried:?}");
    let attack = "sleep 30";
    let (mut attempts, mut ended) = (0, 0);
    let mut container = String::new();
    let lost = loop {
        attempts += 1;
        assert!(attempts <= 5, "the pod was made again too often");
        let (s, ws) = (sb.clone(), run.workspace.clone());
        let cmd =
            tokio::spawn(async move { s.exec(req(attack, &ws, Duration::from_secs(120))).await });
        if attempts <= 4 {
            // The command runs in a new container (in a new pod) after the first time.
            for _ in 0..600 {
                if sb.container_id() != container {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            container = sb.container_id();
            shows(&engine, &container, "sleep 30").await;
            let (pod, _) = pod_of(&engine, &run.run_id).await;
            docker(&["kill", &pod]);
        }
        match cmd.await.unwrap() {
            Err(SandboxError::ContainerGone(text)) => {
                assert!(text.contains("stopped with the run's pod"), "{text}");
                ended += 1;
            }
            Err(SandboxError::Lost(why)) => break why,
            other => panic!("attempt {attempts}: {other:?}"),
        }
    };
    eprintln!("pod killer: {attempts} attempts, {ended} pods ended");
    assert_eq!(ended, 4, "the first pod and three made again");
    assert!(lost.contains("已经停了 4 次"), "{lost}");
    let lost = run.factory.lost().await;
    assert!(matches!(lost, SandboxError::Lost(_)), "{lost:?}");
    let said = notices.all();
    assert_eq!(
        said.iter()
            .filter(|n| matches!(n, SandboxNotice::PodGone { .. }))
            .count(),
        4,
        "{said:?}"
    );
}
