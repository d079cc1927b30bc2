//! File access for the host-side file tools, through the agent's race-free view
//! ([`crate::fsroot::View`]): the path is resolved from directory handles of the mount roots,
//! the file opened from the handle of its directory with `O_NOFOLLOW | O_NONBLOCK` and checked
//! with `fstat` to be regular, and replaced by a new `O_EXCL` file renamed within that same
//! directory handle. A container can swap any entry for a symlink, a FIFO or a socket at any
//! moment; none of that reaches outside its mounts or blocks the runner.

use std::path::PathBuf;

use super::{ToolContext, ToolError};
use crate::agent::confine::Access;
use crate::fsroot::{FsError, Resolved, ViewError};

/// Largest file `Read` and `Edit` load: a container can make a sparse file of any size with
/// one `truncate -s`, and reading it whole would take the runner's memory with it.
pub(super) const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The tool error for `e` met while handling `shown` (the path as the model wrote it).
pub(super) fn tool_error(ctx: &ToolContext, shown: &str, e: ViewError) -> ToolError {
    match e {
        ViewError::Fs(FsError::Symlink) => ToolError::Path(format!(
            "{shown}: 是符号链接,而且在不停地变(有东西在反复替换它),不跟随"
        )),
        ViewError::Fs(FsError::NotRegular) => ToolError::Failed(format!(
            "{shown} 不是普通文件(FIFO、套接字或设备),文件工具不碰它;要看它是什么,用 Bash 跑 `file`"
        )),
        ViewError::Fs(FsError::IsDir) => ToolError::Failed(format!("{shown} 是目录,不是文件")),
        ViewError::Fs(FsError::TooLarge(_)) => ToolError::Failed(format!(
            "{shown} 太大(超过 {} MiB),文件工具不整个读它;用 Bash 跑 head、sed -n 或 grep 看需要的部分",
            MAX_FILE_BYTES / 1024 / 1024
        )),
        ViewError::Fs(FsError::Io(io)) if io.kind() == std::io::ErrorKind::NotFound => {
            ToolError::Failed(format!("{shown}: 没有这个文件或目录"))
        }
        ViewError::Fs(e) => ToolError::Failed(format!("{shown}: {e}")),
        e => {
            let abs = ctx.confine.absolute(shown).unwrap_or_default();
            ToolError::Path(ctx.confine.message(shown, &abs, &e))
        }
    }
}

/// Resolves `shown` in the agent's view and runs `op` on the result on a blocking thread
/// (resolving again when the entry was swapped for a symlink in between). `access`: for
/// [`Access::Write`] the directory holding the result must be writable; `create_dirs`: missing
/// directories on the way are created.
pub(super) async fn with<T: Send + 'static>(
    ctx: &ToolContext,
    shown: &str,
    access: Access,
    create_dirs: bool,
    op: impl FnMut(&Resolved) -> Result<T, FsError> + Send + 'static,
) -> Result<(PathBuf, T), ToolError> {
    let abs = ctx.confine.absolute(shown)?;
    let view = ctx.confine.view().clone();
    let mut op = op;
    let done = tokio::task::spawn_blocking(move || {
        let mut path = PathBuf::new();
        let out = view.with(&abs, access == Access::Write, create_dirs, |r| {
            path = r.path().to_path_buf();
            op(r)
        });
        out.map(|t| (path, t))
    })
    .await
    .map_err(|e| ToolError::Failed(e.to_string()))?;
    done.map_err(|e| tool_error(ctx, shown, e))
}

/// The bytes of the regular file `shown` names, at most [`MAX_FILE_BYTES`], and its path.
/// `access` [`Access::Write`] refuses a file the agent could not write back.
pub(super) async fn read(
    ctx: &ToolContext,
    shown: &str,
    access: Access,
) -> Result<(PathBuf, Vec<u8>), ToolError> {
    with(ctx, shown, access, false, |r| r.read(MAX_FILE_BYTES)).await
}

/// Replaces the contents of the file `shown` names (created with its directories when
/// missing); returns its path and whether it existed.
pub(super) async fn write(
    ctx: &ToolContext,
    shown: &str,
    bytes: Vec<u8>,
) -> Result<(PathBuf, bool), ToolError> {
    with(ctx, shown, Access::Write, true, move |r| r.replace(&bytes)).await
}
