//! No container (and no run network) outlives its run: normal teardown, SIGTERM of the owning
//! process, kill -9 of the owner followed by the next start's sweep (live owners untouched), and
//! no credential in any container. The owning processes are this test binary re-executed in helper mode
//! (`owner_process`, ignored in normal runs).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod child_support;
mod docker_support;

use child_support::{helper, spawn_lines, wait_for};
use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::gc;
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory};
use flowerbox::sandbox::teardown_on_signal;
use flowerbox::sandbox::{AgentBox, Mount, SandboxFactory};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HELPER_ENV: &str = "FLOWERBOX_TEST_OWNER";
const FAKE_KEY: &str = "sk-ant-fake-flowerbox-test-3b1f";

/// Helper mode: own a run (coordinator, worker, judge containers) until SIGTERM/SIGINT/SIGHUP.
#[tokio::test]
#[ignore = "helper process for the lifecycle tests, started by them"]
async fn owner_process() {
    let Ok(spec) = std::env::var(HELPER_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '|');
    let (run_id, image, ws) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        PathBuf::from(parts.next().unwrap()),
    );
    let mut opts = DockerOptions::new(run_id, &ws);
    opts.image = Some(image.into());
    opts.show_progress = false;
    let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
    let stop = teardown_on_signal(factory.clone()).expect("signal handlers");
    for (agent, role, ro) in [
        ("coordinator", Role::Coordinator, true),
        ("worker-1", Role::Worker, false),
        ("judge-1", Role::Judge, true),
    ] {
        let spec = AgentBox {
            agent: agent.into(),
            role,
            mounts: vec![Mount::same(ws.clone(), ro)],
            masked: Vec::new(),
            workdir: ws.clone(),
            policy: flowerbox::agent::place::role_policy(role),
        };
        let sb = factory.sandbox(&spec).await.expect("sandbox");
        let out = sb
            .exec(req("env", &ws, Duration::from_secs(30)))
            .await
            .expect("exec");
        assert!(
            !out.stdout.contains(FAKE_KEY),
            "credential inside a container"
        );
    }
    println!("READY");
    let sig = stop.await;
    println!("STOPPED {sig}");
}

struct Owner {
    child: Child,
    run_id: String,
}

impl Owner {
    /// Starts a helper owning a new run in `ws`, with a fake credential in its environment.
    fn start(image: &str, ws: &Path, tag: &str) -> Owner {
        let run_id = run_id(tag);
        let mut c = helper("owner_process");
        c.env(HELPER_ENV, format!("{run_id}|{image}|{}", ws.display()))
            .env("ANTHROPIC_API_KEY", FAKE_KEY)
            .env("ANTHROPIC_AUTH_TOKEN", FAKE_KEY)
            .stderr(Stdio::inherit());
        let (child, rx) = spawn_lines("owner_process", c);
        wait_for(&rx, Duration::from_secs(180), |l| l.contains("READY"));
        Owner { child, run_id }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "owner did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(nix::sys::signal::Signal::SIGTERM);
            let _ = self.wait(Duration::from_secs(30));
        }
    }
}

#[tokio::test]
async fn normal_run_leaves_no_container() {
    let Some(engine) = engine_or_skip("normal_run").await else {
        return;
    };
    let run = TestRun::new(&engine, "normal").await;
    for (agent, role) in [
        ("coordinator", Role::Coordinator),
        ("worker-1", Role::Worker),
        ("judge-1", Role::Judge),
    ] {
        let sb = run.sandbox(agent, role).await;
        assert!(exec_ok(&*sb, "true", &run.workspace).await.success());
    }
    assert_eq!(
        run_containers(&engine, &run.run_id).await.len(),
        4,
        "pod + 3 agents"
    );
    assert_eq!(
        run_networks(&engine, &run.run_id).await.len(),
        1,
        "its network"
    );
    run.factory.teardown().await.unwrap();
    assert!(run_containers(&engine, &run.run_id).await.is_empty());
    assert!(run_networks(&engine, &run.run_id).await.is_empty());
    run.factory.teardown().await.unwrap(); // idempotent
}

/// The run's containers of `agent`.
async fn agent_containers(
    engine: &flowerbox::sandbox::docker::Engine,
    run_id: &str,
    agent: &str,
) -> Vec<String> {
    let agents = containers_where(engine, "label", format!("flowerbox.agent={agent}")).await;
    let mine = run_containers(engine, run_id).await;
    agents.into_iter().filter(|c| mine.contains(c)).collect()
}

/// Issue 17: the pod starts early (`prepare`) and an agent's container starts in the
/// background; a teardown that comes while they start waits for them and leaves no container
/// and no network; and `release` of an agent whose start is in flight removes what it made.
#[tokio::test]
async fn teardown_and_release_during_starts_in_flight_leave_nothing() {
    let Some(engine) = engine_or_skip("starts_in_flight").await else {
        return;
    };
    // Teardown while the pod (started early) and a worker's container start.
    let run = TestRun::new(&engine, "inflight").await;
    run.factory.prepare();
    let (f, spec) = (
        run.factory.clone(),
        run.agent("worker-1", Role::Worker, false),
    );
    let start = tokio::spawn(async move { f.sandbox(&spec).await.map(|_| ()) });
    run.factory.teardown().await.unwrap();
    let _ = start.await.unwrap();
    assert!(run_containers(&engine, &run.run_id).await.is_empty());
    assert!(run_networks(&engine, &run.run_id).await.is_empty());

    // Release while a worker's container starts: the release waits for it and removes it.
    let run = TestRun::new(&engine, "inflight-release").await;
    run.factory.prepare();
    let coordinator = run.sandbox("coordinator", Role::Coordinator).await;
    let (f, spec) = (
        run.factory.clone(),
        run.agent("worker-1", Role::Worker, false),
    );
    let start = tokio::spawn(async move { f.sandbox(&spec).await.map(|_| ()) });
    // The worker's container exists: its start is under way (or just done).
    while agent_containers(&engine, &run.run_id, "worker-1")
        .await
        .is_empty()
    {
        assert!(!start.is_finished(), "the start ended without a container");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.factory.release("worker-1").await.unwrap();
    let _ = start.await;
    assert!(
        agent_containers(&engine, &run.run_id, "worker-1")
            .await
            .is_empty(),
        "the released worker's container is gone"
    );
    assert!(exec_ok(&*coordinator, "true", &run.workspace)
        .await
        .success());
    run.factory.teardown().await.unwrap();
    assert!(run_containers(&engine, &run.run_id).await.is_empty());
}

#[tokio::test]
async fn sigterm_of_the_owner_removes_its_containers_and_none_holds_a_credential() {
    let Some(engine) = engine_or_skip("sigterm").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let image = agent_image(&engine).await;
    let (_dir, ws) = odd_workspace();
    let mut owner = Owner::start(&image, &ws, "sigterm");
    let ids = run_containers(&engine, &owner.run_id).await;
    assert_eq!(ids.len(), 4, "pod + 3 agents");
    for id in &ids {
        let info = engine.docker().inspect_container(id, None).await.unwrap();
        let text = serde_json::to_string(&info).unwrap();
        assert!(
            !text.contains(FAKE_KEY) && !text.contains("ANTHROPIC"),
            "credential in {id}: {text}"
        );
    }
    let img = serde_json::to_string(&engine.docker().inspect_image(&image).await.unwrap()).unwrap();
    assert!(!img.contains(FAKE_KEY) && !img.contains("ANTHROPIC"));
    owner.signal(nix::sys::signal::Signal::SIGTERM);
    owner.wait(Duration::from_secs(60));
    assert!(
        run_containers(&engine, &owner.run_id).await.is_empty(),
        "containers left after SIGTERM"
    );
    assert!(
        run_networks(&engine, &owner.run_id).await.is_empty(),
        "network left after SIGTERM"
    );
}

#[tokio::test]
async fn kill9_then_the_next_start_sweeps_orphans_and_spares_live_owners() {
    let Some(engine) = engine_or_skip("kill9").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let image = agent_image(&engine).await;
    let (_dir, ws) = odd_workspace();
    let mut dead = Owner::start(&image, &ws, "dead");
    let live = Owner::start(&image, &ws, "live");
    dead.signal(nix::sys::signal::Signal::SIGKILL);
    dead.wait(Duration::from_secs(30));
    let orphans = run_containers(&engine, &dead.run_id).await;
    assert_eq!(orphans.len(), 4, "kill -9 leaves the containers behind");

    // The next start in this workspace sweeps: the containers, then the run's network.
    let dead_pid = dead.child.id();
    let lines = gc::sweep_orphans(&engine, &ws).await.unwrap();
    assert_eq!(lines.len(), 5, "{lines:?}");
    // Agent containers before the pod, the network last; names, run id and pid verbatim.
    let said = format!("(运行 {}", dead.run_id);
    let why = format!("):主人进程 {dead_pid} 已经没了");
    assert!(
        lines[..4]
            .iter()
            .all(|l| l.starts_with("删掉了残留的容器 ") && l.contains(&said) && l.ends_with(&why)),
        "{lines:?}"
    );
    assert!(
        lines[3].ends_with(&format!("(运行 {},pod{why}", dead.run_id)),
        "{lines:?}"
    );
    assert!(
        lines[4].starts_with("删掉了残留的网络 ")
            && lines[4].ends_with(&format!("(运行 {}{why}", dead.run_id)),
        "{lines:?}"
    );
    assert!(run_containers(&engine, &dead.run_id).await.is_empty());
    assert!(run_networks(&engine, &dead.run_id).await.is_empty());
    assert_eq!(
        run_containers(&engine, &live.run_id).await.len(),
        4,
        "a live owner's containers were touched"
    );
    assert_eq!(
        run_networks(&engine, &live.run_id).await.len(),
        1,
        "a live owner's network was touched"
    );

    // `gc` lists the live run's containers as kept.
    let report = gc::gc(&engine, Some(&ws)).await.unwrap();
    assert!(report.removed.is_empty());
    assert_eq!(
        report
            .kept
            .iter()
            .filter(|l| l.starts_with("留着容器 ")
                && l.contains(&live.run_id)
                && l.ends_with(":主人还在跑"))
            .count(),
        4,
        "{report:?}"
    );
    assert!(
        report
            .kept
            .iter()
            .any(|l| l.starts_with("留着网络 ") && l.contains(&live.run_id)),
        "{report:?}"
    );
    drop(live);
}

#[tokio::test]
async fn gc_run_elsewhere_removes_the_named_workspaces_orphans() {
    // The cleanup message says "`flowerbox gc` 可以收拾残留"; run from another directory it
    // used to look at that directory only and answer "没有残留的容器". gc without `-w` looks at
    // every workspace (runner/cli/options.rs, runner/sandbox/gc.rs unit tests); this test names
    // its own workspace, so a developer's dead runs on the same engine are not swept by it.
    let Some(engine) = engine_or_skip("gc elsewhere").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let image = agent_image(&engine).await;
    let (_dir, ws) = odd_workspace();
    let mut dead = Owner::start(&image, &ws, "gc-elsewhere");
    dead.signal(nix::sys::signal::Signal::SIGKILL);
    dead.wait(Duration::from_secs(30));
    assert_eq!(run_containers(&engine, &dead.run_id).await.len(), 4);
    let elsewhere = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = gc_command(&ws)
        .current_dir(elsewhere.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&dead.run_id), "{said}");
    assert!(
        run_containers(&engine, &dead.run_id).await.is_empty(),
        "{said}"
    );
    assert!(
        run_networks(&engine, &dead.run_id).await.is_empty(),
        "{said}"
    );
}

/// The run's network and container events from `since` (seconds) to now, each as
/// `(time in ns, action, container id)`: a network's events name the container that joined or
/// left it, a container's name itself.
async fn teardown_events(
    engine: &flowerbox::sandbox::docker::Engine,
    since: u64,
    run_id: &str,
    network: &str,
) -> Vec<(i64, String, String)> {
    use bollard::query_parameters::EventsOptions;
    use futures::StreamExt;
    use std::collections::HashMap;
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let mut all = Vec::new();
    for (kind, key, value) in [
        ("container", "label", format!("flowerbox.run={run_id}")),
        ("network", "network", network.to_string()),
    ] {
        let filters = HashMap::from([
            ("type".to_string(), vec![kind.to_string()]),
            (key.to_string(), vec![value]),
        ]);
        let opts = EventsOptions {
            since: Some(since.to_string()),
            until: Some(until.to_string()),
            filters: Some(filters),
        };
        let events: Vec<_> = engine.docker().events(Some(opts)).collect().await;
        for e in events {
            let e = e.unwrap();
            let actor = e.actor.unwrap_or_default();
            let attributes = actor.attributes.unwrap_or_default();
            let container = match kind {
                "network" => attributes.get("container").cloned().unwrap_or_default(),
                _ => actor.id.unwrap_or_default(),
            };
            all.push((
                e.time_nano.unwrap_or_default(),
                e.action.unwrap_or_default(),
                container,
            ));
        }
    }
    all.sort();
    all
}

/// Issue 32: on Docker the run's network goes beside its containers, not after them: the pod
/// (and the proxy) leave the network before they are killed, so its removal no longer waits
/// for theirs. Nothing of the run remains, in open and in proxy mode.
#[tokio::test]
async fn the_network_is_left_before_the_pod_dies_and_nothing_remains() {
    use flowerbox::sandbox::egress::{EgressMode, EgressPolicy};
    let Some(engine) = engine_or_skip("network_left_first").await else {
        return;
    };
    for (mode, on_network) in [(EgressMode::Open, "pod"), (EgressMode::Proxy, "proxy")] {
        let run = TestRun::with(&engine, "netfirst", |o| {
            o.egress = EgressPolicy {
                mode,
                ..EgressPolicy::default()
            };
        })
        .await;
        let sb = run.sandbox("worker-1", Role::Worker).await;
        assert!(exec_ok(&*sb, "true", &run.workspace).await.success());
        let network = run_networks(&engine, &run.run_id).await;
        assert_eq!(network.len(), 1, "{mode:?}: its network");
        let mine = run_containers(&engine, &run.run_id).await;
        let member = containers_where(&engine, "label", format!("flowerbox.role={on_network}"))
            .await
            .into_iter()
            .find(|c| mine.contains(c))
            .expect("the container on the network");
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        run.factory.teardown().await.unwrap();
        assert!(
            run_containers(&engine, &run.run_id).await.is_empty(),
            "{mode:?}"
        );
        assert!(
            run_networks(&engine, &run.run_id).await.is_empty(),
            "{mode:?}"
        );
        if engine.kind().is_podman() {
            // Podman removes networks after every container (its tested order).
            continue;
        }
        let events = teardown_events(&engine, since, &run.run_id, &network[0]).await;
        let at = |action: &str| {
            events
                .iter()
                .find(|(_, a, c)| a == action && *c == member)
                .map(|(t, _, _)| *t)
                .unwrap_or_else(|| panic!("{mode:?}: no {action} of the {on_network}: {events:?}"))
        };
        assert!(
            at("disconnect") < at("kill"),
            "{mode:?}: the {on_network} was killed before it left the network: {events:?}"
        );
    }
}
