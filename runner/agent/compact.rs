//! Compaction: what a step does near the window when handoffs are off (`--no-handoff`; flower
//! then falls back to the SDK's auto-compact, which fires at `window − 33000`).
//!
//! The oldest turns are summarised into one message; the first prompt (the brief and the goal
//! live there) and the most recent turns stay verbatim. The history after a compaction is
//!
//! ```text
//! user:      [first prompt] [SUMMARY_HEADER + summary]
//! assistant: the first kept turn ...   (every tool_use still answered by the next message)
//! ...        the recent turns, verbatim
//! ```
//!
//! The kept part always starts at an assistant message, so no `tool_result` loses its
//! `tool_use` and no `tool_use` its result: the request is one the real APIs accept. The
//! summary is written by a separate, tool-free model call over a plain-text transcript of the
//! folded turns (capped, so it always fits); when that call fails, a mechanical summary (the
//! calls made and the texts said, shortened) stands in, marked as such. The compacted history
//! goes to a new session (the old one stays whole in `sessions.db`, listed in the step's
//! `retired`), so a wake resumes the compacted history, not the one that overflowed.

use std::sync::Arc;

use super::event::EventKind;
use super::result::StepError;
use super::runtime::Runtime;
use super::session_loop::AgentRun;
use crate::model::{ContentBlock, Message, Speaker};

/// Tokens below the window at which a compaction is due (flower measured the SDK's
/// auto-compact at `window − 33k`).
pub const COMPACT_HEADROOM: u64 = 33_000;

/// Compactions per step before the step stops (a window too small for what must stay).
pub const MAX_COMPACTIONS: u32 = 8;

/// The recent part kept verbatim: at most this share of the window (in estimated tokens).
const KEEP_SHARE: u64 = 5;

/// Characters of the folded turns' transcript the summary call sees at most.
const TRANSCRIPT_CAP: usize = 400_000;

/// Characters of one tool input or result in the transcript.
const ITEM_CAP: usize = 1_500;

/// Opens the summary block of a compacted history's first message.
pub const SUMMARY_HEADER: &str =
    "[上下文快满了,较早的对话已压缩成下面这段摘要;最近的对话原样保留在后面]";

/// Said after a compaction, before the agent carries on.
pub const CONTINUE_NOTE: &str = "[较早的对话刚被压缩成开头那段摘要。接着做手上的事,不要从头开始;摘要里没写的细节,回去看文件和工作台。]";

/// The summary call's system prompt.
pub const SUMMARY_SYSTEM: &str = "你负责压缩一段工作记录。只输出摘要正文,不调用工具,不加客套。";

/// Marks a summary the runner assembled because the summary call failed.
pub const DEGRADED_MARK: &str = "[压缩降级:摘要没写成,下面是机械整理的调用清单]";

/// The context size (tokens) at which the main thread compacts: `window − 33000`, never below
/// the handoff floor.
pub fn compact_threshold(window: u64) -> u64 {
    window
        .saturating_sub(COMPACT_HEADROOM)
        .max(crate::record::handoff::MIN_THRESHOLD)
}

/// What one compaction keeps and folds.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The first prompt's blocks, kept verbatim (without an earlier summary).
    pub head: Vec<ContentBlock>,
    /// The turns folded into the summary (an earlier summary first, as a text message).
    pub folded: Vec<Message>,
    /// The recent turns kept verbatim; starts with an assistant message.
    pub tail: Vec<Message>,
}

/// Estimated tokens of a message (bytes of its JSON / 4).
fn est_tokens(m: &Message) -> u64 {
    serde_json::to_vec(m)
        .map(|v| v.len() as u64 / 4)
        .unwrap_or(0)
}

/// Plans the compaction of `messages` for a window of `window` tokens; `None` when there is
/// nothing to fold (only the first prompt and the last turn).
pub fn plan(messages: &[Message], window: u64) -> Option<Plan> {
    let first = messages.first().filter(|m| m.role == Speaker::User)?;
    let (head, old_summary) = split_head(first);
    let keep = (window / KEEP_SHARE).max(1);
    let starts: Vec<usize> = (1..messages.len())
        .filter(|&i| messages[i].role == Speaker::Assistant)
        .collect();
    let last = *starts.last()?;
    // The recent turns that fit in `keep`, but never more than half of them: every
    // compaction folds something, whatever the estimate says.
    let most = (starts.len() / 2).max(1);
    let mut k = last;
    let mut size: u64 = messages[last..].iter().map(est_tokens).sum();
    for &i in starts.iter().rev().skip(1).take(most - 1) {
        let more: u64 = messages[i..k].iter().map(est_tokens).sum();
        if size + more > keep {
            break;
        }
        size += more;
        k = i;
    }
    if k <= 1 && old_summary.is_none() {
        return None;
    }
    let mut folded = Vec::new();
    if let Some(s) = old_summary {
        folded.push(Message {
            role: Speaker::User,
            content: vec![ContentBlock::text(s)],
        });
    }
    folded.extend(messages[1..k].iter().cloned());
    if folded.is_empty() {
        return None;
    }
    Some(Plan {
        head,
        folded,
        tail: messages[k..].to_vec(),
    })
}

/// The first message's own blocks and the summary an earlier compaction added to it.
fn split_head(first: &Message) -> (Vec<ContentBlock>, Option<String>) {
    let at = first
        .content
        .iter()
        .position(|b| matches!(b, ContentBlock::Text { text } if text.starts_with(SUMMARY_HEADER)));
    match at {
        Some(i) => {
            let summary = match &first.content[i] {
                ContentBlock::Text { text } => text[SUMMARY_HEADER.len()..].trim().to_string(),
                _ => String::new(),
            };
            (first.content[..i].to_vec(), Some(summary))
        }
        None => (first.content.clone(), None),
    }
}

/// The history after the compaction: the head with the summary, then the tail.
pub fn rebuild(plan: &Plan, summary: &str) -> Vec<Message> {
    let mut head = plan.head.clone();
    head.push(ContentBlock::text(format!(
        "{SUMMARY_HEADER}\n{}",
        summary.trim()
    )));
    let mut out = vec![Message {
        role: Speaker::User,
        content: head,
    }];
    out.extend(plan.tail.iter().cloned());
    out
}

fn cap(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    let kept: String = s.chars().take(n).collect();
    format!("{kept}…(共 {count} 字符)")
}

/// A plain-text transcript of the folded turns, for the summary call (at most
/// [`TRANSCRIPT_CAP`] characters: the middle goes when it is longer).
pub fn transcript(folded: &[Message]) -> String {
    let mut out = String::new();
    for m in folded {
        let who = match m.role {
            Speaker::User => "人/工具",
            Speaker::Assistant => "你",
        };
        for b in &m.content {
            let line = match b {
                ContentBlock::Text { text } if !text.trim().is_empty() => {
                    format!("{who}:{}", cap(text.trim(), ITEM_CAP * 2))
                }
                ContentBlock::ToolUse { name, input, .. } => {
                    format!("你调用 {name} {}", cap(&input.to_string(), ITEM_CAP))
                }
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => format!(
                    "{}:{}",
                    if *is_error {
                        "结果(出错)"
                    } else {
                        "结果"
                    },
                    cap(content.trim(), ITEM_CAP)
                ),
                _ => continue,
            };
            out.push_str(&line);
            out.push('\n');
        }
    }
    let count = out.chars().count();
    if count <= TRANSCRIPT_CAP {
        return out;
    }
    let half = TRANSCRIPT_CAP / 2;
    let head: String = out.chars().take(half).collect();
    let tail: String = out.chars().skip(count - half).collect();
    format!("{head}\n…(中间 {} 字符省略)…\n{tail}", count - 2 * half)
}

/// The summary call's one user message.
pub fn summary_request(transcript: &str) -> String {
    format!(
        "下面是这一步较早的一段工作记录,它就要从上下文里拿掉。把它压缩成一段摘要,给接着干活的自己看:\n\
         - 做过什么、结论是什么、改了哪些文件(写路径)\n\
         - 定下来的事和原因\n\
         - 试过但走不通的路\n\
         - 还没做完的事\n\
         只写摘要。\n\n<记录>\n{transcript}</记录>"
    )
}

/// The mechanical summary when the summary call failed: the calls and texts, shortened.
pub fn degraded_summary(folded: &[Message], why: &str) -> String {
    let mut lines = vec![format!("{DEGRADED_MARK}({why})")];
    for m in folded {
        for b in &m.content {
            match (m.role, b) {
                (Speaker::Assistant, ContentBlock::Text { text }) if !text.trim().is_empty() => {
                    lines.push(format!("- 说:{}", cap(text.trim(), 200)))
                }
                (_, ContentBlock::ToolUse { name, input, .. }) => {
                    lines.push(format!("- 调用 {name} {}", cap(&input.to_string(), 200)))
                }
                (Speaker::User, ContentBlock::Text { text }) if !text.trim().is_empty() => {
                    lines.push(format!("- 收到:{}", cap(text.trim(), 200)))
                }
                _ => {}
            }
        }
    }
    cap(&lines.join("\n"), 20_000)
}

impl Runtime {
    /// Compacts `run`'s history for `window`: the summary (from a tool-free call, or the
    /// degraded one), the rebuilt history, and an event for the UI. Returns the new history.
    ///
    /// Errors: [`StepError::NothingToCompact`] when there is nothing left to fold.
    pub(crate) async fn compact(
        self: &Arc<Self>,
        run: &mut AgentRun,
        window: u64,
    ) -> Result<Vec<Message>, StepError> {
        let used = run.context_tokens;
        let Some(plan) = plan(run.messages(), window) else {
            return Err(StepError::NothingToCompact { used, window });
        };
        let request = summary_request(&transcript(&plan.folded));
        let (summary, degraded) = match run.side_call(SUMMARY_SYSTEM, &request).await {
            Ok(text) if !text.trim().is_empty() => (text, false),
            Ok(_) => (degraded_summary(&plan.folded, "摘要是空的"), true),
            Err(why) => (degraded_summary(&plan.folded, &why.to_string()), true),
        };
        let history = rebuild(&plan, &summary);
        self.emit(
            run.agent(),
            run.role(),
            0,
            EventKind::Compacted {
                context_tokens: used,
                window,
                folded: plan.folded.len(),
                kept: plan.tail.len(),
                degraded,
            },
        );
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_of(b: &ContentBlock) -> Option<&str> {
        match b {
            ContentBlock::Text { text } => Some(text),
            _ => None,
        }
    }

    fn user(text: &str) -> Message {
        Message {
            role: Speaker::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    fn call(id: &str, size: usize) -> Message {
        Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::text("看一眼"),
                ContentBlock::ToolUse {
                    id: id.into(),
                    name: "Bash".into(),
                    input: json!({"command": "x".repeat(size)}),
                },
            ],
        }
    }

    fn result(id: &str, size: usize) -> Message {
        Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: "y".repeat(size),
                is_error: false,
            }],
        }
    }

    fn history(turns: usize, size: usize) -> Vec<Message> {
        let mut h = vec![user("需求确认书 …… 目标 ……")];
        for i in 0..turns {
            h.push(call(&format!("t{i}"), size));
            h.push(result(&format!("t{i}"), size));
        }
        h
    }

    /// Every tool_use is answered in the next message and every result answers the message
    /// before it (what the strict server checks).
    fn paired(h: &[Message]) -> bool {
        h.iter().enumerate().all(|(i, m)| {
            let results: Vec<&str> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                    _ => None,
                })
                .collect();
            let asked: Vec<&str> = i
                .checked_sub(1)
                .map(|p| {
                    h[p].content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            results.iter().all(|r| asked.contains(r))
        }) && h.windows(2).all(|w| w[0].role != w[1].role)
    }

    #[test]
    fn the_oldest_turns_fold_and_the_first_prompt_and_recent_turns_stay() {
        let h = history(20, 2_000);
        // 20 turns of ~1000 tokens each; a 20,000-token window keeps ~4,000 tokens.
        let p = plan(&h, 20_000).expect("something to fold");
        assert_eq!(p.head, h[0].content);
        assert_eq!(p.tail.first().unwrap().role, Speaker::Assistant);
        assert!(p.tail.len() >= 2 && p.tail.len() < 12, "{}", p.tail.len());
        assert_eq!(p.folded.len() + p.tail.len() + 1, h.len());
        assert_eq!(p.tail.last(), h.last());
        let after = rebuild(&p, "做了 20 次 x");
        assert!(paired(&after), "{after:?}");
        assert_eq!(after[0].content.len(), 2);
        assert!(text_of(&after[0].content[1])
            .unwrap()
            .starts_with(SUMMARY_HEADER));
        assert!(text_of(&after[0].content[0])
            .unwrap()
            .contains("需求确认书"));
    }

    #[test]
    fn a_second_compaction_folds_the_first_summary_and_keeps_the_prompt_once() {
        let h = history(20, 2_000);
        let once = rebuild(&plan(&h, 20_000).unwrap(), "第一段摘要");
        let mut longer = once.clone();
        for i in 20..40 {
            longer.push(call(&format!("t{i}"), 2_000));
            longer.push(result(&format!("t{i}"), 2_000));
        }
        let p = plan(&longer, 20_000).unwrap();
        assert_eq!(p.head, h[0].content, "the prompt alone, no old summary");
        assert!(transcript(&p.folded).contains("第一段摘要"));
        let twice = rebuild(&p, "第二段摘要");
        assert!(paired(&twice));
        let head_text: String = twice[0].content.iter().filter_map(text_of).collect();
        assert!(!head_text.contains("第一段摘要") && head_text.contains("第二段摘要"));
    }

    #[test]
    fn small_turns_still_fold_the_older_half() {
        let h = history(6, 10);
        let p = plan(&h, 1_000_000).unwrap();
        assert_eq!(p.tail.len(), 6, "the 3 recent turns of 6");
        assert_eq!(p.folded.len(), 6);
        assert!(paired(&rebuild(&p, "s")));
    }

    #[test]
    fn nothing_to_fold_is_none() {
        assert_eq!(plan(&history(1, 100_000), 20_000), None);
        assert_eq!(plan(&history(0, 10), 20_000), None);
        // One huge last turn: everything before it folds, the last turn stays.
        let mut h = history(3, 10);
        h.push(call("big", 200_000));
        h.push(result("big", 10));
        let p = plan(&h, 20_000).unwrap();
        assert_eq!(p.tail.len(), 2);
        assert!(paired(&rebuild(&p, "s")));
    }

    #[test]
    fn transcript_and_degraded_summary_are_bounded_and_readable() {
        let h = history(400, 5_000);
        let t = transcript(&h[1..]);
        assert!(t.chars().count() <= TRANSCRIPT_CAP + 100);
        assert!(t.contains("你调用 Bash") && t.contains("中间"));
        let d = degraded_summary(&h[1..], "网络断了");
        assert!(d.starts_with(DEGRADED_MARK) && d.contains("网络断了"));
        assert!(d.chars().count() <= 20_100);
        assert_eq!(compact_threshold(200_000), 167_000);
        assert_eq!(compact_threshold(20_000), 10_000);
    }
}
