//! One agent's container as a [`Sandbox`]: `exec` that never hangs (issue "Exec").
//!
//! Each command is a Docker exec of `bash -c COMMAND` behind a small relay (see [`RELAY`]); the
//! engine makes every exec process a session and process-group leader, and the command's
//! environment carries a unique marker (`FLOWERBOX_EXEC=<id>`). Output streams through the [`OutputCollector`] (bounded memory,
//! full-output spill). The exit code is read from the engine after the process has ended.
//!
//! - Timeout or cancellation: a second exec kills the command's process group and every
//!   process carrying its marker (also those that escaped with `setsid`), then the result says
//!   `timed_out` / `interrupted`.
//! - The shell exits while a background child still holds stdout (`server & echo started`):
//!   the engine reports the exit, we wait briefly for trailing output and return with the
//!   output so far and a note naming the processes left running (they keep running: a judge
//!   may inspect them).
//! - Exit 127 with the shell's "not found" message: a note says the program is not found in
//!   the image.

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use bollard::Docker;
use futures::StreamExt;
use regex::Regex;
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

use crate::sandbox::output::Stream;
use crate::sandbox::{AgentBox, ExecOutput, ExecRequest, OutputCollector, Sandbox, SandboxError};

/// Environment variable marking every process of one command.
pub const MARKER_VAR: &str = "FLOWERBOX_EXEC";

/// After the engine reports the shell's exit, output that keeps arriving is still collected
/// until the stream has been quiet this long.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// Longest pause between exit polls while a command runs.
const MAX_POLL: Duration = Duration::from_millis(500);
/// Time the kill exec and the final drain get.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Kills the process group of every process carrying the marker `$1`, and those processes,
/// until none is left. Stops before killing so nothing forks in between. POSIX sh + GNU grep.
const KILL_SCRIPT: &str = r#"m="FLOWERBOX_EXEC=$1"
i=0
while [ "$i" -lt 50 ]; do
  i=$((i+1)); found=
  for e in /proc/[0-9]*/environ; do
    grep -qzx -- "$m" "$e" 2>/dev/null || continue
    p=${e#/proc/}; found="$found ${p%/environ}"
  done
  [ -n "$found" ] || exit 0
  for p in $found; do kill -STOP -- "-$p" 2>/dev/null; kill -STOP "$p" 2>/dev/null; done
  for p in $found; do kill -KILL -- "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  sleep 0.05
done
exit 1"#;

/// Runs the command `$1` with its stdout and stderr relayed by `tee -p`, which keeps draining
/// (into /dev/null) after the engine has closed the exec's pipes. Without the relay, a
/// background child (a server under test) would die of EPIPE on its next write once the
/// command's shell has exited and the engine has hung up.
const RELAY: &str = r#"bash -c "$1" 2> >(exec tee -p /dev/null >&2) > >(exec tee -p /dev/null)"#;

/// The relay processes, left out of "still running" notes.
const RELAY_ARGS: &str = "tee -p /dev/null";

/// Lists `pid command` of every live process carrying the marker `$1`.
const LIST_SCRIPT: &str = r#"m="FLOWERBOX_EXEC=$1"
for e in /proc/[0-9]*/environ; do
  grep -qzx -- "$m" "$e" 2>/dev/null || continue
  p=${e#/proc/}; p=${p%/environ}
  printf '%s %s\n' "$p" "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
done"#;

/// bash: `bash: line 1: foo: command not found`; dash: `sh: 1: foo: not found`.
static NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^[^:\n]*: (?:line )?\d+: ([^:\n]+): (?:command )?not found\s*$").expect("valid regex")
});

/// One agent's container.
pub struct DockerSandbox {
    /// The engine client.
    docker: Docker,
    /// Container id.
    id: String,
    /// Container name (`fbx-<run>-<agent>-<hex>`).
    name: String,
    /// Image the container runs, for messages.
    image: String,
    /// `uid:gid` every exec runs as.
    user: String,
    /// `bash`, or `sh` when the image has no bash.
    shell: &'static str,
    /// The agent's canonical box.
    spec: AgentBox,
}

enum Stop {
    TimedOut,
    Interrupted,
}

impl DockerSandbox {
    pub(crate) fn new(
        docker: Docker,
        id: String,
        name: String,
        image: String,
        user: String,
        has_bash: bool,
        spec: AgentBox,
    ) -> Self {
        let shell = if has_bash { "bash" } else { "sh" };
        DockerSandbox { docker, id, name, image, user, shell, spec }
    }

    /// The container id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// The container name.
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// The image the container runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    fn err(e: bollard::errors::Error) -> SandboxError {
        SandboxError::Docker(e.to_string())
    }

    /// Runs a helper script (`sh -c SCRIPT flowerbox ARG`) to completion and returns stdout.
    async fn helper(&self, script: &str, arg: &str) -> Result<String, SandboxError> {
        let cmd = vec!["sh".into(), "-c".into(), script.into(), "flowerbox".into(), arg.into()];
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: Some(self.user.clone()),
            cmd: Some(cmd),
            ..Default::default()
        };
        let exec = self.docker.create_exec(&self.id, config).await.map_err(Self::err)?;
        let mut out = Vec::new();
        if let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec.id, None).await.map_err(Self::err)?
        {
            let drain = async {
                while let Some(Ok(item)) = output.next().await {
                    if let LogOutput::StdOut { message } = item {
                        out.extend_from_slice(&message);
                    }
                }
            };
            tokio::time::timeout(KILL_WAIT, drain)
                .await
                .map_err(|_| SandboxError::Docker(format!("helper exec in {} did not finish", self.name)))?;
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Kills everything the command with `marker` started.
    async fn kill_marked(&self, marker: &str) -> Result<(), SandboxError> {
        self.helper(KILL_SCRIPT, marker).await.map(|_| ())
    }

    async fn run(&self, req: &ExecRequest, cwd: &str) -> Result<ExecOutput, SandboxError> {
        let marker = uuid::Uuid::new_v4().simple().to_string();
        let mut env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("{MARKER_VAR}={marker}"));
        let config = ExecConfig {
            attach_stdin: Some(false),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env),
            cmd: Some(match self.shell {
                "bash" => vec!["bash".into(), "-c".into(), RELAY.into(), "flowerbox".into(), req.command.clone()],
                shell => vec![shell.into(), "-c".into(), req.command.clone()],
            }),
            user: Some(self.user.clone()),
            working_dir: Some(cwd.to_string()),
            ..Default::default()
        };
        let exec_id = self.docker.create_exec(&self.id, config).await.map_err(Self::err)?.id;
        let StartExecResults::Attached { mut output, .. } =
            self.docker.start_exec(&exec_id, None).await.map_err(Self::err)?
        else {
            return Err(SandboxError::Docker("exec started detached".into()));
        };

        let mut collector = OutputCollector::new(req.output_cap, req.spill_dir.as_deref());
        let deadline = Instant::now() + req.timeout;
        let mut stream_open = true;
        let mut exit: Option<Option<i64>> = None;
        let mut poll_every = Duration::from_millis(50);
        let mut next_poll = Instant::now() + poll_every;
        let mut last_data = Instant::now();
        let mut left_running = false;
        let mut stream_error = None;
        let stop = loop {
            if !stream_open && exit.is_some() {
                break None;
            }
            tokio::select! {
                _ = req.cancel.cancelled() => break Some(Stop::Interrupted),
                _ = tokio::time::sleep_until(deadline) => break Some(Stop::TimedOut),
                item = output.next(), if stream_open => match item {
                    Some(Ok(LogOutput::StdOut { message })) => {
                        collector.push(Stream::Stdout, &message);
                        last_data = Instant::now();
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        collector.push(Stream::Stderr, &message);
                        last_data = Instant::now();
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        stream_open = false;
                        stream_error = Some(e.to_string());
                        next_poll = Instant::now();
                    }
                    None => {
                        // Usually the process has just ended: ask at once, then briefly back off.
                        stream_open = false;
                        next_poll = Instant::now();
                        poll_every = Duration::from_millis(5);
                    }
                },
                _ = tokio::time::sleep_until(next_poll), if exit.is_none() => {
                    let info = self.docker.inspect_exec(&exec_id).await.map_err(Self::err)?;
                    if info.running == Some(false) {
                        exit = Some(info.exit_code);
                        last_data = Instant::now();
                    } else {
                        poll_every = (poll_every * 2).min(MAX_POLL);
                        next_poll = Instant::now() + poll_every;
                    }
                },
                _ = tokio::time::sleep_until(last_data + EXIT_GRACE), if stream_open && exit.is_some() => {
                    left_running = true;
                    break None;
                },
            }
        };

        let mut notes = Vec::new();
        let mut result = ExecOutput::default();
        match stop {
            Some(why) => {
                let secs = req.timeout.as_secs_f64();
                if let Err(e) = self.kill_marked(&marker).await {
                    notes.push(format!("killing the command's processes failed: {e}"));
                }
                // Whatever was still in flight.
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while let Some(Ok(item)) = output.next().await {
                        match item {
                            LogOutput::StdOut { message } => collector.push(Stream::Stdout, &message),
                            LogOutput::StdErr { message } => collector.push(Stream::Stderr, &message),
                            _ => {}
                        }
                    }
                })
                .await;
                result.signal = Some("SIGKILL".into());
                match why {
                    Stop::TimedOut => {
                        result.timed_out = true;
                        notes.push(format!("timed out after {secs} s; the command's processes were killed"));
                    }
                    Stop::Interrupted => {
                        result.interrupted = true;
                        notes.push("interrupted; the command's processes were killed".into());
                    }
                }
            }
            None => {
                result.exit_code = exit.flatten();
                if left_running {
                    let listed = self.helper(LIST_SCRIPT, &marker).await.unwrap_or_default();
                    let procs: Vec<&str> = listed
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !l.contains(RELAY_ARGS))
                        .take(5)
                        .collect();
                    if !procs.is_empty() {
                        notes.push(format!(
                            "the shell exited but background process(es) still hold its output and keep \
                             running: {}; output after this point is not captured",
                            procs.join("; ")
                        ));
                    }
                }
                if let Some(e) = stream_error {
                    notes.push(format!("output stream ended early: {e}"));
                }
            }
        }
        let captured = collector.finish();
        if result.exit_code == Some(127) {
            for cap in NOT_FOUND.captures_iter(&captured.stderr) {
                notes.push(format!("`{}`: not found in the image ({})", &cap[1], self.image));
            }
        }
        if let Some(code) = result.exit_code.filter(|c| (129..=159).contains(c)) {
            if let Ok(sig) = nix::sys::signal::Signal::try_from((code - 128) as i32) {
                notes.push(format!("exit code {code}: probably killed by {}", sig.as_str()));
            }
        }
        result.stdout = captured.stdout;
        result.stderr = captured.stderr;
        result.truncated = captured.truncated;
        result.total_bytes = captured.total_bytes;
        result.full_output = captured.full_output;
        result.notes = notes;
        Ok(result)
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, SandboxError> {
        let cwd = std::fs::canonicalize(&req.cwd).unwrap_or_else(|_| req.cwd.clone());
        if !self.spec.mounts.iter().any(|m| cwd.starts_with(&m.path)) {
            return Err(SandboxError::OutsideMounts(cwd));
        }
        if !cwd.is_dir() {
            // Mounts keep host paths, so the host's view decides.
            return Ok(ExecOutput {
                stderr: format!("working directory {} does not exist", cwd.display()),
                notes: vec!["the command did not run".into()],
                ..Default::default()
            });
        }
        self.run(&req, &cwd.to_string_lossy()).await
    }

    fn describe(&self) -> String {
        format!("docker container {} ({})", self.name, self.image)
    }

    fn agent_box(&self) -> &AgentBox {
        &self.spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_bash_and_dash() {
        let bash = "bash: line 1: frobnicate: command not found\n";
        let dash = "sh: 1: zap: not found\n";
        let other = "bash: line 1: ./x: No such file or directory\n";
        assert_eq!(&NOT_FOUND.captures(bash).unwrap()[1], "frobnicate");
        assert_eq!(&NOT_FOUND.captures(dash).unwrap()[1], "zap");
        assert!(NOT_FOUND.captures(other).is_none());
    }
}
