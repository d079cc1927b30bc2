//! Opening files for the host-side file tools without trusting what is at the path: the
//! workspace is shared with the agents' containers, which can put a FIFO, a socket or a
//! symlink anywhere in it at any moment. Files are opened with `O_NONBLOCK | O_NOFOLLOW` (a
//! FIFO cannot block the runner, a symlink swapped in after confinement is not followed) and
//! checked with `fstat` on the open descriptor to be a regular file.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::ToolError;

/// Opens `path` (already confined) as an existing regular file, or creates it when `create`.
fn open(path: &Path, shown: &str, write: bool, create: bool) -> Result<std::fs::File, ToolError> {
    let mut o = std::fs::OpenOptions::new();
    o.read(!write)
        .write(write)
        .create(create)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW);
    let f = o.open(path).map_err(|e| match e.raw_os_error() {
        // ELOOP: the last component is a symlink (put there after confinement);
        // ENXIO: a FIFO with no reader.
        Some(nix::libc::ELOOP) => ToolError::Path(format!("{shown}: 是符号链接,不跟随")),
        Some(nix::libc::ENXIO) => not_regular(shown),
        _ => ToolError::Failed(format!("{shown}: {e}")),
    })?;
    let md = f
        .metadata()
        .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
    if md.is_dir() {
        return Err(ToolError::Failed(format!("{shown} 是目录,不是文件")));
    }
    if !md.is_file() {
        return Err(not_regular(shown));
    }
    Ok(f)
}

fn not_regular(shown: &str) -> ToolError {
    ToolError::Failed(format!(
        "{shown} 不是普通文件(FIFO、套接字或设备),文件工具不碰它;要看它是什么,用 Bash 跑 `file`"
    ))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?
}

/// Largest file `Read` and `Edit` load: a container can make a sparse file of any size with
/// one `truncate -s`, and reading it whole would take the runner's memory with it.
pub(super) const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The bytes of the regular file at `path`, at most [`MAX_FILE_BYTES`].
pub(super) async fn read(path: &Path, shown: &str) -> Result<Vec<u8>, ToolError> {
    let (path, shown) = (path.to_path_buf(), shown.to_string());
    blocking(move || {
        let f = open(&path, &shown, false, false)?;
        let mut buf = Vec::new();
        f.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
        if buf.len() as u64 > MAX_FILE_BYTES {
            return Err(ToolError::Failed(format!(
                "{shown} 太大(超过 {} MiB),文件工具不整个读它;用 Bash 跑 head、sed -n 或 grep 看需要的部分",
                MAX_FILE_BYTES / 1024 / 1024
            )));
        }
        Ok(buf)
    })
    .await
}

/// Replaces the contents of the file at `path` (created when missing); true when it existed.
pub(super) async fn write(path: &Path, shown: &str, bytes: Vec<u8>) -> Result<bool, ToolError> {
    let (path, shown): (PathBuf, String) = (path.to_path_buf(), shown.to_string());
    blocking(move || {
        let existed = std::fs::symlink_metadata(&path).is_ok();
        let mut f = open(&path, &shown, true, true)?;
        // Truncate only once the descriptor is known to be a regular file.
        f.set_len(0)
            .and_then(|_| f.write_all(&bytes))
            .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
        Ok(existed)
    })
    .await
}
