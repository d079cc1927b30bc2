//! The seam between the command line and the rest of flowerbox: one function per subcommand
//! that needs the runtime. The command line calls these after parsing, validation, the
//! credential gates and (for `go`) the wake probe and the start prompt; each turns the options
//! into the run's settings ([`super::services`]: frontend, sandbox backend, model
//! configuration), calls the workflow layer and maps its outcome to an exit status.
//!
//! Contract for every function here:
//! - the options are validated (see [`super::options`]); the workspace exists; `run_dir` is
//!   created and `<run_dir>/flowerbox.log` receives `tracing` output;
//! - `creds` passed the gates (token present; probed when on a terminal) — the model provider
//!   is built from [`Credentials::get`] when the run's services are;
//! - return `Ok(ExitStatus::Success)` (0), `Ok(ExitStatus::Interrupted)` (130, second Ctrl-C),
//!   `Ok(ExitStatus::Signalled(sig))` (SIGHUP/SIGTERM after recording the in-flight step), or an
//!   `Err(CliError)` whose message is printed on stderr with exit code 1 (e.g. a step that
//!   stopped the run, [`crate::flow::FlowError::StepAborted`]). Never print a backtrace; never
//!   exit the process yourself.

use std::io::Write;

use super::error::{CliError, ExitStatus};
use super::options::{DoctorOptions, GcOptions, GlobalOptions, RunOptions};
use super::services::{frontend, run_settings, sandbox_backend};
use super::target::TargetError;
use crate::creds::Credentials;
use crate::flow::once::OnceSettings;
use crate::flow::wake::WakeState;
use crate::flow::{FlowError, GoSettings, RunEnd};
use crate::term::PlainFrontend;

/// How a run ended, as the process ends.
fn status(end: RunEnd) -> ExitStatus {
    match end {
        RunEnd::Finished => ExitStatus::Success,
        RunEnd::Interrupted => ExitStatus::Interrupted,
        RunEnd::Signalled(sig) => ExitStatus::Signalled(sig),
    }
}

/// The settings of a `go`, `run` or `once` (nothing opened yet).
///
/// Errors: a setting the run cannot use (an MCP configuration that does not load).
pub fn settings(
    globals: &GlobalOptions,
    creds: &Credentials,
) -> Result<crate::flow::RunSettings, CliError> {
    run_settings(globals, creds)
}

/// Opens the sandbox backend's run: called before the log opens, so a start the engine cannot
/// serve (Docker down, a bad `DOCKER_HOST`) writes nothing — no `runs/`, no workbench (issue
/// 29 §2.9) — when the run's agents will run commands (`demand`); a run whose agents cannot
/// does not touch the engine at all (issue 32 §1).
///
/// Errors: the backend cannot serve the run.
pub async fn open(
    settings: crate::flow::RunSettings,
    demand: crate::sandbox::Demand,
) -> Result<crate::flow::RunSettings, CliError> {
    Ok(settings.open_sandboxes(demand).await?)
}

/// `flowerbox go`: build the clarify → goal → work (+ judge per round) workflow and run it.
/// `opts.ask` is the request, or `None` to continue a woken directory; `opts.new` asks to
/// archive the previous run (`lineage.json`, `需求.md`, `目标.md` into
/// `notes/archive/<YYYYmmdd-HHMMSS>/`) before starting. `wake` is the directory's wake probe,
/// the one the start prompt was decided by. `settings` come from [`open`].
pub async fn go(
    opts: GoSettings,
    globals: GlobalOptions,
    settings: crate::flow::RunSettings,
    wake: WakeState,
) -> Result<ExitStatus, CliError> {
    let end = crate::flow::starter::go(&settings, &opts, wake, frontend(&globals)).await?;
    Ok(status(end))
}

/// `flowerbox run TARGET`, loaded: the target and what its table declares.
pub struct LoadedRun {
    target: super::target::RunTarget,
    run: crate::flow::runfile::RunFileSettings,
    declared: crate::flow::declarative::Declared,
}

/// Loads `run`'s workflow (the named table of the workflow file) before anything opens. A table
/// that does not declare a workflow is flower's import failure, `导入 '<FILE>' 失败:<what,
/// naming the step and field>` (exit 1).
pub fn load_run(
    opts: RunOptions,
    settings: &crate::flow::RunSettings,
) -> Result<LoadedRun, CliError> {
    let RunOptions {
        target,
        settings: run,
    } = opts;
    match crate::flow::runfile::load(settings, &run) {
        Ok(declared) => Ok(LoadedRun {
            target,
            run,
            declared,
        }),
        Err(FlowError::Declared(e)) => Err(TargetError::declared(&target, e).into()),
        Err(e) => Err(e.into()),
    }
}

/// `flowerbox run TARGET`: run the workflow [`load_run`] loaded with default go-switch values.
/// `settings` come from [`open`].
pub async fn run(
    loaded: LoadedRun,
    globals: GlobalOptions,
    mut settings: crate::flow::RunSettings,
) -> Result<ExitStatus, CliError> {
    let LoadedRun {
        target,
        run,
        declared,
    } = loaded;
    settings
        .watched
        .push(super::services::watched_workflow(&target.file));
    let end = crate::flow::runfile::run(&settings, &run, declared, frontend(&globals)).await?;
    Ok(status(end))
}

/// `flowerbox once PROMPT`: one agent named `ad-hoc`, no workflow, no verdict, no human
/// (questions time out at once). Plain output, also on a terminal. `settings` come from
/// [`open`], checked by [`check_once`] before.
pub async fn once(
    opts: OnceSettings,
    globals: GlobalOptions,
    settings: crate::flow::RunSettings,
) -> Result<ExitStatus, CliError> {
    let plain = std::sync::Arc::new(PlainFrontend::stdout(globals.verbose));
    let end = crate::flow::once::once(&settings, &opts, plain).await?;
    Ok(status(end))
}

/// What `once` checks before anything opens: every `-t mcp__…` entry names a configured server.
///
/// Errors: [`CliError::Usage`] naming the entry.
pub fn check_once(
    opts: &OnceSettings,
    settings: &crate::flow::RunSettings,
) -> Result<(), CliError> {
    super::services::check_mcp_entries(&opts.tools, &settings.mcp_servers)
}

/// `flowerbox doctor`: check the sandbox backend (`--sandbox`; Docker: the engine, the agent
/// image), the workspace and the credentials. `creds` is the chain's result WITHOUT the gates
/// (it may lack a token; report that, do not fail on it).
pub async fn doctor(
    opts: DoctorOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    let DoctorOptions {} = opts;
    let input = crate::sandbox::doctor::DoctorInput {
        workspace: globals.workspace.clone(),
        credential_names: creds.names(),
        egress: globals.egress.clone(),
    };
    let backend = sandbox_backend(&globals);
    let mut checks = crate::sandbox::doctor::doctor(backend.as_ref(), &input).await;
    checks.extend(
        crate::mcp::doctor::checks(
            &globals.workspace,
            &globals.mcp,
            &globals.egress,
            backend.as_ref(),
        )
        .await,
    );
    checks.extend(plugin_checks(&crate::plugin::load(
        &globals.workspace,
        &globals.plugin_dirs,
        &globals.mcp.masked,
    )));
    checks.extend(bounds_checks(&globals));
    let mut out = crate::shown::stdout();
    for c in &checks {
        // A closed stdout must not turn the checks into a crash.
        let _ = writeln!(out, "{c}");
    }
    match crate::sandbox::doctor::exit_code(&checks) {
        0 => Ok(ExitStatus::Success),
        _ => Err(CliError::Failed("doctor: 有检查没通过(见上)".into())),
    }
}

/// `doctor`'s lines for the resource bounds (README "Bounds"): the disk budget with what
/// counts (a warning when the file system has less left), the object limits.
fn bounds_checks(globals: &GlobalOptions) -> Vec<crate::sandbox::doctor::Check> {
    use crate::sandbox::doctor::{Check, CheckStatus};
    let b = globals.bounds;
    let (room, disk) = crate::flow::disk::doctor_line(b.disk, &globals.workspace);
    vec![
        Check::new(
            "disk",
            if room {
                CheckStatus::Pass
            } else {
                CheckStatus::Warn
            },
            disk,
        ),
        Check::new(
            "objects",
            CheckStatus::Pass,
            format!(
                "执行者的分支取回时每个对象至多 {}(FLOWERBOX_OBJECT_LIMIT),一个分支一次至多 {}(FLOWERBOX_BRANCH_LIMIT)",
                crate::isolate::objects::mib(b.objects.object),
                crate::isolate::objects::mib(b.objects.branch)
            ),
        ),
    ]
}

/// `flowerbox gc`: remove what dead runs left in the sandbox backend (containers, pods and
/// networks with flowerbox's ownership labels), then the workspace repository's merged
/// worktrees; never force-delete worktrees or branches with unmerged work.
pub async fn gc(opts: GcOptions, globals: GlobalOptions) -> Result<ExitStatus, CliError> {
    let containers_of = (!opts.every_workspace).then_some(globals.workspace.as_path());
    let mut report = sandbox_backend(&globals).gc(containers_of).await?;
    let workspace = globals.workspace.clone();
    let trees =
        tokio::task::spawn_blocking(move || crate::isolate::sweep::worktree_report(&workspace))
            .await
            .unwrap_or_else(|e| crate::sandbox::gc::GcReport {
                failed: vec![format!("清理 worktree 时崩了:{e}")],
                ..Default::default()
            });
    report.absorb(trees);
    // What killed runs left in the temporary directory: their copies of the exec service.
    let copies =
        tokio::task::spawn_blocking(|| crate::sandbox::service::sweep_stale(&std::env::temp_dir()))
            .await
            .unwrap_or(0);
    if copies > 0 {
        report
            .removed
            .push(format!("删了 {copies} 份已结束运行留下的 exec 服务副本"));
    }
    let lines = report.lines();
    let mut out = crate::shown::stdout();
    if lines.is_empty() {
        let _ = writeln!(out, "- 没有残留的容器");
    }
    for l in lines {
        let _ = writeln!(out, "- {l}");
    }
    match report.failure_summary() {
        None => Ok(ExitStatus::Success),
        Some(summary) => Err(CliError::Failed(summary)),
    }
}

/// `doctor`'s plugin lines: each plugin with its skills, agent types and hooks, and each thing
/// that could not be loaded, with the reason.
fn plugin_checks(p: &crate::plugin::Plugins) -> Vec<crate::sandbox::doctor::Check> {
    use crate::sandbox::doctor::{Check, CheckStatus};
    let line = |status, detail| Check {
        name: "plugin",
        status,
        detail,
    };
    let mut out = Vec::new();
    if p.plugins.is_empty() && p.problems.is_empty() {
        out.push(line(
            CheckStatus::Pass,
            format!("没有插件({} 或 --plugin-dir)", crate::plugin::DEFAULT_DIR),
        ));
    }
    for plugin in &p.plugins {
        let skills: Vec<&str> = p
            .skills
            .iter()
            .filter(|s| s.plugin == plugin.name)
            .map(|s| s.name.as_str())
            .collect();
        let agents: Vec<&str> = p
            .agents
            .iter()
            .filter(|a| a.plugin == plugin.name)
            .map(|a| a.name.as_str())
            .collect();
        let hooks: Vec<String> = p
            .hooks
            .iter()
            .filter(|h| h.plugin == plugin.name)
            .map(|h| match h.spec.matcher.as_str() {
                "" => h.spec.event.as_str().to_string(),
                m => format!("{}({m})", h.spec.event.as_str()),
            })
            .collect();
        let list = |v: &[&str]| {
            if v.is_empty() {
                "无".to_string()
            } else {
                v.join(", ")
            }
        };
        let hooks: Vec<&str> = hooks.iter().map(String::as_str).collect();
        out.push(line(
            CheckStatus::Pass,
            format!(
                "插件 {}({}):技能 {};agent 类型 {};钩子 {}(在 agent 的容器里跑)",
                plugin.name,
                plugin.root.display(),
                list(&skills),
                list(&agents),
                list(&hooks)
            ),
        ));
    }
    out.extend(
        p.problems
            .iter()
            .map(|why| line(CheckStatus::Warn, format!("没加载:{why}"))),
    );
    out
}
