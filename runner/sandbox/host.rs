//! The host backend (`--sandbox host`, by explicit choice only): commands run as host processes,
//! one process group per command, with the same caps and timeouts as containers. Credentials
//! are removed from every command's environment.
//!
//! A command that leaves a background child holding its output returns when its shell exits;
//! the child keeps running (a server under test) and its group is killed at teardown.

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

mod attach;

use super::output::{OutputCollector, Stream};
use super::{
    AgentBox, AttachSpec, Attached, ExecOutput, ExecRequest, Sandbox, SandboxError, SandboxFactory,
};

/// How long to wait for the pipes to close after the shell exited.
const PIPE_GRACE: Duration = Duration::from_millis(300);

/// Environment variables never passed to commands: every model provider's configuration
/// ([`crate::model::config::is_provider_variable`]), credentials first.
pub fn is_secret_env(name: &str) -> bool {
    crate::model::config::is_provider_variable(name)
}

/// `--sandbox host` as a backend: host processes, by explicit choice only.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostBackend;

#[async_trait]
impl super::SandboxBackend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn commands_run(&self) -> super::CommandsRun {
        super::CommandsRun::OnHost
    }

    async fn open_run(
        &self,
        _run_id: &str,
        _workspace: &std::path::Path,
        _demand: super::Demand,
    ) -> Result<super::Preflight, SandboxError> {
        Ok(super::Preflight {
            factory: Arc::new(HostSandboxFactory::new()),
            notes: Vec::new(),
        })
    }

    async fn open_check(
        &self,
        _run_id: &str,
        _workspace: &std::path::Path,
    ) -> Result<Arc<dyn SandboxFactory>, SandboxError> {
        Ok(Arc::new(HostSandboxFactory::new()))
    }

    async fn checks(&self, _workspace: &std::path::Path) -> Vec<super::doctor::Check> {
        vec![super::doctor::Check {
            name: "sandbox",
            status: super::doctor::CheckStatus::Warn,
            detail: "--sandbox host:命令直接在这台机器上以当前用户执行,没有容器,没有隔离".into(),
        }]
    }

    /// Process groups die with their run: nothing outlives it here.
    async fn leftovers(&self, _workspace: &std::path::Path) -> Option<super::doctor::Check> {
        None
    }

    async fn gc(
        &self,
        _workspace: Option<&std::path::Path>,
    ) -> Result<super::gc::GcReport, SandboxError> {
        Ok(super::gc::GcReport::default())
    }
}

/// Hands out host sandboxes; remembers process groups left running for teardown.
#[derive(Default)]
pub struct HostSandboxFactory {
    boxes: Mutex<HashMap<String, Arc<HostSandbox>>>,
    leftovers: Arc<Mutex<Groups>>,
}

/// The process groups commands left running, and whether teardown has happened.
#[derive(Default)]
struct Groups {
    /// Groups of running or left-running commands, killed at teardown.
    live: HashSet<i32>,
    /// Set by teardown: a command that starts afterwards (a tool call racing a signal's
    /// teardown) is killed at once instead of outliving the runner.
    closed: bool,
}

impl HostSandboxFactory {
    /// A factory with no sandboxes yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SandboxFactory for HostSandboxFactory {
    fn commands_run(&self) -> super::CommandsRun {
        super::CommandsRun::OnHost
    }

    async fn sandbox(&self, spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let mut boxes = self.boxes.lock().unwrap_or_else(|e| e.into_inner());
        let sb = boxes
            .entry(spec.agent.clone())
            .or_insert_with(|| {
                Arc::new(HostSandbox {
                    spec: spec.clone(),
                    leftovers: self.leftovers.clone(),
                })
            })
            .clone();
        Ok(sb)
    }

    async fn release(&self, agent: &str) -> Result<(), SandboxError> {
        self.boxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
        Ok(())
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        self.boxes.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let groups: Vec<i32> = {
            let mut g = self.leftovers.lock().unwrap_or_else(|e| e.into_inner());
            g.closed = true;
            g.live.drain().collect()
        };
        for g in &groups {
            let _ = killpg(Pid::from_raw(*g), Signal::SIGTERM);
        }
        if !groups.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            for g in groups {
                let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
            }
        }
        Ok(())
    }
}

/// One agent's host sandbox.
pub struct HostSandbox {
    spec: AgentBox,
    leftovers: Arc<Mutex<Groups>>,
}

type Shared = Arc<Mutex<Option<OutputCollector>>>;

fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    mut r: R,
    stream: Stream,
    sink: Shared,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                // After the result is returned the collector is gone: keep draining so a
                // background child writing to the pipe never gets EPIPE.
                Ok(n) => {
                    if let Some(c) = sink.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        c.push(stream, &buf[..n]);
                    }
                }
            }
        }
    })
}

fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// The host command for `req`: its shell with the command inline, or, for a command too long
/// for one argument, sourcing a private temporary file (returned: the handle must outlive the
/// process, and deletes the file if the command never got to). Credentials are removed from
/// the environment; git never collects garbage or prunes worktrees on its own.
fn host_command(req: &ExecRequest) -> Result<(Command, Option<tempfile::TempPath>), SandboxError> {
    let shell = if std::path::Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let mut script = None;
    let command = if req.command.len() > super::INLINE_COMMAND_MAX {
        let file = tempfile::Builder::new()
            .prefix(".flowerbox-cmd-")
            .tempfile()?
            .into_temp_path();
        let path = file.to_string_lossy().into_owned();
        std::fs::write(&file, super::sourcing_script(&path, &req.command))?;
        script = Some(file);
        super::sourcing_command(&path)
    } else {
        req.command.clone()
    };
    let mut cmd = Command::new(shell);
    cmd.arg("-c").arg(&command).current_dir(&req.cwd);
    for (k, _) in std::env::vars_os() {
        if is_secret_env(&k.to_string_lossy()) {
            cmd.env_remove(&k);
        }
    }
    cmd.env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "gc.auto")
        .env("GIT_CONFIG_VALUE_0", "0")
        .env("GIT_CONFIG_KEY_1", "gc.worktreePruneExpire")
        .env("GIT_CONFIG_VALUE_1", "never");
    for (k, v) in &req.env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    Ok((cmd, script))
}

/// Sets the exit code (none after a timeout or an interrupt) and the signal that ended the
/// shell, if one did, on `out`.
fn set_exit(out: &mut ExecOutput, status: std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    let stopped = out.timed_out || out.interrupted;
    out.exit_code = if stopped {
        None
    } else {
        status.code().map(i64::from)
    };
    if let Some(sig) = status.signal().filter(|_| !stopped) {
        out.signal = Some(
            Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| sig.to_string()),
        );
    }
}

impl HostSandbox {
    /// Whether teardown has happened (no command may start any more).
    fn closed(&self) -> bool {
        self.leftovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed
    }

    /// Tracks the group `pgid` while its command runs, so a teardown on a signal kills
    /// in-flight commands. `false` when the command raced the teardown (spawned after it
    /// drained the groups): its group is killed here instead.
    fn track(&self, pgid: i32) -> bool {
        let mut g = self.leftovers.lock().unwrap_or_else(|e| e.into_inner());
        if g.closed {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        } else {
            g.live.insert(pgid);
        }
        !g.closed
    }

    /// Stops tracking the group `pgid` (its command was killed, or nothing of it is left).
    fn untrack(&self, pgid: i32) {
        self.leftovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .remove(&pgid);
    }
}

/// Waits for the shell until it exits, `req`'s timeout passes or `req` is cancelled (then its
/// whole group is killed; `out` says which), and for its output pipes a short grace after
/// (a background child that keeps them open gets a note and keeps running).
async fn wait_shell(
    child: &mut tokio::process::Child,
    pgid: i32,
    req: &ExecRequest,
    readers: [tokio::task::JoinHandle<()>; 2],
    out: &mut ExecOutput,
) -> Result<std::process::ExitStatus, SandboxError> {
    let status = tokio::select! {
        s = child.wait() => Some(s?),
        _ = tokio::time::sleep(req.timeout) => { out.timed_out = true; None }
        _ = req.cancel.cancelled() => { out.interrupted = true; None }
    };
    let status = match status {
        Some(s) => s,
        None => {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            child.wait().await?
        }
    };
    // Dropping the handles on timeout detaches the readers; they drain until EOF.
    let drained = tokio::time::timeout(PIPE_GRACE, async move {
        for r in readers {
            let _ = r.await;
        }
    })
    .await
    .is_ok();
    if !drained {
        out.notes
            .push("命令的 shell 已退出,但后台进程还握着输出管道、仍在运行;输出只收到这里".into());
    }
    Ok(status)
}

#[async_trait]
impl Sandbox for HostSandbox {
    #[allow(clippy::expect_used, reason = "spawned with piped stdio")]
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, SandboxError> {
        if !self
            .spec
            .mounts
            .iter()
            .any(|m| req.cwd.starts_with(&m.inside))
            && !self.spec.mounts.is_empty()
        {
            return Err(SandboxError::OutsideMounts(req.cwd));
        }
        let (mut cmd, _script) = host_command(&req)?;
        if self.closed() {
            return Err(SandboxError::ShutDown);
        }
        let mut child = cmd.spawn()?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        if !self.track(pgid) {
            let _ = child.wait().await;
            return Err(SandboxError::ShutDown);
        }
        let sink: Shared = Arc::new(Mutex::new(Some(OutputCollector::new(
            req.output_cap,
            req.spill_dir.as_deref(),
        ))));
        let readers = [
            spawn_reader(
                child.stdout.take().expect("piped"),
                Stream::Stdout,
                sink.clone(),
            ),
            spawn_reader(
                child.stderr.take().expect("piped"),
                Stream::Stderr,
                sink.clone(),
            ),
        ];
        let mut out = ExecOutput::default();
        let status = wait_shell(&mut child, pgid, &req, readers, &mut out).await?;
        if out.timed_out || out.interrupted || !group_alive(pgid) {
            self.untrack(pgid);
        }
        let captured = sink
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map(|c| c.finish())
            .unwrap_or_default();
        let notes = std::mem::take(&mut out.notes);
        set_exit(&mut out, status);
        Ok(super::finish::finish(
            out,
            captured,
            notes,
            super::finish::RanIn::Host(&req.cwd),
        ))
    }

    fn describe(&self) -> String {
        format!("host ({})", self.spec.agent)
    }

    fn agent_box(&self) -> &AgentBox {
        &self.spec
    }

    async fn attach(&self, spec: AttachSpec) -> Result<Attached, SandboxError> {
        self.attach_process(spec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::sandbox::Mount;
    use std::time::Instant;
    use tokio_util::sync::CancellationToken;

    fn setup() -> (tempfile::TempDir, HostSandboxFactory, AgentBox) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().canonicalize().unwrap();
        let b = AgentBox {
            agent: "worker-1".into(),
            role: Role::Worker,
            mounts: vec![Mount::same(p.clone(), false)],
            masked: Vec::new(),
            workdir: p,
            policy: crate::sandbox::SandboxPolicy::writer(),
        };
        (d, HostSandboxFactory::new(), b)
    }

    fn req(b: &AgentBox, cmd: &str, timeout_ms: u64) -> ExecRequest {
        ExecRequest {
            command: cmd.into(),
            cwd: b.workdir.clone(),
            env: vec![],
            timeout: Duration::from_millis(timeout_ms),
            output_cap: 4096,
            spill_dir: None,
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn runs_and_reports_exit_codes() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let o = sb
            .exec(req(&b, "echo hi; echo err >&2; exit 3", 5000))
            .await
            .unwrap();
        assert_eq!(o.stdout, "hi\n");
        assert_eq!(o.stderr, "err\n");
        assert_eq!(o.exit_code, Some(3));
        assert!(!o.success());
        let o = sb.exec(req(&b, "pwd", 5000)).await.unwrap();
        assert_eq!(o.stdout.trim(), b.workdir.display().to_string());
    }

    #[tokio::test]
    async fn a_command_longer_than_one_argument_may_be_runs_and_leaves_no_file() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        // 200 KiB: `bash -c` with it as an argument fails with E2BIG.
        let payload = "a".repeat(200 * 1024);
        let cmd = format!("x='{payload}'\ncd /\necho ${{#x}} $PWD\nexit 4");
        let before = leftover_scripts();
        let o = sb.exec(req(&b, &cmd, 10_000)).await.unwrap();
        assert_eq!(o.stdout, format!("{} /\n", 200 * 1024), "{o:?}");
        assert_eq!(o.exit_code, Some(4));
        assert_eq!(leftover_scripts(), before);
    }

    fn leftover_scripts() -> usize {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter(|e| {
                e.as_ref().is_ok_and(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".flowerbox-cmd-")
                })
            })
            .count()
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let (d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let marker = d.path().join("alive");
        let cmd = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let t = Instant::now();
        let o = sb.exec(req(&b, &cmd, 300)).await.unwrap();
        assert!(o.timed_out && o.exit_code.is_none() && !o.success());
        assert!(t.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !marker.exists(),
            "a process of the group survived the timeout"
        );
    }

    #[tokio::test]
    async fn background_child_holding_stdout_does_not_hang() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let t = Instant::now();
        let o = sb
            .exec(req(&b, "sleep 20 & echo started", 30_000))
            .await
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(o.stdout, "started\n");
        assert_eq!(o.exit_code, Some(0));
        assert!(!o.notes.is_empty());
        f.teardown().await.unwrap();
    }

    #[tokio::test]
    async fn a_command_after_teardown_is_refused_and_never_runs() {
        // A tool call racing a signal's teardown: the sandbox an agent already holds must not
        // start a process that outlives the runner.
        let (d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        f.teardown().await.unwrap();
        let marker = d.path().join("ran");
        let cmd = format!("touch {}", marker.display());
        assert!(matches!(
            sb.exec(req(&b, &cmd, 5000)).await,
            Err(SandboxError::ShutDown)
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!marker.exists(), "the command ran after teardown");
    }

    #[tokio::test]
    async fn cancel_interrupts() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let r = req(&b, "sleep 30", 60_000);
        let c = r.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            c.cancel();
        });
        let o = sb.exec(r).await.unwrap();
        assert!(o.interrupted && !o.success());
    }

    #[tokio::test]
    async fn credentials_do_not_reach_commands() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let o = sb.exec(req(&b, "env", 5000)).await.unwrap();
        assert!(!o
            .stdout
            .lines()
            .any(|l| is_secret_env(l.split('=').next().unwrap_or(""))));
        assert!(o.stdout.contains("GIT_CONFIG_KEY_0=gc.auto"));
    }

    #[tokio::test]
    async fn huge_and_binary_output_is_capped() {
        let (_d, f, b) = setup();
        let sb = f.sandbox(&b).await.unwrap();
        let o = sb
            .exec(req(&b, "head -c 10000000 /dev/urandom", 20_000))
            .await
            .unwrap();
        assert!(o.truncated);
        assert_eq!(o.total_bytes, 10_000_000);
        assert!(o.stdout.len() < 16_384);
    }
}
