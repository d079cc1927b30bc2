//! A unix-socket forwarder in front of the engine, for tests that cut the engine away from a
//! run (issue 26 §2): point `DOCKER_HOST` (or `DockerOptions::docker_host`) at
//! [`EngineProxy::host`]; [`EngineProxy::cut`] closes every connection and the socket (the
//! engine is unreachable, as when it stops), [`EngineProxy::restore`] listens again. It runs
//! on a thread of its own with its own runtime, so plain and async tests can use it.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// The forwarder; stops (and removes its socket) when dropped.
pub struct EngineProxy {
    /// `unix://<socket>`.
    pub host: String,
    socket: PathBuf,
    open: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl EngineProxy {
    /// Forwards a new socket to the engine's socket `target`; listening when this returns.
    pub fn start(target: &Path) -> EngineProxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("engine.sock");
        let (open, rx) = watch::channel(true);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (sock, target) = (socket.clone(), target.to_path_buf());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(serve(sock, target, rx, ready_tx));
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("proxy listening");
        EngineProxy {
            host: format!("unix://{}", socket.display()),
            socket,
            open,
            _dir: dir,
        }
    }

    /// The engine goes away: every connection closed, the socket gone.
    pub fn cut(&self) {
        self.open.send_replace(false);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.socket.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!self.socket.exists(), "the proxy's socket stayed");
    }

    /// The engine is back: the socket listens again.
    pub fn restore(&self) {
        self.open.send_replace(true);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.socket.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(self.socket.exists(), "the proxy did not listen again");
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.open.send_replace(false);
    }
}

async fn serve(
    socket: PathBuf,
    target: PathBuf,
    mut open: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<()>,
) {
    loop {
        if !*open.borrow_and_update() {
            if open.changed().await.is_err() {
                return;
            }
            continue;
        }
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).expect("bind the proxy socket");
        let _ = ready.send(());
        loop {
            tokio::select! {
                changed = open.changed() => {
                    if changed.is_err() || !*open.borrow() {
                        break;
                    }
                }
                conn = listener.accept() => {
                    let Ok((client, _)) = conn else { continue };
                    let (target, mut open) = (target.clone(), open.clone());
                    tokio::spawn(async move {
                        let Ok(mut engine) = UnixStream::connect(&target).await else { return };
                        let mut client = client;
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut engine) => {}
                            _ = open.wait_for(|o| !*o) => {}
                        }
                    });
                }
            }
        }
        drop(listener);
        let _ = std::fs::remove_file(&socket);
        if open.has_changed().is_err() {
            return;
        }
    }
}
