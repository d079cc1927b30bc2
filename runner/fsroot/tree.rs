//! [`Tree`]: the files flowerbox itself keeps in places an agent can reach (the workbench, which
//! workers mount read-write; the run directory, masked in every container but inside the
//! workspace). Paths are given whole, as everywhere in flowerbox, and must lie beneath the
//! tree's anchor: the anchor is opened by its path (no agent can replace it or anything above
//! it), everything below it is walked with no symlink followed, files are regular or refused.

use rustix::fs::{FileType, OFlags};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::sys::{self, Durability, Special};
use super::FsError;

/// A directory whose contents flowerbox reads and writes without following any symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Opened by path; no agent can replace it or a directory above it.
    anchor: PathBuf,
}

/// One directory entry as [`Tree::entries`] lists it (symlinks are not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name.
    pub name: OsString,
    /// Its type (a symlink is [`FileType::Symlink`]).
    pub kind: FileType,
    /// Its size in bytes.
    pub len: u64,
    /// Its modification time.
    pub modified: SystemTime,
}

impl Tree {
    /// A tree anchored at `anchor`.
    pub fn new(anchor: impl Into<PathBuf>) -> Tree {
        Tree {
            anchor: anchor.into(),
        }
    }

    /// The tree for files under `root`: anchored at `workspace` when `root` lies inside it
    /// (workers can rename any directory of the workspace, but not the workspace, which is their
    /// mount's root), else at `root` itself (a directory outside the workspace belongs to the
    /// user; agents can at most change its contents).
    #[cfg(test)]
    pub(crate) fn for_root(root: &Path, workspace: Option<&Path>) -> Tree {
        match workspace {
            Some(ws) if root.starts_with(ws) => Tree::new(ws),
            _ => Tree::new(root),
        }
    }

    /// The anchor.
    #[cfg(test)]
    pub(crate) fn anchor(&self) -> &Path {
        &self.anchor
    }

    /// `path` relative to the anchor; [`FsError::Outside`] when it is not beneath it.
    fn rel<'a>(&self, path: &'a Path) -> Result<&'a Path, FsError> {
        path.strip_prefix(&self.anchor)
            .map_err(|_| FsError::Outside)
    }

    fn open_anchor(&self) -> Result<OwnedFd, FsError> {
        sys::open_trusted_dir(&self.anchor)
    }

    /// The directory holding `path` (created when `create`) and the file's name.
    fn parent(&self, path: &Path, create: bool) -> Result<(OwnedFd, OsString), FsError> {
        let parts = sys::plain_components(self.rel(path)?)?;
        let (name, dirs) = parts.split_last().ok_or(FsError::IsDir)?;
        Ok((self.walk(dirs, create)?, name.to_os_string()))
    }

    /// The directory `path` itself (created with its parents when `create`).
    fn dir(&self, path: &Path, create: bool) -> Result<OwnedFd, FsError> {
        let parts = sys::plain_components(self.rel(path)?)?;
        self.walk(&parts, create)
    }

    /// The directory `dirs` beneath the anchor: one `openat2` (no symlink, nothing above the
    /// anchor), or, when a directory is missing and `create`, the walk that makes them.
    #[allow(clippy::expect_used, reason = "dirs is not empty there")]
    fn walk(&self, dirs: &[&std::ffi::OsStr], create: bool) -> Result<OwnedFd, FsError> {
        let anchor = self.open_anchor()?;
        if dirs.is_empty() {
            return Ok(anchor);
        }
        let rel: PathBuf = dirs.iter().collect();
        match sys::open_beneath(anchor.as_fd(), &rel, sys::dir_flags(), 0) {
            Ok(fd) => Ok(fd),
            Err(e) if create && e.is_not_found() => {
                Ok(sys::dirs_beneath(anchor.as_fd(), dirs, true)?.expect("non-empty"))
            }
            Err(e) => Err(e),
        }
    }

    /// The bytes of the regular file `path`, at most `cap`; `None` when it does not exist.
    pub fn read(&self, path: &Path, cap: u64) -> Result<Option<Vec<u8>>, FsError> {
        let found = self
            .parent(path, false)
            .and_then(|(dir, name)| sys::open_regular_at(dir.as_fd(), &name));
        match found {
            Ok(fd) => sys::read_regular(fd, cap).map(Some),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Tree::read`] as text (invalid UTF-8 replaced).
    pub fn read_string(&self, path: &Path, cap: u64) -> Result<Option<String>, FsError> {
        Ok(self
            .read(path, cap)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Replaces `path` with `bytes` through a new file renamed over it (directories created);
    /// returns whether it existed. A symlink, FIFO or socket at `path` is replaced, never
    /// followed or opened.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> Result<bool, FsError> {
        let (dir, name) = self.parent(path, true)?;
        sys::replace_at(
            dir.as_fd(),
            &name,
            bytes,
            Durability::Plain,
            Special::Replace,
        )
    }

    /// [`Tree::write`], with the file and the directory fsynced (records that must survive a
    /// power cut).
    pub fn write_durable(&self, path: &Path, bytes: &[u8]) -> Result<bool, FsError> {
        let (dir, name) = self.parent(path, true)?;
        sys::replace_at(
            dir.as_fd(),
            &name,
            bytes,
            Durability::Synced,
            Special::Replace,
        )
    }

    /// Writes the files `files` (name, bytes) into the directory `dir` (created when missing)
    /// as one batch whose durability the caller decides. A name that already holds a regular
    /// file with exactly these bytes is kept (content-addressed names); a new name is written
    /// beside itself and renamed at once, so readers see it whole; a name holding anything else
    /// (a file of other bytes, a link, a FIFO) is written beside itself, fdatasynced, then
    /// renamed over it, so a crash leaves it as it was or with its complete new content. A
    /// directory at a name is refused before anything is written.
    ///
    /// The returned [`BatchSync`] (none when `files` is empty) makes every new name durable:
    /// until it ran, a crash may leave a new name with incomplete bytes (which the next batch
    /// finds by content and rewrites), so nothing that points to these files may be stored
    /// durably before it ran. Returns how many files were written.
    ///
    /// As [`Tree::write`], a symlink, FIFO or socket at a name is replaced, never followed.
    /// [`Tree::plan_batch`] then [`PendingBatch::write`], for a caller that writes later or
    /// on another thread.
    pub fn write_batch(
        &self,
        dir: &Path,
        files: &[(&str, &[u8])],
    ) -> Result<(usize, Option<BatchSync>), FsError> {
        let owned = files
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_vec()))
            .collect();
        match self.plan_batch(dir, owned)? {
            Some(batch) => batch.write(&std::sync::atomic::AtomicBool::new(false)),
            None => Ok((0, None)),
        }
    }

    /// The first half of [`Tree::write_batch`]: the directory opened (created when missing),
    /// every name checked (a directory at a name is refused, a name already holding exactly
    /// its bytes is dropped), nothing written. `None` when `files` is empty. The batch owns
    /// its directory and bytes, so it can be written on another thread.
    pub fn plan_batch(
        &self,
        dir: &Path,
        files: Vec<(String, Vec<u8>)>,
    ) -> Result<Option<PendingBatch>, FsError> {
        let fd = self.dir(dir, true)?;
        if files.is_empty() {
            return Ok(None);
        }
        // Pass 1: what each name needs; nothing is written before every name was looked at.
        let mut todo: Vec<(OsString, Vec<u8>, bool)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, bytes) in files {
            let name = OsString::from(name);
            sys::check_name(&name)?;
            if !seen.insert(name.clone()) {
                continue;
            }
            match sys::lstat_at(fd.as_fd(), &name)? {
                None => todo.push((name, bytes, false)),
                Some(st) if sys::kind(&st) == FileType::Directory => return Err(FsError::IsDir),
                Some(st)
                    if sys::kind(&st) == FileType::RegularFile
                        && st.st_size as u64 == bytes.len() as u64
                        && same_bytes(fd.as_fd(), &name, &bytes)? => {}
                Some(_) => todo.push((name, bytes, true)),
            }
        }
        // The walk's handle is `O_PATH`; syncing needs a real descriptor of the directory.
        let listed = rustix::fs::openat(
            &fd,
            ".",
            sys::listable_flags() | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(Some(PendingBatch { fd, listed, todo }))
    }

    /// Opens the regular file `path` for appending (created, with its directories, when
    /// missing); returns it and whether it was created.
    pub fn open_append(&self, path: &Path) -> Result<(std::fs::File, bool), FsError> {
        let (dir, name) = self.parent(path, true)?;
        sys::open_append_at(dir.as_fd(), &name)
    }

    /// Appends `bytes` to `path` (created when missing); returns whether it was created.
    pub fn append(&self, path: &Path, bytes: &[u8]) -> Result<bool, FsError> {
        use std::io::Write;
        let (mut f, created) = self.open_append(path)?;
        f.write_all(bytes)?;
        Ok(created)
    }

    /// Opens the regular file `path` for reading and writing, created when missing, never
    /// truncated (lock files).
    pub fn open_rw(&self, path: &Path) -> Result<std::fs::File, FsError> {
        let (dir, name) = self.parent(path, true)?;
        let fd = sys::open_at(
            dir.as_fd(),
            &name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NONBLOCK,
            0o666,
        )
        .map_err(sys::classify_open)?;
        sys::regular(fd.as_fd())?;
        Ok(std::fs::File::from(fd))
    }

    /// An `O_PATH` handle on `path` itself, opened beneath the anchor with no symlink followed
    /// on the way or as `path` (the handle a bind mount's source is pinned to,
    /// [`crate::sandbox::Pin`]); its type is what `fstat` of the handle says, never a path's.
    pub fn pin(&self, path: &Path) -> Result<OwnedFd, FsError> {
        let rel = self.rel(path)?;
        let anchor = self.open_anchor()?;
        let fd = sys::open_beneath(anchor.as_fd(), rel, OFlags::PATH, 0)?;
        // `O_PATH | O_NOFOLLOW` opens a symlink itself when it is the last component (the walk
        // without `openat2`): never a source.
        let st = rustix::fs::fstat(&fd)?;
        if sys::kind(&st) == FileType::Symlink {
            return Err(FsError::Symlink);
        }
        Ok(fd)
    }

    /// Creates the directory `path` and its parents beneath the anchor.
    pub fn create_dir_all(&self, path: &Path) -> Result<(), FsError> {
        self.dir(path, true).map(|_| ())
    }

    /// The status of `path` (a symlink's own); `None` when it does not exist.
    pub fn status(&self, path: &Path) -> Result<Option<rustix::fs::Stat>, FsError> {
        let (dir, name) = match self.parent(path, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        sys::lstat_at(dir.as_fd(), &name)
    }

    /// The type of `path` (a symlink is not followed); `None` when it does not exist.
    pub fn kind(&self, path: &Path) -> Result<Option<FileType>, FsError> {
        Ok(self.status(path)?.map(|st| sys::kind(&st)))
    }

    /// True when something (of any type) is at `path`.
    pub fn exists(&self, path: &Path) -> bool {
        matches!(self.kind(path), Ok(Some(_)))
    }

    /// Moves `from` to `to` (both beneath the anchor; `to`'s directory created). With
    /// `replace` false an existing `to` is never overwritten (`AlreadyExists`).
    pub fn rename(&self, from: &Path, to: &Path, replace: bool) -> Result<(), FsError> {
        let (src_dir, src) = self.parent(from, false)?;
        let (dst_dir, dst) = self.parent(to, true)?;
        let flags = if replace {
            rustix::fs::RenameFlags::empty()
        } else {
            rustix::fs::RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(src_dir.as_fd(), &src, dst_dir.as_fd(), &dst, flags) {
            // A file system without RENAME_NOREPLACE (NFS): check, then rename.
            Err(rustix::io::Errno::INVAL) if !replace => {
                if sys::lstat_at(dst_dir.as_fd(), &dst)?.is_some() {
                    return Err(FsError::Io(std::io::ErrorKind::AlreadyExists.into()));
                }
                Ok(rustix::fs::renameat(
                    src_dir.as_fd(),
                    &src,
                    dst_dir.as_fd(),
                    &dst,
                )?)
            }
            other => Ok(other?),
        }
    }

    /// The entries of the directory `path` (sorted by name; symlinks listed, not followed);
    /// empty when it does not exist.
    pub fn entries(&self, path: &Path) -> Result<Vec<Entry>, FsError> {
        let dir = match self.dir(path, false) {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for (name, _) in sys::list(dir.as_fd())? {
            let Some(st) = sys::lstat_at(dir.as_fd(), &name)? else {
                continue;
            };
            out.push(Entry {
                kind: sys::kind(&st),
                len: st.st_size.max(0) as u64,
                modified: mtime(&st),
                name,
            });
        }
        Ok(out)
    }

    /// The regular file `path` opened for reading (`O_NONBLOCK`), with its status; `None` when
    /// it does not exist.
    pub fn open_regular(
        &self,
        path: &Path,
    ) -> Result<Option<(std::fs::File, rustix::fs::Stat)>, FsError> {
        let found = self
            .parent(path, false)
            .and_then(|(dir, name)| sys::open_regular_at(dir.as_fd(), &name));
        match found {
            Ok(fd) => {
                let st = sys::regular(fd.as_fd())?;
                Ok(Some((std::fs::File::from(fd), st)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The target of the symlink `path`; `None` when it is not a symlink or does not exist.
    pub fn read_link(&self, path: &Path) -> Result<Option<PathBuf>, FsError> {
        match self.parent(path, false) {
            Ok((dir, name)) => sys::readlink_at(dir.as_fd(), &name),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// At most the first `n` bytes of the regular file `path`; `None` when it does not exist.
    pub fn read_head(&self, path: &Path, n: usize) -> Result<Option<Vec<u8>>, FsError> {
        use std::io::Read;
        let found = self
            .parent(path, false)
            .and_then(|(dir, name)| sys::open_regular_at(dir.as_fd(), &name));
        match found {
            Ok(fd) => {
                let mut buf = Vec::with_capacity(n);
                std::fs::File::from(fd)
                    .take(n as u64)
                    .read_to_end(&mut buf)?;
                Ok(Some(buf))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A new empty file in the directory `dir` (created when missing), for output whose final
    /// name is known only at the end; removed on drop unless persisted.
    pub fn temp_file(&self, dir: &Path) -> Result<TempFile, FsError> {
        let fd = self.dir(dir, true)?;
        let (name, file) = sys::create_temp(fd.as_fd(), std::ffi::OsStr::new("partial"))?;
        Ok(TempFile {
            dir_path: dir.to_path_buf(),
            dir: fd,
            name: Some(name),
            file: std::fs::File::from(file),
        })
    }

    /// Checks that nothing on the way to `path` beneath the anchor is a symlink and that `path`
    /// is a regular file or absent (for files opened by a library that takes only a path).
    pub fn check_plain(&self, path: &Path) -> Result<(), FsError> {
        match self.kind(path)? {
            None | Some(FileType::RegularFile) => Ok(()),
            Some(FileType::Symlink) => Err(FsError::Symlink),
            Some(FileType::Directory) => Err(FsError::IsDir),
            Some(_) => Err(FsError::NotRegular),
        }
    }
}

/// The modification time of a status.
pub(crate) fn mtime(st: &rustix::fs::Stat) -> SystemTime {
    let secs = st.st_mtime;
    let nanos = st.st_mtime_nsec as u32;
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        SystemTime::UNIX_EPOCH
    }
}

/// A temporary file made by [`Tree::temp_file`]: written through [`TempFile::file`], then
/// renamed within its directory's handle by [`TempFile::persist`], or removed on drop.
#[derive(Debug)]
pub struct TempFile {
    dir_path: PathBuf,
    dir: OwnedFd,
    name: Option<OsString>,
    file: std::fs::File,
}

impl TempFile {
    /// The open file.
    pub fn file(&mut self) -> &mut std::fs::File {
        &mut self.file
    }

    /// Renames it to `name` in its directory (replacing what is there) and returns the path.
    #[allow(clippy::expect_used, reason = "persist consumes self")]
    pub fn persist(mut self, name: &str) -> Result<PathBuf, FsError> {
        let tmp = self.name.take().expect("not persisted yet");
        sys::check_name(std::ffi::OsStr::new(name))?;
        if let Err(e) = rustix::fs::renameat(self.dir.as_fd(), &tmp, self.dir.as_fd(), name) {
            let _ = rustix::fs::unlinkat(self.dir.as_fd(), &tmp, rustix::fs::AtFlags::empty());
            return Err(e.into());
        }
        Ok(self.dir_path.join(name))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.name.take() {
            let _ = rustix::fs::unlinkat(self.dir.as_fd(), &tmp, rustix::fs::AtFlags::empty());
        }
    }
}

/// What makes a [`Tree::write_batch`] durable: one `syncfs` of the file system holding the
/// directory (every file written, and the renames), then an fsync of the directory. Cheap to
/// move to another thread; see [`Tree::write_batch`] for what may not happen before it ran.
#[derive(Debug)]
pub struct BatchSync(OwnedFd);

impl BatchSync {
    /// Syncs the batch's file system and directory.
    pub fn sync(self) -> Result<(), FsError> {
        rustix::fs::syncfs(&self.0)?;
        // Not every file system can fsync a directory; syncfs already wrote the renames.
        let _ = rustix::fs::fsync(&self.0);
        Ok(())
    }
}

/// A [`Tree::write_batch`] checked but not written yet ([`Tree::plan_batch`]): owns its
/// directory and bytes, so it can be written on another thread.
#[derive(Debug)]
pub struct PendingBatch {
    /// The directory (`O_PATH`).
    fd: OwnedFd,
    /// The directory, opened for syncing.
    listed: OwnedFd,
    /// (name, bytes, whether it replaces something).
    todo: Vec<(OsString, Vec<u8>, bool)>,
}

impl PendingBatch {
    /// How many names will be written.
    pub fn len(&self) -> usize {
        self.todo.len()
    }

    /// True when every name already held its bytes.
    pub fn is_empty(&self) -> bool {
        self.todo.is_empty()
    }

    /// The second half of [`Tree::write_batch`]: writes and renames each name, stopping
    /// before the next one once `stop` is set. Returns how many were written and what makes
    /// them durable (as [`Tree::write_batch`]: nothing pointing to them may be stored durably
    /// before it ran). A name whose write failed leaves no temporary file behind.
    pub fn write(
        self,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<(usize, Option<BatchSync>), FsError> {
        use std::io::Write;
        let fd = self.fd;
        // Pass 2: write and rename.
        let mut written = 0;
        for (name, bytes, replaces) in self.todo {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let (tmp, file) = sys::create_temp(fd.as_fd(), &name)?;
            let done = (|| -> Result<(), FsError> {
                let mut file = std::fs::File::from(file);
                file.write_all(&bytes)?;
                if replaces {
                    file.sync_data()?;
                }
                rustix::fs::renameat(&fd, &tmp, &fd, &name)?;
                Ok(())
            })();
            if let Err(e) = done {
                let _ = rustix::fs::unlinkat(&fd, &tmp, rustix::fs::AtFlags::empty());
                return Err(e);
            }
            written += 1;
        }
        Ok((written, Some(BatchSync(self.listed))))
    }
}

/// Whether the regular file `name` of `dir` holds exactly `bytes`.
fn same_bytes(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    bytes: &[u8],
) -> Result<bool, FsError> {
    let fd = sys::open_regular_at(dir, name)?;
    match sys::read_regular(fd, bytes.len() as u64) {
        Ok(b) => Ok(b == bytes),
        Err(FsError::TooLarge(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
