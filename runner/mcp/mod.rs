//! The project's MCP servers (Model Context Protocol), sandboxed (DESIGN.md threat model 6,
//! README "MCP servers"). flower runs as a Claude Code plugin, so a repository's MCP servers
//! travel with it; flowerbox reads the same `.mcp.json` ([`config`]) and speaks MCP with the
//! official Rust SDK (`rmcp`, [`server`]):
//!
//! - **stdio servers run inside the agent's own container**, started as one of its commands
//!   ([`crate::sandbox::Sandbox::attach`]): the same mounts, egress policy and user (a judge's
//!   or coordinator's under its own uid, with its one capability and seccomp profile), and no
//!   credential. With `--sandbox host` they are host processes of the user: not sandboxed.
//! - **HTTP servers** are reached from the host like `WebFetch`: pinned under the egress policy.
//! - Their tools reach the model as `mcp__<server>__<tool>` ([`names`]), only for agents whose
//!   whitelist admits them, read-only roles only `readOnlyHint` ones ([`hub`]); results are
//!   capped ([`render`]) and spilled like every tool's.
//! - A server that fails to start, hangs, dies mid-call or answers garbage is an error result
//!   the model reads, never a crash; it is stopped with its container.

pub mod config;
pub mod doctor;
pub mod hub;
mod linecap;
pub mod names;
pub mod render;
pub mod server;

pub use config::{McpConfig, McpSettings, ServerConfig, Transport};
pub use hub::{AgentAsk, AgentMcp, McpHub, McpTool};

use thiserror::Error;

/// Why an MCP step failed. Every variant becomes an error tool result (or, at start, a note)
/// the model reads.
#[derive(Debug, Error)]
pub enum McpError {
    /// The server could not be started, initialised or listed.
    #[error("{0}")]
    Start(String),
    /// The server could not be started or initialised because of `source` (`what` names the
    /// server and the step).
    #[error("{what}:{source}")]
    StartFailed {
        /// The server and what was being done.
        what: String,
        /// The underlying error (the sandbox's, the URL parser's, the HTTP client's, rmcp's).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The call did not complete: timeout, the server died, a broken answer.
    #[error("{0}")]
    Call(String),
    /// The call's answer could not be taken because of `source`.
    #[error("{what}:{source}")]
    CallFailed {
        /// The server and what was being done.
        what: String,
        /// The underlying error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The tool ran and reported an error (`isError`, or a JSON-RPC error answer).
    #[error("{0}")]
    ToolFailed(String),
    /// The egress policy refuses the server's address.
    #[error("{0}")]
    Denied(String),
    /// The human interrupted the call.
    #[error("interrupted")]
    Interrupted,
}
