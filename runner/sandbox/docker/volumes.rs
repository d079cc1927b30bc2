//! Per-run volumes for an engine that does not see the caller's disk (issue 30 §2): the
//! workspace's repository lives in a volume of the engine, filled from a git bundle through
//! the engine's archive API, and a worker's branch comes back as a git bundle read through the
//! same API (`isolate::bundle` checks it before the repository takes anything). No path
//! of this machine is ever given to the engine: every container here mounts volumes only.
//!
//! The git work on the engine's side runs in short-lived containers of the agent image
//! ([`Chore`]): no network, every capability dropped, removed when done (also when the
//! caller's future is dropped: the removal is spawned). A volume carries the run's labels and
//! its owner's, as the run's containers do, so `gc` can tell an orphan.

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, LogsOptions, RemoveContainerOptions,
    RemoveVolumeOptions, UploadToContainerOptions, WaitContainerOptions,
};
use futures::StreamExt;
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use super::engine::status_code;
use super::labels::{Owner, LABEL_RUN, LABEL_WORKSPACE};
use super::Engine;
use crate::sandbox::SandboxError;

/// Label: what a run's volume holds (`workspace`, `workbench`).
pub const LABEL_VOLUME: &str = "flowerbox.volume";

/// Longest a chore (a clone, a bundle) may run.
const CHORE_WAIT: Duration = Duration::from_secs(600);

/// Where a chore finds the files it was given, and leaves the one it makes.
const DROP_DIR: &str = "/tmp";

/// The labels of what one run makes on the engine (its volumes, its chores): the run, the
/// workspace and the owner, so `gc` removes them once the owner is dead.
pub fn run_labels(run_id: &str, workspace: &Path, owner: &Owner) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (LABEL_RUN.to_string(), run_id.to_string()),
        (
            LABEL_WORKSPACE.to_string(),
            workspace.to_string_lossy().into_owned(),
        ),
    ]);
    owner.add_labels(&mut labels);
    labels
}

/// One volume of one run on the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunVolume {
    /// Its name (`fbx-<run>-<purpose>`).
    pub name: String,
}

impl RunVolume {
    /// Creates the volume for `purpose` of run `run_id` in `workspace`, labelled with the
    /// run, the workspace, the purpose and `owner`.
    pub async fn create(
        engine: &Engine,
        run_id: &str,
        workspace: &Path,
        purpose: &str,
        owner: &Owner,
    ) -> Result<RunVolume, SandboxError> {
        let name = format!(
            "fbx-{}-{}",
            super::container::sanitize(run_id),
            super::container::sanitize(purpose)
        );
        let mut labels = run_labels(run_id, workspace, owner);
        labels.insert(LABEL_VOLUME.to_string(), purpose.to_string());
        engine
            .docker()
            .create_volume(VolumeCreateRequest {
                name: Some(name.clone()),
                labels: Some(labels),
                ..Default::default()
            })
            .await
            .map_err(super::error::container(format!("creating volume {name}")))?;
        Ok(RunVolume { name })
    }

    /// Removes the volume (gone already: fine).
    pub async fn remove(&self, engine: &Engine) -> Result<(), SandboxError> {
        match engine
            .docker()
            .remove_volume(&self.name, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(super::error::container(format!(
                "removing volume {}",
                self.name
            ))(e)),
        }
    }

    /// The volume's mount at `target` in a container.
    pub fn mount(&self, target: &Path) -> Mount {
        Mount {
            target: Some(target.to_string_lossy().into_owned()),
            source: Some(self.name.clone()),
            typ: Some(MountType::VOLUME),
            ..Default::default()
        }
    }
}

/// A short-lived container of `image` with `mounts` (volumes only) running one shell script
/// as `user`.
pub struct Chore<'a> {
    /// The engine.
    pub engine: &'a Engine,
    /// The agent image (git and a shell).
    pub image: &'a str,
    /// Who the script runs as (`uid:gid`).
    pub user: &'a str,
    /// Its volumes.
    pub mounts: Vec<Mount>,
    /// The run's labels ([`run_labels`]), so a chore a killed run left is an orphan to `gc`.
    pub labels: HashMap<String, String>,
}

/// git as chores run it in a repository a worker could configure: no fsmonitor command, no
/// hook (a worker's `core.fsmonitor` runs on `reset --hard`, its `post-checkout` hook on
/// `worktree add`; they would run in the chore, with every volume it mounts). The rest of the
/// repository's configuration (a clean/smudge filter, say) is still read: a chore must mount
/// only volumes the workers can write anyway, and what it hands back is checked by the host.
const GIT: &str = "git -c core.fsmonitor=false -c core.hooksPath=/dev/null";

/// Label of a chore's container (its name).
pub const LABEL_CHORE: &str = "flowerbox.chore";

impl Chore<'_> {
    /// Runs `script` with `files` (name → bytes) put in [`DROP_DIR`] first; returns the bytes
    /// of `take` (a file in [`DROP_DIR`]) when asked, at most `cap` bytes. A script that
    /// exits non-zero is an error with its output's tail.
    pub async fn run(
        &self,
        script: &str,
        files: &[(&str, &[u8])],
        take: Option<(&str, u64)>,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        self.run_with(script, files, take, &[]).await
    }

    /// [`Chore::run`] with the capabilities `caps` (`CHOWN`, for a chore that hands a fresh
    /// volume to the run's user) added back.
    pub async fn run_with(
        &self,
        script: &str,
        files: &[(&str, &[u8])],
        take: Option<(&str, u64)>,
        caps: &[&str],
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        let docker = self.engine.docker();
        let name = format!("fbx-chore-{}", uuid::Uuid::new_v4().simple());
        let mut labels = self.labels.clone();
        labels.insert(LABEL_CHORE.to_string(), name.clone());
        let entrypoint = vec!["sh".into(), "-ec".into(), script.into()];
        let mut body = confined_body(
            self.image,
            entrypoint,
            Some(self.user),
            self.mounts.clone(),
            labels,
        );
        if let Some(hc) = body.host_config.as_mut().filter(|_| !caps.is_empty()) {
            hc.cap_add = Some(caps.iter().map(|c| c.to_string()).collect());
        }
        let id = create_body(self.engine, &name, body).await?;
        // Removed however this ends: awaited here, spawned when the future is dropped.
        let mut removal = Removal {
            docker: docker.clone(),
            id: id.clone(),
        };
        let done = self.in_container(&id, &name, files, take).await;
        removal.now().await;
        done
    }

    /// [`Chore::run`] once the container `id` exists.
    async fn in_container(
        &self,
        id: &str,
        name: &str,
        files: &[(&str, &[u8])],
        take: Option<(&str, u64)>,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        let docker = self.engine.docker();
        let id = id.to_string();
        if !files.is_empty() {
            let mut tar = tar::Builder::new(Vec::new());
            for (file, bytes) in files {
                let mut header = tar::Header::new_gnu();
                header.set_size(bytes.len() as u64);
                header.set_mode(0o644);
                header.set_mtime(0);
                tar.append_data(&mut header, file, *bytes)?;
            }
            let tar = tar.into_inner()?;
            docker
                .upload_to_container(
                    &id,
                    Some(UploadToContainerOptions {
                        path: DROP_DIR.into(),
                        ..Default::default()
                    }),
                    bollard::body_full(tar.into()),
                )
                .await
                .map_err(super::error::container(format!("giving {name} its files")))?;
        }
        docker
            .start_container(&id, None)
            .await
            .map_err(super::error::container(format!("starting {name}")))?;
        let code = wait_exit(docker, &id, name, CHORE_WAIT).await?;
        if code != Some(0) {
            return Err(SandboxError::Backend(format!(
                "{name} ended with {code:?}: {}",
                self.tail(&id).await
            )));
        }
        let Some((file, cap)) = take else {
            return Ok(None);
        };
        let path = format!("{DROP_DIR}/{file}");
        let mut stream =
            docker.download_from_container(&id, Some(DownloadFromContainerOptions { path }));
        let mut tar_bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(super::error::container(format!("reading {file} of {name}")))?;
            tar_bytes.extend_from_slice(&chunk);
            // The tar's headers and padding on top of the file.
            if tar_bytes.len() as u64 > cap + (1 << 20) {
                return Err(SandboxError::Backend(format!(
                    "{file} of {name} is over {cap} bytes"
                )));
            }
        }
        let mut archive = tar::Archive::new(&tar_bytes[..]);
        let mut entries = archive.entries()?;
        let mut entry = entries
            .next()
            .ok_or_else(|| SandboxError::Backend(format!("{name} made no {file}")))??;
        if entry.header().entry_type() != tar::EntryType::Regular || entry.size() > cap {
            return Err(SandboxError::Backend(format!(
                "{file} of {name} is not a regular file of at most {cap} bytes"
            )));
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// The last lines of the container's output.
    async fn tail(&self, id: &str) -> String {
        let mut logs = self.engine.docker().logs(
            id,
            Some(LogsOptions {
                stdout: true,
                stderr: true,
                tail: "20".into(),
                ..Default::default()
            }),
        );
        let mut out = String::new();
        while let Some(Ok(item)) = logs.next().await {
            out.push_str(&String::from_utf8_lossy(&item.into_bytes()));
        }
        crate::sandbox::service::proto::one_line(out.as_bytes())
    }
}

/// Creates (never starts) the container `name` of `image` running `entrypoint` as `user`
/// (the image's when `None`) with `mounts` (volumes only) and `labels`: no network, every
/// capability dropped, no new privileges, an init. What the remote backend's own containers
/// (chores, the files keeper) are made as.
pub(crate) async fn create_confined(
    engine: &Engine,
    name: &str,
    image: &str,
    entrypoint: Vec<String>,
    user: Option<&str>,
    mounts: Vec<Mount>,
    labels: HashMap<String, String>,
) -> Result<String, SandboxError> {
    let body = confined_body(image, entrypoint, user, mounts, labels);
    create_body(engine, name, body).await
}

/// The body [`create_confined`] creates.
pub(super) fn confined_body(
    image: &str,
    entrypoint: Vec<String>,
    user: Option<&str>,
    mounts: Vec<Mount>,
    labels: HashMap<String, String>,
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(entrypoint),
        cmd: Some(vec![]),
        user: user.map(str::to_string),
        working_dir: Some("/".into()),
        network_disabled: Some(true),
        labels: Some(labels),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            init: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates (never starts) the container `name` of `body`.
pub(super) async fn create_body(
    engine: &Engine,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, SandboxError> {
    let options = CreateContainerOptions {
        name: Some(name.to_string()),
        ..Default::default()
    };
    Ok(engine
        .docker()
        .create_container(Some(options), body)
        .await
        .map_err(super::error::container(format!("creating {name}")))?
        .id)
}

/// Removes a chore's container when dropped (spawned: `Drop` cannot wait).
pub(super) struct Removal {
    docker: bollard::Docker,
    id: String,
}

impl Removal {
    /// The removal of the container `id`.
    pub(super) fn new(docker: bollard::Docker, id: String) -> Removal {
        Removal { docker, id }
    }

    /// Removes the container now, waiting for it; nothing is left for `Drop`.
    pub(super) async fn now(&mut self) {
        let id = std::mem::take(&mut self.id);
        let rm = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        if let Err(e) = self.docker.remove_container(&id, Some(rm)).await {
            tracing::warn!(error = %e, id, "removing a chore's container");
        }
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        let (docker, id) = (self.docker.clone(), std::mem::take(&mut self.id));
        if id.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let rm = RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            };
            if let Err(e) = docker.remove_container(&id, Some(rm)).await {
                tracing::warn!(error = %e, id, "removing a chore's container");
            }
        });
    }
}

/// Fills the repository at `repo` (a path in the volume mounted at `mount` by `chore`) from
/// `bundle` (`isolate::bundle::write_bundle` of the workspace), its branch `branch`
/// checked out.
pub async fn fill_from_bundle(
    chore: &Chore<'_>,
    repo: &Path,
    bundle: &[u8],
    branch: &str,
) -> Result<(), SandboxError> {
    let repo = crate::sandbox::shell_quote(&repo.to_string_lossy());
    let branch = crate::sandbox::shell_quote(branch);
    let script = format!(
        "{GIT} -c init.defaultBranch=main clone -q --no-checkout {DROP_DIR}/in.bundle {repo}\n\
         {GIT} -C {repo} checkout -q -B {branch} origin/{branch}\n\
         {GIT} -C {repo} remote remove origin\n\
         rm -f {DROP_DIR}/in.bundle"
    );
    chore
        .run(&script, &[("in.bundle", bundle)], None)
        .await
        .map(|_| ())
}

/// The branch `branch` of the repository at `repo` (in a volume of `chore`) as a bundle of
/// what `base` (a commit the caller's repository has) lacks; at most `cap` bytes (the
/// taker's, `isolate::bundle::MAX_BUNDLE`). Untrusted: take it with `isolate::bundle::receive`.
pub async fn branch_bundle(
    chore: &Chore<'_>,
    repo: &Path,
    branch: &str,
    base: &str,
    cap: u64,
) -> Result<Vec<u8>, SandboxError> {
    let repo = crate::sandbox::shell_quote(&repo.to_string_lossy());
    let range = crate::sandbox::shell_quote(&format!("{base}..refs/heads/{branch}"));
    let script = format!("{GIT} -C {repo} bundle create -q {DROP_DIR}/out.bundle {range}");
    chore
        .run(&script, &[], Some(("out.bundle", cap)))
        .await?
        .ok_or_else(|| SandboxError::Backend("no bundle".into()))
}

/// Adds a worktree at `path` (in a volume of `chore`) of the repository at `repo` on a new
/// branch `branch` from `base`: a worker's place on the engine's side. Its commits land in the
/// repository's object store, where [`branch_bundle`] finds them.
pub async fn add_worktree(
    chore: &Chore<'_>,
    repo: &Path,
    path: &Path,
    branch: &str,
    base: &str,
) -> Result<(), SandboxError> {
    let q = |s: &str| crate::sandbox::shell_quote(s);
    let script = format!(
        "{GIT} -C {} worktree add -q -b {} {} {}",
        q(&repo.to_string_lossy()),
        q(branch),
        q(&path.to_string_lossy()),
        q(base)
    );
    chore.run(&script, &[], None).await.map(|_| ())
}

/// Brings the repository at `repo` (in a volume of `chore`, filled by [`fill_from_bundle`]) up
/// to `bundle` (`isolate::bundle::write_bundle` of the caller's `branch` after an
/// integration): its `branch` moves to the bundle's tip and its working tree follows, so the
/// judge and the next workers see what the caller's repository has. A bundle whose
/// prerequisites the volume lacks fails (`git fetch` checks them).
pub async fn update_from_bundle(
    chore: &Chore<'_>,
    repo: &Path,
    bundle: &[u8],
    branch: &str,
) -> Result<(), SandboxError> {
    let repo = crate::sandbox::shell_quote(&repo.to_string_lossy());
    let refname = crate::sandbox::shell_quote(&format!("refs/heads/{branch}"));
    let script = format!(
        "{GIT} -C {repo} fetch -q {DROP_DIR}/in.bundle {refname}\n\
         {GIT} -C {repo} reset -q --hard FETCH_HEAD"
    );
    // The bundle dropped in stays in the chore's own `/tmp` (root's: a chore as the run's user
    // cannot remove it there) and goes with the chore.
    chore
        .run(&script, &[("in.bundle", bundle)], None)
        .await
        .map(|_| ())
}

/// Waits up to `limit` for container `id` (`name` in errors) to end; its exit code (a non-zero
/// one comes from the engine as an error carrying it).
pub(super) async fn wait_exit(
    docker: &bollard::Docker,
    id: &str,
    name: &str,
    limit: Duration,
) -> Result<Option<i64>, SandboxError> {
    tokio::time::timeout(limit, async {
        let mut wait = docker.wait_container(id, None::<WaitContainerOptions>);
        let mut code = None;
        while let Some(item) = wait.next().await {
            match item {
                Ok(r) => code = Some(r.status_code),
                Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => {
                    code = Some(c)
                }
                Err(e) => return Err(super::error::container(format!("waiting for {name}"))(e)),
            }
        }
        Ok(code)
    })
    .await
    .map_err(|_| {
        SandboxError::Backend(format!("{name} did not end within {} s", limit.as_secs()))
    })?
}
