//! Ephemeral ("glance") commands (seed 001 "一次性命令"; flower `docs/en/guide/context.md`,
//! "Counter-example: do the quick-glance work yourself").
//!
//! [`is_ephemeral`] is the ONE predicate behind two decisions that must always agree: which
//! commands the coordinator's restricted Bash may run itself, and which Bash results trim
//! replaces with an expiry note on resume. Allowed-but-never-expired would leave a stale
//! `git status` in the context forever; expired-but-not-allowed would make the coordinator pay
//! a subagent launch for one `ls`.
//!
//! The command is split by a small shell lexer that respects quotes, so `'$(x)'` is text while
//! `$(x)` is refused, and `"-delete"` is still `-delete`. Every segment of a compound command
//! (`&&`, `||`, `;`, `|`, newline) must be a read-only command on the list below, with no
//! option that writes, executes or never ends. Command substitution, process substitution,
//! background `&`, grouping, here-documents and redirection to anything but `/dev/null` or
//! another descriptor (`2>&1`) are refused outright.

use std::fmt;

mod commands;
mod git;
mod lex;
mod sed;
#[cfg(test)]
mod tests;

use commands::check_segment;
use lex::{lex, split_segments};

/// Why a command is not ephemeral; the text is meant for the model (the glance guard sends it
/// back as the tool result of a refused call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(why.into()))
}

/// True when `command` only looks at state that goes stale: every segment is a read-only,
/// finite command (see the module doc). Empty or blank commands are not ephemeral.
pub fn is_ephemeral(command: &str) -> bool {
    check(command).is_ok()
}

/// [`is_ephemeral`] with the reason for a refusal.
///
/// # Errors
/// [`Refusal`] naming the first construct or command that is not a glance.
pub fn check(command: &str) -> Result<(), Refusal> {
    let tokens = lex(command)?;
    let segments = split_segments(tokens)?;
    if segments.is_empty() {
        return refuse("empty command");
    }
    for seg in &segments {
        check_segment(seg)?;
    }
    Ok(())
}
