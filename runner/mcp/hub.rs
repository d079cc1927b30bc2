//! [`McpHub`]: the run's MCP servers, per agent. An agent whose whitelist names MCP tools gets,
//! on its first turn, its own instance of every server it may use — stdio servers inside its
//! own container (a judge's under the judge's uid and restrictions) — and the tools they list,
//! filtered by its whitelist and, for the read-only roles, to `readOnlyHint: true`. The same
//! agent (after a handoff) keeps its servers; they stop when its container is released, at the
//! end of the run, or when the hub is dropped.

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use super::config::{McpSettings, ServerConfig};
use super::names;
use super::render;
use super::server::{Launch, Server};
use super::McpError;
use crate::model::ToolDef;
use crate::sandbox::egress::EgressPolicy;
use crate::sandbox::Sandbox;

/// Bytes of MCP tool definitions (descriptions and schemas) one agent is offered at most.
pub const DEFS_MAX: usize = 128 * 1024;

/// One tool offered to an agent.
#[derive(Debug, Clone)]
pub struct McpTool {
    /// What the model calls (`mcp__<server>__<tool>`).
    pub name: String,
    /// The server's mapped name.
    pub server: String,
    /// The tool's own name on its server.
    pub original: String,
    /// The definition offered to the model.
    pub def: ToolDef,
}

/// What an agent asks for.
pub struct AgentAsk {
    /// Its instance name.
    pub agent: String,
    /// Its whitelist (the MCP entries count).
    pub whitelist: Vec<String>,
    /// Only `readOnlyHint: true` tools (the read-only roles, `once -p plan`).
    pub read_only: bool,
    /// Names already taken (its other tools).
    pub taken: HashSet<String>,
    /// Its sandbox, for stdio servers.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// Working directory of stdio servers.
    pub cwd: std::path::PathBuf,
}

/// One agent's servers and tools.
pub struct AgentMcp {
    tools: Vec<McpTool>,
    servers: HashMap<String, Arc<Server>>,
    /// Problems met while starting (for the model's first message and the terminal).
    pub notes: Vec<String>,
    /// Limit on a result's characters.
    cap: usize,
    /// Servers this agent wanted that did not start (mapped name, why).
    failed: Vec<(String, String)>,
}

impl AgentMcp {
    /// The tools, in server then listing order.
    pub fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// The tool the model calls `name`, if this agent has it.
    pub fn tool(&self, name: &str) -> Option<&McpTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Why `name`, which `whitelist` admits, is not offered: its server did not start (or died
    /// before listing its tools). `None` when `name` is no tool of such a server.
    pub fn unavailable(&self, name: &str, whitelist: &[String]) -> Option<String> {
        let ids: Vec<String> = self.failed.iter().map(|(id, _)| id.clone()).collect();
        let id = names::entry_server(name, &ids)?;
        if name == format!("mcp__{id}") || !names::admits(whitelist, id, name) {
            return None;
        }
        let (_, why) = self.failed.iter().find(|(f, _)| f == id)?;
        Some(format!(
            "工具 {name} 属于 MCP 服务器 {id},它这次没起来({why}),它的工具都不可用;换别的办法做。"
        ))
    }

    /// Calls tool `name` with the model's `input` (a JSON object); the result text.
    pub async fn call(
        &self,
        name: &str,
        input: &Value,
        cancel: &CancellationToken,
    ) -> Result<String, McpError> {
        let tool = self
            .tool(name)
            .ok_or_else(|| McpError::Call(format!("没有叫 {name} 的 MCP 工具")))?;
        let server = self
            .servers
            .get(&tool.server)
            .ok_or_else(|| McpError::Call(format!("{name} 的服务器没在运行")))?;
        let args = input.as_object().cloned().unwrap_or_default();
        let result = server.call(&tool.original, args, cancel).await?;
        let (text, is_error) = render::result_text(&result, self.cap);
        if is_error {
            Err(McpError::ToolFailed(text))
        } else {
            Ok(text)
        }
    }

    /// Stops every server, at once.
    async fn stop(&self) {
        let stops: Vec<_> = self
            .servers
            .values()
            .cloned()
            .map(|s| tokio::spawn(async move { s.stop().await }))
            .collect();
        for handle in stops {
            let _ = handle.await;
        }
    }
}

/// The run's MCP servers.
pub struct McpHub {
    servers: Vec<ServerConfig>,
    settings: McpSettings,
    egress: EgressPolicy,
    cap: usize,
    agents: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Arc<AgentMcp>>>>>,
}

impl McpHub {
    /// A hub over `servers`; results are capped at `cap` characters.
    pub fn new(
        servers: Vec<ServerConfig>,
        settings: McpSettings,
        egress: EgressPolicy,
        cap: usize,
    ) -> Self {
        McpHub {
            servers,
            settings,
            egress,
            cap,
            agents: Mutex::new(HashMap::new()),
        }
    }

    /// The configured servers.
    pub fn servers(&self) -> &[ServerConfig] {
        &self.servers
    }

    /// The agent's servers and tools, started on its first call (later calls for the same
    /// agent get the same).
    pub async fn for_agent(&self, ask: AgentAsk) -> Arc<AgentMcp> {
        let cell = self
            .agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(ask.agent.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.start(ask)).await.clone()
    }

    async fn start(&self, ask: AgentAsk) -> Arc<AgentMcp> {
        let launch = Launch {
            sandbox: ask.sandbox.clone(),
            cwd: ask.cwd.clone(),
            egress: self.egress.clone(),
            startup_timeout: self.settings.startup_timeout,
            call_timeout: self.settings.call_timeout,
        };
        let wanted: Vec<&ServerConfig> = self
            .servers
            .iter()
            .filter(|s| names::wants_server(&ask.whitelist, &s.id))
            .collect();
        let starts: Vec<_> = wanted
            .iter()
            .map(|s| tokio::spawn(Server::start((*s).clone(), launch.clone())))
            .collect();
        let mut started = Vec::with_capacity(starts.len());
        for handle in starts {
            started.push(handle.await.unwrap_or_else(|e| {
                Err(McpError::StartFailed {
                    what: "MCP 服务器启动时出错".into(),
                    source: e.into(),
                })
            }));
        }
        let mut mcp = AgentMcp {
            tools: Vec::new(),
            servers: HashMap::new(),
            notes: Vec::new(),
            cap: self.cap,
            failed: Vec::new(),
        };
        let mut taken = ask.taken;
        let mut budget = DEFS_MAX;
        for (config, outcome) in wanted.into_iter().zip(started) {
            let (server, listed) = match outcome {
                Ok(v) => v,
                Err(e) => {
                    // The causes too: the note is all the model learns of the failure.
                    let e = crate::model::error_chain(&e);
                    mcp.notes.push(format!("{e};它的工具这次不可用"));
                    mcp.failed.push((config.id.clone(), e));
                    continue;
                }
            };
            let originals: Vec<String> = listed.iter().map(|t| t.name.clone()).collect();
            let mapped = names::tool_names(&config.id, &originals, &taken);
            let mut any = false;
            for (tool, name) in listed.into_iter().zip(mapped) {
                if !names::admits(&ask.whitelist, &config.id, &name) {
                    continue;
                }
                if ask.read_only && !tool.read_only {
                    continue;
                }
                let schema = match render::input_schema(&tool.schema) {
                    Ok(s) => s,
                    Err(why) => {
                        mcp.notes.push(format!(
                            "MCP 服务器 {} 的工具 {:?} 没提供给你:{why}",
                            config.name, tool.name
                        ));
                        continue;
                    }
                };
                let def = ToolDef {
                    name: name.clone(),
                    description: render::description(
                        &config.name,
                        &tool.name,
                        tool.description.as_deref(),
                        tool.read_only,
                    ),
                    input_schema: schema,
                };
                // Every definition goes into every request: a server cannot bloat them.
                let size = def.description.len() + def.input_schema.to_string().len();
                if size > budget {
                    mcp.notes.push(format!(
                        "MCP 服务器 {} 的工具 {:?} 没提供给你:项目 MCP 工具的定义一共最多 {} KiB",
                        config.name,
                        tool.name,
                        DEFS_MAX / 1024
                    ));
                    continue;
                }
                budget -= size;
                taken.insert(name.clone());
                any = true;
                mcp.tools.push(McpTool {
                    def,
                    name,
                    server: config.id.clone(),
                    original: tool.name,
                });
            }
            if any {
                mcp.servers.insert(config.id.clone(), Arc::new(server));
            } else {
                server.stop().await;
            }
        }
        Arc::new(mcp)
    }

    /// Stops `agent`'s servers (its container is about to go).
    pub async fn release(&self, agent: &str) {
        let cell = self
            .agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
        if let Some(mcp) = cell.and_then(|c| c.get().cloned()) {
            mcp.stop().await;
        }
    }

    /// Stops every agent's servers.
    pub async fn shutdown(&self) {
        let all: Vec<_> = self
            .agents
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .filter_map(|(_, c)| c.get().cloned())
            .collect();
        for m in all {
            m.stop().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whitelisted_tool_of_a_server_that_did_not_start_names_the_server() {
        let mcp = AgentMcp {
            tools: Vec::new(),
            servers: HashMap::new(),
            notes: Vec::new(),
            cap: 1000,
            failed: vec![("db".into(), "MCP 服务器 db 初始化后退出了".into())],
        };
        let all = vec!["mcp__*".to_string()];
        let why = mcp.unavailable("mcp__db__query", &all).unwrap();
        assert!(
            why.contains("MCP 服务器 db") && why.contains("初始化后退出了"),
            "{why}"
        );
        assert!(!why.contains("白名单"), "{why}");
        // Not whitelisted, or no tool of a failed server: the whitelist's answer stands.
        assert_eq!(
            mcp.unavailable("mcp__db__query", &["mcp__web".into()]),
            None
        );
        assert_eq!(mcp.unavailable("mcp__web__get", &all), None);
        assert_eq!(mcp.unavailable("Bash", &all), None);
    }
}
