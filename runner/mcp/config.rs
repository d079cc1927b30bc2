//! The project's MCP servers: `.mcp.json` at the workspace root and `--mcp-config FILE`, both in
//! Claude Code's format:
//!
//! ```json
//! {"mcpServers": {
//!   "db":   {"command": "python3", "args": ["tools/db_mcp.py"], "env": {"DB_PATH": "data.db"}},
//!   "docs": {"type": "http", "url": "https://docs.example.com/mcp",
//!            "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
//! }}
//! ```
//!
//! `.mcp.json` is agent-writable (a worker may add a server that a later agent starts), so it
//! is read with the one configuration reader (`fsroot::config`: as the file tools read the
//! workspace, no symlink out of it, regular files only, never blocking, capped; a
//! `--mcp-config` file inside the workspace likewise) and what it says is data, never trusted:
//!
//! - **Literal values** in `env` are passed to the server as written, except variables named
//!   like a credential (`ANTHROPIC_*`, `OPENAI_*`, `CLAUDE_*`, `FLOWERBOX_PROVIDER`), which are
//!   dropped with a warning, and flowerbox's own `FLOWERBOX_EXEC`.
//! - **`${VAR}` and `${VAR:-default}`** (in `command`, `args`, `env`, `url`, `headers`) take the
//!   value from flowerbox's environment **only for variables the user names** with `--mcp-env
//!   VAR` (or `FLOWERBOX_MCP_ENV=A,B`), and never for a credential's name; any other reference
//!   is unset (its default applies, else the server is not started and a warning says which
//!   variable to name). A project file can therefore never pull a host secret into a container
//!   or send it to a URL of its choosing.
//! - A broken `.mcp.json` is a warning (the run goes on without those servers); a broken
//!   `--mcp-config` is an error (arguments take effect or fail).

use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

use super::names;
use crate::fsroot::config::{self as config_file, ConfigError as ConfigReadError, Place};
use crate::model::config::is_provider_variable as is_secret_env;

/// The project file, at the workspace root.
pub const PROJECT_FILE: &str = ".mcp.json";
/// Largest config file read.
const FILE_CAP: u64 = crate::fsroot::config::CONFIG_CAP;
/// Environment variables a server never gets from a config (flowerbox's exec marker).
const OWN_VARS: &[&str] = &[crate::sandbox::service::MARKER_VAR];

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A process speaking MCP on stdin/stdout, started where the agent's commands run.
    Stdio {
        /// Program (looked up on the sandbox's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment passed to it (already filtered).
        env: Vec<(String, String)>,
    },
    /// A Streamable HTTP endpoint, reached from the host under the egress policy.
    Http {
        /// `http://` or `https://` URL.
        url: String,
        /// Headers sent with every request.
        headers: Vec<(String, String)>,
    },
}

/// One server as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The name as written in the file.
    pub name: String,
    /// The name in its tools' names (`mcp__<id>__…`), see [`names::server_id`].
    pub id: String,
    /// The file it came from.
    pub origin: PathBuf,
    /// How it is reached.
    pub transport: Transport,
}

impl ServerConfig {
    /// One line for `doctor`: the command line or the URL.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut line = command.clone();
                for a in args {
                    line.push(' ');
                    line.push_str(a);
                }
                format!("stdio: {line}")
            }
            Transport::Http { url, .. } => format!("http: {url}"),
        }
    }
}

/// The user's MCP settings (switches and process environment only, never a `.env` file).
#[derive(Debug, Clone, PartialEq)]
pub struct McpSettings {
    /// `--mcp-config FILE` (absolute).
    pub config_file: Option<PathBuf>,
    /// `--mcp-env VAR` / `FLOWERBOX_MCP_ENV`: variables `${VAR}` may take from the environment.
    pub env_allow: Vec<String>,
    /// Their values in flowerbox's environment (the named ones that are set).
    pub env_values: BTreeMap<String, String>,
    /// `MCP_TIMEOUT` (ms, as in Claude Code): how long a server gets to start and list its tools.
    pub startup_timeout: Duration,
    /// `MCP_TOOL_TIMEOUT` (ms, as in Claude Code): how long one tool call may take.
    pub call_timeout: Duration,
    /// Directories never read as configuration (the run directory).
    pub masked: Vec<PathBuf>,
    /// Plugins' `.mcp.json` files (read like the project's, after it, before `--mcp-config`).
    pub plugin_files: Vec<PathBuf>,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            config_file: None,
            env_allow: Vec::new(),
            env_values: BTreeMap::new(),
            startup_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(600),
            masked: Vec::new(),
            plugin_files: Vec::new(),
        }
    }
}

/// The servers found, and what was wrong with the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    /// Usable servers, in name order (`.mcp.json`'s first; `--mcp-config`'s after, replacing
    /// same names).
    pub servers: Vec<ServerConfig>,
    /// Problems that did not stop the run (shown as warnings).
    pub warnings: Vec<String>,
}

/// A `--mcp-config` file that cannot be used.
#[derive(Debug, Error)]
#[error("--mcp-config {}:{why}", path.display())]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub why: ConfigFault,
}

/// What is wrong with a `--mcp-config` file.
#[derive(Debug, Error)]
pub enum ConfigFault {
    /// It cannot be read.
    #[error("读不了:{0}")]
    Unreadable(#[source] std::io::Error),
    /// Not a regular file, larger than the cap (1 MiB), a link out of the workspace, ...
    #[error("要是不超过 {} KiB 的普通文件:{}", FILE_CAP / 1024, .0)]
    NotAFile(#[source] ConfigReadError),
    /// The whole file is unusable.
    #[error(transparent)]
    File(#[from] FileError),
    /// One of its servers has a problem (the first one).
    #[error(transparent)]
    Entry(#[from] EntryProblem),
}

/// Why a whole config file is unusable.
#[derive(Debug, Error)]
pub enum FileError {
    /// Not JSON.
    #[error("不是合法的 JSON:{0}")]
    Json(#[source] serde_json::Error),
    /// No `mcpServers` key.
    #[error("没有 mcpServers")]
    NoServers,
    /// `mcpServers` is not an object.
    #[error("mcpServers 要是一个对象(名字 → 服务器)")]
    ServersNotObject,
}

/// A problem with one server of a file (a warning for `.mcp.json`).
#[derive(Debug, Error, PartialEq)]
pub enum EntryProblem {
    /// The server starts, without a value it asked for.
    #[error("MCP 服务器 {server}:{dropped}")]
    Dropped {
        /// The server's name as written.
        server: String,
        /// What was left out.
        dropped: Dropped,
    },
    /// The server is not started.
    #[error("MCP 服务器 {server} 不启动:{why}")]
    Refused {
        /// The server's name as written.
        server: String,
        /// Why.
        why: EntryError,
    },
}

/// A value left out of a server's configuration.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Dropped {
    /// An environment variable name that cannot be passed.
    #[error("环境变量名 {0:?} 不合法,没传")]
    BadVarName(String),
    /// A credential's or flowerbox's own variable.
    #[error("环境变量 {0} 是凭证或 flowerbox 自己的变量,不会传给 MCP 服务器")]
    ReservedVar(String),
}

/// Why one server entry is unusable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EntryError {
    /// Its name is refused.
    #[error(transparent)]
    Name(#[from] names::NameError),
    /// A `${VAR}` cannot be expanded.
    #[error(transparent)]
    Expand(#[from] ExpandError),
    /// The entry is not an object.
    #[error("要是一个对象")]
    NotObject,
    /// `type` is not a string.
    #[error("type 要是字符串")]
    TypeNotString,
    /// A field that must be a string is not.
    #[error("{0} 要是字符串")]
    NotString(&'static str),
    /// A field that must be an object is not.
    #[error("{0} 要是对象")]
    NotObjectField(&'static str),
    /// A value of an object field is not a string.
    #[error("{field}.{key} 要是字符串")]
    ValueNotString {
        /// The field (`env`, `headers`).
        field: &'static str,
        /// The key whose value is wrong.
        key: String,
    },
    /// A value holds a NUL character.
    #[error("{0} 里有 NUL 字符")]
    Nul(&'static str),
    /// A stdio server without `command`.
    #[error("没有 command")]
    NoCommand,
    /// `command` is blank.
    #[error("command 是空的")]
    EmptyCommand,
    /// An element of `args` is not a string.
    #[error("args 里要都是字符串")]
    ArgNotString,
    /// `args` is not an array.
    #[error("args 要是字符串数组")]
    ArgsNotArray,
    /// An HTTP server without `url`.
    #[error("没有 url(也没有 command)")]
    NoUrl,
    /// `url` does not parse.
    #[error("url {url} 不对:{reason}")]
    BadUrl {
        /// The URL (expanded).
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// `url` is not `http://` or `https://`.
    #[error("url {0} 要是 http:// 或 https://")]
    NotHttp(String),
    /// The deprecated SSE transport.
    #[error("sse 传输已被 MCP 规范弃用,flowerbox 不支持;服务器支持的话改成 \"type\": \"http\"")]
    Sse,
    /// Any other `type`.
    #[error("type {0:?} 不认识(可用:stdio、http)")]
    UnknownType(String),
}

/// Why a `${VAR}` reference cannot be expanded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ExpandError {
    /// It names a credential.
    #[error("引用了 ${{{0}}}:凭证从不传给 MCP 服务器")]
    Credential(String),
    /// The user did not name it, or it is not set.
    #[error("引用了 ${{{0}}},它没被允许或没设:要传就加 --mcp-env {0}(或 FLOWERBOX_MCP_ENV={0})")]
    NotAllowed(String),
}

/// Where `${VAR}` values may come from.
pub struct EnvSource<'a> {
    allow: HashSet<&'a str>,
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> EnvSource<'a> {
    /// Variables in `allow` (never a credential's name), read through `lookup`.
    pub fn new(allow: &'a [String], lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        EnvSource {
            allow: allow.iter().map(String::as_str).collect(),
            lookup,
        }
    }

    fn get(&self, name: &str) -> Option<String> {
        if !self.allow.contains(name) || is_secret_env(name) {
            return None;
        }
        (self.lookup)(name)
    }
}

/// [`load`] with `${VAR}` taken from `settings.env_values`.
pub fn load_with_settings(
    workspace: &Path,
    settings: &McpSettings,
) -> Result<McpConfig, ConfigError> {
    let lookup = |k: &str| settings.env_values.get(k).cloned();
    load(
        workspace,
        settings,
        &EnvSource::new(&settings.env_allow, &lookup),
    )
}

/// Loads the servers of `workspace`'s `.mcp.json` and of `settings.config_file`.
pub fn load(
    workspace: &Path,
    settings: &McpSettings,
    env: &EnvSource,
) -> Result<McpConfig, ConfigError> {
    let mut config = McpConfig::default();
    let project = workspace.join(PROJECT_FILE);
    let files = std::iter::once(&project).chain(settings.plugin_files.iter());
    for (i, project) in files.enumerate() {
        let place = Place::of(project, &[workspace], &settings.masked);
        match config_file::read(project, &place, FILE_CAP) {
            Ok(None) => {}
            Ok(Some(file)) => match parse(&file.text(), project, env) {
                Ok((servers, problems)) => {
                    for s in servers {
                        // A plugin's server never replaces one of the project's.
                        if config.servers.iter().any(|o| o.name == s.name) {
                            config.warnings.push(format!(
                                "{}:MCP 服务器 {} 和已有的同名,没加载",
                                project.display(),
                                s.name
                            ));
                        } else {
                            config.servers.push(s);
                        }
                    }
                    config
                        .warnings
                        .extend(problems.iter().map(ToString::to_string));
                }
                Err(why) => config.warnings.push(format!(
                    "{}:{why};这些 MCP 服务器这次不启动",
                    project.display()
                )),
            },
            Err(e) => config.warnings.push(format!(
                "{} 读不了:{e};这些 MCP 服务器这次不启动",
                project.display()
            )),
        }
        if i > 0 {
            renumber(&mut config);
        }
    }
    if let Some(path) = &settings.config_file {
        let err = |why: ConfigFault| ConfigError {
            path: path.clone(),
            why,
        };
        // Inside the workspace it is as agent-writable as `.mcp.json`: read the same way.
        let place = Place::of(path, &[workspace], &settings.masked);
        let file = match config_file::read(path, &place, FILE_CAP) {
            Ok(Some(file)) => file,
            Ok(None) => {
                return Err(err(ConfigFault::Unreadable(std::io::Error::from(
                    std::io::ErrorKind::NotFound,
                ))))
            }
            Err(e) => return Err(err(ConfigFault::NotAFile(e))),
        };
        let (servers, problems) = parse(&file.text(), path, env).map_err(|e| err(e.into()))?;
        if let Some(first) = problems.into_iter().next() {
            return Err(err(first.into()));
        }
        for s in servers {
            config.servers.retain(|o| o.name != s.name);
            config.servers.push(s);
        }
        renumber(&mut config);
    }
    Ok(config)
}

/// Replacing or merging may have freed or clashed mapped names: gives them again, in order.
fn renumber(config: &mut McpConfig) {
    let mut taken = HashSet::new();
    let mut kept = Vec::new();
    for mut s in std::mem::take(&mut config.servers) {
        match names::server_id(&s.name, &taken) {
            Ok(id) => {
                taken.insert(id.clone());
                s.id = id;
                kept.push(s);
            }
            Err(why) => config.warnings.push(why.to_string()),
        }
    }
    config.servers = kept;
}

/// Parses one file: (usable servers, one problem per unusable one and per value dropped), or
/// why the whole file is unusable.
pub fn parse(
    text: &str,
    origin: &Path,
    env: &EnvSource,
) -> Result<(Vec<ServerConfig>, Vec<EntryProblem>), FileError> {
    let root: Value = serde_json::from_str(text).map_err(FileError::Json)?;
    let Some(entries) = root.get("mcpServers") else {
        return Err(FileError::NoServers);
    };
    let Some(entries) = entries.as_object() else {
        return Err(FileError::ServersNotObject);
    };
    let mut servers = Vec::new();
    let mut problems = Vec::new();
    let mut taken = HashSet::new();
    for (name, entry) in entries {
        let parsed = names::server_id(name, &taken)
            .map_err(EntryError::from)
            .and_then(|id| {
                let (transport, dropped) = transport(entry, env)?;
                problems.extend(dropped.into_iter().map(|dropped| EntryProblem::Dropped {
                    server: name.clone(),
                    dropped,
                }));
                Ok((id, transport))
            });
        match parsed {
            Ok((id, transport)) => {
                taken.insert(id.clone());
                servers.push(ServerConfig {
                    name: name.clone(),
                    id,
                    origin: origin.to_path_buf(),
                    transport,
                });
            }
            Err(why) => problems.push(EntryProblem::Refused {
                server: name.clone(),
                why,
            }),
        }
    }
    Ok((servers, problems))
}

/// One entry's transport, with the values dropped from it.
fn transport(entry: &Value, env: &EnvSource) -> Result<(Transport, Vec<Dropped>), EntryError> {
    let obj = entry.as_object().ok_or(EntryError::NotObject)?;
    let kind = match obj.get("type") {
        None => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(_) => return Err(EntryError::TypeNotString),
    };
    let kind = kind.unwrap_or(if obj.contains_key("command") {
        "stdio"
    } else {
        "http"
    });
    let mut notes = Vec::new();
    match kind {
        "stdio" => {
            let command = string(obj.get("command"), "command")?.ok_or(EntryError::NoCommand)?;
            let command = expand(&command, env)?;
            if command.trim().is_empty() {
                return Err(EntryError::EmptyCommand);
            }
            let args = match obj.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        let s = v.as_str().ok_or(EntryError::ArgNotString)?;
                        no_nul(s, "args")?;
                        Ok(expand(s, env)?)
                    })
                    .collect::<Result<_, EntryError>>()?,
                Some(_) => return Err(EntryError::ArgsNotArray),
            };
            let mut vars = Vec::new();
            for (k, v) in map(obj.get("env"), "env")? {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    notes.push(Dropped::BadVarName(k));
                } else if is_secret_env(&k) || OWN_VARS.contains(&k.as_str()) {
                    notes.push(Dropped::ReservedVar(k));
                } else {
                    vars.push((k, expand(&v, env)?));
                }
            }
            Ok((
                Transport::Stdio {
                    command,
                    args,
                    env: vars,
                },
                notes,
            ))
        }
        "http" => {
            let url = string(obj.get("url"), "url")?.ok_or(EntryError::NoUrl)?;
            let url = expand(&url, env)?;
            let parsed = reqwest::Url::parse(&url).map_err(|e| EntryError::BadUrl {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(EntryError::NotHttp(url));
            }
            let headers = map(obj.get("headers"), "headers")?
                .into_iter()
                .map(|(k, v)| Ok((k, expand(&v, env)?)))
                .collect::<Result<_, EntryError>>()?;
            Ok((Transport::Http { url, headers }, notes))
        }
        "sse" => Err(EntryError::Sse),
        other => Err(EntryError::UnknownType(other.to_string())),
    }
}

fn string(v: Option<&Value>, field: &'static str) -> Result<Option<String>, EntryError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            no_nul(s, field)?;
            Ok(Some(s.clone()))
        }
        Some(_) => Err(EntryError::NotString(field)),
    }
}

fn map(v: Option<&Value>, field: &'static str) -> Result<BTreeMap<String, String>, EntryError> {
    match v {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| {
                let s = v.as_str().ok_or_else(|| EntryError::ValueNotString {
                    field,
                    key: k.clone(),
                })?;
                no_nul(s, field)?;
                Ok((k.clone(), s.to_string()))
            })
            .collect(),
        Some(_) => Err(EntryError::NotObjectField(field)),
    }
}

fn no_nul(s: &str, field: &'static str) -> Result<(), EntryError> {
    if s.contains('\0') {
        Err(EntryError::Nul(field))
    } else {
        Ok(())
    }
}

/// Expands `${VAR}` and `${VAR:-default}` from `env` (only named, non-credential variables).
/// An unset reference without a default is an error naming the variable.
pub fn expand(text: &str, env: &EnvSource) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (env.get(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(if is_secret_env(name) {
                    ExpandError::Credential(name.to_string())
                } else {
                    ExpandError::NotAllowed(name.to_string())
                })
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
