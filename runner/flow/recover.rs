//! Damaged state is recovered, loudly: what a start does when the records it continues from
//! are broken (issue 20, "Damaged state is recovered").
//!
//! - A `lineage.json` that does not parse is moved aside and rebuilt from `sessions.db`: for
//!   every step the last session of the current stretch (the sessions from the latest
//!   clarification on — an earlier stretch ended with `--new`), the wake count as the number
//!   of runs that made them, the request as the clarification's first message. The human is
//!   told what was found and what was rebuilt; nothing is silently reset.
//! - Sessions `lineage.json` names but `sessions.db` lacks (a replaced or deleted database)
//!   are named before those steps start over.
//! - A damaged `sessions.db` (SQLite says corrupt / not a database) stops every start with a
//!   message saying that `--new` starts over; `--new` moves it aside (never deletes it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::error::FlowError;
use crate::model::{ContentBlock, Speaker};
use crate::record::steps::{base_name, parse_step, StepForm};
use crate::record::{Lineage, LineageFile, LineageHealth};
use crate::role::Role;
use crate::session::sqlite::{move_damaged_aside, SqliteSessionStore};
use crate::session::{SessionError, SessionStore};

/// `--new` on a run directory whose `sessions.db` is damaged: moves it aside and says so;
/// `None` when it opens (or does not exist yet).
///
/// # Errors
/// [`FlowError::Store`] when it cannot be opened for another reason or cannot be moved.
pub fn set_aside_damaged_store(run_dir: &Path) -> Result<Option<String>, FlowError> {
    let db = crate::record::layout::sessions_db(run_dir);
    if !db.exists() {
        return Ok(None);
    }
    match SqliteSessionStore::open(&db) {
        Ok(_) => Ok(None),
        Err(SessionError::Damaged(why)) => {
            let backup = move_damaged_aside(&db).map_err(FlowError::Store)?;
            tracing::warn!(%why, backup = %backup.display(), "damaged sessions.db moved aside");
            Ok(Some(format!(
                "{} 坏了({why}),原文件移到 {};这次从头开始,旧会话接不上了",
                db.display(),
                backup.display()
            )))
        }
        Err(e) => Err(FlowError::Store(e)),
    }
}

/// Checks `lineage` against `store` before a continuous run starts; returns what the human
/// must be told (empty when all is well). A damaged file is replaced by one rebuilt from the
/// store ([`rebuild`]); sessions it names that the store lacks are listed.
pub fn check_lineage(
    lineage: &LineageFile,
    store: &dyn SessionStore,
    clarify: &str,
) -> Vec<String> {
    match lineage.health() {
        LineageHealth::Missing | LineageHealth::OtherWorkspace(_) => Vec::new(),
        LineageHealth::Fine(l) => missing_sessions(&l, store).into_iter().collect(),
        LineageHealth::Damaged(why) => {
            let rebuilt = rebuild(store, clarify);
            let shown = lineage.path().display();
            match lineage.replace_damaged(&rebuilt) {
                Ok(Some(backup)) => {
                    tracing::warn!(%why, backup = %backup.display(), steps = ?rebuilt.steps, "lineage rebuilt");
                    let what = if rebuilt.steps.is_empty() {
                        "sessions.db 里也没有能接上的会话,从头开始".to_string()
                    } else {
                        format!(
                            "按 sessions.db 重建了血缘,接着这些步骤的会话:{}",
                            rebuilt.steps.keys().cloned().collect::<Vec<_>>().join("、")
                        )
                    };
                    vec![format!(
                        "{shown} 坏了({why}),原文件移到 {};{what}",
                        backup.display()
                    )]
                }
                Ok(None) => Vec::new(),
                Err(e) => vec![format!("{shown} 坏了({why}),也没能重建({e}):这次从头开始")],
            }
        }
    }
}

/// The steps whose lineage session is not in the store, as one line; `None` when every one is.
fn missing_sessions(l: &Lineage, store: &dyn SessionStore) -> Option<String> {
    let missing: Vec<&str> = l
        .steps
        .iter()
        .filter(|(_, sid)| matches!(store.meta(sid), Ok(None)))
        .map(|(step, _)| step.as_str())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "lineage.json 记着的会话在 sessions.db 里查不到:{}(sessions.db 被换过或删过?)。这些步骤从头开始",
            missing.join("、")
        )
    })
}

/// A lineage rebuilt from the store's step sessions: the current stretch starts at the latest
/// session of the clarify step `clarify` (all sessions when there is none); each step keeps its
/// last session; judges (`·判定#N`) are not steps.
pub fn rebuild(store: &dyn SessionStore, clarify: &str) -> Lineage {
    let mut lin = Lineage::empty("");
    let Ok(all) = store.step_sessions() else {
        return lin;
    };
    let steps: Vec<(String, String, String, Role)> = all
        .into_iter()
        .filter_map(|(id, m)| {
            let step = m.step?;
            (!is_judge(&step)).then(|| (id, base_name(&step).to_string(), m.run, m.role))
        })
        .collect();
    let start = steps
        .iter()
        .rposition(|(_, name, _, role)| name == clarify && *role == Role::Clarifier)
        .unwrap_or(0);
    let mut runs = BTreeSet::new();
    let mut latest = BTreeMap::new();
    for (id, name, run, _) in &steps[start..] {
        runs.insert(run.clone());
        latest.insert(name.clone(), id.clone());
    }
    lin.woke = runs.len() as u64;
    lin.request = latest.get(clarify).and_then(|sid| first_text(store, sid));
    lin.steps = latest;
    lin
}

fn is_judge(step: &str) -> bool {
    matches!(parse_step(step).1, StepForm::Judge(_))
}

/// The first user message's text of `sid`, trimmed (a clarification's first message is the
/// request it started from).
fn first_text(store: &dyn SessionStore, sid: &str) -> Option<String> {
    let first = store.load_raw(sid).ok()?.into_iter().next()?;
    if first.role != Speaker::User {
        return None;
    }
    let text: String = first
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::session::SessionMeta;

    fn session(
        store: &SqliteSessionStore,
        step: &str,
        role: Role,
        run: &str,
        first: &str,
    ) -> String {
        let id = store
            .create(&SessionMeta {
                agent: role.as_str().into(),
                role,
                step: Some(step.into()),
                parent: None,
                run: run.into(),
            })
            .unwrap();
        store
            .append(
                &id,
                &Message {
                    role: Speaker::User,
                    content: vec![ContentBlock::text(first)],
                },
                None,
            )
            .unwrap();
        id
    }

    #[test]
    fn a_garbage_lineage_is_moved_aside_and_rebuilt_from_the_sessions_of_the_stretch() {
        let d = tempfile::tempdir().unwrap();
        let store = SqliteSessionStore::open(d.path().join("sessions.db")).unwrap();
        // An earlier stretch (ended by --new), then the current one over two runs.
        session(&store, "确认需求", Role::Clarifier, "r0", "旧的事");
        session(&store, "干活", Role::Coordinator, "r0", "旧的活");
        let clarify = session(
            &store,
            "确认需求",
            Role::Clarifier,
            "r1",
            "  写个 hello.sh ",
        );
        let goal = session(&store, "设定目标", Role::Judge, "r1", "变成可判定的目标");
        session(&store, "干活", Role::Coordinator, "r1", "照这份需求做");
        session(&store, "干活·判定#1", Role::Judge, "r1", "判定这一轮");
        let work = session(
            &store,
            "干活#retry1",
            Role::Coordinator,
            "r2",
            "照这份需求做",
        );
        let lf = LineageFile::new(d.path().join("lineage.json"), d.path());
        std::fs::write(lf.path(), b"{\"workspace\": \"/x\", \"steps\": {garbage").unwrap();

        let said = check_lineage(&lf, &store, "确认需求");
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("坏了") && said[0].contains("原文件移到"),
            "{said:?}"
        );
        assert!(said[0].contains("干活、确认需求、设定目标"), "{said:?}");
        let lin = lf.load().expect("rebuilt");
        assert_eq!(lin.steps["确认需求"], clarify);
        assert_eq!(lin.steps["设定目标"], goal);
        assert_eq!(lin.steps["干活"], work, "the last attempt, never a judge");
        assert_eq!(lin.woke, 2);
        assert_eq!(lin.request.as_deref(), Some("写个 hello.sh"));
        let backups: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("lineage.json.corrupt-")
            })
            .collect();
        assert_eq!(backups.len(), 1, "the damaged file is kept");
        // Fine now: nothing more to say.
        assert!(check_lineage(&lf, &store, "确认需求").is_empty());
    }

    #[test]
    fn sessions_the_store_lacks_are_named() {
        let d = tempfile::tempdir().unwrap();
        let store = SqliteSessionStore::open(d.path().join("sessions.db")).unwrap();
        let lf = LineageFile::new(d.path().join("lineage.json"), d.path());
        let real = session(&store, "确认需求", Role::Clarifier, "r1", "x");
        lf.remember("确认需求", &real).unwrap();
        lf.remember("干活", "00000000-0000-0000-0000-000000000000")
            .unwrap();
        let said = check_lineage(&lf, &store, "确认需求");
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("查不到:干活"), "{said:?}");
    }

    #[test]
    fn a_damaged_store_goes_aside_only_when_damaged() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(set_aside_damaged_store(d.path()).unwrap(), None);
        let db = d.path().join("sessions.db");
        drop(SqliteSessionStore::open(&db).unwrap());
        assert_eq!(set_aside_damaged_store(d.path()).unwrap(), None, "intact");
        std::fs::write(&db, vec![0x5a; 8192]).unwrap();
        let said = set_aside_damaged_store(d.path()).unwrap().expect("moved");
        assert!(said.contains("坏了"), "{said}");
        assert!(!db.exists());
        assert!(SqliteSessionStore::open(&db).is_ok(), "a fresh one opens");
    }
}
