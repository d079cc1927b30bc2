//! The driver shared by `go` and `run` (seed 000 "运行中怎么和它说话", "SIGHUP / SIGTERM",
//! "退出码"): it opens a [`Session`] (frontend, question channel, [`RunContext`]), runs a
//! [`Workflow`] under signal handling, prints the closing line
//! `总花费 $X · 清单 <manifest>` and turns the outcome into an exit status.
//!
//! # The UI seam (for the terminal console)
//!
//! Everything the human sees or types goes through a [`Frontend`]:
//! - **events**: [`Frontend::events`] is the runtime's first event outlet; the question
//!   channel's events (`Question`, `Answer`, `Inbox`) are connected to the same sink;
//! - **lines** that are not events (wake banner, archive note, closing line):
//!   [`Frontend::print`], rendered with [`Frontend::render_options`];
//! - **input**: [`Frontend::attach`] receives the [`HumanChannel`] and the [`Runtime`] once
//!   they exist — answer with [`HumanChannel::answer_oldest`] / `decline_oldest`, pass
//!   unprompted lines to [`HumanChannel::send`] (inbox + brief), interrupt with
//!   [`Runtime::interrupt`]; [`Frontend::detach`] is called when the run is over (stop the
//!   input thread, restore the terminal);
//! - **Ctrl-C**: a frontend that handles SIGINT itself says so with
//!   [`Frontend::owns_interrupt`] and resolves [`Frontend::quit_requested`] on the second
//!   Ctrl-C (the driver then records the in-flight step as `interrupted-by-human`, removes the
//!   containers and exits 130). Otherwise the driver treats SIGINT like flower's pipe mode:
//!   the first one ends the run (exit 130, books kept).
//!
//! The driver asks "interactive?" in exactly one place, [`frontend`]: the terminal
//! [`Console`](crate::term::Console) when stdin is a terminal (resident prompt, answers, inbox,
//! aside oracle, two-step Ctrl-C), otherwise the [`PlainFrontend`] (rendered lines on stdout,
//! no input: questions settle by `--timeout`).

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

use super::ctx::Ctx;
use super::workflow::{Completion, Workflow};
use crate::agent::runtime::INTERRUPTED;
use crate::agent::{Event, EventKind, EventSink, Runtime};
use crate::app::{PlainPrinter, RunContext, RunSetup};
use crate::channel::{HumanChannel, HumanConfig};
use crate::cli::error::{CliError, ExitStatus};
use crate::cli::options::GlobalOptions;
use crate::creds::Credentials;
use crate::isolate::{open_for_run, IsolateError, IsolateOptions, WorktreePlacement};
use crate::model::Role;
use crate::record::manifest::KILLED_BY_SIGNAL;
use crate::term::render::{closing_line, RenderOptions};

/// What the human sees and types during a run. See the module doc.
#[async_trait]
pub trait Frontend: Send + Sync {
    /// The outlet for every event of the run.
    fn events(&self) -> EventSink;
    /// How lines are rendered (width, colour, home for `~`).
    fn render_options(&self) -> RenderOptions;
    /// Prints finished lines (already rendered).
    fn print(&self, lines: &[String]);
    /// The run's channel and runtime exist: start taking input.
    fn attach(&self, _channel: &HumanChannel, _runtime: &Arc<Runtime>) {}
    /// Whether this frontend handles SIGINT itself (then the driver leaves it alone).
    fn owns_interrupt(&self) -> bool {
        false
    }
    /// Resolves when the human wants out (the second Ctrl-C); never, by default.
    async fn quit_requested(&self) {
        std::future::pending::<()>().await
    }
    /// The run is over: stop taking input.
    fn detach(&self) {}
}

/// The non-interactive frontend: [`PlainPrinter`] to stdout, no input.
pub struct PlainFrontend {
    printer: Arc<PlainPrinter>,
}

impl PlainFrontend {
    /// A plain frontend on stdout.
    pub fn stdout(verbose: bool) -> Self {
        PlainFrontend {
            printer: PlainPrinter::stdout(verbose),
        }
    }

    /// A plain frontend over any printer (tests).
    pub fn new(printer: Arc<PlainPrinter>) -> Self {
        PlainFrontend { printer }
    }
}

#[async_trait]
impl Frontend for PlainFrontend {
    fn events(&self) -> EventSink {
        self.printer.sink()
    }
    fn render_options(&self) -> RenderOptions {
        self.printer.options().clone()
    }
    fn print(&self, lines: &[String]) {
        self.printer.print_lines(lines);
    }
}

/// THE place that decides whether the run is interactive: the terminal console when
/// `globals.interactive` (stdin is a terminal), plain output otherwise.
pub fn frontend(globals: &GlobalOptions) -> Arc<dyn Frontend> {
    if globals.interactive {
        if let Some(console) = crate::term::frontend::console_frontend(globals) {
            return console;
        }
    }
    Arc::new(PlainFrontend::stdout(globals.verbose))
}

/// What differs between the runs a [`Session`] can host.
pub struct SessionSetup {
    /// The workbench root the workflow carries (created), or none.
    pub workbench: Option<PathBuf>,
    /// Trim large old tool results on resume.
    pub trim_large: bool,
    /// `--window`.
    pub window: Option<u64>,
    /// Handoffs on.
    pub handoff: bool,
    /// The question channel's settings.
    pub human: HumanConfig,
    /// `--isolate`: every worker in its own git worktree.
    pub isolate: bool,
}

/// One live run: the frontend, the question channel and the services.
pub struct Session {
    /// What the human sees and types.
    pub frontend: Arc<dyn Frontend>,
    /// The question channel (also the runtime's human).
    pub channel: HumanChannel,
    /// Provider, store, sandboxes, workbench, manifest, runtime.
    pub run: RunContext,
    /// ISOLATION: the worktree placement with `--isolate`.
    pub isolation: Option<Arc<WorktreePlacement>>,
}

/// ISOLATION: opens the workspace's repository for `--isolate` (sweeping what crashed runs
/// left) — the worktree placement of [`RunSetup::placement`].
async fn open_isolation(
    globals: &GlobalOptions,
    workbench: Option<&std::path::Path>,
) -> Result<Arc<WorktreePlacement>, CliError> {
    let workbench = workbench
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| crate::agent::Workbench::locate(&globals.workspace, true));
    let mut opts = IsolateOptions::new(&globals.workspace, workbench);
    opts.exclude = vec![globals.run_dir.clone()];
    open_for_run(opts).await.map_err(|e| match e {
        IsolateError::NotARepository(p) => CliError::IsolateNotGit(p),
        e => CliError::Failed(e.to_string()),
    })
}

impl Session {
    /// Builds the frontend, the channel and the run context. Errors are exit-1 messages.
    pub async fn open(
        globals: &GlobalOptions,
        creds: &Credentials,
        setup: SessionSetup,
    ) -> Result<Session, CliError> {
        // ISOLATION: `--isolate` places every worker in its own git worktree.
        let isolation = match setup.isolate {
            true => Some(open_isolation(globals, setup.workbench.as_deref()).await?),
            false => None,
        };
        let frontend = frontend(globals);
        let channel = HumanChannel::new(setup.human);
        channel.connect_events(frontend.events());
        let run = RunContext::build(
            globals,
            creds,
            RunSetup {
                workbench: setup.workbench,
                trim_large: setup.trim_large,
                window: setup.window,
                handoff: setup.handoff,
                human: Arc::new(channel.clone()),
                events: frontend.events(),
                // ISOLATION: `--isolate`'s worktree placement.
                placement: isolation
                    .clone()
                    .map(|p| p as Arc<dyn crate::agent::Placement>),
                sandboxes: None,
            },
        )
        .await?;
        let session = Session {
            frontend,
            channel,
            run,
            isolation,
        };
        // ISOLATION: branch names carry the run id; start warnings (uncommitted changes
        // workers will not see, leftovers of earlier runs) go to the human.
        if let Some(p) = &session.isolation {
            p.bind_run(&session.run.run_id);
            for text in p.warnings() {
                session.note(EventKind::Warning { text: text.clone() });
            }
        }
        Ok(session)
    }

    /// ISOLATION: at the end of the run (containers gone), removes integrated worktrees and
    /// branches and lists the kept ones. Waits for an integration still in flight (its lock).
    async fn close_isolation(&self) {
        let Some(p) = self.isolation.clone() else {
            return;
        };
        let lines = tokio::task::spawn_blocking(move || p.close())
            .await
            .unwrap_or_else(|e| vec![format!("worktree 收尾崩了:{e}")]);
        for text in lines {
            self.note(EventKind::Warning { text });
        }
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.run.runtime
    }

    /// Prints an event through the frontend (notes of the driver itself).
    pub fn note(&self, kind: EventKind) {
        (self.frontend.events())(Event {
            agent: "runner".into(),
            role: Role::Coordinator,
            depth: 0,
            kind,
        });
    }

    /// Runs `wf` over `ctx` to the end, a signal or the human's quit; then removes the
    /// containers, prints the closing line and returns the exit status:
    /// 0 when it finished, [`CliError::StepAborted`] when a step stopped it,
    /// [`ExitStatus::Signalled`] after SIGHUP/SIGTERM (the in-flight step recorded as
    /// `killed-by-signal`), [`ExitStatus::Interrupted`] after the human's quit or SIGINT.
    pub async fn execute(self, wf: &Workflow, ctx: &mut Ctx) -> Result<ExitStatus, CliError> {
        let rt = self.run.runtime.clone();
        self.frontend.attach(&self.channel, &rt);
        enum End {
            Done(Result<Completion, super::workflow::FlowError>),
            Signal(i32),
            Quit,
        }
        let end = tokio::select! {
            r = wf.run(&rt, ctx) => End::Done(r),
            sig = wait_for_signal(!self.frontend.owns_interrupt()) => End::Signal(sig),
            _ = self.frontend.quit_requested() => End::Quit,
        };
        self.frontend.detach();
        match end {
            End::Signal(sig) if sig != nix::libc::SIGINT => {
                rt.rescue(KILLED_BY_SIGNAL);
                self.run.shutdown().await;
                self.close_isolation().await;
                Ok(ExitStatus::Signalled(sig))
            }
            End::Signal(_) | End::Quit => {
                rt.rescue(INTERRUPTED);
                self.finish().await;
                Ok(ExitStatus::Interrupted)
            }
            End::Done(Ok(Completion::Finished)) => {
                self.finish().await;
                Ok(ExitStatus::Success)
            }
            End::Done(Ok(Completion::Stopped { step, aborted })) => {
                if let Some(why) = aborted {
                    self.note(EventKind::Error { text: why });
                }
                self.finish().await;
                Err(CliError::StepAborted(step))
            }
            End::Done(Err(e)) => {
                self.note(EventKind::Error {
                    text: e.to_string(),
                });
                self.finish().await;
                Err(CliError::StepAborted(e.step().to_string()))
            }
        }
    }

    /// Removes the containers and prints the closing line.
    async fn finish(&self) {
        self.run.shutdown().await;
        self.close_isolation().await;
        let (cost, known, any_known) = process_cost(&self.run);
        let opts = self.frontend.render_options();
        self.frontend.print(&[
            String::new(),
            closing_line(cost, known, any_known, self.run.manifest.path(), &opts),
        ]);
    }
}

/// This process's cost from its manifest rows: (known sum, every part known, some part
/// known). The sum starts at +0.0 (an empty float sum is -0.0, printed `$-0.0000`).
pub fn process_cost(run: &RunContext) -> (f64, bool, bool) {
    let rows = run.manifest.rows();
    let known = rows.iter().all(|r| r.cost_usd.is_some());
    let any = rows.iter().any(|r| r.cost_usd.is_some());
    let sum = rows
        .iter()
        .filter_map(|r| r.cost_usd)
        .fold(0.0, |a, b| a + b);
    (sum, known, any)
}

/// Resolves with the signal number on SIGHUP or SIGTERM, and on SIGINT when `int` (no
/// frontend owns Ctrl-C).
pub async fn wait_for_signal(int: bool) -> i32 {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut intr = if int {
        signal(SignalKind::interrupt()).ok()
    } else {
        None
    };
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    tokio::select! {
        _ = recv(&mut hup) => nix::libc::SIGHUP,
        _ = recv(&mut term) => nix::libc::SIGTERM,
        _ = recv(&mut intr) => nix::libc::SIGINT,
    }
}

/// The channel settings of `go`'s switches: `--asks` (None unlimited) and `--timeout`
/// (`ZERO` = fully automatic, `MAX` = forever), logging to `问答记录.md` and amending the brief.
pub fn human_config(
    asks: Option<u64>,
    timeout: std::time::Duration,
    log_path: PathBuf,
    amend_path: PathBuf,
) -> HumanConfig {
    HumanConfig {
        max_asks: asks.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        timeout_s: if timeout == std::time::Duration::MAX {
            None
        } else {
            Some(timeout.as_secs_f64())
        },
        log_path: Some(log_path),
        amend: Some(std::sync::Arc::new(super::brief::BriefAmendments::at(
            amend_path,
        ))),
    }
}
