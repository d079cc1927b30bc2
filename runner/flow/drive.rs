//! The driver shared by `go` and `run` (seed 000 "运行中怎么和它说话", "SIGHUP / SIGTERM",
//! "退出码"): it opens a [`Session`] (the frontend it is given, the question channel, the
//! [`RunContext`]), runs a [`Workflow`] under signal handling, shows the closing line
//! `总花费 $X · 清单 <manifest>` and says how the run ended.
//!
//! Everything the human sees or types goes through the [`Frontend`] the command line chose
//! ([`super::frontend`]): events and notices out; once the services exist, [`Frontend::attach`]
//! gets the channel, the round's [`Interrupt`](super::frontend::Interrupt) and the
//! [`AsideOracle`]; [`Frontend::detach`] when the run is over. A frontend that handles SIGINT
//! itself resolves [`Frontend::quit_requested`] on the second Ctrl-C (the driver then records the
//! in-flight step as `interrupted-by-human`, removes the containers and ends as
//! [`RunEnd::Interrupted`]). Otherwise the driver treats SIGINT like flower's pipe mode: the first
//! one ends the run.
//!
//! When the run's sandboxes are lost for good ([`crate::sandbox::SandboxFactory::lost`]: the
//! engine stayed away past its grace, the pod could not be made again) the run stops there:
//! the in-flight step is recorded as [`SANDBOX_LOST`] (never done: its commands could not
//! run), and the run fails with the reason (exit 1). When the run's agents pass the disk
//! budget ([`super::disk`]) the run stops the same way: the in-flight step is recorded as
//! [`DISK_BUDGET`], what the containers wrote is kept as images before they go, and the run
//! fails with what was measured and kept (exit 1). The same when a record could not be saved
//! ([`crate::record::Unsaved`], issue 26 §3): the step is recorded as [`UNSAVED`] (if the
//! manifest can still take it) and the run fails naming what was not saved.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::aside::AsideOracle;
use super::context::{RunContext, RunSettings, RunSetup};
use super::ctx::Ctx;
use super::disk::{DiskBudget, DiskOver, DiskWatch, DISK_BUDGET};
use super::error::{FlowError, RunEnd};
use super::frontend::{Closing, Controls, Frontend, Notice};
use super::workflow::{Completion, Workflow};
use crate::agent::runtime::INTERRUPTED;
use crate::agent::{Event, EventKind, Runtime, StepError};
use crate::channel::{HumanChannel, HumanConfig};
use crate::isolate::{open_for_run, IsolateOptions, WorktreePlacement};
use crate::record::manifest::KILLED_BY_SIGNAL;
use crate::record::Totals;
use crate::role::Role;

/// Why a run without `--isolate` does not go on an engine that does not share this machine's
/// disk (exit 1).
pub const ENGINE_NEEDS_ISOLATE: &str = "这个引擎看不到这台机器的磁盘(--sandbox docker-remote):只有 --isolate 的运行能在上面跑(仓库放进引擎的卷,改动靠合入带回来)。加上 --isolate,或者用本机的引擎。";

/// The manifest's `error` of a step in flight when the run's sandboxes were lost.
pub const SANDBOX_LOST: &str = "sandbox-lost";
/// The manifest's `error` of a step in flight when a record could not be saved.
pub const UNSAVED: &str = "not-saved";

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
    /// ISOLATION: what workers of a killed run left, handed back to their branches — one
    /// paragraph per worker for the coordinator (which worker, branch, worktree, files).
    pub handed_back: Vec<String>,
    /// The run directory (the aside oracle keeps its books in `aside/` there).
    run_dir: PathBuf,
    /// What the run's agents may add to the disk.
    disk: DiskBudget,
}

/// ISOLATION: opens the workspace's repository for `--isolate` (sweeping what crashed runs
/// left) — the worktree placement of [`RunSetup::placement`].
async fn open_isolation(
    settings: &RunSettings,
    workbench: Option<&Path>,
) -> Result<Arc<WorktreePlacement>, FlowError> {
    let workbench = workbench
        .map(Path::to_path_buf)
        .unwrap_or_else(|| crate::agent::Workbench::locate(&settings.workspace, true));
    let mut opts = IsolateOptions::new(&settings.workspace, workbench);
    opts.exclude = vec![settings.run_dir.clone()];
    opts.limits = settings.objects;
    Ok(open_for_run(opts).await?)
}

impl Session {
    /// Builds the channel and the run context around `frontend`.
    pub async fn open(
        settings: &RunSettings,
        setup: SessionSetup,
        frontend: Arc<dyn Frontend>,
    ) -> Result<Session, FlowError> {
        // ISOLATION: `--isolate` places every worker in its own git worktree.
        let isolation = match setup.isolate {
            true => Some(open_isolation(settings, setup.workbench.as_deref()).await?),
            false => None,
        };
        let channel = HumanChannel::new(setup.human);
        channel.connect_events(frontend.events());
        let run = RunContext::build(
            settings,
            RunSetup {
                workbench: setup.workbench,
                trim_large: setup.trim_large,
                window: setup.window,
                handoff: setup.handoff,
                human: Arc::new(channel.clone()),
                events: frontend.events(),
                notices: super::frontend::notice_sink(&frontend),
                // ISOLATION: `--isolate`'s worktree placement.
                placement: isolation
                    .clone()
                    .map(|p| p as Arc<dyn crate::agent::Placement>),
                sandboxes: None,
            },
        )
        .await?;
        let mut session = Session {
            frontend,
            channel,
            run,
            isolation,
            handed_back: Vec::new(),
            run_dir: settings.run_dir.clone(),
            disk: settings.disk,
        };
        // ISOLATION: branch names carry the run id; start warnings (uncommitted changes
        // workers will not see, leftovers of earlier runs) go to the human. What workers of a
        // killed run left is committed in containers of their own and handed back.
        if let Err(e) = session.bind_engine().await {
            if let Err(t) = session.run.sandboxes.teardown().await {
                tracing::warn!(error = %t, "teardown after a failed start");
            }
            return Err(e);
        }
        if let Some(p) = session.isolation.clone() {
            p.bind_run(&session.run.run_id);
            for text in p.warnings() {
                session.note(EventKind::Warning { text: text.clone() });
            }
            let masked = [settings.run_dir.clone()];
            let handed = p.hand_back(session.run.sandboxes.as_ref(), &masked).await;
            for text in handed.screen {
                session.note(EventKind::Warning { text });
            }
            session.handed_back = handed.coordinator;
        }
        Ok(session)
    }

    /// On an engine that does not share this machine's disk (the sandboxes have an engine
    /// disk): only `--isolate` runs there; the repository goes into the run's volume and the
    /// workbench gets one of its own, before any agent's container.
    async fn bind_engine(&self) -> Result<(), FlowError> {
        let Some(disk) = self.run.sandboxes.engine_disk() else {
            return Ok(());
        };
        let Some(p) = self.isolation.clone() else {
            return Err(FlowError::Sandbox(
                crate::sandbox::SandboxError::Unsupported(ENGINE_NEEDS_ISOLATE.into()),
            ));
        };
        p.bind_engine(disk.clone()).await?;
        if let Some(wb) = &self.run.workbench {
            let subdirs = [wb.scripts(), wb.artifacts(), wb.notes(), wb.spill()];
            let subdirs: Vec<String> = subdirs
                .iter()
                .filter_map(|d| d.strip_prefix(wb.root()).ok())
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            let subdirs: Vec<&str> = subdirs.iter().map(String::as_str).collect();
            disk.directory(wb.root(), "workbench", &subdirs).await?;
        }
        Ok(())
    }

    /// ISOLATION: at the end of the run (containers gone), removes integrated worktrees and
    /// branches, lists the kept ones and sweeps them for planted repositories. Waits for an integration still in flight (its lock).
    async fn close_isolation(&self) {
        let Some(p) = self.isolation.clone() else {
            return;
        };
        let closing = p.clone();
        let lines = tokio::task::spawn_blocking(move || closing.close())
            .await
            .unwrap_or_else(|e| vec![format!("worktree 收尾崩了:{e}")]);
        for text in lines {
            self.note(EventKind::Warning { text });
        }
        // The kept worktrees are where the user goes next: no planted `.git` stays there.
        self.run.runtime.sweep_plants(&p.kept_worktrees()).await;
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
    /// containers, shows the closing line and says how it ended: [`RunEnd::Finished`],
    /// [`FlowError::StepAborted`] when a step stopped it, [`RunEnd::Signalled`] after
    /// SIGHUP/SIGTERM (the in-flight step recorded as `killed-by-signal`),
    /// [`RunEnd::Interrupted`] after the human's quit or SIGINT.
    pub async fn execute(self, wf: &Workflow, ctx: &mut Ctx) -> Result<RunEnd, FlowError> {
        let rt = self.run.runtime.clone();
        let aside = AsideOracle::new(
            rt.clone(),
            None,
            Some(self.run_dir.clone()),
            tokio::runtime::Handle::current(),
        );
        self.frontend.attach(Controls {
            channel: self.channel.clone(),
            interrupt: rt.clone(),
            aside: Arc::new(aside),
        });
        enum End {
            Done(Result<Completion, FlowError>),
            Signal(i32),
            Quit,
            Lost(crate::sandbox::SandboxError),
            Disk(DiskOver),
            Unsaved,
        }
        // Listening before anything starts: a signal from here on tears down what was started.
        let stop = crate::signals::stop_signals(!self.frontend.owns_interrupt());
        // The pod starts while the run clarifies (issue 17), and the coordinator's first
        // worker with it (issue 32 §2).
        self.run.sandboxes.prepare();
        if let Some(step) = wf
            .steps
            .iter()
            .find(|s| s.spec.has(crate::model::ToolName::Agent))
        {
            rt.warm_worker(&step.spec);
        }
        let disk = self.watch_disk();
        let end = tokio::select! {
            // First: once the sandboxes are lost, nothing the workflow does after counts.
            biased;
            lost = self.run.sandboxes.lost() => End::Lost(lost),
            over = disk.exceeded() => End::Disk(over),
            // A record that could not be saved ends the run at once (issue 26 §3).
            _ = rt.unsaved().tripped() => End::Unsaved,
            r = wf.run(&rt, ctx) => End::Done(r),
            sig = stop => End::Signal(sig),
            _ = self.frontend.quit_requested() => End::Quit,
        };
        self.frontend.detach();
        // Whatever else ended the run, a record that was not saved makes it a failure.
        let end = match end {
            End::Done(_) if rt.unsaved().is_tripped() => End::Unsaved,
            end => end,
        };
        match end {
            End::Unsaved => {
                rt.rescue(UNSAVED);
                self.finish().await;
                Err(FlowError::Unsaved(
                    rt.unsaved().message().unwrap_or_default(),
                ))
            }
            End::Signal(sig) if sig != nix::libc::SIGINT => {
                rt.rescue(KILLED_BY_SIGNAL);
                self.run.shutdown().await;
                self.close_isolation().await;
                self.tell_config_changes();
                Ok(RunEnd::Signalled(sig))
            }
            End::Signal(_) | End::Quit => {
                rt.rescue(INTERRUPTED);
                self.finish().await;
                Ok(RunEnd::Interrupted)
            }
            End::Lost(lost) => {
                rt.rescue(SANDBOX_LOST);
                self.finish().await;
                Err(FlowError::Sandbox(lost))
            }
            End::Disk(over) => {
                drop(disk);
                rt.rescue(DISK_BUDGET);
                let kept =
                    super::disk::keep_written(self.run.sandboxes.as_ref(), &over.used.containers)
                        .await;
                self.finish().await;
                Err(FlowError::DiskBudget { over, kept })
            }
            End::Done(Ok(Completion::Finished)) => {
                self.finish().await;
                Ok(RunEnd::Finished)
            }
            End::Done(Ok(Completion::Stopped { step, why })) => {
                // The cause is already on screen: the step's own error under its line, or the
                // workflow's note when its gate rejected it.
                tracing::info!(%step, %why, "stopped");
                self.finish().await;
                // Typed: the step's own error is the provider's refusal (HTTP 401/403).
                let refused = ctx.results.get(&step).and_then(|r| match &r.error {
                    Some(StepError::Model(e)) if e.is_auth() => Some(e.clone()),
                    _ => None,
                });
                match refused {
                    Some(refusal) => Err(FlowError::CredentialsRefused { step, refusal }),
                    None => Err(FlowError::StepAborted(step)),
                }
            }
            End::Done(Err(e)) => {
                self.note(EventKind::Error {
                    text: e.to_string(),
                });
                self.finish().await;
                Err(FlowError::StepAborted(
                    e.step().unwrap_or(wf.name.as_str()).to_string(),
                ))
            }
        }
    }

    /// Starts the run's disk watcher over the workspace, the workbench, the worktrees and the
    /// repository's git directory (`--isolate`), without the run directory.
    fn watch_disk(&self) -> DiskWatch {
        let rt = &self.run.runtime;
        let isolation: Vec<PathBuf> = self
            .isolation
            .iter()
            .flat_map(|p| [p.root().to_path_buf(), p.repo().commondir.clone()])
            .collect();
        let places = super::disk::places(
            &rt.config().workspace,
            self.run.workbench.as_ref().map(|w| w.root()),
            &isolation,
            &self.run_dir,
        );
        DiskWatch::start(
            places,
            self.disk,
            self.run.sandboxes.clone(),
            self.run.disk.clone(),
        )
    }

    /// Names the workspace's configuration files the run changed (once no agent runs).
    fn tell_config_changes(&self) {
        if let Some(notice) = self.run.config_notice() {
            self.frontend.notice(&notice);
        }
    }

    /// Ends the run's processes (their containers' removal may finish after the process:
    /// [`RunContext::shutdown_at_exit`]), names the configuration the run changed and shows
    /// the closing line.
    async fn finish(&self) {
        self.run.shutdown_at_exit().await;
        self.close_isolation().await;
        self.tell_config_changes();
        let (cost_usd, all_known, any_known) = process_cost(&self.run);
        self.frontend.notice(&Notice::Closing(Closing {
            cost_usd,
            all_known,
            any_known,
            manifest: self.run.manifest.path().to_path_buf(),
        }));
    }
}

/// This process's cost from its manifest rows ([`Totals`], where a row of unknown cost makes
/// the total a lower bound): (known sum, every part known, some part known).
pub fn process_cost(run: &RunContext) -> (f64, bool, bool) {
    let rows = run.manifest.rows();
    let totals = Totals::of(&rows);
    let any = rows.iter().any(|r| r.cost_usd.is_some());
    (totals.cost.known_usd, !totals.cost.unknown, any)
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
