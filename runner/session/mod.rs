//! Session persistence (seed 001 "会话存储", "裁剪", "剪除"): every message of every session
//! appended to `runs/sessions.db`; resume loads through trim and prune without ever modifying
//! the stored rows.

use crate::model::Message;
use crate::role::Role;
use std::path::PathBuf;
use thiserror::Error;

mod migrations;
pub mod rewrite;
pub mod sqlite;

pub use rewrite::{Entry, TrimReport, INTERRUPTED_NOTE};
pub use sqlite::SqliteSessionStore;

/// Session-store failures.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The session id is not in the store.
    #[error("session {0} not found")]
    NotFound(String),
    /// SQLite failed.
    #[error("sessions.db: {0}")]
    Db(#[source] rusqlite::Error),
    /// The database stayed out of WAL mode past the busy timeout.
    #[error("sessions.db: cannot switch to WAL (journal mode is {mode})")]
    NotWal {
        /// The journal mode it kept.
        mode: String,
    },
    /// A message could not be serialised for storage.
    #[error("sessions.db: cannot serialise a message of session {session}: {source}")]
    Serialize {
        /// Session id.
        session: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The file is not an intact database of flowerbox's. No later open will succeed; it has
    /// to go aside.
    #[error("sessions.db 坏了:{0}")]
    Damaged(#[source] Damage),
    /// A stored row holds a value flowerbox does not know (a role, a notice kind).
    #[error("sessions.db: corrupt row in session {session}: {reason}")]
    Corrupt {
        /// Session id.
        session: String,
        /// Why.
        reason: String,
    },
    /// A stored message is not the JSON of a message.
    #[error("sessions.db: corrupt row in session {session}: {row}: {source}")]
    CorruptJson {
        /// Session id.
        session: String,
        /// Which row (`row 3`, `message 2`).
        row: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// I/O (spill files written by trim).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why `sessions.db` is damaged.
#[derive(Debug, Error)]
pub enum Damage {
    /// Not an intact SQLite database (truncated, overwritten): SQLite's own `SQLITE_CORRUPT` /
    /// `SQLITE_NOTADB`.
    #[error("{0}")]
    Sqlite(#[source] rusqlite::Error),
    /// It holds a table of this name that flowerbox did not create.
    #[error("里面已有一张不是 flowerbox 建的 {table} 表(别的程序的数据库?)")]
    Foreign {
        /// The table.
        table: String,
    },
}

/// Who a session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta {
    /// Agent instance name.
    pub agent: String,
    /// Role.
    pub role: Role,
    /// Workflow step name, if any (`干活`, `干活·判定#1`, `ad-hoc`).
    pub step: Option<String>,
    /// The dispatching agent's session (subagents), if any.
    pub parent: Option<String>,
    /// The run marker (`YYYYmmdd-HHMMSS-<6 hex>`) that created it.
    pub run: String,
}

/// A record that is not a conversation message but must not be lost (seed 001 "剪除": errors
/// produced while the network was down). Stored in order with the messages; never loaded into a
/// context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// A model-call error while waiting or retrying.
    NetworkError,
    /// The turn was interrupted at this point. Tool calls still waiting for their result when
    /// this notice is appended are "left by the interruption": whatever result is appended for
    /// them later is replaced on load by [`INTERRUPTED_NOTE`] (the block stays). So append this
    /// notice *before* the results of the calls the interruption cut short.
    Interrupted,
}

impl NoticeKind {
    /// The name stored in `sessions.db` (`network_error`, `interrupted`).
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::NetworkError => "network_error",
            NoticeKind::Interrupted => "interrupted",
        }
    }

    /// Parses [`NoticeKind::as_str`] back.
    pub fn parse(s: &str) -> Option<NoticeKind> {
        match s {
            "network_error" => Some(NoticeKind::NetworkError),
            "interrupted" => Some(NoticeKind::Interrupted),
            _ => None,
        }
    }
}

/// How resume rewrites the history it feeds back (never the stored rows).
#[derive(Debug, Clone, PartialEq)]
pub struct TrimPolicy {
    /// Replace large tool results with spill pointers (`-T`, on by default on `go`).
    pub trim_large: bool,
    /// Large results (>= `min_chars`) among the `keep_recent` most recent stay verbatim.
    pub keep_recent: usize,
    /// What counts as large, in characters.
    pub min_chars: usize,
    /// Ephemeral Bash results (< `min_chars`) among the `keep_ephemeral` most recent stay.
    pub keep_ephemeral: usize,
    /// Where trimmed results are written (`<workbench>/spill`).
    pub spill_dir: PathBuf,
}

impl TrimPolicy {
    /// flower's defaults: 20 recent large results, 2000 characters, 6 ephemeral results.
    pub fn new(spill_dir: PathBuf, trim_large: bool) -> Self {
        TrimPolicy {
            trim_large,
            keep_recent: 20,
            min_chars: 2000,
            keep_ephemeral: 6,
            spill_dir,
        }
    }
}

/// The persistence interface the agent runtime uses. Implementations must be safe to share
/// across threads and processes (the SQLite one uses WAL, a busy timeout and
/// `BEGIN IMMEDIATE`).
pub trait SessionStore: Send + Sync {
    /// Creates a new, empty session; returns its id (a UUID).
    fn create(&self, meta: &SessionMeta) -> Result<String, SessionError>;

    /// Appends one message, durably, before the runtime acts on it (a process killed at any
    /// later instant resumes with it). `context_tokens` is the context size the model
    /// reported for the call that produced it (assistant messages), for the wake banner and
    /// the handoff threshold. [`SessionError::NotFound`] for an unknown session.
    fn append(
        &self,
        session: &str,
        msg: &Message,
        context_tokens: Option<u64>,
    ) -> Result<(), SessionError>;

    /// Appends a notice (kept for the record, never loaded into a context).
    fn append_notice(
        &self,
        session: &str,
        kind: NoticeKind,
        text: &str,
    ) -> Result<(), SessionError>;

    /// Every stored message, exactly as appended (notices excluded).
    fn load_raw(&self, session: &str) -> Result<Vec<Message>, SessionError>;

    /// What resume feeds the model: the stored messages through prune, expiry and trim
    /// ([`rewrite::for_resume`]); the stored rows are never modified. The result is exactly
    /// the context the model saw before (plus the interrupted note for calls that never got a
    /// result), trimmed as `policy` says, and valid for the API: every `tool_use` is answered
    /// in the next message.
    fn load(&self, session: &str, policy: &TrimPolicy) -> Result<Vec<Message>, SessionError>;

    /// Waits until every spill file a [`SessionStore::load`] pointed to is written (readable,
    /// not yet durable): a load may return before its spill files are written, so anything
    /// that can read a pointer (a tool, a human after the run) waits here first.
    ///
    /// # Errors
    /// [`SessionError::Io`] when a spill file could not be written.
    fn spill_written(&self) -> Result<(), SessionError> {
        Ok(())
    }

    /// Gives up the spill files a load of `session` has not written yet: its history was
    /// dropped before any request holding it was accepted (the model refused it as too long),
    /// so nothing can ever read those pointers. Files already written stay (content-addressed,
    /// the next trim keeps them).
    fn spill_discard(&self, _session: &str) {}

    /// A new session with the same history (messages and notices) and metadata; returns its
    /// id. [`SessionError::NotFound`] for an unknown session.
    fn fork(&self, session: &str) -> Result<String, SessionError>;

    /// The session's metadata, `None` when it does not exist.
    fn meta(&self, session: &str) -> Result<Option<SessionMeta>, SessionError>;

    /// The last reported context size of the session, in tokens; `None` when none was
    /// reported (or the session is unknown).
    fn last_context(&self, session: &str) -> Result<Option<u64>, SessionError>;

    /// Every session that belongs to a step (subagents' do not), in creation order, with its
    /// metadata: what rebuilds a damaged `lineage.json`. A store that cannot list its
    /// sessions says none.
    fn step_sessions(&self) -> Result<Vec<(String, SessionMeta)>, SessionError> {
        Ok(Vec::new())
    }
}
