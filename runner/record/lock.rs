//! Cross-process file locks and atomic file replacement for `runs/manifest.json` and
//! `runs/lineage.json`.
//!
//! The lock is an advisory `flock` on a sibling `<file>.lock` (never on the data file itself,
//! which is replaced by rename on every write and would leave a waiting process holding a lock
//! on a dead inode). The kernel drops it when the holder dies, even by SIGKILL.

use super::RecordError;
use fs4::fs_std::FileExt;
use std::fs::{File, OpenOptions};
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
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| RecordError::io(dir, e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| RecordError::io(&path, e))?;
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
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Held::Io(RecordError::io(dir, e)))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Held::Io(RecordError::io(&path, e)))?;
        match FileExt::try_lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                let pid = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
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

/// Replaces `path` with `bytes` atomically: a temporary file in the same directory is written,
/// fsynced and renamed over `path`, then the directory is fsynced so the rename survives a
/// power cut.
///
/// # Errors
/// [`RecordError::Io`] for any step; `path` is then unchanged.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| RecordError::io(&dir, e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(
            ".{}.",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("tmp")
        ))
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| RecordError::io(&dir, e))?;
    tmp.write_all(bytes)
        .map_err(|e| RecordError::io(tmp.path(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| RecordError::io(tmp.path(), e))?;
    tmp.persist(path)
        .map_err(|e| RecordError::io(path, e.error))?;
    if let Ok(d) = File::open(&dir) {
        // Not every file system supports fsync on a directory; the rename already happened.
        let _ = d.sync_all();
    }
    Ok(())
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
        if !candidate.exists() {
            std::fs::rename(path, &candidate).map_err(|e| RecordError::io(path, e))?;
            return Ok(candidate);
        }
        n += 1;
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
