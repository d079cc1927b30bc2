//! Turns a [`ScriptedTurn`] into the Messages API's stream events, and SSE frames into network
//! chunks.
//!
//! Text and thinking go out as several deltas, tool input as several `input_json_delta`
//! fragments cut at arbitrary character positions (inside keys, strings, numbers). Fragments
//! must be valid strings, so the byte-level split happens one layer down: every encoded event
//! is written as several body chunks, and the first multi-byte character of an event is always
//! cut after its first byte, so a client sees UTF-8 characters split across network chunks.

use crate::scenario::{ScriptedBlock, ScriptedTurn};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};

/// Ids and names the events need besides the turn itself.
#[derive(Debug, Clone)]
pub(crate) struct TurnMeta<'a> {
    /// Entry index (for generated ids).
    pub entry: usize,
    /// Turn number k.
    pub k: usize,
    /// Model id echoed in `message_start`.
    pub model: &'a str,
    /// Estimated input tokens when the scenario gives none.
    pub input_estimate: u64,
}

/// Cuts `s` into up to `pieces` non-empty parts at random character boundaries.
pub(crate) fn split_str<'s>(s: &'s str, pieces: usize, rng: &mut StdRng) -> Vec<&'s str> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).skip(1).collect();
    let want = pieces.saturating_sub(1).min(bounds.len());
    let mut cuts: Vec<usize> = Vec::with_capacity(want);
    while cuts.len() < want {
        let c = bounds[rng.random_range(0..bounds.len())];
        if !cuts.contains(&c) {
            cuts.push(c);
        }
    }
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain(std::iter::once(s.len())) {
        if c > start {
            out.push(&s[start..c]);
        }
        start = c;
    }
    out
}

fn block_events(
    index: usize,
    block: &ScriptedBlock,
    id: String,
    rng: &mut StdRng,
) -> [Vec<Value>; 3] {
    let delta = |d: Value| json!({"type": "content_block_delta", "index": index, "delta": d});
    match block {
        ScriptedBlock::Text { text } => [
            vec![
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            ],
            split_str(text, 3, rng)
                .into_iter()
                .map(|t| delta(json!({"type": "text_delta", "text": t})))
                .collect(),
            vec![json!({"type": "content_block_stop", "index": index})],
        ],
        ScriptedBlock::Thinking {
            thinking,
            signature,
        } => {
            let mut deltas: Vec<Value> = split_str(thinking, 3, rng)
                .into_iter()
                .map(|t| delta(json!({"type": "thinking_delta", "thinking": t})))
                .collect();
            let sig = signature.clone().unwrap_or_else(|| signature_for(thinking));
            deltas.push(delta(json!({"type": "signature_delta", "signature": sig})));
            [
                vec![json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}})],
                deltas,
                vec![json!({"type": "content_block_stop", "index": index})],
            ]
        }
        ScriptedBlock::ToolUse { name, input, .. } => {
            let text = input.to_string();
            let deltas = if input.as_object().is_some_and(|o| o.is_empty()) {
                Vec::new()
            } else {
                split_str(&text, 4, rng)
                    .into_iter()
                    .map(|f| delta(json!({"type": "input_json_delta", "partial_json": f})))
                    .collect()
            };
            [
                vec![json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})],
                deltas,
                vec![json!({"type": "content_block_stop", "index": index})],
            ]
        }
    }
}

/// The signature the server gives a thinking block it wrote without a scripted one: a digest
/// of the text, so a block passed back changed (or another server's) is recognised.
pub(crate) fn signature_for(thinking: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("scripted-model thinking\n{thinking}").as_bytes());
    format!("sig_{}", &hex::encode(digest)[..32])
}

/// Generated tool-use id for block `index` of turn `k` of entry `entry`.
pub(crate) fn tool_id(entry: usize, k: usize, index: usize) -> String {
    format!("toolu_s{entry}_t{k}_b{index}")
}

/// The full event list of one turn. With `truncate`, the first tool_use block gets only the
/// first half of its JSON, later blocks are left out and the stop reason is `max_tokens`.
pub(crate) fn turn_events(
    turn: &ScriptedTurn,
    meta: &TurnMeta<'_>,
    truncate: bool,
    rng: &mut StdRng,
) -> Vec<Value> {
    let mut blocks: Vec<[Vec<Value>; 3]> = Vec::new();
    let mut is_tool: Vec<bool> = Vec::new();
    let mut out_chars = 0usize;
    for (index, block) in turn.content.iter().enumerate() {
        let id = match block {
            ScriptedBlock::ToolUse { id: Some(id), .. } => id.clone(),
            _ => tool_id(meta.entry, meta.k, index),
        };
        let mut ev = block_events(index, block, id, rng);
        out_chars += match block {
            ScriptedBlock::Text { text } => text.len(),
            ScriptedBlock::Thinking { thinking, .. } => thinking.len(),
            ScriptedBlock::ToolUse { input, .. } => input.to_string().len(),
        };
        let tool = matches!(block, ScriptedBlock::ToolUse { .. });
        if truncate && tool {
            let ScriptedBlock::ToolUse { input, .. } = block else {
                unreachable!()
            };
            let text = input.to_string();
            let half = text
                .char_indices()
                .map(|(i, _)| i)
                .nth(text.chars().count() / 2)
                .unwrap_or(0);
            ev[1] = split_str(&text[..half], 2, rng)
                .into_iter()
                .map(|f| {
                    json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f}})
                })
                .collect();
            blocks.push(ev);
            is_tool.push(true);
            break;
        }
        blocks.push(ev);
        is_tool.push(tool);
    }

    let u = &turn.usage;
    let mut events = vec![
        json!({"type": "message_start", "message": {
        "id": format!("msg_scripted_{}_{}", meta.entry, meta.k), "type": "message",
        "role": "assistant", "model": meta.model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {
            "input_tokens": u.input_tokens.unwrap_or(meta.input_estimate),
            "output_tokens": 1,
            "cache_creation_input_tokens": u.cache_creation_input_tokens.unwrap_or(0),
            "cache_read_input_tokens": u.cache_read_input_tokens.unwrap_or(0),
        }}}),
        json!({"type": "ping"}),
    ];
    if turn.interleave {
        // Non-tool blocks first, in order; then all tool blocks start, their deltas alternate,
        // and they stop in reverse order.
        let (tools, others): (Vec<_>, Vec<_>) =
            blocks.into_iter().zip(is_tool).partition(|(_, t)| *t);
        for ([start, deltas, stop], _) in others {
            events.extend(start.into_iter().chain(deltas).chain(stop));
        }
        let mut stops = Vec::new();
        let mut queues = Vec::new();
        for ([start, deltas, stop], _) in tools {
            events.extend(start);
            queues.push(deltas.into_iter());
            stops.extend(stop);
        }
        loop {
            let before = events.len();
            for q in queues.iter_mut() {
                events.extend(q.next());
            }
            if events.len() == before {
                break;
            }
        }
        events.extend(stops.into_iter().rev());
    } else {
        for [start, deltas, stop] in blocks {
            events.extend(start.into_iter().chain(deltas).chain(stop));
        }
    }
    let stop_reason = if truncate {
        "max_tokens"
    } else {
        turn.stop_reason()
    };
    let output = u.output_tokens.unwrap_or((out_chars as u64 / 4).max(1));
    events.push(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// The turn as one complete Messages API object (what a non-streaming answer holds).
pub(crate) fn turn_message(turn: &ScriptedTurn, meta: &TurnMeta<'_>) -> Value {
    let content: Vec<Value> = turn
        .content
        .iter()
        .enumerate()
        .map(|(index, b)| match b {
            ScriptedBlock::Text { text } => json!({"type": "text", "text": text}),
            ScriptedBlock::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking,
                "signature": signature.clone().unwrap_or_else(|| signature_for(thinking))}),
            ScriptedBlock::ToolUse { name, input, id } => json!({"type": "tool_use",
                "id": id.clone().unwrap_or_else(|| tool_id(meta.entry, meta.k, index)),
                "name": name, "input": input}),
        })
        .collect();
    let u = &turn.usage;
    json!({"id": format!("msg_scripted_{}_{}", meta.entry, meta.k), "type": "message",
    "role": "assistant", "model": meta.model, "content": content,
    "stop_reason": turn.stop_reason(), "stop_sequence": null,
    "usage": {
        "input_tokens": u.input_tokens.unwrap_or(meta.input_estimate),
        "output_tokens": u.output_tokens.unwrap_or(1),
        "cache_creation_input_tokens": u.cache_creation_input_tokens.unwrap_or(0),
        "cache_read_input_tokens": u.cache_read_input_tokens.unwrap_or(0),
    }})
}

/// One event as SSE text: `event: TYPE\ndata: JSON\n\n` (non-ASCII stays raw UTF-8).
pub(crate) fn encode(ev: &Value) -> Bytes {
    let name = ev["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {name}\ndata: {ev}\n\n"))
}

/// Splits an encoded event into network chunks: inside its first multi-byte character (after
/// that character's first byte) and at one random byte position.
pub(crate) fn cut(frame: &Bytes, rng: &mut StdRng) -> Vec<Bytes> {
    let n = frame.len();
    let mut cuts = Vec::new();
    if let Some(pos) = frame.iter().position(|b| *b >= 0xC0) {
        cuts.push(pos + 1);
    }
    if n > 2 {
        cuts.push(rng.random_range(1..n));
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for c in cuts.into_iter().chain(std::iter::once(n)) {
        if c > start && c <= n {
            out.push(frame.slice(start..c));
            start = c;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use rand::SeedableRng;

    fn turn(json: &str) -> ScriptedTurn {
        let s = Scenario::parse(&format!(r#"{{"agents": [{{"turns": [{json}]}}]}}"#)).unwrap();
        s.agents[0].turns[0].clone()
    }

    fn meta() -> TurnMeta<'static> {
        TurnMeta {
            entry: 0,
            k: 2,
            model: "scripted",
            input_estimate: 7,
        }
    }

    #[test]
    fn split_str_keeps_text_and_char_boundaries() {
        let mut rng = StdRng::seed_from_u64(1);
        for s in ["", "a", "中文字符", "{\"k\": \"v€\"}"] {
            let parts = split_str(s, 4, &mut rng);
            assert_eq!(parts.concat(), s);
            assert!(parts.iter().all(|p| !p.is_empty()));
            assert!(parts.len() <= 4);
        }
        assert_eq!(split_str("abcdef", 3, &mut rng).len(), 3);
    }

    #[test]
    fn cut_splits_inside_the_first_multibyte_char() {
        let mut rng = StdRng::seed_from_u64(2);
        let frame = encode(&json!({"type": "x", "t": "a中b"}));
        let chunks = cut(&frame, &mut rng);
        assert_eq!(chunks.concat(), frame.to_vec());
        assert!(
            chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
            "{chunks:?}"
        );
    }

    #[test]
    fn tool_json_goes_out_in_fragments_that_join_to_the_input() {
        let t = turn(
            r#"{"content": [{"type": "text", "text": "hello world"},
            {"type": "tool_use", "name": "Write", "input": {"path": "/tmp/中文.txt", "content": "x€y"}},
            {"type": "tool_use", "name": "Glob"}]}"#,
        );
        let ev = turn_events(&t, &meta(), false, &mut StdRng::seed_from_u64(3));
        let frags: Vec<&str> = ev
            .iter()
            .filter(|e| e["index"] == 1 && e["delta"]["type"] == "input_json_delta")
            .map(|e| e["delta"]["partial_json"].as_str().unwrap())
            .collect();
        assert!(frags.len() > 1);
        let joined: Value = serde_json::from_str(&frags.concat()).unwrap();
        assert_eq!(joined, json!({"path": "/tmp/中文.txt", "content": "x€y"}));
        assert!(!ev
            .iter()
            .any(|e| e["index"] == 2 && e["type"] == "content_block_delta"));
        assert_eq!(ev[2]["content_block"]["type"], "text");
        assert_eq!(
            ev.iter()
                .filter(|e| e["index"] == 0 && e["type"] == "content_block_delta")
                .count(),
            3
        );
        assert_eq!(
            ev.iter()
                .find(|e| e["type"] == "content_block_start" && e["index"] == 1)
                .unwrap()["content_block"]["id"],
            "toolu_s0_t2_b1"
        );
        let delta = &ev[ev.len() - 2];
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(ev[0]["message"]["usage"]["input_tokens"], 7);
        assert_eq!(ev.last().unwrap()["type"], "message_stop");
    }

    #[test]
    fn truncation_cuts_the_first_tool_and_stops_at_max_tokens() {
        let t = turn(
            r#"{"content": [{"type": "text", "text": "a"},
            {"type": "tool_use", "name": "Write", "input": {"content": "0123456789"}},
            {"type": "text", "text": "never"}]}"#,
        );
        let ev = turn_events(&t, &meta(), true, &mut StdRng::seed_from_u64(4));
        let frags: String = ev
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert!(serde_json::from_str::<Value>(&frags).is_err(), "{frags}");
        assert!(!ev.iter().any(|e| e["index"] == 2));
        assert_eq!(ev[ev.len() - 2]["delta"]["stop_reason"], "max_tokens");
    }

    #[test]
    fn interleaved_tools_alternate_fragments() {
        let t = turn(
            r#"{"interleave": true, "content": [
            {"type": "tool_use", "name": "A", "input": {"a": "aaaaaaaa"}},
            {"type": "tool_use", "name": "B", "input": {"b": "bbbbbbbb"}}]}"#,
        );
        let ev = turn_events(&t, &meta(), false, &mut StdRng::seed_from_u64(5));
        let order: Vec<u64> = ev
            .iter()
            .filter(|e| e["type"] == "content_block_delta")
            .map(|e| e["index"].as_u64().unwrap())
            .collect();
        assert_eq!(&order[..2], &[0, 1]);
        let first_stop = ev
            .iter()
            .position(|e| e["type"] == "content_block_stop")
            .unwrap();
        let last_delta = ev
            .iter()
            .rposition(|e| e["type"] == "content_block_delta")
            .unwrap();
        assert!(first_stop > last_delta);
    }
}
