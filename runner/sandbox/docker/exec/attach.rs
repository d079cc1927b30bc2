//! [`crate::sandbox::Sandbox::attach`] for a container: one Docker exec with stdin, stdout and
//! stderr attached (bollard's hijacked exec connection), started exactly like a command of the
//! agent — the same engine user, the same `setpriv` prefix in a read-only container, the same
//! working directory rules — and marked like one (`FLOWERBOX_EXEC=<id>` in its environment), so
//! [`ProcessHandle::kill`] ends it and everything it started, even what escaped with `setsid`.
//! Removing the container ends it too.
//!
//! The exec's multiplexed output is split by one task: stdout goes into a bounded in-memory
//! pipe (the reader's pace holds the process back, memory stays bounded), stderr into a
//! [`StderrTail`].

use async_trait::async_trait;
use bollard::container::LogOutput;
use futures::StreamExt;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

use super::Container;
use crate::sandbox::{AttachSpec, Attached, ProcessHandle, SandboxError, StderrTail};

/// Bytes of stdout buffered between the container and the reader.
const PIPE_BYTES: usize = 64 * 1024;

impl Container {
    /// Starts `spec` in the container with its pipes attached.
    pub(crate) async fn attach_process(
        self: &Arc<Self>,
        spec: AttachSpec,
    ) -> Result<Attached, SandboxError> {
        if spec.argv.is_empty() {
            return Err(SandboxError::Unsupported("没有要启动的程序".into()));
        }
        let cwd = std::fs::canonicalize(&spec.cwd).unwrap_or_else(|_| spec.cwd.clone());
        if !self.spec.mounts.iter().any(|m| cwd.starts_with(&m.inside)) {
            return Err(SandboxError::OutsideMounts(cwd));
        }
        let marker = uuid::Uuid::new_v4().simple().to_string();
        let started = self
            .start_marked(
                spec.argv.clone(),
                cwd.to_string_lossy().into_owned(),
                &spec.env,
                &marker,
                true,
            )
            .await?;
        let (exec_id, mut output, input) = (started.id, started.output, started.input);
        let (reader, mut writer) = tokio::io::duplex(PIPE_BYTES);
        let stderr = StderrTail::default();
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut stdout_open = true;
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) if stdout_open => {
                        // The reader went away: keep draining so stderr is still kept.
                        stdout_open = writer.write_all(&message).await.is_ok();
                    }
                    Ok(LogOutput::StdErr { message }) => tail.push(&message),
                    Ok(_) => {}
                    Err(e) => {
                        tail.push(format!("\n[exec stream: {e}]").as_bytes());
                        break;
                    }
                }
            }
            let _ = writer.shutdown().await;
        });
        let handle = DockerProcess {
            sandbox: self.clone(),
            exec_id,
            marker,
            program: spec.argv[0].clone(),
        };
        Ok(Attached {
            stdin: input,
            stdout: Box::pin(reader),
            stderr,
            handle: Arc::new(handle),
        })
    }
}

/// One attached exec.
struct DockerProcess {
    sandbox: Arc<Container>,
    exec_id: String,
    marker: String,
    program: String,
}

#[async_trait]
impl ProcessHandle for DockerProcess {
    async fn kill(&self) {
        if let Ok(info) = self.sandbox.docker.inspect_exec(&self.exec_id).await {
            if info.running == Some(false) {
                // Its children may live on with the marker.
                let _ = self.sandbox.helper(super::KILL_SCRIPT, &self.marker).await;
                return;
            }
        }
        if let Some(note) = self.sandbox.kill_marked(&self.marker).await {
            tracing::warn!(process = %self.describe(), %note, "attached exec kill");
        }
    }

    async fn ended(&self) -> Option<String> {
        // Its container went (the exec's own state would say "running" for ever).
        if let Some(why) = self.sandbox.gone() {
            return Some(format!("它所在的容器{}", why.zh()));
        }
        let info = self.sandbox.docker.inspect_exec(&self.exec_id).await.ok()?;
        if info.running != Some(false) {
            return None;
        }
        Some(crate::sandbox::finish::ended(
            info.exit_code,
            None,
            &self.program,
            crate::sandbox::finish::RanIn::Image(&self.sandbox.image),
        ))
    }

    fn describe(&self) -> String {
        format!("{} in {}", self.program, self.sandbox.name)
    }
}
