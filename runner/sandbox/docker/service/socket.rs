//! The host's socket for one container's exec service (issue 32; what is agreed with the
//! service: [`crate::sandbox::service::channel`]).
//!
//! The host listens; the container connects. The socket lives in the run's private directory
//! beside the service binary's copy (mode 0700, never inside an agent's mount, swept with the
//! copy after a killed run), mode 0666 so whatever uid the container's processes have (a
//! judge's `setpriv`, rootless Podman's mapped ids) can connect through the read-only bind
//! mount at [`SOCKET_PATH`]; nobody else on the host can reach it.
//!
//! A connection is taken only while a service start waits for it ([`HostSocket::expect`]), and
//! only when its first bytes are that start's token's opening within [`FIRST_BYTES`]; every
//! other connection is closed. At most [`HANDSHAKES`] openings are read at once (more are
//! closed at once), and after [`MAX_REFUSED`] refused connections the socket stops listening
//! for good (the services then keep to the attached streams): an agent flooding it costs the
//! host little and gains nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;
use tokio::sync::{oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::sandbox::docker::lock;
pub(crate) use crate::sandbox::service::channel::SOCKET_PATH;
use crate::sandbox::service::channel::{Token, OPENING_LEN};

/// How long a connection gets to present its opening.
const FIRST_BYTES: Duration = Duration::from_secs(2);
/// Openings read at once.
const HANDSHAKES: usize = 4;
/// Refused connections after which the socket stops listening.
const MAX_REFUSED: u32 = 256;

/// A start waiting for its service's connection.
struct Waiting {
    token: Token,
    tx: oneshot::Sender<UnixStream>,
}

/// What the accepting task and the starts share.
struct State {
    waiting: Mutex<Option<Waiting>>,
    refused: AtomicU32,
    /// Still listening, and no switch to it failed.
    usable: AtomicBool,
    handshakes: Arc<Semaphore>,
}

impl State {
    fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }
}

/// One container's listening socket; dropping it stops listening and removes the file.
pub(crate) struct HostSocket {
    path: PathBuf,
    state: Arc<State>,
    stop: CancellationToken,
}

impl std::fmt::Debug for HostSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSocket")
            .field("path", &self.path)
            .finish()
    }
}

impl HostSocket {
    /// Listens on a new socket in `dir` (the run's private directory). On the runtime.
    pub(crate) fn bind(dir: &Path) -> std::io::Result<HostSocket> {
        let name: u64 = rand::random();
        let path = dir.join(format!("s-{name:016x}"));
        let listener = std::os::unix::net::UnixListener::bind(&path)?;
        let ready = (|| {
            // The directory is private: nobody can swap the path between bind and chmod.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
            listener.set_nonblocking(true)?;
            tokio::net::UnixListener::from_std(listener)
        })();
        let listener = match ready {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let state = Arc::new(State {
            waiting: Mutex::new(None),
            refused: AtomicU32::new(0),
            usable: AtomicBool::new(true),
            handshakes: Arc::new(Semaphore::new(HANDSHAKES)),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, state.clone(), stop.clone()));
        Ok(HostSocket { path, state, stop })
    }

    /// The socket's host path (to bind-mount).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a start should offer it.
    pub(crate) fn usable(&self) -> bool {
        self.state.usable.load(Ordering::SeqCst)
    }

    /// A switch to it failed: the next starts keep to the attached streams.
    pub(crate) fn give_up(&self) {
        self.state.usable.store(false, Ordering::SeqCst);
        lock(&self.state.waiting).take();
    }

    /// Connections refused so far.
    #[cfg(test)]
    pub(crate) fn refused(&self) -> u32 {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// Waits for the connection that opens with `token` (one; a later start's `expect`
    /// replaces this one).
    pub(crate) fn expect(&self, token: Token) -> oneshot::Receiver<UnixStream> {
        let (tx, rx) = oneshot::channel();
        *lock(&self.state.waiting) = Some(Waiting { token, tx });
        rx
    }
}

impl Drop for HostSocket {
    fn drop(&mut self) {
        self.stop.cancel();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accepts connections until stopped, [`MAX_REFUSED`] were refused or accepting fails; then
/// the listener closes (a connect is refused by the kernel from then on).
async fn accept(listener: tokio::net::UnixListener, state: Arc<State>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => break,
            got = listener.accept() => match got {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::info!(error = %e, "exec service socket: accepting failed");
                    break;
                }
            },
        };
        let token = lock(&state.waiting).as_ref().map(|w| w.token.clone());
        let permit = state.handshakes.clone().try_acquire_owned();
        match (token, permit) {
            (Some(token), Ok(permit)) => {
                tokio::spawn(handshake(stream, token, state.clone(), permit));
            }
            // Nobody waits, or too many openings are being read: closed at once.
            _ => state.refuse(),
        }
        if state.refused.load(Ordering::SeqCst) >= MAX_REFUSED {
            tracing::info!("exec service socket: too many refused connections, closed");
            break;
        }
    }
    state.usable.store(false, Ordering::SeqCst);
}

/// Reads one connection's opening; hands it to the waiting start when it is `token`'s.
async fn handshake(
    mut stream: UnixStream,
    token: Token,
    state: Arc<State>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let mut first = [0u8; OPENING_LEN];
    let read = tokio::time::timeout(FIRST_BYTES, stream.read_exact(&mut first)).await;
    if matches!(read, Ok(Ok(_))) && token.opens(&first) {
        let mut waiting = lock(&state.waiting);
        if waiting.as_ref().is_some_and(|w| w.token == token) {
            if let Some(w) = waiting.take() {
                let _ = w.tx.send(stream);
                return;
            }
        }
    }
    state.refuse();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn connect(path: &Path, first: &[u8]) -> UnixStream {
        let mut s = UnixStream::connect(path).await.unwrap();
        s.write_all(first).await.unwrap();
        s
    }

    /// Reads until the host closes the connection: `true` when it did.
    async fn closed(mut s: UnixStream) -> bool {
        let mut b = [0u8; 1];
        matches!(s.read(&mut b).await, Ok(0) | Err(_))
    }

    #[tokio::test]
    async fn only_the_waiting_tokens_opening_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let sock = HostSocket::bind(dir.path()).unwrap();
        let mode = std::fs::metadata(sock.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o666);
        // Nobody waits: refused.
        let early = connect(sock.path(), &Token::random().opening()).await;
        assert!(closed(early).await);
        let token = Token::random();
        let mut rx = sock.expect(token.clone());
        // A wrong token, garbage, a short opening that stops: all refused.
        assert!(closed(connect(sock.path(), &Token::random().opening()).await).await);
        assert!(
            closed(
                connect(
                    sock.path(),
                    b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxx"
                )
                .await
            )
            .await
        );
        assert!(rx.try_recv().is_err());
        // The right one: handed over, and the token is used up.
        let _ours = connect(sock.path(), &token.opening()).await;
        let taken = rx.await.unwrap();
        drop(taken);
        assert!(closed(connect(sock.path(), &token.opening()).await).await);
        assert!(sock.refused() >= 4, "{}", sock.refused());
        assert!(sock.usable());
        let path = sock.path().to_path_buf();
        drop(sock);
        assert!(!path.exists(), "dropping it removes the socket");
    }

    /// A remote engine (`--sandbox docker-remote`) would mount a path of its own disk: its
    /// services keep to the attach; a local engine's get the socket.
    #[test]
    fn only_an_engine_on_this_machines_disk_gets_the_socket() {
        let mut opts = crate::sandbox::docker::DockerOptions::new("r", "/tmp");
        assert!(opts.frames_over_socket());
        opts.remote = true;
        assert!(!opts.frames_over_socket());
    }

    #[tokio::test]
    async fn a_flood_closes_the_socket_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let sock = HostSocket::bind(dir.path()).unwrap();
        for _ in 0..MAX_REFUSED {
            match UnixStream::connect(sock.path()).await {
                Ok(s) => {
                    let _ = closed(s).await;
                }
                Err(_) => break,
            }
        }
        // The accepting task notices the last one a moment later.
        for _ in 0..200 {
            if !sock.usable() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!sock.usable());
        assert!(UnixStream::connect(sock.path()).await.is_err());
    }

    #[tokio::test]
    async fn a_silent_connection_holds_nothing_for_long() {
        let dir = tempfile::tempdir().unwrap();
        let sock = HostSocket::bind(dir.path()).unwrap();
        let token = Token::random();
        let rx = sock.expect(token.clone());
        // More silent connections than openings read at once: the real one still gets in
        // once they time out.
        let mut silent = Vec::new();
        for _ in 0..HANDSHAKES {
            silent.push(UnixStream::connect(sock.path()).await.unwrap());
        }
        // (No clock read: the real one is tried again until the silent ones are let go.)
        let mut rx = rx;
        let mut tries = 0;
        loop {
            let _ours = connect(sock.path(), &token.opening()).await;
            if let Ok(got) = tokio::time::timeout(Duration::from_millis(500), &mut rx).await {
                assert!(got.is_ok());
                break;
            }
            tries += 1;
            assert!(tries < 120, "the real connection never got in");
        }
        for s in silent {
            assert!(closed(s).await);
        }
    }
}
