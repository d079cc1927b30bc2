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

    /// The context length the server says it serves `default_model` with, when it says (a
    /// local server's `/props` or `/v1/models`); `None` when unknown. Used to size `max_tokens`
    /// and the handoff window of models outside the catalogue. Never fails: a server that says
    /// nothing is `None`.
    async fn server_context_window(&self) -> Option<u64> {
        None
    }

    /// Streams one assistant turn. Deltas go to `sink` as they arrive. `cancel` aborts the call
    /// (returns [`ModelError::Interrupted`]).
    async fn stream_turn(
        &self,
        req: &Request,
        sink: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<Turn, ModelError>;
}
