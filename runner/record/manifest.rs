//! `runs/manifest.json` (seed 000 "它在项目里创建了什么", seed 001 "运行清单"): a JSON array
//! with one row per step, accumulated across processes.
//!
//! Each process owns the rows carrying its run marker. Every write takes the file lock,
//! re-reads the file, replaces this process's rows with the current ones and keeps everyone
//! else's exactly as they were (as JSON values, so fields a newer or older writer added
//! survive), then replaces the file atomically. A file that does not parse is moved aside and
//! reported — never silently reset.

use super::lock::{move_aside, write_atomic, FileLock};
use super::{JsonProblem, RecordError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The `error` of a step that was in flight when SIGTERM/SIGHUP arrived (seed 000).
pub const KILLED_BY_SIGNAL: &str = "killed-by-signal";

/// The `error` of a step whose process ended before the step did and could not say so
/// (`kill -9`, a crash, power loss): the row as written while the step was in flight.
pub const CUT_OFF: &str = "interrupted";

/// One manifest row: every field of flower's `StepResult` plus `duration_s` and `run`, in the
/// seed's order. Unknown values are `null`, never zero (DESIGN.md invariant 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Step name in one of the four forms ([`super::steps`]).
    pub step: String,
    /// The session alive at the end of the step (the last successor after handoffs).
    pub session_id: Option<String>,
    /// Whether the step succeeded.
    pub ok: bool,
    /// What the step cost in USD, accumulated across retries and handoffs; `null` when any
    /// part of it is unknown.
    pub cost_usd: Option<f64>,
    /// Model turns, accumulated across retries and handoffs.
    pub num_turns: u64,
    /// The step's final reply.
    pub text: String,
    /// Why it failed (`killed-by-signal` when a signal stopped it).
    pub error: Option<String>,
    /// Start, in epoch seconds.
    pub started_at: f64,
    /// End, in epoch seconds; `null` while in flight (a process cut off never ended it).
    pub ended_at: Option<f64>,
    /// Attempts made; handoffs do not count, failed attempts do.
    pub attempts: u32,
    /// Failure reasons of every attempt (and `交接降级(…)` notes); never shown to the model.
    pub errors: Vec<String>,
    /// Whether the step resumed an earlier session instead of starting fresh.
    pub resumed: bool,
    /// Session ids retired by handoffs in this step, in order.
    pub retired: Vec<String>,
    /// Context size the main thread saw on its last turn, in tokens; `null` when unknown.
    pub context: Option<u64>,
    /// `ended_at - started_at`, in seconds; `null` while `ended_at` is.
    pub duration_s: Option<f64>,
    /// The writing process's run marker (`YYYYmmdd-HHMMSS-<6 hex>`).
    pub run: String,
    /// The disk the run's agents had added when the row was written (bytes: growth of the
    /// workspace, worktrees and workbench, plus the live containers' writable layers; see
    /// [`DiskGauge`]); absent when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// A judged round's gates (issue 27): absent on every other row, so flower's rows read
    /// the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<RoundChecks>,
}

/// The run's disk use as last measured by its watcher, shared with whoever writes rows.
#[derive(Debug, Default)]
pub struct DiskGauge(std::sync::atomic::AtomicU64);

impl DiskGauge {
    /// Records a measurement (bytes).
    pub fn set(&self, bytes: u64) {
        // Stored plus one: zero means "not measured yet".
        self.0.store(
            bytes.saturating_add(1),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The last measurement, if any.
    pub fn get(&self) -> Option<u64> {
        self.0
            .load(std::sync::atomic::Ordering::Relaxed)
            .checked_sub(1)
    }
}

/// What the gates of one judged round found, on the judge's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundChecks {
    /// Checks that passed.
    pub passed: usize,
    /// Checks run.
    pub total: usize,
    /// The candidate's content identity they ran on (hex); `null` when it could not be read.
    pub identity: Option<String>,
    /// The ids of the red ones.
    pub failed: Vec<String>,
    /// The judge's own conclusion when a red check overruled it (`ACHIEVED`), kept for
    /// audit; `null` when the verdict stands as the judge gave it.
    pub overruled: Option<String>,
    /// The round's probe (`--probe-checks`), when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<RoundProbe>,
}

/// A probe of one round's green checks: a defect planted in a copy of the candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundProbe {
    /// `caught`, `missed` or `inconclusive`.
    pub outcome: String,
    /// Where the defect was planted (`src/http.c:42`); `null` when none was.
    pub site: Option<String>,
    /// What it was (`` `src/http.c:42` 的 `==` 换成 `!=` ``).
    pub mutation: Option<String>,
    /// The checks that turned red.
    pub caught_by: Vec<String>,
    /// Milliseconds the probe took.
    pub millis: u64,
}

impl ManifestEntry {
    /// A row for a step starting now: not ok yet, nothing spent, nothing known.
    pub fn begin(step: impl Into<String>, run: impl Into<String>) -> Self {
        let t = epoch_now();
        ManifestEntry {
            step: step.into(),
            session_id: None,
            ok: false,
            cost_usd: Some(0.0),
            num_turns: 0,
            text: String::new(),
            error: None,
            started_at: t,
            ended_at: Some(t),
            attempts: 0,
            errors: Vec::new(),
            resumed: false,
            retired: Vec::new(),
            context: None,
            duration_s: Some(0.0),
            run: run.into(),
            disk_bytes: None,
            checks: None,
        }
    }

    /// Sets `ended_at` and the matching `duration_s`.
    pub fn end_at(&mut self, ended_at: f64) {
        self.ended_at = Some(ended_at);
        self.duration_s = Some(((ended_at - self.started_at).max(0.0) * 100.0).round() / 100.0);
    }

    /// The row as it must read if the process dies before the step ends (DESIGN.md invariant
    /// 7): not ok, error [`CUT_OFF`], and what only the end would know — cost, end,
    /// duration — unknown (`null`), never zero.
    pub fn in_flight(mut self) -> Self {
        self.ok = false;
        self.error = Some(CUT_OFF.to_string());
        self.cost_usd = None;
        self.ended_at = None;
        self.duration_s = None;
        self
    }

    /// Adds one call's cost: an unknown cost makes the step's cost unknown for good.
    #[cfg(test)]
    pub(crate) fn add_cost(&mut self, usd: Option<f64>) {
        self.cost_usd = match (self.cost_usd, usd) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
}

/// Seconds since the Unix epoch, with sub-second precision.
pub fn epoch_now() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_secs_f64()
}

/// An unparseable manifest was moved aside before writing a fresh one. Show it to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The manifest that did not parse.
    pub path: PathBuf,
    /// Where its bytes are now.
    pub backup: PathBuf,
    /// What the parser said.
    pub reason: String,
}

impl fmt::Display for Recovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "运行清单 {} 无法解析({}),原文件已移到 {},从这次开始重新记账",
            self.path.display(),
            self.reason,
            self.backup.display()
        )
    }
}

/// This process's manifest writer. Share it (`Arc`) across the steps of one process; other
/// processes have their own with their own run marker.
#[derive(Debug)]
pub struct Manifest {
    /// `runs/manifest.json`.
    path: PathBuf,
    /// This process's run marker.
    run: String,
    /// This process's rows, in the order first recorded. The mutex also serialises writers
    /// inside the process (the file lock serialises processes).
    rows: Mutex<Vec<ManifestEntry>>,
}

impl Manifest {
    /// A writer for `path` owning the rows marked `run`. Touches no file.
    pub fn new(path: impl Into<PathBuf>, run: impl Into<String>) -> Self {
        Manifest {
            path: path.into(),
            run: run.into(),
            rows: Mutex::new(Vec::new()),
        }
    }

    /// The manifest file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's run marker.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// This process's rows as last recorded.
    pub fn rows(&self) -> Vec<ManifestEntry> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `entry` (its `run` is set to this process's marker): replaces this process's
    /// row with the same `step`, or appends it; then writes the file.
    ///
    /// # Errors
    /// [`RecordError`] when the file cannot be locked, backed up or written; the row stays
    /// recorded in memory and goes out with the next successful write.
    pub fn record(&self, mut entry: ManifestEntry) -> Result<Option<Recovered>, RecordError> {
        entry.run = self.run.clone();
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        match rows.iter_mut().find(|r| r.step == entry.step) {
            Some(r) => *r = entry,
            None => rows.push(entry),
        }
        self.write_locked(&rows)
    }

    /// Changes this process's row of `step` with `f` and writes the file; `Ok(None)` without
    /// writing when there is no such row.
    ///
    /// # Errors
    /// As [`Manifest::record`].
    pub fn amend(
        &self,
        step: &str,
        f: impl FnOnce(&mut ManifestEntry),
    ) -> Result<Option<Recovered>, RecordError> {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        let Some(row) = rows.iter_mut().find(|r| r.step == step) else {
            return Ok(None);
        };
        f(row);
        self.write_locked(&rows)
    }

    /// Writes this process's rows again (merging with the file as it is now).
    ///
    /// # Errors
    /// As [`Manifest::record`].
    pub fn flush(&self) -> Result<Option<Recovered>, RecordError> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        self.write_locked(&rows)
    }

    fn write_locked(&self, mine: &[ManifestEntry]) -> Result<Option<Recovered>, RecordError> {
        let _lock = FileLock::exclusive(&self.path)?;
        let (existing, recovered) = match read_rows(&self.path) {
            Ok(rows) => (rows, None),
            Err(ReadError::Io(e)) => return Err(RecordError::io(&self.path, e)),
            Err(ReadError::Unparseable(problem)) => {
                let backup = move_aside(&self.path)?;
                (
                    Vec::new(),
                    Some(Recovered {
                        path: self.path.clone(),
                        backup,
                        reason: problem.to_string(),
                    }),
                )
            }
        };
        let mut merged: Vec<Row<'_>> = existing
            .iter()
            .filter(|row| row.get("run").and_then(Value::as_str) != Some(self.run.as_str()))
            .map(Row::Theirs)
            .collect();
        merged.extend(mine.iter().map(Row::Mine));
        // Step names, errors and summaries quote agents and models: risky characters escaped.
        let mut bytes =
            crate::shown::json::to_vec_pretty(&merged).map_err(|e| json_err(&self.path, e))?;
        bytes.push(b'\n');
        write_atomic(&self.path, &bytes)?;
        Ok(recovered)
    }
}

/// A row as written: other processes' rows as read, this process's in the seed's field order.
#[derive(Serialize)]
#[serde(untagged)]
enum Row<'a> {
    Theirs(&'a Value),
    Mine(&'a ManifestEntry),
}

fn json_err(path: &Path, e: serde_json::Error) -> RecordError {
    RecordError::Json {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

enum ReadError {
    Io(std::io::Error),
    Unparseable(JsonProblem),
}

/// The rows of the file; a missing file is empty.
fn read_rows(path: &Path) -> Result<Vec<Value>, ReadError> {
    let bytes = match crate::fsroot::own::read(path, super::RECORD_CAP) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(ReadError::Io(e)),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(rows)) => Ok(rows),
        Ok(other) => Err(ReadError::Unparseable(JsonProblem::NotArray(kind_of(
            &other,
        )))),
        Err(e) => Err(ReadError::Unparseable(e.into())),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads every row of a manifest (all processes), for inspection and totals. Rows that are not
/// valid [`ManifestEntry`] values are skipped; a missing file is empty.
///
/// # Errors
/// [`RecordError::Io`], or [`RecordError::Json`] when the file is not a JSON array.
pub fn read_manifest(path: &Path) -> Result<Vec<ManifestEntry>, RecordError> {
    match read_rows(path) {
        Ok(rows) => Ok(rows
            .into_iter()
            .filter_map(|r| serde_json::from_value(r).ok())
            .collect()),
        Err(ReadError::Io(e)) => Err(RecordError::io(path, e)),
        Err(ReadError::Unparseable(source)) => Err(RecordError::Json {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(step: &str) -> ManifestEntry {
        ManifestEntry::begin(step, "ignored")
    }

    #[test]
    fn rows_serialise_with_the_seeds_fields_in_order_and_null_for_unknown() {
        let mut e = entry("干活");
        e.started_at = 100.0;
        e.add_cost(Some(0.5));
        e.add_cost(None);
        e.end_at(112.5);
        let v = serde_json::to_value(&e).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = vec![
            "step",
            "session_id",
            "ok",
            "cost_usd",
            "num_turns",
            "text",
            "error",
            "started_at",
            "ended_at",
            "attempts",
            "errors",
            "resumed",
            "retired",
            "context",
            "duration_s",
            "run",
        ];
        // serde_json's map is sorted; compare as sets, and check order on the text.
        let mut sorted = keys.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected);
        assert_eq!(v["cost_usd"], Value::Null);
        assert_eq!(v["context"], Value::Null);
        assert_eq!(v["duration_s"], json!(12.5));
        // In flight: what only the end knows is unknown, and the error says it was cut off.
        let flying = serde_json::to_value(entry("干活").in_flight()).unwrap();
        assert_eq!(flying["ok"], false);
        assert_eq!(flying["error"], "interrupted");
        assert_eq!(flying["cost_usd"], Value::Null);
        assert_eq!(flying["ended_at"], Value::Null);
        assert_eq!(flying["duration_s"], Value::Null);
        let text = serde_json::to_string(&e).unwrap();
        assert!(
            text.starts_with(
                r#"{"step":"干活","session_id":null,"ok":false,"cost_usd":null,"num_turns":0"#
            ),
            "{text}"
        );
        assert!(
            text.ends_with(r#""context":null,"duration_s":12.5,"run":"ignored"}"#),
            "{text}"
        );
    }

    #[test]
    fn record_replaces_own_rows_and_keeps_everyone_elses_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs/manifest.json");
        let foreign = json!([
            {"step": "确认需求", "run": "20200101-000000-aaaaaa", "extra_field": [1, 2], "cost_usd": 0.25},
            "not even an object"
        ]);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&foreign).unwrap()).unwrap();

        let m = Manifest::new(&path, "20260101-120000-bbbbbb");
        let mut a = entry("干活");
        assert_eq!(m.record(a.clone()).unwrap(), None);
        a.ok = true;
        a.text = "done".into();
        m.record(a).unwrap();
        m.record(entry("干活·判定#1")).unwrap();

        let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0], foreign[0]);
        assert_eq!(rows[1], foreign[1]);
        assert_eq!(rows[2]["step"], "干活");
        assert_eq!(rows[2]["ok"], true);
        assert_eq!(rows[2]["run"], "20260101-120000-bbbbbb");
        assert_eq!(rows[3]["step"], "干活·判定#1");
        assert_eq!(m.rows().len(), 2);
        // This process's rows keep the seed's field order in the file.
        let text = std::fs::read_to_string(&path).unwrap();
        let at = |needle: &str| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {text}"))
        };
        let start = at("\"step\": \"干活\"");
        assert!(
            start < at("\"session_id\": null")
                && at("\"session_id\": null") < at("\"run\": \"20260101")
        );
        assert_eq!(read_manifest(&path).unwrap().len(), 2);
    }

    #[test]
    fn amend_changes_one_of_this_processs_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        let m = Manifest::new(&path, "r");
        let mut e = entry("确认需求");
        e.ok = true;
        m.record(e).unwrap();
        m.amend("确认需求", |r| {
            r.ok = false;
            r.error = Some("需求确认书不完整,缺:边界".into());
        })
        .unwrap();
        assert_eq!(m.amend("没有这步", |r| r.ok = true).unwrap(), None);
        let rows = read_manifest(&path).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(!rows[0].ok);
        assert_eq!(rows[0].error.as_deref(), Some("需求确认书不完整,缺:边界"));
    }

    #[test]
    fn an_unparseable_manifest_is_backed_up_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        std::fs::write(&path, b"[{\"step\": \"half").unwrap();
        let m = Manifest::new(&path, "r");
        let rec = m
            .record(entry("干活"))
            .unwrap()
            .expect("must report the recovery");
        assert_eq!(std::fs::read(&rec.backup).unwrap(), b"[{\"step\": \"half");
        assert!(rec
            .backup
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("manifest.json.corrupt-"));
        assert!(rec.to_string().contains("无法解析"), "{rec}");
        assert_eq!(read_manifest(&path).unwrap().len(), 1);
        // The next write finds a valid file and reports nothing.
        assert_eq!(m.flush().unwrap(), None);

        // Valid JSON that is not an array is just as unusable.
        std::fs::write(&path, b"{\"rows\": []}").unwrap();
        let rec = m.flush().unwrap().expect("object instead of array");
        assert!(rec.reason.contains("array"), "{}", rec.reason);
    }
}
