//! Spill on the spot (seed 001 "落盘"): a Bash/Read/Grep/Glob/WebFetch result of
//! [`SPILL_THRESHOLD`] characters or more is written to `<workbench>/spill/<sha256 16 hex>.txt`;
//! the context keeps a one-line pointer plus the first [`SPILL_PREVIEW`] characters. Reading a
//! spill file back is not spilled again (the caller checks that).

use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};

use crate::fsroot::own;

/// Characters at which a result is spilled.
pub const SPILL_THRESHOLD: usize = 4000;
/// Characters of the result kept in context after the pointer.
pub const SPILL_PREVIEW: usize = 400;

/// The spill file name of `text`: the first 16 hex digits of its SHA-256, `.txt`.
pub fn spill_name(text: &str) -> String {
    format!(
        "{}.txt",
        &hex::encode(Sha256::digest(text.as_bytes()))[..16]
    )
}

/// Writes `text` into `dir` (content-addressed, so the same text is written once) and returns
/// (path, the text that replaces it in context).
/// The spill directory is writable by workers: the file is written as a new file renamed
/// into place, never through whatever a worker put at its name.
pub fn spill(text: &str, dir: &Path) -> io::Result<(PathBuf, String)> {
    let path = dir.join(spill_name(text));
    if own::kind(&path) != Some(rustix::fs::FileType::RegularFile) {
        own::write(&path, text.as_bytes())?;
    }
    let chars = text.chars().count();
    let preview: String = text.chars().take(SPILL_PREVIEW).collect();
    let pointer = format!(
        "[结果共 {chars} 字符,已落盘到 {};要全文就用 Read 读它(读落盘文件不会再被落盘)]\n{preview}\n…",
        path.display()
    );
    Ok((path, pointer))
}

/// Spills `text` when it is at least [`SPILL_THRESHOLD`] characters; otherwise returns it as is.
pub fn maybe_spill(text: String, dir: &Path) -> String {
    if text.chars().count() < SPILL_THRESHOLD {
        return text;
    }
    match spill(&text, dir) {
        Ok((_, pointer)) => pointer,
        // Losing context economy is better than losing the result.
        Err(_) => text,
    }
}

/// Writes the spill file of `text` (when it would spill) into the workbench `wb` as `files`
/// holds it (the workbench's volume on an engine without this machine's disk), as a writer of
/// the workbench sees it. Failures are logged: the pointer still names the file here.
pub async fn spill_to(
    text: &str,
    wb: &super::workbench::Workbench,
    files: &dyn crate::sandbox::SandboxFiles,
) {
    if text.chars().count() < SPILL_THRESHOLD {
        return;
    }
    let view = crate::fsroot::View::new(
        vec![crate::fsroot::ViewMount {
            path: wb.root().to_path_buf(),
            read_only: false,
        }],
        Vec::new(),
    );
    let path = wb.spill().join(spill_name(text));
    if let Err(e) = files.write(&view, &path, text.as_bytes().to_vec()).await {
        tracing::warn!(error = %e, path = %path.display(), "spill into the engine's workbench");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_stay_large_ones_spill() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(maybe_spill("short".into(), d.path()), "short");
        let big = "汉".repeat(5000);
        let p = maybe_spill(big.clone(), d.path());
        assert!(p.starts_with("[结果共 5000 字符"));
        assert!(p.chars().count() < 600);
        let file = d.path().join(spill_name(&big));
        assert_eq!(std::fs::read_to_string(file).unwrap(), big);
        assert_eq!(spill_name(&big).len(), 20);
    }
}
