//! `Write`: creates or overwrites a file (parents created), inside the agent's writable mounts.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;

pub(super) struct WriteTool;

#[derive(Deserialize)]
struct Args {
    file_path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        ToolName::Write.as_str()
    }
    fn description(&self) -> String {
        "Writes a file, replacing it if it exists; parent directories are created.".into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "file_path": {"type": "string"},
            "content": {"type": "string"}
        }, "required": ["file_path", "content"]})
    }
    fn mutating(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        let abs = super::fsio::absolute(ctx, &a.file_path)?;
        let (path, existed) = ctx
            .files
            .write(ctx.confine.view(), &abs, a.content.as_bytes().to_vec())
            .await
            .map_err(|e| super::fsio::tool_error(ctx, &a.file_path, e))?;
        if let Some(wb) = &ctx.workbench {
            if path.starts_with(wb.root()) {
                let _ = wb.refresh();
            }
        }
        Ok(format!(
            "{} {}({} 行)",
            if existed { "已覆盖" } else { "已创建" },
            path.display(),
            a.content.lines().count()
        ))
    }
}
