//! The wake probe and the archive (seed 000 "唤醒探测", "--new"; seed 001 "唤醒"; flower
//! `wake_state()`, `Lineage.archive`).
//!
//! [`wake_state`] looks at a directory before anything runs and writes not one byte: is there
//! a complete brief (then this run continues the last one), how many checks has the goal, how
//! many wakes happened, which step used which session, which request the run started from.
//! It is asked once per invocation (the command line's start prompt and `go` act on the same
//! answer). [`archive_previous`] is `--new` /
//! `/new`: `lineage.json`, `需求.md` and `目标.md` are MOVED together into
//! `notes/archive/<YYYYmmdd-HHMMSS>/` — three faces of the same stretch of history; taking
//! only some would leave "the goal is there but the conversation is gone".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::brief::Brief;
use super::goal::Goal;
use crate::agent::Workbench;
use crate::fsroot::own;
use crate::record::{LineageFile, RecordError};

/// The brief's file name under `notes/`.
pub const BRIEF_FILE: &str = "需求.md";
/// The goal's file name under `notes/`.
pub const GOAL_FILE: &str = "目标.md";
/// The question-and-answer log's file name under `notes/`.
pub const QA_LOG_FILE: &str = "问答记录.md";

/// What the probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeState {
    /// The brief exists with all four sections: this run continues the last one.
    pub waking: bool,
    /// The workbench root (`<ws>/.flower`, or `<ws parent>/.flower-<name>` with `--isolate`).
    pub workbench: PathBuf,
    /// `<workbench>/notes/需求.md`.
    pub brief: PathBuf,
    /// `<workbench>/notes/目标.md`.
    pub goal: PathBuf,
    /// Checks in the goal; 0 without a goal.
    pub checks: usize,
    /// Wakes so far (lineage); 0 on a fresh directory.
    pub woke: u64,
    /// Step name → session id, as lineage recorded them (not checked against the store).
    pub steps: BTreeMap<String, String>,
    /// The request the run started from (lineage), trimmed.
    pub request: Option<String>,
}

impl WakeState {
    /// The state after `--new` moved brief, goal and lineage into the archive: a fresh
    /// directory with the same workbench.
    pub fn archived(self) -> WakeState {
        WakeState {
            waking: false,
            checks: 0,
            woke: 0,
            steps: BTreeMap::new(),
            request: None,
            ..self
        }
    }
}

/// The notes paths of a workbench root.
pub fn notes_paths(workbench: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let notes = Workbench::at(workbench).notes();
    (
        notes.join(BRIEF_FILE),
        notes.join(GOAL_FILE),
        notes.join(QA_LOG_FILE),
    )
}

/// Probes `workspace` (with `run_dir` holding `lineage.json`; `isolate` decides where the
/// workbench is). Reads only. A file that cannot be read counts as absent.
pub fn wake_state(workspace: &Path, run_dir: &Path, isolate: bool) -> WakeState {
    let workbench = Workbench::locate(workspace, isolate);
    let (brief, goal, _) = notes_paths(&workbench);
    let waking = brief_complete_at(&brief);
    let checks = match Goal::load(&goal) {
        Ok(Some(g)) => g.checks.len(),
        _ => 0,
    };
    let lineage = LineageFile::new(crate::record::layout::lineage(run_dir), workspace).load();
    let (woke, steps, request) =
        lineage.map_or((0, BTreeMap::new(), None), |l| (l.woke, l.steps, l.request));
    WakeState {
        waking,
        workbench,
        brief,
        goal,
        checks,
        woke,
        steps,
        request,
    }
}

fn brief_complete_at(path: &Path) -> bool {
    matches!(Brief::load(path), Ok(Some(b)) if b.is_complete())
}

/// `--new`: moves lineage, brief and goal into `notes/archive/<YYYYmmdd-HHMMSS>/` (a `-2`,
/// `-3`, … suffix when that directory exists). Returns the archive directory, or `None` when
/// there was nothing to move. `sessions.db` stays: it is the archive of every transcript.
///
/// # Errors
/// [`RecordError::Io`] when a move fails; what was moved before stays moved.
pub fn archive_previous(
    workspace: &Path,
    run_dir: &Path,
    workbench: &Path,
) -> Result<Option<PathBuf>, RecordError> {
    let lineage = LineageFile::new(crate::record::layout::lineage(run_dir), workspace);
    let (brief, goal, _) = notes_paths(workbench);
    let present: Vec<&PathBuf> = [&brief, &goal]
        .into_iter()
        .filter(|p| own::exists(p))
        .collect();
    if present.is_empty() && !own::exists(lineage.path()) {
        return Ok(None);
    }
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let base = Workbench::at(workbench).notes().join("archive");
    let mut dir = base.join(&stamp);
    let mut n = 1;
    while own::exists(&dir) {
        n += 1;
        dir = base.join(format!("{stamp}-{n}"));
    }
    own::create_dir_all(&dir).map_err(|e| RecordError::Io {
        path: dir.clone(),
        source: e,
    })?;
    lineage.archive(&dir)?;
    for p in present {
        let dest = dir.join(p.file_name().unwrap_or_default());
        own::rename(p, &dest, false).map_err(|e| RecordError::Io {
            path: p.clone(),
            source: e,
        })?;
    }
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRIEF: &str =
        "## 目标\n做 X\n## 验收标准\n跑得起来\n## 边界\n不做 Y\n## 未知与假设\n无人应答,假设 CLI\n";

    struct Dir {
        _t: tempfile::TempDir,
        ws: PathBuf,
        runs: PathBuf,
    }

    fn dir() -> Dir {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().canonicalize().unwrap().join("proj");
        std::fs::create_dir_all(&ws).unwrap();
        let runs = ws.join("runs");
        Dir { _t: t, ws, runs }
    }

    fn tree(root: &Path) -> Vec<String> {
        let mut out: Vec<String> = walk(root)
            .into_iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        out.sort();
        out
    }

    fn walk(p: &Path) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(p) else {
            return vec![];
        };
        rd.flat_map(|e| {
            let p = e.unwrap().path();
            let mut v = vec![p.clone()];
            v.extend(walk(&p));
            v
        })
        .collect()
    }

    #[test]
    fn fresh_directory_is_not_waking_and_nothing_is_written() {
        let d = dir();
        let st = wake_state(&d.ws, &d.runs, false);
        assert!(!st.waking);
        assert_eq!(st.workbench, d.ws.join(".flower"));
        assert_eq!(st.brief, d.ws.join(".flower/notes/需求.md"));
        assert_eq!((st.checks, st.woke), (0, 0));
        assert!(st.steps.is_empty());
        assert!(tree(&d.ws).is_empty(), "{:?}", tree(&d.ws));
        assert!(!brief_complete_at(&st.brief));
    }

    #[test]
    fn complete_brief_goal_and_lineage_are_seen_read_only() {
        let d = dir();
        let (brief, goal, _) = notes_paths(&d.ws.join(".flower"));
        std::fs::create_dir_all(brief.parent().unwrap()).unwrap();
        std::fs::write(&brief, "## 目标\n做 X\n").unwrap();
        assert!(
            !wake_state(&d.ws, &d.runs, false).waking,
            "incomplete brief"
        );
        std::fs::write(&brief, BRIEF).unwrap();
        std::fs::write(&goal, "# 目标\n做 X\n# 判定清单\n- 跑 a\n- 看到 b\n").unwrap();
        let lf = LineageFile::new(crate::record::layout::lineage(&d.runs), &d.ws);
        lf.wake().unwrap();
        lf.remember("干活", "sid-1").unwrap();
        let before = tree(&d.ws);
        let st = wake_state(&d.ws, &d.runs, false);
        assert!(st.waking);
        assert_eq!((st.checks, st.woke), (2, 1));
        assert_eq!(st.steps["干活"], "sid-1");
        assert_eq!(tree(&d.ws), before, "the probe wrote something");
        assert!(brief_complete_at(&notes_paths(&d.ws.join(".flower")).0));
    }

    #[test]
    fn isolate_moves_the_workbench_outside() {
        let d = dir();
        let st = wake_state(&d.ws, &d.runs, true);
        assert_eq!(st.workbench, d.ws.parent().unwrap().join(".flower-proj"));
    }

    #[test]
    fn archive_moves_the_three_files_together() {
        let d = dir();
        let wb = d.ws.join(".flower");
        assert_eq!(archive_previous(&d.ws, &d.runs, &wb).unwrap(), None);
        let (brief, goal, log) = notes_paths(&wb);
        std::fs::create_dir_all(brief.parent().unwrap()).unwrap();
        std::fs::write(&brief, BRIEF).unwrap();
        std::fs::write(&goal, "# 目标\nx\n").unwrap();
        std::fs::write(&log, "q").unwrap();
        LineageFile::new(crate::record::layout::lineage(&d.runs), &d.ws)
            .remember("干活", "s")
            .unwrap();
        let into = archive_previous(&d.ws, &d.runs, &wb).unwrap().unwrap();
        assert!(into.starts_with(wb.join("notes/archive")));
        let name = into.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            crate::record::steps::is_run_marker(&format!("{name}-abcdef")),
            "{name}"
        );
        for f in [BRIEF_FILE, GOAL_FILE, crate::record::layout::LINEAGE] {
            assert!(into.join(f).exists(), "{f}");
        }
        assert!(
            !brief.exists() && !goal.exists() && !crate::record::layout::lineage(&d.runs).exists()
        );
        assert!(log.exists(), "the Q&A log stays");
        let st = wake_state(&d.ws, &d.runs, false);
        assert!(!st.waking && st.woke == 0 && st.steps.is_empty());
        // A second archive in the same second gets its own directory.
        std::fs::write(&brief, BRIEF).unwrap();
        let again = archive_previous(&d.ws, &d.runs, &wb).unwrap().unwrap();
        assert_ne!(again, into);
        assert!(again.join(BRIEF_FILE).exists());
    }

    #[test]
    fn the_probe_reads_the_recorded_request_and_an_archive_makes_it_fresh() {
        let d = dir();
        let (brief, _, _) = notes_paths(&d.ws.join(".flower"));
        std::fs::create_dir_all(brief.parent().unwrap()).unwrap();
        std::fs::write(&brief, BRIEF).unwrap();
        let lf = LineageFile::new(crate::record::layout::lineage(&d.runs), &d.ws);
        lf.update(|l| l.request = Some("做 X".into())).unwrap();
        lf.wake().unwrap();
        let st = wake_state(&d.ws, &d.runs, false);
        assert!(st.waking);
        assert_eq!(st.request.as_deref(), Some("做 X"));
        assert_eq!(st.woke, 1);
        let fresh = st.clone().archived();
        assert!(!fresh.waking && fresh.request.is_none() && fresh.woke == 0);
        assert_eq!((fresh.workbench, fresh.brief), (st.workbench, st.brief));
    }
}
