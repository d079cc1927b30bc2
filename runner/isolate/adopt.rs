//! Bringing a worker's branch back (DESIGN.md threat model 2): the worker's git commits into
//! its own ref directory and object store ([`super::state`]); flowerbox alone moves the real
//! branch `flower/<run>/<agent>`, with libgit2, after copying the objects the branch needs into
//! the repository.
//!
//! Nothing the worker wrote is followed or trusted: its store is copied (regular files with
//! object names only, never through a link, never its `info/` with alternates or commit
//! graphs) into a private directory, every object read from there is checked against its name,
//! and only objects reachable from the branch's tip are written into the repository.

use git2::{ObjectType, Odb, Oid, Repository};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;

use super::fsafe::{copy_file_at, entries, open_dir, open_dir_at};
use super::repo::WorkspaceRepo;
use super::state::WorkerState;
use super::IsolateError;

/// Most bytes copied out of one worker's object store.
const IMPORT_LIMIT: u64 = 16 << 30;

/// How far the real branch may be moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// To wherever the worker put its branch (the run that owns it is asking).
    Follow,
    /// Only forward (a sweep after a crash: the user may have worked on the branch since).
    FastForward,
}

/// What [`adopt`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adopted {
    /// The worker did not move its branch since the last adoption.
    Unchanged,
    /// The real branch now points at `to`.
    Moved {
        /// Where it pointed before (`None`: it was gone).
        from: Option<Oid>,
        /// The worker's tip.
        to: Oid,
    },
    /// [`Policy::FastForward`] found the worker's tip and the real branch apart; neither moved.
    Diverged {
        /// The worker's tip (its objects are in the repository now).
        tip: Oid,
    },
}

/// Brings the worker's branch of `state` back into the repository (see the module docs).
/// Callers hold the integration lock.
///
/// # Errors
/// The worker's tip is not a commit, an object is missing or does not match its name, or a git
/// or I/O operation failed. The real branch is then unchanged.
pub fn adopt(
    ws: &WorkspaceRepo,
    state: &WorkerState,
    policy: Policy,
) -> Result<Adopted, IsolateError> {
    let Some(tip) = state.tip()? else {
        return Ok(Adopted::Unchanged);
    };
    if state.synced() == Some(tip) {
        return Ok(Adopted::Unchanged);
    }
    let repo = ws.open()?;
    let refname = format!("refs/heads/{}", state.branch);
    let current = repo.refname_to_id(&refname).ok();
    if current != Some(tip) {
        import(&repo, state, tip)?;
        // The tip may have been in the repository already, as anything.
        repo.find_commit(tip).map_err(IsolateError::git(format!(
            "执行者的分支 {} 指向的不是提交",
            state.branch
        )))?;
        if policy == Policy::FastForward {
            if let Some(cur) = current {
                let ahead = repo
                    .graph_descendant_of(tip, cur)
                    .map_err(IsolateError::git("比较提交失败"))?;
                if !ahead {
                    return Ok(Adopted::Diverged { tip });
                }
            }
        }
        let msg = format!("flowerbox: 取回 {} 的提交", state.branch);
        match current {
            Some(cur) => repo.reference_matching(&refname, tip, true, cur, &msg),
            None => repo.reference(&refname, tip, false, &msg),
        }
        .map_err(IsolateError::git(format!("移不动分支 {}", state.branch)))?;
    }
    state.set_synced(tip)?;
    Ok(if current == Some(tip) {
        Adopted::Unchanged
    } else {
        Adopted::Moved {
            from: current,
            to: tip,
        }
    })
}

/// The worker's store copied into a private directory (see [`copy_store`]), opened as an
/// object database without alternates. The directory lives as long as the returned guard.
fn scratch_odb(state: &WorkerState) -> Result<(tempfile::TempDir, Odb<'static>), IsolateError> {
    let scratch = tempfile::Builder::new()
        .prefix("import-")
        .tempdir_in(state.commondir.join("flowerbox"))
        .map_err(IsolateError::io("建不出导入用的临时目录"))?;
    copy_store(&state.objects(), scratch.path())
        .map_err(IsolateError::io("读不出执行者的对象库"))?;
    let odb = Odb::new().map_err(IsolateError::git("建不出对象库"))?;
    odb.add_disk_alternate(&scratch.path().to_string_lossy())
        .map_err(IsolateError::git("打不开执行者的对象库"))?;
    Ok((scratch, odb))
}

/// Reads object `id` from `theirs`, checks it against its name and writes it into `main`.
fn copy_object(main: &Odb<'_>, theirs: &Odb<'_>, id: Oid) -> Result<ObjectType, IsolateError> {
    let obj = theirs
        .read(id)
        .map_err(IsolateError::git(format!("执行者的分支缺对象 {id}")))?;
    let (kind, data) = (obj.kind(), obj.data());
    let check = Oid::hash_object(kind, data).map_err(IsolateError::git("算不出对象名"))?;
    if check != id {
        return Err(IsolateError::Git {
            what: format!("执行者的对象 {id} 内容和名字对不上"),
            source: git2::Error::from_str(&check.to_string()),
        });
    }
    main.write(kind, data)
        .map_err(IsolateError::git("写不进对象库"))?;
    Ok(kind)
}

/// Copies every object reachable from `tip` that the repository lacks out of the worker's
/// store, checked against its name. Returns how many objects were written.
pub(crate) fn import(
    repo: &Repository,
    state: &WorkerState,
    tip: Oid,
) -> Result<usize, IsolateError> {
    let main = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
    if main.exists(tip) {
        return Ok(0);
    }
    let (_scratch, theirs) = scratch_odb(state)?;
    let mut queue = vec![tip];
    let mut seen = HashSet::new();
    let mut written = 0;
    while let Some(id) = queue.pop() {
        if !seen.insert(id) || main.exists(id) {
            continue;
        }
        let kind = copy_object(&main, &theirs, id)?;
        written += 1;
        match kind {
            ObjectType::Commit => {
                let c = repo
                    .find_commit(id)
                    .map_err(IsolateError::git("读不出提交"))?;
                queue.push(c.tree_id());
                queue.extend(c.parent_ids());
            }
            ObjectType::Tree => {
                let t = repo.find_tree(id).map_err(IsolateError::git("读不出树"))?;
                for e in t.iter() {
                    // A gitlink (submodule commit) names another repository's object.
                    if matches!(e.kind(), Some(ObjectType::Blob | ObjectType::Tree)) {
                        queue.push(e.id());
                    }
                }
            }
            ObjectType::Tag => {
                let t = repo.find_tag(id).map_err(IsolateError::git("读不出标签"))?;
                queue.push(t.target_id());
            }
            _ => {}
        }
    }
    Ok(written)
}

/// Copies every object of the worker's store that matches its name into the repository (what
/// a kept worktree's index and merge state may name, so that the user's plain git there finds
/// everything once the worker's state is gone). Returns how many were written and how many
/// were refused.
pub fn import_all(repo: &Repository, state: &WorkerState) -> Result<(usize, usize), IsolateError> {
    let main = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
    let (_scratch, theirs) = scratch_odb(state)?;
    let mut ids = Vec::new();
    theirs
        .foreach(|id| {
            ids.push(*id);
            true
        })
        .map_err(IsolateError::git("列不出执行者的对象"))?;
    let (mut written, mut refused) = (0, 0);
    for id in ids {
        if main.exists(id) {
            continue;
        }
        match copy_object(&main, &theirs, id) {
            Ok(_) => written += 1,
            Err(_) => refused += 1,
        }
    }
    Ok((written, refused))
}

/// True for `len` lowercase hex digits.
fn hex(name: &str, len: usize) -> bool {
    name.len() == len && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Copies the loose objects (`xx/<38 hex>`) and packs (`pack/pack-<40 hex>.{pack,idx}`) of the
/// store at `src` into `dest`, never through a link; nothing else (no `info/`).
fn copy_store(src: &Path, dest: &Path) -> std::io::Result<()> {
    let root = open_dir(src)?;
    let mut budget = IMPORT_LIMIT;
    let mut copy = |dir: &std::os::fd::OwnedFd, name: &OsStr, to: &Path| -> std::io::Result<()> {
        if let Some(n) = copy_file_at(dir, name, to, budget)? {
            budget -= n;
        }
        Ok(())
    };
    for (name, _) in entries(&root)? {
        let Some(n) = name.to_str() else { continue };
        let is_pack_dir = n == "pack";
        if !(hex(n, 2) || is_pack_dir) {
            continue;
        }
        let Ok(dir) = open_dir_at(&root, &name) else {
            continue;
        };
        let to = dest.join(n);
        std::fs::create_dir_all(&to)?;
        for (file, _) in entries(&dir)? {
            let Some(f) = file.to_str() else { continue };
            let wanted = if is_pack_dir {
                f.strip_prefix("pack-")
                    .and_then(|r| r.strip_suffix(".pack").or_else(|| r.strip_suffix(".idx")))
                    .is_some_and(|h| hex(h, 40))
            } else {
                hex(f, 38)
            };
            if wanted {
                copy(&dir, &file, &to.join(f))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "adopt_tests.rs"]
mod tests;
