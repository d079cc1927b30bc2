//! A command through the container's exec service ([`crate::sandbox::docker::service`]): one
//! request frame, the output and the exit back on the connection the engine already holds.
//!
//! The same rules as a Docker exec per command: the deadline and the cancel token are the
//! host's; a stop asks the service to kill everything carrying the command's marker, and when
//! the service cannot (dead, silent), the host's kill exec does it. A service that never
//! confirms a start is given up (killed) and the command runs as a Docker exec instead, as
//! when the connection ends before the start is confirmed; a service that dies while the
//! command runs makes the command a tool error, after its processes were killed. A container
//! that goes while the command runs ends it at once (the service's stream would not end).

use std::time::Duration;
use tokio::time::Instant;

use super::{Container, Stop, KILL_WAIT};
use crate::sandbox::docker::service::client::{Event, Request, Service};
use crate::sandbox::service::proto::Run;
use crate::sandbox::{ExecOutput, ExecRequest, OutputCollector, SandboxError};

/// How long the service gets to confirm it started a command.
const SERVICE_ACK: Duration = Duration::from_secs(5);
/// How long the rest of a stopped command's output may take.
const DRAIN_WAIT: Duration = Duration::from_secs(2);

impl Container {
    /// Runs `command` on `service`; `None` when it did not run there (the connection had
    /// ended, or the service stopped answering before it started the command): then the
    /// caller runs it as a Docker exec.
    pub(super) async fn run_on_service(
        &self,
        service: &Service,
        req: &ExecRequest,
        cwd: &str,
        command: &str,
        marker: &str,
    ) -> Option<Result<ExecOutput, SandboxError>> {
        let mut request = service.request()?;
        let run = Run {
            shell: self.shell.into(),
            command: command.into(),
            cwd: cwd.into(),
            env: req.env.clone(),
            marker: marker.into(),
        };
        if !request.run(&run).await {
            if service.broken() {
                // It stopped reading: it must never read this request later.
                self.abandon(service, "it stopped reading").await;
            }
            return None;
        }
        let mut collector = OutputCollector::new(req.output_cap, req.spill_dir.as_deref());
        let deadline = Instant::now() + req.timeout;
        let ack_by = Instant::now() + SERVICE_ACK;
        let mut started = false;
        let ended = loop {
            tokio::select! {
                _ = req.cancel.cancelled() => break Err(Stop::Interrupted),
                _ = tokio::time::sleep_until(deadline) => break Err(Stop::TimedOut),
                _ = self.life.wait() => return Some(Err(self.gone_error())),
                _ = self.pod.wait() => return Some(Err(self.gone_error())),
                _ = tokio::time::sleep_until(ack_by), if !started => {
                    self.abandon(service, "it did not confirm a command within 5 s").await;
                    // Whatever it may have started goes before the command runs without it.
                    let _ = self.kill_marked(marker).await;
                    return None;
                }
                event = request.next() => match event {
                    Some(Event::Started) => started = true,
                    Some(Event::Out(stream, bytes)) => collector.push(stream, &bytes),
                    Some(Event::Exit(exit)) => break Ok(exit),
                    // Only a file operation's request gets these.
                    Some(Event::Killed(_) | Event::Data(_) | Event::Done(_) | Event::Ended(_)) => {}
                    Some(Event::Failed(message)) => {
                        return Some(Err(SandboxError::Backend(format!(
                            "the exec service in {} could not start the command: {message}",
                            self.name
                        ))));
                    }
                    None if !started => {
                        // It never said it started the command: make sure nothing of it runs,
                        // then run it without the service.
                        let _ = self.kill_marked(marker).await;
                        return None;
                    }
                    None if self.gone().is_some() => return Some(Err(self.gone_error())),
                    None => {
                        let why = service.why();
                        let note = self
                            .kill_marked(marker)
                            .await
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default();
                        return Some(Err(SandboxError::Backend(format!(
                            "{why}, while the command ran in {}; its processes were killed{note}",
                            self.name
                        ))));
                    }
                },
            }
        };
        let mut notes = Vec::new();
        let mut result = ExecOutput::default();
        match ended {
            Ok(exit) => {
                result.exit_code = exit.code;
                // Text from the container: a few short lines at most.
                let procs: Vec<String> = exit
                    .left
                    .iter()
                    .filter(|l| !l.trim().is_empty())
                    .take(5)
                    .map(|l| l.chars().take(100).collect())
                    .collect();
                if exit.cut && !procs.is_empty() {
                    self.life.left_running(&procs);
                    notes.push(format!(
                        "the shell exited, leaving background process(es) running: {}; their output from \
                         here on is not captured",
                        procs.join("; ")
                    ));
                }
            }
            Err(why) => {
                if !self
                    .kill_on_service(service, &mut request, &mut collector, marker)
                    .await
                {
                    notes.extend(self.kill_marked(marker).await);
                }
                super::mark_stopped(why, req.timeout, &mut result, &mut notes);
            }
        }
        Some(Ok(self.finish(result, collector, notes)))
    }

    /// Has the service kill the command's processes; collects what output was still in
    /// flight. `false` when it could not (then the host's kill exec must).
    async fn kill_on_service(
        &self,
        service: &Service,
        request: &mut Request,
        collector: &mut OutputCollector,
        marker: &str,
    ) -> bool {
        if !request.kill(marker).await {
            return false;
        }
        let mut exited = false;
        let killed = tokio::time::timeout(KILL_WAIT, async {
            loop {
                match request.next().await {
                    Some(Event::Out(stream, bytes)) => collector.push(stream, &bytes),
                    Some(Event::Exit(_)) => exited = true,
                    Some(Event::Killed(ok)) => return Some(ok),
                    Some(_) => {}
                    None => return None,
                }
            }
        })
        .await;
        match killed {
            Ok(Some(true)) => {
                if !exited {
                    let _ = tokio::time::timeout(DRAIN_WAIT, async {
                        while let Some(event) = request.next().await {
                            match event {
                                Event::Out(stream, bytes) => collector.push(stream, &bytes),
                                Event::Exit(_) => break,
                                _ => {}
                            }
                        }
                    })
                    .await;
                }
                true
            }
            Ok(_) => false,
            Err(_) => {
                self.abandon(service, "it did not finish a kill within 10 s")
                    .await;
                false
            }
        }
    }

    /// Gives up on a service that stopped answering and kills it (it may only be stopped),
    /// so it can never run a command late.
    async fn abandon(&self, service: &Service, why: &str) {
        tracing::warn!(container = %self.name, %why, "exec service given up");
        service.abandon(why);
        if service.pid() > 1 {
            let pid = service.pid().to_string();
            let _ = self.helper(r#"kill -KILL "$1""#, &pid).await;
        }
    }
}

impl Container {
    /// The run's end through this container's live exec service (none is started for it):
    /// every other process of the container's uid in the pod killed, and none left running
    /// ([`crate::sandbox::service::end`]). `true` once the service said so within `wait`;
    /// `false` without a live service, when it did not answer in time (stopped or killed by
    /// an agent's process, say), or when it named processes left: then the engine's kill
    /// must do it.
    pub(crate) async fn end_uid(&self, wait: Duration) -> bool {
        let Some(slot) = &self.service else {
            return false;
        };
        let Some(service) = slot.live().await else {
            return false;
        };
        let Some(mut request) = service.request() else {
            return false;
        };
        let ended = tokio::time::timeout(wait, async {
            if !request.end().await {
                return None;
            }
            loop {
                match request.next().await {
                    Some(Event::Ended(left)) => return Some(left),
                    Some(_) => {}
                    None => return None,
                }
            }
        })
        .await;
        match ended {
            Ok(Some(left)) if left.is_empty() => true,
            Ok(Some(left)) => {
                tracing::warn!(container = %self.name, ?left, "processes outlived the run's end in the pod");
                false
            }
            Ok(None) => {
                tracing::info!(container = %self.name, why = %service.why(), "the exec service ended without the run's end: the engine kills");
                false
            }
            Err(_) => {
                tracing::info!(container = %self.name, "no run's end from the exec service in time: the engine kills");
                false
            }
        }
    }
}
