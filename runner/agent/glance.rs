//! TEMPORARY placeholder replaced by the persistence branch's implementation at merge.

/// Placeholder.
pub fn is_ephemeral(command: &str) -> bool {
    let c = command.trim();
    !c.is_empty()
        && (c.starts_with("git status") || c.starts_with("ls") || c.starts_with("cat "))
        && !c.contains('>')
        && !c.contains("rm ")
}
