//! The lines a run wrote (issue 27 §4): a probe plants its defect in the run's own work, since
//! that is what the checks are there to verify (a defect in a line nobody touched, in an error
//! path no check reaches, says nothing about the checks of this run).
//!
//! The run's starting point is the commit `HEAD` named when the run started, read back from
//! `HEAD`'s reflog: every move of the workspace's `HEAD` is flowerbox's own integration or the
//! user's (workers see the workspace's `.git` read-only; with `--isolate` they commit in their
//! own ref directories). A file's lines the run wrote are the lines a diff from that commit's
//! version adds.
//!
//! Only a repository no agent can have made is read: the workspace's own `.git` as the run
//! found it at its start ([`crate::agent::place::workspace_git`], mounted read-only into every
//! writing role), or, without one, the repository holding the workspace's parent (outside
//! every mount). A `.git` (or a bare repository) an agent made in a workspace that had none is
//! never opened — its reflog or objects could be FIFOs that hang the host's read, or a
//! compressed blob of gigabytes inflated whole — and neither is one planted in a
//! subdirectory. Without a repository, without a reflog entry from before the start, or for a
//! file that commit does not have, every line of the file is the run's ([`Baseline::written`]
//! says `None`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The workspace's commit at the run's start.
pub struct Baseline {
    repo: git2::Repository,
    commit: git2::Oid,
    /// The workspace relative to the repository's work tree (empty when they are the same).
    prefix: PathBuf,
}

impl Baseline {
    /// The commit `HEAD` named at `since` in the workspace `ws`'s repository: its own `.git`
    /// when the run started with one (`git`, [`crate::agent::place::workspace_git`]), else the
    /// one holding its parent; `None` when there is no such record (module doc).
    pub fn at(ws: &Path, git: Option<&Path>, since: SystemTime) -> Option<Baseline> {
        let repo = match git {
            // Only `ws/.git` itself (the read-only mount), never `ws` as a bare repository.
            Some(_) => git2::Repository::open_ext(
                ws,
                git2::RepositoryOpenFlags::NO_SEARCH,
                std::iter::empty::<&std::ffi::OsStr>(),
            )
            .ok()?,
            None => git2::Repository::discover(ws.parent()?).ok()?,
        };
        let workdir = repo.workdir()?.canonicalize().ok()?;
        let prefix = ws
            .canonicalize()
            .ok()?
            .strip_prefix(&workdir)
            .ok()?
            .to_path_buf();
        let since = i64::try_from(since.duration_since(UNIX_EPOCH).ok()?.as_secs()).ok()?;
        let commit = {
            let log = repo.reflog("HEAD").ok()?;
            // Newest first: the last move of HEAD at or before the start.
            let found = log
                .iter()
                .find(|e| e.committer().when().seconds() <= since)
                .map(|e| e.id_new());
            found.filter(|id| !id.is_zero())?
        };
        repo.find_commit(commit).ok()?;
        Some(Baseline {
            repo,
            commit,
            prefix,
        })
    }

    /// The 1-based numbers of the lines of `text` (the file `rel`, relative to the workspace)
    /// the run wrote; `None` when the starting commit has no such file (all of it is new).
    pub fn written(&self, rel: &str, text: &str) -> Option<BTreeSet<usize>> {
        let tree = self.repo.find_commit(self.commit).ok()?.tree().ok()?;
        let entry = tree.get_path(&self.prefix.join(rel)).ok()?;
        let blob = entry.to_object(&self.repo).ok()?.peel_to_blob().ok()?;
        Some(added_lines(blob.content(), text.as_bytes()))
    }
}

/// The 1-based numbers of the lines of `new` a diff from `old` adds.
fn added_lines(old: &[u8], new: &[u8]) -> BTreeSet<usize> {
    let mut lines = BTreeSet::new();
    let Ok(patch) = git2::Patch::from_buffers(old, None, new, None, None) else {
        return lines;
    };
    for h in 0..patch.num_hunks() {
        let n = patch.num_lines_in_hunk(h).unwrap_or(0);
        for l in 0..n {
            if let Ok(line) = patch.line_in_hunk(h, l) {
                if let (true, Some(no)) = (line.origin() == '+', line.new_lineno()) {
                    lines.insert(no as usize);
                }
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn added_lines_are_the_new_and_changed_ones() {
        let old = b"a\nb\nc\nd\n";
        let new = b"a\nB\nc\nnew\nd\n";
        assert_eq!(
            added_lines(old, new).into_iter().collect::<Vec<_>>(),
            [2, 4]
        );
        assert!(added_lines(old, old).is_empty());
    }

    #[test]
    fn the_baseline_is_head_at_the_start_from_the_reflog() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let repo = git2::Repository::init(&ws).unwrap();
        // A reflog entry is stamped with the committer's time: a fresh one per commit.
        let commit = |text: &str, parents: &[&git2::Commit<'_>]| {
            let sig = git2::Signature::now("t", "t@x").unwrap();
            std::fs::create_dir_all(ws.join("src")).unwrap();
            std::fs::write(ws.join("src/a.c"), text).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("src/a.c")).unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, parents)
                .unwrap()
        };
        let first = commit("x = 1;\ny = 2;\n", &[]);
        // A commit after the start (as flowerbox's integration makes) is the run's work.
        let since = SystemTime::now();
        std::thread::sleep(Duration::from_millis(1100));
        let parent = repo.find_commit(first).unwrap();
        commit("x = 1;\ny = 3;\nz = 4;\n", &[&parent]);
        let base = Baseline::at(&ws, Some(&ws.join(".git")), since).expect("a baseline");
        let written = base.written("src/a.c", "x = 1;\ny = 3;\nz = 4;\n").unwrap();
        assert_eq!(written.into_iter().collect::<Vec<_>>(), [2, 3]);
        // A file the starting commit does not have: all of it is the run's.
        assert_eq!(base.written("src/new.c", "q = 1;\n"), None);
        // From a subdirectory of the repository, paths are the subdirectory's.
        let sub = Baseline::at(&ws.join("src"), None, since).unwrap();
        assert_eq!(sub.written("a.c", "x = 1;\ny = 2;\n").unwrap().len(), 0);
        // Nothing before the start (the repository is younger than the run): no baseline.
        let before = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        assert!(Baseline::at(&ws, Some(&ws.join(".git")), before).is_none());
        let plain = tempfile::tempdir().unwrap();
        assert!(Baseline::at(plain.path(), None, since).is_none());
    }

    /// A workspace without a repository at the start: the `.git` an agent makes in it during
    /// the run (here a valid one, with a reflog from before the start) is never read, nor one
    /// planted in a subdirectory of a workspace that is a repository.
    #[test]
    fn a_repository_made_during_the_run_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        let plant = |at: &Path| {
            let repo = git2::Repository::init(at).unwrap();
            std::fs::write(at.join("a.c"), "x = 1;\n").unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("a.c")).unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let sig = git2::Signature::new("t", "t@x", &git2::Time::new(1000, 0)).unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &[])
                .unwrap();
        };
        let since = SystemTime::now();
        plant(&ws);
        assert!(Baseline::at(&ws, None, since).is_none());
        // The workspace is a repository's subdirectory, a repository planted in it.
        let sub = ws.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        plant(&sub);
        let base = Baseline::at(&sub, None, since).expect("the outer repository");
        assert_eq!(base.prefix, Path::new("sub"));
    }
}
