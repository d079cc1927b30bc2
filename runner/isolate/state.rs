//! A worker's own git state, which only flowerbox turns into the repository's (DESIGN.md threat
//! model 2). The main repository's `.git` is mounted read-only in a worker's container; what
//! its git must write goes to host directories the worker has to itself, under
//! `<commondir>/flowerbox/worktrees/<admin name>/` (read-only for every container):
//!
//! - `refs/` is shown at `refs/heads/flower/<run>/` inside the worker's container only (a
//!   shadow, [`Mount::shadow`]): its branch and copies of the run's other branches. Moving a
//!   file there moves nothing on the host; flowerbox reads the worker's own branch back
//!   ([`WorkerState::tip`]) and moves the real branch itself ([`super::adopt`]).
//! - `logs/`, shown at `logs/refs/heads/flower/<run>/`: the branch's reflog.
//! - `objects/`, shown at `objects/` (with `info/alternates` naming the real objects, shown
//!   read-only at `main-objects/`): everything the worker's git writes. flowerbox copies the
//!   objects its branch needs into the repository, each one checked against its name.
//! - `branch` and `synced` (written by flowerbox only): which branch this is, and the commit
//!   the worker's copy and the real branch last agreed on.
//!
//! The worktree's admin directory stays writable (index, HEAD, merge state), except its
//! pointers `gitdir`, `commondir`, `locked` and `config.worktree`, mounted read-only over
//! themselves like the worktree's own `.git` file: no agent redirects the host's or the user's
//! git to a config of its own.

use git2::{Oid, Repository};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::fsafe::{open_dir, read_file_at, remove_tree};
use super::IsolateError;
use crate::sandbox::Mount;

/// Where worker states live, relative to the git common dir.
pub const STATE_ROOT: &str = "flowerbox/worktrees";

/// The admin-dir files mounted read-only over themselves.
const POINTERS: [&str; 4] = ["gitdir", "commondir", "locked", "config.worktree"];

/// Longest ref or state file read back.
const SMALL_FILE: u64 = 4096;

/// One worker's git state (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerState {
    /// The git common dir of the main repository.
    pub commondir: PathBuf,
    /// The worktree's admin name (`flower-<run>-<agent>`).
    pub name: String,
    /// The short branch name (`flower/<run>/<agent>`).
    pub branch: String,
}

impl WorkerState {
    /// `<commondir>/flowerbox/worktrees/<name>`.
    pub fn dir(&self) -> PathBuf {
        self.commondir.join(STATE_ROOT).join(&self.name)
    }

    fn refs(&self) -> PathBuf {
        self.dir().join("refs")
    }

    fn logs(&self) -> PathBuf {
        self.dir().join("logs")
    }

    /// The worker's own object store.
    pub fn objects(&self) -> PathBuf {
        self.dir().join("objects")
    }

    fn main_objects(&self) -> PathBuf {
        self.dir().join("main-objects")
    }

    /// The branch's directory below `refs/heads/` (`flower/<run>`) and its file name.
    fn split(&self) -> (&str, &str) {
        self.branch.rsplit_once('/').unwrap_or(("", &self.branch))
    }

    /// Creates the state of a new worktree whose branch already exists, its copy of the run's
    /// branches (all of `refs/heads/flower/<run>/`) included, and the admin dir's
    /// `config.worktree` (empty) so that a worker cannot create one.
    pub fn create(
        repo: &Repository,
        commondir: &Path,
        name: &str,
        branch: &str,
    ) -> Result<WorkerState, IsolateError> {
        let st = WorkerState {
            commondir: commondir.to_path_buf(),
            name: name.to_string(),
            branch: branch.to_string(),
        };
        let (parent, _) = st.split();
        let made = (|| {
            for d in [
                st.refs(),
                st.logs(),
                st.objects().join("info"),
                st.main_objects(),
            ] {
                std::fs::create_dir_all(d)?;
            }
            std::fs::create_dir_all(commondir.join("logs/refs/heads").join(parent))?;
            std::fs::write(
                st.objects().join("info/alternates"),
                format!("{}\n", st.main_objects().display()),
            )?;
            let cw = commondir
                .join("worktrees")
                .join(name)
                .join("config.worktree");
            if std::fs::symlink_metadata(&cw).is_err() {
                std::fs::write(cw, "")?;
            }
            std::fs::write(st.dir().join("branch"), format!("{branch}\n"))
        })();
        made.map_err(IsolateError::io(format!(
            "建不出 {} 的 git 状态目录",
            branch
        )))?;
        let refs = repo
            .references_glob(&format!("refs/heads/{parent}/*"))
            .map_err(IsolateError::git("列不出本次运行的分支"))?;
        for r in refs.flatten() {
            let (Some(full), Some(id)) = (r.name().ok(), r.target()) else {
                continue;
            };
            let leaf = full.rsplit('/').next().unwrap_or(full);
            std::fs::write(st.refs().join(leaf), format!("{id}\n"))
                .map_err(IsolateError::io("抄不出分支"))?;
            if full == format!("refs/heads/{branch}") {
                st.set_synced(id)?;
            }
        }
        Ok(st)
    }

    /// The state of admin name `name`, when flowerbox made one (its `branch` file names a
    /// `flower/` branch).
    pub fn open(commondir: &Path, name: &str) -> Option<WorkerState> {
        let st = open_dir(&commondir.join(STATE_ROOT).join(name)).ok()?;
        let raw = read_file_at(&st, OsStr::new("branch"), SMALL_FILE).ok()??;
        let branch = String::from_utf8(raw).ok()?.trim().to_string();
        branch
            .starts_with(super::worktree::BRANCH_PREFIX)
            .then(|| WorkerState {
                commondir: commondir.to_path_buf(),
                name: name.to_string(),
                branch,
            })
    }

    /// Admin names that have a state directory.
    pub fn names(commondir: &Path) -> Vec<String> {
        let Ok(dir) = open_dir(&commondir.join(STATE_ROOT)) else {
            return Vec::new();
        };
        let mut v: Vec<String> = super::fsafe::entries(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(n, _)| n.into_string().ok())
            .filter(|n| n.starts_with(super::worktree::NAME_PREFIX))
            .collect();
        v.sort();
        v
    }

    /// The commit the worker's copy of its branch points at, read without following links;
    /// `None` when it names no commit id (missing, a symbolic ref, garbage).
    pub fn tip(&self) -> Result<Option<Oid>, IsolateError> {
        let dir = open_dir(&self.refs()).map_err(IsolateError::io("打不开执行者的分支目录"))?;
        let (_, leaf) = self.split();
        let raw = read_file_at(&dir, OsStr::new(leaf), SMALL_FILE)
            .map_err(IsolateError::io("读不出执行者的分支"))?;
        Ok(raw.and_then(|b| parse_oid(&b)))
    }

    /// The commit the worker's copy and the real branch last agreed on.
    pub fn synced(&self) -> Option<Oid> {
        let dir = open_dir(&self.dir()).ok()?;
        parse_oid(&read_file_at(&dir, OsStr::new("synced"), SMALL_FILE).ok()??)
    }

    /// Records that the real branch now agrees with the worker's copy at `id`.
    pub fn set_synced(&self, id: Oid) -> Result<(), IsolateError> {
        let tmp = self.dir().join("synced.tmp");
        std::fs::write(&tmp, format!("{id}\n"))
            .and_then(|_| std::fs::rename(&tmp, self.dir().join("synced")))
            .map_err(IsolateError::io("记不下分支的同步点"))
    }

    /// Removes the state directory (nothing followed).
    pub fn remove(&self) -> Result<(), IsolateError> {
        remove_tree(&self.commondir.join(STATE_ROOT), OsStr::new(&self.name)).map_err(
            IsolateError::io(format!("删不掉 {} 的 git 状态目录", self.branch)),
        )
    }

    /// A worker's mounts for its worktree at `worktree`: the worktree read-write with its
    /// `.git` file read-only, the main repository's git dir read-only, the worktree's admin
    /// dir read-write with its pointers read-only, and the shadows of the module docs.
    pub fn mounts(&self, worktree: &Path) -> Vec<Mount> {
        let m = |inside: PathBuf, read_only: bool, shadow: Option<PathBuf>| match shadow {
            Some(host) => Mount::shadow(host, inside, read_only),
            None => Mount::same(inside, read_only),
        };
        let admin = self.commondir.join("worktrees").join(&self.name);
        let (parent, _) = self.split();
        let mut v = vec![
            m(worktree.to_path_buf(), false, None),
            m(worktree.join(".git"), true, None),
            m(self.commondir.clone(), true, None),
            m(admin.clone(), false, None),
        ];
        for p in POINTERS {
            if admin.join(p).is_file() {
                v.push(m(admin.join(p), true, None));
            }
        }
        v.extend([
            m(
                self.commondir.join("refs/heads").join(parent),
                false,
                Some(self.refs()),
            ),
            m(
                self.commondir.join("logs/refs/heads").join(parent),
                false,
                Some(self.logs()),
            ),
            m(self.commondir.join("objects"), false, Some(self.objects())),
            m(
                self.main_objects(),
                true,
                Some(self.commondir.join("objects")),
            ),
        ]);
        v
    }
}

/// A 40-hex object id (surrounding whitespace allowed), else `None`.
fn parse_oid(raw: &[u8]) -> Option<Oid> {
    let s = std::str::from_utf8(raw).ok()?.trim();
    (s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| Oid::from_str(s).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_commit_id_is_a_tip() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            parse_oid(format!("{id}\n").as_bytes()),
            Oid::from_str(id).ok()
        );
        for bad in [
            "ref: refs/heads/main\n",
            "",
            "xyz",
            &id[..39],
            &format!("{id}0"),
        ] {
            assert_eq!(parse_oid(bad.as_bytes()), None, "{bad}");
        }
    }
}
