//! Workflows (seeds 002, 003, 000; flower `docs/en/guide/{workflow,clarify,goal,continuity}.md`):
//! the engine, the clarify and goal-guard mechanisms, the `go` pipeline, `run`'s workflow
//! files, and the documents they freeze.
//!
//! A public library API — a Rust user builds a workflow the way flower's Python users do:
//!
//! ```no_run
//! use flowerbox::agent::{roles, Runtime};
//! use flowerbox::flow::{clarify_step, goal_step, with_goal, Ctx, Prompt, Step, Workflow};
//! use flowerbox::record::LineageFile;
//! # async fn demo(rt: std::sync::Arc<Runtime>, runs: &std::path::Path) {
//! let notes = rt.workbench().expect("a workbench").notes();
//! let coder = roles::worker("coder", "写代码与测试", "你负责实现。");
//! let work = Step::new(
//!     "干活",
//!     roles::coordinator("coordinator", "", vec![coder]),
//!     Prompt::from_fn(|ctx: &Ctx| format!("照这个做:\n{}", ctx.output("确认需求").unwrap_or(""))),
//! );
//! let wf = Workflow::new("mine", vec![
//!     clarify_step(notes.join("需求.md"), "帮我做一个 X"),
//!     goal_step(notes.join("目标.md")),
//!     with_goal(work, notes.join("目标.md"), 3, false),
//! ])
//! .continuous(LineageFile::new(runs.join("lineage.json"), &rt.config().workspace));
//! let mut ctx = Ctx::default();
//! let end = wf.run(&rt, &mut ctx).await;
//! # let _ = end;
//! # }
//! ```
//!
//! Modules: [`workflow`] (the engine: attempts, gates, lineage), [`step`] ([`Step`] and its
//! callbacks), [`ctx`] ([`Ctx`]), [`clarify`] and [`guard`] (the two mechanisms),
//! the workspace content identity verdicts are bound to
//! ([`crate::sandbox::files::identity`], through the run's backend) and [`outputs`] (the runner's own output files it leaves out), [`wake`] (the
//! read-only wake probe and `--new`'s archive), [`starter`] (`go`), [`declarative`],
//! [`template`] and [`runfile`] (`run`), [`once`] (one agent), [`drive`] (the driver),
//! [`frontend`] (the UI seam a frontend implements) and [`aside`] (the aside oracle behind it),
//! [`context`] (the run's services from the settings the command line chose), [`watch`] (the
//! workspace's configuration files, named at the end when a run changed them), [`error`], and
//! the documents [`brief`], [`goal`], [`verdict`]. Nothing here knows the command line: the
//! settings come in as values, the frontend as a trait object, failures go out as
//! [`FlowError`].

pub mod aside;
pub mod brief;
pub mod checks;
pub mod clarify;
pub mod condition;
pub mod context;
pub mod ctx;
pub mod declarative;
pub mod disk;
pub mod drive;
pub mod error;
pub mod evidence;
pub mod frontend;
pub mod gates;
pub mod goal;
pub mod guard;
pub mod mutate;
pub mod once;
pub mod outputs;
pub mod probe;
pub mod recover;
pub mod runfile;
pub mod starter;
pub mod step;
pub mod template;
pub mod verdict;
pub mod wake;
pub mod watch;
pub mod workflow;
pub mod written;

#[cfg(test)]
mod declarative_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod workflow_tests;

pub use crate::sandbox::files::{Exclusions, WorkspaceIdentity};
#[cfg(test)]
pub(crate) use clarify::clarify_step;
pub use clarify::{Clarify, CLARIFY_RESUME, CLARIFY_STEP};
pub use context::{RunContext, RunSettings, RunSetup};
pub use ctx::Ctx;
pub use error::{FlowError, RunEnd};
pub use frontend::{Frontend, Notice};
#[cfg(test)]
pub(crate) use guard::{goal_step, with_goal};
pub use guard::{GoalGuard, GoalSetting, GOAL_STEP};
pub use starter::{GoSettings, Starter, WORK_STEP};
pub use step::{Gate, GateCx, OnFail, Prompt, Step, StepAbort};
pub use wake::{wake_state, WakeState};
pub use workflow::{Completion, Workflow};
