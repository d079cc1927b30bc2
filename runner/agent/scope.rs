//! Write scopes (issue 27 §3): the coordinator's dispatch may name what a worker may write
//! (`"writes": ["src/http/", "tests/http_test.c"]`, paths relative to the repository root:
//! the workspace, or the same directory in the worker's worktree with `--isolate`).
//! The worker's container then sees its place read-only except those paths: a read-only bind of
//! the workspace (or worktree) with a read-write bind of each scope path on top, so an
//! out-of-scope write fails with the kernel's read-only error; the host-side file tools see the
//! same mounts ([`super::confine`], the most specific mount wins).
//!
//! Overlap rule ([`overlaps`]): two scopes overlap when a path of one lies at or beneath a path
//! of the other. An unscoped worker may write everything, so it overlaps every scoped worker;
//! two unscoped workers do not wait for each other (they share the checkout as before scopes
//! existed). Overlapping workers never run at the same time: the second waits
//! ([`super::fanout::WorkerSlots::claim`]).
//!
//! A scope path is made before its mount, race-free beneath the place's root (directory handles,
//! no symlink followed): a missing path ending in `/` becomes a directory, any other missing
//! path an empty file. A symlink anywhere on the way is refused.
//!
//! The read-write mount is then pinned to the object the host opened ([`crate::sandbox::Pin`]):
//! once the engine has mounted it, before anything runs in the container, the container's mount
//! at that path must be that very object, or the container is removed and the worker refused.
//! So a process that can write the workspace (a worker's background process, a finished
//! worker's leftovers) and swaps a path component for a symlink after this look can at most
//! get the worker refused, never a read-write mount anywhere else. `tests/scope_workers.rs`
//! runs that attack against the real engine.

use rustix::fs::FileType;
use std::path::{Component, Path, PathBuf};

use crate::fsroot::{plant::is_git_name, FsError, Tree};
use crate::sandbox::{Mount, Pin};

/// Most paths one dispatch may name.
pub const MAX_PATHS: usize = 64;

/// Why a `writes` list or its mounts were refused (the coordinator reads the text).
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// An empty list, or an empty path.
    #[error("writes 里有空路径(不限范围就别写 writes)")]
    Empty,
    /// Too many paths.
    #[error("writes 最多 {MAX_PATHS} 个路径")]
    TooMany,
    /// An absolute path.
    #[error("{0}: writes 的路径要相对仓库根目录,不能是绝对路径")]
    Absolute(String),
    /// `..` in a path.
    #[error("{0}: writes 的路径里不能有 ..")]
    Parent(String),
    /// `.git` in a path.
    #[error("{0}: .git 不能写")]
    Git(String),
    /// The repository root itself.
    #[error("{0}: 这是整个仓库;不限范围就别写 writes")]
    Root(String),
    /// The path could not be made or opened without following a symlink.
    #[error("{path}: 不能当写权限范围:{source}")]
    Fs {
        /// The path as given.
        path: String,
        /// Why.
        source: FsError,
    },
    /// Neither a directory nor a regular file (or a directory named as a file, and back).
    #[error("{0}: 不是普通文件或目录,不能当写权限范围")]
    Kind(String),
}

/// One path of a scope, normalised: relative, no `.`/`..`, no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopePath {
    /// Relative to the repository root.
    pub rel: PathBuf,
    /// Named with a trailing `/`: a directory.
    pub dir: bool,
}

/// What a worker may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteScope {
    paths: Vec<ScopePath>,
}

impl WriteScope {
    /// Validates the coordinator's `writes` list (module doc).
    ///
    /// # Errors
    /// The first path refused.
    pub fn parse(raw: &[String]) -> Result<WriteScope, ScopeError> {
        if raw.is_empty() {
            return Err(ScopeError::Empty);
        }
        if raw.len() > MAX_PATHS {
            return Err(ScopeError::TooMany);
        }
        let mut paths: Vec<ScopePath> = Vec::new();
        for s in raw {
            let p = parse_one(s)?;
            if !paths.iter().any(|q| q.rel == p.rel) {
                paths.push(p);
            }
        }
        Ok(WriteScope { paths })
    }

    /// The paths.
    pub fn paths(&self) -> &[ScopePath] {
        &self.paths
    }

    /// The paths as the model wrote them back (`src/http/, tests/x.c`).
    pub fn describe(&self) -> String {
        self.paths
            .iter()
            .map(|p| format!("{}{}", p.rel.display(), if p.dir { "/" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn parse_one(s: &str) -> Result<ScopePath, ScopeError> {
    if s.trim().is_empty() || s.contains('\0') {
        return Err(ScopeError::Empty);
    }
    let p = Path::new(s);
    if p.is_absolute() {
        return Err(ScopeError::Absolute(s.into()));
    }
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) if is_git_name(n) => return Err(ScopeError::Git(s.into())),
            Component::Normal(n) => rel.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err(ScopeError::Parent(s.into())),
            Component::RootDir | Component::Prefix(_) => {
                return Err(ScopeError::Absolute(s.into()))
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(ScopeError::Root(s.into()));
    }
    Ok(ScopePath {
        rel,
        dir: s.ends_with('/'),
    })
}

/// True when workers with these scopes may not run at the same time (module doc): `None` is an
/// unscoped worker.
pub fn overlaps(a: Option<&WriteScope>, b: Option<&WriteScope>) -> bool {
    match (a, b) {
        (None, None) => false,
        (None, Some(_)) | (Some(_), None) => true,
        (Some(a), Some(b)) => a.paths.iter().any(|p| {
            b.paths
                .iter()
                .any(|q| p.rel.starts_with(&q.rel) || q.rel.starts_with(&p.rel))
        }),
    }
}

/// Narrows the mounts of a worker whose place is `root` to `scope`: the mounts holding `root`
/// (the workspace, or the worktree) turn read-only, each scope path (made when missing, see the
/// module doc) is mounted read-write on top, after it, pinned to the handle opened here, and the
/// workbench too when it lies inside `root` (it is shared scratch space, never a scope). The
/// handles stay open as long as the mounts (their clones) do: keep them until the worker's
/// container is gone.
///
/// # Errors
/// A scope path could not be made or opened, or is a symlink, FIFO or device.
pub fn narrow(
    root: &Path,
    scope: &WriteScope,
    mounts: &mut Vec<Mount>,
    workbench: Option<&Path>,
) -> Result<(), ScopeError> {
    let tree = Tree::new(root);
    let mut extra = Vec::new();
    for p in &scope.paths {
        let abs = root.join(&p.rel);
        let shown = || format!("{}{}", p.rel.display(), if p.dir { "/" } else { "" });
        let fs = |source| ScopeError::Fs {
            path: shown(),
            source,
        };
        match tree.kind(&abs).map_err(fs)? {
            Some(FileType::Directory) => {}
            Some(FileType::RegularFile) if !p.dir => {}
            Some(FileType::Symlink) => return Err(fs(FsError::Symlink)),
            Some(_) => return Err(ScopeError::Kind(shown())),
            None if p.dir => tree.create_dir_all(&abs).map_err(fs)?,
            None => drop(tree.open_rw(&abs).map_err(fs)?),
        }
        // What gets mounted is what this handle holds: its type is checked on the handle, so
        // a swap since the look above is refused or harmless, never mounted.
        let fd = tree.pin(&abs).map_err(fs)?;
        let kind = rustix::fs::fstat(&fd)
            .map(|st| FileType::from_raw_mode(st.st_mode))
            .map_err(|e| fs(e.into()))?;
        match kind {
            FileType::Directory => {}
            FileType::RegularFile if !p.dir => {}
            _ => return Err(ScopeError::Kind(shown())),
        }
        extra.push(Mount::pinned(abs, Pin::new(fd), false));
    }
    for m in mounts
        .iter_mut()
        .filter(|m| root.starts_with(&m.inside) && !m.is_shadow())
    {
        m.read_only = true;
    }
    // The workbench inside the root is read-write too, so it is pinned like a scope path.
    if let Some(wb) = workbench.filter(|wb| wb.starts_with(root) && *wb != root) {
        let fd = tree.pin(wb).map_err(|source| ScopeError::Fs {
            path: wb.display().to_string(),
            source,
        })?;
        mounts.push(Mount::pinned(wb.to_path_buf(), Pin::new(fd), false));
    }
    mounts.extend(extra);
    Ok(())
}

/// The note for the end of a failing tool result of a scoped worker.
pub fn failure_note(scope: &str) -> String {
    format!("(你的写权限范围:{scope};范围外的工作区是只读的,写不进去会报 Read-only file system)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(p: &[&str]) -> WriteScope {
        WriteScope::parse(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn bad_paths_are_refused() {
        let bad = |s: &str| WriteScope::parse(&[s.to_string()]).unwrap_err();
        assert!(matches!(bad("/etc"), ScopeError::Absolute(_)));
        assert!(matches!(bad("src/../.."), ScopeError::Parent(_)));
        assert!(matches!(bad("../x"), ScopeError::Parent(_)));
        assert!(matches!(bad(".git/hooks"), ScopeError::Git(_)));
        assert!(matches!(bad("sub/.GIT"), ScopeError::Git(_)));
        assert!(matches!(bad("."), ScopeError::Root(_)));
        assert!(matches!(bad("./"), ScopeError::Root(_)));
        assert!(matches!(bad(" "), ScopeError::Empty));
        assert!(matches!(
            WriteScope::parse(&[]).unwrap_err(),
            ScopeError::Empty
        ));
        let many: Vec<String> = (0..=MAX_PATHS).map(|i| format!("d{i}")).collect();
        assert!(matches!(
            WriteScope::parse(&many).unwrap_err(),
            ScopeError::TooMany
        ));
        let s = scope(&["./src/http/", "tests/t.c", "src/http"]);
        assert_eq!(s.paths().len(), 2);
        assert_eq!(s.describe(), "src/http/, tests/t.c");
    }

    #[test]
    fn overlap_rule() {
        let a = scope(&["src/http/"]);
        let b = scope(&["src/db/", "tests/db.c"]);
        let parent = scope(&["src"]);
        let prefix_only = scope(&["src/http2"]);
        assert!(!overlaps(Some(&a), Some(&b)));
        assert!(overlaps(Some(&a), Some(&a)));
        assert!(overlaps(Some(&a), Some(&parent)));
        assert!(overlaps(Some(&parent), Some(&b)));
        // Component-wise: `src/http2` is not beneath `src/http`.
        assert!(!overlaps(Some(&a), Some(&prefix_only)));
        assert!(overlaps(None, Some(&a)) && overlaps(Some(&b), None));
        assert!(!overlaps(None, None));
    }

    #[test]
    fn narrowing_makes_missing_paths_and_refuses_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        let mut mounts = vec![Mount::same(ws.clone(), false)];
        let wb = ws.join(".flower");
        std::fs::create_dir_all(&wb).unwrap();
        narrow(
            &ws,
            &scope(&["src/", "new/deep/", "tests/t.c"]),
            &mut mounts,
            Some(&wb),
        )
        .unwrap();
        assert!(mounts[0].read_only);
        let rw: Vec<_> = mounts[1..]
            .iter()
            .map(|m| (&m.inside, m.read_only))
            .collect();
        assert_eq!(
            rw,
            vec![
                (&wb, false),
                (&ws.join("src"), false),
                (&ws.join("new/deep"), false),
                (&ws.join("tests/t.c"), false)
            ]
        );
        assert!(ws.join("new/deep").is_dir() && ws.join("tests/t.c").is_file());
        // Each scope mount is pinned to the object at its path (what the container must show).
        use std::os::unix::fs::MetadataExt;
        for m in &mounts[1..] {
            let st = std::fs::metadata(&m.inside).unwrap();
            let pin = m.pin.as_ref().expect("pinned");
            assert_eq!(pin.identity().unwrap(), (st.dev(), st.ino()), "{m:?}");
        }
        assert!(mounts[0].pin.is_none());
        // A link on the way, or as the path, is never followed (nor anything made through it).
        let outside = root.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        for p in ["link/", "link/made/", "link/f.c", "link"] {
            let mut m = vec![Mount::same(ws.clone(), false)];
            let e = narrow(&ws, &scope(&[p]), &mut m, None).unwrap_err();
            assert!(matches!(e, ScopeError::Fs { .. }), "{p}: {e}");
            assert!(!m[0].read_only && m.len() == 1, "{p}");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A file named as a directory.
        let mut m = vec![Mount::same(ws.clone(), false)];
        assert!(matches!(
            narrow(&ws, &scope(&["tests/t.c/"]), &mut m, None).unwrap_err(),
            ScopeError::Kind(_)
        ));
    }
}
