//! The run's end when the process exits right after it (the command line's `once`, `go`, `run`,
//! `resume`; issue 32, figure 9): [`SandboxFactory::teardown_at_exit`].
//!
//! On the exit's path, every process an agent could have started dies, confirmed. First in the
//! pod, without the engine ([`end_in_pod`]): for each uid of the agents' containers one live
//! exec service of that uid kills every other process of the uid in the pod's PID namespace
//! with one `kill(-1, SIGKILL)` (race-free against `fork`; no agent process can leave its uid
//! or the namespace) and answers once each is dead or dying
//! ([`crate::sandbox::service::end`]): a few milliseconds for the whole pod, where the engine
//! takes tens of milliseconds a container (issue 32, figure 10). What no service ended (no
//! live service, no answer within [`END_WAIT`]: an agent's process may stop or kill its
//! service; survivors named) is left to the engine: each
//! container that can run an agent's code ([`Tier::Agent`]: agents of every role, which also
//! run their MCP servers and hooks; a remote run's files keepers) is killed at once (`SIGKILL`
//! through the engine), twice around the starts in flight like the teardown, and the engine is
//! asked to wait until none runs (moby's kill waits for the exit, Podman's need not). Such a
//! container shares the pod's PID namespace, so the runtime kills every process of its cgroup
//! when its main process dies: a background process, `setsid`, `nohup` or double-forked
//! included, dies with it (`tests/docker_reap.rs`, on both engines). On Docker containerd's
//! shim does it (`shouldKillAllOnExit`). On Podman the container's cleanup does, which
//! conmon's exit command (`podman container cleanup`) runs as soon as the main process died:
//! the runtime's `delete --force` of a container without a PID namespace of its own `SIGKILL`s
//! every process of its cgroup (runc's `destroy`, crun's `cgroup_killall`), and the
//! Docker-compatible kill and `not-running` wait return only after it (Podman 4.3 waits for the
//! state `exited`, which the cleanup sets; Podman 5.3 on for conmon's exit, and conmon waits for
//! its exit command). Measured on Podman 4.3.1 with runc 1.1.5: the background processes die
//! 0.1–0.25 s after the kill, before the engine reports the container exited. (Podman refuses
//! that cleanup while an exec session of the container runs; the exec service's ends with the
//! main process, within milliseconds, and a refused cleanup shows as a refused kill or a wait
//! past [`DEAD_WITHIN`]: both end in the synchronous removal, which kills the cgroup.) The pod
//! and its members (the proxy; the fence is gone by then) run only flowerbox's own processes,
//! under uids no agent has ([`super::container::pod_ids`]): on either engine they go to the
//! cleanup alive and die in its removal. What the user would then wait for
//! although nothing of the run needs it — the pod's death, the pod leaving the run's network,
//! the engine removing containers and the bridge, the remote volumes, the exec service's
//! private binary, the orphan sweep — goes to a detached cleanup process: this
//! binary under the hidden [`SUBCOMMAND`], in a session of its own (a terminal's Ctrl-C or a
//! kill of the process group never reaches it), handed a [`Plan`] as JSON on its stdin. It runs
//! the very removal the teardown runs ([`super::teardown::Removal::run`]) and logs to the run's
//! log. Whatever it leaves (killed itself, the engine gone) belongs to a dead owner: the next
//! run's startup sweep and `flowerbox gc` remove it.
//!
//! The synchronous teardown stays where a detached process cannot be had or would not live:
//! the cleanup cannot be spawned or told its plan, no flowerbox binary is known to run it, or
//! this process is a container's main process, whose exit kills every process of the container,
//! the cleanup with it: PID 1, or (in the host's PID namespace, as `docker/flowerbox` runs it)
//! a child of the container runtime's shim — [`cleanup_program`].
//!
//! [`SandboxFactory::teardown_at_exit`]: crate::sandbox::SandboxFactory::teardown_at_exit

use bollard::query_parameters::{KillContainerOptions, WaitContainerOptions};
use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

use super::engine::{status_code, Endpoint, Engine, HostSource};
use super::exec::Container;
use super::remote::Volumes;
use super::teardown::{Removal, Tier};
use super::volumes::RunVolume;
use super::{docker_err, lock, Inner};
use crate::sandbox::service::ServiceSource;
use crate::sandbox::SandboxError;

/// The hidden first argument that runs the detached cleanup (`flowerbox __flowerbox-cleanup`,
/// its plan on stdin).
pub const SUBCOMMAND: &str = "__flowerbox-cleanup";

/// How long a killed container may take to be reported not running before the run's end
/// counts it as a failure (an engine that stopped answering).
const DEAD_WITHIN: Duration = Duration::from_secs(20);

/// How long the cleanup gives the engine to answer its first request.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// What the detached cleanup removes, handed over as JSON on its stdin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// The run (for its log lines).
    run_id: String,
    /// The engine's endpoint (`unix:///…`, `tcp://…`).
    engine: String,
    /// The workspace, whose orphans are swept on the way.
    workspace: PathBuf,
    /// The run's containers with their [`Tier`]: those that ran agents' code dead, the pod
    /// and its members possibly alive (the removal kills them).
    created: Vec<(String, Tier)>,
    /// The run's networks.
    networks: Vec<String>,
    /// The run's proxy container, on its networks beside the pods.
    proxy: Option<String>,
    /// The run's volumes (an engine without this machine's disk).
    volumes: Vec<String>,
    /// The private directory of the exec service's binary.
    service_dir: Option<PathBuf>,
    /// The run directory, whose log receives the cleanup's lines.
    run_dir: Option<PathBuf>,
}

impl Plan {
    /// The plan `json` says. Errors: it is no plan.
    pub fn from_json(json: &[u8]) -> Result<Plan, serde_json::Error> {
        serde_json::from_slice(json)
    }

    /// The run directory whose log receives the cleanup's lines.
    pub fn run_dir(&self) -> Option<&Path> {
        self.run_dir.as_deref()
    }

    /// Removes what the plan names, in the teardown's order ([`Removal::run`]). Errors: the
    /// engine cannot be reached, or the first removal that failed.
    pub async fn carry_out(self) -> Result<(), SandboxError> {
        tracing::info!(run = %self.run_id, containers = self.created.len(), networks = self.networks.len(), "cleanup of the run's end");
        let endpoint = Endpoint {
            host: self.engine.clone(),
            source: HostSource::Explicit,
        };
        let engine = Engine::connect_to(endpoint, CONNECT_WITHIN).await?;
        let created = Mutex::new(self.created);
        let networks = Mutex::new(self.networks);
        let volumes = Volumes::holding(
            self.volumes
                .into_iter()
                .map(|name| RunVolume { name })
                .collect(),
        );
        let removal = Removal {
            engine: &engine,
            workspace: &self.workspace,
            created: &created,
            networks: &networks,
            proxy: self.proxy,
            volumes: &volumes,
            service_dir: self.service_dir,
            watch: None,
            starting: None,
            owner_lives: false,
        };
        let removed = removal.run().await;
        match &removed {
            Ok(()) => tracing::info!(run = %self.run_id, "cleanup done"),
            Err(e) => {
                tracing::warn!(run = %self.run_id, error = %e, left = ?lock(&created), networks = ?lock(&networks), "cleanup left some of the run: the next run's sweep or `flowerbox gc` removes it")
            }
        }
        removed
    }
}

/// The programs that start a container's main process (`containerd-shim-runc-v2`, Podman's
/// `conmon`): a process whose parent is one of them ends its container when it exits.
const SHIMS: [&str; 2] = ["containerd-shim", "conmon"];

/// Whether a process with `pid` whose parent's name (`/proc/<ppid>/comm`) is `parent` is a
/// container's main process: its exit kills every process of the container.
fn ends_its_container(pid: u32, parent: &str) -> bool {
    pid == 1 || SHIMS.iter().any(|shim| parent.trim_end().starts_with(shim))
}

/// This process's parent's name, empty when unknown.
fn parent_name() -> String {
    let ppid = std::os::unix::process::parent_id();
    std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap_or_default()
}

/// The program that runs the detached cleanup, or `None` when the run's end must remove
/// everything itself: as a container's main process ([`ends_its_container`]: PID 1, or a
/// child of a runtime's shim with `parent` its name), or with no flowerbox binary known
/// (`exec_service` is the one the containers' exec service runs: this binary, or one a test
/// names).
pub(crate) fn cleanup_program(
    pid: u32,
    parent: &str,
    exec_service: Option<&ServiceSource>,
) -> Option<PathBuf> {
    if ends_its_container(pid, parent) {
        return None;
    }
    match exec_service? {
        ServiceSource::CurrentExe => Some(PathBuf::from("/proc/self/exe")),
        ServiceSource::Path(p) => Some(p.clone()),
    }
}

impl Inner {
    /// [`crate::sandbox::SandboxFactory::teardown_at_exit`]: every process an agent could have
    /// started dead (confirmed), the removal handed to a detached cleanup; the synchronous teardown when
    /// that cannot be had, or when a kill failed (its error is the teardown's).
    pub(super) async fn teardown_at_exit(&self, run_dir: &Path) -> Result<(), SandboxError> {
        let exec_service = self.opts.exec_service.as_ref();
        let Some(program) = cleanup_program(std::process::id(), &parent_name(), exec_service)
        else {
            return self.teardown().await;
        };
        self.torn_down.store(true, Ordering::SeqCst);
        // Our own kills are no container "dying" to report; the agents' exec services stay
        // connected for the end in the pod.
        self.watch.silence();
        let agents: Vec<Arc<Container>> = lock(&self.agents)
            .drain()
            .filter_map(|(_, slot)| slot.cell.get().map(|sandbox| sandbox.current()))
            .collect();
        let ended = end_in_pod(&agents).await;
        self.watch.stop();
        if let Err(e) = self.kill_all(&ended).await {
            tracing::warn!(error = %e, "killing the run's containers failed: removing them here");
            return self.removal().run().await;
        }
        let plan = self.plan(run_dir);
        match spawn_cleanup(&program, &plan).await {
            Ok(()) => {
                self.hand_over();
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "no cleanup process: removing the run here");
                self.removal().run().await
            }
        }
    }

    /// Kills every container of the run that can run an agent's code ([`Tier::Agent`]; the
    /// pod and its members are left to the cleanup) but those `ended` in the pod, at once: what exists now, then, once every
    /// start in flight ended, what those made; then waits until the engine reports none
    /// running. The first error.
    async fn kill_all(&self, ended: &HashSet<String>) -> Result<(), SandboxError> {
        let ids = || -> Vec<String> {
            lock(&self.created)
                .iter()
                .filter(|(id, tier)| *tier == Tier::Agent && !ended.contains(id))
                .map(|(id, _)| id.clone())
                .collect()
        };
        let first = ids();
        let mut errors = futures::future::join_all(first.iter().map(|id| self.kill(id))).await;
        let _no_start = self.starting.write().await;
        let rest: Vec<String> = ids().into_iter().filter(|id| !first.contains(id)).collect();
        errors.extend(futures::future::join_all(rest.iter().map(|id| self.kill(id))).await);
        if let Some(e) = errors.into_iter().flatten().next() {
            return Err(e);
        }
        let all = ids();
        let dead = futures::future::join_all(all.iter().map(|id| self.confirm_dead(id))).await;
        dead.into_iter().flatten().next().map_or(Ok(()), Err)
    }

    /// Sends `SIGKILL` to container `id` (gone or not running: fine). Podman 4.3 answers a
    /// kill of a container that no longer runs with a 500, not Docker's 409: that error stands
    /// (the synchronous removal follows), since such a container may be one whose cleanup
    /// Podman refused (an exec session was still running when its main process died), whose
    /// other processes then still live.
    async fn kill(&self, id: &str) -> Option<SandboxError> {
        let opts = KillContainerOptions {
            signal: "SIGKILL".into(),
        };
        match self.docker().kill_container(id, Some(opts)).await {
            Err(e) if !matches!(status_code(&e), Some(404 | 409)) => Some(docker_err(e)),
            _ => None,
        }
    }

    /// Returns once the engine reports container `id` not running (or gone).
    async fn confirm_dead(&self, id: &str) -> Option<SandboxError> {
        let opts = WaitContainerOptions {
            condition: "not-running".into(),
        };
        let mut wait = self.docker().wait_container(id, Some(opts));
        match tokio::time::timeout(DEAD_WITHIN, wait.next()).await {
            Err(_) => Some(SandboxError::Container(format!(
                "{id}: 杀了 {} 秒还在跑",
                DEAD_WITHIN.as_secs()
            ))),
            Ok(None | Some(Ok(_))) => None,
            // A non-zero exit (killed: 137) comes as this error: the container stopped.
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { .. }))) => None,
            Ok(Some(Err(e))) if status_code(&e) == Some(404) => None,
            Ok(Some(Err(e))) => Some(docker_err(e)),
        }
    }

    /// What is left to remove once every container that ran agents' code is dead.
    fn plan(&self, run_dir: &Path) -> Plan {
        let removal = self.removal();
        Plan {
            run_id: self.opts.run_id.clone(),
            engine: self.engine.endpoint().host.clone(),
            workspace: self.opts.workspace.clone(),
            created: lock(&self.created).clone(),
            networks: lock(&self.networks).clone(),
            proxy: removal.proxy,
            volumes: self.volumes.names(),
            service_dir: removal.service_dir,
            run_dir: Some(run_dir.to_path_buf()),
        }
    }

    /// Forgets what the cleanup removes now: the factory's `Drop` must not touch it.
    fn hand_over(&self) {
        lock(&self.created).clear();
        lock(&self.networks).clear();
        self.volumes.take_all();
        if let Some(Some(binary)) = self.service_binary.get() {
            binary.hand_over();
        }
    }
}

/// The run's end in the pod through the agents' exec services: for each uid of `agents`'
/// containers, one live service of that uid kills every other process of the uid in the pod's
/// PID namespace and answers once each is dead or dying ([`crate::sandbox::service::end`]); when it does
/// not answer within [`END_WAIT`] (an agent's process stopped or killed it), the next live
/// one of the uid is asked. The ids of the containers whose uid was ended so: what runs in
/// them can only be of that uid. The others are left to the engine's kill.
async fn end_in_pod(agents: &[Arc<Container>]) -> HashSet<String> {
    let mut by_uid: BTreeMap<u32, Vec<&Arc<Container>>> = BTreeMap::new();
    for container in agents {
        by_uid
            .entry(container.owner().uid)
            .or_default()
            .push(container);
    }
    let ends = by_uid.into_values().map(|group| async move {
        for container in &group {
            if container.end_uid(END_WAIT).await {
                return group.iter().map(|c| c.container_id().to_string()).collect();
            }
        }
        Vec::new()
    });
    futures::future::join_all(ends)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// How long one exec service may take to end its uid's processes in the pod ([`end_in_pod`];
/// it answers within milliseconds).
const END_WAIT: Duration = Duration::from_secs(1);

/// Starts `program` as the detached cleanup of `plan` and returns once it has the plan whole,
/// without waiting for it (Tokio reaps it should this process live on). Errors: it could not
/// be started or told its plan (then it is killed).
async fn spawn_cleanup(program: &Path, plan: &Plan) -> std::io::Result<()> {
    let json = serde_json::to_vec(plan)?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg(SUBCOMMAND)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec the hook only calls setsid(2), which is async-signal-safe
    // and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn()?;
    let written = match child.stdin.take() {
        Some(mut stdin) => stdin.write_all(&json).await.and(stdin.shutdown().await),
        None => Err(std::io::Error::other("the cleanup has no stdin")),
    };
    if written.is_err() {
        let _ = child.start_kill();
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_1_removes_everything_itself() {
        // A container's first process: its exit kills the container, a cleanup with it.
        let me = Some(&ServiceSource::CurrentExe);
        assert_eq!(cleanup_program(1, "", me), None);
        assert_eq!(cleanup_program(1, "bash\n", me), None);
        let named = ServiceSource::Path("/opt/flowerbox".into());
        assert_eq!(cleanup_program(1, "", Some(&named)), None);
    }

    #[test]
    fn a_containers_main_process_in_the_hosts_pid_namespace_removes_everything_itself() {
        // `docker/flowerbox` runs flowerbox with `--pid host`: not PID 1, a child of the shim.
        let me = Some(&ServiceSource::CurrentExe);
        assert_eq!(cleanup_program(4242, "containerd-shim\n", me), None);
        assert_eq!(cleanup_program(4242, "containerd-shim-runc-v2", me), None);
        assert_eq!(cleanup_program(4242, "conmon\n", me), None);
    }

    #[test]
    fn any_other_process_hands_the_removal_to_a_flowerbox_binary() {
        for parent in ["bash\n", "sh", "", "tmux: server\n", "cargo"] {
            assert_eq!(
                cleanup_program(4242, parent, Some(&ServiceSource::CurrentExe)),
                Some(PathBuf::from("/proc/self/exe")),
                "{parent:?}"
            );
        }
        let named = ServiceSource::Path("/opt/flowerbox".into());
        assert_eq!(
            cleanup_program(4242, "bash", Some(&named)),
            Some(PathBuf::from("/opt/flowerbox"))
        );
    }

    #[test]
    fn without_a_flowerbox_binary_the_removal_stays_synchronous() {
        assert_eq!(cleanup_program(4242, "bash", None), None);
    }

    #[test]
    fn a_plan_survives_its_json() {
        let plan = Plan {
            run_id: "20261206-200000-abcdef".into(),
            engine: "unix:///var/run/docker.sock".into(),
            workspace: "/w".into(),
            created: vec![("a".into(), Tier::Agent), ("p".into(), Tier::Pod)],
            networks: vec!["n".into()],
            proxy: Some("x".into()),
            volumes: vec!["fbx-v".into()],
            service_dir: Some("/tmp/flowerbox-exec-1".into()),
            run_dir: Some("/w/runs".into()),
        };
        let json = serde_json::to_vec(&plan).unwrap();
        assert_eq!(Plan::from_json(&json).unwrap(), plan);
        assert!(Plan::from_json(b"{").is_err());
    }
}
