//! Workflows (seeds 002, 003): steps, clarify, the goal guard, and the `go` pipeline.
