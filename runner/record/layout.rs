//! The names of the files and directories flowerbox keeps, in one place: the run directory
//! (`<workspace>/runs/` by default) with its records, and the workbench (`<workspace>/.flower/`).
//! Every path to them is made from these; `tests/one_home.rs` keeps the literals out of the
//! rest of the shipped code.

use std::path::{Path, PathBuf};

/// The run directory's name inside the workspace (`-r`'s default).
pub const RUN_DIR: &str = "runs";
/// The session store in the run directory.
pub const SESSIONS_DB: &str = "sessions.db";
/// The manifest (one row per step) in the run directory.
pub const MANIFEST: &str = "manifest.json";
/// The lineage (which session continues which step) in the run directory.
pub const LINEAGE: &str = "lineage.json";
/// The workbench's name inside the workspace; with `--isolate`, `.flower-<workspace name>`
/// beside it (`agent::Workbench::locate`).
pub const WORKBENCH: &str = ".flower";

/// `<workspace>/runs`: the run directory when `-r` is not given.
pub fn default_run_dir(workspace: &Path) -> PathBuf {
    workspace.join(RUN_DIR)
}

/// `<run_dir>/sessions.db`.
pub fn sessions_db(run_dir: &Path) -> PathBuf {
    run_dir.join(SESSIONS_DB)
}

/// `<run_dir>/manifest.json`.
pub fn manifest(run_dir: &Path) -> PathBuf {
    run_dir.join(MANIFEST)
}

/// `<run_dir>/lineage.json`.
pub fn lineage(run_dir: &Path) -> PathBuf {
    run_dir.join(LINEAGE)
}
