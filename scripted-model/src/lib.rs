//! The scripted model server: speaks the Anthropic Messages streaming protocol over HTTP from a
//! scenario file, with fault injection, for tests, demos and benchmarks (issue "Model layer").
//! The `scripted-model` binary is a thin wrapper around [`run`]. A crate of its own, beside
//! `testkit/`: a test double, not part of the shipped `flowerbox` (which links no HTTP server).
//!
//! ```text
//! scripted-model --scenario FILE [--listen 127.0.0.1:0] [--record FILE] [--lax]
//! ```
//!
//! The first line of stdout is the bound address, `http://127.0.0.1:PORT` (flushed at once; use
//! it as `ANTHROPIC_BASE_URL`, or with `/v1` as `OPENAI_BASE_URL`). It then serves
//! `POST /v1/messages`, `POST /v1/chat/completions` (the same scenario as Chat Completions
//! chunks, or one `chat.completion` for `stream: false`) and `GET /health` → `ok` until killed,
//! concurrently. `--record` appends every request body as one JSON line.
//!
//! - **Strict by default.** A request the real API would refuse gets the real API's answer:
//!   HTTP 400, `invalid_request_error` and its message text (empty messages, unanswered or
//!   misplaced tool calls, results for unknown ids, more than four cache breakpoints, bad tool
//!   names or schemas, `max_tokens` above the model's cap, thinking blocks not passed back
//!   unchanged; on the Chat Completions side, `tool` messages that answer no preceding
//!   `tool_calls`). The rules are listed in `validate.rs` and `validate_chat.rs`. `--lax` turns
//!   this off, for tests that need a server which accepts anything.
//!
//! # Scenario
//!
//! ```json
//! {"agents": [
//!   {"role": "worker", "agent": "worker-1", "prompt": "fix the (login|signup) bug",
//!    "turns": [
//!      {"content": [{"type": "thinking", "thinking": "look first"},
//!                   {"type": "text", "text": "Let me look."},
//!                   {"type": "tool_use", "name": "Bash", "input": {"command": "ls /work"}}],
//!       "usage": {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 800},
//!       "fault": {"status": 529, "headers": {"retry-after": "1"}, "times": 1}},
//!      {"content": [{"type": "text", "text": "Fixed."}], "stop_reason": "end_turn"}]},
//!   {"role": "judge", "turns": [{"content": [{"type": "text", "text": "PASS"}]}]}
//! ]}
//! ```
//!
//! - **Matching.** An entry matches when its optional `role` equals the `x-flowerbox-role`
//!   header, its optional `agent` equals `x-flowerbox-agent`, and its optional `prompt` regex
//!   matches the system prompt plus the first user message (joined by a newline). The first
//!   matching entry serves.
//! - **Turn selection is stateless.** The turn served is number k (0-based), where k is the
//!   number of assistant messages already in the request, so a resumed or retried conversation
//!   gets the right turn.
//! - **TURN.** `content` blocks: `text`, `thinking` (optional `signature`, default a digest of
//!   the text that strict checking expects back unchanged), `tool_use` (`name`, `input` default
//!   `{}` — any JSON, so a scenario can send a non-object input —, optional fixed `id`; ids are generated as `toolu_s{entry}_t{k}_b{i}`
//!   otherwise). `stop_reason` defaults to `tool_use` when there is a tool_use block, else
//!   `end_turn`. `usage` counts default to an estimate (bytes / 4) for input/output and 0 for
//!   cache. `interleave: true` streams the tool_use blocks' fragments interleaved.
//!   `think_ms` delays the stream's first event (the model's thinking time, for benchmarks);
//!   `hold_end_ms` pauses before its last two events (every block out, the message not ended).
//! - **Streaming.** `message_start`, `ping`, per block `content_block_start` / deltas /
//!   `content_block_stop`, `message_delta`, `message_stop`. Text goes out as several
//!   `text_delta`s, tool input as several `input_json_delta` fragments cut at arbitrary
//!   character positions; every event is written as several network chunks, one cut always
//!   inside its first multi-byte character, so clients see UTF-8 split across chunks.
//! - **FAULT** (one object or a list, consumed in order; each applies to `times` requests of
//!   its (entry, turn), counted across requests; without `times` it applies to every request):
//!   - `{"status": 529, "headers": {"retry-after": "1"}, "times": 1}`: that status with an
//!     Anthropic error body (`error_type` / `message` override the defaults);
//!   - `{"error_event": "overloaded_error", "after_events": 3, "times": 1}`: an `error` event
//!     after 3 events, then the stream ends;
//!   - `{"drop_after_events": 3, "times": 1}`: the connection is aborted after 3 events;
//!     `"before_end": true` puts the drop (or an `error_event`) where `message_delta` would
//!     be: every block is out, the message never ends;
//!   - `{"delay_ms": 200}`: a pause before every event (combine with `times` for an idle
//!     stream that recovers);
//!   - `{"truncate_tool_json": true, "times": 1}`: the first tool_use block gets only half its
//!     JSON, later blocks are left out, and the turn stops with `max_tokens`;
//!   - `{"json_answer": true}`: the whole turn as one JSON object (`application/json`), as a
//!     gateway that ignores `stream: true` sends it.
//! - **Mismatch.** No matching entry, or k past the last turn: HTTP 400 with an
//!   `invalid_request_error` naming the agent, its role and k, so a test sees it at once.

#![warn(unreachable_pub)]

mod chat;
mod events;
pub mod scenario;
mod server;
pub mod validate;
pub mod validate_chat;

pub use scenario::{Entry, Fault, Scenario, ScriptedBlock, ScriptedTurn, ScriptedUsage};
pub use server::ScriptedServer;

use clap::Parser;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use thiserror::Error;

/// Failures of the scripted server.
#[derive(Debug, Error)]
pub enum ScriptedError {
    /// The scenario file is unreadable or invalid; the message names the place.
    #[error("bad scenario: {0}")]
    Scenario(String),
    /// Binding, recording or serving failed.
    #[error("{0}")]
    Io(String),
}

/// Command line of `scripted-model`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "scripted-model",
    about = "Serves the Anthropic Messages streaming protocol from a scenario file"
)]
pub struct Args {
    /// Scenario file (JSON).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Append every request body to this file, one JSON line each.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Accept any request (no checking against the real APIs' rules).
    #[arg(long)]
    pub lax: bool,
}

/// Loads the scenario, binds, writes `http://ADDR` and a newline to `out` (flushed), and serves
/// until the process is killed.
pub async fn run(args: Args, out: &mut dyn Write) -> Result<(), ScriptedError> {
    let Args {
        scenario,
        listen,
        record,
        lax,
    } = args;
    let scenario = Scenario::load(&scenario)?;
    let server = ScriptedServer::bind_with(scenario, listen, record, !lax).await?;
    writeln!(out, "{}", server.url())
        .and_then(|_| out.flush())
        .map_err(|e| ScriptedError::Io(e.to_string()))?;
    server.serve(std::future::pending()).await
}
