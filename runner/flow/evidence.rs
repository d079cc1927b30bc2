//! The verdict record: after every judged round the runner appends the verdict and the evidence
//! the judge actually saw — each command it ran and that command's real output, read from its
//! session, never from its prose — to `notes/判定记录.md`. Like `问答记录.md` it is for people (and
//! `grep`), never for a model's context.

use std::path::Path;

use super::verdict::Verdict;
use crate::model::{ContentBlock, Message, ToolName};

/// The file name under `notes/`.
pub const RECORD_NAME: &str = "判定记录.md";
/// Lines of one command's output kept in the record.
const OUTPUT_LINES: usize = 12;

/// One command the judge ran and what came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The Bash command (or `Read <path>` etc. for other tools).
    pub command: String,
    /// The tool result as the judge saw it.
    pub output: String,
    /// The tool result was an error.
    pub is_error: bool,
}

/// The judge's tool calls paired with their results, in order.
pub fn evidence_of(messages: &[Message]) -> Vec<Evidence> {
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for m in messages {
        for b in &m.content {
            match b {
                ContentBlock::ToolUse { id, name, input } => {
                    let command = match input.get("command").and_then(|c| c.as_str()) {
                        Some(c) if ToolName::Bash.is(name) => c.to_string(),
                        _ => {
                            let arg = ["file_path", "pattern", "path"]
                                .iter()
                                .find_map(|k| input.get(*k).and_then(|v| v.as_str()))
                                .unwrap_or("");
                            format!("{name} {arg}").trim().to_string()
                        }
                    };
                    calls.push((id.clone(), command));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    if let Some(pos) = calls.iter().position(|(id, _)| id == tool_use_id) {
                        let (_, command) = calls.remove(pos);
                        out.push(Evidence {
                            command,
                            output: content.clone(),
                            is_error: *is_error,
                        });
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The markdown block of one judged round.
pub fn record_block(label: &str, verdict: &Verdict, evidence: &[Evidence], when: &str) -> String {
    let mut s = format!("## {label} — {} ({when})\n\n", verdict.state.as_str());
    if !verdict.reason.trim().is_empty() {
        s.push_str(&format!("理由:{}\n\n", verdict.reason.trim()));
    }
    if !verdict.failed.is_empty() {
        s.push_str("未通过:\n");
        for f in &verdict.failed {
            s.push_str(&format!("- {f}\n"));
        }
        s.push('\n');
    }
    if evidence.is_empty() {
        s.push_str("(判定者没有跑命令、没有读文件)\n\n");
        return s;
    }
    s.push_str("证据(判定者亲自跑的命令和它看到的输出):\n\n```text\n");
    for e in evidence {
        s.push_str(&format!(
            "$ {}{}\n",
            e.command,
            if e.is_error { "   [出错]" } else { "" }
        ));
        let lines: Vec<&str> = e.output.lines().collect();
        for l in lines.iter().take(OUTPUT_LINES) {
            s.push_str(&format!("  {}\n", l.replace("```", "'''")));
        }
        if lines.len() > OUTPUT_LINES {
            s.push_str(&format!("  … (共 {} 行)\n", lines.len()));
        }
    }
    s.push_str("```\n\n");
    s
}

/// Appends one round's block to `<notes>/判定记录.md` (created with a title line). The reason
/// and the evidence are what the judge and its commands said: the block is cleaned on the way
/// in ([`crate::shown::notes`]), so a later `cat` shows words, never an escape sequence. The
/// workbench is writable by workers: the file is opened without following a symlink, and only
/// a regular file is appended to.
pub fn append_record(notes: &Path, block: &str) -> std::io::Result<()> {
    crate::shown::notes::append(
        &notes.join(RECORD_NAME),
        "# 判定记录\n\n每轮判定的结论,和判定者亲自看到的现场(命令与输出)。\n\n",
        block,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Speaker;
    use serde_json::json;

    #[test]
    fn pairs_calls_with_their_real_results() {
        let msgs = vec![
            Message {
                role: Speaker::Assistant,
                content: vec![
                    ContentBlock::ToolUse {
                        id: "a".into(),
                        name: "Bash".into(),
                        input: json!({"command": "curl -s localhost:8080"}),
                    },
                    ContentBlock::ToolUse {
                        id: "b".into(),
                        name: "Read".into(),
                        input: json!({"file_path": "/w/x.c"}),
                    },
                ],
            },
            Message {
                role: Speaker::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "b".into(),
                        content: "1\tint x;".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "a".into(),
                        content: "hello fr".into(),
                        is_error: false,
                    },
                ],
            },
        ];
        let ev = evidence_of(&msgs);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].command, "Read /w/x.c");
        assert_eq!(
            ev[1],
            Evidence {
                command: "curl -s localhost:8080".into(),
                output: "hello fr".into(),
                is_error: false
            }
        );
        let v =
            Verdict::parse("## 结论\nNOT_YET\n## 理由\n正文被截断\n## 未通过\n- curl 拿到完整正文");
        let block = record_block("干活·判定#1", &v, &ev, "2026-11-30 12:00:00");
        assert!(block.starts_with("## 干活·判定#1 — NOT_YET"), "{block}");
        assert!(
            block.contains("$ curl -s localhost:8080\n  hello fr\n"),
            "{block}"
        );
        let d = tempfile::tempdir().unwrap();
        append_record(d.path(), &block).unwrap();
        append_record(d.path(), &block).unwrap();
        let text = std::fs::read_to_string(d.path().join(RECORD_NAME)).unwrap();
        assert_eq!(text.matches("# 判定记录").count(), 1);
        assert_eq!(text.matches("## 干活·判定#1").count(), 2);
    }
}
