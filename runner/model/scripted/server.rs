//! The HTTP side of the scripted model server (axum): `POST /v1/messages`, `GET /health`.

use super::events::{cut, encode, turn_events, TurnMeta};
use super::scenario::{Fault, Scenario};
use super::ScriptedError;
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
}

/// A bound, not yet serving, scripted model server.
pub struct ScriptedServer {
    listener: tokio::net::TcpListener,
    state: Arc<ServerState>,
}

impl ScriptedServer {
    /// Binds `listen` for `scenario`; `record` is opened for appending.
    pub async fn bind(
        scenario: Scenario,
        listen: SocketAddr,
        record: Option<PathBuf>,
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
        let state = Arc::new(ServerState {
            scenario,
            counters: Mutex::new(HashMap::new()),
            record,
        });
        Ok(ScriptedServer { listener, state })
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
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

async fn messages(State(st): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    if let Some(rec) = &st.record {
        let line = match &parsed {
            Ok(v) => v.to_string(),
            Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()).to_string(),
        };
        let mut f = rec.lock().unwrap_or_else(|p| p.into_inner());
        // A failed record write must not change what the client sees.
        let _ = writeln!(f, "{line}");
    }
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
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let role = header("x-flowerbox-role");
    let agent = header("x-flowerbox-agent");
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
    let who = format!(
        "agent {} (role {})",
        agent.as_deref().unwrap_or("<no x-flowerbox-agent>"),
        role.as_deref().unwrap_or("<no x-flowerbox-role>")
    );

    let Some(entry_ix) = st
        .scenario
        .select(role.as_deref(), agent.as_deref(), &prompt_text)
    else {
        let msg = format!("scripted-model: no scenario entry matches {who} at turn k={k}");
        return error_response(400, "invalid_request_error", &msg, &[]);
    };
    let entry = &st.scenario.agents[entry_ix];
    let Some(turn) = entry.turns.get(k) else {
        let msg = format!(
            "scripted-model: {who} asks for turn k={k} but agents[{entry_ix}] has {} turns",
            entry.turns.len()
        );
        return error_response(400, "invalid_request_error", &msg, &[]);
    };
    let n = {
        let mut c = st.counters.lock().unwrap_or_else(|p| p.into_inner());
        let slot = c.entry((entry_ix, k)).or_insert(0);
        *slot += 1;
        *slot - 1
    };
    let fault = turn.fault_for(n).cloned().unwrap_or_default();
    if let Some(status) = fault.status {
        let kind = fault
            .error_type
            .clone()
            .unwrap_or_else(|| default_error_type(status).into());
        let msg = fault
            .message
            .clone()
            .unwrap_or_else(|| format!("scripted fault: HTTP {status}"));
        let hdrs: Vec<(String, String)> = fault.headers.clone().into_iter().collect();
        return error_response(status, &kind, &msg, &hdrs);
    }

    let model = req["model"]
        .as_str()
        .unwrap_or("scripted-model")
        .to_string();
    let meta = TurnMeta {
        entry: entry_ix,
        k,
        model: &model,
        input_estimate: (body.len() as u64 / 4).max(1),
    };
    let seed = (entry_ix as u64) << 40 | (k as u64) << 20 | n as u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let events = turn_events(turn, &meta, fault.truncate_tool_json, &mut rng);
    let steps = plan(events, &fault, &mut rng);

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
    if let Ok(v) = HeaderValue::try_from(format!("req_scripted_{entry_ix}_{k}_{n}")) {
        h.insert("request-id", v);
    }
    resp
}

/// What the body stream does next.
enum Step {
    Sleep(Duration),
    Chunk(Bytes),
    Abort,
}

/// Events → body steps, with the fault's delay, error event or drop applied.
fn plan(events: Vec<Value>, fault: &Fault, rng: &mut StdRng) -> Vec<Step> {
    let limit = match (&fault.error_event, fault.drop_after_events) {
        (Some(_), _) => fault.after_events.unwrap_or(0),
        (None, Some(n)) => n,
        (None, None) => usize::MAX,
    };
    let mut steps = Vec::new();
    for ev in events.iter().take(limit) {
        if let Some(ms) = fault.delay_ms {
            steps.push(Step::Sleep(Duration::from_millis(ms)));
        }
        steps.extend(cut(&encode(ev), rng).into_iter().map(Step::Chunk));
    }
    if let Some(kind) = &fault.error_event {
        let msg = fault
            .message
            .clone()
            .unwrap_or_else(|| format!("scripted fault: {kind}"));
        let ev = json!({"type": "error", "error": {"type": kind, "message": msg}});
        steps.push(Step::Chunk(encode(&ev)));
    } else if fault.drop_after_events.is_some() {
        // Let hyper flush the headers and events first, so the drop really is mid-stream.
        steps.push(Step::Sleep(Duration::from_millis(20)));
        steps.push(Step::Abort);
    }
    steps
}
