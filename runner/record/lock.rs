//! Cross-process file locks and atomic file replacement for `runs/manifest.json` and
//! `runs/lineage.json`.
//!
//! The lock is an advisory `flock` on a sibling `<file>.lock` (never on the data file itself,
//! which is replaced by rename on every write and would leave a waiting process holding a lock
//! on a dead inode). The kernel drops it when the holder dies, even by SIGKILL.
//!
//! The run directory lies in the workspace: every open here goes through
//! [`crate::fsroot::own`] (no symlink followed anywhere in the path, regular files only).

use super::RecordError;
use crate::fsroot::own;
use fs4::fs_std::FileExt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An exclusive lock held until dropped.
#[derive(Debug)]
pub struct FileLock {
    /// The open lock file; closing it releases the lock.
    file: File,
}

impl FileLock {
    /// Blocks until the exclusive lock on `<target>.lock` is held (creating the lock file and
    /// its directory when missing).
    ///
    /// # Errors
    /// [`RecordError::Io`] when the lock file cannot be created or locked.
    pub fn exclusive(target: &Path) -> Result<FileLock, RecordError> {
        let path = lock_path(target);
        let file = own::open_rw(&path).map_err(|e| RecordError::io(&path, e))?;
        FileExt::lock_exclusive(&file).map_err(|e| RecordError::io(&path, e))?;
        Ok(FileLock { file })
    }

    /// Takes the exclusive lock on `<target>.lock` without waiting and writes this process's
    /// pid into it; `Err(Busy(pid))` names the holder (its pid as it wrote it, 0 if unreadable).
    ///
    /// # Errors
    /// [`Held::Busy`] when another process holds it; [`Held::Io`] when the lock file cannot be
    /// created or locked.
    pub fn try_exclusive(target: &Path) -> Result<FileLock, Held> {
        let path = lock_path(target);
        let mut file = own::open_rw(&path).map_err(|e| Held::Io(RecordError::io(&path, e)))?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                let mut text = String::new();
                let pid = std::io::Read::read_to_string(&mut file, &mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok())
                    .unwrap_or(0);
                return Err(Held::Busy(pid));
            }
            Err(e) => return Err(Held::Io(RecordError::io(&path, e))),
        }
        // The pid is advice for the message only; failing to write it changes nothing.
        let _ = file
            .set_len(0)
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        Ok(FileLock { file })
    }
}

/// Why [`FileLock::try_exclusive`] did not get the lock.
#[derive(Debug)]
pub enum Held {
    /// Another live process holds it; its pid (0 when unknown).
    Busy(u32),
    /// The lock file could not be opened or locked.
    Io(RecordError),
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlocking first is just explicit.
        let _ = FileExt::unlock(&self.file);
    }
}

/// `<target>.lock`, next to the file it guards.
pub fn lock_path(target: &Path) -> PathBuf {
    let mut name = target
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".lock");
    target.with_file_name(name)
}

/// Replaces `path` with `bytes` atomically: a new file in the same directory is written,
/// fsynced and renamed over `path` (through one handle of the directory), then the directory is
/// fsynced so the rename survives a power cut.
///
/// # Errors
/// [`RecordError::Io`] for any step; `path` is then unchanged.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    own::write_durable(path, bytes)
        .map(|_| ())
        .map_err(|e| RecordError::io(path, e))
}

/// Moves an unusable file aside as `<name>.corrupt-<YYYYmmdd-HHMMSS>[-N]` and returns the new
/// path. Never overwrites an earlier backup.
///
/// # Errors
/// [`RecordError::Io`] when the rename fails.
pub fn move_aside(path: &Path) -> Result<PathBuf, RecordError> {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut n = 1;
    loop {
        let candidate = if n == 1 {
            path.with_file_name(format!("{name}.corrupt-{stamp}"))
        } else {
            path.with_file_name(format!("{name}.corrupt-{stamp}-{n}"))
        };
        match own::rename(path, &candidate, false) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(RecordError::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_file_sits_next_to_the_target() {
        assert_eq!(
            lock_path(Path::new("/a/runs/manifest.json")),
            PathBuf::from("/a/runs/manifest.json.lock")
        );
    }

    #[test]
    fn a_second_lock_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("runs/x.json");
        let first = FileLock::exclusive(&target).unwrap();
        let other = File::open(lock_path(&target)).unwrap();
        assert!(!FileExt::try_lock_exclusive(&other).unwrap());
        assert!(matches!(
            FileLock::try_exclusive(&target),
            Err(Held::Busy(_))
        ));
        drop(first);
        assert!(FileExt::try_lock_exclusive(&other).unwrap());
    }

    #[test]
    fn try_exclusive_names_the_holder_and_is_free_again_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("runs/go");
        let first = FileLock::try_exclusive(&target).unwrap();
        match FileLock::try_exclusive(&target) {
            Err(Held::Busy(pid)) => assert_eq!(pid, std::process::id()),
            other => panic!("{other:?}"),
        }
        drop(first);
        assert!(FileLock::try_exclusive(&target).is_ok());
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f.json")]);
    }

    #[test]
    fn move_aside_never_overwrites_a_backup() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        std::fs::write(&p, "1").unwrap();
        let a = move_aside(&p).unwrap();
        std::fs::write(&p, "2").unwrap();
        let b = move_aside(&p).unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read_to_string(a).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(b).unwrap(), "2");
        assert!(!p.exists());
    }
}
