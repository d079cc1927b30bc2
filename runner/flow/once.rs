//! `flowerbox once PROMPT` (seed 000 "`once`"): one agent named `ad-hoc` with the `-t` tools,
//! no workflow, no verdict, no human (questions time out at once). Unlike flower, it shows its
//! real time and cost, and its containers never leak (SIGHUP/SIGTERM are handled).

use std::path::PathBuf;
use std::sync::Arc;

use super::context::{RunContext, RunSettings, RunSetup};
use super::error::{FlowError, RunEnd};
use super::frontend::{Frontend, Notice};
use crate::agent::human::Absent;
use crate::agent::roles;
use crate::agent::tools::ToolRegistry;
use crate::agent::RunOptions;
use crate::record::manifest::KILLED_BY_SIGNAL;
use crate::sandbox::Demand;

/// Step name of `once` in the manifest (seed 000).
pub const ONCE_STEP: &str = "ad-hoc";

/// What `once` runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OnceSettings {
    /// The prompt.
    pub prompt: String,
    /// Appended after the system prompt; empty = none.
    pub instructions: String,
    /// The tool allowlist, in order.
    pub tools: Vec<String>,
    /// Change nothing (`-p plan`): the tools that write or execute are removed.
    pub change_nothing: bool,
    /// Dollar budget; `None` = no limit.
    pub budget_usd: Option<f64>,
    /// Continue this session.
    pub resume: Option<String>,
    /// Fork it instead of continuing it.
    pub fork: bool,
    /// The workbench root, if any.
    pub workbench: Option<PathBuf>,
    /// Trim large old tool results on resume.
    pub trim: bool,
}

/// Ends a run whose records could not all be saved: the step recorded as not saved (if the
/// manifest still takes it), containers removed, the error naming what was lost.
async fn unsaved(ctx: &RunContext) -> FlowError {
    ctx.runtime.rescue(super::drive::UNSAVED);
    ctx.shutdown().await;
    FlowError::Unsaved(ctx.runtime.unsaved().message().unwrap_or_default())
}

/// Runs `once`. [`RunEnd::Finished`] when the agent finished its turn;
/// [`FlowError::AgentFailed`] with its error otherwise; SIGHUP/SIGTERM record the step as
/// `killed-by-signal`, remove the containers and end as [`RunEnd::Signalled`]; sandboxes lost
/// for good record it as `sandbox-lost` and end as [`FlowError::Sandbox`]; the disk budget
/// passed records it as `disk-budget`, keeps what its container wrote and ends as
/// [`FlowError::DiskBudget`]; a record that could not be saved records it as `not-saved` and
/// ends as [`FlowError::Unsaved`].
pub async fn once(
    settings: &RunSettings,
    opts: &OnceSettings,
    frontend: Arc<dyn Frontend>,
) -> Result<RunEnd, FlowError> {
    let ctx = RunContext::build(
        settings,
        RunSetup {
            workbench: opts.workbench.clone(),
            trim_large: opts.trim,
            window: None,
            handoff: true,
            human: Arc::new(Absent),
            events: frontend.events(),
            notices: super::frontend::notice_sink(&frontend),
            placement: None,
            sandboxes: None,
        },
    )
    .await?;
    if let Some(id) = &opts.resume {
        // flower's SDK refuses an unknown session; a silent fresh session would spend the
        // model's money on a conversation the user did not ask for.
        if let Err(e) = known_session(&ctx, id, settings) {
            ctx.shutdown().await;
            return Err(e);
        }
    }
    let spec = once_spec(opts);
    // An engine without this machine's disk holds only what an isolated run puts in its
    // volumes: a `once` that runs commands has no integration to bring its work back.
    if ctx.sandboxes.engine_disk().is_some() && ctx.runtime.runs_commands(&spec) {
        ctx.shutdown().await;
        return Err(FlowError::Sandbox(
            crate::sandbox::SandboxError::Unsupported(super::drive::ENGINE_NEEDS_ISOLATE.into()),
        ));
    }
    // Listening before anything starts: a signal from here on tears down what was started.
    let stop = crate::signals::stop_signals(true);
    if ctx.runtime.runs_commands(&spec) {
        // The pod starts while the session loads (issue 17); the agent's container with its
        // first model request.
        ctx.sandboxes.prepare();
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
    let disk = super::disk::DiskWatch::start(
        super::disk::places(
            &settings.workspace,
            ctx.workbench.as_ref().map(|w| w.root()),
            &[],
            &settings.run_dir,
        ),
        settings.disk,
        ctx.sandboxes.clone(),
        ctx.disk.clone(),
    );
    let outcome = tokio::select! {
        biased;
        lost = ctx.sandboxes.lost() => {
            // The step's commands cannot run any more: it is not done, and the run fails.
            run.abort();
            ctx.runtime.rescue(super::drive::SANDBOX_LOST);
            ctx.shutdown().await;
            return Err(FlowError::Sandbox(lost));
        }
        over = disk.exceeded() => {
            run.abort();
            ctx.runtime.rescue(super::disk::DISK_BUDGET);
            let kept = super::disk::keep_written(ctx.sandboxes.as_ref(), &over.used.containers).await;
            ctx.shutdown().await;
            return Err(FlowError::DiskBudget { over, kept });
        }
        _ = ctx.runtime.unsaved().tripped() => {
            // A record that could not be saved ends the run at once (issue 26 §3).
            run.abort();
            return Err(unsaved(&ctx).await);
        }
        r = &mut run => Ok(r.map_err(FlowError::Internal)?),
        sig = stop => Err(sig),
    };
    if outcome.is_ok() && ctx.runtime.unsaved().is_tripped() {
        return Err(unsaved(&ctx).await);
    }
    match outcome {
        Ok(result) => {
            ctx.shutdown_at_exit().await;
            if let Some(notice) = ctx.config_notice() {
                frontend.notice(&notice);
            }
            frontend.notice(&Notice::Totals);
            if result.ok {
                Ok(RunEnd::Finished)
            } else {
                Err(FlowError::AgentFailed(result.error))
            }
        }
        Err(sig) => {
            // Stop the step first, so nothing it does later can overwrite the rescue row.
            run.abort();
            ctx.runtime.rescue(KILLED_BY_SIGNAL);
            // A Ctrl-C is the user's own end of the run; SIGTERM or SIGHUP may be followed by
            // the kill of everything the caller started: the removal ends before exit.
            if sig == nix::libc::SIGINT {
                ctx.shutdown_at_exit().await;
            } else {
                ctx.shutdown().await;
            }
            if let Some(notice) = ctx.config_notice() {
                frontend.notice(&notice);
            }
            Ok(RunEnd::Signalled(sig))
        }
    }
}

/// The agent of `once` as `opts` declare it (`-t` tools, `-p plan`, instructions, budget).
fn once_spec(opts: &OnceSettings) -> crate::agent::AgentSpec {
    let mut spec = roles::once(&opts.instructions, once_tools(opts), opts.budget_usd);
    // Changing nothing: of the project's MCP tools only the read-only ones.
    spec.mcp_read_only = opts.change_nothing;
    spec
}

/// When `once`'s agent needs a sandbox (issue 32 §1): [`Demand::Soon`] when it can run a
/// command (`Bash`, a stdio MCP server its tools admit, plugin hooks); else
/// [`Demand::OnFirstUse`], and a text-only `once` never touches the engine — with Docker
/// down it still answers.
pub fn demand(opts: &OnceSettings, settings: &RunSettings) -> Demand {
    match once_spec(opts).runs_commands(&settings.mcp_servers, &settings.plugins) {
        true => Demand::Soon,
        false => Demand::OnFirstUse,
    }
}

/// `Ok` when `--resume ID` names a session of this run directory.
fn known_session(ctx: &RunContext, id: &str, settings: &RunSettings) -> Result<(), FlowError> {
    match ctx.runtime.store.meta(id) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(FlowError::UnknownSession {
            id: id.to_string(),
            db: crate::record::layout::sessions_db(&settings.run_dir),
        }),
        Err(e) => Err(FlowError::Session(e)),
    }
}

/// The tools `once` really offers. There is no interactive approval in flowerbox (every tool is
/// whitelisted and sandboxed), so without `change_nothing` the `-t` tools run as given; with it
/// (`-p plan`) the tools that write or execute ([`Tool::mutating`]) are removed.
///
/// [`Tool::mutating`]: crate::agent::tools::Tool::mutating
pub fn once_tools(opts: &OnceSettings) -> Vec<String> {
    if !opts.change_nothing {
        return opts.tools.clone();
    }
    let registry = ToolRegistry::standard();
    opts.tools
        .iter()
        .filter(|t| !registry.is_mutating(t))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_leaves_out_the_tools_that_write_or_execute() {
        let all: Vec<String> = crate::model::ToolName::ALL
            .iter()
            .map(|t| t.to_string())
            .collect();
        let mut opts = OnceSettings {
            prompt: "看一眼".into(),
            instructions: String::new(),
            tools: all.clone(),
            change_nothing: false,
            budget_usd: None,
            resume: None,
            fork: false,
            workbench: None,
            trim: false,
        };
        assert_eq!(once_tools(&opts), all);
        opts.change_nothing = true;
        assert_eq!(
            once_tools(&opts),
            [
                "Read",
                "Glob",
                "Grep",
                "TodoWrite",
                "WebFetch",
                "mcp__human__ask",
                "mcp__human__inbox"
            ]
        );
    }
}
