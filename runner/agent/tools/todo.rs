//! `TodoWrite`: the agent's own task list, kept in memory for the agent's run.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;

pub(super) struct TodoWriteTool;

#[derive(Deserialize)]
struct Todo {
    content: String,
    status: String,
}

#[derive(Deserialize)]
struct Args {
    todos: Vec<Value>,
}

#[async_trait]
impl Tool for TodoWriteTool {
    fn name(&self) -> &'static str {
        ToolName::TodoWrite.as_str()
    }
    fn description(&self) -> String {
        "Replaces your todo list. Each item: {content, status: pending|in_progress|completed, activeForm}.".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "todos": {"type": "array", "items": {"type": "object", "properties": {
                "content": {"type": "string"},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                "activeForm": {"type": "string"}
            }, "required": ["content", "status"]}}
        }, "required": ["todos"]})
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        let mut done = 0;
        for t in &a.todos {
            let t: Todo = serde_json::from_value(t.clone())
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
            match t.status.as_str() {
                "completed" => done += 1,
                "pending" | "in_progress" => {}
                other => {
                    return Err(ToolError::InvalidInput(format!(
                        "status {other:?} 不是 pending/in_progress/completed"
                    )))
                }
            }
            if t.content.trim().is_empty() {
                return Err(ToolError::InvalidInput("content 是空的".into()));
            }
        }
        let n = a.todos.len();
        *ctx.todos.lock().unwrap_or_else(|e| e.into_inner()) = a.todos;
        Ok(format!("待办已更新:{n} 项,完成 {done} 项"))
    }
}
