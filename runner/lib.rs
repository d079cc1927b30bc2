//! flowerbox: flower's long-horizon coding-agent runs as one Rust binary, where every agent runs
//! in its own Docker container. See `DESIGN.md` in the repository for the architecture.
//!
//! Module map, top to bottom (a module uses only modules below it; DESIGN.md "Module graph"
//! has the table, `tests/module_graph.rs` keeps it and this list true): [`cli`] parses
//! flower's command line and chooses the frontend, the sandbox backend and the model
//! configuration; [`term`] is the terminal frontend; [`flow`] builds and runs workflows
//! (clarify, goal, work, judge, `once`); [`channel`] is the human channel; [`creds`] finds and
//! probes credentials; [`isolate`] gives workers git worktrees; [`agent`] runs one agent (the
//! loop, tools, guards, workbench); [`mcp`] runs the project's MCP servers, sandboxed;
//! [`plugin`] reads the plugins that travel with the repository; [`sandbox`] executes commands
//! in containers; [`session`] and [`record`] persist sessions, the manifest and lineage;
//! [`model`] talks to the model; [`shown`] is the one sanitiser and the output boundary
//! (terminal, log, notes); [`glance`], [`signals`], [`role`] (who an agent is) and [`fsroot`]
//! are leaves.
//! The test doubles are crates of their own, not part of the library: `flowerbox-testkit`
//! (`testkit/`, for `tests/` and the examples) and `scripted-model` (`scripted-model/`, the
//! model server the tests, the demo and the benchmarks run against).
#![deny(missing_docs)]
// What is `pub` is the library's interface: anything else is `pub(crate)` or private, so the
// compiler sees dead code. (Output, panics: the workspace lints in Cargo.toml.)
#![warn(unreachable_pub)]

pub mod agent;
pub mod channel;
pub mod cli;
pub mod creds;
pub mod flow;
pub mod fsroot;
pub mod glance;
pub mod isolate;
pub mod mcp;
pub mod model;
pub mod plugin;
pub mod record;
pub mod role;
pub mod sandbox;
pub mod session;
pub mod shown;
pub mod signals;
pub mod term;
