//! [`AgentSpec`]: the complete declaration of one agent (flower's `AgentSpec`, seed 001 "角色"):
//! rules text, tool whitelist, limits, and how it may act.

use crate::model::{Role, ToolName};

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

    /// True when the agent executes commands, so it needs a sandbox (container): `Bash`, or
    /// MCP tools (stdio servers run in its container).
    pub fn needs_sandbox(&self) -> bool {
        self.has(ToolName::Bash) || self.wants_mcp()
    }

    /// Builder-style: replace the tool list.
    pub fn with_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }
}
