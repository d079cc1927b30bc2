//! The HTTP side of the scripted model server (axum): `POST /v1/messages`,
//! `POST /v1/chat/completions`, `GET /health`. Requests are checked against the real APIs' rules
//! first ([`crate::validate`], [`crate::validate_chat`]) unless the server is lax.

use crate::chat::{chat_chunks, chat_completion, encode_data};
use crate::events::{cut, encode, signature_for, turn_events, turn_message, TurnMeta};
use crate::scenario::{Fault, Scenario, ScriptedTurn};
use crate::validate::check_messages_request;
use crate::validate_chat::check_chat_request;
use crate::ScriptedError;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Shared by all connections.
struct ServerState {
    /// The parsed scenario.
    scenario: Scenario,
    /// Requests seen per (entry, turn): drives `times`.
    counters: Mutex<HashMap<(usize, usize), u32>>,
    /// `--record` file, one request body per line.
    record: Option<Mutex<std::fs::File>>,
    /// Refuse what the real APIs refuse (the default; `--lax` turns it off).
    strict: bool,
}

/// A bound, not yet serving, scripted model server.
pub struct ScriptedServer {
    listener: tokio::net::TcpListener,
    /// Where `listener` is bound (the real port when bound to port 0).
    addr: SocketAddr,
    state: Arc<ServerState>,
}

impl ScriptedServer {
    /// Binds `listen` for `scenario`; `record` is opened for appending.
    pub async fn bind(
        scenario: Scenario,
        listen: SocketAddr,
        record: Option<PathBuf>,
    ) -> Result<ScriptedServer, ScriptedError> {
        Self::bind_with(scenario, listen, record, true).await
    }

    /// [`ScriptedServer::bind`], strict (`true`: refuse what the real APIs refuse) or lax.
    pub async fn bind_with(
        scenario: Scenario,
        listen: SocketAddr,
        record: Option<PathBuf>,
        strict: bool,
    ) -> Result<ScriptedServer, ScriptedError> {
        let record = match record {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| ScriptedError::Io(format!("{}: {e}", path.display())))?,
            )),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| ScriptedError::Io(format!("bind {listen}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ScriptedError::Io(format!("the address bound for {listen}: {e}")))?;
        let state = Arc::new(ServerState {
            scenario,
            counters: Mutex::new(HashMap::new()),
            record,
            strict,
        });
        Ok(ScriptedServer {
            listener,
            addr,
            state,
        })
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, the value for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr())
    }

    /// Serves until `shutdown` resolves (or forever with `std::future::pending()`).
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ScriptedError> {
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/chat/completions", post(chat))
            .route("/health", get(|| async { "ok" }))
            .with_state(self.state);
        // Events go out as many small writes: without NODELAY, Nagle plus delayed ACKs add
        // tens of milliseconds per turn.
        let listener = self.listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| ScriptedError::Io(e.to_string()))
    }
}

/// An Anthropic-shaped error response.
fn error_response(
    status: u16,
    kind: &str,
    message: &str,
    headers: &[(String, String)],
) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut resp = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::try_from(k.as_str()),
            HeaderValue::try_from(v.as_str()),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

/// The API's error type for a status.
fn default_error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Text of a `system` field (string or text blocks) or of a message's `content`.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Records a request body (`--record`); a failed write must not change what the client sees.
fn record(st: &ServerState, parsed: &Result<Value, serde_json::Error>, body: &Bytes) {
    if let Some(rec) = &st.record {
        let line = match parsed {
            Ok(v) => v.to_string(),
            Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()).to_string(),
        };
        // One write of the whole line, so a reader never sees a body without its newline
        // followed by the next body.
        let mut buf = line.into_bytes();
        buf.push(b'\n');
        let mut f = rec.lock().unwrap_or_else(|p| p.into_inner());
        let _ = f.write_all(&buf);
    }
}

/// The turn a request gets, after matching: or the refusal (a 400 naming the agent).
struct Picked<'a> {
    entry_ix: usize,
    k: usize,
    n: u32,
    turn: &'a ScriptedTurn,
    fault: Fault,
}

/// Why a request matches no scripted turn (the text of the server's 400).
#[derive(Debug, thiserror::Error)]
enum Mismatch {
    /// No entry matches the caller.
    #[error("scripted-model: no scenario entry matches {who} at turn k={k}")]
    NoEntry {
        /// The caller, as its headers name it.
        who: String,
        /// The turn asked for.
        k: usize,
    },
    /// The entry has no turn `k`.
    #[error("scripted-model: {who} asks for turn k={k} but agents[{entry}] has {turns} turns")]
    NoTurn {
        /// The caller.
        who: String,
        /// The turn asked for.
        k: usize,
        /// The entry matched.
        entry: usize,
        /// Its turns.
        turns: usize,
    },
}

/// Matches a request (headers, prompt text, `k` assistant messages) to its scenario turn and
/// counts it for `times`.
fn pick<'a>(
    st: &'a ServerState,
    headers: &HeaderMap,
    prompt_text: &str,
    k: usize,
) -> Result<Picked<'a>, Mismatch> {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let role = header("x-flowerbox-role");
    let agent = header("x-flowerbox-agent");
    let who = format!(
        "agent {} (role {})",
        agent.as_deref().unwrap_or("<no x-flowerbox-agent>"),
        role.as_deref().unwrap_or("<no x-flowerbox-role>")
    );
    let Some(entry_ix) = st
        .scenario
        .select(role.as_deref(), agent.as_deref(), prompt_text)
    else {
        return Err(Mismatch::NoEntry { who, k });
    };
    let entry = &st.scenario.agents[entry_ix];
    let Some(turn) = entry.turns.get(k) else {
        return Err(Mismatch::NoTurn {
            who,
            k,
            entry: entry_ix,
            turns: entry.turns.len(),
        });
    };
    let n = {
        let mut c = st.counters.lock().unwrap_or_else(|p| p.into_inner());
        let slot = c.entry((entry_ix, k)).or_insert(0);
        *slot += 1;
        *slot - 1
    };
    let fault = turn.fault_for(n).cloned().unwrap_or_default();
    Ok(Picked {
        entry_ix,
        k,
        n,
        turn,
        fault,
    })
}

/// Builds an error response: status, error type, message, extra headers.
type ErrorShape = fn(u16, &str, &str, &[(String, String)]) -> Response;

/// A fault's status answer, in the shape `shape` gives the error body.
fn fault_status(fault: &Fault, shape: ErrorShape) -> Option<Response> {
    let status = fault.status?;
    let kind = fault
        .error_type
        .clone()
        .unwrap_or_else(|| default_error_type(status).into());
    let msg = fault
        .message
        .clone()
        .unwrap_or_else(|| format!("scripted fault: HTTP {status}"));
    let hdrs: Vec<(String, String)> = fault.headers.clone().into_iter().collect();
    Some(shape(status, &kind, &msg, &hdrs))
}

/// A JSON 200 answer.
fn json_response(v: &Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        v.to_string(),
    )
        .into_response()
}

async fn messages(State(st): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    record(&st, &parsed, &body);
    let req = match parsed {
        Ok(v) => v,
        Err(e) => {
            return error_response(
                400,
                "invalid_request_error",
                &format!("scripted-model: body is not JSON: {e}"),
                &[],
            )
        }
    };
    if st.strict {
        let signed = |thinking: &str, sig: &str| {
            sig == signature_for(thinking) || st.scenario.has_signed_thinking(thinking, sig)
        };
        if let Err(msg) = check_messages_request(&req, &signed) {
            return error_response(400, "invalid_request_error", &msg.0, &[]);
        }
    }
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let k = msgs.iter().filter(|m| m["role"] == "assistant").count();
    let first_user = msgs
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]));
    let prompt_text = format!(
        "{}\n{}",
        text_of(&req["system"]),
        first_user.unwrap_or_default()
    );
    let p = match pick(&st, &headers, &prompt_text, k) {
        Ok(p) => p,
        Err(m) => return error_response(400, "invalid_request_error", &m.to_string(), &[]),
    };
    if let Some(resp) = fault_status(&p.fault, error_response) {
        return resp;
    }
    let model = req["model"]
        .as_str()
        .unwrap_or("scripted-model")
        .to_string();
    let meta = TurnMeta {
        entry: p.entry_ix,
        k: p.k,
        model: &model,
        input_estimate: (body.len() as u64 / 4).max(1),
    };
    if p.fault.json_answer {
        return json_response(&turn_message(p.turn, &meta));
    }
    let seed = (p.entry_ix as u64) << 40 | (p.k as u64) << 20 | p.n as u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let events = turn_events(p.turn, &meta, p.fault.truncate_tool_json, &mut rng);
    let frames = events.iter().map(encode).collect();
    let error = p.fault.error_event.as_ref().map(|kind| {
        let msg = p
            .fault
            .message
            .clone()
            .unwrap_or_else(|| format!("scripted fault: {kind}"));
        encode(&json!({"type": "error", "error": {"type": kind, "message": msg}}))
    });
    let steps = think(p.turn, plan(frames, p.turn, &p.fault, error, &mut rng));
    let mut resp = stream_response(steps);
    if let Ok(v) = HeaderValue::try_from(format!("req_scripted_{}_{}_{}", p.entry_ix, p.k, p.n)) {
        resp.headers_mut().insert("request-id", v);
    }
    resp
}

/// An OpenAI-shaped error response.
fn openai_error(status: u16, kind: &str, message: &str, headers: &[(String, String)]) -> Response {
    openai_error_param(status, kind, message, None, headers)
}

fn openai_error_param(
    status: u16,
    kind: &str,
    message: &str,
    param: Option<&str>,
    headers: &[(String, String)],
) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": param, "code": null}});
    let mut resp = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::try_from(k.as_str()),
            HeaderValue::try_from(v.as_str()),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

async fn chat(State(st): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    record(&st, &parsed, &body);
    let req = match parsed {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("scripted-model: body is not JSON: {e}");
            return openai_error(400, "invalid_request_error", &msg, &[]);
        }
    };
    if st.strict {
        if let Err(r) = check_chat_request(&req) {
            return openai_error_param(
                400,
                "invalid_request_error",
                &r.message,
                r.param.as_deref(),
                &[],
            );
        }
    }
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let k = msgs.iter().filter(|m| m["role"] == "assistant").count();
    let system = msgs
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| crate::chat::text_of(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let first_user = msgs
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| crate::chat::text_of(&m["content"]))
        .unwrap_or_default();
    let p = match pick(&st, &headers, &format!("{system}\n{first_user}"), k) {
        Ok(p) => p,
        Err(m) => return openai_error(400, "invalid_request_error", &m.to_string(), &[]),
    };
    if let Some(resp) = fault_status(&p.fault, openai_error) {
        return resp;
    }
    let model = req["model"]
        .as_str()
        .unwrap_or("scripted-model")
        .to_string();
    let meta = TurnMeta {
        entry: p.entry_ix,
        k: p.k,
        model: &model,
        input_estimate: (body.len() as u64 / 4).max(1),
    };
    if p.fault.json_answer || req["stream"] != true {
        return json_response(&chat_completion(p.turn, &meta));
    }
    let seed = (p.entry_ix as u64) << 40 | (p.k as u64) << 20 | p.n as u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut frames: Vec<Bytes> = chat_chunks(p.turn, &meta, p.fault.truncate_tool_json, &mut rng)
        .iter()
        .map(encode_data)
        .collect();
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let error = p.fault.error_event.as_ref().map(|kind| {
        let msg = p
            .fault
            .message
            .clone()
            .unwrap_or_else(|| format!("scripted fault: {kind}"));
        encode_data(&json!({"error": {"message": msg, "type": kind, "param": null, "code": null}}))
    });
    let steps = think(p.turn, plan(frames, p.turn, &p.fault, error, &mut rng));
    stream_response(steps)
}

/// A 200 event stream from body steps.
fn stream_response(steps: Vec<Step>) -> Response {
    let stream = futures::stream::unfold(steps.into_iter(), |mut it| async move {
        loop {
            match it.next()? {
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Chunk(b) => return Some((Ok(b), it)),
                Step::Abort => {
                    let err =
                        std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "scripted drop");
                    return Some((Err(err), Vec::new().into_iter()));
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    resp
}

/// What the body stream does next.
enum Step {
    Sleep(Duration),
    Chunk(Bytes),
    Abort,
}

/// `steps` after the turn's thinking time (`think_ms`), if any.
fn think(turn: &ScriptedTurn, mut steps: Vec<Step>) -> Vec<Step> {
    if let Some(ms) = turn.think_ms {
        steps.insert(0, Step::Sleep(Duration::from_millis(ms)));
    }
    steps
}

/// Encoded events → body steps, with the fault's delay, error event or drop applied. Each
/// frame is cut into several network chunks.
fn plan(
    frames: Vec<Bytes>,
    turn: &ScriptedTurn,
    fault: &Fault,
    error: Option<Bytes>,
    rng: &mut StdRng,
) -> Vec<Step> {
    let end = frames.len().saturating_sub(2);
    let limit = match (&error, fault.drop_after_events) {
        (Some(_), _) if fault.before_end => end,
        (None, Some(_)) if fault.before_end => end,
        (Some(_), _) => fault.after_events.unwrap_or(0),
        (None, Some(n)) => n,
        (None, None) => usize::MAX,
    };
    let mut steps = Vec::new();
    for (i, frame) in frames.iter().enumerate().take(limit) {
        if let (Some(ms), true) = (turn.hold_end_ms, i == end) {
            steps.push(Step::Sleep(Duration::from_millis(ms)));
        }
        if let Some(ms) = fault.delay_ms {
            steps.push(Step::Sleep(Duration::from_millis(ms)));
        }
        steps.extend(cut(frame, rng).into_iter().map(Step::Chunk));
    }
    if let Some(ev) = error {
        steps.push(Step::Chunk(ev));
    } else if fault.drop_after_events.is_some() {
        // Let hyper flush the headers and events first, so the drop really is mid-stream.
        steps.push(Step::Sleep(Duration::from_millis(20)));
        steps.push(Step::Abort);
    }
    steps
}
