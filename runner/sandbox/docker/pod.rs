//! The run's pod (DESIGN.md "Pod"): made on first use (early, while the run clarifies), on
//! the run's own network with its rules loaded by a fence before any agent joins, and made
//! again when it went (issue 26 §2: `docker stop` or `docker kill` of the pod; no agent can end
//! it, its processes run under [`super::container::pod_ids`]), with its rules loaded again
//! first. The network and the proxy are the run's, made once.

use bollard::query_parameters::{ContainerArchiveInfoOptions, DownloadFromContainerOptions};
use futures::StreamExt;
use std::io::Read;
use std::sync::atomic::Ordering;

use super::container::{container_name, ImageFacts, RunSpec};
use super::engine::status_code;
use super::liveness::Life;
use super::network::{self, FenceFacts, Fenced, RunNet};
use super::{docker_err, lock, readonly, Inner, Tier};
use crate::sandbox::egress::{EgressMode, HostAddrs};
use crate::sandbox::SandboxError;

/// The pod of a run.
#[derive(Debug, Clone)]
pub(super) struct Pod {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) facts: ImageFacts,
    /// Environment every agent container gets (the proxy's address in proxy mode).
    pub(super) env: Vec<String>,
    /// Resolves when the pod's rules are in: agent containers start only after.
    pub(super) fenced: Fenced,
    /// Its life: when it goes, every agent container goes with it.
    pub(super) life: Life,
}

/// Pods made again in one run at most (a pod stopped by a worker again and again is a run
/// that cannot go on).
pub(super) const MAX_POD_REBUILDS: u32 = 3;

impl Inner {
    /// The live pod: made on first use, and made again when it went (at most
    /// [`MAX_POD_REBUILDS`] times). A pod that cannot be made again loses the run
    /// ([`SandboxFactory::lost`]): its agents would have nowhere to run.
    pub(super) async fn pod(&self) -> Result<Pod, SandboxError> {
        let mut current = self.pod.lock().await;
        if let Some(pod) = current.as_ref().filter(|p| p.life.gone().is_none()) {
            return Ok(pod.clone());
        }
        let again = current.is_some();
        if again {
            let n = self.pod_rebuilds.fetch_add(1, Ordering::SeqCst) + 1;
            if n > MAX_POD_REBUILDS {
                let why = format!("这次运行的 pod 已经停了 {n} 次,不再重建:运行停在这里");
                self.watch.fail(why.clone());
                return Err(SandboxError::Lost(why));
            }
            tracing::info!(rebuild = n, "making the run's pod again");
        }
        match self.new_pod().await {
            Ok(pod) => {
                *current = Some(pod.clone());
                Ok(pod)
            }
            Err(e) if again => {
                let why = format!("这次运行的 pod 停了,重建失败:{e}");
                self.watch.fail(why.clone());
                Err(SandboxError::Lost(why))
            }
            Err(e) => Err(e),
        }
    }

    /// Makes a pod: its container, and (with a network) the fence that loads its rules in the
    /// background; the run's network and proxy are made once, for every pod of the run.
    pub(super) async fn new_pod(&self) -> Result<Pod, SandboxError> {
        let image = self.image().await?.clone();
        let spec = self.run_spec(&image, self.identity(&[]));
        let policy = &self.opts.egress;
        if policy.mode == EgressMode::None {
            let (id, name, facts) = self.start_pod(&spec, "none").await?;
            let life = self.watch_pod(&id).await?;
            return Ok(Pod {
                id,
                name,
                facts,
                env: Vec::new(),
                fenced: Fenced::ready(),
                life,
            });
        }
        let infra = self.infra_image().await?.clone();
        let (net, facts) = self
            .net
            .get_or_try_init(|| async {
                let host = self.host_addrs(&infra).await?;
                let net = self.create_network(&spec).await?;
                let facts = FenceFacts {
                    host,
                    resolvers: crate::sandbox::egress::resolvers(),
                    gateway: net.gateway,
                };
                Ok::<_, SandboxError>((net, facts))
            })
            .await?;
        let rules = network::pod_rules(policy, facts, net.subnet);
        // The proxy (proxy mode, once per run) starts beside the first pod; the fence is
        // created while the pod's image facts are read and runs in the background: agent
        // containers are created meanwhile but start only once it is done (`Pod::fenced`).
        let proxy = self.proxy.get_or_try_init(|| async {
            match policy.mode {
                EgressMode::Proxy => self.start_proxy(&spec, &infra, net, facts).await.map(Some),
                _ => Ok(None),
            }
        });
        let pod = async {
            let name = container_name(&self.opts.run_id, "pod");
            let mut body = spec.pod_body(&net.name);
            self.engine.kind().shape_pod(&mut body);
            let id = self.create(&name, body, Tier::Pod).await?;
            let fence_name = container_name(&self.opts.run_id, "fence");
            let mut fence = network::fence_body(&infra, &id, spec.labels("fence", "fence"), &rules);
            self.engine.kind().shape_member(&mut fence, &id);
            // The image's facts are read while the fence is created and the pod starts (they
            // are the image's files, the same before and after the start).
            let start = async {
                let fence_id = self.create(&fence_name, fence, Tier::Member).await?;
                self.docker()
                    .start_container(&id, None)
                    .await
                    .map_err(super::error::container(format!("starting pod {name}")))?;
                Ok::<_, SandboxError>(fence_id)
            };
            let (image_facts, fence_id) = tokio::join!(self.image_facts(&id), start);
            let fence_id = fence_id?;
            Ok::<_, SandboxError>((id, name, image_facts, fence_name, fence_id))
        };
        let (proxy, (id, name, image_facts, fence_name, fence_id)) = tokio::try_join!(proxy, pod)?;
        let life = self.watch_pod(&id).await?;
        let fenced = network::spawn_fence(
            self.docker().clone(),
            self.created.clone(),
            fence_name,
            fence_id,
            proxy.as_ref().map(|(proxy_id, _)| proxy_id.clone()),
        );
        Ok(Pod {
            id,
            name,
            facts: image_facts,
            env: proxy
                .as_ref()
                .map_or_else(Vec::new, |(_, ip)| network::proxy_env(*ip)),
            fenced,
            life,
        })
    }

    /// The addresses the pod's fence refuses as the host's: this machine's, and on an engine
    /// that does not share its disk also the engine host's, learned from the engine
    /// ([`super::engine_host`]; not learned, no pod).
    pub(super) async fn host_addrs(&self, image: &str) -> Result<HostAddrs, SandboxError> {
        let mut host = HostAddrs::discover();
        if self.opts.remote {
            let labels =
                super::volumes::run_labels(&self.opts.run_id, &self.opts.workspace, &self.owner);
            // Not learned, the run cannot go on: no pod of it may start without them.
            let engine = super::engine_host::learn(&self.engine, image, labels)
                .await
                .inspect_err(|e| self.watch.fail(e.to_string()))?;
            host.addrs.extend(engine.addrs);
            host.addrs.sort();
            host.addrs.dedup();
        }
        Ok(host)
    }

    /// Watches the pod `id` just started; an error when it is already gone.
    pub(super) async fn watch_pod(&self, id: &str) -> Result<Life, SandboxError> {
        let life = self.watch.pod(id);
        match self.watch.confirm(&life).await {
            None => Ok(life),
            Some(why) => Err(SandboxError::Container(format!("the pod {why} at once"))),
        }
    }

    /// Creates and starts the pod container on `network` (a network name or `none`).
    pub(super) async fn start_pod(
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
            .map_err(super::error::container(format!("starting pod {name}")))?;
        Ok((id, name, facts))
    }

    /// flowerbox's own image (built when missing), which has iptables and tinyproxy.
    pub(super) async fn infra_image(&self) -> Result<&String, SandboxError> {
        self.infra_image
            .get_or_try_init(|| async {
                if self.opts.image.is_none() {
                    return Ok(self.image().await?.clone());
                }
                let ensured =
                    super::image::ensure_image_shown(&self.engine, None, self.opts.build_shown())
                        .await?;
                Ok::<_, SandboxError>(ensured.image)
            })
            .await
    }

    /// The run's own bridge network, labelled like its containers.
    pub(super) async fn create_network(&self, spec: &RunSpec) -> Result<RunNet, SandboxError> {
        let name = container_name(&self.opts.run_id, "net");
        let net = network::create_network(self.docker(), &name, spec.labels("net", "net")).await?;
        lock(&self.networks).push(net.id.clone());
        Ok(net)
    }

    /// Starts the run's proxy on `net`; returns its id and address there.
    pub(super) async fn start_proxy(
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
            .map_err(super::error::container(format!("starting {name}")))?;
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
    pub(super) async fn image_facts(&self, id: &str) -> ImageFacts {
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
    pub(super) async fn exists(&self, id: &str, path: &str) -> bool {
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
    pub(super) async fn first_existing(&self, id: &str, paths: &[&str]) -> Option<String> {
        let found = futures::future::join_all(paths.iter().map(|p| self.exists(id, p))).await;
        paths
            .iter()
            .zip(found)
            .find_map(|(p, yes)| yes.then(|| p.to_string()))
    }

    pub(super) async fn read_file(&self, id: &str, path: &str) -> Option<String> {
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
}
