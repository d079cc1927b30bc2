//! One long-lived exec service per agent container (issue 17): a warm `Bash` round trip is one
//! frame each way over a connection the engine already holds, instead of two Docker execs.
//!
//! - [`server`]: the service, `flowerbox __exec-service`, inside the container.
//! - [`client`]: the host's end, one attached Docker exec per container.
//! - [`proto`]: the frames between them.
//!
//! How the binary gets in: [`ServiceBinary::prepare`] copies a flowerbox binary (the running
//! one, read through `/proc/self/exe`, or the one [`crate::sandbox::docker::DockerOptions`]
//! names) into a private directory of the host (mode 0700, never inside a mount), and each
//! agent container bind-mounts that copy read-only at [`SERVICE_PATH`]. The engine is given
//! only that private path, so no container can swap what gets mounted (a link to the engine's
//! socket, say). The service runs as the agent's engine user behind the container's exec
//! prefix (a judge's `setpriv` to its own uid and one capability): it can do nothing the
//! agent's commands cannot, and no credential passes through it.
//!
//! When the service cannot start (an image whose C library cannot run the binary, an engine
//! without attach) or dies, commands fall back to a Docker exec each
//! ([`crate::sandbox::docker::exec`]); a command in flight when it died is a tool error.

pub(crate) mod client;
pub mod proto;
pub mod server;

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub use server::serve;

use crate::sandbox::SandboxError;

/// The hidden subcommand that runs the service (`flowerbox __exec-service`).
pub const SUBCOMMAND: &str = "__exec-service";

/// Where the binary is mounted in every agent container.
pub const SERVICE_PATH: &str = "/usr/local/libexec/flowerbox/exec-service";

/// Service starts per container (the first and two restarts after deaths); after that, or
/// once a service broke the protocol or stopped answering, a Docker exec per command.
const MAX_STARTS: u32 = 3;

/// Where the binary to copy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceSource {
    /// The running binary (`/proc/self/exe`): flowerbox itself.
    CurrentExe,
    /// A flowerbox binary at this host path (tests and examples, whose own binary is not).
    Path(PathBuf),
}

impl ServiceSource {
    /// The running binary when it is flowerbox; else a `flowerbox` beside it or one directory
    /// up (Cargo's `target/<profile>/` for tests in `deps/` and `examples/`); else none.
    pub fn discover() -> Option<ServiceSource> {
        let exe = std::env::current_exe().ok()?;
        if exe.file_name()? == "flowerbox" {
            return Some(ServiceSource::CurrentExe);
        }
        let dir = exe.parent()?;
        [dir.join("flowerbox"), dir.parent()?.join("flowerbox")]
            .into_iter()
            .find(|p| p.is_file())
            .map(ServiceSource::Path)
    }
}

/// The private copy of the service binary for one run; removed when dropped.
#[derive(Debug)]
pub struct ServiceBinary {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl ServiceBinary {
    /// Copies `source` into a new private directory (blocking I/O: call it off the runtime).
    /// Only a regular file is copied.
    pub fn prepare(source: &ServiceSource) -> Result<ServiceBinary, SandboxError> {
        let from = match source {
            ServiceSource::CurrentExe => PathBuf::from("/proc/self/exe"),
            ServiceSource::Path(p) => p.clone(),
        };
        let mut src = std::fs::File::open(&from)?;
        if !src.metadata()?.is_file() {
            return Err(SandboxError::Docker(format!(
                "{} is not a regular file",
                from.display()
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("flowerbox-exec-")
            .tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let path = dir.path().join("exec-service");
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            dst.write_all(&buf[..n])?;
        }
        dst.sync_data()?;
        Ok(ServiceBinary { dir, path })
    }

    /// The copy's host path (to bind-mount).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the copy lies inside `mount` (then it is not mounted: an agent could change it).
    pub fn inside(&self, mount: &Path) -> bool {
        self.dir.path().starts_with(mount)
    }
}

/// Adds the read-only bind mount of the binary's private copy `binary` at [`SERVICE_PATH`].
pub(crate) fn mount(body: &mut bollard::models::ContainerCreateBody, binary: &Path) {
    let hc = body.host_config.get_or_insert_with(Default::default);
    hc.mounts
        .get_or_insert_with(Vec::new)
        .push(bollard::models::Mount {
            target: Some(SERVICE_PATH.into()),
            source: Some(binary.to_string_lossy().into_owned()),
            typ: Some(bollard::models::MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
}

/// Why a container has no service to give a command: then it is a Docker exec.
#[derive(Debug)]
pub(crate) enum NoService {
    /// None any more: its starts are used up, or it broke earlier (said then).
    Off,
    /// This start failed.
    Failed(client::StartError),
    /// It broke the protocol or stopped answering (said now, once): none from now on.
    Broke(String),
}

/// One container's service: started on first need, restarted after a death at most
/// [`MAX_STARTS`] times in all.
#[derive(Default)]
pub(crate) struct ServiceSlot {
    current: tokio::sync::Mutex<Option<client::Service>>,
    starts: AtomicU32,
    /// Why the last start failed, or why it broke: what `doctor` and the notices say.
    why_off: std::sync::Mutex<Option<String>>,
}

impl ServiceSlot {
    /// The live service, starting one when there is none (yet, or any more); otherwise why
    /// not (then a Docker exec per command).
    pub async fn get(
        &self,
        docker: &bollard::Docker,
        container: &str,
        user: &str,
        argv: Vec<String>,
    ) -> Result<client::Service, NoService> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref() {
            if s.alive() {
                return Ok(s.clone());
            }
            if s.broken() {
                // Garbage or silence once: a Docker exec per command from now on.
                self.starts.store(MAX_STARTS, Ordering::SeqCst);
                let why = s.why();
                *self.why_note() = Some(why.clone());
                *current = None;
                return Err(NoService::Broke(why));
            }
        }
        *current = None;
        if self.starts.fetch_add(1, Ordering::SeqCst) >= MAX_STARTS {
            return Err(NoService::Off);
        }
        match client::Service::start(docker, container, user, argv).await {
            Ok(s) => {
                *current = Some(s.clone());
                Ok(s)
            }
            Err(e) => {
                tracing::info!(%container, error = %e, "exec service did not start");
                *self.why_note() = Some(e.to_string());
                Err(NoService::Failed(e))
            }
        }
    }

    /// Lets the service go (its container goes): the connection is closed.
    pub async fn close(&self) {
        self.starts.store(MAX_STARTS, Ordering::SeqCst);
        if let Some(s) = self.current.lock().await.take() {
            s.close();
        }
    }

    /// Why there is no service (the last failure), for messages.
    pub fn why_off(&self) -> String {
        self.why_note()
            .clone()
            .unwrap_or_else(|| "the exec service is not running".into())
    }

    fn why_note(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.why_off.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_is_private_and_refuses_what_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let copy = ServiceBinary::prepare(&ServiceSource::Path(src.clone())).unwrap();
        assert_eq!(std::fs::read(copy.path()).unwrap(), b"\x7fELF binary");
        let mode = std::fs::metadata(copy.path().parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!copy.inside(dir.path()));
        assert!(copy.inside(Path::new("/")));
        assert!(ServiceBinary::prepare(&ServiceSource::Path(dir.path().to_path_buf())).is_err());
        let gone = copy.path().parent().unwrap().to_path_buf();
        drop(copy);
        assert!(!gone.exists());
    }
}
