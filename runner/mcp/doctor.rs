//! `flowerbox doctor`'s MCP lines: every server the project's `.mcp.json` and `--mcp-config`
//! name, and whether it starts — really started, where a run would start it: stdio servers in
//! a throwaway worker container of their own (the workspace mounted read-only, so the check
//! changes nothing), or as host processes with `--sandbox host`; HTTP servers from the host
//! under the egress policy. Each is initialised and its tools listed, then everything is
//! stopped and removed.

use std::path::Path;
use std::sync::Arc;

use super::config::{load_with_settings, McpSettings, ServerConfig, Transport};
use super::server::{Launch, Server};
use crate::role::Role;
use crate::sandbox::doctor::{Check, CheckStatus};
use crate::sandbox::egress::EgressPolicy;
use crate::sandbox::{
    AgentBox, CommandsRun, Mount, Sandbox, SandboxBackend, SandboxError, SandboxFactory,
};

/// The check's sandbox factory (to tear down) and its sandbox, or why there is none.
type Boxed = (
    Option<Arc<dyn SandboxFactory>>,
    Result<Option<Arc<dyn Sandbox>>, NoSandbox>,
);

/// Why the check has no sandbox to start stdio servers in.
#[derive(Debug, thiserror::Error)]
enum NoSandbox {
    /// The workspace cannot be resolved.
    #[error(transparent)]
    Workspace(std::io::Error),
    /// The engine or the sandbox failed.
    #[error(transparent)]
    Sandbox(SandboxError),
    /// The image is not built yet (doctor never builds it).
    #[error("引擎上还没有 {0}(第一次运行时会建),stdio 服务器这次没查")]
    NoImage(String),
}

fn line(status: CheckStatus, detail: String) -> Check {
    Check {
        name: "mcp",
        status,
        detail,
    }
}

impl From<SandboxError> for NoSandbox {
    fn from(e: SandboxError) -> Self {
        match e {
            SandboxError::NoImage(image) => NoSandbox::NoImage(image),
            e => NoSandbox::Sandbox(e),
        }
    }
}

/// One line per configuration problem and per server; stdio servers start in a sandbox of
/// `backend` (the one the command line chose).
pub async fn checks(
    workspace: &Path,
    settings: &McpSettings,
    egress: &EgressPolicy,
    backend: &dyn SandboxBackend,
) -> Vec<Check> {
    let config = match load_with_settings(workspace, settings) {
        Ok(c) => c,
        Err(e) => return vec![line(CheckStatus::Fail, e.to_string())],
    };
    let mut out: Vec<Check> = config
        .warnings
        .iter()
        .map(|w| line(CheckStatus::Warn, w.clone()))
        .collect();
    if config.servers.is_empty() {
        out.push(line(
            CheckStatus::Pass,
            "没有项目 MCP 服务器(.mcp.json / --mcp-config)".into(),
        ));
        return out;
    }
    let needs_box = config
        .servers
        .iter()
        .any(|s| matches!(s.transport, Transport::Stdio { .. }));
    let (factory, boxed): Boxed = if needs_box {
        match make_sandbox(workspace, backend).await {
            Ok((f, s)) => (Some(f), Ok(Some(s))),
            Err(e) => (None, Err(e)),
        }
    } else {
        (None, Ok(None))
    };
    let where_ = match backend.commands_run() {
        CommandsRun::InContainer => "在 agent 容器里",
        CommandsRun::OnHost => "在本机(--sandbox host,没有沙箱)",
    };
    for s in &config.servers {
        out.push(server_line(s, &boxed, workspace, egress, settings, where_).await);
    }
    if let Some(f) = factory {
        if let Err(e) = f.teardown().await {
            out.push(line(CheckStatus::Warn, format!("收拾检查用的容器失败:{e}")));
        }
    }
    out
}

async fn server_line(
    s: &ServerConfig,
    boxed: &Result<Option<Arc<dyn Sandbox>>, NoSandbox>,
    workspace: &Path,
    egress: &EgressPolicy,
    settings: &McpSettings,
    where_: &str,
) -> Check {
    let head = format!("{}({};{})", s.name, s.describe(), s.origin.display());
    let sandbox = match (&s.transport, boxed) {
        (Transport::Stdio { .. }, Err(e)) => {
            return line(CheckStatus::Fail, format!("{head}:没法启动:{e}"))
        }
        (_, Ok(b)) => b.clone(),
        (Transport::Http { .. }, Err(_)) => None,
    };
    let launch = Launch {
        sandbox,
        cwd: workspace.to_path_buf(),
        egress: egress.clone(),
        startup_timeout: settings.startup_timeout,
        call_timeout: settings.call_timeout,
    };
    let place = match s.transport {
        Transport::Stdio { .. } => where_,
        Transport::Http { .. } => "从本机按出网策略连",
    };
    match Server::start(s.clone(), launch).await {
        Ok((server, tools)) => {
            server.stop().await;
            let names: Vec<String> = tools
                .iter()
                .map(|t| {
                    if t.read_only {
                        format!("{}(只读)", t.name)
                    } else {
                        t.name.clone()
                    }
                })
                .collect();
            line(
                CheckStatus::Pass,
                format!(
                    "{head}:{place}起来了,{} 个工具:{}",
                    tools.len(),
                    names.join(", ")
                ),
            )
        }
        Err(e) => line(CheckStatus::Fail, format!("{head}:{e}")),
    }
}

/// A worker box over the workspace, mounted read-only, in a sandbox of its own.
async fn make_sandbox(
    workspace: &Path,
    backend: &dyn SandboxBackend,
) -> Result<(Arc<dyn SandboxFactory>, Arc<dyn Sandbox>), NoSandbox> {
    let ws = std::fs::canonicalize(workspace).map_err(NoSandbox::Workspace)?;
    let agent = AgentBox {
        agent: "mcp-doctor".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.clone(), true)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: crate::sandbox::SandboxPolicy::writer(),
    };
    let run_id = format!("doctor-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    // Never a build of minutes inside doctor: the image line already says it is missing.
    let factory = backend.open_check(&run_id, &ws).await?;
    match factory.sandbox(&agent).await {
        Ok(s) => Ok((factory, s)),
        Err(e) => {
            let _ = factory.teardown().await;
            Err(e.into())
        }
    }
}
