//! `flowerbox run FILE:NAME` (seed 000 "`run`"): loads the declared workflow
//! ([`super::declarative`]), then runs it like `go` runs its own — same driver, same signals,
//! same closing line — with `run`'s defaults (no `go` switches: handoffs on, the window from
//! the model name, `-T` for trimming).

use std::path::PathBuf;
use std::sync::Arc;

use super::clarify::CLARIFY_STEP;
use super::context::RunSettings;
use super::ctx::Ctx;
use super::declarative;
use super::drive::{Session, SessionSetup};
use super::error::{FlowError, RunEnd};
use super::frontend::Frontend;
use super::wake::LINEAGE_FILE;
use super::workflow::Workflow;
use crate::channel::human::Amend;
use crate::channel::HumanConfig;
use crate::record::LineageFile;

/// What one `run` is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFileSettings {
    /// The workflow's name (the table's name in its file).
    pub name: String,
    /// The workflow's table, unparsed beyond TOML.
    pub table: toml::Table,
    /// With `-W`: the workbench used when the workflow carries none itself.
    pub workbench: Option<PathBuf>,
    /// `-T`: trim on resume.
    pub trim: bool,
}

/// Loads what `run` is asked to run: a table that does not declare a workflow is
/// [`FlowError::Declared`], naming the step and field, before anything opens or runs.
pub fn load(
    settings: &RunSettings,
    opts: &RunFileSettings,
) -> Result<declarative::Declared, FlowError> {
    Ok(declarative::load(
        &opts.table,
        &settings.workspace,
        opts.workbench.clone(),
    )?)
}

/// Runs `run`: `declared` is what [`load`] made of `opts`.
pub async fn run(
    settings: &RunSettings,
    opts: RunFileSettings,
    declared: declarative::Declared,
    frontend: Arc<dyn Frontend>,
) -> Result<RunEnd, FlowError> {
    let session = Session::open(
        settings,
        SessionSetup {
            workbench: declared.workbench.clone(),
            trim_large: opts.trim,
            window: declared.window,
            handoff: declared.handoff,
            human: HumanConfig {
                max_asks: declared.max_asks,
                timeout_s: Some(declared.timeout_s),
                log_path: declared.log_path.clone(),
                amend: declared
                    .brief_path
                    .clone()
                    .map(|p| Arc::new(super::brief::BriefAmendments::at(p)) as Arc<dyn Amend>),
            },
            isolate: declared.isolate,
        },
        frontend,
    )
    .await?;
    let mut wf = Workflow::new(opts.name.clone(), declared.steps.clone())
        .with_channel(session.channel.clone());
    if declared.continuous {
        let lineage = LineageFile::new(settings.run_dir.join(LINEAGE_FILE), &settings.workspace);
        let store = session.runtime().store().clone();
        for text in super::recover::check_lineage(&lineage, store.as_ref(), CLARIFY_STEP) {
            session
                .frontend
                .notice(&super::frontend::Notice::Recovered(text));
        }
        wf = wf.continuous(lineage);
    }
    let mut ctx = Ctx::default();
    if let Some(ask) = &declared.ask {
        ctx.vars.insert("ask".into(), ask.clone());
    }
    session.execute(&wf, &mut ctx).await
}
