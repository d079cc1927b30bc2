//! Making one agent's container in the run's pod, step by step: its body (image, mounts, the
//! uid its policy names, flowerbox's seccomp profile), the exec service's binary mounted
//! unless an agent could write its copy, the Landlock domain a writing agent is entered in, its
//! passwd and group (mounted read-only from beside that copy, else uploaded), the start behind
//! the fence, the check that a write scope's mount is what the host pinned, and the wrapping
//! every command of the agent goes through.
//!
//! Why passwd is a mount where it can be (issue 32): an upload into a container not yet
//! started makes the engine mount its root file system, unpack the archive through a helper
//! process and unmount it again, before the start mounts it once more. With 8 workers at
//! once on a 2-core machine (fuse-overlayfs) the uploads cost ~0.3 s of the run's wall clock
//! (`docker events`: every start waited for its upload); two read-only bind mounts of files
//! beside the exec service's private copy cost the engine next to nothing. A read-only
//! policy's container (its own uids, an inspector's directory) keeps its upload.

use bollard::body_full;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::UploadToContainerOptions;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::container::{canonical_box, container_name, etc_archive, patch_passwd, Identity};
use super::exec::{service_argv, Birth, Container};
use super::pod::Pod;
use super::readonly::ReadOnly;
use super::{error, kind, lock, seccomp, service, Inner, Tier};
use crate::sandbox::service::domain::Need;
use crate::sandbox::{AgentBox, SandboxError, SeccompProfile};

/// What the container was made with: its id, the service binary mounted (none: commands run
/// as one Docker exec each) and why there is none, when one was wanted, and whether its
/// passwd and group are mounted (else they are uploaded before it starts).
struct Made {
    id: String,
    binary: Option<Arc<service::ServiceBinary>>,
    no_service: Option<String>,
    /// The host's socket mounted for the service's frames (a local engine's).
    socket: Option<service::HostSocket>,
    /// The container's main process starts the service beside it (attached before the start).
    main: bool,
    etc_mounted: bool,
}

/// An agent's `/etc/passwd` and `/etc/group` texts.
type EtcFiles = (String, String);

impl Inner {
    /// Creates and starts a container for `spec` in the pod.
    pub(super) async fn new_container(
        &self,
        spec: &AgentBox,
    ) -> Result<Arc<Container>, SandboxError> {
        let spec = match self.opts.remote {
            true => super::remote::remote_box(spec)?,
            false => canonical_box(spec)?,
        };
        let early = lock(&self.early_pod).take();
        if let Some(Ok(Err(e))) = match early {
            Some(h) => Some(h.await),
            None => None,
        } {
            return Err(e);
        }
        let pod = self.pod().await?;
        let image = self.image().await?.clone();
        let mounts: Vec<PathBuf> = spec.mounts.iter().map(|m| m.inside.clone()).collect();
        let identity = self.identity(&mounts);
        // A read-only policy runs as a uid of its own (see `readonly`).
        let read_only = ReadOnly::plan(&spec.policy, identity.ids, &mounts, &pod.facts, &image)?;
        let name = container_name(&self.opts.run_id, &spec.agent);
        let body = self.agent_body(&spec, &pod, &image, &identity, read_only.as_ref())?;
        let scoped = spec.mounts.iter().any(|m| m.pin.is_some());
        let own_domain = spec.policy.own_domain;
        // A read-only policy's files are its plan's (uploaded whole, see `readonly`).
        let etc = read_only
            .is_none()
            .then(|| patch_passwd(&pod.facts, &identity));
        let domain = own_domain.then_some(match scoped {
            true => Need::Required,
            false => Need::BestEffort,
        });
        // The first service starts with the container, unless it runs behind an exec prefix
        // (a read-only policy's) or on Podman.
        // Only where every writing agent's processes have a Landlock domain: until `sh`
        // `exec`s `sleep` (a millisecond) it holds the container's stdin, where the socket's
        // token comes, and a process of the uid in no domain could open it through `/proc`.
        let main = (read_only.is_none()
            && !self.engine.kind().is_podman()
            && crate::sandbox::service::domain::available())
        .then(|| service_argv(domain));
        let made = self
            .create_agent_container(&spec, &name, body, own_domain && scoped, etc.as_ref(), main)
            .await?;
        let upload = match (&read_only, &etc) {
            (Some(r), _) => Some(r.archive(&pod.facts, &identity)?),
            (None, Some((passwd, group))) if !made.etc_mounted => Some(etc_archive(passwd, group)?),
            (None, _) => None,
        };
        let first = self
            .start_agent(&made.id, &name, &spec, &pod, upload, made.main)
            .await?;
        // Watched from its start; one that went at once (its pod went meanwhile) is gone for
        // its first command, which makes it again.
        let life = self.watch.member(&made.id, &spec.agent, &pod.life);
        self.watch.confirm(&life).await;
        let user = format!("{}:{}", identity.ids.uid, identity.ids.gid);
        let birth = Birth {
            life,
            pod: pod.life.clone(),
            watch: self.watch.clone(),
        };
        let container = Container::new(
            self.docker().clone(),
            made.id,
            name,
            image,
            user,
            pod.facts.has_bash,
            spec,
            birth,
        );
        let container = match &read_only {
            Some(r) => container.entered_as(r.exec_user(), r.exec_prefix(), r.shell.ids),
            None => container,
        };
        let container = match domain.filter(|_| made.binary.is_some()) {
            None => container,
            Some(need) => container.in_domain(need),
        };
        let container = Arc::new(match made.binary {
            Some(_) => container.with_service(made.socket, first),
            None => {
                // A service was wanted and cannot be had: said once per run.
                if let Some(why) = &made.no_service {
                    self.watch
                        .slow_exec(&container.agent_box().agent, why.clone());
                }
                container.without_service(made.no_service)
            }
        });
        container.warm_up();
        Ok(container)
    }

    /// The container's body: the run's image and environment, `spec`'s mounts in the pod, the
    /// uid (a read-only policy's own, hardened), and the seccomp profile its policy names
    /// (io_uring refused for all).
    fn agent_body(
        &self,
        spec: &AgentBox,
        pod: &Pod,
        image: &str,
        identity: &Identity,
        read_only: Option<&ReadOnly>,
    ) -> Result<ContainerCreateBody, SandboxError> {
        let inside = read_only.map_or(identity, |r| &r.shell);
        let mut run = self.run_spec(image, inside.clone());
        run.extra_env = pod.env.clone();
        let mut body = run.agent_body(spec, &pod.id, &pod.name);
        self.engine.kind().shape_member(&mut body, &pod.id);
        let (profile, file) = match spec.policy.seccomp {
            SeccompProfile::ReadOnly => (seccomp::read_only_profile(), &self.seccomp_file),
            SeccompProfile::Writer => (seccomp::writer_profile(), &self.writer_seccomp_file),
        };
        let seccomp = kind::seccomp_option(self.engine.kind(), profile, file)?;
        match read_only {
            Some(r) => r.harden(&mut body, seccomp),
            None => {
                let hc = body.host_config.get_or_insert_with(Default::default);
                hc.security_opt.get_or_insert_with(Vec::new).push(seccomp);
            }
        }
        // Last, over everything added: on a remote run every mount is one of its volumes.
        if self.opts.remote {
            self.volumes.translate(&mut body)?;
        }
        Ok(body)
    }

    /// Creates the container, with the exec service's binary mounted unless an agent could
    /// write where its copy lies or the engine refuses the mount (then without, for the rest
    /// of the run). A writing agent's processes live in a Landlock domain of their own,
    /// entered through that binary; a scoped worker's scope depends on it (DESIGN.md threat
    /// model 3), so with `needs_domain` and no binary it is refused, never run unchecked.
    /// With the binary, `etc` (passwd and group) is mounted read-only from files beside its
    /// copy, as private as it ([`mount_etc`]); without, the caller uploads it. With the
    /// binary and the host's socket for its frames, the container's main process starts the
    /// service `main` (its argv) beside `sleep` ([`service::start_with_main`]): no exec.
    async fn create_agent_container(
        &self,
        spec: &AgentBox,
        name: &str,
        mut body: ContainerCreateBody,
        needs_domain: bool,
        etc: Option<&EtcFiles>,
        main: Option<Vec<String>>,
    ) -> Result<Made, SandboxError> {
        let mut binary = match self.service_refused.load(Ordering::SeqCst) {
            true => None,
            false => self.service_binary().await,
        };
        if self.opts.remote {
            return self.create_remote(name, body, binary).await;
        }
        let mut no_service = lock(&self.no_service).clone();
        if let Some(m) = binary
            .as_ref()
            .and_then(|b| spec.mounts.iter().find(|m| b.inside(&m.host)))
        {
            no_service = Some(format!(
                "它的程序副本在 agent 能写的 {} 里面,不挂进容器",
                m.host.display()
            ));
            binary = None;
        }
        if needs_domain && binary.is_none() {
            return Err(SandboxError::Container(format!(
                "{}:有写入范围的 worker 要在自己的 Landlock 域里跑,域要靠 flowerbox 的程序进入,\
                 可这次运行挂不了它({})",
                spec.agent,
                no_service.as_deref().unwrap_or("没有 exec service")
            )));
        }
        let Some(b) = &binary else {
            let id = self.create(name, body, Tier::Agent).await?;
            return Ok(Made {
                id,
                binary,
                no_service,
                socket: None,
                main: false,
                etc_mounted: false,
            });
        };
        let plain = body.clone();
        service::mount(&mut body, b.path());
        // The service's frames over a socket of the host's, past the engine's relay; without
        // one, over the attach.
        let bound = match self.opts.frames_over_socket() {
            true => Some(service::HostSocket::bind(b.dir())),
            false => None,
        };
        let socket = match bound.transpose() {
            Ok(Some(s)) => {
                service::mount_socket(&mut body, s.path());
                Some(s)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::info!(error = %e, "exec service: no socket, its frames go over the attach");
                None
            }
        };
        // Not on Podman: for a uid its image lacks, Podman puts a passwd file of its own over
        // /etc/passwd, which hides the mounted one (found by the Podman stage of `.ci/run`);
        // there the files are uploaded as before.
        let etc_mounted = match etc {
            Some(files) if !self.engine.kind().is_podman() => {
                mount_etc(&mut body, b.clone(), files.clone()).await
            }
            _ => false,
        };
        // Without the socket the service's frames, and so its death, would be told only by
        // the attach, whose stream ends only with the container: an exec starts it then.
        let main = main.filter(|_| socket.is_some());
        let beside_main = main.is_some();
        if let Some(argv) = main {
            service::start_with_main(&mut body, argv);
        }
        match self.create(name, body, Tier::Agent).await {
            Ok(id) => Ok(Made {
                id,
                binary,
                no_service,
                socket,
                main: beside_main,
                etc_mounted,
            }),
            // The engine cannot see the copy (flowerbox itself in a container, a remote
            // engine): no service for this run.
            Err(e) => {
                tracing::warn!(error = %e, "no exec service: the engine refused its mount");
                let why = format!("引擎不让挂它的程序:{e}");
                *lock(&self.no_service) = Some(why.clone());
                self.service_refused.store(true, Ordering::SeqCst);
                if needs_domain {
                    return Err(SandboxError::Container(format!(
                        "{}:有写入范围的 worker 要在自己的 Landlock 域里跑,\
                         可引擎不让挂 flowerbox 的程序:{e}",
                        spec.agent
                    )));
                }
                let id = self.create(name, plain, Tier::Agent).await?;
                Ok(Made {
                    id,
                    binary: None,
                    no_service: Some(why),
                    socket: None,
                    main: false,
                    etc_mounted: false,
                })
            }
        }
    }

    /// A remote run's container (`DockerOptions::remote`): its body's mounts are the run's
    /// volumes only, and the exec service's binary goes in through the archive API, owned by
    /// root (no agent can change it), before the container starts.
    async fn create_remote(
        &self,
        name: &str,
        body: ContainerCreateBody,
        binary: Option<Arc<service::ServiceBinary>>,
    ) -> Result<Made, SandboxError> {
        let id = self.create(name, body, Tier::Agent).await?;
        let Some(b) = binary else {
            let no_service = lock(&self.no_service).clone();
            return Ok(Made {
                id,
                binary: None,
                no_service,
                socket: None,
                main: false,
                etc_mounted: false,
            });
        };
        let source = service::ServiceSource::Path(b.path().to_path_buf());
        if let Err(e) = super::remote_files::install_service(&self.engine, &id, &source).await {
            self.remove(&id).await;
            return Err(e);
        }
        Ok(Made {
            id,
            binary: Some(b),
            no_service: None,
            socket: None,
            main: false,
            etc_mounted: false,
        })
    }

    /// Uploads `upload` (passwd and group where they are not mounted, a read-only policy's
    /// files), starts the container once the pod's fence is in, and checks that what the
    /// engine mounted for a pinned source (a write scope) is what the host opened, before
    /// anything runs in it; a container that fails the check goes. With `main` (its main
    /// process starts the exec service), the host attaches to it first: the service's
    /// streams, not yet greeted (`None` when the engine refused the attach: the service then
    /// sits idle, unread, and the first start is an exec's). The service runs no command
    /// before it is asked, which is after the check; a container that fails it goes with its
    /// attach.
    async fn start_agent(
        &self,
        id: &str,
        name: &str,
        spec: &AgentBox,
        pod: &Pod,
        upload: Option<Vec<u8>>,
        main: bool,
    ) -> Result<Option<service::client::Attached>, SandboxError> {
        if let Some(archive) = upload {
            self.docker()
                .upload_to_container(
                    id,
                    Some(UploadToContainerOptions {
                        path: "/".into(),
                        ..Default::default()
                    }),
                    body_full(archive.into()),
                )
                .await
                .map_err(error::container(format!("writing passwd into {name}")))?;
        }
        // Never a process in the pod's namespace before its rules are in.
        pod.fenced.wait().await?;
        let first = match main {
            true => match service::client::attach_main(self.docker(), id).await {
                Ok(attached) => Some(attached),
                Err(e) => {
                    tracing::warn!(%name, error = %e, "exec service: no attach to the container's own");
                    None
                }
            },
            false => None,
        };
        self.docker()
            .start_container(id, None)
            .await
            .map_err(error::container(format!("starting {name}")))?;
        if spec.mounts.iter().any(|m| m.pin.is_some()) {
            if let Err(e) = self.verify_mounts(id, spec).await {
                drop(first);
                self.remove(id).await;
                return Err(e);
            }
        }
        Ok(first)
    }
}

/// Where an agent's passwd and group are mounted.
const ETC_TARGETS: [&str; 2] = ["/etc/passwd", "/etc/group"];

/// Adds read-only bind mounts of `files` (passwd, group), written beside the exec service's
/// private copy `binary` (mode 0700 directory, never inside an agent's mount: the caller
/// checked), at [`ETC_TARGETS`]. `false` (nothing added: the caller uploads them) when they
/// could not be written.
async fn mount_etc(
    body: &mut ContainerCreateBody,
    binary: Arc<service::ServiceBinary>,
    (passwd, group): EtcFiles,
) -> bool {
    let written = tokio::task::spawn_blocking(move || {
        Ok::<_, SandboxError>([
            binary.file_beside("passwd", &passwd)?,
            binary.file_beside("group", &group)?,
        ])
    })
    .await
    .map_err(|e| SandboxError::Backend(e.to_string()))
    .and_then(|w| w);
    let sources = match written {
        Ok(sources) => sources,
        Err(e) => {
            tracing::warn!(error = %e, "passwd uploaded: writing it beside the service failed");
            return false;
        }
    };
    add_etc_mounts(body, &sources);
    true
}

/// The read-only bind mounts of `sources` (passwd, group) at [`ETC_TARGETS`].
fn add_etc_mounts(body: &mut ContainerCreateBody, sources: &[PathBuf; 2]) {
    let mounts = body
        .host_config
        .get_or_insert_with(Default::default)
        .mounts
        .get_or_insert_with(Vec::new);
    for (source, target) in sources.iter().zip(ETC_TARGETS) {
        mounts.push(bollard::models::Mount {
            target: Some(target.into()),
            source: Some(source.to_string_lossy().into_owned()),
            typ: Some(bollard::models::MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_and_group_are_mounted_read_only_at_their_places() {
        let mut body = ContainerCreateBody::default();
        add_etc_mounts(
            &mut body,
            &[PathBuf::from("/p/passwd-1"), PathBuf::from("/p/group-2")],
        );
        let mounts = body.host_config.unwrap().mounts.unwrap();
        let got: Vec<_> = mounts
            .iter()
            .map(|m| {
                (
                    m.source.as_deref().unwrap(),
                    m.target.as_deref().unwrap(),
                    m.read_only,
                    m.typ,
                )
            })
            .collect();
        let bind = Some(bollard::models::MountType::BIND);
        assert_eq!(
            got,
            [
                ("/p/passwd-1", "/etc/passwd", Some(true), bind),
                ("/p/group-2", "/etc/group", Some(true), bind)
            ]
        );
    }
}
