//! The model layer: a [`Provider`] streams one assistant turn over a transport, with retries,
//! network-down waiting, usage and cost. Agents talk to models only through this module
//! (issue "Model layer").

pub mod error;
pub mod price;
pub mod provider;
pub mod types;

pub use error::ModelError;
pub use provider::{EventSink, Provider};
pub use types::*;
