//! Isolation with `--isolate` (DESIGN.md points 2–3, threat model 2, invariant 5; issues 7
//! and 14): every worker writes in its own git worktree on branch `flower/<run>/<agent>`, and
//! when it ends the runner commits what it left and integrates the branch into the workspace's
//! checked-out branch — one integration at a time, three-way merge, never touching the user's
//! uncommitted work.
//!
//! Life of a worktree: [`WorktreePlacement::open`] opens the workspace's repository (and sweeps
//! what crashed runs left, [`sweep`]) → `prepare(agent)` adds the worktree from HEAD, locked with
//! its owner, with the worker's own git state ([`state`]) → the worker runs in a container that
//! mounts the worktree, the main repository's git common dir **read-only** with narrow
//! writable parts (its admin dir, its own ref directory and object store) and the workbench →
//! `finish(agent, ok)` commits what it left inside its container ([`seal`]), brings its branch
//! back ([`adopt`]) and integrates ([`integrate`]) → [`WorktreePlacement::close`] at the end of
//! the run removes merged worktrees and branches and unlocks the kept ones. Nothing with
//! unmerged commits is ever deleted; a conflict or the user's uncommitted changes stop an
//! integration with a report for the coordinator, leaving workspace, branch and worktree as
//! they were.

pub mod adopt;
pub mod bundle;
pub mod creating;
mod fsafe;
pub mod handback;
pub mod integrate;
pub mod links;
pub mod objects;
pub mod placement;
mod remote;
pub mod repo;
pub mod seal;
pub mod state;
pub mod sweep;
pub mod worktree;

pub use adopt::{adopt, import_all, Adopted, Policy};
pub use integrate::{commit_worktree, integrate, integrate_guarded, Integration};
pub use objects::{ObjectLimits, Oversize};
pub use placement::{open_for_run, IsolateOptions, WorktreePlacement};
pub use repo::{open_workspace_repo, WorkspaceRepo};
pub use state::WorkerState;
pub use sweep::{sweep, SweepReport};
pub use worktree::{branch_name, worktree_name, worktrees_root, OwnerLock};

use std::path::PathBuf;
use thiserror::Error;

/// Isolation failures. Messages are complete sentences for the user or the coordinator.
#[derive(Debug, Error)]
pub enum IsolateError {
    /// The workspace is not inside a git repository (seed 000's exit-1 text).
    #[error("--isolate 要求 {} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。", .0.display())]
    NotARepository(PathBuf),
    /// The repository could not be opened; libgit2's message names an unsupported extension
    /// (`extensions.<name>`) when that is the cause.
    #[error("打不开 git 仓库 {}:{message}", .path.display())]
    Open {
        /// The workspace.
        path: PathBuf,
        /// libgit2's message.
        message: String,
    },
    /// A bare repository has no working tree to integrate into.
    #[error("{} 是裸仓库,没有工作区可以合入;--isolate 需要一个有工作区的仓库。", .0.display())]
    Bare(PathBuf),
    /// HEAD has no commit yet, so there is nothing to start a worktree from.
    #[error("{} 的仓库还没有任何提交:worktree 要从 HEAD 建。先提交一次,或者去掉 --isolate。", .0.display())]
    Unborn(PathBuf),
    /// A git operation failed; `what` says which.
    #[error("{what}:{source}")]
    Git {
        /// What was being done.
        what: String,
        /// libgit2's error.
        source: git2::Error,
    },
    /// A file-system operation failed.
    #[error("{what}:{source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A worker's branch brings back an object, or objects together, larger than the bounds
    /// ([`ObjectLimits`]): refused before the object was read; the real branch is unchanged
    /// and the worker's commits stay in its own store.
    #[error("{branch} 带回的{what}有 {},超过上限 {}(设置 {}):没有取回,分支没动;执行者的提交还在 {}",
        objects::mib(*.size), objects::mib(*.limit), .what.setting(), .store.display())]
    TooLarge {
        /// The worker's branch.
        branch: String,
        /// Which bound.
        what: Oversize,
        /// The declared size (of the object, or of the branch's objects so far), bytes.
        size: u64,
        /// The bound, bytes.
        limit: u64,
        /// The worker's own git state, where its commits stay.
        store: PathBuf,
    },
    /// A worker's branch came back as a bundle that was refused before any of its objects
    /// was taken ([`bundle::receive`]); the real branch is unchanged.
    #[error("执行者的分支没有取回:{0}")]
    Bundle(#[from] bundle::BundleRefusal),
    /// An operation on the engine that does not share this machine's disk failed (`what`).
    #[error("{what}失败:{source}")]
    Engine {
        /// What was being done.
        what: String,
        /// The backend's error.
        source: crate::sandbox::SandboxError,
    },
    /// The workspace is below the repository's working tree, on an engine that does not share
    /// this machine's disk: a volume there holds the whole repository and cannot be shown in
    /// part.
    #[error("{} 在 git 仓库的子目录里;不共享磁盘的引擎上 --isolate 只能在仓库的根目录运行(cd 到仓库根目录再运行)", .0.display())]
    EngineSubdir(PathBuf),
    /// HEAD is detached: there is no branch to integrate into.
    #[error("{} 的 HEAD 不在分支上;--isolate 要合入一个分支(先 git switch 到一个分支)", .0.display())]
    DetachedHead(PathBuf),
    /// A worker was dispatched before the run id was bound ([`WorktreePlacement::bind_run`]).
    #[error("worktree 隔离还没绑定运行编号(bind_run),派不了执行者")]
    Unbound,
    /// A worker's worktree could not be made.
    #[error("给 {agent} 建 worktree 失败:{source}")]
    Prepare {
        /// The worker.
        agent: String,
        /// Why.
        source: Box<IsolateError>,
    },
    /// The blocking task doing `what` died.
    #[error("{what}的线程崩了:{source}")]
    Crashed {
        /// What it was doing.
        what: &'static str,
        /// The join error.
        source: tokio::task::JoinError,
    },
}

impl IsolateError {
    /// A git error with context.
    pub(crate) fn git(what: impl Into<String>) -> impl FnOnce(git2::Error) -> IsolateError {
        let what = what.into();
        move |source| IsolateError::Git { what, source }
    }

    /// An I/O error with context.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> IsolateError {
        let what = what.into();
        move |source| IsolateError::Io { what, source }
    }
}
