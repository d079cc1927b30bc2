//! What the run's containers wrote to their own file systems (issue 25 §4 "Disk"): each
//! container's writable layer as the engine measures it (`SizeRw`), for the run's disk budget;
//! and, when the budget stopped the run, those layers kept as images so that tearing the
//! containers down loses nothing.

use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptions, ListContainersOptions};
use std::collections::HashMap;
use std::path::PathBuf;

use super::labels::{LABEL_AGENT, LABEL_RUN};
use super::{docker_err, Inner};
use crate::sandbox::{SandboxError, Written};

/// Label of an image that keeps a container's writable layer: the run id.
pub const LABEL_KEPT: &str = "flowerbox.kept";
/// The repository of those images (`flowerbox-kept:<container name>`).
pub const KEPT_REPO: &str = "flowerbox-kept";

impl Inner {
    /// Each live container of this run with the bytes of its writable layer (one engine call;
    /// the engine walks each layer, which costs in proportion to what the container wrote).
    pub(super) async fn written(&self) -> Result<Vec<Written>, SandboxError> {
        let options = ListContainersOptions {
            all: true,
            size: true,
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![format!("{LABEL_RUN}={}", self.opts.run_id)],
            )])),
            ..Default::default()
        };
        let found = self
            .engine
            .list_containers(options)
            .await
            .map_err(docker_err)?;
        Ok(found
            .into_iter()
            .filter_map(|c| {
                let name = c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_string())?;
                let agent = c
                    .labels
                    .and_then(|l| l.get(LABEL_AGENT).cloned())
                    .unwrap_or_else(|| name.clone());
                Some(Written {
                    agent,
                    container: name,
                    bytes: u64::try_from(c.size_rw.unwrap_or(0)).unwrap_or(0),
                })
            })
            .collect())
    }

    /// The engine's data root (`DockerRootDir`) when it is a directory here: a local engine.
    /// (A remote engine whose path happens to exist here only makes the watcher's shortcut
    /// weaker: its full measurements still come every minute.)
    pub(super) async fn storage(&self) -> Option<PathBuf> {
        let info = self.docker().info().await.ok()?;
        let dir = PathBuf::from(info.docker_root_dir?);
        dir.is_dir().then_some(dir)
    }

    /// Keeps what `container` wrote to its own file system as the image
    /// `flowerbox-kept:<container>` (labelled with the run), so that removing the container
    /// loses nothing. Returns the image's name.
    pub(super) async fn keep_written(&self, container: &str) -> Result<String, SandboxError> {
        let options = CommitContainerOptions {
            container: Some(container.to_string()),
            repo: Some(KEPT_REPO.to_string()),
            tag: Some(container.to_string()),
            comment: Some(
                "flowerbox: what the container wrote when the disk budget stopped the run".into(),
            ),
            pause: true,
            ..Default::default()
        };
        let config = ContainerConfig {
            labels: Some(HashMap::from([(
                LABEL_KEPT.to_string(),
                self.opts.run_id.clone(),
            )])),
            ..Default::default()
        };
        self.docker()
            .commit_container(options, config)
            .await
            .map_err(docker_err)?;
        Ok(format!("{KEPT_REPO}:{container}"))
    }
}
