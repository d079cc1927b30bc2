//! Where agents' commands run: the [`Sandbox`] trait and its backends (Docker containers in a
//! run pod, or host processes by explicit choice). DESIGN.md "What it adds" 1, "Pod".
//!
//! A [`SandboxFactory`] belongs to one run; it hands each agent that executes commands its own
//! [`Sandbox`] (a container, created on first use) with that agent's [`Mount`]s, and tears
//! everything down at the end of the run.

pub mod attach;
pub mod backend;
pub mod docker;
pub mod doctor;
pub mod egress;
pub mod engine_disk;
pub mod error;
pub mod files;
pub mod finish;
pub mod gc;
pub mod host;
pub mod notice;
pub mod output;
pub mod pinned;
pub mod policy;
pub mod service;

pub use attach::{AttachSpec, Attached, ProcessHandle, StderrTail};
pub use backend::{CommandsRun, Demand, Preflight, SandboxBackend};
pub use engine_disk::EngineDisk;
pub use error::{EngineErrorKind, EngineFault, SandboxError};
pub use files::SandboxFiles;
pub use notice::{NoticeSink, SandboxNotice};
pub use output::{CapturedOutput, OutputCollector};
pub use policy::{Capability, Limits, PolicyUser, SandboxPolicy, Seat, SeccompProfile};

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::role::Role;

/// One mount of an agent's environment: the directory on the host (`host`) and where the agent
/// sees it (`inside`). Normally the two are equal (path identity), so paths in tool results
/// mean the same everywhere. A *shadow* shows another host directory at `inside`, for the
/// container only, as `--isolate` gives each worker its own ref directory and object store
/// (DESIGN.md threat model 2); host-side file tools refuse every path below a shadow. A mount
/// inside another overrides it below its path (a read-only `.git` inside a read-write
/// workspace). A backend whose host paths are not the caller's (a remote engine, a cluster)
/// translates `host`, never `inside`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The directory on the host (canonical, absolute).
    pub host: PathBuf,
    /// Where the agent sees it (canonical, absolute): the container's path, and the path the
    /// host-side file tools accept.
    pub inside: PathBuf,
    /// Read-only for the agent (its container and the host-side file tools).
    pub read_only: bool,
    /// The source the host opened race-free, when it did ([`Pin`]): what the engine mounted
    /// at `inside` must be this object, or the container is refused.
    pub pin: Option<Pin>,
}

impl Mount {
    /// `path` at the same path inside (path identity).
    pub fn same(path: impl Into<PathBuf>, read_only: bool) -> Self {
        let path = path.into();
        Mount {
            host: path.clone(),
            inside: path,
            read_only,
            pin: None,
        }
    }

    /// `path` at the same path inside, its source the object `pin` holds open (a write scope
    /// beneath a read-only workspace, issue 27 §3).
    pub fn pinned(path: impl Into<PathBuf>, pin: Pin, read_only: bool) -> Self {
        Mount {
            pin: Some(pin),
            ..Mount::same(path, read_only)
        }
    }

    /// Host directory `host` shown at `inside` (a shadow, container only).
    pub fn shadow(host: impl Into<PathBuf>, inside: impl Into<PathBuf>, read_only: bool) -> Self {
        Mount {
            host: host.into(),
            inside: inside.into(),
            read_only,
            pin: None,
        }
    }

    /// The agent sees another host directory here than the one at this path.
    pub fn is_shadow(&self) -> bool {
        self.host != self.inside
    }
}

/// A mount source held open by the host (issue 27 §3).
///
/// A bind mount's source given as a path is resolved by the engine when it mounts, later than
/// any check the host made: a process that can write the directory above it (a worker's
/// background process, a finished worker's leftovers, an unscoped worker) could swap a
/// component for a symlink in between and have a read-write mount land outside the workspace,
/// or on its `.git`. Checking again just before handing the path over only moves the window,
/// and the engine cannot be handed the handle itself (runc refuses to bind
/// `/proc/<pid>/fd/<n>`: a mount of another mount namespace). So the host opens the source
/// race-free beneath the workspace (`openat2` with no symlink and nothing above the anchor,
/// [`crate::fsroot::Tree::pin`]) before the container exists, and once the engine has mounted
/// it, before anything runs in the container, checks that what the container has at that path
/// is this very object (`docker::verify`): verify-after-act of an immutable fact (a mount's
/// root), never check-then-act. The handle lives in the box the container keeps, so a
/// re-created container is checked against the same object.
#[derive(Debug, Clone)]
pub struct Pin(Arc<std::os::fd::OwnedFd>);

impl Pin {
    /// Holds `fd` (an `O_PATH` handle is enough).
    pub fn new(fd: std::os::fd::OwnedFd) -> Pin {
        Pin(Arc::new(fd))
    }

    /// `(st_dev, st_ino)` of the object held.
    pub fn identity(&self) -> std::io::Result<(u64, u64)> {
        let st = rustix::fs::fstat(&*self.0)?;
        Ok((st.st_dev, st.st_ino))
    }
}

impl PartialEq for Pin {
    fn eq(&self, other: &Pin) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || matches!((self.identity(), other.identity()), (Ok(a), Ok(b)) if a == b)
    }
}

impl Eq for Pin {}

/// What an agent's sandbox looks like: who it is, what it can see and what it may do. Two
/// boxes are equal when every field is (a pinned mount's source: the same object), so a
/// container made for one is the container of the other.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentBox {
    /// Agent instance name (`coordinator`, `worker-2`, `judge-1`), unique within the run.
    pub agent: String,
    /// The agent's role (labels and descriptions only: what it may do is `policy`).
    pub role: Role,
    /// Mounts, workspace (or worktree) first.
    pub mounts: Vec<Mount>,
    /// Directories hidden inside the mounts (canonical): the run directory, which holds the
    /// records flowerbox trusts. Each is an empty directory no agent can write in its
    /// container, and invisible to its file tools.
    pub masked: Vec<PathBuf>,
    /// Default working directory for commands (the workspace or the agent's worktree).
    pub workdir: PathBuf,
    /// Who its commands run as, with which capabilities, seccomp profile and limits: decided
    /// once by the flow's side, never again by a backend.
    pub policy: SandboxPolicy,
}

/// Longest command passed to the shell as an argument, in bytes. Linux refuses any single
/// argument of 128 KiB or more (`MAX_ARG_STRLEN`, "Argument list too long"), so a longer command
/// is written to a file that the shell sources (see [`sourcing_script`]).
pub(crate) const INLINE_COMMAND_MAX: usize = 96 * 1024;

/// The file text for a command too long to pass inline: it first removes itself (bash's `.`
/// has read the whole file by then; dash keeps reading the open, unlinked file), then runs the
/// command in the sourcing shell, so `exit`, `cd` and variables behave as with `-c`.
pub(crate) fn sourcing_script(path: &str, command: &str) -> String {
    format!("rm -f -- {}\n{command}\n", shell_quote(path))
}

/// The short command that sources `path`.
pub(crate) fn sourcing_command(path: &str) -> String {
    format!(". {}", shell_quote(path))
}

/// Single-quotes `s` for POSIX shells.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// One command to execute.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Shell command line, run with `bash -c` (`sh -c` if bash is missing).
    pub command: String,
    /// Working directory; must be inside a mount.
    pub cwd: PathBuf,
    /// Extra environment (never credentials).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit; the whole process group is killed at expiry.
    pub timeout: Duration,
    /// Cap on the captured text kept in memory, in bytes (head and tail are kept).
    pub output_cap: usize,
    /// When the output exceeds `output_cap`, the full output (stdout then stderr, up to
    /// [`output::FULL_OUTPUT_LIMIT`] bytes) is written here as `<sha256 prefix>.txt`.
    pub spill_dir: Option<PathBuf>,
    /// Cancelled on interruption: the process group is killed and `interrupted` set.
    pub cancel: CancellationToken,
}

/// The result of one command. Exit status and cancellation are independent facts (DESIGN.md
/// invariant 4): a timed-out or interrupted command is never a success whatever its code.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecOutput {
    /// Captured stdout (lossy UTF-8, capped).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8, capped).
    pub stderr: String,
    /// Exit code, read after the process ended; `None` when killed or unknown.
    pub exit_code: Option<i64>,
    /// Signal name when the process died by a signal.
    pub signal: Option<String>,
    /// The timeout fired and the group was killed.
    pub timed_out: bool,
    /// The cancel token fired and the group was killed.
    pub interrupted: bool,
    /// Some output was dropped from the middle of `stdout`/`stderr`.
    pub truncated: bool,
    /// Total bytes the command wrote (both streams).
    pub total_bytes: u64,
    /// Where the full output went when truncated.
    pub full_output: Option<PathBuf>,
    /// Bytes missing from `full_output` too (beyond [`output::FULL_OUTPUT_LIMIT`] it keeps
    /// head and tail); 0 when it holds everything.
    pub full_output_omitted: u64,
    /// Notes for the model (background child kept running, program not found in the image...).
    pub notes: Vec<String>,
}

impl ExecOutput {
    /// Exit code 0, not timed out, not interrupted, no signal.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.interrupted && self.signal.is_none()
    }
}

/// One agent's place to run commands.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// Runs one command to completion (or timeout / cancellation).
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, SandboxError>;

    /// One line for logs and `-v`: `docker container fbx-…` or `host`.
    fn describe(&self) -> String;

    /// The agent's box (mounts, workdir).
    fn agent_box(&self) -> &AgentBox;

    /// Starts a long-lived process with stdin and stdout attached, where the agent's commands
    /// run (its container, as its user, under its restrictions): a project's MCP stdio server.
    /// See [`attach`].
    async fn attach(&self, spec: AttachSpec) -> Result<Attached, SandboxError> {
        let _ = spec;
        Err(SandboxError::Unsupported(format!(
            "{} 起不了常驻进程",
            self.describe()
        )))
    }

    /// The programs among `tools` that cannot be found in the sandbox (e.g. a judge asks for
    /// `["file", "lsof"]` and reports an image without them as such, not as command output).
    /// Runs one `command -v` per tool in the agent's workdir.
    async fn missing_tools(&self, tools: &[&str]) -> Result<Vec<String>, SandboxError> {
        let mut missing = Vec::new();
        for tool in tools {
            let req = ExecRequest {
                command: format!("command -v '{}' >/dev/null 2>&1", tool.replace('\'', "")),
                cwd: self.agent_box().workdir.clone(),
                env: Vec::new(),
                timeout: Duration::from_secs(30),
                output_cap: 4096,
                spill_dir: None,
                cancel: CancellationToken::new(),
            };
            if !self.exec(req).await?.success() {
                missing.push(tool.to_string());
            }
        }
        Ok(missing)
    }
}

/// Tears `factory` down on SIGINT, SIGTERM or SIGHUP (issue "Lifecycle": containers must not
/// outlive a run that was told to stop). Installs the handlers now (inside a Tokio runtime) and
/// returns a future that waits for the first of them, tears down and yields the signal. From
/// this call on, those signals no longer terminate the process by default, so await the future
/// (typically in a `select!` against the run) and exit afterwards.
///
/// Errors: installing a handler failed. A failed teardown is logged, not returned.
pub fn teardown_on_signal(
    factory: Arc<dyn SandboxFactory>,
) -> std::io::Result<impl std::future::Future<Output = nix::sys::signal::Signal> + Send> {
    let mut listener = crate::signals::SignalListener::new()?;
    Ok(async move {
        let sig = listener.recv().await;
        if let Err(e) = factory.teardown().await {
            tracing::warn!("teardown after {sig}: {e}");
        }
        sig
    })
}

/// What one container of a run wrote to its own file system (its writable layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The agent it serves (`pod` for the pod's own containers).
    pub agent: String,
    /// The container's name.
    pub container: String,
    /// Bytes in its writable layer.
    pub bytes: u64,
}

/// Hands out sandboxes for one run and tears them down.
#[async_trait]
pub trait SandboxFactory: Send + Sync {
    /// Where its commands run (in containers, or as host processes).
    fn commands_run(&self) -> CommandsRun;

    /// The run's file operations on its agents' views (the file tools, the content identity).
    /// The default works on this machine's disk ([`files::LocalFiles`]), which the engine of a
    /// backend that bind-mounts the caller's directories shares.
    fn files(&self) -> Arc<dyn SandboxFiles> {
        Arc::new(files::LocalFiles)
    }

    /// The run's volumes on an engine that does not share this machine's disk, where agents
    /// mount those only ([`engine_disk`]); `None` (the default) for a backend whose mounts are
    /// this machine's directories.
    fn engine_disk(&self) -> Option<Arc<dyn EngineDisk>> {
        None
    }

    /// Returns once nothing of the backend's own is being written into the workspace (a
    /// deferred run's disk probe makes a directory there and removes it), so a content
    /// identity read next holds only what the run's agents made. The default has nothing.
    async fn settled(&self) {}

    /// Starts what every sandbox of the run shares (Docker: the pod) in the background, so
    /// the first agent that runs a command finds it ready. A start that fails is reported by
    /// the first [`SandboxFactory::sandbox`] that needs it, with the same error; teardown
    /// waits for a start in flight and removes what it made. The default does nothing.
    fn prepare(&self) {}

    /// The sandbox for this agent, created on first use, reused afterwards for the same
    /// `agent` name. Calls for the same agent while one is creating it wait for that one. A
    /// backend that keeps sandboxes by name refuses a call whose box differs from the one the
    /// name's sandbox was made for (a container prepared for one worker's mounts is never
    /// another's: issue 32 §4).
    async fn sandbox(&self, spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError>;

    /// Removes one agent's sandbox (its container) when the step that owns it ends; a start
    /// still in flight for it is waited for, then removed.
    async fn release(&self, agent: &str) -> Result<(), SandboxError>;

    /// Removes every sandbox of the run (and the pod). Idempotent.
    async fn teardown(&self) -> Result<(), SandboxError>;

    /// The run's end when the process exits right after it (the command line's run, never a
    /// library's caller that lives on): returns once every process an agent could have started
    /// is dead, and may leave the removal of what is left (flowerbox's own processes, such as
    /// the pod's) to a detached process that logs to `run_dir`'s
    /// log (Docker: [`docker::reap`]). Errors as [`SandboxFactory::teardown`]'s. The default
    /// is the teardown.
    async fn teardown_at_exit(&self, run_dir: &std::path::Path) -> Result<(), SandboxError> {
        let _ = run_dir;
        self.teardown().await
    }

    /// Where the run's [`SandboxNotice`]s go from now on (a container or the pod that went,
    /// the engine away and back, a slower way of running commands): the run shows them as
    /// warnings. The default has none to give.
    fn on_notice(&self, sink: NoticeSink) {
        let _ = sink;
    }

    /// Resolves when the run's sandboxes are gone for good ([`SandboxError::Lost`]: the engine
    /// stayed unreachable past its grace, the pod cannot be made again): the run must stop
    /// then, with exit 1. Never resolves by default.
    async fn lost(&self) -> SandboxError {
        futures::future::pending().await
    }

    /// What each live container of the run wrote to its own file system (the disk budget
    /// counts it). The default has no containers: host processes write where the host's paths
    /// are measured.
    async fn written(&self) -> Result<Vec<Written>, SandboxError> {
        Ok(Vec::new())
    }

    /// Where the engine keeps the containers' writable layers, when it is a directory of this
    /// machine (the disk budget watches its file system's growth). The default: none.
    async fn storage(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// Keeps what `container` wrote to its own file system past the teardown (Docker: as an
    /// image); returns where it is. The default has nothing to keep.
    async fn keep_written(&self, container: &str) -> Result<Option<String>, SandboxError> {
        let _ = container;
        Ok(None)
    }
}
