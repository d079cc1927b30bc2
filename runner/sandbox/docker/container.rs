//! What a container looks like: the pod's infrastructure container and the agent containers
//! that join its PID and network namespaces (DESIGN.md "Pod", issue "Pod and containers").
//!
//! Every agent container runs as the invoking user's uid:gid (the read-only roles' as their
//! own, see [`super::readonly`]; the pod's processes as one no agent has, [`pod_ids`]) with a
//! tmpfs HOME, a passwd entry
//! (patched into the created container before it starts), git's `safe.directory` and no pruning
//! (`GIT_CONFIG_*`), all capabilities dropped, `no-new-privileges`, pids and memory limits, a
//! one-second stop, and labels for cleanup. Nothing from the host environment is copied in, so
//! no credential can reach a container.

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount as DockerMount, MountType, ResourcesUlimits,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use crate::sandbox::policy::{default_nano_cpus, Limits};

use super::kind::EngineKind;
use super::labels::{Owner, LABEL_AGENT, LABEL_POD, LABEL_ROLE, LABEL_RUN, LABEL_WORKSPACE};
use crate::sandbox::{AgentBox, SandboxError};

/// The engine's own read-only paths (Docker's and runc's default set, which a
/// `ReadonlyPaths` given replaces) and the network files the engine bind-mounts writable into
/// each container, shared by every container of the pod: read-only, no agent (not even a root
/// one) rewrites the names or the resolver another agent sees.
pub(crate) const READONLY_PATHS: [&str; 8] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/hostname",
];

/// Name prefix of every flowerbox container.
pub const NAME_PREFIX: &str = "fbx";

/// A numeric user and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl UserIds {
    /// The invoking (real) user of this process.
    pub fn current() -> UserIds {
        UserIds {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
        }
    }
}

/// The uid (and gid) of the pod's own processes (its init, `docker-init`, and `sleep`): one
/// no agent, no infrastructure process and no image's user has. Agents share the pod's PID
/// namespace; under their uid, a writing agent without a Landlock domain could `ptrace` the
/// pod's `sleep`, run code in it and so outlive its container (into later rounds, past the
/// run's end). Under another uid, and with no agent holding `CAP_SYS_PTRACE` or `CAP_KILL`,
/// the kernel refuses every agent (a root one too) `ptrace`, `/proc/<pid>/mem`, `root`, `cwd`,
/// `fd` and every signal to it. 65530: just below the read-only roles' 65531–65533 and the
/// proxy's `nobody` (65534), inside a rootless engine's default subordinate range (65536 ids).
pub(crate) const POD_UID: u32 = 65_530;

/// [`POD_UID`] when the workers' uid or gid lies in 65500..=65535 (where the read-only roles
/// then take 65501–65503): below that range, never the workers'.
pub(crate) const POD_UID_LOW: u32 = 65_499;

/// The pod's uid:gid for a run whose workers run as `workers`: [`POD_UID`], or
/// [`POD_UID_LOW`] when the workers' ids lie near it. Never the workers', never root, never a
/// read-only role's, the inspector's or the proxy's.
pub(crate) fn pod_ids(workers: UserIds) -> UserIds {
    let id = match super::readonly::near_the_top(workers) {
        true => POD_UID_LOW,
        false => POD_UID,
    };
    UserIds { uid: id, gid: id }
}

/// Who runs inside the containers and where its HOME is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub ids: UserIds,
    /// Login name for the passwd entry (the host's name for the uid, else `flowerbox`).
    pub name: String,
    /// HOME inside the container (a tmpfs).
    pub home: String,
}

impl Identity {
    /// The identity for `ids`, with a HOME that overlaps no mount.
    pub(crate) fn new(ids: UserIds, mounts: &[PathBuf]) -> Identity {
        let host_name = nix::unistd::User::from_uid(ids.uid.into())
            .ok()
            .flatten()
            .map(|u| u.name)
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                    && !n.is_empty()
            });
        let name = host_name.unwrap_or_else(|| "flowerbox".to_string());
        Identity::named(ids, &name, mounts)
    }

    /// The identity `name` for `ids`, with a HOME that overlaps no mount.
    pub(crate) fn named(ids: UserIds, name: &str, mounts: &[PathBuf]) -> Identity {
        let name = name.to_string();
        let mut home = if ids.uid == 0 {
            "/root".to_string()
        } else {
            format!("/home/{name}")
        };
        let overlaps = |h: &str| {
            mounts
                .iter()
                .any(|m| m.starts_with(h) || Path::new(h).starts_with(m))
        };
        if overlaps(&home) {
            home = format!("/tmp/.flowerbox-home-{}", ids.uid);
        }
        Identity { ids, name, home }
    }

    fn user(&self) -> String {
        format!("{}:{}", self.ids.uid, self.ids.gid)
    }
}

/// `/etc/passwd` and `/etc/group` of the image, read once per run from the pod container, and
/// whether the image has bash, `setpriv` and `lsof` (where).
#[derive(Debug, Clone, Default)]
pub(crate) struct ImageFacts {
    pub passwd: String,
    pub group: String,
    pub has_bash: bool,
    /// For the read-only roles' containers (see [`super::readonly`]).
    pub setpriv: Option<String>,
    /// For the read-only roles' inspector.
    pub lsof: Option<String>,
}

/// Adds the identity to passwd/group text unless its uid/gid is already there. A taken login
/// name is replaced by `u<uid>`.
pub(crate) fn patch_passwd(facts: &ImageFacts, id: &Identity) -> (String, String) {
    let field = |line: &str, i: usize| line.split(':').nth(i).map(str::to_string);
    let mut passwd = facts.passwd.clone();
    if !passwd.is_empty() && !passwd.ends_with('\n') {
        passwd.push('\n');
    }
    let uid = id.ids.uid.to_string();
    if !passwd
        .lines()
        .any(|l| field(l, 2).as_deref() == Some(uid.as_str()))
    {
        let name_taken = passwd
            .lines()
            .any(|l| field(l, 0).as_deref() == Some(id.name.as_str()));
        let name = if name_taken {
            format!("u{}", id.ids.uid)
        } else {
            id.name.clone()
        };
        passwd.push_str(&format!(
            "{name}:x:{}:{}:flowerbox agent:{}:/bin/bash\n",
            id.ids.uid, id.ids.gid, id.home
        ));
    }
    let mut group = facts.group.clone();
    if !group.is_empty() && !group.ends_with('\n') {
        group.push('\n');
    }
    let gid = id.ids.gid.to_string();
    if !group
        .lines()
        .any(|l| field(l, 2).as_deref() == Some(gid.as_str()))
    {
        group.push_str(&format!("g{gid}:x:{gid}:\n"));
    }
    (passwd, group)
}

/// A tar archive with `etc/passwd` and `etc/group` (root-owned, 0644) for upload at `/`.
pub(crate) fn etc_archive(passwd: &str, group: &str) -> Result<Vec<u8>, SandboxError> {
    tar_files(
        &[("etc/passwd", passwd), ("etc/group", group)],
        0o644,
        (0, 0),
    )
}

/// A tar archive of `(relative path, text)` files, each with `mode` and owner `(uid, gid)`, for
/// an upload into a container.
pub(crate) fn tar_files(
    files: &[(&str, &str)],
    mode: u32,
    (uid, gid): (u64, u64),
) -> Result<Vec<u8>, SandboxError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(mode);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_mtime(0);
        builder.append_data(&mut header, path, text.as_bytes())?;
    }
    Ok(builder.into_inner()?)
}

/// Docker container names allow `[a-zA-Z0-9][a-zA-Z0-9_.-]*`; everything else becomes `-`.
pub(crate) fn sanitize(part: &str) -> String {
    let s: String = part
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    if s.is_empty() {
        "x".into()
    } else {
        s
    }
}

/// `fbx-<run>-<what>-<4 hex>`: readable in `docker ps`, never colliding with a leftover.
pub(crate) fn container_name(run_id: &str, what: &str) -> String {
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    format!(
        "{NAME_PREFIX}-{}-{}-{suffix}",
        sanitize(run_id),
        sanitize(what)
    )
}

/// Everything every container of one run shares.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub run_id: String,
    pub workspace: PathBuf,
    pub image: String,
    pub identity: Identity,
    pub owner: Owner,
    pub limits: Limits,
    /// Added to every agent's environment (the run proxy's address in `--egress proxy`).
    pub extra_env: Vec<String>,
    /// The engine (where Podman differs: the HOME tmpfs's options).
    pub engine: EngineKind,
}

impl RunSpec {
    pub(crate) fn labels(&self, agent: &str, role: &str) -> HashMap<String, String> {
        let mut labels = HashMap::new();
        labels.insert(LABEL_RUN.into(), self.run_id.clone());
        labels.insert(LABEL_AGENT.into(), agent.into());
        labels.insert(LABEL_ROLE.into(), role.into());
        labels.insert(
            LABEL_WORKSPACE.into(),
            self.workspace.to_string_lossy().into_owned(),
        );
        self.owner.add_labels(&mut labels);
        labels
    }

    /// Environment of every container: identity, locale, and git settings that keep the host's
    /// worktree registrations safe. Nothing is taken from the host environment.
    fn env(&self) -> Vec<String> {
        let id = &self.identity;
        let git = [
            ("safe.directory", "*"),
            ("gc.auto", "0"),
            ("gc.worktreePruneExpire", "never"),
        ];
        let mut env = vec![
            format!("HOME={}", id.home),
            format!("USER={}", id.name),
            format!("LOGNAME={}", id.name),
            "LANG=C.UTF-8".into(),
            "PAGER=cat".into(),
            "GIT_PAGER=cat".into(),
            "GIT_TERMINAL_PROMPT=0".into(),
            // git's lowest-priority identity fallback: a worker can commit in a repository
            // that has no user.email of its own (the container sees no global config).
            format!("EMAIL={}@flowerbox.invalid", id.name),
            format!("GIT_CONFIG_COUNT={}", git.len()),
        ];
        for (i, (k, v)) in git.iter().enumerate() {
            env.push(format!("GIT_CONFIG_KEY_{i}={k}"));
            env.push(format!("GIT_CONFIG_VALUE_{i}={v}"));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    fn host_config(&self) -> HostConfig {
        HostConfig {
            memory: Some(self.limits.memory_bytes),
            memory_swap: Some(self.limits.memory_bytes),
            pids_limit: Some(self.limits.pids),
            nano_cpus: Some(self.limits.nano_cpus),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            ..Default::default()
        }
    }

    /// The pod: an init (the engine's `docker-init`) as PID 1 that reaps every zombie of the
    /// run, owning the PID and network namespaces; on the run's own network, or on none
    /// (`network` is a network name or `none`; see [`super::network`]). Its processes run
    /// under [`pod_ids`], a uid no agent has: no agent can trace, enter or signal them.
    pub(crate) fn pod_body(&self, network: &str) -> ContainerCreateBody {
        let pod = pod_ids(self.identity.ids);
        ContainerCreateBody {
            image: Some(self.image.clone()),
            entrypoint: Some(vec!["sleep".into(), "infinity".into()]),
            cmd: Some(vec![]),
            user: Some(format!("{}:{}", pod.uid, pod.gid)),
            env: Some(self.env()),
            labels: Some(self.labels("pod", "pod")),
            stop_timeout: Some(1),
            host_config: Some(HostConfig {
                init: Some(true),
                network_mode: Some(network.to_string()),
                ..self.host_config()
            }),
            ..Default::default()
        }
    }

    /// An agent container joining the pod `pod_id`, with the agent's mounts at their host
    /// paths. `mounts` must be canonical.
    pub(crate) fn agent_body(
        &self,
        spec: &AgentBox,
        pod_id: &str,
        pod_name: &str,
    ) -> ContainerCreateBody {
        let mut labels = self.labels(&spec.agent, spec.role.as_str());
        labels.insert(LABEL_POD.into(), pod_name.into());
        let mounts = spec
            .mounts
            .iter()
            .map(|m| DockerMount {
                target: Some(m.inside.to_string_lossy().into_owned()),
                // A pinned source is checked once mounted (`super::verify`).
                source: Some(m.host.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(m.read_only),
                ..Default::default()
            })
            .collect();
        let id = &self.identity;
        let mut tmpfs = HashMap::new();
        tmpfs.insert(id.home.clone(), self.engine.home_tmpfs(id.ids));
        // Masked directories (the run directory): an empty read-only tmpfs over each, so no
        // agent can read the records or plant anything where the host writes them. A mount
        // inside one (`-W`'s workbench) still shows: the engine makes its mount point first.
        for m in &spec.masked {
            tmpfs.insert(m.to_string_lossy().into_owned(), self.engine.mask_tmpfs());
        }
        let ulimits = spec.policy.open_files_limit.then(|| {
            let mut ulimits = vec![ResourcesUlimits {
                name: Some("nofile".into()),
                soft: Some(self.limits.judge_nofile),
                hard: Some(self.limits.judge_nofile),
            }];
            ulimits.extend(self.engine.extra_judge_ulimits(&self.limits));
            ulimits
        });
        ContainerCreateBody {
            image: Some(self.image.clone()),
            // Not PID 1 (the pod's init is): SIGTERM ends it at once, and the engine then kills
            // every process of the container because it shares the pod's PID namespace.
            entrypoint: Some(vec!["sleep".into(), "infinity".into()]),
            cmd: Some(vec![]),
            user: Some(id.user()),
            env: Some(self.env()),
            working_dir: Some(spec.workdir.to_string_lossy().into_owned()),
            labels: Some(labels),
            stop_timeout: Some(1),
            host_config: Some(HostConfig {
                pid_mode: Some(format!("container:{pod_id}")),
                network_mode: Some(format!("container:{pod_id}")),
                mounts: Some(mounts),
                tmpfs: Some(tmpfs),
                ulimits,
                readonly_paths: Some(READONLY_PATHS.map(String::from).into()),
                ..self.host_config()
            }),
            ..Default::default()
        }
    }
}

/// Canonicalises the box's paths (symlinks resolved; spaces and non-ASCII kept), drops
/// duplicate mounts (the stricter flag wins; a shadow's source stays) and checks the workdir
/// lies in a mount.
pub(crate) fn canonical_box(spec: &AgentBox) -> Result<AgentBox, SandboxError> {
    let canonical = |p: &Path| {
        std::fs::canonicalize(p)
            .map_err(|e| SandboxError::Container(format!("mount {}: {e}", p.display())))
    };
    let mut mounts: Vec<crate::sandbox::Mount> = Vec::new();
    for (i, m) in spec.mounts.iter().enumerate() {
        let inside = canonical(&m.inside)?;
        // A read-write mount inside an earlier read-only one (a write scope, issue 27 §3) must
        // stay beneath it once its links are resolved: a component swapped for a symlink would
        // otherwise hand the agent a host directory read-write.
        if !m.read_only {
            for outer in spec.mounts[..i]
                .iter()
                .filter(|o| o.read_only && m.inside.starts_with(&o.inside))
            {
                if !inside.starts_with(canonical(&outer.inside)?) {
                    return Err(SandboxError::OutsideMounts(inside));
                }
            }
        }
        // A pinned source is mounted whatever its path has become; the container still shows
        // it at its path only while that path is the object pinned (a path swapped since the
        // host opened it refuses the box rather than show the scope somewhere else).
        if let Some(pin) = &m.pin {
            let here = std::fs::metadata(&inside).map(|st| {
                (
                    std::os::unix::fs::MetadataExt::dev(&st),
                    std::os::unix::fs::MetadataExt::ino(&st),
                )
            });
            if here.ok() != pin.identity().ok() {
                return Err(SandboxError::OutsideMounts(inside));
            }
        }
        let host = if m.is_shadow() {
            canonical(&m.host)?
        } else {
            inside.clone()
        };
        match mounts.iter_mut().find(|x| x.inside == inside) {
            Some(existing) => {
                existing.read_only |= m.read_only;
                if !existing.is_shadow() {
                    existing.host = host;
                }
                if existing.pin.is_none() {
                    existing.pin.clone_from(&m.pin);
                }
            }
            None => mounts.push(crate::sandbox::Mount {
                host,
                inside,
                read_only: m.read_only,
                pin: m.pin.clone(),
            }),
        }
    }
    let workdir = std::fs::canonicalize(&spec.workdir)
        .map_err(|e| SandboxError::Container(format!("workdir {}: {e}", spec.workdir.display())))?;
    if !mounts.iter().any(|m| workdir.starts_with(&m.inside)) {
        return Err(SandboxError::OutsideMounts(workdir));
    }
    // A mask outside every mount has nothing to hide; one that does not exist yet is kept
    // as given (the engine creates its mount point).
    let masked = spec
        .masked
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .filter(|p| {
            mounts
                .iter()
                .any(|m| p.starts_with(&m.inside) && *p != m.inside)
        })
        .collect();
    Ok(AgentBox {
        agent: spec.agent.clone(),
        role: spec.role,
        mounts,
        masked,
        workdir,
        policy: spec.policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::sandbox::Mount;

    fn ident(uid: u32) -> Identity {
        Identity {
            ids: UserIds { uid, gid: uid },
            name: "alice".into(),
            home: "/home/alice".into(),
        }
    }

    #[test]
    fn passwd_gets_an_entry_once() {
        let facts = ImageFacts {
            passwd: "root:x:0:0:root:/root:/bin/bash".into(),
            group: "root:x:0:\n".into(),
            has_bash: true,
            ..Default::default()
        };
        let (p, g) = patch_passwd(&facts, &ident(4242));
        assert!(
            p.ends_with("alice:x:4242:4242:flowerbox agent:/home/alice:/bin/bash\n"),
            "{p}"
        );
        assert!(g.ends_with("g4242:x:4242:\n"));
        let (p0, g0) = patch_passwd(&facts, &ident(0));
        assert_eq!(p0.lines().count(), 1);
        assert_eq!(g0, facts.group);
        let taken = ImageFacts {
            passwd: "alice:x:1:1::/:/bin/sh\n".into(),
            ..facts
        };
        assert!(patch_passwd(&taken, &ident(4242))
            .0
            .contains("u4242:x:4242"));
    }

    #[test]
    fn etc_archive_holds_both_files() {
        let bytes = etc_archive("p\n", "g\n").unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let names: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["etc/passwd", "etc/group"]);
    }

    #[test]
    fn every_container_gets_a_cpu_quota_below_the_whole_machine() {
        assert_eq!(default_nano_cpus(1), 1_000_000_000);
        assert_eq!(default_nano_cpus(2), 1_000_000_000);
        assert_eq!(default_nano_cpus(8), 7_000_000_000);
        let limits = Limits {
            nano_cpus: 1_500_000_000,
            ..Limits::default()
        };
        let spec = RunSpec {
            run_id: "r".into(),
            workspace: "/w".into(),
            image: "img".into(),
            identity: ident(4242),
            owner: Owner::current().unwrap(),
            limits,
            extra_env: Vec::new(),
            engine: EngineKind::Docker,
        };
        let worker = AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![Mount::same("/w", false)],
            masked: Vec::new(),
            workdir: "/w".into(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        let hc = spec.agent_body(&worker, "p", "n").host_config.unwrap();
        assert_eq!(hc.nano_cpus, Some(1_500_000_000));
    }

    #[test]
    fn the_pod_runs_under_a_uid_of_its_own() {
        use crate::sandbox::Seat;
        let spec = |uid: u32, gid: u32| RunSpec {
            run_id: "r".into(),
            workspace: "/w".into(),
            image: "img".into(),
            identity: Identity {
                ids: UserIds { uid, gid },
                ..ident(uid)
            },
            owner: Owner::current().unwrap(),
            limits: Limits::default(),
            extra_env: Vec::new(),
            engine: EngineKind::Docker,
        };
        for (uid, gid) in [
            (0, 0),
            (1000, 1000),
            (4242, 4242),
            (65_530, 1000),
            (1000, 65_530),
            (65_500, 65_500),
            (65_534, 65_534),
            (65_499, 65_499),
        ] {
            let workers = UserIds { uid, gid };
            let pod = pod_ids(workers);
            let body = spec(uid, gid).pod_body("none");
            assert_eq!(body.user, Some(format!("{}:{}", pod.uid, pod.gid)));
            let mut taken = vec![uid, gid, 0, 65_534];
            for seat in [Seat::Judge, Seat::Coordinator] {
                let ro = super::super::readonly::ReadOnlyIds::of(seat, workers);
                taken.extend([
                    ro.shell.uid,
                    ro.shell.gid,
                    ro.inspector.uid,
                    ro.inspector.gid,
                ]);
            }
            assert!(!taken.contains(&pod.uid), "{workers:?}: {pod:?}");
            assert!(!taken.contains(&pod.gid), "{workers:?}: {pod:?}");
            // Inside a rootless engine's default subordinate range.
            assert!(pod.uid <= 65_535);
        }
    }

    #[test]
    fn names_are_docker_safe() {
        let n = container_name("run 1/ü", "judge-1");
        assert!(n.starts_with("fbx-run-1--"), "{n}");
        assert!(n
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)));
        assert_ne!(container_name("r", "a"), container_name("r", "a"));
    }

    #[test]
    fn home_avoids_mounts() {
        let id = Identity::new(
            UserIds {
                uid: 4242,
                gid: 4242,
            },
            &[PathBuf::from("/home")],
        );
        assert!(id.home.starts_with("/tmp/.flowerbox-home-"), "{}", id.home);
    }

    #[test]
    fn canonical_box_resolves_symlinks_and_odd_names() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("wörk space");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let spec = AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![
                Mount::same(link.clone(), false),
                Mount::same(real.clone(), true),
            ],
            masked: Vec::new(),
            workdir: link,
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        let c = canonical_box(&spec).unwrap();
        let real = std::fs::canonicalize(real).unwrap();
        assert_eq!(c.mounts, vec![Mount::same(real.clone(), true)]);
        assert_eq!(c.workdir, real);
        let outside = AgentBox {
            workdir: dir.path().to_path_buf(),
            ..spec
        };
        assert!(matches!(
            canonical_box(&outside),
            Err(SandboxError::OutsideMounts(_))
        ));
    }

    /// A write scope whose path an agent swapped for a symlink out of the workspace is never
    /// mounted read-write (issue 27 §3).
    #[test]
    fn a_scope_mount_through_a_link_out_of_its_read_only_parent_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        let secret = root.join("ssh");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        let scoped = |p: &str| AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![
                Mount::same(ws.clone(), true),
                Mount::same(ws.join(p), false),
            ],
            masked: Vec::new(),
            workdir: ws.clone(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        assert_eq!(canonical_box(&scoped("src")).unwrap().mounts.len(), 2);
        std::os::unix::fs::symlink(&secret, ws.join("http")).unwrap();
        assert!(matches!(
            canonical_box(&scoped("http")),
            Err(SandboxError::OutsideMounts(p)) if p == secret
        ));
    }

    /// A pinned scope mount keeps its pin through canonicalisation, and a box whose scope path
    /// is no longer the pinned object (swapped since) is refused.
    #[test]
    fn a_pinned_scope_keeps_its_pin_and_a_swapped_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        let pin = || {
            let fd = rustix::fs::open(
                ws.join("src"),
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            crate::sandbox::Pin::new(fd)
        };
        let spec = |p: crate::sandbox::Pin| AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![
                Mount::same(ws.clone(), true),
                Mount::pinned(ws.join("src"), p, false),
            ],
            masked: Vec::new(),
            workdir: ws.clone(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        let c = canonical_box(&spec(pin())).unwrap();
        assert!(c.mounts[1].pin.is_some(), "the pin goes with the box");
        // Swapped: the pinned directory moved away, another one (or a link) in its place.
        let held = pin();
        std::fs::rename(ws.join("src"), ws.join("moved")).unwrap();
        std::fs::create_dir(ws.join("src")).unwrap();
        assert!(matches!(
            canonical_box(&spec(held)),
            Err(SandboxError::OutsideMounts(_))
        ));
    }

    #[test]
    fn judge_gets_nofile_and_env_has_no_host_values() {
        let spec = RunSpec {
            run_id: "r".into(),
            workspace: "/w".into(),
            image: "img".into(),
            identity: ident(4242),
            owner: Owner::current().unwrap(),
            limits: Limits::default(),
            extra_env: Vec::new(),
            engine: EngineKind::Docker,
        };
        let judge = AgentBox {
            agent: "judge-1".into(),
            role: Role::Judge,
            mounts: vec![Mount::same("/w", true)],
            masked: Vec::new(),
            workdir: "/w".into(),
            policy: crate::sandbox::SandboxPolicy::read_only(crate::sandbox::Seat::Judge),
        };
        let body = spec.agent_body(&judge, "podid", "podname");
        let hc = body.host_config.unwrap();
        assert_eq!(hc.pid_mode.as_deref(), Some("container:podid"));
        assert_eq!(hc.ulimits.unwrap()[0].hard, Some(1024));
        assert_eq!(hc.cap_drop.unwrap(), ["ALL"]);
        let ro = hc.readonly_paths.unwrap();
        for path in [
            "/proc/sys",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/hostname",
        ] {
            assert!(ro.iter().any(|p| p == path), "{path} not read-only");
        }
        let env = body.env.unwrap();
        assert!(env.contains(&"GIT_CONFIG_VALUE_2=never".to_string()));
        assert!(env
            .iter()
            .all(|e| !e.starts_with("ANTHROPIC") && !e.starts_with("PATH=")));
        let worker = AgentBox {
            role: Role::Worker,
            policy: crate::sandbox::SandboxPolicy::writer(),
            ..judge
        };
        assert!(spec
            .agent_body(&worker, "p", "n")
            .host_config
            .unwrap()
            .ulimits
            .is_none());
    }

    #[test]
    fn masked_directories_get_an_empty_read_only_tmpfs() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let spec = AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![Mount::same(ws.clone(), false)],
            // The second is outside every mount: nothing to hide there.
            masked: vec![runs.clone(), dir.path().join("elsewhere")],
            workdir: ws.clone(),
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        let c = canonical_box(&spec).unwrap();
        assert_eq!(c.masked, vec![runs.clone()]);
        let run = RunSpec {
            run_id: "r".into(),
            workspace: ws.clone(),
            image: "img".into(),
            identity: ident(4242),
            owner: Owner::current().unwrap(),
            limits: Limits::default(),
            extra_env: Vec::new(),
            engine: EngineKind::Docker,
        };
        let tmpfs = run
            .agent_body(&c, "p", "n")
            .host_config
            .unwrap()
            .tmpfs
            .unwrap();
        let opts = &tmpfs[&runs.to_string_lossy().into_owned()];
        assert!(opts.split(',').any(|o| o == "ro"), "{opts}");
    }
}
