//! `Glob` and `Grep` with ripgrep semantics: a walk of the agent's race-free view
//! ([`crate::fsroot::walk`]: directory handles, `.gitignore`/`.ignore`/`info/exclude` as `rg`
//! reads them, symlinks never followed), `globset` patterns, and `grep-searcher` matching on
//! files opened from their directory's handle.

use async_trait::async_trait;
use globset::{GlobBuilder, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::SystemTime;

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::agent::confine::Access;
use crate::fsroot::walk::{walk, Rules};
use crate::model::ToolName;

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

/// Grep's `glob` as an override set rooted at `base`.
fn overrides(base: &std::path::Path, glob: &str) -> Result<ignore::overrides::Override, ToolError> {
    let mut ob = ignore::overrides::OverrideBuilder::new(base);
    ob.add(glob)
        .map_err(|e| ToolError::InvalidInput(format!("glob: {e}")))?;
    ob.build()
        .map_err(|e| ToolError::InvalidInput(e.to_string()))
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
        let glob = GlobBuilder::new(&a.pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::InvalidInput(format!("pattern: {e}")))?;
        let set = GlobSetBuilder::new()
            .add(glob)
            .build()
            .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
        let shown = base_of(ctx, &a.path);
        let view = ctx.confine.view().clone();
        let (base, mut found) = super::fsio::with(ctx, &shown, Access::Read, false, move |r| {
            let mut v: Vec<(PathBuf, SystemTime)> = Vec::new();
            walk(&view, r, &Rules::default(), &mut |f| {
                let rel = f.path.strip_prefix(r.path()).unwrap_or(&f.path);
                if set.is_match(rel) {
                    let m = f.modified();
                    v.push((f.path, m));
                }
                true
            })?;
            Ok(v)
        })
        .await?;
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

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Content,
    Files,
    Count,
}

struct Collect<'a> {
    path: &'a str,
    numbers: bool,
    lines: Vec<String>,
    count: u64,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;
    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        let text = String::from_utf8_lossy(m.bytes());
        for (i, l) in text.trim_end_matches('\n').split('\n').enumerate() {
            match (self.numbers, m.line_number()) {
                (true, Some(n)) => self
                    .lines
                    .push(format!("{}:{}:{}", self.path, n + i as u64, l)),
                _ => self.lines.push(format!("{}:{}", self.path, l)),
            }
        }
        Ok(true)
    }
    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        let text = String::from_utf8_lossy(c.bytes());
        let l = text.trim_end_matches('\n');
        match (self.numbers, c.line_number()) {
            (true, Some(n)) => self.lines.push(format!("{}-{}-{}", self.path, n, l)),
            _ => self.lines.push(format!("{}-{}", self.path, l)),
        }
        Ok(true)
    }
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
            "content" => Mode::Content,
            "files_with_matches" => Mode::Files,
            "count" => Mode::Count,
            o => return Err(ToolError::InvalidInput(format!("output_mode {o:?}"))),
        };
        let shown = base_of(ctx, &a.path);
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(a.case_insensitive)
            .multi_line(true)
            .dot_matches_new_line(a.multiline)
            .build(&a.pattern)
            .map_err(|e| ToolError::InvalidInput(format!("pattern: {e}")))?;
        let types = match &a.r#type {
            Some(t) => {
                let mut types = ignore::types::TypesBuilder::new();
                types.add_defaults();
                types.select(t);
                Some(
                    types
                        .build()
                        .map_err(|e| ToolError::InvalidInput(format!("type: {e}")))?,
                )
            }
            None => None,
        };
        let glob = a.glob.clone();
        if let Some(g) = &glob {
            overrides(ctx.confine.workdir(), g)?;
        }
        let numbers = a.line_numbers.unwrap_or(true);
        let ctx_after = a.after.or(a.context).unwrap_or(0);
        let ctx_before = a.before.or(a.context).unwrap_or(0);
        let multiline = a.multiline;
        let head_limit = a.head_limit;
        let view = ctx.confine.view().clone();
        let (_, out) = super::fsio::with(ctx, &shown, Access::Read, false, move |r| {
            let rules = Rules {
                overrides: match &glob {
                    Some(g) => overrides(r.path(), g).ok(),
                    None => None,
                },
                types: types.clone(),
                ..Rules::default()
            };
            let mut searcher = SearcherBuilder::new()
                .line_number(true)
                .multi_line(multiline)
                .binary_detection(BinaryDetection::quit(0))
                .after_context(if mode == Mode::Content { ctx_after } else { 0 })
                .before_context(if mode == Mode::Content { ctx_before } else { 0 })
                .build();
            let mut lines = Vec::new();
            walk(&view, r, &rules, &mut |f| {
                let Ok(file) = f.open() else { return true };
                let p = f.path.display().to_string();
                let mut sink = Collect {
                    path: &p,
                    numbers,
                    lines: Vec::new(),
                    count: 0,
                };
                if searcher.search_file(&matcher, &file, &mut sink).is_err() || sink.count == 0 {
                    return true;
                }
                match mode {
                    Mode::Files => lines.push(p.clone()),
                    Mode::Count => lines.push(format!("{p}:{}", sink.count)),
                    Mode::Content => lines.extend(sink.lines),
                }
                head_limit.is_none_or(|h| lines.len() < h)
            })?;
            if let Some(h) = head_limit {
                lines.truncate(h);
            }
            Ok(lines)
        })
        .await?;
        if out.is_empty() {
            return Ok(format!("没有匹配 {} 的内容", a.pattern));
        }
        Ok(out.join("\n"))
    }
}
