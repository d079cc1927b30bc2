//! The Docker end of the exec service ([`crate::sandbox::service`]): one attached Docker exec
//! per agent container, or on a local Docker engine the container's own attach, the service
//! starting beside its main process ([`start_with_main`]) ([`client`]), the read-only bind mount of the binary's private copy,
//! on a local engine the host's socket the frames then take ([`socket`], mounted read-only
//! too), and each container's [`ServiceSlot`].
//!
//! When the service cannot start (an image whose C library cannot run the binary, an engine
//! without attach) or dies, commands fall back to a Docker exec each
//! ([`crate::sandbox::docker::exec`]); a command in flight when it died is a tool error.

pub(crate) mod client;
pub(crate) mod socket;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::sandbox::docker::lock;

pub(crate) use crate::sandbox::service::{ServiceBinary, ServiceSource, SERVICE_PATH, SUBCOMMAND};
pub(crate) use client::Channel;
pub(crate) use socket::{HostSocket, SOCKET_PATH};

/// Service starts per container (the first and two restarts after deaths); after that, or
/// once a service broke the protocol or stopped answering, a Docker exec per command.
const MAX_STARTS: u32 = 3;

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

/// Adds the read-only bind mount of the container's socket `socket` at [`SOCKET_PATH`]
/// (`connect` needs no write access to the mount).
pub(crate) fn mount_socket(body: &mut bollard::models::ContainerCreateBody, socket: &Path) {
    let hc = body.host_config.get_or_insert_with(Default::default);
    hc.mounts
        .get_or_insert_with(Vec::new)
        .push(bollard::models::Mount {
            target: Some(SOCKET_PATH.into()),
            source: Some(socket.to_string_lossy().into_owned()),
            typ: Some(bollard::models::MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
}

/// Makes the container's main process start the service `argv` beside `sleep`
/// ([`client::MAIN_SCRIPT`]), on the container's stdin, stdout and stderr (attached by the host
/// before the start, [`client::attach_main`]). Stdin closes when the host's attach does
/// (which ends the service, as an exec's does); no log driver keeps what the service writes
/// (its frames before the socket, its stderr).
pub(crate) fn start_with_main(body: &mut bollard::models::ContainerCreateBody, argv: Vec<String>) {
    let mut entrypoint = vec![
        "sh".to_string(),
        "-c".into(),
        client::MAIN_SCRIPT.into(),
        "fbx-main".into(),
    ];
    entrypoint.extend(argv);
    body.entrypoint = Some(entrypoint);
    body.cmd = Some(Vec::new());
    body.open_stdin = Some(true);
    body.stdin_once = Some(true);
    body.attach_stdin = Some(true);
    body.attach_stdout = Some(true);
    body.attach_stderr = Some(true);
    body.tty = Some(false);
    let hc = body.host_config.get_or_insert_with(Default::default);
    hc.log_config = Some(bollard::models::HostConfigLogConfig {
        typ: Some("none".into()),
        config: None,
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
    /// The container's socket on a local engine (each start offers it while it is usable);
    /// let go, and its file removed, when the container goes.
    socket: std::sync::Mutex<Option<Arc<HostSocket>>>,
    /// Why the last start failed, or why it broke: what `doctor` and the notices say.
    why_off: std::sync::Mutex<Option<String>>,
    /// The service that started with the container, attached and not yet greeted: the
    /// first start's, instead of an exec.
    first: std::sync::Mutex<Option<client::Attached>>,
}

impl ServiceSlot {
    /// A slot whose starts offer `socket`; its first start greets `first`, the service that
    /// started with the container, when there is one.
    pub(crate) fn with_socket(
        socket: Option<HostSocket>,
        first: Option<client::Attached>,
    ) -> ServiceSlot {
        ServiceSlot {
            socket: std::sync::Mutex::new(socket.map(Arc::new)),
            first: std::sync::Mutex::new(first),
            ..Default::default()
        }
    }

    /// The live service, starting one when there is none (yet, or any more); otherwise why
    /// not (then a Docker exec per command).
    pub(crate) async fn get(
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
        let socket = lock(&self.socket).clone();
        let first = lock(&self.first).take();
        let started = match first {
            Some(attached) => {
                match client::Service::handshake(container, attached, socket.as_deref()).await {
                    // It keeps to the attach, where its death would go unseen (dropped, its
                    // stdin closes and it ends): this start is an exec's after all.
                    Err(client::StartError::Attach) => {
                        tracing::info!(%container, "exec service: the container's own keeps to the attach; an exec's instead");
                        client::Service::start(docker, container, user, argv, socket.as_deref())
                            .await
                    }
                    other => other,
                }
            }
            None => client::Service::start(docker, container, user, argv, socket.as_deref()).await,
        };
        match started {
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

    /// The service if one runs now (none is started).
    pub(crate) async fn live(&self) -> Option<client::Service> {
        self.current
            .lock()
            .await
            .as_ref()
            .filter(|s| s.alive())
            .cloned()
    }

    /// Lets the service go (its container goes): the connection is closed.
    pub(crate) async fn close(&self) {
        self.starts.store(MAX_STARTS, Ordering::SeqCst);
        if let Some(s) = self.current.lock().await.take() {
            s.close();
        }
        lock(&self.first).take();
        lock(&self.socket).take();
    }

    /// Why there is no service (the last failure), for messages.
    pub(crate) fn why_off(&self) -> String {
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

    /// The main process runs the service's argv after the script, on an open stdin closed with
    /// the host's attach, no terminal, and no log kept.
    #[test]
    fn a_service_beside_the_main_process_gets_its_streams_and_no_log() {
        let mut body = bollard::models::ContainerCreateBody::default();
        start_with_main(&mut body, vec![SERVICE_PATH.into(), SUBCOMMAND.into()]);
        let entry = body.entrypoint.unwrap();
        assert_eq!(entry[..2], ["sh", "-c"]);
        assert_eq!(entry[3], "fbx-main");
        assert_eq!(entry[4..], [SERVICE_PATH, SUBCOMMAND]);
        assert_eq!(body.cmd, Some(Vec::new()));
        assert_eq!(
            (body.open_stdin, body.stdin_once, body.tty),
            (Some(true), Some(true), Some(false))
        );
        let log = body.host_config.unwrap().log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("none"));
    }

    /// `sh` gives the service the attached stdin (not `/dev/null`, an asynchronous list's
    /// default) and keeps none of its streams in `sleep`.
    #[test]
    fn the_main_script_hands_stdin_to_the_service_only() {
        let script = client::MAIN_SCRIPT.replace("exec sleep infinity", "exec true");
        let out = std::process::Command::new("sh")
            .args(["-c", &script, "fbx-main", "sh", "-c", "read x; echo got $x"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(b"hello\n")?;
                }
                child.wait_with_output()
            })
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "got hello\n");
    }
}
