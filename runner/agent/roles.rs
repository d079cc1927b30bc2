//! The five role factories (seed 001 "角色", seed 003 on the clarifier's tools) plus the `once`
//! agent. Each role = a rules text + a tool whitelist + guards; the runtime enforces the
//! whitelist and, for the coordinator, the glance-only Bash (delegate guard).
//!
//! The rules texts are flowerbox's own, written in Chinese like the documents they produce
//! (the brief's and verdict's section names are Chinese, and flower users read them).

use super::spec::{AgentSpec, WorkerDef};
use crate::model::{Role, ToolName};

/// Tool name of the human question tool.
pub const ASK_TOOL: &str = ToolName::Ask.as_str();
/// Tool name of the inbox tool.
pub const INBOX_TOOL: &str = ToolName::Inbox.as_str();
/// Whitelist entry admitting every project MCP tool (read-only roles: `readOnlyHint` ones).
pub const MCP_TOOLS: &str = crate::mcp::names::ALL;

pub use crate::sandbox::CommandsRun;

/// The text before every agent's rules: the run, where commands run, and the habits every role
/// shares. It names only what is the same for every session of a role in one run (the main
/// workspace), so the system prompt stays one cache entry; a worker's own worktree goes in its
/// first message.
pub fn base_system(workspace: &std::path::Path, commands: CommandsRun) -> String {
    let place = match commands {
        CommandsRun::InContainer => {
            "你的命令(Bash,如果你有)在你自己的 Docker 容器里执行,每个 agent 一个容器;\
             文件工具只能碰挂载给你的目录,读写权限和你的容器一样。"
        }
        CommandsRun::OnHost => {
            "你的命令(Bash,如果你有)直接在这台机器上以当前用户执行(--sandbox host:没有容器,\
             没有隔离),会真的改动这台机器:除了挂载给你的目录,别去碰别处。文件工具只能碰挂载给你的目录。"
        }
    };
    format!(
        "你是 flowerbox 里的一个 agent,在一次可能持续几小时到几天的编码运行里承担一个角色,\
         角色守则在下面。这次运行的主工作区是 {ws}。{place}\n\
         通用做法:\n\
         - 工具报错是给你看的结果,不是崩溃:读懂原因再决定下一步;同一个调用原样失败两次就换个办法。\n\
         - 路径一律写绝对路径。工作区、worktree、工作台的路径在宿主机、容器和工具里都是同一个。\n\
         - 工具的输入必须是一个 JSON 对象,字段按工具的参数说明给,别自己编字段。\n\
         - 互不依赖的工具调用放在同一条消息里一起发,它们并行执行;有先后依赖的分开发。\n\
         - 长输出别塞进对话:命令输出可能很长时重定向到文件,再用 Read 分段看、用 Grep 找关键行。\n\
         - 会话记录和工作台是接手的人(或换代后的你)唯一的依据:结论写清楚,猜测标明是猜测。\n\
         - 不确定的事先查证(读文件、跑命令),不要凭印象下结论。\n\
         - 你看不到别的 agent 的对话:要交给别人的东西写进工作台,或写进你的回话。",
        ws = workspace.display()
    )
}

/// Rules of the coordinator (main thread): delegate, never act.
pub const COORDINATOR_RULES: &str = "\
你是协调者:一个会用编码 agent 的人,不是执行者。你拆解任务、派活、读报告、做决定,但不动手:\
不写文件、不改代码、不跑测试、不装东西。动手的活一律用 Agent 工具派给执行者。
- 你的 Bash 只够\"看一眼\":git status/diff/log、ls、cat、ps 这类只读、结果会过期的命令。别的命令会被拒绝。
- 任务书只写这次任务专属的东西:目标、验收标准(跑什么命令、看到什么算成)、相关路径。\
执行者看不到你的对话,也看不到你收到的工作台清单,任务书里没写的它就不知道;它已经知道的纪律(先读后改、跑验证、四段回话)不要复述。\
唯一值得写的约定是:工作台在哪、长产出写进工作台的 artifacts/、回话只给路径和结论。
- 互不依赖的活可以在同一条消息里发多个 Agent 调用,它们会并行跑;会改同一批文件的活别并行派。\
并行派活时给每个 Agent 调用写上 writes(它只能写的路径,相对仓库根目录,目录以 / 结尾,如 [\"src/http/\", \"tests/http_test.c\"]):\
范围外对它只读,范围互不重叠的执行者才同时跑,重叠的(以及不写 writes 的和任何写了的)后派的会等前面的跑完。
- 读报告先看\"依据\":没亲自跑过的验证不算数。存疑就派人复核,或用 Bash 看一眼现场。
- 用 TodoWrite 记计划和进度,每完成一项就更新一次。
- 每完成一个里程碑就查一次收件箱(mcp__human__inbox),人可能追加了需求。
- mcp__human__ask 会阻塞,只在真正的岔路口用。
- 结束时用几行话说清:做成了什么、证据在哪、还有什么没验证。";

/// Rules appended after a worker's own prompt: how to work, and the four-part report.
pub const WORKER_RULES: &str = "\
动手时:
- 先读后改:改文件前先用 Read 看它现在的内容。Edit 的 old_string 必须和文件里一字不差(含缩进和空白),\
并且在文件里唯一;不唯一就多带几行上下文。
- 新文件用 Write,改已有文件优先用 Edit;大文件分几次写,别一次写几百行。
- 找文件用 Glob,找内容用 Grep,别用 Bash 的 find/grep 翻整个仓库。
- 每改一处就跑一次能证明它对的命令(编译、测试、curl),看到结果再往下走;没跑过的别说能跑。
- Bash 每次调用都是新 shell,cd 不会保留;要长期跑的进程放后台并把输出重定向:`cmd > 日志 2>&1 &`。
- 会跑第二次的命令写成工作台 scripts/ 里的脚本;长产出放工作台 artifacts/,回话里只给路径。
- 只改任务书要你改的东西;发现别的问题写进\"未验证\",别顺手改。
回话格式固定四段,总共不超过 30 行:
结论:一两句话,做成了没有。
依据:你亲自跑过的验证(命令 + 看到的关键结果,一行一条)。
产出:改了/新建了哪些文件,长产出放在哪个路径。
未验证:没验证或验证不了的部分;没有就写\"无\"。
不要贴文件内容、命令输出、日志或 diff 原文;不要复述试错过程。开始前先看一眼工作台的 scripts/ 有没有现成脚本。";

/// Rules of the clarifier: ask until clear, then exactly four sections.
pub const CLARIFIER_RULES: &str = "\
你是确认者:动手之前把需求问清楚。你什么都不做,只提问、只读。
- 先用 Glob/Grep/Read 看一眼仓库(目录结构、README、构建方式、已有测试);仓库里查得到的事不要问人。
- 请求里给了网址(接口文档、规范、issue)就用 WebFetch 读它;没有搜索工具,要查的东西得有确切的网址。
- 用 mcp__human__ask 提问,每次一个问题,问到能直接回答的程度;能给选项就给两三个选项,并说你推荐哪个。\
提问次数没有上限,问到清楚为止。
- 人可能不在:提问落空时按你自己的判断继续,把问题和你采用的假设写进「未知与假设」。
- 不写代码,不贴文件内容。
- 验收标准要能当场检验:写成\"跑什么、看到什么\",不写\"代码质量好\"这类无法检验的话。
- 确认书是后面所有步骤的依据,判定者照它定判定清单:写具体的名字、路径、端口、命令,不写\"等\"\"之类\"。
- 「边界」写这次不做什么、不能碰什么(接口、文件、依赖);「未知与假设」每条写成\"问题 → 采用的假设 → 理由\"。
- 人的回答和原请求矛盾时,以人最新说的为准,并在确认书里写明改了哪一点。
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
不要默认相信\"做完了\"。
- 看现场的办法:Read 读产出物和日志,Glob/Grep 找文件;有 Bash 时亲手跑清单里的命令(file、lsof、ps、curl、测试)。\
你的容器对工作区和工作台只读,什么也改不了,也不要试。
- 只凭你这一轮亲眼看到的输出下结论,不凭执行者的报告,也不凭源码里\"应该\"发生什么。
- 命令在这个环境里跑不了,就在理由里写清楚缺什么。
输出恰好三段:
## 结论
ACHIEVED、NOT_YET 或 UNREACHABLE 之一。UNREACHABLE 只用于\"再来一轮也没用\"(缺必要的外部条件、需求自相矛盾、判定项根本无法验证);只是还没做完用 NOT_YET。
## 理由
每条判定项一行:过没过,引用你看到的关键输出(一两行),让人能复核。
## 未通过
逐条列出没通过的判定项和差在哪(只说差什么,不说怎么做);全部通过就写\"无\"。";

/// Rules of the aside oracle.
pub const ORACLE_RULES: &str = "\
你是旁路顾问。那次运行还在跑,你既不打断也不参与;你只读,答完即弃,你说的话不会进入那次运行的上下文。
你手上只有\"最近事件窗口\"和\"工作台\"。先看再答;看不出来就直说;简短。
- 先看最近事件窗口,再按需要用 Read/Glob/Grep 看工作台:notes/ 里有需求确认书、目标和判定记录,artifacts/ 里有产出和日志。
- 直接给结论,附上你依据的文件路径或事件,几行就够。
- 你没有写工具,也不能指挥那次运行:人想改需求,就告诉他直接在输入行里说,下个检查点会送达。
- 问的是进度,就说到了哪一步、卡在哪、花了多少;问的是原因,就指出你看到的那条证据。
- 工作台 notes/ 里:需求.md 是需求确认书,目标.md 是判定清单,判定记录.md 有每一轮的结论和判定者看到的输出,\
问答记录.md 有人回答过的问题。
- 事件窗口只有最近的一段:更早的事去这些记录里找;找不到就说找不到,不要自己补全。
- 别复述整段文件,引用一两行关键内容就够;花费和轮数以事件窗口里的数字为准。
- 问\"它现在在干什么\":看事件窗口里最后几个工具调用和派活;问\"为什么没过\":看最近的报错和判定记录里的未通过项。
- 你的回答只给提问的人看,不影响那次运行;别替那次运行做决定,只把你看到的说清楚,看不到的说看不到。
- 回答先用一句话给结论,再列依据;依据多于五条就挑最要紧的五条。";

/// Rules of the `once` agent, before the `-i` instructions: one request, done.
pub const ONCE_RULES: &str = "\
你是一个单次任务的 agent(flowerbox once):把这一个请求做完就结束。没有后续步骤,没有判定者,也没人回答问题。
- 只用你手上的工具;工具不够做完,就说清楚缺什么、做到了哪一步。
- 先读后改:改文件前先用 Read 看它现在的内容;Edit 的 old_string 要和文件里一字不差且唯一。
- 找文件用 Glob,找内容用 Grep;改完跑一次能证明它对的命令,没跑过的别说能跑。
- 新文件用 Write,改已有文件优先用 Edit;大文件分几次写。
- Bash 每次调用都是新 shell,cd 不会保留;要长期跑的进程放后台,输出重定向到文件。
- 命令输出可能很长时先重定向到文件,再用 Read 或 Grep 看需要的部分。
- 只做这个请求要求的事;看到别的问题在最后提一句,不要顺手改。
- 没人能回答问题:遇到岔路按最合理的理解去做,并在最后说明你做了什么假设。
- 只读的请求(看一眼、解释、找出处)不改任何文件;回答里给出文件路径和行号,让人能自己核对。
- 有预算上限(-b)时,花到上限就会被停下:先做最要紧的部分,再做锦上添花的。
- 要构建或跑测试,先找项目自己的方式(Makefile、package.json、Cargo.toml、README 里写的命令),别自己发明。
- 回答别贴大段文件内容或命令输出,引用关键的一两行并给出路径。
- 删除、覆盖和 git 操作之前,先确认目标路径和分支没错;拿不准就不做,在最后说明。
- 最后用几行话说清:做成了什么、改了哪些文件、什么没验证。";

/// A worker's tools (and the project's MCP tools, [`MCP_TOOLS`]).
pub const WORKER_TOOLS: [ToolName; 7] = [
    ToolName::Read,
    ToolName::Write,
    ToolName::Edit,
    ToolName::Bash,
    ToolName::Glob,
    ToolName::Grep,
    ToolName::WebFetch,
];

/// A whitelist of tool names.
pub fn names(tools: &[ToolName]) -> Vec<String> {
    tools.iter().map(|t| t.as_str().to_string()).collect()
}

/// The coordinator (main thread of `go`): `Agent`, `TodoWrite`, `Read`, glance `Bash`, the
/// human tools and the project's read-only MCP tools, plus `WebFetch` when one of its workers
/// has it (flower merges its workers' web tools into the coordinator's, seed 001 "协调者").
/// `workers` are the definitions it may dispatch.
pub fn coordinator(name: &str, instructions: &str, workers: Vec<WorkerDef>) -> AgentSpec {
    let mut spec = AgentSpec::new(
        name,
        Role::Coordinator,
        join(COORDINATOR_RULES, instructions),
    );
    spec.tools = names(&[
        ToolName::Agent,
        ToolName::TodoWrite,
        ToolName::Read,
        ToolName::Bash,
        ToolName::Ask,
        ToolName::Inbox,
    ]);
    if workers.iter().any(|w| w.spec.has(ToolName::WebFetch)) {
        spec.tools.push(ToolName::WebFetch.as_str().into());
    }
    spec.tools.push(MCP_TOOLS.into());
    spec.glance_only = true;
    spec.mcp_read_only = true;
    spec.workbench_index = true;
    spec.workers = workers;
    spec
}

/// A worker definition: the hands-on subagent (`Read Write Edit Bash Glob Grep WebFetch` and
/// the project's MCP tools).
/// `prompt` is its own system prompt; the four-part report rules are appended.
pub fn worker(kind: &str, description: &str, prompt: &str) -> WorkerDef {
    let mut spec = AgentSpec::new(
        kind,
        Role::Worker,
        format!("{}\n\n{}", prompt.trim(), WORKER_RULES),
    );
    spec.tools = names(&WORKER_TOOLS);
    spec.tools.push(MCP_TOOLS.into());
    spec.report_format = true;
    WorkerDef {
        kind: kind.to_string(),
        description: description.to_string(),
        spec,
    }
}

/// A plugin's agent type as a worker: the worker role with the type's own instructions before
/// the worker rules, its tool list intersected with the worker's (never wider), its model if
/// given.
pub fn plugin_worker(a: &crate::plugin::AgentType) -> WorkerDef {
    let mut def = worker(&a.name, &a.description, &a.prompt);
    if let Some(wanted) = &a.tools {
        let allowed = def.spec.tools.clone();
        let mut tools: Vec<String> = Vec::new();
        for t in wanted {
            let ok = allowed.contains(t)
                || (crate::mcp::names::is_entry(t) && allowed.iter().any(|a| a == MCP_TOOLS));
            if ok && !tools.contains(t) {
                tools.push(t.clone());
            }
        }
        def.spec.tools = tools;
    }
    def.spec.model = a.model.clone();
    def
}

/// The clarifier: `mcp__human__ask` plus read tools and `WebFetch` (when `can_read`); no
/// Write/Edit/Bash/Agent.
pub fn clarifier(name: &str, instructions: &str, can_read: bool) -> AgentSpec {
    let mut spec = AgentSpec::new(name, Role::Clarifier, join(CLARIFIER_RULES, instructions));
    spec.tools = names(&[ToolName::Ask]);
    if can_read {
        // WebFetch runs in the host process under the run's egress policy, like every agent's
        // (no container needed). WebSearch needs a search provider, which flowerbox has not.
        spec.tools.extend(names(&[
            ToolName::Read,
            ToolName::Glob,
            ToolName::Grep,
            ToolName::WebFetch,
        ]));
    }
    spec
}

/// The judge: `mcp__human__ask`, `Read`, `Glob`, `Grep`, plus `Bash` and the project's
/// read-only MCP tools with `can_run` (run in its read-only container).
pub fn judge(name: &str, instructions: &str, can_run: bool) -> AgentSpec {
    let mut spec = AgentSpec::new(name, Role::Judge, join(JUDGE_RULES, instructions));
    spec.tools = names(&[
        ToolName::Ask,
        ToolName::Read,
        ToolName::Glob,
        ToolName::Grep,
    ]);
    spec.mcp_read_only = true;
    if can_run {
        spec.tools.push(ToolName::Bash.as_str().into());
        spec.tools.push(MCP_TOOLS.into());
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
    let mut spec = AgentSpec::new("ad-hoc", Role::Once, join(ONCE_RULES, instructions));
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
        // flower's clarifier reads the web too (WebSearch needs a provider flowerbox has not).
        assert!(c.allows("WebFetch") && !c.allows("WebSearch"));
        assert!(!clarifier("x", "", false).allows("Read"));
        assert!(!clarifier("x", "", false).allows("WebFetch"));
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

    /// flower merges its workers' web tools into the coordinator's (issue 29 §2.3): WebFetch
    /// when a worker has it, not otherwise.
    #[test]
    fn coordinator_inherits_webfetch_from_its_workers() {
        let c = coordinator(
            "协调者",
            "",
            vec![worker("coder", "写代码", "你负责实现。")],
        );
        assert!(c.allows("WebFetch") && !c.allows("WebSearch"));
        let mut offline = worker("coder", "写代码", "你负责实现。");
        offline.spec.tools.retain(|t| t != "WebFetch");
        assert!(!coordinator("协调者", "", vec![offline]).allows("WebFetch"));
        assert!(!coordinator("协调者", "", vec![]).allows("WebFetch"));
    }

    #[test]
    fn a_plugin_agent_type_never_widens_the_worker_role() {
        let a = crate::plugin::AgentType {
            plugin: "p".into(),
            name: "reviewer".into(),
            description: "Reviews".into(),
            prompt: "Review only.".into(),
            tools: Some(vec![
                "Read".into(),
                "Agent".into(),
                "mcp__human__ask".into(),
                "Grep".into(),
                "mcp__db".into(),
            ]),
            model: Some("claude-haiku-4-5".into()),
            file: "agents/reviewer.md".into(),
        };
        let w = plugin_worker(&a);
        assert_eq!(w.spec.tools, ["Read", "Grep", "mcp__db"]);
        assert_eq!(w.spec.model.as_deref(), Some("claude-haiku-4-5"));
        assert!(w.spec.instructions.starts_with("Review only."));
        assert!(w.spec.instructions.contains(WORKER_RULES));
        // Without a list: the worker's own tools.
        let all = plugin_worker(&crate::plugin::AgentType { tools: None, ..a });
        assert_eq!(all.spec.tools, worker("x", "", "").spec.tools);
    }

    #[test]
    fn oracle_is_braked() {
        let o = oracle("旁路问答");
        assert_eq!(o.max_turns, Some(12));
        assert_eq!(o.max_budget_usd, Some(0.5));
        assert_eq!(o.tools, vec!["Read", "Glob", "Grep"]);
    }
}
