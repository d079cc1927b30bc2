//! Test support for the terminal tests and `examples/console_smoke.rs`: the in-memory session
//! store (from `flowerbox_testkit`) and a model that answers aside questions by echoing them
//! (no network, no Docker).
#![allow(dead_code)]

use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use flowerbox::model::{ContentBlock, ModelError, Provider, Request, Turn};
use flowerbox_testkit::turn_of;
pub use flowerbox_testkit::MemStore;

/// Answers every request with `旁路回答:<the text after the last "问题:">`, and records the
/// requests it saw.
#[derive(Default)]
pub struct EchoOracle {
    /// Every request, in order.
    pub seen: Mutex<Vec<Request>>,
    /// How long each answer takes.
    pub delay: std::time::Duration,
}

#[async_trait]
impl Provider for EchoOracle {
    fn name(&self) -> &str {
        "echo"
    }
    fn default_model(&self) -> &str {
        "echo-model"
    }
    async fn stream_turn(
        &self,
        req: &Request,
        _sink: flowerbox::model::provider::EventSink<'_>,
        _cancel: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        self.seen.lock().unwrap().push(req.clone());
        tokio::time::sleep(self.delay).await;
        let prompt = req.messages.last().map(|m| m.text()).unwrap_or_default();
        let question = prompt
            .rsplit("问题:")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        Ok(turn_of(
            vec![ContentBlock::text(format!("旁路回答:{question}"))],
            &req.model,
        ))
    }
}

/// A shared echo oracle.
pub fn echo_oracle() -> Arc<EchoOracle> {
    Arc::new(EchoOracle::default())
}
