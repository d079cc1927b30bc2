//! The file tools' side of the run's file operations ([`crate::sandbox::files`], through the
//! run's backend): the path as the model wrote it made absolute in the agent's confinement, the
//! operation run on the agent's view, and its refusals turned into tool errors. How the view
//! stays race-free (directory handles, `O_NOFOLLOW | O_NONBLOCK`, rename within the directory's
//! handle) is the backend's ([`crate::sandbox::files::LocalFiles`] on this machine's disk).

use std::path::PathBuf;

use super::{ToolContext, ToolError};
use crate::fsroot::{FsError, ViewError};
use crate::sandbox::files::{FilesError, MAX_FILE_BYTES};

/// The tool error for `e` met while handling `shown` (the path as the model wrote it).
pub(super) fn tool_error(ctx: &ToolContext, shown: &str, e: FilesError) -> ToolError {
    let e = match e {
        FilesError::View(v) => v,
        FilesError::Query(q) => return ToolError::InvalidInput(q),
        FilesError::Failed(f) => return ToolError::Failed(f),
    };
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

/// `shown` made absolute in the agent's confinement (relative paths start at its workdir).
pub(super) fn absolute(ctx: &ToolContext, shown: &str) -> Result<PathBuf, ToolError> {
    ctx.confine.absolute(shown)
}
