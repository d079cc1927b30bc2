//! The seam between the command line and the rest of flowerbox: one function per subcommand
//! that needs the runtime. The command line calls these after parsing, validation, the
//! credential gates and (for `go`) the start prompt; the integrator replaces their bodies.
//!
//! Contract for every function here:
//! - the options are validated (see [`super::options`]); the workspace exists; `run_dir` is
//!   created and `<run_dir>/flowerbox.log` receives `tracing` output;
//! - `creds` passed the gates (token present; probed when on a terminal) — build the model
//!   provider from [`Credentials::get`];
//! - return `Ok(ExitStatus::Success)` (0), `Ok(ExitStatus::Interrupted)` (130, second Ctrl-C),
//!   `Ok(ExitStatus::Signalled(sig))` (SIGHUP/SIGTERM after recording the in-flight step), or an
//!   `Err(CliError)` whose message is printed on stderr with exit code 1 (e.g.
//!   [`CliError::StepAborted`]). Never print a backtrace; never exit the process yourself.

use super::error::{CliError, ExitStatus};
use super::options::{DoctorOptions, GcOptions, GlobalOptions, GoOptions, OnceOptions, RunOptions};
use crate::creds::Credentials;

/// `flowerbox go`: build the clarify → goal → work (+ judge per round) workflow and run it.
/// `opts.ask` is the request, or `None` to continue a woken directory; `opts.new` asks to
/// archive the previous run (`lineage.json`, `需求.md`, `目标.md` into
/// `notes/archive/<YYYYmmdd-HHMMSS>/`) before starting.
pub async fn go(
    opts: GoOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    crate::flow::starter::go(opts, globals, creds).await
}

/// `flowerbox run TARGET`: run the workflow `opts.target.workflow` (the named table of the
/// workflow file) with default go-switch values.
pub async fn run(
    opts: RunOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    crate::flow::runfile::run(opts, globals, creds).await
}

/// `flowerbox once PROMPT`: one agent named `ad-hoc`, no workflow, no verdict, no human
/// (questions time out at once).
pub async fn once(
    opts: OnceOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    crate::app::once::once(opts, globals, creds).await
}

/// `flowerbox doctor`: check the Docker engine, the agent image and the credentials. `creds`
/// is the chain's result WITHOUT the gates (it may lack a token; report that, do not fail on
/// it).
pub async fn doctor(
    opts: DoctorOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    let _ = opts;
    let input = crate::sandbox::doctor::DoctorInput {
        docker_host: None,
        image: globals.image.clone(),
        workspace: globals.workspace.clone(),
        credential_names: creds.names(),
        timeout: crate::sandbox::docker::DEFAULT_PING_TIMEOUT,
        egress: globals.egress.clone(),
    };
    let mut checks = crate::sandbox::doctor::doctor(&input).await;
    let sandbox = match globals.sandbox {
        crate::cli::args::SandboxKind::Docker => crate::mcp::doctor::DoctorSandbox::Docker {
            image: globals.image.clone(),
        },
        crate::cli::args::SandboxKind::Host => crate::mcp::doctor::DoctorSandbox::Host,
    };
    checks.extend(
        crate::mcp::doctor::checks(&globals.workspace, &globals.mcp, &globals.egress, sandbox)
            .await,
    );
    for c in &checks {
        println!("{c}");
    }
    match crate::sandbox::doctor::exit_code(&checks) {
        0 => Ok(ExitStatus::Success),
        _ => Err(CliError::Failed("doctor: 有检查没通过(见上)".into())),
    }
}

/// `flowerbox gc`: remove containers and pods flowerbox left behind (labels `flowerbox.run`,
/// `flowerbox.workspace`); never force-delete worktrees or branches with unmerged work.
pub async fn gc(opts: GcOptions, globals: GlobalOptions) -> Result<ExitStatus, CliError> {
    let engine =
        crate::sandbox::docker::Engine::connect(None, crate::sandbox::docker::DEFAULT_PING_TIMEOUT)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
    let containers_of = (!opts.every_workspace).then_some(globals.workspace.as_path());
    let report = crate::sandbox::gc::gc(&engine, containers_of, Some(&globals.workspace))
        .await
        .map_err(crate::app::context::sandbox_error)?;
    let lines = report.lines();
    if lines.is_empty() {
        println!("- 没有残留的容器");
    }
    for l in lines {
        println!("- {l}");
    }
    match report.failure_summary() {
        None => Ok(ExitStatus::Success),
        Some(summary) => Err(CliError::Failed(summary)),
    }
}
