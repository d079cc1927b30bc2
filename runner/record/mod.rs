//! Run records that outlive any session (seed 000 "runs/"): the manifest and lineage, written
//! atomically under file locks; the handoff document (seed 001 "交接书"); step names, run
//! markers and cost totals.
//!
//! Files on disk outrank any model session (DESIGN.md invariant 2), so every write here is
//! "lock, re-read, merge, write a temp file in the same directory, fsync, rename": a process
//! killed at any instant leaves the previous or the next version, never half a file, and two
//! processes never overwrite each other's rows.

use std::path::PathBuf;
use thiserror::Error;

pub mod cost;
pub mod handoff;
pub mod layout;
pub mod lineage;
pub mod lock;
pub mod manifest;
pub mod owner;
pub mod steps;
pub mod unsaved;

pub use cost::{Cost, Totals};
pub use handoff::{context_window, handoff_threshold, window_for, Handoff};
pub use lineage::{Lineage, LineageFile, LineageHealth};
pub use manifest::{Manifest, ManifestEntry, Recovered};
pub use unsaved::Unsaved;

/// Largest record file (`manifest.json`, `lineage.json`) read: a corrupt or hostile file the
/// size of the disk must not take the runner's memory.
pub const RECORD_CAP: u64 = 256 * 1024 * 1024;

/// Failures writing or reading run records.
#[derive(Debug, Error)]
pub enum RecordError {
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be serialised, or a file read for inspection does not parse.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: JsonProblem,
    },
}

/// What is wrong with a record's JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonProblem {
    /// What serde said.
    #[error(transparent)]
    Serde(#[from] serde_json::Error),
    /// The file parses, but not as the JSON array a manifest is (what it is instead).
    #[error("expected a JSON array, found {0}")]
    NotArray(&'static str),
}

impl RecordError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RecordError::Io {
            path: path.into(),
            source,
        }
    }
}
