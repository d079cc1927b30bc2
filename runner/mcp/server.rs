//! One MCP server for one agent, spoken to with the official SDK (`rmcp`): started where the
//! agent's commands run (stdio: [`crate::sandbox::Sandbox::attach`], so in its container) or
//! reached from the host (HTTP, pinned under the egress policy), initialised, its tools listed,
//! its calls bounded by a timeout and the human's interrupt.
//!
//! Everything that can go wrong on the server's side — it does not start, it never answers, it
//! dies mid-call, it writes a line too long or something that is not MCP — ends as an
//! [`McpError`] for the model, never a crash; a server that hung or broke is killed (its
//! exec and everything it started) and started again on the next call, at most
//! [`MAX_RESTARTS`] times.

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::{ServerConfig, Transport};
use super::linecap::LineCap;
use super::McpError;
use crate::sandbox::egress::{EgressPolicy, HostAddrs};
use crate::sandbox::{AttachSpec, ProcessHandle, Sandbox, StderrTail};

/// Longest line (one JSON-RPC message) a stdio server may write.
pub const MAX_LINE: usize = 4 * 1024 * 1024;
/// Times a broken server is started again.
pub const MAX_RESTARTS: u32 = 2;
/// Most tools taken from one server.
pub const MAX_TOOLS: usize = 128;

/// Where and how long a server may run.
#[derive(Clone)]
pub struct Launch {
    /// The agent's sandbox (stdio servers start there); `None` when it has none.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// Working directory of stdio servers (the agent's).
    pub cwd: PathBuf,
    /// The run's egress policy (HTTP servers).
    pub egress: EgressPolicy,
    /// Start (initialise and list) within this.
    pub startup_timeout: Duration,
    /// One call within this.
    pub call_timeout: Duration,
}

/// A tool as the server listed it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its own name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Its input schema.
    pub schema: Map<String, Value>,
    /// `annotations.readOnlyHint == true`.
    pub read_only: bool,
}

type Service = RunningService<RoleClient, ClientConfig>;

/// A running connection.
struct Live {
    service: Service,
    process: Option<Arc<dyn ProcessHandle>>,
    stderr: Option<StderrTail>,
    oversized: Arc<AtomicBool>,
}

impl Live {
    async fn stop(self) {
        if let Some(p) = &self.process {
            p.kill().await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), close(self.service)).await;
    }

    /// Why the connection broke, in words: a too-long line, how the process ended, the tail
    /// of its stderr.
    async fn post_mortem(&self) -> String {
        let mut parts = Vec::new();
        if self.oversized.load(Ordering::SeqCst) {
            parts.push(format!(
                "它写了一行超过 {} MiB 的输出,连接被断开",
                MAX_LINE >> 20
            ));
        }
        if let Some(p) = &self.process {
            if let Some(how) = ended_soon(p.as_ref()).await {
                parts.push(format!("进程已退出({how})"));
            }
        }
        if let Some(tail) = self.stderr.as_ref().map(StderrTail::text) {
            if !tail.is_empty() {
                parts.push(format!("stderr 最后几行:{}", last_lines(&tail, 5)));
            }
        }
        parts.join(";")
    }
}

/// How the process ended, waiting briefly (the exit is reported a moment after the pipes).
async fn ended_soon(p: &dyn ProcessHandle) -> Option<String> {
    for _ in 0..10 {
        if let Some(how) = p.ended().await {
            return Some(how);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

enum State {
    Live(Live),
    Dead { why: String },
}

/// One server of one agent.
pub struct Server {
    config: ServerConfig,
    launch: Launch,
    state: tokio::sync::Mutex<State>,
    /// Times it was started again after breaking (never reset: a server that keeps breaking
    /// stays stopped after [`MAX_RESTARTS`]).
    restarts: std::sync::atomic::AtomicU32,
    /// Stopped for good (its agent was released).
    stopped: AtomicBool,
}

impl Server {
    /// Starts the server and lists its tools (at most [`MAX_TOOLS`]).
    pub async fn start(
        config: ServerConfig,
        launch: Launch,
    ) -> Result<(Server, Vec<Listed>), McpError> {
        let (live, tools) = start_live(&config, &launch).await?;
        Ok((
            Server {
                config,
                launch,
                state: tokio::sync::Mutex::new(State::Live(live)),
                restarts: std::sync::atomic::AtomicU32::new(0),
                stopped: AtomicBool::new(false),
            },
            tools,
        ))
    }

    /// Calls `tool` (its own name) with `arguments`; the result as JSON (`CallToolResult`).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Value, McpError> {
        let name = &self.config.name;
        let peer = {
            let mut state = self.state.lock().await;
            if let State::Dead { why } = &*state {
                let why = why.clone();
                if self.stopped.load(Ordering::SeqCst) {
                    return Err(McpError::Call(format!("MCP 服务器 {name} 已经停了")));
                }
                if self.restarts.load(Ordering::SeqCst) >= MAX_RESTARTS {
                    return Err(McpError::Call(format!(
                        "MCP 服务器 {name} 已经停了({why}),重启了 {MAX_RESTARTS} 次也没好,这次运行里不再启动它"
                    )));
                }
                self.restarts.fetch_add(1, Ordering::SeqCst);
                match start_live(&self.config, &self.launch).await {
                    Ok((live, _)) => *state = State::Live(live),
                    Err(e) => {
                        *state = State::Dead { why: e.to_string() };
                        return Err(McpError::Call(format!(
                            "MCP 服务器 {name} 之前停了({why}),重启也失败了:{e}"
                        )));
                    }
                }
            }
            match &*state {
                State::Live(live) => live.service.peer().clone(),
                State::Dead { .. } => unreachable!("restarted above"),
            }
        };
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let call = call_once(peer, params);
        let outcome = tokio::select! {
            r = tokio::time::timeout(self.launch.call_timeout, call) => r,
            _ = cancel.cancelled() => return Err(McpError::Interrupted),
        };
        match outcome {
            Ok(Ok(rmcp::model::CallToolResponse::Complete(result))) => {
                serde_json::to_value(&result).map_err(|e| McpError::CallFailed {
                    what: format!("MCP 服务器 {name} 的回答转不成 JSON"),
                    source: e.into(),
                })
            }
            Ok(Ok(_)) => Err(McpError::Call(format!(
                "MCP 服务器 {name} 要求额外输入或转成后台任务,flowerbox 不支持这两种回答"
            ))),
            Ok(Err(rmcp::ServiceError::McpError(e))) => Err(McpError::ToolFailed(format!(
                "MCP 服务器 {name} 拒绝了这次调用:{}(错误码 {})",
                e.message, e.code.0
            ))),
            Ok(Err(e)) => {
                let why = self.fail(&format!("调用失败:{e}")).await;
                Err(McpError::Call(format!("MCP 服务器 {name} {why}")))
            }
            Err(_) => {
                let secs = self.launch.call_timeout.as_secs_f64();
                let why = self.fail(&format!("{secs} 秒内没有回答,已被停掉")).await;
                Err(McpError::Call(format!("MCP 服务器 {name} {why}")))
            }
        }
    }

    /// Marks the server dead after `what` went wrong, stops it, and returns `what` with the
    /// post-mortem; the next call starts it again.
    async fn fail(&self, what: &str) -> String {
        let mut state = self.state.lock().await;
        let old = std::mem::replace(
            &mut *state,
            State::Dead {
                why: what.to_string(),
            },
        );
        let mut text = what.to_string();
        if let State::Live(live) = old {
            let pm = live.post_mortem().await;
            live.stop().await;
            if !pm.is_empty() {
                text = format!("{text}:{pm}");
            }
            if let State::Dead { why } = &mut *state {
                *why = text.clone();
            }
            if self.restarts.load(Ordering::SeqCst) < MAX_RESTARTS {
                text.push_str("(下次调用它的工具时会重启它)");
            }
        }
        text
    }

    /// Stops the server (its process and everything it started).
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let mut state = self.state.lock().await;
        let old = std::mem::replace(
            &mut *state,
            State::Dead {
                why: "已停止".into(),
            },
        );
        if let State::Live(live) = old {
            live.stop().await;
        }
    }
}

// The SDK's futures, behind signatures that state `Send + 'static`: the compiler then checks
// them here, with concrete lifetimes, instead of failing deep inside callers' futures.

fn serve(
    read: LineCap<std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>>,
    write: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
) -> impl std::future::Future<Output = Result<Service, rmcp::service::ClientInitializeError>>
       + Send
       + 'static {
    rmcp::serve_client(client_config(), (read, write))
}

fn serve_http(
    client: reqwest::Client,
    config: StreamableHttpClientTransportConfig,
) -> impl std::future::Future<Output = Result<Service, rmcp::service::ClientInitializeError>>
       + Send
       + 'static {
    let transport = StreamableHttpClientTransport::with_client(client, config);
    rmcp::serve_client(client_config(), transport)
}

#[allow(clippy::manual_async_fn)] // The point is the stated `Send` bound.
fn list_tools(
    peer: rmcp::Peer<RoleClient>,
) -> impl std::future::Future<Output = Result<Vec<rmcp::model::Tool>, rmcp::ServiceError>> + Send + 'static
{
    async move { peer.list_all_tools().await }
}

#[allow(clippy::manual_async_fn)] // The point is the stated `Send` bound.
fn call_once(
    peer: rmcp::Peer<RoleClient>,
    params: CallToolRequestParams,
) -> impl std::future::Future<Output = Result<rmcp::model::CallToolResponse, rmcp::ServiceError>>
       + Send
       + 'static {
    async move { peer.call_tool_once(params).await }
}

#[allow(clippy::manual_async_fn)] // The point is the stated `Send` bound.
fn close(service: Service) -> impl std::future::Future<Output = ()> + Send + 'static {
    async move {
        let _ = service.cancel().await;
    }
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("flowerbox", env!("CARGO_PKG_VERSION")),
    )
}

/// Connects (starting the process for stdio) and lists the tools, within the startup timeout.
async fn start_live(
    config: &ServerConfig,
    launch: &Launch,
) -> Result<(Live, Vec<Listed>), McpError> {
    let deadline = Instant::now() + launch.startup_timeout;
    let name = &config.name;
    let secs = launch.startup_timeout.as_secs_f64();
    let oversized = Arc::new(AtomicBool::new(false));
    let (service, process, stderr) = match &config.transport {
        Transport::Stdio { command, args, env } => {
            let sandbox = launch.sandbox.as_ref().ok_or_else(|| {
                McpError::Start(format!(
                    "MCP 服务器 {name} 是 stdio 服务器,要在 agent 自己的容器里启动,而这个 agent 没有执行命令的环境"
                ))
            })?;
            let spec = AttachSpec {
                argv: std::iter::once(command.clone())
                    .chain(args.iter().cloned())
                    .collect(),
                cwd: launch.cwd.clone(),
                env: env.clone(),
            };
            let attached = sandbox
                .attach(spec)
                .await
                .map_err(|e| McpError::StartFailed {
                    what: format!("MCP 服务器 {name} 启动不了"),
                    source: e.into(),
                })?;
            let stdout = LineCap::new(attached.stdout, MAX_LINE, oversized.clone());
            let process = attached.handle.clone();
            let stderr = attached.stderr.clone();
            let served = tokio::time::timeout_at(deadline, serve(stdout, attached.stdin)).await;
            match served {
                Ok(Ok(s)) => (s, Some(process), Some(stderr)),
                Ok(Err(e)) => {
                    let live_pm = post_mortem_of(&process, &stderr, &oversized).await;
                    process.kill().await;
                    return Err(McpError::Start(format!(
                        "MCP 服务器 {name} 没能完成初始化:{e}{live_pm}"
                    )));
                }
                Err(_) => {
                    let live_pm = post_mortem_of(&process, &stderr, &oversized).await;
                    process.kill().await;
                    return Err(McpError::Start(format!(
                        "MCP 服务器 {name} {secs} 秒内没完成初始化(MCP_TIMEOUT 可以调),已被停掉{live_pm}"
                    )));
                }
            }
        }
        Transport::Http { url, headers } => {
            let service =
                tokio::time::timeout_at(deadline, connect_http(name, url, headers, launch))
                    .await
                    .map_err(|_| {
                        McpError::Start(format!("MCP 服务器 {name}({url}){secs} 秒内没完成初始化"))
                    })??;
            (service, None, None)
        }
    };
    let live = Live {
        service,
        process,
        stderr,
        oversized,
    };
    let listed = tokio::time::timeout_at(deadline, list_tools(live.service.peer().clone())).await;
    let tools = match listed {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            let pm = live.post_mortem().await;
            live.stop().await;
            return Err(McpError::Start(format!(
                "MCP 服务器 {name} 列不出工具:{e}{}",
                suffix(&pm)
            )));
        }
        Err(_) => {
            live.stop().await;
            return Err(McpError::Start(format!(
                "MCP 服务器 {name} {secs} 秒内没列出工具,已被停掉"
            )));
        }
    };
    let listed = tools
        .into_iter()
        .take(MAX_TOOLS)
        .map(|t| Listed {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()),
            schema: (*t.input_schema).clone(),
            read_only: t.annotations.and_then(|a| a.read_only_hint) == Some(true),
        })
        .collect();
    Ok((live, listed))
}

fn suffix(pm: &str) -> String {
    if pm.is_empty() {
        String::new()
    } else {
        format!(";{pm}")
    }
}

async fn post_mortem_of(
    process: &Arc<dyn ProcessHandle>,
    stderr: &StderrTail,
    oversized: &Arc<AtomicBool>,
) -> String {
    let mut parts = Vec::new();
    if oversized.load(Ordering::SeqCst) {
        parts.push(format!("它写了一行超过 {} MiB 的输出", MAX_LINE >> 20));
    }
    if let Some(how) = ended_soon(process.as_ref()).await {
        parts.push(format!("进程已退出({how})"));
    }
    let tail = stderr.text();
    if !tail.is_empty() {
        parts.push(format!("stderr 最后几行:{}", last_lines(&tail, 5)));
    }
    suffix(&parts.join(";"))
}

/// Connects to a Streamable HTTP server from the host, pinned under the egress policy.
async fn connect_http(
    name: &str,
    url: &str,
    headers: &[(String, String)],
    launch: &Launch,
) -> Result<Service, McpError> {
    let start = |what: String| {
        move |e: Box<dyn std::error::Error + Send + Sync>| McpError::StartFailed { what, source: e }
    };
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| start(format!("MCP 服务器 {name} 的 url 不对"))(e.into()))?;
    let builder =
        crate::sandbox::pinned::pinned_builder(&parsed, &launch.egress, &HostAddrs::discover())
            .await
            .map_err(|e| match e {
                crate::sandbox::pinned::PinError::Refused(_) => {
                    McpError::Denied(format!("MCP 服务器 {name} 连不上 {url}:{e}"))
                }
                other => start(format!("MCP 服务器 {name} 连不上 {url}"))(other.into()),
            })?;
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let key = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
            start(format!("MCP 服务器 {name} 的 header {k:?} 不对"))(e.into())
        })?;
        let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| {
            start(format!("MCP 服务器 {name} 的 header {k} 的值不对"))(e.into())
        })?;
        custom.insert(key, value);
    }
    let client = builder
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| {
            start(format!("MCP 服务器 {name} 的 HTTP 客户端建不起来"))(e.into())
        })?;
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom);
    config.max_json_response_size = MAX_LINE;
    config.max_sse_event_size = MAX_LINE;
    serve_http(client, config)
        .await
        .map_err(|e| start(format!("MCP 服务器 {name}({url})没能完成初始化"))(e.into()))
}
