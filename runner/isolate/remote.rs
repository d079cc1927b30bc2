//! `--isolate` on an engine that does not share the caller's disk (issue 30 §2): the run's
//! [`EngineDisk`] holds the repository and the workers' places, and the caller's repository
//! is touched only by flowerbox's own integration, as with worktrees.
//!
//! - The workspace's repository goes into a volume shown at its working tree (a bundle of the
//!   checked-out branch, cloned there): what the judge, the coordinator and the gates see,
//!   read-only. A workspace below the working tree is refused: an engine without volume
//!   subpaths cannot show part of a volume.
//! - Each worker gets a volume of its own shown at its would-be worktree path, holding its own
//!   clone with its branch `flower/<run>/<agent>` checked out at the caller's tip. Its `.git`
//!   is its own and writable (a worker can reconfigure it at will): the host never runs git
//!   there, and what comes back is only its branch, as a bundle checked object by object
//!   ([`super::bundle::receive`]).
//! - When a worker ends, what it left is committed in its container ([`super::seal`]), its
//!   branch comes back, is integrated as a worktree's is ([`super::integrate_guarded`]), and
//!   after a merge the workspace's volume is brought up to the caller's branch.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::bundle::{receive, write_bundle, MAX_BUNDLE};
use super::integrate::{integrate_guarded, Integration};
use super::placement::{list, FinishError, WorktreePlacement};
use super::repo::WorkspaceRepo;
use super::seal::seal;
use super::worktree::{delete_branch, is_merged};
use super::{Adopted, IsolateError, Policy};
use crate::agent::{WorkerPlace, WorkerSandbox};
use crate::sandbox::{EngineDisk, Mount, SandboxError};

/// One worker's place on the engine.
#[derive(Debug, Clone)]
pub(crate) struct EnginePlace {
    /// Its branch (`flower/<run>/<agent>`), here and in the caller's repository once back.
    pub branch: String,
    /// Where its volume is shown (its working directory).
    pub at: PathBuf,
    /// The caller's commit it started from.
    pub base: String,
}

/// The placement's side on the engine, once bound ([`super::WorktreePlacement::bind_engine`]).
pub(crate) struct EngineSide {
    pub disk: Arc<dyn EngineDisk>,
    pub places: Mutex<BTreeMap<String, EnginePlace>>,
}

/// An engine operation's failure, with what was being done.
pub(crate) fn engine(what: impl Into<String>) -> impl FnOnce(SandboxError) -> IsolateError {
    let what = what.into();
    move |source| IsolateError::Engine { what, source }
}

/// The caller's checked-out branch (short name) and a bundle of it, under the repository's
/// lock (blocking).
pub(crate) fn branch_bundle(
    repo: &WorkspaceRepo,
) -> Result<(String, Vec<u8>, String), IsolateError> {
    let _lock = repo.lock()?;
    let r = repo.open()?;
    let head = r.head().map_err(IsolateError::git("读不出 HEAD"))?;
    let (Ok(full), Ok(short), true) = (head.name(), head.shorthand(), head.is_branch()) else {
        return Err(IsolateError::DetachedHead(repo.workdir.clone()));
    };
    let tip = head
        .peel_to_commit()
        .map_err(IsolateError::git("读不出 HEAD 的提交"))?
        .id()
        .to_string();
    Ok((short.to_string(), write_bundle(&r, &[full])?, tip))
}

/// [`branch_bundle`] off the async workers.
async fn bundle_off(repo: &WorkspaceRepo) -> Result<(String, Vec<u8>, String), IsolateError> {
    let r = repo.clone();
    tokio::task::spawn_blocking(move || branch_bundle(&r))
        .await
        .map_err(|source| IsolateError::Crashed {
            what: "打包仓库",
            source,
        })?
}

/// Puts the workspace's repository into the engine's volume at its working tree.
pub(crate) async fn bind(
    repo: &WorkspaceRepo,
    disk: Arc<dyn EngineDisk>,
) -> Result<EngineSide, IsolateError> {
    if !repo.subdir.as_os_str().is_empty() {
        return Err(IsolateError::EngineSubdir(repo.workspace.clone()));
    }
    let (target, bundle, _) = bundle_off(repo).await?;
    disk.repository(
        &repo.workdir,
        "workspace",
        bundle,
        &format!("origin/{target}"),
        &target,
    )
    .await
    .map_err(engine("把仓库放进引擎的卷"))?;
    Ok(EngineSide {
        disk,
        places: Mutex::new(BTreeMap::new()),
    })
}

impl EngineSide {
    /// A new place for `agent` at `at` on branch `branch`, from the caller's tip.
    pub(crate) async fn prepare(
        &self,
        repo: &WorkspaceRepo,
        agent: &str,
        at: PathBuf,
        branch: String,
    ) -> Result<EnginePlace, IsolateError> {
        let (_, bundle, base) = bundle_off(repo).await?;
        self.disk
            .repository(&at, agent, bundle, &base, &branch)
            .await
            .map_err(engine(format!("给 {agent} 建仓库副本")))?;
        let place = EnginePlace { branch, at, base };
        self.lock().insert(agent.to_string(), place.clone());
        Ok(place)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, EnginePlace>> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `agent`'s place, once prepared.
    pub(crate) fn place(&self, agent: &str) -> Option<EnginePlace> {
        self.lock().get(agent).cloned()
    }

    /// Brings `place`'s branch back into the caller's repository (checked) and, when `ok`,
    /// integrates it; after a merge the workspace's volume follows. `Ok((moved, merged))`.
    pub(crate) async fn bring_back(
        &self,
        repo: &WorkspaceRepo,
        place: &EnginePlace,
        agent: &str,
        ok: bool,
        guards: &[PathBuf],
    ) -> Result<(bool, Option<Integration>), IsolateError> {
        let back = self
            .disk
            .branch_back(&place.at, &place.branch, &place.base, MAX_BUNDLE)
            .await
            .map_err(engine(format!("取回 {agent} 的分支")))?;
        let (r, branch, who, guards) = (
            repo.clone(),
            place.branch.clone(),
            agent.to_string(),
            guards.to_vec(),
        );
        let outcome = tokio::task::spawn_blocking(move || {
            let _lock = r.lock()?;
            let Some(bytes) = back else {
                return Ok::<_, IsolateError>((false, ok.then_some(Integration::AlreadyMerged)));
            };
            let moved = matches!(
                receive(&r, &bytes, &branch, Policy::Follow)?,
                Adopted::Moved { .. }
            );
            if !ok {
                return Ok((moved, None));
            }
            Ok((moved, Some(integrate_guarded(&r, &branch, &who, &guards)?)))
        })
        .await
        .map_err(|source| IsolateError::Crashed {
            what: "合入",
            source,
        })??;
        if let (_, Some(Integration::Merged { .. })) = &outcome {
            self.refresh(repo).await?;
        }
        Ok(outcome)
    }

    /// Brings the workspace's volume up to the caller's branch.
    pub(crate) async fn refresh(&self, repo: &WorkspaceRepo) -> Result<(), IsolateError> {
        let (target, bundle, _) = bundle_off(repo).await?;
        self.disk
            .update(&repo.workdir, bundle, &target)
            .await
            .map_err(engine("把合入的结果送回引擎的卷"))
    }

    /// At the end of the run (blocking): each worker's branch that came back and is merged
    /// goes; the others stay and are listed for the user. Their volumes go with the run.
    pub(crate) fn close(&self, repo: &WorkspaceRepo) -> Vec<String> {
        let places: Vec<EnginePlace> = std::mem::take(&mut *self.lock()).into_values().collect();
        let Ok(r) = repo.open() else {
            return vec!["分支没清理:打不开仓库".into()];
        };
        let mut lines = Vec::new();
        for p in places {
            let Ok(b) = r.find_branch(&p.branch, git2::BranchType::Local) else {
                continue;
            };
            let merged = b
                .get()
                .target()
                .map(|tip| is_merged(&r, tip).unwrap_or(false));
            match merged {
                Some(true) => {
                    if let Err(e) = delete_branch(&r, &p.branch) {
                        lines.push(e.to_string());
                    }
                }
                _ => lines.push(format!("分支 {} 没合入,留着", p.branch)),
            }
        }
        lines
    }
}

impl WorktreePlacement {
    /// [`Placement::prepare`] on the engine's volumes ([`super::remote`]): a clone of its own,
    /// shown at the path its worktree would have, and the workbench.
    pub(super) async fn prepare_on_engine(
        &self,
        side: &EngineSide,
        agent: &str,
        run: &str,
    ) -> Result<WorkerPlace, IsolateError> {
        let branch = super::worktree::branch_name(run, agent);
        let at = self.root.join(super::worktree::worktree_name(run, agent));
        let made = side
            .prepare(&self.repo, agent, at, branch)
            .await
            .map_err(|e| IsolateError::Prepare {
                agent: agent.to_string(),
                source: Box::new(e),
            })?;
        let workbench = self
            .workbench
            .canonicalize()
            .unwrap_or_else(|_| self.workbench.clone());
        let mut mounts = vec![Mount::same(&made.at, false)];
        if !workbench.starts_with(&made.at) {
            mounts.push(Mount::same(workbench, false));
        }
        Ok(WorkerPlace {
            workdir: made.at.clone(),
            mounts,
            note: Some(git_note(&made.branch)),
            branch: Some(made.branch),
        })
    }

    /// [`Placement::finish`] on the engine's volumes: what the worker left committed in its
    /// container, its branch brought back (checked) and, when it finished, integrated; the
    /// workspace's volume follows a merge.
    pub(super) async fn finish_on_engine(
        &self,
        side: &EngineSide,
        agent: &str,
        ok: bool,
        sandbox: Option<WorkerSandbox<'_>>,
    ) -> Option<String> {
        let place = side.place(agent)?;
        let _gate = self.gate.lock().await;
        let run = self.run.get().cloned().unwrap_or_default();
        let message = format!("flowerbox {agent}: 运行 {run} 里的改动");
        let no_sandbox = |source| FinishError::NoSandbox {
            agent: agent.to_string(),
            source,
        };
        let sealed = match sandbox {
            Some(s) => match s.get().await {
                Ok(sb) => seal(sb.as_ref(), &place.at, &place.branch, agent, &message)
                    .await
                    .map_err(FinishError::from),
                Err(source) => Err(no_sandbox(source)),
            },
            None => Err(no_sandbox(SandboxError::ShutDown)),
        };
        // The worker's own commits come back even when the last commit failed.
        let back = side
            .bring_back(
                &self.repo,
                &place,
                agent,
                ok && sealed.is_ok(),
                &self.guards,
            )
            .await;
        let left = match &sealed {
            Ok(s) if s.left => Some(s.left_files.clone()),
            _ => None,
        };
        let outcome = match (sealed, back) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(FinishError::from(e)),
            (Ok(s), Ok((moved, merged))) => Ok(((s.committed || moved).then_some(()), merged)),
        };
        let left_note = left.map(|files| {
            format!(
                "\n{agent} 的仓库副本里还有没能提交的改动(git 加不进去,或它留下的进程还在改):\n{}",
                list(&files)
            )
        });
        let text = self.finished(agent, (&place.branch, &place.at), outcome);
        Some(text + left_note.as_deref().unwrap_or(""))
    }
}

/// What a worker on such an engine is told about git.
pub(crate) fn git_note(branch: &str) -> String {
    format!(
        "git:这是你自己的仓库副本,可以 git add/commit,提交留在分支 {branch} 上;\
         结束时只取回这个分支,别的分支、标签、配置都不带回。"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An engine disk that records what it was asked and makes nothing.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl EngineDisk for Recorded {
        async fn repository(
            &self,
            at: &Path,
            purpose: &str,
            bundle: Vec<u8>,
            start: &str,
            branch: &str,
        ) -> Result<(), SandboxError> {
            let line = format!(
                "{} {purpose} {start} {branch} {}",
                at.display(),
                bundle.len()
            );
            self.0.lock().unwrap().push(line);
            Ok(())
        }
        async fn directory(&self, _: &Path, _: &str, _: &[&str]) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn upload(&self, _: &Path, _: &str, _: Vec<u8>) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn branch_back(
            &self,
            _: &Path,
            _: &str,
            _: &str,
            _: u64,
        ) -> Result<Option<Vec<u8>>, SandboxError> {
            Ok(None)
        }
        async fn update(&self, _: &Path, _: Vec<u8>, _: &str) -> Result<(), SandboxError> {
            Ok(())
        }
        async fn remove(&self, _: &Path) -> Result<(), SandboxError> {
            Ok(())
        }
    }

    fn repo_at(dir: &Path) -> git2::Repository {
        let r = git2::Repository::init(dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        let mut index = r.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        let tree = r.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("T", "t@example.invalid").unwrap();
        r.commit(Some("HEAD"), &sig, &sig, "one", &tree, &[])
            .unwrap();
        drop(tree);
        r
    }

    #[tokio::test]
    async fn the_repository_goes_in_at_its_root_and_a_subdirectory_or_detached_head_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let r = repo_at(&root);
        let disk = Arc::new(Recorded::default());
        let repo = super::super::open_workspace_repo(&root).unwrap();
        bind(&repo, disk.clone()).await.unwrap();
        let head = r.head().unwrap().shorthand().unwrap().to_string();
        let asked = disk.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert!(
            asked[0].starts_with(&format!(
                "{} workspace origin/{head} {head} ",
                root.display()
            )),
            "{asked:?}"
        );

        std::fs::create_dir(root.join("sub")).unwrap();
        let sub = super::super::open_workspace_repo(&root.join("sub")).unwrap();
        assert!(matches!(
            bind(&sub, disk.clone()).await,
            Err(IsolateError::EngineSubdir(_))
        ));

        let tip = r.head().unwrap().target().unwrap();
        r.set_head_detached(tip).unwrap();
        assert!(matches!(
            bind(&repo, disk.clone()).await,
            Err(IsolateError::DetachedHead(_))
        ));
        assert_eq!(
            disk.0.lock().unwrap().len(),
            1,
            "nothing made for a refusal"
        );
    }
}
