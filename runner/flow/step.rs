//! [`Step`]: the declaration of one workflow step (flower's `Step`, api.md "Step") — a name, an
//! agent spec, a prompt computed from the context, how it connects to earlier sessions, and
//! the callbacks that decide whether it runs (`when`), whether its output is accepted
//! (`gate`, async, may [`StepAbort`]), what goes downstream (`reduce`), how a rejected attempt
//! is sent back (`on_reject`) and what a failure means (`on_fail`).
//!
//! A step is not executed by itself: [`super::Workflow::run`] runs it as one
//! `Runtime::run` per attempt.

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

use super::ctx::Ctx;
use crate::agent::{AgentSpec, Runtime, StepResult};

/// A gate's "stop now, another attempt will not help" (api.md `StepAbort`): the reason goes to
/// [`Ctx::aborted`], the retry loop ends without spending the remaining retries, and the step
/// fails through its `on_fail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StepAbort(pub String);

/// What a failed step means for the workflow (api.md `on_fail`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnFail {
    /// Record [`Ctx::failed_at`] and stop the workflow (default).
    #[default]
    Stop,
    /// Go on; the step's output is not written.
    Skip,
    /// Go on with the partial text as the step's output (not through `reduce`).
    Continue,
}

impl OnFail {
    /// Parses `stop`, `skip`, `continue`.
    pub fn parse(s: &str) -> Option<OnFail> {
        match s {
            "stop" => Some(OnFail::Stop),
            "skip" => Some(OnFail::Skip),
            "continue" => Some(OnFail::Continue),
            _ => None,
        }
    }
}

/// A prompt computed from the context.
pub type PromptFn = Arc<dyn Fn(&Ctx) -> String + Send + Sync>;

/// What a step says: fixed text or a function of the context.
#[derive(Clone)]
pub enum Prompt {
    /// The same text every time.
    Text(String),
    /// Computed when the attempt starts.
    Dynamic(PromptFn),
}

impl Prompt {
    /// A prompt computed from the context.
    pub fn from_fn(f: impl Fn(&Ctx) -> String + Send + Sync + 'static) -> Self {
        Prompt::Dynamic(Arc::new(f))
    }

    /// The text for `ctx`.
    pub fn render(&self, ctx: &Ctx) -> String {
        match self {
            Prompt::Text(t) => t.clone(),
            Prompt::Dynamic(f) => f(ctx),
        }
    }
}

impl From<&str> for Prompt {
    fn from(s: &str) -> Self {
        Prompt::Text(s.to_string())
    }
}

impl From<String> for Prompt {
    fn from(s: String) -> Self {
        Prompt::Text(s)
    }
}

impl fmt::Debug for Prompt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prompt::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Prompt::Dynamic(_) => f.write_str("Dynamic(..)"),
        }
    }
}

/// What a gate may look at and change.
pub struct GateCx<'a> {
    /// The runtime: a gate may run its own agent (the goal guard's judge) on it, and its
    /// events reach the same UI.
    pub runtime: &'a Arc<Runtime>,
    /// The context.
    pub ctx: &'a mut Ctx,
    /// The step's plain name.
    pub step: &'a str,
    /// Which attempt was just judged, 0-based.
    pub attempt: u32,
}

/// Decides whether an attempt that finished (`result.ok`) is accepted. Called exactly once
/// per finished attempt, so it may have side effects (freezing the brief to disk). Never
/// called for an attempt that failed on its own.
///
/// `Ok(false)` = "not this time, try again if retries are left"; `Err(StepAbort)` = "another
/// attempt will not help".
#[async_trait]
pub trait Gate: Send + Sync {
    /// Judges one attempt.
    async fn check(&self, result: &StepResult, cx: &mut GateCx<'_>) -> Result<bool, StepAbort>;
}

/// Any synchronous closure over the result and the context is a gate.
#[async_trait]
impl<F> Gate for F
where
    F: Fn(&StepResult, &mut Ctx) -> Result<bool, StepAbort> + Send + Sync,
{
    async fn check(&self, result: &StepResult, cx: &mut GateCx<'_>) -> Result<bool, StepAbort> {
        self(result, cx.ctx)
    }
}

/// `when`: whether the step runs; may fill the context even when it says no.
pub type WhenFn = Arc<dyn Fn(&mut Ctx) -> bool + Send + Sync>;
/// `reduce` / `on_reject`: a text computed from an attempt's result and the context.
pub type ResultFn = Arc<dyn Fn(&StepResult, &Ctx) -> String + Send + Sync>;

/// One step. Build it with [`Step::new`] and the builder methods; every field is public.
#[derive(Clone)]
pub struct Step {
    /// The step name: its key in [`Ctx::outputs`], its manifest row and its lineage key (stable
    /// across processes — renaming a step severs its continuity).
    pub name: String,
    /// The agent that runs it.
    pub spec: AgentSpec,
    /// What it is told on a fresh start.
    pub prompt: Prompt,
    /// What it is told when it continues its own session from lineage (a new process picking
    /// up); `prompt` when `None`.
    pub resume_prompt: Option<Prompt>,
    /// Resume the session of this earlier step (in this run) instead of starting fresh. A
    /// referenced step without a session is an error, never a silent fresh start.
    pub resume_from: Option<String>,
    /// Fork the `resume_from` session instead of continuing it (no effect without it).
    pub fork: bool,
    /// Attempts after the first when the gate rejects or the run fails.
    pub retries: u32,
    /// Skip the step when this returns `false`.
    pub when: Option<WhenFn>,
    /// Accept or reject a finished attempt.
    pub gate: Option<Arc<dyn Gate>>,
    /// What goes into [`Ctx::outputs`] when accepted; the final text when `None`.
    pub reduce: Option<ResultFn>,
    /// When set, a rejected attempt is sent back: the next attempt resumes the rejected
    /// session with this text (`<name>#round<N>`). An empty text, or no session, starts over
    /// instead (`<name>#retry<N>`).
    pub on_reject: Option<ResultFn>,
    /// What a failure means.
    pub on_fail: OnFail,
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Step")
            .field("name", &self.name)
            .field("agent", &self.spec.name)
            .field("prompt", &self.prompt)
            .field("resume_from", &self.resume_from)
            .field("fork", &self.fork)
            .field("retries", &self.retries)
            .field("when", &self.when.is_some())
            .field("gate", &self.gate.is_some())
            .field("reduce", &self.reduce.is_some())
            .field("on_reject", &self.on_reject.is_some())
            .field("on_fail", &self.on_fail)
            .finish()
    }
}

impl Step {
    /// A step with no callbacks: one attempt, a fresh session (or its lineage session), its
    /// final text downstream, stop on failure.
    pub fn new(name: impl Into<String>, spec: AgentSpec, prompt: impl Into<Prompt>) -> Self {
        Step {
            name: name.into(),
            spec,
            prompt: prompt.into(),
            resume_prompt: None,
            resume_from: None,
            fork: false,
            retries: 0,
            when: None,
            gate: None,
            reduce: None,
            on_reject: None,
            on_fail: OnFail::Stop,
        }
    }

    /// Sets the prompt used when continuing its own lineage session.
    pub fn resume_prompt(mut self, p: impl Into<Prompt>) -> Self {
        self.resume_prompt = Some(p.into());
        self
    }

    /// Resumes (or with `fork`, forks) the session of step `from`.
    pub fn resume_from(mut self, from: impl Into<String>, fork: bool) -> Self {
        self.resume_from = Some(from.into());
        self.fork = fork;
        self
    }

    /// Attempts after the first.
    pub fn retries(mut self, n: u32) -> Self {
        self.retries = n;
        self
    }

    /// Runs only when `f` says so (it may fill the context either way).
    pub fn when(mut self, f: impl Fn(&mut Ctx) -> bool + Send + Sync + 'static) -> Self {
        self.when = Some(Arc::new(f));
        self
    }

    /// Installs a gate (an async [`Gate`] or a closure `Fn(&StepResult, &mut Ctx)`).
    pub fn gate(mut self, g: impl Gate + 'static) -> Self {
        self.gate = Some(Arc::new(g));
        self
    }

    /// What goes downstream when accepted.
    pub fn reduce(
        mut self,
        f: impl Fn(&StepResult, &Ctx) -> String + Send + Sync + 'static,
    ) -> Self {
        self.reduce = Some(Arc::new(f));
        self
    }

    /// Sends rejected attempts back with `f`'s text instead of starting over.
    #[cfg(test)]
    pub(crate) fn on_reject(
        mut self,
        f: impl Fn(&StepResult, &Ctx) -> String + Send + Sync + 'static,
    ) -> Self {
        self.on_reject = Some(Arc::new(f));
        self
    }

    /// What a failure means.
    pub fn on_fail(mut self, on_fail: OnFail) -> Self {
        self.on_fail = on_fail;
        self
    }

    /// The prompt for an attempt: `resume_prompt` when continuing its lineage session and one
    /// is set, else `prompt`.
    pub fn render(&self, ctx: &Ctx, resuming: bool) -> String {
        match (&self.resume_prompt, resuming) {
            (Some(p), true) => p.render(ctx),
            _ => self.prompt.render(ctx),
        }
    }
}
