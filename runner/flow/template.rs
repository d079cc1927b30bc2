//! `{{name}}` templates of workflow files ([`super::declarative`]): which names a template
//! uses, and the text it becomes for a context.

use super::brief::Brief;
use super::ctx::Ctx;

/// The `{{name}}` keys of a template, trimmed, in order.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        out.push(after[..end].trim().to_string());
        rest = &after[end + 2..];
    }
    out
}

/// Fills a template from the context: step outputs, `ask`, `brief`, `goal`. A step that
/// produced nothing (skipped, failed with `skip`) fills in a visible note, not silence.
pub fn fill(template: &str, ctx: &Ctx, ask: Option<&str>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        out.push_str(&rest[..start]);
        let key = after[..end].trim();
        let value = match key {
            "ask" => ctx.var("ask").or(ask).map(str::to_string),
            "brief" => ctx.brief.as_ref().map(Brief::prompt_block),
            "goal" => ctx.goal.as_ref().map(|g| g.prompt_block()),
            k => ctx.output(k).map(str::to_string),
        };
        out.push_str(&value.unwrap_or_else(|| format!("(步骤「{key}」没有产出)")));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}
