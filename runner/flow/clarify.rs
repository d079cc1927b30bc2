//! [`clarify_step`] (seed 003, api.md `clarify_step()`): a clarifier asks until the request is
//! clear, and its answer is frozen as the four-section brief in `notes/需求.md`.
//!
//! An ordinary [`Step`] with three callbacks: `when` skips it when the brief file is already
//! complete (and still fills the context, or later steps would have no requirement); the gate
//! parses the answer, sends an incomplete one back as a failure (naming the missing sections
//! in [`Ctx::brief_missing`]) and freezes a complete one; `reduce` passes the parsed brief
//! downstream, never the model's raw text (it may have pasted code). It continues a crashed
//! clarification with [`CLARIFY_RESUME`] instead of re-sending the request, and the next step
//! starts a new session that never sees the questions and answers.

use std::path::PathBuf;

use super::brief::Brief;
use super::ctx::Ctx;
use super::step::{OnFail, Prompt, Step, StepAbort};
use crate::agent::{roles, AgentSpec, StepResult};

/// The step's default name (and its key in [`Ctx::outputs`]).
pub const CLARIFY_STEP: &str = "确认需求";

/// Said instead of the request when a new process continues an unfinished clarification.
pub const CLARIFY_RESUME: &str =
    "接着刚才没做完的需求确认 —— 不要从头开始:已经问过、已经答过的问题别再问;\
还不清楚的接着问;问清楚了就按四段输出需求确认书(目标 / 验收标准 / 边界 / 未知与假设)。";

/// Settings of a clarify step; [`Clarify::step`] builds it.
#[derive(Clone)]
pub struct Clarify {
    /// Where the brief is frozen: `<workbench>/notes/需求.md` of the runtime's workbench.
    pub brief_path: PathBuf,
    /// The human's request (one sentence is enough).
    pub prompt: Prompt,
    /// Step name.
    pub name: String,
    /// Extra instructions for the clarifier.
    pub instructions: String,
    /// Ask again even when a complete brief exists.
    pub always_ask: bool,
    /// Let the clarifier read the workspace (Read/Glob/Grep) to save questions.
    pub can_read: bool,
    /// Attempts after the first when the brief comes back incomplete.
    pub retries: u32,
    /// What a failure means.
    pub on_fail: OnFail,
    /// The agent; the clarifier role (ask + read tools only) when `None`.
    pub spec: Option<AgentSpec>,
}

impl Clarify {
    /// flower's defaults: named `确认需求`, can read, no retries, stop on failure.
    pub fn new(brief_path: impl Into<PathBuf>, prompt: impl Into<Prompt>) -> Self {
        Clarify {
            brief_path: brief_path.into(),
            prompt: prompt.into(),
            name: CLARIFY_STEP.to_string(),
            instructions: String::new(),
            always_ask: false,
            can_read: true,
            retries: 0,
            on_fail: OnFail::Stop,
            spec: None,
        }
    }

    /// The step.
    pub fn step(self) -> Step {
        let spec = self
            .spec
            .clone()
            .unwrap_or_else(|| roles::clarifier("clarifier", &self.instructions, self.can_read));
        let name = self.name.clone();
        let (when_path, gate_path) = (self.brief_path.clone(), self.brief_path.clone());
        let always = self.always_ask;
        let when_name = name.clone();
        let gate_name = name.clone();
        Step::new(name, spec, self.prompt)
            .resume_prompt(CLARIFY_RESUME)
            .retries(self.retries)
            .on_fail(self.on_fail)
            .when(move |ctx: &mut Ctx| {
                if always {
                    return true;
                }
                match Brief::load(&when_path) {
                    Ok(Some(b)) if b.is_complete() => {
                        pour(ctx, &when_name, b);
                        false
                    }
                    Ok(Some(b)) => {
                        ctx.run_reason = Some(format!(
                            "{} 里「{}」没填,重新确认需求",
                            when_path.display(),
                            b.missing().join("、")
                        ));
                        true
                    }
                    _ => true,
                }
            })
            .gate(move |r: &StepResult, ctx: &mut Ctx| {
                let mut b = Brief::parse(&r.text);
                if !b.is_complete() {
                    let missing: Vec<String> = b.missing().iter().map(|s| s.to_string()).collect();
                    ctx.rejected = Some(format!("需求确认书不完整,缺:{}", missing.join("、")));
                    ctx.brief_missing = Some(missing);
                    return Ok(false);
                }
                // What the human said during clarification is already in the file: keep it.
                if let Ok(Some(old)) = Brief::load(&gate_path) {
                    for a in old.amendments {
                        if !b.amendments.contains(&a) {
                            b.amendments.push(a);
                        }
                    }
                }
                b.write(&gate_path).map_err(|e| {
                    StepAbort(format!("需求确认书写不进 {}:{e}", gate_path.display()))
                })?;
                pour(ctx, &gate_name, b);
                Ok(true)
            })
            .reduce(|_r: &StepResult, ctx: &Ctx| {
                ctx.brief
                    .as_ref()
                    .map(Brief::prompt_block)
                    .unwrap_or_default()
            })
    }
}

/// `Clarify::new(brief_path, prompt).step()`.
#[cfg(test)]
pub(crate) fn clarify_step(brief_path: impl Into<PathBuf>, prompt: impl Into<Prompt>) -> Step {
    Clarify::new(brief_path, prompt).step()
}

/// Puts a complete brief into the context: the object, its prompt block under the step name,
/// and no missing sections.
fn pour(ctx: &mut Ctx, name: &str, b: Brief) {
    ctx.outputs.insert(name.to_string(), b.prompt_block());
    ctx.brief = Some(b);
    ctx.brief_missing = None;
}
