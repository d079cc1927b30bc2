//! `mcp__human__ask` and `mcp__human__inbox`: the model's side of the human channel.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::agent::human::Asker;
use crate::agent::roles::{ASK_TOOL, INBOX_TOOL};

pub(super) struct AskTool;
pub(super) struct InboxTool;

#[derive(Deserialize)]
struct AskArgs {
    #[serde(default)]
    question: String,
    #[serde(default)]
    options: Vec<String>,
}

#[async_trait]
impl Tool for AskTool {
    fn name(&self) -> &'static str {
        ASK_TOOL
    }
    fn description(&self) -> String {
        "Asks the human one question and waits for the answer. Give `options` when the answer is a choice. \
         The human may be away: then you get a fixed text telling you to decide yourself."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}}
        }, "required": ["question"]})
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: AskArgs = parse_input(input)?;
        // An interrupt does not withdraw a pending question (seed 000 "Ctrl-C": 打断不影响它们);
        // the interruption takes effect at the next message boundary.
        let asker = Asker {
            agent: &ctx.agent,
            role: ctx.role,
            depth: ctx.depth,
        };
        let outcome = ctx.human.ask(asker, &a.question, &a.options).await;
        Ok(outcome.tool_text())
    }
}

#[async_trait]
impl Tool for InboxTool {
    fn name(&self) -> &'static str {
        INBOX_TOOL
    }
    fn description(&self) -> String {
        "Takes the messages the human sent since you last looked (new requirements, corrections)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }

    async fn call(&self, _input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let msgs = ctx.human.inbox();
        if msgs.is_empty() {
            return Ok("收件箱是空的。".into());
        }
        let mut out = format!(
            "收件箱有 {} 条新消息(人在运行中追加的话,已追加进需求确认书):\n",
            msgs.len()
        );
        for (i, m) in msgs.iter().enumerate() {
            out.push_str(&format!("{}. {}\n", i + 1, m));
        }
        Ok(out)
    }
}
