//! The workspace's repository as isolation sees it: where its working tree and git common dir
//! are, what it warns about at start (uncommitted changes workers will not see, relative
//! worktree paths), the integration lock, and the identity commits are made with.

use git2::{ErrorCode, Repository, Signature, StatusOptions};
use std::path::{Path, PathBuf};

use super::IsolateError;
use crate::record::lock::FileLock;

/// The repository of a workspace (paths canonical). Cheap to clone; opens a fresh
/// [`Repository`] for every operation (git2 handles are not `Sync`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRepo {
    /// The workspace (may be a subdirectory of the working tree).
    pub workspace: PathBuf,
    /// The repository's working tree root.
    pub workdir: PathBuf,
    /// The git common dir (`.git` of the main repository): objects, refs, `worktrees/`.
    pub commondir: PathBuf,
    /// The workspace relative to `workdir` (empty when they are the same).
    pub subdir: PathBuf,
    /// `extensions.relativeWorktrees` is on (git ≥ 2.48 writes relative worktree links).
    pub relative_worktrees: bool,
    /// What a worker's branch may bring back ([`super::adopt`]); the defaults until the run
    /// sets its own.
    pub limits: super::ObjectLimits,
}

/// Opens the repository containing `workspace`.
///
/// # Errors
/// [`IsolateError::NotARepository`] (seed 000's text) when there is none;
/// [`IsolateError::Open`] when libgit2 refuses it (its message names an unsupported
/// `extensions.*`); [`IsolateError::Bare`]; [`IsolateError::Unborn`] when HEAD has no commit.
pub fn open_workspace_repo(workspace: &Path) -> Result<WorkspaceRepo, IsolateError> {
    let workspace = workspace.canonicalize().map_err(IsolateError::io(format!(
        "找不到工作区 {}",
        workspace.display()
    )))?;
    let repo = match Repository::discover(&workspace) {
        Ok(r) => r,
        Err(e) if e.code() == ErrorCode::NotFound => {
            return Err(IsolateError::NotARepository(workspace))
        }
        Err(e) => {
            return Err(IsolateError::Open {
                path: workspace,
                message: e.message().to_string(),
            })
        }
    };
    let Some(workdir) = repo.workdir() else {
        return Err(IsolateError::Bare(workspace));
    };
    let workdir = workdir
        .canonicalize()
        .map_err(IsolateError::io("找不到仓库的工作区"))?;
    let commondir = repo
        .commondir()
        .canonicalize()
        .map_err(IsolateError::io("找不到仓库的 git 目录"))?;
    match repo.head() {
        Ok(_) => {}
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
            return Err(IsolateError::Unborn(workspace))
        }
        Err(e) => return Err(IsolateError::git("读不出 HEAD")(e)),
    }
    let relative_worktrees = repo
        .config()
        .and_then(|c| c.get_bool("extensions.relativeworktrees"))
        .unwrap_or(false);
    let subdir = workspace
        .strip_prefix(&workdir)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Ok(WorkspaceRepo {
        workspace,
        workdir,
        commondir,
        subdir,
        relative_worktrees,
        limits: super::ObjectLimits::default(),
    })
}

impl WorkspaceRepo {
    /// A fresh handle on the main repository.
    pub fn open(&self) -> Result<Repository, IsolateError> {
        Repository::open(&self.workdir).map_err(|e| IsolateError::Open {
            path: self.workdir.clone(),
            message: e.message().to_string(),
        })
    }

    /// Takes the cross-process integration lock (`<commondir>/flowerbox-integrate.lock`, an
    /// advisory `flock` the kernel drops when the holder dies). Blocks.
    pub fn lock(&self) -> Result<FileLock, IsolateError> {
        FileLock::exclusive(&self.commondir.join("flowerbox-integrate")).map_err(|e| {
            IsolateError::Io {
                what: "拿不到合入锁".into(),
                source: std::io::Error::other(e.to_string()),
            }
        })
    }

    /// Paths (relative to the working tree) with uncommitted changes: staged, modified, deleted
    /// or untracked-not-ignored; paths under `exclude` (absolute) are left out. Sorted.
    pub fn uncommitted(&self, exclude: &[PathBuf]) -> Result<Vec<String>, IsolateError> {
        let repo = self.open()?;
        let mut out: Vec<String> = dirty_paths(&repo)?
            .into_iter()
            .filter(|p| {
                let abs = self.workdir.join(p);
                !exclude.iter().any(|e| abs.starts_with(e))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// One-line warnings for the start of a run: uncommitted changes workers will not see
    /// (they start from HEAD), and relative worktree links.
    pub fn start_warnings(&self, exclude: &[PathBuf]) -> Result<Vec<String>, IsolateError> {
        let mut out = Vec::new();
        let dirty = self.uncommitted(exclude)?;
        if !dirty.is_empty() {
            let shown: Vec<&str> = dirty.iter().take(3).map(String::as_str).collect();
            let more = if dirty.len() > 3 { " 等" } else { "" };
            out.push(format!(
                "工作区有 {} 处未提交的改动({}{more}):执行者的 worktree 从 HEAD 建,看不到这些改动",
                dirty.len(),
                shown.join("、")
            ));
        }
        if self.relative_worktrees {
            out.push(
                "仓库开了 extensions.relativeWorktrees:容器里的 git 要 ≥ 2.48 才认它(默认镜像是 2.39):\
                 执行者在容器里跑的 git 命令都会失败;它们的改动在它们的容器删掉之后由 flowerbox 在宿主上提交、合入。\
                 要让执行者用 git,换 git ≥ 2.48 的镜像(--image),或关掉这个扩展"
                    .into(),
            );
        }
        Ok(out)
    }
}

/// Paths (relative to the working tree, in libgit2's order) whose status is not clean: staged,
/// modified, deleted, typechange or untracked-not-ignored. Submodules are left out.
pub(crate) fn dirty_paths(repo: &Repository) -> Result<Vec<String>, IsolateError> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(IsolateError::git("读不出工作区状态"))?;
    Ok(statuses
        .iter()
        .map(|s| String::from_utf8_lossy(s.path_bytes()).into_owned())
        .collect())
}

/// The identity commits are made with: the repository's configured identity when there is one
/// (the user's own history stays consistent), else `flowerbox <agent>`.
pub fn signature(repo: &Repository, agent: &str) -> Result<Signature<'static>, IsolateError> {
    match repo.signature() {
        Ok(s) => Ok(s),
        Err(_) => Signature::now(
            &format!("flowerbox {agent}"),
            &format!("{agent}@flowerbox.invalid"),
        )
        .map_err(IsolateError::git("写不出提交者")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use crate::testkit::git_with_identity as git;

    /// A repository at `<tmp>/proj` with one commit (`a.txt`, `b.txt`).
    pub(crate) fn repo_with_commit() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("proj");
        std::fs::create_dir(&ws).unwrap();
        git(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(ws.join("b.txt"), "b\n").unwrap();
        git(&ws, &["add", "."]);
        git(&ws, &["commit", "-q", "-m", "init"]);
        (dir, ws)
    }

    #[test]
    fn opens_and_refuses_honestly() {
        let (_d, ws) = repo_with_commit();
        let r = open_workspace_repo(&ws).unwrap();
        assert_eq!(r.workdir, ws);
        assert_eq!(r.commondir, ws.join(".git"));
        assert!(r.subdir.as_os_str().is_empty());
        std::fs::create_dir(ws.join("sub")).unwrap();
        let sub = open_workspace_repo(&ws.join("sub")).unwrap();
        assert_eq!(sub.subdir, Path::new("sub"));

        let plain = tempfile::tempdir().unwrap();
        let e = open_workspace_repo(plain.path()).unwrap_err();
        assert!(matches!(e, IsolateError::NotARepository(_)), "{e}");
        assert!(e.to_string().contains("先 git init,或者去掉 --isolate"));

        let empty = tempfile::tempdir().unwrap();
        git(empty.path(), &["init", "-q"]);
        assert!(matches!(
            open_workspace_repo(empty.path()),
            Err(IsolateError::Unborn(_))
        ));
    }

    /// Sets repository config keys the host's git may not know (it is 2.47; the extension
    /// came with 2.48).
    fn set_config(ws: &Path, pairs: &[(&str, &str)]) {
        let mut c = git2::Config::open(&ws.join(".git/config")).unwrap();
        for (k, v) in pairs {
            c.set_str(k, v).unwrap();
        }
    }

    #[tokio::test]
    async fn relative_worktrees_open_with_a_warning_and_unknown_extensions_are_named() {
        use crate::agent::Placement;
        let (dir, ws) = repo_with_commit();
        set_config(
            &ws,
            &[
                ("core.repositoryformatversion", "1"),
                ("extensions.relativeWorktrees", "true"),
            ],
        );
        let r = open_workspace_repo(&ws).unwrap();
        assert!(r.relative_worktrees);
        let w = r.start_warnings(&[]).unwrap();
        assert!(
            w.iter().any(|l| l.contains("extensions.relativeWorktrees")),
            "{w:?}"
        );
        // Worktrees work on such a repository (libgit2 writes absolute links).
        let wb = dir.path().join("wb");
        std::fs::create_dir(&wb).unwrap();
        let p =
            crate::isolate::WorktreePlacement::open(crate::isolate::IsolateOptions::new(&ws, &wb))
                .unwrap();
        p.bind_run("r1");
        let place = p.prepare("worker-1").await.unwrap();
        std::fs::write(place.workdir.join("rel.txt"), "r\n").unwrap();
        let report = p.finish("worker-1", &place, true, None).await.unwrap();
        assert!(report.contains("已合入"), "{report}");
        assert!(ws.join("rel.txt").is_file());

        let (_d2, other) = repo_with_commit();
        set_config(
            &other,
            &[
                ("core.repositoryformatversion", "1"),
                ("extensions.frobnicate", "true"),
            ],
        );
        let e = open_workspace_repo(&other).unwrap_err();
        assert!(matches!(e, IsolateError::Open { .. }), "{e}");
        assert!(e.to_string().contains("frobnicate"), "{e}");
    }

    #[test]
    fn dirty_workspace_warns_in_one_line_and_excludes_the_runners_files() {
        let (_d, ws) = repo_with_commit();
        let r = open_workspace_repo(&ws).unwrap();
        assert!(r.start_warnings(&[]).unwrap().is_empty());
        std::fs::create_dir(ws.join("runs")).unwrap();
        std::fs::write(ws.join("runs/sessions.db"), "x").unwrap();
        assert!(r.start_warnings(&[ws.join("runs")]).unwrap().is_empty());
        std::fs::write(ws.join("a.txt"), "changed\n").unwrap();
        std::fs::write(ws.join("new.txt"), "n\n").unwrap();
        let w = r.start_warnings(&[ws.join("runs")]).unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(!w[0].contains('\n'));
        assert!(w[0].contains("2 处") && w[0].contains("a.txt"), "{w:?}");
    }
}
