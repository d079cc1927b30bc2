//! The human on the other end of an agent, as the agent's tools see it (`mcp__human__ask`,
//! `mcp__human__inbox`): the [`Human`] trait, how a question ended ([`AskOutcome`]) and the
//! seed's fixed texts the model receives. The trait lives here, with its user; the question
//! channel the workflows and the terminal use implements it (`HumanChannel`, in the `channel`
//! module above this one).

use async_trait::async_trait;

use crate::role::Role;

/// Who asks: the agent instance, its role and depth, as the human's screen shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asker<'a> {
    /// The instance name (`clarifier`, `worker-2`, `judge-1`).
    pub agent: &'a str,
    /// Its role.
    pub role: Role,
    /// 0 for a main thread, 1 for a worker it dispatched.
    pub depth: u32,
}

impl<'a> Asker<'a> {
    /// A main-thread asker.
    pub fn new(agent: &'a str, role: Role) -> Self {
        Asker {
            agent,
            role,
            depth: 0,
        }
    }
}

/// The seed's fixed text fed back when the ask budget is used up (seed 000 "超时").
pub const OVER_BUDGET_TEXT: &str =
    "提问额度已用完。不要再问了 —— 把剩下的不确定项写进「未知与假设」那一段,按你自己的判断继续。";
/// The seed's fixed text fed back when nobody answered in time.
pub const TIMEOUT_TEXT: &str = "无人应答。按你自己的判断继续,并把这个问题和你采用的假设写进「未知与假设」那一段。不要重复提问,也不要停在这里。";
/// The seed's fixed text fed back when the human skipped.
pub const DECLINED_TEXT: &str =
    "对方跳过了这个问题。按你自己的判断继续,并把假设写进「未知与假设」。";
/// The seed's fixed text fed back for an empty question.
pub const EMPTY_QUESTION_TEXT: &str = "问题是空的。把问题写清楚再问。";

/// How one question ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskOutcome {
    /// The human answered (an option's text when they typed its number).
    Answered(String),
    /// Nobody answered within the timeout (or the timeout is <= 0).
    Timeout,
    /// The ask budget is used up.
    OverBudget,
    /// The human skipped (empty line) or declined (EOF).
    Skipped,
    /// The question was empty.
    Empty,
}

impl AskOutcome {
    /// The tool_result text the model receives.
    pub fn tool_text(&self) -> String {
        match self {
            AskOutcome::Answered(a) => a.clone(),
            AskOutcome::Timeout => TIMEOUT_TEXT.to_string(),
            AskOutcome::OverBudget => OVER_BUDGET_TEXT.to_string(),
            AskOutcome::Skipped => DECLINED_TEXT.to_string(),
            AskOutcome::Empty => EMPTY_QUESTION_TEXT.to_string(),
        }
    }

    /// Short name for events and `问答记录.md`: answered, timeout, over_budget, skipped, empty.
    pub fn kind(&self) -> &'static str {
        match self {
            AskOutcome::Answered(_) => "answered",
            AskOutcome::Timeout => "timeout",
            AskOutcome::OverBudget => "over_budget",
            AskOutcome::Skipped => "skipped",
            AskOutcome::Empty => "empty",
        }
    }
}

/// A human on the other end. `ask` may block for a long time; `inbox` never blocks.
#[async_trait]
pub trait Human: Send + Sync {
    /// Asks one question with optional options; resolves when answered, skipped, timed out or
    /// refused by budget.
    async fn ask(&self, asker: Asker<'_>, question: &str, options: &[String]) -> AskOutcome;

    /// Takes every message the human sent since the last call (oldest first).
    fn inbox(&self) -> Vec<String>;

    /// Questions left; -1 when unlimited.
    fn remaining(&self) -> i64;
}

/// A human who is never there: every question times out at once, the inbox is empty
/// (`once`, tests, `--timeout 0` without a terminal).
pub struct Absent;

#[async_trait]
impl Human for Absent {
    async fn ask(&self, _asker: Asker<'_>, question: &str, _options: &[String]) -> AskOutcome {
        if question.trim().is_empty() {
            AskOutcome::Empty
        } else {
            AskOutcome::Timeout
        }
    }
    fn inbox(&self) -> Vec<String> {
        Vec::new()
    }
    fn remaining(&self) -> i64 {
        -1
    }
}
