//! Committing what a worker left, inside its own container (DESIGN.md threat model 2). The
//! host never walks a worktree that a process of the worker may still be changing (a server it
//! left running could swap a directory for a symlink mid-walk and have host files committed and
//! merged): git in the worker's container sees exactly what the worker saw, so a link can only
//! lead where the worker could already read. Hooks and fsmonitor are off for this commit; a
//! hostile configuration in the container's HOME only runs in that container.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::sandbox::{ExecRequest, Sandbox};

/// How long the commit may take.
const SEAL_TIMEOUT: Duration = Duration::from_secs(120);

/// What the commit in the container did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sealed {
    /// A commit was made.
    pub committed: bool,
    /// Changes are still uncommitted after it (a file git could not add, a lock git could not
    /// take, or a process the worker left running changed something since): the worktree will
    /// be kept.
    pub left: bool,
    /// The paths still uncommitted, as `git status` names them (never read as clean).
    pub left_files: Vec<String>,
}

/// Exit codes of [`script`] that mean a refusal with a reason on stderr.
const NOT_ON_BRANCH: i64 = 3;
const CONFLICTS: i64 = 4;
/// The container's git cannot open the worktree at all (an `extensions.*` it does not know,
/// `relativeWorktrees` above all): not the worker's doing.
const UNREADABLE: i64 = 5;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The shell script that commits everything uncommitted on `branch` (tracked changes,
/// deletions, untracked-not-ignored files; a merge left uncommitted becomes a merge commit),
/// as the repository's identity or `flowerbox <agent>`.
pub fn script(branch: &str, agent: &str, message: &str) -> String {
    let name = quote(&format!("user.name=flowerbox {agent}"));
    let email = quote(&format!("user.email={agent}@flowerbox.invalid"));
    format!(
        r#"g() {{ git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c commit.gpgSign=false "$@"; }}
head=$(git symbolic-ref -q HEAD); rc=$?
if [ $rc -gt 1 ]; then echo "容器里的 git 读不了这个 worktree(退出码 $rc;仓库开了 extensions.relativeWorktrees 时,容器里的 git 要 ≥ 2.48)" >&2; exit {UNREADABLE}; fi
if [ "$head" != {want} ]; then echo "worktree 的 HEAD 在 ${{head:-分离的提交}} 上,不在分支 {branch_q} 上(执行者切了分支?),没有提交" >&2; exit {NOT_ON_BRANCH}; fi
if [ -n "$(git ls-files -u)" ]; then echo "worktree 里有没解决的冲突,没有提交" >&2; exit {CONFLICTS}; fi
left() {{ s=$(g -c core.quotePath=false status --porcelain 2>/dev/null); if [ -n "$s" ]; then echo left; printf '%s\n' "$s" | sed 's/^...//; s/^/left: /'; fi; }}
# What cannot be added (an empty nested repository, a file a live process keeps changing)
# stays in the worktree, which is then kept.
for i in 1 2 3; do g add -A --ignore-errors 2>/dev/null && break; done
if g diff --cached --quiet && ! git rev-parse -q --verify MERGE_HEAD >/dev/null; then left; echo clean; exit 0; fi
if git config user.name >/dev/null && git config user.email >/dev/null; then set --; else set -- -c {name} -c {email}; fi
g "$@" commit --no-verify -q -m {msg} || {{ echo "没提交的文件:" >&2; g -c core.quotePath=false status --porcelain >&2; exit 6; }}
left; echo committed
"#,
        want = quote(&format!("refs/heads/{branch}")),
        branch_q = branch,
        msg = quote(message),
    )
}

/// Why what a worker left could not be committed (the text is for the coordinator).
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The sandbox could not run the commit.
    #[error("在 {agent} 的容器里提交失败:{source}")]
    Exec {
        /// The worker.
        agent: String,
        /// Why.
        source: crate::sandbox::SandboxError,
    },
    /// The worker switched branches or left conflicts: the script's own explanation.
    #[error("{0}")]
    Refused(String),
    /// The container's git cannot open the repository (what it said): the commit is the
    /// host's to make, once no process of the worker is left.
    #[error("{0}")]
    Unreadable(String),
    /// The commit did not finish in time.
    #[error("在容器里提交超时({0} 秒)")]
    Timeout(u64),
    /// git failed in the container.
    #[error("在容器里提交失败(退出码 {}):{stderr}", code.map_or("无".to_string(), |c| c.to_string()))]
    Failed {
        /// Its exit code, if it had one.
        code: Option<i64>,
        /// What it said.
        stderr: String,
    },
}

/// Runs [`script`] in the worker's sandbox, in its worktree root `cwd`.
///
/// # Errors
/// The worker switched branches, left conflicts, or git or the sandbox failed.
pub async fn seal(
    sandbox: &dyn Sandbox,
    cwd: &std::path::Path,
    branch: &str,
    agent: &str,
    message: &str,
) -> Result<Sealed, SealError> {
    let req = ExecRequest {
        command: script(branch, agent, message),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        timeout: SEAL_TIMEOUT,
        output_cap: 16 * 1024,
        spill_dir: None,
        cancel: CancellationToken::new(),
    };
    let out = sandbox.exec(req).await.map_err(|source| SealError::Exec {
        agent: agent.to_string(),
        source,
    })?;
    if out.success() {
        return Ok(parse(&out.stdout));
    }
    let why = out.stderr.trim().to_string();
    Err(match out.exit_code {
        Some(NOT_ON_BRANCH | CONFLICTS) => SealError::Refused(why),
        Some(UNREADABLE) => SealError::Unreadable(why),
        _ if out.timed_out => SealError::Timeout(SEAL_TIMEOUT.as_secs()),
        code => SealError::Failed { code, stderr: why },
    })
}

/// What [`script`] printed: `left` and one `left: <path>` per uncommitted path, then `clean`
/// or `committed` on the last line.
fn parse(stdout: &str) -> Sealed {
    let lines: Vec<&str> = stdout.lines().collect();
    Sealed {
        committed: lines.iter().rev().find(|l| !l.trim().is_empty()) == Some(&"committed"),
        left: lines.contains(&"left"),
        left_files: lines
            .iter()
            .filter_map(|l| l.strip_prefix("left: "))
            .map(str::to_string)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::git_with_identity as git;

    fn sh(dir: &std::path::Path, script: &str) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
    }

    #[test]
    fn the_script_commits_leftovers_refuses_conflicts_and_other_branches() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path();
        git(ws, &["init", "-q", "-b", "flower/r/w-1"]);
        std::fs::write(ws.join("a"), "a\n").unwrap();
        git(ws, &["add", "a"]);
        git(ws, &["commit", "-qm", "a"]);
        let s = script("flower/r/w-1", "w-1", "it's done");
        let o = sh(ws, &s);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "clean");
        let words = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        std::fs::write(ws.join("new"), "n\n").unwrap();
        std::fs::remove_file(ws.join("a")).unwrap();
        let o = sh(ws, &s);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "committed",
            "{o:?}"
        );
        assert_eq!(git(ws, &["log", "-1", "--format=%s"]).trim(), "it's done");
        assert_eq!(git(ws, &["status", "--porcelain"]), "");
        // An empty nested repository cannot be added; the rest is committed.
        std::fs::write(ws.join("more"), "m\n").unwrap();
        git(ws, &["init", "-q", "nested"]);
        let o = sh(ws, &s);
        assert_eq!(words(&o), "left left: nested/ committed", "{o:?}");
        let sealed = parse(&String::from_utf8_lossy(&o.stdout));
        assert!(sealed.committed && sealed.left, "{sealed:?}");
        assert_eq!(sealed.left_files, ["nested/"]);
        assert_eq!(git(ws, &["status", "--porcelain"]), "?? nested/\n");
        git(ws, &["checkout", "-q", "-b", "other"]);
        let o = sh(ws, &s);
        assert_eq!(o.status.code(), Some(NOT_ON_BRANCH as i32), "{o:?}");
    }

    #[test]
    fn a_worktree_git_cannot_read_is_named_so_not_blamed_on_the_worker() {
        // What a git older than 2.48 (the image's 2.39, this machine's) meets in a repository
        // with `extensions.relativeWorktrees`: a repository it refuses to open. Its own exit
        // code, and not "执行者切了分支?" (issue 29 §2.7).
        let d = tempfile::tempdir().unwrap();
        let ws = d.path();
        git(ws, &["init", "-q", "-b", "flower/r/w-1"]);
        std::fs::write(ws.join("a"), "a\n").unwrap();
        git(ws, &["add", "a"]);
        git(ws, &["commit", "-qm", "a"]);
        git(ws, &["config", "core.repositoryformatversion", "1"]);
        // A git that knows the extension opens it; any git refuses one it does not know.
        let version = git(ws, &["--version"]);
        let knows = version
            .split_whitespace()
            .nth(2)
            .and_then(|v| {
                let mut n = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                Some((n.next()?, n.next()?))
            })
            .is_some_and(|v| v >= (2, 48));
        let extension = match knows {
            false => "extensions.relativeWorktrees",
            true => "extensions.flowerboxUnknown",
        };
        git(ws, &["config", extension, "true"]);
        std::fs::write(ws.join("b"), "b\n").unwrap();
        let o = sh(ws, &script("flower/r/w-1", "w-1", "m"));
        assert_eq!(o.status.code(), Some(UNREADABLE as i32), "{o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("读不了这个 worktree") && !err.contains("切了分支"),
            "{err}"
        );
        // A gitdir link that leads nowhere is the same case.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".git"), "gitdir: /nonexistent/wt\n").unwrap();
        let o = sh(d.path(), &script("flower/r/w-1", "w-1", "m"));
        assert_eq!(o.status.code(), Some(UNREADABLE as i32), "{o:?}");
    }

    #[test]
    fn a_held_index_lock_leaves_the_files_named_never_clean() {
        // A git killed mid-`add` leaves `index.lock`: nothing can be staged, and the seal must
        // say which files it could not commit.
        let d = tempfile::tempdir().unwrap();
        let ws = d.path();
        git(ws, &["init", "-q", "-b", "flower/r/w-1"]);
        std::fs::write(ws.join("a"), "a\n").unwrap();
        git(ws, &["add", "a"]);
        git(ws, &["commit", "-qm", "a"]);
        std::fs::write(ws.join("wörk.txt"), "w\n").unwrap();
        std::fs::write(ws.join(".git/index.lock"), "").unwrap();
        let o = sh(ws, &script("flower/r/w-1", "w-1", "m"));
        assert!(o.status.success(), "{o:?}");
        let sealed = parse(&String::from_utf8_lossy(&o.stdout));
        assert!(!sealed.committed && sealed.left, "{sealed:?}");
        assert_eq!(sealed.left_files, ["wörk.txt"]);
    }
}
