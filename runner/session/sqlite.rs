//! `runs/sessions.db` (seed 000 "它在项目里创建了什么", seed 001 "会话存储"): SQLite in WAL
//! mode with a busy timeout, every write in a `BEGIN IMMEDIATE` transaction, so several
//! flowerbox processes (and several agents of one process) can append to one file at once.
//!
//! Every message is one row holding its JSON exactly as serialised at append time; rows are
//! never updated or deleted. [`SessionStore::load`] rewrites a copy through prune, expiry and
//! trim ([`super::rewrite`]), so what a resumed session sees is exactly what the model saw
//! before the process died, minus what the policy trims.

use super::migrations;
use super::rewrite::{self, Entry, TrimReport};
use super::{NoticeKind, SessionError, SessionMeta, SessionStore, TrimPolicy};
use crate::model::{Message, Role};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a writer waits for another process's write transaction before failing (30 s: a
/// write takes milliseconds, but the machine may be busy compiling).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

impl From<rusqlite::Error> for SessionError {
    fn from(e: rusqlite::Error) -> Self {
        SessionError::Db(e.to_string())
    }
}

/// The SQLite [`SessionStore`]. One connection behind a mutex: share it with `Arc` across the
/// agents of one process; other processes open their own.
pub struct SqliteSessionStore {
    /// The connection; `rusqlite::Connection` is `Send` but not `Sync`.
    conn: Mutex<Connection>,
    /// Where the database lives (for messages).
    path: PathBuf,
}

impl std::fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteSessionStore {
    /// Opens (creating it and its directory when missing) and migrates the database at `path`,
    /// normally `<run_dir>/sessions.db`, with [`DEFAULT_BUSY_TIMEOUT`].
    ///
    /// # Errors
    /// [`SessionError::Io`] when the directory cannot be created, [`SessionError::Db`] when
    /// SQLite cannot open, switch to WAL or migrate the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SessionError> {
        Self::open_with(path, DEFAULT_BUSY_TIMEOUT)
    }

    /// [`SqliteSessionStore::open`] with an explicit busy timeout.
    ///
    /// # Errors
    /// As [`SqliteSessionStore::open`].
    pub fn open_with(path: impl AsRef<Path>, busy_timeout: Duration) -> Result<Self, SessionError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut conn = Connection::open(&path)?;
        conn.busy_timeout(busy_timeout)?;
        set_wal(&conn, busy_timeout)?;
        // FULL: each commit reaches the disk, so a power cut loses no appended message.
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        migrations::migrate(&mut conn)?;
        Ok(SqliteSessionStore {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The highest applied schema migration.
    ///
    /// # Errors
    /// [`SessionError::Db`].
    pub fn schema_version(&self) -> Result<i64, SessionError> {
        Ok(migrations::current_version(&self.lock())?)
    }

    /// True when `session` is in the store (continuity checks this before resuming a session
    /// named by `lineage.json`, which can outlive `sessions.db`).
    ///
    /// # Errors
    /// [`SessionError::Db`].
    pub fn has_session(&self, session: &str) -> Result<bool, SessionError> {
        let conn = self.lock();
        Ok(exists(&conn, session)?)
    }

    /// The stored JSON of every message of `session`, byte for byte as appended.
    ///
    /// # Errors
    /// [`SessionError::NotFound`], [`SessionError::Db`].
    pub fn load_raw_json(&self, session: &str) -> Result<Vec<String>, SessionError> {
        let conn = self.lock();
        if !exists(&conn, session)? {
            return Err(SessionError::NotFound(session.to_string()));
        }
        let mut stmt = conn.prepare(
            "SELECT payload FROM entries WHERE session_id = ?1 AND kind = 'message' ORDER BY seq",
        )?;
        let rows = stmt.query_map([session], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every stored row of `session` (messages and notices) in append order.
    ///
    /// # Errors
    /// [`SessionError::NotFound`], [`SessionError::Db`], [`SessionError::Corrupt`] for a row
    /// that does not decode.
    pub fn entries(&self, session: &str) -> Result<Vec<Entry>, SessionError> {
        let conn = self.lock();
        if !exists(&conn, session)? {
            return Err(SessionError::NotFound(session.to_string()));
        }
        let mut stmt =
            conn.prepare("SELECT seq, kind, notice_kind, payload FROM entries WHERE session_id = ?1 ORDER BY seq")?;
        let rows = stmt.query_map([session], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, kind, notice_kind, payload) = row?;
            let corrupt = |reason: String| SessionError::Corrupt {
                session: session.to_string(),
                reason,
            };
            out.push(match kind.as_str() {
                "message" => Entry::Message(
                    serde_json::from_str(&payload)
                        .map_err(|e| corrupt(format!("row {seq}: {e}")))?,
                ),
                _ => {
                    let k = notice_kind
                        .as_deref()
                        .and_then(NoticeKind::parse)
                        .ok_or_else(|| {
                            corrupt(format!("row {seq}: unknown notice kind {notice_kind:?}"))
                        })?;
                    Entry::Notice(k, payload)
                }
            });
        }
        Ok(out)
    }

    /// [`SessionStore::load`] plus what the rewrite did.
    ///
    /// # Errors
    /// As [`SqliteSessionStore::entries`], plus [`SessionError::Io`] writing spill files.
    pub fn load_with_report(
        &self,
        session: &str,
        policy: &TrimPolicy,
    ) -> Result<(Vec<Message>, TrimReport), SessionError> {
        let entries = self.entries(session)?;
        Ok(rewrite::for_resume(&entries, policy)?)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (transactions roll
        // back on drop), so the connection stays usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so the
    /// busy timeout covers the whole wait and no read-to-write upgrade can fail mid-way.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let v = f(&tx)?;
        tx.commit()?;
        Ok(v)
    }

    fn append_row(
        &self,
        session: &str,
        kind: &str,
        notice_kind: Option<&str>,
        payload: &str,
        context_tokens: Option<u64>,
    ) -> Result<(), SessionError> {
        self.write(|tx| {
            if !exists(tx, session)? {
                return Err(SessionError::NotFound(session.to_string()));
            }
            tx.execute(
                "INSERT INTO entries (session_id, seq, kind, notice_kind, payload, context_tokens, created_at)
                 VALUES (?1, (SELECT COALESCE(MAX(seq), -1) + 1 FROM entries WHERE session_id = ?1),
                         ?2, ?3, ?4, ?5, ?6)",
                params![session, kind, notice_kind, payload, context_tokens.map(|t| t as i64), now()],
            )?;
            Ok(())
        })
    }
}

/// Switches to WAL. Changing the journal mode needs an exclusive lock; when processes open a
/// new file at the same moment one of them may see the old mode or `SQLITE_BUSY`, so retry
/// within the busy timeout.
fn set_wal(conn: &Connection, timeout: Duration) -> Result<(), SessionError> {
    let start = Instant::now();
    loop {
        let res: rusqlite::Result<String> =
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0));
        match res {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) if start.elapsed() >= timeout => {
                return Err(SessionError::Db(format!(
                    "cannot switch to WAL (journal mode is {mode})"
                )))
            }
            Err(e) if start.elapsed() >= timeout || !is_busy(&e) => return Err(e.into()),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn exists(conn: &Connection, session: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT 1 FROM sessions WHERE id = ?1",
        [session],
        |_| Ok(()),
    )
    .optional()
    .map(|o| o.is_some())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl SessionStore for SqliteSessionStore {
    fn create(&self, meta: &SessionMeta) -> Result<String, SessionError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO sessions (id, agent, role, step, parent, run, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id,
                    meta.agent,
                    meta.role.as_str(),
                    meta.step,
                    meta.parent,
                    meta.run,
                    now()
                ],
            )?;
            Ok(())
        })?;
        Ok(id)
    }

    fn append(
        &self,
        session: &str,
        msg: &Message,
        context_tokens: Option<u64>,
    ) -> Result<(), SessionError> {
        let json = serde_json::to_string(msg).map_err(|e| {
            SessionError::Db(format!(
                "cannot serialise a message of session {session}: {e}"
            ))
        })?;
        self.append_row(session, "message", None, &json, context_tokens)
    }

    fn append_notice(
        &self,
        session: &str,
        kind: NoticeKind,
        text: &str,
    ) -> Result<(), SessionError> {
        self.append_row(session, "notice", Some(kind.as_str()), text, None)
    }

    fn load_raw(&self, session: &str) -> Result<Vec<Message>, SessionError> {
        self.load_raw_json(session)?
            .iter()
            .enumerate()
            .map(|(i, json)| {
                serde_json::from_str(json).map_err(|e| SessionError::Corrupt {
                    session: session.to_string(),
                    reason: format!("message {i}: {e}"),
                })
            })
            .collect()
    }

    fn load(&self, session: &str, policy: &TrimPolicy) -> Result<Vec<Message>, SessionError> {
        Ok(self.load_with_report(session, policy)?.0)
    }

    fn fork(&self, session: &str) -> Result<String, SessionError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.write(|tx| {
            let n = tx.execute(
                "INSERT INTO sessions (id, agent, role, step, parent, run, forked_from, created_at)
                 SELECT ?1, agent, role, step, parent, run, id, ?2 FROM sessions WHERE id = ?3",
                params![id, now(), session],
            )?;
            if n == 0 {
                return Err(SessionError::NotFound(session.to_string()));
            }
            tx.execute(
                "INSERT INTO entries (session_id, seq, kind, notice_kind, payload, context_tokens, created_at)
                 SELECT ?1, seq, kind, notice_kind, payload, context_tokens, created_at
                 FROM entries WHERE session_id = ?2",
                params![id, session],
            )?;
            Ok(())
        })?;
        Ok(id)
    }

    fn meta(&self, session: &str) -> Result<Option<SessionMeta>, SessionError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                "SELECT agent, role, step, parent, run FROM sessions WHERE id = ?1",
                [session],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                },
            )
            .optional()?;
        let Some((agent, role, step, parent, run)) = row else {
            return Ok(None);
        };
        let role = Role::parse(&role).ok_or_else(|| SessionError::Corrupt {
            session: session.to_string(),
            reason: format!("unknown role {role:?}"),
        })?;
        Ok(Some(SessionMeta {
            agent,
            role,
            step,
            parent,
            run,
        }))
    }

    /// `Ok(None)` when the session is unknown or never reported a context size.
    fn last_context(&self, session: &str) -> Result<Option<u64>, SessionError> {
        let conn = self.lock();
        let v: Option<i64> = conn
            .query_row(
                "SELECT context_tokens FROM entries
                 WHERE session_id = ?1 AND context_tokens IS NOT NULL ORDER BY seq DESC LIMIT 1",
                [session],
                |r| r.get(0),
            )
            .optional()?;
        Ok(v.map(|t| t as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContentBlock, Speaker};
    use serde_json::json;

    fn meta() -> SessionMeta {
        SessionMeta {
            agent: "worker-1".into(),
            role: Role::Worker,
            step: Some("干活".into()),
            parent: None,
            run: "20260101-120000-abcdef".into(),
        }
    }

    fn open() -> (tempfile::TempDir, SqliteSessionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteSessionStore::open(dir.path().join("runs/sessions.db")).unwrap();
        (dir, store)
    }

    #[test]
    fn opens_in_wal_with_foreign_keys_and_the_latest_schema() {
        let (dir, store) = open();
        let conn = store.lock();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let fk: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        drop(conn);
        assert_eq!(store.schema_version().unwrap(), 1);
        // Reopening migrates nothing twice.
        drop(store);
        let again = SqliteSessionStore::open(dir.path().join("runs/sessions.db")).unwrap();
        assert_eq!(again.schema_version().unwrap(), 1);
    }

    #[test]
    fn messages_round_trip_exactly_and_notices_stay_out_of_both_loads() {
        let (dir, store) = open();
        let id = store.create(&meta()).unwrap();
        let msgs = vec![
            Message::user_text("写个 md 转 html 的脚本 \u{1F600} \"quoted\" \\ back"),
            Message {
                role: Speaker::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "hm".into(),
                        signature: "sig==".into(),
                    },
                    ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "Bash".into(),
                        input: json!({"command": "ls", "n": 1.5e-7, "nested": {"z": [1, 2, null]}}),
                    },
                ],
            },
            Message {
                role: Speaker::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "a\nb".into(),
                    is_error: true,
                }],
            },
        ];
        store.append(&id, &msgs[0], None).unwrap();
        store
            .append_notice(&id, NoticeKind::NetworkError, "503")
            .unwrap();
        store.append(&id, &msgs[1], Some(12_345)).unwrap();
        store.append(&id, &msgs[2], None).unwrap();
        let json: Vec<String> = msgs
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
        assert_eq!(store.load_raw_json(&id).unwrap(), json);
        assert_eq!(store.load_raw(&id).unwrap(), msgs);
        let policy = TrimPolicy::new(dir.path().join("spill"), true);
        assert_eq!(store.load(&id, &policy).unwrap(), msgs);
        let entries = store.entries(&id).unwrap();
        assert_eq!(
            entries[1],
            Entry::Notice(NoticeKind::NetworkError, "503".into())
        );
        assert_eq!(store.last_context(&id).unwrap(), Some(12_345));
    }

    #[test]
    fn unknown_sessions_are_not_found() {
        let (dir, store) = open();
        let policy = TrimPolicy::new(dir.path().join("spill"), false);
        assert!(matches!(
            store.append("nope", &Message::user_text("x"), None),
            Err(SessionError::NotFound(_))
        ));
        assert!(matches!(
            store.append_notice("nope", NoticeKind::Interrupted, "x"),
            Err(SessionError::NotFound(_))
        ));
        assert!(matches!(
            store.load("nope", &policy),
            Err(SessionError::NotFound(_))
        ));
        assert!(matches!(
            store.load_raw("nope"),
            Err(SessionError::NotFound(_))
        ));
        assert!(matches!(store.fork("nope"), Err(SessionError::NotFound(_))));
        assert_eq!(store.meta("nope").unwrap(), None);
        assert_eq!(store.last_context("nope").unwrap(), None);
        assert!(!store.has_session("nope").unwrap());
    }

    #[test]
    fn fork_copies_history_and_meta_and_then_diverges() {
        let (_dir, store) = open();
        let id = store.create(&meta()).unwrap();
        store.append(&id, &Message::user_text("one"), None).unwrap();
        store
            .append(&id, &Message::assistant_text("two"), Some(99))
            .unwrap();
        store
            .append_notice(&id, NoticeKind::Interrupted, "Ctrl-C")
            .unwrap();
        let fork = store.fork(&id).unwrap();
        assert_ne!(fork, id);
        assert_eq!(
            store.load_raw_json(&fork).unwrap(),
            store.load_raw_json(&id).unwrap()
        );
        assert_eq!(store.entries(&fork).unwrap(), store.entries(&id).unwrap());
        assert_eq!(store.meta(&fork).unwrap(), Some(meta()));
        assert_eq!(store.last_context(&fork).unwrap(), Some(99));
        store
            .append(&fork, &Message::user_text("only in the fork"), None)
            .unwrap();
        assert_eq!(store.load_raw(&id).unwrap().len(), 2);
        assert_eq!(store.load_raw(&fork).unwrap().len(), 3);
    }

    #[test]
    fn load_never_modifies_rows() {
        let (dir, store) = open();
        let id = store.create(&meta()).unwrap();
        store.append(&id, &Message::user_text("go"), None).unwrap();
        for i in 0..10 {
            let tid = format!("t{i}");
            store
                .append(
                    &id,
                    &Message {
                        role: Speaker::Assistant,
                        content: vec![ContentBlock::ToolUse {
                            id: tid.clone(),
                            name: "Bash".into(),
                            input: json!({"command": "git status"}),
                        }],
                    },
                    None,
                )
                .unwrap();
            store
                .append(
                    &id,
                    &Message {
                        role: Speaker::User,
                        content: vec![ContentBlock::ToolResult {
                            tool_use_id: tid,
                            content: "x".repeat(if i % 2 == 0 { 3000 } else { 10 }),
                            is_error: false,
                        }],
                    },
                    None,
                )
                .unwrap();
        }
        let before = store.load_raw_json(&id).unwrap();
        let policy = TrimPolicy {
            keep_recent: 1,
            keep_ephemeral: 1,
            ..TrimPolicy::new(dir.path().join("spill"), true)
        };
        let (loaded, report) = store.load_with_report(&id, &policy).unwrap();
        assert!(report.trimmed > 0 && report.expired > 0, "{report:?}");
        assert_ne!(loaded, store.load_raw(&id).unwrap());
        assert_eq!(store.load_raw_json(&id).unwrap(), before);
    }

    #[test]
    fn meta_round_trips() {
        let (_dir, store) = open();
        let m = SessionMeta {
            parent: Some("p".into()),
            step: None,
            role: Role::Coordinator,
            ..meta()
        };
        let id = store.create(&m).unwrap();
        assert_eq!(store.meta(&id).unwrap(), Some(m));
        assert!(store.has_session(&id).unwrap());
    }
}
