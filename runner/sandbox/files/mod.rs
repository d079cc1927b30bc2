//! File operations on an agent's view, as operations of the run's backend (issue 30 §1): what
//! the file tools (`Read`, `Write`, `Edit`, `Glob`, `Grep`), their hints and the judge's content
//! identity do to the files agents work on. [`SandboxFactory::files`](super::SandboxFactory::files)
//! hands out the run's [`SandboxFiles`]; the local one, [`LocalFiles`], is the race-free
//! [`crate::fsroot`] view on this machine's disk, which the Docker and host backends share.
//!
//! Shaped for a backend whose engine does not see the caller's disk: each operation is whole
//! (a path as the agent wrote it, or a query, in; data out; never a handle or a callback), and
//! takes the agent's [`View`] as a description (its mounts with their rights, the masked
//! directories and the identities hidden with them, see [`View::mounts`], [`View::masked`]), so
//! a remote implementation can send the request to a process inside the sandbox (the exec
//! service beside the agent's container, or the pod's keeper for agents without one) which
//! builds the same view there and does the same walk with the same refusals: a path resolved
//! one component at a time from directory handles, never following a symlink out of a mount,
//! files opened `O_NOFOLLOW | O_NONBLOCK` and checked regular, writes as a new `O_EXCL` file
//! renamed within the directory's handle. Refusals come back as the same [`ViewError`]s.

pub mod identity;
mod local;
mod search;
pub mod wire;

pub use identity::{Exclusions, FileKey, WorkspaceIdentity};
pub use local::LocalFiles;
pub use search::{GrepMode, GrepQuery};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use thiserror::Error;

use crate::fsroot::{View, ViewError};

/// What an operation wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read or list.
    Read,
    /// Create or modify.
    Write,
}

/// Largest file a whole read loads: a container can make a sparse file of any size with one
/// `truncate -s`, and reading it whole would take the runner's memory with it.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why a file operation did not happen.
#[derive(Debug, Error)]
pub enum FilesError {
    /// The view refused the path or the file (outside the mounts, masked, read-only, a symlink
    /// that keeps changing, not a regular file, too large, missing).
    #[error(transparent)]
    View(#[from] ViewError),
    /// The query cannot run (a glob, regular expression or file type that does not parse).
    #[error("{0}")]
    Query(String),
    /// The operation could not be carried out (its task failed, the backend went).
    #[error("{0}")]
    Failed(String),
}

/// One exact string replacement (the `Edit` tool's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    /// The text to find.
    pub old: String,
    /// What replaces it.
    pub new: String,
    /// Every occurrence, rather than exactly one.
    pub all: bool,
}

/// Why an edit was not applied to a file that could be read.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum EditRefused {
    /// The file looks binary.
    #[error("binary")]
    Binary,
    /// The file is not UTF-8 text.
    #[error("not UTF-8")]
    NotUtf8,
    /// The text does not allow it.
    #[error(transparent)]
    Text(#[from] EditError),
}

/// Why an edit cannot be applied to a text (the message is for the model).
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum EditError {
    /// `old_string` is empty.
    #[error("old_string 是空的;新建文件用 Write")]
    Empty,
    /// `old_string` equals `new_string`.
    #[error("old_string 和 new_string 一样,没有要改的")]
    Unchanged,
    /// `old_string` does not occur.
    #[error("old_string 在文件里找不到(要逐字符一致,包括缩进和换行)")]
    NotFound,
    /// `old_string` occurs this many times and `replace_all` is off.
    #[error("old_string 在文件里出现了 {0} 次;多给些上下文让它唯一,或者用 replace_all")]
    NotUnique(usize),
    /// The edited text would pass [`MAX_FILE_BYTES`]: a short `old_string` replaced everywhere
    /// by a long `new_string` multiplies the file, and the runner builds it in memory.
    #[error("改完的文件会有 {0} 字节,超过 {max} 字节的上限;分几次改,或者用 Bash 生成它", max = MAX_FILE_BYTES)]
    TooLarge(u64),
}

/// Applies one edit to `text`: the new text and how many places changed.
pub fn apply_edit(text: &str, edit: &Edit) -> Result<(String, usize), EditError> {
    if edit.old.is_empty() {
        return Err(EditError::Empty);
    }
    if edit.old == edit.new {
        return Err(EditError::Unchanged);
    }
    let count = text.matches(edit.old.as_str()).count();
    match (count, edit.all) {
        (0, _) => Err(EditError::NotFound),
        (n, false) if n > 1 => Err(EditError::NotUnique(n)),
        (n, _) => {
            // Sized before it is built (`n` ≤ the text's length, so no overflow in u128).
            let size = text.len() as u128 - (n as u128) * (edit.old.len() as u128)
                + (n as u128) * (edit.new.len() as u128);
            if size > u128::from(MAX_FILE_BYTES) {
                return Err(EditError::TooLarge(u64::try_from(size).unwrap_or(u64::MAX)));
            }
            Ok((text.replace(edit.old.as_str(), &edit.new), n))
        }
    }
}

/// True when the bytes look binary: a NUL byte, or mostly invalid UTF-8, in the first 8 KiB.
pub fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return true;
    }
    let lossy = String::from_utf8_lossy(head);
    let bad = lossy.chars().filter(|&c| c == '\u{FFFD}').count();
    bad > 8 && bad * 10 > lossy.chars().count()
}

/// A file's contents as a read found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// A regular file's bytes.
    File(Vec<u8>),
    /// The path is a directory.
    Dir,
}

/// The file operations of one run's sandboxes. Every path is as the agent wrote it (absolute,
/// in its view); every answer names the resolved path, as the agent sees it.
#[async_trait]
pub trait SandboxFiles: Send + Sync {
    /// The contents of the file at `path` (at most [`MAX_FILE_BYTES`]); [`Access::Write`]
    /// refuses a file the agent could not write back.
    async fn read(
        &self,
        view: &View,
        path: &Path,
        access: Access,
    ) -> Result<(PathBuf, Contents), FilesError>;

    /// The first `n` bytes (at most) of the regular file at `path`.
    async fn head(
        &self,
        view: &View,
        path: &Path,
        n: usize,
    ) -> Result<(PathBuf, Vec<u8>), FilesError>;

    /// Replaces the file at `path` with `bytes` (created, with its directories, when missing)
    /// by renaming a new file over it; returns whether it existed.
    async fn write(
        &self,
        view: &View,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<(PathBuf, bool), FilesError>;

    /// Applies `edit` to the text file at `path` and writes it back as [`SandboxFiles::write`]
    /// does; the places changed, or why the file's text refused it.
    async fn edit(
        &self,
        view: &View,
        path: &Path,
        edit: &Edit,
    ) -> Result<(PathBuf, Result<usize, EditRefused>), FilesError>;

    /// The files beneath `base` whose path relative to it matches the glob `pattern` (`**`
    /// crosses directories), with their modification times; ignore files honoured as `rg`
    /// reads them, symlinks never followed. Returns the resolved base too.
    async fn glob(
        &self,
        view: &View,
        base: &Path,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<(PathBuf, SystemTime)>), FilesError>;

    /// `query`'s result lines beneath `base`, as `rg` would print them.
    async fn grep(
        &self,
        view: &View,
        base: &Path,
        query: &GrepQuery,
    ) -> Result<Vec<String>, FilesError>;

    /// The content identity of the tree at `root` (DESIGN.md invariant 8).
    async fn identity(
        &self,
        root: &Path,
        exclude: &Exclusions,
    ) -> std::io::Result<WorkspaceIdentity>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str, all: bool) -> Edit {
        Edit {
            old: old.into(),
            new: new.into(),
            all,
        }
    }

    #[test]
    fn unique_match_required() {
        assert_eq!(
            apply_edit("a b a", &edit("b", "c", false)).unwrap(),
            ("a c a".into(), 1)
        );
        assert!(apply_edit("a b a", &edit("a", "c", false))
            .unwrap_err()
            .to_string()
            .contains("2 次"));
        assert_eq!(
            apply_edit("a b a", &edit("a", "c", true)).unwrap(),
            ("c b c".into(), 2)
        );
        assert!(apply_edit("abc", &edit("x", "y", false)).is_err());
        assert!(apply_edit("abc", &edit("a", "a", false)).is_err());
        assert!(apply_edit("abc", &edit("", "y", false)).is_err());
        assert_eq!(
            apply_edit("汉字测试", &edit("字测", "X", false)).unwrap().0,
            "汉X试"
        );
    }

    /// A short text replaced everywhere by a long one is refused by its size, before it is
    /// built: 64 MiB read could otherwise become terabytes in the runner's memory.
    #[test]
    fn an_edit_past_the_file_cap_is_refused_unbuilt() {
        let text = "a\n".repeat(1 << 16);
        let big = "b".repeat(1 << 12);
        assert_eq!(
            apply_edit(&text, &edit("a", &big, true)),
            Err(EditError::TooLarge((1 << 16) * (1 << 12) + (1 << 16)))
        );
        assert!(apply_edit(&text, &edit("a", "bb", true)).is_ok());
    }

    #[test]
    fn binary_detection() {
        assert!(looks_binary(b"\x7fELF\x02\x01\x01\x00\x00"));
        assert!(!looks_binary("普通文本\nline two".as_bytes()));
        let junk: Vec<u8> = (0..200).map(|i| 0x80 + (i % 60) as u8).collect();
        assert!(looks_binary(&junk));
    }
}
