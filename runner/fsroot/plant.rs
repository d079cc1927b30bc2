//! Finding what git would run on the host beneath a directory agents wrote (issue 25 §2), and
//! moving it away race-free.
//!
//! git runs wherever it finds a repository: an entry named `.git` (a directory, a `gitdir:`
//! file or a symlink; on a case-insensitive file system also `.GIT` or `.Git`) makes its
//! directory one, and its `core.fsmonitor` runs on the user's next `git status` there; so does
//! a directory that is itself a git directory (a bare repository, `HEAD` beside `objects`,
//! `refs` or `commondir`) with `core.worktree` set, for whoever enters it. [`scan`] visits every
//! entry beneath a root from directory handles, one component at a time with `O_NOFOLLOW` (a
//! symlink is listed as itself, never entered), and reports each `.git` entry (any letter
//! case), each git directory (its `HEAD` when it is the root itself) and each special file
//! (FIFO, socket, device: git neither sees nor keeps them), without descending into a
//! repository. [`move_into`] renames such an entry, from the handle
//! of the directory it was listed in, into a directory flowerbox owns: the entry itself moves
//! (a symlink stays a symlink), content kept for inspection.

use rustix::fs::{AtFlags, FileType};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::sys;
use super::FsError;

/// Deepest directory nesting [`scan`] descends (each level holds one descriptor); deeper
/// directories are reported as [`Seen::TooDeep`].
pub const MAX_DEPTH: usize = 256;

/// True for `.git` in any letter case.
pub fn is_git_name(name: &OsStr) -> bool {
    name.as_bytes().eq_ignore_ascii_case(b".git")
}

/// What [`scan`] reports to its visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// An entry named `.git` in any case, of any type (not descended into).
    Git,
    /// A directory that git takes for a git directory (not descended into); for the scanned
    /// root itself, its `HEAD`.
    GitDir,
    /// A FIFO, socket or device.
    Special,
    /// A directory [`MAX_DEPTH`] levels down (not descended into).
    TooDeep,
}

/// One entry [`scan`] reports: where it is and what it is.
pub struct Found<'a> {
    /// The directory it is in, as the handle it was listed from.
    pub dir: BorrowedFd<'a>,
    /// Its name in `dir`.
    pub name: &'a OsStr,
    /// Its path relative to the scanned root.
    pub rel: &'a Path,
    /// Its (device, inode), its own (a symlink's, not its target's).
    pub id: (u64, u64),
    /// When it was made (birth time), or for a non-directory on a file system that does not
    /// keep one, its last status change: tells a new entry from an old one whose inode number
    /// was reused.
    pub born: Option<(i64, u32)>,
    /// What it is.
    pub seen: Seen,
}

/// See [`Found::born`].
fn born(dir: BorrowedFd<'_>, name: &OsStr) -> Option<(i64, u32)> {
    use rustix::fs::StatxFlags;
    let st = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BTIME | StatxFlags::CTIME | StatxFlags::TYPE,
    )
    .ok()?;
    let mask = StatxFlags::from_bits_retain(st.stx_mask);
    if mask.contains(StatxFlags::BTIME) {
        return Some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec));
    }
    let is_dir = u32::from(st.stx_mode) & 0o170000 == 0o040000;
    (!is_dir).then_some((st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec))
}

/// Visits every entry beneath the trusted directory `root` (symlinks never followed; the
/// directories whose (device, inode) is in `skip` not entered) and calls `visit` for each
/// `.git` entry, special file and too-deep directory. Returns the paths (relative) that could
/// not be read.
///
/// # Errors
/// `root` cannot be opened.
pub fn scan(
    root: &Path,
    skip: &[(u64, u64)],
    visit: &mut dyn FnMut(Found<'_>),
) -> Result<Vec<PathBuf>, FsError> {
    let fd = sys::open_trusted_dir(root)?;
    let mut unread = Vec::new();
    if let Walked::GitDir = walk(&fd, Path::new(""), 0, skip, visit, &mut unread) {
        let head = OsStr::new("HEAD");
        if let Ok(st) = rustix::fs::statat(&fd, head, AtFlags::SYMLINK_NOFOLLOW) {
            visit(Found {
                dir: fd.as_fd(),
                name: head,
                rel: Path::new("HEAD"),
                id: (st.st_dev, st.st_ino),
                born: born(fd.as_fd(), head),
                seen: Seen::GitDir,
            });
        }
    }
    Ok(unread)
}

/// What [`walk`] found a directory to be.
enum Walked {
    /// Walked through.
    Plain,
    /// A git directory: not walked.
    GitDir,
}

/// True when entries with these names make their directory a git directory for git's
/// discovery (`HEAD` and one of `objects`, `refs`, `commondir`; any letter case, any type:
/// counted generously).
fn looks_like_git_dir(entries: &[(OsString, FileType)]) -> bool {
    let has = |n: &[u8]| {
        entries
            .iter()
            .any(|(e, _)| e.as_bytes().eq_ignore_ascii_case(n))
    };
    has(b"HEAD") && (has(b"objects") || has(b"refs") || has(b"commondir"))
}

fn walk(
    dir: &OwnedFd,
    rel: &Path,
    depth: usize,
    skip: &[(u64, u64)],
    visit: &mut dyn FnMut(Found<'_>),
    unread: &mut Vec<PathBuf>,
) -> Walked {
    let entries = match sys::list(dir.as_fd()) {
        Ok(e) => e,
        Err(_) => {
            unread.push(rel.to_path_buf());
            return Walked::Plain;
        }
    };
    if looks_like_git_dir(&entries) {
        return Walked::GitDir;
    }
    for (name, kind) in entries {
        let path = rel.join(&name);
        let seen = if is_git_name(&name) {
            Some(Seen::Git)
        } else {
            match kind {
                FileType::Fifo
                | FileType::Socket
                | FileType::CharacterDevice
                | FileType::BlockDevice => Some(Seen::Special),
                FileType::Directory if depth + 1 >= MAX_DEPTH => Some(Seen::TooDeep),
                _ => None,
            }
        };
        if let Some(seen) = seen {
            let id = match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => (st.st_dev, st.st_ino),
                Err(_) => continue,
            };
            visit(Found {
                dir: dir.as_fd(),
                name: &name,
                rel: &path,
                id,
                born: born(dir.as_fd(), &name),
                seen,
            });
            continue;
        }
        if kind != FileType::Directory {
            continue;
        }
        let child = match sys::open_at(dir.as_fd(), &name, sys::dir_flags(), 0) {
            Ok(c) => c,
            // Replaced by something else since it was listed: not a directory now.
            Err(_) => continue,
        };
        if !skip.is_empty() {
            if let Ok(st) = rustix::fs::fstat(&child) {
                if skip.contains(&(st.st_dev, st.st_ino)) {
                    continue;
                }
            }
        }
        if let Walked::GitDir = walk(&child, &path, depth + 1, skip, visit, unread) {
            if let Ok(st) = rustix::fs::fstat(&child) {
                visit(Found {
                    dir: dir.as_fd(),
                    name: &name,
                    rel: &path,
                    id: (st.st_dev, st.st_ino),
                    born: born(dir.as_fd(), &name),
                    seen: Seen::GitDir,
                });
            }
        }
    }
    Walked::Plain
}

/// Moves the entry `name` of `dir` (not followed) into the directory `dest` (flowerbox's own,
/// created when missing) as `new_name` (never replacing an entry there).
///
/// # Errors
/// The rename failed (`EXDEV` when `dest` is on another file system).
pub fn move_into(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    dest: &Path,
    new_name: &OsStr,
) -> Result<(), FsError> {
    sys::check_name(name)?;
    sys::check_name(new_name)?;
    super::own::create_dir_all(dest)?;
    let to = sys::open_trusted_dir(dest)?;
    rustix::fs::renameat_with(dir, name, &to, new_name, rustix::fs::RenameFlags::NOREPLACE)?;
    Ok(())
}

/// Makes the tree at `path` — flowerbox's own now (moved by [`move_into`]), a directory no
/// agent writes — unfindable for git: each `.git` entry in it renamed `planted-git`, each git
/// directory's `HEAD` (its own included) renamed `HEAD.planted`, until none is left (what was
/// hidden below a git directory is found on the next pass). Content is kept. Returns how many
/// entries were renamed; a symlink at `path` is left alone (never followed).
pub fn defuse(path: &Path) -> usize {
    if super::own::kind(path) != Some(FileType::Directory) {
        return 0;
    }
    let mut renamed = 0;
    loop {
        let mut todo: Vec<(PathBuf, PathBuf)> = Vec::new();
        let _ = scan(path, &[], &mut |f| {
            let head = |dir: &Path| (dir.join("HEAD"), dir.join("HEAD.planted"));
            match f.seen {
                Seen::Git => todo.push((f.rel.to_path_buf(), f.rel.with_file_name("planted-git"))),
                Seen::GitDir if f.rel == Path::new("HEAD") => todo.push(head(Path::new(""))),
                Seen::GitDir => todo.push(head(f.rel)),
                Seen::Special | Seen::TooDeep => {}
            }
        });
        let before = renamed;
        for (from, to) in todo {
            if super::own::rename(&path.join(from), &path.join(to), false).is_ok() {
                renamed += 1;
            }
        }
        if renamed == before {
            return renamed;
        }
    }
}

/// The names of the entries of `dest` (for tests and reports).
pub fn names(dest: &Path) -> Vec<OsString> {
    sys::open_trusted_dir(dest)
        .and_then(|fd| sys::list(fd.as_fd()))
        .map(|v| v.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn found(root: &Path, skip: &[(u64, u64)]) -> Vec<(String, Seen)> {
        let mut out = Vec::new();
        scan(root, skip, &mut |f| {
            out.push((f.rel.display().to_string(), f.seen))
        })
        .unwrap();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn finds_git_entries_of_every_kind_and_case_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(outside.join("deep/.git")).unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        std::fs::create_dir_all(ws.join("src/.GIT")).unwrap();
        std::fs::create_dir_all(ws.join("a/b/.Git/x")).unwrap();
        std::fs::write(ws.join("a/.git"), "gitdir: /elsewhere\n").unwrap();
        symlink(&outside, ws.join("link")).unwrap();
        symlink(outside.join("deep/.git"), ws.join("b-link")).unwrap();
        std::fs::create_dir(ws.join("b")).unwrap();
        symlink(outside.join("deep/.git"), ws.join("b/.git")).unwrap();
        nix::unistd::mkfifo(&ws.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::create_dir_all(ws.join("notes/evil.git/objects")).unwrap();
        std::fs::write(ws.join("notes/evil.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(ws.join("notes/evil.git/hooks/.git")).unwrap();
        std::fs::create_dir_all(ws.join("notes/HEADS/refs")).unwrap();
        let skipped = ws.join("runs");
        std::fs::create_dir_all(skipped.join(".git")).unwrap();
        let skip = [crate::fsroot::own::identity(&skipped).unwrap()];
        assert_eq!(
            found(&ws, &skip),
            vec![
                (".git".to_string(), Seen::Git),
                ("a/.git".to_string(), Seen::Git),
                ("a/b/.Git".to_string(), Seen::Git),
                ("b/.git".to_string(), Seen::Git),
                ("fifo".to_string(), Seen::Special),
                ("notes/evil.git".to_string(), Seen::GitDir),
                ("src/.GIT".to_string(), Seen::Git),
            ]
        );
    }

    #[test]
    fn moves_the_entry_itself_into_the_quarantine() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("src/.git")).unwrap();
        std::fs::write(ws.join("src/.git/config"), "[core]\nfsmonitor = x\n").unwrap();
        let target = root.join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "k").unwrap();
        symlink(&target, ws.join(".GIT")).unwrap();
        let q = root.join("runs/quarantine");
        let mut n = 0;
        scan(&ws, &[], &mut |f| {
            n += 1;
            move_into(f.dir, f.name, &q.join(n.to_string()), OsStr::new("dot-git")).unwrap();
        })
        .unwrap();
        assert_eq!(n, 2);
        assert!(!ws.join("src/.git").exists() && ws.join("src").is_dir());
        assert!(std::fs::symlink_metadata(ws.join(".GIT")).is_err());
        // The symlink moved as itself; its target untouched.
        assert!(std::fs::symlink_metadata(q.join("1/dot-git"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(target.join("keep").is_file());
        assert_eq!(
            std::fs::read_to_string(q.join("2/dot-git/config")).unwrap(),
            "[core]\nfsmonitor = x\n"
        );
        assert_eq!(names(&q.join("2")), vec![OsString::from("dot-git")]);
        assert!(found(&ws, &[]).is_empty());
    }

    #[test]
    fn defused_trees_hold_no_repository_git_would_find() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let q = root.join("planted-git");
        for dir in [q.clone(), q.join("modules/sub")] {
            std::fs::create_dir_all(dir.join("objects")).unwrap();
            std::fs::create_dir_all(dir.join("refs")).unwrap();
            std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        }
        std::fs::create_dir_all(q.join("x/.git")).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir_all(outside.join("refs")).unwrap();
        std::fs::write(outside.join("HEAD"), "x").unwrap();
        symlink(&outside, root.join("link")).unwrap();
        assert_eq!(defuse(&q), 3);
        assert!(q.join("HEAD.planted").is_file() && q.join("modules/sub/HEAD.planted").is_file());
        assert!(q.join("x/planted-git").is_dir());
        assert!(found(&q, &[]).is_empty());
        assert_eq!(defuse(&root.join("link")), 0);
        assert!(outside.join("HEAD").is_file());
    }

    #[test]
    fn a_root_that_is_a_git_directory_reports_its_head() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("refs/.git")).unwrap();
        std::fs::write(root.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(found(&root, &[]), vec![("HEAD".to_string(), Seen::GitDir)]);
    }

    #[test]
    fn reports_directories_too_deep_to_walk() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let mut p = root.clone();
        for _ in 0..MAX_DEPTH + 2 {
            p.push("d");
        }
        std::fs::create_dir_all(p.join(".git")).unwrap();
        let f = found(&root, &[]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].1, Seen::TooDeep);
    }
}
