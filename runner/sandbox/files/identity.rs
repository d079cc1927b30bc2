//! [`WorkspaceIdentity`]: a content identity of a workspace, so a verdict is bound to what it
//! judged (DESIGN.md invariant 8). The goal guard records one before and one after the judge;
//! any difference voids an ACHIEVED verdict. The isolation work reuses it to tell whether a
//! worktree changed.
//!
//! What counts is what git would count as the project: every file that is tracked, or untracked
//! and not ignored (`.gitignore`, `.git/info/exclude`), with its content and mode (executable
//! bit, symlink target), plus the repository's `HEAD` and refs (a commit is a change too).
//! The rest of `.git/` and the caller's exclusions never count: directories (the runner's own
//! `runs/` and workbench, which change while any agent runs) and single files by identity (the
//! files the runner's own stdout and stderr go to, `flow::outputs`). Outside a git
//! repository every file counts except those a `.gitignore` in the tree ignores.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::fsroot::walk::{walk, Rules};
use crate::fsroot::{Tree, View, ViewMount};

/// A file on disk by identity: its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileKey {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileKey {
    /// The key of `meta`.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What [`identity`] leaves out besides `.git/` and ignored files.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    /// Directories (absolute): everything beneath them.
    pub dirs: Vec<PathBuf>,
    /// Single files by device and inode, wherever they are in the tree.
    pub files: Vec<FileKey>,
}

/// One file's identity: a SHA-256 over its kind, mode and content (or link target).
type FileDigest = [u8; 32];

/// The content identity of a workspace at one moment. Two identities are equal exactly when
/// the same files exist with the same content and mode. Serialisable: a backend without the
/// caller's disk computes it in the sandbox and sends it back ([`super::wire`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkspaceIdentity {
    /// Path relative to the root (`/`-separated) → its digest.
    files: BTreeMap<String, FileDigest>,
}

impl WorkspaceIdentity {
    /// Number of files counted.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no file counted.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// One digest over every file (hex, 64 characters), for records and logs.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (path, d) in &self.files {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(d);
        }
        hex::encode(h.finalize())
    }

    /// The paths that differ between `self` (before) and `after`: changed, added or removed,
    /// sorted. Empty when the identities are equal.
    pub fn changed(&self, after: &WorkspaceIdentity) -> Vec<String> {
        let mut out: Vec<String> = self
            .files
            .iter()
            .filter(|(p, d)| after.files.get(*p) != Some(*d))
            .map(|(p, _)| p.clone())
            .collect();
        out.extend(
            after
                .files
                .keys()
                .filter(|p| !self.files.contains_key(*p))
                .cloned(),
        );
        out.sort();
        out
    }
}

/// Computes the identity of the tree at `root`, skipping `.git/`, every path under one of
/// `exclude.dirs` (absolute paths; ones outside `root` are irrelevant) and the files in
/// `exclude.files`.
///
/// # Errors
/// I/O errors reading the root or a file's content. A file that vanishes between listing and
/// reading counts as absent, not as an error (agents may be deleting temporaries).
pub fn identity(root: &Path, exclude: &Exclusions) -> io::Result<WorkspaceIdentity> {
    let root = root.canonicalize()?;
    let skip_files = exclude.files.clone();
    let is_skipped_key = move |st: Option<&rustix::fs::Stat>| {
        !skip_files.is_empty()
            && st.is_some_and(|st| {
                skip_files.contains(&FileKey {
                    dev: st.st_dev,
                    ino: st.st_ino,
                })
            })
    };
    let exclude: Vec<PathBuf> = exclude
        .dirs
        .iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .collect();

    // Agents write here while the judge looks: the walk goes through directory handles and
    // never follows a symlink (a link counts by its target string), and files are opened
    // `O_NONBLOCK` from their directory's handle and must be regular (fsroot).
    let view = View::new(
        vec![ViewMount {
            path: root.clone(),
            read_only: true,
        }],
        Vec::new(),
    );
    let base = view
        .resolve(&root, false, false)
        .map_err(io::Error::other)?;
    let rules = Rules {
        parents: false,
        global: false,
        links: true,
        skip_dirs: exclude.clone(),
        ..Rules::default()
    };
    let mut files = BTreeMap::new();
    let mut failed: Option<io::Error> = None;
    walk(&view, &base, &rules, &mut |f| {
        let st = f.stat();
        if is_skipped_key(st.as_ref()) {
            return true;
        }
        let digest = if f.kind == rustix::fs::FileType::Symlink {
            f.read_link().map(|t| link_digest(&t))
        } else {
            match f.open() {
                Ok(file) => match content_digest(file) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                },
                // Gone, or swapped for something that is not a regular file: not counted.
                Err(_) => None,
            }
        };
        if let Some(d) = digest {
            files.insert(rel(&root, &f.path), d);
        }
        true
    })
    .map_err(io::Error::from)?;
    if let Some(e) = failed {
        return Err(e);
    }
    let tree = Tree::new(&root);
    let skipped_file = |p: &Path| {
        let st = tree.status(p).ok().flatten();
        is_skipped_key(st.as_ref())
    };
    add_tracked(&root, &tree, &exclude, &skipped_file, &mut files)?;
    add_refs(&root, &mut files);
    Ok(WorkspaceIdentity { files })
}

/// Adds the repository's `HEAD` and every ref as `.git:<name>` entries: a commit, a reset or a
/// moved branch changes no file of the tree but changes the project all the same (a judge in the
/// worker's pod can reach the repository through `/proc/<pid>/root`). Outside a repository:
/// nothing.
fn add_refs(root: &Path, files: &mut BTreeMap<String, FileDigest>) {
    let Ok(repo) = git2::Repository::discover(root) else {
        return;
    };
    let describe = |r: &git2::Reference<'_>| -> Option<(String, String)> {
        let name = r.name().ok()?.to_string();
        let target = match (r.symbolic_target().ok().flatten(), r.target()) {
            (Some(sym), _) => format!("ref: {sym}"),
            (None, Some(oid)) => oid.to_string(),
            (None, None) => return None,
        };
        Some((name, target))
    };
    let mut refs: Vec<(String, String)> = Vec::new();
    if let Ok(head) = repo.find_reference("HEAD") {
        refs.extend(describe(&head));
    }
    if let Ok(all) = repo.references() {
        refs.extend(all.flatten().filter_map(|r| describe(&r)));
    }
    for (name, target) in refs {
        let mut h = Sha256::new();
        h.update(b"ref\0");
        h.update(target.as_bytes());
        files.insert(format!(".git:{name}"), h.finalize().into());
    }
}

/// Adds files git tracks that the walk skipped because an ignore rule matches them (a tracked
/// file stays part of the project even when ignored). Outside a repository: nothing.
fn add_tracked(
    root: &Path,
    tree: &Tree,
    exclude: &[PathBuf],
    skipped_file: &dyn Fn(&Path) -> bool,
    files: &mut BTreeMap<String, FileDigest>,
) -> io::Result<()> {
    let Ok(repo) = git2::Repository::discover(root) else {
        return Ok(());
    };
    let (Some(workdir), Ok(index)) = (repo.workdir(), repo.index()) else {
        return Ok(());
    };
    let workdir = workdir.canonicalize()?;
    for entry in index.iter() {
        let Ok(path) = std::str::from_utf8(&entry.path) else {
            continue;
        };
        let abs = workdir.join(path);
        if !abs.starts_with(root)
            || exclude.iter().any(|e| abs.starts_with(e))
            || abs.components().any(|c| c.as_os_str() == ".git")
        {
            continue;
        }
        let key = rel(root, &abs);
        if files.contains_key(&key) || skipped_file(&abs) {
            continue;
        }
        if let Some(d) = file_digest(tree, &abs)? {
            files.insert(key, d);
        }
    }
    Ok(())
}

/// `path` relative to `root`, `/`-separated.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The digest of a symlink: its target string.
fn link_digest(target: &Path) -> FileDigest {
    let mut h = Sha256::new();
    h.update(b"link\0");
    h.update(target.as_os_str().as_encoded_bytes());
    h.finalize().into()
}

/// The digest of an open regular file: its permission bits (executable or not, readable by
/// whom: what git and a judge care about) and its content.
fn content_digest(mut f: std::fs::File) -> io::Result<FileDigest> {
    use std::os::unix::fs::PermissionsExt;
    let mode = f.metadata()?.permissions().mode();
    let mut h = Sha256::new();
    h.update(format!("file {:o}\0", mode & 0o777).as_bytes());
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// The digest of the file or symlink at `path` (beneath the tree's anchor, no symlink followed
/// on the way); `None` when it vanished or is neither.
fn file_digest(tree: &Tree, path: &Path) -> io::Result<Option<FileDigest>> {
    match tree.kind(path)? {
        Some(rustix::fs::FileType::Symlink) => Ok(tree.read_link(path)?.map(|t| link_digest(&t))),
        Some(rustix::fs::FileType::RegularFile) => match tree.open_regular(path) {
            Ok(Some((f, _))) => content_digest(f).map(Some),
            Ok(None) | Err(_) => Ok(None),
        },
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn id(root: &Path, dirs: &[PathBuf]) -> WorkspaceIdentity {
        let ex = Exclusions {
            dirs: dirs.to_vec(),
            files: Vec::new(),
        };
        identity(root, &ex).unwrap()
    }

    #[test]
    fn content_mode_and_presence_change_it() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(r, "a.txt", "one");
        write(r, "src/b.rs", "fn main() {}");
        let before = id(r, &[]);
        assert_eq!(before.len(), 2);
        assert_eq!(before, id(r, &[]), "stable when nothing changes");

        write(r, "a.txt", "two");
        let after = id(r, &[]);
        assert_eq!(before.changed(&after), vec!["a.txt"]);
        assert_ne!(before.digest(), after.digest());

        let p = r.join("src/b.rs");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(after.changed(&id(r, &[])), vec!["src/b.rs"]);

        let before = id(r, &[]);
        write(r, "new.txt", "x");
        std::fs::remove_file(r.join("a.txt")).unwrap();
        assert_eq!(before.changed(&id(r, &[])), vec!["a.txt", "new.txt"]);
    }

    #[test]
    fn runner_dirs_git_dir_and_ignored_files_do_not_count() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        git2::Repository::init(r).unwrap();
        write(r, ".gitignore", "target/\n*.log\n");
        write(r, "main.rs", "x");
        let ex = vec![r.join("runs"), r.join(".flower")];
        let before = id(r, &ex);
        write(r, "runs/manifest.json", "[]");
        write(r, ".flower/notes/x.md", "n");
        write(r, "target/debug/app", "bin");
        write(r, "server.log", "line");
        write(r, ".git/HEAD.lock", "x");
        assert_eq!(before, id(r, &ex));
        // An untracked, not ignored file counts.
        write(r, "notes.txt", "n");
        assert_eq!(before.changed(&id(r, &ex)), vec!["notes.txt"]);
    }

    #[test]
    fn a_commit_or_a_moved_branch_changes_it_though_no_file_does() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        flowerbox_testkit::git_with_identity(r, &["init", "-q", "-b", "main"]);
        write(r, "a.txt", "one");
        flowerbox_testkit::git_with_identity(r, &["add", "-A"]);
        flowerbox_testkit::git_with_identity(r, &["commit", "-qm", "one"]);
        let before = id(r, &[]);
        assert_eq!(before, id(r, &[]));
        // A judge's `git commit --allow-empty` (through /proc/<pid>/root) leaves every file alone.
        flowerbox_testkit::git_with_identity(r, &["commit", "-q", "--allow-empty", "-m", "judge"]);
        assert_eq!(before.changed(&id(r, &[])), vec![".git:refs/heads/main"]);
        let before = id(r, &[]);
        flowerbox_testkit::git_with_identity(r, &["checkout", "-q", "--detach"]);
        assert_eq!(before.changed(&id(r, &[])), vec![".git:HEAD"]);
    }

    #[test]
    fn tracked_files_count_even_when_ignored() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let repo = git2::Repository::init(r).unwrap();
        write(r, "keep.log", "v1");
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("keep.log")).unwrap();
        index.write().unwrap();
        write(r, ".gitignore", "*.log\n");
        let before = id(r, &[]);
        write(r, "keep.log", "v2");
        assert_eq!(before.changed(&id(r, &[])), vec!["keep.log"]);
    }

    #[test]
    fn symlinks_count_by_target() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(r, "a", "1");
        write(r, "b", "2");
        std::os::unix::fs::symlink("a", r.join("l")).unwrap();
        let before = id(r, &[]);
        std::fs::remove_file(r.join("l")).unwrap();
        std::os::unix::fs::symlink("b", r.join("l")).unwrap();
        assert_eq!(before.changed(&id(r, &[])), vec!["l"]);
    }

    #[test]
    fn excluded_files_do_not_count_wherever_they_are() {
        // The runner's own `> run.log` in a plain directory and in a repository, tracked or not.
        for git in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let r = d.path();
            if git {
                flowerbox_testkit::git_with_identity(r, &["init", "-q", "-b", "main"]);
            }
            write(r, "a.txt", "one");
            write(r, "logs/run.log", "start\n");
            if git {
                flowerbox_testkit::git_with_identity(r, &["add", "-A"]);
                flowerbox_testkit::git_with_identity(r, &["commit", "-qm", "one"]);
            }
            let log = r.join("logs/run.log");
            let ex = Exclusions {
                dirs: Vec::new(),
                files: vec![FileKey::of(&std::fs::metadata(&log).unwrap())],
            };
            let before = identity(r, &ex).unwrap();
            std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .unwrap()
                .write_all(b"more output\n")
                .unwrap();
            assert_eq!(before, identity(r, &ex).unwrap(), "git={git}");
            // Another file still counts.
            write(r, "a.txt", "two");
            assert_eq!(
                before.changed(&identity(r, &ex).unwrap()),
                vec!["a.txt"],
                "git={git}"
            );
        }
    }

    #[test]
    fn fifos_and_links_out_are_neither_waited_on_nor_followed() {
        // A worker leaves a FIFO and a link to a host directory in the workspace while the
        // judge looks: the identity neither blocks on the FIFO nor reads through the link.
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("ws");
        let host = d.path().join("host");
        write(&host, "secret.txt", "s");
        write(&r, "a.txt", "a");
        nix::unistd::mkfifo(&r.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink(&host, r.join("out")).unwrap();
        let got = id(&r, &[]);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.files.contains_key("out") && got.files.contains_key("a.txt"));
    }
}
