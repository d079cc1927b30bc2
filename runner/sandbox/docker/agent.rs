//! One agent's [`Sandbox`] on Docker: its container, replaced when it is gone (issue 26 §2).
//!
//! The agent keeps one sandbox for its whole step (its tools hold it); what runs its commands
//! is the current [`Container`]. Before a command, a container that is gone, or whose pod is,
//! is replaced: a new one in the live pod (the pod made again first when it went, its network
//! rules loaded before any agent joins), the dead one removed, and the command's notes tell
//! the model that what ran in the old one is gone. A command whose container goes under it is
//! a tool error at once, saying so: the container's [`Life`](super::liveness::Life) and its
//! state from the engine decide, never the words of an error. A command that failed while the
//! engine did not answer waits for it (up to the grace, then the run stops) and, once it
//! answers, its processes are killed and the failure stands.

use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::exec::Container;
use super::liveness::Watch;
use super::{lock, Inner};
use crate::sandbox::notice::Gone;
use crate::sandbox::{
    AgentBox, AttachSpec, Attached, ExecOutput, ExecRequest, Sandbox, SandboxError,
};

/// How long a command whose container went waits for the notice of it to be said (the
/// watch asks the pod a few times first), so the error never overtakes the screen line.
const TOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One agent's sandbox: its current container, replaced when gone.
pub struct DockerSandbox {
    /// The run's factory (weak: the factory holds the agents).
    inner: Weak<Inner>,
    /// The run's watch.
    watch: Arc<Watch>,
    /// The agent's canonical box.
    spec: AgentBox,
    /// The container commands go to now.
    current: Mutex<Arc<Container>>,
    /// One replacement at a time.
    replacing: tokio::sync::Mutex<()>,
    /// What the next command's notes say (a replacement happened).
    note: Mutex<Option<String>>,
    /// Released by its step: never replaced again.
    released: AtomicBool,
}

impl DockerSandbox {
    pub(super) fn new(inner: Weak<Inner>, watch: Arc<Watch>, first: Arc<Container>) -> Self {
        DockerSandbox {
            inner,
            watch,
            spec: first.agent_box().clone(),
            current: Mutex::new(first),
            replacing: tokio::sync::Mutex::new(()),
            note: Mutex::new(None),
            released: AtomicBool::new(false),
        }
    }

    pub(super) fn current(&self) -> Arc<Container> {
        lock(&self.current).clone()
    }

    /// The current container's id.
    pub fn container_id(&self) -> String {
        self.current().container_id().to_string()
    }

    /// The image the containers run.
    pub fn image(&self) -> String {
        self.current().image().to_string()
    }

    /// The pid (in the pod's PID namespace) of the current container's exec service, started
    /// when needed; `None` when its commands go as a Docker exec each.
    pub async fn exec_service_pid(&self) -> Option<u32> {
        self.exec_service().await.ok()
    }

    /// [`DockerSandbox::exec_service_pid`], or why commands go as a Docker exec each.
    pub async fn exec_service(&self) -> Result<u32, String> {
        self.current().exec_service().await
    }

    /// Whether the current container's exec service (started when needed) carries its frames
    /// over the host's Unix socket (`Some(true)`, a local engine) or the engine's attach
    /// (`Some(false)`); `None` when commands go as a Docker exec each.
    pub async fn exec_over_socket(&self) -> Option<bool> {
        let channel = self.current().exec_channel().await?;
        Some(channel == super::service::Channel::Socket)
    }

    /// The container to run in: the current one, or a new one when it is gone.
    async fn live(&self) -> Result<Arc<Container>, SandboxError> {
        let c = self.current();
        if c.gone().is_none() {
            return Ok(c);
        }
        let _one = self.replacing.lock().await;
        let old = self.current();
        let Some(why) = old.gone() else {
            return Ok(old);
        };
        if self.released.load(Ordering::SeqCst) {
            return Err(SandboxError::ShutDown);
        }
        let inner = self.inner.upgrade().ok_or(SandboxError::ShutDown)?;
        let fresh = inner.replace_agent(&self.spec, &old).await?;
        tracing::info!(agent = %self.spec.agent, old = %old.container_name(),
            new = %fresh.container_name(), %why, "container replaced");
        *lock(&self.note) = Some(format!(
            "this command runs in a new container ({}): the previous one ({}) {why}; processes \
             started there, background servers included, are gone",
            fresh.container_name(),
            old.container_name()
        ));
        *lock(&self.current) = fresh.clone();
        Ok(fresh)
    }

    /// The step is over: no replacement any more; the id of the container to remove.
    pub(super) async fn retire(&self) -> String {
        self.released.store(true, Ordering::SeqCst);
        let _one = self.replacing.lock().await;
        let c = self.current();
        c.life.retire();
        c.container_id().to_string()
    }

    /// What a command's failure `e` in `c` really was: the container went (its state from
    /// the engine), the engine went (waited out; the run's loss when it does not come back),
    /// or `e` itself.
    ///
    /// The engine is asked first, whatever the container's life says: a command whose
    /// request broke because the engine went waits for it (within the grace), and is never
    /// told its container went while the engine does not answer.
    async fn failed(&self, c: &Container, e: SandboxError, marker: &str) -> SandboxError {
        let outage = match self.watch.settle().await {
            Ok(outage) => outage,
            Err(lost) => return lost,
        };
        if c.gone().is_some() {
            // Did the pod take it? Asked, so the words say so.
            self.watch.confirm(&c.pod).await;
            c.life.told_within(TOLD_WAIT).await;
            return went(c, c.gone().unwrap_or(Gone::Removed));
        }
        self.watch.confirm(&c.pod).await;
        self.watch.confirm(&c.life).await;
        if let Some(why) = c.gone() {
            c.life.told_within(TOLD_WAIT).await;
            return went(c, why);
        }
        if !outage {
            return e;
        }
        // What it started may still run: killed now that the engine answers.
        let note = c.kill_marked(marker).await;
        SandboxError::Unanswered {
            source: Box::new(e),
            killed: note,
        }
    }
}

impl DockerSandbox {
    /// [`Sandbox::exec`] before the loss is looked at.
    async fn exec_now(&self, req: ExecRequest) -> Result<ExecOutput, SandboxError> {
        // On an engine that does not share this machine's disk its paths mean nothing here:
        // the engine resolves the working directory (`remote`).
        let remote = self.inner.upgrade().is_some_and(|i| i.opts.remote);
        let cwd = match remote {
            true => req.cwd.clone(),
            false => std::fs::canonicalize(&req.cwd).unwrap_or_else(|_| req.cwd.clone()),
        };
        if !self.spec.mounts.iter().any(|m| cwd.starts_with(&m.inside)) {
            return Err(SandboxError::OutsideMounts(cwd));
        }
        if !remote && !cwd.is_dir() {
            // Mounts keep host paths, so the host's view decides.
            return Ok(ExecOutput {
                stderr: format!("working directory {} does not exist", cwd.display()),
                notes: vec!["the command did not run".into()],
                ..Default::default()
            });
        }
        self.watch.ready().await?;
        let c = self.live().await?;
        let marker = uuid::Uuid::new_v4().simple().to_string();
        match c.run(&req, &cwd.to_string_lossy(), &marker).await {
            Ok(mut out) => {
                if let Some(note) = lock(&self.note).take() {
                    out.notes.insert(0, note);
                }
                Ok(out)
            }
            Err(e) => Err(self.failed(&c, e, &marker).await),
        }
    }
}

/// The error of a command whose container went under it.
fn went(c: &Container, why: Gone) -> SandboxError {
    SandboxError::ContainerGone(format!(
        "the container {} {why} while the command ran: its output and exit code are lost (it \
         did not time out). The next command runs in a new container; processes started in \
         this one, background servers included, are gone",
        c.container_name()
    ))
}

#[async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, SandboxError> {
        let done = self.exec_now(req).await;
        // Once the run's sandboxes are lost, no result (nor the loss itself, as a tool
        // error) reaches the agent: the run stops (`Watch::after_loss`).
        match self.watch.after_loss().await {
            Some(lost) => Err(lost),
            None => done,
        }
    }

    fn describe(&self) -> String {
        let c = self.current();
        format!("docker container {} ({})", c.container_name(), c.image())
    }

    fn agent_box(&self) -> &AgentBox {
        &self.spec
    }

    async fn attach(&self, spec: AttachSpec) -> Result<Attached, SandboxError> {
        self.watch.ready().await?;
        self.live().await?.attach_process(spec).await
    }
}
