//! The system calls under [`super::Tree`] and [`super::View`], on directory handles (rustix):
//! one path component at a time with `O_NOFOLLOW`, or a relative path through `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` (the same walk by hand where
//! the kernel or a seccomp profile refuses `openat2`). Nothing here ever resolves a path string
//! from the file system root except [`open_trusted_dir`], which callers use only for directories
//! no agent can replace.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::FsError;

/// Flags every open with `flags` carries: closed on exec, the last component never followed,
/// no controlling terminal (`openat2` refuses any other flag beside `O_PATH`).
fn base_flags(flags: OFlags) -> OFlags {
    if flags.contains(OFlags::PATH) {
        OFlags::NOFOLLOW | OFlags::CLOEXEC
    } else {
        OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY
    }
}

/// `O_PATH | O_DIRECTORY`: a handle to walk from, no read permission needed.
pub(crate) fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY
}

/// `O_RDONLY | O_DIRECTORY`: a handle whose entries can be listed.
pub(crate) fn listable_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY
}

/// `O_RDONLY | O_NONBLOCK`: a FIFO or a device cannot block the opener.
pub(crate) fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK
}

/// Checks that `name` is one plain path component.
pub(crate) fn check_name(name: &OsStr) -> Result<(), FsError> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(FsError::Io(std::io::Error::from(
            std::io::ErrorKind::InvalidInput,
        )));
    }
    Ok(())
}

/// Opens a directory the host trusts (symlinks in its path are the user's, and no agent can
/// replace any of its components) as an `O_PATH` handle.
pub(crate) fn open_trusted_dir(path: &Path) -> Result<OwnedFd, FsError> {
    Ok(rustix::fs::open(
        path,
        dir_flags() | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the single component `name` of `dir` with `flags`, never following a symlink there
/// (`ELOOP` for a link, `ENOTDIR` for an `O_PATH | O_DIRECTORY` open of a link).
pub(crate) fn open_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: u32,
) -> Result<OwnedFd, FsError> {
    check_name(name)?;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags | base_flags(flags),
        Mode::from_raw_mode(mode),
    )?)
}

/// Set once `openat2` answered `ENOSYS`: the walk is done by hand from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The plain components of the relative path `rel` (`.` dropped); `Err` for `..` or an
/// absolute path.
pub(crate) fn plain_components(rel: &Path) -> Result<Vec<&OsStr>, FsError> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(FsError::Outside),
        }
    }
    Ok(out)
}

/// Opens the relative path `rel` beneath `dir` with `flags`, refusing every symlink on the way
/// (`ELOOP`), `..` and absolute paths: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`, or the same walk component by component.
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: u32,
) -> Result<OwnedFd, FsError> {
    let parts = plain_components(rel)?;
    if parts.is_empty() {
        return Ok(rustix::fs::openat(
            dir,
            ".",
            flags | base_flags(flags),
            Mode::from_raw_mode(mode),
        )?);
    }
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        for _ in 0..4 {
            match rustix::fs::openat2(
                dir,
                rel,
                flags | base_flags(flags),
                Mode::from_raw_mode(mode),
                resolve,
            ) {
                Ok(fd) => return Ok(fd),
                // The kernel could not rule out a race on the way; try again.
                Err(Errno::AGAIN) => continue,
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                // Some seccomp profiles refuse syscalls they do not know with EPERM.
                Err(Errno::PERM) => break,
                Err(e) => return Err(classify_open(e.into())),
            }
        }
    }
    by_hand(dir, &parts, flags, mode)
}

/// [`open_beneath`]'s walk without `openat2`: each directory opened with `O_NOFOLLOW`.
pub(crate) fn by_hand(
    dir: BorrowedFd<'_>,
    parts: &[&OsStr],
    flags: OFlags,
    mode: u32,
) -> Result<OwnedFd, FsError> {
    let Some((last, walk)) = parts.split_last() else {
        return Ok(rustix::fs::openat(
            dir,
            ".",
            flags | base_flags(flags),
            Mode::from_raw_mode(mode),
        )?);
    };
    let parent = dirs_beneath(dir, walk, false)?;
    let at = parent.as_ref().map_or(dir, |f| f.as_fd());
    open_at(at, last, flags, mode).map_err(classify_open)
}

/// Walks the directories `names` beneath `dir` (creating missing ones when `create`), never
/// through a symlink; `None` when `names` is empty (the walk ends at `dir` itself).
pub(crate) fn dirs_beneath(
    dir: BorrowedFd<'_>,
    names: &[&OsStr],
    create: bool,
) -> Result<Option<OwnedFd>, FsError> {
    let mut cur: Option<OwnedFd> = None;
    for name in names {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        cur = Some(dir_at(at, name, create)?);
    }
    Ok(cur)
}

fn libc_enotdir() -> i32 {
    Errno::NOTDIR.raw_os_error()
}

fn libc_eloop() -> i32 {
    Errno::LOOP.raw_os_error()
}

/// True when `e` is the `ELOOP` of an `O_NOFOLLOW` open of a symlink.
pub(crate) fn is_loop(e: &FsError) -> bool {
    matches!(e, FsError::Io(io) if io.raw_os_error() == Some(libc_eloop()))
}

/// True when `e` says the entry does not exist.
pub(crate) fn is_not_found(e: &FsError) -> bool {
    matches!(e, FsError::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// The target of the symlink `name` in `dir`; `None` when `name` is not a symlink (or is gone).
pub(crate) fn readlink_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<PathBuf>, FsError> {
    check_name(name)?;
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => Ok(Some(PathBuf::from(OsString::from(
            std::ffi::OsStr::from_bytes(target.as_bytes()),
        )))),
        Err(Errno::INVAL) | Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The status of `name` in `dir` without following a symlink; `None` when it does not exist.
pub(crate) fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<Stat>, FsError> {
    check_name(name)?;
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The file type of a status.
pub(crate) fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// Checks with `fstat` that `fd` is a regular file; returns its status.
pub(crate) fn regular(fd: BorrowedFd<'_>) -> Result<Stat, FsError> {
    let st = rustix::fs::fstat(fd)?;
    match kind(&st) {
        FileType::RegularFile => Ok(st),
        FileType::Directory => Err(FsError::IsDir),
        _ => Err(FsError::NotRegular),
    }
}

/// Reads the regular file `fd` whole, at most `cap` bytes ([`FsError::TooLarge`] beyond).
pub(crate) fn read_regular(fd: OwnedFd, cap: u64) -> Result<Vec<u8>, FsError> {
    let st = regular(fd.as_fd())?;
    if st.st_size as u64 > cap {
        return Err(FsError::TooLarge(cap));
    }
    let mut buf = Vec::with_capacity(st.st_size.max(0) as usize);
    std::fs::File::from(fd)
        .take(cap + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(FsError::TooLarge(cap));
    }
    Ok(buf)
}

/// Opens the file `name` of `dir` for reading: no symlink, `O_NONBLOCK`, regular files only.
pub(crate) fn open_regular_at(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, FsError> {
    let fd = open_at(dir, name, read_flags(), 0).map_err(classify_open)?;
    regular(fd.as_fd())?;
    Ok(fd)
}

/// How a replacement is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Written and renamed; a power cut may lose it.
    Plain,
    /// The file is fsynced before the rename and the directory after it.
    Synced,
}

/// What [`replace_at`] does with a FIFO, socket or device at the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// Refuse ([`FsError::NotRegular`]): an agent's Write names what it means to write.
    Refuse,
    /// Replace it (flowerbox's own files: whatever a worker put there goes).
    Replace,
}

/// Replaces (or creates) the file `name` in `dir` with `bytes`: a new file made with
/// `O_CREAT | O_EXCL | O_NOFOLLOW` beside it, written, then renamed over `name` within the same
/// directory handle. A regular file keeps its permission bits; a directory there is refused; a
/// symlink there is replaced (never followed); a FIFO, socket or device as `special` says.
/// Returns whether `name` existed.
pub(crate) fn replace_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    bytes: &[u8],
    durability: Durability,
    special: Special,
) -> Result<bool, FsError> {
    check_name(name)?;
    let existing = lstat_at(dir, name)?;
    let mode = match existing.as_ref().map(|st| (kind(st), st.st_mode)) {
        None | Some((FileType::Symlink, _)) => None,
        Some((FileType::RegularFile, m)) => Some(m & 0o7777),
        Some((FileType::Directory, _)) => return Err(FsError::IsDir),
        Some(_) if special == Special::Replace => None,
        Some(_) => return Err(FsError::NotRegular),
    };
    let (tmp_name, fd) = create_temp(dir, name)?;
    let written = (|| -> Result<(), FsError> {
        if let Some(m) = mode {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(m))?;
        }
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)?;
        if durability == Durability::Synced {
            f.sync_all()?;
        }
        rustix::fs::renameat(dir, &tmp_name, dir, name)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(dir, &tmp_name, AtFlags::empty());
        return Err(e);
    }
    if durability == Durability::Synced {
        // Not every file system can fsync a directory; the rename already happened.
        if let Ok(d) =
            rustix::fs::openat(dir, ".", listable_flags() | OFlags::CLOEXEC, Mode::empty())
        {
            let _ = rustix::fs::fsync(&d);
        }
    }
    Ok(existing.is_some())
}

/// Creates a fresh temporary file next to `name` in `dir` (`O_EXCL`, mode 0666 less the umask).
pub(crate) fn create_temp(
    dir: BorrowedFd<'_>,
    name: &OsStr,
) -> Result<(OsString, OwnedFd), FsError> {
    // Keep the temporary name within NAME_MAX whatever `name` is.
    let stem: String = name.to_string_lossy().chars().take(120).collect();
    for _ in 0..16 {
        let tmp = OsString::from(format!(
            ".{stem}.{:016x}.flowerbox-tmp",
            rand::random::<u64>()
        ));
        match open_at(
            dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            0o666,
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(FsError::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(FsError::Io(std::io::Error::from(
        std::io::ErrorKind::AlreadyExists,
    )))
}

/// Opens `name` in `dir` for appending, creating it (mode 0666 less the umask) when missing:
/// no symlink, `O_NONBLOCK`, regular files only. Returns the file and whether it was created.
pub(crate) fn open_append_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
) -> Result<(std::fs::File, bool), FsError> {
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::NONBLOCK;
    let (fd, created) = match open_at(dir, name, flags | OFlags::CREATE | OFlags::EXCL, 0o666) {
        Ok(fd) => (fd, true),
        Err(FsError::Io(e)) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            (open_at(dir, name, flags, 0).map_err(classify_open)?, false)
        }
        Err(e) => return Err(classify_open(e)),
    };
    regular(fd.as_fd())?;
    Ok((std::fs::File::from(fd), created))
}

/// Names the two ways an `O_NOFOLLOW | O_NONBLOCK` open meets a hostile entry.
pub(crate) fn classify_open(e: FsError) -> FsError {
    match e {
        e if is_loop(&e) => FsError::Symlink,
        FsError::Io(io) if io.raw_os_error() == Some(Errno::NXIO.raw_os_error()) => {
            FsError::NotRegular
        }
        e => e,
    }
}

/// Opens the directory `name` in `dir` (created with mode 0777 less the umask when missing and
/// `create`), never through a symlink.
pub(crate) fn dir_at(dir: BorrowedFd<'_>, name: &OsStr, create: bool) -> Result<OwnedFd, FsError> {
    match open_at(dir, name, dir_flags(), 0) {
        Ok(fd) => Ok(fd),
        Err(e) if create && is_not_found(&e) => {
            match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            open_at(dir, name, dir_flags(), 0).map_err(dir_error(dir, name))
        }
        Err(e) => Err(dir_error(dir, name)(e)),
    }
}

/// `ENOTDIR` from an `O_PATH | O_DIRECTORY | O_NOFOLLOW` open of a symlink becomes
/// [`FsError::Symlink`].
fn dir_error<'a>(dir: BorrowedFd<'a>, name: &'a OsStr) -> impl Fn(FsError) -> FsError + 'a {
    move |e| match e {
        FsError::Io(ref io) if io.raw_os_error() == Some(libc_enotdir()) => {
            match readlink_at(dir, name) {
                Ok(Some(_)) => FsError::Symlink,
                _ => e,
            }
        }
        e if is_loop(&e) => FsError::Symlink,
        e => e,
    }
}

/// The entries of the directory `fd` (an `O_PATH` handle is fine) as (name, type), sorted by
/// name, without `.` and `..`. A type the file system does not report is read with `lstat`.
pub(crate) fn list(fd: BorrowedFd<'_>) -> Result<Vec<(OsString, FileType)>, FsError> {
    let listable = rustix::fs::openat(fd, ".", listable_flags() | OFlags::CLOEXEC, Mode::empty())?;
    let mut out = Vec::new();
    for e in rustix::fs::Dir::new(listable)? {
        let e = e?;
        let name = OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let mut t = e.file_type();
        if t == FileType::Unknown {
            match lstat_at(fd, name)? {
                Some(st) => t = kind(&st),
                None => continue,
            }
        }
        out.push((name.to_os_string(), t));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
