//! `go` (seed 000 "`go`", api.md `starter_flow()`): the ready-made three-step workflow
//! 确认需求 → 设定目标 → 干活, with an independent judge after every work round.
//!
//! Order of one `go` ([`go`]): (credentials, the wake probe [`super::wake::wake_state`] and the
//! start prompt happened in the command line, which hands the probe's answer over: whether this
//! directory is woken is decided once) → the run's services ([`Session::open`]) → `--new`
//! archives the previous run (which makes it a fresh directory) → the wake banner → on a wake,
//! the human's new line lands in three places (appended to the brief; the goal is re-derived;
//! it is what the coordinator is told), unless it is the request the run started from (recorded
//! in lineage) typed again → the workflow → the closing line.
//!
//! The work step's agent is the coordinator (`Agent`, `TodoWrite`, `Read`, glance `Bash`, ask,
//! inbox), dispatching `coder` workers through `Agent`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::brief::Brief;
use super::checks::{Check, CheckSource};
use super::clarify::{Clarify, CLARIFY_STEP};
use super::context::RunSettings;
use super::ctx::Ctx;
use super::drive::{human_config, Session, SessionSetup};
use super::error::{FlowError, RunEnd};
use super::frontend::{Frontend, Notice, WakeInfo};
use super::guard::{GoalGuard, GoalSetting, GOAL_STEP};
use super::step::{Prompt, Step};
use super::wake::{archive_previous, notes_paths, WakeState};
use super::workflow::Workflow;
use crate::agent::{roles, AgentSpec};
use crate::record::lock::{FileLock, Held};
use crate::record::LineageFile;

/// The work step's name.
pub const WORK_STEP: &str = "干活";

/// The worker's system prompt (flower's `starter_flow(worker_prompt=…)` default).
pub const WORKER_PROMPT: &str = "你负责实现。每改一处就跑一次验证,别攒到最后。";

/// What the coordinator is told when it continues its session and the human said nothing new.
pub const WORK_RESUME: &str =
    "接着上次的工作继续:先看一眼现场和工作台,从停下的地方接着做,不要从头开始。\
需求和目标没有变(都在工作台的 notes/ 里)。";

/// What one `go` is asked to do (its switches, resolved by the command line).
#[derive(Debug, Clone, PartialEq)]
pub struct GoSettings {
    /// The request; `None` = continue a woken directory.
    pub ask: Option<String>,
    /// Question budget: `None` = unlimited, `Some(0)` = no questions.
    pub asks: Option<u64>,
    /// Total work rounds, at least 1.
    pub rounds: u32,
    /// Set a goal and judge every round.
    pub goal: bool,
    /// Judges run commands in a read-only container joined to the worker's pod.
    pub judge_can_run: bool,
    /// How long a question waits: `ZERO` = fully automatic, `Duration::MAX` = forever.
    pub timeout: Duration,
    /// One git worktree per worker.
    pub isolate: bool,
    /// The context window, when given.
    pub window: Option<u64>,
    /// Handoffs to a fresh session near the window.
    pub handoff: bool,
    /// Archive the previous run first.
    pub new: bool,
    /// Only clarify the request.
    pub clarify_only: bool,
    /// `--check`: commands run before every judge round besides the goal's.
    pub checks: Vec<String>,
    /// `--probe-checks`: probe green checks with a planted defect.
    pub probe_checks: bool,
    /// Trim on resume.
    pub trim: bool,
    /// The workbench root.
    pub workbench: PathBuf,
}

impl GoSettings {
    /// True when questions settle as `timeout` at once (`--timeout` ≤ 0).
    pub fn fully_automatic(&self) -> bool {
        self.timeout.is_zero()
    }
}

/// The `go` workflow (flower's `starter_flow` parameters): the switches borrowed from
/// [`GoSettings`], and what this run adds to them.
#[derive(Debug, Clone)]
pub struct Starter<'a> {
    /// `go`'s switches (clarify only, goal, rounds, judges may run, checks, probe).
    pub settings: &'a GoSettings,
    /// The request; on a wake, what the human said (`None` = nothing new).
    pub ask: Option<String>,
    /// This run continues a directory with a complete brief.
    pub waking: bool,
    /// `notes/需求.md`.
    pub brief_path: PathBuf,
    /// `notes/目标.md`.
    pub goal_path: PathBuf,
    /// Extra instructions for the clarifier.
    pub instructions: String,
    /// The `coder` worker's system prompt.
    pub worker_prompt: String,
    /// What workers of a killed run left, handed back to their branches (`--isolate`): told
    /// to the coordinator with the work prompt, so it integrates or redoes it.
    pub handed_back: Vec<String>,
}

impl<'a> Starter<'a> {
    /// `go` with `settings` for a workbench at `workbench`, asked `ask`.
    pub fn new(
        settings: &'a GoSettings,
        ask: Option<String>,
        waking: bool,
        workbench: &Path,
    ) -> Self {
        let (brief_path, goal_path, _) = notes_paths(workbench);
        Starter {
            settings,
            ask,
            waking,
            brief_path,
            goal_path,
            instructions: String::new(),
            worker_prompt: WORKER_PROMPT.to_string(),
            handed_back: Vec::new(),
        }
    }

    /// The user's checks (`--check`), run before every judge round.
    fn checks(&self) -> Vec<Check> {
        let checks = self.settings.checks.iter().enumerate();
        checks
            .map(|(i, c)| Check::new(CheckSource::User(i + 1), c.clone()))
            .collect()
    }

    /// What the human said on a wake (the request of a woken directory).
    pub fn said(&self) -> Option<&str> {
        self.ask.as_deref().filter(|_| self.waking)
    }

    /// The coordinator of the work step.
    pub fn coordinator(&self) -> AgentSpec {
        roles::coordinator(
            "coordinator",
            "",
            vec![roles::worker(
                "coder",
                "写代码与测试。要动手实现的活派给它。",
                &self.worker_prompt,
            )],
        )
    }

    /// The workflow: 确认需求 [→ 设定目标] [→ 干活 (+ 干活·判定#N)], continuous through
    /// `lineage`.
    pub fn workflow(&self, lineage: LineageFile) -> Workflow {
        let mut steps = vec![Clarify {
            instructions: self.instructions.clone(),
            ..Clarify::new(&self.brief_path, self.ask.clone().unwrap_or_default())
        }
        .step()];
        let go = self.settings;
        if !go.clarify_only {
            if go.goal {
                steps.push(
                    GoalSetting {
                        // The human said something new: the judge must not read the old list.
                        always_set: self.said().is_some(),
                        can_run: go.judge_can_run,
                        ..GoalSetting::new(&self.goal_path)
                    }
                    .step(),
                );
            }
            let work = self.work_step();
            steps.push(if go.goal {
                GoalGuard {
                    rounds: go.rounds,
                    can_run: go.judge_can_run,
                    checks: self.checks(),
                    probe: go.probe_checks,
                    ..GoalGuard::new(&self.goal_path)
                }
                .wrap(work)
            } else {
                work
            });
        }
        Workflow::new("starter", steps).continuous(lineage)
    }

    /// 干活: a fresh coordinator gets the brief and the goal; one continuing its session gets
    /// what the human said on this wake, or "carry on".
    fn work_step(&self) -> Step {
        let (brief_path, goal_path) = (self.brief_path.clone(), self.goal_path.clone());
        // Handed-back work of a killed run's workers comes with either prompt.
        let handed = handed_back_block(&self.handed_back);
        let fresh_handed = handed.clone();
        let fresh = Prompt::from_fn(move |ctx: &Ctx| {
            work_prompt(ctx, &brief_path, &goal_path) + &fresh_handed
        });
        let said = self.said().map(str::to_string);
        let resume = Prompt::from_fn(move |ctx: &Ctx| {
            let told = match &said {
                None => WORK_RESUME.to_string(),
                Some(s) => said_prompt(ctx, s),
            };
            told + &handed
        });
        Step::new(WORK_STEP, self.coordinator(), fresh).resume_prompt(resume)
    }
}

/// The handed-back paragraphs as one block after a work prompt (empty without any).
fn handed_back_block(paras: &[String]) -> String {
    if paras.is_empty() {
        return String::new();
    }
    format!(
        "\n\n上次运行被打断时,这些执行者的活没做完,它们留下的改动已提交在各自的分支上(没合入):\n\n{}",
        paras.join("\n\n")
    )
}

/// What the coordinator is told when the human said `s` on a wake.
fn said_prompt(ctx: &Ctx, s: &str) -> String {
    let mut out = format!(
        "人在唤醒时补充了一句(已追加进需求确认书):\n{s}\n\n接着上次的工作,把这句话也做进去。"
    );
    if let Some(g) = &ctx.goal {
        out.push_str(&format!(
            "目标已按它重新设定,之后照这份判定:\n\n{}",
            g.prompt_block()
        ));
    }
    out
}

/// The fresh work prompt: the brief, and the goal when there is one.
fn work_prompt(ctx: &Ctx, brief_path: &Path, goal_path: &Path) -> String {
    let brief = ctx
        .output(CLARIFY_STEP)
        .map(str::to_string)
        .or_else(|| ctx.brief.as_ref().map(Brief::prompt_block))
        .unwrap_or_default();
    let mut out = format!(
        "照这份需求做。需求确认书(冻结在 {}):\n\n{brief}",
        brief_path.display()
    );
    if let Some(g) = &ctx.goal {
        out.push_str(&format!(
            "\n\n目标(冻结在 {};每轮结束会有一个独立判定者照判定清单验收现场):\n\n{}",
            goal_path.display(),
            g.prompt_block()
        ));
    }
    out
}

/// Runs `go`. See the module doc for the order; `wake` is the probe of this directory the
/// command line made (the one decision whether it is woken). Ends as [`Session::execute`].
///
/// Errors: [`FlowError::NeedRequest`] when there is no request and nothing to continue;
/// [`FlowError::Busy`] when another `go` holds the run directory; I/O failures archiving or
/// amending; whatever building the run's services refuses.
pub async fn go(
    settings: &RunSettings,
    opts: &GoSettings,
    wake: WakeState,
    frontend: Arc<dyn Frontend>,
) -> Result<RunEnd, FlowError> {
    let ws = settings.workspace.clone();
    // Nothing to continue and nothing asked (the start prompt normally catches this; `--new`
    // always comes with a request).
    if opts.ask.is_none() && (opts.new || !wake.waking) {
        return Err(FlowError::NeedRequest);
    }
    // One `go` per run directory at a time: two would drive the same sessions at once and
    // interleave their transcripts (held until this function returns; the kernel drops it when
    // the process dies, even by SIGKILL).
    let _one_go = one_go(&settings.run_dir)?;
    if opts.new {
        // Starting over needs no old session: a damaged store goes aside instead of stopping
        // every later start too.
        if let Some(text) = super::recover::set_aside_damaged_store(&settings.run_dir)? {
            frontend.notice(&Notice::Recovered(text));
        }
    }
    let (brief_path, _, log_path) = notes_paths(&opts.workbench);
    let session = Session::open(
        settings,
        SessionSetup {
            workbench: Some(opts.workbench.clone()),
            trim_large: opts.trim,
            window: opts.window,
            handoff: opts.handoff,
            human: human_config(opts.asks, opts.timeout, log_path, brief_path),
            isolate: opts.isolate,
        },
        frontend,
    )
    .await?;
    let archived = if opts.new {
        archive_previous(&ws, &settings.run_dir, &opts.workbench).map_err(|e| FlowError::Io {
            what: "归档上一段失败".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    } else {
        None
    };
    let lineage = LineageFile::new(crate::record::layout::lineage(&settings.run_dir), &ws);
    // The archive moved brief, goal and lineage away: what is left is a fresh directory.
    // Otherwise the lineage is checked against the store: a damaged file is rebuilt (and the
    // probe asked again), sessions the store lacks are named.
    let wake = match archived {
        Some(_) => wake.archived(),
        None => {
            let said = super::recover::check_lineage(
                &lineage,
                session.runtime().store().as_ref(),
                CLARIFY_STEP,
            );
            for text in &said {
                session.frontend.notice(&Notice::Recovered(text.clone()));
            }
            match said.is_empty() {
                true => wake,
                false => super::wake::wake_state(&ws, &settings.run_dir, opts.isolate),
            }
        }
    };
    // The same command line again after a crash (up-arrow, Enter) is a wake, not a new request:
    // appending it would re-derive the goal and tell the coordinator what it already knows.
    let ask = opts.ask.clone().filter(|ask| {
        !(wake.waking && wake.request.is_some() && Some(ask.trim()) == wake.request.as_deref())
    });
    if let (false, Some(ask)) = (wake.waking, &ask) {
        // The request this run starts from, for the next process to recognise.
        if let Err(e) = lineage.update(|l| l.request = Some(ask.trim().to_string())) {
            tracing::warn!(error = %e, "lineage: the request is not recorded");
        }
    }
    let mut starter = Starter::new(opts, ask, wake.waking, &wake.workbench);
    starter.handed_back = session.handed_back.clone();
    if let Some(dir) = archived {
        session.frontend.notice(&Notice::Archived(dir));
    }
    if wake.waking {
        let work_context = wake
            .steps
            .get(WORK_STEP)
            .and_then(|sid| session.runtime().store().last_context(sid).ok().flatten());
        session.frontend.notice(&Notice::Wake(WakeInfo {
            workspace: ws.clone(),
            checks: (wake.checks > 0).then_some(wake.checks),
            work_context,
            woke: u32::try_from(wake.woke + 1).unwrap_or(u32::MAX),
        }));
    }
    match starter.said() {
        // Only the clarify step runs, and it is skipped on a complete brief: appending the
        // request would change the brief behind the human's back and re-derive no goal.
        Some(_) if opts.clarify_only => session.frontend.notice(&Notice::AlreadyClarified),
        Some(said) => {
            amend_brief(&starter.brief_path, said).map_err(|e| FlowError::Io {
                what: format!("追加进 {} 失败", starter.brief_path.display()),
                source: e,
            })?;
            session.frontend.notice(&Notice::Amended);
        }
        None => {}
    }
    let wf = starter
        .workflow(lineage)
        .with_channel(session.channel.clone());
    let mut ctx = Ctx::default();
    if let Some(ask) = &starter.ask {
        ctx.vars.insert("ask".into(), ask.clone());
    }
    tracing::info!(waking = wake.waking, steps = ?wf.steps.iter().map(|s| &s.name).collect::<Vec<_>>(), "go");
    session.execute(&wf, &mut ctx).await
}

/// The lock that keeps a second `go` out of `run_dir` while this one runs.
///
/// Errors: [`FlowError::Busy`] naming the other process when it is held.
pub fn one_go(run_dir: &Path) -> Result<FileLock, FlowError> {
    FileLock::try_exclusive(&run_dir.join("go")).map_err(|held| match held {
        Held::Busy(pid) => FlowError::Busy {
            run_dir: run_dir.to_path_buf(),
            pid,
        },
        Held::Io(e) => FlowError::Lock(e),
    })
}

/// Appends what the human said on a wake to the brief, unless the brief already has it (the
/// same line given again after a crash).
pub fn amend_brief(brief_path: &Path, said: &str) -> std::io::Result<bool> {
    if let Some(b) = Brief::load(brief_path)? {
        if b.amendments.iter().any(|a| a.trim() == said.trim()) {
            return Ok(false);
        }
    }
    Brief::append_amendment(brief_path, said)
}

/// The step names of the full `go` workflow, in order.
pub const STEPS: [&str; 3] = [CLARIFY_STEP, GOAL_STEP, WORK_STEP];

#[cfg(test)]
mod tests {
    use super::*;

    /// `go`'s defaults.
    fn go() -> GoSettings {
        GoSettings {
            ask: None,
            asks: None,
            rounds: 3,
            goal: true,
            judge_can_run: false,
            timeout: Duration::from_secs(1800),
            isolate: false,
            window: None,
            handoff: true,
            new: false,
            clarify_only: false,
            checks: Vec::new(),
            probe_checks: false,
            trim: true,
            workbench: "/ws/.flower".into(),
        }
    }

    fn starter<'a>(go: &'a GoSettings, ask: Option<&str>, waking: bool) -> Starter<'a> {
        Starter::new(go, ask.map(String::from), waking, &go.workbench)
    }

    fn lineage() -> LineageFile {
        LineageFile::new("/ws/runs/lineage.json", Path::new("/ws"))
    }

    fn names(wf: &Workflow) -> Vec<&str> {
        wf.steps.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn the_three_shapes_of_go() {
        let go = go();
        let s = starter(&go, Some("做 X"), false);
        let wf = s.workflow(lineage());
        assert_eq!(names(&wf), STEPS);
        assert!(wf.lineage.is_some(), "go is continuous");
        let work = &wf.steps[2];
        assert_eq!(work.retries, 2);
        assert!(work.gate.is_some() && work.on_reject.is_some());
        assert_eq!(work.spec.name, "coordinator");
        assert_eq!(work.spec.workers[0].kind, "coder");
        assert_eq!(
            wf.steps[0].spec.name, "clarifier",
            "ASCII agent names for headers"
        );

        let no_goal = GoSettings {
            goal: false,
            ..go.clone()
        };
        let no_goal = starter(&no_goal, Some("做 X"), false).workflow(lineage());
        assert_eq!(names(&no_goal), [CLARIFY_STEP, WORK_STEP]);
        assert!(no_goal.steps[1].gate.is_none());
        assert_eq!(no_goal.steps[1].retries, 0);

        let only = GoSettings {
            clarify_only: true,
            ..go.clone()
        };
        let only = starter(&only, Some("做 X"), false).workflow(lineage());
        assert_eq!(names(&only), [CLARIFY_STEP]);
    }

    #[test]
    fn what_is_said_on_a_wake_reaches_the_coordinator() {
        let go = go();
        let wf = starter(&go, Some("顺便支持 Y"), true).workflow(lineage());
        let mut ctx = Ctx {
            goal: Some(crate::flow::goal::Goal {
                statement: "做 X 和 Y".into(),
                checks: vec!["跑 y 看到 z".into()],
                ..Default::default()
            }),
            ..Ctx::default()
        };
        let told = wf.steps[2].render(&ctx, true);
        assert!(
            told.contains("顺便支持 Y") && told.contains("跑 y 看到 z"),
            "{told}"
        );
        // Nothing said: carry on, no brief resent.
        let quiet = starter(&go, None, true).workflow(lineage());
        assert_eq!(quiet.steps[2].render(&ctx, true), WORK_RESUME);
        // A fresh work session gets the brief and the goal.
        ctx.outputs
            .insert(CLARIFY_STEP.into(), "## 目标\n做 X".into());
        let fresh = quiet.steps[2].render(&ctx, false);
        assert!(
            fresh.contains("## 目标\n做 X") && fresh.contains("1. 跑 y 看到 z"),
            "{fresh}"
        );
        // The request of a fresh directory is not "said on a wake".
        assert_eq!(starter(&go, Some("做 X"), false).said(), None);
    }
}
