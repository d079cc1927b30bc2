//! One agent container ([`Container`]; [`super::agent::DockerSandbox`] is the agent's
//! [`crate::sandbox::Sandbox`], which replaces the container when it is gone): `exec` that
//! never hangs (issue "Exec"), also when the container dies under it (issue 26: every wait
//! here also waits for the container's [`Life`] to end).
//!
//! Commands go through the container's exec service when it runs ([`super::service`],
//! `exec/on_service.rs`: one frame each way on a connection the engine already holds, with
//! the same properties as below). Without it (it could not start, or broke) each command is
//! a Docker exec of `bash -c COMMAND` inside a small relay (see [`RELAY`]); the
//! engine makes every exec process a session and process-group leader, and the command's
//! environment carries a unique marker (`FLOWERBOX_EXEC=<id>`). Output streams through the [`OutputCollector`] (bounded memory,
//! full-output spill). The exit code is read from the engine after the process has ended.
//!
//! - Timeout or cancellation: a second exec kills the command's process group and every
//!   process carrying its marker (also those that escaped with `setsid`), then the result says
//!   `timed_out` / `interrupted`.
//! - The shell exits while a background child still holds stdout (`server & echo started`):
//!   the relay lets go of the exec's pipes about 200 ms later and we return with the output so
//!   far and a note naming the processes left running (they keep running and their writes keep
//!   succeeding: a judge may inspect and reach them).
//! - Exit 127 with the shell's "not found" message: a note says the program is not found in
//!   the image.

use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use bollard::query_parameters::{RestartContainerOptions, UploadToContainerOptions};
use bollard::Docker;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

mod attach;
mod direct;
mod on_service;

use super::liveness::{Life, Watch};
use super::service::client::Service;
use super::service::{NoService, ServiceSlot};
use crate::sandbox::{AgentBox, ExecOutput, ExecRequest, OutputCollector, SandboxError};

pub(crate) use crate::sandbox::service::MARKER_VAR;

/// A started exec's attached output.
type Output = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

/// An exec [`Container::start_marked`] started.
struct StartedExec {
    /// The engine's id of the exec.
    id: String,
    /// Its stdout and stderr.
    output: Output,
    /// Its stdin (closed at once unless it was asked for).
    input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
}

/// Marks `result` as stopped for `why` (the command's processes were killed) and says so in
/// `notes`.
fn mark_stopped(why: Stop, timeout: Duration, result: &mut ExecOutput, notes: &mut Vec<String>) {
    result.signal = Some("SIGKILL".into());
    match why {
        Stop::TimedOut => {
            result.timed_out = true;
            notes.push(format!(
                "timed out after {} s; the command's processes were killed",
                timeout.as_secs_f64()
            ));
        }
        Stop::Interrupted => {
            result.interrupted = true;
            notes.push("interrupted; the command's processes were killed".into());
        }
        Stop::Gone => {}
    }
}

/// Safety net when the stream stays open after the exit is known (no relay: plain `sh`):
/// output is still collected until the stream has been quiet this long...
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// ...but no longer than this after the exit (a background child may write forever).
const EXIT_GRACE_MAX: Duration = Duration::from_secs(2);
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

/// Runs the command `$1` with each output stream relayed by `tee -p` (which keeps draining,
/// into /dev/null, whatever happens to its output) and then `cat` (which writes to the exec's
/// pipe). When the command's shell exits, the relays normally end at once; if a background
/// child still holds the command's output (a server under test), the `cat`s are killed after
/// about 200 ms: the exec's pipes close, so the engine reports the end now and not 2 s later
/// (with its pipes held it would also stall the container's next exec), while `tee` keeps the
/// child's writes succeeding so the child lives on. Finally the end line (see
/// [`super::sentinel::EndLine`]) with marker `$2`, the exit code and whether the relay was
/// cut goes to the exec's stderr. Waiting is fork-free: `read -t` on fd 9, a pipe that never
/// delivers.
const RELAY: &str = r#"exec 3>&1 4>&2 9<> <(:)
exec 5> >(exec cat >&3 4>&- 9>&-); co=$!
exec 6> >(exec cat >&4 3>&- 9>&-); ce=$!
exec 7> >(exec tee -p /dev/null >&5 2>/dev/null 3>&- 4>&- 6>&- 9>&-)
exec 8> >(exec tee -p /dev/null >&6 2>/dev/null 3>&- 4>&- 5>&- 7>&- 9>&-)
exec 5>&- 6>&-
bash -c "$1" >&7 2>&8 3>&- 4>&- 7>&- 8>&- 9>&-
rc=$?
exec 7>&- 8>&-
n=0 cut=0
while kill -0 "$co" 2>/dev/null || kill -0 "$ce" 2>/dev/null; do
  n=$((n+1))
  if [ "$n" -gt 25 ]; then kill "$co" "$ce" 2>/dev/null; cut=1; break; fi
  if [ "$n" -le 5 ]; then read -t 0.001 -u 9; else read -t 0.01 -u 9; fi
done
printf '\037FBXEND-%s:%s:%s\n' "$2" "$rc" "$cut" >&4
exit "$rc""#;

/// The relay processes, left out of "still running" notes.
const RELAY_ARGS: &str = "tee -p /dev/null";

/// Lists `pid command` of every live process carrying the marker `$1`.
const LIST_SCRIPT: &str = r#"m="FLOWERBOX_EXEC=$1"
for e in /proc/[0-9]*/environ; do
  grep -qzx -- "$m" "$e" 2>/dev/null || continue
  p=${e#/proc/}; p=${p%/environ}
  printf '%s %s\n' "$p" "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
done"#;

/// One agent container: one incarnation of an agent's sandbox.
pub(crate) struct Container {
    /// The engine client.
    docker: Docker,
    /// Container id.
    id: String,
    /// Container name (`fbx-<run>-<agent>-<hex>`).
    name: String,
    /// Image the container runs, for messages.
    image: String,
    /// The engine user of every exec (`uid:gid`).
    user: String,
    /// Run first in every exec, before the command (a read-only container's `setpriv`).
    prefix: Vec<String>,
    /// Who the commands run as in the end: owner of files written for them.
    owner: super::UserIds,
    /// `bash`, or `sh` when the image has no bash.
    shell: &'static str,
    /// The agent's canonical box.
    spec: AgentBox,
    /// The container's exec service, when its binary is mounted (see [`super::service`]).
    service: Option<Arc<ServiceSlot>>,
    /// Why there is no service (when `service` is `None`): the run's reason.
    no_service: Option<String>,
    /// A writing agent's Landlock domain (`sandbox::service::domain`): entered by its service
    /// and by each command's exec without it, through the service's binary.
    domain: Option<crate::sandbox::service::domain::Need>,
    /// The container's life: every wait for a command also waits for it.
    pub(crate) life: Life,
    /// The life of the pod it joined: it goes with the pod.
    pub(crate) pod: Life,
    /// The run's watch (the engine, the notices).
    watch: Arc<Watch>,
}

/// The exec service's command line (behind no prefix): in the agent's Landlock domain as
/// `domain` says, when it has one.
pub(crate) fn service_argv(domain: Option<crate::sandbox::service::domain::Need>) -> Vec<String> {
    let mut argv = vec![
        super::service::SERVICE_PATH.to_string(),
        super::service::SUBCOMMAND.into(),
    ];
    if let Some(need) = domain {
        argv.push(crate::sandbox::service::domain::SERVICE_FLAG.into());
        argv.extend(need.args().iter().map(|a| a.to_string()));
    }
    argv
}

/// Why a command was stopped before its shell ended.
enum Stop {
    TimedOut,
    Interrupted,
    /// The container is gone (its processes with it).
    Gone,
}

/// What a container is given at birth besides its engine facts.
pub(crate) struct Birth {
    /// Its life (watched from its start).
    pub life: Life,
    /// Its pod's life.
    pub pod: Life,
    /// The run's watch.
    pub watch: Arc<Watch>,
}

impl Container {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        docker: Docker,
        id: String,
        name: String,
        image: String,
        user: String,
        has_bash: bool,
        spec: AgentBox,
        birth: Birth,
    ) -> Self {
        let shell = if has_bash { "bash" } else { "sh" };
        let owner = user
            .split_once(':')
            .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
            .map_or(super::UserIds { uid: 0, gid: 0 }, |(uid, gid)| {
                super::UserIds { uid, gid }
            });
        Container {
            docker,
            id,
            name,
            image,
            user,
            prefix: Vec::new(),
            owner,
            shell,
            spec,
            service: None,
            no_service: None,
            domain: None,
            life: birth.life,
            pod: birth.pod,
            watch: birth.watch,
        }
    }

    /// Commands go through the exec service mounted at [`super::service::SERVICE_PATH`], its
    /// frames over `socket` when there is one (a local engine's) and it works.
    /// `first`: the service that started with the container, attached, for the first start.
    pub(crate) fn with_service(
        mut self,
        socket: Option<super::service::HostSocket>,
        first: Option<super::service::client::Attached>,
    ) -> Self {
        let slot = Arc::new(ServiceSlot::with_socket(socket, first));
        // A service of a container that goes is let go: its stream would never end.
        let (closing, life) = (slot.clone(), self.life.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = life.wait() => {}
                _ = life.retiring() => {}
            }
            closing.close().await;
        });
        self.service = Some(slot);
        self
    }

    /// Every process of the agent lives in a Landlock domain of its own, as `need` says: the
    /// service enters it at its start, each command's exec without it through the service's
    /// binary (which must be mounted).
    pub(crate) fn in_domain(mut self, need: crate::sandbox::service::domain::Need) -> Self {
        self.domain = Some(need);
        self
    }

    /// The prefix of a command's exec without the service: enter the agent's domain, then
    /// run the rest (nothing for an agent without one).
    fn domain_prefix(&self) -> Vec<String> {
        use crate::sandbox::service::domain::ENTER_SUBCOMMAND;
        let Some(need) = self.domain else {
            return Vec::new();
        };
        let mut argv = vec![
            super::service::SERVICE_PATH.to_string(),
            ENTER_SUBCOMMAND.into(),
        ];
        argv.extend(need.args().iter().map(|a| a.to_string()));
        argv.push("--".into());
        argv
    }

    /// Commands go as a Docker exec each, for the run's reason `why`.
    pub(crate) fn without_service(mut self, why: Option<String>) -> Self {
        self.no_service = why;
        self
    }

    /// Starts the exec service now, in the background, so the first command finds it up; a
    /// container that goes meanwhile (released at once, killed) ends the start.
    pub(crate) fn warm_up(self: &Arc<Self>) {
        if self.service.is_some() {
            let me = self.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = me.service() => {}
                    _ = me.life.wait() => {}
                    _ = me.life.retiring() => {}
                }
            });
        }
    }

    /// The pid (in the pod's PID namespace) of the container's live exec service, starting it
    /// when needed; otherwise why commands go as a Docker exec each.
    pub(crate) async fn exec_service(&self) -> Result<u32, String> {
        match self.service().await {
            Some(s) => Ok(s.pid()),
            None => Err(self.why_no_service()),
        }
    }

    /// Which way the live exec service's frames go (starting it when needed); `None` when
    /// commands go as a Docker exec each.
    pub(crate) async fn exec_channel(&self) -> Option<super::service::Channel> {
        self.service().await.map(|s| s.channel())
    }

    /// Why commands go as a Docker exec each.
    fn why_no_service(&self) -> String {
        match &self.service {
            Some(slot) => slot.why_off(),
            None => self
                .no_service
                .clone()
                .unwrap_or_else(|| "no exec service for this run".into()),
        }
    }

    /// The live exec service, started (or restarted) when needed; `None`: a Docker exec per
    /// command. A start that failed because the container is going (its state from the
    /// engine, never the words of the failure) is no reason to fall back; any other is said
    /// on screen once per run.
    async fn service(&self) -> Option<Service> {
        let slot = self.service.as_ref()?;
        let argv = self.argv(service_argv(self.domain));
        match slot.get(&self.docker, &self.id, &self.user, argv).await {
            Ok(service) => Some(service),
            Err(NoService::Off) => None,
            Err(NoService::Broke(why)) => {
                self.watch.slow_exec(&self.spec.agent, why);
                None
            }
            Err(NoService::Failed(e)) => {
                // Only a container the engine says runs has a service problem.
                if !self.life.retired() && self.watch.runs(&self.life).await {
                    self.watch.slow_exec(&self.spec.agent, e.to_string());
                }
                None
            }
        }
    }

    /// Every exec starts as the engine user `user` and runs `prefix` first, which ends as
    /// `owner` (a read-only container: root, then `setpriv` to the shell's ids).
    pub(crate) fn entered_as(
        mut self,
        user: String,
        prefix: Vec<String>,
        owner: super::UserIds,
    ) -> Self {
        self.user = user;
        self.prefix = prefix;
        self.owner = owner;
        self
    }

    /// `prefix` + `argv`.
    fn argv(&self, argv: Vec<String>) -> Vec<String> {
        self.prefix.iter().cloned().chain(argv).collect()
    }

    /// Who its commands run as in the end (the uid every process an agent starts in it has).
    pub(crate) fn owner(&self) -> super::UserIds {
        self.owner
    }

    /// The container id.
    pub(crate) fn container_id(&self) -> &str {
        &self.id
    }

    /// The container name.
    pub(crate) fn container_name(&self) -> &str {
        &self.name
    }

    /// The image the container runs.
    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    /// The agent's canonical box.
    pub(crate) fn agent_box(&self) -> &AgentBox {
        &self.spec
    }

    /// It is gone, or its pod is: how (the pod's going first: it took the container with it).
    pub(crate) fn gone(&self) -> Option<crate::sandbox::notice::Gone> {
        self.pod
            .gone()
            .map(|_| crate::sandbox::notice::Gone::Pod)
            .or_else(|| self.life.gone())
    }

    fn err(e: bollard::errors::Error) -> SandboxError {
        SandboxError::from(e)
    }

    /// Runs a helper script (`sh -c SCRIPT flowerbox ARG`) to completion; returns its stdout and
    /// exit code.
    async fn helper(&self, script: &str, arg: &str) -> Result<(String, Option<i64>), SandboxError> {
        let cmd = self.argv(vec![
            "sh".into(),
            "-c".into(),
            script.into(),
            "flowerbox".into(),
            arg.into(),
        ]);
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: Some(self.user.clone()),
            cmd: Some(cmd),
            ..Default::default()
        };
        let exec = self
            .docker
            .create_exec(&self.id, config)
            .await
            .map_err(Self::err)?;
        let mut out = Vec::new();
        if let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&exec.id, None)
            .await
            .map_err(Self::err)?
        {
            let drain = async {
                while let Some(Ok(item)) = output.next().await {
                    if let LogOutput::StdOut { message } = item {
                        out.extend_from_slice(&message);
                    }
                }
            };
            tokio::time::timeout(KILL_WAIT, drain).await.map_err(|_| {
                SandboxError::Backend(format!("helper exec in {} did not finish", self.name))
            })?;
        }
        let code = self
            .docker
            .inspect_exec(&exec.id)
            .await
            .map_err(Self::err)?
            .exit_code;
        Ok((String::from_utf8_lossy(&out).into_owned(), code))
    }

    /// Kills everything the command with `marker` started. When that cannot run (the pids limit
    /// is exhausted, so not even the kill can start), restarts the container, which ends every
    /// process in it; returns a note saying so. Nothing to do in a container that is gone (its
    /// processes went with it), nor while the engine does not answer (then the caller kills
    /// again once it does).
    pub(crate) async fn kill_marked(&self, marker: &str) -> Option<String> {
        if self.gone().is_some() {
            return None;
        }
        let failure = match self.helper(KILL_SCRIPT, marker).await {
            Ok((_, Some(0))) => return None,
            Ok((_, code)) => match code {
                Some(c) => format!("it exited with {c}"),
                None => "its exit code is unknown".into(),
            },
            Err(e) => e.to_string(),
        };
        // The engine's state decides: a container that is gone needs no kill.
        if self.watch.confirm(&self.life).await.is_some() {
            return None;
        }
        let options = RestartContainerOptions {
            t: Some(1),
            ..Default::default()
        };
        // Our own restart is no death of the container.
        let _quiet = self.life.quiet();
        Some(match self.docker.restart_container(&self.id, Some(options)).await {
            Ok(()) => format!(
                "the kill could not run in the container ({failure}); the container was restarted, \
                 which ended every process in it"
            ),
            Err(e) => format!("killing the command's processes failed ({failure}); restarting the container failed: {e}"),
        })
    }

    /// Writes a command too long for one argument to `/tmp` in the container (the container's
    /// own layer: an upload cannot reach the tmpfs HOME), private to the exec user, and returns
    /// the short command that sources it.
    async fn stage_command(&self, command: &str, marker: &str) -> Result<String, SandboxError> {
        let path = format!("/tmp/.flowerbox-cmd-{marker}");
        let (uid, gid) = (u64::from(self.owner.uid), u64::from(self.owner.gid));
        let text = crate::sandbox::sourcing_script(&path, command);
        let archive = super::container::tar_files(&[(&path[5..], &text)], 0o600, (uid, gid))?;
        self.docker
            .upload_to_container(
                &self.id,
                Some(UploadToContainerOptions {
                    path: "/tmp".into(),
                    ..Default::default()
                }),
                bollard::body_full(archive.into()),
            )
            .await
            .map_err(super::error::container(format!(
                "writing the long command into {}",
                self.name
            )))?;
        Ok(crate::sandbox::sourcing_command(&path))
    }

    /// Runs `req` in `cwd` (inside a mount, checked by the caller), its processes marked with
    /// `marker`. A container that goes while it runs ends it at once with an error (the
    /// caller tells why, from the container's [`Life`]).
    pub(crate) async fn run(
        &self,
        req: &ExecRequest,
        cwd: &str,
        marker: &str,
    ) -> Result<ExecOutput, SandboxError> {
        let command = if req.command.len() > crate::sandbox::INLINE_COMMAND_MAX {
            self.stage_command(&req.command, marker).await?
        } else {
            req.command.clone()
        };
        if let Some(service) = self.service().await {
            if let Some(done) = self
                .run_on_service(&service, req, cwd, &command, marker)
                .await
            {
                return done;
            }
        }
        self.run_direct(req, cwd, command, marker.to_string()).await
    }

    /// The error of a command whose container went under it (the caller words it).
    fn gone_error(&self) -> SandboxError {
        SandboxError::ContainerGone(format!("{} went while the command ran", self.name))
    }

    /// Creates and starts an exec of `argv` in `cwd` as the container's engine user (behind
    /// [`Container::argv`]'s prefix), with `env` and the command's `marker` in its environment
    /// and its output (and, when `stdin`, its input) attached.
    async fn start_marked(
        &self,
        argv: Vec<String>,
        cwd: String,
        env: &[(String, String)],
        marker: &str,
        stdin: bool,
    ) -> Result<StartedExec, SandboxError> {
        let mut env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        env.push(format!("{MARKER_VAR}={marker}"));
        let config = ExecConfig {
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            env: Some(env),
            cmd: Some(self.argv(argv)),
            user: Some(self.user.clone()),
            working_dir: Some(cwd),
            ..Default::default()
        };
        let id = self
            .docker
            .create_exec(&self.id, config)
            .await
            .map_err(Self::err)?
            .id;
        let StartExecResults::Attached { output, input } =
            self.docker.start_exec(&id, None).await.map_err(Self::err)?
        else {
            return Err(SandboxError::Backend(
                "docker: exec started detached".into(),
            ));
        };
        Ok(StartedExec { id, output, input })
    }

    /// The result of a command that ended (or was stopped) as `result` says, with the output
    /// `collector` holds and `notes` ([`crate::sandbox::finish::finish`], as every backend).
    fn finish(
        &self,
        result: ExecOutput,
        collector: OutputCollector,
        notes: Vec<String>,
    ) -> ExecOutput {
        crate::sandbox::finish::finish(
            result,
            collector.finish(),
            notes,
            crate::sandbox::finish::RanIn::Image(&self.image),
        )
    }
}
