//! The run's end inside the pod ([`super::proto::Kind::End`]): every other process of the
//! service's uid in the pod's PID namespace killed.
//!
//! One `kill(-1, SIGKILL)` signals every process the caller may signal in its PID namespace
//! (the caller and the namespace's init excepted), which for a process without capabilities
//! is every process of its uid: the agent's commands, whatever their session or process group,
//! detached, double-forked or `nohup`ed; its MCP servers and hooks; the other exec services of
//! the uid and the containers' main processes. It is race-free against `fork`: the kernel
//! signals under the task list's lock, and a `fork` that has not added its child by then fails
//! in a parent that now has the signal pending, so no child of a killed process escapes. No
//! agent process can leave the uid (no capability, `no_new_privs`, no setuid gain) or the
//! namespace (seccomp refuses new PID namespaces), and the pod's own processes run under a
//! uid no agent has, out of reach.
//!
//! Once the call returned, a process with `SIGKILL` pending runs no instruction of its own
//! again: the service then checks in `/proc` that every other process of its uid is dead
//! (a zombie), exiting (`PF_EXITING`) or has `SIGKILL` pending, killing again for what is not,
//! a few times, and answers at once. It does not wait for the processes to be reaped: the
//! container's main process is one of them, and its runtime kills the container's whole
//! cgroup when it dies, the service included, a few milliseconds later; by then the answer
//! is out. (The engine's kill confirms no more: the runtime signals the cgroup and reports
//! the container dead without waiting for the rest.)

use std::time::Duration;

/// Looks at `/proc` after the kill at most this many times before naming what is left.
const LOOKS: u32 = 5;

/// The pause between two looks.
const PAUSE: Duration = Duration::from_millis(2);

/// Most processes named when some are left.
const NAMED: usize = 8;

/// `PF_EXITING` in `/proc/<pid>/stat`'s flags: the task is in its exit.
const PF_EXITING: u64 = 0x4;

/// `SIGKILL`'s bit in `/proc/<pid>/status`' pending masks.
const SIGKILL_BIT: u64 = 1 << (9 - 1);

/// Kills every other process of this process's uid in its PID namespace (module doc). Empty
/// when each is dead or dying; otherwise `pid state command` of those still running (at most
/// [`NAMED`]).
pub fn end_uid() -> Vec<String> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::{getuid, Pid};
    let uid = getuid().as_raw();
    let me = std::process::id();
    let mut left = Vec::new();
    for look in 0..LOOKS {
        if look > 0 {
            std::thread::sleep(PAUSE);
        }
        // ESRCH when nothing else of the uid is left to signal.
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        left = living(uid, me);
        if left.is_empty() {
            break;
        }
    }
    left.into_iter().take(NAMED).collect()
}

/// `pid state command` of every process but `me` whose real, effective or saved uid is `uid`
/// and that is neither dead nor dying ([`Proc::doomed`]), as `/proc` shows them.
fn living(uid: u32, me: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            // Gone between the listing and the read: not alive.
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let p = Proc::parse(&status, &stat)?;
            (p.uids.contains(&uid) && !p.doomed())
                .then(|| format!("{pid} {} {}", p.state, super::command_line(pid, 60)))
        })
        .collect()
}

/// What `/proc/<pid>/status` and `stat` say of a process.
#[derive(Debug, PartialEq, Eq)]
struct Proc {
    /// The state letter (`R`, `S`, `D`, `Z`, …).
    state: char,
    /// Real, effective and saved uid.
    uids: [u32; 3],
    /// The thread's and the process's pending signals.
    pending: u64,
    /// The kernel's task flags.
    flags: u64,
}

impl Proc {
    fn parse(status: &str, stat: &str) -> Option<Proc> {
        let (mut state, mut uids, mut pending) = (None, None, 0u64);
        for line in status.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let rest = rest.trim();
            match key {
                "State" => state = rest.chars().next(),
                "Uid" => {
                    let mut f = rest.split_whitespace().map(|v| v.parse::<u32>().ok());
                    uids = Some([f.next()??, f.next()??, f.next()??]);
                }
                "SigPnd" | "ShdPnd" => pending |= u64::from_str_radix(rest, 16).ok()?,
                _ => {}
            }
        }
        // The command name may hold spaces and parentheses: fields count from the last `)`.
        let after = &stat[stat.rfind(')')? + 1..];
        let flags = after.split_whitespace().nth(6)?.parse::<u64>().ok()?;
        Some(Proc {
            state: state?,
            uids: uids?,
            pending,
            flags,
        })
    }

    /// Dead, in its exit, or with `SIGKILL` pending: it runs nothing of its own again.
    fn doomed(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
            || self.flags & PF_EXITING != 0
            || self.pending & SIGKILL_BIT != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "7 (a b) c) S 1 7 7 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 5 0 0";

    #[test]
    fn status_and_stat_give_state_uids_pending_and_flags() {
        let status = "Name:\tsleep\nState:\tS (sleeping)\nUid:\t1000\t1001\t1002\t1003\n\
                      SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n";
        let p = Proc::parse(status, STAT).unwrap();
        assert_eq!(p.state, 'S');
        assert_eq!(p.uids, [1000, 1001, 1002]);
        assert_eq!(p.pending, 0x100);
        assert_eq!(p.flags, 4194560);
        assert!(p.doomed(), "SIGKILL pending");
        let quiet = "State:\tR (running)\nUid:\t0\t0\t0\t0\nSigPnd:\t0\nShdPnd:\t0\n";
        assert!(!Proc::parse(quiet, STAT).unwrap().doomed());
        let zombie = "State:\tZ (zombie)\nUid:\t0\t0\t0\t0\n";
        assert!(Proc::parse(zombie, STAT).unwrap().doomed());
        let exiting = "7 (x) R 1 7 7 0 -1 4194564 0";
        assert!(Proc::parse(quiet, exiting).unwrap().doomed(), "PF_EXITING");
        assert_eq!(Proc::parse("State:\tR\n", STAT), None, "no uids");
        assert_eq!(Proc::parse(quiet, "7 (x"), None, "no end of the name");
    }

    #[test]
    fn this_process_is_never_among_the_living_it_reports() {
        let me = std::process::id();
        let uid = nix::unistd::getuid().as_raw();
        assert!(living(uid, me)
            .iter()
            .all(|l| !l.starts_with(&format!("{me} "))));
    }

    #[test]
    fn a_child_of_the_uid_lives_until_killed_and_is_doomed_at_once_after() {
        use nix::sys::signal::{kill, Signal};
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let uid = nix::unistd::getuid().as_raw();
        let seen = || {
            living(uid, std::process::id())
                .iter()
                .any(|l| l.starts_with(&format!("{pid} ")))
        };
        assert!(seen());
        // Never `kill(-1)` here: on the host that is every process of the user.
        kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
        assert!(!seen(), "killed: doomed or dead right after the call");
        child.wait().unwrap();
        assert!(!seen());
    }
}
