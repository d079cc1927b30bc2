//! The seam's errors (issue 31 §2): every failure keeps its cause as a typed source, and a
//! caller decides by variant and by [`EngineErrorKind`], never by message text and never by
//! importing a backend's types. An engine's own error crosses the seam as an [`EngineFault`]:
//! opaque (the backend's type, which only the backend downcasts), classified by its kind.

use std::path::PathBuf;
use thiserror::Error;

/// What an engine's failure means to a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineErrorKind {
    /// What the request names does not exist (a container, image, network, exec: HTTP 404).
    NotFound,
    /// It exists, or is in a state that forbids the request (a name in use, a container not
    /// running, a removal in progress: HTTP 409).
    Conflict,
    /// The engine cannot be reached or did not answer (no socket, no permission, refused,
    /// timed out, the connection broke).
    Unavailable,
    /// The engine refused the request itself (HTTP 400, 403: an option it does not take).
    Rejected,
    /// Anything else (a server error, a response that could not be read).
    Other,
}

/// An engine's own error as it crosses the seam: the backend's typed error, kept as the
/// source, and its kind. Transparent: it reads as the backend's error and its chain is that
/// error's chain.
pub struct EngineFault {
    backend: &'static str,
    kind: EngineErrorKind,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl EngineFault {
    /// `source`, an error of `backend`'s engine, of `kind`.
    pub fn new(
        backend: &'static str,
        kind: EngineErrorKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        EngineFault {
            backend,
            kind,
            source: Box::new(source),
        }
    }

    /// What it means.
    pub fn kind(&self) -> EngineErrorKind {
        self.kind
    }

    /// The backend whose engine failed (`docker`).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The backend's own error (for the backend itself to downcast).
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.source.as_ref()
    }
}

impl std::fmt::Debug for EngineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineFault")
            .field("backend", &self.backend)
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl std::fmt::Display for EngineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for EngineFault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}

/// Sandbox failures (infrastructure, not command failures: a command that exits 1 is an
/// `Ok(ExecOutput)`).
#[derive(Debug, Error)]
pub enum SandboxError {
    /// The engine cannot be reached; the message names `DOCKER_HOST` and `--sandbox host`.
    #[error(transparent)]
    EngineUnavailable(EngineFault),
    /// The agent image is missing or could not be built.
    #[error("{0}")]
    Image(String),
    /// The image is not on the engine (and was not to be built: `doctor`'s checks).
    #[error("the image {0} is not on the engine")]
    NoImage(String),
    /// An engine request about the image failed.
    #[error("{what}: {source}")]
    ImageRequest {
        /// What was asked (`inspecting image …`).
        what: String,
        /// The engine's error.
        #[source]
        source: EngineFault,
    },
    /// Creating or starting a container failed.
    #[error("container: {0}")]
    Container(String),
    /// An engine request about a container failed (creating, starting, writing into it).
    #[error("container: {what}: {source}")]
    ContainerRequest {
        /// What was asked (`creating fbx-…`).
        what: String,
        /// The engine's error.
        #[source]
        source: EngineFault,
    },
    /// A path is outside every mount.
    #[error("{0} is outside the sandbox")]
    OutsideMounts(PathBuf),
    /// A box mounts a path that is no volume of the run, on an engine that does not share
    /// this machine's disk (issue 30 §2): refused, never bind-mounted.
    #[error("{0} 不是这次运行在引擎上的卷:这个引擎看不到这台机器的磁盘,容器只挂运行自己的卷")]
    NotOnEngine(PathBuf),
    /// The addresses of the engine's machine (a remote engine's) could not be learned: no
    /// pod may start without them in its fence.
    #[error("查不出引擎所在机器的地址({0}):pod 的隔离规则挡不住它,运行不启动")]
    EngineHostUnknown(String),
    /// The sandbox was already torn down.
    #[error("sandbox is shut down")]
    ShutDown,
    /// I/O on the host.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Any other engine request failed.
    #[error("{backend}: {fault}", backend = .0.backend(), fault = .0)]
    Engine(#[from] EngineFault),
    /// The backend failed where nothing reported an error of its own (an exec that started
    /// detached, the exec service that went while a command ran, a helper that never ended).
    #[error("{0}")]
    Backend(String),
    /// The engine stopped answering while a command ran (`source`: how the wait for it
    /// ended): its result is unknown; what it started was killed once the engine was back.
    #[error(
        "{source}; the engine did not answer meanwhile, so the command's result is unknown; \
         its processes were killed{}",
        .killed.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
    )]
    Unanswered {
        /// How the wait for the command ended.
        #[source]
        source: Box<SandboxError>,
        /// What the kill found, when it said anything.
        killed: Option<String>,
    },
    /// This sandbox cannot do what was asked (a backend without attached processes).
    #[error("{0}")]
    Unsupported(String),
    /// The agent's container (or the run's pod) went while the command ran: its output and
    /// exit code are lost; the next command gets a new container.
    #[error("{0}")]
    ContainerGone(String),
    /// The run's sandboxes are gone for good (the engine unreachable past its grace, a pod
    /// that cannot be made again): the run stops with exit 1 ([`super::SandboxFactory::lost`]).
    #[error("{0}")]
    Lost(String),
}

impl SandboxError {
    /// The kind of the engine's error behind this one, when an engine's error is behind it.
    #[cfg(test)]
    pub(crate) fn engine_kind(&self) -> Option<EngineErrorKind> {
        match self {
            SandboxError::EngineUnavailable(f)
            | SandboxError::Engine(f)
            | SandboxError::ImageRequest { source: f, .. }
            | SandboxError::ContainerRequest { source: f, .. } => Some(f.kind()),
            SandboxError::Unanswered { source, .. } => source.engine_kind(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("no such container: fbx-1")]
    struct Missing;

    #[test]
    fn the_engine_error_keeps_its_kind_and_reads_as_itself() {
        let e = SandboxError::ContainerRequest {
            what: "starting fbx-1".into(),
            source: EngineFault::new("docker", EngineErrorKind::NotFound, Missing),
        };
        assert_eq!(e.engine_kind(), Some(EngineErrorKind::NotFound));
        assert_eq!(
            e.to_string(),
            "container: starting fbx-1: no such container: fbx-1"
        );
        let src = std::error::Error::source(&e).unwrap();
        assert_eq!(src.to_string(), "no such container: fbx-1");
        let plain = SandboxError::from(EngineFault::new(
            "docker",
            EngineErrorKind::Conflict,
            Missing,
        ));
        assert_eq!(plain.to_string(), "docker: no such container: fbx-1");
        assert_eq!(SandboxError::ShutDown.engine_kind(), None);
    }
}
