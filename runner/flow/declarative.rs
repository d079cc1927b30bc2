//! `run FILE:NAME` (seed 000 "`run`"): a workflow declared in TOML. flower imports a Python
//! `Workflow`; flowerbox reads a table of a TOML file (see [`crate::cli::target`] for how
//! `FILE:NAME` is found) and builds the same [`super::Workflow`] a Rust user would.
//!
//! # Schema
//!
//! ```toml
//! [main]                        # the workflow NAME in `flowerbox run FILE:main`
//! ask = "写个 md 转 html 的脚本"   # the request; `{{ask}}` in templates (optional)
//! timeout = 1800                # seconds a question waits; <= 0 = fully automatic (default 1800)
//! asks = -1                     # question budget; negative = unlimited (default), 0 = none
//! continuous = true             # resume each step's session from lineage across processes
//! workbench = true              # carry the workbench <workspace>/.flower (always, when a
//!                               # clarify or goal step exists; otherwise `-W` decides)
//! isolate = true                # one git worktree per worker, as `go --isolate` (the
//!                               # workbench then lives next to the repository)
//! window = 200000               # context window in tokens (default: from the model name)
//! handoff = false               # near the window compact instead of handing off
//!
//! [[main.steps]]
//! kind = "clarify"              # 确认需求: ask until clear, freeze notes/需求.md
//! prompt = "{{ask}}"            # (default) what the clarifier is told
//!
//! [[main.steps]]
//! kind = "goal"                 # 设定目标: freeze notes/目标.md from the brief
//!
//! [[main.steps]]
//! name = "干活"                  # agent steps need a name (the lineage key)
//! role = "coordinator"          # coordinator | worker | judge | clarifier
//! prompt = "照这份需求做:\n{{确认需求}}"
//! goal = { rounds = 3, can_run = false, checks = ["make test"] }   # judge every round
//! ```
//!
//! Every step: `kind` (`agent` by default, `clarify`, `goal`), `name` (defaults `确认需求` /
//! `设定目标` for the two mechanisms), `instructions`, `retries`, `on_fail` (`stop` | `skip` |
//! `continue`), `when` (run only after an earlier step came out a certain way,
//! [`super::condition`]).
//! - `clarify` steps also take `prompt` (default `{{ask}}`), `can_read` (default true),
//!   `always` (ask again even when the brief is complete).
//! - `goal` steps also take `brief` (the step whose output is the brief, default `确认需求`),
//!   `can_run`, `always` (re-derive even when the goal file is complete).
//! - agent steps take `role` (required), `prompt` (required), `resume_prompt` (said when the
//!   step continues its own session in a new process), `tools` (replaces the role's tools;
//!   never more than the role may have), `model`, `max_turns`, `budget` (USD),
//!   `workers = [{ kind, description, prompt }]` (coordinator only; default one `coder`),
//!   `resume_from` (an earlier step's session) with `fork`, and `goal` (`true` or
//!   `{ rounds, can_run, instructions, checks, probe_checks }`; needs a `goal` step before it;
//!   `checks` are commands flowerbox runs before every judge round besides the goal's own,
//!   [`super::gates`]; `probe_checks = true` probes green checks with a planted defect,
//!   [`super::probe`]).
//!
//! Templates: `{{name}}` is an earlier step's output, `{{ask}}` the request, `{{brief}}` and
//! `{{goal}}` the frozen brief and goal. Every problem — unknown key, wrong type, unknown
//! role or tool, a template naming a later step — is an exit-1 message naming the step and
//! the field, before anything runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::checks::{Check, CheckSource};
use super::clarify::{Clarify, CLARIFY_STEP};
use super::condition::Condition;
use super::ctx::Ctx;
use super::guard::{GoalGuard, GoalSetting, GOAL_STEP};
use super::starter::WORKER_PROMPT;
use super::step::{OnFail, Prompt, Step};
use super::template::{fill, placeholders};
use super::wake::notes_paths;
use crate::agent::roles;
use crate::agent::{AgentSpec, Workbench, WorkerDef};

/// A workflow file problem: which step (1-based, with its name when known), which field, what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}{message}")]
pub struct DeclError {
    /// `步骤 3「干活」的 role:` or empty for the workflow's own keys.
    pub place: String,
    /// What is wrong.
    pub message: String,
}

impl DeclError {
    fn top(field: &str, message: impl Into<String>) -> Self {
        DeclError {
            place: format!("{field}:"),
            message: message.into(),
        }
    }
}

/// What is wrong with a template or a tool list (placed into a [`DeclError`] by its field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Problem {
    /// A `{{name}}` names neither `ask`, `brief`, `goal` nor an earlier step.
    #[error("{{{{{key}}}}} 不是前面步骤的名字(可用:ask、brief、goal{})", .known.iter().map(|n| format!("、{n}")).collect::<String>())]
    Placeholder {
        /// The name used.
        key: String,
        /// The earlier steps.
        known: Vec<String>,
    },
    /// An empty tool list.
    #[error("一个工具都没有")]
    NoTools,
    /// A tool the role may not have.
    #[error("这个角色不能有 {tool}(它最多能有:{})", .ceiling.join(","))]
    NotAllowed {
        /// The tool.
        tool: String,
        /// What the role may have.
        ceiling: Vec<&'static str>,
    },
    /// A tool listed twice.
    #[error("{0} 写了两次")]
    Twice(String),
}

/// A loaded workflow file, ready to run.
#[derive(Debug, Clone)]
pub struct Declared {
    /// The steps.
    pub steps: Vec<Step>,
    /// The request (`ask`).
    pub ask: Option<String>,
    /// Seconds a question waits; `<= 0` fully automatic.
    pub timeout_s: f64,
    /// Question budget; `None` unlimited.
    pub max_asks: Option<u32>,
    /// Resume sessions from lineage.
    pub continuous: bool,
    /// The workbench the workflow carries, if any.
    pub workbench: Option<PathBuf>,
    /// `notes/需求.md` of that workbench (the channel appends what the human says there).
    pub brief_path: Option<PathBuf>,
    /// `notes/问答记录.md` of that workbench.
    pub log_path: Option<PathBuf>,
    /// One git worktree per worker (`isolate = true`; the workspace must be a git
    /// repository, and the workbench moves next to it, as `go --isolate`).
    pub isolate: bool,
    /// Context window in tokens (`window`); `None` = from the model name.
    pub window: Option<u64>,
    /// Hand off to a fresh session near the window (`handoff`, default true); `false`
    /// compacts instead.
    pub handoff: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopDecl {
    /// Documentation for the reader of the file; not used.
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    ask: Option<String>,
    #[serde(default)]
    timeout: Option<f64>,
    #[serde(default)]
    asks: Option<i64>,
    #[serde(default)]
    continuous: Option<bool>,
    #[serde(default)]
    workbench: Option<bool>,
    #[serde(default)]
    isolate: Option<bool>,
    #[serde(default)]
    window: Option<i64>,
    #[serde(default)]
    handoff: Option<bool>,
    #[serde(default)]
    steps: Vec<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StepDecl {
    /// Read from the table before deserialising; declared so `deny_unknown_fields` accepts it.
    #[allow(dead_code)]
    kind: Option<String>,
    name: Option<String>,
    role: Option<String>,
    prompt: Option<String>,
    resume_prompt: Option<String>,
    instructions: Option<String>,
    tools: Option<Vec<String>>,
    model: Option<String>,
    max_turns: Option<u32>,
    budget: Option<f64>,
    workers: Option<Vec<WorkerDecl>>,
    resume_from: Option<String>,
    fork: Option<bool>,
    retries: Option<u32>,
    on_fail: Option<String>,
    goal: Option<toml::Value>,
    brief: Option<String>,
    can_run: Option<bool>,
    can_read: Option<bool>,
    always: Option<bool>,
    /// Parsed by [`Condition::parse`]; declared so `deny_unknown_fields` accepts it.
    #[allow(dead_code)]
    when: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerDecl {
    kind: String,
    description: String,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GoalDecl {
    rounds: Option<u32>,
    can_run: Option<bool>,
    instructions: Option<String>,
    checks: Option<Vec<String>>,
    probe_checks: Option<bool>,
}

/// Keys each kind of step accepts (besides the common ones).
const COMMON: &[&str] = &["kind", "name", "instructions", "retries", "on_fail", "when"];
const CLARIFY_KEYS: &[&str] = &["prompt", "can_read", "always"];
const GOAL_KEYS: &[&str] = &["brief", "can_run", "always"];
const AGENT_KEYS: &[&str] = &[
    "role",
    "prompt",
    "resume_prompt",
    "tools",
    "model",
    "max_turns",
    "budget",
    "workers",
    "resume_from",
    "fork",
    "goal",
];

/// The tools each role may be given at most (its guarantees: the clarifier and the judge never
/// write, the coordinator never edits).
fn role_ceiling(role: &str) -> Option<&'static [&'static str]> {
    use crate::model::ToolName as T;
    const COORDINATOR: &[&str] = &[
        T::Agent.as_str(),
        T::TodoWrite.as_str(),
        T::Read.as_str(),
        T::Glob.as_str(),
        T::Grep.as_str(),
        T::Bash.as_str(),
        T::Ask.as_str(),
        T::Inbox.as_str(),
    ];
    const WORKER: &[&str] = &[
        T::Read.as_str(),
        T::Write.as_str(),
        T::Edit.as_str(),
        T::Bash.as_str(),
        T::Glob.as_str(),
        T::Grep.as_str(),
        T::WebFetch.as_str(),
        T::TodoWrite.as_str(),
    ];
    const JUDGE: &[&str] = &[
        T::Read.as_str(),
        T::Glob.as_str(),
        T::Grep.as_str(),
        T::Bash.as_str(),
        T::Ask.as_str(),
    ];
    const CLARIFIER: &[&str] = &[
        T::Read.as_str(),
        T::Glob.as_str(),
        T::Grep.as_str(),
        T::WebFetch.as_str(),
        T::Ask.as_str(),
    ];
    Some(match role {
        "coordinator" => COORDINATOR,
        "worker" => WORKER,
        "judge" => JUDGE,
        "clarifier" => CLARIFIER,
        _ => return None,
    })
}

/// Loads workflow `name` (its table) for `workspace`. `fallback_workbench` is `-W`'s
/// workbench, used when the workflow carries none.
///
/// # Errors
/// [`DeclError`] naming the step and field.
pub fn load(
    table: &toml::Table,
    workspace: &Path,
    fallback_workbench: Option<PathBuf>,
) -> Result<Declared, DeclError> {
    let top: TopDecl = toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| DeclError::top("流程", clean(&e)))?;
    if top.steps.is_empty() {
        return Err(DeclError::top(
            "steps",
            "一个步骤都没有:至少写一个 [[NAME.steps]]",
        ));
    }
    let timeout_s = match top.timeout {
        Some(t) if t.is_nan() => return Err(DeclError::top("timeout", "要是秒数")),
        Some(t) => t.max(0.0),
        None => 1800.0,
    };
    let window = match top.window {
        None => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(n) => {
            return Err(DeclError::top(
                "window",
                format!("要是正的 token 数(写的是 {n})"),
            ))
        }
    };
    let isolate = top.isolate.unwrap_or(false);
    let mechanisms = top.steps.iter().any(|s| {
        matches!(
            s.get("kind").and_then(toml::Value::as_str),
            Some("clarify" | "goal")
        )
    });
    let workbench = if mechanisms || top.workbench == Some(true) || isolate {
        // With worktrees the shared workbench lives outside the repository, as `go --isolate`.
        Some(Workbench::locate(workspace, isolate))
    } else {
        fallback_workbench
    };
    let (brief_path, goal_path, log_path) = match &workbench {
        Some(wb) => {
            let (b, g, l) = notes_paths(wb);
            (Some(b), Some(g), Some(l))
        }
        None => (None, None, None),
    };
    let mut b = Builder {
        names: Vec::new(),
        ask: top.ask.clone(),
        brief_path: brief_path.clone(),
        goal_path,
        has_goal_step: false,
        judged: Vec::new(),
    };
    let mut steps = Vec::new();
    for (i, value) in top.steps.iter().enumerate() {
        steps.push(b.step(i, value)?);
    }
    Ok(Declared {
        steps,
        ask: top.ask,
        timeout_s,
        max_asks: top.asks.and_then(|n| u32::try_from(n).ok()),
        continuous: top.continuous.unwrap_or(true),
        workbench,
        brief_path,
        log_path,
        isolate,
        window,
        handoff: top.handoff.unwrap_or(true),
    })
}

/// Builds steps in order, remembering what earlier steps are called.
struct Builder {
    names: Vec<String>,
    ask: Option<String>,
    brief_path: Option<PathBuf>,
    goal_path: Option<PathBuf>,
    has_goal_step: bool,
    /// Earlier steps with a goal guard (a `when` on a verdict needs one).
    judged: Vec<String>,
}

impl Builder {
    fn step(&mut self, i: usize, value: &toml::Value) -> Result<Step, DeclError> {
        let at = |name: Option<&str>, field: &str, message: String| DeclError {
            place: match name {
                Some(n) => format!("步骤 {}「{n}」的 {field}:", i + 1),
                None => format!("步骤 {} 的 {field}:", i + 1),
            },
            message,
        };
        let Some(table) = value.as_table() else {
            return Err(at(None, "steps", "要写成表([[NAME.steps]])".into()));
        };
        let kind = match table.get("kind") {
            None => "agent",
            Some(v) => v
                .as_str()
                .ok_or_else(|| at(None, "kind", "要是字符串".into()))?,
        };
        let allowed: &[&str] = match kind {
            "clarify" => CLARIFY_KEYS,
            "goal" => GOAL_KEYS,
            "agent" => AGENT_KEYS,
            other => {
                return Err(at(
                    None,
                    "kind",
                    format!("不认识 \"{other}\";可用 agent、clarify、goal"),
                ))
            }
        };
        let shown_name = table.get("name").and_then(toml::Value::as_str);
        for key in table.keys() {
            if !COMMON.contains(&key.as_str()) && !allowed.contains(&key.as_str()) {
                return Err(at(shown_name, key, format!("{kind} 步骤没有这个字段")));
            }
        }
        let d: StepDecl = value
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| at(shown_name, "字段", clean(&e)))?;
        let name = match (kind, &d.name) {
            (_, Some(n)) if n.trim().is_empty() => {
                return Err(at(None, "name", "不能是空的".into()))
            }
            (_, Some(n)) => n.clone(),
            ("clarify", None) => CLARIFY_STEP.to_string(),
            ("goal", None) => GOAL_STEP.to_string(),
            _ => {
                return Err(at(
                    None,
                    "name",
                    "agent 步骤要有名字(它是跨进程接续的键)".into(),
                ))
            }
        };
        let field = |f: &str, m: String| at(Some(&name), f, m);
        if self.names.contains(&name) {
            return Err(field("name", "和前面的步骤重名".into()));
        }
        let on_fail = match d.on_fail.as_deref() {
            None => OnFail::Stop,
            Some(s) => OnFail::parse(s).ok_or_else(|| {
                field(
                    "on_fail",
                    format!("不认识 \"{s}\";可用 stop、skip、continue"),
                )
            })?,
        };
        let retries = d.retries.unwrap_or(0);
        let instructions = d.instructions.clone().unwrap_or_default();
        let step = match kind {
            "clarify" => self.clarify_step(&name, &d, instructions, retries, on_fail, &field)?,
            "goal" => {
                let brief = d.brief.clone().unwrap_or_else(|| CLARIFY_STEP.to_string());
                if d.brief.is_some() && !self.names.contains(&brief) {
                    return Err(field("brief", format!("前面没有叫「{brief}」的步骤")));
                }
                self.has_goal_step = true;
                GoalSetting {
                    brief_key: brief,
                    name: name.clone(),
                    instructions,
                    always_set: d.always.unwrap_or(false),
                    can_run: d.can_run.unwrap_or(false),
                    retries,
                    on_fail,
                    ..GoalSetting::new(self.goal_path.clone().unwrap_or_default())
                }
                .step()
            }
            _ => {
                if matches!(&d.goal, Some(v) if v.as_bool() != Some(false)) {
                    self.judged.push(name.clone());
                }
                self.agent_step(&name, d, instructions, retries, on_fail, &field)?
            }
        };
        let step = match table.get("when") {
            Some(w) => self.condition(step, w, &field)?,
            None => step,
        };
        self.names.push(name);
        Ok(step)
    }

    /// A `kind = "clarify"` step: its prompt defaults to `{{ask}}`.
    fn clarify_step(
        &self,
        name: &str,
        d: &StepDecl,
        instructions: String,
        retries: u32,
        on_fail: OnFail,
        field: &dyn Fn(&str, String) -> DeclError,
    ) -> Result<Step, DeclError> {
        let template = d.prompt.clone().unwrap_or_else(|| "{{ask}}".to_string());
        self.check_template(&template)
            .map_err(|m| field("prompt", m.to_string()))?;
        if template.contains("{{ask}}") && self.ask.is_none() {
            return Err(field("prompt", "用了 {{ask}},可流程里没写 ask".into()));
        }
        Ok(Clarify {
            name: name.to_string(),
            instructions,
            always_ask: d.always.unwrap_or(false),
            can_read: d.can_read.unwrap_or(true),
            retries,
            on_fail,
            ..Clarify::new(
                self.brief_path.clone().unwrap_or_default(),
                self.render(template),
            )
        }
        .step())
    }

    /// Adds a `when` ([`Condition`]) to `step`: it runs only when the condition holds (and its
    /// own mechanism's `when`, if any, says so too).
    fn condition(
        &self,
        mut step: Step,
        value: &toml::Value,
        field: &dyn Fn(&str, String) -> DeclError,
    ) -> Result<Step, DeclError> {
        let cond = Condition::parse(value).map_err(|e| field("when", e.to_string()))?;
        let on = cond.step().to_string();
        if !self.names.contains(&on) {
            return Err(field("when", format!("前面没有叫「{on}」的步骤")));
        }
        if matches!(cond, Condition::Verdict { .. }) && !self.judged.contains(&on) {
            return Err(field(
                "when",
                format!("「{on}」没有 goal,没有判定可看;看它成没成用 outcome"),
            ));
        }
        let own = step.when.take();
        step.when = Some(std::sync::Arc::new(move |ctx: &mut Ctx| {
            cond.holds(ctx) && own.as_ref().is_none_or(|w| w(ctx))
        }));
        Ok(step)
    }

    fn agent_step(
        &self,
        name: &str,
        d: StepDecl,
        instructions: String,
        retries: u32,
        on_fail: OnFail,
        field: &dyn Fn(&str, String) -> DeclError,
    ) -> Result<Step, DeclError> {
        let role = d.role.clone().ok_or_else(|| {
            field(
                "role",
                "agent 步骤要写 role:coordinator、worker、judge 或 clarifier".into(),
            )
        })?;
        let Some(ceiling) = role_ceiling(&role) else {
            return Err(field(
                "role",
                format!("不认识 \"{role}\";可用 coordinator、worker、judge、clarifier"),
            ));
        };
        if d.workers.is_some() && role != "coordinator" {
            return Err(field("workers", "只有 coordinator 能派执行者".into()));
        }
        let mut spec = match role.as_str() {
            "coordinator" => roles::coordinator("coordinator", &instructions, workers(&d, field)?),
            "worker" => roles::worker("worker", name, &instructions).spec,
            "judge" => roles::judge("judge", &instructions, false),
            _ => roles::clarifier("clarifier", &instructions, true),
        };
        if let Some(tools) = &d.tools {
            check_tools(tools, ceiling).map_err(|m| field("tools", m.to_string()))?;
            spec.tools = tools.clone();
        }
        apply_limits(&mut spec, &d, field)?;
        let prompt = d
            .prompt
            .clone()
            .ok_or_else(|| field("prompt", "agent 步骤要写 prompt".into()))?;
        self.check_template(&prompt)
            .map_err(|m| field("prompt", m.to_string()))?;
        let mut step = Step::new(name, spec, self.render(prompt))
            .retries(retries)
            .on_fail(on_fail);
        if let Some(rp) = d.resume_prompt.clone() {
            self.check_template(&rp)
                .map_err(|m| field("resume_prompt", m.to_string()))?;
            step = step.resume_prompt(self.render(rp));
        }
        match (&d.resume_from, d.fork) {
            (Some(from), fork) => {
                if !self.names.contains(from) {
                    return Err(field("resume_from", format!("前面没有叫「{from}」的步骤")));
                }
                step = step.resume_from(from.clone(), fork.unwrap_or(false));
            }
            (None, Some(_)) => return Err(field("fork", "只和 resume_from 一起用".into())),
            (None, None) => {}
        }
        match goal_decl(&d, field)? {
            Some(g) => self.guarded(step, g, &d, field),
            None => Ok(step),
        }
    }

    /// `step` wrapped in the goal guard `g` declares.
    fn guarded(
        &self,
        step: Step,
        g: GoalDecl,
        d: &StepDecl,
        field: &dyn Fn(&str, String) -> DeclError,
    ) -> Result<Step, DeclError> {
        if !self.has_goal_step {
            return Err(field(
                "goal",
                "要判定就得先有一个 kind = \"goal\" 的步骤".into(),
            ));
        }
        if d.retries.is_some() {
            return Err(field(
                "retries",
                "带 goal 的步骤用 goal.rounds 定轮数".into(),
            ));
        }
        let checks = g.checks.unwrap_or_default();
        if let Some(blank) = checks.iter().position(|c| c.trim().is_empty()) {
            return Err(field(
                "goal",
                format!("checks 的第 {} 条是空的:要写一条命令", blank + 1),
            ));
        }
        Ok(GoalGuard {
            rounds: g.rounds.unwrap_or(3),
            can_run: g.can_run.unwrap_or(false),
            instructions: g.instructions.unwrap_or_default(),
            checks: checks
                .into_iter()
                .enumerate()
                .map(|(i, c)| Check::new(CheckSource::Workflow(i + 1), c))
                .collect(),
            probe: g.probe_checks.unwrap_or(false),
            ..GoalGuard::new(self.goal_path.clone().unwrap_or_default())
        }
        .wrap(step))
    }

    /// Every `{{name}}` names `ask`, `brief`, `goal` or an earlier step.
    fn check_template(&self, text: &str) -> Result<(), Problem> {
        for key in placeholders(text) {
            let known =
                matches!(key.as_str(), "ask" | "brief" | "goal") || self.names.contains(&key);
            if !known {
                return Err(Problem::Placeholder {
                    key,
                    known: self.names.to_vec(),
                });
            }
        }
        Ok(())
    }

    /// The prompt of a template: placeholders filled from the context when the step starts.
    fn render(&self, template: String) -> Prompt {
        if placeholders(&template).is_empty() {
            return Prompt::Text(template);
        }
        let ask = self.ask.clone();
        Prompt::from_fn(move |ctx: &Ctx| fill(&template, ctx, ask.as_deref()))
    }
}

/// Limits shared by every agent step.
fn apply_limits(
    spec: &mut AgentSpec,
    d: &StepDecl,
    field: &dyn Fn(&str, String) -> DeclError,
) -> Result<(), DeclError> {
    if let Some(m) = &d.model {
        if m.trim().is_empty() {
            return Err(field("model", "不能是空的".into()));
        }
        spec.model = Some(m.clone());
    }
    spec.max_turns = d.max_turns;
    if let Some(b) = d.budget {
        if b.is_nan() || b < 0.0 {
            return Err(field("budget", "要是不小于 0 的美元数".into()));
        }
        spec.max_budget_usd = Some(b);
    }
    Ok(())
}

/// `tools` must be names the role may have.
fn check_tools(tools: &[String], ceiling: &[&'static str]) -> Result<(), Problem> {
    if tools.is_empty() {
        return Err(Problem::NoTools);
    }
    let mut seen = BTreeSet::new();
    // A role that may run commands may have the project's MCP tools: its servers run where its
    // commands run (the read-only roles are offered only `readOnlyHint` ones).
    let mcp_ok = ceiling.contains(&"Bash");
    for t in tools {
        let allowed = ceiling.contains(&t.as_str()) || (mcp_ok && crate::mcp::names::is_entry(t));
        if !allowed {
            return Err(Problem::NotAllowed {
                tool: t.clone(),
                ceiling: ceiling.to_vec(),
            });
        }
        if !seen.insert(t) {
            return Err(Problem::Twice(t.clone()));
        }
    }
    Ok(())
}

/// A serde message on one line.
fn clean(e: &toml::de::Error) -> String {
    e.message().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A coordinator's workers: `coder` by default, else the declared ones (their tools within a
/// worker's ceiling).
fn workers(
    d: &StepDecl,
    field: &dyn Fn(&str, String) -> DeclError,
) -> Result<Vec<WorkerDef>, DeclError> {
    let Some(ws) = &d.workers else {
        return Ok(vec![roles::worker(
            "coder",
            "写代码与测试。要动手实现的活派给它。",
            WORKER_PROMPT,
        )]);
    };
    if ws.is_empty() {
        return Err(field("workers", "至少要有一个执行者".into()));
    }
    ws.iter()
        .map(|w| {
            let mut def = roles::worker(
                &w.kind,
                &w.description,
                w.prompt.as_deref().unwrap_or(WORKER_PROMPT),
            );
            if let Some(tools) = &w.tools {
                check_tools(tools, role_ceiling("worker").unwrap_or_default())
                    .map_err(|m| field("workers.tools", m.to_string()))?;
                def.spec.tools = tools.clone();
            }
            Ok(def)
        })
        .collect()
}

/// The step's `goal`: `true`, or a table of the guard's settings; `None` without one.
fn goal_decl(
    d: &StepDecl,
    field: &dyn Fn(&str, String) -> DeclError,
) -> Result<Option<GoalDecl>, DeclError> {
    match &d.goal {
        None | Some(toml::Value::Boolean(false)) => Ok(None),
        Some(toml::Value::Boolean(true)) => Ok(Some(GoalDecl::default())),
        Some(v @ toml::Value::Table(_)) => v
            .clone()
            .try_into::<GoalDecl>()
            .map(Some)
            .map_err(|e| field("goal", clean(&e))),
        Some(_) => Err(field(
            "goal",
            "要写 true 或 { rounds, can_run, instructions, checks, probe_checks }".into(),
        )),
    }
}
