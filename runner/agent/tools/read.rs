//! `Read`: a text file with line numbers (`cat -n` style), `offset`/`limit` in lines; binary
//! files are refused with a clear result.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::agent::confine::Access;
use crate::model::ToolName;
use crate::sandbox::files::Contents;

/// Lines returned when no limit is given.
const DEFAULT_LIMIT: usize = 2000;
/// Characters kept per line.
const MAX_LINE: usize = 2000;

pub(super) struct ReadTool;

#[derive(Deserialize)]
struct Args {
    file_path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

use crate::sandbox::files::looks_binary;

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        ToolName::Read.as_str()
    }
    fn description(&self) -> String {
        "Reads a text file. Output has line numbers (cat -n style). `offset` is the 1-based first line, \
         `limit` the number of lines (default 2000). Binary files are refused."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "file_path": {"type": "string", "description": "Absolute path, or relative to the working directory"},
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1}
        }, "required": ["file_path"]})
    }
    fn spills(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        let abs = super::fsio::absolute(ctx, &a.file_path)?;
        let (_, contents) = ctx
            .files
            .read(ctx.confine.view(), &abs, Access::Read)
            .await
            .map_err(|e| super::fsio::tool_error(ctx, &a.file_path, e))?;
        let Contents::File(bytes) = contents else {
            return Err(ToolError::Failed(format!(
                "{} 是目录,不是文件;列目录用 Glob 或 Bash ls",
                a.file_path
            )));
        };
        if looks_binary(&bytes) {
            return Err(ToolError::Failed(format!(
                "{} 是二进制文件({} 字节),Read 只读文本。要看它是什么,用 Bash 跑 `file`",
                a.file_path,
                bytes.len()
            )));
        }
        let text = String::from_utf8_lossy(&bytes);
        if text.is_empty() {
            return Ok(format!("({} 是空文件)", a.file_path));
        }
        let start = a.offset.unwrap_or(1).max(1);
        let limit = a.limit.unwrap_or(DEFAULT_LIMIT).max(1);
        let total = text.lines().count();
        if start > total {
            return Err(ToolError::Failed(format!(
                "{} 只有 {total} 行,offset {start} 超出范围",
                a.file_path
            )));
        }
        let mut out = String::new();
        for (i, line) in text.lines().enumerate().skip(start - 1).take(limit) {
            let line: String = if line.chars().count() > MAX_LINE {
                line.chars().take(MAX_LINE).collect::<String>() + "…"
            } else {
                line.to_string()
            };
            out.push_str(&format!("{:>6}\t{}\n", i + 1, line));
        }
        let shown_end = (start - 1 + limit).min(total);
        if shown_end < total {
            out.push_str(&format!(
                "(第 {start}–{shown_end} 行,共 {total} 行;用 offset/limit 读其余部分)\n"
            ));
        }
        Ok(out)
    }
}
