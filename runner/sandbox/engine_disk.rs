//! The disk of an engine that does not share the caller's (issue 30 §2): a CI job's `dind`
//! service, a remote machine. Agents there mount the run's volumes, never a path of this
//! machine; [`EngineDisk`] is how the run puts a repository or an empty directory into a volume
//! and takes a branch back out, so that `isolate` can give a worker its place on such an engine
//! without naming the backend. A backend whose engine sees the caller's disk has none
//! ([`super::SandboxFactory::engine_disk`] is `None`).
//!
//! A volume is named by where agents see it (`at`, the `inside` of their [`super::Mount`]s,
//! which on such a backend is also its `host`): a box may mount only those, each whole (an
//! engine without volume subpaths, Docker 20.10, cannot mount part of one). What comes back
//! out (a branch as a bundle) is untrusted: the caller checks it (`isolate::bundle::receive`).

use async_trait::async_trait;
use std::path::Path;

use super::SandboxError;

/// A tar of the directory `dir` (blocking) for [`EngineDisk::upload`]: its files, directories
/// and symbolic links as they are (a link is archived as a link, never followed).
///
/// # Errors
/// A file could not be read.
pub fn tar_dir(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    tar.append_dir_all(".", dir)?;
    tar.into_inner()
}

/// The run's volumes on the engine, by where agents see them.
#[async_trait]
pub trait EngineDisk: Send + Sync {
    /// Makes the volume shown at `at` (labelled `purpose`) holding a clone of `bundle` (a git
    /// bundle of the caller's repository) with branch `branch` checked out at `start` (a
    /// commit id or a ref the bundle carries), owned by the run's user; the clone has no remote.
    ///
    /// # Errors
    /// The volume exists already, or the engine could not make or fill it.
    async fn repository(
        &self,
        at: &Path,
        purpose: &str,
        bundle: Vec<u8>,
        start: &str,
        branch: &str,
    ) -> Result<(), SandboxError>;

    /// Makes a volume shown at `at` (labelled `purpose`) holding the empty directories
    /// `subdirs` (relative), owned by the run's user.
    ///
    /// # Errors
    /// The volume exists already, or the engine could not make it.
    async fn directory(
        &self,
        at: &Path,
        purpose: &str,
        subdirs: &[&str],
    ) -> Result<(), SandboxError>;

    /// Makes a volume shown at `at` (labelled `purpose`) holding the files of `tar` (an
    /// archive flowerbox made of a directory of its own: a probe's copy of the candidate),
    /// owned by the run's user.
    ///
    /// # Errors
    /// The volume exists already, or the engine could not make or fill it.
    async fn upload(&self, at: &Path, purpose: &str, tar: Vec<u8>) -> Result<(), SandboxError>;

    /// The branch `branch` of the repository in the volume at `at`, as a bundle of what `base`
    /// (a commit the caller has) lacks, at most `cap` bytes; `None` when it has no commit
    /// `base` lacks. Untrusted: check it before taking.
    ///
    /// # Errors
    /// No such volume, the branch is missing or git failed there, the bundle is too large.
    async fn branch_back(
        &self,
        at: &Path,
        branch: &str,
        base: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, SandboxError>;

    /// Moves `branch` of the repository in the volume at `at` to `bundle`'s tip (the caller's
    /// branch after an integration), its working tree following.
    ///
    /// # Errors
    /// No such volume, or the bundle's prerequisites are not there.
    async fn update(&self, at: &Path, bundle: Vec<u8>, branch: &str) -> Result<(), SandboxError>;

    /// Removes the volume at `at` (none there: fine). Its containers must be gone.
    ///
    /// # Errors
    /// The engine refused (a container still uses it).
    async fn remove(&self, at: &Path) -> Result<(), SandboxError>;
}
