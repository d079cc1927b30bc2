//! The streaming loop shared by every provider: send, classify, decode SSE with an idle timeout,
//! assemble one turn, and retry from the start of the turn until it completes.
//!
//! A provider contributes a [`WireProtocol`] (request body, error body, event assembly); this
//! module owns attempts, backoff, `retry-after`, the network-down wait and cancellation, so the
//! rules in the issue hold for every provider alike.

use super::error::Shared;
use super::retry::{classify_status, one_line, parse_retry_after, AttemptError, RetryPolicy};
use super::transport::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use super::{error_chain, EventSink, ModelError, ModelEvent, Provider, Request, Turn};
use eventsource_stream::{Event as SseEvent, EventStreamError, Eventsource};
use futures::StreamExt;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Error bodies are read up to this size; the rest is irrelevant to classification.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A complete (non-streamed) JSON answer is read up to this size.
const MAX_COMPLETE_BODY: usize = 32 * 1024 * 1024;

/// The header LiteLLM's proxy puts its own price of a call in (USD).
const LITELLM_COST_HEADER: &str = "x-litellm-response-cost";

/// Where a provider sends requests, kept for the reachability probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Full URL of the streaming endpoint.
    pub url: String,
    /// Host to probe.
    pub host: String,
    /// Port to probe.
    pub port: u16,
}

impl Endpoint {
    /// Parses `url`; `Setup` error when it is not an absolute http(s) URL with a host.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, ModelError> {
        let parsed = reqwest::Url::parse(url).map_err(|source| ModelError::BadUrl {
            url: url.to_string(),
            source,
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ModelError::Setup(format!(
                "endpoint URL {url} is not http(s)"
            )));
        }
        let host = parsed
            .host_str()
            .ok_or_else(|| ModelError::Setup(format!("endpoint URL {url} has no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = parsed.port_or_known_default().unwrap_or(443);
        Ok(Endpoint {
            url: url.to_string(),
            host,
            port,
        })
    }
}

/// What differs between providers.
pub(crate) trait WireProtocol: Send + Sync {
    /// The provider's name (`anthropic`, `openai`).
    const NAME: &'static str;
    /// Assembles one attempt's events into a turn.
    type Assembler: TurnAssembler + Send;
    /// Where requests go.
    fn endpoint(&self) -> &Endpoint;
    /// The model id used when a request leaves `model` empty.
    fn default_model(&self) -> &str;
    /// The model `req` asks for: its own, or [`WireProtocol::default_model`] when empty.
    fn model<'a>(&'a self, req: &'a Request) -> &'a str {
        if req.model.is_empty() {
            self.default_model()
        } else {
            &req.model
        }
    }
    /// The HTTP request for `req` (headers include auth and the `x-flowerbox-*` pair).
    fn build(&self, req: &Request) -> HttpRequest;
    /// Understands an error response body.
    fn parse_error(&self, status: u16, body: &str) -> super::retry::ApiError;
    /// A fresh assembler for one attempt.
    fn assembler(&self, req: &Request) -> Self::Assembler;
    /// Whether requests ask for an event stream (`false`: the provider was configured for
    /// complete JSON answers, and the response headers may only come when the turn is done).
    fn streaming(&self) -> bool {
        true
    }
    /// [`super::Provider::server_context_window`], asked over `transport`; `None` by default.
    fn server_context_window<'a>(
        &'a self,
        transport: &'a dyn HttpTransport,
    ) -> impl std::future::Future<Output = Option<u64>> + Send + 'a {
        let _ = transport;
        std::future::ready(None)
    }
    /// Understands a complete, non-streamed JSON answer (`content-type: application/json`
    /// with status 200): a gateway that ignores `stream: true`, or a provider configured not to
    /// stream. `Err` names what is wrong with the body.
    fn complete(
        &self,
        req: &Request,
        body: &Value,
        sink: EventSink<'_>,
    ) -> Result<Turn, AttemptError>;
}

/// What one fed event meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fed {
    /// Content or turn state moved on: the idle timer restarts.
    Progress,
    /// A keep-alive (`ping`, an empty event, an event type we ignore): the idle timer keeps
    /// running, so a stream of pings alone still times out.
    KeepAlive,
    /// The protocol's terminal event (`message_stop`, `[DONE]`): the stream can be dropped.
    Done,
}

/// Turns one attempt's SSE events into a [`Turn`].
pub(crate) trait TurnAssembler {
    /// Feeds one event; deltas go to `sink`.
    fn feed(&mut self, ev: &SseEvent, sink: EventSink<'_>) -> Result<Fed, AttemptError>;
    /// Ends the attempt after the terminal event (`terminal`) or after the body ended cleanly
    /// without it (`!terminal`). A broken body never reaches here.
    fn finish(self, terminal: bool, sink: EventSink<'_>) -> Result<Turn, AttemptError>;
}

/// The headers every streaming request carries: JSON in, SSE out, and the
/// `x-flowerbox-role` / `x-flowerbox-agent` pair from [`Request::caller`]. A provider appends
/// its version and auth headers.
pub(crate) fn stream_headers(req: &Request) -> Vec<(String, String)> {
    vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("accept".to_string(), "text/event-stream".to_string()),
        (
            "x-flowerbox-role".to_string(),
            req.caller.role.as_str().to_string(),
        ),
        ("x-flowerbox-agent".to_string(), req.caller.agent.clone()),
    ]
}

/// THE [`Provider`]: a [`WireProtocol`] (anthropic's, openai's) with the transport and retry
/// policy it streams over. What differs between providers is their protocol, nothing else.
pub(crate) struct Driver<P> {
    /// The provider's wire format and configuration.
    pub(crate) proto: P,
    /// Attempts, backoff, idle and network-down knobs.
    policy: RetryPolicy,
    /// The seam requests go through (HTTP, or a fake in tests).
    transport: Arc<dyn HttpTransport>,
}

impl<P: WireProtocol> Driver<P> {
    /// Binds `proto` to `policy` and `transport`.
    pub(crate) fn new(proto: P, policy: RetryPolicy, transport: Arc<dyn HttpTransport>) -> Self {
        Driver {
            proto,
            policy,
            transport,
        }
    }

    /// [`super::Provider::stream_turn`]: one turn with retries, see [`stream_turn`].
    pub(crate) async fn stream_turn(
        &self,
        req: &Request,
        sink: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        stream_turn(
            self.transport.as_ref(),
            &self.policy,
            &self.proto,
            req,
            sink,
            cancel,
        )
        .await
    }
}

impl<P: WireProtocol> fmt::Debug for Driver<P> {
    /// The provider's name, endpoint and default model (never credentials).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &P::NAME)
            .field("endpoint", &self.proto.endpoint().url)
            .field("model", &self.proto.default_model())
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl<P: WireProtocol> Provider for Driver<P> {
    fn name(&self) -> &str {
        P::NAME
    }

    fn default_model(&self) -> &str {
        self.proto.default_model()
    }

    async fn server_context_window(&self) -> Option<u64> {
        self.proto
            .server_context_window(self.transport.as_ref())
            .await
    }

    async fn stream_turn(
        &self,
        req: &Request,
        sink: EventSink<'_>,
        cancel: &CancellationToken,
    ) -> Result<Turn, ModelError> {
        Driver::stream_turn(self, req, sink, cancel).await
    }
}

/// Streams one turn with retries: the body of every [`super::Provider::stream_turn`].
async fn stream_turn<P: WireProtocol>(
    transport: &dyn HttpTransport,
    policy: &RetryPolicy,
    proto: &P,
    req: &Request,
    sink: EventSink<'_>,
    cancel: &CancellationToken,
) -> Result<Turn, ModelError> {
    let mut errors: Vec<String> = Vec::new();
    let mut attempt: u32 = 0;
    let mut offline_waited = Duration::ZERO;
    let started = tokio::time::Instant::now();
    loop {
        attempt += 1;
        let deadline = policy.attempt_deadline;
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return Err(ModelError::Interrupted),
            r = tokio::time::timeout(deadline, one_attempt(transport, policy, proto, req, sink)) => {
                r.unwrap_or_else(|_| Err(AttemptError::retry(format!(
                    "the attempt took longer than its deadline of {} s",
                    deadline.as_secs_f64()
                ))))
            }
        };
        let (reason, retry_after, rate_limited) = match outcome {
            Ok(mut turn) => {
                turn.retried_errors = errors;
                sink(ModelEvent::Done {
                    stop_reason: turn.stop_reason,
                    usage: turn.usage,
                });
                return Ok(turn);
            }
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Offline(reason)) => {
                errors.push(reason.clone());
                let ep = proto.endpoint();
                match wait_online(transport, policy, ep, &mut offline_waited, sink, cancel).await? {
                    // The endpoint really was down and is back: the attempt does not count.
                    true => {
                        attempt -= 1;
                        continue;
                    }
                    // Reachable at once (TLS or proxy trouble): an ordinary failed attempt.
                    false => (reason, None, false),
                }
            }
            Err(AttemptError::Retry {
                reason,
                retry_after,
                rate_limited,
            }) => {
                errors.push(reason.clone());
                (reason, retry_after, rate_limited)
            }
        };
        if rate_limited {
            if let Some(wait) = retry_after.filter(|w| *w > policy.retry_after_cap) {
                let until = chrono::Utc::now()
                    + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
                return Err(ModelError::RateLimitedUntil {
                    until: until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                });
            }
        }
        if attempt >= policy.max_attempts {
            return Err(ModelError::Exhausted {
                attempts: attempt,
                elapsed_s: started.elapsed().as_secs(),
                last: reason,
                errors,
            });
        }
        let delay = retry_after
            .filter(|w| *w <= policy.retry_after_cap)
            .unwrap_or_else(|| policy.backoff(attempt));
        sink(ModelEvent::Retrying {
            attempt,
            of: policy.max_attempts,
            delay_ms: delay.as_millis() as u64,
            reason,
        });
        tokio::select! {
            _ = cancel.cancelled() => return Err(ModelError::Interrupted),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One attempt from request to complete turn.
async fn one_attempt<P: WireProtocol>(
    transport: &dyn HttpTransport,
    policy: &RetryPolicy,
    proto: &P,
    req: &Request,
    sink: EventSink<'_>,
) -> Result<Turn, AttemptError> {
    let idle = policy.idle_timeout;
    let http = proto.build(req);
    // Without streaming, the headers may come only when the whole turn is done: the attempt
    // deadline bounds that wait instead of the idle timeout.
    let head_wait = if proto.streaming() {
        idle
    } else {
        policy.attempt_deadline
    };
    let resp = match tokio::time::timeout(head_wait, transport.post_stream(http)).await {
        Err(_) => {
            return Err(AttemptError::retry(format!(
                "no response within {} s",
                head_wait.as_secs_f64()
            )))
        }
        Ok(Err(e @ TransportError::Connect(_))) => {
            return Err(AttemptError::Offline(error_chain(&e)))
        }
        Ok(Err(e @ (TransportError::Io(_) | TransportError::Status { .. }))) => {
            return Err(AttemptError::retry(error_chain(&e)))
        }
        Ok(Err(e @ TransportError::Invalid(_))) => {
            return Err(AttemptError::Fatal(ModelError::Transport(Shared::new(e))))
        }
        Ok(Ok(r)) => r,
    };
    if !(200..300).contains(&resp.status) {
        return Err(error_response(proto, resp, idle).await);
    }
    // A gateway's own price in a header, used when the body carries none (LiteLLM's proxy
    // sends it with streamed and complete answers alike).
    let header_cost = resp
        .header(LITELLM_COST_HEADER)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|c| c.is_finite() && *c >= 0.0);
    let mut turn = answer(proto, req, resp, idle, sink).await?;
    if turn.reported_cost_usd.is_none() {
        turn.reported_cost_usd = header_cost;
    }
    Ok(turn)
}

/// The turn of a 2xx answer: a complete JSON one, or an event stream.
async fn answer<P: WireProtocol>(
    proto: &P,
    req: &Request,
    resp: HttpResponse,
    idle: Duration,
    sink: EventSink<'_>,
) -> Result<Turn, AttemptError> {
    let json = resp.header("content-type").is_some_and(|c| {
        c.trim()
            .to_ascii_lowercase()
            .starts_with("application/json")
    });
    if json {
        return complete_answer(proto, req, resp, idle, sink).await;
    }
    // An event the body ends without its blank line (the documentation's own examples end so)
    // is dispatched at a clean end of the body instead of being dropped.
    let body = resp
        .body
        .chain(futures::stream::once(async {
            Ok(bytes::Bytes::from_static(b"\n\n"))
        }))
        .boxed();
    let mut events = body.eventsource();
    let mut assembler = proto.assembler(req);
    // Only progress restarts the idle timer: a stream of pings alone still times out.
    let mut last_progress = Instant::now();
    let mut keepalives = 0u32;
    loop {
        let left = idle.saturating_sub(last_progress.elapsed());
        let next = match tokio::time::timeout(left, events.next()).await {
            Err(_) if keepalives > 0 => {
                return Err(AttemptError::retry(format!(
                    "no content for {} s, only {keepalives} keep-alive event(s)",
                    idle.as_secs_f64()
                )))
            }
            Err(_) => {
                return Err(AttemptError::retry(format!(
                    "stream idle for {} s",
                    idle.as_secs_f64()
                )))
            }
            Ok(n) => n,
        };
        match next {
            None => return assembler.finish(false, sink),
            Some(Ok(ev)) => match assembler.feed(&ev, sink)? {
                Fed::Done => return assembler.finish(true, sink),
                Fed::Progress => {
                    last_progress = Instant::now();
                    keepalives = 0;
                }
                Fed::KeepAlive => keepalives += 1,
            },
            Some(Err(EventStreamError::Transport(e))) => {
                // Whatever arrived is void: the turn is retried from its start.
                return Err(AttemptError::retry(format!(
                    "stream broken: {}",
                    error_chain(&e)
                )));
            }
            Some(Err(e)) => return Err(AttemptError::retry(format!("malformed SSE: {e}"))),
        }
    }
}

/// A 200 answer with `content-type: application/json`: one complete turn (a gateway that does
/// not stream, or a provider configured not to), understood by the provider. A body that is not
/// JSON, or not a turn, fails the attempt with a message naming what came back.
async fn complete_answer<P: WireProtocol>(
    proto: &P,
    req: &Request,
    resp: HttpResponse,
    idle: Duration,
    sink: EventSink<'_>,
) -> Result<Turn, AttemptError> {
    let status = resp.status;
    let body = read_body_limited(resp, idle, MAX_COMPLETE_BODY).await?;
    let value: Value = serde_json::from_str(&body).map_err(|source| {
        AttemptError::Fatal(ModelError::NotJson {
            status,
            body: one_line(&body),
            source: Shared::new(source),
        })
    })?;
    proto.complete(req, &value, sink)
}

/// Reads a non-2xx body (bounded) and classifies it.
async fn error_response<P: WireProtocol>(
    proto: &P,
    resp: HttpResponse,
    idle: Duration,
) -> AttemptError {
    let status = resp.status;
    let retry_after = parse_retry_after(|n| resp.header(n).map(str::to_string), chrono::Utc::now());
    let text = read_body(resp, idle).await;
    let mut err = proto.parse_error(status, &text);
    if err.message.is_empty() {
        err.message = format!("HTTP {status} with an empty body");
    }
    classify_status(status, retry_after, err)
}

/// Reads a whole body up to `limit` bytes; a broken or idle body, or one over the limit, fails
/// the attempt (retried: a cut body may be whole next time).
async fn read_body_limited(
    resp: HttpResponse,
    idle: Duration,
    limit: usize,
) -> Result<String, AttemptError> {
    let mut body = Vec::new();
    let mut stream = resp.body;
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return Err(AttemptError::retry(format!(
                    "body idle for {} s",
                    idle.as_secs_f64()
                )))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(AttemptError::retry(format!(
                    "body broken: {}",
                    error_chain(&e)
                )))
            }
            Ok(Some(Ok(chunk))) => {
                body.extend_from_slice(&chunk);
                if body.len() > limit {
                    return Err(AttemptError::Fatal(ModelError::BadResponse {
                        status: 200,
                        message: format!("the JSON answer is larger than {limit} bytes"),
                    }));
                }
            }
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Reads a body up to [`MAX_ERROR_BODY`] bytes; a broken or idle body ends the read.
async fn read_body(resp: HttpResponse, idle: Duration) -> String {
    let mut body = Vec::new();
    let mut stream = resp.body;
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Waits until the endpoint answers a DNS + TCP probe. Emits one `Waiting` line when it goes
/// down and one when it is back (flower prints exactly these two). `Ok(true)` when the endpoint
/// was seen down and came back, `Ok(false)` when the first probe already succeeded.
async fn wait_online(
    transport: &dyn HttpTransport,
    policy: &RetryPolicy,
    ep: &Endpoint,
    waited: &mut Duration,
    sink: EventSink<'_>,
    cancel: &CancellationToken,
) -> Result<bool, ModelError> {
    let hostport = format!("{}:{}", ep.host, ep.port);
    let mut last = match transport
        .probe(&ep.host, ep.port, policy.probe_timeout)
        .await
    {
        Ok(()) => return Ok(false),
        Err(e) => e,
    };
    let minutes = policy.max_offline_wait.as_secs().div_ceil(60);
    sink(ModelEvent::Waiting {
        status: format!("{hostport} 不可达,等待恢复(最多 {minutes} 分钟)"),
    });
    loop {
        if *waited >= policy.max_offline_wait {
            return Err(ModelError::Unreachable {
                waited_s: waited.as_secs(),
                last: Shared::new(last),
            });
        }
        let step = policy.probe_interval.min(policy.max_offline_wait - *waited);
        let started = Instant::now();
        tokio::select! {
            _ = cancel.cancelled() => return Err(ModelError::Interrupted),
            _ = tokio::time::sleep(step) => {}
        }
        let probe = tokio::select! {
            _ = cancel.cancelled() => return Err(ModelError::Interrupted),
            p = transport.probe(&ep.host, ep.port, policy.probe_timeout) => p,
        };
        *waited += started.elapsed();
        match probe {
            Ok(()) => {
                sink(ModelEvent::Waiting {
                    status: format!("{hostport} 恢复,继续"),
                });
                return Ok(true);
            }
            Err(e) => last = e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_parses_host_and_default_ports() {
        let e = Endpoint::parse("https://api.anthropic.com/v1/messages").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("api.anthropic.com", 443));
        let e = Endpoint::parse("http://127.0.0.1:8080/v1/messages").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8080));
        let e = Endpoint::parse("http://[::1]/x").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 80));
        assert!(Endpoint::parse("ftp://x/").is_err());
        assert!(Endpoint::parse("not a url").is_err());
    }
}
