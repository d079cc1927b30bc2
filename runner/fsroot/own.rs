//! flowerbox's own files in places an agent can reach: the workbench (`notes/`, `INDEX.md`,
//! `spill/`, `artifacts/`), which workers mount read-write, and the run directory
//! (`sessions.db`, `manifest.json`, `lineage.json`, locks, the log, `aside/`), which lies in the
//! workspace and is masked in every container.
//!
//! flowerbox makes these paths canonical when it starts (the workspace, the run directory and
//! the workbench have no symlink in their paths then), so every later access resolves the whole
//! absolute path with no symlink anywhere (`openat2` from `/` with `RESOLVE_NO_SYMLINKS`, or the
//! same walk by hand): a worker that replaces a note, a directory of the workbench or the
//! workbench itself with a link to a host path gets the call refused, never followed. Files are
//! opened `O_NONBLOCK` and must be regular (a FIFO cannot hang the runner), and writes replace
//! through a new `O_EXCL` file renamed within the same directory handle.
//!
//! Relative paths are taken from the current directory (which the kernel reports canonical).

use rustix::fs::FileType;
use std::io;
use std::path::{Path, PathBuf};

use super::tree::{Entry, TempFile, Tree};

fn tree() -> Tree {
    Tree::new("/")
}

fn abs(path: &Path) -> io::Result<PathBuf> {
    std::path::absolute(path)
}

/// The bytes of the regular file `path`, at most `cap`; `None` when it does not exist.
pub fn read(path: &Path, cap: u64) -> io::Result<Option<Vec<u8>>> {
    Ok(tree().read(&abs(path)?, cap)?)
}

/// [`read`] as text (invalid UTF-8 replaced).
pub fn read_string(path: &Path, cap: u64) -> io::Result<Option<String>> {
    Ok(tree().read_string(&abs(path)?, cap)?)
}

/// At most the first `n` bytes of the regular file `path`; `None` when it does not exist.
pub fn read_head(path: &Path, n: usize) -> io::Result<Option<Vec<u8>>> {
    Ok(tree().read_head(&abs(path)?, n)?)
}

/// Replaces `path` with `bytes` (directories created); returns whether it existed. A symlink,
/// FIFO or socket at `path` is replaced, never followed or opened.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    Ok(tree().write(&abs(path)?, bytes)?)
}

/// [`write`], with the file and its directory fsynced.
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    Ok(tree().write_durable(&abs(path)?, bytes)?)
}

/// Writes `files` (name, bytes) into the directory `dir` as one batch; returns how many files
/// were written and what makes them durable (one sync for all of them, to run before anything
/// pointing to them is stored durably); see [`Tree::write_batch`].
pub fn write_batch(
    dir: &Path,
    files: &[(&str, &[u8])],
) -> io::Result<(usize, Option<super::BatchSync>)> {
    Ok(tree().write_batch(&abs(dir)?, files)?)
}

/// The first half of [`write_batch`]: `dir` created, every name checked, nothing written
/// (`None` when `files` is empty); see [`Tree::plan_batch`].
pub fn plan_batch(
    dir: &Path,
    files: Vec<(String, Vec<u8>)>,
) -> io::Result<Option<super::PendingBatch>> {
    Ok(tree().plan_batch(&abs(dir)?, files)?)
}

/// Appends `bytes` to the regular file `path` (created with its directories when missing);
/// returns whether it was created.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    Ok(tree().append(&abs(path)?, bytes)?)
}

/// Opens the regular file `path` for appending (created with its directories when missing);
/// returns it and whether it was created.
pub fn open_append(path: &Path) -> io::Result<(std::fs::File, bool)> {
    Ok(tree().open_append(&abs(path)?)?)
}

/// Opens the regular file `path` for reading and writing, created when missing, never
/// truncated.
pub fn open_rw(path: &Path) -> io::Result<std::fs::File> {
    Ok(tree().open_rw(&abs(path)?)?)
}

/// Creates the directory `path` and its parents.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    Ok(tree().create_dir_all(&abs(path)?)?)
}

/// The type of `path` (a symlink is reported, not followed); `None` when nothing is there or
/// a directory on the way is not a plain directory.
pub fn kind(path: &Path) -> Option<FileType> {
    tree().kind(&abs(path).ok()?).ok().flatten()
}

/// True when something (of any type) is at `path`.
pub fn exists(path: &Path) -> bool {
    kind(path).is_some()
}

/// True when `path` is a directory (not a symlink to one).
pub fn is_dir(path: &Path) -> bool {
    kind(path) == Some(FileType::Directory)
}

/// Moves `from` to `to` (`to`'s directory created); with `replace` false an existing `to` is
/// never overwritten (`AlreadyExists`).
pub fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    Ok(tree().rename(&abs(from)?, &abs(to)?, replace)?)
}

/// The entries of the directory `dir` (symlinks listed, not followed); empty when missing.
pub fn entries(dir: &Path) -> io::Result<Vec<Entry>> {
    Ok(tree().entries(&abs(dir)?)?)
}

/// A new temporary file in `dir` (created when missing), removed on drop unless persisted.
pub fn temp_file(dir: &Path) -> io::Result<TempFile> {
    Ok(tree().temp_file(&abs(dir)?)?)
}

/// Checks that `path` is a regular file or absent and that no directory on its way is a
/// symlink, for files a library opens by path itself (SQLite).
pub fn check_plain(path: &Path) -> io::Result<()> {
    Ok(tree().check_plain(&abs(path)?)?)
}

/// The (device, inode) of `path` (a symlink's own); `None` when it does not exist.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    let st = tree().status(&abs(path).ok()?).ok()??;
    Some((st.st_dev, st.st_ino))
}

/// The path flowerbox uses for a directory of its own (`path`, absolute): beneath `workspace`
/// as written, since a symlink there may be an agent's and is refused when used; elsewhere made
/// canonical now, at start, so the user's own symlinks (a home directory behind a link, `-r`
/// pointing through one) are resolved once and later accesses can refuse every symlink.
pub fn trusted_dir(path: &Path, workspace: &Path) -> PathBuf {
    if path.starts_with(workspace) {
        return path.to_path_buf();
    }
    let mut base = path;
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(base) {
            let mut out = c;
            out.extend(rest.iter().rev());
            return out;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                base = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_dirs_resolve_the_users_links_outside_the_workspace_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), ws.join("link")).unwrap();
        assert_eq!(
            trusted_dir(&root.join("link/runs/x"), &ws),
            root.join("real/runs/x")
        );
        assert_eq!(
            trusted_dir(&ws.join("link/runs"), &ws),
            ws.join("link/runs")
        );
        // ... and the link inside the workspace is refused when used.
        assert!(create_dir_all(&ws.join("link/runs")).is_err());
        assert!(!root.join("real/runs").exists());
    }
}
