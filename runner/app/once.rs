//! `flowerbox once PROMPT` (seed 000 "`once`"): one agent named `ad-hoc` with the `-t` tools,
//! no workflow, no verdict, no human (questions time out at once). Unlike flower, it shows its
//! real time and cost, and its containers never leak (SIGHUP/SIGTERM are handled).

use std::sync::Arc;

use super::context::{RunContext, RunSetup};
use super::print::PlainPrinter;
use crate::agent::roles;
use crate::agent::RunOptions;
use crate::channel::Absent;
use crate::cli::args::PermissionMode;
use crate::cli::error::{CliError, ExitStatus};
use crate::cli::options::{GlobalOptions, OnceOptions};
use crate::creds::Credentials;
use crate::record::manifest::KILLED_BY_SIGNAL;

/// Step name of `once` in the manifest (seed 000).
pub const ONCE_STEP: &str = "ad-hoc";

/// Runs `once`. Exit 0 when the agent finished its turn; exit 1 with its error otherwise;
/// SIGHUP/SIGTERM record the step as `killed-by-signal`, remove the containers and die by the
/// signal.
pub async fn once(
    opts: OnceOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    let printer = PlainPrinter::stdout(globals.verbose);
    let ctx = RunContext::build(
        &globals,
        &creds,
        RunSetup {
            workbench: opts.workbench.clone(),
            trim_large: opts.trim,
            window: None,
            handoff: true,
            human: Arc::new(Absent),
            events: printer.sink(),
            placement: None,
            sandboxes: None,
        },
    )
    .await?;
    if let Some(id) = &opts.resume {
        // flower's SDK refuses an unknown session; a silent fresh session would spend the
        // model's money on a conversation the user did not ask for.
        if let Err(e) = known_session(&ctx, id, &globals) {
            ctx.shutdown().await;
            return Err(e);
        }
    }
    let mut spec = roles::once(&opts.instructions, once_tools(&opts), opts.budget_usd);
    // `plan` changes nothing: of the project's MCP tools only the read-only ones.
    spec.mcp_read_only = opts.permission_mode == PermissionMode::Plan;
    if let Err(e) = known_mcp_entries(&ctx, &spec.tools) {
        ctx.shutdown().await;
        return Err(e);
    }
    let mut run = {
        let rt = ctx.runtime.clone();
        let prompt = opts.prompt.clone();
        let run_opts = RunOptions {
            step: Some(ONCE_STEP.into()),
            resume: opts.resume.clone(),
            fork: opts.fork,
            on_session: None,
        };
        tokio::spawn(async move { rt.run(&spec, &prompt, run_opts).await })
    };
    let outcome = tokio::select! {
        r = &mut run => Ok(r.map_err(|e| CliError::Failed(format!("内部错误:{e}")))?),
        sig = crate::flow::drive::wait_for_signal(true) => Err(sig),
    };
    match outcome {
        Ok(result) => {
            ctx.shutdown().await;
            printer.print_lines(&[printer.status_line()]);
            if result.ok {
                Ok(ExitStatus::Success)
            } else {
                Err(CliError::Failed(format!(
                    "x {}",
                    result.error.unwrap_or_else(|| "没做完".into())
                )))
            }
        }
        Err(sig) => {
            // Stop the step first, so nothing it does later can overwrite the rescue row.
            run.abort();
            ctx.runtime.rescue(KILLED_BY_SIGNAL);
            ctx.shutdown().await;
            Ok(ExitStatus::Signalled(sig))
        }
    }
}

/// `Ok` when `--resume ID` names a session of this run directory.
fn known_session(ctx: &RunContext, id: &str, globals: &GlobalOptions) -> Result<(), CliError> {
    match ctx.runtime.store.meta(id) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(CliError::Failed(format!(
            "--resume {id}:{} 里没有这条会话。会话 id 要从同一个 run 目录里找(-r 指对了吗?)",
            globals.run_dir.join("sessions.db").display()
        ))),
        Err(e) => Err(CliError::Failed(format!("sessions.db: {e}"))),
    }
}

/// `-t` names only MCP servers that are configured (arguments take effect or fail).
fn known_mcp_entries(ctx: &RunContext, tools: &[String]) -> Result<(), CliError> {
    let servers: Vec<String> = ctx
        .runtime
        .mcp()
        .map(|h| h.servers().iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    for t in tools.iter().filter(|t| crate::mcp::names::is_entry(t)) {
        if t == crate::mcp::names::ALL || ctx.runtime.mcp().is_some_and(|h| h.knows_entry(t)) {
            continue;
        }
        let have = if servers.is_empty() {
            "没有配置任何 MCP 服务器(.mcp.json 或 --mcp-config)".to_string()
        } else {
            format!("配置里的服务器:{}", servers.join(", "))
        };
        return Err(CliError::Usage(format!(
            "-t 里的 {t} 不是哪个 MCP 服务器的:{have}"
        )));
    }
    Ok(())
}

/// The tools `once` really offers. There is no interactive approval in flowerbox (every tool is
/// whitelisted and sandboxed), so `default`, `acceptEdits` and `bypassPermissions` run the `-t`
/// tools as given; `plan` means "change nothing": the tools that write or execute are removed.
pub fn once_tools(opts: &OnceOptions) -> Vec<String> {
    const MUTATING: [&str; 4] = ["Write", "Edit", "Bash", "Agent"];
    match opts.permission_mode {
        PermissionMode::Plan => opts
            .tools
            .iter()
            .filter(|t| !MUTATING.contains(&t.as_str()))
            .cloned()
            .collect(),
        PermissionMode::Default
        | PermissionMode::AcceptEdits
        | PermissionMode::BypassPermissions => opts.tools.clone(),
    }
}
