//! `flowerbox gc`'s report, whatever the backend: each backend's `gc` (the Docker one in
//! `docker/gc.rs`) removes what dead runs left and says so here.

/// What a backend's `gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// One line per removed container.
    pub removed: Vec<String>,
    /// One line per container kept (owner alive or unknown).
    pub kept: Vec<String>,
    /// One line per orphan that could not be removed.
    pub failed: Vec<String>,
}

impl GcReport {
    /// Adds `other`'s lines after this report's.
    pub fn absorb(&mut self, other: GcReport) {
        self.removed.extend(other.removed);
        self.kept.extend(other.kept);
        self.failed.extend(other.failed);
    }

    /// Printable lines: removed, then failed, then kept.
    pub fn lines(&self) -> Vec<String> {
        self.removed
            .iter()
            .chain(&self.failed)
            .chain(&self.kept)
            .cloned()
            .collect()
    }

    /// `gc`'s exit message when something could not be removed: counted in items (a
    /// container, a worktree or a branch), not containers, since `failed` holds all three.
    pub fn failure_summary(&self) -> Option<String> {
        (!self.failed.is_empty()).then(|| format!("gc: {} 项删不掉(见上)", self.failed.len()))
    }
}
