//! The terminal's side of the aside oracle (seed 000 "`?` 开头 = 旁路问答", seed 001 "旁路顾问"):
//! the window of recent events the console keeps for it — the last [`ASIDE_WINDOW`] events,
//! thinking and prompt events excluded, each cut to [`ASIDE_EVENT_CHARS`] characters — and how
//! long the console waits for pending answers at exit. The oracle itself is the run's
//! ([`crate::flow::aside`]); the console reaches it only through [`crate::flow::frontend::Aside`].

use std::collections::VecDeque;
use std::time::Duration;

use crate::agent::{Event, EventKind};
use crate::flow::frontend::{ASIDE_EVENT_CHARS, ASIDE_WINDOW};

/// Longest wait for pending answers at exit.
pub const ASIDE_WAIT: Duration = Duration::from_secs(120);

/// The first `n` characters of `text` on one line.
fn cut(text: &str, n: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.chars().take(n).collect()
}

/// One event as a line of the oracle's window; `None` for the events the window leaves out:
/// thinking and prompts (seed 000), and flowerbox's streaming pieces and usage records, which
/// only repeat what the complete text and the step end carry.
pub fn describe_event(ev: &Event) -> Option<String> {
    let body = match &ev.kind {
        EventKind::Thinking { .. }
        | EventKind::Prompt { .. }
        | EventKind::TextDelta { .. }
        | EventKind::Usage { .. } => return None,
        EventKind::StepStart { step } => format!("步骤开始:{step}"),
        EventKind::StepEnd {
            step,
            ok,
            turns,
            error,
            ..
        } => {
            let how = if *ok { "完成" } else { "失败" };
            match error {
                Some(e) => format!("步骤{how}:{step},{turns} 轮:{e}"),
                None => format!("步骤{how}:{step},{turns} 轮"),
            }
        }
        EventKind::Text { text } => format!("说:{text}"),
        EventKind::ToolCall { name, summary, .. } => {
            let summary = summary.lines().collect::<Vec<_>>().join(" ; ");
            if summary.is_empty() {
                format!("调用 {name}")
            } else if summary.starts_with(name.as_str()) {
                format!("调用 {summary}")
            } else {
                format!("调用 {name}: {summary}")
            }
        }
        EventKind::ToolResult {
            name,
            is_error,
            text,
            ..
        } => {
            let tag = if *is_error { "报错" } else { "结果" };
            format!("{name} {tag}:{text}")
        }
        EventKind::Dispatch { child, description } => format!("派人 {child}:{description}"),
        EventKind::Question {
            question, options, ..
        } => {
            if options.is_empty() {
                format!("问人:{question}")
            } else {
                format!("问人:{question}(选项:{})", options.join(" / "))
            }
        }
        EventKind::Answer { outcome, text } => format!("提问结果 {outcome} {text}"),
        EventKind::Retry { reason } => format!("重试:{reason}"),
        EventKind::Handoff {
            context_tokens,
            path,
            ..
        } => format!("换代:上下文 {context_tokens} tokens,交接书 {path}"),
        EventKind::Compacted {
            context_tokens,
            folded,
            ..
        } => format!("压缩:上下文 {context_tokens} tokens,较早的 {folded} 条消息换成摘要"),
        EventKind::Warning { text } => format!("警告:{text}"),
        EventKind::Error { text } => format!("错误:{text}"),
        EventKind::GoalUnverifiable { total, items, .. } => {
            format!("目标 {total} 条里有 {} 条此环境无法验证", items.len())
        }
        EventKind::Inbox { text } => format!("人追加的需求已送达:{text}"),
        EventKind::Checks { line, .. } => format!("检查:{line}"),
    };
    let who = if ev.depth > 0 {
        format!("{}(子)", ev.agent)
    } else {
        ev.agent.clone()
    };
    Some(cut(&format!("[{who}] {body}"), ASIDE_EVENT_CHARS))
}

/// The last [`ASIDE_WINDOW`] described events.
#[derive(Debug, Default, Clone)]
pub struct EventWindow {
    lines: VecDeque<String>,
}

impl EventWindow {
    /// Adds one event (ignored when [`describe_event`] leaves it out).
    pub fn push(&mut self, ev: &Event) {
        if let Some(line) = describe_event(ev) {
            if self.lines.len() == ASIDE_WINDOW {
                self.lines.pop_front();
            }
            self.lines.push_back(line);
        }
    }

    /// The lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    fn ev(depth: u32, kind: EventKind) -> Event {
        Event {
            agent: if depth == 0 {
                "coordinator"
            } else {
                "worker-1"
            }
            .into(),
            role: Role::Coordinator,
            depth,
            kind,
        }
    }

    #[test]
    fn the_window_skips_thinking_and_prompts_and_keeps_the_last_60() {
        let mut w = EventWindow::default();
        w.push(&ev(0, EventKind::Thinking { text: "嗯".into() }));
        w.push(&ev(0, EventKind::Prompt { text: "p".into() }));
        w.push(&ev(0, EventKind::TextDelta { text: "d".into() }));
        assert!(w.lines().is_empty());
        for i in 0..70 {
            w.push(&ev(
                0,
                EventKind::Text {
                    text: format!("第 {i} 条"),
                },
            ));
        }
        let lines = w.lines();
        assert_eq!(lines.len(), ASIDE_WINDOW);
        assert_eq!(lines[0], "[coordinator] 说:第 10 条");
        assert_eq!(lines[59], "[coordinator] 说:第 69 条");
    }

    #[test]
    fn each_event_is_cut_to_200_characters_on_one_line() {
        let long = "长".repeat(500);
        let line = describe_event(&ev(
            1,
            EventKind::ToolResult {
                id: "t".into(),
                name: "Bash".into(),
                is_error: true,
                text: format!("第一行\n{long}"),
            },
        ))
        .unwrap();
        assert_eq!(line.chars().count(), ASIDE_EVENT_CHARS);
        assert!(line.starts_with("[worker-1(子)] Bash 报错:第一行 长长"));
        assert!(!line.contains('\n'));
    }

    #[test]
    fn tool_calls_are_described_once() {
        let call = |summary: &str| {
            describe_event(&ev(
                0,
                EventKind::ToolCall {
                    id: "t".into(),
                    name: "Bash".into(),
                    summary: summary.into(),
                },
            ))
            .unwrap()
        };
        assert_eq!(
            call("Bash: cargo test"),
            "[coordinator] 调用 Bash: cargo test"
        );
        assert_eq!(call("cargo test"), "[coordinator] 调用 Bash: cargo test");
        assert_eq!(call(""), "[coordinator] 调用 Bash");
    }
}
