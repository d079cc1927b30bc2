//! [`Role`]: who an agent is. A domain fact every layer names (the sandbox's container rights,
//! the session store's owner column, the model client's `x-flowerbox-role` header), so it lives
//! in a leaf of its own rather than in any of them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Who an agent is. Sent as the `x-flowerbox-role` header, decides tools, guards and container
/// rights (DESIGN.md role table; seed 001 "角色").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Asks until the request is clear; writes nothing.
    Clarifier,
    /// The main thread: splits and dispatches work, never writes.
    Coordinator,
    /// Does the hands-on work.
    Worker,
    /// Sets the goal and judges each round.
    Judge,
    /// The read-only aside oracle.
    Oracle,
    /// The single agent of `flowerbox once`.
    Once,
}

impl Role {
    /// The lowercase name used in headers, labels and the session store.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Clarifier => "clarifier",
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
            Role::Judge => "judge",
            Role::Oracle => "oracle",
            Role::Once => "once",
        }
    }

    /// Parses [`Role::as_str`] back.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "clarifier" => Role::Clarifier,
            "coordinator" => Role::Coordinator,
            "worker" => Role::Worker,
            "judge" => Role::Judge,
            "oracle" => Role::Oracle,
            "once" => Role::Once,
            _ => return None,
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
