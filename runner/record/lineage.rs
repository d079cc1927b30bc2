//! `runs/lineage.json` (seed 000, seed 001 "血缘"; flower `docs/en/guide/continuity.md`):
//! `{"workspace": …, "woke": N, "steps": {"步骤名": "session_id"}, "request": …}` — which session
//! each step used, so the next process resumes it, and the request the run started from.
//!
//! Unlike flower, updates are merged under a file lock (two parallel runs no longer overwrite
//! each other's steps) and written atomically. A file for another workspace, or one that does
//! not parse, means "no lineage", silently: continuity is a bonus whose failure must never stop
//! anyone from working.

use super::lock::{move_aside, write_atomic, FileLock};
use super::steps::base_name;
use super::{RecordError, RECORD_CAP};
use crate::fsroot::own;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The lineage document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// Absolute workspace path the sessions belong to.
    pub workspace: String,
    /// How many wakes have happened (1 on the first run).
    pub woke: u64,
    /// Plain step name → the last session of that step (the successor after handoffs).
    pub steps: BTreeMap<String, String>,
    /// The request the run started from (`go`), trimmed: the same request typed again after a
    /// crash is a plain wake, not something new the human said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Fields written by other versions, kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Lineage {
    /// An empty lineage for `workspace`.
    pub fn empty(workspace: &str) -> Self {
        Lineage {
            workspace: workspace.to_string(),
            woke: 0,
            steps: BTreeMap::new(),
            request: None,
            extra: Default::default(),
        }
    }
}

/// What [`LineageFile::health`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum LineageHealth {
    /// No file: a fresh directory (or one archived by `--new`).
    Missing,
    /// A lineage of this workspace.
    Fine(Lineage),
    /// A lineage of another workspace (the directory was copied): not this one's.
    OtherWorkspace(String),
    /// The file cannot be read or does not parse: why.
    Damaged(String),
}

/// Reads and updates one `lineage.json` for one workspace.
#[derive(Debug, Clone)]
pub struct LineageFile {
    /// `runs/lineage.json`.
    path: PathBuf,
    /// The workspace this process works in, as stored in the file.
    workspace: String,
}

impl LineageFile {
    /// `path` is `<run_dir>/lineage.json`; `workspace` is made absolute (canonical when it
    /// exists) so the same directory always compares equal.
    pub fn new(path: impl Into<PathBuf>, workspace: &Path) -> Self {
        let ws = std::fs::canonicalize(workspace)
            .or_else(|_| std::path::absolute(workspace))
            .unwrap_or_else(|_| workspace.to_path_buf());
        LineageFile {
            path: path.into(),
            workspace: ws.to_string_lossy().into_owned(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The workspace as stored.
    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    /// What the file holds, for a start that must tell a damaged file from a missing one.
    /// Writes nothing.
    pub fn health(&self) -> LineageHealth {
        match own::read(&self.path, RECORD_CAP) {
            Ok(None) => LineageHealth::Missing,
            Err(e) => LineageHealth::Damaged(e.to_string()),
            Ok(Some(bytes)) => match serde_json::from_slice::<Lineage>(&bytes) {
                Ok(l) if l.workspace == self.workspace => LineageHealth::Fine(l),
                Ok(l) => LineageHealth::OtherWorkspace(l.workspace),
                Err(e) => LineageHealth::Damaged(e.to_string()),
            },
        }
    }

    /// Replaces a file that does not parse with `rebuilt`, under the lock, after moving it
    /// aside; returns where the damaged file went. `Ok(None)` (nothing changed) when the file
    /// parses by now (another process repaired it first) or is gone.
    ///
    /// # Errors
    /// [`RecordError`] when the lock, the move or the write fails.
    pub fn replace_damaged(&self, rebuilt: &Lineage) -> Result<Option<PathBuf>, RecordError> {
        let _lock = FileLock::exclusive(&self.path)?;
        match own::read(&self.path, RECORD_CAP) {
            Ok(Some(bytes)) if serde_json::from_slice::<Lineage>(&bytes).is_ok() => {
                return Ok(None)
            }
            Ok(Some(_)) => {}
            Ok(None) => return Ok(None),
            Err(e) => return Err(RecordError::io(&self.path, e)),
        }
        let backup = move_aside(&self.path)?;
        let mut lin = rebuilt.clone();
        lin.workspace = self.workspace.clone();
        let mut bytes = crate::shown::json::to_vec_pretty(&lin).map_err(|e| RecordError::Json {
            path: self.path.clone(),
            source: e.into(),
        })?;
        bytes.push(b'\n');
        write_atomic(&self.path, &bytes)?;
        Ok(Some(backup))
    }

    /// The lineage of this workspace; `None` when the file is missing, unreadable, does not
    /// parse or belongs to another workspace. Writes nothing.
    pub fn load(&self) -> Option<Lineage> {
        let bytes = own::read(&self.path, RECORD_CAP).ok()??;
        let lin: Lineage = serde_json::from_slice(&bytes).ok()?;
        (lin.workspace == self.workspace).then_some(lin)
    }

    /// Applies `f` to the current lineage (an empty one when there is none for this workspace)
    /// under the lock, and writes the result atomically. A file that does not parse is moved
    /// aside silently first.
    ///
    /// # Errors
    /// [`RecordError`] when the lock, the backup or the write fails; the file is unchanged.
    pub fn update(&self, f: impl FnOnce(&mut Lineage)) -> Result<Lineage, RecordError> {
        let _lock = FileLock::exclusive(&self.path)?;
        let mut lin = match own::read(&self.path, RECORD_CAP) {
            Ok(Some(bytes)) => match serde_json::from_slice::<Lineage>(&bytes) {
                Ok(l) if l.workspace == self.workspace => l,
                Ok(_) => Lineage::empty(&self.workspace),
                Err(_) => {
                    move_aside(&self.path)?;
                    Lineage::empty(&self.workspace)
                }
            },
            Ok(None) => Lineage::empty(&self.workspace),
            Err(e) => return Err(RecordError::io(&self.path, e)),
        };
        f(&mut lin);
        let mut bytes = crate::shown::json::to_vec_pretty(&lin).map_err(|e| RecordError::Json {
            path: self.path.clone(),
            source: e.into(),
        })?;
        bytes.push(b'\n');
        write_atomic(&self.path, &bytes)?;
        Ok(lin)
    }

    /// Records that `step` now uses `session_id`. Suffixed names (`#retry`, `#round`,
    /// `·判定#`) are recorded under their plain name. Call it the moment a session id exists,
    /// not at the end of the step: a killed process runs no cleanup.
    ///
    /// # Errors
    /// As [`LineageFile::update`].
    pub fn remember(&self, step: &str, session_id: &str) -> Result<Lineage, RecordError> {
        let key = base_name(step).to_string();
        self.update(|l| {
            l.steps.insert(key, session_id.to_string());
        })
    }

    /// Counts one more wake; returns the new count (1 on the first run).
    ///
    /// # Errors
    /// As [`LineageFile::update`].
    pub fn wake(&self) -> Result<u64, RecordError> {
        Ok(self.update(|l| l.woke += 1)?.woke)
    }

    /// `--new` / `/new`: moves (never deletes) `lineage.json` into `into_dir`; returns where it
    /// went, or `None` when there was none.
    ///
    /// # Errors
    /// [`RecordError::Io`] when the directory cannot be created or the move fails.
    pub fn archive(&self, into_dir: &Path) -> Result<Option<PathBuf>, RecordError> {
        let _lock = FileLock::exclusive(&self.path)?;
        if !own::exists(&self.path) {
            return Ok(None);
        }
        own::create_dir_all(into_dir).map_err(|e| RecordError::io(into_dir, e))?;
        let dest = into_dir.join(
            self.path
                .file_name()
                .unwrap_or_else(|| super::layout::LINEAGE.as_ref()),
        );
        own::rename(&self.path, &dest, true).map_err(|e| RecordError::io(&self.path, e))?;
        Ok(Some(dest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, LineageFile) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("proj");
        std::fs::create_dir_all(&ws).unwrap();
        let lf = LineageFile::new(dir.path().join("proj/runs/lineage.json"), &ws);
        (dir, lf)
    }

    #[test]
    fn remember_and_wake_round_trip_in_the_seed_shape() {
        let (_dir, lf) = setup();
        assert_eq!(lf.load(), None);
        assert_eq!(lf.wake().unwrap(), 1);
        lf.remember("干活", "sid-1").unwrap();
        lf.remember("干活#round2", "sid-2").unwrap();
        lf.remember("干活·判定#1", "judge").unwrap();
        let lin = lf.load().unwrap();
        assert_eq!(lin.woke, 1);
        assert_eq!(lin.steps.len(), 1);
        assert_eq!(lin.steps["干活"], "judge");
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(lf.path()).unwrap()).unwrap();
        assert_eq!(v["workspace"], lf.workspace());
        assert_eq!(v["steps"]["干活"], "judge");
        assert_eq!(lf.wake().unwrap(), 2);
    }

    #[test]
    fn another_workspace_means_no_lineage_silently() {
        let (dir, lf) = setup();
        lf.remember("干活", "sid").unwrap();
        let other_ws = dir.path().join("copy");
        std::fs::create_dir_all(&other_ws).unwrap();
        let moved = LineageFile::new(lf.path(), &other_ws);
        assert_eq!(moved.load(), None);
        // Writing starts a fresh lineage for the new workspace.
        let lin = moved.remember("设定目标", "s2").unwrap();
        assert_eq!(lin.woke, 0);
        assert_eq!(lin.steps.keys().collect::<Vec<_>>(), vec!["设定目标"]);
    }

    #[test]
    fn a_corrupt_file_is_no_lineage_and_is_moved_aside_on_write() {
        let (_dir, lf) = setup();
        std::fs::create_dir_all(lf.path().parent().unwrap()).unwrap();
        std::fs::write(lf.path(), b"{\"workspace\": ").unwrap();
        assert_eq!(lf.load(), None);
        lf.remember("干活", "sid").unwrap();
        assert_eq!(lf.load().unwrap().steps["干活"], "sid");
        let backups = std::fs::read_dir(lf.path().parent().unwrap())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("lineage.json.corrupt-")
            })
            .count();
        assert_eq!(backups, 1);
    }

    #[test]
    fn unknown_fields_survive_an_update() {
        let (_dir, lf) = setup();
        std::fs::create_dir_all(lf.path().parent().unwrap()).unwrap();
        let doc = serde_json::json!({"workspace": lf.workspace(), "woke": 3, "steps": {}, "future": {"x": 1}});
        std::fs::write(lf.path(), serde_json::to_vec(&doc).unwrap()).unwrap();
        lf.remember("干活", "s").unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(lf.path()).unwrap()).unwrap();
        assert_eq!(v["future"]["x"], 1);
        assert_eq!(v["woke"], 3);
    }

    #[test]
    fn archive_moves_not_deletes() {
        let (dir, lf) = setup();
        let into = dir
            .path()
            .join("proj/.flower/notes/archive/20260101-000000");
        assert_eq!(lf.archive(&into).unwrap(), None);
        lf.remember("干活", "s").unwrap();
        let dest = lf.archive(&into).unwrap().unwrap();
        assert!(!lf.path().exists());
        assert!(std::fs::read_to_string(dest).unwrap().contains("干活"));
        assert_eq!(lf.load(), None);
    }
}
