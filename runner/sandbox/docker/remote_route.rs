//! The file operations of a run on an engine that does not share this machine's disk
//! (`DockerOptions::remote`): the file tools and the content identity are done inside the
//! engine, by the exec service of a *files keeper* (`remote_files::FilesKeeper`) that mounts
//! the volumes the agent's view names, each with the view's rights, so the walk and the
//! refusals are the local backend's own code over the same files the agent's commands see.
//!
//! One keeper per distinct view (its mounts and rights): the judges share one, each worker has
//! its own (its clone is a volume of its own). A keeper is made on the first operation of its
//! view and goes with the run's containers at teardown, before the volumes. A view naming a
//! path that is no volume of the run is refused ([`SandboxError::NotOnEngine`]), as a box is.

use async_trait::async_trait;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::remote_files::FilesKeeper;
use super::volumes::run_labels;
use super::{lock, Inner, Tier, UserIds};
use crate::fsroot::View;
use crate::sandbox::files::{
    Access, Contents, Edit, EditRefused, Exclusions, FilesError, GrepQuery, WorkspaceIdentity,
};
use crate::sandbox::{SandboxError, SandboxFiles};

/// A view's mounts and rights: what one keeper serves.
type Key = Vec<(PathBuf, bool)>;

/// The run's keepers by view.
pub(crate) type Keepers = tokio::sync::Mutex<HashMap<Key, Arc<dyn SandboxFiles>>>;

/// Where the run's factory comes from: at once (a connected factory) or once its preflight
/// passed (a deferred one).
#[async_trait]
pub(crate) trait InnerSource: Send + Sync {
    /// The run's factory; `None` once it is gone or lost.
    async fn inner(&self) -> Option<Arc<Inner>>;
}

#[async_trait]
impl InnerSource for std::sync::Weak<Inner> {
    async fn inner(&self) -> Option<Arc<Inner>> {
        self.upgrade()
    }
}

/// [`SandboxFiles`] of a remote run, done by keepers.
pub(crate) struct RemoteRoute(pub(crate) Arc<dyn InnerSource>);

impl RemoteRoute {
    /// The keeper of the view whose mounts and rights are `key`, made on first need.
    async fn keeper(&self, key: Key) -> Result<Arc<dyn SandboxFiles>, FilesError> {
        let failed = |e: SandboxError| FilesError::Failed(e.to_string());
        let inner = self
            .0
            .inner()
            .await
            .ok_or(FilesError::Failed(SandboxError::ShutDown.to_string()))?;
        // Like every start (`Inner::starting`): none once the teardown began, and one in
        // flight is in `created` before the teardown's second pass, which removes it.
        let starting = inner.starting.clone().read_owned().await;
        if inner.torn_down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(FilesError::Failed(SandboxError::ShutDown.to_string()));
        }
        let mut keepers = inner.keepers.lock().await;
        if let Some(k) = keepers.get(&key) {
            return Ok(k.clone());
        }
        let mut mounts = Vec::new();
        for (path, read_only) in &key {
            let volume = inner
                .volumes
                .at(path)
                .ok_or_else(|| failed(SandboxError::NotOnEngine(path.clone())))?;
            let mut m = volume.mount(path);
            m.read_only = Some(*read_only);
            mounts.push(m);
        }
        let image = inner.image().await.map_err(failed)?.clone();
        let binary = inner.service_binary().await.ok_or_else(|| {
            FilesError::Failed("no exec service binary for the files keeper".into())
        })?;
        let source = super::service::ServiceSource::Path(binary.path().to_path_buf());
        let name = format!(
            "fbx-{}-files-{}",
            super::container::sanitize(&inner.opts.run_id),
            keepers.len() + 1
        );
        let ids = inner.opts.user.unwrap_or_else(UserIds::current);
        let labels = run_labels(&inner.opts.run_id, &inner.opts.workspace, &inner.owner);
        let user = format!("{}:{}", ids.uid, ids.gid);
        // Made in a task of its own: a caller dropped meanwhile (a run lost at once) does not
        // leave a keeper created and never recorded, holding a volume past the teardown.
        let maker = inner.clone();
        let made = tokio::spawn(async move {
            let _starting = starting;
            let keeper =
                FilesKeeper::start(&maker.engine, &image, &name, &source, mounts, labels, &user)
                    .await?;
            // Removed with the run's agents at teardown, before its volumes.
            lock(&maker.created).push((keeper.container().to_string(), Tier::Agent));
            drop(binary);
            Ok::<_, SandboxError>(keeper)
        });
        let keeper = made
            .await
            .map_err(|e| FilesError::Failed(e.to_string()))?
            .map_err(failed)?;
        let files = keeper.files();
        keepers.insert(key, files.clone());
        Ok(files)
    }

    /// The keeper of `view`.
    async fn of(&self, view: &View) -> Result<Arc<dyn SandboxFiles>, FilesError> {
        let mut key: Key = view
            .mounts()
            .iter()
            .map(|m| (m.path.clone(), m.read_only))
            .collect();
        key.sort();
        self.keeper(key).await
    }
}

#[async_trait]
impl SandboxFiles for RemoteRoute {
    async fn read(
        &self,
        view: &View,
        path: &Path,
        access: Access,
    ) -> Result<(PathBuf, Contents), FilesError> {
        self.of(view).await?.read(view, path, access).await
    }

    async fn head(
        &self,
        view: &View,
        path: &Path,
        n: usize,
    ) -> Result<(PathBuf, Vec<u8>), FilesError> {
        self.of(view).await?.head(view, path, n).await
    }

    async fn write(
        &self,
        view: &View,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<(PathBuf, bool), FilesError> {
        self.of(view).await?.write(view, path, bytes).await
    }

    async fn edit(
        &self,
        view: &View,
        path: &Path,
        edit: &Edit,
    ) -> Result<(PathBuf, Result<usize, EditRefused>), FilesError> {
        self.of(view).await?.edit(view, path, edit).await
    }

    async fn glob(
        &self,
        view: &View,
        base: &Path,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<(PathBuf, SystemTime)>), FilesError> {
        self.of(view).await?.glob(view, base, pattern).await
    }

    async fn grep(
        &self,
        view: &View,
        base: &Path,
        query: &GrepQuery,
    ) -> Result<Vec<String>, FilesError> {
        self.of(view).await?.grep(view, base, query).await
    }

    /// Done in a keeper that mounts the volume at `root` read-only.
    async fn identity(
        &self,
        root: &Path,
        exclude: &Exclusions,
    ) -> std::io::Result<WorkspaceIdentity> {
        let keeper = self
            .keeper(vec![(root.to_path_buf(), true)])
            .await
            .map_err(std::io::Error::other)?;
        keeper.identity(root, exclude).await
    }
}
