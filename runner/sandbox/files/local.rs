//! [`LocalFiles`]: the file operations on this machine's disk, through the race-free
//! [`crate::fsroot`] view, each on a blocking thread. Used by every backend whose engine sees
//! the caller's files (Docker on this machine, host processes).

use async_trait::async_trait;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::identity::{identity, Exclusions, WorkspaceIdentity};
use super::{
    apply_edit, looks_binary, Access, Contents, Edit, EditRefused, FilesError, GrepQuery,
    SandboxFiles, MAX_FILE_BYTES,
};
use crate::fsroot::{FsError, Resolved, View, ViewError};

/// The file operations on this machine's disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFiles;

/// Resolves `path` in `view` and runs `op` on the result on a blocking thread (resolving again
/// when the entry was swapped for a symlink in between); returns the resolved path too.
/// `for_write`: the directory holding the result must be writable; `create_dirs`: missing
/// directories on the way are created.
pub(super) async fn with<T: Send + 'static>(
    view: &View,
    path: &Path,
    for_write: bool,
    create_dirs: bool,
    mut op: impl FnMut(&Resolved) -> Result<T, FsError> + Send + 'static,
) -> Result<(PathBuf, T), FilesError> {
    let view = view.clone();
    let path = path.to_path_buf();
    let done = tokio::task::spawn_blocking(move || {
        let mut resolved = PathBuf::new();
        let out = view.with(&path, for_write, create_dirs, |r| {
            resolved = r.path().to_path_buf();
            op(r)
        });
        out.map(|t| (resolved, t))
    })
    .await
    .map_err(|e| FilesError::Failed(e.to_string()))?;
    Ok(done?)
}

#[async_trait]
impl SandboxFiles for LocalFiles {
    async fn read(
        &self,
        view: &View,
        path: &Path,
        access: Access,
    ) -> Result<(PathBuf, Contents), FilesError> {
        with(view, path, access == Access::Write, false, |r| {
            match r.read(MAX_FILE_BYTES) {
                Err(FsError::IsDir) => Ok(Contents::Dir),
                other => other.map(Contents::File),
            }
        })
        .await
    }

    async fn head(
        &self,
        view: &View,
        path: &Path,
        n: usize,
    ) -> Result<(PathBuf, Vec<u8>), FilesError> {
        with(view, path, false, false, move |r| {
            let mut buf = vec![0u8; n];
            let got = r.open_file()?.read(&mut buf).map_err(FsError::Io)?;
            buf.truncate(got);
            Ok(buf)
        })
        .await
    }

    async fn write(
        &self,
        view: &View,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<(PathBuf, bool), FilesError> {
        with(view, path, true, true, move |r| r.replace(&bytes)).await
    }

    async fn edit(
        &self,
        view: &View,
        path: &Path,
        edit: &Edit,
    ) -> Result<(PathBuf, Result<usize, EditRefused>), FilesError> {
        let (resolved, contents) = self.read(view, path, Access::Write).await?;
        let bytes = match contents {
            Contents::File(b) => b,
            Contents::Dir => return Err(ViewError::Fs(FsError::IsDir).into()),
        };
        if looks_binary(&bytes) {
            return Ok((resolved, Err(EditRefused::Binary)));
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return Ok((resolved, Err(EditRefused::NotUtf8)));
        };
        let (new_text, n) = match apply_edit(&text, edit) {
            Ok(done) => done,
            Err(e) => return Ok((resolved, Err(e.into()))),
        };
        let (written, _) = self.write(view, path, new_text.into_bytes()).await?;
        Ok((written, Ok(n)))
    }

    async fn glob(
        &self,
        view: &View,
        base: &Path,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<(PathBuf, SystemTime)>), FilesError> {
        super::search::glob(view, base, pattern).await
    }

    async fn grep(
        &self,
        view: &View,
        base: &Path,
        query: &GrepQuery,
    ) -> Result<Vec<String>, FilesError> {
        super::search::grep(view, base, query).await
    }

    async fn identity(
        &self,
        root: &Path,
        exclude: &Exclusions,
    ) -> std::io::Result<WorkspaceIdentity> {
        let (root, exclude) = (root.to_path_buf(), exclude.clone());
        tokio::task::spawn_blocking(move || identity(&root, &exclude))
            .await
            .map_err(std::io::Error::other)?
    }
}
