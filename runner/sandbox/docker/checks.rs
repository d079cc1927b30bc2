//! The Docker backend's `flowerbox doctor` checks: the engine, the agent image, the tools in it
//! (judges need `file` and `lsof`), who the read-only roles run as, whether commands go through
//! the exec service (or, slower, a Docker exec each, and why), and the containers dead runs
//! left. [`DockerBackend`](super::DockerBackend) answers them through the backend seam.

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions};
use futures::StreamExt;
use std::path::Path;
use std::time::Duration;

use super::gc;
use super::image::{base_image, default_image, image_exists, SLIM_BASE};
use super::{Engine, EngineKind, UserIds};
use crate::sandbox::doctor::{Check, CheckStatus, AGENT_TOOLS};

fn check(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Check {
    Check::new(name, status, detail)
}

/// The engine, the image, its tools, the read-only roles' users and the exec service (in a
/// worker's container of a throwaway run over `workspace`, read-only, without network).
pub async fn checks(
    docker_host: Option<&str>,
    image: Option<&str>,
    timeout: Duration,
    workspace: &Path,
    remote: bool,
) -> Vec<Check> {
    use CheckStatus::*;
    let mut checks = Vec::new();
    let engine = Engine::connect(docker_host, timeout).await;
    match &engine {
        Ok(e) => {
            checks.push(check(
                "engine",
                Pass,
                format!(
                    "{} 引擎 {} 有回应(API {};{})",
                    e.kind().label(),
                    e.endpoint().host,
                    e.api_version(),
                    e.endpoint().origin()
                ),
            ));
            if let Some(line) = podman_check(e.kind()) {
                checks.push(line);
            }
        }
        Err(e) => checks.push(check("engine", Fail, e.to_string())),
    }
    match &engine {
        Ok(engine) => {
            let (image_check, present) = image_check(engine, image).await;
            checks.push(image_check);
            // Needs no agent image: its own (one empty file) is imported on first use.
            // An engine reached over the network that does not see the workspace: a run
            // chooses the remote mode by itself (`DockerBackend::open_run`).
            let network = engine.endpoint().socket_path().is_none();
            let (shared, remote) = match (remote, network) {
                (true, _) => (
                    super::shared_disk::check_remote(engine, workspace, true)
                        .await
                        .0,
                    true,
                ),
                (false, true) => {
                    match super::shared_disk::check_remote(engine, workspace, false).await {
                        (line, true) => (line, true),
                        (_, false) => (super::shared_disk::check(engine, workspace).await, false),
                    }
                }
                (false, false) => (super::shared_disk::check(engine, workspace).await, false),
            };
            checks.push(shared);
            if let Some(image) = present {
                let (tools, missing) = tools_check(engine, &image).await;
                // The tools container has no init: it started when it passed or named what
                // the image lacks.
                let plain_started = tools.status == Pass || !missing.is_empty();
                checks.push(tools);
                checks.push(init_check(engine, &image, plain_started).await);
                checks.push(judge_check(&missing));
                checks.extend(exec_check(docker_host, &image, workspace, remote).await);
            }
        }
        Err(_) => checks.push(check("image", Warn, "没查:没有引擎")),
    }
    checks
}

/// The doctor's Podman line: the engine is Podman, and each difference from Docker flowerbox
/// handles for it; `None` for Docker.
pub fn podman_check(kind: &EngineKind) -> Option<Check> {
    kind.is_podman().then(|| match kind.refusal() {
        Some(why) => check("podman", CheckStatus::Fail, why),
        None => check(
            "podman",
            CheckStatus::Pass,
            format!(
                "引擎是 {},走 Docker 兼容 API;和 Docker 不同的地方:{}",
                kind.label(),
                kind.differences().join(";")
            ),
        ),
    })
}

/// The containers of `workspace` (canonical) dead runs left; `None` without an engine.
pub async fn orphans(
    docker_host: Option<&str>,
    timeout: Duration,
    workspace: &Path,
) -> Option<Check> {
    let engine = Engine::connect(docker_host, timeout).await.ok()?;
    Some(match gc::list(&engine, Some(workspace)).await {
        Ok(all) => {
            let orphans = all.iter().filter(|c| c.is_orphan()).count();
            if all.is_empty() {
                check("orphans", CheckStatus::Pass, "没有残留的容器")
            } else if orphans == 0 {
                check(
                    "orphans",
                    CheckStatus::Pass,
                    format!("没有残留的容器({} 个容器的主人还在跑或查不清)", all.len()),
                )
            } else {
                check(
                    "orphans",
                    CheckStatus::Warn,
                    format!("{orphans} 个残留的容器;`flowerbox gc` 会删掉它们"),
                )
            }
        }
        Err(e) => check("orphans", CheckStatus::Warn, format!("列不出容器:{e}")),
    })
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

/// Whether a run's commands go through the exec service (one frame each way) or, about ten
/// times slower, as a Docker exec each, and why: the service started in a worker's container
/// of a throwaway run (`--egress none`, the workspace read-only), exactly as a run starts it.
/// With it, the `warm` line: that container, idle with its service, is what a run keeps warm
/// ([`super::idle`]).
async fn exec_check(
    docker_host: Option<&str>,
    image: &str,
    workspace: &Path,
    remote: bool,
) -> Vec<Check> {
    use crate::sandbox::egress::{EgressMode, EgressPolicy};
    use crate::sandbox::{AgentBox, Mount, SandboxFactory};
    let run_id = format!("doctor-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let mut opts = super::DockerOptions::new(run_id, workspace);
    opts.image = Some(image.to_string());
    opts.docker_host = docker_host.map(str::to_string);
    opts.show_progress = false;
    opts.remote = remote;
    opts.egress = EgressPolicy {
        mode: EgressMode::None,
        ..Default::default()
    };
    let factory = match super::DockerSandboxFactory::connect(opts).await {
        Ok(f) => f,
        Err(e) => return vec![check("exec", CheckStatus::Warn, format!("没查:{e}"))],
    };
    let ws = factory.workspace().to_path_buf();
    // On an engine without this machine's disk the container mounts an empty volume there.
    if let Some(disk) = factory.engine_disk() {
        if let Err(e) = disk.directory(&ws, "doctor", &[]).await {
            let _ = factory.teardown().await;
            return vec![check("exec", CheckStatus::Warn, format!("没查:{e}"))];
        }
    }
    let agent = AgentBox {
        agent: "exec-doctor".into(),
        role: crate::role::Role::Worker,
        mounts: vec![Mount::same(ws.clone(), true)],
        masked: Vec::new(),
        workdir: ws,
        policy: crate::sandbox::SandboxPolicy::writer(),
    };
    let (found, resident) = match factory.docker_sandbox(&agent).await {
        Ok(sb) => {
            let service = match sb.exec_service().await {
                Ok(_) => Ok(sb.exec_over_socket().await == Some(true)),
                Err(why) => Err(why),
            };
            let id = sb.container_id();
            let resident = super::idle::resident(factory.engine().docker(), &id).await;
            (Ok(service), resident)
        }
        Err(e) => (Err(e), None),
    };
    let _ = factory.teardown().await;
    let exec = match found {
        Ok(Ok(over_socket)) => check(
            "exec",
            CheckStatus::Pass,
            format!(
                "{image} 的容器里 exec 服务起得来:每条命令走它,不用各开一次 docker exec;{}",
                match over_socket {
                    true => "请求走本机的 Unix socket,不经引擎转发",
                    false => "请求经引擎的 attach 转发(远程引擎,或 socket 用不了)",
                }
            ),
        ),
        Ok(Err(why)) => check(
            "exec",
            CheckStatus::Warn,
            format!(
                "{image} 的容器里 exec 服务起不来({}):每条命令会各开一次 docker exec,慢十倍左右",
                crate::sandbox::notice::clip(&why, crate::sandbox::notice::REASON_MAX)
            ),
        ),
        Err(e) => check("exec", CheckStatus::Warn, format!("没查:起不了容器:{e}")),
    };
    vec![exec, super::idle::warm_check(resident)]
}

/// Where root's programs are: the image build runs `debootstrap` as root (`sudo` resets `PATH`
/// to these), so it is there even when the invoking user's `PATH` lacks them.
const ROOT_BIN_DIRS: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

fn which(program: &str) -> bool {
    find_program(
        program,
        std::env::var_os("PATH").as_deref(),
        &ROOT_BIN_DIRS.map(Path::new),
    )
    .is_some()
}

/// The first executable regular file `program` in `path`'s directories, then in `extra`.
fn find_program(
    program: &str,
    path: Option<&std::ffi::OsStr>,
    extra: &[&Path],
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dirs: Vec<std::path::PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    dirs.iter()
        .map(|d| d.join(program))
        .chain(extra.iter().map(|d| d.join(program)))
        .find(|f| {
            std::fs::metadata(f).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Every agent container runs with the engine's init (`init: true`: it reaps what commands
/// leave). Podman's is `catatonit`, a package of its own: without it every container start
/// fails. Found out by starting one, as a run does; `plain_started`: a container without init
/// started (then the init is what failed, and the line says how to get it).
async fn init_check(engine: &Engine, image: &str, plain_started: bool) -> Check {
    let ids = UserIds::current();
    let body = ContainerCreateBody {
        image: Some(image.into()),
        entrypoint: Some(vec!["true".into()]),
        cmd: Some(vec![]),
        user: Some(format!("{}:{}", ids.uid, ids.gid)),
        host_config: Some(HostConfig {
            init: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let docker = engine.docker();
    let started = match docker.create_container(None, body).await {
        Ok(r) => {
            let run = async {
                docker.start_container(&r.id, None).await?;
                let mut wait = docker.wait_container(&r.id, None);
                while let Some(w) = wait.next().await {
                    if let Err(e) = w {
                        if !matches!(e, bollard::errors::Error::DockerContainerWaitError { .. }) {
                            return Err(e);
                        }
                    }
                }
                Ok(())
            };
            let result = tokio::time::timeout(Duration::from_secs(30), run).await;
            let rm = RemoveContainerOptions {
                force: true,
                ..Default::default()
            };
            let _ = docker.remove_container(&r.id, Some(rm)).await;
            match result {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("30 秒内没结束".to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    match started {
        Ok(()) => check("init", CheckStatus::Pass, "带 init 的容器起得来"),
        Err(e) => check(
            "init",
            CheckStatus::Fail,
            init_failure(engine.kind(), plain_started, &e),
        ),
    }
}

/// The line for an agent container that did not start with the engine's init: with the fix
/// when a container without init started (so the init is what is missing).
fn init_failure(kind: &EngineKind, plain_started: bool, error: &str) -> String {
    let error = crate::sandbox::notice::clip(error, crate::sandbox::notice::REASON_MAX);
    match (plain_started, kind.is_podman()) {
        (true, true) => format!(
            "带 init 的容器起不来(不带 init 的起得来),每个 agent 的容器都带 init:Podman 缺 catatonit。\
             装上它(apt-get install catatonit),或在 containers.conf 的 [containers] 里用 init_path 指向一个 init;\
             引擎说:{error}"
        ),
        (true, false) => format!(
            "带 init 的容器起不来(不带 init 的起得来),每个 agent 的容器都带 init:引擎的 docker-init 缺了或坏了,\
             重装 Docker 引擎;引擎说:{error}"
        ),
        (false, _) => format!("容器起不来,agent 都起不来:{error}"),
    }
}

/// Who the read-only roles run as, with which capabilities (one line); fails when the image
/// has no `setpriv`, without which judges and coordinators cannot start.
fn judge_check(missing: &[String]) -> Check {
    let line = super::readonly::describe(UserIds::current());
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Issue 29 §2.10: `sudo` builds the image with root's `PATH`; a user's `PATH` without
    /// `/usr/sbin` must not make doctor say debootstrap is missing.
    #[test]
    fn a_program_outside_the_users_path_is_found_in_roots_directories() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let (user_bin, sbin) = (d.path().join("bin"), d.path().join("sbin"));
        std::fs::create_dir_all(&user_bin).unwrap();
        std::fs::create_dir_all(&sbin).unwrap();
        let tool = sbin.join("debootstrap");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let path = std::ffi::OsString::from(user_bin.as_os_str());
        assert_eq!(find_program("debootstrap", Some(&path), &[]), None);
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            find_program("debootstrap", Some(&path), &[sbin.as_path()]),
            Some(tool.clone())
        );
        assert_eq!(
            find_program("debootstrap", None, &[sbin.as_path()]),
            Some(tool)
        );
        // Not executable: not a program.
        std::fs::write(user_bin.join("x"), "").unwrap();
        assert_eq!(find_program("x", Some(&path), &[]), None);
        assert!(ROOT_BIN_DIRS.contains(&"/usr/sbin") && ROOT_BIN_DIRS.contains(&"/sbin"));
    }

    #[test]
    fn an_init_failure_names_catatonit_on_podman_only_when_init_is_the_cause() {
        let podman = EngineKind::Podman {
            version: "4.3.1".into(),
            rootless: false,
            cgroup_v1: false,
        };
        let line = init_failure(&podman, true, "boom");
        assert!(
            line.contains("catatonit") && line.contains("boom"),
            "{line}"
        );
        assert!(!init_failure(&EngineKind::Docker, true, "x").contains("catatonit"));
        assert!(!init_failure(&podman, false, "x").contains("catatonit"));
    }

    #[test]
    fn podman_line_names_podman_and_each_difference() {
        assert!(podman_check(&EngineKind::Docker).is_none());
        let kind = EngineKind::Podman {
            version: "4.3.1".into(),
            rootless: true,
            cgroup_v1: false,
        };
        let line = podman_check(&kind).unwrap();
        assert_eq!(line.status, CheckStatus::Pass);
        assert!(line.detail.contains("Podman 4.3.1(rootless)"), "{line}");
        for difference in kind.differences() {
            assert!(line.detail.contains(&difference), "{line}");
        }
        assert!(!line.detail.contains('\n'));
        let refused = EngineKind::Podman {
            version: "4.3.1".into(),
            rootless: true,
            cgroup_v1: true,
        };
        let line = podman_check(&refused).unwrap();
        assert_eq!(line.status, CheckStatus::Fail);
        assert_eq!(Some(line.detail), refused.refusal());
    }
}
