//! Walking a directory of a [`View`] for `Glob` and `Grep`, with ripgrep's ignore rules and
//! never leaving the view: every directory is opened from its parent's handle with
//! `O_NOFOLLOW`, symlinks are skipped (never followed, as `rg` does by default), masked
//! directories are skipped, a mount over a directory is entered through its own root handle,
//! and a file is handed out as its directory's handle and its name, so whoever opens it opens
//! exactly the entry that was listed.
//!
//! The rules are the `ignore` crate's (which `rg` uses): `.ignore`, then `.gitignore`, then
//! `.git/info/exclude`, each from the deepest directory up, then the user's global git
//! excludes; `--glob` overrides first and file types last; hidden files are searched; `.git`
//! itself is skipped. Ignore files are read from the view only (the container's view): the
//! directories above the mounts are not the agent's.

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::types::Types;
use ignore::Match;
use rustix::fs::FileType;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::sys;
use super::view::{Resolved, View};
use super::FsError;

/// Largest ignore file read.
const IGNORE_FILE_CAP: u64 = 1024 * 1024;

/// What a walk filters by, besides the ignore files it finds. [`Rules::default`] is `rg`'s.
pub struct Rules {
    /// Glob overrides (Grep's `glob`): a match includes or excludes, before any ignore rule.
    pub overrides: Option<Override>,
    /// File types (Grep's `type`).
    pub types: Option<Types>,
    /// Honour the ignore files of the directories above the base (in the view).
    pub parents: bool,
    /// Honour the user's global git excludes.
    pub global: bool,
    /// Hand out symlinks too (as links: never followed).
    pub links: bool,
    /// Directories left out with everything beneath them.
    pub skip_dirs: Vec<PathBuf>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            overrides: None,
            types: None,
            parents: true,
            global: true,
            links: false,
            skip_dirs: Vec::new(),
        }
    }
}

/// A regular file (or, when asked for, a symlink) the walk found: its path in the view and the
/// handle of its directory.
pub struct Found {
    /// The path as the container names it.
    pub path: PathBuf,
    /// A regular file or a symlink.
    pub kind: FileType,
    dir: Arc<OwnedFd>,
    name: OsString,
}

impl Found {
    /// Its status (a symlink's own); `None` when it is gone.
    pub fn stat(&self) -> Option<rustix::fs::Stat> {
        sys::lstat_at(self.dir.as_fd(), &self.name).ok().flatten()
    }

    /// A symlink's target; `None` when it is not (or no longer) a symlink.
    pub fn read_link(&self) -> Option<PathBuf> {
        sys::readlink_at(self.dir.as_fd(), &self.name)
            .ok()
            .flatten()
    }

    /// Opens the file for reading (`O_NONBLOCK`, no symlink, regular files only).
    pub fn open(&self) -> Result<std::fs::File, FsError> {
        Ok(std::fs::File::from(sys::open_regular_at(
            self.dir.as_fd(),
            &self.name,
        )?))
    }

    /// Its modification time (the epoch when it is gone).
    pub fn modified(&self) -> SystemTime {
        match sys::lstat_at(self.dir.as_fd(), &self.name) {
            Ok(Some(st)) => super::tree::mtime(&st),
            _ => SystemTime::UNIX_EPOCH,
        }
    }
}

/// The ignore files of one directory.
struct Layer {
    ignore: Gitignore,
    git: Gitignore,
    exclude: Gitignore,
}

/// Walks `base` (a directory, or one regular file, which is visited whatever the rules say)
/// and calls `visit` with every regular file the rules keep, until it returns false.
pub fn walk(
    view: &View,
    base: &Resolved,
    rules: &Rules,
    visit: &mut dyn FnMut(Found) -> bool,
) -> Result<(), FsError> {
    let global = if rules.global {
        Gitignore::global().0
    } else {
        Gitignore::empty()
    };
    match base.kind()? {
        Some(FileType::Directory) => {}
        Some(FileType::RegularFile) => {
            if let Some((dir, name)) = base.entry() {
                visit(Found {
                    path: base.path().to_path_buf(),
                    kind: FileType::RegularFile,
                    dir,
                    name,
                });
            }
            return Ok(());
        }
        Some(FileType::Symlink) => return Err(FsError::Symlink),
        _ => return Ok(()),
    }
    let root = Arc::new(base.open_dir()?);
    let mut layers = if rules.parents {
        ancestor_layers(view, base.path())
    } else {
        Vec::new()
    };
    layers.push(Arc::new(layer(view, root.as_fd(), base.path())));
    // Depth first, in name order; an explicit stack, so a deep tree cannot exhaust ours. A
    // directory waiting its turn is its parent's handle and its name, opened when its turn
    // comes: the handles open at once are those on the way down, not one per directory listed
    // (thousands side by side ran the runner out of handles, and every other open of the
    // process with it).
    let mut stack: Vec<Pending> = Vec::new();
    let mut first = Some((base.path().to_path_buf(), root, layers));
    loop {
        let (dir_path, dir, layers) = match first.take() {
            Some(top) => top,
            None => {
                let Some(p) = stack.pop() else { break };
                let opened = match p.mount {
                    Some(m) => view.root(m),
                    None => sys::dir_at(p.parent.as_fd(), &p.name, false).map(Arc::new),
                };
                // Swapped for a link or removed since it was listed: skip it; a masked
                // directory moved here under another name: skip it too.
                let Ok(sub) = opened else { continue };
                if p.mount.is_none() && view.is_masked_dir(sub.as_fd()) {
                    continue;
                }
                let mut l = p.layers;
                l.push(Arc::new(layer(view, sub.as_fd(), &p.path)));
                (p.path, sub, l)
            }
        };
        let Ok(entries) = sys::list(dir.as_fd()) else {
            continue;
        };
        let mut subdirs = Vec::new();
        for (name, kind) in entries {
            if name == ".git" {
                continue;
            }
            let path = dir_path.join(&name);
            if view.is_masked(&path) || rules.skip_dirs.iter().any(|d| path.starts_with(d)) {
                continue;
            }
            let mount = view.mount_exact(&path);
            let is_dir = mount.is_some() || kind == FileType::Directory;
            let wanted =
                kind == FileType::RegularFile || (rules.links && kind == FileType::Symlink);
            if !(is_dir || wanted) {
                // Symlinks are not followed; FIFOs, sockets and devices are not searched.
                continue;
            }
            if ignored(&layers, &global, rules, &path, is_dir) {
                continue;
            }
            if !is_dir {
                let go_on = visit(Found {
                    path,
                    kind,
                    dir: dir.clone(),
                    name,
                });
                if !go_on {
                    return Ok(());
                }
                continue;
            }
            subdirs.push(Pending {
                path,
                parent: dir.clone(),
                name,
                mount,
                layers: layers.clone(),
            });
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// A directory the walk will enter: its path, its parent's handle and its name (or the mount
/// at that path), the ignore layers above it.
struct Pending {
    path: PathBuf,
    parent: Arc<OwnedFd>,
    name: OsString,
    mount: Option<usize>,
    layers: Vec<Arc<Layer>>,
}

/// True when the rules leave `path` out.
fn ignored(
    layers: &[Arc<Layer>],
    global: &Gitignore,
    rules: &Rules,
    path: &Path,
    is_dir: bool,
) -> bool {
    if let Some(o) = &rules.overrides {
        match o.matched(path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    let first = |pick: fn(&Layer) -> &Gitignore| {
        layers
            .iter()
            .rev()
            .map(|l| pick(l).matched(path, is_dir))
            .find(|m| !m.is_none())
    };
    let m = first(|l| &l.ignore)
        .or_else(|| first(|l| &l.git))
        .or_else(|| first(|l| &l.exclude))
        .unwrap_or_else(|| global.matched(path, is_dir));
    if m.is_ignore() {
        return true;
    }
    if let Some(t) = &rules.types {
        if t.matched(path, is_dir).is_ignore() {
            return true;
        }
    }
    false
}

/// The ignore layers of the directories above `base` that the view shows (outermost first).
fn ancestor_layers(view: &View, base: &Path) -> Vec<Arc<Layer>> {
    let mut dirs: Vec<&Path> = base.ancestors().skip(1).collect();
    dirs.reverse();
    let mut out = Vec::new();
    for d in dirs {
        if let Ok(r) = view.resolve(d, false, false) {
            if r.path() == d {
                if let Ok(fd) = r.open_dir() {
                    out.push(Arc::new(layer(view, fd.as_fd(), d)));
                }
            }
        }
    }
    out
}

/// Reads the ignore files of the directory `dir` (at `path` in the view).
fn layer(view: &View, dir: BorrowedFd<'_>, path: &Path) -> Layer {
    let build = |text: Option<String>, from: PathBuf| -> Gitignore {
        let Some(text) = text else {
            return Gitignore::empty();
        };
        let mut b = GitignoreBuilder::new(path);
        for line in text.lines() {
            let _ = b.add_line(Some(from.clone()), line);
        }
        b.build().unwrap_or_else(|_| Gitignore::empty())
    };
    let read = |name: &str| -> Option<String> {
        let fd = sys::open_regular_at(dir, OsStr::new(name)).ok()?;
        let bytes = sys::read_regular(fd, IGNORE_FILE_CAP).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    Layer {
        ignore: build(read(".ignore"), path.join(".ignore")),
        git: build(read(".gitignore"), path.join(".gitignore")),
        exclude: build(git_exclude(view, dir, path), path.join(".git/info/exclude")),
    }
}

/// The text of the repository's `info/exclude` when `dir` holds a `.git` directory, or a
/// `.git` file naming a worktree's git directory (its `commondir` then says where the
/// repository is), read through the view.
fn git_exclude(view: &View, dir: BorrowedFd<'_>, path: &Path) -> Option<String> {
    let st = sys::lstat_at(dir, OsStr::new(".git")).ok()??;
    let common: PathBuf = match sys::kind(&st) {
        FileType::Directory => path.join(".git"),
        FileType::RegularFile => {
            let text = view_read(view, &path.join(".git"))?;
            let gitdir = PathBuf::from(text.lines().next()?.strip_prefix("gitdir: ")?.trim());
            let gitdir = if gitdir.is_absolute() {
                gitdir
            } else {
                path.join(gitdir)
            };
            match view_read(view, &gitdir.join("commondir")) {
                Some(c) => {
                    let c = PathBuf::from(c.lines().next()?.trim());
                    if c.is_absolute() {
                        c
                    } else {
                        gitdir.join(c)
                    }
                }
                None => gitdir,
            }
        }
        _ => return None,
    };
    view_read(view, &common.join("info/exclude"))
}

/// A small file read through the view (symlinks as the container follows them).
fn view_read(view: &View, path: &Path) -> Option<String> {
    let bytes = view
        .with(path, false, false, |r| r.read(IGNORE_FILE_CAP))
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
