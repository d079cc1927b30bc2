//! What a server sends, made safe for the model: a `tools/call` result as text (the wire
//! shape, so any content kind the SDK knows or not is handled), capped keeping head and tail
//! like Bash output; and a tool's description and input schema as the model APIs accept them.

use serde_json::{json, Map, Value};

/// Characters of a tool's description kept.
pub const DESCRIPTION_MAX: usize = 2000;
/// Largest input schema offered, serialised, in bytes.
pub const SCHEMA_MAX: usize = 32 * 1024;

/// The text of a `CallToolResult` (as JSON) and whether the server marked it an error. At most
/// `cap` characters: longer text keeps its first and last `cap / 2` with a note between.
pub fn result_text(result: &Value, cap: usize) -> (String, bool) {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let mut parts: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        parts.push(block_text(block));
    }
    if parts.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            parts.push(serde_json::to_string_pretty(s).unwrap_or_default());
        }
    }
    let text = if parts.is_empty() {
        "(MCP 工具没有返回内容)".to_string()
    } else {
        parts.join("\n")
    };
    (cap_chars(&text, cap), is_error)
}

fn block_text(block: &Value) -> String {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let size = |field: &str| block.get(field).and_then(Value::as_str).map_or(0, str::len);
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("?");
    match kind {
        "text" => block
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        "image" | "audio" => format!(
            "[{kind} {mime},base64 {} 字节;flowerbox 只把文字交给模型]",
            size("data")
        ),
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or(Value::Null);
            let uri = r.get("uri").and_then(Value::as_str).unwrap_or("?");
            match r.get("text").and_then(Value::as_str) {
                Some(t) => format!("[资源 {uri}]\n{t}"),
                None => format!(
                    "[资源 {uri},二进制 base64 {} 字节,没放进结果]",
                    r.get("blob").and_then(Value::as_str).map_or(0, str::len)
                ),
            }
        }
        "resource_link" => format!(
            "[资源链接 {} {}]",
            block.get("uri").and_then(Value::as_str).unwrap_or("?"),
            block.get("name").and_then(Value::as_str).unwrap_or("")
        ),
        other => format!("[不认识的内容类型 {other:?}]"),
    }
}

/// `text` cut to at most `cap` characters (head and tail kept, a note between).
pub fn cap_chars(text: &str, cap: usize) -> String {
    let total = text.chars().count();
    if total <= cap {
        return text.to_string();
    }
    let half = cap / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!(
        "{head}\n[MCP 结果共 {total} 字符,中间省略 {} 字符]\n{tail}",
        total - 2 * half
    )
}

/// A description for the model: the server and original name first, control characters
/// removed, at most [`DESCRIPTION_MAX`] characters.
pub fn description(server: &str, original: &str, text: Option<&str>, read_only: bool) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
            .collect()
    };
    let mut head = format!(
        "[项目 MCP 服务器 {} 的工具 {}{}]",
        clean(server),
        clean(original),
        if read_only { ",只读" } else { "" }
    );
    if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
        head.push(' ');
        head.push_str(&clean(t));
    }
    if head.chars().count() > DESCRIPTION_MAX {
        head = head.chars().take(DESCRIPTION_MAX).collect::<String>() + "…";
    }
    head
}

/// Why a tool's input schema is not offered to the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    /// Its `type` is not `object`.
    #[error("inputSchema 的 type 是 {0},不是 object")]
    NotObject(Value),
    /// Serialised, it is larger than [`SCHEMA_MAX`] bytes (this many).
    #[error("inputSchema 有 {0} 字节,超过 {SCHEMA_MAX}")]
    TooLarge(usize),
}

/// The input schema as the model APIs accept it: an object schema (`type: object`) without
/// top-level `oneOf`/`allOf`/`anyOf` (the Messages API refuses those; they are dropped, the
/// server still validates), at most [`SCHEMA_MAX`] bytes. `Err` says why it is unusable.
pub fn input_schema(schema: &Map<String, Value>) -> Result<Value, SchemaError> {
    let mut s = schema.clone();
    match s.get("type") {
        None => {
            s.insert("type".into(), json!("object"));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => return Err(SchemaError::NotObject(other.clone())),
    }
    for k in ["oneOf", "allOf", "anyOf"] {
        s.remove(k);
    }
    let value = Value::Object(s);
    let size = serde_json::to_string(&value).map_or(usize::MAX, |t| t.len());
    if size > SCHEMA_MAX {
        return Err(SchemaError::TooLarge(size));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_content_kind_becomes_text() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAAAAAA"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
            {"type": "hologram"}
        ], "isError": true});
        let (text, err) = result_text(&r, 10_000);
        assert!(err);
        for want in [
            "hello",
            "image/png",
            "[资源 file:///a]\ninside",
            "8 字节",
            "file:///c",
            "hologram",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        let (text, err) = result_text(&json!({"structuredContent": {"n": 1}}), 100);
        assert!(!err && text.contains("\"n\": 1"));
        assert_eq!(result_text(&json!({}), 100).0, "(MCP 工具没有返回内容)");
    }

    #[test]
    fn huge_results_keep_head_and_tail() {
        let big = format!("HEAD{}TAIL", "汉".repeat(100_000));
        let (text, _) = result_text(&json!({"content": [{"type": "text", "text": big}]}), 1000);
        assert!(text.starts_with("HEAD") && text.ends_with("TAIL"));
        assert!(text.chars().count() < 1100);
        assert!(text.contains("100008 字符"));
    }

    #[test]
    fn schemas_and_descriptions_are_made_acceptable() {
        let obj = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            input_schema(&obj(json!({}))).unwrap(),
            json!({"type": "object"})
        );
        let s = input_schema(&obj(
            json!({"type": "object", "anyOf": [{}], "properties": {}}),
        ))
        .unwrap();
        assert!(s.get("anyOf").is_none() && s["properties"].is_object());
        assert!(input_schema(&obj(json!({"type": "string"}))).is_err());
        let huge = json!({"type": "object", "description": "x".repeat(SCHEMA_MAX)});
        assert!(input_schema(&obj(huge)).is_err());
        let d = description("srv", "t\u{1b}[31m", Some(&"d".repeat(5000)), true);
        assert!(d.starts_with("[项目 MCP 服务器 srv 的工具 t [31m,只读] dd"));
        assert!(!d.contains('\u{1b}'));
        assert_eq!(d.chars().count(), DESCRIPTION_MAX + 1);
    }
}
