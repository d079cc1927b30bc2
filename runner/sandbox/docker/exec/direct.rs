//! A command as a Docker exec of its own, inside [`RELAY`]: the path without the exec service.
//! The exec is started ([`Container::start_direct`]), its output followed until the command
//! ends or is stopped ([`Container::follow_direct`]), then a stopped command's processes are
//! killed ([`Container::stop_direct`]) or an ended one's left-running children named
//! ([`Container::ended_direct`]).

use bollard::container::LogOutput;
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

use super::{
    mark_stopped, Container, Output, Stop, EXIT_GRACE, EXIT_GRACE_MAX, LIST_SCRIPT, MAX_POLL,
    RELAY, RELAY_ARGS,
};
use crate::sandbox::docker::sentinel::EndLine;
use crate::sandbox::output::Stream;
use crate::sandbox::{ExecOutput, ExecRequest, OutputCollector, SandboxError};

/// What one command's output said so far.
struct Direct {
    /// Its output, bounded and spilled.
    collector: OutputCollector,
    /// Reads the relay's end line off stderr.
    end_line: EndLine,
    /// The exit once known (`Some(None)`: ended without a code).
    exit: Option<Option<i64>>,
    /// The stream stayed open past the exit: a background child holds it.
    left_running: bool,
    /// Why the stream ended early, if it broke.
    stream_error: Option<String>,
}

impl Direct {
    /// Takes one item of the output.
    fn push(&mut self, item: LogOutput) {
        match item {
            LogOutput::StdOut { message } => self.collector.push(Stream::Stdout, &message),
            LogOutput::StdErr { message } => {
                let text = self.end_line.feed(&message);
                self.collector.push(Stream::Stderr, &text);
            }
            _ => {}
        }
    }
}

impl Container {
    /// One command as a Docker exec of its own (inside [`RELAY`]): the path without the
    /// exec service.
    pub(super) async fn run_direct(
        &self,
        req: &ExecRequest,
        cwd: &str,
        command: String,
        marker: String,
    ) -> Result<ExecOutput, SandboxError> {
        let (exec_id, mut output) = self.start_direct(req, cwd, command, &marker).await?;
        let mut run = Direct {
            collector: OutputCollector::new(req.output_cap, req.spill_dir.as_deref()),
            end_line: EndLine::new(&marker),
            exit: None,
            left_running: false,
            stream_error: None,
        };
        let stop = self
            .follow_direct(&exec_id, &mut output, req, &mut run)
            .await?;
        let mut result = ExecOutput::default();
        let notes = match stop {
            // Its processes went with it; the stream would never end.
            Some(Stop::Gone) => return Err(self.gone_error()),
            Some(why) => {
                self.stop_direct(why, req, &marker, &mut output, &mut run, &mut result)
                    .await
            }
            None => {
                result.exit_code = run.exit.flatten();
                self.ended_direct(&marker, &mut run).await
            }
        };
        let held = run.end_line.flush();
        run.collector.push(Stream::Stderr, &held);
        Ok(self.finish(result, run.collector, notes))
    }

    /// Starts the exec of `command` (with `marker` in its environment) in `cwd`: inside the
    /// relay under bash, plain otherwise; in the agent's Landlock domain when it has one, so a
    /// worker that kills its own service gets out of nothing.
    async fn start_direct(
        &self,
        req: &ExecRequest,
        cwd: &str,
        command: String,
        marker: &str,
    ) -> Result<(String, Output), SandboxError> {
        let shell_argv: Vec<String> = match self.shell {
            "bash" => vec![
                "bash".into(),
                "-c".into(),
                RELAY.into(),
                "flowerbox".into(),
                command,
                marker.to_string(),
            ],
            shell => vec![shell.into(), "-c".into(), command],
        };
        let argv = self.domain_prefix().into_iter().chain(shell_argv).collect();
        let started = self
            .start_marked(argv, cwd.to_string(), &req.env, marker, false)
            .await?;
        Ok((started.id, started.output))
    }

    /// Collects the output of exec `exec_id` into `run` until the command has ended (`None`)
    /// or must be stopped (why).
    async fn follow_direct(
        &self,
        exec_id: &str,
        output: &mut Output,
        req: &ExecRequest,
        run: &mut Direct,
    ) -> Result<Option<Stop>, SandboxError> {
        // With the relay the end line reports the exit; polling the engine is the fallback
        // (plain `sh`, or the wrapper died) and only once the stream has closed, because the
        // engine answers exec inspection only after the streams are done (up to 2 s).
        let relayed = self.shell == "bash";
        let deadline = Instant::now() + req.timeout;
        let mut stream_open = true;
        // Quick at first (a shell that leaves a background child exits within milliseconds), then
        // backing off for long commands.
        let mut poll_every = Duration::from_millis(10);
        let mut next_poll = Instant::now() + poll_every;
        let mut last_data = Instant::now();
        let mut exit_at = Instant::now();
        loop {
            if !stream_open && run.exit.is_some() {
                return Ok(None);
            }
            tokio::select! {
                _ = req.cancel.cancelled() => return Ok(Some(Stop::Interrupted)),
                _ = tokio::time::sleep_until(deadline) => return Ok(Some(Stop::TimedOut)),
                _ = self.life.wait() => return Ok(Some(Stop::Gone)),
                _ = self.pod.wait() => return Ok(Some(Stop::Gone)),
                item = output.next(), if stream_open => match item {
                    Some(Ok(item)) => {
                        let data = matches!(item, LogOutput::StdOut { .. } | LogOutput::StdErr { .. });
                        run.push(item);
                        if run.exit.is_none() && run.end_line.code().is_some() {
                            run.exit = Some(run.end_line.code());
                            exit_at = Instant::now();
                        }
                        if data {
                            last_data = Instant::now();
                        }
                    }
                    Some(Err(e)) => {
                        stream_open = false;
                        run.stream_error = Some(e.to_string());
                        next_poll = Instant::now();
                    }
                    None => {
                        // Usually the process has just ended: ask at once, then briefly back off.
                        stream_open = false;
                        next_poll = Instant::now();
                        poll_every = Duration::from_millis(5);
                    }
                },
                _ = tokio::time::sleep_until(next_poll), if run.exit.is_none() && (!relayed || !stream_open) => {
                    let info = self.docker.inspect_exec(exec_id).await.map_err(Self::err)?;
                    if info.running == Some(false) {
                        run.exit = Some(info.exit_code);
                        exit_at = Instant::now();
                        last_data = exit_at;
                    } else {
                        poll_every = (poll_every * 2).min(MAX_POLL);
                        next_poll = Instant::now() + poll_every;
                    }
                },
                _ = tokio::time::sleep_until((last_data + EXIT_GRACE).min(exit_at + EXIT_GRACE_MAX)),
                    if stream_open && run.exit.is_some() => {
                    run.left_running = true;
                    return Ok(None);
                },
            }
        }
    }

    /// A command stopped for `why` (timeout, interrupt): kills its processes, takes what was
    /// still in flight, and marks `result`. The notes say what happened.
    async fn stop_direct(
        &self,
        why: Stop,
        req: &ExecRequest,
        marker: &str,
        output: &mut Output,
        run: &mut Direct,
        result: &mut ExecOutput,
    ) -> Vec<String> {
        let mut notes: Vec<String> = self.kill_marked(marker).await.into_iter().collect();
        // Whatever was still in flight.
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(Ok(item)) = output.next().await {
                run.push(item);
            }
        })
        .await;
        mark_stopped(why, req.timeout, result, &mut notes);
        notes
    }

    /// A command that ended: the notes name the background processes it left running (their
    /// output is not captured from here on) and a stream that broke early.
    async fn ended_direct(&self, marker: &str, run: &mut Direct) -> Vec<String> {
        let mut notes = Vec::new();
        if run.left_running || run.end_line.cut() {
            let listed = self
                .helper(LIST_SCRIPT, marker)
                .await
                .map(|(o, _)| o)
                .unwrap_or_default();
            let procs: Vec<String> = listed
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.contains(RELAY_ARGS))
                .take(5)
                .map(str::to_string)
                .collect();
            if !procs.is_empty() {
                self.life.left_running(&procs);
                notes.push(format!(
                    "the shell exited, leaving background process(es) running: {}; their output from \
                     here on is not captured",
                    procs.join("; ")
                ));
            }
        }
        if let Some(e) = run.stream_error.take() {
            notes.push(format!("output stream ended early: {e}"));
        }
        notes
    }
}
