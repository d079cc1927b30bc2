//! The containers of the read-only roles (judge, coordinator): nothing in them can create,
//! change or delete a file a worker can, by any route, while a judge still sees the workers'
//! live processes, sockets and open files (DESIGN.md "Read-only roles", issue 14 part 3).
//!
//! Such a container shares the pod's PID namespace with the workers, so its processes could
//! otherwise reach the workers' writable mounts through `/proc/<pid>/root`, `/proc/<pid>/cwd`
//! and `/proc/<pid>/fd/N`, or write into worker processes. By construction:
//!
//! - **The agent's shell runs under a uid of its own** ([`ReadOnlyIds`]), never the workers'
//!   (not even when flowerbox runs as root and workers run as 0:0), with one capability,
//!   `CAP_DAC_READ_SEARCH` (it reads its read-only mounts whatever their modes). Without
//!   `CAP_SYS_PTRACE` and with another uid, the kernel refuses it every `/proc/<pid>` link of a
//!   worker (root, cwd, fd, map_files, mem), `ptrace`, `process_vm_writev`, `pidfd_getfd` and
//!   every signal: it never gets a path or descriptor into a worker's mount namespace, so even
//!   world-writable files (a worker's `/tmp`, `/dev/shm`, a `chmod 666` file, a memfd) stay out
//!   of reach.
//! - **`lsof` goes through an inspector**: the container's main process, under a third uid with
//!   `CAP_SYS_PTRACE` and `CAP_DAC_READ_SEARCH`, runs the real `lsof` with the shell's
//!   arguments (`readonly/inspector.sh`) and writes the answer into its own directory, which
//!   the shell can read but not write; `/usr/local/bin/lsof` in the container is a shim that
//!   asks it (`readonly/lsof.sh`). The shell cannot trace or signal the inspector (another
//!   uid, more capabilities). `ps`, `file` and `curl` need nothing special.
//! - **Privileges are dropped by `setpriv` (util-linux) in the container**: the engine gives
//!   added capabilities only to root, so the container starts as root with exactly the
//!   capabilities the two processes need, and every process — the inspector, each exec —
//!   starts as `setpriv --reuid … --clear-groups --bounding-set …` before anything else runs.
//!   `no-new-privileges` stays on, so no set-uid program gains anything.
//! - **A seccomp profile** of its own ([`super::seccomp`]) refuses `ptrace`,
//!   `process_vm_readv`/`writev`, `pidfd_getfd`, `kcmp`, `process_madvise` and
//!   `open_by_handle_at` (which `CAP_DAC_READ_SEARCH` would otherwise allow: the "shocker"
//!   escape) for every process of the container, the inspector included.

use bollard::models::ContainerCreateBody;
use std::path::PathBuf;

use super::container::{patch_passwd, Identity, ImageFacts, UserIds};
use crate::sandbox::{Capability, PolicyUser, SandboxError, SandboxPolicy, Seat};

/// Where `setpriv` may be in an image (checked in order, before the pod starts).
pub(crate) const SETPRIV_PATHS: &[&str] = &[
    "/usr/bin/setpriv",
    "/bin/setpriv",
    "/usr/sbin/setpriv",
    "/sbin/setpriv",
];
/// Where `lsof` may be in an image.
pub(crate) const LSOF_PATHS: &[&str] =
    &["/usr/bin/lsof", "/usr/sbin/lsof", "/bin/lsof", "/sbin/lsof"];

/// The inspector's directory: its FIFO `req`, its pid and the answers.
const INSPECT_DIR: &str = "run/flowerbox-inspect";
/// The inspector script, installed root-owned.
const INSPECTOR_PATH: &str = "/usr/local/libexec/flowerbox-inspector";
/// The `lsof` shim, first on the image's default `PATH`.
const SHIM_PATH: &str = "/usr/local/bin/lsof";
const INSPECTOR: &str = include_str!("readonly/inspector.sh");
const LSOF_SHIM: &str = include_str!("readonly/lsof.sh");

/// What `setpriv` itself needs in a container that starts as root: switching uids and groups
/// and shrinking the capability sets. Never held by an agent's process.
const SETPRIV_CAPS: [&str; 3] = ["SETUID", "SETGID", "SETPCAP"];

/// The uids (each its own gid) of one read-only container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOnlyIds {
    /// The agent's shell and everything it runs.
    pub shell: UserIds,
    /// The inspector that runs `lsof`.
    pub inspector: UserIds,
}

impl ReadOnlyIds {
    /// Fixed ids near the top of the 16-bit range, so that they map in a rootless engine's
    /// user namespace too: judges 65531, coordinators (and any other read-only role) 65532,
    /// the inspector 65533 — or 65501..65503 when the workers' uid or gid is in 65500..=65535.
    /// Never the workers' ids, never root.
    pub fn of(seat: Seat, workers: UserIds) -> ReadOnlyIds {
        let base = if near_the_top(workers) {
            65_500
        } else {
            65_530
        };
        let ids = |n: u32| UserIds {
            uid: base + n,
            gid: base + n,
        };
        ReadOnlyIds {
            shell: ids(match seat {
                Seat::Judge => 1,
                Seat::Coordinator => 2,
            }),
            inspector: ids(3),
        }
    }
}

/// Whether the workers' uid or gid lies in 65500..=65535, where flowerbox's fixed ids live
/// (then they move below: [`ReadOnlyIds::of`], [`super::container::pod_ids`]).
pub(crate) fn near_the_top(workers: UserIds) -> bool {
    let near = |id: u32| (65_500..=65_535).contains(&id);
    near(workers.uid) || near(workers.gid)
}

/// One line for `flowerbox doctor` (Chinese, identifiers verbatim): who the judge and the
/// coordinator run as, with which capabilities, and what seccomp refuses.
pub fn describe(workers: UserIds) -> String {
    let judge = ReadOnlyIds::of(Seat::Judge, workers);
    let coordinator = ReadOnlyIds::of(Seat::Coordinator, workers);
    format!(
        "判定者 uid {}、协调者 uid {}(工人 uid {}),shell 只有 CAP_DAC_READ_SEARCH;lsof 由 inspector\
         (uid {},CAP_SYS_PTRACE + CAP_DAC_READ_SEARCH)代跑;seccomp 拒 {}",
        judge.shell.uid,
        coordinator.shell.uid,
        workers.uid,
        judge.inspector.uid,
        super::seccomp::REFUSED.join("、")
    )
}

/// How one read-only container is built and entered.
#[derive(Debug, Clone)]
pub(crate) struct ReadOnly {
    /// The agent's shell: ids, login name, HOME (its tmpfs).
    pub shell: Identity,
    /// The inspector's ids.
    inspector: UserIds,
    /// The shell's capabilities (the policy's).
    shell_caps: &'static [Capability],
    /// The inspector's (the policy's).
    inspector_caps: &'static [Capability],
    /// `setpriv` in the image.
    setpriv: String,
    /// The image's `lsof`, when the inspector runs (the image has bash and lsof).
    lsof: Option<String>,
}

impl ReadOnly {
    /// The plan for `policy` (`None` when it runs as the run's user), over the workers' ids and
    /// the container's mount paths. Errors when the image has no `setpriv`: without it nothing
    /// can drop to another uid, and a read-only agent never runs as the workers' uid; and when
    /// the policy gives the run's user capabilities (a non-root user never holds any here).
    pub(crate) fn plan(
        policy: &SandboxPolicy,
        workers: UserIds,
        mounts: &[PathBuf],
        facts: &ImageFacts,
        image: &str,
    ) -> Result<Option<ReadOnly>, SandboxError> {
        let seat = match policy.user {
            PolicyUser::Run if policy.capabilities.is_empty() && policy.inspector.is_none() => {
                return Ok(None);
            }
            PolicyUser::Run => {
                return Err(SandboxError::Unsupported(format!(
                    "the run's user gets no capability in a container: {policy:?}"
                )));
            }
            PolicyUser::Own(seat) => seat,
        };
        let setpriv = facts.setpriv.clone().ok_or_else(|| {
            SandboxError::Container(format!(
                "{image} has no setpriv (util-linux): a {} runs under a uid of its own, and \
                 only setpriv can switch to it inside the container",
                seat.login()
            ))
        })?;
        let ids = ReadOnlyIds::of(seat, workers);
        Ok(Some(ReadOnly {
            shell: Identity::named(ids.shell, seat.login(), mounts),
            inspector: ids.inspector,
            shell_caps: policy.capabilities,
            inspector_caps: policy.inspector.unwrap_or(&[]),
            setpriv,
            lsof: facts
                .lsof
                .clone()
                .filter(|_| facts.has_bash && policy.inspector.is_some()),
        }))
    }

    /// `setpriv` switching to `ids` with `caps` (and nothing else) in every capability set.
    fn setpriv(&self, ids: UserIds, caps: &[Capability]) -> Vec<String> {
        let add: String = caps.iter().map(|c| format!(",+{}", c.as_str())).collect();
        vec![
            self.setpriv.clone(),
            format!("--reuid={}", ids.uid),
            format!("--regid={}", ids.gid),
            "--clear-groups".into(),
            format!("--inh-caps=-all{add}"),
            format!("--ambient-caps=-all{add}"),
            format!("--bounding-set=-all{add}"),
            "--".into(),
        ]
    }

    /// The engine user of every exec: root, which [`ReadOnly::exec_prefix`] leaves at once.
    pub(crate) fn exec_user(&self) -> String {
        "0:0".into()
    }

    /// What every exec runs first: `setpriv` to the shell's ids with `CAP_DAC_READ_SEARCH`.
    pub(crate) fn exec_prefix(&self) -> Vec<String> {
        self.setpriv(self.shell.ids, self.shell_caps)
    }

    /// Turns an agent container's body (built for the shell's identity) into a read-only one:
    /// root at the start with only the capabilities `setpriv` and the inspector need, the
    /// inspector (or `sleep`, as the shell) as the main process, the seccomp profile
    /// (`seccomp`: the `SecurityOpt` entry the engine takes it as, see
    /// [`super::kind::seccomp_option`]).
    pub(crate) fn harden(&self, body: &mut ContainerCreateBody, seccomp: String) {
        body.user = Some("0:0".into());
        body.entrypoint = Some(match &self.lsof {
            Some(lsof) => {
                let mut argv = self.setpriv(self.inspector, self.inspector_caps);
                argv.extend(["bash".into(), INSPECTOR_PATH.into(), lsof.clone()]);
                argv
            }
            None => {
                let mut argv = self.setpriv(self.shell.ids, self.shell_caps);
                argv.extend(["sleep".into(), "infinity".into()]);
                argv
            }
        });
        let hc = body.host_config.get_or_insert_with(Default::default);
        let mut caps: Vec<String> = SETPRIV_CAPS.map(String::from).into();
        let inspector: &[Capability] = match self.lsof {
            Some(_) => self.inspector_caps,
            None => &[],
        };
        for c in self.shell_caps.iter().chain(inspector) {
            if !caps.contains(&c.engine_name()) {
                caps.push(c.engine_name());
            }
        }
        hc.cap_drop = Some(vec!["ALL".into()]);
        hc.cap_add = Some(caps);
        let opts = hc.security_opt.get_or_insert_with(Vec::new);
        if !opts.iter().any(|o| o == "no-new-privileges") {
            opts.push("no-new-privileges".into());
        }
        opts.push(seccomp);
    }

    /// The files uploaded before the container starts: `/etc/passwd` and `/etc/group` naming
    /// the workers (so `ps` and `lsof` show their login), the shell and the inspector; with
    /// the inspector, its script, the `lsof` shim (root-owned) and its directory (its own).
    pub(crate) fn archive(
        &self,
        facts: &ImageFacts,
        workers: &Identity,
    ) -> Result<Vec<u8>, SandboxError> {
        let mut with = facts.clone();
        let inspector = Identity {
            ids: self.inspector,
            name: "inspector".into(),
            home: format!("/{INSPECT_DIR}"),
        };
        for id in [workers, &self.shell, &inspector] {
            let (passwd, group) = patch_passwd(&with, id);
            with.passwd = passwd;
            with.group = group;
        }
        let root = (0, 0);
        let mut entries = vec![
            Entry::file("etc/passwd", &with.passwd, 0o644, root),
            Entry::file("etc/group", &with.group, 0o644, root),
        ];
        if self.lsof.is_some() {
            let own = (u64::from(self.inspector.uid), u64::from(self.inspector.gid));
            entries.extend([
                Entry::dir(INSPECT_DIR, 0o755, own),
                Entry::file(&INSPECTOR_PATH[1..], INSPECTOR, 0o755, root),
                Entry::file(&SHIM_PATH[1..], LSOF_SHIM, 0o755, root),
            ]);
        }
        archive(&entries)
    }
}

/// One entry of an upload: a file with its text, or a directory.
struct Entry<'a> {
    path: &'a str,
    text: Option<&'a str>,
    mode: u32,
    owner: (u64, u64),
}

impl<'a> Entry<'a> {
    fn file(path: &'a str, text: &'a str, mode: u32, owner: (u64, u64)) -> Self {
        Entry {
            path,
            text: Some(text),
            mode,
            owner,
        }
    }

    fn dir(path: &'a str, mode: u32, owner: (u64, u64)) -> Self {
        Entry {
            path,
            text: None,
            mode,
            owner,
        }
    }
}

/// A tar archive of `entries` (owners kept: the engine extracts with the archive's ids).
fn archive(entries: &[Entry]) -> Result<Vec<u8>, SandboxError> {
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut header = tar::Header::new_gnu();
        let text = e.text.unwrap_or("");
        header.set_entry_type(if e.text.is_some() {
            tar::EntryType::Regular
        } else {
            tar::EntryType::Directory
        });
        header.set_size(text.len() as u64);
        header.set_mode(e.mode);
        header.set_uid(e.owner.0);
        header.set_gid(e.owner.1);
        header.set_mtime(0);
        builder.append_data(&mut header, e.path, text.as_bytes())?;
    }
    Ok(builder.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: UserIds = UserIds {
        uid: 1000,
        gid: 1000,
    };
    const ROOT: UserIds = UserIds { uid: 0, gid: 0 };

    /// Docker's form of the profile option.
    fn inline_seccomp() -> String {
        format!("seccomp={}", super::super::seccomp::read_only_profile())
    }

    fn facts() -> ImageFacts {
        ImageFacts {
            passwd: "root:x:0:0:root:/root:/bin/bash\n".into(),
            group: "root:x:0:\n".into(),
            has_bash: true,
            setpriv: Some("/usr/bin/setpriv".into()),
            lsof: Some("/usr/bin/lsof".into()),
        }
    }

    fn plan(seat: Seat, workers: UserIds) -> ReadOnly {
        let policy = SandboxPolicy::read_only(seat);
        ReadOnly::plan(&policy, workers, &[PathBuf::from("/w")], &facts(), "img")
            .unwrap()
            .unwrap()
    }

    #[test]
    fn ids_never_meet_the_workers_or_root() {
        for workers in [
            USER,
            ROOT,
            UserIds {
                uid: 65_531,
                gid: 5,
            },
            UserIds {
                uid: 7,
                gid: 65_533,
            },
        ] {
            let (j, c) = (
                ReadOnlyIds::of(Seat::Judge, workers),
                ReadOnlyIds::of(Seat::Coordinator, workers),
            );
            let all = [j.shell, c.shell, j.inspector];
            for ids in all {
                assert!(ids.uid != 0 && ids.gid != 0);
                assert!(
                    ids.uid != workers.uid && ids.gid != workers.gid,
                    "{workers:?}"
                );
                assert!(ids.uid <= 65_535);
            }
            assert!(j.shell != c.shell && j.shell != j.inspector && c.shell != c.inspector);
            assert_eq!(j.inspector, c.inspector);
        }
        assert_eq!(ReadOnlyIds::of(Seat::Judge, ROOT).shell.uid, 65_531);
    }

    #[test]
    fn workers_get_no_plan_and_a_missing_setpriv_is_an_error() {
        let writer = SandboxPolicy::writer();
        let none = ReadOnly::plan(&writer, USER, &[], &facts(), "img").unwrap();
        assert!(none.is_none());
        // The run's user with a capability is a policy this backend cannot give.
        let odd = SandboxPolicy {
            capabilities: &[Capability::DacReadSearch],
            ..writer
        };
        assert!(ReadOnly::plan(&odd, USER, &[], &facts(), "img").is_err());
        let bare = ImageFacts {
            setpriv: None,
            ..facts()
        };
        let judge = SandboxPolicy::read_only(Seat::Judge);
        let err = ReadOnly::plan(&judge, USER, &[], &bare, "alpine").unwrap_err();
        assert!(err.to_string().contains("setpriv"), "{err}");
    }

    #[test]
    fn execs_drop_to_the_shell_with_one_capability() {
        let p = plan(Seat::Judge, ROOT);
        assert_eq!(p.exec_user(), "0:0");
        assert_eq!(
            p.exec_prefix(),
            [
                "/usr/bin/setpriv",
                "--reuid=65531",
                "--regid=65531",
                "--clear-groups",
                "--inh-caps=-all,+dac_read_search",
                "--ambient-caps=-all,+dac_read_search",
                "--bounding-set=-all,+dac_read_search",
                "--"
            ]
        );
        assert_eq!(p.shell.name, "judge");
        assert_eq!(p.shell.home, "/home/judge");
    }

    #[test]
    fn harden_sets_root_start_caps_inspector_and_seccomp() {
        let p = plan(Seat::Judge, USER);
        let mut body = ContainerCreateBody {
            user: Some("65531:65531".into()),
            host_config: Some(bollard::models::HostConfig {
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.harden(&mut body, inline_seccomp());
        assert_eq!(body.user.as_deref(), Some("0:0"));
        let argv = body.entrypoint.unwrap();
        assert!(argv.contains(&"--reuid=65533".to_string()), "{argv:?}");
        assert!(argv.contains(&"--ambient-caps=-all,+sys_ptrace,+dac_read_search".to_string()));
        assert_eq!(
            &argv[argv.len() - 3..],
            ["bash", INSPECTOR_PATH, "/usr/bin/lsof"]
        );
        let hc = body.host_config.unwrap();
        assert_eq!(hc.cap_drop.unwrap(), ["ALL"]);
        let caps = hc.cap_add.unwrap();
        assert!(caps.contains(&"SYS_PTRACE".to_string()) && !caps.contains(&"SYS_ADMIN".into()));
        let opts = hc.security_opt.unwrap();
        assert_eq!(opts[0], "no-new-privileges");
        assert!(opts[1].starts_with("seccomp={") && opts.len() == 2);

        // Without lsof (or bash) there is no inspector: the shell's own ids run `sleep`, and
        // nothing in the container holds CAP_SYS_PTRACE.
        let no_lsof = ReadOnly::plan(
            &SandboxPolicy::read_only(Seat::Coordinator),
            USER,
            &[],
            &ImageFacts {
                has_bash: false,
                ..facts()
            },
            "img",
        )
        .unwrap()
        .unwrap();
        let mut body = ContainerCreateBody::default();
        no_lsof.harden(&mut body, inline_seccomp());
        let argv = body.entrypoint.unwrap();
        assert!(argv.contains(&"--reuid=65532".to_string()));
        assert_eq!(&argv[argv.len() - 2..], ["sleep", "infinity"]);
        let hc = body.host_config.unwrap();
        assert!(!hc.cap_add.unwrap().contains(&"SYS_PTRACE".to_string()));
        assert_eq!(hc.security_opt.unwrap()[0], "no-new-privileges");
    }

    #[test]
    fn archive_names_everyone_and_gives_the_inspector_its_directory() {
        let p = plan(Seat::Judge, USER);
        let workers = Identity::named(USER, "alice", &[]);
        let bytes = p.archive(&facts(), &workers).unwrap();
        let mut ar = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let h = e.header().clone();
            let path = e.path().unwrap().display().to_string();
            let mut text = String::new();
            std::io::Read::read_to_string(&mut e, &mut text).unwrap();
            seen.push((path, h.uid().unwrap(), h.mode().unwrap(), text));
        }
        let get = |p: &str| {
            seen.iter()
                .find(|s| s.0.trim_end_matches('/') == p)
                .unwrap()
        };
        let passwd = &get("etc/passwd").3;
        for line in [
            "alice:x:1000:1000",
            "judge:x:65531:65531",
            "inspector:x:65533:65533",
        ] {
            assert!(passwd.contains(line), "{passwd}");
        }
        assert_eq!(get(INSPECT_DIR).1, 65_533);
        assert_eq!(get(&SHIM_PATH[1..]).1, 0);
        assert_eq!(get(&SHIM_PATH[1..]).2, 0o755);
        assert_eq!(get(&INSPECTOR_PATH[1..]).1, 0);
        // The scripts agree with this file on where things are.
        assert!(INSPECTOR.contains(&format!("dir=/{INSPECT_DIR}")));
        assert!(LSOF_SHIM.contains(&format!("dir=/{INSPECT_DIR}")));
        assert!(LSOF_SHIM.contains(INSPECTOR_PATH));
    }
}
