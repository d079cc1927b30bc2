//! Numbered schema migrations for `sessions.db`, applied in order inside one `BEGIN IMMEDIATE`
//! transaction and recorded in `schema_migrations`. A database migrated by a newer flowerbox
//! (versions this binary does not know) is left alone: the tables it relies on still exist.
//! A database whose `sessions` or `entries` table is not flowerbox's (another program's file
//! at that path) is [`SessionError::Damaged`] with one line saying so, before and after
//! migrating (issue 26 §4: it used to print the whole failed migration, 26 lines).

use rusqlite::{params, Connection, TransactionBehavior};

use super::SessionError;

/// The tables flowerbox owns, and a query that reads every column it uses of each.
const SHAPE: &[(&str, &str)] = &[
    (
        "sessions",
        "SELECT id, agent, role, step, parent, run, forked_from, created_at FROM sessions LIMIT 0",
    ),
    (
        "entries",
        "SELECT session_id, seq, kind, notice_kind, payload, context_tokens, created_at \
         FROM entries LIMIT 0",
    ),
];

/// The error of a database whose table `table` is not flowerbox's.
fn foreign(table: &str) -> SessionError {
    SessionError::Damaged(super::Damage::Foreign {
        table: table.to_string(),
    })
}

/// One schema step. Versions only grow; a released migration is never edited.
pub(super) struct Migration {
    /// Strictly increasing, starting at 1.
    pub version: i64,
    /// What it does, for humans reading `schema_migrations`.
    pub name: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// Every migration, in order.
pub(super) const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "sessions and entries",
    sql: r#"
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    role        TEXT NOT NULL,
    step        TEXT,
    parent      TEXT,
    run         TEXT NOT NULL,
    forked_from TEXT REFERENCES sessions(id),
    created_at  TEXT NOT NULL
);
CREATE INDEX sessions_run ON sessions(run);

-- One row per appended message or notice, in append order. `payload` is the message JSON
-- exactly as serialised at append time (or the notice text); rows are never updated.
CREATE TABLE entries (
    session_id     TEXT NOT NULL REFERENCES sessions(id),
    seq            INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('message', 'notice')),
    notice_kind    TEXT,
    payload        TEXT NOT NULL,
    context_tokens INTEGER,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"#,
}];

/// Applies the migrations `conn` has not seen yet.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), SessionError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version    INTEGER PRIMARY KEY,
            name       TEXT NOT NULL,
            applied_at TEXT NOT NULL
        );",
    )?;
    let applied: Vec<i64> = {
        let mut stmt = tx.prepare("SELECT version FROM schema_migrations")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        if m.version == 1 {
            // The first migration creates the tables: any already there belong to someone else.
            for (table, _) in SHAPE {
                let there: bool = tx.query_row(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = ?1)",
                    [table],
                    |r| r.get(0),
                )?;
                if there {
                    return Err(foreign(table));
                }
            }
        }
        tx.execute_batch(m.sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, chrono::Utc::now().to_rfc3339()],
        )?;
    }
    tx.commit()?;
    // Recorded as migrated (by another program's `schema_migrations`, say) is not enough.
    for (table, read) in SHAPE {
        if conn.prepare(read).is_err() {
            return Err(foreign(table));
        }
    }
    Ok(())
}

/// The highest applied version.
#[cfg(test)]
pub(crate) fn current_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_strictly_increase_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
        }
    }

    #[test]
    fn migrating_twice_is_a_no_op_and_newer_versions_are_tolerated() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let latest = MIGRATIONS.len() as i64;
        assert_eq!(current_version(&conn).unwrap(), latest);
        // A newer binary recorded a version we do not know.
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, 'future', 'x')",
            [latest + 1],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(current_version(&conn).unwrap(), latest + 1);
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, latest + 1);
    }

    /// Issue 26 §4: another program's `sessions` table printed the whole failed migration.
    #[test]
    fn a_foreign_sessions_table_is_one_line() {
        for setup in [
            "CREATE TABLE sessions (token TEXT, expires INTEGER);",
            // Recorded as migrated by someone else's bookkeeping.
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                 applied_at TEXT NOT NULL);
             INSERT INTO schema_migrations VALUES (1, 'theirs', 'x');
             CREATE TABLE sessions (token TEXT);",
        ] {
            let mut conn = Connection::open_in_memory().unwrap();
            conn.execute_batch(setup).unwrap();
            let err = migrate(&mut conn).unwrap_err();
            assert!(matches!(err, SessionError::Damaged(_)), "{err:?}");
            let text = err.to_string();
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(text.contains("不是 flowerbox 建的 sessions 表"), "{text}");
        }
    }
}
