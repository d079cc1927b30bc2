//! `Agent`: dispatches a worker with a description and a prompt (the task brief) and returns
//! its final report. Several `Agent` calls in one assistant message run in parallel.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;

pub(super) struct AgentTool;

/// What the coordinator asked for.
#[derive(Debug, Clone, Deserialize)]
pub struct DispatchRequest {
    /// Three to five words on the task.
    pub description: String,
    /// The task brief.
    pub prompt: String,
    /// Which worker definition (`subagent_type`); the first one when absent.
    #[serde(default)]
    pub subagent_type: Option<String>,
    /// What the worker may write (issue 27 §3): paths relative to the repository root; the
    /// rest of its place is read-only. `None`: everything.
    #[serde(default)]
    pub writes: Option<Vec<String>>,
}

/// Runs subagents; implemented by the runtime.
#[async_trait]
pub trait Dispatcher: Send + Sync {
    /// Runs one worker to the end of its turn; `Ok` is its report (plus any integration report),
    /// `Err` what the coordinator reads instead.
    async fn dispatch(
        &self,
        parent: &ToolContext,
        req: DispatchRequest,
    ) -> Result<String, ToolError>;

    /// Sees one of the dispatching agent's calls as soon as the model's stream has it whole,
    /// before its message ends (issue 32 §4): the worker of an `Agent` call may be prepared
    /// then, and [`Dispatcher::dispatch`] takes it. Never blocks. The default: nothing.
    fn speculate(&self, call: &crate::model::ToolCall) {
        let _ = call;
    }

    /// Undoes what [`Dispatcher::speculate`] prepared and no dispatch took (its container,
    /// its place): called once a message's calls have run, and when the turn ends. The
    /// default: nothing.
    async fn settle(&self) {}
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &'static str {
        ToolName::Agent.as_str()
    }
    fn description(&self) -> String {
        "Dispatches a worker subagent with a task brief and returns its final report. The worker has its own \
         sandbox and context; it does not see your conversation, so the prompt must say everything task-specific \
         (goal, acceptance, paths, where the workbench is). Independent tasks: several Agent calls in one message \
         run in parallel. `writes` (optional) limits what the worker may write to the listed paths \
         (relative to the repository root; a directory ends with `/`); everything else is read-only for it. \
         Give workers that run in parallel disjoint `writes`: workers whose scopes overlap (and a worker \
         without `writes` and any scoped one) never run at the same time, the later one waits."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "description": {"type": "string", "description": "3-5 words"},
            "prompt": {"type": "string", "description": "the task brief"},
            "subagent_type": {"type": "string"},
            "writes": {"type": "array", "items": {"type": "string"},
                "description": "paths (relative to the repository root) the worker may write; directories end with /"}
        }, "required": ["description", "prompt"]})
    }
    fn mutating(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let req: DispatchRequest = parse_input(input)?;
        if req.prompt.trim().is_empty() {
            return Err(ToolError::InvalidInput("prompt(任务书)是空的".into()));
        }
        if let Some(w) = &req.writes {
            crate::agent::scope::WriteScope::parse(w)
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        }
        let d = ctx
            .dispatcher
            .clone()
            .ok_or_else(|| ToolError::Denied(format!("{} 不能派 subagent", ctx.agent)))?;
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Interrupted);
        }
        d.dispatch(ctx, req).await
    }
}
