//! `flowerbox run FILE:NAME` (seed 000 "`run`"): loads the declared workflow
//! ([`super::declarative`]), then runs it like `go` runs its own — same driver, same signals,
//! same closing line — with `run`'s defaults (no `go` switches: handoffs on, the window from
//! the model name, `-T` for trimming).

use super::ctx::Ctx;
use super::declarative;
use super::drive::{Session, SessionSetup};
use super::wake::LINEAGE_FILE;
use super::workflow::Workflow;
use crate::channel::HumanConfig;
use crate::cli::error::{CliError, ExitStatus};
use crate::cli::options::{GlobalOptions, RunOptions};
use crate::cli::target::TargetError;
use crate::creds::Credentials;
use crate::record::LineageFile;

/// Runs `run`. A workflow file that does not validate is flower's import failure,
/// `导入 '<FILE>' 失败:<what, naming the step and field>` (exit 1), before anything runs.
pub async fn run(
    opts: RunOptions,
    globals: GlobalOptions,
    creds: Credentials,
) -> Result<ExitStatus, CliError> {
    let target = &opts.target;
    let declared = declarative::load(&target.workflow, &globals.workspace, opts.workbench.clone())
        .map_err(|e| {
            CliError::Target(TargetError::Import {
                module: target.module.clone(),
                message: format!("'{}' {e}", target.name),
            })
        })?;
    let session = Session::open(
        &globals,
        &creds,
        SessionSetup {
            workbench: declared.workbench.clone(),
            trim_large: opts.trim,
            window: None,
            handoff: true,
            human: HumanConfig {
                max_asks: declared.max_asks,
                timeout_s: Some(declared.timeout_s),
                log_path: declared.log_path.clone(),
                amend: declared.brief_path.clone().map(|p| {
                    std::sync::Arc::new(super::brief::BriefAmendments::at(p))
                        as std::sync::Arc<dyn crate::channel::human::Amend>
                }),
            },
            isolate: false,
        },
    )
    .await?;
    let mut wf = Workflow::new(target.name.clone(), declared.steps.clone())
        .with_channel(session.channel.clone());
    if declared.continuous {
        wf = wf.continuous(LineageFile::new(
            globals.run_dir.join(LINEAGE_FILE),
            &globals.workspace,
        ));
    }
    let mut ctx = Ctx::default();
    if let Some(ask) = &declared.ask {
        ctx.vars.insert("ask".into(), ask.clone());
    }
    session.execute(&wf, &mut ctx).await
}
