//! The Docker Engine backend (bollard): one pod per run, one container per agent that executes
//! commands, exec that never hangs, nothing left behind (DESIGN.md "Pod", issue 6).
//!
//! Life of a run: [`DockerSandboxFactory::connect`] pings the engine (before anything is
//! created) → [`DockerSandboxFactory::ensure_image`] builds the agent image on first use →
//! [`crate::sandbox::gc::sweep_orphans`] removes containers of dead owners of this workspace →
//! `sandbox(&AgentBox)` creates the pod on first use and the agent's container joining it →
//! `release(agent)` when the step that owns it ends → `teardown()` at run end (or on a signal,
//! see [`crate::sandbox::teardown_on_signal`]; as a last resort the factory's `Drop` removes
//! what is left).

pub mod backend;
mod build_progress;
pub mod checks;
pub mod container;
pub mod engine;
pub mod exec;
pub mod image;
pub mod kind;
pub mod labels;
pub(crate) mod network;
pub mod readonly;
pub mod seccomp;
mod sentinel;
pub mod service;
mod teardown;

pub use backend::DockerBackend;
pub use container::{Limits, UserIds};
pub use engine::{Endpoint, Engine, EngineError, HostSource, DEFAULT_PING_TIMEOUT};
pub use exec::DockerSandbox;
pub use image::{default_image, ensure_image, EnsuredImage};
pub use kind::EngineKind;
pub use labels::{Liveness, Owner};
pub use readonly::ReadOnlyIds;

use async_trait::async_trait;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, CreateContainerOptions, DownloadFromContainerOptions,
    UploadToContainerOptions,
};
use bollard::{body_full, Docker};
use futures::StreamExt;
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

use container::{
    canonical_box, container_name, etc_archive, patch_passwd, Identity, ImageFacts, RunSpec,
};
use engine::status_code;
use readonly::ReadOnly;

use super::egress::{EgressMode, EgressPolicy, HostAddrs};
use super::{AgentBox, Sandbox, SandboxError, SandboxFactory};
use network::{FenceFacts, Fenced, RunNet};
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
    /// How long the engine gets to answer the first ping.
    pub ping_timeout: Duration,
    /// `--egress`, `--allow-net`, `--allow-domain`: the policy the pod's network enforces.
    pub egress: EgressPolicy,
    /// The flowerbox binary whose copy runs each container's exec service
    /// ([`service`]); `None` = a Docker exec per command. Default:
    /// [`service::ServiceSource::discover`].
    pub exec_service: Option<service::ServiceSource>,
}

impl DockerOptions {
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
            ping_timeout: DEFAULT_PING_TIMEOUT,
            egress: EgressPolicy::default(),
            exec_service: service::ServiceSource::discover(),
        }
    }
}

/// The pod of a run.
#[derive(Debug, Clone)]
struct Pod {
    id: String,
    name: String,
    facts: ImageFacts,
    /// Environment every agent container gets (the proxy's address in proxy mode).
    env: Vec<String>,
    /// Resolves when the pod's rules are in: agent containers start only after.
    fenced: Fenced,
}

type Slot = Arc<OnceCell<Arc<DockerSandbox>>>;

struct Inner {
    engine: Engine,
    opts: DockerOptions,
    owner: Owner,
    image: OnceCell<String>,
    /// flowerbox's own image, for the fence and the proxy (whatever `--image` says).
    infra_image: OnceCell<String>,
    pod: OnceCell<Pod>,
    agents: Mutex<HashMap<String, Slot>>,
    /// Every container created (ids), pod last, removed at teardown whatever else happened.
    created: Created,
    /// The run's networks (ids), removed after every container.
    networks: Mutex<Vec<String>>,
    /// The private copy of the exec service's binary (made on first use; `None`: none).
    service_binary: OnceCell<Option<Arc<service::ServiceBinary>>>,
    /// The engine refused the service's mount once: no service for the rest of the run.
    service_refused: AtomicBool,
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
    SandboxError::Docker(e.to_string())
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
        opts.workspace = std::fs::canonicalize(&opts.workspace)?;
        let owner = Owner::current()?;
        let factory = DockerSandboxFactory {
            inner: Arc::new(Inner {
                engine,
                opts,
                owner,
                image: OnceCell::new(),
                infra_image: OnceCell::new(),
                pod: OnceCell::new(),
                agents: Mutex::new(HashMap::new()),
                created: Arc::new(Mutex::new(Vec::new())),
                networks: Mutex::new(Vec::new()),
                service_binary: OnceCell::new(),
                service_refused: AtomicBool::new(false),
                torn_down: AtomicBool::new(false),
                starting: Arc::new(tokio::sync::RwLock::new(())),
                early_pod: Mutex::new(None),
                seccomp_file: std::sync::OnceLock::new(),
            }),
        };
        // The exec service's binary is copied while the run starts, off the first agent's path.
        let inner = factory.inner.clone();
        tokio::spawn(async move {
            inner.service_binary().await;
        });
        Ok(factory)
    }

    /// The engine connection (for [`crate::sandbox::gc`] and [`crate::sandbox::doctor`]).
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

    /// Ids of the run's live containers (pod included).
    pub fn container_ids(&self) -> Vec<String> {
        lock(&self.inner.created)
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Removes containers of this workspace whose owner is provably dead; one line each.
    pub async fn sweep_orphans(&self) -> Result<Vec<String>, SandboxError> {
        super::gc::sweep_orphans(&self.inner.engine, &self.inner.opts.workspace).await
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
            .or_default()
            .clone();
        let sandbox = slot
            .get_or_try_init(|| inner.create_agent(spec))
            .await?
            .clone();
        if inner.torn_down.load(Ordering::SeqCst) {
            inner.remove(sandbox.container_id()).await;
            return Err(SandboxError::ShutDown);
        }
        Ok(sandbox)
    }
}

impl Inner {
    async fn image(&self) -> Result<&String, SandboxError> {
        self.image
            .get_or_try_init(|| async {
                let ensured = ensure_image(
                    &self.engine,
                    self.opts.image.as_deref(),
                    self.opts.show_progress,
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
            .map_err(|e| SandboxError::Container(format!("creating {name}: {e}")))?
            .id;
        lock(&self.created).push((id.clone(), tier));
        Ok(id)
    }

    async fn pod(&self) -> Result<&Pod, SandboxError> {
        self.pod
            .get_or_try_init(|| async {
                let image = self.image().await?.clone();
                let spec = self.run_spec(&image, self.identity(&[]));
                let policy = &self.opts.egress;
                if policy.mode == EgressMode::None {
                    let (id, name, facts) = self.start_pod(&spec, "none").await?;
                    return Ok(Pod {
                        id,
                        name,
                        facts,
                        env: Vec::new(),
                        fenced: Fenced::ready(),
                    });
                }
                let infra = self.infra_image().await?.clone();
                let net = self.create_network(&spec).await?;
                let facts = FenceFacts {
                    host: HostAddrs::discover(),
                    resolvers: super::egress::resolvers(),
                    gateway: net.gateway,
                };
                let rules = network::pod_rules(policy, &facts, net.subnet);
                // The proxy (proxy mode) starts beside the pod; the fence is created while the
                // pod's image facts are read and runs in the background: agent containers are
                // created meanwhile but start only once it is done (`Pod::fenced`).
                let proxy = async {
                    match policy.mode {
                        EgressMode::Proxy => self
                            .start_proxy(&spec, &infra, &net, &facts)
                            .await
                            .map(Some),
                        _ => Ok(None),
                    }
                };
                let pod = async {
                    let name = container_name(&self.opts.run_id, "pod");
                    let mut body = spec.pod_body(&net.name);
                    self.engine.kind().shape_pod(&mut body);
                    let id = self.create(&name, body, Tier::Pod).await?;
                    let fence_name = container_name(&self.opts.run_id, "fence");
                    let mut fence =
                        network::fence_body(&infra, &id, spec.labels("fence", "fence"), &rules);
                    self.engine.kind().shape_member(&mut fence, &id);
                    let (image_facts, fence_id) = tokio::join!(
                        self.image_facts(&id),
                        self.create(&fence_name, fence, Tier::Member)
                    );
                    let fence_id = fence_id?;
                    self.docker()
                        .start_container(&id, None)
                        .await
                        .map_err(|e| {
                            SandboxError::Container(format!("starting pod {name}: {e}"))
                        })?;
                    Ok::<_, SandboxError>((id, name, image_facts, fence_name, fence_id))
                };
                let (proxy, (id, name, image_facts, fence_name, fence_id)) =
                    tokio::try_join!(proxy, pod)?;
                let fenced = network::spawn_fence(
                    self.docker().clone(),
                    self.created.clone(),
                    fence_name,
                    fence_id,
                    proxy.as_ref().map(|(proxy_id, _)| proxy_id.clone()),
                );
                Ok::<_, SandboxError>(Pod {
                    id,
                    name,
                    facts: image_facts,
                    env: proxy.map_or_else(Vec::new, |(_, ip)| network::proxy_env(ip)),
                    fenced,
                })
            })
            .await
    }

    /// Creates and starts the pod container on `network` (a network name or `none`).
    async fn start_pod(
        &self,
        spec: &RunSpec,
        network: &str,
    ) -> Result<(String, String, ImageFacts), SandboxError> {
        let name = container_name(&self.opts.run_id, "pod");
        let mut body = spec.pod_body(network);
        self.engine.kind().shape_pod(&mut body);
        let id = self.create(&name, body, Tier::Pod).await?;
        let facts = self.image_facts(&id).await;
        self.docker()
            .start_container(&id, None)
            .await
            .map_err(|e| SandboxError::Container(format!("starting pod {name}: {e}")))?;
        Ok((id, name, facts))
    }

    /// flowerbox's own image (built when missing), which has iptables and tinyproxy.
    async fn infra_image(&self) -> Result<&String, SandboxError> {
        self.infra_image
            .get_or_try_init(|| async {
                if self.opts.image.is_none() {
                    return Ok(self.image().await?.clone());
                }
                let ensured = ensure_image(&self.engine, None, self.opts.show_progress).await?;
                Ok::<_, SandboxError>(ensured.image)
            })
            .await
    }

    /// The run's own bridge network, labelled like its containers.
    async fn create_network(&self, spec: &RunSpec) -> Result<RunNet, SandboxError> {
        let name = container_name(&self.opts.run_id, "net");
        let net = network::create_network(self.docker(), &name, spec.labels("net", "net")).await?;
        lock(&self.networks).push(net.id.clone());
        Ok(net)
    }

    /// Starts the run's proxy on `net`; returns its id and address there.
    async fn start_proxy(
        &self,
        spec: &RunSpec,
        image: &str,
        net: &RunNet,
        facts: &FenceFacts,
    ) -> Result<(String, std::net::Ipv4Addr), SandboxError> {
        let policy = &self.opts.egress;
        let rules = network::proxy_rules(policy, facts, net.subnet);
        let config = network::proxy_config(policy, net.subnet);
        let name = container_name(&self.opts.run_id, "proxy");
        let body = network::proxy_body(
            image,
            &net.name,
            spec.labels("proxy", "proxy"),
            &rules,
            &config,
        );
        let id = self.create(&name, body, Tier::Member).await?;
        self.docker()
            .start_container(&id, None)
            .await
            .map_err(|e| SandboxError::Container(format!("starting {name}: {e}")))?;
        let info = self
            .docker()
            .inspect_container(&id, None)
            .await
            .map_err(docker_err)?;
        let ip = info
            .network_settings
            .and_then(|s| s.networks)
            .and_then(|n| n.get(&net.name).cloned())
            .and_then(|e| e.ip_address)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| SandboxError::Container(format!("{name} 在 {} 上没有地址", net.name)))?;
        Ok((id, ip))
    }

    /// Reads `/etc/passwd`, `/etc/group` and whether bash, `setpriv` and `lsof` exist from a
    /// created container.
    async fn image_facts(&self, id: &str) -> ImageFacts {
        let (has_bash, setpriv, lsof, passwd, group) = tokio::join!(
            self.exists(id, "/bin/bash"),
            self.first_existing(id, readonly::SETPRIV_PATHS),
            self.first_existing(id, readonly::LSOF_PATHS),
            self.read_file(id, "/etc/passwd"),
            self.read_file(id, "/etc/group")
        );
        ImageFacts {
            passwd: passwd.unwrap_or_else(|| "root:x:0:0:root:/root:/bin/sh\n".into()),
            group: group.unwrap_or_else(|| "root:x:0:\n".into()),
            has_bash,
            setpriv,
            lsof,
        }
    }

    /// Whether `path` exists in the container (an answer other than 404 counts as yes).
    async fn exists(&self, id: &str, path: &str) -> bool {
        let options = ContainerArchiveInfoOptions { path: path.into() };
        match self
            .docker()
            .get_container_archive_info(id, Some(options))
            .await
        {
            Ok(_) => true,
            Err(e) => status_code(&e) != Some(404),
        }
    }

    /// The first of `paths` that exists in the container.
    async fn first_existing(&self, id: &str, paths: &[&str]) -> Option<String> {
        let found = futures::future::join_all(paths.iter().map(|p| self.exists(id, p))).await;
        paths
            .iter()
            .zip(found)
            .find_map(|(p, yes)| yes.then(|| p.to_string()))
    }

    async fn read_file(&self, id: &str, path: &str) -> Option<String> {
        let mut stream = self
            .docker()
            .download_from_container(id, Some(DownloadFromContainerOptions { path: path.into() }));
        let mut tar_bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            tar_bytes.extend_from_slice(&chunk.ok()?);
            if tar_bytes.len() > 4 << 20 {
                return None;
            }
        }
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let mut entry = archive.entries().ok()?.next()?.ok()?;
        let mut text = String::new();
        entry.read_to_string(&mut text).ok()?;
        Some(text)
    }

    async fn create_agent(&self, spec: &AgentBox) -> Result<Arc<DockerSandbox>, SandboxError> {
        let spec = canonical_box(spec)?;
        let early = lock(&self.early_pod).take();
        if let Some(Ok(Err(e))) = match early {
            Some(h) => Some(h.await),
            None => None,
        } {
            return Err(e);
        }
        let pod = self.pod().await?.clone();
        let image = self.image().await?.clone();
        let mounts: Vec<PathBuf> = spec.mounts.iter().map(|m| m.inside.clone()).collect();
        let identity = self.identity(&mounts);
        // Judges and coordinators run as a uid of their own (see `readonly`).
        let read_only = ReadOnly::plan(spec.role, identity.ids, &mounts, &pod.facts, &image)?;
        let inside = read_only.as_ref().map_or(&identity, |r| &r.shell);
        let mut run = self.run_spec(&image, inside.clone());
        run.extra_env = pod.env.clone();
        let name = container_name(&self.opts.run_id, &spec.agent);
        let mut body = run.agent_body(&spec, &pod.id, &pod.name);
        self.engine.kind().shape_member(&mut body, &pod.id);
        if let Some(r) = &read_only {
            let seccomp = kind::seccomp_option(self.engine.kind(), &self.seccomp_file)?;
            r.harden(&mut body, seccomp);
        }
        // The exec service's binary, unless an agent could write where its copy lies.
        let mut binary = match self.service_refused.load(Ordering::SeqCst) {
            true => None,
            false => self.service_binary().await,
        }
        .filter(|b| !spec.mounts.iter().any(|m| b.inside(&m.host)));
        let id = match &binary {
            None => self.create(&name, body, Tier::Agent).await?,
            Some(b) => {
                let plain = body.clone();
                service::mount(&mut body, b.path());
                match self.create(&name, body, Tier::Agent).await {
                    Ok(id) => id,
                    // The engine cannot see the copy (flowerbox itself in a container, a
                    // remote engine): no service for this run.
                    Err(e) => {
                        tracing::warn!(error = %e, "no exec service: the engine refused its mount");
                        self.service_refused.store(true, Ordering::SeqCst);
                        binary = None;
                        self.create(&name, plain, Tier::Agent).await?
                    }
                }
            }
        };
        let archive = match &read_only {
            Some(r) => r.archive(&pod.facts, &identity)?,
            None => {
                let (passwd, group) = patch_passwd(&pod.facts, &identity);
                etc_archive(&passwd, &group)?
            }
        };
        self.docker()
            .upload_to_container(
                &id,
                Some(UploadToContainerOptions {
                    path: "/".into(),
                    ..Default::default()
                }),
                body_full(archive.into()),
            )
            .await
            .map_err(|e| SandboxError::Container(format!("writing passwd into {name}: {e}")))?;
        // Never a process in the pod's namespace before its rules are in.
        pod.fenced.wait().await?;
        self.docker()
            .start_container(&id, None)
            .await
            .map_err(|e| SandboxError::Container(format!("starting {name}: {e}")))?;
        let user = format!("{}:{}", identity.ids.uid, identity.ids.gid);
        let sandbox = DockerSandbox::new(
            self.docker().clone(),
            id,
            name,
            image,
            user,
            pod.facts.has_bash,
            spec,
        );
        let sandbox = match &read_only {
            Some(r) => sandbox.entered_as(r.exec_user(), r.exec_prefix(), r.shell.ids),
            None => sandbox,
        };
        let sandbox = Arc::new(match binary {
            Some(_) => sandbox.with_service(),
            None => sandbox,
        });
        sandbox.warm_up();
        Ok(sandbox)
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

    fn prepare(&self) {
        let mut early = lock(&self.inner.early_pod);
        if early.is_some() || self.inner.pod.initialized() {
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
            .get_or_try_init(|| async { Err(SandboxError::ShutDown) })
            .await
            .ok()
            .cloned();
        if let Some(sandbox) = started {
            if let Some(e) = self.inner.remove(sandbox.container_id()).await {
                return Err(e);
            }
        }
        Ok(())
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        self.inner.teardown().await
    }
}
