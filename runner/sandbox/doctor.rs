//! `flowerbox doctor`: one line per check with 通过 / 注意 / 不行 (pass / warn / fail; issue
//! "Lifecycle"): the sandbox backend's own checks (for Docker: the engine, the agent image and
//! its tools), git, credentials (names only, never values),
//! the egress policy in force, and what dead runs left in the backend. Check names stay ASCII words (`engine`, `image`...) so the
//! lines grep; the rest is Chinese with identifiers verbatim. The CLI prints [`Check`]s and exits
//! 1 when any failed.

use std::fmt;
use std::path::PathBuf;

use super::SandboxBackend;

/// Tools an agent image should have; judges need `file` and `lsof`, judges and coordinators
/// `setpriv` (they run as a uid of their own, see [`super::SandboxPolicy`]).
pub const AGENT_TOOLS: &[&str] = &[
    "bash", "git", "file", "lsof", "ps", "rg", "python3", "curl", "make", "gcc", "tini", "setpriv",
];

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// Fine.
    Pass,
    /// Works, with a caveat.
    Warn,
    /// Broken: runs will fail.
    Fail,
}

impl CheckStatus {
    fn label(self) -> &'static str {
        match self {
            CheckStatus::Pass => "通过",
            CheckStatus::Warn => "注意",
            CheckStatus::Fail => "不行",
        }
    }
}

/// One check's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// `engine`, `image`, `tools`, `judge`, `git`, `workspace`, `credentials`, `orphans`.
    pub name: &'static str,
    /// The outcome.
    pub status: CheckStatus,
    /// What was found (no secret values).
    pub detail: String,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {:<11} {}",
            self.status.label(),
            self.name,
            self.detail
        )
    }
}

/// What `doctor` looks at besides the backend.
#[derive(Debug, Clone)]
pub struct DoctorInput {
    /// The workspace.
    pub workspace: PathBuf,
    /// Names of the credentials found (from the credentials module); values never come here.
    pub credential_names: Vec<String>,
    /// The egress policy runs would use (`--egress`, `--allow-net`, `--allow-domain`).
    pub egress: super::egress::EgressPolicy,
}

/// 1 when any check failed, else 0.
pub fn exit_code(checks: &[Check]) -> i32 {
    i32::from(checks.iter().any(|c| c.status == CheckStatus::Fail))
}

impl Check {
    /// A check's line.
    pub fn new(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
        Check {
            name,
            status,
            detail: detail.into(),
        }
    }
}

fn check(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check::new(name, status, detail)
}

/// Runs every check; never fails as a whole: `backend`'s own checks, then the egress policy,
/// git, the workspace, its `.git`, the credentials, and what dead runs left in `backend`.
pub async fn doctor(backend: &dyn SandboxBackend, input: &DoctorInput) -> Vec<Check> {
    use CheckStatus::*;
    let ws = std::fs::canonicalize(&input.workspace).unwrap_or_else(|_| input.workspace.clone());
    let mut checks = backend.checks(&ws).await;
    checks.push(check("egress", Pass, input.egress.describe()));
    checks.push(git_check().await);
    checks.push(workspace_check(&input.workspace));
    checks.push(gitdir_check(&input.workspace));
    checks.push(if input.credential_names.is_empty() {
        check("credentials", Fail, "一个凭证都没找到")
    } else {
        check(
            "credentials",
            Pass,
            format!("找到了 {}", input.credential_names.join(", ")),
        )
    });
    checks.extend(backend.leftovers(&ws).await);
    checks
}

async fn git_check() -> Check {
    match tokio::process::Command::new("git")
        .arg("--version")
        .output()
        .await
    {
        Ok(o) if o.status.success() => check(
            "git",
            CheckStatus::Pass,
            format!("有 git({})", String::from_utf8_lossy(&o.stdout).trim()),
        ),
        _ => check(
            "git",
            CheckStatus::Warn,
            "PATH 上没有 git(flowerbox 自己在主机上不用它,建 worktree、合并都走 libgit2;看保留的 worktree 要用)",
        ),
    }
}

fn workspace_check(workspace: &std::path::Path) -> Check {
    if !workspace.is_dir() {
        return check(
            "workspace",
            CheckStatus::Fail,
            format!("{} 不是目录", workspace.display()),
        );
    }
    match git2::Repository::discover(workspace) {
        Ok(repo) => {
            let root = repo
                .workdir()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            check(
                "workspace",
                CheckStatus::Pass,
                format!("{} 在 git 仓库 {root} 里", workspace.display()),
            )
        }
        Err(_) => check(
            "workspace",
            CheckStatus::Warn,
            format!(
                "{} 不在 git 仓库里(--isolate 要有仓库)",
                workspace.display()
            ),
        ),
    }
}

/// How the repository's `.git` is mounted in agent containers (DESIGN.md threat model 2).
fn gitdir_check(workspace: &std::path::Path) -> Check {
    use CheckStatus::*;
    let isolated = "带 --isolate 时也只读,执行者只能写自己 worktree 的管理目录、对象库副本和分支 flower/<运行>/<执行者>";
    let Ok(repo) = git2::Repository::discover(workspace) else {
        return check("gitdir", Pass, "不在 git 仓库里:没有 .git 要挂");
    };
    let common = repo.commondir().to_path_buf();
    let own = workspace.join(".git");
    match std::fs::symlink_metadata(&own) {
        Ok(md) if md.file_type().is_symlink() => check(
            "gitdir",
            Warn,
            format!(
                "{} 是符号链接:执行者容器里只读挂的是它指向的目录,链接本身执行者能换掉;{isolated}",
                own.display()
            ),
        ),
        Ok(_) => check(
            "gitdir",
            Pass,
            format!(
                "{} 在执行者容器里只读(钩子、配置、分支都改不了,不能提交);{isolated}",
                own.display()
            ),
        ),
        Err(_) => check(
            "gitdir",
            Pass,
            format!(
                "{} 在工作区外,不带 --isolate 时容器里看不到;{isolated}",
                common.display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gitdir_line_says_how_git_is_mounted() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let line = gitdir_check(&ws).to_string();
        assert_eq!(line, "通过  gitdir      不在 git 仓库里:没有 .git 要挂");
        git2::Repository::init(&ws).unwrap();
        let line = gitdir_check(&ws).to_string();
        assert!(
            line.starts_with(&format!(
                "通过  gitdir      {}/.git 在执行者容器里只读",
                ws.display()
            )),
            "{line}"
        );
        assert!(
            line.contains("flower/<运行>/<执行者>") && !line.contains('\n'),
            "{line}"
        );
        std::fs::create_dir(ws.join("sub")).unwrap();
        let line = gitdir_check(&ws.join("sub")).to_string();
        assert!(line.contains("在工作区外"), "{line}");
    }

    #[test]
    fn lines_and_exit_code() {
        let ok = check("git", CheckStatus::Pass, "有 git(git version 2.39)");
        assert_eq!(ok.to_string(), "通过  git         有 git(git version 2.39)");
        let warn = check("image", CheckStatus::Warn, "没有 x");
        assert_eq!(warn.to_string(), "注意  image       没有 x");
        let bad = check("credentials", CheckStatus::Fail, "一个凭证都没找到");
        assert_eq!(bad.to_string(), "不行  credentials 一个凭证都没找到");
        assert_eq!(exit_code(std::slice::from_ref(&ok)), 0);
        assert_eq!(exit_code(&[ok, bad]), 1);
    }
}
