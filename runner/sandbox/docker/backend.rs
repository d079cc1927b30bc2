//! [`DockerBackend`]: the Docker Engine as the run's [`SandboxBackend`] (the default): one pod
//! per run, one container per agent that executes commands.

use async_trait::async_trait;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::deferred::DeferredDocker;
use super::{DockerOptions, DockerSandboxFactory, Engine, DEFAULT_PING_TIMEOUT};
use crate::sandbox::doctor::Check;
use crate::sandbox::egress::EgressPolicy;
use crate::sandbox::gc::GcReport;
use crate::sandbox::{
    CommandsRun, Demand, Preflight, SandboxBackend, SandboxError, SandboxFactory,
};

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
    /// The engine does not share this machine's disk (`--sandbox docker-remote`): agents
    /// mount the run's volumes only ([`DockerOptions::remote`]).
    pub remote: bool,
}

impl DockerBackend {
    /// The default engine with `image` and `egress`.
    pub fn new(image: Option<String>, egress: EgressPolicy) -> Self {
        DockerBackend {
            image,
            docker_host: None,
            egress,
            ping_timeout: DEFAULT_PING_TIMEOUT,
            remote: false,
        }
    }
}

impl DockerBackend {
    /// The factory's options for run `run_id` in `workspace`.
    fn options(&self, run_id: &str, workspace: &Path) -> DockerOptions {
        let mut opts = DockerOptions::new(run_id, workspace);
        opts.image = self.image.clone();
        opts.egress = self.egress.clone();
        opts.docker_host = self.docker_host.clone();
        opts.ping_timeout = self.ping_timeout;
        opts.remote = self.remote;
        opts
    }
}

#[async_trait]
impl SandboxBackend for DockerBackend {
    fn name(&self) -> &'static str {
        match self.remote {
            true => "docker-remote",
            false => "docker",
        }
    }

    fn commands_run(&self) -> CommandsRun {
        CommandsRun::InContainer
    }

    /// Nothing before an agent needs it ([`super::deferred`]): with [`Demand::Soon`] the engine
    /// is pinged now and the orphan sweep and the shared-disk probe start in the background;
    /// the image is made on first need (with progress).
    ///
    /// An engine reached over the network (`tcp://`: a CI `dind` service, a remote machine's
    /// socket forwarded) is probed first when the run will need it: one that does not see the
    /// workspace opens in the remote mode ([`DockerOptions::remote`]) instead of being
    /// refused, and the run is told so. A Unix socket's engine is never probed here (the
    /// local path is unchanged).
    async fn open_run(
        &self,
        run_id: &str,
        workspace: &Path,
        demand: Demand,
    ) -> Result<Preflight, SandboxError> {
        let mut opts = self.options(run_id, workspace);
        let mut notes = Vec::new();
        if !opts.remote && demand == Demand::Soon {
            let host = self.docker_host.as_deref();
            if let Some(why) =
                super::shared_disk::remote_instead(host, self.ping_timeout, workspace).await
            {
                opts.remote = true;
                notes.push(why);
            }
        }
        let factory = DeferredDocker::open(opts, demand).await?;
        Ok(Preflight {
            factory: Arc::new(factory),
            notes,
        })
    }

    /// Connects without the image-build spinner; an image not on the engine is
    /// [`SandboxError::NoImage`], never built here.
    async fn open_check(
        &self,
        run_id: &str,
        workspace: &Path,
    ) -> Result<Arc<dyn SandboxFactory>, SandboxError> {
        let mut opts = self.options(run_id, workspace);
        opts.show_progress = false;
        let factory = DockerSandboxFactory::connect(opts).await?;
        let name = self.image.clone().unwrap_or_else(super::default_image);
        if !super::image::image_exists(factory.engine(), &name).await? {
            return Err(SandboxError::NoImage(name));
        }
        Ok(Arc::new(factory))
    }

    async fn checks(&self, workspace: &Path) -> Vec<Check> {
        super::checks::checks(
            self.docker_host.as_deref(),
            self.image.as_deref(),
            self.ping_timeout,
            workspace,
            self.remote,
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
        super::gc::gc(&engine, workspace).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::doctor::{doctor, exit_code, CheckStatus, DoctorInput};

    #[tokio::test]
    async fn dead_engine_fails_engine_check_and_shows_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let backend = DockerBackend {
            docker_host: Some("unix:///nonexistent/docker.sock".into()),
            image: None,
            egress: Default::default(),
            ping_timeout: std::time::Duration::from_secs(2),
            remote: false,
        };
        let input = DoctorInput {
            workspace: dir.path().to_path_buf(),
            credential_names: vec!["ANTHROPIC_API_KEY".into()],
            egress: Default::default(),
        };
        let checks = doctor(&backend, &input).await;
        let engine = checks.iter().find(|c| c.name == "engine").unwrap();
        assert_eq!(engine.status, CheckStatus::Fail);
        assert!(engine.detail.contains("--sandbox host"));
        let creds = checks.iter().find(|c| c.name == "credentials").unwrap();
        assert_eq!(creds.detail, "找到了 ANTHROPIC_API_KEY");
        assert!(
            engine
                .to_string()
                .starts_with("不行  engine      用不了 Docker 引擎"),
            "{engine}"
        );
        let egress = checks.iter().find(|c| c.name == "egress").unwrap();
        assert_eq!(
            egress.to_string(),
            "通过  egress      open:每次运行一个自己的网络,能上互联网;宿主机、内网、链路本地(云元数据)地址都不通"
        );
        // No engine: the image is not checked, and the line says so in Chinese.
        let image = checks.iter().find(|c| c.name == "image").unwrap();
        assert_eq!(image.to_string(), "注意  image       没查:没有引擎");
        // Not a repository: the workspace line names the path and --isolate verbatim.
        let ws = checks.iter().find(|c| c.name == "workspace").unwrap();
        assert_eq!(ws.status, CheckStatus::Warn);
        assert_eq!(
            ws.detail,
            format!(
                "{} 不在 git 仓库里(--isolate 要有仓库)",
                dir.path().display()
            )
        );
        assert_eq!(exit_code(&checks), 1);
    }
}
