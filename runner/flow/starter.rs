//! `go` (seed 000 "`go`", api.md `starter_flow()`): the ready-made three-step workflow
//! 确认需求 → 设定目标 → 干活, with an independent judge after every work round.
//!
//! Order of one `go` ([`go`]): (credentials and the start prompt happened in the command line,
//! whose wake check is [`super::wake::brief_complete`]) → the run's services
//! ([`Session::open`]) → `--new` archives the previous run → the read-only wake probe → the
//! wake banner → on a wake, the human's new line lands in three places (appended to the
//! brief; the goal is re-derived; it is what the coordinator is told) → the workflow → the
//! closing line.
//!
//! The work step's agent is the coordinator (`Agent`, `TodoWrite`, `Read`, glance `Bash`, ask,
//! inbox), dispatching `coder` workers through `Agent`.

use std::path::{Path, PathBuf};

use super::brief::Brief;
use super::clarify::{Clarify, CLARIFY_STEP};
use super::ctx::Ctx;
use super::drive::{human_config, Session, SessionSetup};
use super::guard::{GoalGuard, GoalSetting, GOAL_STEP};
use super::step::{Prompt, Step};
use super::wake::{archive_previous, notes_paths, wake_state, LINEAGE_FILE};
use super::workflow::Workflow;
use crate::agent::{roles, AgentSpec};
use crate::cli::error::{CliError, ExitStatus};
use crate::cli::options::{GlobalOptions, GoOptions};
use crate::creds::Credentials;
use crate::record::lock::{FileLock, Held};
use crate::record::LineageFile;
use crate::term::render::{shorten_home, wake_banner, WakeInfo};

/// The work step's name.
pub const WORK_STEP: &str = "干活";

/// The worker's system prompt (flower's `starter_flow(worker_prompt=…)` default).
pub const WORKER_PROMPT: &str = "你负责实现。每改一处就跑一次验证,别攒到最后。";

/// What the coordinator is told when it continues its session and the human said nothing new.
pub const WORK_RESUME: &str =
    "接着上次的工作继续:先看一眼现场和工作台,从停下的地方接着做,不要从头开始。\
需求和目标没有变(都在工作台的 notes/ 里)。";

/// The `go` workflow's settings (flower's `starter_flow` parameters).
#[derive(Debug, Clone)]
pub struct Starter {
    /// The request; on a wake, what the human said (`None` = nothing new).
    pub ask: Option<String>,
    /// This run continues a directory with a complete brief.
    pub waking: bool,
    /// `notes/需求.md`.
    pub brief_path: PathBuf,
    /// `notes/目标.md`.
    pub goal_path: PathBuf,
    /// Only the clarify step.
    pub clarify_only: bool,
    /// Set a goal and judge every round.
    pub goal: bool,
    /// Total work rounds.
    pub rounds: u32,
    /// Judges may run commands.
    pub judge_can_run: bool,
    /// Extra instructions for the clarifier.
    pub instructions: String,
    /// The `coder` worker's system prompt.
    pub worker_prompt: String,
}

impl Starter {
    /// The settings of `go`'s switches for a workbench at `workbench`.
    pub fn from_options(opts: &GoOptions, waking: bool, workbench: &Path) -> Self {
        let (brief_path, goal_path, _) = notes_paths(workbench);
        Starter {
            ask: opts.ask.clone(),
            waking,
            brief_path,
            goal_path,
            clarify_only: opts.clarify_only,
            goal: opts.goal,
            rounds: opts.rounds,
            judge_can_run: opts.judge_can_run,
            instructions: String::new(),
            worker_prompt: WORKER_PROMPT.to_string(),
        }
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
        if !self.clarify_only {
            if self.goal {
                steps.push(
                    GoalSetting {
                        // The human said something new: the judge must not read the old list.
                        always_set: self.said().is_some(),
                        can_run: self.judge_can_run,
                        ..GoalSetting::new(&self.goal_path)
                    }
                    .step(),
                );
            }
            let work = self.work_step();
            steps.push(if self.goal {
                GoalGuard {
                    rounds: self.rounds,
                    can_run: self.judge_can_run,
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
        let fresh = Prompt::from_fn(move |ctx: &Ctx| work_prompt(ctx, &brief_path, &goal_path));
        let said = self.said().map(str::to_string);
        let resume = Prompt::from_fn(move |ctx: &Ctx| match &said {
            None => WORK_RESUME.to_string(),
            Some(s) => {
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
        });
        Step::new(WORK_STEP, self.coordinator(), fresh).resume_prompt(resume)
    }
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

/// Runs `go`. See the module doc for the order; exit statuses as [`Session::execute`].
///
/// Errors: [`CliError::NeedRequest`] when there is no request and nothing to continue; I/O
/// failures archiving or amending; whatever building the run context refuses.
pub async fn go(
    opts: GoOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    let ws = globals.workspace.clone();
    // Nothing to continue and nothing asked (the start prompt normally catches this; `--new`
    // always comes with a request).
    if opts.ask.is_none() && (opts.new || !wake_state(&ws, &globals.run_dir, opts.isolate).waking) {
        return Err(CliError::NeedRequest);
    }
    // One `go` per run directory at a time: two would drive the same sessions at once and
    // interleave their transcripts (held until this function returns; the kernel drops it when
    // the process dies, even by SIGKILL).
    let _one_go = one_go(&globals.run_dir)?;
    let (brief_path, _, log_path) = notes_paths(&opts.workbench);
    let session = Session::open(
        &globals,
        &creds,
        SessionSetup {
            workbench: Some(opts.workbench.clone()),
            trim_large: opts.trim,
            window: opts.window,
            handoff: opts.handoff,
            human: human_config(opts.asks, opts.timeout, log_path, brief_path),
            isolate: opts.isolate,
        },
    )
    .await?;
    let archived = if opts.new {
        archive_previous(&ws, &globals.run_dir, &opts.workbench).map_err(|e| CliError::Io {
            what: "归档上一段失败".into(),
            source: std::io::Error::other(e.to_string()),
        })?
    } else {
        None
    };
    let probe = wake_state(&ws, &globals.run_dir, opts.isolate);
    let mut opts = opts;
    // The same command line again after a crash (up-arrow, Enter) is a wake, not a new request:
    // appending it would re-derive the goal and tell the coordinator what it already knows.
    let original = probe
        .steps
        .get(CLARIFY_STEP)
        .and_then(|sid| first_request(session.runtime(), sid));
    if probe.waking
        && original.is_some()
        && opts.ask.as_deref().map(str::trim) == original.as_deref()
    {
        opts.ask = None;
    }
    let starter = Starter::from_options(&opts, probe.waking, &probe.workbench);
    let render = session.frontend.render_options();
    if let Some(dir) = archived {
        session.frontend.print(&[format!(
            "<- 上一段已归档到 {}",
            shorten_home(&dir, render.home.as_deref())
        )]);
    }
    if probe.waking {
        let work_context = probe
            .steps
            .get(WORK_STEP)
            .and_then(|sid| session.runtime().store().last_context(sid).ok().flatten());
        let info = WakeInfo {
            workspace: ws.clone(),
            checks: (probe.checks > 0).then_some(probe.checks),
            work_context,
            woke: u32::try_from(probe.woke + 1).unwrap_or(u32::MAX),
        };
        session.frontend.print(&[wake_banner(&info, &render)]);
    }
    if let Some(said) = starter.said() {
        amend_brief(&starter.brief_path, said).map_err(|e| CliError::Io {
            what: format!("追加进 {} 失败", starter.brief_path.display()),
            source: e,
        })?;
        session.frontend.print(&[
            "+ 收到 (已追加进确认书;目标会按它重新设定,协调者这一轮直接收到它)".to_string(),
        ]);
    }
    let lineage = LineageFile::new(globals.run_dir.join(LINEAGE_FILE), &ws);
    let wf = starter
        .workflow(lineage)
        .with_channel(session.channel.clone());
    let mut ctx = Ctx::default();
    if let Some(ask) = &opts.ask {
        ctx.vars.insert("ask".into(), ask.clone());
    }
    tracing::info!(waking = probe.waking, steps = ?wf.steps.iter().map(|s| &s.name).collect::<Vec<_>>(), "go");
    session.execute(&wf, &mut ctx).await
}

/// The request the clarify session `sid` started from (its first user message), trimmed.
fn first_request(rt: &crate::agent::Runtime, sid: &str) -> Option<String> {
    let policy = crate::session::TrimPolicy::new(rt.trim_policy().spill_dir, false);
    let history = rt.store().load(sid, &policy).ok()?;
    let first = history.into_iter().next()?;
    let text: String = first
        .content
        .iter()
        .filter_map(|b| match b {
            crate::model::ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    Some(text.trim().to_string())
}

/// The lock that keeps a second `go` out of `run_dir` while this one runs.
///
/// Errors: [`CliError::Failed`] naming the other process when it is held.
pub fn one_go(run_dir: &Path) -> Result<FileLock, CliError> {
    FileLock::try_exclusive(&run_dir.join("go")).map_err(|held| match held {
        Held::Busy(pid) => CliError::Failed(format!(
            "{} 正被另一个 flowerbox(pid {pid})用着:两个一起接着跑会把同一条会话写乱。\
             等它跑完再接着;要并行就用不同的 -r。",
            run_dir.display()
        )),
        Held::Io(e) => CliError::Failed(e.to_string()),
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

    fn starter(ask: Option<&str>, waking: bool) -> Starter {
        Starter {
            ask: ask.map(String::from),
            waking,
            brief_path: "/ws/.flower/notes/需求.md".into(),
            goal_path: "/ws/.flower/notes/目标.md".into(),
            clarify_only: false,
            goal: true,
            rounds: 3,
            judge_can_run: false,
            instructions: String::new(),
            worker_prompt: WORKER_PROMPT.into(),
        }
    }

    fn lineage() -> LineageFile {
        LineageFile::new("/ws/runs/lineage.json", Path::new("/ws"))
    }

    fn names(wf: &Workflow) -> Vec<&str> {
        wf.steps.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn the_three_shapes_of_go() {
        let s = starter(Some("做 X"), false);
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

        let no_goal = Starter {
            goal: false,
            ..s.clone()
        }
        .workflow(lineage());
        assert_eq!(names(&no_goal), [CLARIFY_STEP, WORK_STEP]);
        assert!(no_goal.steps[1].gate.is_none());
        assert_eq!(no_goal.steps[1].retries, 0);

        let only = Starter {
            clarify_only: true,
            ..s
        }
        .workflow(lineage());
        assert_eq!(names(&only), [CLARIFY_STEP]);
    }

    #[test]
    fn what_is_said_on_a_wake_reaches_the_coordinator() {
        let wf = starter(Some("顺便支持 Y"), true).workflow(lineage());
        let mut ctx = Ctx {
            goal: Some(crate::flow::goal::Goal {
                statement: "做 X 和 Y".into(),
                checks: vec!["跑 y 看到 z".into()],
            }),
            ..Ctx::default()
        };
        let told = wf.steps[2].render(&ctx, true);
        assert!(
            told.contains("顺便支持 Y") && told.contains("跑 y 看到 z"),
            "{told}"
        );
        // Nothing said: carry on, no brief resent.
        let quiet = starter(None, true).workflow(lineage());
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
        assert_eq!(starter(Some("做 X"), false).said(), None);
    }
}
