//! Names of project MCP servers and their tools, and the whitelist entries that admit them.
//!
//! A server's tools reach the model as `mcp__<server>__<tool>` (Claude Code's form). The
//! Messages API (and Chat Completions) accept only names matching `^[a-zA-Z0-9_-]{1,64}$`,
//! unique within a request, and the names come from files and processes an agent controls, so
//! they are mapped, never trusted: every other character becomes `_`; a tool name that is then
//! too long or not unique is shortened and given the first 6 hex digits of the SHA-256 of its
//! original name. A server whose mapped name is empty, longer than [`SERVER_MAX`], taken by
//! another server, or `human` (flowerbox's own `mcp__human__ask`/`inbox`) is refused.
//!
//! Whitelist entries ([`crate::agent::AgentSpec::tools`], `once -t`): `mcp__*` admits every
//! project MCP tool, `mcp__<server>` every tool of one server, `mcp__<server>__<tool>` one tool.

use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Prefix of every MCP tool name.
pub const PREFIX: &str = "mcp__";
/// The whitelist entry admitting every project MCP tool.
pub const ALL: &str = "mcp__*";
/// Longest tool name the model APIs accept.
pub const NAME_MAX: usize = 64;
/// Longest server name (after mapping), leaving room for tool names.
pub const SERVER_MAX: usize = 32;
/// Server names flowerbox keeps for itself.
pub const RESERVED: &[&str] = &["human"];

/// Whether `name` is a tool name the model APIs accept.
pub fn is_api_name(name: &str) -> bool {
    (1..=NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// `text` with every character outside `[a-zA-Z0-9_-]` replaced by `_`.
pub fn map_chars(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Why a server name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("服务器名字是空的")]
    Empty,
    /// The mapped name is longer than [`SERVER_MAX`].
    #[error("服务器名字 {0:?} 太长(最多 {SERVER_MAX} 个字符,工具名才放得下)")]
    TooLong(String),
    /// The mapped name is one of [`RESERVED`].
    #[error("服务器名字 {0:?} 留给 flowerbox 自己的人机通道(mcp__human__ask / mcp__human__inbox)")]
    Reserved(String),
    /// The mapped name is another server's.
    #[error("服务器名字 {name:?} 映射成 {id} 后和另一个服务器重名")]
    Taken {
        /// The name as written.
        name: String,
        /// What it maps to.
        id: String,
    },
}

/// The mapped name of server `name`, or why it is refused. `taken` holds the names already
/// given to other servers.
pub fn server_id(name: &str, taken: &HashSet<String>) -> Result<String, NameError> {
    let id = map_chars(name);
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if id.len() > SERVER_MAX {
        return Err(NameError::TooLong(name.to_string()));
    }
    if RESERVED.contains(&id.as_str()) {
        return Err(NameError::Reserved(name.to_string()));
    }
    if taken.contains(&id) {
        return Err(NameError::Taken {
            name: name.to_string(),
            id,
        });
    }
    Ok(id)
}

/// The model-facing names of `tools` (original names, in the server's order) of server `id`:
/// `mcp__<id>__<mapped>`, unique among themselves and not in `reserved`.
pub fn tool_names(id: &str, tools: &[String], reserved: &HashSet<String>) -> Vec<String> {
    let mut used: HashSet<String> = reserved.clone();
    let mut out = Vec::with_capacity(tools.len());
    for original in tools {
        let plain = format!("{PREFIX}{id}__{}", map_chars(original));
        let name = if plain.len() <= NAME_MAX && !original.is_empty() && !used.contains(&plain) {
            plain
        } else {
            hashed(&plain, original, &used)
        };
        used.insert(name.clone());
        out.push(name);
    }
    out
}

/// `plain` cut to fit with `_` and a hash of `original`; more hash digits while taken.
fn hashed(plain: &str, original: &str, used: &HashSet<String>) -> String {
    let digest = hex::encode(Sha256::digest(original.as_bytes()));
    for digits in [6, 10, 16, 32, 64] {
        let keep = NAME_MAX.saturating_sub(digits + 1).min(plain.len());
        let name = format!("{}_{}", &plain[..keep], &digest[..digits]);
        if !used.contains(&name) {
            return name;
        }
    }
    // 64 hex digits of a distinct original never collide; a duplicate original does.
    format!("{}_{}", &plain[..NAME_MAX - 7], &digest[..6])
}

/// Whether `entry` is an MCP whitelist entry (`mcp__*`, `mcp__<server>`,
/// `mcp__<server>__<tool>`) and not one of flowerbox's own `mcp__human__…` tools.
pub fn is_entry(entry: &str) -> bool {
    if entry == ALL {
        return true;
    }
    let Some(rest) = entry.strip_prefix(PREFIX) else {
        return false;
    };
    let server = rest.split("__").next().unwrap_or_default();
    is_api_name(entry) && !server.is_empty() && !RESERVED.contains(&server)
}

/// The server an entry is limited to: `None` for `mcp__*`, else the longest mapped server id
/// among `servers` that the entry names (`mcp__a__b` names server `a__b` if there is one, else
/// `a`).
pub fn entry_server<'a>(entry: &str, servers: &'a [String]) -> Option<&'a str> {
    let rest = entry.strip_prefix(PREFIX)?;
    servers
        .iter()
        .filter(|s| rest == s.as_str() || rest.starts_with(&format!("{s}__")))
        .max_by_key(|s| s.len())
        .map(String::as_str)
}

/// Whether `entries` admit tool `full` (a model-facing name) of server `id`.
pub fn admits(entries: &[String], id: &str, full: &str) -> bool {
    entries
        .iter()
        .any(|e| e == ALL || e == full || e.strip_prefix(PREFIX).is_some_and(|rest| rest == id))
}

/// Whether `entries` may admit any tool of server `id` (so it is worth starting).
pub fn wants_server(entries: &[String], id: &str) -> bool {
    entries.iter().any(|e| {
        e == ALL
            || e.strip_prefix(PREFIX)
                .is_some_and(|rest| rest == id || rest.starts_with(&format!("{id}__")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn server_names_are_mapped_and_checked() {
        let none = set(&[]);
        assert_eq!(server_id("my.db", &none).unwrap(), "my_db");
        assert_eq!(server_id("git-hub", &none).unwrap(), "git-hub");
        assert!(server_id("", &none).is_err());
        assert!(server_id("human", &none)
            .unwrap_err()
            .to_string()
            .contains("人机通道"));
        assert!(server_id("hu man", &set(&["hu_man"])).is_err());
        assert!(server_id(&"x".repeat(33), &none).is_err());
        assert_eq!(server_id("数据库", &none).unwrap(), "___");
    }

    #[test]
    fn tool_names_always_fit_the_api_and_never_collide() {
        let reserved = set(&["Read", "mcp__human__ask"]);
        let tools: Vec<String> = [
            "probe",
            "a.b",
            "a_b",
            "",
            "../../etc",
            "名字",
            &"y".repeat(200),
            &"y".repeat(201),
            "probe",
            "with\nnewline",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let names = tool_names("srv", &tools, &reserved);
        assert_eq!(names[0], "mcp__srv__probe");
        assert_eq!(names[1], "mcp__srv__a_b");
        assert!(names[2].starts_with("mcp__srv__a_b_") && names[2].len() == 20);
        let unique: HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for n in &names {
            assert!(is_api_name(n), "{n}");
            assert!(!reserved.contains(n));
        }
        // Deterministic: the same list gives the same names (prompt caching).
        assert_eq!(names, tool_names("srv", &tools, &reserved));
    }

    #[test]
    fn whitelist_entries() {
        assert!(is_entry("mcp__*"));
        assert!(is_entry("mcp__fixture"));
        assert!(is_entry("mcp__fixture__probe"));
        assert!(!is_entry("mcp__human__ask"));
        assert!(!is_entry("mcp__"));
        assert!(!is_entry("mcp__a b"));
        assert!(!is_entry("Read"));
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(admits(&e(&["mcp__*"]), "s", "mcp__s__t"));
        assert!(admits(&e(&["mcp__s"]), "s", "mcp__s__t"));
        assert!(admits(&e(&["mcp__s__t"]), "s", "mcp__s__t"));
        assert!(!admits(&e(&["mcp__s__u"]), "s", "mcp__s__t"));
        // `mcp__s` does not admit the tools of server `s__x`.
        assert!(!admits(&e(&["mcp__s"]), "s__x", "mcp__s__x__t"));
        assert!(wants_server(&e(&["mcp__s__t"]), "s"));
        assert!(!wants_server(&e(&["mcp__s__t", "Read"]), "t"));
        let servers = e(&["a", "a__b"]);
        assert_eq!(entry_server("mcp__a__b__c", &servers), Some("a__b"));
        assert_eq!(entry_server("mcp__a__c", &servers), Some("a"));
        assert_eq!(entry_server("mcp__z", &servers), None);
    }
}
