//! The scenario file: entries that match requests, the turns they serve and the faults injected
//! before a turn is served successfully. Format and semantics are documented on
//! [the crate](crate).

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

use crate::ScriptedError;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Entries, tried in order; the first match serves.
    pub agents: Vec<Entry>,
}

/// One scripted agent: how to recognise its requests and what it answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Must equal the `x-flowerbox-role` header when set.
    #[serde(default)]
    pub role: Option<String>,
    /// Must equal the `x-flowerbox-agent` header when set (an extension: tells parallel workers
    /// apart).
    #[serde(default)]
    pub agent: Option<String>,
    /// Regex that must match the system prompt plus the first user message (joined by `\n`).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Turn k answers a request that already holds k assistant messages.
    pub turns: Vec<ScriptedTurn>,
    #[serde(skip)]
    prompt_re: Option<Regex>,
}

/// One assistant turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    /// Blocks in order.
    pub content: Vec<ScriptedBlock>,
    /// `end_turn`, `tool_use`, `max_tokens`, `stop_sequence` or `refusal`; default `tool_use`
    /// when the turn has a tool_use block, else `end_turn`.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Reported usage; missing counts are estimated (bytes / 4), cache counts default to 0.
    #[serde(default)]
    pub usage: ScriptedUsage,
    /// One fault or a list (the file may give either), applied in order before the turn is
    /// served successfully.
    #[serde(default, deserialize_with = "one_or_many")]
    pub fault: Vec<Fault>,
    /// Stream the tool_use blocks' fragments interleaved (all start, round-robin deltas, all
    /// stop) instead of one block after another (an extension for interleaving tests).
    #[serde(default)]
    pub interleave: bool,
    /// The model's thinking time: the stream's first event comes this many milliseconds after
    /// the request (benchmarks of work that overlaps a model turn, issue 17).
    #[serde(default)]
    pub think_ms: Option<u64>,
    /// A pause before the stream's last two events (Anthropic: `message_delta` and
    /// `message_stop`): every block is out, the message not yet ended (tests of work begun at
    /// a block's end, issue 32 §4).
    #[serde(default)]
    pub hold_end_ms: Option<u64>,
}

/// A content block of a scripted turn.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScriptedBlock {
    /// Streamed as several `text_delta`s.
    Text {
        /// The text.
        text: String,
    },
    /// Streamed as several `thinking_delta`s and one `signature_delta`.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Signature; default a digest of the text (see `events::signature_for`).
        #[serde(default)]
        signature: Option<String>,
    },
    /// Streamed as several `input_json_delta` fragments (none when the input is `{}`).
    ToolUse {
        /// Tool name.
        name: String,
        /// Tool input; default `{}`.
        #[serde(default = "empty_object")]
        input: Value,
        /// Fixed id; default generated `toolu_s{entry}_t{k}_b{index}`.
        #[serde(default)]
        id: Option<String>,
    },
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Token counts to report.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedUsage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Cache writes.
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    /// Cache reads.
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

/// `fault` may be one object or a list; parsed by hand so a typo names the bad field.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Fault>, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .into_iter()
            .map(|v| serde_json::from_value(v).map_err(D::Error::custom))
            .collect(),
        v => Ok(vec![serde_json::from_value(v).map_err(D::Error::custom)?]),
    }
}

/// What goes wrong. Exactly one of `status`, `error_event`, `drop_after_events` or
/// `truncate_tool_json`, or only `delay_ms`; `delay_ms` may accompany any of them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Answer with this non-2xx status and an Anthropic error body instead of a stream.
    #[serde(default)]
    pub status: Option<u16>,
    /// Extra response headers for `status` (e.g. `retry-after`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Error type in the body or event; default derived from the status (`overloaded_error`
    /// for 529, `rate_limit_error` for 429, ...).
    #[serde(default)]
    pub error_type: Option<String>,
    /// Error message; default a fixed text naming the scripted fault.
    #[serde(default)]
    pub message: Option<String>,
    /// Send an `error` event of this type after `after_events` events, then end the stream.
    #[serde(default)]
    pub error_event: Option<String>,
    /// Events (counted from `message_start`) sent before the `error` event; default 0.
    #[serde(default)]
    pub after_events: Option<usize>,
    /// Abort the connection after this many events.
    #[serde(default)]
    pub drop_after_events: Option<usize>,
    /// The `error` event (or the drop) comes where `message_delta` would: every block is out,
    /// the message never ends (`after_events` / `drop_after_events` are then ignored).
    #[serde(default)]
    pub before_end: bool,
    /// Sleep this long before every event.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Cut the first tool_use block's JSON in half and end with `stop_reason: max_tokens`.
    #[serde(default)]
    pub truncate_tool_json: bool,
    /// Answer with the whole turn as one JSON object (`content-type: application/json`)
    /// instead of an event stream, as a gateway that ignores `stream: true` does (LiteLLM's
    /// mock mode).
    #[serde(default)]
    pub json_answer: bool,
    /// How many requests of this (entry, turn) get this fault; absent = every request.
    #[serde(default)]
    pub times: Option<u32>,
}

impl ScriptedTurn {
    /// The faults in order.
    pub fn faults(&self) -> &[Fault] {
        &self.fault
    }

    /// The stop reason sent when the turn is served without truncation.
    pub fn stop_reason(&self) -> &str {
        match &self.stop_reason {
            Some(s) => s,
            None if self
                .content
                .iter()
                .any(|b| matches!(b, ScriptedBlock::ToolUse { .. })) =>
            {
                "tool_use"
            }
            None => "end_turn",
        }
    }

    /// The fault for the `n`-th request (0-based) of this turn: faults are consumed in order,
    /// each for its `times` requests; `None` once all are used up.
    pub fn fault_for(&self, mut n: u32) -> Option<&Fault> {
        for f in self.faults() {
            match f.times {
                None => return Some(f),
                Some(t) if n < t => return Some(f),
                Some(t) => n -= t,
            }
        }
        None
    }
}

impl Entry {
    /// True when the entry accepts a request with these headers and prompt text.
    pub fn matches(&self, role: Option<&str>, agent: Option<&str>, prompt_text: &str) -> bool {
        let field_ok = |want: &Option<String>, got: Option<&str>| match want {
            None => true,
            Some(w) => got == Some(w.as_str()),
        };
        field_ok(&self.role, role)
            && field_ok(&self.agent, agent)
            && self
                .prompt_re
                .as_ref()
                .is_none_or(|re| re.is_match(prompt_text))
    }
}

impl Scenario {
    /// True when a scripted thinking block has exactly this text and this signature (the
    /// scenario's own signatures are as good as the server's).
    pub fn has_signed_thinking(&self, thinking: &str, signature: &str) -> bool {
        self.agents
            .iter()
            .flat_map(|e| e.turns.iter())
            .flat_map(|t| t.content.iter())
            .any(|b| {
                matches!(b, ScriptedBlock::Thinking { thinking: t, signature: Some(s) }
                    if t == thinking && s == signature)
            })
    }

    /// Reads and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScriptedError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScriptedError::Scenario(format!("{}: {e}", path.display())))?;
        Scenario::parse(&text).map_err(|e| match e {
            ScriptedError::Scenario(m) => {
                ScriptedError::Scenario(format!("{}: {m}", path.display()))
            }
            other => other,
        })
    }

    /// Parses and validates scenario JSON.
    pub fn parse(text: &str) -> Result<Scenario, ScriptedError> {
        let mut s: Scenario =
            serde_json::from_str(text).map_err(|e| ScriptedError::Scenario(e.to_string()))?;
        for (i, entry) in s.agents.iter_mut().enumerate() {
            if let Some(p) = &entry.prompt {
                let re = Regex::new(p)
                    .map_err(|e| ScriptedError::Scenario(format!("agents[{i}].prompt: {e}")))?;
                entry.prompt_re = Some(re);
            }
            for (k, turn) in entry.turns.iter().enumerate() {
                validate_turn(turn)
                    .map_err(|m| ScriptedError::Scenario(format!("agents[{i}].turns[{k}]: {m}")))?;
            }
        }
        Ok(s)
    }

    /// Index of the first entry matching the request.
    pub fn select(
        &self,
        role: Option<&str>,
        agent: Option<&str>,
        prompt_text: &str,
    ) -> Option<usize> {
        self.agents
            .iter()
            .position(|e| e.matches(role, agent, prompt_text))
    }
}

/// What is wrong with a scripted turn.
#[derive(Debug, thiserror::Error)]
enum BadTurn {
    /// An unknown stop reason.
    #[error("stop_reason {0:?} is not one of {STOPS:?}")]
    StopReason(String),
    /// Two fault kinds in one fault.
    #[error("a fault has more than one of status / error_event / drop_after_events / truncate_tool_json / json_answer")]
    Faults,
    /// A fault status that is not an error.
    #[error("fault status {0} is not an error status")]
    Status(u16),
    /// `after_events` without `error_event`.
    #[error("after_events needs error_event")]
    AfterEvents,
    /// `truncate_tool_json` on a turn without a tool call.
    #[error("truncate_tool_json needs a tool_use block")]
    Truncate,
}

/// The stop reasons a scripted turn may give.
const STOPS: [&str; 5] = [
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "refusal",
];

fn validate_turn(turn: &ScriptedTurn) -> Result<(), BadTurn> {
    if !STOPS.contains(&turn.stop_reason()) {
        return Err(BadTurn::StopReason(turn.stop_reason().to_string()));
    }
    let has_tool = turn
        .content
        .iter()
        .any(|b| matches!(b, ScriptedBlock::ToolUse { .. }));
    for f in turn.faults() {
        let kinds = [
            f.status.is_some(),
            f.error_event.is_some(),
            f.drop_after_events.is_some(),
            f.truncate_tool_json,
            f.json_answer,
        ];
        if kinds.iter().filter(|k| **k).count() > 1 {
            return Err(BadTurn::Faults);
        }
        if let Some(s) = f.status {
            if !(400..=599).contains(&s) {
                return Err(BadTurn::Status(s));
            }
        }
        if f.after_events.is_some() && f.error_event.is_none() {
            return Err(BadTurn::AfterEvents);
        }
        if f.truncate_tool_json && !has_tool {
            return Err(BadTurn::Truncate);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example_and_selects_entries() {
        let s = Scenario::parse(
            r#"{"agents": [
              {"role": "worker", "prompt": "fix (the|a) bug", "turns": [
                {"content": [{"type": "text", "text": "on it"},
                             {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}],
                 "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3},
                 "fault": {"status": 529, "headers": {"retry-after": "1"}, "times": 1}},
                {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}]},
              {"turns": [{"content": [{"type": "text", "text": "fallback"}]}]}
            ]}"#,
        )
        .unwrap();
        assert_eq!(
            s.select(Some("worker"), Some("worker-1"), "sys\nplease fix the bug"),
            Some(0)
        );
        assert_eq!(s.select(Some("judge"), None, "fix the bug"), Some(1));
        assert_eq!(s.select(Some("worker"), None, "something else"), Some(1));
        let t = &s.agents[0].turns[0];
        assert_eq!(t.stop_reason(), "tool_use");
        assert_eq!(s.agents[0].turns[1].stop_reason(), "end_turn");
        assert_eq!(t.fault_for(0).and_then(|f| f.status), Some(529));
        assert!(t.fault_for(1).is_none());
    }

    #[test]
    fn fault_lists_are_consumed_in_order() {
        let s = Scenario::parse(
            r#"{"agents": [{"turns": [{"content": [], "fault": [
                {"status": 529, "times": 2}, {"drop_after_events": 3, "times": 1}, {"delay_ms": 5}]}]}]}"#,
        )
        .unwrap();
        let t = &s.agents[0].turns[0];
        let kinds: Vec<&str> = (0..6)
            .map(|n| match t.fault_for(n) {
                Some(Fault {
                    status: Some(_), ..
                }) => "status",
                Some(Fault {
                    drop_after_events: Some(_),
                    ..
                }) => "drop",
                Some(Fault {
                    delay_ms: Some(_), ..
                }) => "delay",
                _ => "none",
            })
            .collect();
        assert_eq!(
            kinds,
            ["status", "status", "drop", "delay", "delay", "delay"]
        );
    }

    #[test]
    fn invalid_scenarios_name_the_place() {
        let bad = [
            (
                r#"{"agents": [{"prompt": "(", "turns": []}]}"#,
                "agents[0].prompt",
            ),
            (
                r#"{"agents": [{"turns": [{"content": [], "stop_reason": "done"}]}]}"#,
                "agents[0].turns[0]",
            ),
            (
                r#"{"agents": [{"turns": [{"content": [], "fault": {"truncate_tool_json": true}}]}]}"#,
                "tool_use",
            ),
            (
                r#"{"agents": [{"turns": [{"content": [], "fault": {"status": 200}}]}]}"#,
                "status 200",
            ),
            (
                r#"{"agents": [{"turns": [{"content": [], "fault": {"stauts": 529}}]}]}"#,
                "stauts",
            ),
        ];
        for (text, want) in bad {
            let err = Scenario::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
