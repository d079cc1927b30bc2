//! Worktree names, places and owners: branch `flower/<run>/<agent>`, git admin name
//! `flower-<run>-<agent>`, directory `<workspace parent>/.flower-<name>-worktrees/<run>/<agent>`
//! (outside the repository's working tree and outside the shared workbench, so one worker
//! cannot write into another's worktree), and a git worktree lock whose reason records the
//! owning process, so a sweep can tell a live run's worktree from a crashed one's.

use git2::{BranchType, Repository, WorktreeAddOptions, WorktreeLockStatus};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::fsafe::remove_tree;
use super::state::WorkerState;
use super::IsolateError;
use crate::record::owner::Owner;

/// Prefix of every flowerbox worktree's admin name (`.git/worktrees/flower-…`).
pub const NAME_PREFIX: &str = "flower-";
/// Prefix of every flowerbox branch.
pub const BRANCH_PREFIX: &str = "flower/";

/// Keeps `[A-Za-z0-9._-]`, replaces the rest with `-` (safe in ref names, admin names and
/// paths); never empty, never starting with `.` or `-`.
fn clean(part: &str) -> String {
    let s: String = part
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .replace("..", "-");
    let s = s.trim_start_matches(['.', '-']).trim_end_matches('.');
    if s.is_empty() {
        "x".into()
    } else {
        s.to_string()
    }
}

/// `flower/<run>/<agent>`.
pub fn branch_name(run: &str, agent: &str) -> String {
    format!("{BRANCH_PREFIX}{}/{}", clean(run), clean(agent))
}

/// `flower-<run>-<agent>`: the worktree's admin directory name under `<commondir>/worktrees/`.
pub fn worktree_name(run: &str, agent: &str) -> String {
    format!("{NAME_PREFIX}{}-{}", clean(run), clean(agent))
}

/// `<workspace parent>/.flower-<workspace name>-worktrees`: next to the workbench
/// (`.flower-<name>`), outside the repository.
pub fn worktrees_root(workdir: &Path) -> PathBuf {
    let name = workdir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    workdir
        .parent()
        .unwrap_or(workdir)
        .join(format!(".flower-{name}-worktrees"))
}

/// What a flowerbox worktree lock records: which run and agent, and the owning process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLock {
    /// Run id.
    pub run: String,
    /// Agent instance name.
    pub agent: String,
    /// The process that created the worktree.
    pub owner: Owner,
}

impl OwnerLock {
    /// The lock reason: `flowerbox run=… agent=… host=… boot=… pid=… start=…`.
    pub fn reason(&self) -> String {
        format!(
            "flowerbox run={} agent={} host={} boot={} pid={} start={}",
            self.run,
            self.agent,
            self.owner.host,
            self.owner.boot_id,
            self.owner.pid,
            self.owner.start_ticks
        )
    }

    /// Parses a lock reason; `None` for anything flowerbox did not write.
    pub fn parse(reason: &str) -> Option<OwnerLock> {
        let rest = reason.trim().strip_prefix("flowerbox ")?;
        let get = |k: &str| {
            rest.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(OwnerLock {
            run: get("run")?,
            agent: get("agent")?,
            owner: Owner {
                host: get("host")?,
                boot_id: get("boot")?,
                pid: get("pid")?.parse().ok()?,
                start_ticks: get("start")?.parse().ok()?,
            },
        })
    }
}

/// A worktree that [`add`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorktree {
    /// Admin name.
    pub name: String,
    /// Short branch name (`flower/<run>/<agent>`).
    pub branch: String,
    /// The worktree directory (canonical).
    pub path: PathBuf,
    /// The worker's own git state ([`WorkerState`]).
    pub state: WorkerState,
}

/// The git common dir of `repo`, as libgit2 names it.
pub(crate) fn commondir(repo: &Repository) -> PathBuf {
    repo.commondir()
        .canonicalize()
        .unwrap_or_else(|_| repo.commondir().to_path_buf())
}

/// Adds a worktree for `agent` of `run` at `<root>/<run>/<agent>` on a new branch from HEAD,
/// locked with `owner`, with the worker's own git state ([`WorkerState::create`]), marked as
/// being made until all of that is done ([`super::creating`]). On failure nothing is left
/// behind (the new branch still points at HEAD, so removing it loses nothing).
///
/// # Errors
/// The branch or directory already exists; git or I/O failures.
pub fn add(
    repo: &Repository,
    root: &Path,
    run: &str,
    agent: &str,
    owner: &Owner,
) -> Result<NewWorktree, IsolateError> {
    let name = worktree_name(run, agent);
    let branch = branch_name(run, agent);
    let path = root.join(clean(run)).join(clean(agent));
    // Never reuse (and on failure never clean up) something that was there before.
    if path.exists() || repo.find_worktree(&name).is_ok() {
        return Err(IsolateError::Io {
            what: format!("建不了 worktree {}({name})", path.display()),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    let parent = path.parent().unwrap_or(root);
    std::fs::create_dir_all(parent)
        .map_err(IsolateError::io(format!("建不出 {}", parent.display())))?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(IsolateError::git("读不出 HEAD 的提交"))?;
    let branch_ref = repo
        .branch(&branch, &head, false)
        .map_err(IsolateError::git(format!("建不了分支 {branch}")))?;
    let lock = OwnerLock {
        run: run.to_string(),
        agent: agent.to_string(),
        owner: owner.clone(),
    };
    // Until `done`, a death leaves a worktree no worker ran in ([`super::creating`]).
    let common = commondir(repo);
    if let Err(e) = super::creating::begin(&common, &name, &lock, &path) {
        let _ = delete_branch(repo, &branch);
        return Err(e);
    }
    let made = (|| {
        let reference = branch_ref.into_reference();
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        let wt = repo
            .worktree(&name, &path, Some(&opts))
            .map_err(IsolateError::git(format!(
                "建不了 worktree {}",
                path.display()
            )))?;
        wt.lock(Some(&lock.reason()))
            .map_err(IsolateError::git("锁不上 worktree"))?;
        let state = WorkerState::create(repo, &common, &name, &branch)?;
        let path = path
            .canonicalize()
            .map_err(IsolateError::io("找不到刚建的 worktree"))?;
        super::creating::done(&common, &name)?;
        Ok((path, state))
    })();
    match made {
        Ok((path, state)) => Ok(NewWorktree {
            name,
            branch,
            path,
            state,
        }),
        Err(e) => {
            let cleaned = unregister(repo, &name, Some(&path), true)
                .and_then(|()| delete_branch(repo, &branch));
            // What could not be cleaned stays marked, for the next sweep.
            if cleaned.is_ok() {
                let _ = super::creating::done(&common, &name);
            }
            Err(e)
        }
    }
}

/// Removes worktree `name`'s directory (`path`, when known), its registration (admin dir) and
/// its worker state, without following any link (a process left in a container may still be
/// swapping directories for symlinks). A missing piece is fine. The directory goes only when
/// its own `.git` file leads back to this admin dir (a registration whose `gitdir` file was
/// rewritten must not name someone else's directory for deletion), or unchecked when
/// `just_made` (a failed [`add`] cleaning up what it created).
pub(crate) fn unregister(
    repo: &Repository,
    name: &str,
    path: Option<&Path>,
    just_made: bool,
) -> Result<(), IsolateError> {
    let common = commondir(repo);
    let admin = common.join("worktrees").join(name);
    if let Some(p) = path {
        if let (Some(parent), Some(leaf)) = (p.parent(), p.file_name()) {
            if !just_made && p.exists() && !links_back(p, &admin) {
                return Err(IsolateError::Io {
                    what: format!("worktree {} 的 .git 不指回 {name},没删它", p.display()),
                    source: std::io::Error::from(std::io::ErrorKind::InvalidData),
                });
            }
            remove_tree(parent, leaf)
                .map_err(IsolateError::io(format!("删不掉 worktree {}", p.display())))?;
        }
    }
    remove_tree(&common.join("worktrees"), std::ffi::OsStr::new(name))
        .map_err(IsolateError::io(format!("删不掉 worktree {name} 的登记")))?;
    if let Some(state) = WorkerState::open(&common, name) {
        state.remove()?;
    }
    Ok(())
}

/// True when `dir/.git` is a regular file (not followed) whose `gitdir:` is `admin`.
fn links_back(dir: &Path, admin: &Path) -> bool {
    let Ok(d) = super::fsafe::open_dir(dir) else {
        return false;
    };
    let Ok(Some(raw)) = super::fsafe::read_file_at(&d, std::ffi::OsStr::new(".git"), 4096) else {
        return false;
    };
    let text = String::from_utf8_lossy(&raw);
    let Some(target) = text.trim_end().strip_prefix("gitdir: ") else {
        return false;
    };
    let resolved = dir.join(target).canonicalize().ok();
    resolved.is_some() && resolved == admin.canonicalize().ok()
}

/// The flowerbox lock on worktree `name`, if it holds one.
pub fn owner_lock(repo: &Repository, name: &str) -> Option<OwnerLock> {
    let wt = repo.find_worktree(name).ok()?;
    match wt.is_locked().ok()? {
        WorktreeLockStatus::Locked(Some(reason)) => OwnerLock::parse(&reason),
        _ => None,
    }
}

/// The short branch of flowerbox worktree `name`: the one its worker state records, else
/// (a worktree of an older flowerbox) the `flower/` branch its admin `HEAD` names — a worker
/// can write that `HEAD`, so nothing outside `flower/` is believed. Works when the worktree
/// directory is gone.
pub fn checked_out_branch(commondir: &Path, name: &str) -> Option<String> {
    if let Some(st) = WorkerState::open(commondir, name) {
        return Some(st.branch);
    }
    let dir = super::fsafe::open_dir(&commondir.join("worktrees").join(name)).ok()?;
    let head = super::fsafe::read_file_at(&dir, std::ffi::OsStr::new("HEAD"), 4096).ok()??;
    String::from_utf8(head)
        .ok()?
        .trim()
        .strip_prefix("ref: refs/heads/")
        .filter(|b| b.starts_with(BRANCH_PREFIX))
        .map(str::to_string)
}

/// True when the commit `tip` is reachable from a local branch outside `flower/` (or a
/// detached HEAD): its work is kept elsewhere, so the branch may go.
pub fn is_merged(repo: &Repository, tip: git2::Oid) -> Result<bool, IsolateError> {
    let mut heads = Vec::new();
    let branches = repo
        .branches(Some(BranchType::Local))
        .map_err(IsolateError::git("列不出分支"))?;
    for b in branches.flatten() {
        let (b, _) = b;
        let name = b.name().ok().flatten().unwrap_or_default().to_string();
        if name.starts_with(BRANCH_PREFIX) {
            continue;
        }
        if let Some(id) = b.get().target() {
            heads.push(id);
        }
    }
    if let Ok(h) = repo.head() {
        if !h.is_branch() {
            if let Some(id) = h.target() {
                heads.push(id);
            }
        }
    }
    for h in heads {
        if h == tip || repo.graph_descendant_of(h, tip).unwrap_or(false) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Removes worktree `name` (its directory, registration and worker state, see
/// [`unregister`]) and deletes `branch`. Callers check first that the branch is merged and the
/// worktree clean.
pub fn remove(repo: &Repository, name: &str, branch: &str) -> Result<(), IsolateError> {
    let path = repo
        .find_worktree(name)
        .ok()
        .map(|wt| wt.path().to_path_buf());
    unregister(repo, name, path.as_deref(), false)?;
    delete_branch(repo, branch)
}

/// Deletes a local branch; a missing one is fine.
pub fn delete_branch(repo: &Repository, branch: &str) -> Result<(), IsolateError> {
    match repo.find_branch(branch, BranchType::Local) {
        Ok(mut b) => b
            .delete()
            .map_err(IsolateError::git(format!("删不掉分支 {branch}"))),
        Err(_) => Ok(()),
    }
}

/// Drops every gitlink (submodule) entry from the index of kept worktree `name` and returns
/// their paths. The user's plain `git status` in a worktree runs git inside every gitlink of
/// its index whose directory holds a repository — one the worker may have made, with a
/// `core.fsmonitor` of its choosing (DESIGN.md threat model 2). Without the entry git lists
/// the directory as untracked and runs nothing there; the committed branch keeps it.
pub fn drop_gitlinks(commondir: &Path, name: &str) -> Result<Vec<String>, IsolateError> {
    let path = commondir.join("worktrees").join(name).join("index");
    match std::fs::symlink_metadata(&path) {
        Ok(md) if md.is_file() => {}
        _ => return Ok(Vec::new()),
    }
    let mut index =
        git2::Index::open(&path).map_err(IsolateError::git("读不出 worktree 的索引"))?;
    let links: Vec<(Vec<u8>, i32)> = index
        .iter()
        .filter(|e| e.mode == 0o160000)
        .map(|e| (e.path.clone(), i32::from((e.flags >> 12) & 0x3)))
        .collect();
    if links.is_empty() {
        return Ok(Vec::new());
    }
    for (p, stage) in &links {
        let p = Path::new(std::ffi::OsStr::from_bytes(p));
        index
            .remove(p, *stage)
            .map_err(IsolateError::git("改不了 worktree 的索引"))?;
    }
    index
        .write()
        .map_err(IsolateError::git("写不回 worktree 的索引"))?;
    let mut out: Vec<String> = links
        .into_iter()
        .map(|(p, _)| String::from_utf8_lossy(&p).into_owned())
        .collect();
    out.dedup();
    Ok(out)
}

/// True when the worktree at `path` has no uncommitted change (untracked-not-ignored files
/// count as changes).
pub fn is_clean(path: &Path) -> Result<bool, IsolateError> {
    let repo = Repository::open(path).map_err(IsolateError::git(format!(
        "打不开 worktree {}",
        path.display()
    )))?;
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    let st = repo
        .statuses(Some(&mut opts))
        .map_err(IsolateError::git("读不出 worktree 状态"))?;
    Ok(st.is_empty())
}

/// What lies in the worktree at `path` that git does not record, so a removal would lose it
/// unseen: every `.git` below its root (a nested repository, which libgit2's status does not
/// report), FIFOs, sockets and devices, and directories too deep to walk; relative paths. The
/// walk follows no symlink; a directory it cannot read counts as well.
pub fn unaccounted(path: &Path) -> Vec<String> {
    use crate::fsroot::plant::{scan, Seen};
    let mut out = Vec::new();
    let scanned = scan(path, &[], &mut |f| {
        if !(f.seen == Seen::Git && f.rel == Path::new(".git")) {
            out.push(f.rel.display().to_string());
        }
    });
    match scanned {
        Ok(unread) => out.extend(unread.iter().map(|p| format!("{}(读不了)", p.display()))),
        Err(e) => out.push(format!("{}(读不了:{e})", path.display())),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isolate::repo::tests::repo_with_commit;

    #[test]
    fn names_are_safe_and_stable() {
        assert_eq!(
            branch_name("20260101-000000-a1b2c3", "worker-1"),
            "flower/20260101-000000-a1b2c3/worker-1"
        );
        assert_eq!(worktree_name("r 1", "../x"), "flower-r-1-x");
        assert!(git2::Reference::is_valid_name(&format!(
            "refs/heads/{}",
            branch_name("a..b~^:", ".lock")
        )));
        assert_eq!(
            worktrees_root(Path::new("/home/u/proj")),
            Path::new("/home/u/.flower-proj-worktrees")
        );
    }

    #[test]
    fn owner_lock_round_trips_and_ignores_foreign_reasons() {
        let l = OwnerLock {
            run: "r1".into(),
            agent: "worker-2".into(),
            owner: Owner::current().unwrap(),
        };
        assert_eq!(OwnerLock::parse(&l.reason()), Some(l));
        assert_eq!(OwnerLock::parse("on a usb stick"), None);
        assert_eq!(OwnerLock::parse("flowerbox run=x"), None);
    }

    #[test]
    fn add_locks_and_remove_cleans_up() {
        let (dir, ws) = repo_with_commit();
        let repo = Repository::open(&ws).unwrap();
        let root = dir
            .path()
            .canonicalize()
            .unwrap()
            .join(".flower-proj-worktrees");
        let me = Owner::current().unwrap();
        let wt = add(&repo, &root, "r1", "worker-1", &me).unwrap();
        assert!(wt.path.join("a.txt").is_file());
        assert!(!wt.path.starts_with(&ws));
        let gitfile = std::fs::read_to_string(wt.path.join(".git")).unwrap();
        assert!(gitfile.contains(&format!("gitdir: {}", ws.join(".git").display())));
        assert_eq!(owner_lock(&repo, &wt.name).unwrap().owner, me);
        assert_eq!(
            checked_out_branch(&ws.join(".git"), &wt.name).as_deref(),
            Some("flower/r1/worker-1")
        );
        assert!(is_clean(&wt.path).unwrap());
        // Nothing new on the branch: merged.
        let tip = repo
            .find_branch(&wt.branch, BranchType::Local)
            .unwrap()
            .get()
            .target()
            .unwrap();
        assert!(is_merged(&repo, tip).unwrap());
        // A registration whose gitdir was rewritten to name another directory: that
        // directory stays.
        let other = add(&repo, &root, "r1", "worker-2", &me).unwrap();
        let victim = dir.path().canonicalize().unwrap().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("keep.txt"), "k").unwrap();
        std::fs::write(
            ws.join(".git/worktrees").join(&other.name).join("gitdir"),
            format!("{}\n", victim.join(".git").display()),
        )
        .unwrap();
        assert!(remove(&repo, &other.name, &other.branch).is_err());
        assert!(victim.join("keep.txt").is_file());
        // A second add of the same agent fails and leaves the first intact.
        assert!(add(&repo, &root, "r1", "worker-1", &me).is_err());
        assert!(wt.path.join("a.txt").is_file());
        remove(&repo, &wt.name, &wt.branch).unwrap();
        assert!(!wt.path.exists());
        assert!(repo.find_branch(&wt.branch, BranchType::Local).is_err());
        assert!(repo.find_worktree(&wt.name).is_err());
    }
}
