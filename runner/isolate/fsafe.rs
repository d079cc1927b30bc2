//! Race-free host access to directories an agent can write (DESIGN.md threat model 2): every
//! step below a trusted directory opens the next component from the handle of the one before
//! with `O_NOFOLLOW`, so a process left running in a container that swaps a directory for a
//! symlink mid-walk gets the symlink itself unlinked (or its read refused), never followed
//! into the host. The starting path is trusted: its parents are written by flowerbox only.

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Deepest directory nesting [`remove_tree`] descends (each level holds one descriptor).
const MAX_DEPTH: usize = 512;

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Opens the directory `path` (its last component is not followed; its parents are trusted).
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    openat(nix::fcntl::AT_FDCWD, path, dir_flags(), Mode::empty()).map_err(io)
}

/// Opens the directory `name` inside `dir` without following a symlink.
pub(crate) fn open_dir_at(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    openat(dir, name, dir_flags(), Mode::empty()).map_err(io)
}

/// The entries of `dir` (without `.` and `..`) with their type when the file system tells it.
pub(crate) fn entries(dir: &OwnedFd) -> io::Result<Vec<(OsString, Option<Type>)>> {
    let mut d = Dir::from_fd(dir.try_clone()?).map_err(io)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io)?;
        let name = e.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((OsStr::from_bytes(name).to_os_string(), e.file_type()));
    }
    Ok(out)
}

/// The regular file `name` in `dir`, open for reading; `None` when it is missing or not a
/// regular file (a symlink, a FIFO, a directory: never followed, and a FIFO never blocks).
pub(crate) fn open_regular_at(dir: impl AsFd, name: &OsStr) -> io::Result<Option<std::fs::File>> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR | Errno::ENXIO) => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let st = fstat(&fd).map_err(io)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(fd)))
}

/// The content of the regular file `name` in `dir` (see [`open_regular_at`]), at most `limit`
/// bytes.
///
/// # Errors
/// The file is longer than `limit`, or the read failed.
pub(crate) fn read_file_at(
    dir: impl AsFd,
    name: &OsStr,
    limit: u64,
) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_regular_at(dir, name)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    file.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(too_long(name, limit));
    }
    Ok(Some(buf))
}

fn too_long(name: &OsStr, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} 超过 {limit} 字节", name.to_string_lossy()),
    )
}

/// Removes `name` inside the trusted directory `parent` and everything below it, without
/// following any symlink (a symlink is unlinked itself). A missing `name` is fine.
pub(crate) fn remove_tree(parent: &Path, name: &OsStr) -> io::Result<()> {
    let p = open_dir(parent)?;
    remove_at(&p, name, 0)
}

fn remove_at(parent: &OwnedFd, name: &OsStr, depth: usize) -> io::Result<()> {
    match openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(dir) => {
            if depth >= MAX_DEPTH {
                return Err(io::Error::other(format!("目录嵌套超过 {MAX_DEPTH} 层")));
            }
            for (child, _) in entries(&dir)? {
                remove_at(&dir, &child, depth + 1)?;
            }
            match unlinkat(parent, name, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(io(e)),
            }
        }
        // Not a directory (a file, or a symlink `O_NOFOLLOW` refused): unlink the entry.
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            match unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => Ok(()),
                Err(e) => Err(io(e)),
            }
        }
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Copies the regular file `name` of `dir` to the new file `dest`, at most `limit` bytes;
/// returns the bytes copied, or `None` when `name` is not a regular file.
///
/// # Errors
/// The file is longer than `limit`; I/O failures.
pub(crate) fn copy_file_at(
    dir: impl AsFd,
    name: &OsStr,
    dest: &Path,
    limit: u64,
) -> io::Result<Option<u64>> {
    let Some(file) = open_regular_at(dir, name)? else {
        return Ok(None);
    };
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)?;
    let n = io::copy(&mut file.take(limit + 1), &mut out)?;
    if n > limit {
        return Err(too_long(name, limit));
    }
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn remove_tree_unlinks_symlinks_and_never_follows_them() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let outside = root.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "k").unwrap();
        let tree = root.join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), "f").unwrap();
        symlink(&outside, tree.join("a/link")).unwrap();
        symlink(outside.join("keep.txt"), tree.join("file-link")).unwrap();
        remove_tree(&root, OsStr::new("tree")).unwrap();
        assert!(!tree.exists());
        assert!(outside.join("keep.txt").is_file());
        // A symlink at the top is unlinked, not followed; a missing name is fine.
        symlink(&outside, root.join("top")).unwrap();
        remove_tree(&root, OsStr::new("top")).unwrap();
        assert!(outside.join("keep.txt").is_file() && !root.join("top").exists());
        remove_tree(&root, OsStr::new("absent")).unwrap();
    }

    #[test]
    fn reads_only_regular_files_within_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::write(root.join("f"), "hello").unwrap();
        std::fs::write(root.join("secret"), "s").unwrap();
        symlink(root.join("secret"), root.join("link")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), Mode::S_IRWXU).unwrap();
        let dir = open_dir(&root).unwrap();
        assert_eq!(
            read_file_at(&dir, OsStr::new("f"), 5).unwrap().unwrap(),
            b"hello"
        );
        assert!(read_file_at(&dir, OsStr::new("f"), 4).is_err());
        for name in ["link", "fifo", "absent"] {
            assert_eq!(
                read_file_at(&dir, OsStr::new(name), 99).unwrap(),
                None,
                "{name}"
            );
        }
        let names: Vec<_> = entries(&dir).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 4);
        symlink(&root, root.join("dirlink")).unwrap();
        assert!(open_dir_at(&dir, OsStr::new("dirlink")).is_err());
    }
}
