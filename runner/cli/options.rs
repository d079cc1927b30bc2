//! Validated options: the clap types of [`super::args`] become these in ONE place
//! ([`Options::resolve`]), with every field destructured so a new switch cannot be forgotten.
//! A command's switches resolve straight into the settings type of the layer that runs it
//! ([`GoSettings`], [`OnceSettings`], [`RunFileSettings`]), which borrows them: a new switch
//! is its clap field and its settings field, nothing copies it in between.
//!
//! Edge semantics (seed 000, "`go` 的 11 个开关", and DESIGN.md's deliberate differences):
//! `--rounds 0` ≡ 1, a negative `--rounds` is exit 2; `--image ''` is exit 2; `once ''` is
//! exit 1 like `go ''` without a request; any negative `--asks` = unlimited; any negative `--timeout` = 0 (fully
//! automatic); `--window` must be positive (flower ignored 0 silently; here it is exit 2);
//! `-T` with `--no-trim` on `go` is a contradiction (exit 2); `-r` defaults to
//! `<workspace>/runs`; `--isolate` needs the workspace to be a git repository (exit 1).

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::args::{
    Cli, CommandArgs, DoctorArgs, GcArgs, GlobalArgs, GoArgs, OnceArgs, PermissionMode, RunArgs,
    SandboxKind,
};
use super::egress::egress_policy;
use super::error::CliError;
use super::host::Host;
use super::target::{self, RunTarget, TargetError};
use crate::flow::once::OnceSettings;
use crate::flow::runfile::RunFileSettings;
use crate::flow::GoSettings;
use crate::isolate::IsolateError;
use crate::model::ToolName;
#[cfg(test)]
use crate::sandbox::egress::EgressMode;
use crate::sandbox::egress::EgressPolicy;

/// Tool names `once -t` accepts (the agent tool registry's names). `WebSearch` is refused: there
/// is no search provider.
pub const ONCE_TOOLS: [&str; 9] = [
    ToolName::Read.as_str(),
    ToolName::Write.as_str(),
    ToolName::Edit.as_str(),
    ToolName::Bash.as_str(),
    ToolName::Glob.as_str(),
    ToolName::Grep.as_str(),
    ToolName::WebFetch.as_str(),
    ToolName::TodoWrite.as_str(),
    ToolName::Agent.as_str(),
];

/// `once`'s tools without `-t`: flower's `Read,Glob,Grep`, and every project MCP tool.
pub const ONCE_DEFAULT_TOOLS: [&str; 4] = ["Read", "Glob", "Grep", crate::mcp::names::ALL];

/// The global switches, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalOptions {
    /// `-w`: absolute, symlinks resolved, created (`mkdir -p`).
    pub workspace: PathBuf,
    /// `-r`: absolute (lexically normalised), not created yet; `<workspace>/runs` by default,
    /// a relative `-r` is relative to the current directory.
    pub run_dir: PathBuf,
    /// The current directory at start.
    pub cwd: PathBuf,
    /// `-v`.
    pub verbose: bool,
    /// `-W` as given (see [`GoSettings::workbench`], [`RunFileSettings::workbench`]).
    pub workbench: bool,
    /// `-T` as given (see the per-command `trim`).
    pub trim: bool,
    /// `--sandbox`: where tools run.
    pub sandbox: SandboxKind,
    /// `--image`, else `$FLOWERBOX_IMAGE`; `None` = the runner's content-hashed agent image.
    pub image: Option<String>,
    /// `--egress`/`--allow-net`/`--allow-domain`, else `$FLOWERBOX_EGRESS`,
    /// `$FLOWERBOX_ALLOW_NET`, `$FLOWERBOX_ALLOW_DOMAIN` (process environment only: never a
    /// `.env` file, which an agent or a cloned repository could write).
    pub egress: EgressPolicy,
    /// `--max-workers`, else `$FLOWERBOX_MAX_WORKERS`: how many workers run at once; `None` =
    /// from the machine ([`crate::agent::fanout::default_max_workers`]). Positive.
    pub max_workers: Option<usize>,
    /// `--mcp-config`, `--mcp-env` (else `$FLOWERBOX_MCP_ENV`), `$MCP_TIMEOUT`,
    /// `$MCP_TOOL_TIMEOUT` (process environment only, like the egress settings).
    pub mcp: crate::mcp::McpSettings,
    /// `--plugin-dir` (absolute), in order.
    pub plugin_dirs: Vec<PathBuf>,
    /// Those that may be mounted read-only into agents' containers (`plugin::mountable`).
    pub plugin_mounts: Vec<PathBuf>,
    /// stdin is a terminal (prompts, interactive setup, probe, Ctrl-C handling).
    pub interactive: bool,
    /// `$FLOWERBOX_OBJECT_LIMIT`, `$FLOWERBOX_BRANCH_LIMIT`, `$FLOWERBOX_DISK_BUDGET` (process
    /// environment only, like the egress settings).
    pub bounds: super::bounds::Bounds,
}

/// `run`, resolved: the loaded target (named in errors, its file watched) and the workflow's
/// settings.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// The loaded target (file, name, table).
    pub target: RunTarget,
    /// What the workflow layer runs (`-W`, `-T` resolved into it).
    pub settings: RunFileSettings,
}

/// `doctor`, resolved (no switches yet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DoctorOptions {}

/// `gc`, resolved (no switches yet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcOptions {
    /// No `-w` was given: orphaned containers of every workspace go, not only those of the
    /// current directory (the worktree sweep still looks at the workspace's repository).
    pub every_workspace: bool,
}

/// One subcommand's options.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOptions {
    /// `go`: resolved straight into the workflow's settings.
    Go(GoSettings),
    /// `run`.
    Run(RunOptions),
    /// `once`: resolved straight into the agent's settings.
    Once(OnceSettings),
    /// `setup` (no options).
    Setup,
    /// `doctor`.
    Doctor(DoctorOptions),
    /// `gc`.
    Gc(GcOptions),
}

/// Everything the command line decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The global switches.
    pub global: GlobalOptions,
    /// The subcommand.
    pub command: CommandOptions,
}

impl Options {
    /// Validates and resolves parsed arguments. Creates the workspace; reads `run`'s target.
    ///
    /// Errors: [`CliError::Usage`] (exit 2) for refused values, [`CliError::Workspace`],
    /// [`CliError::Isolate`], [`CliError::Target`] (exit 1).
    pub fn resolve(cli: Cli, host: &Host) -> Result<Self, CliError> {
        let Cli { global, command } = cli;
        let workspace_given = global.workspace.is_some();
        // Only the commands that run agents make their workspace (`mkdir -p`, as flower);
        // `doctor`, `gc` and `setup` look at what is there and create nothing.
        let create = matches!(
            command,
            CommandArgs::Go(_) | CommandArgs::Run(_) | CommandArgs::Once(_)
        );
        let global = GlobalOptions::resolve(global, host, create)?;
        let command = match command {
            CommandArgs::Go(args) => CommandOptions::Go(go_settings(args, &global)?),
            CommandArgs::Run(args) => CommandOptions::Run(RunOptions::resolve(args, &global)?),
            CommandArgs::Once(args) => CommandOptions::Once(once_settings(args, &global)?),
            CommandArgs::Setup => CommandOptions::Setup,
            CommandArgs::Doctor(DoctorArgs {}) => CommandOptions::Doctor(DoctorOptions {}),
            CommandArgs::Gc(GcArgs {}) => CommandOptions::Gc(GcOptions {
                every_workspace: !workspace_given,
            }),
        };
        Ok(Self { global, command })
    }
}

impl GlobalOptions {
    fn resolve(args: GlobalArgs, host: &Host, create: bool) -> Result<Self, CliError> {
        let GlobalArgs {
            workspace,
            run_dir,
            verbose,
            workbench,
            trim,
            sandbox,
            image,
            egress,
            allow_net,
            allow_domain,
            max_workers,
            mcp_config,
            mcp_env,
            plugin_dir,
            help: _,
        } = args;
        let sandbox = SandboxKind::from_name(&sandbox)
            .ok_or_else(|| CliError::Usage(format!("--sandbox {sandbox} 不认识")))?;
        let workspace = normalize(&host.cwd.join(workspace.unwrap_or_else(|| ".".into())));
        let fail = |source| CliError::Workspace {
            path: workspace.clone(),
            source,
        };
        if create {
            std::fs::create_dir_all(&workspace).map_err(fail)?;
        } else if !workspace.is_dir() {
            return Err(CliError::NoWorkspace(workspace));
        }
        let workspace = workspace.canonicalize().map_err(fail)?;
        // The run directory is flowerbox's own: no symlink is followed beneath the workspace
        // (an agent may have planted one), the user's own ones elsewhere are resolved now.
        let run_dir = match run_dir {
            Some(dir) => {
                crate::fsroot::own::trusted_dir(&normalize(&host.cwd.join(dir)), &workspace)
            }
            None => crate::record::layout::default_run_dir(&workspace),
        };
        if image.as_deref().is_some_and(|i| i.trim().is_empty()) {
            return Err(CliError::Usage(
                "--image 是空的:要给镜像名(例如 --image ubuntu:24.04);想用默认镜像就别写 --image。"
                    .into(),
            ));
        }
        let image = image.or_else(|| {
            host.var("FLOWERBOX_IMAGE")
                .filter(|i| !i.trim().is_empty())
                .map(str::to_string)
        });
        let egress = egress_policy(egress, allow_net, allow_domain, sandbox, host)?;
        let max_workers = max_workers
            .or_else(|| host.var("FLOWERBOX_MAX_WORKERS").map(str::to_string))
            .map(|n| match n.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(CliError::Usage(format!(
                    "--max-workers {n} 不对:要一个正整数"
                ))),
            })
            .transpose()?;
        let mut mcp = super::mcp::mcp_settings(mcp_config, mcp_env, host)?;
        mcp.masked = vec![run_dir.clone()];
        if let Some(d) = plugin_dir.iter().find(|d| !host.cwd.join(d).is_dir()) {
            return Err(CliError::Usage(format!(
                "--plugin-dir {} 不是目录",
                d.display()
            )));
        }
        let home = host.var("HOME").map(PathBuf::from);
        let plugin_mounts: Vec<PathBuf> = plugin_dir
            .iter()
            .filter_map(|d| {
                crate::plugin::mountable(&host.cwd.join(d), home.as_deref(), &workspace)
            })
            .collect();
        let plugin_dirs: Vec<PathBuf> = plugin_dir
            .iter()
            .map(|d| normalize(&host.cwd.join(d)))
            .collect();
        // The plugins' MCP servers join the project's (their other problems are said with the
        // plugins').
        mcp.plugin_files =
            crate::plugin::roots(&workspace, &plugin_dirs, &mcp.masked, &mut Vec::new())
                .into_iter()
                .map(|r| r.join(crate::mcp::config::PROJECT_FILE))
                .collect();
        Ok(Self {
            workspace,
            run_dir,
            cwd: host.cwd.clone(),
            verbose,
            workbench,
            trim,
            sandbox,
            image,
            egress,
            max_workers,
            mcp,
            plugin_dirs,
            plugin_mounts,
            interactive: host.stdin_is_terminal,
            bounds: super::bounds::bounds(host)?,
        })
    }
}

/// `go`'s switches, validated, as the workflow's settings (the one copy of them).
fn go_settings(args: GoArgs, global: &GlobalOptions) -> Result<GoSettings, CliError> {
    let GoArgs {
        ask,
        asks,
        rounds,
        no_goal,
        judge_can_run,
        timeout,
        isolate,
        window,
        no_handoff,
        new,
        clarify_only,
        no_trim,
        checks,
        probe_checks,
    } = args;
    if global.trim && no_trim {
        return Err(CliError::Usage(
            "-T/--trim 和 --no-trim 矛盾:go 上裁剪默认就开,要关只写 --no-trim。".into(),
        ));
    }
    if rounds < 0 {
        return Err(CliError::Usage(format!(
            "--rounds {rounds} 不行:轮数要是不小于 0 的整数(0 和 1 一样,都跑 1 轮)。"
        )));
    }
    let window = match window {
        None => None,
        Some(w) if w > 0 => Some(w as u64),
        Some(w) => {
            return Err(CliError::Usage(format!(
            "--window {w} 不行:上下文窗口要是正整数(token 数)。想用模型自己的窗口就别写 --window。"
        )))
        }
    };
    // Like `git rev-parse`: a directory inside a repository's work tree is in a repository
    // (the isolation maps it into each worktree). Other refusals (bare, unborn, an unknown
    // extension) come later with their own message.
    if isolate
        && matches!(git2::Repository::discover(&global.workspace),
                        Err(ref e) if e.code() == git2::ErrorCode::NotFound)
    {
        return Err(CliError::Isolate(IsolateError::NotARepository(
            global.workspace.clone(),
        )));
    }
    // An engine without this machine's disk holds the repository in its volumes: only an
    // isolated run brings its work back (through the integration).
    if global.sandbox == SandboxKind::DockerRemote && !isolate {
        return Err(CliError::Failed(
            crate::flow::drive::ENGINE_NEEDS_ISOLATE.into(),
        ));
    }
    if !checks.is_empty() && no_goal {
        return Err(CliError::Usage(
            "--check 和 --no-goal 矛盾:检查在每轮判定前跑,没有目标就没有判定。".into(),
        ));
    }
    if probe_checks && no_goal {
        return Err(CliError::Usage(
            "--probe-checks 和 --no-goal 矛盾:探针跟在每轮判定前的检查后面,没有目标就没有判定。"
                .into(),
        ));
    }
    if let Some(blank) = checks.iter().position(|c| c.trim().is_empty()) {
        return Err(CliError::Usage(format!(
            "第 {} 个 --check 是空的:要写一条命令,例如 --check 'make test'。",
            blank + 1
        )));
    }
    Ok(GoSettings {
        ask: ask.filter(|a| !a.trim().is_empty()),
        asks: u64::try_from(asks).ok(),
        rounds: u32::try_from(rounds.max(1)).unwrap_or(u32::MAX),
        goal: !no_goal,
        judge_can_run,
        timeout: seconds(timeout, "--timeout")?,
        isolate,
        window,
        handoff: !no_handoff,
        new,
        clarify_only,
        checks,
        probe_checks,
        trim: !no_trim,
        workbench: crate::agent::Workbench::locate(&global.workspace, isolate),
    })
}

impl RunOptions {
    fn resolve(args: RunArgs, global: &GlobalOptions) -> Result<Self, CliError> {
        let RunArgs { target } = args;
        let target = target::resolve(
            &target,
            &global.cwd,
            &global.workspace,
            std::slice::from_ref(&global.run_dir),
        )?;
        let workbench = global.workbench.then(|| global.run_dir.join("workbench"));
        // The whole declaration is checked here, before the credentials: a mistake in the
        // file costs no setup round and no probe (the run loads it again; loading is pure).
        if let Err(e) =
            crate::flow::declarative::load(&target.workflow, &global.workspace, workbench.clone())
        {
            return Err(TargetError::declared(&target, e).into());
        }
        let settings = RunFileSettings {
            name: target.name.clone(),
            table: target.workflow.clone(),
            workbench,
            trim: global.trim,
        };
        Ok(Self { target, settings })
    }
}

/// `once`'s switches, validated, as the agent's settings. There is no interactive approval in
/// flowerbox (every tool is whitelisted and sandboxed), so `default`, `acceptEdits` and
/// `bypassPermissions` run the `-t` tools as given; `plan` means "change nothing".
fn once_settings(args: OnceArgs, global: &GlobalOptions) -> Result<OnceSettings, CliError> {
    let OnceArgs {
        prompt,
        instructions,
        tools,
        permission_mode,
        budget,
        resume,
        fork,
    } = args;
    let budget_usd = match budget {
        Some(b) if b.is_nan() || b < 0.0 => {
            return Err(CliError::Usage(format!(
                "-b/--budget {b} 不行:预算要是不小于 0 的美元数。"
            )))
        }
        other => other,
    };
    let permission_mode = PermissionMode::from_name(&permission_mode)
        .ok_or_else(|| CliError::Usage(format!("-p {permission_mode} 不认识")))?;
    if prompt.trim().is_empty() {
        return Err(CliError::EmptyOncePrompt);
    }
    let change_nothing = match permission_mode {
        PermissionMode::Plan => true,
        PermissionMode::Default
        | PermissionMode::AcceptEdits
        | PermissionMode::BypassPermissions => false,
    };
    Ok(OnceSettings {
        prompt,
        instructions,
        tools: match tools {
            Some(list) => parse_tools(&list)?,
            None => ONCE_DEFAULT_TOOLS.map(String::from).to_vec(),
        },
        change_nothing,
        budget_usd,
        resume,
        fork,
        workbench: global.workbench.then(|| global.run_dir.join("workbench")),
        trim: global.trim,
    })
}

/// `-t`'s comma list: trimmed, empties dropped, duplicates dropped, names checked.
fn parse_tools(list: &str) -> Result<Vec<String>, CliError> {
    let mut tools: Vec<String> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "WebSearch" {
            return Err(CliError::Usage(
                "-t 里的 WebSearch 不可用:flowerbox 没有接搜索服务(WebFetch 可以抓给定的网址)。"
                    .into(),
            ));
        }
        if !ONCE_TOOLS.contains(&name) && !crate::mcp::names::is_entry(name) {
            return Err(CliError::Usage(format!(
                "-t 里的 {name} 不是工具。可用:{},以及项目 MCP 工具 mcp__<服务器>__<工具>、mcp__<服务器>、mcp__*",
                ONCE_TOOLS.join(",")
            )));
        }
        if !tools.iter().any(|t| t == name) {
            tools.push(name.to_string());
        }
    }
    Ok(tools)
}

/// Seconds as a duration: negative → zero, infinite → `Duration::MAX`, NaN refused.
fn seconds(value: f64, switch: &str) -> Result<Duration, CliError> {
    if value.is_nan() {
        return Err(CliError::Usage(format!("{switch} 要是秒数,不能是 NaN。")));
    }
    Ok(Duration::try_from_secs_f64(value.max(0.0)).unwrap_or(Duration::MAX))
}

/// Removes `.` and resolves `..` lexically (the path may not exist yet).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::BTreeMap;

    struct Env {
        _tmp: tempfile::TempDir,
        host: Host,
    }

    fn env() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let cwd = tmp.path().canonicalize().unwrap();
        Env {
            host: Host {
                vars: BTreeMap::new(),
                cwd,
                stdin_is_terminal: false,
            },
            _tmp: tmp,
        }
    }

    fn resolve(host: &Host, args: &[&str]) -> Result<Options, CliError> {
        let cli = Cli::try_parse_from(std::iter::once("flowerbox").chain(args.iter().copied()))?;
        Options::resolve(cli, host)
    }

    fn go(host: &Host, args: &[&str]) -> GoSettings {
        match resolve(host, args).unwrap().command {
            CommandOptions::Go(g) => g,
            other => panic!("{other:?}"),
        }
    }

    fn usage(host: &Host, args: &[&str]) -> String {
        match resolve(host, args) {
            Err(e) => {
                assert_eq!(e.exit_code(), 2, "{e}");
                e.to_string()
            }
            Ok(o) => panic!("accepted: {o:?}"),
        }
    }

    #[test]
    fn check_is_repeatable_and_needs_a_goal_and_a_command() {
        let e = env();
        let g = go(
            &e.host,
            &["go", "--check", "make test", "--check", "./t -q", "x"],
        );
        assert_eq!(g.checks, ["make test", "./t -q"]);
        assert!(go(&e.host, &["go"]).checks.is_empty());
        assert!(usage(&e.host, &["go", "--no-goal", "--check", "make"]).contains("--no-goal"));
        assert!(usage(&e.host, &["go", "--check", "make", "--check", " "]).contains("第 2 个"));
    }

    #[test]
    fn probe_checks_is_off_by_default_and_needs_a_goal() {
        let e = env();
        assert!(!go(&e.host, &["go"]).probe_checks);
        assert!(go(&e.host, &["go", "--probe-checks", "x"]).probe_checks);
        let said = usage(&e.host, &["go", "--no-goal", "--probe-checks"]);
        assert!(said.contains("--probe-checks 和 --no-goal 矛盾"), "{said}");
    }

    #[test]
    fn go_defaults() {
        let e = env();
        let g = go(&e.host, &["go"]);
        assert_eq!(g.ask, None);
        assert_eq!(g.asks, None);
        assert_eq!(g.rounds, 3);
        assert!(g.goal && g.handoff && g.trim);
        assert!(!g.judge_can_run && !g.isolate && !g.new && !g.clarify_only);
        assert_eq!(g.timeout, Duration::from_secs(1800));
        assert_eq!(g.window, None);
        assert_eq!(g.workbench, e.host.cwd.join(".flower"));
    }

    #[test]
    fn doctor_and_gc_refuse_a_missing_workspace_and_create_nothing() {
        let e = env();
        for args in [
            ["gc", "-w", "missing"],
            ["doctor", "-w", "missing"],
            ["setup", "-w", "missing"],
        ] {
            let err = resolve(&e.host, &args).unwrap_err();
            assert!(matches!(err, CliError::NoWorkspace(_)), "{err}");
            assert_eq!(err.exit_code(), 1);
            assert_eq!(
                err.to_string(),
                format!("工作目录 {} 不存在", e.host.cwd.join("missing").display())
            );
            assert!(!e.host.cwd.join("missing").exists(), "{args:?}");
        }
        // The commands that run agents make it, as flower does.
        assert!(resolve(&e.host, &["once", "-w", "made", "hi"]).is_ok());
        assert!(e.host.cwd.join("made").is_dir());
    }

    #[test]
    fn gc_without_w_looks_at_every_workspace() {
        let e = env();
        std::fs::create_dir(e.host.cwd.join("sub")).unwrap();
        let gc = |args: &[&str]| match resolve(&e.host, args).unwrap().command {
            CommandOptions::Gc(g) => g,
            other => panic!("{other:?}"),
        };
        assert!(gc(&["gc"]).every_workspace);
        assert!(!gc(&["gc", "-w", "."]).every_workspace);
        assert!(!gc(&["-w", "sub", "gc"]).every_workspace);
    }

    #[test]
    fn go_edge_values() {
        let e = env();
        assert_eq!(go(&e.host, &["go", "--rounds", "0"]).rounds, 1);
        assert_eq!(go(&e.host, &["go", "--rounds", "1"]).rounds, 1);
        usage(&e.host, &["go", "--rounds=-4"]);
        usage(&e.host, &["go", "--rounds", "-1"]);
        assert_eq!(go(&e.host, &["go", "--asks", "-7"]).asks, None);
        assert_eq!(go(&e.host, &["go", "--asks", "0"]).asks, Some(0));
        assert_eq!(go(&e.host, &["go", "--asks", "5"]).asks, Some(5));
        let auto = go(&e.host, &["go", "--timeout", "-3.5"]);
        assert!(auto.fully_automatic());
        assert!(go(&e.host, &["go", "--timeout", "0"]).fully_automatic());
        assert_eq!(
            go(&e.host, &["go", "--timeout", "2.5"]).timeout,
            Duration::from_millis(2500)
        );
        assert_eq!(
            go(&e.host, &["go", "--timeout", "inf"]).timeout,
            Duration::MAX
        );
        assert_eq!(
            go(&e.host, &["go", "--window", "200000"]).window,
            Some(200_000)
        );
        assert_eq!(go(&e.host, &["go", "   "]).ask, None);
        assert_eq!(go(&e.host, &["go", "做 X"]).ask.as_deref(), Some("做 X"));
        let flags = go(
            &e.host,
            &[
                "go",
                "--no-goal",
                "--judge-can-run",
                "--no-handoff",
                "--new",
                "--clarify-only",
                "--no-trim",
            ],
        );
        assert!(!flags.goal && flags.judge_can_run && !flags.handoff);
        assert!(flags.new && flags.clarify_only && !flags.trim);
    }

    #[test]
    fn refused_values_exit_2() {
        let e = env();
        let m = usage(&e.host, &["go", "--window", "0"]);
        assert!(m.starts_with("--window 0 不行"), "{m}");
        assert!(usage(&e.host, &["go", "--window", "-1"]).contains("--window -1"));
        assert!(usage(&e.host, &["-T", "go", "--no-trim"]).contains("--no-trim"));
        assert!(usage(&e.host, &["go", "--timeout", "NaN"]).contains("NaN"));
        usage(&e.host, &["once", "hi", "-p", "sudo"]);
        usage(&e.host, &["once", "hi", "--fork"]);
        usage(&e.host, &["once", "hi", "-b", "-1"]);
        assert!(usage(&e.host, &["once", "hi", "-t", "Read,WebSearch"]).contains("搜索服务"));
        assert!(usage(&e.host, &["once", "hi", "-t", "Nope"]).contains("Nope"));
        usage(&e.host, &["go", "--bogus"]);
        usage(&e.host, &["run"]);
        usage(&e.host, &["once"]);
    }

    #[test]
    fn trim_switch_agrees_with_go_default() {
        let e = env();
        assert!(go(&e.host, &["-T", "go"]).trim);
    }

    #[test]
    fn workspace_is_created_and_run_dir_follows_it() {
        let e = env();
        let o = resolve(&e.host, &["-w", "a/b/../c", "go"]).unwrap();
        let ws = e.host.cwd.join("a/c");
        assert!(ws.is_dir());
        assert_eq!(o.global.workspace, ws);
        assert_eq!(o.global.run_dir, ws.join("runs"));
        // An explicit relative -r is relative to the current directory, not the workspace.
        let o = resolve(&e.host, &["-w", "a/c", "-r", "./state/../r2", "go"]).unwrap();
        assert_eq!(o.global.run_dir, e.host.cwd.join("r2"));
        let o = resolve(&e.host, &["go", "-r", "/abs/runs"]).unwrap();
        assert_eq!(o.global.run_dir, PathBuf::from("/abs/runs"));
    }

    #[test]
    fn sandbox_and_image() {
        let mut e = env();
        let o = resolve(&e.host, &["go"]).unwrap().global;
        assert_eq!((o.sandbox, o.image), (SandboxKind::Docker, None));
        e.host
            .vars
            .insert("FLOWERBOX_IMAGE".into(), "from-env:1".into());
        let o = resolve(&e.host, &["--sandbox", "host", "go"])
            .unwrap()
            .global;
        assert_eq!(o.sandbox, SandboxKind::Host);
        assert_eq!(o.image.as_deref(), Some("from-env:1"));
        let o = resolve(&e.host, &["go", "--image=given:2"]).unwrap().global;
        assert_eq!(o.image.as_deref(), Some("given:2"));
        usage(&e.host, &["--sandbox", "vm", "go"]);
        usage(&e.host, &["go", "--image="]);
        usage(&e.host, &["--image", " ", "go"]);
        // An empty variable is unset, as for every other variable.
        e.host.vars.insert("FLOWERBOX_IMAGE".into(), "".into());
        assert_eq!(resolve(&e.host, &["go"]).unwrap().global.image, None);
    }

    #[test]
    fn max_workers_from_the_switch_else_the_environment_and_positive() {
        let mut e = env();
        assert_eq!(resolve(&e.host, &["go"]).unwrap().global.max_workers, None);
        e.host
            .vars
            .insert("FLOWERBOX_MAX_WORKERS".into(), "3".into());
        assert_eq!(
            resolve(&e.host, &["go"]).unwrap().global.max_workers,
            Some(3)
        );
        let o = resolve(&e.host, &["--max-workers", "1", "go"]).unwrap();
        assert_eq!(o.global.max_workers, Some(1));
        usage(&e.host, &["--max-workers", "0", "go"]);
        usage(&e.host, &["go", "--max-workers=-2"]);
        e.host
            .vars
            .insert("FLOWERBOX_MAX_WORKERS".into(), "many".into());
        usage(&e.host, &["go"]);
    }

    #[test]
    fn egress_from_switches_else_the_environment_and_refused_when_it_cannot_hold() {
        let mut e = env();
        let o = resolve(&e.host, &["go"]).unwrap().global;
        assert_eq!(o.egress, EgressPolicy::default());
        assert_eq!(o.egress.mode, EgressMode::Open);
        let o = resolve(
            &e.host,
            &[
                "--egress",
                "proxy",
                "go",
                "--allow-domain",
                "*.Corp.example",
                "--allow-net=10.1.2.3/16",
                "--allow-net",
                "192.168.7.7",
            ],
        )
        .unwrap()
        .global;
        assert_eq!(o.egress.mode, EgressMode::Proxy);
        let nets: Vec<String> = o.egress.allow_nets.iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["10.1.0.0/16", "192.168.7.7/32"]);
        assert_eq!(o.egress.allow_domains[0].to_string(), "*.corp.example");
        e.host.vars.insert("FLOWERBOX_EGRESS".into(), "none".into());
        let o = resolve(&e.host, &["go"]).unwrap().global;
        assert_eq!(o.egress.mode, EgressMode::None);
        let o = resolve(&e.host, &["--egress", "open", "go"])
            .unwrap()
            .global;
        assert_eq!(o.egress.mode, EgressMode::Open, "the switch wins");
        e.host.vars.insert(
            "FLOWERBOX_ALLOW_NET".into(),
            "10.0.0.0/8, 172.20.0.0/16".into(),
        );
        let m = usage(&e.host, &["go"]);
        assert!(
            m.contains("--egress none 矛盾") && m.contains("FLOWERBOX_ALLOW_NET"),
            "{m}"
        );
        let o = resolve(&e.host, &["--egress", "open", "go"])
            .unwrap()
            .global;
        assert_eq!(o.egress.allow_nets.len(), 2);
        e.host.vars.clear();
        assert!(usage(&e.host, &["go", "--allow-domain", "pypi.org"]).contains("--egress proxy"));
        assert!(usage(&e.host, &["go", "--allow-net", "nonsense"]).contains("nonsense"));
        assert!(usage(
            &e.host,
            &["--egress", "proxy", "go", "--allow-domain", "1.2.3.4"]
        )
        .contains("不是域名"));
        usage(&e.host, &["--egress", "everything", "go"]);
        let m = usage(&e.host, &["--sandbox", "host", "--egress", "none", "go"]);
        assert!(m.contains("--sandbox host"), "{m}");
        e.host
            .vars
            .insert("FLOWERBOX_EGRESS".into(), "sometimes".into());
        assert!(usage(&e.host, &["go"]).contains("FLOWERBOX_EGRESS"));
    }

    #[test]
    fn isolate_needs_a_repository() {
        let e = env();
        let err = resolve(&e.host, &["go", "--isolate"]).unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(matches!(
            err,
            CliError::Isolate(IsolateError::NotARepository(ref p)) if *p == e.host.cwd
        ));
        git2::Repository::init(e.host.cwd.join("repo")).unwrap();
        let g = go(&e.host, &["-w", "repo", "go", "--isolate"]);
        assert!(g.isolate);
        assert_eq!(g.workbench, e.host.cwd.join(".flower-repo"));
        // A subdirectory of a repository is in it (`cd repo/sub/dir && flowerbox --isolate`).
        std::fs::create_dir_all(e.host.cwd.join("repo/sub/dir")).unwrap();
        let g = go(&e.host, &["-w", "repo/sub/dir", "go", "--isolate"]);
        assert!(g.isolate);
        assert_eq!(g.workbench, e.host.cwd.join("repo/sub/.flower-dir"));
    }

    #[test]
    fn docker_remote_runs_isolated_only() {
        let e = env();
        git2::Repository::init(e.host.cwd.join("repo")).unwrap();
        let o = resolve(
            &e.host,
            &[
                "--sandbox",
                "docker-remote",
                "-w",
                "repo",
                "go",
                "--isolate",
            ],
        )
        .unwrap()
        .global;
        assert_eq!(o.sandbox, SandboxKind::DockerRemote);
        let err =
            resolve(&e.host, &["--sandbox", "docker-remote", "-w", "repo", "go"]).unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert_eq!(err.to_string(), crate::flow::drive::ENGINE_NEEDS_ISOLATE);
    }

    #[test]
    fn once_options() {
        let e = env();
        let o = resolve(&e.host, &["-W", "once", "hi"]).unwrap();
        let CommandOptions::Once(once) = o.command else {
            panic!()
        };
        // flower's three, and the project's MCP tools (sandboxed like Bash).
        assert_eq!(once.tools, ["Read", "Glob", "Grep", "mcp__*"]);
        assert!(!once.change_nothing);
        assert_eq!(once.budget_usd, None);
        assert_eq!(once.instructions, "");
        assert_eq!(once.workbench, Some(e.host.cwd.join("runs/workbench")));
        let o = resolve(
            &e.host,
            &[
                "once",
                "hi",
                "-t",
                " Bash, Read,,Bash ",
                "-p",
                "acceptEdits",
                "-b",
                "0.5",
                "--resume",
                "s1",
                "--fork",
                "-i",
                "be brief",
            ],
        )
        .unwrap();
        let CommandOptions::Once(once) = o.command else {
            panic!()
        };
        assert_eq!(once.tools, ["Bash", "Read"]);
        assert!(!once.change_nothing);
        assert_eq!(once.budget_usd, Some(0.5));
        assert_eq!(once.resume.as_deref(), Some("s1"));
        assert!(once.fork);
        assert_eq!(once.instructions, "be brief");
        assert_eq!(once.workbench, None);
        for (mode, change_nothing) in [
            ("default", false),
            ("plan", true),
            ("bypassPermissions", false),
        ] {
            let CommandOptions::Once(once) = resolve(&e.host, &["once", "hi", "-p", mode])
                .unwrap()
                .command
            else {
                panic!()
            };
            assert_eq!(once.change_nothing, change_nothing, "{mode}");
        }
        // An explicitly empty list is an empty whitelist (flower's `-t ''` too: nothing is
        // pre-approved), not the default three: the agent only answers.
        for empty in ["", " , "] {
            let CommandOptions::Once(once) = resolve(&e.host, &["once", "hi", "-t", empty])
                .unwrap()
                .command
            else {
                panic!()
            };
            assert!(once.tools.is_empty(), "{empty:?}: {:?}", once.tools);
        }
    }

    #[test]
    fn once_accepts_mcp_names_and_the_mcp_switches_are_checked() {
        let e = env();
        let CommandOptions::Once(once) = resolve(
            &e.host,
            &["once", "hi", "-t", "Read,mcp__db__query,mcp__docs,mcp__*"],
        )
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(
            once.tools,
            ["Read", "mcp__db__query", "mcp__docs", "mcp__*"]
        );
        for bad in ["mcp__human__ask", "mcp__", "mcp__a b"] {
            let err = resolve(&e.host, &["once", "hi", "-t", bad]).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
        let o = resolve(
            &e.host,
            &[
                "--mcp-config",
                "extra.json",
                "--mcp-env",
                "DOCS_TOKEN",
                "once",
                "hi",
            ],
        )
        .unwrap();
        assert_eq!(
            o.global.mcp.config_file,
            Some(e.host.cwd.join("extra.json"))
        );
        assert_eq!(o.global.mcp.env_allow, ["DOCS_TOKEN"]);
        for bad in [["--mcp-env", "ANTHROPIC_API_KEY"], ["--mcp-env", "A-B"]] {
            let err = resolve(&e.host, &[bad[0], bad[1], "once", "hi"]).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn plugin_dirs_repeat_are_made_absolute_and_must_be_directories() {
        let e = env();
        std::fs::create_dir_all(e.host.cwd.join("p1")).unwrap();
        std::fs::create_dir_all(e.host.cwd.join("p2")).unwrap();
        let o = resolve(
            &e.host,
            &["--plugin-dir", "p1", "--plugin-dir", "p2", "once", "hi"],
        )
        .unwrap();
        assert_eq!(
            o.global.plugin_dirs,
            [e.host.cwd.join("p1"), e.host.cwd.join("p2")]
        );
        // Their .mcp.json files join the MCP configuration.
        assert!(o
            .global
            .mcp
            .plugin_files
            .contains(&e.host.cwd.join("p1/.mcp.json")));
        let err = resolve(&e.host, &["--plugin-dir", "nowhere", "once", "hi"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn run_resolves_its_target_against_cwd() {
        let e = env();
        std::fs::write(
            e.host.cwd.join("flows.toml"),
            "[main]\n[[main.steps]]\nname = \"a\"\nrole = \"worker\"\nprompt = \"x\"\n",
        )
        .unwrap();
        let o = resolve(&e.host, &["-W", "run", "flows:main"]).unwrap();
        let CommandOptions::Run(run) = o.command else {
            panic!()
        };
        assert_eq!(run.target.file, e.host.cwd.join("flows.toml"));
        assert_eq!(
            run.settings.workbench,
            Some(e.host.cwd.join("runs/workbench"))
        );
        let err = resolve(&e.host, &["run", "flows"]).unwrap_err();
        assert_eq!(err.exit_code(), 1);
        // The declaration is checked here, before any credential is looked up.
        std::fs::write(e.host.cwd.join("flows.toml"), "[main]\n").unwrap();
        let err = resolve(&e.host, &["run", "flows:main"]).unwrap_err();
        assert!(
            matches!(err, CliError::Target(TargetError::Import { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn globals_work_after_the_subcommand() {
        let e = env();
        let o = resolve(&e.host, &["once", "hi", "-v", "-w", "sub"]).unwrap();
        assert!(o.global.verbose);
        assert_eq!(o.global.workspace, e.host.cwd.join("sub"));
    }

    #[test]
    fn a_repeated_switch_keeps_its_last_value() {
        // flower (argparse) keeps the last value; aliases and wrappers rely on it.
        let e = env();
        let g = go(&e.host, &["go", "--timeout", "0", "x", "--timeout", "5"]);
        assert_eq!(g.timeout, std::time::Duration::from_secs(5));
        let g = go(
            &e.host,
            &[
                "go", "--rounds", "2", "--rounds", "7", "--new", "--new", "x",
            ],
        );
        assert_eq!(g.rounds, 7);
        let o = resolve(
            &e.host,
            &["-w", "a", "once", "hi", "-w", "b", "-b", "1", "-b", "2"],
        )
        .unwrap();
        assert_eq!(o.global.workspace, e.host.cwd.join("b"));
        // Repeatable switches still collect every value.
        let g = go(&e.host, &["go", "--check", "a", "--check", "b", "x"]);
        assert_eq!(g.checks.len(), 2);
    }
}
