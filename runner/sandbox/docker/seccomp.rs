//! The seccomp profile of the read-only roles' containers (judge, coordinator; see
//! [`super::readonly`]): Docker's default profile minus what reaches into another process.
//!
//! A profile given through `security_opt` replaces the engine's default entirely, so this one is
//! derived from Docker's own: `seccomp-default.json` beside this file is moby's
//! `profiles/seccomp/default.json` (github.com/moby/profiles, commit `cd3bed80`, Apache License
//! 2.0), unmodified. [`read_only_profile`] then
//!
//! 1. drops every rule that Docker enables only for a capability (`includes.caps`): a read-only
//!    container holds `CAP_SYS_PTRACE` and `CAP_DAC_READ_SEARCH` for its inspector, which would
//!    otherwise turn on `ptrace`, `process_vm_writev`, `pidfd_getfd`, `kcmp`,
//!    `process_madvise` and `open_by_handle_at` (with `CAP_DAC_READ_SEARCH`, the "shocker"
//!    escape: any file of the host's filesystem opened by handle);
//! 2. removes [`REFUSED`] from the remaining rules (the default allows `ptrace` and
//!    `process_vm_*` on every kernel since 4.8);
//! 3. refuses [`REFUSED`] explicitly with `EPERM`.
//!
//! Everything else, including the rules that apply without `CAP_SYS_ADMIN` (`clone` flags,
//! `clone3` answering `ENOSYS`), stays as Docker has it.

use serde_json::{json, Value};
use std::sync::LazyLock;

/// Docker's default profile (see the module doc).
const DOCKER_DEFAULT: &str = include_str!("seccomp-default.json");

/// System calls a read-only container may never make: each reads or writes another process
/// (`ptrace`, `process_vm_readv`/`writev`, `process_madvise`), takes one of its descriptors
/// (`pidfd_getfd`), compares its kernel objects (`kcmp`) or opens a file by handle
/// (`open_by_handle_at`).
pub const REFUSED: &[&str] = &[
    "kcmp",
    "open_by_handle_at",
    "pidfd_getfd",
    "process_madvise",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
];

/// `EPERM`, as Docker's default action answers.
const EPERM: i64 = 1;

static PROFILE: LazyLock<String> = LazyLock::new(|| {
    let default: Value =
        serde_json::from_str(DOCKER_DEFAULT).expect("the bundled Docker profile is valid JSON");
    derive(default).to_string()
});

/// The profile as JSON text, for `security_opt: ["seccomp=<json>"]`.
pub fn read_only_profile() -> &'static str {
    &PROFILE
}

/// Steps 1–3 of the module doc on a parsed profile.
fn derive(mut profile: Value) -> Value {
    let rules = profile["syscalls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|rule| {
            rule.pointer("/includes/caps")
                .and_then(Value::as_array)
                .is_none_or(|caps| caps.is_empty())
        })
        .filter_map(|mut rule| {
            let names: Vec<Value> = rule["names"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|n| !n.as_str().is_some_and(|n| REFUSED.contains(&n)))
                .collect();
            if names.is_empty() {
                return None;
            }
            rule["names"] = Value::Array(names);
            Some(rule)
        })
        .chain(std::iter::once(json!({
            "names": REFUSED,
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "comment": "flowerbox: read-only roles never reach into another process",
        })))
        .collect();
    profile["syscalls"] = Value::Array(rules);
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Value {
        serde_json::from_str(read_only_profile()).unwrap()
    }

    /// Names of every rule with `action`.
    fn names(p: &Value, action: &str) -> Vec<String> {
        p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == action)
            .flat_map(|r| r["names"].as_array().unwrap().clone())
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn refused_calls_are_allowed_by_no_rule_and_refused_explicitly() {
        let p = profile();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
        let allowed = names(&p, "SCMP_ACT_ALLOW");
        for call in REFUSED {
            assert!(!allowed.iter().any(|a| a == call), "{call} allowed");
        }
        let refused: Vec<&Value> = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "SCMP_ACT_ERRNO" && r["errnoRet"] == EPERM)
            .collect();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0]["names"], json!(REFUSED));
        assert!(refused[0].get("includes").is_none() && refused[0].get("args").is_none());
        // No rule depends on a capability any more: the engine adds nothing for the inspector's.
        assert!(p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.pointer("/includes/caps").is_none()));
    }

    #[test]
    fn everything_else_is_dockers_default() {
        let default: Value = serde_json::from_str(DOCKER_DEFAULT).unwrap();
        let p = profile();
        for key in ["defaultAction", "defaultErrnoRet", "archMap"] {
            assert_eq!(p[key], default[key], "{key}");
        }
        // The unconditional allow rule loses exactly the refused calls.
        let first = |v: &Value| -> Vec<String> {
            v["syscalls"][0]["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string())
                .collect()
        };
        let (ours, theirs) = (first(&p), first(&default));
        let lost: Vec<&String> = theirs.iter().filter(|n| !ours.contains(n)).collect();
        assert!(
            lost.iter().all(|n| REFUSED.contains(&n.as_str())),
            "{lost:?}"
        );
        for call in [
            "read",
            "openat",
            "execve",
            "setresuid",
            "capset",
            "kill",
            "socket",
        ] {
            assert!(
                names(&p, "SCMP_ACT_ALLOW").iter().any(|n| n == call),
                "{call}"
            );
        }
        // Rules for containers without CAP_SYS_ADMIN stay: clone3 answers ENOSYS.
        assert!(p["syscalls"].as_array().unwrap().iter().any(|r| {
            r["names"] == json!(["clone3"])
                && r["errnoRet"] == 38
                && r.pointer("/excludes/caps").is_some()
        }));
        // The shocker rule is gone, not just emptied.
        assert!(
            !DOCKER_DEFAULT.is_empty()
                && default["syscalls"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["names"] == json!(["open_by_handle_at"])
                        && r.pointer("/includes/caps").is_some())
        );
    }

    #[test]
    fn derive_drops_capability_rules_and_emptied_rules() {
        let input = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "syscalls": [
                {"names": ["read", "ptrace"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
                {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]}}
            ]
        });
        let out = derive(input);
        let rules = out["syscalls"].as_array().unwrap();
        assert_eq!(rules.len(), 3, "{out}");
        assert_eq!(rules[0]["names"], json!(["read"]));
        assert_eq!(rules[1]["names"], json!(["clone"]));
        assert_eq!(rules[2]["action"], "SCMP_ACT_ERRNO");
    }
}
