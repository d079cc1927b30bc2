//! The clap types: flower's parser (seed 000, "子命令", "全局开关"), field for field. They hold
//! raw values only; [`super::options`] turns them into validated options in one place.
//!
//! Global switches are `global = true`: they may be written before or after the subcommand
//! and every subcommand's `--help` lists them (flower hid them there).

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

/// Text after the top-level help: the six usable forms (seed 000, "六种能用的写法").
const AFTER_HELP: &str = "\
不写子命令时默认是 go:`flowerbox \"帮我做一个 X\"` 就是 `flowerbox go \"帮我做一个 X\"`。

六种能用的写法:
  flowerbox                                     裸跑:交互问“要做什么?”或“接着上次?”
  flowerbox \"帮我做一个 X\"                      位置参数给诉求
  echo \"帮我做一个 X\" | flowerbox --timeout 0   管道喂 stdin
  flowerbox once \"读一眼这个仓库\"               单 agent
  flowerbox run flows.toml:main                 跑自定义流程
  flowerbox go setup                            显式 go,把 setup 当诉求正文

状态放在哪:<workspace>/runs/(会话、清单、血缘、flowerbox.log)和 <workspace>/.flower/(工作台)。
凭证按键查找:进程环境 → ./.env → ~/.config/flower/.env → ~/.claude/settings*.json 的 env 块。";

/// flowerbox's command line.
#[derive(Debug, Parser)]
#[command(
    name = "flowerbox",
    about = "flower 的长程编码 agent 运行:问清需求 → 设定目标 → 派人干活 → 每轮判定;每个 agent 在自己的 Docker 容器里跑。",
    after_help = AFTER_HELP,
    disable_help_subcommand = true,
    disable_help_flag = true,
    subcommand_required = true,
    args_override_self = true,
    max_term_width = 110
)]
pub struct Cli {
    /// The global switches.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The subcommand (inserted as `go` by the rewrite when absent).
    #[command(subcommand)]
    pub command: CommandArgs,
}

/// Where tools run (`--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxKind {
    /// Each agent in its own Docker container (the default).
    Docker,
    /// Tools run as host processes. Only by explicit choice.
    Host,
    /// Each agent in its own container of an engine that does not share this machine's disk
    /// (a CI job's `dind` service, a remote machine): the run's volumes only, `--isolate` only.
    DockerRemote,
}

impl SandboxKind {
    /// The spellings `--sandbox` accepts.
    pub const NAMES: [&'static str; 3] = ["docker", "host", "docker-remote"];

    /// Parses one of [`Self::NAMES`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "docker" => Some(Self::Docker),
            "host" => Some(Self::Host),
            "docker-remote" => Some(Self::DockerRemote),
            _ => None,
        }
    }
}

/// `once -p`: flower's four permission modes; anything else is exit 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// Ask before edits and commands (flower's default).
    Default,
    /// Accept file edits without asking.
    AcceptEdits,
    /// Plan only, change nothing.
    Plan,
    /// No permission checks.
    BypassPermissions,
}

impl PermissionMode {
    /// The spellings `-p` accepts (flower's exact names).
    pub const NAMES: [&'static str; 4] = ["default", "acceptEdits", "plan", "bypassPermissions"];

    /// Parses one of [`Self::NAMES`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "acceptEdits" => Some(Self::AcceptEdits),
            "plan" => Some(Self::Plan),
            "bypassPermissions" => Some(Self::BypassPermissions),
            _ => None,
        }
    }

    /// The flower spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "acceptEdits",
            Self::Plan => "plan",
            Self::BypassPermissions => "bypassPermissions",
        }
    }
}

/// The global switches: flower's 5 plus `--sandbox`, `--image`, the egress policy
/// (`--egress`, `--allow-net`, `--allow-domain`), `--max-workers`, the project's MCP servers (`--mcp-config`,
/// `--mcp-env`), and `-h`.
#[derive(Debug, Args)]
#[command(next_help_heading = "全局开关")]
pub struct GlobalArgs {
    /// agent 的工作目录 [default: .]。会解析成绝对路径并 mkdir -p;工作台 .flower/ 建在这里面
    #[arg(short = 'w', long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// 会话存储和运行清单的目录 [default: <workspace>/runs]。给相对路径时按当前目录算
    #[arg(short = 'r', long = "run-dir", global = true, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// 多打点东西:subagent 正文、正常的工具结果、prompt 事件;启动前打一遍生效的凭证配置(token 只留前 4 位)
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,
    /// 启用工作台:run(流程没自带工作台时)和 once 上落在 <run_dir>/workbench/。go 恒有工作台(<workspace>/.flower/),写了会提示它在哪
    #[arg(short = 'W', long, global = true)]
    pub workbench: bool,
    /// resume 时把旧的大工具结果换成文件指针(裁剪)。go 上裁剪默认就开,关掉用 --no-trim
    #[arg(short = 'T', long, global = true)]
    pub trim: bool,
    /// 工具在哪里跑:docker = 每个 agent 一个容器;host = 直接在本机跑(只在你明确选择时);docker-remote = 不共享磁盘的引擎(CI 的 dind、远程机器),只配 --isolate
    #[arg(long, global = true, value_name = "WHERE", default_value = "docker", value_parser = SandboxKind::NAMES)]
    pub sandbox: String,
    /// agent 容器用的镜像 [env: FLOWERBOX_IMAGE]。不给就用按 image/ 内容哈希打标签的镜像,缺了先构建
    #[arg(long, global = true, value_name = "NAME")]
    pub image: Option<String>,
    /// agent 能连哪儿 [env: FLOWERBOX_EGRESS] [default: open]:open = 能上互联网,宿主机、内网和链路本地(云元数据)地址都不通;none = 只有 pod 里的回环;proxy = 只能经 pod 的过滤代理访问放行的域名
    #[arg(long, global = true, value_name = "MODE", value_parser = crate::sandbox::egress::EgressMode::NAMES)]
    pub egress: Option<String>,
    /// open/proxy 下照样放行的内网段,可以写多次 [env: FLOWERBOX_ALLOW_NET,逗号分隔],例如公司的包镜像 10.1.0.0/16。宿主机自己的地址永远不通
    #[arg(long = "allow-net", global = true, value_name = "CIDR")]
    pub allow_net: Vec<String>,
    /// proxy 下另外放行的域名,可以写多次 [env: FLOWERBOX_ALLOW_DOMAIN,逗号分隔]。example.com 只放它自己,*.example.com 放它的子域名;包仓库默认就放行
    #[arg(long = "allow-domain", global = true, value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// 同时最多跑几个执行者 [env: FLOWERBOX_MAX_WORKERS] [default: 按本机算:每核 2 个,且不超过内存按每个容器 4 GiB 装得下的个数]。多派的按顺序排队,协调者会知道
    #[arg(long = "max-workers", global = true, value_name = "N")]
    pub max_workers: Option<String>,
    /// 项目 MCP 服务器的额外配置文件(Claude Code 的 .mcp.json 格式),叠加在 <workspace>/.mcp.json 之上,同名的以它为准。stdio 服务器在 agent 自己的容器里跑
    #[arg(long = "mcp-config", global = true, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// MCP 配置里的 ${VAR} 可以取值的环境变量,可以写多次 [env: FLOWERBOX_MCP_ENV,逗号分隔]。没点名的变量一律不给;模型凭证永远不给
    #[arg(long = "mcp-env", global = true, value_name = "VAR")]
    pub mcp_env: Vec<String>,
    /// 插件目录(Claude Code 的插件格式:skills/、agents/、hooks/hooks.json、.mcp.json),可以写多次;<workspace>/.flowerbox/plugins/ 下的每个目录总会加载。钩子命令只在 agent 自己的容器里跑
    #[arg(long = "plugin-dir", global = true, value_name = "DIR")]
    pub plugin_dir: Vec<PathBuf>,
    /// 打印帮助
    #[arg(short = 'h', long, global = true, action = ArgAction::Help)]
    pub help: Option<bool>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum CommandArgs {
    /// 一键跑:问清需求 → 派人干活(不写子命令时的默认)
    #[command(disable_help_flag = true)]
    Go(GoArgs),
    /// 运行一个 workflow(流程文件:名字,例如 flows.toml:main)
    #[command(
        disable_help_flag = true,
        after_help = "流程文件的写法(每个顶层表一个流程,步骤、模板、isolate / window / handoff、when 条件、执行者的四段回话)见 README 的「Workflow files」一节;examples/flows.toml 是完整的例子。"
    )]
    Run(RunArgs),
    /// 跑一次单 agent
    #[command(disable_help_flag = true)]
    Once(OnceArgs),
    /// 配置凭证(API key / 网关 / 模型),写到 ~/.config/flower/.env
    #[command(disable_help_flag = true)]
    Setup,
    /// 检查这台机器能不能跑:Docker 引擎、agent 镜像、凭证
    #[command(disable_help_flag = true)]
    Doctor(DoctorArgs),
    /// 清理 flowerbox 运行留下的容器(有未合并工作的分支和 worktree 不动)
    #[command(disable_help_flag = true)]
    Gc(GcArgs),
}

/// `go`'s 12 switches (flower's 11 and `--check`) and its optional request.
#[derive(Debug, Args)]
pub struct GoArgs {
    /// 诉求正文。不给就在提示符上问(stdin 不是终端时读一行)
    #[arg(value_name = "ASK")]
    pub ask: Option<String>,
    /// 提问额度。-1 或任何负数 = 不限;0 = 不许提问;N = 硬额度
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub asks: i64,
    /// 干活的总轮数上限(不是额外轮数)。0 和 1 一样,都跑 1 轮
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        allow_negative_numbers = true
    )]
    pub rounds: i64,
    /// 关掉目标看守:不生成 目标.md、不做判定,干活跑完就算完
    #[arg(long)]
    pub no_goal: bool,
    /// 让判定者能跑命令(在只读挂载的容器里看真实产物和进程,改不了工作区)
    #[arg(long)]
    pub judge_can_run: bool,
    /// 等人回答多久(秒)。0 或负数 = 全自动,所有提问立刻落空
    #[arg(
        long,
        value_name = "秒",
        default_value_t = 1800.0,
        allow_negative_numbers = true
    )]
    pub timeout: f64,
    /// 每个 subagent 分一份 git worktree(隔离)。要求 workspace 是 git 仓库;工作台挪到仓库外
    #[arg(long)]
    pub isolate: bool,
    /// 模型上下文窗口(token)。不给时:认识的模型按模型目录,否则按服务端报的,再否则按模型名推(含 1m 或不含 haiku → 1,000,000;含 haiku → 200,000)。必须是正数
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub window: Option<i64>,
    /// 关掉换代(不写交接书换新会话);到 窗口 − 33000 改成压缩:较早的对话换成一段摘要
    #[arg(long)]
    pub no_handoff: bool,
    /// 这次别接上次:把上一段的 lineage.json、需求.md、目标.md 移进 notes/archive/<时间>/ 再从头开始
    #[arg(long)]
    pub new: bool,
    /// 只做前置确认,不往下干活
    #[arg(long)]
    pub clarify_only: bool,
    /// 关掉裁剪。go 上裁剪默认开,这是唯一的关闭方式
    #[arg(long)]
    pub no_trim: bool,
    /// 加一条检查:每轮判定前 flowerbox 在只读的现场上自己跑这条命令,退出码不是 0 就不能判达成。可以写多次
    #[arg(long = "check", value_name = "CMD")]
    pub checks: Vec<String>,
    /// 检查全过之后,在现场的副本里埋一个小缺陷再跑一遍检查,看它们抓不抓得住(不动现场)
    #[arg(long)]
    pub probe_checks: bool,
}

/// `run`'s target.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// 流程文件:名字。flows.toml:main 按文件路径找;flows:main 按名字找当前目录的 flows.toml
    #[arg(value_name = "TARGET")]
    pub target: String,
}

/// `once`'s 6 switches and its prompt.
#[derive(Debug, Args)]
pub struct OnceArgs {
    /// 给这个 agent 的话
    #[arg(value_name = "PROMPT")]
    pub prompt: String,
    /// 领域指令,叠加在系统提示词之后,不替换它
    #[arg(
        short = 'i',
        long,
        value_name = "TEXT",
        default_value = "",
        hide_default_value = true
    )]
    pub instructions: String,
    /// 逗号分隔的工具白名单 [default: Read,Glob,Grep 和项目 MCP 工具]。可用:Read Write Edit Bash Glob Grep WebFetch TodoWrite Agent。WebSearch 不可用:flowerbox 没有接搜索服务。项目 MCP 工具写 mcp__<服务器>__<工具>、mcp__<服务器>(它的全部工具)或 mcp__*(全部)
    #[arg(short = 't', long, value_name = "LIST")]
    pub tools: Option<String>,
    /// 权限模式。flowerbox 没有交互审批(工具都在白名单和沙箱里):plan = 只读,去掉 Write/Edit/Bash/Agent;其余三种照 -t 原样
    #[arg(short = 'p', long = "permission-mode", value_name = "MODE", default_value = "default", value_parser = PermissionMode::NAMES)]
    pub permission_mode: String,
    /// 美元预算上限,超了就停 [default: 无上限]
    #[arg(short = 'b', long, value_name = "USD", allow_negative_numbers = true)]
    pub budget: Option<f64>,
    /// 续跑某条已有会话
    #[arg(long, value_name = "SESSION_ID")]
    pub resume: Option<String>,
    /// 分叉而不是续跑(要配 --resume)
    #[arg(long, requires = "resume")]
    pub fork: bool,
}

/// `doctor`'s switches (none yet; its own issue adds them).
#[derive(Debug, Args, Default)]
pub struct DoctorArgs {}

/// `gc`'s switches (none yet; its own issue adds them).
#[derive(Debug, Args, Default)]
pub struct GcArgs {}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn parser_is_consistent() {
        Cli::command().debug_assert();
    }
}
