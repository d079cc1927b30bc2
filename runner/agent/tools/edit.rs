//! `Edit`: exact string replacement; `old_string` must match exactly once unless `replace_all`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};

use super::read::looks_binary;
use super::{parse_input, Tool, ToolContext, ToolError};
use crate::agent::confine::Access;
use crate::model::ToolName;

pub(super) struct EditTool;

#[derive(Deserialize)]
struct Args {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Why an edit cannot be applied (the text is for the model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EditError {
    /// `old_string` is empty.
    #[error("old_string 是空的;新建文件用 Write")]
    Empty,
    /// `old_string` equals `new_string`.
    #[error("old_string 和 new_string 一样,没有要改的")]
    Unchanged,
    /// `old_string` does not occur.
    #[error("old_string 在文件里找不到(要逐字符一致,包括缩进和换行)")]
    NotFound,
    /// `old_string` occurs this many times and `replace_all` is off.
    #[error("old_string 在文件里出现了 {0} 次;多给些上下文让它唯一,或者用 replace_all")]
    NotUnique(usize),
}

/// Applies one edit to `text`: the new text and how many places changed.
pub(crate) fn apply_edit(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, usize), EditError> {
    if old.is_empty() {
        return Err(EditError::Empty);
    }
    if old == new {
        return Err(EditError::Unchanged);
    }
    let count = text.matches(old).count();
    match (count, replace_all) {
        (0, _) => Err(EditError::NotFound),
        (n, false) if n > 1 => Err(EditError::NotUnique(n)),
        (n, _) => Ok((text.replace(old, new), n)),
    }
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
        let (_, bytes) = super::fsio::read(ctx, &a.file_path, Access::Write).await?;
        if looks_binary(&bytes) {
            return Err(ToolError::Failed(format!(
                "{} 是二进制文件,不能 Edit",
                a.file_path
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| ToolError::Failed(format!("{} 不是 UTF-8 文本", a.file_path)))?;
        let (new_text, n) = apply_edit(&text, &a.old_string, &a.new_string, a.replace_all)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let (path, _) = super::fsio::write(ctx, &a.file_path, new_text.into_bytes()).await?;
        Ok(format!("已修改 {}({n} 处)", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_match_required() {
        assert_eq!(
            apply_edit("a b a", "b", "c", false).unwrap(),
            ("a c a".into(), 1)
        );
        assert!(apply_edit("a b a", "a", "c", false)
            .unwrap_err()
            .to_string()
            .contains("2 次"));
        assert_eq!(
            apply_edit("a b a", "a", "c", true).unwrap(),
            ("c b c".into(), 2)
        );
        assert!(apply_edit("abc", "x", "y", false).is_err());
        assert!(apply_edit("abc", "a", "a", false).is_err());
        assert!(apply_edit("abc", "", "y", false).is_err());
        assert_eq!(
            apply_edit("汉字测试", "字测", "X", false).unwrap().0,
            "汉X试"
        );
    }
}
