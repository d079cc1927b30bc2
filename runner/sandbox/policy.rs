//! An agent's sandbox policy as data (issue 30 §1): who its commands run as, with which
//! capabilities, under which seccomp profile and limits. The flow's side decides it once per
//! agent (`agent::place::role_policy`, beside the role's mounts) and hands it to the backend in
//! the [`super::AgentBox`]; no backend derives it again from the role. A backend translates it
//! (Docker: `setpriv`, `CapAdd`, `SecurityOpt`, `Ulimits`; Kubernetes: a container's
//! `securityContext`) or, when it cannot give what it says, refuses the agent.
//!
//! What every agent of a run shares is not here but in the backend's options for the run: the
//! run's user (the invoking user or `--user`), its memory, pids and CPU limits, and the network
//! (every container joins the pod's namespace, fenced by the run's egress policy).

/// A Linux capability a policy may grant (all others are dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Read and search every file whatever its mode (read-only roles read their mounts).
    DacReadSearch,
    /// Inspect other processes (`lsof` over the workers' processes, the inspector only).
    SysPtrace,
}

impl Capability {
    /// The kernel's name in lower case (`setpriv`'s spelling, without `cap_`).
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::DacReadSearch => "dac_read_search",
            Capability::SysPtrace => "sys_ptrace",
        }
    }

    /// The engine's spelling (`DAC_READ_SEARCH`).
    pub fn engine_name(self) -> String {
        self.as_str().to_ascii_uppercase()
    }
}

/// Which of the read-only seats an agent takes: each has a uid of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seat {
    /// A judge (or a gate's check).
    Judge,
    /// The coordinator, and any other read-only role.
    Coordinator,
}

impl Seat {
    /// The login name of the seat's uid.
    pub fn login(self) -> &'static str {
        match self {
            Seat::Judge => "judge",
            Seat::Coordinator => "coordinator",
        }
    }
}

/// Who an agent's commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyUser {
    /// The run's user (the invoking user or `--user`), the owner of what it writes.
    Run,
    /// A uid of its own that no writing agent has, so nothing it runs can reach what a
    /// writer can (DESIGN.md "Read-only roles").
    Own(Seat),
}

/// The seccomp profile every process of the agent's container runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeccompProfile {
    /// Writing roles: the engine's default refusals and `io_uring`.
    Writer,
    /// Read-only roles: also `ptrace`, `process_vm_*`, `pidfd_getfd`, `kcmp`,
    /// `process_madvise`, `open_by_handle_at`.
    ReadOnly,
}

/// One agent's sandbox policy. Its mounts (each read-only or read-write) and masks are the
/// [`super::AgentBox`]'s; this is the rest. Build with [`SandboxPolicy::writer`] or
/// [`SandboxPolicy::read_only`]: the fields are public to read, and a backend refuses a
/// combination it cannot enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Who its commands run as.
    pub user: PolicyUser,
    /// Capabilities of its commands (every other one dropped); none for the run's user.
    pub capabilities: &'static [Capability],
    /// `lsof` goes through an inspector process of another uid with these capabilities, when
    /// the image has `lsof` and bash; `None`: no inspector.
    pub inspector: Option<&'static [Capability]>,
    /// The seccomp profile of every process of its container.
    pub seccomp: SeccompProfile,
    /// The run's open-files limit applies (`nofile`: judges run `lsof` over the pod).
    pub open_files_limit: bool,
    /// Its processes live in a Landlock domain of their own (`sandbox::service::domain`), so
    /// none reaches another agent's processes through `/proc` (same uid, one PID namespace):
    /// writing agents. A judge must not: it inspects the workers' processes.
    pub own_domain: bool,
}

impl SandboxPolicy {
    /// A writing agent (a worker, `once`, a hand-back): the run's user, no capabilities, a
    /// Landlock domain of its own.
    pub const fn writer() -> Self {
        SandboxPolicy {
            user: PolicyUser::Run,
            capabilities: &[],
            inspector: None,
            seccomp: SeccompProfile::Writer,
            open_files_limit: false,
            own_domain: true,
        }
    }

    /// A read-only agent in `seat`: its own uid, `CAP_DAC_READ_SEARCH` only, the read-only
    /// seccomp profile, `lsof` through an inspector; a judge also gets the open-files limit.
    pub const fn read_only(seat: Seat) -> Self {
        SandboxPolicy {
            user: PolicyUser::Own(seat),
            capabilities: &[Capability::DacReadSearch],
            inspector: Some(&[Capability::SysPtrace, Capability::DacReadSearch]),
            seccomp: SeccompProfile::ReadOnly,
            open_files_limit: matches!(seat, Seat::Judge),
            own_domain: false,
        }
    }

    /// Its commands can change nothing a writing agent can (a uid of its own).
    pub fn is_read_only(&self) -> bool {
        matches!(self.user, PolicyUser::Own(_))
    }
}

/// Resource limits of every container of a run (switches or configuration; sane defaults): the
/// run's, not an agent's, given to the backend with the run's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory limit in bytes (swap is not added on top). Default 4 GiB.
    pub memory_bytes: i64,
    /// Most processes (threads count) per container. Default 2048.
    pub pids: i64,
    /// `nofile` soft and hard limit for judges, which run `lsof`. Default 1024.
    pub judge_nofile: i64,
    /// CPU per container, in billionths of a CPU (`NanoCpus`, a CFS quota). Default: every
    /// core but one ([`default_nano_cpus`]), so no agent alone takes the whole machine from
    /// the runner and the other agents.
    pub nano_cpus: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 4 << 30,
            pids: 2048,
            judge_nofile: 1024,
            nano_cpus: default_nano_cpus(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
        }
    }
}

/// One container's CPU quota on a machine of `cores`: `cores − 1`, at least one whole CPU.
pub fn default_nano_cpus(cores: usize) -> i64 {
    let cpus = i64::try_from(cores.saturating_sub(1).max(1)).unwrap_or(i64::MAX / 1_000_000_000);
    cpus * 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_has_no_capability_and_a_reader_its_own_uid() {
        let w = SandboxPolicy::writer();
        assert!(!w.is_read_only() && w.capabilities.is_empty() && w.inspector.is_none());
        assert!(w.own_domain && !SandboxPolicy::read_only(Seat::Judge).own_domain);
        let j = SandboxPolicy::read_only(Seat::Judge);
        assert!(j.is_read_only() && j.open_files_limit);
        assert_eq!(j.capabilities, [Capability::DacReadSearch]);
        assert!(!SandboxPolicy::read_only(Seat::Coordinator).open_files_limit);
        assert_eq!(Capability::SysPtrace.engine_name(), "SYS_PTRACE");
    }
}
