//! Noticing in seconds that a container of the run, its pod or the engine is gone (issue 26 §2).
//!
//! The attached stream of an exec does not end when its container dies (measured: `docker
//! kill` or `docker rm -f` of an agent's container while `sleep 30` runs in it left the
//! command's stream open, so the command waited for its whole timeout). So the run watches:
//!
//! - **Events.** One stream of the engine's events per run, for the run's containers
//!   (`label=flowerbox.run=<id>`, `die` and `destroy`), read from the engine's clock at the
//!   start (`since`), so a container that dies before the stream is open is still seen. An
//!   event is only a hint: the container's state from inspect decides (running: nothing
//!   happened, e.g. a restart; stopped: its exit code; 404: removed), so a replayed or late
//!   event never buries a live container.
//! - **[`Life`].** What a container's commands wait on besides their output: it resolves when
//!   the container is gone, at once for every command in it. When the pod goes, every agent
//!   container joined to it goes with it ([`Gone::Pod`]), one notice for all.
//! - **The engine.** When the event stream breaks, or a command's request failed and the
//!   engine does not answer a ping, the engine is *down*: commands wait, the human is told,
//!   the engine is pinged every second; back within the grace (the notice says how long),
//!   everything goes on (the stream is opened again and every container asked); not back, the
//!   run's sandboxes are *lost* ([`Watch::lost`]) and the run stops with exit 1.
//!
//! Containers flowerbox removes itself are [`Life::retire`]d first: no notice, no death.

use bollard::query_parameters::EventsOptions;
use bollard::Docker;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::engine::status_code;
use super::labels::LABEL_RUN;
use super::lock;
use crate::sandbox::notice::{Gone, NoticeSink, SandboxNotice};
use crate::sandbox::SandboxError;

/// How long a ping may take before the engine counts as not answering.
const PING_WAIT: Duration = Duration::from_secs(3);
/// Pause between pings while the engine is down.
const PING_EVERY: Duration = Duration::from_secs(1);
/// When an agent container dies, how often its pod's state is asked before the death counts
/// as the container's alone (the engine may report the member's death before the pod's)...
const POD_ASKS: u32 = 3;
/// ...and the pause between two asks.
const POD_ASK_EVERY: Duration = Duration::from_millis(200);
/// How long a command's result is held once the run's sandboxes are lost, at most (the
/// run's driver ends the run long before: [`Watch::after_loss`]).
const LOSS_HOLD: Duration = Duration::from_secs(10);
/// How long the engine may stay unreachable before the run's sandboxes are lost.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Whether the engine answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Link {
    /// It answers.
    Up,
    /// It does not; commands wait.
    Down,
    /// Gone for good, or the run cannot go on for another reason: the message.
    Lost(String),
}

/// What a container is to the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// The run's pod.
    Pod,
    /// An agent container joined to the pod with this id.
    Member(String),
}

struct LifeInner {
    id: String,
    agent: String,
    place: Place,
    gone: Mutex<Option<Gone>>,
    dead: CancellationToken,
    /// Its death has been said (its own notice or its pod's), or needs no notice.
    told: CancellationToken,
    retired: CancellationToken,
    /// Restarts flowerbox makes itself in flight (no death while one runs).
    quiet: AtomicU32,
    /// Processes its commands left running (`pid command`), for the notice when it goes.
    background: Mutex<Vec<String>>,
}

/// One container's life, as the run sees it (cheap to clone).
#[derive(Clone)]
pub(crate) struct Life(Arc<LifeInner>);

impl std::fmt::Debug for Life {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Life")
            .field("id", &self.0.id)
            .field("gone", &self.gone())
            .finish()
    }
}

impl Life {
    fn new(id: &str, agent: &str, place: Place) -> Life {
        Life(Arc::new(LifeInner {
            id: id.to_string(),
            agent: agent.to_string(),
            place,
            gone: Mutex::new(None),
            dead: CancellationToken::new(),
            told: CancellationToken::new(),
            retired: CancellationToken::new(),
            quiet: AtomicU32::new(0),
            background: Mutex::new(Vec::new()),
        }))
    }

    /// How it went, once it is gone.
    pub(crate) fn gone(&self) -> Option<Gone> {
        lock(&self.0.gone).clone()
    }

    /// Resolves when it is gone, with how.
    pub(crate) async fn wait(&self) -> Gone {
        self.0.dead.cancelled().await;
        self.gone().unwrap_or(Gone::Removed)
    }

    /// flowerbox is removing it: nothing about it is noticed any more.
    pub(crate) fn retire(&self) {
        self.0.retired.cancel();
    }

    /// It is being removed by flowerbox.
    pub(crate) fn retired(&self) -> bool {
        self.0.retired.is_cancelled()
    }

    /// Resolves when it is retired.
    pub(crate) async fn retiring(&self) {
        self.0.retired.cancelled().await;
    }

    /// Holds its deaths back while flowerbox restarts it itself (until the guard drops).
    pub(crate) fn quiet(&self) -> Quiet {
        self.0.quiet.fetch_add(1, Ordering::SeqCst);
        Quiet(self.clone())
    }

    /// Its commands left these processes running (the latest list replaces the old one for
    /// the same processes; kept for the notice when it goes).
    pub(crate) fn left_running(&self, procs: &[String]) {
        let mut b = lock(&self.0.background);
        for p in procs {
            if !b.contains(p) {
                b.push(p.clone());
            }
        }
        let excess = b.len().saturating_sub(20);
        b.drain(..excess);
    }

    fn background(&self) -> Vec<String> {
        lock(&self.0.background).clone()
    }

    /// Waits (at most `bound`) until its death has been said on screen: a command's error
    /// comes after the notice, so a run that ends right after it never loses the line (the
    /// notice may wait for the pod's state, see [`POD_ASKS`]).
    pub(crate) async fn told_within(&self, bound: Duration) {
        let _ = tokio::time::timeout(bound, self.0.told.cancelled()).await;
    }

    fn mark_told(&self) {
        self.0.told.cancel();
    }

    /// Marks it gone; `false` when it already was.
    fn bury(&self, why: Gone) -> bool {
        let mut g = lock(&self.0.gone);
        if g.is_some() {
            return false;
        }
        *g = Some(why);
        drop(g);
        self.0.dead.cancel();
        true
    }
}

/// See [`Life::quiet`].
pub(crate) struct Quiet(Life);

impl Drop for Quiet {
    fn drop(&mut self) {
        self.0 .0.quiet.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The run's watch over its containers and its engine.
pub(crate) struct Watch {
    docker: Docker,
    endpoint: String,
    run_id: String,
    grace: Duration,
    lives: Mutex<HashMap<String, Life>>,
    link: watch::Sender<Link>,
    sink: Mutex<Option<NoticeSink>>,
    slow_told: AtomicBool,
    stopped: CancellationToken,
}

impl Watch {
    /// Starts watching the run `run_id`'s containers on `docker` (call inside a runtime).
    pub(crate) fn start(
        docker: Docker,
        endpoint: String,
        run_id: String,
        grace: Duration,
    ) -> Arc<Watch> {
        let (link, _) = watch::channel(Link::Up);
        let w = Arc::new(Watch {
            docker,
            endpoint,
            run_id,
            grace,
            lives: Mutex::new(HashMap::new()),
            link,
            sink: Mutex::new(None),
            slow_told: AtomicBool::new(false),
            stopped: CancellationToken::new(),
        });
        tokio::spawn(w.clone().events());
        w
    }

    /// Where notices go from now on.
    pub(crate) fn set_sink(&self, sink: NoticeSink) {
        *lock(&self.sink) = Some(sink);
    }

    /// Tells the human (and the log).
    pub(crate) fn notify(&self, notice: SandboxNotice) {
        tracing::warn!(%notice, "sandbox");
        let sink = lock(&self.sink).clone();
        if let Some(sink) = sink {
            sink(notice);
        }
    }

    /// Commands in `agent`'s container go as a Docker exec each: said once per run.
    pub(crate) fn slow_exec(&self, agent: &str, reason: String) {
        tracing::warn!(%agent, %reason, "exec service unavailable; one Docker exec per command");
        if !self.slow_told.swap(true, Ordering::SeqCst) {
            self.notify(SandboxNotice::SlowExec {
                agent: agent.to_string(),
                reason: crate::sandbox::notice::clip(&reason, crate::sandbox::notice::REASON_MAX),
            });
        }
    }

    /// Watches the pod `id` (just started).
    pub(crate) fn pod(&self, id: &str) -> Life {
        self.register(id, "pod", Place::Pod)
    }

    /// Watches `agent`'s container `id` (just started), joined to the pod `pod`.
    pub(crate) fn member(&self, id: &str, agent: &str, pod: &Life) -> Life {
        self.register(id, agent, Place::Member(pod.0.id.clone()))
    }

    fn register(&self, id: &str, agent: &str, place: Place) -> Life {
        let life = Life::new(id, agent, place);
        lock(&self.lives).insert(id.to_string(), life.clone());
        life
    }

    /// Stops watching `id` (flowerbox removes it).
    pub(crate) fn forget(&self, id: &str) {
        if let Some(life) = lock(&self.lives).remove(id) {
            life.retire();
        }
    }

    /// The run is over: nothing is watched any more; waits end.
    /// Stops watching without letting any container's life go (their exec services stay
    /// connected until [`Watch::stop`]): no death is looked into or said from now on (the
    /// run's end, which ends the agents' processes itself).
    pub(crate) fn silence(&self) {
        self.stopped.cancel();
    }

    pub(crate) fn stop(&self) {
        self.stopped.cancel();
        for (_, life) in lock(&self.lives).drain() {
            life.retire();
        }
    }

    /// Asks the engine about `life`'s container now; buries it when it is gone. Its
    /// [`Gone`], or `None` while it runs (or the engine does not say).
    pub(crate) async fn confirm(&self, life: &Life) -> Option<Gone> {
        if let Some(g) = life.gone() {
            return Some(g);
        }
        let why = self.inspect(&life.0.id).await?;
        self.bury(life, why).await;
        life.gone()
    }

    /// Whether the engine says `life`'s container runs (`false` when it is gone, buried then,
    /// or when the engine does not answer).
    pub(crate) async fn runs(&self, life: &Life) -> bool {
        if life.gone().is_some() {
            return false;
        }
        match self.docker.inspect_container(&life.0.id, None).await {
            Ok(info) if info.state.as_ref().and_then(|s| s.running) == Some(true) => true,
            Ok(_) | Err(_) => {
                self.confirm(life).await;
                false
            }
        }
    }

    /// The container's state: `None` while it runs, or when the engine does not answer (the
    /// outage path decides then).
    async fn inspect(&self, id: &str) -> Option<Gone> {
        match self.docker.inspect_container(id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                (state.running != Some(true)).then_some(Gone::Stopped {
                    exit_code: state.exit_code,
                    oom: state.oom_killed == Some(true),
                })
            }
            Err(e) if status_code(&e) == Some(404) => Some(Gone::Removed),
            Err(_) => None,
        }
    }

    /// Marks `life` gone and says so once: a member whose pod stopped goes with the pod (one
    /// notice for all); the pod takes every member with it.
    async fn bury(&self, life: &Life, why: Gone) {
        if life.retired() || life.0.quiet.load(Ordering::SeqCst) > 0 || self.stopped.is_cancelled()
        {
            return;
        }
        match &life.0.place {
            Place::Pod => {
                if !life.bury(why.clone()) {
                    return;
                }
                let members: Vec<Life> = lock(&self.lives)
                    .values()
                    .filter(|l| l.0.place == Place::Member(life.0.id.clone()))
                    .cloned()
                    .collect();
                let mut lost = Vec::new();
                for m in &members {
                    lost.extend(
                        m.background()
                            .into_iter()
                            .map(|p| format!("{}: {p}", m.0.agent)),
                    );
                    m.bury(Gone::Pod);
                }
                self.notify(SandboxNotice::PodGone { why, lost });
                life.mark_told();
                for m in &members {
                    m.mark_told();
                }
            }
            Place::Member(pod_id) => {
                // Its commands end now; which line the human gets is decided next.
                if !life.bury(why.clone()) {
                    return;
                }
                let pod = lock(&self.lives).get(pod_id).cloned();
                if let Some(pod) = pod.filter(|p| !p.retired()) {
                    // When the pod went first (its init ended, and the kernel ended every
                    // process of its PID namespace), one line for the pod. The engine may
                    // report the member's death before it has the pod's: asked a few times.
                    let mut pod_gone = pod.gone();
                    for _ in 0..POD_ASKS {
                        if pod_gone.is_some() {
                            break;
                        }
                        pod_gone = self.inspect(pod_id).await;
                        if pod_gone.is_none() {
                            tokio::time::sleep(POD_ASK_EVERY).await;
                        }
                    }
                    if let Some(pod_why) = pod_gone {
                        // The pod's line covers it (said now, or by whoever buried the pod).
                        Box::pin(self.bury(&pod, pod_why)).await;
                        life.mark_told();
                        return;
                    }
                }
                self.notify(SandboxNotice::ContainerGone {
                    agent: life.0.agent.clone(),
                    why,
                    lost: life.background(),
                });
                life.mark_told();
            }
        }
    }

    /// A container of the run may have changed: the engine's state decides.
    async fn examine(&self, id: &str) {
        let life = lock(&self.lives).get(id).cloned();
        let Some(life) = life.filter(|l| l.gone().is_none() && !l.retired()) else {
            return;
        };
        if life.0.quiet.load(Ordering::SeqCst) > 0 {
            return;
        }
        if let Some(why) = self.inspect(id).await {
            self.bury(&life, why).await;
        }
    }

    /// Every container still thought alive, asked again (after the stream was down).
    async fn reconcile(&self) {
        let ids: Vec<String> = lock(&self.lives).keys().cloned().collect();
        // The pod first: its members then go with it in one notice.
        let (pods, members): (Vec<String>, Vec<String>) = ids.into_iter().partition(|id| {
            lock(&self.lives)
                .get(id)
                .is_some_and(|l| l.0.place == Place::Pod)
        });
        for id in pods.iter().chain(&members) {
            self.examine(id).await;
        }
    }

    /// The engine's clock now (the first `since`), as the events API takes it; our clock a
    /// minute back when the engine does not say.
    async fn engine_now(&self) -> String {
        let said = self
            .docker
            .info()
            .await
            .ok()
            .and_then(|i| i.system_time)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.timestamp());
        let now = said.unwrap_or_else(|| chrono::Utc::now().timestamp() - 60);
        (now - 1).to_string()
    }

    /// Reads the run's container events until the run ends or its sandboxes are lost.
    async fn events(self: Arc<Self>) {
        let mut since = tokio::select! {
            s = self.engine_now() => s,
            _ = self.stopped.cancelled() => return,
        };
        let mut again = false;
        loop {
            let filters = HashMap::from([
                ("type".to_string(), vec!["container".to_string()]),
                (
                    "label".to_string(),
                    vec![format!("{LABEL_RUN}={}", self.run_id)],
                ),
                (
                    "event".to_string(),
                    vec!["die".to_string(), "destroy".to_string()],
                ),
            ]);
            let mut stream = self.docker.events(Some(EventsOptions {
                since: Some(since.clone()),
                until: None,
                filters: Some(filters),
            }));
            if again {
                // Events the engine no longer holds: ask every container.
                let me = self.clone();
                tokio::spawn(async move { me.reconcile().await });
            }
            again = true;
            let why = loop {
                let item = tokio::select! {
                    _ = self.stopped.cancelled() => return,
                    item = stream.next() => item,
                };
                match item {
                    Some(Ok(ev)) => {
                        if let Some(t) = ev.time {
                            since = t.to_string();
                        }
                        if let Some(id) = ev.actor.and_then(|a| a.id) {
                            self.examine(&id).await;
                        }
                    }
                    Some(Err(e)) => break e.to_string(),
                    None => break "the event stream ended".to_string(),
                }
            };
            tracing::info!(%why, "engine event stream broke");
            if !self.ping().await {
                self.go_down(why);
            }
            if self.ready().await.is_err() {
                return;
            }
        }
    }

    async fn ping(&self) -> bool {
        matches!(
            tokio::time::timeout(PING_WAIT, self.docker.ping()).await,
            Ok(Ok(_))
        )
    }

    /// The engine did not answer: commands wait; it is pinged until it answers (Up) or the
    /// grace is over (Lost). Only the first caller of an outage starts the pinging.
    fn go_down(self: &Arc<Self>, why: String) {
        let started = self.link.send_if_modified(|l| match l {
            Link::Up => {
                *l = Link::Down;
                true
            }
            _ => false,
        });
        if !started {
            return;
        }
        tracing::warn!(%why, "engine unreachable");
        self.notify(SandboxNotice::EngineDown {
            endpoint: self.endpoint.clone(),
            grace: self.grace,
        });
        let me = self.clone();
        tokio::spawn(async move {
            let until = tokio::time::Instant::now() + me.grace;
            loop {
                tokio::select! {
                    _ = me.stopped.cancelled() => return,
                    _ = tokio::time::sleep(PING_EVERY) => {}
                }
                if me.ping().await {
                    me.link.send_replace(Link::Up);
                    me.notify(SandboxNotice::EngineBack {
                        endpoint: me.endpoint.clone(),
                    });
                    return;
                }
                if tokio::time::Instant::now() >= until {
                    me.fail(format!(
                        "连不上 Docker 引擎 {} 已经 {} 秒,这次运行停在这里(正在跑的步骤记为没做完)。\
                         引擎好了以后用同一条命令接着跑",
                        me.endpoint,
                        me.grace.as_secs()
                    ));
                    return;
                }
            }
        });
    }

    /// The run's sandboxes cannot go on (`why`, for the human): [`Watch::lost`] resolves.
    pub(crate) fn fail(&self, why: String) {
        tracing::error!(%why, "sandboxes lost");
        self.link.send_if_modified(|l| match l {
            Link::Lost(_) => false,
            _ => {
                *l = Link::Lost(why);
                true
            }
        });
    }

    /// Waits while the engine is down: `Ok` once it answers; [`SandboxError::Lost`] when the
    /// run's sandboxes are lost, [`SandboxError::ShutDown`] when the run ended meanwhile.
    /// Immediate while it answers.
    pub(crate) async fn ready(&self) -> Result<(), SandboxError> {
        let mut rx = self.link.subscribe();
        loop {
            match rx.borrow_and_update().clone() {
                Link::Up => return Ok(()),
                Link::Lost(why) => return Err(SandboxError::Lost(why)),
                Link::Down => {}
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    return Err(SandboxError::ShutDown);
                },
                _ = self.stopped.cancelled() => return Err(SandboxError::ShutDown),
            }
        }
    }

    /// After a request to the engine failed: does the engine answer? Pings it (unless an
    /// outage is already known) and waits out an outage. `Ok(true)` when the engine was down
    /// meanwhile (what a command did then is unknown), `Ok(false)` when it answered at once.
    pub(crate) async fn settle(self: &Arc<Self>) -> Result<bool, SandboxError> {
        if *self.link.borrow() == Link::Up {
            if self.ping().await {
                return Ok(false);
            }
            self.go_down("a request to the engine failed and it does not answer a ping".into());
        }
        self.ready().await.map(|()| true)
    }

    /// The loss, once the run's sandboxes are lost: held until the run is over (its driver
    /// stops the run on [`Watch::lost`] and drops whatever waits here), so no command's result
    /// reaches an agent after the loss; a caller without such a driver (a library user, a
    /// test) gets the loss after [`LOSS_HOLD`]. `None` while they are not lost.
    pub(crate) async fn after_loss(&self) -> Option<SandboxError> {
        let Link::Lost(why) = self.link.borrow().clone() else {
            return None;
        };
        let _ = tokio::time::timeout(LOSS_HOLD, self.stopped.cancelled()).await;
        Some(SandboxError::Lost(why))
    }

    /// Resolves when the run's sandboxes are lost (never, while all is well).
    pub(crate) async fn lost(&self) -> SandboxError {
        let mut rx = self.link.subscribe();
        loop {
            if let Link::Lost(why) = rx.borrow_and_update().clone() {
                return SandboxError::Lost(why);
            }
            if rx.changed().await.is_err() {
                return futures::future::pending().await;
            }
        }
    }
}
