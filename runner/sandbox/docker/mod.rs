//! The Docker Engine backend (bollard): one pod per run, one container per agent that executes
//! commands, exec that never hangs, nothing left behind (DESIGN.md "Pod", issue 6).
//!
//! Life of a run (a run holds it as a [`DeferredDocker`], which does each of these only once an
//! agent that runs commands is coming: issue 32 §1): [`DockerSandboxFactory::connect`] pings
//! the engine (before anything is created) → [`gc::sweep_orphans`] removes containers of dead
//! owners of this workspace while [`shared_disk::probe`] proves the engine sees it →
//! [`DockerSandboxFactory::ensure_image`] builds the agent image on first use →
//! `sandbox(&AgentBox)` creates the pod on first use and the agent's container joining it →
//! `release(agent)` when the step that owns it ends → `teardown()` at run end (or on a signal,
//! see [`crate::sandbox::teardown_on_signal`]; as a last resort the factory's `Drop` removes
//! what is left), or `teardown_at_exit()` when the process exits right after the run: the
//! run's processes killed, their removal left to a detached cleanup ([`reap`]). Meanwhile [`liveness`] watches the run's containers and the engine: a
//! container or pod that goes is made again for the next command ([`agent`]), an engine that
//! stays away loses the run ([`SandboxFactory::lost`]).

mod agent;
pub mod backend;
mod build_progress;
pub mod checks;
pub mod container;
pub mod deferred;
pub mod engine;
pub mod engine_host;
pub mod error;
pub mod exec;
pub mod gc;
mod idle;
pub mod image;
pub mod kind;
pub mod labels;
pub(crate) mod liveness;
pub(crate) mod network;
mod pod;
pub mod readonly;
pub mod reap;
mod remote;
pub mod remote_files;
mod remote_route;
pub mod seccomp;
mod sentinel;
pub mod service;
pub mod shared_disk;
mod spawn;
mod teardown;
pub mod usage;
mod verify;
pub mod volumes;

pub use agent::DockerSandbox;
pub use backend::DockerBackend;
pub use container::{Limits, UserIds};
pub use deferred::DeferredDocker;
pub use engine::{Endpoint, Engine, EngineError, HostSource, DEFAULT_PING_TIMEOUT};
pub use image::{default_image, ensure_image, EnsuredImage};
pub use kind::EngineKind;
pub use labels::{Liveness, Owner};
pub use readonly::ReadOnlyIds;

use async_trait::async_trait;
use bollard::query_parameters::CreateContainerOptions;
use bollard::Docker;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

use container::{Identity, RunSpec};
use exec::Container;
use liveness::Watch;

use super::egress::EgressPolicy;
use super::notice::NoticeSink;
use super::{AgentBox, Sandbox, SandboxError, SandboxFactory};
use network::FenceFacts;
use pod::Pod;
pub(crate) use teardown::{Created, Tier};

/// Everything the Docker backend needs for one run. Build with [`DockerOptions::new`] and
/// override fields.
#[derive(Debug, Clone)]
pub struct DockerOptions {
    /// The run id (labels, container names).
    pub run_id: String,
    /// The workspace (canonicalised for the `flowerbox.workspace` label).
    pub workspace: PathBuf,
    /// `--image` / `FLOWERBOX_IMAGE`; `None` = flowerbox's own image, built when missing.
    pub image: Option<String>,
    /// Engine endpoint; `None` = `DOCKER_HOST`, else the current Docker context, else the default
    /// socket.
    pub docker_host: Option<String>,
    /// Memory, pids and judge `nofile` limits.
    pub limits: Limits,
    /// Who runs inside; `None` = the invoking user.
    pub user: Option<UserIds>,
    /// Show the image-build spinner on stderr.
    pub show_progress: bool,
    /// The image is built in the background, beside the run's own screen: its progress is
    /// stage lines only, never a spinner ([`DeferredDocker`] sets it).
    pub background_build: bool,
    /// How long the engine gets to answer the first ping.
    pub ping_timeout: Duration,
    /// `--egress`, `--allow-net`, `--allow-domain`: the policy the pod's network enforces.
    pub egress: EgressPolicy,
    /// The flowerbox binary whose copy runs each container's exec service
    /// ([`service`]); `None` = a Docker exec per command. Default:
    /// [`service::ServiceSource::discover`].
    pub exec_service: Option<service::ServiceSource>,
    /// How long the engine may stay unreachable before the run's sandboxes are lost (the run
    /// stops with exit 1).
    pub engine_grace: Duration,
    /// The engine does not share this machine's disk (issue 30 §2, `--sandbox docker-remote`):
    /// agent containers mount the run's volumes only ([`SandboxFactory::engine_disk`]), a
    /// mount naming anything else is refused, and the exec service goes in through the
    /// archive API. `false`: the local path, bind mounts of this machine's directories.
    pub remote: bool,
}

impl DockerOptions {
    /// How an image build this run makes shows its progress.
    fn build_shown(&self) -> build_progress::Shown {
        use build_progress::Shown;
        match (self.show_progress, self.background_build) {
            (false, _) => Shown::Hidden,
            (true, false) => Shown::Live,
            (true, true) => Shown::Stages,
        }
    }

    /// Whether the exec services' frames may go over a socket of this machine's, bind-mounted
    /// into each agent container ([`service::socket`]): only when the engine shares this
    /// machine's disk. A remote engine (`remote`) would mount a path of its own disk: there
    /// the frames keep to the engine's attach.
    pub(crate) fn frames_over_socket(&self) -> bool {
        !self.remote
    }

    /// Defaults for a run in `workspace`.
    pub fn new(run_id: impl Into<String>, workspace: impl Into<PathBuf>) -> Self {
        DockerOptions {
            run_id: run_id.into(),
            workspace: workspace.into(),
            image: None,
            docker_host: None,
            limits: Limits::default(),
            user: None,
            show_progress: true,
            background_build: false,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            egress: EgressPolicy::default(),
            exec_service: service::ServiceSource::discover(),
            engine_grace: liveness::DEFAULT_GRACE,
            remote: false,
        }
    }
}

/// One agent's sandbox, made once, for the box it was first asked with.
struct Slot {
    /// The box its container is made for; a call with another is refused.
    spec: AgentBox,
    cell: OnceCell<Arc<DockerSandbox>>,
}

struct Inner {
    engine: Engine,
    opts: DockerOptions,
    owner: Owner,
    image: OnceCell<String>,
    /// flowerbox's own image, for the fence and the proxy (whatever `--image` says).
    infra_image: OnceCell<String>,
    /// The live pod (made on first use, made again when it went).
    pod: tokio::sync::Mutex<Option<Pod>>,
    /// The run's network and what its rules are built from (made once, with the first pod).
    net: OnceCell<(network::RunNet, FenceFacts)>,
    /// The run's proxy (proxy mode; made once): its id and address.
    proxy: OnceCell<Option<(String, std::net::Ipv4Addr)>>,
    /// Pods made again so far.
    pod_rebuilds: AtomicU32,
    agents: Mutex<HashMap<String, Arc<Slot>>>,
    /// Every container created (ids), pod last, removed at teardown whatever else happened.
    created: Created,
    /// The run's networks (ids), removed after every container.
    networks: Mutex<Vec<String>>,
    /// The private copy of the exec service's binary (made on first use; `None`: none).
    service_binary: OnceCell<Option<Arc<service::ServiceBinary>>>,
    /// The engine refused the service's mount once: no service for the rest of the run.
    service_refused: AtomicBool,
    /// Why the run has no exec service (its binary could not be copied, the engine refused
    /// its mount), when so.
    no_service: Mutex<Option<String>>,
    /// The run's watch over its containers and its engine.
    watch: Arc<Watch>,
    torn_down: AtomicBool,
    /// Held (read) by every container start in flight, the early pod's included; teardown
    /// takes it (write) to wait for them, so no start can outlive it with a container.
    starting: Arc<tokio::sync::RwLock<()>>,
    /// The pod started early ([`SandboxFactory::prepare`]); the first agent that needs the
    /// pod takes it and gets its error, as if it had started the pod itself.
    early_pod: Mutex<Option<tokio::task::JoinHandle<Result<(), SandboxError>>>>,
    /// The read-only roles' seccomp profile as a sealed file, for an engine that reads it by
    /// path (Podman); made on first use.
    seccomp_file: std::sync::OnceLock<kind::SeccompFile>,
    /// The writing roles' seccomp profile as a sealed file, likewise.
    writer_seccomp_file: std::sync::OnceLock<kind::SeccompFile>,
    /// The run's volumes on an engine that does not share this machine's disk (`remote`).
    volumes: remote::Volumes,
    /// The files keepers of a remote run, by view ([`remote_route`]).
    keepers: remote_route::Keepers,
}

/// The Docker [`SandboxFactory`] of one run.
pub struct DockerSandboxFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DockerSandboxFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandboxFactory")
            .field("run_id", &self.inner.opts.run_id)
            .field("workspace", &self.inner.opts.workspace)
            .field("engine", &self.inner.engine.endpoint().host)
            .finish()
    }
}

/// Locks `m`, recovering the data when a panicking thread poisoned it: every critical section
/// here is a few plain vector updates, so the data stays consistent, and teardown (also from
/// `Drop`) must never panic over a lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn docker_err(e: bollard::errors::Error) -> SandboxError {
    SandboxError::from(e)
}

impl DockerSandboxFactory {
    /// Connects to the engine and pings it within `opts.ping_timeout`; creates nothing.
    ///
    /// Errors: [`SandboxError::EngineUnavailable`] with one of [`EngineError`]'s messages
    /// (permission denied / socket not found / engine stopped / no answer), each naming
    /// `DOCKER_HOST` and `--sandbox host`; [`SandboxError::Unsupported`] when the engine cannot
    /// give the sandbox flowerbox asks for ([`EngineKind::refusal`]); [`SandboxError::Io`] when
    /// the workspace does not exist.
    pub async fn connect(mut opts: DockerOptions) -> Result<Self, SandboxError> {
        let engine = Engine::connect(opts.docker_host.as_deref(), opts.ping_timeout).await?;
        // An engine that would run a weaker sandbox than asked for is refused, never used.
        if let Some(why) = engine.kind().refusal() {
            return Err(SandboxError::Unsupported(why));
        }
        // Podman takes the seccomp profile as a path of this machine's: not there remotely.
        if opts.remote && engine.kind().is_podman() {
            return Err(SandboxError::Unsupported(
                "Podman 要从它自己的磁盘读 seccomp 配置文件,不共享磁盘的 Podman 用不了".into(),
            ));
        }
        opts.workspace = std::fs::canonicalize(&opts.workspace)?;
        let owner = Owner::current()?;
        let watch = Watch::start(
            engine.docker().clone(),
            engine.endpoint().host.clone(),
            opts.run_id.clone(),
            opts.engine_grace,
        );
        let factory = DockerSandboxFactory {
            inner: Arc::new(Inner {
                engine,
                opts,
                owner,
                image: OnceCell::new(),
                infra_image: OnceCell::new(),
                pod: tokio::sync::Mutex::new(None),
                net: OnceCell::new(),
                proxy: OnceCell::new(),
                pod_rebuilds: AtomicU32::new(0),
                agents: Mutex::new(HashMap::new()),
                created: Arc::new(Mutex::new(Vec::new())),
                networks: Mutex::new(Vec::new()),
                service_binary: OnceCell::new(),
                service_refused: AtomicBool::new(false),
                no_service: Mutex::new(None),
                watch,
                torn_down: AtomicBool::new(false),
                starting: Arc::new(tokio::sync::RwLock::new(())),
                early_pod: Mutex::new(None),
                seccomp_file: std::sync::OnceLock::new(),
                writer_seccomp_file: std::sync::OnceLock::new(),
                volumes: remote::Volumes::default(),
                keepers: Default::default(),
            }),
        };
        // The exec service's binary is copied while the run starts, off the first agent's path.
        let inner = factory.inner.clone();
        tokio::spawn(async move {
            inner.service_binary().await;
        });
        Ok(factory)
    }

    /// The engine connection (for [`gc`] and the doctor's checks).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The canonical workspace.
    pub fn workspace(&self) -> &std::path::Path {
        &self.inner.opts.workspace
    }

    /// Builds the agent image now if it is missing (otherwise the first `sandbox()` does),
    /// returning the image used.
    pub async fn ensure_image(&self) -> Result<String, SandboxError> {
        self.inner.image().await.cloned()
    }

    /// The box `agent`'s container was made for (or is being made for), once it was asked
    /// for: what a second request under that name must equal.
    pub fn box_of(&self, agent: &str) -> Option<AgentBox> {
        lock(&self.inner.agents).get(agent).map(|s| s.spec.clone())
    }

    /// Ids of the run's live containers (pod included).
    pub fn container_ids(&self) -> Vec<String> {
        lock(&self.inner.created)
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Removes containers of this workspace whose owner is provably dead; one line each.
    pub async fn sweep_orphans(&self) -> Result<Vec<String>, SandboxError> {
        gc::sweep_orphans(&self.inner.engine, &self.inner.opts.workspace).await
    }

    /// The concrete sandbox for `spec` (same as [`SandboxFactory::sandbox`]), for callers that
    /// need the container id.
    pub async fn docker_sandbox(
        &self,
        spec: &AgentBox,
    ) -> Result<Arc<DockerSandbox>, SandboxError> {
        let inner = &self.inner;
        // Teardown waits for this start (and removes what it made) before it ends.
        let _starting = inner.starting.read().await;
        if inner.torn_down.load(Ordering::SeqCst) {
            return Err(SandboxError::ShutDown);
        }
        let slot = lock(&inner.agents)
            .entry(spec.agent.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    spec: spec.clone(),
                    cell: OnceCell::new(),
                })
            })
            .clone();
        if slot.spec != *spec {
            return Err(SandboxError::Container(format!(
                "{}:这个名字的容器是按另一份挂载和权限做的,不给它用",
                spec.agent
            )));
        }
        let sandbox = slot
            .cell
            .get_or_try_init(|| inner.create_agent(spec))
            .await?
            .clone();
        if inner.torn_down.load(Ordering::SeqCst) {
            inner.remove(&sandbox.container_id()).await;
            return Err(SandboxError::ShutDown);
        }
        Ok(sandbox)
    }
}

impl Inner {
    async fn image(&self) -> Result<&String, SandboxError> {
        self.image
            .get_or_try_init(|| async {
                let ensured = image::ensure_image_shown(
                    &self.engine,
                    self.opts.image.as_deref(),
                    self.opts.build_shown(),
                )
                .await?;
                Ok::<_, SandboxError>(ensured.image)
            })
            .await
    }

    fn identity(&self, spec_mounts: &[PathBuf]) -> Identity {
        Identity::new(self.opts.user.unwrap_or_else(UserIds::current), spec_mounts)
    }

    fn run_spec(&self, image: &str, identity: Identity) -> RunSpec {
        RunSpec {
            run_id: self.opts.run_id.clone(),
            workspace: self.opts.workspace.clone(),
            image: image.to_string(),
            identity,
            owner: self.owner.clone(),
            limits: self.opts.limits,
            extra_env: Vec::new(),
            engine: self.engine.kind().clone(),
        }
    }

    fn docker(&self) -> &Docker {
        self.engine.docker()
    }

    /// The exec service's binary for this run, copied on first use (`None` when there is
    /// none or the copy failed: a Docker exec per command).
    async fn service_binary(&self) -> Option<Arc<service::ServiceBinary>> {
        self.service_binary
            .get_or_init(|| async {
                let source = self.opts.exec_service.clone()?;
                let copied =
                    tokio::task::spawn_blocking(move || service::ServiceBinary::prepare(&source))
                        .await
                        .ok()?;
                match copied {
                    Ok(binary) => Some(Arc::new(binary)),
                    Err(e) => {
                        tracing::warn!(error = %e, "no exec service: copying its binary failed");
                        *lock(&self.no_service) = Some(format!("复制它的程序失败:{e}"));
                        None
                    }
                }
            })
            .await
            .clone()
    }

    async fn create(
        &self,
        name: &str,
        body: bollard::models::ContainerCreateBody,
        tier: Tier,
    ) -> Result<String, SandboxError> {
        let options = CreateContainerOptions {
            name: Some(name.to_string()),
            ..Default::default()
        };
        let id = self
            .docker()
            .create_container(Some(options), body)
            .await
            .map_err(error::container(format!("creating {name}")))?
            .id;
        lock(&self.created).push((id.clone(), tier));
        Ok(id)
    }

    /// The agent's sandbox, with its first container.
    async fn create_agent(
        self: &Arc<Self>,
        spec: &AgentBox,
    ) -> Result<Arc<DockerSandbox>, SandboxError> {
        let first = self.new_container(spec).await?;
        Ok(Arc::new(DockerSandbox::new(
            Arc::downgrade(self),
            self.watch.clone(),
            first,
        )))
    }

    /// A new container for `spec` in place of `old`, which is gone (removed first): in the
    /// live pod, made again when it went. Like every start, it holds `starting` and ends
    /// with the run.
    pub(super) async fn replace_agent(
        &self,
        spec: &AgentBox,
        old: &Container,
    ) -> Result<Arc<Container>, SandboxError> {
        let _starting = self.starting.read().await;
        if self.torn_down.load(Ordering::SeqCst) {
            return Err(SandboxError::ShutDown);
        }
        self.remove(old.container_id()).await;
        self.new_container(spec).await
    }

    /// [`verify::verify`] of the started container `id`'s pinned mounts.
    async fn verify_mounts(&self, id: &str, spec: &AgentBox) -> Result<(), SandboxError> {
        let state = self
            .docker()
            .inspect_container(id, None)
            .await
            .map_err(|e| SandboxError::Container(format!("inspecting {id}: {e}")))?
            .state;
        let pid = state
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                SandboxError::Container(format!("{id}: 引擎没报容器的进程号,没法核对挂载"))
            })?;
        let mounts = spec.mounts.clone();
        tokio::task::spawn_blocking(move || verify::verify(pid, &mounts))
            .await
            .map_err(|e| SandboxError::Container(e.to_string()))?
    }
}

#[async_trait]
impl SandboxFactory for DockerSandboxFactory {
    fn commands_run(&self) -> crate::sandbox::CommandsRun {
        crate::sandbox::CommandsRun::InContainer
    }

    async fn sandbox(&self, spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError> {
        Ok(self.docker_sandbox(spec).await?)
    }

    /// On an engine that does not share this machine's disk, done inside the engine by files
    /// keepers ([`remote_route`]); else on this machine's disk.
    fn files(&self) -> Arc<dyn crate::sandbox::SandboxFiles> {
        match self.inner.opts.remote {
            true => Arc::new(remote_route::RemoteRoute(Arc::new(Arc::downgrade(
                &self.inner,
            )))),
            false => Arc::new(crate::sandbox::files::LocalFiles),
        }
    }

    fn engine_disk(&self) -> Option<Arc<dyn crate::sandbox::EngineDisk>> {
        self.inner.opts.remote.then(|| {
            Arc::new(remote::RemoteDisk {
                inner: Arc::downgrade(&self.inner),
            }) as Arc<dyn crate::sandbox::EngineDisk>
        })
    }

    fn prepare(&self) {
        let mut early = lock(&self.inner.early_pod);
        // A pod already made (or being made: the lock is held) needs no early start.
        let made = self.inner.pod.try_lock().map_or(true, |p| p.is_some());
        if early.is_some() || made {
            return;
        }
        // Taken before the task exists, so a teardown that begins now waits for it (and one
        // already under way means no pod at all).
        let Ok(starting) = self.inner.starting.clone().try_read_owned() else {
            return;
        };
        if self.inner.torn_down.load(Ordering::SeqCst) {
            return;
        }
        let inner = self.inner.clone();
        *early = Some(tokio::spawn(async move {
            let _starting = starting;
            inner.pod().await.map(|_| ())
        }));
    }

    async fn release(&self, agent: &str) -> Result<(), SandboxError> {
        let slot = lock(&self.inner.agents).remove(agent);
        let Some(slot) = slot else {
            return Ok(());
        };
        // A start still in flight (begun early) is waited for, then removed; a slot that was
        // never filled stays empty.
        let started = slot
            .cell
            .get_or_try_init(|| async { Err(SandboxError::ShutDown) })
            .await
            .ok()
            .cloned();
        if let Some(sandbox) = started {
            let id = sandbox.retire().await;
            if let Some(e) = self.inner.remove(&id).await {
                return Err(e);
            }
        }
        Ok(())
    }

    fn on_notice(&self, sink: NoticeSink) {
        self.inner.watch.set_sink(sink);
    }

    async fn lost(&self) -> SandboxError {
        self.inner.watch.lost().await
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        self.inner.teardown().await
    }

    async fn teardown_at_exit(&self, run_dir: &std::path::Path) -> Result<(), SandboxError> {
        self.inner.teardown_at_exit(run_dir).await
    }

    async fn written(&self) -> Result<Vec<crate::sandbox::Written>, SandboxError> {
        self.inner.written().await
    }

    async fn storage(&self) -> Option<PathBuf> {
        self.inner.storage().await
    }

    async fn keep_written(&self, container: &str) -> Result<Option<String>, SandboxError> {
        self.inner.keep_written(container).await.map(Some)
    }
}
