//! [`DeferredDocker`]: the Docker backend's run as the run holds it (issue 32 §1). Nothing of
//! the engine is touched before it is needed: a run whose agents run no command (a text-only
//! `once`) never pings the engine, sweeps, probes the disk, builds an image or starts a pod.
//!
//! A run whose agents will run commands ([`Demand::Soon`]) reaches the engine at open, so a
//! dead one still stops the start before anything of the run is written; the rest of the
//! preflight (the orphan sweep, the shared-disk probe) then runs in the background, overlapping
//! the model's first turn, and the image is made on first need (the pod's, or the first agent
//! container's). No agent container is created before the probe passed. A preflight that fails
//! loses the run ([`SandboxFactory::lost`], exit 1 with the engine's message): the sandbox an
//! agent asked for never comes back to it, so no tool result of an unusable engine reaches the
//! model.

use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::{lock, DockerOptions, DockerSandboxFactory};
use crate::sandbox::notice::NoticeSink;
use crate::sandbox::{
    AgentBox, Demand, EngineDisk, Sandbox, SandboxError, SandboxFactory, SandboxNotice, Written,
};

/// The Docker [`SandboxFactory`] of one run, connected and checked on first need.
pub struct DeferredDocker {
    state: Arc<State>,
}

impl std::fmt::Debug for DeferredDocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredDocker")
            .field("run_id", &self.state.opts.run_id)
            .field("connected", &self.connected())
            .finish()
    }
}

struct State {
    /// What the run asked for (engine, image, egress...).
    opts: DockerOptions,
    /// The connected factory; `None` once connecting failed (the error is in `fatal`).
    factory: OnceCell<Option<Arc<DockerSandboxFactory>>>,
    /// The preflight's verdict on the engine (the disk probe passed): `false` once it failed.
    checked: OnceCell<bool>,
    /// Why the run's sandboxes cannot be had, taken by the first [`SandboxFactory::lost`].
    fatal: Mutex<Option<SandboxError>>,
    /// Cancelled when `fatal` is set.
    failed: CancellationToken,
    /// Cancelled when the run's teardown begins: nothing starts after.
    torn_down: CancellationToken,
    /// Where notices go (set by the run), and those said before it was set.
    sink: Mutex<(Option<NoticeSink>, Vec<SandboxNotice>)>,
    /// The connected factory, published under `sink`'s lock once it has the sink.
    live: tokio::sync::watch::Sender<Option<Arc<DockerSandboxFactory>>>,
    /// Held (read) by every [`SandboxFactory::sandbox`] in flight; teardown takes it (write)
    /// to wait for them, so no start outlives it.
    starting: tokio::sync::RwLock<()>,
    /// Held (write) while the disk probe's directory exists in the workspace;
    /// [`SandboxFactory::settled`] waits for it (read).
    probing: tokio::sync::RwLock<()>,
    /// Background work of this wrapper (connect, preflight, the early pod): teardown waits.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl DeferredDocker {
    /// Begins the run's teardown: nothing starts from here on, and the background work in
    /// flight (connect, preflight, the early pod) and every start have ended. The connected
    /// factory, whose removal is next, if any.
    async fn quiesce(&self) -> Option<Arc<DockerSandboxFactory>> {
        let s = &self.state;
        s.torn_down.cancel();
        // A connect, preflight or early pod in flight ends first; then what it made goes.
        let tasks: Vec<_> = std::mem::take(&mut *lock(&s.tasks));
        for t in tasks {
            let _ = t.await;
        }
        let _no_start = s.starting.write().await;
        s.factory.get().cloned().flatten()
    }

    /// A run's sandboxes with `opts`. With [`Demand::Soon`] the engine is reached now (its
    /// error returned, as a start it cannot serve) and the preflight begins in the background;
    /// with [`Demand::OnFirstUse`] nothing happens until an agent needs a sandbox.
    ///
    /// # Errors
    /// [`Demand::Soon`]: what [`DockerSandboxFactory::connect`] returns.
    pub async fn open(mut opts: DockerOptions, demand: Demand) -> Result<Self, SandboxError> {
        // Whatever this run builds, it builds beside the run's own screen.
        opts.background_build = true;
        let deferred = DeferredDocker {
            state: Arc::new(State {
                opts,
                factory: OnceCell::new(),
                checked: OnceCell::new(),
                fatal: Mutex::new(None),
                failed: CancellationToken::new(),
                torn_down: CancellationToken::new(),
                sink: Mutex::new((None, Vec::new())),
                live: tokio::sync::watch::Sender::new(None),
                starting: tokio::sync::RwLock::new(()),
                probing: tokio::sync::RwLock::new(()),
                tasks: Mutex::new(Vec::new()),
            }),
        };
        if demand == Demand::Soon {
            let factory = DockerSandboxFactory::connect(deferred.state.opts.clone()).await?;
            // An image named by the user is not built: one the engine lacks stops the start
            // now (an inspect); flowerbox's own is built on first need.
            if deferred
                .state
                .opts
                .image
                .as_deref()
                .is_some_and(|i| !i.is_empty())
            {
                factory.ensure_image().await?;
            }
            let factory = deferred.state.publish(factory);
            let _ = deferred.state.factory.set(Some(factory));
            deferred.state.clone().spawn(|s| async move {
                s.checked().await;
            });
        }
        Ok(deferred)
    }

    /// True once the engine was reached (for tests and the bench's accounting).
    pub fn connected(&self) -> bool {
        self.state.factory.get().is_some_and(Option::is_some)
    }
}

/// The run's factory once its preflight passed, for a remote run's files keepers.
struct Checked(Arc<State>);

#[async_trait]
impl super::remote_route::InnerSource for Checked {
    async fn inner(&self) -> Option<Arc<super::Inner>> {
        self.0.checked().await.map(|f| f.inner.clone())
    }
}

/// The run's [`EngineDisk`] once its preflight passed (the image is there then).
struct DeferredDisk(Arc<State>);

impl DeferredDisk {
    async fn disk(&self) -> Result<Arc<dyn EngineDisk>, SandboxError> {
        let factory = self.0.checked().await.ok_or(SandboxError::ShutDown)?;
        factory.engine_disk().ok_or(SandboxError::ShutDown)
    }
}

#[async_trait]
impl EngineDisk for DeferredDisk {
    async fn repository(
        &self,
        at: &std::path::Path,
        purpose: &str,
        bundle: Vec<u8>,
        start: &str,
        branch: &str,
    ) -> Result<(), SandboxError> {
        let disk = self.disk().await?;
        disk.repository(at, purpose, bundle, start, branch).await
    }

    async fn directory(
        &self,
        at: &std::path::Path,
        purpose: &str,
        subdirs: &[&str],
    ) -> Result<(), SandboxError> {
        self.disk().await?.directory(at, purpose, subdirs).await
    }

    async fn upload(
        &self,
        at: &std::path::Path,
        purpose: &str,
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        self.disk().await?.upload(at, purpose, tar).await
    }

    async fn branch_back(
        &self,
        at: &std::path::Path,
        branch: &str,
        base: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        self.disk().await?.branch_back(at, branch, base, cap).await
    }

    async fn update(
        &self,
        at: &std::path::Path,
        bundle: Vec<u8>,
        branch: &str,
    ) -> Result<(), SandboxError> {
        self.disk().await?.update(at, bundle, branch).await
    }

    async fn remove(&self, at: &std::path::Path) -> Result<(), SandboxError> {
        self.disk().await?.remove(at).await
    }
}

impl State {
    /// Runs `work` in the background; teardown waits for it.
    fn spawn<F, Fut>(self: Arc<Self>, work: F)
    where
        F: FnOnce(Arc<Self>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let task = tokio::spawn(work(self.clone()));
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Records why the run's sandboxes cannot be had (the first cause wins).
    fn fail(&self, e: SandboxError) {
        tracing::error!(error = %e, "the run's sandboxes cannot be had");
        let mut fatal = lock(&self.fatal);
        if fatal.is_none() && !self.failed.is_cancelled() {
            *fatal = Some(e);
            self.failed.cancel();
        }
    }

    /// `factory`, connected: given the run's notice sink and published to [`State::live`].
    fn publish(&self, factory: DockerSandboxFactory) -> Arc<DockerSandboxFactory> {
        let factory = Arc::new(factory);
        let held = lock(&self.sink);
        if let Some(sink) = &held.0 {
            factory.on_notice(sink.clone());
        }
        self.live.send_replace(Some(factory.clone()));
        factory
    }

    /// The connected factory (connecting on first need); `None` when that failed.
    async fn factory(&self) -> Option<Arc<DockerSandboxFactory>> {
        self.factory
            .get_or_init(|| async {
                match DockerSandboxFactory::connect(self.opts.clone()).await {
                    Ok(f) => Some(self.publish(f)),
                    Err(e) => {
                        self.fail(e);
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// The connected factory once the preflight passed: the orphans of this workspace swept
    /// (their lines said as notices), the engine proved to see the workspace, and then the
    /// image there (built now when missing, with progress).
    async fn checked(&self) -> Option<Arc<DockerSandboxFactory>> {
        let factory = self.factory().await?;
        let passed = *self
            .checked
            .get_or_init(|| async {
                let sweep = async {
                    match factory.sweep_orphans().await {
                        Ok(lines) => lines,
                        Err(e) => {
                            tracing::warn!(error = %e, "orphan sweep failed");
                            Vec::new()
                        }
                    }
                };
                let probed = async {
                    // An engine chosen as one that does not share the disk has nothing to
                    // prove: its agents mount the run's volumes only.
                    if self.opts.remote {
                        return Ok(());
                    }
                    let _writing = self.probing.write().await;
                    super::shared_disk::probe(factory.engine(), factory.workspace()).await
                };
                let (lines, probed) = tokio::join!(sweep, probed);
                for line in lines {
                    self.notify(SandboxNotice::Swept { line });
                }
                if let Err(e) = probed {
                    self.fail(e.into());
                    return false;
                }
                // After the probe: a minutes-long build never starts for an engine that is
                // refused anyway.
                match factory.ensure_image().await {
                    Ok(_) => true,
                    Err(e) => {
                        self.fail(e);
                        false
                    }
                }
            })
            .await;
        passed.then_some(factory)
    }

    fn notify(&self, notice: SandboxNotice) {
        let mut sink = lock(&self.sink);
        match &sink.0 {
            Some(s) => s(notice),
            None => sink.1.push(notice),
        }
    }
}

/// True when the engine has the images a pod needs (`requested`, else flowerbox's own, and
/// flowerbox's own for the fence): an inspect each, no build.
async fn images_there(f: &DockerSandboxFactory, requested: Option<&str>) -> bool {
    let own = super::default_image();
    let agent = requested.filter(|i| !i.is_empty()).unwrap_or(&own);
    let (a, b) = tokio::join!(
        super::image::image_exists(f.engine(), agent),
        super::image::image_exists(f.engine(), &own)
    );
    matches!((a, b), (Ok(true), Ok(true)))
}

#[async_trait]
impl SandboxFactory for DeferredDocker {
    fn commands_run(&self) -> crate::sandbox::CommandsRun {
        crate::sandbox::CommandsRun::InContainer
    }

    /// Reaches the engine (if not yet) and starts the pod in the background: at once when
    /// its images are there (the pod is no agent: it need not wait for the disk probe), else
    /// once the preflight passed (which builds the image after the probe).
    fn prepare(&self) {
        if self.state.torn_down.is_cancelled() {
            return;
        }
        self.state.clone().spawn(|s| async move {
            let Some(f) = s.factory().await else {
                return;
            };
            let ready = match images_there(&f, s.opts.image.as_deref()).await {
                true => Some(f),
                false => s.checked().await,
            };
            if let Some(f) = ready.filter(|_| !s.torn_down.is_cancelled()) {
                f.prepare();
            }
        });
    }

    async fn sandbox(&self, spec: &AgentBox) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let s = &self.state;
        let starting = s.starting.read().await;
        if s.torn_down.is_cancelled() {
            return Err(SandboxError::ShutDown);
        }
        match s.checked().await {
            Some(f) if !s.torn_down.is_cancelled() => f.sandbox(spec).await,
            Some(_) => Err(SandboxError::ShutDown),
            // The run is lost: its driver stops it; the agent waits for that, so the engine's
            // failure never becomes one of its tool results.
            None => {
                drop(starting);
                s.torn_down.cancelled().await;
                Err(SandboxError::ShutDown)
            }
        }
    }

    fn files(&self) -> Arc<dyn crate::sandbox::SandboxFiles> {
        match self.state.opts.remote {
            true => Arc::new(super::remote_route::RemoteRoute(Arc::new(Checked(
                self.state.clone(),
            )))),
            false => Arc::new(crate::sandbox::files::LocalFiles),
        }
    }

    fn engine_disk(&self) -> Option<Arc<dyn EngineDisk>> {
        self.state
            .opts
            .remote
            .then(|| Arc::new(DeferredDisk(self.state.clone())) as Arc<dyn EngineDisk>)
    }

    async fn settled(&self) {
        let _probe_done = self.state.probing.read().await;
    }

    async fn release(&self, agent: &str) -> Result<(), SandboxError> {
        match self.state.factory.get() {
            Some(Some(f)) => f.release(agent).await,
            _ => Ok(()),
        }
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        match self.quiesce().await {
            Some(f) => f.teardown().await,
            None => Ok(()),
        }
    }

    async fn teardown_at_exit(&self, run_dir: &std::path::Path) -> Result<(), SandboxError> {
        match self.quiesce().await {
            Some(f) => f.teardown_at_exit(run_dir).await,
            None => Ok(()),
        }
    }

    fn on_notice(&self, sink: NoticeSink) {
        let pending = {
            let mut held = lock(&self.state.sink);
            held.0 = Some(sink.clone());
            if let Some(f) = self.state.live.borrow().as_ref() {
                f.on_notice(sink.clone());
            }
            std::mem::take(&mut held.1)
        };
        for n in pending {
            sink(n);
        }
    }

    async fn lost(&self) -> SandboxError {
        let s = &self.state;
        let connected = async {
            let mut live = s.live.subscribe();
            let factory = match live.wait_for(Option::is_some).await {
                Ok(f) => f.clone(),
                Err(_) => None,
            };
            match factory {
                Some(f) => f.lost().await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            _ = s.failed.cancelled() => lock(&s.fatal).take().unwrap_or_else(|| {
                SandboxError::Lost("这次运行的沙箱起不来".into())
            }),
            e = connected => e,
        }
    }

    async fn written(&self) -> Result<Vec<Written>, SandboxError> {
        match self.state.factory.get() {
            Some(Some(f)) => f.written().await,
            _ => Ok(Vec::new()),
        }
    }

    async fn storage(&self) -> Option<PathBuf> {
        match self.state.factory.get() {
            Some(Some(f)) => f.storage().await,
            _ => None,
        }
    }

    async fn keep_written(&self, container: &str) -> Result<Option<String>, SandboxError> {
        match self.state.factory.get() {
            Some(Some(f)) => f.keep_written(container).await,
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use crate::sandbox::{Mount, SandboxPolicy};

    fn dead(ws: &std::path::Path) -> DockerOptions {
        let mut opts = DockerOptions::new("20260101-000000-dead00", ws);
        opts.docker_host = Some("unix:///nonexistent/flowerbox-deferred.sock".into());
        opts.exec_service = None;
        opts
    }

    fn agent(ws: &std::path::Path) -> AgentBox {
        AgentBox {
            agent: "ad-hoc".into(),
            role: Role::Once,
            mounts: vec![Mount::same(ws, false)],
            masked: Vec::new(),
            workdir: ws.to_path_buf(),
            policy: SandboxPolicy::writer(),
        }
    }

    #[tokio::test]
    async fn a_run_that_needs_no_sandbox_never_reaches_the_engine() {
        let ws = tempfile::tempdir().unwrap();
        let f = DeferredDocker::open(dead(ws.path()), Demand::OnFirstUse)
            .await
            .unwrap();
        f.on_notice(Arc::new(|_| {}));
        assert!(!f.connected());
        // Any image this run builds is built beside its screen: stage lines, no spinner.
        assert!(f.state.opts.background_build);
        assert!(f.written().await.unwrap().is_empty());
        assert_eq!(f.storage().await, None);
        f.release("ad-hoc").await.unwrap();
        f.teardown().await.unwrap();
        assert!(!f.connected());
    }

    /// A content identity never reads the workspace while the disk probe's directory is in
    /// it (flow_checks saw a woken run's check fail as "the candidate changed" on it).
    #[tokio::test]
    async fn settled_waits_while_the_probe_writes_into_the_workspace() {
        use futures::FutureExt;
        let ws = tempfile::tempdir().unwrap();
        let f = DeferredDocker::open(dead(ws.path()), Demand::OnFirstUse)
            .await
            .unwrap();
        assert!(f.settled().now_or_never().is_some());
        let probing = f.state.probing.write().await;
        assert!(f.settled().now_or_never().is_none());
        drop(probing);
        assert!(f.settled().now_or_never().is_some());
    }

    #[tokio::test]
    async fn a_run_that_needs_one_soon_fails_its_start_on_a_dead_engine() {
        let ws = tempfile::tempdir().unwrap();
        let e = DeferredDocker::open(dead(ws.path()), Demand::Soon)
            .await
            .unwrap_err();
        assert!(matches!(e, SandboxError::EngineUnavailable(_)), "{e:?}");
    }

    /// The first agent that needs a sandbox reaches the engine; a dead one loses the run with
    /// the engine's own error, and the agent's sandbox never comes back to it before teardown
    /// (its tool call cannot tell the model about the engine).
    #[tokio::test]
    async fn a_dead_engine_found_on_first_need_loses_the_run_not_the_tool_call() {
        let ws = tempfile::tempdir().unwrap();
        let f = Arc::new(
            DeferredDocker::open(dead(ws.path()), Demand::OnFirstUse)
                .await
                .unwrap(),
        );
        let asked = {
            let (f, b) = (f.clone(), agent(ws.path()));
            tokio::spawn(async move { f.sandbox(&b).await.map(|_| ()) })
        };
        let lost = f.lost().await;
        assert!(
            matches!(lost, SandboxError::EngineUnavailable(_)),
            "{lost:?}"
        );
        assert!(
            lost.to_string().contains("flowerbox-deferred.sock"),
            "{lost}"
        );
        assert!(
            !asked.is_finished(),
            "the agent got an answer before teardown"
        );
        f.teardown().await.unwrap();
        assert!(matches!(asked.await.unwrap(), Err(SandboxError::ShutDown)));
        // Later callers hear it too, and a sandbox asked for after teardown is refused.
        assert!(matches!(f.lost().await, SandboxError::Lost(_)));
        let late = f.sandbox(&agent(ws.path())).await;
        assert!(matches!(late, Err(SandboxError::ShutDown)));
    }
}
