//! The seccomp profiles of every agent container, built here rather than taken from the
//! engine: a profile given through `security_opt` replaces the engine's default entirely.
//! - The read-only roles' ([`read_only_profile`]: judge, coordinator; see [`super::readonly`]):
//!   a read-only container holds `CAP_SYS_PTRACE` and `CAP_DAC_READ_SEARCH` for its inspector,
//!   for which the engine's default would switch on exactly the calls that reach into another
//!   process.
//! - The writing roles' ([`writer_profile`]: workers, `once`): the same without [`REFUSED`]
//!   (a worker may debug its own processes, as under the engine's default), so io_uring and
//!   the rest of [`KERNEL_SURFACE`] are refused whatever the engine's own default is (Docker
//!   before 25 and Podman before 4.x allow io_uring).
//!
//! A profile allows by default and refuses, with `EPERM`:
//! - [`REFUSED`] (read-only roles only): every call that reads or writes another process (`ptrace`,
//!   `process_vm_readv`/`writev`, `process_madvise`), takes one of its descriptors
//!   (`pidfd_getfd`), compares its kernel objects (`kcmp`), or opens a file by handle
//!   (`open_by_handle_at`: with `CAP_DAC_READ_SEARCH` the "shocker" escape, any file of the
//!   host's filesystem);
//! - [`KERNEL_SURFACE`]: the calls Docker's documentation lists as blocked by its default
//!   profile (docs.docker.com "Seccomp security profiles for Docker", "Significant syscalls
//!   blocked by the default profile"), plus io_uring and the new mount API: kernel attack
//!   surface a read-only role never needs;
//! - `clone` with any namespace flag (one rule per flag, as seccomp compares one masked value
//!   per rule), and `clone3` answers `ENOSYS` so the C library falls back to `clone`, whose flags
//!   can be checked (`clone3` passes them in memory).
//!
//! Rules are given for the native architecture and its 32-bit ABIs (`archMap`): otherwise a
//! process could make the same calls through `int 0x80` under the i386 numbering, which the
//! default action would allow. Names a kernel or architecture does not know are skipped by the
//! engine.

use serde_json::{json, Value};
use std::sync::LazyLock;

/// System calls a read-only container may never make: each reaches into another process or
/// opens a file by handle (module doc).
pub const REFUSED: &[&str] = &[
    "kcmp",
    "open_by_handle_at",
    "pidfd_getfd",
    "process_madvise",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
];

/// Kernel surface refused besides [`REFUSED`] (module doc).
pub const KERNEL_SURFACE: &[&str] = &[
    "_sysctl",
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "ioperm",
    "iopl",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "syslog",
    "sysfs",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// The `CLONE_NEW*` flags: `clone` with any of them is refused.
const CLONE_NAMESPACE_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWTIME", 0x0000_0080),
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];

/// `EPERM`.
const EPERM: i64 = 1;
/// `ENOSYS`.
const ENOSYS: i64 = 38;

static PROFILE: LazyLock<String> = LazyLock::new(|| profile(true).to_string());
static WRITER: LazyLock<String> = LazyLock::new(|| profile(false).to_string());

/// The read-only roles' profile as JSON text, for `security_opt: ["seccomp=<json>"]`.
pub fn read_only_profile() -> &'static str {
    &PROFILE
}

/// The writing roles' profile as JSON text (module doc).
pub fn writer_profile() -> &'static str {
    &WRITER
}

/// A profile (module doc); `read_only` adds [`REFUSED`].
fn profile(read_only: bool) -> Value {
    let mut rules = Vec::new();
    if read_only {
        rules.push(json!({
            "names": REFUSED,
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "comment": "flowerbox: read-only roles never reach into another process",
        }));
    }
    rules.extend([
        json!({
            "names": KERNEL_SURFACE,
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "comment": "flowerbox: kernel surface no agent needs (io_uring among it)",
        }),
        json!({
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": ENOSYS,
            "comment": "flowerbox: fall back to clone, whose flags can be checked",
        }),
    ]);
    rules.extend(CLONE_NAMESPACE_FLAGS.iter().map(|(flag, bit)| {
        json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [{"index": 0, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}],
            "comment": format!("flowerbox: no new namespace ({flag})"),
        })
    }));
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64",
             "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        ],
        "syscalls": rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed() -> Value {
        serde_json::from_str(read_only_profile()).unwrap()
    }

    /// Names refused with `errno`, unconditionally.
    fn refused_with(p: &Value, errno: i64) -> Vec<String> {
        p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["action"] == "SCMP_ACT_ERRNO" && r["errnoRet"] == errno && r.get("args").is_none()
            })
            .flat_map(|r| r["names"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn every_call_into_another_process_and_the_shocker_call_are_refused() {
        let p = parsed();
        let refused = refused_with(&p, EPERM);
        for call in REFUSED.iter().chain(KERNEL_SURFACE) {
            assert!(refused.iter().any(|r| r == call), "{call} not refused");
        }
        for call in [
            "ptrace",
            "open_by_handle_at",
            "pidfd_getfd",
            "unshare",
            "setns",
        ] {
            assert!(refused.iter().any(|r| r == call), "{call}");
        }
        assert_eq!(refused_with(&p, ENOSYS), ["clone3"]);
        // What a shell, lsof and curl need is not in any refusing rule.
        for call in [
            "read",
            "openat",
            "execve",
            "setresuid",
            "capset",
            "kill",
            "socket",
        ] {
            assert!(!refused.iter().any(|r| r == call), "{call}");
        }
    }

    #[test]
    fn the_writer_profile_refuses_io_uring_and_the_kernel_surface_but_not_ptrace() {
        let p: Value = serde_json::from_str(writer_profile()).unwrap();
        let refused = refused_with(&p, EPERM);
        for call in KERNEL_SURFACE {
            assert!(refused.iter().any(|r| r == call), "{call} not refused");
        }
        for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
            assert!(refused.iter().any(|r| r == call), "{call}");
        }
        for call in REFUSED {
            assert!(!refused.iter().any(|r| r == call), "{call} refused");
        }
        assert_eq!(refused_with(&p, ENOSYS), ["clone3"]);
        assert_eq!(p["archMap"], parsed()["archMap"]);
        let clones = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["names"] == json!(["clone"]))
            .count();
        assert_eq!(clones, CLONE_NAMESPACE_FLAGS.len());
    }

    #[test]
    fn clone_is_refused_for_each_namespace_flag_and_the_32_bit_abis_are_covered() {
        let p = parsed();
        let clone_rules: Vec<&Value> = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["names"] == json!(["clone"]))
            .collect();
        assert_eq!(clone_rules.len(), CLONE_NAMESPACE_FLAGS.len());
        let user = clone_rules
            .iter()
            .find(|r| r["args"][0]["value"] == 0x1000_0000u64)
            .expect("CLONE_NEWUSER");
        assert_eq!(user["args"][0]["valueTwo"], 0x1000_0000u64);
        assert_eq!(user["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        let x86 = &p["archMap"][0];
        assert_eq!(x86["architecture"], "SCMP_ARCH_X86_64");
        assert!(x86["subArchitectures"]
            .as_array()
            .unwrap()
            .contains(&json!("SCMP_ARCH_X86")));
    }
}
