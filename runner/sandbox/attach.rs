//! A long-lived process whose stdin and stdout stay attached: what a project's MCP stdio server
//! needs (DESIGN.md threat model 6, "Extensions run inside"). It is a capability of its own
//! beside [`super::Sandbox::exec`] (which runs a command to completion): [`super::Sandbox::attach`]
//! starts `argv` where the agent's commands run — in the agent's own container, as the same user
//! with the same mounts, network and (for the read-only roles) the same `setpriv` drop, or, with
//! `--sandbox host`, as a host process — and hands back its pipes and a [`ProcessHandle`].
//!
//! The host reads only the process's stdout, through a bounded pipe, and keeps the last few
//! KiB of its stderr for error messages; nothing it writes is executed or interpreted by the
//! host beyond the protocol its reader speaks.

use async_trait::async_trait;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite};

/// Bytes of stderr kept for messages (the tail).
pub const STDERR_TAIL: usize = 4096;

/// What to start.
#[derive(Debug, Clone)]
pub struct AttachSpec {
    /// Program and arguments (no shell): `argv[0]` is looked up on the sandbox's `PATH`.
    pub argv: Vec<String>,
    /// Working directory; must be inside a mount.
    pub cwd: PathBuf,
    /// Extra environment (never credentials: the caller filters them).
    pub env: Vec<(String, String)>,
}

/// The last [`STDERR_TAIL`] bytes a process wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    /// Appends `bytes`, dropping the oldest beyond [`STDERR_TAIL`].
    pub fn push(&self, bytes: &[u8]) {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(bytes);
        if buf.len() > STDERR_TAIL {
            let cut = buf.len() - STDERR_TAIL;
            buf.drain(..cut);
        }
    }

    /// The tail as text (lossy UTF-8), trimmed.
    pub fn text(&self) -> String {
        let buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).trim().to_string()
    }
}

/// Controls a started process.
#[async_trait]
pub trait ProcessHandle: Send + Sync {
    /// Kills the process and everything it started. Idempotent.
    async fn kill(&self);
    /// How it ended (`exit code 3`, `killed by SIGKILL`), or `None` while it runs or when
    /// unknown.
    async fn ended(&self) -> Option<String>;
    /// One line for logs: where it runs.
    fn describe(&self) -> String;
}

/// A started process: its stdin, its stdout, the tail of its stderr, and its handle.
pub struct Attached {
    /// Writes go to the process's stdin.
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    /// The process's stdout (EOF when it closed it or ended).
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    /// The tail of its stderr, filled as it writes.
    pub stderr: StderrTail,
    /// Kills it, tells how it ended.
    pub handle: Arc<dyn ProcessHandle>,
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached")
            .field("handle", &self.handle.describe())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_keeps_the_last_bytes() {
        let t = StderrTail::default();
        t.push(b"first\n");
        t.push(&vec![b'x'; STDERR_TAIL]);
        t.push(b"\nlast line\n");
        let text = t.text();
        assert!(text.ends_with("last line"), "{text}");
        assert!(!text.contains("first"));
        assert!(text.len() <= STDERR_TAIL);
    }
}
