//! A run on an engine that does not share the caller's disk (issue 30 §2; `DockerOptions::remote`):
//! every agent container mounts the run's volumes only, never a path of this machine.
//!
//! The boxes the run hands over still name their mounts by path (`Mount::inside`, equal to
//! `host`); here a path is only the *name* of a volume of the run made at that path
//! ([`EngineDisk`]): the agent body's mounts are rewritten to those volumes, and a mount
//! that names none is refused ([`SandboxError::NotOnEngine`]): no bind mount can come out of
//! this backend, by construction. Nothing is resolved on this machine's disk (it is not the
//! engine's), no source is pinned (a write scope needs the host's handle: refused), and the
//! exec service's binary goes into each container through the archive API before it starts.
//! The volumes go at teardown, after the containers.

use bollard::models::{ContainerCreateBody, MountType};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Weak};

use super::volumes::{run_labels, Chore, RunVolume};
use super::{lock, Inner, UserIds};
use crate::sandbox::{AgentBox, EngineDisk, Mount, SandboxError};

/// Where a chore mounts the volume it works on.
const WORK: &str = "/fbx-volume";

/// git as chores run it (no fsmonitor command, no hook: see [`super::volumes`]).
const GIT: &str = "git -c core.fsmonitor=false -c core.hooksPath=/dev/null";

/// The run's volumes, by where agents see them.
#[derive(Default)]
pub(crate) struct Volumes {
    placed: Mutex<Vec<(PathBuf, RunVolume)>>,
}

impl Volumes {
    /// The volume shown at `at`.
    pub(crate) fn at(&self, at: &Path) -> Option<RunVolume> {
        lock(&self.placed)
            .iter()
            .find(|(p, _)| p == at)
            .map(|(_, v)| v.clone())
    }

    /// Rewrites `body`'s mounts to the run's volumes: each bind mount's source must be the
    /// path of one of them; legacy `binds` are refused outright.
    pub(crate) fn translate(&self, body: &mut ContainerCreateBody) -> Result<(), SandboxError> {
        let hc = body.host_config.get_or_insert_with(Default::default);
        if let Some(bind) = hc.binds.as_ref().and_then(|b| b.first()) {
            return Err(SandboxError::NotOnEngine(PathBuf::from(bind)));
        }
        for m in hc.mounts.iter_mut().flatten() {
            if m.typ != Some(MountType::BIND) {
                continue;
            }
            let source = PathBuf::from(m.source.clone().unwrap_or_default());
            let volume = self
                .at(&source)
                .ok_or_else(|| SandboxError::NotOnEngine(source.clone()))?;
            m.typ = Some(MountType::VOLUME);
            m.source = Some(volume.name);
            m.bind_options = None;
        }
        Ok(())
    }

    /// Volumes known by name only (a detached cleanup's plan: [`super::reap`]), to remove.
    pub(crate) fn holding(volumes: Vec<RunVolume>) -> Volumes {
        Volumes {
            placed: Mutex::new(volumes.into_iter().map(|v| (PathBuf::new(), v)).collect()),
        }
    }

    /// The names of the volumes held, without forgetting them.
    pub(crate) fn names(&self) -> Vec<String> {
        lock(&self.placed)
            .iter()
            .map(|(_, v)| v.name.clone())
            .collect()
    }

    /// Forgets every volume and returns them (teardown removes them).
    pub(crate) fn take_all(&self) -> Vec<RunVolume> {
        std::mem::take(&mut *lock(&self.placed))
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }
}

/// The box as the engine will see it: absolute paths as given (nothing resolved on this
/// machine), duplicate mounts merged (the stricter flag wins; a shadow's source stays), the
/// workdir in a mount, no pinned source (a handle of this machine's), no mask. A shadow shows
/// the volume made at its `host` path (a probe's copy) at `inside`.
pub(crate) fn remote_box(spec: &AgentBox) -> Result<AgentBox, SandboxError> {
    let mut mounts: Vec<Mount> = Vec::new();
    for m in &spec.mounts {
        if m.pin.is_some() || !m.inside.is_absolute() || !m.host.is_absolute() {
            return Err(SandboxError::NotOnEngine(m.host.clone()));
        }
        match mounts.iter_mut().find(|x| x.inside == m.inside) {
            Some(existing) => {
                existing.read_only |= m.read_only;
                if !existing.is_shadow() {
                    existing.host.clone_from(&m.host);
                }
            }
            None => mounts.push(Mount::shadow(m.host.clone(), m.inside.clone(), m.read_only)),
        }
    }
    if !mounts.iter().any(|m| spec.workdir.starts_with(&m.inside)) {
        return Err(SandboxError::OutsideMounts(spec.workdir.clone()));
    }
    // Masked directories hide the caller's run records, which are on the caller's disk and
    // never in a volume (a repository goes in as a bundle of commits): nothing to hide there,
    // and no mount point for a mask in a read-only volume that lacks the directory.
    Ok(AgentBox {
        agent: spec.agent.clone(),
        role: spec.role,
        mounts,
        masked: Vec::new(),
        workdir: spec.workdir.clone(),
        policy: spec.policy,
    })
}

/// The run's [`EngineDisk`]: volumes made by short-lived chores of the agent image.
pub(crate) struct RemoteDisk {
    /// The run's factory (weak: the factory outlives none of its users' calls).
    pub(crate) inner: Weak<Inner>,
}

impl RemoteDisk {
    fn inner(&self) -> Result<std::sync::Arc<Inner>, SandboxError> {
        self.inner.upgrade().ok_or(SandboxError::ShutDown)
    }
}

impl Inner {
    /// A chore of the run's image on `volume`, as `user`.
    fn chore<'a>(&'a self, image: &'a str, volume: &RunVolume, user: &'a str) -> Chore<'a> {
        Chore {
            engine: &self.engine,
            image,
            user,
            mounts: vec![volume.mount(Path::new(WORK))],
            labels: run_labels(&self.opts.run_id, &self.opts.workspace, &self.owner),
        }
    }

    /// Creates the volume shown at `at` for `purpose` and records it; refused when one is.
    async fn new_volume(&self, at: &Path, purpose: &str) -> Result<RunVolume, SandboxError> {
        if self.at_volume(at).is_some() {
            return Err(SandboxError::Backend(format!(
                "{} already has a volume",
                at.display()
            )));
        }
        let volume = RunVolume::create(
            &self.engine,
            &self.opts.run_id,
            &self.opts.workspace,
            purpose,
            &self.owner,
        )
        .await?;
        lock(&self.volumes.placed).push((at.to_path_buf(), volume.clone()));
        Ok(volume)
    }

    fn at_volume(&self, at: &Path) -> Option<RunVolume> {
        self.volumes.at(at)
    }

    /// `uid:gid` of the run's user (who owns what the volumes hold).
    fn owner_ids(&self) -> String {
        let ids = self.opts.user.unwrap_or_else(UserIds::current);
        format!("{}:{}", ids.uid, ids.gid)
    }
}

#[async_trait::async_trait]
impl EngineDisk for RemoteDisk {
    async fn repository(
        &self,
        at: &Path,
        purpose: &str,
        bundle: Vec<u8>,
        start: &str,
        branch: &str,
    ) -> Result<(), SandboxError> {
        let inner = self.inner()?;
        let image = inner.image().await?.clone();
        let volume = inner.new_volume(at, purpose).await?;
        let q = crate::sandbox::shell_quote;
        // Root in the chore owns the fresh volume's root; it hands everything to the run's user
        // (`chown -h`: a link itself, never what it names).
        let script = format!(
            "{GIT} -c init.defaultBranch=main clone -q --no-checkout /tmp/in.bundle {WORK}\n\
             {GIT} -C {WORK} checkout -q -B {branch} {start}\n\
             {GIT} -C {WORK} remote remove origin\n\
             chown -hR {owner} {WORK}",
            branch = q(branch),
            start = q(start),
            owner = inner.owner_ids(),
        );
        let chore = inner.chore(&image, &volume, "0:0");
        chore
            .run_with(&script, &[("in.bundle", &bundle)], None, &["CHOWN"])
            .await
            .map(|_| ())
    }

    async fn directory(
        &self,
        at: &Path,
        purpose: &str,
        subdirs: &[&str],
    ) -> Result<(), SandboxError> {
        let inner = self.inner()?;
        let image = inner.image().await?.clone();
        let mut script = format!("cd {WORK}\n");
        for d in subdirs {
            let d = Path::new(d);
            if d.is_absolute() || d.components().any(|c| c.as_os_str() == "..") {
                return Err(SandboxError::NotOnEngine(at.join(d)));
            }
            script.push_str(&format!(
                "mkdir -p -- {}\n",
                crate::sandbox::shell_quote(&d.to_string_lossy())
            ));
        }
        script.push_str(&format!("chown -hR {} {WORK}", inner.owner_ids()));
        let volume = inner.new_volume(at, purpose).await?;
        let chore = inner.chore(&image, &volume, "0:0");
        chore
            .run_with(&script, &[], None, &["CHOWN"])
            .await
            .map(|_| ())
    }

    async fn upload(&self, at: &Path, purpose: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        let inner = self.inner()?;
        let image = inner.image().await?.clone();
        let volume = inner.new_volume(at, purpose).await?;
        // Unpacked by root in a chore that mounts this fresh volume only; handed to the run's
        // user (`chown -h`: a link itself).
        let script = format!(
            "tar -xf /tmp/in.tar -C {WORK} --no-same-owner\nchown -hR {} {WORK}",
            inner.owner_ids()
        );
        let chore = inner.chore(&image, &volume, "0:0");
        chore
            .run_with(&script, &[("in.tar", &tar)], None, &["CHOWN"])
            .await
            .map(|_| ())
    }

    async fn branch_back(
        &self,
        at: &Path,
        branch: &str,
        base: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        let inner = self.inner()?;
        let image = inner.image().await?.clone();
        let volume = inner
            .at_volume(at)
            .ok_or_else(|| SandboxError::NotOnEngine(at.to_path_buf()))?;
        // As the run's user: the worker owns the repository, so git trusts it as is. An empty
        // file says there is nothing beyond `base` (git refuses an empty bundle).
        let user = inner.owner_ids();
        let chore = inner.chore(&image, &volume, &user);
        let q = crate::sandbox::shell_quote;
        let range = q(&format!("{base}..refs/heads/{branch}"));
        let script = format!(
            "n=$({GIT} -C {WORK} rev-list --count {range})\n\
             if [ \"$n\" = 0 ]; then : > /tmp/out.bundle; \
             else {GIT} -C {WORK} bundle create -q /tmp/out.bundle {range}; fi"
        );
        let bytes = chore
            .run(&script, &[], Some(("out.bundle", cap)))
            .await?
            .ok_or_else(|| SandboxError::Backend("no bundle".into()))?;
        Ok((!bytes.is_empty()).then_some(bytes))
    }

    async fn update(&self, at: &Path, bundle: Vec<u8>, branch: &str) -> Result<(), SandboxError> {
        let inner = self.inner()?;
        let image = inner.image().await?.clone();
        let volume = inner
            .at_volume(at)
            .ok_or_else(|| SandboxError::NotOnEngine(at.to_path_buf()))?;
        let user = inner.owner_ids();
        let chore = inner.chore(&image, &volume, &user);
        super::volumes::update_from_bundle(&chore, Path::new(WORK), &bundle, branch).await
    }

    async fn remove(&self, at: &Path) -> Result<(), SandboxError> {
        let inner = self.inner()?;
        let taken = {
            let mut placed = lock(&inner.volumes.placed);
            let i = placed.iter().position(|(p, _)| p == at);
            i.map(|i| placed.remove(i).1)
        };
        match taken {
            Some(v) => v.remove(&inner.engine).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::sandbox::SandboxPolicy;
    use bollard::models::{HostConfig, Mount as DockerMount};

    fn bind(source: &str, target: &str) -> DockerMount {
        DockerMount {
            source: Some(source.into()),
            target: Some(target.into()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        }
    }

    fn volumes(at: &[(&str, &str)]) -> Volumes {
        let v = Volumes::default();
        for (path, name) in at {
            lock(&v.placed).push((
                PathBuf::from(path),
                RunVolume {
                    name: (*name).into(),
                },
            ));
        }
        v
    }

    #[test]
    fn bind_mounts_become_the_runs_volumes_and_any_other_path_is_refused() {
        let v = volumes(&[
            ("/w", "fbx-r-workspace"),
            ("/w/runs/r/bench", "fbx-r-bench"),
        ]);
        let mut body = ContainerCreateBody {
            host_config: Some(HostConfig {
                mounts: Some(vec![
                    bind("/w", "/w"),
                    bind("/w/runs/r/bench", "/w/runs/r/bench"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        v.translate(&mut body).unwrap();
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert!(mounts.iter().all(|m| m.typ == Some(MountType::VOLUME)));
        assert_eq!(mounts[0].source.as_deref(), Some("fbx-r-workspace"));
        assert_eq!(mounts[1].source.as_deref(), Some("fbx-r-bench"));
        assert_eq!(mounts[1].read_only, Some(true));

        let mut other = ContainerCreateBody {
            host_config: Some(HostConfig {
                mounts: Some(vec![bind("/w", "/w"), bind("/home/me/.ssh", "/w/.ssh")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            v.translate(&mut other),
            Err(SandboxError::NotOnEngine(p)) if p == Path::new("/home/me/.ssh")
        ));
        let mut legacy = ContainerCreateBody {
            host_config: Some(HostConfig {
                binds: Some(vec!["/etc:/etc".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(v.translate(&mut legacy).is_err());
    }

    #[test]
    fn a_remote_box_resolves_nothing_here_and_refuses_shadows() {
        let spec = AgentBox {
            agent: "judge-1".into(),
            role: Role::Judge,
            mounts: vec![
                Mount::same("/nowhere/w", true),
                Mount::same("/nowhere/w", false),
            ],
            masked: vec!["/nowhere/w/runs".into(), "/elsewhere".into()],
            workdir: "/nowhere/w".into(),
            policy: SandboxPolicy::writer(),
        };
        let b = remote_box(&spec).unwrap();
        assert_eq!(b.mounts, vec![Mount::same("/nowhere/w", true)]);
        assert_eq!(b.masked, Vec::<PathBuf>::new());
        // A shadow keeps its source: the volume made at that path, shown here.
        let shadow = AgentBox {
            mounts: vec![Mount::shadow("/runs/probe-1", "/nowhere/w", true)],
            ..spec.clone()
        };
        assert_eq!(
            remote_box(&shadow).unwrap().mounts,
            vec![Mount::shadow("/runs/probe-1", "/nowhere/w", true)]
        );
        let relative = AgentBox {
            mounts: vec![Mount::shadow("objects", "/nowhere/w", false)],
            ..spec.clone()
        };
        assert!(matches!(
            remote_box(&relative),
            Err(SandboxError::NotOnEngine(_))
        ));
        let outside = AgentBox {
            workdir: "/tmp".into(),
            ..spec
        };
        assert!(matches!(
            remote_box(&outside),
            Err(SandboxError::OutsideMounts(_))
        ));
    }
}
