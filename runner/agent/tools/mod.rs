//! Tools as the model knows them from Claude Code: a [`Tool`] trait, a [`ToolRegistry`], and the
//! [`ToolContext`] a call runs in. Every failure a tool meets is a [`ToolError`], which the
//! runtime turns into a `tool_result` with `is_error` — never a crash.

mod agent_tool;
pub(crate) mod background;
mod bash;
mod crlf;
mod edit;
mod fsio;
mod human;
mod read;
mod search;
mod skill;
mod todo;
mod webfetch;
mod webtext;
mod write;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::confine::Confinement;
use super::workbench::Workbench;
use crate::agent::human::Human;
use crate::model::ToolDef;
use crate::role::Role;
use crate::sandbox::{AgentBox, Sandbox, SandboxError, SandboxFactory, SandboxFiles};

pub use agent_tool::{DispatchRequest, Dispatcher};
pub use bash::format_output as format_bash_output;
pub use skill::NAME as SKILL_TOOL;

/// Why a tool call failed. Every variant becomes an error `tool_result` the model can read.
#[derive(Debug, Error, PartialEq)]
pub enum ToolError {
    /// The input did not match the tool's schema.
    #[error("输入不合法:{0}")]
    InvalidInput(String),
    /// A guard or the whitelist refused the call.
    #[error("{0}")]
    Denied(String),
    /// A path outside the agent's mounts, or read-only.
    #[error("{0}")]
    Path(String),
    /// The tool ran and failed (file missing, not unique, HTTP error...).
    #[error("{0}")]
    Failed(String),
    /// The call was interrupted by the human (not an environment fault).
    #[error("interrupted: 这次工具调用被人打断了,不是环境故障")]
    Interrupted,
}

/// One tool.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls.
    fn name(&self) -> &'static str;
    /// What it does, for the model.
    fn description(&self) -> String;
    /// JSON Schema of the input.
    fn input_schema(&self) -> Value;
    /// Changes files or runs commands, itself or through the workers it dispatches (rights are
    /// enforced by mounts; `once -p plan` offers no tool that says so).
    fn mutating(&self) -> bool {
        false
    }
    /// Large results of this tool are spilled to the workbench (Bash, Read, Grep, Glob,
    /// WebFetch).
    fn spills(&self) -> bool {
        false
    }
    /// Runs the call.
    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError>;

    /// The definition offered to the model.
    fn definition(&self) -> ToolDef {
        ToolDef {
            name: self.name().to_string(),
            description: self.description(),
            input_schema: self.input_schema(),
        }
    }
}

/// Limits that apply to tool calls.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// Bash timeout when the model gives none.
    pub bash_default_timeout: Duration,
    /// Largest Bash timeout the model may ask for.
    pub bash_max_timeout: Duration,
    /// Characters of Bash output kept in the result (head and tail).
    pub bash_output_cap: usize,
    /// Bytes a WebFetch reads at most.
    pub webfetch_max_bytes: usize,
    /// Where WebFetch may connect: the run's egress policy, the same one its pod enforces.
    pub egress: crate::sandbox::egress::EgressPolicy,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            bash_default_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            bash_output_cap: 30_000,
            webfetch_max_bytes: 2 * 1024 * 1024,
            egress: crate::sandbox::egress::EgressPolicy::default(),
        }
    }
}

/// Where a call runs: who is calling, what it may touch, and the services it can reach.
pub struct ToolContext {
    /// Agent instance name.
    pub agent: String,
    /// Its role.
    pub role: Role,
    /// 0 for the main thread.
    pub depth: u32,
    /// Paths the file tools may touch.
    pub confine: Confinement,
    /// The run's file operations (through its backend), on [`ToolContext::confine`]'s view.
    pub files: Arc<dyn SandboxFiles>,
    /// The agent's box, for its sandbox.
    pub agent_box: AgentBox,
    /// Hands out the agent's sandbox (container) on first use; `None` when the agent may not
    /// execute commands.
    pub sandboxes: Option<Arc<dyn SandboxFactory>>,
    /// The workbench, if any.
    pub workbench: Option<Workbench>,
    /// The human channel.
    pub human: Arc<dyn Human>,
    /// Cancelled when the human interrupts the turn.
    pub cancel: CancellationToken,
    /// The agent's todo list (TodoWrite).
    pub todos: Mutex<Vec<Value>>,
    /// The agent's background commands (kept by its session loop across turns).
    pub background: Arc<Mutex<background::Background>>,
    /// Runs subagents for the `Agent` tool.
    pub dispatcher: Option<Arc<dyn Dispatcher>>,
    /// Limits.
    pub limits: ToolLimits,
    /// Extra environment for commands (never credentials).
    pub env: Vec<(String, String)>,
    /// The run's plugins (the `Skill` tool reads their skills).
    pub plugins: Arc<crate::plugin::Plugins>,
    /// A scoped worker's write scope, described ([`crate::agent::scope`]): a failing command's
    /// result names it.
    pub write_scope: Option<String>,
    sandbox: OnceCell<Arc<dyn Sandbox>>,
    /// The sandbox's start begun by [`ToolContext::start_sandbox_early`], taken by the first
    /// [`ToolContext::sandbox`].
    early: Mutex<Option<EarlyStart>>,
}

/// A sandbox start running in the background.
type EarlyStart = tokio::task::JoinHandle<Result<Arc<dyn Sandbox>, SandboxError>>;

impl ToolContext {
    /// A context; the sandbox is created lazily on the first Bash call.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        agent: String,
        role: Role,
        depth: u32,
        agent_box: AgentBox,
        sandboxes: Option<Arc<dyn SandboxFactory>>,
        workbench: Option<Workbench>,
        human: Arc<dyn Human>,
        cancel: CancellationToken,
        dispatcher: Option<Arc<dyn Dispatcher>>,
        limits: ToolLimits,
    ) -> Self {
        let confine = Confinement::masking(
            agent_box.mounts.clone(),
            agent_box.masked.clone(),
            agent_box.workdir.clone(),
        );
        // The run's backend does the file operations; an agent without commands takes them
        // from the run's factory too once it has one ([`ToolContext::files`] is public).
        let files = sandboxes.as_ref().map_or_else(
            || Arc::new(crate::sandbox::files::LocalFiles) as Arc<dyn SandboxFiles>,
            |f| f.files(),
        );
        ToolContext {
            agent,
            role,
            depth,
            confine,
            files,
            agent_box,
            sandboxes,
            workbench,
            human,
            cancel,
            todos: Mutex::new(Vec::new()),
            background: Default::default(),
            dispatcher,
            limits,
            env: Vec::new(),
            plugins: Arc::new(crate::plugin::Plugins::default()),
            write_scope: None,
            sandbox: OnceCell::new(),
            early: Mutex::new(None),
        }
    }

    /// Starts creating the agent's sandbox now, in the background (issue 17: while its first
    /// model request is in flight), when the agent may execute commands; nothing otherwise.
    /// The first [`ToolContext::sandbox`] waits for that start and reports its failure as
    /// its own. Must be called inside a Tokio runtime.
    pub fn start_sandbox_early(&self) {
        let Some(factory) = self.sandboxes.clone() else {
            return;
        };
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        if early.is_some() || self.sandbox.initialized() {
            return;
        }
        let spec = self.agent_box.clone();
        *early = Some(tokio::spawn(async move { factory.sandbox(&spec).await }));
    }

    /// The agent's sandbox, created on first use (or by the start
    /// [`ToolContext::start_sandbox_early`] began).
    pub async fn sandbox(&self) -> Result<Arc<dyn Sandbox>, ToolError> {
        let factory = self
            .sandboxes
            .clone()
            .ok_or_else(|| ToolError::Denied(format!("{} 没有执行命令的环境", self.agent)))?;
        self.sandbox
            .get_or_try_init(|| async move {
                let early = self.early.lock().unwrap_or_else(|e| e.into_inner()).take();
                match early {
                    Some(started) => match started.await {
                        Ok(result) => result,
                        // The start panicked or was aborted: start again, as without it.
                        Err(_) => factory.sandbox(&self.agent_box).await,
                    },
                    None => factory.sandbox(&self.agent_box).await,
                }
            })
            .await
            .cloned()
            .map_err(|e| ToolError::Failed(format!("沙箱启动失败:{e}")))
    }

    /// True when `path` is inside the workbench's `spill/` (reading it back is not spilled).
    pub fn is_spill_file(&self, path: &std::path::Path) -> bool {
        self.workbench
            .as_ref()
            .is_some_and(|wb| path.starts_with(wb.spill()))
    }
}

/// Parses a tool input into its typed arguments; schema mismatches are [`ToolError::InvalidInput`].
pub fn parse_input<T: DeserializeOwned>(input: &Value) -> Result<T, ToolError> {
    serde_json::from_value(input.clone()).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Every tool flowerbox has, by name.
pub struct ToolRegistry {
    tools: HashMap<&'static str, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The standard set: Read, Write, Edit, Glob, Grep, Bash, TodoWrite, Agent,
    /// mcp__human__ask, mcp__human__inbox, WebFetch. (WebSearch needs a search provider and is
    /// not offered.)
    pub fn standard() -> Self {
        let list: Vec<Arc<dyn Tool>> = vec![
            Arc::new(read::ReadTool),
            Arc::new(write::WriteTool),
            Arc::new(edit::EditTool),
            Arc::new(search::GlobTool),
            Arc::new(search::GrepTool),
            Arc::new(bash::BashTool),
            Arc::new(todo::TodoWriteTool),
            Arc::new(agent_tool::AgentTool),
            Arc::new(human::AskTool),
            Arc::new(human::InboxTool),
            Arc::new(webfetch::WebFetchTool),
            Arc::new(skill::SkillTool),
            Arc::new(background::TaskOutputTool),
            Arc::new(background::TaskStopTool),
        ];
        ToolRegistry {
            tools: list.into_iter().map(|t| (t.name(), t)).collect(),
        }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Definitions of the named tools that exist, in the given order.
    pub fn definitions(&self, names: &[String]) -> Vec<ToolDef> {
        names
            .iter()
            .filter_map(|n| self.tools.get(n.as_str()))
            .map(|t| t.definition())
            .collect()
    }

    /// Whether the tool called `name` writes files or runs commands (the tools `once -p plan`
    /// leaves out); unknown names are not.
    pub fn is_mutating(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|t| t.mutating())
    }

    /// Names of every registered tool, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.tools.keys().copied().collect();
        v.sort();
        v
    }
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::standard()
    }
}

#[cfg(test)]
mod tests;
