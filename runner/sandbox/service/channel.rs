//! The exec service's frames over a Unix socket (issue 32): what the host and the service
//! agree on.
//!
//! On a local engine the attached exec's streams go host → dockerd → containerd-shim → FIFO →
//! service and back, which cost most of a command's round trip. There the host listens on a
//! socket of its own, in the run's private directory (never inside a mount), bind-mounted
//! read-only at [`SOCKET_PATH`] into that one container; the service connects to it. The host
//! never connects to anything in the container.
//!
//! Who may become the channel: the agent's commands run as the service's uid and can connect
//! too, so the socket alone proves nothing. The host writes a random one-use [`Token`] over
//! the attached exec's stdin ([`super::proto::Kind::Channel`]), which no agent process can
//! read (the service is non-dumpable: `/proc/<pid>/fd/0` cannot be opened by them); the
//! service opens the socket with [`Token::opening`], and the host takes the first connection
//! that presents it ([`Token::opens`], in constant time) and closes every other. The service
//! in turn only talks to a listener outside its PID namespace (the peer's pid reads as 0
//! there), so a socket an agent put in its place (should it ever manage to) learns nothing.

use thiserror::Error;

/// Where the host's socket is mounted in every agent container (local engines only).
pub const SOCKET_PATH: &str = "/usr/local/libexec/flowerbox/exec.sock";

/// Bytes of a token.
pub const TOKEN_LEN: usize = 32;

/// What the service writes first on the socket, before the token. The NUL first, like the
/// preamble's.
pub const OPENING_MAGIC: [u8; 8] = *b"\0FBXSOCK";

/// Bytes of a connection's opening: [`OPENING_MAGIC`] then the token.
pub const OPENING_LEN: usize = OPENING_MAGIC.len() + TOKEN_LEN;

/// A one-use secret that lets one service start take the socket. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Token([u8; TOKEN_LEN]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// A [`super::proto::Kind::Channel`] payload that is no token.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChannelError {
    /// Not [`TOKEN_LEN`] bytes.
    #[error("a socket token of {0} bytes (expected {TOKEN_LEN})")]
    TokenLength(usize),
}

impl Token {
    /// A fresh token from the thread's cryptographically secure generator.
    pub fn random() -> Token {
        Token(rand::random())
    }

    /// The token a [`super::proto::Kind::Channel`] frame carries.
    pub fn from_payload(payload: &[u8]) -> Result<Token, ChannelError> {
        payload
            .try_into()
            .map(Token)
            .map_err(|_| ChannelError::TokenLength(payload.len()))
    }

    /// The frame payload that carries it.
    pub fn payload(&self) -> &[u8] {
        &self.0
    }

    /// What the service writes first on the socket.
    pub fn opening(&self) -> [u8; OPENING_LEN] {
        let mut out = [0u8; OPENING_LEN];
        out[..OPENING_MAGIC.len()].copy_from_slice(&OPENING_MAGIC);
        out[OPENING_MAGIC.len()..].copy_from_slice(&self.0);
        out
    }

    /// Whether `first`, a connection's first bytes, is this token's opening. Every byte is
    /// compared whatever the earlier ones were, so the time taken tells nothing of the token.
    pub fn opens(&self, first: &[u8]) -> bool {
        if first.len() != OPENING_LEN {
            return false;
        }
        let want = self.opening();
        want.iter()
            .zip(first)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
    }
}

/// Whether a socket is mounted at [`SOCKET_PATH`] (the service's side: its hello says so).
pub fn mounted() -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(SOCKET_PATH).is_ok_and(|m| m.file_type().is_socket())
}

/// Why the service did not take the socket (it stays on its stdin and stdout).
#[derive(Debug, Error)]
pub enum ConnectError {
    /// `connect` failed.
    #[error("connecting to {SOCKET_PATH}: {0}")]
    Connect(#[source] std::io::Error),
    /// The peer's credentials could not be read.
    #[error("reading the socket's peer: {0}")]
    Peer(#[source] nix::Error),
    /// The listener is a process of the container's own PID namespace: not the host's.
    #[error("the socket's listener is pid {0} of this container, not the host")]
    Inside(i32),
    /// Writing the opening failed.
    #[error("writing to {SOCKET_PATH}: {0}")]
    Write(#[source] std::io::Error),
}

/// The service's side: connects to [`SOCKET_PATH`], checks the listener is outside the
/// service's PID namespace (the host), and writes `token`'s opening. Blocking.
pub fn connect(token: &Token) -> Result<std::os::unix::net::UnixStream, ConnectError> {
    connect_at(std::path::Path::new(SOCKET_PATH), token)
}

/// [`connect`] to `path`.
fn connect_at(
    path: &std::path::Path,
    token: &Token,
) -> Result<std::os::unix::net::UnixStream, ConnectError> {
    use std::io::Write;
    let mut stream =
        std::os::unix::net::UnixStream::connect(path).map_err(ConnectError::Connect)?;
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(ConnectError::Peer)?;
    if peer.pid() != 0 {
        return Err(ConnectError::Inside(peer.pid()));
    }
    stream
        .write_all(&token.opening())
        .map_err(ConnectError::Write)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_its_own_connection_only() {
        let token = Token::random();
        let opening = token.opening();
        assert_eq!(&opening[..8], b"\0FBXSOCK");
        assert!(token.opens(&opening));
        // Another token, a flipped bit anywhere, a prefix or a longer stream: refused.
        assert!(!Token::random().opens(&opening));
        for i in 0..OPENING_LEN {
            let mut bad = opening;
            bad[i] ^= 1;
            assert!(!token.opens(&bad), "bit flipped at {i}");
        }
        assert!(!token.opens(&opening[..OPENING_LEN - 1]));
        assert!(!token.opens(&[opening.as_slice(), b"x"].concat()));
        assert!(!token.opens(&[0u8; OPENING_LEN]));
        assert!(!token.opens(b""));
    }

    /// A listener of the service's own PID namespace (here: this test process) is not the
    /// host: the service says why and writes nothing, the token least of all.
    #[test]
    fn the_service_gives_its_token_to_no_listener_it_can_see() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let token = Token::random();
        let err = connect_at(&path, &token).unwrap_err();
        assert!(
            matches!(err, ConnectError::Inside(pid) if pid == std::process::id() as i32),
            "{err:?}"
        );
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        assert!(got.is_empty(), "{got:?}");
        // Nothing listening: a connect error, nothing else.
        drop(listener);
        assert!(matches!(
            connect_at(&dir.path().join("none"), &token),
            Err(ConnectError::Connect(_))
        ));
    }

    #[test]
    fn tokens_travel_as_their_bytes_and_are_never_printed() {
        let token = Token::random();
        assert_eq!(Token::from_payload(token.payload()).unwrap(), token);
        assert_eq!(
            Token::from_payload(&[7; 31]),
            Err(ChannelError::TokenLength(31))
        );
        assert_eq!(
            Token::from_payload(&[7; 33]),
            Err(ChannelError::TokenLength(33))
        );
        assert_ne!(Token::random(), Token::random());
        assert_eq!(format!("{token:?}"), "Token(…)");
    }
}
