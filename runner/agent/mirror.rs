//! The workbench on an engine that does not share this machine's disk (issue 30 §2): its
//! agents read the workbench's volume there, while flowerbox writes its notes (the brief, the
//! goal, the Q&A log, handoffs, the judges' records) and `INDEX.md` here. Before each step they
//! are copied into the volume through the run's file operations (a files keeper), so the step's
//! agents read what they would read locally. Only what flowerbox wrote here is copied (an
//! agent's file of the same name in the volume is replaced by flowerbox's); nothing comes back.

use std::path::PathBuf;

use super::workbench::Workbench;
use crate::fsroot::{own, View, ViewMount};
use crate::sandbox::files::MAX_FILE_BYTES;
use crate::sandbox::SandboxFiles;

/// Copies `wb`'s notes (`notes/`, not its archive) and `INDEX.md` from this machine into the
/// workbench as `files` holds it. Failures are logged: a step never stops over a note.
pub(super) async fn push_notes(wb: &Workbench, files: &dyn SandboxFiles) {
    let view = View::new(
        vec![ViewMount {
            path: wb.root().to_path_buf(),
            read_only: false,
        }],
        Vec::new(),
    );
    let mut paths: Vec<PathBuf> = vec![wb.index_path()];
    match own::entries(&wb.notes()) {
        Ok(entries) => paths.extend(
            entries
                .into_iter()
                .filter(|e| e.kind == rustix::fs::FileType::RegularFile)
                .map(|e| wb.notes().join(e.name)),
        ),
        Err(e) => tracing::warn!(error = %e, "listing the workbench's notes"),
    }
    for path in paths {
        let bytes = match own::read(&path, MAX_FILE_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "reading a note");
                continue;
            }
        };
        if let Err(e) = files.write(&view, &path, bytes).await {
            tracing::warn!(error = %e, path = %path.display(), "copying a note to the engine");
        }
    }
}
