//! Workflows (seeds 002, 003): steps, clarify, the goal guard, and the `go` pipeline.

pub mod brief;
pub mod goal;
pub mod verdict;
