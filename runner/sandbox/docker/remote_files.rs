//! File operations inside a container, for an engine that does not see the caller's disk
//! (issue 30 §2): the exec service's binary goes into the container through the engine's
//! archive API (no bind mount of a host path), and each operation of
//! [`crate::sandbox::files::wire`] is one request on the service's attached stream, done there
//! by the same race-free code the local backend runs.
//!
//! The service answering is untrusted like every exec service: its replies are bounded
//! ([`wire::MAX_BODY`]), checked against the call by [`wire::RemoteFiles`], and a service that
//! does not answer within [`CALL_WAIT`] fails the operation.

use bollard::query_parameters::UploadToContainerOptions;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::service::client::{Event, Service};
use super::service::{ServiceSource, SERVICE_PATH, SUBCOMMAND};
use super::Engine;
use crate::sandbox::files::wire::{self, Call, FilesTransport, RemoteFiles, Reply};
use crate::sandbox::files::FilesError;
use crate::sandbox::{SandboxError, SandboxFiles};

/// Longest one file operation may take, from the call to its reply (a large tree's identity
/// included).
pub const CALL_WAIT: Duration = Duration::from_secs(300);

/// Copies the exec service's binary (`source`) into the created container `container` at
/// [`SERVICE_PATH`] through the engine's archive API: owned by root, mode 0755, in directories
/// of root's. Call before the container starts.
pub async fn install_service(
    engine: &Engine,
    container: &str,
    source: &ServiceSource,
) -> Result<(), SandboxError> {
    let from = match source {
        ServiceSource::CurrentExe => Path::new("/proc/self/exe").to_path_buf(),
        ServiceSource::Path(p) => p.clone(),
    };
    let archive = tokio::task::spawn_blocking(move || service_archive(&from))
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))??;
    // Below `/usr/local`, which every image has: the directories on the way are the archive's.
    engine
        .docker()
        .upload_to_container(
            container,
            Some(UploadToContainerOptions {
                path: "/usr/local".into(),
                ..Default::default()
            }),
            bollard::body_full(archive.into()),
        )
        .await
        .map_err(super::error::container(format!(
            "copying the exec service into {container}"
        )))
}

/// The tar of [`SERVICE_PATH`] relative to `/usr/local`, the binary read from `from` (a
/// regular file only).
fn service_archive(from: &Path) -> Result<Vec<u8>, SandboxError> {
    let rel = SERVICE_PATH
        .strip_prefix("/usr/local/")
        .ok_or_else(|| SandboxError::Backend(format!("{SERVICE_PATH} is not below /usr/local")))?;
    let mut src = std::fs::File::open(from)?;
    let meta = src.metadata()?;
    if !meta.is_file() {
        return Err(SandboxError::Backend(format!(
            "{} is not a regular file",
            from.display()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    src.read_to_end(&mut bytes)?;
    let mut tar = tar::Builder::new(Vec::new());
    let parts: Vec<&str> = rel.split('/').collect();
    for i in 1..parts.len() {
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_size(0);
        dir.set_mode(0o755);
        dir.set_uid(0);
        dir.set_gid(0);
        dir.set_mtime(0);
        tar.append_data(
            &mut dir,
            format!("{}/", parts[..i].join("/")),
            std::io::empty(),
        )?;
    }
    let mut file = tar::Header::new_gnu();
    file.set_size(bytes.len() as u64);
    file.set_mode(0o755);
    file.set_uid(0);
    file.set_gid(0);
    file.set_mtime(0);
    tar.append_data(&mut file, rel, &bytes[..])?;
    Ok(tar.into_inner()?)
}

/// Starts the exec service in the running `container` as `user` (its binary installed by
/// [`install_service`] or mounted) and returns the file operations done through it.
pub async fn files_in(
    engine: &Engine,
    container: &str,
    user: &str,
) -> Result<Arc<dyn SandboxFiles>, SandboxError> {
    let transport = ServiceTransport {
        docker: engine.docker().clone(),
        container: container.to_string(),
        user: user.to_string(),
        service: tokio::sync::Mutex::new(None),
        starts: std::sync::atomic::AtomicU32::new(0),
    };
    transport
        .live()
        .await
        .map_err(|e| SandboxError::Backend(e.to_string()))?;
    Ok(Arc::new(RemoteFiles::new(transport)))
}

/// Service starts per transport: the first and two after deaths.
const MAX_STARTS: u32 = 3;

/// [`FilesTransport`] over one container's exec service, started again for the next call
/// when it went (killed, the connection cut), at most [`MAX_STARTS`] times in all; a call in
/// flight then fails.
struct ServiceTransport {
    docker: bollard::Docker,
    container: String,
    user: String,
    service: tokio::sync::Mutex<Option<Service>>,
    starts: std::sync::atomic::AtomicU32,
}

impl ServiceTransport {
    /// The live service, started when there is none.
    async fn live(&self) -> Result<Service, FilesError> {
        let mut current = self.service.lock().await;
        if let Some(s) = current.as_ref().filter(|s| s.alive()) {
            return Ok(s.clone());
        }
        let starts = self
            .starts
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if starts >= MAX_STARTS {
            return Err(FilesError::Failed(format!(
                "the exec service in {} went {MAX_STARTS} times",
                self.container
            )));
        }
        let argv = vec![SERVICE_PATH.to_string(), SUBCOMMAND.to_string()];
        let started = Service::start(&self.docker, &self.container, &self.user, argv, None)
            .await
            .map_err(|e| {
                FilesError::Failed(format!(
                    "the exec service in {} did not start: {e}",
                    self.container
                ))
            })?;
        *current = Some(started.clone());
        Ok(started)
    }
}

#[async_trait::async_trait]
impl FilesTransport for ServiceTransport {
    async fn call(&self, call: &Call, input: Vec<u8>) -> Result<(Reply, Vec<u8>), FilesError> {
        let service = self.live().await?;
        let gone = || FilesError::Failed(service.why());
        let payload =
            serde_json::to_vec(call).map_err(|e| FilesError::Failed(format!("the call: {e}")))?;
        let mut request = service.request().ok_or_else(gone)?;
        if !request.files(&payload, &input).await {
            return Err(gone());
        }
        let mut body = Vec::new();
        let reply = tokio::time::timeout(CALL_WAIT, async {
            loop {
                match request.next().await {
                    Some(Event::Data(bytes)) => {
                        if body.len() + bytes.len() > wire::MAX_BODY {
                            return Err(FilesError::Failed(format!(
                                "the exec service sent more than {} bytes",
                                wire::MAX_BODY
                            )));
                        }
                        body.extend_from_slice(&bytes);
                    }
                    Some(Event::Done(reply)) => {
                        return serde_json::from_slice::<Reply>(&reply).map_err(|e| {
                            FilesError::Failed(format!("the exec service's reply: {e}"))
                        })
                    }
                    Some(_) => {}
                    None => return Err(gone()),
                }
            }
        })
        .await
        .map_err(|_| {
            FilesError::Failed(format!(
                "the exec service did not answer within {} s",
                CALL_WAIT.as_secs()
            ))
        })??;
        Ok((reply, body))
    }
}

/// A container of the run that mounts the run's volumes and answers file operations for the
/// host: its writes into the workbench (notes, the brief, the goal) and the judge's content
/// identity, which must not be computed beside an agent's processes. No agent runs in it and
/// none shares its namespaces; it has no network and no capability, and its service runs as
/// `user`.
pub struct FilesKeeper {
    id: String,
    files: Arc<dyn SandboxFiles>,
}

impl FilesKeeper {
    /// The keeper's container id.
    pub fn container(&self) -> &str {
        &self.id
    }

    /// Creates and starts the keeper `name` of `image` with `mounts` (volumes only) and
    /// `labels` (the run's, so `gc` knows it), its service installed from `source`.
    pub async fn start(
        engine: &Engine,
        image: &str,
        name: &str,
        source: &ServiceSource,
        mounts: Vec<bollard::models::Mount>,
        labels: std::collections::HashMap<String, String>,
        user: &str,
    ) -> Result<FilesKeeper, SandboxError> {
        let docker = engine.docker();
        let entrypoint = vec!["sleep".into(), "infinity".into()];
        let id =
            super::volumes::create_confined(engine, name, image, entrypoint, None, mounts, labels)
                .await?;
        let started = async {
            install_service(engine, &id, source).await?;
            docker
                .start_container(&id, None)
                .await
                .map_err(super::error::container(format!("starting {name}")))?;
            files_in(engine, &id, user).await
        };
        match started.await {
            Ok(files) => Ok(FilesKeeper { id, files }),
            Err(e) => {
                remove_container(engine, &id).await;
                Err(e)
            }
        }
    }

    /// The file operations done in the keeper.
    pub fn files(&self) -> Arc<dyn SandboxFiles> {
        self.files.clone()
    }

    /// Removes the keeper (its service's connection ends with it).
    pub async fn stop(self, engine: &Engine) {
        remove_container(engine, &self.id).await;
    }
}

async fn remove_container(engine: &Engine, id: &str) {
    let rm = bollard::query_parameters::RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = engine.docker().remove_container(id, Some(rm)).await {
        tracing::warn!(error = %e, id, "removing the files keeper");
    }
}
