//! [`Ctx`]: the typed state a workflow passes from step to step (flower's `ctx` dict and its
//! underscore keys, api.md "Workflow"). Step outputs are looked up by step name; everything
//! the engine and the clarify/goal mechanisms put there has its own field.

use std::collections::BTreeMap;

use crate::agent::StepResult;
use crate::flow::brief::Brief;
use crate::flow::goal::Goal;
use crate::flow::verdict::Verdict;

/// The workflow context. Build one with `Ctx::default()` (or [`Ctx::with_var`]), run a
/// [`super::Workflow`] over it, then read it: [`Ctx::failed_at`] says whether it stopped.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    /// What each finished step put downstream, by step name: its `reduce` result, else the
    /// model's final text (`ctx["确认需求"]` is the brief's prompt block). Not written for a
    /// step that failed with `on_fail` stop or skip.
    pub outputs: BTreeMap<String, String>,
    /// Free values a driver or user passes in (`ask`, the request), readable by prompts and
    /// the `{{name}}` templates of workflow files.
    pub vars: BTreeMap<String, String>,
    /// The frozen brief (flower `_brief`), once clarify ran or found a complete `需求.md`.
    pub brief: Option<Brief>,
    /// The brief's missing sections when clarify produced an incomplete one (`_brief_missing`),
    /// Chinese section names for display.
    pub brief_missing: Option<Vec<String>>,
    /// The frozen goal (`_goal`).
    pub goal: Option<Goal>,
    /// The latest verdict (`_verdict`), for the UI.
    pub verdict: Option<Verdict>,
    /// The last verdict of every judged step, by plain step name (`when` conditions of
    /// workflow files read it).
    pub verdicts: BTreeMap<String, Verdict>,
    /// The red checks of the latest judged round and their output, for the next work round
    /// (`None` when they were all green or there were none).
    pub check_feedback: Option<String>,
    /// Judged rounds so far (`_goal_rounds`).
    pub goal_rounds: u32,
    /// The last attempt's result of every step that ran (`_results`), by plain step name.
    pub results: BTreeMap<String, StepResult>,
    /// Session of every step (`_sessions`), by plain step name: this run's, plus the live ones
    /// lineage recorded for steps not run yet (those are what continuity resumes).
    pub sessions: BTreeMap<String, String>,
    /// Why a gate stopped the workflow ([`super::StepAbort`]'s reason, `_aborted`).
    pub aborted: Option<String>,
    /// Why the gate rejected the latest attempt (`需求确认书缺:验收标准`), when it said: shown
    /// and recorded when the rejection ends the step. Cleared before every gate check.
    pub rejected: Option<String>,
    /// Whether each step that ran in this process passed (accepted by its gate), by plain
    /// step name; a step skipped by `when` has no entry.
    pub passed: BTreeMap<String, bool>,
    /// The step that failed with `on_fail` stop (`_failed_at`). `None` after a run = success.
    pub failed_at: Option<String>,
    /// Which wake this run is (`_woke`): 1 on a directory's first run; 0 without continuity.
    pub woke: u64,
    /// Why a step's `when` chose to run it again, said as a warning before it starts (a saved
    /// brief with an unfilled section).
    pub run_reason: Option<String>,
}

impl Ctx {
    /// A context with one variable set (builder style).
    #[cfg(test)]
    pub(crate) fn with_var(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(key.into(), value.into());
        self
    }

    /// The output of step `name`, if it finished and wrote one.
    pub fn output(&self, name: &str) -> Option<&str> {
        self.outputs.get(name).map(String::as_str)
    }

    /// A free variable.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// True when no step stopped the workflow.
    pub fn succeeded(&self) -> bool {
        self.failed_at.is_none()
    }
}
