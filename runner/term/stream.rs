//! [`LineStream`]: the main thread's text line by line while it streams, for outputs that are
//! not a terminal (a pipe, a CI log). Without it, text shows only when a turn ends, and a CI
//! user watching a slow model sees nothing for minutes. Pure: it turns events into the lines to
//! print, and the printers render them like any text.
//!
//! Deltas (`TextDelta`, main thread only) are collected per agent; each completed line is
//! released at once. When the turn's complete text blocks arrive (`Text`, after the turn), only
//! what was not released yet is printed; a block that does not continue what streamed (the
//! attempt was retried, or the answer came whole) is printed in full. A retry voids the
//! collected deltas.

use std::collections::HashMap;

use crate::agent::{Event, EventKind};

/// What one agent streamed in its current turn.
#[derive(Debug, Default)]
struct Streamed {
    /// Every delta of the turn, joined.
    text: String,
    /// Bytes of `text` already printed (always at a line end).
    shown: usize,
    /// Bytes of `text` the turn's complete blocks have accounted for so far.
    matched: usize,
}

/// Per-agent line release of streamed text (see the module doc).
#[derive(Debug, Default)]
pub struct LineStream {
    agents: HashMap<String, Streamed>,
}

/// What to print for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Not a text event: render it as usual.
    Render,
    /// Print this text (complete lines, or the rest of a block) as the agent's text; nothing
    /// when empty.
    Text(String),
}

impl LineStream {
    /// Decides what `ev` prints.
    pub fn observe(&mut self, ev: &Event) -> Release {
        match &ev.kind {
            EventKind::TextDelta { text } if ev.depth == 0 => {
                let s = self.agents.entry(ev.agent.clone()).or_default();
                s.text.push_str(text);
                match s.text[s.shown..].rfind('\n') {
                    Some(p) => {
                        let lines = s.text[s.shown..s.shown + p].to_string();
                        s.shown += p + 1;
                        Release::Text(lines)
                    }
                    None => Release::Text(String::new()),
                }
            }
            EventKind::Text { text } if ev.depth == 0 => Release::Text(self.block(&ev.agent, text)),
            EventKind::Retry { .. } => {
                // Deltas of a failed attempt are void; what was printed stays printed.
                self.agents.remove(&ev.agent);
                Release::Render
            }
            _ => Release::Render,
        }
    }

    /// The part of a complete block not printed yet.
    fn block(&mut self, agent: &str, text: &str) -> String {
        let Some(s) = self.agents.get_mut(agent) else {
            return text.to_string();
        };
        let start = s.matched;
        if !s.text[start..].starts_with(text) {
            self.agents.remove(agent);
            return text.to_string();
        }
        let end = start + text.len();
        let done = s.shown.clamp(start, end) - start;
        s.matched = end;
        let rest = text[done..].to_string();
        s.shown = s.shown.max(end);
        if s.matched >= s.text.len() {
            self.agents.remove(agent);
        }
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;

    fn ev(kind: EventKind) -> Event {
        Event {
            agent: "coordinator".into(),
            role: Role::Coordinator,
            depth: 0,
            kind,
        }
    }

    fn delta(s: &mut LineStream, t: &str) -> Release {
        s.observe(&ev(EventKind::TextDelta { text: t.into() }))
    }

    fn text(s: &mut LineStream, t: &str) -> Release {
        s.observe(&ev(EventKind::Text { text: t.into() }))
    }

    fn lines(t: &str) -> Release {
        Release::Text(t.into())
    }

    #[test]
    fn complete_lines_go_out_while_the_turn_streams() {
        let mut s = LineStream::default();
        assert_eq!(delta(&mut s, "第一"), lines(""));
        assert_eq!(delta(&mut s, "行\n第二行\n第"), lines("第一行\n第二行"));
        assert_eq!(delta(&mut s, "三行"), lines(""));
        // The block at the end prints only what has not been printed.
        assert_eq!(text(&mut s, "第一行\n第二行\n第三行"), lines("第三行"));
        // The next turn starts afresh.
        assert_eq!(delta(&mut s, "新\n"), lines("新"));
        assert_eq!(text(&mut s, "新\n"), lines(""));
    }

    #[test]
    fn several_blocks_of_one_turn_and_a_block_that_did_not_stream() {
        let mut s = LineStream::default();
        assert_eq!(delta(&mut s, "a\nb"), lines("a"));
        assert_eq!(delta(&mut s, "c\nd"), lines("bc"));
        // Two text blocks "a\nb" and "c\nd" (joined without a separator while streaming).
        assert_eq!(text(&mut s, "a\nb"), lines(""));
        assert_eq!(text(&mut s, "c\nd"), lines("d"));
        // A whole answer (no deltas) prints in full.
        assert_eq!(text(&mut s, "整段"), lines("整段"));
    }

    #[test]
    fn a_retry_voids_what_streamed() {
        let mut s = LineStream::default();
        assert_eq!(delta(&mut s, "半\n截"), lines("半"));
        let r = s.observe(&ev(EventKind::Retry {
            reason: "stream broken".into(),
        }));
        assert_eq!(r, Release::Render);
        assert_eq!(delta(&mut s, "重来\n"), lines("重来"));
        assert_eq!(text(&mut s, "重来\n"), lines(""));
        // Subagent deltas are never streamed.
        let sub = Event {
            depth: 1,
            ..ev(EventKind::TextDelta { text: "x\n".into() })
        };
        assert_eq!(s.observe(&sub), Release::Render);
    }
}
