//! The agent runtime (flower's `Runtime`): runs one agent from a prompt, or a resumed session,
//! to the end of its turn, with tools, guards, spill and the workbench.

pub mod event;
pub mod glance;

pub use event::{Event, EventKind, EventSink};
