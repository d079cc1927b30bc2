//! The five role factories (seed 001 "角色", seed 003 on the clarifier's tools) plus the `once`
//! agent. Each role = a rules text + a tool whitelist + guards; the runtime enforces the
//! whitelist and, for the coordinator, the glance-only Bash (delegate guard).
//!
//! The rules texts are flowerbox's own, written in Chinese like the documents they produce
//! (the brief's and verdict's section names are Chinese, and flower users read them).

use super::spec::{AgentSpec, WorkerDef};
use crate::model::Role;

/// Tool name of the human question tool.
pub const ASK_TOOL: &str = "mcp__human__ask";
/// Tool name of the inbox tool.
pub const INBOX_TOOL: &str = "mcp__human__inbox";

/// Rules of the coordinator (main thread): delegate, never act.
pub const COORDINATOR_RULES: &str = "\
你是协调者:一个会用编码 agent 的人,不是执行者。你拆解任务、派活、读报告、做决定,但不动手:\
不写文件、不改代码、不跑测试、不装东西。动手的活一律用 Agent 工具派给执行者。
- 你的 Bash 只够\"看一眼\":git status/diff/log、ls、cat、ps 这类只读、结果会过期的命令。别的命令会被拒绝。
- 任务书只写这次任务专属的东西:目标、验收标准、相关路径。对方已经知道的纪律不要复述。\
唯一值得写的约定是:工作台在哪、长产出写进工作台的 artifacts/、回话只给路径和结论。
- 互不依赖的活可以在同一条消息里发多个 Agent 调用,它们会并行跑。
- 每完成一个里程碑就查一次收件箱(mcp__human__inbox),人可能追加了需求。
- mcp__human__ask 会阻塞,只在真正的岔路口用。
- 结束时用几行话说清:做成了什么、证据在哪、还有什么没验证。";

/// Rules appended after a worker's own prompt: the four-part report.
pub const WORKER_RULES: &str = "\
回话格式固定四段,总共不超过 30 行:
结论:一两句话,做成了没有。
依据:你亲自跑过的验证(命令 + 看到的关键结果,一行一条)。
产出:改了/新建了哪些文件,长产出放在哪个路径。
未验证:没验证或验证不了的部分;没有就写\"无\"。
不要贴文件内容、命令输出、日志或 diff 原文;不要复述试错过程。开始前先看一眼工作台的 scripts/ 有没有现成脚本。";

/// Rules of the clarifier: ask until clear, then exactly four sections.
pub const CLARIFIER_RULES: &str = "\
你是确认者:动手之前把需求问清楚。你什么都不做,只提问、只读。
- 用 mcp__human__ask 提问,每次一个问题,能给选项就给选项。提问次数没有上限,问到清楚为止。
- 人可能不在:提问落空时按你自己的判断继续,把问题和你采用的假设写进「未知与假设」。
- 可以读仓库(Read/Glob/Grep)来少问几个问题。
- 不写代码,不贴文件内容。
- 最后只输出一份需求确认书,恰好四段,标题依次是:
## 目标
## 验收标准
## 边界
## 未知与假设";

/// Rules of the judge: set the goal, or judge a round.
pub const JUDGE_RULES: &str = "\
你是判定者,只做两件事之一,不动手修任何东西。
设定目标时:把需求确认书改写成可当场判定的清单。输出恰好两段:
## 目标
## 判定清单
清单每条都写成\"跑什么、看到什么\"的形式;条数由失败方式决定,三到五条通常就够;边界不是判定项;\
这个环境里验不了的条目在末尾标 [此环境无法验证:原因]。先看清楚你在什么环境里。
判定一轮时:自己去看现场(产出物,不是源码),逐条对判定清单,看不到证据的判定项就是没通过。\
不要默认相信\"做完了\"。输出恰好三段:
## 结论
ACHIEVED、NOT_YET 或 UNREACHABLE 之一。UNREACHABLE 只用于\"再来一轮也没用\"(缺必要的外部条件、需求自相矛盾、判定项根本无法验证);只是还没做完用 NOT_YET。
## 理由
## 未通过
逐条列出没通过的判定项和差在哪(只说差什么,不说怎么做);全部通过就写\"无\"。";

/// Rules of the aside oracle.
pub const ORACLE_RULES: &str = "\
你是旁路顾问。那次运行还在跑,你既不打断也不参与;你只读,答完即弃,你说的话不会进入那次运行的上下文。
你手上只有\"最近事件窗口\"和\"工作台\"。先看再答;看不出来就直说;简短。";

/// The coordinator (main thread of `go`): `Agent`, `TodoWrite`, `Read`, glance `Bash`, and the
/// human tools. `workers` are the definitions it may dispatch.
pub fn coordinator(name: &str, instructions: &str, workers: Vec<WorkerDef>) -> AgentSpec {
    let mut spec = AgentSpec::new(
        name,
        Role::Coordinator,
        join(COORDINATOR_RULES, instructions),
    );
    spec.tools = ["Agent", "TodoWrite", "Read", "Bash", ASK_TOOL, INBOX_TOOL]
        .into_iter()
        .map(String::from)
        .collect();
    spec.glance_only = true;
    spec.workbench_index = true;
    spec.workers = workers;
    spec
}

/// A worker definition: the hands-on subagent (`Read Write Edit Bash Glob Grep WebFetch`).
/// `prompt` is its own system prompt; the four-part report rules are appended.
pub fn worker(kind: &str, description: &str, prompt: &str) -> WorkerDef {
    let mut spec = AgentSpec::new(
        kind,
        Role::Worker,
        format!("{}\n\n{}", prompt.trim(), WORKER_RULES),
    );
    spec.tools = ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "WebFetch"]
        .into_iter()
        .map(String::from)
        .collect();
    spec.report_format = true;
    WorkerDef {
        kind: kind.to_string(),
        description: description.to_string(),
        spec,
    }
}

/// The clarifier: `mcp__human__ask` plus read tools (when `can_read`); no Write/Edit/Bash/Agent.
pub fn clarifier(name: &str, instructions: &str, can_read: bool) -> AgentSpec {
    let mut spec = AgentSpec::new(name, Role::Clarifier, join(CLARIFIER_RULES, instructions));
    spec.tools = vec![ASK_TOOL.to_string()];
    if can_read {
        spec.tools
            .extend(["Read", "Glob", "Grep"].map(String::from));
    }
    spec
}

/// The judge: `mcp__human__ask`, `Read`, `Glob`, `Grep`, plus `Bash` with `can_run` (run in its
/// read-only container).
pub fn judge(name: &str, instructions: &str, can_run: bool) -> AgentSpec {
    let mut spec = AgentSpec::new(name, Role::Judge, join(JUDGE_RULES, instructions));
    spec.tools = [ASK_TOOL, "Read", "Glob", "Grep"]
        .map(String::from)
        .to_vec();
    if can_run {
        spec.tools.push("Bash".into());
    }
    spec
}

/// The aside oracle: read tools only, at most 12 turns and $0.5 (seed 000 "旁路问答").
pub fn oracle(name: &str) -> AgentSpec {
    let mut spec = AgentSpec::new(name, Role::Oracle, ORACLE_RULES);
    spec.max_turns = Some(12);
    spec.max_budget_usd = Some(0.5);
    spec.workbench_index = true;
    spec
}

/// The `once` agent (`ad-hoc`): the given tools, the given instructions, an optional budget.
pub fn once(instructions: &str, tools: Vec<String>, budget: Option<f64>) -> AgentSpec {
    let mut spec = AgentSpec::new("ad-hoc", Role::Once, instructions.trim());
    spec.tools = tools;
    spec.max_budget_usd = budget;
    spec
}

fn join(rules: &str, instructions: &str) -> String {
    format!("{}\n{}", rules, instructions).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clarifier_cannot_write() {
        let c = clarifier("确认需求", "", true);
        for t in ["Write", "Edit", "Bash", "Agent", INBOX_TOOL] {
            assert!(!c.allows(t), "{t}");
        }
        assert!(c.allows(ASK_TOOL));
        assert!(!clarifier("x", "", false).allows("Read"));
    }

    #[test]
    fn judge_runs_only_with_can_run() {
        assert!(!judge("j", "", false).allows("Bash"));
        let j = judge("j", "", true);
        assert!(j.allows("Bash") && !j.allows("Write") && !j.allows("Edit") && !j.allows("Agent"));
    }

    #[test]
    fn coordinator_has_no_write_tools_and_glances() {
        let c = coordinator(
            "协调者",
            "",
            vec![worker("coder", "写代码", "你负责实现。")],
        );
        assert!(!c.allows("Write") && !c.allows("Edit"));
        assert!(c.glance_only && c.allows("Bash") && c.allows("Agent"));
        assert_eq!(c.workers.len(), 1);
        assert!(c.workers[0].spec.report_format);
    }

    #[test]
    fn oracle_is_braked() {
        let o = oracle("旁路问答");
        assert_eq!(o.max_turns, Some(12));
        assert_eq!(o.max_budget_usd, Some(0.5));
        assert_eq!(o.tools, vec!["Read", "Glob", "Grep"]);
    }
}
