//! Whether the engine sees this machine's files: every bind mount the Docker backend makes
//! (workspace, worktrees, workbench, runs, the exec service's binary, seccomp profiles) assumes
//! it does. An engine on another machine (a CI `dind` service, `DOCKER_HOST=ssh://…`) resolves
//! those paths on its own disk: a missing one fails the container, an existing one (an empty
//! directory the engine made earlier) lets the agent work on the wrong files while the run
//! reports success. So a run's first step, before any agent starts, proves the workspace is
//! shared by construction: the host writes a random marker into a fresh directory inside the
//! workspace, a container bind-mounts that directory (created, never started; its image is one
//! empty file, so the probe comes before any image build), and the marker is read back through
//! the engine's archive API, which resolves the mount on the engine's side. Same bytes, or the
//! run is refused. The remote-engine backend (files through the engine's archive API instead
//! of bind mounts) does not exist yet.

use bollard::body_full;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateImageOptions, DownloadFromContainerOptions, RemoveContainerOptions,
};
use futures::StreamExt;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

use super::engine::status_code;
use super::Engine;
use crate::sandbox::SandboxError;

/// Where the probe's directory is mounted in its container.
const TARGET: &str = "/flowerbox-disk-probe";
/// The marker's file name.
const MARKER: &str = "marker";

/// What the engine saw at the marker's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The engine has no such directory (it refused the bind mount).
    NoDirectory,
    /// The directory exists on the engine's side but the marker is not in it.
    NoMarker,
    /// A file with other bytes.
    OtherContent,
}

/// Why the probe refused the engine or could not run.
#[derive(Debug, Error)]
pub enum DiskProbeError {
    /// The engine does not see the workspace: its bind mounts would not be the caller's files.
    #[error(
        "Docker 引擎 {host}({origin})看不到这台机器上的文件:flowerbox 在工作目录 {} 里写了一个探针文件,\
         引擎挂进容器后{}。这种不和你共用磁盘的引擎(CI 的 dind 服务、ssh:// 的远程机器)会让 agent 在一个\
         空目录里干活,`--sandbox docker` 不用它。这种引擎用 `--sandbox docker-remote --isolate`(仓库放进\
         引擎的卷,改动靠合入带回);或者把 DOCKER_HOST 设成本机的引擎(或者去掉它),或者用 `--sandbox host` \
         不开容器跑。",
        workspace.display(),
        match seen {
            Seen::NoDirectory => "说那个目录不存在",
            Seen::NoMarker => "目录是空的,没有那个文件",
            Seen::OtherContent => "读到的内容不一样",
        }
    )]
    NotShared {
        /// The engine's endpoint.
        host: String,
        /// Where the endpoint came from (names `DOCKER_HOST`).
        origin: String,
        /// The canonical workspace.
        workspace: PathBuf,
        /// What the engine saw.
        seen: Seen,
    },
    /// Writing or removing the marker on this machine failed.
    #[error("写不了磁盘探针文件(工作目录 {}):{source}", workspace.display())]
    Io {
        /// The canonical workspace.
        workspace: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The engine failed otherwise.
    #[error("查引擎能不能看到工作目录时出错:{0}")]
    Engine(#[from] bollard::errors::Error),
}

impl From<DiskProbeError> for SandboxError {
    fn from(e: DiskProbeError) -> Self {
        match e {
            DiskProbeError::NotShared { .. } => SandboxError::Unsupported(e.to_string()),
            DiskProbeError::Io { source, .. } => SandboxError::Io(source),
            DiskProbeError::Engine(b) => SandboxError::Engine(b.into()),
        }
    }
}

/// The probe's image: one empty file, imported through the API on first use (a few hundred
/// bytes; no registry, no build), so the probe needs neither the agent image nor its build.
pub const PROBE_IMAGE: &str = "flowerbox-disk-probe:empty-1";

/// Proves `engine` sees `workspace` (canonical) as this machine does, with a container of
/// [`PROBE_IMAGE`] that is created and removed, never started. The removal is waited for: a
/// process that ends right after (a test, a run failing next) would leave it behind otherwise.
pub async fn probe(engine: &Engine, workspace: &Path) -> Result<(), DiskProbeError> {
    /// Imports [`PROBE_IMAGE`] unless the engine has it.
    async fn probe_image(engine: &Engine) -> Result<&'static str, DiskProbeError> {
        match engine.docker().inspect_image(PROBE_IMAGE).await {
            Ok(_) => return Ok(PROBE_IMAGE),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(0);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, ".flowerbox-disk-probe", std::io::empty())
            .and_then(|_| tar.finish())
            .map_err(|source| DiskProbeError::Io {
                workspace: PathBuf::from(PROBE_IMAGE),
                source,
            })?;
        let bytes = tar.into_inner().map_err(|source| DiskProbeError::Io {
            workspace: PathBuf::from(PROBE_IMAGE),
            source,
        })?;
        // The whole reference as `repo` (Podman's compat API ignores a separate `tag`).
        let options = CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(PROBE_IMAGE.into()),
            ..Default::default()
        };
        let mut import =
            engine
                .docker()
                .create_image(Some(options), Some(body_full(bytes.into())), None);
        while let Some(item) = import.next().await {
            item?;
        }
        Ok(PROBE_IMAGE)
    }

    let io = |source| DiskProbeError::Io {
        workspace: workspace.to_path_buf(),
        source,
    };
    // A fresh directory (mode 0700, random name) removed when the probe returns.
    let dir = tempfile::Builder::new()
        .prefix(".flowerbox-disk-probe-")
        .tempdir_in(workspace)
        .map_err(io)?;
    let marker = uuid::Uuid::new_v4().simple().to_string();
    std::fs::write(dir.path().join(MARKER), &marker).map_err(io)?;
    let started = std::time::Instant::now();
    let image = probe_image(engine).await?;
    let seen = seen_by_engine(engine, image, dir.path(), marker.as_bytes()).await?;
    dir.close().map_err(io)?;
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        shared = seen.is_none(),
        "disk probe"
    );
    match seen {
        None => Ok(()),
        Some(seen) => Err(DiskProbeError::NotShared {
            host: engine.endpoint().host.clone(),
            origin: engine.endpoint().origin(),
            workspace: workspace.to_path_buf(),
            seen,
        }),
    }
}

/// `None` when the engine reads `marker` at `dir`/marker through a bind mount.
async fn seen_by_engine(
    engine: &Engine,
    image: &str,
    dir: &Path,
    marker: &[u8],
) -> Result<Option<Seen>, DiskProbeError> {
    let docker = engine.docker();
    let body = ContainerCreateBody {
        image: Some(image.into()),
        // Never started: the image has no program at all.
        entrypoint: Some(vec!["/.flowerbox-disk-probe".into()]),
        cmd: Some(vec![]),
        network_disabled: Some(true),
        labels: Some(probe_labels(dir)),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some(TARGET.into()),
                source: Some(dir.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            }]),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = match docker.create_container(None, body).await {
        Ok(r) => r.id,
        // The engine validates a bind's source on its own disk: 400 = it has no such path.
        Err(e) if status_code(&e) == Some(400) => return Ok(Some(Seen::NoDirectory)),
        Err(e) => return Err(e.into()),
    };
    let seen = match read_marker(engine, &id).await {
        Ok(None) => Some(Seen::NoMarker),
        Ok(Some(bytes)) if bytes == marker => None,
        Ok(Some(_)) => Some(Seen::OtherContent),
        Err(e) => {
            remove(docker.clone(), id).await;
            return Err(e);
        }
    };
    remove(docker.clone(), id).await;
    Ok(seen)
}

async fn remove(docker: bollard::Docker, id: String) {
    let rm = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(&id, Some(rm)).await {
        tracing::warn!(error = %e, id, "removing the disk probe's container");
    }
}

/// Label of the probe's container: the workspace probed.
pub const LABEL_DISK_PROBE: &str = "flowerbox.disk-probe";

/// The probe container's labels: the workspace, and its owner's (this process), so `gc`
/// removes one a killed run left between creating and removing it.
fn probe_labels(dir: &Path) -> std::collections::HashMap<String, String> {
    let mut labels =
        std::collections::HashMap::from([(LABEL_DISK_PROBE.to_string(), workspace_label(dir))]);
    if let Ok(owner) = super::labels::Owner::current() {
        owner.add_labels(&mut labels);
    }
    labels
}

/// The workspace the probe's directory is in (its parent), for the probe container's label.
fn workspace_label(dir: &Path) -> String {
    dir.parent().unwrap_or(dir).to_string_lossy().into_owned()
}

/// The marker's bytes as the engine sees them; `None` when it has no such file (404).
async fn read_marker(engine: &Engine, id: &str) -> Result<Option<Vec<u8>>, DiskProbeError> {
    let path = format!("{TARGET}/{MARKER}");
    let mut stream = engine
        .docker()
        .download_from_container(id, Some(DownloadFromContainerOptions { path }));
    let mut tar_bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => tar_bytes.extend_from_slice(&c),
            Err(e) if status_code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if tar_bytes.len() > 1 << 20 {
            return Ok(Some(Vec::new()));
        }
    }
    // An archive that does not parse is not the marker either.
    let mut bytes = Vec::new();
    let mut archive = tar::Archive::new(&tar_bytes[..]);
    let first = archive
        .entries()
        .ok()
        .and_then(|mut e| e.next())
        .and_then(Result::ok);
    match first.map(|mut entry| entry.read_to_end(&mut bytes)) {
        Some(Ok(_)) => Ok(Some(bytes)),
        _ => Ok(Some(Vec::new())),
    }
}

/// `flowerbox doctor`'s line: whether the engine sees `workspace` (the same probe a run makes).
pub async fn check(engine: &Engine, workspace: &Path) -> crate::sandbox::doctor::Check {
    use crate::sandbox::doctor::{Check, CheckStatus};
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    match probe(engine, &workspace).await {
        Ok(()) => Check::new(
            "shared",
            CheckStatus::Pass,
            format!(
                "引擎看得到工作目录 {}(挂进容器的探针文件内容一致)",
                workspace.display()
            ),
        ),
        Err(e @ DiskProbeError::NotShared { .. }) => {
            Check::new("shared", CheckStatus::Fail, e.to_string())
        }
        Err(e) => Check::new("shared", CheckStatus::Warn, format!("没查清:{e}")),
    }
}

/// Why a run on the engine `docker_host` names goes to the remote mode: the engine is reached
/// over the network and the probe says it does not see `workspace`. `None` for a Unix
/// socket's engine (never probed here), one that sees it, or one that cannot be asked (the
/// run's own connection reports that).
pub async fn remote_instead(
    docker_host: Option<&str>,
    timeout: std::time::Duration,
    workspace: &Path,
) -> Option<String> {
    // Resolved without a connection: a Unix socket's engine costs nothing here.
    let endpoint = super::engine::resolve_endpoint(docker_host);
    if endpoint.socket_path().is_some() {
        return None;
    }
    let engine = Engine::connect_to(endpoint, timeout).await.ok()?;
    let workspace = std::fs::canonicalize(workspace).ok()?;
    match probe(&engine, &workspace).await {
        Err(DiskProbeError::NotShared { host, origin, .. }) => Some(format!(
            "引擎 {host}({origin})看不到这台机器的磁盘:这次用 docker-remote,\
             仓库和工作台放进引擎的卷,容器只挂卷;只跑 --isolate"
        )),
        _ => None,
    }
}

/// `doctor`'s `shared` line when the remote mode may apply (`explicit`: `--sandbox
/// docker-remote`; else the default on an engine reached over the network, which a run then
/// chooses by itself): which backend applies and why, and whether the engine does not see
/// the workspace. The same probe; an engine that does not see it is what that mode is for (a
/// pass), one that does is served too, only slower than `--sandbox docker` would.
pub async fn check_remote(
    engine: &Engine,
    workspace: &Path,
    explicit: bool,
) -> (crate::sandbox::doctor::Check, bool) {
    use crate::sandbox::doctor::{Check, CheckStatus};
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let how = match explicit {
        true => "--sandbox docker-remote 就是给它的",
        false => "运行会自动用 docker-remote(不用写 --sandbox)",
    };
    let line = match probe(engine, &workspace).await {
        Ok(()) => Check::new(
            "shared",
            CheckStatus::Warn,
            format!(
                "引擎看得到工作目录 {}:--sandbox docker-remote 照样只用引擎的卷(每次运行把仓库打包送进去),\
                 本机的引擎用 --sandbox docker 更快",
                workspace.display()
            ),
        ),
        Err(DiskProbeError::NotShared { host, origin, .. }) => {
            return (
                Check::new(
                    "shared",
                    CheckStatus::Pass,
                    format!(
                        "引擎 {host}({origin})看不到这台机器的磁盘:{how},\
                         仓库和工作台放进引擎的卷,容器只挂卷;只跑 --isolate"
                    ),
                ),
                true,
            )
        }
        Err(e) => Check::new("shared", CheckStatus::Warn, format!("没查清:{e}")),
    };
    (line, false)
}
