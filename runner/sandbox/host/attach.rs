//! [`crate::sandbox::Sandbox::attach`] for `--sandbox host`: a host child process of the
//! invoking user, in a process group of its own, with the credentials removed from its
//! environment like every host command. **Not sandboxed**: it can do whatever the user can. Its
//! group is killed by [`ProcessHandle::kill`], when its handle is dropped, and at teardown.

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::{is_secret_env, HostSandbox};
use crate::sandbox::{AttachSpec, Attached, ProcessHandle, SandboxError, StderrTail};

impl HostSandbox {
    /// Starts `spec` as a host process group with its pipes attached.
    #[allow(clippy::expect_used, reason = "spawned with piped stdio")]
    pub(super) async fn attach_process(&self, spec: AttachSpec) -> Result<Attached, SandboxError> {
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(SandboxError::Unsupported("没有要启动的程序".into()));
        };
        if !self.spec.mounts.is_empty()
            && !self
                .spec
                .mounts
                .iter()
                .any(|m| spec.cwd.starts_with(&m.inside))
        {
            return Err(SandboxError::OutsideMounts(spec.cwd));
        }
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&spec.cwd);
        for (k, _) in std::env::vars_os() {
            if is_secret_env(&k.to_string_lossy()) {
                cmd.env_remove(&k);
            }
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if self
            .leftovers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed
        {
            return Err(SandboxError::ShutDown);
        }
        let mut child = cmd.spawn()?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        // Killed at teardown like every command's group; one that raced it is killed now.
        {
            let mut g = self.leftovers.lock().unwrap_or_else(|e| e.into_inner());
            if g.closed {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                return Err(SandboxError::ShutDown);
            }
            g.live.insert(pgid);
        }
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let stderr = StderrTail::default();
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                tail.push(&buf[..n]);
            }
        });
        Ok(Attached {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            stderr,
            handle: Arc::new(HostProcess {
                child: Mutex::new(child),
                pgid,
                program: program.clone(),
                cwd: spec.cwd.clone(),
            }),
        })
    }
}

/// One attached host process group.
struct HostProcess {
    child: Mutex<Child>,
    pgid: i32,
    program: String,
    /// Where it started.
    cwd: std::path::PathBuf,
}

#[async_trait]
impl ProcessHandle for HostProcess {
    async fn kill(&self) {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        let _ = child.start_kill();
        let _ = child.try_wait();
    }

    async fn ended(&self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let status = self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_wait()
            .ok()??;
        Some(crate::sandbox::finish::ended(
            status.code().map(i64::from),
            status.signal(),
            &self.program,
            crate::sandbox::finish::RanIn::Host(&self.cwd),
        ))
    }

    fn describe(&self) -> String {
        format!("{} on the host (pgid {})", self.program, self.pgid)
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}
