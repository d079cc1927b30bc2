//! Finding and removing what crashed runs left behind (issue "Lifecycle"; `flowerbox gc`).
//!
//! A container is an orphan when its owner labels prove the owner process dead (pid gone, pid
//! reused with another start time, or a previous boot). Containers of live owners, of other
//! hosts, or without owner labels are never removed. The startup sweep looks at one workspace;
//! `flowerbox gc` at all of them. A run's network carries the same labels and goes the same
//! way, after the containers (the engine keeps a network that a container still uses).
//!
//! Worktrees (`--isolate`) are not this module's: `flowerbox gc` adds
//! [`crate::isolate::sweep::worktree_report`] (DESIGN.md invariant 5).

use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};
use std::collections::HashMap;
use std::path::Path;

use super::engine::status_code;
use super::labels::{Liveness, Owner, LABEL_AGENT, LABEL_ROLE, LABEL_RUN, LABEL_WORKSPACE};
use super::shared_disk::LABEL_DISK_PROBE;
use super::volumes::LABEL_VOLUME;
use super::Engine;
use crate::sandbox::gc::GcReport;
use crate::sandbox::SandboxError;

/// One flowerbox container and what is known about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// Container id.
    pub id: String,
    /// Container name without the leading `/`.
    pub name: String,
    /// `flowerbox.run`.
    pub run: String,
    /// `flowerbox.agent` (`pod` for a pod).
    pub agent: String,
    /// `flowerbox.role` (`pod` for a pod).
    pub role: String,
    /// `flowerbox.workspace`.
    pub workspace: String,
    /// Engine state (`running`, `exited`, `created`...).
    pub state: String,
    /// The owner, when its labels are complete.
    pub owner: Option<Owner>,
    /// Whether the owner still runs.
    pub liveness: Liveness,
}

impl Labelled {
    /// Orphan = owner provably dead.
    pub fn is_orphan(&self) -> bool {
        matches!(self.liveness, Liveness::Dead(_))
    }

    fn describe(&self) -> String {
        format!("{}(运行 {},{})", self.name, self.run, self.agent)
    }
}

fn labelled(
    id: Option<String>,
    name: String,
    state: String,
    labels: HashMap<String, String>,
) -> Labelled {
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let owner = Owner::from_labels(&labels);
    let liveness = match &owner {
        Some(o) => o.liveness(),
        None => Liveness::Unknown("没有主人标签".into()),
    };
    Labelled {
        id: id.unwrap_or_default(),
        name,
        run: get(LABEL_RUN),
        agent: get(LABEL_AGENT),
        role: get(LABEL_ROLE),
        workspace: get(LABEL_WORKSPACE),
        state,
        owner,
        liveness,
    }
}

fn label_filters(workspace: Option<&Path>) -> HashMap<String, Vec<String>> {
    let mut label_filters = vec![LABEL_RUN.to_string()];
    if let Some(ws) = workspace {
        label_filters.push(format!("{LABEL_WORKSPACE}={}", ws.to_string_lossy()));
    }
    HashMap::from([("label".to_string(), label_filters)])
}

/// The disk probe's containers ([`super::shared_disk`]), of `workspace` only when given.
fn probe_filters(workspace: Option<&Path>) -> HashMap<String, Vec<String>> {
    let label = match workspace {
        Some(ws) => format!("{LABEL_DISK_PROBE}={}", ws.to_string_lossy()),
        None => LABEL_DISK_PROBE.to_string(),
    };
    HashMap::from([("label".to_string(), vec![label])])
}

/// Every flowerbox container (any state), of `workspace` only when given (canonical path).
pub async fn list(
    engine: &Engine,
    workspace: Option<&Path>,
) -> Result<Vec<Labelled>, SandboxError> {
    list_where(engine, label_filters(workspace)).await
}

/// Every disk probe's container (never started), of `workspace` only when given; `run`,
/// `agent` and `role` are empty, the workspace is the probe's label.
pub async fn list_probes(
    engine: &Engine,
    workspace: Option<&Path>,
) -> Result<Vec<Labelled>, SandboxError> {
    let mut found = list_where(engine, probe_filters(workspace)).await?;
    for p in &mut found {
        p.role = "disk-probe".into();
    }
    Ok(found)
}

/// Every run volume (an engine without the caller's disk, [`super::volumes`]), of
/// `workspace` only when given; `id` and `name` are the volume's name, `agent` its purpose.
pub async fn list_volumes(
    engine: &Engine,
    workspace: Option<&Path>,
) -> Result<Vec<Labelled>, SandboxError> {
    let options = ListVolumesOptions {
        filters: Some(label_filters(workspace)),
    };
    let found = engine
        .docker()
        .list_volumes(Some(options))
        .await
        .map_err(SandboxError::from)?;
    Ok(found
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| {
            let purpose = v.labels.get(LABEL_VOLUME).cloned().unwrap_or_default();
            let mut l = labelled(Some(v.name.clone()), v.name, String::new(), v.labels);
            l.agent = purpose;
            l
        })
        .collect())
}

/// Whether a container with `labels` was made from an image that keeps what a run's container
/// wrote (`flowerbox-kept:…`, [`super::usage::LABEL_KEPT`]): such an image carries the run's
/// labels (a commit keeps the container's), so a container the user makes from it to take the
/// files out would look like the run's. It is the user's: no run's container carries the label,
/// and neither the sweep nor `gc` lists it.
fn made_from_kept(labels: &HashMap<String, String>) -> bool {
    labels.contains_key(super::usage::LABEL_KEPT)
}

/// The containers whose labels match `filters` (never one made from a kept image).
async fn list_where(
    engine: &Engine,
    filters: HashMap<String, Vec<String>>,
) -> Result<Vec<Labelled>, SandboxError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let found = engine
        .list_containers(options)
        .await
        .map_err(SandboxError::from)?;
    Ok(found
        .into_iter()
        .filter(|c| c.labels.as_ref().is_none_or(|l| !made_from_kept(l)))
        .map(|c| {
            labelled(
                c.id,
                c.names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                c.state.map(|s| s.to_string()).unwrap_or_default(),
                c.labels.unwrap_or_default(),
            )
        })
        .collect())
}

/// Every flowerbox network (one per run with `--egress open|proxy`), of `workspace` only when
/// given (canonical path). `state` is empty; `agent` and `role` are `net`.
pub async fn list_networks(
    engine: &Engine,
    workspace: Option<&Path>,
) -> Result<Vec<Labelled>, SandboxError> {
    let options = ListNetworksOptions {
        filters: Some(label_filters(workspace)),
    };
    let found = engine
        .docker()
        .list_networks(Some(options))
        .await
        .map_err(SandboxError::from)?;
    Ok(found
        .into_iter()
        .map(|n| {
            labelled(
                n.id,
                n.name.unwrap_or_default(),
                String::new(),
                n.labels.unwrap_or_default(),
            )
        })
        .collect())
}

/// What the engine holds of flowerbox's, listed for one sweep.
struct Found {
    containers: Vec<Labelled>,
    networks: Vec<Labelled>,
    volumes: Vec<Labelled>,
}

impl Found {
    /// Everything of `workspace` (every workspace when `None`): the runs' containers and the
    /// disk probes', networks, volumes.
    /// The four listings are asked at once: a run's start waits for the slowest, not the sum.
    async fn list(engine: &Engine, workspace: Option<&Path>) -> Result<Found, SandboxError> {
        let (mut containers, probes, networks, volumes) = futures::try_join!(
            list(engine, workspace),
            list_probes(engine, workspace),
            list_networks(engine, workspace),
            list_volumes(engine, workspace),
        )?;
        containers.extend(probes);
        Ok(Found {
            containers,
            networks,
            volumes,
        })
    }
}

async fn remove_orphans(engine: &Engine, found: Found) -> GcReport {
    let Found {
        containers: all,
        networks,
        volumes,
    } = found;
    let mut report = GcReport::default();
    let (orphans, kept): (Vec<_>, Vec<_>) = all.into_iter().partition(Labelled::is_orphan);
    let (orphan_nets, kept_nets): (Vec<_>, Vec<_>) =
        networks.into_iter().partition(Labelled::is_orphan);
    let why = |c: &Labelled| match &c.liveness {
        Liveness::Alive => "主人还在跑".to_string(),
        Liveness::Unknown(r) | Liveness::Dead(r) => r.clone(),
    };
    for c in kept {
        report
            .kept
            .push(format!("留着容器 {}:{}", c.describe(), why(&c)));
    }
    for n in kept_nets {
        report
            .kept
            .push(format!("留着网络 {}(运行 {}):{}", n.name, n.run, why(&n)));
    }
    // Agent containers before pods: they live in the pods' namespaces.
    let (pods, agents): (Vec<_>, Vec<_>) = orphans.into_iter().partition(|c| c.role == "pod");
    let opts = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    for c in agents.into_iter().chain(pods) {
        let Liveness::Dead(reason) = &c.liveness else {
            continue;
        };
        match engine
            .docker()
            .remove_container(&c.id, Some(opts.clone()))
            .await
        {
            Ok(()) => report
                .removed
                .push(format!("删掉了残留的容器 {}:{reason}", c.describe())),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => report
                .failed
                .push(format!("删不掉残留的容器 {}:{e}", c.describe())),
        }
    }
    // Networks after every container: the engine keeps a network that a container still uses.
    for n in orphan_nets {
        let Liveness::Dead(reason) = &n.liveness else {
            continue;
        };
        let what = format!("{}(运行 {})", n.name, n.run);
        match engine.docker().remove_network(&n.id).await {
            Ok(()) => report
                .removed
                .push(format!("删掉了残留的网络 {what}:{reason}")),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => report.failed.push(format!("删不掉残留的网络 {what}:{e}")),
        }
    }
    // Volumes last: the engine keeps a volume that a container still mounts.
    let (orphan_vols, kept_vols): (Vec<_>, Vec<_>) =
        volumes.into_iter().partition(Labelled::is_orphan);
    for v in kept_vols {
        report
            .kept
            .push(format!("留着卷 {}(运行 {}):{}", v.name, v.run, why(&v)));
    }
    for v in orphan_vols {
        let Liveness::Dead(reason) = &v.liveness else {
            continue;
        };
        let what = format!("{}(运行 {})", v.name, v.run);
        let rm = RemoveVolumeOptions { force: true };
        match engine.docker().remove_volume(&v.id, Some(rm)).await {
            Ok(()) => report
                .removed
                .push(format!("删掉了残留的卷 {what}:{reason}")),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => report.failed.push(format!("删不掉残留的卷 {what}:{e}")),
        }
    }
    report
}

/// The startup sweep: removes this workspace's containers (then networks) whose owner is
/// provably dead and returns one line per removed container or network. Live owners' containers are never touched.
///
/// Errors: listing failed; a failed removal becomes an error naming every such container.
pub async fn sweep_orphans(engine: &Engine, workspace: &Path) -> Result<Vec<String>, SandboxError> {
    let workspace = std::fs::canonicalize(workspace)?;
    let report = remove_orphans(engine, Found::list(engine, Some(&workspace)).await?).await;
    if !report.failed.is_empty() {
        return Err(SandboxError::Backend(format!(
            "docker: {}",
            report.failed.join("; ")
        )));
    }
    Ok(report.removed)
}

/// `flowerbox gc`'s container part: removes orphaned containers and networks (of
/// `containers_of`, or of every workspace when `None`) and lists what it kept. The worktree
/// part is [`crate::isolate::sweep::worktree_report`]; the command line runs both.
pub async fn gc(engine: &Engine, containers_of: Option<&Path>) -> Result<GcReport, SandboxError> {
    let containers_of = containers_of.map(std::fs::canonicalize).transpose()?;
    Ok(remove_orphans(engine, Found::list(engine, containers_of.as_deref()).await?).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_workspace_every_flowerbox_run_is_listed_with_one_only_its_own() {
        let every = label_filters(None);
        assert_eq!(every["label"], vec![LABEL_RUN.to_string()]);
        let one = label_filters(Some(Path::new("/w/a b")));
        assert_eq!(
            one["label"],
            vec![LABEL_RUN.to_string(), format!("{LABEL_WORKSPACE}=/w/a b")]
        );
    }

    #[test]
    fn a_container_made_from_a_kept_image_is_never_a_runs() {
        let run = HashMap::from([
            (LABEL_RUN.to_string(), "r".to_string()),
            (LABEL_WORKSPACE.to_string(), "/w".to_string()),
        ]);
        assert!(!made_from_kept(&run));
        let mut from_kept = run.clone();
        from_kept.insert(super::super::usage::LABEL_KEPT.to_string(), "r".into());
        assert!(made_from_kept(&from_kept));
    }

    #[test]
    fn failure_summary_counts_items_not_containers() {
        assert_eq!(GcReport::default().failure_summary(), None);
        let report = GcReport {
            failed: vec![
                "删不掉残留的容器 c(运行 r,worker-1):x".into(),
                "删不掉分支 flowerbox/r/worker-1:y".into(),
            ],
            ..Default::default()
        };
        assert_eq!(
            report.failure_summary().as_deref(),
            Some("gc: 2 项删不掉(见上)")
        );
    }
}
