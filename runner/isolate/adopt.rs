//! Bringing a worker's branch back (DESIGN.md threat model 2): the worker's git commits into
//! its own ref directory and object store ([`super::state`]); flowerbox alone moves the real
//! branch `flower/<run>/<agent>`, with libgit2, after copying the objects the branch needs into
//! the repository.
//!
//! Nothing the worker wrote is followed or trusted: its store is copied (regular files with
//! object names only, never through a link, never its `info/` with alternates or commit
//! graphs) into a private directory, every object read from there is checked against its name,
//! and only objects reachable from the branch's tip are written into the repository — within
//! the repository's [`ObjectLimits`], sized by their headers before anything is inflated
//! ([`super::objects`]).

use git2::{ObjectType, Odb, Oid, Repository};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;

use super::fsafe::{copy_file_at, entries, open_dir, open_dir_at};
use super::objects::{check_packs, copy_object, ObjectLimits, Tally};
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
    let moved = move_branch(&repo, &state.branch, tip, policy, || {
        import(ws, &repo, state, tip).map(|_| ())
    })?;
    if !matches!(moved, Adopted::Diverged { .. }) {
        state.set_synced(tip)?;
    }
    Ok(moved)
}

/// Moves `refs/heads/<branch>` of `repo` to `tip` under `policy`, after `bring` made the tip's
/// objects present (called only when the branch is elsewhere). Shared by [`adopt`] and the
/// bundles of an engine without the caller's disk ([`super::bundle`]).
pub(crate) fn move_branch(
    repo: &Repository,
    branch: &str,
    tip: Oid,
    policy: Policy,
    bring: impl FnOnce() -> Result<(), IsolateError>,
) -> Result<Adopted, IsolateError> {
    let refname = format!("refs/heads/{branch}");
    let current = repo.refname_to_id(&refname).ok();
    if current == Some(tip) {
        return Ok(Adopted::Unchanged);
    }
    bring()?;
    // The tip may have been in the repository already, as anything.
    repo.find_commit(tip).map_err(IsolateError::git(format!(
        "执行者的分支 {branch} 指向的不是提交"
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
    let msg = format!("flowerbox: 取回 {branch} 的提交");
    match current {
        Some(cur) => repo.reference_matching(&refname, tip, true, cur, &msg),
        None => repo.reference(&refname, tip, false, &msg),
    }
    .map_err(IsolateError::git(format!("移不动分支 {branch}")))?;
    Ok(Adopted::Moved {
        from: current,
        to: tip,
    })
}

/// The worker's store copied into a private directory (see [`copy_store`]: loose objects in
/// `loose/`, packs in `packed/`), opened without alternates: all of it as a repository (to
/// read commits and trees, checked against their names by libgit2), and its packs alone. The
/// directory lives as long as the returned guard.
pub(crate) struct Scratch {
    repo: Repository,
    odb: Odb<'static>,
    packs: Odb<'static>,
    _dir: tempfile::TempDir,
}

impl Scratch {
    /// Opens `dir`'s `loose/` and `packed/` (both present) as the objects to import from.
    pub(crate) fn open(dir: tempfile::TempDir) -> Result<Scratch, IsolateError> {
        let (loose, packed) = (dir.path().join("loose"), dir.path().join("packed"));
        let open = |dirs: &[&Path]| -> Result<Odb<'static>, IsolateError> {
            let odb = Odb::new().map_err(IsolateError::git("建不出对象库"))?;
            for d in dirs {
                odb.add_disk_alternate(&d.to_string_lossy())
                    .map_err(IsolateError::git("打不开执行者的对象库"))?;
            }
            Ok(odb)
        };
        let repo = Repository::from_odb(open(&[&loose, &packed])?)
            .map_err(IsolateError::git("打不开执行者的对象库"))?;
        Ok(Scratch {
            odb: open(&[&loose, &packed])?,
            packs: open(&[&packed])?,
            repo,
            _dir: dir,
        })
    }
}

/// A new private directory in the repository's `flowerbox/` with empty `loose/` and
/// `packed/`, for [`Scratch::open`].
pub(crate) fn scratch_dir(commondir: &Path) -> Result<tempfile::TempDir, IsolateError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(commondir.join("flowerbox"))
        .map_err(IsolateError::io("建不出导入用的临时目录"))?;
    let dir = tempfile::Builder::new()
        .prefix("import-")
        .tempdir_in(commondir.join("flowerbox"))
        .map_err(IsolateError::io("建不出导入用的临时目录"))?;
    for d in ["loose", "packed"] {
        std::fs::create_dir(dir.path().join(d))
            .map_err(IsolateError::io("建不出导入用的临时目录"))?;
    }
    Ok(dir)
}

fn scratch(state: &WorkerState) -> Result<Scratch, IsolateError> {
    let dir = scratch_dir(&state.commondir)?;
    copy_store(
        &state.objects(),
        &dir.path().join("loose"),
        &dir.path().join("packed"),
    )
    .map_err(IsolateError::io("读不出执行者的对象库"))?;
    Scratch::open(dir)
}

/// The objects `id` (of `kind`, read from the worker's store) names.
fn children(repo: &Repository, id: Oid, kind: ObjectType) -> Result<Vec<Oid>, IsolateError> {
    let bad = |what: &str| IsolateError::git(format!("读不出执行者的{what} {id}"));
    Ok(match kind {
        ObjectType::Commit => {
            let c = repo.find_commit(id).map_err(bad("提交"))?;
            std::iter::once(c.tree_id()).chain(c.parent_ids()).collect()
        }
        // A gitlink (submodule commit) names another repository's object.
        ObjectType::Tree => repo
            .find_tree(id)
            .map_err(bad("树"))?
            .iter()
            .filter(|e| matches!(e.kind(), Some(ObjectType::Blob | ObjectType::Tree)))
            .map(|e| e.id())
            .collect(),
        ObjectType::Tag => vec![repo.find_tag(id).map_err(bad("标签"))?.target_id()],
        _ => Vec::new(),
    })
}

/// Copies every object reachable from `tip` that the repository lacks out of the worker's
/// store, within the repository's [`ObjectLimits`] (declared sizes checked before anything is
/// read) and checked against its name. Objects are written after everything they name, so an
/// import cut short (a limit, a forged object) never leaves an object in the repository whose
/// closure is missing. Returns how many objects were written.
pub(crate) fn import(
    ws: &WorkspaceRepo,
    repo: &Repository,
    state: &WorkerState,
    tip: Oid,
) -> Result<usize, IsolateError> {
    let main = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
    if main.exists(tip) {
        return Ok(0);
    }
    let s = scratch(state)?;
    let tally = Tally::new(&ws.limits, &state.branch, state.dir());
    import_reachable(&main, &s, tally, tip)
}

/// Copies every object reachable from `tip` that `main` lacks out of `s` (see [`import`]).
pub(crate) fn import_reachable(
    main: &Odb<'_>,
    s: &Scratch,
    mut tally: Tally<'_>,
    tip: Oid,
) -> Result<usize, IsolateError> {
    check_packs(&s.packs, &tally)?;
    // Depth first; an object is written when its entry comes back up (`true`).
    let mut stack = vec![(tip, false)];
    let mut seen = HashSet::new();
    let mut written = 0;
    while let Some((id, expanded)) = stack.pop() {
        if expanded {
            let (size, kind) = header(&s.odb, id)?;
            copy_object(main, &s.odb, id, size, kind)?;
            written += 1;
            continue;
        }
        if main.exists(id) || !seen.insert(id) {
            continue;
        }
        let (size, kind) = header(&s.odb, id)?;
        tally.admit(id, size as u64)?;
        stack.push((id, true));
        for child in children(&s.repo, id, kind)? {
            stack.push((child, false));
        }
    }
    Ok(written)
}

/// Copies every object of the worker's store that matches its name into the repository (what
/// a kept worktree's index and merge state may name, so that the user's plain git there finds
/// everything once the worker's state is gone), within `limits`: when one object, or all of
/// them together, is over, none is copied. Returns how many were written and how many were
/// refused (not matching their name).
pub fn import_all(
    repo: &Repository,
    state: &WorkerState,
    limits: &ObjectLimits,
) -> Result<(usize, usize), IsolateError> {
    let main = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
    let s = scratch(state)?;
    let mut tally = Tally::new(limits, &state.branch, state.dir());
    check_packs(&s.packs, &tally)?;
    let mut ids = Vec::new();
    s.odb
        .foreach(|id| {
            ids.push(*id);
            true
        })
        .map_err(IsolateError::git("列不出执行者的对象"))?;
    let mut wanted = Vec::new();
    for id in ids {
        if main.exists(id) {
            continue;
        }
        let (size, kind) = header(&s.odb, id)?;
        tally.admit(id, size as u64)?;
        wanted.push((id, size, kind));
    }
    let (mut written, mut refused) = (0, 0);
    for (id, size, kind) in wanted {
        match copy_object(&main, &s.odb, id, size, kind) {
            Ok(()) => written += 1,
            Err(_) => refused += 1,
        }
    }
    Ok((written, refused))
}

/// The declared size and type of `id` (its header only).
fn header(odb: &Odb<'_>, id: Oid) -> Result<(usize, ObjectType), IsolateError> {
    odb.read_header(id)
        .map_err(IsolateError::git(format!("执行者的分支缺对象 {id}")))
}

/// True for `len` lowercase hex digits.
fn hex(name: &str, len: usize) -> bool {
    name.len() == len && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Copies the loose objects (`xx/<38 hex>`) of the store at `src` into `loose` and its packs
/// (`pack/pack-<40 hex>.{pack,idx}`) into `packed`, never through a link; nothing else (no
/// `info/`).
fn copy_store(src: &Path, loose: &Path, packed: &Path) -> std::io::Result<()> {
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
        let to = if is_pack_dir { packed } else { loose }.join(n);
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
