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
use super::{Damage, NoticeKind, SessionError, SessionMeta, SessionStore, TrimPolicy};
use crate::fsroot::own;
use crate::fsroot::PendingBatch;
use crate::model::Message;
use crate::role::Role;
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a writer waits for another process's write transaction before failing (30 s: a
/// write takes milliseconds, but the machine may be busy compiling).
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

impl From<rusqlite::Error> for SessionError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        match e.sqlite_error_code() {
            Some(DatabaseCorrupt | NotADatabase) => SessionError::Damaged(Damage::Sqlite(e)),
            _ => SessionError::Db(e),
        }
    }
}

/// Moves a damaged `sessions.db` (and its `-wal` / `-shm`) aside, next to it, as
/// `sessions.db.corrupt-<time>` (never replacing a file there); returns where the database
/// went. Never deletes.
///
/// # Errors
/// [`SessionError::Io`] when a move fails.
pub fn move_damaged_aside(path: &Path) -> Result<PathBuf, SessionError> {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let with = |p: &Path, suffix: &str| {
        let mut s = p.as_os_str().to_os_string();
        s.push(suffix);
        PathBuf::from(s)
    };
    let mut n = 1;
    let backup = loop {
        let candidate = match n {
            1 => path.with_file_name(format!("{name}.corrupt-{stamp}")),
            _ => path.with_file_name(format!("{name}.corrupt-{stamp}-{n}")),
        };
        match own::rename(path, &candidate, false) {
            Ok(()) => break candidate,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(SessionError::Io(e)),
        }
    };
    for suffix in ["-wal", "-shm"] {
        match own::rename(&with(path, suffix), &with(&backup, suffix), false) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SessionError::Io(e)),
        }
    }
    Ok(backup)
}

/// The SQLite [`SessionStore`]. One connection behind a mutex: share it with `Arc` across the
/// agents of one process; other processes open their own.
pub struct SqliteSessionStore {
    /// The connection; `rusqlite::Connection` is `Send` but not `Sync`.
    conn: Mutex<Connection>,
    /// Where the database lives (for messages).
    path: PathBuf,
    /// Spill batches a load started and nobody waited for yet
    /// ([`SqliteSessionStore::spill_barrier`]).
    spills: Mutex<Vec<SpillJob>>,
}

/// A load's spill files being written, then synced, on their own thread.
struct SpillJob {
    /// The session whose load made them.
    session: String,
    /// Set to stop writing (the history was dropped before the model saw it).
    stop: Arc<AtomicBool>,
    /// Says once whether every file was written (before the sync); `None` once received.
    written: Option<mpsc::Receiver<std::io::Result<()>>>,
    /// The write and the sync.
    done: std::thread::JoinHandle<std::io::Result<()>>,
}

impl SpillJob {
    /// Starts writing `batch`, then syncing it, on a new thread.
    fn start(session: &str, batch: PendingBatch) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, written) = mpsc::channel();
        let flag = stop.clone();
        let done = std::thread::spawn(move || {
            let sync = match batch.write(&flag) {
                Ok((_, sync)) => {
                    let _ = tx.send(Ok(()));
                    sync
                }
                Err(e) => {
                    let e = std::io::Error::from(e);
                    let again = std::io::Error::new(e.kind(), e.to_string());
                    let _ = tx.send(Err(e));
                    return Err(again);
                }
            };
            match sync {
                // A stopped batch is pointed to by nothing: no sync.
                Some(sync) if !flag.load(Ordering::Relaxed) => {
                    sync.sync().map_err(std::io::Error::from)
                }
                _ => Ok(()),
            }
        });
        SpillJob {
            session: session.to_string(),
            stop,
            written: Some(written),
            done,
        }
    }

    /// A job that only runs `sync` (its files counted as written), for tests of the barrier.
    #[cfg(test)]
    fn sync_only(sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>) -> Self {
        SpillJob {
            session: String::new(),
            stop: Arc::new(AtomicBool::new(false)),
            written: None,
            done: std::thread::spawn(sync),
        }
    }

    /// Waits until its files are written (not yet synced).
    fn wait_written(&mut self) -> std::io::Result<()> {
        match self.written.take() {
            Some(rx) => rx
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("归档文件写入线程崩溃"))),
            None => Ok(()),
        }
    }

    /// Waits until its files are written and synced.
    fn join(self) -> std::io::Result<()> {
        self.done
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("归档文件落盘线程崩溃")))
    }
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
            own::create_dir_all(dir)?;
        }
        // SQLite opens by path. The run directory is masked in every container and its path was
        // made canonical at start; a symlink or FIFO planted there before this run is refused
        // here, and SQLite itself refuses a symlink anywhere in the path (NOFOLLOW).
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_os_string();
            name.push(suffix);
            own::check_plain(Path::new(&name))?;
        }
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW,
        )?;
        conn.busy_timeout(busy_timeout)?;
        set_wal(&conn, busy_timeout)?;
        // FULL: each commit reaches the disk, so a power cut loses no appended message.
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        migrations::migrate(&mut conn)?;
        Ok(SqliteSessionStore {
            conn: Mutex::new(conn),
            path,
            spills: Mutex::new(Vec::new()),
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
    #[cfg(test)]
    pub(crate) fn schema_version(&self) -> Result<i64, SessionError> {
        Ok(migrations::current_version(&self.lock())?)
    }

    /// True when `session` is in the store (continuity checks this before resuming a session
    /// named by `lineage.json`, which can outlive `sessions.db`).
    ///
    /// # Errors
    /// [`SessionError::Db`].
    #[cfg(test)]
    pub(crate) fn has_session(&self, session: &str) -> Result<bool, SessionError> {
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
    /// [`SessionError::NotFound`], [`SessionError::Db`], [`SessionError::Corrupt`] or
    /// [`SessionError::CorruptJson`] for a row that does not decode.
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
                "message" => Entry::Message(serde_json::from_str(&payload).map_err(|source| {
                    SessionError::CorruptJson {
                        session: session.to_string(),
                        row: format!("row {seq}"),
                        source,
                    }
                })?),
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
        let (msgs, report, batch) = rewrite::for_resume_deferred(entries, policy)?;
        if let Some(batch) = batch {
            // The model can be asked while the files are written and the disk catches up:
            // tools and the run's end wait for the files ([`SessionStore::spill_written`]), a
            // new session (the only rows that can hold these pointers for good) for the sync
            // in `create`.
            self.jobs().push(SpillJob::start(session, batch));
        }
        Ok((msgs, report))
    }

    /// Leaves `sync` pending as a load's spill batch would (tests of the barrier).
    #[cfg(test)]
    pub(crate) fn defer_spill_sync(&self, sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>) {
        self.jobs().push(SpillJob::sync_only(sync));
    }

    fn jobs(&self) -> MutexGuard<'_, Vec<SpillJob>> {
        self.spills.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for every spill batch a load started, written and synced: after it, every spill
    /// file a loaded history points to is on disk. [`SessionStore::create`] runs it first, so
    /// a compaction's or a handoff's new session never stores a pointer to a file a crash
    /// could lose.
    ///
    /// # Errors
    /// [`SessionError::Io`] when a write or a sync failed.
    pub fn spill_barrier(&self) -> Result<(), SessionError> {
        let pending = std::mem::take(&mut *self.jobs());
        let mut first = Ok(());
        for job in pending {
            if let Err(e) = job.join() {
                first = first.and(Err(SessionError::Io(e)));
            }
        }
        first
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
            Ok(mode) if start.elapsed() >= timeout => return Err(SessionError::NotWal { mode }),
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
        self.spill_barrier()?;
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
        let json = serde_json::to_string(msg).map_err(|source| SessionError::Serialize {
            session: session.to_string(),
            source,
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
                serde_json::from_str(json).map_err(|source| SessionError::CorruptJson {
                    session: session.to_string(),
                    row: format!("message {i}"),
                    source,
                })
            })
            .collect()
    }

    fn load(&self, session: &str, policy: &TrimPolicy) -> Result<Vec<Message>, SessionError> {
        Ok(self.load_with_report(session, policy)?.0)
    }

    fn spill_written(&self) -> Result<(), SessionError> {
        let mut jobs = self.jobs();
        let mut first = Ok(());
        for job in jobs.iter_mut() {
            if let Err(e) = job.wait_written() {
                first = first.and(Err(SessionError::Io(e)));
            }
        }
        first
    }

    fn spill_discard(&self, session: &str) {
        let mut jobs = self.jobs();
        let (mine, rest): (Vec<SpillJob>, Vec<SpillJob>) = std::mem::take(&mut *jobs)
            .into_iter()
            .partition(|j| j.session == session);
        *jobs = rest;
        drop(jobs);
        for mut job in mine {
            job.stop.store(true, Ordering::Relaxed);
            // The file being written is finished (no temporary left behind); a sync already
            // under way is not waited for: nothing points to any of these files.
            let _ = job.wait_written();
        }
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

    fn step_sessions(&self) -> Result<Vec<(String, SessionMeta)>, SessionError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT id, agent, role, step, parent, run FROM sessions
             WHERE step IS NOT NULL ORDER BY rowid",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, String>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, agent, role, step, parent, run) = row?;
            // A row of a role this version does not know is not a step it can resume.
            let Some(role) = Role::parse(&role) else {
                continue;
            };
            out.push((
                id,
                SessionMeta {
                    agent,
                    role,
                    step,
                    parent,
                    run,
                },
            ));
        }
        Ok(out)
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
#[path = "sqlite_tests.rs"]
mod tests;
