//! `flowerbox doctor`: one line per check with 通过 / 注意 / 不行 (pass / warn / fail; issue
//! "Lifecycle"): the engine, the agent image and its tools, git, credentials (names only, never
//! values), the egress policy in force, and orphaned containers. Check names stay ASCII words (`engine`, `image`...) so the
//! lines grep; the rest is Chinese with identifiers verbatim. The CLI prints [`Check`]s and exits
//! 1 when any failed.

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions};
use futures::StreamExt;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::docker::image::{base_image, default_image, image_exists, SLIM_BASE};
use super::docker::{Engine, UserIds};
use super::gc;

/// Tools an agent image should have; judges need `file` and `lsof`, judges and coordinators
/// `setpriv` (they run as a uid of their own, see [`super::docker::readonly`]).
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

/// What `doctor` looks at.
#[derive(Debug, Clone)]
pub struct DoctorInput {
    /// Engine endpoint override (`None` = `DOCKER_HOST` / context / default).
    pub docker_host: Option<String>,
    /// `--image` / `FLOWERBOX_IMAGE`.
    pub image: Option<String>,
    /// The workspace.
    pub workspace: PathBuf,
    /// Names of the credentials found (from the credentials module); values never come here.
    pub credential_names: Vec<String>,
    /// Engine ping timeout.
    pub timeout: Duration,
    /// The egress policy runs would use (`--egress`, `--allow-net`, `--allow-domain`).
    pub egress: super::egress::EgressPolicy,
}

/// 1 when any check failed, else 0.
pub fn exit_code(checks: &[Check]) -> i32 {
    i32::from(checks.iter().any(|c| c.status == CheckStatus::Fail))
}

fn check(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// Runs every check; never fails as a whole.
pub async fn doctor(input: &DoctorInput) -> Vec<Check> {
    use CheckStatus::*;
    let mut checks = Vec::new();
    let engine = Engine::connect(input.docker_host.as_deref(), input.timeout).await;
    match &engine {
        Ok(e) => checks.push(check(
            "engine",
            Pass,
            format!(
                "Docker 引擎 {} 有回应(API {};{})",
                e.endpoint().host,
                e.api_version(),
                e.endpoint().origin()
            ),
        )),
        Err(e) => checks.push(check("engine", Fail, e.to_string())),
    }
    match &engine {
        Ok(engine) => {
            let (image_check, present) = image_check(engine, input.image.as_deref()).await;
            checks.push(image_check);
            if let Some(image) = present {
                let (tools, missing) = tools_check(engine, &image).await;
                checks.push(tools);
                checks.push(judge_check(&missing));
            }
        }
        Err(_) => checks.push(check("image", Warn, "没查:没有引擎")),
    }
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
    if let Ok(engine) = &engine {
        let ws =
            std::fs::canonicalize(&input.workspace).unwrap_or_else(|_| input.workspace.clone());
        checks.push(match gc::list(engine, Some(&ws)).await {
            Ok(all) => {
                let orphans = all.iter().filter(|c| c.is_orphan()).count();
                if all.is_empty() {
                    check("orphans", Pass, "没有残留的容器")
                } else if orphans == 0 {
                    check(
                        "orphans",
                        Pass,
                        format!("没有残留的容器({} 个容器的主人还在跑或查不清)", all.len()),
                    )
                } else {
                    check(
                        "orphans",
                        Warn,
                        format!("{orphans} 个残留的容器;`flowerbox gc` 会删掉它们"),
                    )
                }
            }
            Err(e) => check("orphans", Warn, format!("列不出容器:{e}")),
        });
    }
    checks
}

async fn image_check(engine: &Engine, requested: Option<&str>) -> (Check, Option<String>) {
    use CheckStatus::*;
    let image = requested.map(str::to_string).unwrap_or_else(default_image);
    match image_exists(engine, &image).await {
        Ok(true) => (check("image", Pass, format!("有 {image}")), Some(image)),
        Ok(false) if requested.is_some() => (
            check(
                "image",
                Fail,
                format!("引擎上没有 {image}(--image / FLOWERBOX_IMAGE 选的)"),
            ),
            None,
        ),
        Ok(false) => {
            let base = base_image();
            let how = if image_exists(engine, &base).await.unwrap_or(false) {
                format!("从 {base} 建")
            } else if image_exists(engine, SLIM_BASE).await.unwrap_or(false) {
                format!("从 {SLIM_BASE} 建")
            } else if which("debootstrap") {
                format!("用 debootstrap 建(先建 {base};要 root)")
            } else {
                format!("建不了:没有 {base} 和 {SLIM_BASE},也没装 debootstrap")
            };
            (
                check("image", Warn, format!("没有 {image};第一次用时{how}")),
                None,
            )
        }
        Err(e) => (check("image", Fail, e.to_string()), None),
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// Who the read-only roles run as, with which capabilities (one line); fails when the image
/// has no `setpriv`, without which judges and coordinators cannot start.
fn judge_check(missing: &[String]) -> Check {
    let line = super::docker::readonly::describe(UserIds::current());
    if missing.iter().any(|m| m == "setpriv") {
        check(
            "judge",
            CheckStatus::Fail,
            format!("镜像里没有 setpriv(util-linux),判定者和协调者起不来;{line}"),
        )
    } else {
        check("judge", CheckStatus::Pass, line)
    }
}

/// Runs `command -v` for every [`AGENT_TOOLS`] entry in a throwaway container; the check and
/// the tools missing (none when the check itself could not run).
async fn tools_check(engine: &Engine, image: &str) -> (Check, Vec<String>) {
    use CheckStatus::*;
    let script = format!(
        "for t in {}; do command -v \"$t\" >/dev/null 2>&1 || echo \"$t\"; done",
        AGENT_TOOLS.join(" ")
    );
    let ids = UserIds::current();
    let body = ContainerCreateBody {
        image: Some(image.into()),
        entrypoint: Some(vec!["sh".into(), "-c".into(), script]),
        cmd: Some(vec![]),
        user: Some(format!("{}:{}", ids.uid, ids.gid)),
        host_config: Some(HostConfig {
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let docker = engine.docker();
    let id = match docker.create_container(None, body).await {
        Ok(r) => r.id,
        Err(e) => {
            return (
                check("tools", Warn, format!("起不了 {image} 的容器:{e}")),
                Vec::new(),
            )
        }
    };
    let run = async {
        docker.start_container(&id, None).await?;
        let mut wait = docker.wait_container(&id, None);
        while let Some(r) = wait.next().await {
            if let Err(e) = r {
                if !matches!(e, bollard::errors::Error::DockerContainerWaitError { .. }) {
                    return Err(e);
                }
            }
        }
        let mut out = String::new();
        let mut logs = docker.logs(
            &id,
            Some(LogsOptions {
                stdout: true,
                ..Default::default()
            }),
        );
        while let Some(item) = logs.next().await {
            if let LogOutput::StdOut { message } = item? {
                out.push_str(&String::from_utf8_lossy(&message));
            }
        }
        Ok::<_, bollard::errors::Error>(out)
    };
    let result = tokio::time::timeout(Duration::from_secs(30), run).await;
    let rm = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    let _ = docker.remove_container(&id, Some(rm)).await;
    match result {
        Ok(Ok(out)) => {
            let missing: Vec<String> = out.split_whitespace().map(str::to_string).collect();
            let check = if missing.is_empty() {
                check(
                    "tools",
                    Pass,
                    format!("{image} 里有 {}", AGENT_TOOLS.join(", ")),
                )
            } else {
                let judges = if missing.iter().any(|m| m == "file" || m == "lsof") {
                    ";判定时查不了产物"
                } else {
                    ""
                };
                check(
                    "tools",
                    Warn,
                    format!("{image} 里没有 {}{judges}", missing.join(", ")),
                )
            };
            (check, missing)
        }
        Ok(Err(e)) => (
            check("tools", Warn, format!("跑不了 {image}:{e}")),
            Vec::new(),
        ),
        Err(_) => (
            check("tools", Warn, format!("查 {image} 超过 30 秒")),
            Vec::new(),
        ),
    }
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

    #[test]
    fn judge_line_names_uids_capabilities_and_needs_setpriv() {
        let ok = judge_check(&["gcc".to_string()]);
        assert_eq!(ok.status, CheckStatus::Pass);
        assert!(
            ok.to_string()
                .starts_with("通过  judge       判定者 uid 655"),
            "{ok}"
        );
        for part in [
            "CAP_DAC_READ_SEARCH",
            "CAP_SYS_PTRACE",
            "open_by_handle_at",
            "ptrace",
        ] {
            assert!(ok.detail.contains(part), "{ok}");
        }
        assert!(!ok.detail.contains('\n'));
        let bad = judge_check(&["setpriv".to_string()]);
        assert_eq!(bad.status, CheckStatus::Fail);
        assert!(bad.detail.starts_with("镜像里没有 setpriv"), "{bad}");
    }

    #[tokio::test]
    async fn dead_engine_fails_engine_check_and_shows_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let input = DoctorInput {
            docker_host: Some("unix:///nonexistent/docker.sock".into()),
            image: None,
            workspace: dir.path().to_path_buf(),
            credential_names: vec!["ANTHROPIC_API_KEY".into()],
            timeout: Duration::from_secs(2),
            egress: Default::default(),
        };
        let checks = doctor(&input).await;
        let engine = checks.iter().find(|c| c.name == "engine").unwrap();
        assert_eq!(engine.status, CheckStatus::Fail);
        assert!(engine.detail.contains("--sandbox host"));
        let creds = checks.iter().find(|c| c.name == "credentials").unwrap();
        assert_eq!(creds.detail, "找到了 ANTHROPIC_API_KEY");
        assert!(
            engine
                .to_string()
                .starts_with("不行  engine      用不了 Docker 引擎"),
            "{engine}"
        );
        let egress = checks.iter().find(|c| c.name == "egress").unwrap();
        assert_eq!(
            egress.to_string(),
            "通过  egress      open:每次运行一个自己的网络,能上互联网;宿主机、内网、链路本地(云元数据)地址都不通"
        );
        // No engine: the image is not checked, and the line says so in Chinese.
        let image = checks.iter().find(|c| c.name == "image").unwrap();
        assert_eq!(image.to_string(), "注意  image       没查:没有引擎");
        // Not a repository: the workspace line names the path and --isolate verbatim.
        let ws = checks.iter().find(|c| c.name == "workspace").unwrap();
        assert_eq!(ws.status, CheckStatus::Warn);
        assert_eq!(
            ws.detail,
            format!(
                "{} 不在 git 仓库里(--isolate 要有仓库)",
                dir.path().display()
            )
        );
        assert_eq!(exit_code(&checks), 1);
    }
}
