//! The agent loop for one session: request → stream → tool calls → guard → execute (concurrently)
//! → tool results → next request, until `end_turn`, a turn limit, the budget, an interruption at
//! a message boundary, or a model failure. Subagents (`Agent`) run the same loop one level down.

use futures::future::join_all;
use serde_json::Value;
use std::sync::{Arc, Mutex};

use super::dispatch::{workers_of, SubDispatch};
use super::event::EventKind;
use super::guard::{self, check_report, one_line, Decision};
use super::repeat::Verdict;
use super::result::{Meter, StepError};
use super::runtime::Runtime;
use super::spec::AgentSpec;
use super::spill::maybe_spill;
use super::tools::{Dispatcher, ToolContext, ToolError};
use crate::model::price::Cost;
use crate::model::ToolName;
use crate::model::{
    Caller, ContentBlock, Message, ModelError, ModelEvent, Request, Speaker, StopReason, ToolCall,
    ToolDef,
};
use crate::plugin::HookEvent;
use crate::sandbox::AgentBox;
use crate::session::NoticeKind;

#[path = "session_hooks.rs"]
mod hooks;
#[path = "session_mcp.rs"]
mod mcp;

/// Undoes the workers `ctx`'s dispatcher prepared and did not dispatch.
async fn settle(ctx: &ToolContext) {
    if let Some(d) = &ctx.dispatcher {
        d.settle().await;
    }
}

/// Most consecutive cut-off turns before the agent is stopped.
const MAX_CUTOFFS: u32 = 3;
/// Most times the plugins' Stop hooks may keep one turn going.
const MAX_STOP_BLOCKS: u32 = 3;

/// How a loop ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LoopEnd {
    /// The model ended its turn.
    Done,
    /// The human interrupted (cooperatively, at a message boundary).
    Interrupted,
    /// A model call failed after every attempt the provider's retry policy allows.
    Failed(ModelError),
    /// A limit stopped it (turns, budget, cut-offs).
    Stopped(StepError),
    /// The main thread's context reached the handoff threshold, or the model said the prompt
    /// is too long (then the agent cannot write its own handoff).
    HandoffDue { prompt_too_long: bool },
    /// Handoffs are off and the main thread's context reached the compaction threshold, or
    /// the model said the prompt is too long: the oldest turns are to be summarised.
    CompactDue,
}

/// Why the agent wrote no handoff document (the text goes into the degraded one).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum HandoffFailure {
    /// Its answer had no text.
    #[error("它没写出任何文字")]
    NoText,
    /// The model call failed.
    #[error("{0}")]
    Model(ModelError),
    /// The turn ended otherwise (interrupted, handoff due again).
    #[error("写交接书的那一轮没有完成")]
    Incomplete,
}

/// One agent working in one session.
pub(crate) struct AgentRun {
    rt: Arc<Runtime>,
    spec: AgentSpec,
    agent: String,
    depth: u32,
    session: String,
    messages: Vec<Message>,
    agent_box: AgentBox,
    system: Vec<String>,
    /// Whether `system`'s last block is the workbench block (replaced at every prompt).
    index_in_system: bool,
    tools: Vec<ToolDef>,
    todos: Vec<Value>,
    /// Its background commands, kept across turns.
    background: Arc<Mutex<super::tools::background::Background>>,
    own_spend: Cost,
    children: Arc<Mutex<Cost>>,
    /// The step's running total (shared with its subagents), read when a signal stops it.
    meter: Option<Arc<Meter>>,
    /// Main-thread model calls.
    pub turns: u32,
    /// Context size of the last call, in tokens.
    pub context_tokens: u64,
    errors: Vec<String>,
    last_text: String,
    max_tokens: u32,
    cutoffs: u32,
    report_retry_used: bool,
    budget_warned: bool,
    /// The loop guard: identical turns in a row.
    repeats: super::repeat::RepeatGuard,
    /// The project's MCP tools this agent has (started on its first turn).
    mcp: Option<Arc<crate::mcp::AgentMcp>>,
    mcp_started: bool,
    /// A scoped worker's write scope, described.
    write_scope: Option<String>,
}

impl AgentRun {
    /// `history` is the (trimmed) conversation of a resumed session, empty for a new one.
    pub(crate) fn new(
        rt: Arc<Runtime>,
        spec: AgentSpec,
        agent: String,
        depth: u32,
        session: String,
        history: Vec<Message>,
        agent_box: AgentBox,
    ) -> Self {
        let (mut spec, skills) = hooks::with_plugins(spec, &rt.plugins);
        let agent_box = hooks::with_plugin_mounts(agent_box, &rt.plugins, &rt.config.workspace);
        // Whoever may run commands may read and stop those it started in the background (the
        // coordinator's glance-only Bash runs nothing that lasts).
        if spec.has(ToolName::Bash) && !spec.glance_only {
            for t in [ToolName::TaskOutput, ToolName::TaskStop] {
                if !spec.has(t) {
                    spec.tools.push(t.as_str().into());
                }
            }
        }
        let mut system = vec![rt.config.base_system.clone(), spec.instructions.clone()];
        system.extend(skills);
        let mut tools = rt.registry.definitions(&spec.tools);
        if let Some(def) = tools.iter_mut().find(|d| ToolName::Agent.is(&d.name)) {
            let kinds = workers_of(&spec);
            def.description
                .push_str("\nAvailable subagent_type values:");
            for w in &kinds {
                def.description
                    .push_str(&format!("\n- {}: {}", w.kind, w.description));
            }
        }
        let max_tokens = rt.config.max_tokens;
        AgentRun {
            rt,
            spec,
            agent,
            depth,
            session,
            messages: history,
            agent_box,
            system,
            index_in_system: false,
            tools,
            todos: Vec::new(),
            background: Default::default(),
            own_spend: Cost::default(),
            children: Arc::new(Mutex::new(Cost::default())),
            meter: None,
            turns: 0,
            context_tokens: 0,
            errors: Vec::new(),
            last_text: String::new(),
            max_tokens,
            cutoffs: 0,
            report_retry_used: false,
            budget_warned: false,
            repeats: Default::default(),
            mcp: None,
            mcp_started: false,
            write_scope: None,
        }
    }

    /// A scoped worker: failing writes name `scope` ([`super::scope`]).
    pub(crate) fn with_write_scope(mut self, scope: Option<String>) -> Self {
        self.write_scope = scope;
        self
    }

    /// Counts every model call of this run and its subagents into `meter` too.
    pub(crate) fn with_meter(mut self, meter: Option<Arc<Meter>>) -> Self {
        self.meter = meter;
        self
    }

    /// The prefix every request of this agent starts with: system blocks and tools (what
    /// prompt caching stores).
    #[cfg(test)]
    pub(crate) fn request_prefix(&self) -> (&[String], &[ToolDef]) {
        (&self.system, &self.tools)
    }

    /// The session id.
    pub(crate) fn session_id(&self) -> &str {
        &self.session
    }

    /// The agent instance name.
    pub(crate) fn agent(&self) -> &str {
        &self.agent
    }

    /// The role.
    pub(crate) fn role(&self) -> crate::role::Role {
        self.spec.role
    }

    /// One budget-exempt model call asking for the handoff document; its text, or why not.
    /// Tool calls in the answer are not executed (the session is retired next).
    pub(crate) async fn handoff_turn(&mut self, prompt: &str) -> Result<String, HandoffFailure> {
        self.say(prompt.to_string());
        let ctx = self.tool_context(self.rt.cancel_token());
        match self.call_model(&ctx).await {
            Ok(turn) => {
                self.turns += 1;
                self.append_turn(&turn);
                let text = turn.to_message().text();
                if text.trim().is_empty() {
                    Err(HandoffFailure::NoText)
                } else {
                    Ok(text)
                }
            }
            Err(LoopEnd::Failed(error)) => Err(HandoffFailure::Model(error)),
            Err(_) => Err(HandoffFailure::Incomplete),
        }
    }

    /// The conversation as the next request would send it.
    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// One tool-free model call outside the conversation (`system`, one user message), its
    /// cost counted like every call of this agent; its text, or why not. Budget-exempt, like
    /// the handoff turn: what keeps the step alive must be writable.
    pub(crate) async fn side_call(
        &mut self,
        system: &str,
        prompt: &str,
    ) -> Result<String, ModelError> {
        let req = Request {
            model: self.model(),
            system: vec![system.to_string()],
            messages: vec![Message {
                role: Speaker::User,
                content: vec![ContentBlock::text(prompt)],
            }],
            tools: Vec::new(),
            max_tokens: self.max_tokens,
            caller: Caller {
                role: self.spec.role,
                agent: self.agent.clone(),
            },
        };
        let cancel = self.rt.cancel_token();
        let turn = self.rt.provider.stream_turn(&req, &|_| {}, &cancel).await?;
        let cost = turn
            .reported_cost_usd
            .or_else(|| crate::model::price::cost_usd(&turn.model, &turn.usage));
        self.own_spend.add(cost);
        if let Some(m) = &self.meter {
            m.add(cost, false);
        }
        Ok(turn.to_message().text())
    }

    /// Cost so far, subagents included.
    pub(crate) fn spend(&self) -> Cost {
        let mut s = self.own_spend;
        s += *self.children.lock().unwrap_or_else(|e| e.into_inner());
        s
    }

    /// Model errors met so far (drained).
    pub(crate) fn take_errors(&mut self) -> Vec<String> {
        std::mem::take(&mut self.errors)
    }

    /// The agent's final text: its last assistant text.
    pub(crate) fn final_text(&self) -> String {
        self.last_text.clone()
    }

    fn emit(&self, kind: EventKind) {
        self.rt.emit(&self.agent, self.spec.role, self.depth, kind);
    }

    fn append(&mut self, msg: Message, context: Option<u64>) {
        if let Err(e) = self.rt.store.append(&self.session, &msg, context) {
            // A transcript that cannot be kept cannot be continued: the run stops (issue 26 §3).
            self.rt.not_saved("会话", &e);
        }
        self.messages.push(msg);
    }

    /// Appends a notice to the session; a failure stops the run like any unsaved record.
    fn notice(&self, kind: NoticeKind, text: &str) {
        if let Err(e) = self.rt.store.append_notice(&self.session, kind, text) {
            self.rt.not_saved("会话", &e);
        }
    }

    /// Records the model's turn. A turn with no content at all (cut off by `max_tokens` inside
    /// its only tool call) is never stored or sent: the real APIs refuse an empty message
    /// anywhere but last, and a stored one would break every resume of the session.
    fn append_turn(&mut self, turn: &crate::model::Turn) {
        let msg = turn.to_message();
        if !msg.content.is_empty() {
            self.append(msg, Some(self.context_tokens));
        }
    }

    /// Appends user content, merging into a trailing user message in memory (the APIs want
    /// alternation); the store gets its own row, which resume merges back the same way.
    fn push_user(&mut self, content: Vec<ContentBlock>) {
        let msg = Message {
            role: Speaker::User,
            content,
        };
        match self.messages.last_mut() {
            Some(last) if last.role == Speaker::User => {
                last.content.extend(msg.content.iter().cloned());
                if let Err(e) = self.rt.store.append(&self.session, &msg, None) {
                    self.rt.not_saved("会话", &e);
                }
            }
            _ => self.append(msg, None),
        }
    }

    /// Says `prompt` and runs until the agent ends its turn or something stops it.
    pub(crate) async fn turn(&mut self, prompt: &str) -> LoopEnd {
        let mut text = prompt.to_string();
        self.refresh_index();
        self.emit(EventKind::Prompt {
            text: prompt.to_string(),
        });
        let cancel = self.rt.cancel_token();
        let ctx = self.tool_context(cancel.clone());
        // The container starts while the first model request is in flight (issue 17).
        ctx.start_sandbox_early();
        if let Some(notes) = self.start_mcp(&ctx).await {
            text = format!("{text}\n\n{notes}");
        }
        // The plugins' SessionStart (a new session) and UserPromptSubmit hooks: what they print
        // joins the prompt; exit 2 on a prompt stops the step.
        let mut added = Vec::new();
        if self.messages.is_empty() {
            let mut input = serde_json::Map::new();
            input.insert("source".into(), Value::String("startup".into()));
            added.extend(
                self.event_hooks(HookEvent::SessionStart, input, &ctx)
                    .await
                    .0,
            );
        }
        let mut input = serde_json::Map::new();
        input.insert("prompt".into(), Value::String(prompt.to_string()));
        let (more, block) = self
            .event_hooks(HookEvent::UserPromptSubmit, input, &ctx)
            .await;
        if let Some(reason) = block {
            return LoopEnd::Stopped(StepError::PromptBlocked(reason));
        }
        added.extend(more);
        for a in added {
            text = format!("{text}\n\n{a}");
        }
        self.say(text);
        let end = self.run_loop(&ctx).await;
        // Whatever ended the turn, no worker prepared for it outlives it.
        settle(&ctx).await;
        self.todos = std::mem::take(&mut *ctx.todos.lock().unwrap_or_else(|e| e.into_inner()));
        end
    }

    /// Puts the workbench block with the current index at the end of the system prompt, as
    /// flower does (its `prompt_block()` goes into `system_prompt.append` at every step start):
    /// a resumed session sees today's index, not its first start's. Refreshed once per prompt,
    /// so every request of one turn shares the cached prefix.
    fn refresh_index(&mut self) {
        if !self.spec.workbench_index {
            return;
        }
        let Some(wb) = &self.rt.workbench else {
            return;
        };
        let block = wb.prompt_block();
        if self.index_in_system {
            self.system.pop();
        }
        self.system.push(block);
        self.index_in_system = true;
    }

    /// Appends a user text, merging into a trailing user message (the API wants alternation).
    fn say(&mut self, text: String) {
        self.push_user(vec![ContentBlock::text(text)]);
    }

    fn tool_context(&self, cancel: tokio_util::sync::CancellationToken) -> ToolContext {
        let sandboxes = self
            .rt
            .runs_commands(&self.spec)
            .then(|| self.rt.sandboxes.clone());
        let dispatcher: Option<Arc<dyn Dispatcher>> = self.spec.has(ToolName::Agent).then(|| {
            Arc::new(SubDispatch {
                rt: self.rt.clone(),
                workers: workers_of(&self.spec),
                parent_session: self.session.clone(),
                parent_agent: self.agent.clone(),
                parent_depth: self.depth,
                parent_role: self.spec.role,
                children: self.children.clone(),
                meter: self.meter.clone(),
                speculations: Default::default(),
            }) as Arc<dyn Dispatcher>
        });
        let mut ctx = ToolContext::new(
            self.agent.clone(),
            self.spec.role,
            self.depth,
            self.agent_box.clone(),
            sandboxes,
            self.rt.workbench.clone(),
            self.rt.human.clone(),
            cancel,
            dispatcher,
            self.rt.config.tool_limits.clone(),
        );
        *ctx.todos.lock().unwrap_or_else(|e| e.into_inner()) = self.todos.clone();
        ctx.plugins = self.rt.plugins.clone();
        ctx.background = self.background.clone();
        ctx.confine = ctx
            .confine
            .clone()
            .hiding_ids(self.rt.config.masked_ids.clone())
            .with_scope(self.write_scope.clone());
        ctx.write_scope = self.write_scope.clone();
        // Every agent's file operations go through the run's backend, commands or not.
        ctx.files = self.rt.sandboxes.files();
        ctx
    }

    async fn run_loop(&mut self, ctx: &ToolContext) -> LoopEnd {
        let mut stop_blocks = 0;
        loop {
            if ctx.cancel.is_cancelled() {
                return LoopEnd::Interrupted;
            }
            if let Some(limit) = self.limit_reached() {
                return LoopEnd::Stopped(limit);
            }
            let turn = match self.call_model(ctx).await {
                Ok(t) => t,
                Err(end) => return end,
            };
            self.turns += 1;
            let calls: Vec<ToolCall> = turn.to_message().tool_uses().collect();
            let text = turn.to_message().text();
            if !text.trim().is_empty() {
                self.last_text = text;
            }
            self.append_turn(&turn);

            let mut notes = Vec::new();
            if turn.truncated_tool_use
                || (turn.stop_reason == StopReason::MaxTokens && calls.is_empty())
            {
                self.cutoffs += 1;
                if self.cutoffs > MAX_CUTOFFS {
                    return LoopEnd::Stopped(StepError::CutOff(MAX_CUTOFFS));
                }
                self.max_tokens = (self.max_tokens * 2).min(self.rt.config.max_tokens_ceiling);
                notes.push(if turn.truncated_tool_use {
                    "[你上一条输出在 max_tokens 处被截断,正在写的那个工具调用没有执行。把大内容拆小(分几次 Write/Edit),再继续。]"
                } else {
                    "[你上一条输出在 max_tokens 处被截断了。从断的地方接着写。]"
                });
            } else {
                self.cutoffs = 0;
            }

            if calls.is_empty() {
                self.repeats.observe(&[], &[]);
            }
            if calls.is_empty() && notes.is_empty() {
                if self.rewrite_report() || self.stop_hooked(ctx, &mut stop_blocks).await {
                    continue;
                }
                return LoopEnd::Done;
            }

            // A resumed history's spill files may still be being written: a tool can read
            // one as soon as it runs.
            if let Err(e) = self.rt.store.spill_written() {
                self.rt.not_saved("会话", &e);
                return LoopEnd::Stopped(StepError::from(e));
            }
            let results = join_all(calls.iter().map(|c| {
                let malformed = turn.malformed_calls.iter().find(|m| m.id == c.id);
                self.exec_call(c, malformed, ctx)
            }))
            .await;
            // Workers prepared for calls that did not dispatch (refused, or of an attempt
            // that failed) are undone.
            settle(ctx).await;
            let seen: Vec<(String, bool)> = results
                .iter()
                .map(|b| match b {
                    ContentBlock::ToolResult {
                        content, is_error, ..
                    } => (content.clone(), *is_error),
                    _ => (String::new(), false),
                })
                .collect();
            let verdict = self.repeats.observe(&calls, &seen);
            let mut content: Vec<ContentBlock> = results;
            content.extend(notes.iter().map(|n| ContentBlock::text(*n)));
            match verdict {
                Verdict::Go => {}
                Verdict::Tell(note) => {
                    self.emit(EventKind::Warning {
                        text: format!(
                            "{} 连续 {} 次做了同样的调用、得到同样的结果,已提醒它换办法",
                            self.agent,
                            super::repeat::REPEAT_LIMIT
                        ),
                    });
                    content.push(ContentBlock::text(note));
                }
                Verdict::Stop(name, times) => {
                    self.push_user(content);
                    return LoopEnd::Stopped(StepError::Repeating { name, times });
                }
            }
            self.push_user(content);
            if self.handoff_due() {
                return LoopEnd::HandoffDue {
                    prompt_too_long: false,
                };
            }
            if self.compact_due() {
                return LoopEnd::CompactDue;
            }
        }
    }

    /// The agent's turn limit or budget, when reached (an unknown price is said once: the
    /// budget then counts only what is known).
    fn limit_reached(&mut self) -> Option<StepError> {
        if let Some(max) = self.spec.max_turns {
            if self.turns >= max {
                return Some(StepError::TurnLimit(max));
            }
        }
        let limit = self.spec.max_budget_usd?;
        let spent = self.spend();
        if spent.known_usd >= limit {
            return Some(StepError::Budget { spent, limit });
        }
        if spent.unknown && !self.budget_warned {
            self.budget_warned = true;
            self.emit(EventKind::Warning {
                text: format!(
                    "模型 {} 的价格未知,预算上限 ${limit} 只按已知花费执行",
                    self.model()
                ),
            });
        }
        None
    }

    /// A worker's answer that is not the four-part report is sent back once to be rewritten;
    /// true when it was.
    fn rewrite_report(&mut self) -> bool {
        if !self.spec.report_format || self.report_retry_used {
            return false;
        }
        let Err(problem) = check_report(&self.last_text) else {
            return false;
        };
        self.report_retry_used = true;
        // Said on screen: the extra turn it costs is not a mystery (a scripted worker without
        // that turn fails on it).
        self.emit(EventKind::Warning {
            text: format!(
                "{} 的回话不是四段报告({problem}),让它按 结论 / 依据 / 产出 / 未验证 重写一次",
                self.agent
            ),
        });
        self.say(format!(
            "回话格式不对({problem})。按四段重写,总共不超过 {} 行:结论 / 依据 / 产出 / 未验证。只回这份报告。",
            guard::REPORT_MAX_LINES
        ));
        true
    }

    /// The plugins' Stop / SubagentStop hooks may keep the agent going (exit 2: their reason
    /// is its next message), a few times at most; true when one did.
    async fn stop_hooked(&mut self, ctx: &ToolContext, blocks: &mut u32) -> bool {
        if *blocks >= MAX_STOP_BLOCKS {
            return false;
        }
        let event = if self.depth == 0 {
            HookEvent::Stop
        } else {
            HookEvent::SubagentStop
        };
        let mut input = serde_json::Map::new();
        input.insert("stop_hook_active".into(), Value::Bool(*blocks > 0));
        let (_, Some(reason)) = self.event_hooks(event, input, ctx).await else {
            return false;
        };
        *blocks += 1;
        self.say(format!("[{} 钩子:{reason}]", event.as_str()));
        true
    }

    /// Handoffs off, main thread at `window − 33000` (flower's fallback: the SDK's
    /// auto-compact).
    fn compact_due(&self) -> bool {
        self.depth == 0
            && self
                .rt
                .config
                .compact_window
                .is_some_and(|w| self.context_tokens >= super::compact::compact_threshold(w))
    }

    /// Only the main thread's context counts (seed 001 "换代").
    fn handoff_due(&self) -> bool {
        self.depth == 0
            && self.rt.config.handoff_window.is_some_and(|w| {
                self.context_tokens >= crate::record::handoff::handoff_threshold(w)
            })
    }

    fn model(&self) -> String {
        self.spec
            .model
            .clone()
            .unwrap_or_else(|| self.rt.config.model.clone())
    }

    async fn call_model(&mut self, ctx: &ToolContext) -> Result<crate::model::Turn, LoopEnd> {
        let req = Request {
            model: self.model(),
            system: self.system.clone(),
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            max_tokens: self.max_tokens,
            caller: Caller {
                role: self.spec.role,
                agent: self.agent.clone(),
            },
        };
        let rt = self.rt.clone();
        let (agent, role, depth) = (self.agent.clone(), self.spec.role, self.depth);
        let dispatcher = ctx.dispatcher.clone();
        let sink = move |ev: ModelEvent| {
            let kind = match ev {
                // A call whole before its message ends: a worker may be prepared now.
                ModelEvent::ToolCall(call) => {
                    if let Some(d) = &dispatcher {
                        d.speculate(&call);
                    }
                    return;
                }
                ModelEvent::TextDelta(t) if depth == 0 => EventKind::TextDelta { text: t },
                ModelEvent::Retrying {
                    attempt,
                    of,
                    delay_ms,
                    reason,
                } => EventKind::Retry {
                    reason: format!(
                        "第 {attempt}/{of} 次请求失败({reason}),{:.1} 秒后重试",
                        delay_ms as f64 / 1000.0
                    ),
                },
                ModelEvent::Waiting { status } => EventKind::Retry { reason: status },
                _ => return,
            };
            rt.emit(&agent, role, depth, kind);
        };
        let result = self.rt.provider.stream_turn(&req, &sink, &ctx.cancel).await;
        match result {
            Ok(turn) => {
                for e in &turn.retried_errors {
                    self.notice(NoticeKind::NetworkError, e);
                }
                self.errors.extend(turn.retried_errors.iter().cloned());
                // A gateway's own price of the call comes first; the price table otherwise.
                let cost = turn
                    .reported_cost_usd
                    .or_else(|| crate::model::price::cost_usd(&turn.model, &turn.usage));
                self.own_spend.add(cost);
                if let Some(m) = &self.meter {
                    m.add(cost, self.depth == 0);
                }
                self.context_tokens = turn.usage.context_tokens();
                self.emit(EventKind::Usage {
                    usage: turn.usage,
                    cost_usd: cost,
                    context_tokens: self.context_tokens,
                });
                for b in &turn.content {
                    match b {
                        ContentBlock::Text { text } if !text.trim().is_empty() => {
                            self.emit(EventKind::Text { text: text.clone() })
                        }
                        ContentBlock::Thinking { thinking, .. } if !thinking.trim().is_empty() => {
                            self.emit(EventKind::Thinking {
                                text: thinking.clone(),
                            })
                        }
                        _ => {}
                    }
                }
                Ok(turn)
            }
            Err(ModelError::Interrupted) => {
                self.notice(NoticeKind::Interrupted, "interrupted during a model call");
                Err(LoopEnd::Interrupted)
            }
            Err(e) => {
                let msg = e.to_string();
                self.notice(NoticeKind::NetworkError, &msg);
                if let ModelError::Exhausted { errors, .. } = &e {
                    self.errors.extend(errors.iter().cloned());
                } else {
                    self.errors.push(msg.clone());
                }
                if e.is_prompt_too_long() && self.depth == 0 {
                    if self.rt.config.handoff_window.is_some() {
                        return Err(LoopEnd::HandoffDue {
                            prompt_too_long: true,
                        });
                    }
                    if self.rt.config.compact_window.is_some() {
                        return Err(LoopEnd::CompactDue);
                    }
                }
                // At depth 0 the failure is the step's error, shown once under its end line;
                // a subagent's is shown here (its parent only gets a tool result).
                if self.depth > 0 {
                    self.emit(EventKind::Error { text: msg.clone() });
                }
                Err(LoopEnd::Failed(e))
            }
        }
    }

    /// Guards, runs and spills one tool call; always yields a tool_result. A call whose input
    /// was not a JSON object (`malformed`) is not run: its result tells the model what it sent.
    async fn exec_call(
        &self,
        call: &ToolCall,
        malformed: Option<&crate::model::MalformedCall>,
        ctx: &ToolContext,
    ) -> ContentBlock {
        self.emit(EventKind::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            summary: match malformed {
                Some(_) => format!("{}: (输入不是 JSON 对象,没有执行)", call.name),
                None => summarize(call),
            },
        });
        let tool = self.rt.registry.get(&call.name);
        // A project MCP tool is on this agent's list only when its whitelist admitted it.
        let mcp = self.mcp.clone().filter(|m| m.tool(&call.name).is_some());
        let dead = self
            .mcp
            .as_ref()
            .and_then(|m| m.unavailable(&call.name, &self.spec.tools));
        let decision = match (&mcp, dead) {
            (Some(_), _) => Decision::Allow,
            (None, Some(why)) => Decision::Deny(why),
            (None, None) => guard::check(&self.spec, call),
        };
        // The plugins' PreToolUse hooks see a call the guards let through, before it runs.
        let decision = match decision {
            Decision::Allow if malformed.is_none() => {
                match self
                    .tool_hooks(HookEvent::PreToolUse, call, None, ctx)
                    .await
                {
                    Some(reason) => {
                        Decision::Deny(format!("PreToolUse 钩子拦下了这次调用,没有执行:{reason}"))
                    }
                    None => Decision::Allow,
                }
            }
            other => other,
        };
        let outcome: Result<String, ToolError> = match (malformed, decision) {
            (Some(m), _) => Err(ToolError::InvalidInput(format!(
                "输入必须是一个 JSON 对象,这次收到的是:{}。这次调用没有执行;按 {} 的参数说明传一个 JSON 对象再调用。",
                m.raw, m.name
            ))),
            (None, Decision::Deny(m)) => Err(ToolError::Denied(m)),
            (None, Decision::Allow) if !call.input.is_object() && (tool.is_some() || mcp.is_some()) => {
                Err(ToolError::InvalidInput("输入必须是 JSON 对象".into()))
            }
            (None, Decision::Allow) => match (&tool, &mcp) {
                (_, Some(m)) => m
                    .call(&call.name, &call.input, &ctx.cancel)
                    .await
                    .map_err(mcp::tool_error),
                (Some(t), None) => t.call(&call.input, ctx).await,
                (None, None) => Err(ToolError::Denied(format!("没有叫 {} 的工具", call.name))),
            },
        };
        let (mut text, is_error) = match outcome {
            Ok(t) => (t, false),
            Err(e) => (e.to_string(), true),
        };
        if !is_error {
            if let Some(reason) = self
                .tool_hooks(HookEvent::PostToolUse, call, Some(&text), ctx)
                .await
            {
                text.push_str(&format!("\n\n[PostToolUse 钩子:{reason}]"));
            }
        }
        let spills = tool.as_ref().map_or(mcp.is_some(), |t| t.spills());
        if let (true, Some(wb)) = (spills, &self.rt.workbench) {
            let reads_spill = ToolName::Read.is(&call.name)
                && call
                    .input
                    .get("file_path")
                    .and_then(|p| p.as_str())
                    .and_then(|p| ctx.confine.resolve(p, super::confine::Access::Read).ok())
                    .is_some_and(|p| ctx.is_spill_file(&p));
            if !reads_spill {
                // On an engine without this machine's disk the agent reads the workbench's
                // volume: the spilled file goes there too.
                if self.rt.sandboxes.engine_disk().is_some() {
                    super::spill::spill_to(&text, wb, self.rt.sandboxes.files().as_ref()).await;
                }
                text = maybe_spill(text, &wb.spill());
            }
        }
        self.emit(EventKind::ToolResult {
            id: call.id.clone(),
            name: call.name.clone(),
            is_error,
            text: text.clone(),
        });
        ContentBlock::ToolResult {
            tool_use_id: call.id.clone(),
            content: text,
            is_error,
        }
    }
}

/// Lines of a multi-line command shown in a call's summary.
const SUMMARY_LINES: usize = 4;

/// A call in brief: `Bash: cargo build`, or empty when its input has nothing to show. A multi-line command keeps its line breaks (each line
/// shortened, at most [`SUMMARY_LINES`], then how many more): flattened, two commands read as
/// one.
pub(crate) fn summarize(call: &ToolCall) -> String {
    let key = [
        "command",
        "file_path",
        "pattern",
        "url",
        "description",
        "question",
    ]
    .into_iter()
    .find_map(|k| call.input.get(k).and_then(|v| v.as_str()));
    // Nothing to show: empty, so the screen says `* TodoWrite`, not `* TodoWrite TodoWrite`.
    let Some(v) = key else {
        return String::new();
    };
    let lines: Vec<&str> = v.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut shown: Vec<String> = lines
        .iter()
        .take(SUMMARY_LINES)
        .map(|l| one_line(l, 100))
        .collect();
    if lines.len() > SUMMARY_LINES {
        shown.push(format!("…(共 {} 行)", lines.len()));
    }
    format!("{}: {}", call.name, shown.join("\n"))
}
