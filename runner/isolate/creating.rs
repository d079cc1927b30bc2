//! Worktrees still being made (issue 26): `kill -9` while libgit2 checks a worktree out leaves
//! half a checkout, which a later start would read as a worker's uncommitted changes (and a
//! user committing them would delete files). Whether a worker ever ran there is therefore
//! recorded, not guessed: [`super::worktree::add`] writes a marker before the first byte of the
//! worktree exists and removes it once the worktree is complete, locked and has its worker
//! state — before any worker can run in it. A marker whose owner is provably dead names a
//! worktree no worker ever ran in; the sweep removes it ([`sweep_unfinished`]), its branch too
//! when merged (it still points where it was made from).
//!
//! Markers live in `<commondir>/flowerbox/creating/<admin name>` (read-only in every container:
//! no agent can forge or remove one); each holds the owner lock's reason on its first line and
//! the worktree's path (raw bytes) after it.

use git2::{BranchType, Repository};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::fsafe::{entries, open_dir, read_file_at};
use super::sweep::SweepReport;
use super::worktree::{branch_name, delete_branch, is_merged, unregister, OwnerLock};
use super::IsolateError;
use crate::record::owner::Liveness;

/// Where markers live, relative to the git common dir.
const ROOT: &str = "flowerbox/creating";

/// Longest marker read back.
const LIMIT: u64 = 16 * 1024;

/// A worktree being made, as its marker records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creating {
    /// Who is making it.
    pub lock: OwnerLock,
    /// Where.
    pub path: PathBuf,
}

/// Records that worktree `name` of `lock` is being made at `path` (synced to disk before the
/// worktree is started).
pub(crate) fn begin(
    commondir: &Path,
    name: &str,
    lock: &OwnerLock,
    path: &Path,
) -> Result<(), IsolateError> {
    let dir = commondir.join(ROOT);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        let mut f = std::fs::File::create(dir.join(name))?;
        f.write_all(lock.reason().as_bytes())?;
        f.write_all(b"\n")?;
        f.write_all(path.as_os_str().as_bytes())?;
        f.sync_all()?;
        std::fs::File::open(&dir)?.sync_all()
    };
    write().map_err(IsolateError::io(format!("记不下正在建的 worktree {name}")))
}

/// Records that worktree `name` is complete (its worker may run from now on).
pub(crate) fn done(commondir: &Path, name: &str) -> Result<(), IsolateError> {
    match std::fs::remove_file(commondir.join(ROOT).join(name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(IsolateError::io(format!("记不下 worktree {name} 已建好"))(
            e,
        )),
    }
}

/// The marker of worktree `name`, when it is still being made (or its maker died doing so).
pub fn read(commondir: &Path, name: &str) -> Option<Creating> {
    let dir = open_dir(&commondir.join(ROOT)).ok()?;
    let raw = read_file_at(&dir, OsStr::new(name), LIMIT).ok()??;
    let cut = raw.iter().position(|&b| b == b'\n')?;
    let lock = OwnerLock::parse(std::str::from_utf8(&raw[..cut]).ok()?)?;
    let path = PathBuf::from(OsStr::from_bytes(&raw[cut + 1..]));
    path.is_absolute().then_some(Creating { lock, path })
}

/// Admin names with a marker.
fn names(commondir: &Path) -> Vec<String> {
    let Ok(dir) = open_dir(&commondir.join(ROOT)) else {
        return Vec::new();
    };
    let mut v: Vec<String> = entries(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(n, _)| n.into_string().ok())
        .filter(|n| n.starts_with(super::worktree::NAME_PREFIX))
        .collect();
    v.sort();
    v
}

/// Removes every worktree whose maker died while making it (directory, registration, worker
/// state; its branch when merged, else kept and listed) and its marker. Returns the names the
/// rest of the sweep must leave alone: those just handled, and those a live (or undecidable)
/// maker is still making. Callers hold the integration lock.
pub(crate) fn sweep_unfinished(
    commondir: &Path,
    repo: &Repository,
    report: &mut SweepReport,
) -> HashSet<String> {
    let mut handled = HashSet::new();
    for name in names(commondir) {
        let Some(c) = read(commondir, &name) else {
            report.kept.push(format!(
                "留着 worktree {name}:它的建造记录看不懂({})",
                commondir.join(ROOT).join(&name).display()
            ));
            handled.insert(name);
            continue;
        };
        let branch = branch_name(&c.lock.run, &c.lock.agent);
        let what = format!("worktree {}({branch})", c.path.display());
        match c.lock.owner.liveness() {
            Liveness::Dead(_) => {}
            Liveness::Alive => {
                report
                    .live
                    .push(format!("留着 {what}:运行 {} 正在建它", c.lock.run));
                handled.insert(name);
                continue;
            }
            Liveness::Unknown(why) => {
                report.kept.push(format!("留着没建完的 {what}:{why}"));
                handled.insert(name);
                continue;
            }
        }
        handled.insert(name.clone());
        // No worker ran there: what the directory holds is checkout debris.
        if let Err(e) = unregister(repo, &name, Some(&c.path), true) {
            report.failed.push(format!("删不掉没建完的 {what}:{e}"));
            continue;
        }
        let tip = repo
            .find_branch(&branch, BranchType::Local)
            .ok()
            .and_then(|b| b.get().target());
        match tip.map(|t| is_merged(repo, t).unwrap_or(false)) {
            Some(true) => {
                if let Err(e) = delete_branch(repo, &branch) {
                    report.failed.push(format!("删不掉分支 {branch}:{e}"));
                }
            }
            Some(false) => report
                .kept
                .push(format!("留着分支 {branch}:有没合入的提交")),
            None => {}
        }
        match done(commondir, &name) {
            Ok(()) => report.removed.push(format!(
                "删掉了没建完的 {what}:建到一半运行就没了,执行者没在里面干过活"
            )),
            Err(e) => report.failed.push(e.to_string()),
        }
    }
    handled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolate::repo::tests::{git, repo_with_commit};
    use crate::record::owner::Owner;

    use crate::isolate::sweep::tests::dead_owner;

    #[test]
    fn a_worktree_its_dead_maker_never_finished_is_removed_and_a_live_ones_kept() {
        let (dir, ws) = repo_with_commit();
        let common = ws.join(".git").canonicalize().unwrap();
        let repo = Repository::open(&ws).unwrap();
        let root = dir.path().canonicalize().unwrap().join("wt");
        // A worktree as `kill -9` mid-checkout leaves it: registered, unlocked, files missing,
        // its marker still there.
        let lock = OwnerLock {
            run: "r1".into(),
            agent: "worker-1".into(),
            owner: dead_owner(),
        };
        let path = root.join("r1/worker-1");
        begin(&common, "flower-r1-worker-1", &lock, &path).unwrap();
        std::fs::create_dir_all(root.join("r1")).unwrap();
        git(
            &ws,
            &[
                "worktree",
                "add",
                "-q",
                "--no-checkout",
                "-b",
                "flower/r1/worker-1",
                path.to_str().unwrap(),
            ],
        );
        std::fs::write(path.join("half"), "debris").unwrap();
        assert_eq!(read(&common, "flower-r1-worker-1").unwrap().path, path);
        // One a live run is making.
        let live = OwnerLock {
            run: "r2".into(),
            agent: "worker-1".into(),
            owner: Owner::current().unwrap(),
        };
        begin(
            &common,
            "flower-r2-worker-1",
            &live,
            &root.join("r2/worker-1"),
        )
        .unwrap();

        let mut report = SweepReport::default();
        let handled = sweep_unfinished(&common, &repo, &mut report);
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(handled.len(), 2);
        assert!(!path.exists());
        assert!(repo.find_worktree("flower-r1-worker-1").is_err());
        assert!(repo
            .find_branch("flower/r1/worker-1", BranchType::Local)
            .is_err());
        assert!(read(&common, "flower-r1-worker-1").is_none());
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert!(report.removed[0].contains("没建完"), "{report:?}");
        assert!(report.kept.is_empty(), "{report:?}");
        assert_eq!(report.live.len(), 1, "{report:?}");
        assert!(read(&common, "flower-r2-worker-1").is_some());
        done(&common, "flower-r2-worker-1").unwrap();
        assert!(names(&common).is_empty());
    }
}
