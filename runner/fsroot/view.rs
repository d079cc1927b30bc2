//! [`View`]: one agent's file system as its container shows it, for the host-side file tools.
//!
//! Mounts keep their host paths inside containers (path identity), so a path the agent names is
//! both a container path and a host path, and the resolution here follows the container's
//! rules: it starts from a directory handle of the mount holding the path (the most specific
//! mount wins for paths beneath it: a read-only `.git` over a read-write workspace), walks one
//! component at a time with `O_NOFOLLOW`, and follows a symlink the way the container would. An
//! absolute target is a container path: it continues from the handle of the mount it lands in,
//! with that mount's rights, and is refused when it lands in no mount. A masked path (the run
//! directory) is an empty directory: nothing beneath it is visible except mounts over it.
//! Whether a write is allowed is decided by the mount that holds the final directory.

use rustix::fs::FileType;
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use thiserror::Error;

use super::sys::{self, Durability, Special};
use super::FsError;

/// Symlinks followed in one resolution before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Times a call is retried when the entry it resolved turned into a symlink before it was
/// opened (a container swapping it in a loop); then it fails.
const SWAP_RETRIES: usize = 8;

/// One mount of the view: host path = container path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewMount {
    /// Absolute, canonical.
    pub path: PathBuf,
    /// Read-only in the container, and so for the file tools.
    pub read_only: bool,
}

/// Why a path does not resolve in a view.
#[derive(Debug, Error)]
pub enum ViewError {
    /// It lands outside every mount (the path given, or a symlink's target).
    #[error("{} 不在能访问的目录里", .0.display())]
    Outside(PathBuf),
    /// It lies in a masked directory (the run directory).
    #[error("{} 在被遮住的目录里", .0.display())]
    Masked(PathBuf),
    /// A write into the read-only mount at this path.
    #[error("{} 是只读挂载", .0.display())]
    ReadOnly(PathBuf),
    /// More than 40 symlinks (a loop).
    #[error("符号链接层数太多(有环?)")]
    Loop,
    /// A component on the way is not a directory.
    #[error("{} 不是目录", .0.display())]
    NotADirectory(PathBuf),
    /// A directory on the way does not exist.
    #[error("{} 不存在", .0.display())]
    NotFound(PathBuf),
    /// A file system error on the way.
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// The mounts and masks of one agent, with a cache of the mount roots' handles.
#[derive(Debug, Clone)]
pub struct View {
    mounts: Vec<ViewMount>,
    masked: Vec<PathBuf>,
    /// The masked directories by device and inode, taken before any agent ran: a worker can
    /// rename a directory above a masked one (only the mount point itself is busy in its
    /// container, where the mask moves along), so the path alone does not find it again.
    masked_ids: Vec<(u64, u64)>,
    roots: Arc<Mutex<HashMap<usize, Arc<OwnedFd>>>>,
}

/// Where a resolved path is.
#[derive(Debug)]
enum At {
    /// A mount's root directory.
    Root(Arc<OwnedFd>),
    /// The entry `name` (which may not exist yet) in the directory `dir`.
    Entry { dir: Arc<OwnedFd>, name: OsString },
}

/// A path resolved in a [`View`]: the handle of the directory holding it, its name there, and
/// the rights of the mount holding that directory.
#[derive(Debug)]
pub struct Resolved {
    path: PathBuf,
    mount: PathBuf,
    read_only: bool,
    at: At,
}

/// The walk's position.
enum Pos {
    /// Outside every mount, on the way to one (`masked`: inside a masked directory).
    Out { masked: bool },
    /// Inside mount `m`: its root handle and the handles of the directories below it.
    In {
        m: usize,
        root: Arc<OwnedFd>,
        dirs: Vec<Arc<OwnedFd>>,
    },
}

impl Pos {
    fn cur(&self) -> Option<&Arc<OwnedFd>> {
        match self {
            Pos::Out { .. } => None,
            Pos::In { root, dirs, .. } => Some(dirs.last().unwrap_or(root)),
        }
    }
}

impl View {
    /// A view of `mounts` (duplicates merged, the stricter right wins) hiding `masked`.
    pub fn new(mounts: Vec<ViewMount>, masked: Vec<PathBuf>) -> View {
        let mut merged: Vec<ViewMount> = Vec::new();
        for m in mounts {
            match merged.iter_mut().find(|x| x.path == m.path) {
                Some(x) => x.read_only |= m.read_only,
                None => merged.push(m),
            }
        }
        View {
            mounts: merged,
            masked,
            masked_ids: Vec::new(),
            roots: Arc::default(),
        }
    }

    /// Also hides the directories with these (device, inode) identities wherever they are.
    pub fn hiding_ids(mut self, ids: Vec<(u64, u64)>) -> View {
        self.masked_ids = ids;
        self
    }

    /// True when the directory `fd` is a masked one (by identity).
    pub(crate) fn is_masked_dir(&self, fd: BorrowedFd<'_>) -> bool {
        !self.masked_ids.is_empty()
            && rustix::fs::fstat(fd)
                .is_ok_and(|st| self.masked_ids.contains(&(st.st_dev, st.st_ino)))
    }

    /// The mounts.
    pub fn mounts(&self) -> &[ViewMount] {
        &self.mounts
    }

    /// The masked paths.
    pub fn masked(&self) -> &[PathBuf] {
        &self.masked
    }

    /// The masked directories' (device, inode) identities ([`View::hiding_ids`]).
    pub fn masked_ids(&self) -> &[(u64, u64)] {
        &self.masked_ids
    }

    /// The mount whose root is exactly `p`.
    pub(crate) fn mount_exact(&self, p: &Path) -> Option<usize> {
        self.mounts.iter().position(|m| m.path == p)
    }

    /// True when `p` is a masked path.
    pub(crate) fn is_masked(&self, p: &Path) -> bool {
        self.masked.iter().any(|m| m == p)
    }

    /// The most specific mount holding `p`, unless a masked directory between it and `p`
    /// hides `p`: `Ok(None)` outside every mount, `Err(())` when masked.
    fn holder(&self, p: &Path) -> Result<Option<usize>, ()> {
        let m = (0..self.mounts.len())
            .filter(|&i| p.starts_with(&self.mounts[i].path))
            .max_by_key(|&i| self.mounts[i].path.components().count());
        let depth = m.map_or(0, |i| self.mounts[i].path.components().count());
        let hidden = self
            .masked
            .iter()
            .any(|k| p.starts_with(k) && k.components().count() > depth);
        if hidden {
            Err(())
        } else {
            Ok(m)
        }
    }

    /// True when some mount lies at or beneath `p`.
    fn leads_to_mount(&self, p: &Path) -> bool {
        self.mounts.iter().any(|m| m.path.starts_with(p))
    }

    /// The handle of mount `m`'s root: opened through the mount that encloses it (never
    /// through a symlink), or by its path when no mount encloses it.
    #[allow(clippy::expect_used, reason = "positions hold this view's mounts")]
    pub(crate) fn root(&self, m: usize) -> Result<Arc<OwnedFd>, FsError> {
        if let Some(fd) = self.lock_roots().get(&m) {
            return Ok(fd.clone());
        }
        let path = &self.mounts[m].path;
        let enclosing = (0..self.mounts.len())
            .filter(|&i| i != m && path.starts_with(&self.mounts[i].path))
            .max_by_key(|&i| self.mounts[i].path.components().count());
        let fd = match enclosing {
            Some(e) => {
                let base = self.root(e)?;
                let rel = path.strip_prefix(&self.mounts[e].path).expect("enclosing");
                let parts = sys::plain_components(rel)?;
                sys::dirs_beneath(base.as_fd(), &parts, false)?
                    .expect("a nested mount is below its enclosing mount")
            }
            None => sys::open_trusted_dir(path)?,
        };
        let fd = Arc::new(fd);
        self.lock_roots().insert(m, fd.clone());
        Ok(fd)
    }

    fn lock_roots(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<OwnedFd>>> {
        self.roots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The position of the directory `p` reached by `..`.
    #[allow(clippy::expect_used, reason = "positions hold this view's mounts")]
    fn relocate(&self, p: &Path) -> Result<Pos, ViewError> {
        match self.holder(p) {
            Err(()) => Ok(Pos::Out { masked: true }),
            Ok(None) => Ok(Pos::Out { masked: false }),
            Ok(Some(m)) => {
                let root = self.root(m)?;
                let rel = p.strip_prefix(&self.mounts[m].path).expect("holder");
                let mut dirs: Vec<Arc<OwnedFd>> = Vec::new();
                for name in sys::plain_components(rel)? {
                    let at = dirs.last().unwrap_or(&root).clone();
                    let fd = sys::dir_at(at.as_fd(), name, false)?;
                    if self.is_masked_dir(fd.as_fd()) {
                        return Ok(Pos::Out { masked: true });
                    }
                    dirs.push(Arc::new(fd));
                }
                Ok(Pos::In { m, root, dirs })
            }
        }
    }

    /// Resolves the absolute `path` with the container's symlink semantics (the last
    /// component followed too). `for_write`: the directory that holds the result must be in a
    /// read-write mount. `create_dirs`: missing directories on the way are created (each in a
    /// read-write mount), as `mkdir -p` would.
    #[allow(clippy::expect_used, reason = "positions hold this view's mounts")]
    pub fn resolve(
        &self,
        path: &Path,
        for_write: bool,
        create_dirs: bool,
    ) -> Result<Resolved, ViewError> {
        if !path.is_absolute() {
            return Err(ViewError::Outside(path.to_path_buf()));
        }
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, path);
        let mut logical = PathBuf::from("/");
        let mut pos = Pos::Out { masked: false };
        let mut links = 0usize;
        let mut last_name: Option<OsString> = None;
        let mut follow = |target: PathBuf,
                          logical: &mut PathBuf,
                          pos: &mut Pos,
                          todo: &mut Vec<OsString>|
         -> Result<(), ViewError> {
            links += 1;
            if links > MAX_LINKS {
                return Err(ViewError::Loop);
            }
            logical.pop();
            if target.is_absolute() {
                *logical = PathBuf::from("/");
                *pos = Pos::Out { masked: false };
            }
            push_components(todo, &target);
            Ok(())
        };
        while let Some(c) = todo.pop() {
            if c == ".." {
                let at_root = matches!(&pos, Pos::In { dirs, .. } if dirs.is_empty());
                logical.pop();
                match &mut pos {
                    Pos::In { dirs, .. } if !at_root => {
                        dirs.pop();
                    }
                    _ => pos = self.relocate(&logical)?,
                }
                continue;
            }
            logical.push(&c);
            if self.is_masked(&logical) {
                pos = Pos::Out { masked: true };
                continue;
            }
            if let Some(m) = self.mount_exact(&logical) {
                pos = Pos::In {
                    m,
                    root: self.root(m)?,
                    dirs: Vec::new(),
                };
                continue;
            }
            let (m, cur) = match &pos {
                Pos::Out { masked } => {
                    if self.leads_to_mount(&logical) {
                        continue;
                    }
                    return Err(if *masked {
                        ViewError::Masked(logical)
                    } else {
                        ViewError::Outside(logical)
                    });
                }
                Pos::In { m, .. } => (*m, pos.cur().expect("inside").clone()),
            };
            if todo.is_empty() {
                match sys::readlink_at(cur.as_fd(), &c)? {
                    Some(target) => follow(target, &mut logical, &mut pos, &mut todo)?,
                    None => last_name = Some(c),
                }
                continue;
            }
            match sys::open_at(cur.as_fd(), &c, sys::dir_flags(), 0) {
                Ok(fd) if self.is_masked_dir(fd.as_fd()) => return Err(ViewError::Masked(logical)),
                Ok(fd) => push_dir(&mut pos, fd),
                Err(e) => match sys::readlink_at(cur.as_fd(), &c)? {
                    Some(target) => follow(target, &mut logical, &mut pos, &mut todo)?,
                    None if e.is_not_found() && create_dirs => {
                        if self.mounts[m].read_only {
                            return Err(ViewError::ReadOnly(self.mounts[m].path.clone()));
                        }
                        let fd = sys::dir_at(cur.as_fd(), &c, true)?;
                        push_dir(&mut pos, fd);
                    }
                    None if e.is_not_found() => return Err(ViewError::NotFound(logical)),
                    None if is_enotdir(&e) => return Err(ViewError::NotADirectory(logical)),
                    None => return Err(e.into()),
                },
            }
        }
        self.finish(logical, pos, last_name, for_write)
    }

    /// The result of a walk that ended at `pos` (with `name` still to open there, if any).
    #[allow(clippy::expect_used, reason = "positions hold this view's mounts")]
    fn finish(
        &self,
        logical: PathBuf,
        pos: Pos,
        name: Option<OsString>,
        for_write: bool,
    ) -> Result<Resolved, ViewError> {
        let (m, at) = match (pos, name) {
            (Pos::Out { masked: true }, _) => return Err(ViewError::Masked(logical)),
            (Pos::Out { masked: false }, _) => return Err(ViewError::Outside(logical)),
            (Pos::In { m, root, dirs }, Some(name)) => {
                let dir = dirs.last().unwrap_or(&root).clone();
                (m, At::Entry { dir, name })
            }
            (Pos::In { m, root, mut dirs }, None) => match dirs.pop() {
                None => (m, At::Root(root)),
                Some(_) => {
                    let dir = dirs.last().unwrap_or(&root).clone();
                    let name = logical.file_name().expect("below a mount").to_os_string();
                    (m, At::Entry { dir, name })
                }
            },
        };
        if let At::Entry { dir, name } = &at {
            if !self.masked_ids.is_empty() {
                if let Ok(Some(st)) = sys::lstat_at(dir.as_fd(), name) {
                    if self.masked_ids.contains(&(st.st_dev, st.st_ino)) {
                        return Err(ViewError::Masked(logical));
                    }
                }
            }
        }
        let mount = &self.mounts[m];
        if for_write && mount.read_only {
            return Err(ViewError::ReadOnly(mount.path.clone()));
        }
        Ok(Resolved {
            path: logical,
            mount: mount.path.clone(),
            read_only: mount.read_only,
            at,
        })
    }

    /// Resolves `path` and runs `op` on the result; when `op` meets a symlink that was not there
    /// during the resolution (a container swapping entries), resolves again, a few times.
    pub fn with<T>(
        &self,
        path: &Path,
        for_write: bool,
        create_dirs: bool,
        mut op: impl FnMut(&Resolved) -> Result<T, FsError>,
    ) -> Result<T, ViewError> {
        let mut tries = 0;
        loop {
            let r = self.resolve(path, for_write, create_dirs)?;
            match op(&r) {
                Err(FsError::Symlink) if tries < SWAP_RETRIES => tries += 1,
                other => return other.map_err(ViewError::from),
            }
        }
    }
}

fn push_dir(pos: &mut Pos, fd: OwnedFd) {
    if let Pos::In { dirs, .. } = pos {
        dirs.push(Arc::new(fd));
    }
}

fn is_enotdir(e: &FsError) -> bool {
    matches!(e, FsError::Io(io) if io.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()))
}

/// Pushes `p`'s components onto `todo` so that they pop in order (`.` dropped, `..` kept).
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

impl Resolved {
    /// The path as the container names it (every symlink resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root of the mount holding it.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// True when that mount is read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// The handle of the directory holding it and its name there (`None` for a mount root).
    pub(crate) fn entry(&self) -> Option<(Arc<OwnedFd>, OsString)> {
        match &self.at {
            At::Root(_) => None,
            At::Entry { dir, name } => Some((dir.clone(), name.clone())),
        }
    }

    fn dir_and_name(&self) -> Option<(BorrowedFd<'_>, &OsString)> {
        match &self.at {
            At::Root(_) => None,
            At::Entry { dir, name } => Some((dir.as_fd(), name)),
        }
    }

    /// Its type without following a symlink; `None` when nothing is there.
    pub fn kind(&self) -> Result<Option<FileType>, FsError> {
        match self.dir_and_name() {
            None => Ok(Some(FileType::Directory)),
            Some((dir, name)) => Ok(sys::lstat_at(dir, name)?.map(|st| sys::kind(&st))),
        }
    }

    /// The regular file, opened for reading (`O_NONBLOCK`, no symlink).
    pub fn open_file(&self) -> Result<std::fs::File, FsError> {
        let (dir, name) = self.dir_and_name().ok_or(FsError::IsDir)?;
        Ok(std::fs::File::from(sys::open_regular_at(dir, name)?))
    }

    /// The bytes of the regular file, at most `cap` ([`FsError::TooLarge`] beyond).
    pub fn read(&self, cap: u64) -> Result<Vec<u8>, FsError> {
        let (dir, name) = self.dir_and_name().ok_or(FsError::IsDir)?;
        sys::read_regular(sys::open_regular_at(dir, name)?, cap)
    }

    /// Replaces the file with `bytes` (a new `O_EXCL` file renamed over it within the same
    /// directory handle); returns whether it existed.
    pub fn replace(&self, bytes: &[u8]) -> Result<bool, FsError> {
        let (dir, name) = self.dir_and_name().ok_or(FsError::IsDir)?;
        sys::replace_at(dir, name, bytes, Durability::Plain, Special::Refuse)
    }

    /// A handle of the directory (for walks); [`FsError::Symlink`] when it was swapped for one.
    pub fn open_dir(&self) -> Result<OwnedFd, FsError> {
        match &self.at {
            At::Root(fd) => Ok(sys::open_beneath(
                fd.as_fd(),
                Path::new(""),
                sys::dir_flags(),
                0,
            )?),
            At::Entry { dir, name } => sys::dir_at(dir.as_fd(), name, false),
        }
    }
}
