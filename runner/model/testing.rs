//! Test helpers for the model layer (compiled for unit tests only): a fake [`HttpTransport`]
//! that replays canned responses chunk by chunk, SSE body builders, and [`replay`], the turn
//! choice of in-process fake providers.

use super::transport::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use super::{Caller, Message, ModelEvent, Request};
use crate::role::Role;
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// How a canned response body ends after its chunks.
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// EOF.
    Clean,
    /// A transport error (connection reset).
    Reset,
    /// Never ends (exercises the idle timeout).
    Hang,
}

/// One canned answer to `post_stream`.
#[derive(Debug, Clone)]
pub(crate) enum Canned {
    /// The connect phase fails.
    Connect,
    /// 200 with `head`, then `frame` again every `every`, forever.
    Drip {
        head: String,
        every: Duration,
        frame: String,
    },
    /// A response with `status`, `headers`, body `chunks`, ending as `end`.
    Resp {
        status: u16,
        headers: Vec<(String, String)>,
        chunks: Vec<Bytes>,
        end: End,
    },
}

impl Canned {
    /// 200 with `body` delivered in chunks of `chunk` bytes (splitting UTF-8 characters).
    pub(crate) fn sse(body: &str, chunk: usize, end: End) -> Canned {
        let chunks = body
            .as_bytes()
            .chunks(chunk)
            .map(Bytes::copy_from_slice)
            .collect();
        Canned::Resp {
            status: 200,
            headers: vec![],
            chunks,
            end,
        }
    }

    /// 200 with `head`, then a `ping` event every `every`, forever.
    pub(crate) fn pings(head: &str, every: Duration) -> Canned {
        Canned::Drip {
            head: head.to_string(),
            every,
            frame: "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string(),
        }
    }

    /// A non-2xx response with a JSON body.
    pub(crate) fn status(status: u16, headers: &[(&str, &str)], body: &str) -> Canned {
        Canned::Resp {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            chunks: vec![Bytes::copy_from_slice(body.as_bytes())],
            end: End::Clean,
        }
    }
}

/// Replays [`Canned`] responses in order and records requests and probes.
#[derive(Default)]
pub(crate) struct FakeTransport {
    responses: Mutex<VecDeque<Canned>>,
    probe_results: Mutex<VecDeque<Result<(), String>>>,
    /// Every request sent, in order.
    pub requests: Mutex<Vec<HttpRequest>>,
    /// Number of probes made.
    pub probes: Mutex<u32>,
}

impl FakeTransport {
    /// A transport answering with `responses` in order (panics when they run out).
    pub(crate) fn new(responses: Vec<Canned>) -> Self {
        FakeTransport {
            responses: Mutex::new(responses.into()),
            ..Default::default()
        }
    }

    /// Probe results in order; `Ok` once they run out.
    pub(crate) fn with_probes(self, probes: Vec<Result<(), String>>) -> Self {
        *self.probe_results.lock().unwrap() = probes.into();
        self
    }

    /// How many requests were sent.
    pub(crate) fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[async_trait]
impl HttpTransport for FakeTransport {
    async fn post_stream(&self, req: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.requests.lock().unwrap().push(req);
        let next = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .expect("no canned response left");
        match next {
            Canned::Connect => Err(TransportError::Connect("connection refused".into())),
            Canned::Drip { head, every, frame } => {
                let head = futures::stream::once(async move { Ok(Bytes::from(head)) });
                let tail = futures::stream::unfold(frame, move |frame| async move {
                    tokio::time::sleep(every).await;
                    Some((Ok(Bytes::from(frame.clone())), frame))
                });
                Ok(HttpResponse {
                    status: 200,
                    headers: vec![],
                    body: head.chain(tail).boxed(),
                })
            }
            Canned::Resp {
                status,
                headers,
                chunks,
                end,
            } => {
                let head = futures::stream::iter(chunks.into_iter().map(Ok));
                let tail = futures::stream::once(async move {
                    match end {
                        End::Clean => None,
                        End::Reset => Some(Err(TransportError::Io("connection reset".into()))),
                        End::Hang => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            None
                        }
                    }
                })
                .filter_map(|x| async move { x });
                Ok(HttpResponse {
                    status,
                    headers,
                    body: head.chain(tail).boxed(),
                })
            }
        }
    }

    async fn probe(
        &self,
        host: &str,
        port: u16,
        _timeout: Duration,
    ) -> Result<(), crate::model::transport::ProbeError> {
        *self.probes.lock().unwrap() += 1;
        let next = self.probe_results.lock().unwrap().pop_front();
        next.unwrap_or(Ok(()))
            .map_err(|reason| crate::model::transport::ProbeError::Connect {
                addr: format!("{host}:{port}"),
                source: std::io::Error::new(std::io::ErrorKind::ConnectionRefused, reason),
            })
    }
}

/// An SSE body from JSON events, each named after its `type` (like the Messages API).
pub(crate) fn sse(events: &[Value]) -> String {
    let mut out = String::new();
    for ev in events {
        let name = ev["type"].as_str().unwrap_or("message");
        out.push_str(&format!("event: {name}\ndata: {ev}\n\n"));
    }
    out
}

/// An SSE body of bare `data:` lines (the Chat Completions style), ending with `[DONE]` when
/// `done`.
pub(crate) fn sse_data(chunks: &[Value], done: bool) -> String {
    let mut out = String::new();
    for c in chunks {
        out.push_str(&format!("data: {c}\n\n"));
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    out
}

/// A minimal request from a worker.
pub(crate) fn request(text: &str) -> Request {
    Request {
        model: String::new(),
        system: vec!["sys".into()],
        messages: vec![Message::user_text(text)],
        tools: vec![],
        max_tokens: 1024,
        caller: Caller {
            role: Role::Worker,
            agent: "worker-1".into(),
        },
    }
}

/// Collects sink events.
#[derive(Default)]
pub(crate) struct Events(pub Mutex<Vec<ModelEvent>>);

impl Events {
    /// The sink closure.
    pub(crate) fn push(&self, e: ModelEvent) {
        self.0.lock().unwrap().push(e);
    }

    /// A copy of everything collected.
    pub(crate) fn all(&self) -> Vec<ModelEvent> {
        self.0.lock().unwrap().clone()
    }
}

/// A complete turn with `content` from `model`: `tool_use` when it calls a tool, `end_turn`
/// otherwise; 100 input and 10 output tokens.
pub(crate) fn turn_of(content: Vec<super::ContentBlock>, model: &str) -> super::Turn {
    use super::{ContentBlock, StopReason, Turn, Usage};
    let stop_reason = if content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    Turn {
        content,
        stop_reason,
        usage: Usage {
            input_tokens: Some(100),
            output_tokens: Some(10),
            ..Default::default()
        },
        model: model.to_string(),
        retried_errors: vec![],
        truncated_tool_use: false,
        malformed_calls: vec![],
        reported_cost_usd: None,
    }
}

/// Replays a script the way the scripted model server does: the answer to `req` is turn k of
/// `turns`, k being the number of assistant messages already in the request. No script, or no
/// turn k, is a 400 naming `who`.
pub(crate) fn replay(
    req: &Request,
    turns: Option<&[Vec<super::ContentBlock>]>,
    who: &str,
) -> Result<super::Turn, super::ModelError> {
    let k = req
        .messages
        .iter()
        .filter(|m| m.role == super::Speaker::Assistant)
        .count();
    let content =
        turns
            .and_then(|t| t.get(k))
            .cloned()
            .ok_or_else(|| super::ModelError::InvalidRequest {
                status: 400,
                message: format!("no turn {k} for {who}"),
                prompt_too_long: false,
            })?;
    Ok(turn_of(content, &req.model))
}
