//! [`own_output_files`]: the files this process's own stdout and stderr end up in, so a run
//! whose output is redirected into the project (`flowerbox … > run.log`, `2>err`,
//! `| tee run.log`) does not see its own log as a change to the judged workspace (DESIGN.md
//! invariant 8).
//!
//! A file is named by its [`FileKey`] (device and inode), not its path: the path a shell opened
//! may be relative, renamed or reached through a link, the inode is what is being written.
//! - stdout/stderr redirected to a regular file: that file.
//! - stdout/stderr a pipe: the regular files that the processes *reading* that pipe hold open
//!   for writing (`| tee run.log`: tee's `run.log`), found through `/proc/<pid>/fd` and
//!   `fdinfo`. Only readers of our own pipe count, one level deep; a process we cannot inspect
//!   (another user's) is skipped.
//! - a terminal, `/dev/null`, a socket: nothing.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

pub use crate::sandbox::files::FileKey;

/// The regular files this process's stdout (fd 1) and stderr (fd 2) are written into, directly
/// or through a pipe's reader. Never fails: what cannot be inspected is left out.
pub fn own_output_files() -> Vec<FileKey> {
    let mut out = BTreeSet::new();
    let mut pipes = BTreeSet::new();
    for fd in [1, 2] {
        // `/proc/self/fd/N` follows the descriptor, whatever the file is called now.
        let Ok(meta) = fs::metadata(format!("/proc/self/fd/{fd}")) else {
            continue;
        };
        if meta.is_file() {
            out.insert(FileKey::of(&meta));
        } else if meta.file_type().is_fifo() {
            pipes.insert(meta.ino());
        }
    }
    if !pipes.is_empty() {
        out.extend(pipe_reader_files(
            Path::new("/proc"),
            &pipes,
            std::process::id(),
        ));
    }
    out.into_iter().collect()
}

/// The regular files open for writing in the processes (other than `me`) that hold one of
/// `pipes` open for reading, looked up under `proc` (`/proc`, or a fake tree in tests).
fn pipe_reader_files(proc: &Path, pipes: &BTreeSet<u64>, me: u32) -> Vec<FileKey> {
    let Ok(entries) = fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let dir = entry.path();
        let fds = open_fds(&dir);
        let reads_our_pipe = fds.iter().any(|(fd, target)| {
            pipe_inode(target).is_some_and(|ino| pipes.contains(&ino))
                && access_mode(&dir, fd) == Some(O_RDONLY)
        });
        if !reads_our_pipe {
            continue;
        }
        for (fd, _) in &fds {
            if !matches!(access_mode(&dir, fd), Some(m) if m != O_RDONLY) {
                continue;
            }
            if let Ok(meta) = fs::metadata(dir.join("fd").join(fd)) {
                if meta.is_file() {
                    out.push(FileKey::of(&meta));
                }
            }
        }
    }
    out
}

/// `(fd name, link target)` of every descriptor of the process at `dir`.
fn open_fds(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(dir.join("fd")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let target = fs::read_link(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                target.to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

/// The inode of a `pipe:[N]` link target.
fn pipe_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("pipe:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// `O_RDONLY`: the access mode 0.
const O_RDONLY: u32 = 0;

/// The access mode (`flags & O_ACCMODE`) of descriptor `fd` from `<dir>/fdinfo/<fd>`.
fn access_mode(dir: &Path, fd: &str) -> Option<u32> {
    let info = fs::read_to_string(dir.join("fdinfo").join(fd)).ok()?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?.trim();
    u32::from_str_radix(flags, 8).ok().map(|f| f & 0o3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    #[test]
    fn pipe_inode_parses_only_pipes() {
        assert_eq!(pipe_inode("pipe:[12345]"), Some(12345));
        assert_eq!(pipe_inode("socket:[1]"), None);
        assert_eq!(pipe_inode("/tmp/pipe:[1]"), None);
    }

    #[test]
    fn the_file_a_pipe_reader_writes_is_found() {
        // `x | tee run.log`: we hold the write end of tee's stdin; tee writes run.log.
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("run.log");
        let mut tee = Command::new("tee")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = tee.stdin.take().unwrap();
        stdin.write_all(b"line\n").unwrap();
        stdin.flush().unwrap();
        // tee has opened run.log once the first line is through.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while fs::read_to_string(&log).unwrap_or_default() != "line\n" {
            assert!(std::time::Instant::now() < deadline, "tee never wrote");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        use std::os::fd::AsRawFd;
        let pipe = fs::metadata(format!("/proc/self/fd/{}", stdin.as_raw_fd()))
            .unwrap()
            .ino();
        let found = pipe_reader_files(
            Path::new("/proc"),
            &BTreeSet::from([pipe]),
            std::process::id(),
        );
        let key = FileKey::of(&fs::metadata(&log).unwrap());
        assert!(found.contains(&key), "{found:?} lacks {key:?}");
        // Another pipe's readers are not ours.
        let other = pipe_reader_files(
            Path::new("/proc"),
            &BTreeSet::from([pipe + 1_000_000_007]),
            std::process::id(),
        );
        assert!(!other.contains(&key));
        drop(stdin);
        tee.wait().unwrap();
    }
}
