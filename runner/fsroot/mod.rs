//! Race-free file access beneath directories that agents can write (DESIGN.md "Threat model" 1).
//!
//! A container can replace any file or directory in its writable mounts at any moment: with a
//! symlink to a host path, a FIFO that blocks whoever opens it, or a directory swapped with a
//! link in a tight `renameat2(RENAME_EXCHANGE)` loop. So the host never checks a path string and
//! opens it later. Every open starts from a directory handle and walks one component at a time
//! with `O_NOFOLLOW` (or `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS`); files are opened `O_NONBLOCK` and checked with `fstat` to be
//! regular; replacements are new `O_EXCL` files renamed within the same directory handle.
//!
//! Two views:
//! - [`Tree`] and [`own`]: places flowerbox itself writes (the workbench, the run directory).
//!   No symlink is ever followed beneath the anchor (for [`own`]: anywhere in the path).
//! - [`View`]: what one agent sees through its mounts, with its container's symlink semantics
//!   (the file tools).
//! - [`plant`]: the `.git` entries (any case) and special files beneath a directory agents
//!   wrote, found and moved away without following a link.
//! - [`config`]: the one reader of configuration files (`.env`, `.mcp.json`, workflow files,
//!   settings): beneath the workspace as the file tools read, the user's own by path; regular
//!   files only, never blocking, capped.

pub mod config;
pub mod own;
pub mod plant;
mod sys;
mod tree;
pub mod view;
pub mod walk;

pub use tree::{BatchSync, Entry, PendingBatch, TempFile, Tree};
pub use view::{Resolved, View, ViewError, ViewMount};

use thiserror::Error;

/// Why a race-free file operation failed.
#[derive(Debug, Error)]
pub enum FsError {
    /// A symbolic link where flowerbox follows none (or one swapped in during the call).
    #[error("是符号链接,flowerbox 不跟随")]
    Symlink,
    /// A FIFO, socket or device where a regular file was expected.
    #[error("不是普通文件(FIFO、套接字或设备)")]
    NotRegular,
    /// A directory where a file was expected.
    #[error("是目录,不是文件")]
    IsDir,
    /// Larger than the cap of the operation, in bytes.
    #[error("超过 {0} 字节")]
    TooLarge(u64),
    /// The path is not beneath the directory it must stay in (or climbs out with `..`).
    #[error("不在允许的目录之下")]
    Outside,
    /// Any other system error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> Self {
        FsError::Io(e.into())
    }
}

impl FsError {
    /// True when the file or a directory on its way does not exist.
    pub fn is_not_found(&self) -> bool {
        sys::is_not_found(self)
    }
}

impl From<FsError> for std::io::Error {
    fn from(e: FsError) -> Self {
        match e {
            FsError::Io(io) => io,
            other => std::io::Error::other(other),
        }
    }
}

#[cfg(test)]
mod tests;
