//! [`Workflow`]: runs [`Step`]s in order over a [`Ctx`] (flower's `Workflow`, api.md
//! "Workflow"; `docs/en/guide/workflow.md`, `continuity.md`).
//!
//! Per step: `when` may skip it; each attempt is one `Runtime::run` named `<name>`, then
//! `<name>#round<N>` when a rejected attempt is sent back into its own session (`on_reject`),
//! or `<name>#retry<N>` when it starts over; the gate judges every finished attempt once;
//! after the gate the containers of the agents the attempt started are released. An accepted
//! step writes `reduce` (or its text) to [`Ctx::outputs`]; a failed one follows `on_fail`.
//!
//! Continuity ([`Workflow::continuous`]): at the start the wake count in `runs/lineage.json`
//! is bumped once ([`Ctx::woke`]) and the sessions lineage recorded are loaded — only those
//! still in the session store. A step without `resume_from` then resumes the session recorded
//! for its name (a new process picks up where the last one stopped) and says its
//! `resume_prompt`. The session of every attempt is written to lineage under the step's plain
//! name the moment it exists — not at the end of the step, because a killed process runs no
//! cleanup — and again when the attempt ends (a handoff replaces it). Suffixed attempt names
//! and judges never enter lineage: judges are run by gates, not as steps.
//!
//! The runtime creates a step's session inside `Runtime::run` and reports it through
//! `RunOptions::on_session` at once, which writes lineage.

use std::sync::{Arc, Weak};

use super::ctx::Ctx;
use super::error::FlowError;
use super::step::{GateCx, OnFail, Step};
use crate::agent::{Event, EventKind, RunOptions, Runtime, StepError, StepResult};
use crate::channel::HumanChannel;
use crate::record::steps::{retry_name, round_name};
use crate::record::LineageFile;
use crate::role::Role;

/// How a workflow run ended (its context has the details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Every step ran, was skipped, or failed with `skip`/`continue`.
    Finished,
    /// A step failed with `on_fail` stop ([`Ctx::failed_at`]).
    Stopped {
        /// The step.
        step: String,
        /// Why, for the human: the gate's [`super::StepAbort`] reason, else why the gate
        /// rejected the last attempt, else the attempt's own error.
        why: String,
    },
}

/// Why a step failed, for the human ([`Completion::Stopped`]'s `why` is its text).
#[derive(Debug, thiserror::Error)]
enum StepFailure {
    /// The attempt's own error.
    #[error("{0}")]
    Errored(StepError),
    /// The attempt did not succeed and said no error.
    #[error("步骤 '{0}' 没跑完")]
    Unfinished(String),
    /// The gate stopped the workflow ([`super::StepAbort`]'s reason).
    #[error("{0}")]
    Aborted(String),
    /// The gate rejected the last attempt, saying why.
    #[error("{0}")]
    Rejected(String),
    /// The gate rejected the last attempt without a reason.
    #[error("步骤 '{0}' 的结果没被接受")]
    NotAccepted(String),
}

/// A sequence of steps. Build with [`Workflow::new`], add continuity with
/// [`Workflow::continuous`], run with [`Workflow::run`].
#[derive(Debug, Clone)]
pub struct Workflow {
    /// Name (for logs).
    pub name: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Continuity across processes: `runs/lineage.json` of this workspace. `None` = every
    /// process starts every step fresh.
    pub lineage: Option<LineageFile>,
    /// The question channel, if the workflow asks a human: [`Workflow::run`] connects its UI
    /// events to the runtime's event outlets when the caller connected none.
    pub channel: Option<HumanChannel>,
}

impl Workflow {
    /// A workflow without continuity or channel.
    pub fn new(name: impl Into<String>, steps: Vec<Step>) -> Self {
        Workflow {
            name: name.into(),
            steps,
            lineage: None,
            channel: None,
        }
    }

    /// Continues across processes through `lineage` (`<run_dir>/lineage.json` for this
    /// workspace).
    pub fn continuous(mut self, lineage: LineageFile) -> Self {
        self.lineage = Some(lineage);
        self
    }

    /// Attaches the question channel.
    pub fn with_channel(mut self, channel: HumanChannel) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Runs the steps over `ctx` on `rt`. `Ok(Completion::Stopped)` when a step failed and
    /// stopped the workflow; `Err` only for a workflow that is put together wrongly
    /// ([`FlowError::NoSession`]).
    pub async fn run(&self, rt: &Arc<Runtime>, ctx: &mut Ctx) -> Result<Completion, FlowError> {
        if let Some(ch) = &self.channel {
            ch.connect_events(forward_to(rt));
        }
        self.wake(rt, ctx);
        for (n, step) in self.steps.iter().enumerate() {
            let last = n + 1 == self.steps.len();
            if let Some(when) = &step.when {
                if !when(ctx) {
                    tracing::info!(step = %step.name, "skipped by when");
                    continue;
                }
            }
            if let Some(text) = ctx.run_reason.take() {
                emit(rt, EventKind::Warning { text });
            }
            let outcome = self.run_step(rt, ctx, step, last).await?;
            if let Some(wb) = rt.workbench() {
                // The brief or goal may have just been frozen: the next agent's index shows it.
                if let Err(e) = wb.refresh() {
                    tracing::warn!(error = %e, "workbench index refresh failed");
                }
            }
            ctx.passed.insert(step.name.clone(), outcome.is_ok());
            if let (Err(failure), OnFail::Stop) = (outcome, step.on_fail) {
                ctx.failed_at = Some(step.name.clone());
                return Ok(Completion::Stopped {
                    step: step.name.clone(),
                    why: failure.to_string(),
                });
            }
        }
        Ok(Completion::Finished)
    }

    /// Bumps the wake count and loads the live lineage sessions (continuity only).
    fn wake(&self, rt: &Arc<Runtime>, ctx: &mut Ctx) {
        let Some(lf) = &self.lineage else { return };
        let previous = lf.load();
        if let Some(lin) = &previous {
            for (name, sid) in &lin.steps {
                if session_alive(rt, sid) {
                    ctx.sessions
                        .entry(name.clone())
                        .or_insert_with(|| sid.clone());
                }
            }
        }
        ctx.woke = match lf.wake() {
            Ok(n) => n,
            Err(e) => {
                rt.not_saved(crate::record::layout::LINEAGE, &e);
                previous.map_or(1, |l| l.woke + 1)
            }
        };
    }

    /// Runs one step to acceptance or failure; `Err(failure)` when it failed. Writes the outputs,
    /// results, sessions and lineage. A step that fails because its gate rejected the last
    /// attempt (the model itself finished) says so on screen at once and its manifest row
    /// becomes `ok: false` with that reason: the books never call a rejected step done.
    /// `last`: no step comes after this one.
    async fn run_step(
        &self,
        rt: &Arc<Runtime>,
        ctx: &mut Ctx,
        step: &Step,
        last: bool,
    ) -> Result<Result<(), StepFailure>, FlowError> {
        let (first_resume, continuing) = self.first_session(ctx, step)?;
        let first_fork = step.fork && step.resume_from.is_some();
        let mut prompt = step.render(ctx, continuing);
        let (mut resume, mut fork) = (first_resume.clone(), first_fork);
        let mut label = step.name.clone();
        let mut attempt: u32 = 0;
        loop {
            let result = self
                .attempt(
                    rt,
                    step,
                    &prompt,
                    RunOptions {
                        step: Some(label.clone()),
                        resume: resume.clone(),
                        fork,
                        on_session: None,
                    },
                )
                .await;
            ctx.results.insert(step.name.clone(), result.clone());
            if let Some(sid) = &result.session_id {
                ctx.sessions.insert(step.name.clone(), sid.clone());
                self.remember(rt, &step.name, sid);
            }
            let (passed, aborted) = judge(rt, ctx, step, &result, attempt).await;
            // The attempt and its judge are done: their containers can go. When that ends the
            // run and the process exits next, they go with the run's own at its end (killed
            // at once there, removed by its detached cleanup), not one by one before it.
            let step_ends = passed || aborted || attempt >= step.retries;
            let run_ends = step_ends && (last || (!passed && step.on_fail == OnFail::Stop));
            if !(run_ends && rt.config().exits_after) {
                rt.release_agents().await;
            }
            if passed {
                let out = match &step.reduce {
                    Some(f) => f(&result, ctx),
                    None => result.text.clone(),
                };
                ctx.outputs.insert(step.name.clone(), out);
                return Ok(Ok(()));
            }
            if aborted || attempt >= step.retries {
                if step.on_fail == OnFail::Continue {
                    ctx.outputs.insert(step.name.clone(), result.text.clone());
                }
                return Ok(Err(failure(rt, ctx, step, &result, aborted, &label)));
            }
            attempt += 1;
            let pushback = match (&step.on_reject, &result.session_id) {
                (Some(f), Some(sid)) => {
                    let text = f(&result, ctx);
                    (!text.trim().is_empty()).then(|| (text, sid.clone()))
                }
                _ => None,
            };
            match pushback {
                Some((text, sid)) => {
                    // Sent back: keep working in the session that was just rejected.
                    prompt = text;
                    resume = Some(sid);
                    fork = false;
                    label = round_name(&step.name, attempt + 1);
                }
                None => {
                    prompt = step.render(ctx, continuing);
                    resume = first_resume.clone();
                    fork = first_fork;
                    label = retry_name(&step.name, attempt);
                }
            }
        }
    }

    /// The session a step's first attempt resumes, and whether it continues the step's own
    /// (a continuous workflow); `FlowError::NoSession` when the step it resumes has none.
    fn first_session(&self, ctx: &Ctx, step: &Step) -> Result<(Option<String>, bool), FlowError> {
        Ok(match &step.resume_from {
            Some(from) => match ctx.sessions.get(from) {
                Some(sid) => (Some(sid.clone()), false),
                None => {
                    return Err(FlowError::NoSession {
                        step: step.name.clone(),
                        from: from.clone(),
                    })
                }
            },
            None if self.lineage.is_some() => match ctx.sessions.get(&step.name) {
                Some(sid) => (Some(sid.clone()), true),
                None => (None, false),
            },
            None => (None, false),
        })
    }

    /// One `Runtime::run`, writing the session to lineage as soon as it exists (and whenever a
    /// handoff replaces it), so a process killed mid-step resumes that session.
    async fn attempt(
        &self,
        rt: &Arc<Runtime>,
        step: &Step,
        prompt: &str,
        mut opts: RunOptions,
    ) -> StepResult {
        if let Some(lf) = self.lineage.clone() {
            let name = step.name.clone();
            let unsaved = rt.unsaved().clone();
            opts.on_session = Some(Arc::new(move |sid: &str| {
                if let Err(e) = lf.remember(&name, sid) {
                    unsaved.report(crate::record::layout::LINEAGE, &e);
                }
            }));
        }
        rt.run(&step.spec, prompt, opts).await
    }

    /// Records `sid` for `step` in lineage; a failure stops the run (issue 26 §3: the next
    /// start could not find this session).
    fn remember(&self, rt: &Runtime, step: &str, sid: &str) {
        if let Some(lf) = &self.lineage {
            if let Err(e) = lf.remember(step, sid) {
                rt.not_saved(crate::record::layout::LINEAGE, &e);
            }
        }
    }
}

/// Whether `sid` is still in the runtime's session store.
pub fn session_alive(rt: &Runtime, sid: &str) -> bool {
    matches!(rt.store().meta(sid), Ok(Some(_)))
}

/// An event sink that re-emits into `rt`'s outlets (the channel's question events reach the
/// same UI as the agents' events). Holds the runtime weakly: the runtime owns the channel.
fn forward_to(rt: &Arc<Runtime>) -> crate::agent::EventSink {
    let weak: Weak<Runtime> = Arc::downgrade(rt);
    Arc::new(move |ev: Event| {
        if let Some(rt) = weak.upgrade() {
            rt.emit(&ev.agent, ev.role, ev.depth, ev.kind);
        }
    })
}

/// Emits an event from the workflow itself (agent `runner`).
pub(crate) fn emit(rt: &Runtime, kind: EventKind) {
    rt.emit("runner", Role::Coordinator, 0, kind);
}

/// Whether an attempt that finished passes the step's gate, and whether the gate stopped the
/// run (`ctx.aborted` then says why; `ctx.rejected` why it did not pass).
async fn judge(
    rt: &Arc<Runtime>,
    ctx: &mut Ctx,
    step: &Step,
    result: &StepResult,
    attempt: u32,
) -> (bool, bool) {
    ctx.rejected = None;
    let (true, Some(gate)) = (result.ok, &step.gate) else {
        return (result.ok, false);
    };
    let mut cx = GateCx {
        runtime: rt,
        ctx: &mut *ctx,
        step: &step.name,
        attempt,
    };
    match gate.check(result, &mut cx).await {
        Ok(ok) => (ok, false),
        Err(abort) => {
            ctx.aborted = Some(abort.0);
            (false, true)
        }
    }
}

/// Why a step failed for good after its last attempt (`label`). A failure the attempt's own
/// step line did not show (a stop, a rejection) is marked in the manifest and said.
fn failure(
    rt: &Arc<Runtime>,
    ctx: &Ctx,
    step: &Step,
    result: &StepResult,
    aborted: bool,
    label: &str,
) -> StepFailure {
    let why = if aborted {
        StepFailure::Aborted(ctx.aborted.clone().unwrap_or_default())
    } else if !result.ok {
        // The attempt's own failure: its step line already showed the error.
        return match &result.error {
            Some(e) => StepFailure::Errored(e.clone()),
            None => StepFailure::Unfinished(step.name.clone()),
        };
    } else {
        match ctx.rejected.clone() {
            Some(reason) => StepFailure::Rejected(reason),
            None => StepFailure::NotAccepted(step.name.clone()),
        }
    };
    let text = why.to_string();
    rt.mark_failed(label, &text);
    emit(rt, EventKind::Error { text });
    why
}
