//! Branches as git bundles (issue 30 §2): how a repository travels to an engine that does not
//! see the caller's disk, and how a worker's branch comes back from it.
//!
//! Out: [`write_bundle`] packs what the named refs reach (libgit2's pack builder, no git
//! process, nothing of the repository's configuration run) as a v2 bundle.
//!
//! Back: [`receive`] treats the bundle as a worker's store is treated by [`super::adopt`]:
//! nothing in it is trusted. Its header must name exactly the worker's branch (and only
//! prerequisites the repository has, as commits); its pack is indexed by libgit2 into a private
//! quarantine directory (every object hashed as it is indexed, so none can lie about its name;
//! a thin pack's bases come from the repository), every object is checked by its header
//! against the repository's [`super::ObjectLimits`], and only then are the objects the branch's
//! tip reaches copied into the repository, each checked again against its name, and the branch
//! moved under the same [`Policy`] as [`super::adopt()`]. A bundle larger than [`MAX_BUNDLE`]
//! is refused unread.

use git2::{Indexer, Oid, Repository};
use std::io::Write;
use thiserror::Error;

use super::adopt::{import_reachable, move_branch, scratch_dir, Adopted, Policy, Scratch};
use super::objects::Tally;
use super::repo::WorkspaceRepo;
use super::IsolateError;

/// Most bytes of a bundle taken back (as [`super::adopt`]'s copy of a worker's store).
pub const MAX_BUNDLE: u64 = 16 << 30;

/// Most bytes of a bundle's header (its refs and prerequisites).
const MAX_HEADER: usize = 1 << 20;

/// The first line of the bundles written and taken.
const SIGNATURE: &str = "# v2 git bundle\n";

/// Why a bundle was refused before any of its objects was taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BundleRefusal {
    /// Not a v2 bundle (another version, or not a bundle).
    #[error("不是 v2 格式的 git bundle")]
    NotABundle,
    /// The header does not parse (a line that is neither a ref nor a prerequisite, no end).
    #[error("bundle 的头读不懂:{0}")]
    Header(String),
    /// It carries other refs than the one branch asked for.
    #[error("bundle 里的引用是 {found:?},要的只有 {wanted}")]
    Refs {
        /// The ref asked for.
        wanted: String,
        /// What it carries.
        found: Vec<String>,
    },
    /// It needs a commit the repository does not have.
    #[error("bundle 需要的提交 {0} 仓库里没有")]
    Prerequisite(Oid),
    /// It is larger than [`MAX_BUNDLE`].
    #[error("bundle 有 {0} 字节,超过上限 {MAX_BUNDLE}")]
    TooLarge(u64),
}

/// A bundle's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleHeader {
    /// `(tip, refname)` per ref.
    pub refs: Vec<(Oid, String)>,
    /// Commits the receiver must have.
    pub prerequisites: Vec<Oid>,
}

/// Parses `bytes`' header; returns it and where the pack starts.
pub fn parse_header(bytes: &[u8]) -> Result<(BundleHeader, usize), BundleRefusal> {
    if !bytes.starts_with(SIGNATURE.as_bytes()) {
        return Err(BundleRefusal::NotABundle);
    }
    let mut at = SIGNATURE.len();
    let mut header = BundleHeader {
        refs: Vec::new(),
        prerequisites: Vec::new(),
    };
    loop {
        let rest = &bytes[at..bytes.len().min(MAX_HEADER)];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(BundleRefusal::Header("头没有结束".into()));
        };
        let line = std::str::from_utf8(&rest[..end])
            .map_err(|_| BundleRefusal::Header("不是 UTF-8".into()))?;
        at += end + 1;
        if line.is_empty() {
            return Ok((header, at));
        }
        let bad = || BundleRefusal::Header(line.chars().take(100).collect());
        if let Some(pre) = line.strip_prefix('-') {
            let hex = pre.split(' ').next().unwrap_or_default();
            header
                .prerequisites
                .push(Oid::from_str(hex).map_err(|_| bad())?);
        } else {
            let (hex, name) = line.split_once(' ').ok_or_else(bad)?;
            if hex.len() != 40 || !name.starts_with("refs/") {
                return Err(bad());
            }
            header
                .refs
                .push((Oid::from_str(hex).map_err(|_| bad())?, name.to_string()));
        }
    }
}

/// A v2 bundle of everything `refs` (full names) reach in `repo`.
pub fn write_bundle(repo: &Repository, refs: &[&str]) -> Result<Vec<u8>, IsolateError> {
    let mut out = SIGNATURE.as_bytes().to_vec();
    let mut walk = repo.revwalk().map_err(IsolateError::git("遍历提交失败"))?;
    for name in refs {
        let id = repo
            .refname_to_id(name)
            .map_err(IsolateError::git(format!("找不到引用 {name}")))?;
        writeln!(out, "{id} {name}").map_err(IsolateError::io("写 bundle 失败"))?;
        walk.push(id).map_err(IsolateError::git("遍历提交失败"))?;
    }
    out.push(b'\n');
    let mut pack = repo.packbuilder().map_err(IsolateError::git("打包失败"))?;
    pack.insert_walk(&mut walk)
        .map_err(IsolateError::git("打包失败"))?;
    pack.foreach(|chunk| {
        out.extend_from_slice(chunk);
        true
    })
    .map_err(IsolateError::git("打包失败"))?;
    Ok(out)
}

/// Takes `bundle` (the worker's branch `branch`, `refs/heads/<branch>` its only ref) into the
/// repository and moves the branch under `policy` (see the module docs). Callers hold the
/// integration lock.
///
/// # Errors
/// [`IsolateError::Bundle`] for a bundle refused before any object was taken; the errors of
/// [`super::adopt()`] for its objects. The real branch is then unchanged.
pub fn receive(
    ws: &WorkspaceRepo,
    bundle: &[u8],
    branch: &str,
    policy: Policy,
) -> Result<Adopted, IsolateError> {
    if bundle.len() as u64 > MAX_BUNDLE {
        return Err(BundleRefusal::TooLarge(bundle.len() as u64).into());
    }
    let (header, pack_at) = parse_header(bundle)?;
    let wanted = format!("refs/heads/{branch}");
    let tip = match header.refs.as_slice() {
        [(tip, name)] if *name == wanted => *tip,
        found => {
            return Err(BundleRefusal::Refs {
                wanted,
                found: found.iter().map(|(_, n)| n.clone()).collect(),
            }
            .into())
        }
    };
    let repo = ws.open()?;
    for pre in &header.prerequisites {
        if repo.find_commit(*pre).is_err() {
            return Err(BundleRefusal::Prerequisite(*pre).into());
        }
    }
    move_branch(&repo, branch, tip, policy, || {
        let main = repo.odb().map_err(IsolateError::git("打不开对象库"))?;
        if main.exists(tip) {
            return Ok(());
        }
        let dir = scratch_dir(&ws.commondir)?;
        let pack_dir = dir.path().join("packed/pack");
        std::fs::create_dir(&pack_dir).map_err(IsolateError::io("建不出导入用的临时目录"))?;
        // Hashed as indexed; a thin pack's bases from the repository (verify: connectivity).
        let mut indexer = Indexer::new(Some(&main), &pack_dir, 0o600, true)
            .map_err(IsolateError::git("读不了 bundle 里的包"))?;
        indexer
            .write_all(&bundle[pack_at..])
            .map_err(IsolateError::io("bundle 里的包坏了"))?;
        indexer
            .commit()
            .map_err(IsolateError::git("bundle 里的包坏了"))?;
        let store = dir.path().to_path_buf();
        let s = Scratch::open(dir)?;
        let tally = Tally::new(&ws.limits, branch, store);
        import_reachable(&main, &s, tally, tip).map(|_| ())
    })
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
