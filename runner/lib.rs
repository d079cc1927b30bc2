//! flowerbox: flower's long-horizon coding-agent runs as one Rust binary, where every agent runs
//! in its own Docker container. See `DESIGN.md` in the repository for the architecture.
//!
//! Module map (data flow order): [`cli`] parses flower's command line; [`creds`] finds and
//! probes credentials; [`flow`] builds and runs workflows (clarify, goal, work, judge);
//! [`agent`] runs one agent (the loop, tools, guards, workbench); [`model`] talks to the model;
//! [`sandbox`] executes commands in containers; [`session`] and [`record`] persist sessions,
//! the manifest and lineage; [`channel`] is the human channel; [`term`] renders to a terminal.
//! `testkit` (hidden) holds the test doubles the unit tests, `tests/` and the examples share.
#![deny(missing_docs)]

pub mod agent;
pub mod app;
pub mod channel;
pub mod cli;
pub mod creds;
pub mod flow;
pub mod fsroot;
pub mod isolate;
pub mod mcp;
pub mod model;
pub mod record;
pub mod sandbox;
pub mod session;
pub mod term;
#[doc(hidden)]
pub mod testkit;
