//! [`WorktreePlacement`]: the [`Placement`] of `--isolate`. Each worker gets its own worktree
//! (mounted read-write with the workbench; the main repository's git common dir read-only but
//! for the worker's own parts, [`super::state`]), and its branch is brought back and integrated
//! when it ends, with a report for the coordinator.

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use super::adopt::{adopt, import_all, Adopted, Policy};
use super::handback::{find_interrupted, HandedBack, Interrupted};
use super::integrate::{commit_worktree, integrate_guarded, Integration};
use super::repo::{open_workspace_repo, WorkspaceRepo};
use super::seal::{seal, SealError};
use super::state::WorkerState;
use super::sweep::{sweep_except, SweepReport};
use super::worktree::{
    add, drop_gitlinks, is_clean, is_merged, remove, unaccounted, worktrees_root,
};
use super::IsolateError;
use crate::agent::{PlaceError, Placement, WorkerPlace, WorkerSandbox};
use crate::record::owner::Owner;
use crate::sandbox::{CommandsRun, Mount, SandboxError};

/// Most paths listed in one report.
const LIST_LIMIT: usize = 20;

/// How to open a [`WorktreePlacement`].
#[derive(Debug, Clone)]
pub struct IsolateOptions {
    /// The workspace (inside a git repository with at least one commit).
    pub workspace: PathBuf,
    /// The shared workbench (`<parent>/.flower-<name>`), mounted read-write for workers.
    pub workbench: PathBuf,
    /// Paths whose uncommitted changes do not count for the start warning (the runner's own
    /// `runs/`).
    pub exclude: Vec<PathBuf>,
    /// Where worktrees go; default [`worktrees_root`] of the repository's working tree.
    pub worktrees_root: Option<PathBuf>,
    /// Recorded in each worktree's lock; default this process.
    pub owner: Option<Owner>,
    /// What a worker's branch may bring back (`FLOWERBOX_OBJECT_LIMIT`,
    /// `FLOWERBOX_BRANCH_LIMIT`).
    pub limits: super::ObjectLimits,
}

impl IsolateOptions {
    /// Defaults for `workspace` and `workbench`.
    pub fn new(workspace: impl Into<PathBuf>, workbench: impl Into<PathBuf>) -> Self {
        IsolateOptions {
            workspace: workspace.into(),
            workbench: workbench.into(),
            exclude: Vec::new(),
            worktrees_root: None,
            owner: None,
            limits: super::ObjectLimits::default(),
        }
    }
}

/// Where one worker's worktree stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Created; the worker runs.
    Working,
    /// Integrated (or nothing to integrate): removed at [`WorktreePlacement::close`].
    Merged,
    /// Not integrated (conflict, user changes, unfinished worker, failure): kept.
    Kept,
}

#[derive(Debug, Clone)]
struct Tree {
    agent: String,
    name: String,
    branch: String,
    path: PathBuf,
    state: State,
    git: WorkerState,
    /// The worker's container could not commit everything it left: the worktree is kept, as
    /// its report said.
    left: bool,
}

/// Per-agent git worktrees with serial integration (see the [module docs](super)).
pub struct WorktreePlacement {
    pub(super) repo: WorkspaceRepo,
    pub(super) workbench: PathBuf,
    /// Where no symlink a worker commits may lead (the workbench, the run directory).
    pub(super) guards: Vec<PathBuf>,
    pub(super) root: PathBuf,
    owner: Owner,
    pub(super) run: OnceLock<String>,
    /// One git operation of this process at a time (the file lock covers other processes).
    pub(super) gate: tokio::sync::Mutex<()>,
    trees: Mutex<BTreeMap<String, Tree>>,
    warnings: Vec<String>,
    /// Dead runs' worktrees whose work is still to be handed back.
    interrupted: Mutex<Vec<Interrupted>>,
    /// Lines for the user from finished workers (a refused integration, a branch refused by
    /// the object bounds) that [`Placement::finish`]'s report (for the coordinator) does not
    /// reach, taken by [`Placement::take_notices`].
    notices: Mutex<Vec<String>>,
    /// The worktrees [`WorktreePlacement::close`] kept.
    kept: Mutex<Vec<PathBuf>>,
    /// On an engine that does not share this machine's disk: the repository and the workers'
    /// places in the engine's volumes instead of worktrees ([`super::remote`]).
    engine: OnceLock<super::remote::EngineSide>,
}

impl std::fmt::Debug for WorktreePlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorktreePlacement")
            .field("workdir", &self.repo.workdir)
            .field("root", &self.root)
            .field("run", &self.run.get())
            .finish()
    }
}

impl WorktreePlacement {
    /// Opens the workspace's repository, sweeps what earlier runs left ([`sweep`]: stale
    /// registrations pruned, merged leftovers removed, unmerged ones listed), and collects
    /// the start warnings (see [`WorktreePlacement::warnings`]). Blocking (git).
    ///
    /// # Errors
    /// [`IsolateError::NotARepository`] with seed 000's text, and the other open failures of
    /// [`open_workspace_repo`].
    pub fn open(opts: IsolateOptions) -> Result<WorktreePlacement, IsolateError> {
        let mut repo = open_workspace_repo(&opts.workspace)?;
        repo.limits = opts.limits;
        let owner = match opts.owner {
            Some(o) => o,
            None => Owner::current().map_err(IsolateError::io("读不出本进程的身份"))?,
        };
        let root = opts
            .worktrees_root
            .unwrap_or_else(|| worktrees_root(&repo.workdir));
        let mut warnings = Vec::new();
        // Interrupted workers' worktrees wait for `hand_back` (it needs their containers).
        let interrupted = find_interrupted(&repo);
        match sweep_except(&repo.workspace, &super::handback::names(&interrupted)) {
            // Live runs' worktrees are their business: not worth a warning.
            Ok(SweepReport {
                removed,
                kept,
                failed,
                live: _,
            }) => warnings.extend(
                removed
                    .into_iter()
                    .chain(failed)
                    .chain(kept)
                    .map(|l| format!("上次运行的残留:{l}")),
            ),
            Err(e) => warnings.push(format!("清理旧 worktree 失败:{e}")),
        }
        warnings.extend(repo.start_warnings(&opts.exclude)?);
        let guards = std::iter::once(&opts.workbench)
            .chain(&opts.exclude)
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        Ok(WorktreePlacement {
            repo,
            guards,
            workbench: opts.workbench,
            root,
            owner,
            run: OnceLock::new(),
            gate: tokio::sync::Mutex::new(()),
            trees: Mutex::new(BTreeMap::new()),
            warnings,
            interrupted: Mutex::new(interrupted),
            notices: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
            engine: OnceLock::new(),
        })
    }

    /// Hands back what workers of dead runs left in their worktrees (see
    /// [`super::handback`]): committed in containers of `factory` with each worker's own
    /// mounts (`masked` hidden), brought back to their branches, kept; once per placement.
    pub async fn hand_back(
        &self,
        factory: &dyn crate::sandbox::SandboxFactory,
        masked: &[PathBuf],
    ) -> HandedBack {
        let list: Vec<Interrupted> =
            std::mem::take(&mut *self.interrupted.lock().unwrap_or_else(|e| e.into_inner()));
        if list.is_empty() {
            return HandedBack::default();
        }
        let _gate = self.gate.lock().await;
        super::handback::hand_back(
            &self.repo,
            list,
            |path, git| self.mounts(path, git),
            factory,
            masked,
        )
        .await
    }

    /// One-line warnings to show at the start of the run: uncommitted changes workers will not
    /// see, relative worktree links, what the sweep removed or kept.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Sets the run id used in branch names (`flower/<run>/<agent>`); call once, before the
    /// first worker. Later calls are ignored.
    pub fn bind_run(&self, run_id: &str) {
        let _ = self.run.set(run_id.to_string());
    }

    /// Puts the workers on `disk`, the run's volumes on an engine that does not share this
    /// machine's disk (issue 30 §2): the workspace's repository goes into a volume shown at
    /// its working tree now, and from here on each worker gets a clone of its own in a volume
    /// instead of a worktree ([`super::remote`]). The workbench's volume is the caller's to
    /// make. Call once, before the first worker; a second call is refused.
    ///
    /// # Errors
    /// The workspace is a subdirectory of its repository, HEAD is detached, or the engine
    /// could not make or fill the volume.
    pub async fn bind_engine(
        &self,
        disk: std::sync::Arc<dyn crate::sandbox::EngineDisk>,
    ) -> Result<(), IsolateError> {
        let _gate = self.gate.lock().await;
        if self.engine.get().is_some() {
            return Err(IsolateError::Engine {
                what: "第二次绑定引擎".into(),
                source: SandboxError::Unsupported("already bound".into()),
            });
        }
        let side = super::remote::bind(&self.repo, disk).await?;
        let _ = self.engine.set(side);
        Ok(())
    }

    /// The repository facts.
    pub fn repo(&self) -> &WorkspaceRepo {
        &self.repo
    }

    /// Where this placement puts worktrees.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The worktrees the last [`WorktreePlacement::close`] kept (where the user is pointed).
    pub fn kept_worktrees(&self) -> Vec<PathBuf> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The branch and worktree of `agent`, once prepared.
    pub fn worktree_of(&self, agent: &str) -> Option<(String, PathBuf)> {
        self.trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .map(|t| (t.branch.clone(), t.path.clone()))
    }

    /// Ends the run's use of worktrees (blocking; the run's containers are gone): each
    /// worker's branch is brought back once more ([`adopt`]: a process it left may have
    /// committed after it ended); a worker still at work (the run was stopped) leaves its
    /// worktree locked, for the next start to hand back; integrated worktrees are removed with their branches (after
    /// checking once more that they are clean and merged); the kept ones are unlocked and
    /// listed, their worker state dropped once the real branch holds everything. Returns one
    /// line per kept or failed item, for the user.
    pub fn close(&self) -> Vec<String> {
        if let Some(side) = self.engine.get() {
            return side.close(&self.repo);
        }
        let trees: Vec<Tree> =
            std::mem::take(&mut *self.trees.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        if trees.is_empty() {
            return Vec::new();
        }
        let mut lines = Vec::new();
        let _lock = match self.repo.lock() {
            Ok(l) => l,
            Err(e) => return vec![format!("worktree 没清理:{e}")],
        };
        let repo = match self.repo.open() {
            Ok(r) => r,
            Err(e) => return vec![format!("worktree 没清理:{e}")],
        };
        for t in trees {
            let adopted = adopt(&self.repo, &t.git, Policy::Follow);
            match &adopted {
                // The bound's message says where the commits stay.
                Err(e @ IsolateError::TooLarge { .. }) => lines.push(e.to_string()),
                Err(e) => lines.push(format!(
                    "没取回 {} 在容器里的提交:{e};它们还在 {}",
                    t.branch,
                    t.git.dir().display()
                )),
                Ok(_) => {}
            }
            if t.state == State::Working {
                // Its worker never finished (a signal, a quit, a lost sandbox ended the run):
                // the worktree stays exactly as `kill -9` leaves it — locked by this process,
                // worker state kept — so the next start commits what it left in a container
                // of its own and hands it back to the coordinator ([`super::handback`]).
                lines.push(format!(
                    "{} 没做完就停了:worktree {}(分支 {})原样留着,下次 --isolate 启动时提交它留下的改动并交还给协调者",
                    t.agent,
                    t.path.display(),
                    t.branch
                ));
                continue;
            }
            let tip = repo
                .find_branch(&t.branch, git2::BranchType::Local)
                .ok()
                .and_then(|b| b.get().target());
            let merged = tip.is_some_and(|id| is_merged(&repo, id).unwrap_or(false));
            // What libgit2's status does not see (nested repositories, FIFOs, sockets) counts
            // too: the walk sees everything on disk.
            let exists = crate::fsroot::own::exists(&t.path);
            let beyond = if exists {
                unaccounted(&t.path)
            } else {
                Vec::new()
            };
            let clean = !exists || (beyond.is_empty() && is_clean(&t.path).unwrap_or(false));
            if adopted.is_ok() && t.state != State::Kept && !t.left && merged && clean {
                if let Err(e) = remove(&repo, &t.name, &t.branch) {
                    lines.push(format!("删不掉已合入的 worktree {}:{e}", t.path.display()));
                }
                continue;
            }
            // Whatever the kept worktree's index names comes over too; once the real branch
            // holds the worker's work, the user goes on with plain git.
            match import_all(&repo, &t.git, &self.repo.limits) {
                Ok(_) if adopted.is_ok() => {
                    if let Err(e) = t.git.remove() {
                        lines.push(e.to_string());
                    }
                }
                Ok(_) => {}
                // Said once already, when the branch was refused.
                Err(IsolateError::TooLarge { .. }) if adopted.is_err() => {}
                Err(e) => lines.push(format!("{} 的对象没全取回:{e}", t.branch)),
            }
            match drop_gitlinks(&self.repo.commondir, &t.name) {
                Ok(links) if !links.is_empty() => lines.push(gitlinks_note(&t.path, &links)),
                Ok(_) => {}
                Err(e) => lines.push(e.to_string()),
            }
            if let Ok(wt) = repo.find_worktree(&t.name) {
                let _ = wt.unlock();
            }
            let why = if adopted.is_err() {
                "执行者的提交没取回".to_string()
            } else if !merged {
                "有没合入的提交".to_string()
            } else if !beyond.is_empty() {
                format!("有 git 不记录的东西:{}", beyond.join("、"))
            } else if t.left {
                "执行者留下了没能提交的改动".to_string()
            } else {
                "有没提交的改动".to_string()
            };
            if exists {
                self.kept
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(t.path.clone());
            }
            lines.push(format!(
                "保留分支 {} 和 worktree {}({why})",
                t.branch,
                t.path.display()
            ));
        }
        lines
    }

    /// What the coordinator is told of a finished worker's worktree (`outcome`: whether
    /// anything was committed, and the integration when the worker finished); the tree's
    /// state follows it, and a refused or oversized branch is also a notice.
    pub(super) fn finished(
        &self,
        agent: &str,
        tree: (&str, &Path),
        outcome: Result<(Option<()>, Option<Integration>), FinishError>,
    ) -> String {
        let (branch, path) = tree;
        match outcome {
            Ok((committed, None)) => {
                self.set_state(agent, State::Kept);
                let what = if committed.is_some() {
                    format!("它的改动已提交在分支 {}", branch)
                } else {
                    format!("分支 {} 上没有新的改动", branch)
                };
                format!(
                    "[没合入] {agent} 没做完,{what};没有合入工作区。worktree {} 留着。",
                    path.display()
                )
            }
            Ok((_, Some(merged))) => {
                if let Integration::Refused { links, .. } = &merged {
                    self.notices
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!(
                        "没合入 {agent} 的分支 {}:它提交了指到仓库外(或工作台、运行目录、.git)的符号链接 {};分支留着",
                        branch,
                        links.join("、")
                    ));
                }
                let state = match merged {
                    Integration::AlreadyMerged | Integration::Merged { .. } => State::Merged,
                    _ => State::Kept,
                };
                self.set_state(agent, state);
                report(agent, branch, path, &Ok(merged))
            }
            Err(e) => {
                self.set_state(agent, State::Kept);
                if let FinishError::Isolate(IsolateError::TooLarge { .. }) = &e {
                    self.notices
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{agent}:{e}"));
                }
                report(agent, branch, path, &Err(e))
            }
        }
    }

    fn set_state(&self, agent: &str, state: State) {
        if let Some(t) = self
            .trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(agent)
        {
            t.state = state;
        }
    }

    /// The worker's mounts ([`WorkerState::mounts`]) and the workbench.
    fn mounts(&self, worktree: &Path, git: &WorkerState) -> Vec<Mount> {
        let mut v = git.mounts(worktree);
        // The workbench may be created after the placement was opened: resolve it now.
        let workbench = self
            .workbench
            .canonicalize()
            .unwrap_or_else(|_| self.workbench.clone());
        if !workbench.starts_with(worktree) {
            v.push(Mount::same(workbench, false));
        }
        v
    }
}

/// The user's line about gitlinks dropped from a kept worktree's index.
pub(crate) fn gitlinks_note(worktree: &Path, links: &[String]) -> String {
    format!(
        "worktree {} 的索引里去掉了子模块项 {}:执行者可能在里面放了自己的仓库配置,\
         宿主机上的 git status 会进去执行;提交里的还在,确认可信后再 git add 回来",
        worktree.display(),
        links.join("、")
    )
}

/// What a worker in its own worktree is told about git (besides where it is).
fn isolated_git_note(branch: &str) -> String {
    format!(
        "git:可以 git add/commit,提交留在分支 {branch} 上;仓库的其他部分(配置、钩子、别的分支、\
         标签、stash)是只读的,动它们会失败。"
    )
}

/// A list of paths for a report, capped.
pub(super) fn list(paths: &[String]) -> String {
    let mut out: Vec<String> = paths
        .iter()
        .take(LIST_LIMIT)
        .map(|p| format!("- {p}"))
        .collect();
    if paths.len() > LIST_LIMIT {
        out.push(format!("- …… 另有 {} 个", paths.len() - LIST_LIMIT));
    }
    out.join("\n")
}

/// Why a finished worker's work was not brought back (the text is for the coordinator).
#[derive(Debug, thiserror::Error)]
pub(super) enum FinishError {
    /// Its container could not be reached to commit in.
    #[error("没能在 {agent} 的容器里提交({source}),没提交的改动留在 worktree 里")]
    NoSandbox {
        /// The worker.
        agent: String,
        /// Why.
        source: SandboxError,
    },
    /// Committing in its container failed.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// Git on the host failed.
    #[error(transparent)]
    Isolate(#[from] IsolateError),
    /// The integration task died.
    #[error("合入线程崩了:{0}")]
    Crashed(#[source] tokio::task::JoinError),
}

/// The coordinator's report of one worker's integration.
fn report(
    agent: &str,
    branch: &str,
    path: &Path,
    outcome: &Result<Integration, FinishError>,
) -> String {
    let kept = format!("分支 {branch} 和 worktree {} 都留着。", path.display());
    match outcome {
        Ok(Integration::AlreadyMerged) => format!("[合入] {agent} 没有留下新的改动。"),
        Ok(Integration::Merged {
            fast_forward,
            commit,
            files,
            into,
        }) => format!(
            "[合入] {agent} 的分支 {branch} 已合入 {into}({},{}):{} 个文件\n{}",
            if *fast_forward { "快进" } else { "三方合并" },
            &commit.to_string()[..10],
            files.len(),
            list(files)
        ),
        Ok(Integration::Conflict { paths, into }) => format!(
            "[合入失败] {agent} 的分支 {branch} 和 {into} 在这些文件上冲突,这次没有合入,工作区没动:\n{}\n{kept}\
             要解决:派一个执行者,让它在自己的 worktree 里 `git merge {branch}`、解决冲突并提交;它合入时会把这个分支一起带进来。",
            list(paths)
        ),
        Ok(Integration::UserChanges { paths, into }) => format!(
            "[合入暂停] 工作区({into})里有人未提交的改动,而分支 {branch} 也动了这些文件。为了不覆盖人的改动,这次没有合入:\n{}\n{kept}\
             等人提交或处理掉这些改动后,再派执行者合入这个分支。",
            list(paths)
        ),
        Ok(Integration::Refused { links, into }) => format!(
            "[合入被拒] {agent} 的分支 {branch} 提交了指到仓库外、或指进工作台、运行目录、.git 的符号链接,\
             宿主机上的 git 或编辑器会顺着它走进 agent 布置的地方。这次没有合入 {into},工作区没动:\n{}\n{kept}\
             要合入:派执行者在它的 worktree 里把这些链接换成普通文件或仓库内的相对链接,再提交。",
            list(links)
        ),
        Err(e) => format!("[合入失败] {agent}:{e}\n{kept}"),
    }
}

#[async_trait]
impl Placement for WorktreePlacement {
    async fn prepare(&self, agent: &str) -> Result<WorkerPlace, PlaceError> {
        let place = |e: IsolateError| PlaceError(Box::new(e));
        let run = self
            .run
            .get()
            .cloned()
            .ok_or_else(|| place(IsolateError::Unbound))?;
        let _gate = self.gate.lock().await;
        if let Some(side) = self.engine.get() {
            return self
                .prepare_on_engine(side, agent, &run)
                .await
                .map_err(place);
        }
        let (repo, root, owner, who) = (
            self.repo.clone(),
            self.root.clone(),
            self.owner.clone(),
            agent.to_string(),
        );
        let started = Instant::now();
        let made = tokio::task::spawn_blocking(move || {
            let _lock = repo.lock()?;
            let r = repo.open()?;
            add(&r, &root, &run, &who, &owner)
        })
        .await
        .map_err(|source| {
            place(IsolateError::Crashed {
                what: "建 worktree ",
                source,
            })
        })?
        .map_err(|e| {
            place(IsolateError::Prepare {
                agent: agent.to_string(),
                source: Box::new(e),
            })
        })?;
        tracing::info!(agent, branch = %made.branch, path = %made.path.display(),
            ms = started.elapsed().as_millis() as u64, "worktree created");
        let workdir = if self.repo.subdir.as_os_str().is_empty() {
            made.path.clone()
        } else {
            made.path.join(&self.repo.subdir)
        };
        let mounts = self.mounts(&made.path, &made.state);
        let note = Some(isolated_git_note(&made.branch));
        let branch = Some(made.branch.clone());
        self.trees.lock().unwrap_or_else(|e| e.into_inner()).insert(
            agent.to_string(),
            Tree {
                agent: agent.to_string(),
                name: made.name,
                branch: made.branch,
                path: made.path,
                state: State::Working,
                git: made.state,
                left: false,
            },
        );
        Ok(WorkerPlace {
            workdir,
            mounts,
            note,
            branch,
        })
    }

    async fn finish(
        &self,
        agent: &str,
        _place: &WorkerPlace,
        ok: bool,
        sandbox: Option<WorkerSandbox<'_>>,
    ) -> Option<String> {
        let tree = self
            .trees
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .cloned();
        if let Some(side) = self.engine.get() {
            return self.finish_on_engine(side, agent, ok, sandbox).await;
        }
        let tree = tree?;
        let _gate = self.gate.lock().await;
        let run = self.run.get().cloned().unwrap_or_default();
        let message = format!("flowerbox {agent}: 运行 {run} 里的改动");
        let started = Instant::now();
        // What the worker left is committed where it worked: in its container, which sees
        // exactly what the worker saw (a container is created for it if it never ran a
        // command). Only without sandboxes (a caller that runs none) or with host sandboxes
        // (`--sandbox host`: no containment by choice) does libgit2 commit on the host.
        let sealed = match sandbox {
            Some(s) if s.factory.commands_run() == CommandsRun::InContainer => {
                match s.get().await {
                    Ok(sb) => {
                        match seal(sb.as_ref(), &tree.path, &tree.branch, agent, &message).await {
                            // The container's git cannot open the repository (a git older than
                            // 2.48 on `extensions.relativeWorktrees`): the worker's container goes
                            // first, so no process of it is left to change the worktree, and
                            // libgit2 commits on the host (issue 29 §2.7).
                            Err(SealError::Unreadable(why)) => {
                                tracing::info!(agent, %why, "sealing on the host");
                                drop(sb);
                                match s.factory.release(agent).await {
                                    Ok(()) => None,
                                    Err(source) => Some(Err(FinishError::NoSandbox {
                                        agent: agent.to_string(),
                                        source,
                                    })),
                                }
                            }
                            r => Some(r.map_err(FinishError::from)),
                        }
                    }
                    Err(source) => Some(Err(FinishError::NoSandbox {
                        agent: agent.to_string(),
                        source,
                    })),
                }
            }
            _ => None,
        };
        let left = match &sealed {
            Some(Ok(s)) if s.left => Some(s.left_files.clone()),
            _ => None,
        };
        if left.is_some() {
            if let Some(t) = self
                .trees
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(agent)
            {
                t.left = true;
            }
        }
        let guards = self.guards.clone();
        let seal_ms = started.elapsed().as_millis() as u64;
        let (repo, t, who) = (self.repo.clone(), tree.clone(), agent.to_string());
        let outcome = tokio::task::spawn_blocking(move || {
            let _lock = repo.lock()?;
            let committed = match sealed {
                Some(result) => {
                    // The worker's own commits come back even when the last commit failed.
                    let adopted = adopt(&repo, &t.git, Policy::Follow);
                    let committed = result?.committed;
                    let moved = matches!(adopted?, Adopted::Moved { .. });
                    (committed || moved).then_some(())
                }
                None => commit_worktree(&t.path, &t.branch, &who, &message)?.map(|_| ()),
            };
            if !ok {
                return Ok((committed, None));
            }
            let merged = integrate_guarded(&repo, &t.branch, &who, &guards)?;
            Ok::<_, FinishError>((committed, Some(merged)))
        })
        .await
        .unwrap_or_else(|e| Err(FinishError::Crashed(e)));
        tracing::info!(
            agent,
            seal_ms,
            ms = started.elapsed().as_millis() as u64,
            ok,
            "worktree finished"
        );
        let left_note = left.map(|files| {
            format!(
                "\n{agent} 的 worktree {} 里还有没能提交的改动(git 加不进去,或它留下的进程还在改),worktree 会留着:\n{}",
                tree.path.display(),
                list(&files)
            )
        });
        let text = self.finished(agent, (&tree.branch, &tree.path), outcome);
        Some(text + left_note.as_deref().unwrap_or(""))
    }

    async fn abandon(&self, agent: &str, _place: &WorkerPlace) {
        if let Err(e) = self.abandon_tree(agent).await {
            tracing::warn!(agent, error = %e, "a worktree prepared early could not be removed");
        }
    }

    fn shares_workspace(&self) -> bool {
        false
    }

    fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// [`WorktreePlacement::open`] in a blocking task (what the `go` driver calls; it binds the run
/// id once the run context exists). The `Arc` serves both as the runtime's placement and for
/// [`close`].
///
/// [`close`]: WorktreePlacement::close
pub async fn open_for_run(opts: IsolateOptions) -> Result<Arc<WorktreePlacement>, IsolateError> {
    tokio::task::spawn_blocking(move || WorktreePlacement::open(opts).map(Arc::new))
        .await
        .map_err(|e| IsolateError::Io {
            what: "打开仓库的线程崩了".into(),
            source: std::io::Error::other(e.to_string()),
        })?
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;

#[path = "abandon.rs"]
mod abandon;
