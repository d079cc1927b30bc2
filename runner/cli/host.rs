//! [`Host`]: everything the command line reads from its surroundings, captured once, so the
//! rest of the code (and its tests) never reads or writes the process environment.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;

use crate::creds::Lookup;

/// The process's surroundings.
#[derive(Debug, Clone)]
pub struct Host {
    /// Environment variables (non-UTF-8 ones are dropped).
    pub vars: BTreeMap<String, String>,
    /// The current directory.
    pub cwd: PathBuf,
    /// Whether stdin is a terminal (decides prompts, interactive setup and the probe).
    pub stdin_is_terminal: bool,
}

impl Host {
    /// Captures the real process's variables, current directory and stdin kind.
    ///
    /// Errors: the current directory is gone or unreadable.
    pub fn from_process() -> std::io::Result<Self> {
        Ok(Self {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            cwd: std::env::current_dir()?,
            stdin_is_terminal: std::io::stdin().is_terminal(),
        })
    }

    /// A non-empty variable.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The credential lookup over these variables and this directory.
    pub fn lookup(&self) -> Lookup {
        Lookup::new(self.vars.clone(), self.cwd.clone())
    }
}
