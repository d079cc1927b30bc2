//! Which engine answers the Docker Engine API — Docker itself or Podman's compatible service
//! (`podman system service`) — detected once per connection from `/version` (and `/info` for
//! Podman's rootless mode), and every place the two differ, here rather than scattered
//! (issue 18 "Podman").
//!
//! The differences flowerbox handles (each also a line of `flowerbox doctor`):
//! - **Seccomp profiles.** Docker takes the profile's JSON itself in `HostConfig.SecurityOpt`
//!   (`seccomp={…}`, the Docker CLI inlines the file); Podman's compat API opens the value as a
//!   path. flowerbox gives Podman a path to a sealed memfd of its own process
//!   (`/proc/<pid>/fd/<n>`, see [`SeccompFile`]): content nobody can change and no file any
//!   container can reach — never a file in a directory.
//! - **Rootless Podman** maps the container's users through a user namespace: the pod gets
//!   `UsernsMode` `keep-id` (the invoking user's uid and gid are the same inside, so files in
//!   bind mounts belong to the user) and every agent container joins the pod's user namespace
//!   (`container:<pod>`) together with its PID and network namespaces.

use bollard::models::{
    ContainerCreateBody, ResourcesUlimits, SystemInfo, SystemInfoCgroupVersionEnum, SystemVersion,
};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sandbox::SandboxError;

/// The engine behind the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineKind {
    /// Docker Engine (or anything that does not say it is Podman).
    Docker,
    /// Podman's Docker-compatible service.
    Podman {
        /// Podman's version, e.g. `4.3.1`.
        version: String,
        /// Rootless: the service runs as an ordinary user, containers in a user namespace.
        rootless: bool,
        /// The host has cgroup v1 (`/info`'s `CgroupVersion`), where rootless Podman ignores
        /// memory and pids limits.
        cgroup_v1: bool,
    },
}

/// The name of Podman's component in `/version`'s `Components`.
const PODMAN_COMPONENT: &str = "Podman Engine";

impl EngineKind {
    /// Reads the kind from `/version` (Podman names itself as a component, `Podman Engine`)
    /// and, for Podman, from `/info` and `socket_owner` (the uid owning the endpoint's Unix
    /// socket): rootless when `SecurityOptions` says `name=rootless` (newer Podman) or the
    /// socket belongs to an ordinary user (Podman 4.3 does not say it; a rootless service can
    /// only make sockets its own user owns); cgroup v1 from `CgroupVersion`.
    pub fn detect(
        version: &SystemVersion,
        info: Option<&SystemInfo>,
        socket_owner: Option<u32>,
    ) -> EngineKind {
        let podman = version
            .components
            .iter()
            .flatten()
            .find(|c| c.name == PODMAN_COMPONENT);
        let Some(c) = podman else {
            return EngineKind::Docker;
        };
        let says_rootless = info
            .and_then(|i| i.security_options.as_ref())
            .is_some_and(|opts| opts.iter().any(|o| is_rootless_option(o)));
        EngineKind::Podman {
            version: c.version.clone(),
            rootless: says_rootless || socket_owner.is_some_and(|uid| uid != 0),
            cgroup_v1: info.and_then(|i| i.cgroup_version.as_ref())
                == Some(&SystemInfoCgroupVersionEnum::_1),
        }
    }

    /// Why flowerbox will not run on this engine, when it will not: rootless Podman on
    /// cgroup v1 ignores every container's memory and pids limits (Podman only warns), which
    /// would be a weaker sandbox than asked for.
    pub fn refusal(&self) -> Option<String> {
        match self {
            EngineKind::Podman {
                rootless: true,
                cgroup_v1: true,
                ..
            } => Some(format!(
                "{} 在 cgroup v1 的机器上不限制容器的内存和进程数(Podman 只警告、照样起容器),\
                 flowerbox 不在没有限制的容器里跑 agent。用 cgroup v2 的机器,或 rootful Podman \
                 / Docker(把 DOCKER_HOST 设成它的 socket),或者用 `--sandbox host` 不开容器跑。",
                self.label()
            )),
            _ => None,
        }
    }

    /// Whether this is Podman.
    pub fn is_podman(&self) -> bool {
        matches!(self, EngineKind::Podman { .. })
    }

    /// Rootless Podman (its containers' users live in a user namespace).
    pub fn is_rootless_podman(&self) -> bool {
        matches!(self, EngineKind::Podman { rootless: true, .. })
    }

    /// How the engine names itself in messages: `Docker`, `Podman 4.3.1 (rootless)`.
    pub fn label(&self) -> String {
        match self {
            EngineKind::Docker => "Docker".into(),
            EngineKind::Podman {
                version, rootless, ..
            } => format!(
                "Podman {version}({})",
                if *rootless { "rootless" } else { "rootful" }
            ),
        }
    }

    /// The differences from Docker flowerbox handles for this engine, one line each (the
    /// doctor's), empty for Docker.
    pub fn differences(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.is_podman() {
            lines
                .push("给了 ulimit 就自己加 nproc:判定者的容器把 nproc 设成进程数上限".to_string());
            lines.push(
                "tmpfs 默认把底下的文件拷进去:遮住运行目录的 tmpfs 加 notmpcopyup,保持是空的"
                    .to_string(),
            );
            lines.push(
                "tmpfs 不认 uid=/gid=:agent 的 HOME(tmpfs)是 1777(带粘滞位)而不是 0700 属主"
                    .to_string(),
            );
            lines.push(
                "seccomp 配置按路径读:只读角色的配置放在 flowerbox 自己封死的 memfd 里 \
                 (/proc/<pid>/fd/<n>),容器碰不到"
                    .to_string(),
            );
        }
        if self.is_rootless_podman() {
            lines.push(
                "rootless:pod 用 keep-id 用户命名空间,你的 uid/gid 在容器里不变, \
                 代理容器加入 pod 的用户、PID 和网络命名空间"
                    .to_string(),
            );
        }
        lines
    }

    /// The options of an agent's HOME tmpfs owned by `ids`: Docker sets the owner (`uid=`,
    /// `gid=`, mode 0700); Podman 4.3 refuses `uid=`/`gid=` ("unknown mount option"), so there
    /// HOME is mode 1777 (sticky): in a container of one agent, whose only other process is
    /// a read-only role's inspector, and which no other container can reach.
    pub(crate) fn home_tmpfs(&self, ids: super::UserIds) -> String {
        match self {
            EngineKind::Docker => format!(
                "rw,nosuid,nodev,size=1g,mode=0700,uid={},gid={}",
                ids.uid, ids.gid
            ),
            EngineKind::Podman { .. } => "rw,nosuid,nodev,size=1g,mode=1777,notmpcopyup".into(),
        }
    }

    /// The options of the empty read-only tmpfs over a masked directory (the run directory).
    /// Podman copies what the directory holds into a new tmpfs unless told `notmpcopyup`
    /// (Docker never does and does not know the option): without it the mask would show the
    /// records it hides.
    pub(crate) fn mask_tmpfs(&self) -> String {
        let docker = "ro,nosuid,nodev,noexec,size=64k";
        match self {
            EngineKind::Docker => docker.into(),
            EngineKind::Podman { .. } => format!("{docker},notmpcopyup"),
        }
    }

    /// Limits a judge's container needs besides `nofile` on this engine. Podman, given any
    /// `ulimit`, adds an `nproc` of its own above what its service may set, and the container
    /// fails to start ("error setting rlimit type 6"); so there `nproc` is set to the pids
    /// limit (lowering a limit is always allowed).
    pub(crate) fn extra_judge_ulimits(&self, limits: &super::Limits) -> Vec<ResourcesUlimits> {
        match self {
            EngineKind::Docker => Vec::new(),
            EngineKind::Podman { .. } => vec![ResourcesUlimits {
                name: Some("nproc".into()),
                soft: Some(limits.pids),
                hard: Some(limits.pids),
            }],
        }
    }

    /// Whether teardown removes the run's network while its containers die: the containers
    /// on it are disconnected first, then it goes (Docker removes a network as soon as no
    /// endpoint is left on it, and a network's removal costs about as much as a pod's). Podman
    /// keeps the order it was tested with: its networks go after every container.
    pub(crate) fn removes_networks_early(&self) -> bool {
        !self.is_podman()
    }

    /// Adjusts the pod container's body for this engine (its user namespace).
    pub(crate) fn shape_pod(&self, body: &mut ContainerCreateBody) {
        if let Some(mode) = self.pod_userns() {
            body.host_config
                .get_or_insert_with(Default::default)
                .userns_mode = Some(mode);
        }
    }

    /// Adjusts the body of a container joining the pod `pod_id` (agents, the fence) for this
    /// engine (the pod's user namespace).
    pub(crate) fn shape_member(&self, body: &mut ContainerCreateBody, pod_id: &str) {
        if let Some(mode) = self.member_userns(pod_id) {
            let hc = body.host_config.get_or_insert_with(Default::default);
            hc.userns_mode = Some(mode);
            // A rootless service gets the cpu controller only where systemd delegates it;
            // asked for a quota without it, the runtime refuses the container.
            hc.nano_cpus = None;
        }
    }

    /// `UsernsMode` of the pod: `keep-id` on rootless Podman, the engine's default otherwise.
    pub(crate) fn pod_userns(&self) -> Option<String> {
        self.is_rootless_podman().then(|| "keep-id".to_string())
    }

    /// `UsernsMode` of a container joining the pod `pod_id`: the pod's user namespace on
    /// rootless Podman, the engine's default otherwise.
    pub(crate) fn member_userns(&self, pod_id: &str) -> Option<String> {
        self.is_rootless_podman()
            .then(|| format!("container:{pod_id}"))
    }
}

/// `name=rootless` as one of `/info`'s comma-separated `SecurityOptions` entries.
fn is_rootless_option(option: &str) -> bool {
    option.split(',').any(|kv| kv.trim() == "name=rootless")
}

/// A seccomp profile held in a sealed memfd of this process, for an engine that reads
/// `seccomp=` as a path (Podman): the path is `/proc/<pid>/fd/<n>`, its content can no longer
/// change (write, grow and shrink sealed), and it lives in no directory a container mounts.
#[derive(Debug)]
pub struct SeccompFile {
    fd: OwnedFd,
}

impl SeccompFile {
    /// Writes `profile` into a new memfd and seals it.
    pub fn new(profile: &str) -> Result<SeccompFile, SandboxError> {
        use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
        let io = |e: rustix::io::Errno| SandboxError::Io(e.into());
        let fd = memfd_create(
            "flowerbox-seccomp",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(io)?;
        let mut rest = profile.as_bytes();
        while !rest.is_empty() {
            let n = rustix::io::write(&fd, rest).map_err(io)?;
            rest = &rest[n..];
        }
        fcntl_add_seals(
            &fd,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(io)?;
        Ok(SeccompFile { fd })
    }

    /// The path the engine opens: `/proc/<this pid>/fd/<n>`.
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }
}

/// The `SecurityOpt` entry that gives `kind` a seccomp profile (`profile`: JSON text, see
/// [`super::seccomp`]): the JSON itself for Docker, the path of `file` (made on first use,
/// then shared by every container of the run that gets this profile) for Podman.
#[allow(clippy::expect_used, reason = "set just above")]
pub(crate) fn seccomp_option(
    kind: &EngineKind,
    profile: &str,
    file: &std::sync::OnceLock<SeccompFile>,
) -> Result<String, SandboxError> {
    if !kind.is_podman() {
        return Ok(format!("seccomp={profile}"));
    }
    if file.get().is_none() {
        let made = SeccompFile::new(profile)?;
        let _ = file.set(made);
    }
    let file = file.get().expect("set above");
    Ok(format!("seccomp={}", file.path()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::SystemVersionComponents as ComponentVersion;

    fn version(components: &[&str]) -> SystemVersion {
        SystemVersion {
            components: Some(
                components
                    .iter()
                    .map(|n| ComponentVersion {
                        name: n.to_string(),
                        version: "4.3.1".into(),
                        details: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn podman_is_named_by_its_component() {
        let docker = version(&["Engine", "containerd", "runc"]);
        // Docker, also behind a socket an ordinary user owns (rootless Docker).
        assert_eq!(
            EngineKind::detect(&docker, None, Some(1000)),
            EngineKind::Docker
        );
        assert_eq!(
            EngineKind::detect(&SystemVersion::default(), None, None),
            EngineKind::Docker
        );
        let podman = version(&["Podman Engine", "Conmon"]);
        let rootful = SystemInfo {
            security_options: Some(vec!["name=seccomp,profile=default".into()]),
            cgroup_version: Some(SystemInfoCgroupVersionEnum::_1),
            ..Default::default()
        };
        let kind = EngineKind::detect(&podman, Some(&rootful), Some(0));
        assert_eq!(
            kind,
            EngineKind::Podman {
                version: "4.3.1".into(),
                rootless: false,
                cgroup_v1: true,
            }
        );
        assert!(kind.refusal().is_none());
        // Podman 4.3 does not say rootless; its socket's owner does.
        let by_owner = EngineKind::detect(&podman, Some(&rootful), Some(1001));
        assert!(by_owner.is_rootless_podman());
        // Rootless on cgroup v1: limits would be ignored, so refused, naming why.
        let refusal = by_owner.refusal().unwrap();
        assert!(refusal.contains("Podman 4.3.1(rootless)") && refusal.contains("cgroup v1"));
        assert!(refusal.contains("DOCKER_HOST") && refusal.contains("--sandbox host"));
        assert_eq!(kind.differences().len(), 4);
        assert_eq!(
            kind.extra_judge_ulimits(&Default::default())[0].hard,
            Some(2048)
        );
        assert!(EngineKind::Docker
            .extra_judge_ulimits(&Default::default())
            .is_empty());
        assert!(kind.pod_userns().is_none() && kind.member_userns("p").is_none());
        let rootless = SystemInfo {
            security_options: Some(vec![
                "name=seccomp,profile=default".into(),
                "name=rootless".into(),
            ]),
            cgroup_version: Some(SystemInfoCgroupVersionEnum::_2),
            ..Default::default()
        };
        let kind = EngineKind::detect(&podman, Some(&rootless), None);
        assert!(kind.refusal().is_none());
        assert!(kind.is_rootless_podman());
        assert_eq!(kind.label(), "Podman 4.3.1(rootless)");
        assert_eq!(kind.pod_userns().as_deref(), Some("keep-id"));
        assert_eq!(kind.member_userns("p1").as_deref(), Some("container:p1"));
        assert_eq!(kind.differences().len(), 5);
        assert!(EngineKind::Docker.differences().is_empty());
    }

    #[test]
    fn docker_gets_the_profile_inline_podman_a_sealed_file() {
        let profile = super::super::seccomp::read_only_profile();
        let file = std::sync::OnceLock::new();
        let inline = seccomp_option(&EngineKind::Docker, profile, &file).unwrap();
        assert_eq!(inline, format!("seccomp={profile}"));
        assert!(file.get().is_none());
        let podman = EngineKind::Podman {
            version: "4".into(),
            rootless: false,
            cgroup_v1: false,
        };
        let opt = seccomp_option(&podman, profile, &file).unwrap();
        let path = opt.strip_prefix("seccomp=").unwrap();
        assert!(path.starts_with(&format!("/proc/{}/fd/", std::process::id())));
        assert_eq!(std::fs::read_to_string(path).unwrap(), profile);
        // Sealed: opened for writing, the content still cannot change.
        let mut w = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        assert!(std::io::Write::write_all(&mut w, b"x").is_err());
        assert_eq!(std::fs::read_to_string(path).unwrap(), profile);
        // The same file serves every later container.
        assert_eq!(seccomp_option(&podman, profile, &file).unwrap(), opt);
    }
}
