//! The goal guard (seed 002, api.md `goal_step()`, `with_goal()`): [`goal_step`] turns the
//! brief into a frozen, decidable goal (`notes/目标.md`), and [`with_goal`] wraps a work step
//! in a judging loop — after every round an independent judge in a NEW session
//! (`<step>·判定#N`) sees only the goal and the scene and returns a [`Verdict`].
//!
//! - ACHIEVED → the step passes, but only if the workspace's content identity did not change
//!   while the judge looked ([`crate::sandbox::SandboxFiles::identity`], DESIGN.md invariant 8); a change voids it
//!   into NOT_YET with the changed files named.
//! - NOT_YET (and anything ambiguous) → the work step resumes its own session
//!   (`<step>#round<N>`) told [`Verdict::feedback`]: what is missing, never how.
//! - UNREACHABLE → the human is asked: accept / amend the goal (appended, visible) / "you
//!   judged wrong, continue". No answer → [`StepAbort`]: spinning on is the most expensive
//!   choice. The goal file and the manifest stay for the human.
//!
//! `rounds` is the total number of work rounds (`max(0, rounds − 1)` retries).

use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checks::Check;
use super::ctx::Ctx;
use super::gates::{run_checks, GateReport};
use super::goal::Goal;
use super::probe::{run_probe, Outcome, ProbeReport};
use super::step::{Gate, GateCx, OnFail, Prompt, Step, StepAbort};
use super::verdict::{Verdict, VerdictState};
use super::workflow::emit;
use crate::agent::human::{AskOutcome, Asker};
use crate::agent::{roles, AgentSpec, EventKind, RunOptions, Runtime, StepResult};
use crate::record::steps::judge_name;
use crate::sandbox::files::{Exclusions, WorkspaceIdentity};

/// The goal-setting step's default name.
pub const GOAL_STEP: &str = "设定目标";

/// The three answers offered when the judge says UNREACHABLE (seed 002).
pub const UNREACHABLE_OPTIONS: [&str; 3] =
    ["接受这个结果,就这样往下走", "修改目标", "你判断错了,继续做"];

/// Settings of the goal-setting step; [`GoalSetting::step`] builds it.
#[derive(Clone)]
pub struct GoalSetting {
    /// Where the goal is frozen (`<workbench>/notes/目标.md`).
    pub goal_path: PathBuf,
    /// The step whose output is the brief (`确认需求`); [`Ctx::brief`] is the fallback.
    pub brief_key: String,
    /// Step name.
    pub name: String,
    /// Extra instructions for the judge.
    pub instructions: String,
    /// Re-derive even when a complete goal file exists (on a wake where the human said
    /// something new).
    pub always_set: bool,
    /// Let the goal-setting judge run commands to see the environment.
    pub can_run: bool,
    /// Attempts after the first when the goal comes back incomplete.
    pub retries: u32,
    /// What a failure means.
    pub on_fail: OnFail,
    /// The agent; the judge role when `None`.
    pub spec: Option<AgentSpec>,
}

impl GoalSetting {
    /// Defaults: named `设定目标`, reads `确认需求`, skipped when the file is complete.
    pub fn new(goal_path: impl Into<PathBuf>) -> Self {
        GoalSetting {
            goal_path: goal_path.into(),
            brief_key: super::clarify::CLARIFY_STEP.to_string(),
            name: GOAL_STEP.to_string(),
            instructions: String::new(),
            always_set: false,
            can_run: false,
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
            .unwrap_or_else(|| roles::judge("judge", &self.instructions, self.can_run));
        let key = self.brief_key.clone();
        let prompt = Prompt::from_fn(move |ctx: &Ctx| {
            let brief = ctx
                .output(&key)
                .map(str::to_string)
                .or_else(|| ctx.brief.as_ref().map(|b| b.prompt_block()))
                .unwrap_or_else(|| "(没有确认书)".to_string());
            set_goal_prompt(&brief)
        });
        let (when_path, always, when_name) =
            (self.goal_path.clone(), self.always_set, self.name.clone());
        Step::new(self.name.clone(), spec, prompt)
            .retries(self.retries)
            .on_fail(self.on_fail)
            .when(move |ctx: &mut Ctx| {
                if always {
                    return true;
                }
                match Goal::load(&when_path) {
                    Ok(Some(g)) if g.is_complete() => {
                        pour(ctx, &when_name, g);
                        false
                    }
                    _ => true,
                }
            })
            .gate(SetGoalGate {
                goal_path: self.goal_path,
            })
            .reduce(|_r: &StepResult, ctx: &Ctx| {
                ctx.goal.as_ref().map(Goal::to_markdown).unwrap_or_default()
            })
    }
}

/// `GoalSetting::new(goal_path).step()`.
#[cfg(test)]
pub(crate) fn goal_step(goal_path: impl Into<PathBuf>) -> Step {
    GoalSetting::new(goal_path).step()
}

/// The goal-setting prompt: the brief, and what to write.
pub fn set_goal_prompt(brief: &str) -> String {
    format!(
        "设定目标:把下面这份需求确认书变成可判定的目标。\n\n{brief}\n\n\
         先看清楚你在什么环境里。输出恰好两段:## 目标(一两句话)和 ## 判定清单(每条写成\"跑什么、看到什么\",\
         三到五条通常就够;边界不是判定项;这个环境里验不了的条目在末尾标 [此环境无法验证:原因])。\
         一条命令的退出码就能判定的条目,在条目末尾写 检查: `命令`(在工作区根目录跑,只读;\
         期望的退出码不是 0 就接着写 (退出码 N)),每轮判定前 flowerbox 会自己跑它,红了就不能判达成;\
         只能靠看、靠读才能判的条目不写检查。"
    )
}

/// Puts a complete goal into the context.
fn pour(ctx: &mut Ctx, name: &str, g: Goal) {
    ctx.outputs.insert(name.to_string(), g.to_markdown());
    ctx.goal = Some(g);
}

/// Parses and freezes the goal; warns at once about unverifiable checks.
struct SetGoalGate {
    goal_path: PathBuf,
}

#[async_trait]
impl Gate for SetGoalGate {
    async fn check(&self, result: &StepResult, cx: &mut GateCx<'_>) -> Result<bool, StepAbort> {
        let g = Goal::parse(&result.text);
        if !g.is_complete() {
            let why = format!("目标缺:{},这一步不放行", g.missing().join("、"));
            emit(cx.runtime, EventKind::Warning { text: why.clone() });
            cx.ctx.rejected = Some(why);
            return Ok(false);
        }
        g.write(&self.goal_path)
            .map_err(|e| StepAbort(format!("目标写不进 {}:{e}", self.goal_path.display())))?;
        let items: Vec<String> = g.unverifiable().into_iter().map(String::from).collect();
        if !items.is_empty() {
            emit(
                cx.runtime,
                EventKind::GoalUnverifiable {
                    total: g.checks.len(),
                    items,
                    path: shown_path(&self.goal_path, &cx.runtime.config().workspace),
                },
            );
        }
        pour(cx.ctx, cx.step, g);
        Ok(true)
    }
}

/// A path as the human should see it: relative to the workspace when inside it
/// (`.flower/notes/目标.md`), absolute otherwise.
pub fn shown_path(path: &Path, workspace: &Path) -> String {
    path.strip_prefix(workspace)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// Settings of the judging loop; [`GoalGuard::wrap`] applies it to a step.
#[derive(Clone)]
pub struct GoalGuard {
    /// The goal file, read when [`Ctx::goal`] is not complete.
    pub goal_path: PathBuf,
    /// Total work rounds (at least 1).
    pub rounds: u32,
    /// The judge may run commands (Bash in its read-only container).
    pub can_run: bool,
    /// Extra instructions for the judge.
    pub instructions: String,
    /// The judge's step-name stem; `<step>·判定` when `None` (rows `<stem>#N`).
    pub name: Option<String>,
    /// The judge; the judge role when `None`.
    pub spec: Option<AgentSpec>,
    /// Checks run before every judge round besides the goal's own (`--check`, a workflow
    /// file's `checks`).
    pub checks: Vec<Check>,
    /// After a round whose checks are all green, probe them with a planted defect
    /// (`--probe-checks`, [`super::probe`]).
    pub probe: bool,
}

impl GoalGuard {
    /// Three rounds, a judge that only reads.
    pub fn new(goal_path: impl Into<PathBuf>) -> Self {
        GoalGuard {
            goal_path: goal_path.into(),
            rounds: 3,
            can_run: false,
            instructions: String::new(),
            name: None,
            spec: None,
            checks: Vec::new(),
            probe: false,
        }
    }

    /// Wraps `step`: its gate becomes the judge, rejected rounds resume its session with the
    /// verdict's feedback, and it gets `rounds − 1` retries. Everything else of `step` (its
    /// prompts, `when`, `reduce`, `on_fail`) is kept.
    pub fn wrap(self, step: Step) -> Step {
        let spec = self
            .spec
            .clone()
            .unwrap_or_else(|| roles::judge("judge", &self.instructions, self.can_run));
        let mut step = step;
        step.retries = self.rounds.max(1) - 1;
        step.gate = Some(Arc::new(JudgeGate {
            goal_path: self.goal_path,
            spec,
            name: self.name,
            can_run: self.can_run,
            checks: self.checks,
            probe: self.probe,
            since: std::time::SystemTime::now(),
        }));
        step.on_reject = Some(Arc::new(|_r: &StepResult, ctx: &Ctx| {
            let mut told = ctx
                .verdict
                .as_ref()
                .map(Verdict::feedback)
                .unwrap_or_default();
            // The red checks' output: what the coordinator fixes next.
            if let Some(red) = &ctx.check_feedback {
                told.push_str(red);
            }
            told
        }));
        step
    }
}

/// Wraps `step` in the goal guard with `rounds` total rounds; `can_run` lets the judge run
/// commands. See [`GoalGuard`] for the other settings.
#[cfg(test)]
pub(crate) fn with_goal(
    step: Step,
    goal_path: impl Into<PathBuf>,
    rounds: u32,
    can_run: bool,
) -> Step {
    GoalGuard {
        rounds,
        can_run,
        ..GoalGuard::new(goal_path)
    }
    .wrap(step)
}

/// The judge's prompt: the goal and where the scene is, nothing about the work's history;
/// with checks, their results after it ([`GateReport::judge_block`]).
pub fn verify_prompt(goal: &Goal, workspace: &Path, can_run: bool) -> String {
    let how = if can_run {
        "你能跑只读的命令(file、ls、ps、lsof、curl、跑测试)去看产出物;别改任何东西。"
    } else {
        "你只能读文件(Read/Glob/Grep)。"
    };
    format!(
        "判定这一轮:做完了没有。你没参与干活,只看目标和现场。\n\n{}\n\n\
         现场在 {}。{how}自己去看,逐条对判定清单;看不到证据的判定项就是没通过。\n\
         输出恰好三段:## 结论(ACHIEVED、NOT_YET 或 UNREACHABLE)/ ## 理由 / ## 未通过。",
        goal.prompt_block(),
        workspace.display()
    )
}

/// The gate `with_goal` installs: one independent judge per finished round.
struct JudgeGate {
    goal_path: PathBuf,
    spec: AgentSpec,
    name: Option<String>,
    can_run: bool,
    checks: Vec<Check>,
    probe: bool,
    /// When the loop was built (the run's start): files modified since are this run's.
    since: std::time::SystemTime,
}

#[async_trait]
impl Gate for JudgeGate {
    async fn check(&self, _result: &StepResult, cx: &mut GateCx<'_>) -> Result<bool, StepAbort> {
        cx.ctx.goal_rounds += 1;
        let round = cx.ctx.goal_rounds;
        let goal = match &cx.ctx.goal {
            Some(g) if g.is_complete() => g.clone(),
            _ => match Goal::load(&self.goal_path) {
                Ok(Some(g)) if g.is_complete() => g,
                _ => Goal::default(),
            },
        };
        let rt = cx.runtime;
        let label = match &self.name {
            Some(stem) => format!("{stem}#{round}"),
            None => judge_name(cx.step, round),
        };
        // The gates first: flowerbox runs every check itself, on this round's candidate.
        let mut checks = goal.gate_checks();
        checks.extend(self.checks.iter().cloned());
        let gates = gate_round(rt, &checks, round).await;
        // Green checks may still be worthless: probe them with a planted defect.
        let probe = match &gates {
            Some(g) if self.probe && g.green() => {
                Some(probe_round(rt, &checks, round, self.since, g, &label).await)
            }
            _ => None,
        };
        let mut prompt = verify_prompt(&goal, &rt.config().workspace, self.can_run);
        if let Some(g) = &gates {
            prompt.push_str("\n\n");
            prompt.push_str(&g.judge_block());
        }
        let missed = probe.as_ref().and_then(ProbeReport::missed_block);
        if let Some(m) = &missed {
            prompt.push_str(m);
        }
        let before = scene(rt).await;
        // Always a new session: the judge never inherits anyone's context.
        let judged = rt
            .run(
                &self.spec,
                &prompt,
                RunOptions {
                    step: Some(label.clone()),
                    resume: None,
                    fork: false,
                    on_session: None,
                },
            )
            .await;
        let after = scene(rt).await;
        let (v, overruled) = binding_verdict(rt, &judged, gates.as_ref(), &before, &after, &label);
        record_verdict(
            rt,
            &label,
            &v,
            judged.session_id.as_deref(),
            gates.as_ref(),
            overruled.as_deref(),
            probe.as_ref(),
        );
        if let Some(g) = &gates {
            record_checks(rt, &label, g, overruled, probe.as_ref());
        }
        cx.ctx.check_feedback = gates.as_ref().and_then(GateReport::feedback_block);
        if let Some(m) = missed {
            cx.ctx.check_feedback = Some(cx.ctx.check_feedback.take().unwrap_or_default() + &m);
        }
        cx.ctx.verdict = Some(v.clone());
        cx.ctx.verdicts.insert(cx.step.to_string(), v.clone());
        cx.ctx.rejected = Some(format!(
            "{label} 判定{}:{}",
            v.state.label(),
            one_line(&v.reason)
        ));
        match v.state {
            VerdictState::Achieved => Ok(true),
            VerdictState::NotYet => Ok(false),
            VerdictState::Unreachable => self.ask_human(cx, v, goal).await,
        }
    }
}

impl JudgeGate {
    /// UNREACHABLE: the human decides; nobody there → stop.
    async fn ask_human(
        &self,
        cx: &mut GateCx<'_>,
        v: Verdict,
        mut goal: Goal,
    ) -> Result<bool, StepAbort> {
        let human = cx.runtime.human.clone();
        let reason = one_line(&v.reason);
        let options: Vec<String> = UNREACHABLE_OPTIONS.iter().map(|s| s.to_string()).collect();
        let question = format!("目标被判为**无法达成**:{reason}\n怎么办?");
        let judge = Asker::new("judge", crate::role::Role::Judge);
        match human.ask(judge, &question, &options).await {
            AskOutcome::Answered(a) if a == UNREACHABLE_OPTIONS[0] => Ok(true),
            AskOutcome::Answered(a) if a == UNREACHABLE_OPTIONS[1] => {
                let outcome = human
                    .ask(judge, "新目标是什么?(追加在原目标后面,看得见改了什么)", &[])
                    .await;
                if let AskOutcome::Answered(extra) = outcome {
                    goal.amend(&extra);
                    if let Err(e) = goal.write(&self.goal_path) {
                        return Err(StepAbort(format!(
                            "改过的目标写不进 {}:{e}",
                            self.goal_path.display()
                        )));
                    }
                    cx.ctx.goal = Some(goal);
                    cx.ctx.verdict = Some(not_yet(format!("人修改了目标:{extra}"), v));
                }
                Ok(false)
            }
            AskOutcome::Answered(said) => {
                cx.ctx.verdict = Some(not_yet(format!("人认为判定有误:{said}"), v));
                Ok(false)
            }
            _ => Err(StepAbort(format!("目标被判为无法达成,没人应答:{reason}"))),
        }
    }
}

/// This round's gate checks, run by flowerbox on the candidate and shown; `None` without any.
async fn gate_round(rt: &Arc<Runtime>, checks: &[Check], round: u32) -> Option<GateReport> {
    if checks.is_empty() {
        return None;
    }
    let report = run_checks(rt, checks, round).await;
    emit(
        rt,
        EventKind::Checks {
            passed: report.passed(),
            total: report.total(),
            line: report.screen_line(),
        },
    );
    Some(report)
}

/// Green checks probed with a planted defect (in a copy), and what that showed.
async fn probe_round(
    rt: &Arc<Runtime>,
    checks: &[Check],
    round: u32,
    since: std::time::SystemTime,
    gates: &GateReport,
    label: &str,
) -> ProbeReport {
    let p = run_probe(rt, checks, round, since, gates.identity.as_ref()).await;
    emit(
        rt,
        match p.outcome {
            Outcome::Caught(_) => EventKind::Checks {
                passed: 1,
                total: 1,
                line: p.screen_line(),
            },
            _ => EventKind::Warning {
                text: format!("{label}:{}", p.screen_line()),
            },
        },
    );
    p
}

/// The verdict that stands: the judge's, NOT_YET when the judge did not finish, and an
/// ACHIEVED voided by a red check (the judge's own answer is returned for audit) or by a scene
/// that changed under the judge (said at once, right after the verdict it voids: the next
/// round must not start unexplained).
fn binding_verdict(
    rt: &Arc<Runtime>,
    judged: &StepResult,
    gates: Option<&GateReport>,
    before: &Option<WorkspaceIdentity>,
    after: &Option<WorkspaceIdentity>,
    label: &str,
) -> (Verdict, Option<String>) {
    let mut v = Verdict::parse(&judged.text);
    if !judged.ok {
        v = not_yet(
            format!(
                "判定者没跑完({}),按未达成处理",
                judged
                    .error
                    .as_ref()
                    .map_or_else(|| "原因不明".to_string(), ToString::to_string)
            ),
            v,
        );
    }
    let warn = |why: &str| {
        emit(
            rt,
            EventKind::Warning {
                text: format!("{label}:{why}"),
            },
        )
    };
    let mut overruled = None;
    if v.achieved() {
        if let Some(why) = gates.and_then(|g| gate_blocks(g, before)) {
            warn(&why);
            overruled = Some(v.state.as_str().to_string());
            v = not_yet(why, v);
        }
    }
    if v.achieved() {
        if let Some(why) = binding_broken(before, after) {
            warn(&why);
            v = not_yet(why, v);
        }
    }
    (v, overruled)
}

/// Why the gates forbid an ACHIEVED: a red check, or a candidate the judge looked at that is
/// not the one the checks ran on.
fn gate_blocks(g: &GateReport, judged: &Option<WorkspaceIdentity>) -> Option<String> {
    if let Some(why) = g.blocking_reason() {
        return Some(why);
    }
    match (&g.identity, judged) {
        (Some(a), Some(b)) if a == b => None,
        _ => Some(
            "检查跑完到判定开始之间现场变了(或读不全):检查的结果不是这个现场的,按未达成处理"
                .to_string(),
        ),
    }
}

/// The round's checks on the judge's manifest row (passed/total, the candidate's identity,
/// the judge's overruled answer).
fn record_checks(
    rt: &Arc<Runtime>,
    label: &str,
    g: &GateReport,
    overruled: Option<String>,
    probe: Option<&ProbeReport>,
) {
    let Some(m) = rt.manifest() else { return };
    let row = crate::record::manifest::RoundChecks {
        passed: g.passed(),
        total: g.total(),
        identity: g.digest(),
        failed: g.red().iter().map(|r| r.check.id()).collect(),
        overruled,
        probe: probe.map(|p| crate::record::manifest::RoundProbe {
            outcome: p.kind().to_string(),
            site: p.site.as_ref().map(|s| s.place()),
            mutation: p.site.as_ref().map(|s| s.describe()),
            caught_by: match &p.outcome {
                Outcome::Caught(ids) => ids.clone(),
                _ => Vec::new(),
            },
            millis: u64::try_from(p.duration.as_millis()).unwrap_or(u64::MAX),
        }),
    };
    if let Err(e) = m.amend(label, |r| r.checks = Some(row)) {
        emit(
            rt,
            EventKind::Error {
                text: format!("manifest.json 写入失败:{e}"),
            },
        );
    }
}

/// Appends the verdict, the round's checks and the judge's real commands and outputs to
/// `notes/判定记录.md`. A failure is logged, never fatal: the record is for people, the verdict
/// already stands.
fn record_verdict(
    rt: &Arc<Runtime>,
    label: &str,
    v: &Verdict,
    session: Option<&str>,
    gates: Option<&GateReport>,
    overruled: Option<&str>,
    probe: Option<&ProbeReport>,
) {
    let Some(wb) = rt.workbench() else { return };
    let messages = session
        .and_then(|s| rt.store().load_raw(s).ok())
        .unwrap_or_default();
    let when = chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string();
    let mut block =
        super::evidence::record_block(label, v, &super::evidence::evidence_of(&messages), &when);
    if let Some(g) = gates {
        let mut extra = String::new();
        if let Some(said) = overruled {
            extra.push_str(&format!("判定者原本的结论:{said}(检查红着,不算数)\n\n"));
        }
        extra.push_str(&g.record_block());
        if let Some(p) = probe {
            extra.push_str(&p.record_block());
        }
        // After the heading line, before the judge's evidence.
        block = match block.split_once("\n\n") {
            Some((head, rest)) => format!("{head}\n\n{extra}{rest}"),
            None => format!("{block}{extra}"),
        };
    }
    if let Err(e) = super::evidence::append_record(&wb.notes(), &block) {
        tracing::warn!(error = %e, "verdict record not written");
    }
}

/// The workspace's identity, or `None` when it could not be read (then no verdict can be
/// bound to it).
pub(super) async fn scene(rt: &Arc<Runtime>) -> Option<WorkspaceIdentity> {
    let (ws, exclude) = scene_scope(rt);
    rt.sandboxes().settled().await;
    match rt.sandboxes().files().identity(&ws, &exclude).await {
        Ok(id) => Some(id),
        Err(e) => {
            tracing::warn!(error = %e, "workspace identity failed");
            None
        }
    }
}

/// The workspace and what its identity leaves out: the workbench, the run directory and the
/// runner's own output files.
pub(super) fn scene_scope(rt: &Arc<Runtime>) -> (PathBuf, Exclusions) {
    let ws = rt.config().workspace.clone();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(wb) = rt.workbench() {
        dirs.push(wb.root().to_path_buf());
    }
    if let Some(dir) = rt
        .manifest()
        .and_then(|m| m.path().parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    // The runner's own stdout/stderr files (`> run.log`, `| tee run.log`) grow while the
    // judge looks; they are the runner's record, not the project.
    let exclude = Exclusions {
        dirs,
        files: super::outputs::own_output_files(),
    };
    (ws, exclude)
}

/// Why an ACHIEVED verdict cannot stand, if it cannot.
fn binding_broken(
    before: &Option<WorkspaceIdentity>,
    after: &Option<WorkspaceIdentity>,
) -> Option<String> {
    match (before, after) {
        (Some(b), Some(a)) if b == a => None,
        (Some(b), Some(a)) => {
            let changed = b.changed(a);
            let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
            let more = if changed.len() > 5 {
                format!(" 等 {} 个", changed.len())
            } else {
                String::new()
            };
            Some(format!(
                "判定期间工作区变了({}{more}):这次「达成」判的不是现在的现场,作废,按未达成处理",
                shown.join("、")
            ))
        }
        _ => Some("读不全工作区,判定没法和现场绑定:这次「达成」作废,按未达成处理".to_string()),
    }
}

/// `v` turned into NOT_YET with `why` before its reason.
fn not_yet(why: String, mut v: Verdict) -> Verdict {
    v.state = VerdictState::NotYet;
    v.explicit = true;
    v.reason = if v.reason.trim().is_empty() {
        why
    } else {
        format!("{why}\n{}", v.reason.trim())
    };
    v
}

/// Text flattened to one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
