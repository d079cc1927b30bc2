//! The [`Provider`] trait: one streamed assistant turn per call.

use super::{ModelError, ModelEvent, Request, Turn};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// Receives [`ModelEvent`]s as a turn streams. Called from the provider's task; must not block.
pub type EventSink<'a> = &'a (dyn Fn(ModelEvent) + Send + Sync);

/// A model backend (anthropic, openai). Implementations own retries, backoff, idle timeouts and
/// network-down waiting; a returned `Ok` is always a complete turn (`message_stop` seen), never
/// a partial one.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Provider name (`anthropic`, `openai`).
    fn name(&self) -> &str;

    /// The model id used when a request does not override it.
    fn default_model(&self) -> &str;

    /// Streams one assistant turn. Deltas go to `sink` as they arrive. `cancel` aborts the call
    /// (returns [`ModelError::Interrupted`]).
    async fn stream_turn(
        &self,
        req: &Request,
        sink: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<Turn, ModelError>;
}
