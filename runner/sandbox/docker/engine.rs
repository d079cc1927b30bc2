//! The connection to the Docker Engine: which endpoint (explicit choice, `DOCKER_HOST`, the
//! current Docker context, the default socket), a ping with a timeout before anything is created,
//! and one clear message per way the engine can be unusable (issue "Engine connection").
//!
//! Failures are classified by typed facts (the socket path exists, `io::ErrorKind` in the error
//! chain, the timeout firing), never by message text. Every message names `DOCKER_HOST` and
//! `--sandbox host`, and nothing falls back to unsandboxed execution silently.

use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;
use bollard::{Docker, API_DEFAULT_VERSION};
use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

use super::kind::EngineKind;

/// The socket Docker uses when nothing else is configured.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// Default time the engine gets to answer the first ping.
pub const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Seconds every later API request may take before bollard gives up waiting for its response
/// headers (streams such as exec output are not cut by it).
const REQUEST_TIMEOUT_SECS: u64 = 600;

/// Where the endpoint came from; part of every error message so the user knows what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSource {
    /// Given by the caller (a switch or configuration).
    Explicit,
    /// The `DOCKER_HOST` environment variable.
    Env,
    /// A Docker context (`DOCKER_CONTEXT` or `currentContext` in the Docker CLI config).
    Context(String),
    /// Nothing configured: [`DEFAULT_HOST`].
    Default,
}

/// The engine endpoint to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `unix:///path`, `tcp://host:port`, `http://…`.
    pub host: String,
    /// How it was chosen.
    pub source: HostSource,
}

impl Endpoint {
    /// The Unix socket path, when the endpoint is one.
    pub fn socket_path(&self) -> Option<PathBuf> {
        self.host.strip_prefix("unix://").map(PathBuf::from)
    }

    /// Says where the endpoint came from, naming `DOCKER_HOST` in every case.
    pub fn origin(&self) -> String {
        match &self.source {
            HostSource::Explicit => {
                format!("指定的引擎 {},不看 DOCKER_HOST", self.host)
            }
            HostSource::Env => format!("DOCKER_HOST={}", self.host),
            HostSource::Context(name) => {
                format!("Docker context `{name}` → {},没设 DOCKER_HOST", self.host)
            }
            HostSource::Default => format!("没设 DOCKER_HOST,用默认的 {}", self.host),
        }
    }
}

/// Picks the endpoint: `explicit`, else `DOCKER_HOST`, else the current Docker context, else
/// [`DEFAULT_HOST`]. Reads the process environment and the Docker CLI config; changes nothing.
pub fn resolve_endpoint(explicit: Option<&str>) -> Endpoint {
    resolve_with(explicit, &|k| std::env::var(k).ok())
}

/// [`resolve_endpoint`] with the environment passed in (tests).
pub fn resolve_with(explicit: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> Endpoint {
    if let Some(h) = explicit.filter(|h| !h.is_empty()) {
        return Endpoint {
            host: h.to_string(),
            source: HostSource::Explicit,
        };
    }
    if let Some(h) = env("DOCKER_HOST").filter(|h| !h.is_empty()) {
        return Endpoint {
            host: h,
            source: HostSource::Env,
        };
    }
    if let Some((name, host)) = context_host(env) {
        return Endpoint {
            host,
            source: HostSource::Context(name),
        };
    }
    Endpoint {
        host: DEFAULT_HOST.to_string(),
        source: HostSource::Default,
    }
}

/// The Docker CLI config directory: `DOCKER_CONFIG`, else `~/.docker`.
fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(d) = env("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| Path::new(&h).join(".docker"))
}

/// The current context's name and endpoint, unless it is `default` or unreadable.
/// Layout (Docker CLI): `<config>/contexts/meta/<sha256(name)>/meta.json` with
/// `Endpoints.docker.Host`.
fn context_host(env: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    let dir = config_dir(env)?;
    let name = match env("DOCKER_CONTEXT").filter(|c| !c.is_empty()) {
        Some(n) => n,
        None => {
            let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            v.get("currentContext")?.as_str()?.to_string()
        }
    };
    if name.is_empty() || name == "default" {
        return None;
    }
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let meta = dir
        .join("contexts")
        .join("meta")
        .join(digest)
        .join("meta.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(meta).ok()?).ok()?;
    let host = v
        .get("Endpoints")?
        .get("docker")?
        .get("Host")?
        .as_str()?
        .to_string();
    Some((name, host))
}

const ALTERNATIVE: &str = "或者用 `--sandbox host` 不开容器跑";

/// Why the engine cannot be used. Each variant's message names the endpoint's origin
/// (`DOCKER_HOST`) and `--sandbox host`.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The socket exists but this user may not open it.
    #[error(
        "用不了 Docker 引擎:没有权限打开 socket {}({})。给你的用户开权限(比如加进 `docker` 组\
         再重新登录),把 DOCKER_HOST 设成你能用的引擎,{ALTERNATIVE}。",
        socket.display(), endpoint.origin()
    )]
    PermissionDenied {
        /// The socket path.
        socket: PathBuf,
        /// The endpoint tried.
        endpoint: Endpoint,
    },
    /// The socket file does not exist.
    #[error(
        "用不了 Docker 引擎:找不到 socket {}({})。启动 Docker,把 DOCKER_HOST 设成引擎的 \
         socket,{ALTERNATIVE}。",
        socket.display(), endpoint.origin()
    )]
    SocketNotFound {
        /// The socket path.
        socket: PathBuf,
        /// The endpoint tried.
        endpoint: Endpoint,
    },
    /// Nothing listens: the engine is stopped.
    #[error(
        "用不了 Docker 引擎:{} 拒绝连接,引擎没在跑({})。启动它(比如 \
         `sudo systemctl start docker`),把 DOCKER_HOST 设成在跑的引擎,{ALTERNATIVE}。",
        endpoint.host, endpoint.origin()
    )]
    Refused {
        /// The endpoint tried.
        endpoint: Endpoint,
    },
    /// The engine did not answer the ping in time.
    #[error(
        "用不了 Docker 引擎:{} {} 秒内没回应({})。看看引擎是不是好的,把 DOCKER_HOST 设成\
         别的引擎,{ALTERNATIVE}。",
        endpoint.host, timeout.as_secs_f64(), endpoint.origin()
    )]
    Timeout {
        /// The endpoint tried.
        endpoint: Endpoint,
        /// How long we waited.
        timeout: Duration,
    },
    /// Anything else (bad URL scheme, TLS, an HTTP error from the engine).
    #[error(
        "用不了 Docker 引擎 {}({}):{detail}。把 DOCKER_HOST 设成能用的引擎,{ALTERNATIVE}。",
        endpoint.host, endpoint.origin()
    )]
    Other {
        /// The endpoint tried.
        endpoint: Endpoint,
        /// The underlying error.
        detail: String,
    },
}

/// The first `io::ErrorKind` in an error's source chain.
pub(crate) fn io_kind(err: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        cur = e.source();
    }
    None
}

/// The HTTP status of an engine error response, if it is one.
pub(crate) fn status_code(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

fn classify(endpoint: &Endpoint, err: bollard::errors::Error) -> EngineError {
    let socket = endpoint.socket_path();
    if let bollard::errors::Error::SocketNotFoundError(path) = &err {
        return EngineError::SocketNotFound {
            socket: PathBuf::from(path),
            endpoint: endpoint.clone(),
        };
    }
    match (io_kind(&err), socket) {
        (Some(io::ErrorKind::PermissionDenied), Some(socket)) => EngineError::PermissionDenied {
            socket,
            endpoint: endpoint.clone(),
        },
        (Some(io::ErrorKind::NotFound), Some(socket)) => EngineError::SocketNotFound {
            socket,
            endpoint: endpoint.clone(),
        },
        (Some(io::ErrorKind::ConnectionRefused), _) => EngineError::Refused {
            endpoint: endpoint.clone(),
        },
        _ => EngineError::Other {
            endpoint: endpoint.clone(),
            detail: err.to_string(),
        },
    }
}

/// A connected, pinged engine with the API version negotiated (this machine's 20.10 speaks
/// 1.41 at most). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    endpoint: Endpoint,
    version: String,
    kind: EngineKind,
}

impl Engine {
    /// Connects to the endpoint [`resolve_endpoint`] picks for `explicit_host`, pings it within
    /// `timeout`, negotiates the API version and detects the engine's kind ([`EngineKind`]).
    /// Creates nothing.
    pub async fn connect(
        explicit_host: Option<&str>,
        timeout: Duration,
    ) -> Result<Engine, EngineError> {
        Self::connect_to(resolve_endpoint(explicit_host), timeout).await
    }

    /// [`Engine::connect`] for an already resolved endpoint.
    pub async fn connect_to(endpoint: Endpoint, timeout: Duration) -> Result<Engine, EngineError> {
        let docker = match endpoint.socket_path() {
            Some(socket) => {
                // Checked here so "not found" never depends on how the client words it.
                if std::fs::symlink_metadata(&socket).is_err() {
                    return Err(EngineError::SocketNotFound { socket, endpoint });
                }
                Docker::connect_with_unix(&endpoint.host, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
            }
            None => Docker::connect_with_host(&endpoint.host)
                .map(|d| d.with_timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS))),
        }
        .map_err(|e| classify(&endpoint, e))?;
        let timed_out = || EngineError::Timeout {
            endpoint: endpoint.clone(),
            timeout,
        };
        let socket_owner = endpoint.socket_path().and_then(|p| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).ok().map(|m| m.uid())
        });
        // The negotiation's `/version` is the ping (an engine that answers it is up), and the
        // kind is read from a `/version` asked beside it: one round trip before every run's
        // first model request instead of three (issue 32).
        let (negotiated, kind) = tokio::time::timeout(timeout, async {
            tokio::join!(
                docker.clone().negotiate_version(),
                detect_kind(&docker, socket_owner)
            )
        })
        .await
        .map_err(|_| timed_out())?;
        let docker = negotiated.map_err(|e| classify(&endpoint, e))?;
        let kind = kind.map_err(|e| classify(&endpoint, e))?;
        let v = docker.client_version();
        let version = format!("{}.{}", v.major_version, v.minor_version);
        Ok(Engine {
            docker,
            endpoint,
            version,
            kind,
        })
    }

    /// The bollard client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The endpoint in use.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> &str {
        &self.version
    }

    /// Docker or Podman (detected once, at connect).
    pub fn kind(&self) -> &EngineKind {
        &self.kind
    }

    /// The containers `options` select. Podman's Docker-compatible list reports a container
    /// whose main process died but whose cleanup has not run yet in its own state `stopped`
    /// (Podman 4.3; `rm -f` of a running container, a kill, an exit of its own), which the
    /// Docker API does not know and the client refuses for the whole list
    /// ([`bollard::errors::Error::JsonDataError`]); the state lasts until the cleanup, a
    /// fraction of a second, so such a list is asked again, every [`RELIST_EVERY`] up to
    /// [`RELIST_TRIES`] times. Errors: the engine's, or the last refused answer.
    pub async fn list_containers(
        &self,
        options: ListContainersOptions,
    ) -> Result<Vec<ContainerSummary>, bollard::errors::Error> {
        let mut tries = 1;
        loop {
            match self.docker.list_containers(Some(options.clone())).await {
                Err(bollard::errors::Error::JsonDataError { .. }) if tries < RELIST_TRIES => {
                    tries += 1;
                    tokio::time::sleep(RELIST_EVERY).await;
                }
                listed => return listed,
            }
        }
    }
}

/// How often [`Engine::list_containers`] asks at most when the answer names a state the client
/// does not know.
const RELIST_TRIES: u32 = 40;

/// The pause between two such asks: 40 of them cover 2 s, several times the cleanup that ends
/// Podman's `stopped` state.
const RELIST_EVERY: Duration = Duration::from_millis(50);

/// Asks `/version` which engine this is; `/info` too when it is Podman (rootless or not, the
/// cgroup version), with `socket_owner` the uid owning the endpoint's socket.
async fn detect_kind(
    docker: &Docker,
    socket_owner: Option<u32>,
) -> Result<EngineKind, bollard::errors::Error> {
    let version = docker.version().await?;
    let kind = EngineKind::detect(&version, None, socket_owner);
    if !kind.is_podman() {
        return Ok(kind);
    }
    let info = docker.info().await?;
    Ok(EngineKind::detect(&version, Some(&info), socket_owner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowerbox_testkit::env_of;

    #[test]
    fn precedence_explicit_env_default() {
        let env = env_of(&[("DOCKER_HOST", "tcp://1.2.3.4:2375")]);
        assert_eq!(
            resolve_with(Some("unix:///x.sock"), &env).source,
            HostSource::Explicit
        );
        let e = resolve_with(None, &env);
        assert_eq!(
            (e.host.as_str(), e.source),
            ("tcp://1.2.3.4:2375", HostSource::Env)
        );
        let e = resolve_with(None, &env_of(&[("HOME", "/nonexistent-home")]));
        assert_eq!(
            (e.host.as_str(), e.source),
            (DEFAULT_HOST, HostSource::Default)
        );
    }

    #[test]
    fn current_context_from_cli_config() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join(".docker");
        let name = "remote one";
        let meta = cfg
            .join("contexts/meta")
            .join(hex::encode(Sha256::digest(name.as_bytes())));
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(
            cfg.join("config.json"),
            r#"{"currentContext":"remote one"}"#,
        )
        .unwrap();
        std::fs::write(
            meta.join("meta.json"),
            r#"{"Name":"remote one","Endpoints":{"docker":{"Host":"unix:///run/other.sock"}}}"#,
        )
        .unwrap();
        let home = dir.path().to_str().unwrap();
        let e = resolve_with(None, &env_of(&[("HOME", home)]));
        assert_eq!(e.host, "unix:///run/other.sock");
        assert_eq!(e.source, HostSource::Context(name.into()));
        assert_eq!(
            e.origin(),
            "Docker context `remote one` → unix:///run/other.sock,没设 DOCKER_HOST"
        );
        // DOCKER_HOST wins over the context; DOCKER_CONTEXT=default means the default socket.
        let e = resolve_with(
            None,
            &env_of(&[("HOME", home), ("DOCKER_HOST", "unix:///a")]),
        );
        assert_eq!(e.source, HostSource::Env);
        let e = resolve_with(
            None,
            &env_of(&[("HOME", home), ("DOCKER_CONTEXT", "default")]),
        );
        assert_eq!(e.source, HostSource::Default);
    }

    #[test]
    fn messages_name_docker_host_and_sandbox_host() {
        let endpoint = Endpoint {
            host: "unix:///nope".into(),
            source: HostSource::Default,
        };
        let errs = [
            EngineError::PermissionDenied {
                socket: "/nope".into(),
                endpoint: endpoint.clone(),
            },
            EngineError::SocketNotFound {
                socket: "/nope".into(),
                endpoint: endpoint.clone(),
            },
            EngineError::Refused {
                endpoint: endpoint.clone(),
            },
            EngineError::Timeout {
                endpoint: endpoint.clone(),
                timeout: Duration::from_secs(5),
            },
            EngineError::Other {
                endpoint,
                detail: "x".into(),
            },
        ];
        let texts: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        for t in &texts {
            assert!(
                t.contains("DOCKER_HOST") && t.contains("--sandbox host"),
                "{t}"
            );
            // Chinese, like every terminal string; the origin too.
            assert!(t.starts_with("用不了 Docker 引擎"), "{t}");
            assert!(t.ends_with("或者用 `--sandbox host` 不开容器跑。"), "{t}");
            assert!(t.contains("没设 DOCKER_HOST,用默认的 unix:///nope"), "{t}");
        }
        assert!(
            texts[0].contains("没有权限打开 socket /nope"),
            "{}",
            texts[0]
        );
        assert!(
            texts[3].contains("unix:///nope 5 秒内没回应"),
            "{}",
            texts[3]
        );
        let unique: std::collections::HashSet<_> = texts.iter().collect();
        assert_eq!(unique.len(), texts.len());
    }
}
