//! [`Event`]: the one stable structure a UI consumes (seed 001 "事件"). The runtime never
//! prints; it emits events to an [`EventSink`], and the terminal (or a test) renders them.

use serde::Serialize;
use std::sync::Arc;

use crate::model::Usage;
use crate::role::Role;

/// One thing that happened in a run.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Agent instance name (`coordinator`, `worker-2`, `judge-1`, `ad-hoc`).
    pub agent: String,
    /// Its role.
    pub role: Role,
    /// 0 for the main thread, 1 for a subagent it dispatched, and so on.
    pub depth: u32,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A workflow step begins.
    StepStart {
        /// Step name as in the manifest (`干活#round2`).
        step: String,
    },
    /// A workflow step ended.
    StepEnd {
        /// Step name.
        step: String,
        /// Whether it succeeded.
        ok: bool,
        /// Cost in USD; `None` when unknown.
        cost_usd: Option<f64>,
        /// Model turns.
        turns: u32,
        /// Last context size in tokens.
        context_tokens: u64,
        /// Error text when not ok.
        error: Option<String>,
    },
    /// The prompt sent to an agent (shown with `-v`).
    Prompt {
        /// The prompt text.
        text: String,
    },
    /// Assistant text (a complete block).
    Text {
        /// The text.
        text: String,
    },
    /// Streaming text piece (progress displays; complete text also arrives as [`EventKind::Text`]).
    TextDelta {
        /// The piece.
        text: String,
    },
    /// Thinking text (a complete block).
    Thinking {
        /// The text.
        text: String,
    },
    /// A tool call about to run (after guards).
    ToolCall {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Summary of the input (`Bash: cargo build`): one line, or one per line of a
        /// multi-line command (at most four).
        summary: String,
    },
    /// A tool result.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Error result.
        is_error: bool,
        /// Result text as the model sees it (already spilled if large).
        text: String,
    },
    /// A subagent was dispatched.
    Dispatch {
        /// The new agent's name.
        child: String,
        /// Its description.
        description: String,
    },
    /// A question to the human is pending.
    Question {
        /// Question text.
        question: String,
        /// Options, may be empty.
        options: Vec<String>,
        /// Asks left; -1 when unlimited.
        remaining: i64,
    },
    /// The question's outcome: answered, timeout, over_budget, skipped.
    Answer {
        /// Outcome kind.
        outcome: String,
        /// The answer text when answered.
        text: String,
    },
    /// Usage of one model call.
    Usage {
        /// Tokens.
        usage: Usage,
        /// Cost of this call; `None` when unknown.
        cost_usd: Option<f64>,
        /// Context size after this call, in tokens.
        context_tokens: u64,
    },
    /// The model call is being retried, or waiting for the network.
    Retry {
        /// One line.
        reason: String,
    },
    /// A handoff happened (seed 001 "换代").
    Handoff {
        /// Context tokens at the switch.
        context_tokens: u64,
        /// Window size.
        window: u64,
        /// Path of the handoff document.
        path: String,
        /// The degraded document was used.
        degraded: bool,
        /// Section lines for display: (label, first line).
        sections: Vec<(String, String)>,
    },
    /// Handoffs are off and the oldest turns were summarised into one message (flower's
    /// fallback, the SDK's compaction).
    Compacted {
        /// Context tokens before.
        context_tokens: u64,
        /// Window size.
        window: u64,
        /// Messages folded into the summary.
        folded: usize,
        /// Recent messages kept verbatim.
        kept: usize,
        /// The summary call failed: a mechanical summary stands in.
        degraded: bool,
    },
    /// Something the human should notice.
    Warning {
        /// The text.
        text: String,
    },
    /// A failure that did not stop the run (or did: see `StepEnd`).
    Error {
        /// The text.
        text: String,
    },
    /// The frozen goal has checks this environment cannot verify (seed 002 "验不了的条目,
    /// 设目标时就会喊"): emitted once when the goal is set, rendered as the seed's block.
    GoalUnverifiable {
        /// Number of checks in the goal.
        total: usize,
        /// The unverifiable checks as written, with their `[此环境无法验证:…]` marker.
        items: Vec<String>,
        /// The goal file as the human should see it (`.flower/notes/目标.md`).
        path: String,
    },
    /// The checks of a judge round ran (issue 27): flowerbox's own, before the judge.
    Checks {
        /// Green ones.
        passed: usize,
        /// All of them.
        total: usize,
        /// The screen line: `✓ 3/4 检查 · ✗ make test (exit 2, 1.3 s)`.
        line: String,
    },
    /// A human message reached the agent through `inbox`.
    Inbox {
        /// What was delivered.
        text: String,
    },
}

/// Where events go. Must be cheap and non-blocking; called from many tasks.
pub type EventSink = Arc<dyn Fn(Event) + Send + Sync>;

/// A sink that drops everything (tests, the aside oracle's inner runtime).
pub fn null_sink() -> EventSink {
    Arc::new(|_| {})
}
