//! The project's MCP tools in an agent's loop: started on the agent's first turn (stdio servers
//! in its sandbox), added to its tools, and their failures as the tool results the model reads.
//! See [`crate::mcp`].

use super::{AgentRun, EventKind, ToolContext, ToolError};

impl AgentRun {
    /// On the first turn of this run: starts the project's MCP servers this agent may use
    /// (stdio ones in its sandbox) and adds their tools. Returns what went wrong, for the
    /// model's first message (it is also shown as a warning).
    pub(super) async fn start_mcp(&mut self, ctx: &ToolContext) -> Option<String> {
        if std::mem::replace(&mut self.mcp_started, true) || !self.spec.wants_mcp() {
            return None;
        }
        let hub = self.rt.mcp.clone()?;
        let wants_stdio = hub.servers().iter().any(|s| {
            matches!(s.transport, crate::mcp::Transport::Stdio { .. })
                && crate::mcp::names::wants_server(&self.spec.tools, &s.id)
        });
        if !hub
            .servers()
            .iter()
            .any(|s| crate::mcp::names::wants_server(&self.spec.tools, &s.id))
        {
            return None;
        }
        let mut notes = Vec::new();
        let sandbox = if wants_stdio {
            match ctx.sandbox().await {
                Ok(s) => Some(s),
                Err(e) => {
                    notes.push(format!("stdio MCP 服务器要在你的容器里启动,而它起不来:{e}"));
                    None
                }
            }
        } else {
            None
        };
        let taken = self
            .tools
            .iter()
            .map(|t| t.name.clone())
            .chain(self.rt.registry.names().into_iter().map(String::from))
            .collect();
        let mcp = hub
            .for_agent(crate::mcp::AgentAsk {
                agent: self.agent.clone(),
                whitelist: self.spec.tools.clone(),
                read_only: self.spec.mcp_read_only || self.agent_box.policy.is_read_only(),
                taken,
                sandbox,
                cwd: self.agent_box.workdir.clone(),
            })
            .await;
        self.tools.extend(mcp.tools().iter().map(|t| t.def.clone()));
        notes.extend(mcp.notes.iter().cloned());
        self.mcp = Some(mcp);
        for n in &notes {
            self.emit(EventKind::Warning { text: n.clone() });
        }
        (!notes.is_empty()).then(|| {
            notes
                .iter()
                .map(|n| format!("[{n}]"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// An MCP failure as the tool result the model reads.
pub(super) fn tool_error(e: crate::mcp::McpError) -> ToolError {
    use crate::mcp::McpError;
    match e {
        McpError::Interrupted => ToolError::Interrupted,
        McpError::Denied(m) => ToolError::Denied(m),
        McpError::Start(m) | McpError::Call(m) | McpError::ToolFailed(m) => ToolError::Failed(m),
        e @ (McpError::StartFailed { .. } | McpError::CallFailed { .. }) => {
            ToolError::Failed(crate::model::error_chain(&e))
        }
    }
}
