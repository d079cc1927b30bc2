//! A Landlock domain of its own for a writing agent's processes (DESIGN.md threat model 3).
//!
//! The workers' containers share the pod's PID namespace and uid, so without more one worker's
//! process could open another's `/proc/<pid>/root`, `cwd`, `fd` or `mem` and write outside its
//! own scope. A process inside a Landlock domain gets no ptrace-mode access to a process outside
//! it or in a sibling domain, while processes of the same domain (or of one nested in it) still
//! reach each other: a worker still inspects its own commands, and a judge, in no domain, still
//! sees every worker's processes.
//!
//! The domain is entered by the exec service at its start ([`super::serve`]) and, on the path
//! without the service, by each command's exec through [`ENTER_SUBCOMMAND`]
//! (`flowerbox __enter-domain [--required] -- PROGRAM ARGS…`), which enters a domain and then
//! `exec`s the program. The ruleset handles only `MakeBlock` (making block devices, which no
//! agent can do anyway: no capability) and allows nothing of it, so apart from the ptrace scope
//! it changes nothing the processes may do; `no_new_privs` comes with it (the kernel requires
//! it of a process without `CAP_SYS_ADMIN`; the agents' commands run with no capability and
//! gain none by `exec`).

use landlock::{AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetStatus};
use std::ffi::OsString;

/// The hidden subcommand that enters a domain and then runs its arguments.
pub const ENTER_SUBCOMMAND: &str = "__enter-domain";

/// The flag (of both subcommands) that makes a domain a condition: without Landlock nothing
/// runs.
pub const REQUIRED_FLAG: &str = "--required";

/// The exec service's flag to enter a domain (best effort unless [`REQUIRED_FLAG`] follows).
pub const SERVICE_FLAG: &str = "--own-domain";

/// How much a domain is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Without Landlock the process does not run (a scoped worker: its scope depends on it).
    Required,
    /// Without Landlock the process runs anyway (an unscoped writer, which can write the whole
    /// workspace anyway).
    BestEffort,
}

impl Need {
    /// The arguments that ask for it after [`ENTER_SUBCOMMAND`] or [`SERVICE_FLAG`].
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Need::Required => &[REQUIRED_FLAG],
            Need::BestEffort => &[],
        }
    }
}

/// Entering a domain failed.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// The kernel has no Landlock (or it is disabled), or refused the ruleset.
    #[error("Landlock is unavailable: {0}")]
    Unavailable(String),
}

/// Puts the calling process (and every process it starts from now on) in a new Landlock
/// domain, with `no_new_privs`. `Ok(())` only when the domain is in force.
pub fn enter() -> Result<(), DomainError> {
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::MakeBlock)
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self())
        .map_err(|e| DomainError::Unavailable(e.to_string()))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(DomainError::Unavailable(format!("ruleset {other:?}"))),
    }
}

/// Whether this kernel gives processes Landlock domains (asked once: a ruleset is made, and
/// nothing is restricted). On a local engine the containers run on this kernel.
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::MakeBlock)
            .and_then(|r| r.create())
            .is_ok()
    })
}

/// Enters a domain as `need` says; `Err` with what to say when the process must not go on.
pub fn enter_as(need: Need) -> Result<(), String> {
    match (enter(), need) {
        (Ok(()), _) => Ok(()),
        (Err(e), Need::Required) => Err(format!(
            "flowerbox: {e}; this agent's write scope depends on a Landlock domain of its own \
             (Linux 5.13 or later, with landlock among the LSMs), so nothing runs without it"
        )),
        (Err(_), Need::BestEffort) => Ok(()),
    }
}

/// `flowerbox __enter-domain [--required] -- PROGRAM ARGS…`: enters a domain, then `exec`s
/// PROGRAM; returns only on failure, with the exit code (126 as a shell's "cannot execute").
pub fn enter_and_exec(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter().peekable();
    let need = if args.peek().is_some_and(|a| a == REQUIRED_FLAG) {
        args.next();
        Need::Required
    } else {
        Need::BestEffort
    };
    if args.peek().is_some_and(|a| a == "--") {
        args.next();
    }
    let Some(program) = args.next() else {
        say(&format!("flowerbox {ENTER_SUBCOMMAND}: no program to run"));
        return 2;
    };
    if let Err(why) = enter_as(need) {
        say(&why);
        return 126;
    }
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(&program).args(args).exec();
    say(&format!(
        "flowerbox {ENTER_SUBCOMMAND}: {}: {e}",
        program.to_string_lossy()
    ));
    126
}

/// A line on stderr, through the output boundary like every other line flowerbox writes.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(crate::shown::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_asks_for_the_flag_and_best_effort_for_nothing() {
        assert_eq!(Need::Required.args(), [REQUIRED_FLAG]);
        assert!(Need::BestEffort.args().is_empty());
    }

    #[test]
    fn without_a_program_nothing_runs() {
        assert_eq!(enter_and_exec(vec![REQUIRED_FLAG.into(), "--".into()]), 2);
    }
}
