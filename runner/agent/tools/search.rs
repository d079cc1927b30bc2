//! `Glob` and `Grep` with ripgrep semantics, run by the run's backend on the agent's view
//! ([`crate::sandbox::files::SandboxFiles::glob`], [`crate::sandbox::files::SandboxFiles::grep`]:
//! a race-free walk, ignore files as `rg` reads them, symlinks never followed).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::files::{GrepMode, GrepQuery};

/// Most paths Glob returns.
const GLOB_LIMIT: usize = 100;

pub(super) struct GlobTool;
pub(super) struct GrepTool;

/// The directory a search starts from, as the model wrote it (default: the working directory).
fn base_of(ctx: &ToolContext, path: &Option<String>) -> String {
    match path {
        Some(p) => p.clone(),
        None => ctx.confine.workdir().display().to_string(),
    }
}

#[derive(Deserialize)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &'static str {
        ToolName::Glob.as_str()
    }
    fn description(&self) -> String {
        "Finds files by glob pattern (`**/*.rs`), newest first, honouring .gitignore. `path` is the directory \
         to search (default: the working directory)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string"}
        }, "required": ["pattern"]})
    }
    fn spills(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: GlobArgs = parse_input(input)?;
        let shown = base_of(ctx, &a.path);
        let abs = super::fsio::absolute(ctx, &shown)?;
        let (base, mut found) = ctx
            .files
            .glob(ctx.confine.view(), &abs, &a.pattern)
            .await
            .map_err(|e| super::fsio::tool_error(ctx, &shown, e))?;
        found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if found.is_empty() {
            return Ok(format!(
                "在 {} 下没有匹配 {} 的文件",
                base.display(),
                a.pattern
            ));
        }
        let mut out: Vec<String> = found
            .iter()
            .take(GLOB_LIMIT)
            .map(|(p, _)| p.display().to_string())
            .collect();
        if found.len() > GLOB_LIMIT {
            out.push(format!(
                "(共 {} 个,只列出最新的 {GLOB_LIMIT} 个;把 pattern 写窄一点)",
                found.len()
            ));
        }
        Ok(out.join("\n"))
    }
}

#[derive(Deserialize)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    r#type: Option<String>,
    #[serde(default)]
    output_mode: Option<String>,
    #[serde(default, rename = "-i")]
    case_insensitive: bool,
    #[serde(default, rename = "-n")]
    line_numbers: Option<bool>,
    #[serde(default, rename = "-A")]
    after: Option<usize>,
    #[serde(default, rename = "-B")]
    before: Option<usize>,
    #[serde(default, rename = "-C")]
    context: Option<usize>,
    #[serde(default)]
    head_limit: Option<usize>,
    #[serde(default)]
    multiline: bool,
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        ToolName::Grep.as_str()
    }
    fn description(&self) -> String {
        "Searches file contents with a regular expression (ripgrep syntax). output_mode: files_with_matches \
         (default), content (with -n, -A/-B/-C), or count. Filter with `glob` (`*.rs`) or `type` (`rust`, `py`)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"},
            "type": {"type": "string"},
            "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
            "-i": {"type": "boolean"}, "-n": {"type": "boolean"},
            "-A": {"type": "integer"}, "-B": {"type": "integer"}, "-C": {"type": "integer"},
            "head_limit": {"type": "integer"}, "multiline": {"type": "boolean"}
        }, "required": ["pattern"]})
    }
    fn spills(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: GrepArgs = parse_input(input)?;
        let mode = match a.output_mode.as_deref().unwrap_or("files_with_matches") {
            "content" => GrepMode::Content,
            "files_with_matches" => GrepMode::Files,
            "count" => GrepMode::Count,
            o => return Err(ToolError::InvalidInput(format!("output_mode {o:?}"))),
        };
        let shown = base_of(ctx, &a.path);
        let abs = super::fsio::absolute(ctx, &shown)?;
        let query = GrepQuery {
            pattern: a.pattern.clone(),
            glob: a.glob.clone(),
            file_type: a.r#type.clone(),
            mode,
            case_insensitive: a.case_insensitive,
            numbers: a.line_numbers.unwrap_or(true),
            after: a.after.or(a.context).unwrap_or(0),
            before: a.before.or(a.context).unwrap_or(0),
            head_limit: a.head_limit,
            multiline: a.multiline,
        };
        let out = ctx
            .files
            .grep(ctx.confine.view(), &abs, &query)
            .await
            .map_err(|e| super::fsio::tool_error(ctx, &shown, e))?;
        if out.is_empty() {
            return Ok(format!("没有匹配 {} 的内容", a.pattern));
        }
        Ok(out.join("\n"))
    }
}
