//! `Edit`: exact string replacement; `old_string` must match exactly once unless `replace_all`
//! ([`crate::sandbox::files::apply_edit`], run by the run's backend).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::files::{Edit, EditRefused};

pub(super) struct EditTool;

#[derive(Deserialize)]
struct Args {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait]
impl Tool for EditTool {
    fn name(&self) -> &'static str {
        ToolName::Edit.as_str()
    }
    fn description(&self) -> String {
        "Replaces `old_string` with `new_string` in a file. The match is exact and must be unique unless \
         `replace_all` is true."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "file_path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean", "default": false}
        }, "required": ["file_path", "old_string", "new_string"]})
    }
    fn mutating(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        let abs = super::fsio::absolute(ctx, &a.file_path)?;
        let edit = Edit {
            old: a.old_string,
            new: a.new_string,
            all: a.replace_all,
        };
        let (path, done) = ctx
            .files
            .edit(ctx.confine.view(), &abs, &edit)
            .await
            .map_err(|e| super::fsio::tool_error(ctx, &a.file_path, e))?;
        match done {
            Ok(n) => Ok(format!("已修改 {}({n} 处)", path.display())),
            Err(EditRefused::Binary) => Err(ToolError::Failed(format!(
                "{} 是二进制文件,不能 Edit",
                a.file_path
            ))),
            Err(EditRefused::NotUtf8) => Err(ToolError::Failed(format!(
                "{} 不是 UTF-8 文本",
                a.file_path
            ))),
            Err(EditRefused::Text(e)) => Err(ToolError::Failed(e.to_string())),
        }
    }
}
