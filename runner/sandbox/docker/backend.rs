//! [`DockerBackend`]: the Docker Engine as the run's [`SandboxBackend`] (the default): one pod
//! per run, one container per agent that executes commands.

use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{DockerOptions, DockerSandboxFactory, Engine, DEFAULT_PING_TIMEOUT};
use crate::sandbox::doctor::Check;
use crate::sandbox::egress::EgressPolicy;
use crate::sandbox::gc::GcReport;
use crate::sandbox::{CommandsRun, Preflight, SandboxBackend, SandboxError};

/// What the command line chose for the Docker backend; nothing is connected until a run opens.
#[derive(Debug, Clone)]
pub struct DockerBackend {
    /// `--image` / `FLOWERBOX_IMAGE`; `None` = flowerbox's own image, built when missing.
    pub image: Option<String>,
    /// Engine endpoint; `None` = `DOCKER_HOST`, else the current Docker context, else the
    /// default socket.
    pub docker_host: Option<String>,
    /// The policy the pod's network enforces.
    pub egress: EgressPolicy,
    /// How long the engine gets to answer the first ping.
    pub ping_timeout: Duration,
}

impl DockerBackend {
    /// The default engine with `image` and `egress`.
    pub fn new(image: Option<String>, egress: EgressPolicy) -> Self {
        DockerBackend {
            image,
            docker_host: None,
            egress,
            ping_timeout: DEFAULT_PING_TIMEOUT,
        }
    }
}

#[async_trait]
impl SandboxBackend for DockerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn commands_run(&self) -> CommandsRun {
        CommandsRun::InContainer
    }

    /// Pings the engine before anything is created, removes containers that crashed runs of
    /// this workspace left behind, and makes sure the image exists (built on first use, with
    /// progress).
    async fn open_run(&self, run_id: &str, workspace: &Path) -> Result<Preflight, SandboxError> {
        let mut opts = DockerOptions::new(run_id, workspace);
        opts.image = self.image.clone();
        opts.egress = self.egress.clone();
        opts.docker_host = self.docker_host.clone();
        opts.ping_timeout = self.ping_timeout;
        let factory = DockerSandboxFactory::connect(opts).await?;
        // Before any agent starts (and before an image build, which may take minutes), the
        // engine must see the workspace (refused otherwise); the probe runs while orphans are
        // swept.
        let sweep = async {
            match factory.sweep_orphans().await {
                Ok(lines) => lines,
                Err(e) => {
                    tracing::warn!(error = %e, "orphan sweep failed");
                    Vec::new()
                }
            }
        };
        let probed = super::shared_disk::probe(factory.engine(), factory.workspace());
        let (notes, probed) = tokio::join!(sweep, probed);
        probed?;
        factory.ensure_image().await?;
        Ok(Preflight {
            factory: Arc::new(factory),
            notes,
        })
    }

    async fn checks(&self, workspace: &Path) -> Vec<Check> {
        super::checks::checks(
            self.docker_host.as_deref(),
            self.image.as_deref(),
            self.ping_timeout,
            workspace,
        )
        .await
    }

    async fn leftovers(&self, workspace: &Path) -> Option<Check> {
        super::checks::orphans(self.docker_host.as_deref(), self.ping_timeout, workspace).await
    }

    /// Removes orphaned containers and networks (the engine is pinged first: a dead one is an
    /// error naming `DOCKER_HOST`).
    async fn gc(&self, workspace: Option<&Path>) -> Result<GcReport, SandboxError> {
        let engine = Engine::connect(self.docker_host.as_deref(), self.ping_timeout).await?;
        crate::sandbox::gc::gc(&engine, workspace).await
    }
}
