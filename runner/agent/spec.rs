//! [`AgentSpec`]: the complete declaration of one agent (flower's `AgentSpec`, seed 001 "角色"):
//! rules text, tool whitelist, limits, and how it may act.

use crate::model::ToolName;
use crate::role::Role;

/// One agent's declaration. Role factories in [`crate::agent::roles`] build these; a workflow
/// file or a Rust user can build one directly.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    /// Role name; also the default step name and the prefix of instance names.
    pub name: String,
    /// The role (headers, container rights, guards).
    pub role: Role,
    /// Rules and domain instructions, appended to the base system prompt.
    pub instructions: String,
    /// The exclusive tool whitelist: tools offered to the model, and the only ones the
    /// runtime executes (whitelist guard), whatever the model calls.
    pub tools: Vec<String>,
    /// Model id; `None` inherits the runtime's model.
    pub model: Option<String>,
    /// Most model turns (calls) for one run of this agent; `None` is unlimited.
    pub max_turns: Option<u32>,
    /// Budget in USD; the agent stops before a call would start past it.
    pub max_budget_usd: Option<f64>,
    /// Bash is restricted to glance (ephemeral, read-only) commands: the delegate guard.
    pub glance_only: bool,
    /// Show the workbench and its current index to this agent at the end of its system prompt.
    pub workbench_index: bool,
    /// Worker definitions this agent may dispatch with the `Agent` tool.
    pub workers: Vec<WorkerDef>,
    /// Hold the final report to the four-part worker format (结论 / 依据 / 产出 / 未验证).
    pub report_format: bool,
    /// Of the project's MCP tools its whitelist admits, offer only those marked
    /// `readOnlyHint: true` (`once -p plan`; the read-only roles always are).
    pub mcp_read_only: bool,
}

/// A worker the coordinator can dispatch (flower's `worker()` `AgentDefinition`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerDef {
    /// Name the coordinator picks it by (`subagent_type`).
    pub kind: String,
    /// What kind of work goes to it (shown to the coordinator).
    pub description: String,
    /// The worker's own spec.
    pub spec: AgentSpec,
}

impl AgentSpec {
    /// A bare spec with read-only tools; role factories fill in the rest.
    pub fn new(name: impl Into<String>, role: Role, instructions: impl Into<String>) -> Self {
        AgentSpec {
            name: name.into(),
            role,
            instructions: instructions.into(),
            tools: super::roles::names(&[ToolName::Read, ToolName::Glob, ToolName::Grep]),
            model: None,
            max_turns: None,
            max_budget_usd: None,
            glance_only: false,
            workbench_index: false,
            workers: Vec::new(),
            report_format: false,
            mcp_read_only: false,
        }
    }

    /// True when `tool` is on the whitelist.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == tool)
    }

    /// True when flowerbox's own `tool` is on the whitelist.
    pub fn has(&self, tool: ToolName) -> bool {
        self.allows(tool.as_str())
    }

    /// True when the whitelist admits project MCP tools (`mcp__*`, `mcp__<server>`,
    /// `mcp__<server>__<tool>`; see [`crate::mcp::names`]).
    pub fn wants_mcp(&self) -> bool {
        self.tools.iter().any(|t| crate::mcp::names::is_entry(t))
    }

    /// True when the agent can run a command, so it needs a sandbox (a container) — and only
    /// then (issue 32 §1; the file tools work on the host's race-free view of its mounts):
    /// - `Bash` (its background tasks, `TaskOutput`/`TaskStop`, are Bash's);
    /// - a stdio server among `servers` that its whitelist admits (started in its container;
    ///   `mcp__*` with only HTTP servers, or none, runs nothing);
    /// - `plugins`' hooks, for the roles that run them (`once`, coordinator, worker): hooks
    ///   run only in an agent's container, and the roles DESIGN.md runs without one
    ///   (clarifier, oracle, a judge without `Bash`) stay without.
    pub fn runs_commands(
        &self,
        servers: &[crate::mcp::ServerConfig],
        plugins: &crate::plugin::Plugins,
    ) -> bool {
        let stdio = servers.iter().any(|s| {
            matches!(s.transport, crate::mcp::Transport::Stdio { .. })
                && crate::mcp::names::wants_server(&self.tools, &s.id)
        });
        let hooks = !plugins.hooks.is_empty()
            && matches!(self.role, Role::Once | Role::Coordinator | Role::Worker);
        self.has(ToolName::Bash) || stdio || hooks
    }
}

#[cfg(test)]
mod tests {
    use crate::mcp::{ServerConfig, Transport};
    use crate::plugin::{Hook, HookEvent, HookSpec, Plugins};

    fn server(id: &str, stdio: bool) -> ServerConfig {
        ServerConfig {
            name: id.into(),
            id: id.into(),
            origin: ".mcp.json".into(),
            transport: match stdio {
                true => Transport::Stdio {
                    command: "srv".into(),
                    args: Vec::new(),
                    env: Vec::new(),
                },
                false => Transport::Http {
                    url: "http://127.0.0.1:1/mcp".into(),
                    headers: Vec::new(),
                },
            },
        }
    }

    fn hooked() -> Plugins {
        Plugins {
            hooks: vec![Hook {
                plugin: "p".into(),
                root: "/p".into(),
                spec: HookSpec {
                    event: HookEvent::SessionStart,
                    matcher: String::new(),
                    pattern: None,
                    command: "true".into(),
                    timeout: std::time::Duration::from_secs(5),
                },
            }],
            ..Plugins::default()
        }
    }

    #[test]
    fn only_an_agent_that_can_run_a_command_needs_a_sandbox() {
        let none = Plugins::default();
        let mut once = super::super::roles::once("", Vec::new(), None);
        // `once`'s default tools: no command, whatever MCP servers are only HTTP.
        once.tools = ["Read", "Glob", "Grep", "mcp__*"]
            .map(String::from)
            .to_vec();
        assert!(!once.runs_commands(&[], &none));
        assert!(!once.runs_commands(&[server("web", false)], &none));
        // A stdio server the whitelist admits starts in the agent's container.
        assert!(once.runs_commands(&[server("db", true)], &none));
        once.tools = ["Read", "mcp__web"].map(String::from).to_vec();
        assert!(!once.runs_commands(&[server("db", true), server("web", false)], &none));
        // Plugin hooks run in `once`'s container; never in the containerless roles'.
        assert!(once.runs_commands(&[], &hooked()));
        let clarifier = super::super::roles::clarifier("c", "", true);
        assert!(!clarifier.runs_commands(&[], &hooked()));
        assert!(!super::super::roles::judge("j", "", false).runs_commands(&[], &hooked()));
        assert!(super::super::roles::judge("j", "", true).runs_commands(&[], &none));
        once.tools = vec!["Bash".into()];
        assert!(once.runs_commands(&[], &none));
    }
}
