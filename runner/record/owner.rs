//! Run ownership: the owner identity a run records on everything it leaves outside this
//! process — its containers and networks (as labels), its worktrees (in their lock) — so that a
//! later start (or `flowerbox gc`) can tell an orphan (its owner process is provably dead) from
//! something a live run still uses (issue "Lifecycle"). The label keys are here too: they are
//! the run's records, whichever backend carries them.
//!
//! An owner is host name + boot id + pid + the pid's start time in clock ticks since boot
//! (`/proc/<pid>/stat` field 22). A pid that is gone, or reused by a process with another start
//! time, or a different boot, proves death; a different host proves nothing.

use std::collections::HashMap;
use std::io;

/// Label: the run id.
pub const LABEL_RUN: &str = "flowerbox.run";
/// Label: the canonical workspace path.
pub const LABEL_WORKSPACE: &str = "flowerbox.workspace";
/// Label: owner host name.
pub const LABEL_OWNER_HOST: &str = "flowerbox.owner.host";
/// Label: owner boot id (`/proc/sys/kernel/random/boot_id`).
pub const LABEL_OWNER_BOOT: &str = "flowerbox.owner.boot";
/// Label: owner pid.
pub const LABEL_OWNER_PID: &str = "flowerbox.owner.pid";
/// Label: owner start time, clock ticks since boot.
pub const LABEL_OWNER_START: &str = "flowerbox.owner.start";

/// The process that owns a run's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Host name.
    pub host: String,
    /// Kernel boot id.
    pub boot_id: String,
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Whether an owner still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The very process is still running.
    Alive,
    /// Provably gone; the text says why, for the user (`主人进程 123 已经没了`).
    Dead(String),
    /// Cannot be decided here (another host, missing labels); never removed automatically.
    /// The text says why, for the user.
    Unknown(String),
}

fn boot_id() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

/// Start time (field 22 of `/proc/<pid>/stat`), parsed after the last `)` because the command
/// name may contain spaces and parentheses.
pub fn start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc stat"))
}

fn parse_start_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    // After ")": field 3 (state) is index 0, so field 22 is index 19.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

impl Owner {
    /// This process.
    pub fn current() -> io::Result<Owner> {
        Self::of_pid(std::process::id())
    }

    /// Another process on this host.
    pub fn of_pid(pid: u32) -> io::Result<Owner> {
        Ok(Owner {
            host: host_name(),
            boot_id: boot_id()?,
            pid,
            start_ticks: start_ticks(pid)?,
        })
    }

    /// Adds the owner labels.
    pub fn add_labels(&self, labels: &mut HashMap<String, String>) {
        labels.insert(LABEL_OWNER_HOST.into(), self.host.clone());
        labels.insert(LABEL_OWNER_BOOT.into(), self.boot_id.clone());
        labels.insert(LABEL_OWNER_PID.into(), self.pid.to_string());
        labels.insert(LABEL_OWNER_START.into(), self.start_ticks.to_string());
    }

    /// Reads the owner labels; `None` when any is missing or malformed.
    pub fn from_labels(labels: &HashMap<String, String>) -> Option<Owner> {
        Some(Owner {
            host: labels.get(LABEL_OWNER_HOST)?.clone(),
            boot_id: labels.get(LABEL_OWNER_BOOT)?.clone(),
            pid: labels.get(LABEL_OWNER_PID)?.parse().ok()?,
            start_ticks: labels.get(LABEL_OWNER_START)?.parse().ok()?,
        })
    }

    /// Decides liveness as seen from this host.
    pub fn liveness(&self) -> Liveness {
        let here = host_name();
        if self.host != here {
            return Liveness::Unknown(format!("属于另一台机器 {}", self.host));
        }
        match boot_id() {
            Ok(b) if b != self.boot_id => {
                return Liveness::Dead(format!("主人进程 {} 是重启之前的", self.pid))
            }
            Ok(_) => {}
            Err(e) => return Liveness::Unknown(format!("读不出 boot id:{e}")),
        }
        match start_ticks(self.pid) {
            Ok(t) if t == self.start_ticks => Liveness::Alive,
            Ok(_) => Liveness::Dead(format!("主人进程 {} 已经换成别的进程了", self.pid)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Liveness::Dead(format!("主人进程 {} 已经没了", self.pid))
            }
            Err(e) => Liveness::Unknown(format!("读不出主人进程 {}:{e}", self.pid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_round_trips() {
        let me = Owner::current().unwrap();
        let mut labels = HashMap::new();
        me.add_labels(&mut labels);
        let back = Owner::from_labels(&labels).unwrap();
        assert_eq!(back, me);
        assert_eq!(back.liveness(), Liveness::Alive);
    }

    #[test]
    fn reused_pid_gone_pid_and_foreign_host() {
        let me = Owner::current().unwrap();
        let reused = Owner {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert_eq!(
            reused.liveness(),
            Liveness::Dead(format!("主人进程 {} 已经换成别的进程了", me.pid))
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner { pid, ..me.clone() };
        assert_eq!(
            gone.liveness(),
            Liveness::Dead(format!("主人进程 {pid} 已经没了"))
        );
        let foreign = Owner {
            host: format!("{}-elsewhere", me.host),
            ..me.clone()
        };
        assert_eq!(
            foreign.liveness(),
            Liveness::Unknown(format!("属于另一台机器 {}", foreign.host))
        );
        let rebooted = Owner {
            boot_id: "other-boot".into(),
            ..me.clone()
        };
        assert_eq!(
            rebooted.liveness(),
            Liveness::Dead(format!("主人进程 {} 是重启之前的", me.pid))
        );
    }

    #[test]
    fn missing_labels_give_no_owner() {
        let mut labels = HashMap::new();
        labels.insert(LABEL_OWNER_PID.to_string(), "12".to_string());
        assert_eq!(Owner::from_labels(&labels), None);
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let fields: Vec<String> = (3..=25).map(|i| i.to_string()).collect();
        let stat = format!("77 (a) b (c) {}", fields.join(" "));
        assert_eq!(parse_start_ticks(&stat), Some(22));
        assert_eq!(parse_start_ticks("77 (x) S 1"), None);
    }
}
