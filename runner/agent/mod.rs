//! The agent runtime (flower's `Runtime`): runs one agent from a prompt, or a resumed session,
//! to the end of its turn, with tools, guards, spill and the workbench.

pub mod compact;
pub mod confine;
mod dispatch;
pub mod event;
pub mod fanout;
pub mod guard;
mod handoff;
pub mod human;
mod mirror;
pub mod place;
pub mod plant;
pub mod repeat;
pub mod result;
pub mod roles;
pub mod runtime;
pub mod scope;
mod session_loop;
pub mod spec;
mod speculate;
pub mod spill;
mod step_run;
pub mod tools;
mod warm;
pub mod workbench;

#[cfg(test)]
mod loop_tests;
#[cfg(test)]
mod prompt_tests;
#[cfg(test)]
mod warm_tests;

pub use event::{Event, EventKind, EventSink};
pub use place::{PlaceError, Placement, SharedPlacement, WorkerPlace, WorkerSandbox};
pub use runtime::{RunOptions, Runtime, RuntimeConfig, StepError, StepResult};
pub use spec::{AgentSpec, WorkerDef};
pub use workbench::Workbench;
