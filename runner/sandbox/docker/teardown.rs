//! Removing what a run made: every container it created, in the order the engine allows
//! (agents, the pod's helpers, the pod), and its networks: on Docker beside the containers
//! (the pod and the proxy leave the network first), elsewhere after them. Teardown waits for
//! the starts in flight; the factory's `Drop` is the last resort. On the way out it sweeps the
//! workspace's orphans once more (containers a killed run's engine finished creating after the
//! startup sweep).
//!
//! The removal itself is a [`Removal`]: the factory's own lists during a teardown, or the plan
//! a run's end hands to its detached cleanup process ([`super::reap`]), which runs this very
//! code.

use bollard::models::NetworkDisconnectRequest;
use bollard::query_parameters::RemoveContainerOptions;
use bollard::Docker;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

use super::engine::{status_code, Engine};
use super::liveness::Watch;
use super::remote::Volumes;
use super::{docker_err, lock, Inner};
use crate::sandbox::SandboxError;

/// What a created container is to the run's pod, which orders removal: the engine refuses to
/// remove a container whose namespaces another one still joins.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub(crate) enum Tier {
    /// An agent's container (joins the pod's namespaces): removed first.
    Agent,
    /// The pod's helpers (the fence joins its network namespace; the proxy sits beside it).
    Member,
    /// The pod itself: removed last.
    Pod,
}

/// Every container a run created and not yet removed, with its [`Tier`].
pub(crate) type Created = Arc<Mutex<Vec<(String, Tier)>>>;

/// What a run's removal works on, and what it waits for: the factory's own lists during a
/// teardown ([`Inner::removal`]), or a detached cleanup's plan ([`super::reap`]). Each list
/// keeps what could not be removed (the factory's `Drop` tries those once more).
pub(super) struct Removal<'a> {
    pub(super) engine: &'a Engine,
    /// The workspace whose orphans are swept on the way.
    pub(super) workspace: &'a Path,
    pub(super) created: &'a Mutex<Vec<(String, Tier)>>,
    pub(super) networks: &'a Mutex<Vec<String>>,
    /// The run's proxy container, on the run's networks beside its pods.
    pub(super) proxy: Option<String>,
    pub(super) volumes: &'a Volumes,
    /// The private directory of the exec service's binary, discarded once no container is
    /// left.
    pub(super) service_dir: Option<PathBuf>,
    /// The run's liveness watch (a removal of ours is no death to notice); none in a cleanup.
    pub(super) watch: Option<&'a Watch>,
    /// Held (read) by the starts in flight; none in a cleanup (its run's starts all ended).
    pub(super) starting: Option<&'a tokio::sync::RwLock<()>>,
    /// The run's own process lives (a teardown), so the orphan sweep never takes its
    /// containers; `false` in a cleanup, whose run is dead.
    pub(super) owner_lives: bool,
}

impl Inner {
    /// The removal of what this run made, over its own lists.
    pub(super) fn removal(&self) -> Removal<'_> {
        Removal {
            engine: &self.engine,
            workspace: &self.opts.workspace,
            created: &self.created,
            networks: &self.networks,
            proxy: self.proxy.get().cloned().flatten().map(|(id, _)| id),
            volumes: &self.volumes,
            service_dir: self
                .service_binary
                .get()
                .cloned()
                .flatten()
                .map(|b| b.dir().to_path_buf()),
            watch: Some(&self.watch),
            starting: Some(&self.starting),
            owner_lives: true,
        }
    }

    /// Force-removes a container (kills it first; 404 is fine) and forgets it.
    pub(super) async fn remove(&self, id: &str) -> Option<SandboxError> {
        self.removal().remove(id).await
    }

    pub(super) async fn teardown(&self) -> Result<(), SandboxError> {
        self.torn_down.store(true, Ordering::SeqCst);
        // From here on every container goes by our hand: nothing to notice, nothing to wait.
        self.watch.stop();
        lock(&self.agents).clear();
        self.removal().run().await
    }
}

impl Removal<'_> {
    fn docker(&self) -> &Docker {
        self.engine.docker()
    }

    /// Removes every container created so far, tier by tier ([`Tier`]: agents, the pod's
    /// helpers, the pod), each tier concurrently. The first error, if any.
    async fn remove_created(&self) -> Option<SandboxError> {
        let created: Vec<(String, Tier)> = lock(self.created).clone();
        let mut first_err = None;
        for tier in [Tier::Agent, Tier::Member, Tier::Pod] {
            let group = created.iter().filter(|(_, t)| *t == tier);
            let results = futures::future::join_all(group.map(|(id, _)| self.remove(id))).await;
            first_err = first_err.or(results.into_iter().flatten().next());
        }
        first_err
    }

    /// Removes every container created so far, all at once (issue 32: a run's teardown is
    /// part of its wall clock); those on the run's networks (`attached`) leave them first,
    /// and `left` says when they did. Docker removes a pod whose namespaces members still join
    /// (they die with its init, and go fast after); an engine that refuses (Podman) leaves
    /// those to the tiered pass, [`Inner::remove_created`].
    async fn remove_created_at_once(
        &self,
        created: &[(String, Tier)],
        attached: &[String],
        left: oneshot::Sender<()>,
    ) {
        let detached = created.iter().filter(|(id, _)| !attached.contains(id));
        let attached = async {
            if !attached.is_empty() {
                self.leave_networks(attached).await;
                let _ = left.send(());
            }
            futures::future::join_all(attached.iter().map(|id| self.remove(id))).await
        };
        tokio::join!(
            futures::future::join_all(detached.map(|(id, _)| self.remove(id))),
            attached
        );
    }

    /// Of `created`, the containers with an endpoint on the run's networks (its pods, the
    /// proxy) where the engine lets the networks go beside the containers
    /// ([`super::EngineKind::removes_networks_early`]); none otherwise.
    fn on_networks(&self, created: &[(String, Tier)]) -> Vec<String> {
        if !self.engine.kind().removes_networks_early() || lock(self.networks).is_empty() {
            return Vec::new();
        }
        let mut attached: Vec<String> = created
            .iter()
            .filter(|(_, tier)| *tier == Tier::Pod)
            .map(|(id, _)| id.clone())
            .collect();
        if let Some(proxy) = &self.proxy {
            attached.push(proxy.clone());
        }
        attached
    }

    /// Disconnects `attached` from the run's networks (errors are for the network's removal
    /// to find).
    async fn leave_networks(&self, attached: &[String]) {
        let networks: Vec<String> = lock(self.networks).clone();
        let leave = networks.iter().flat_map(|net| {
            attached.iter().map(move |container| {
                let request = NetworkDisconnectRequest {
                    container: container.clone(),
                    force: Some(true),
                };
                self.docker().disconnect_network(net, request)
            })
        });
        futures::future::join_all(leave).await;
    }

    /// Removes the run's networks once their containers `left` them, while those die: a
    /// network's removal (~200 ms here) no longer waits for a pod's. One that does not go
    /// (a pod a start in flight just connected, a container that did not leave) is no error:
    /// it stays for the last pass, after every container.
    async fn remove_networks_early(&self, left: oneshot::Receiver<()>) {
        if left.await.is_err() {
            return;
        }
        let networks: Vec<String> = lock(self.networks).clone();
        let remove = |net: String| async move {
            match self.docker().remove_network(&net).await {
                Err(e) if status_code(&e) != Some(404) => {
                    tracing::debug!(network = %net, error = %e, "network left for the last pass");
                }
                _ => lock(self.networks).retain(|n| *n != net),
            }
        };
        futures::future::join_all(networks.into_iter().map(remove)).await;
    }

    /// Removes the private copy of the exec service's binary once no container mounts it
    /// any more, off the exit's path (the copy of a debug build is ~75 MB; its removal took
    /// ~20 ms of the run's end when the factory was dropped).
    async fn discard_service_binary(&self) {
        if let Some(dir) = self.service_dir.clone() {
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        }
    }

    /// Force-removes a container (kills it first; 404 is fine) and forgets it.
    pub(super) async fn remove(&self, id: &str) -> Option<SandboxError> {
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        // Ours: no death to notice.
        if let Some(watch) = self.watch {
            watch.forget(id);
        }
        // Forgotten only once gone: a removal the engine refused (a pod whose dependent
        // container a start in flight just made) is tried again by the next pass.
        match self.docker().remove_container(id, Some(opts)).await {
            Err(e) if status_code(&e) != Some(404) => Some(docker_err(e)),
            _ => {
                lock(self.created).retain(|(c, _)| c != id);
                None
            }
        }
    }

    /// Removes what the run made (see [`Removal::remove_own`]) and its remote volumes once no
    /// container uses them, sweeping the workspace's orphans on the way.
    pub(super) async fn run(&self) -> Result<(), SandboxError> {
        // A run killed while the engine was creating one of its containers leaves that
        // container to appear after this run's startup sweep: sweep once more on the way out
        // (only provably dead owners' containers go; a failure is not this run's). While the
        // run's process lives its own containers are never the sweep's: beside their removal,
        // not after it. A cleanup's run is dead, so its containers are orphans too: the sweep
        // comes after their removal, lest both remove one (the engine refuses the second).
        let sweep = async {
            match super::gc::sweep_orphans(self.engine, self.workspace).await {
                Ok(lines) => lines.iter().for_each(|l| tracing::info!("{l}")),
                Err(e) => tracing::warn!(error = %e, "orphan sweep at teardown failed"),
            }
        };
        let removed = match self.owner_lives {
            true => tokio::join!(self.remove_own(), sweep).0,
            false => {
                let removed = self.remove_own().await;
                sweep.await;
                removed
            }
        };
        // A remote run's volumes, once no container uses them.
        match self.remove_volumes().await {
            Some(e) => removed.and(Err(e)),
            None => removed,
        }
    }

    /// Removes the run's volumes (an engine without this machine's disk); the first error.
    async fn remove_volumes(&self) -> Option<SandboxError> {
        let mut first = None;
        for v in self.volumes.take_all() {
            if let Err(e) = v.remove(self.engine).await {
                first = first.or(Some(e));
            }
        }
        first
    }

    /// Removes what the run made: its containers (twice, around the starts in flight), the
    /// copy of the exec service's binary once they are gone, and its networks, each as early
    /// as the engine allows.
    async fn remove_own(&self) -> Result<(), SandboxError> {
        // What exists now goes at once (a start in flight then fails fast: its pod is gone);
        // then, once every start in flight has ended, whatever those made and whatever the
        // first pass could not remove (the engine refuses a pod while a container that joined
        // it a moment ago still exists, or Podman while any does), tier by tier. Only the
        // second pass's errors count.
        let created: Vec<(String, Tier)> = lock(self.created).clone();
        let attached = self.on_networks(&created);
        let (left, networks_free) = oneshot::channel();
        let containers = async {
            self.remove_created_at_once(&created, &attached, left).await;
            let _no_start = match self.starting {
                Some(starting) => Some(starting.write().await),
                None => None,
            };
            let first_err = self.remove_created().await;
            if first_err.is_none() {
                self.discard_service_binary().await;
            }
            first_err
        };
        let (mut first_err, ()) =
            tokio::join!(containers, self.remove_networks_early(networks_free));
        // Networks left last: the engine refuses to remove one that a container still uses.
        let networks: Vec<String> = std::mem::take(&mut *lock(self.networks));
        for id in networks {
            if let Err(e) = self.docker().remove_network(&id).await {
                if status_code(&e) != Some(404) {
                    first_err = first_err.or(Some(docker_err(e)));
                    lock(self.networks).push(id);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Inner {
    /// Last resort when `teardown` was never awaited (a panic, an early return): removes the
    /// run's containers on a separate thread with its own runtime, waiting at most 20 s.
    fn drop(&mut self) {
        self.watch.stop();
        let mut left: Vec<(String, Tier)> = std::mem::take(&mut *lock(&self.created));
        left.sort_by_key(|(_, tier)| *tier);
        let networks: Vec<String> = std::mem::take(&mut *lock(&self.networks));
        if left.is_empty() && networks.is_empty() {
            return;
        }
        let endpoint = self.engine.endpoint().clone();
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(engine) = Engine::connect_to(endpoint, Duration::from_secs(5)).await else {
                    return;
                };
                let opts = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                for (id, _) in left {
                    let _ = engine
                        .docker()
                        .remove_container(&id, Some(opts.clone()))
                        .await;
                }
                for id in networks {
                    let _ = engine.docker().remove_network(&id).await;
                }
            });
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
