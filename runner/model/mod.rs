//! The model layer: a [`Provider`] streams one assistant turn over a transport, with retries,
//! network-down waiting, usage and cost. Agents talk to models only through this module
//! (issue "Model layer").
//!
//! - [`anthropic`] (default) and [`openai`] implement [`Provider`]; [`config::build_provider`]
//!   picks one from `FLOWERBOX_PROVIDER` and the provider's variables.
//! - [`transport`] is the seam under both (`HttpTransport`; tests fake it).
//! - [`retry::RetryPolicy`] holds every retry, idle and network-down knob.
//! - [`price`] turns [`Usage`] into dollars; unknown models cost "unknown", never 0.
//! - The scripted model server the tests run against is the `scripted-model` crate beside this
//!   one (a test double, not shipped).

pub mod anthropic;
pub mod catalog;
pub(crate) mod client;
pub mod config;
pub mod error;
pub mod openai;
pub mod price;
pub mod provider;
pub mod retry;
#[cfg(test)]
pub(crate) mod testing;
pub mod tool_name;
pub mod transport;
pub mod types;

pub use config::{build_provider, ProviderOptions};
pub use error::{error_chain, ModelError};
pub use provider::{EventSink, Provider};
pub use retry::RetryPolicy;
pub use tool_name::ToolName;
pub use types::*;
