//! Test support for the terminal tests and `examples/console_smoke.rs`: an in-memory session
//! store and a model that answers aside questions by echoing them (no network, no Docker).
#![allow(dead_code)]

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use flowerbox::model::{
    ContentBlock, Message, ModelError, Provider, Request, StopReason, Turn, Usage,
};
use flowerbox::session::{NoticeKind, SessionError, SessionMeta, SessionStore, TrimPolicy};

/// Sessions in memory.
#[derive(Default)]
pub struct MemStore {
    sessions: Mutex<HashMap<String, (SessionMeta, Vec<Message>)>>,
}

impl MemStore {
    /// Sessions created so far.
    pub fn count(&self) -> usize {
        self.sessions.lock().unwrap().len()
    }
}

impl SessionStore for MemStore {
    fn create(&self, meta: &SessionMeta) -> Result<String, SessionError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.sessions
            .lock()
            .unwrap()
            .insert(id.clone(), (meta.clone(), vec![]));
        Ok(id)
    }
    fn append(&self, s: &str, msg: &Message, _c: Option<u64>) -> Result<(), SessionError> {
        self.sessions
            .lock()
            .unwrap()
            .get_mut(s)
            .ok_or(SessionError::NotFound(s.into()))?
            .1
            .push(msg.clone());
        Ok(())
    }
    fn append_notice(&self, _s: &str, _k: NoticeKind, _t: &str) -> Result<(), SessionError> {
        Ok(())
    }
    fn load_raw(&self, s: &str) -> Result<Vec<Message>, SessionError> {
        Ok(self
            .sessions
            .lock()
            .unwrap()
            .get(s)
            .ok_or(SessionError::NotFound(s.into()))?
            .1
            .clone())
    }
    fn load(&self, s: &str, _p: &TrimPolicy) -> Result<Vec<Message>, SessionError> {
        self.load_raw(s)
    }
    fn fork(&self, s: &str) -> Result<String, SessionError> {
        let v = self
            .sessions
            .lock()
            .unwrap()
            .get(s)
            .cloned()
            .ok_or(SessionError::NotFound(s.into()))?;
        let id = uuid::Uuid::new_v4().to_string();
        self.sessions.lock().unwrap().insert(id.clone(), v);
        Ok(id)
    }
    fn meta(&self, s: &str) -> Result<Option<SessionMeta>, SessionError> {
        Ok(self.sessions.lock().unwrap().get(s).map(|v| v.0.clone()))
    }
    fn last_context(&self, _s: &str) -> Result<Option<u64>, SessionError> {
        Ok(None)
    }
}

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
        Ok(Turn {
            content: vec![ContentBlock::text(format!("旁路回答:{question}"))],
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: Some(100),
                output_tokens: Some(10),
                ..Default::default()
            },
            model: req.model.clone(),
            retried_errors: vec![],
            truncated_tool_use: false,
        })
    }
}

/// A shared echo oracle.
pub fn echo_oracle() -> Arc<EchoOracle> {
    Arc::new(EchoOracle::default())
}
