//! What the command line chooses for a run, in one place: the sandbox backend (`--sandbox`), the
//! model's configuration (the credentials the gates passed), the frontend (the terminal console
//! when stdin is a terminal, plain lines otherwise), and the run's settings made from the
//! resolved options. Below this module nothing knows the command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::args::SandboxKind;
use super::error::CliError;
use super::options::GlobalOptions;
use crate::creds::Credentials;
use crate::flow::frontend::Frontend;
use crate::flow::watch::Watched;
use crate::flow::RunSettings;

/// The hidden first argument that runs the Docker backend's detached cleanup of a run's end
/// (`flowerbox __flowerbox-cleanup`, its plan on stdin; [`super::cleanup`]).
pub const CLEANUP_SUBCOMMAND: &str = crate::sandbox::docker::reap::SUBCOMMAND;

use crate::mcp::{names, ServerConfig};
/// What the Docker backend's detached cleanup removes ([`super::cleanup`] reads it).
pub(crate) use crate::sandbox::docker::reap::Plan as CleanupPlan;
use crate::sandbox::docker::DockerBackend;
use crate::sandbox::host::HostBackend;
use crate::sandbox::SandboxBackend;
use crate::term::{Console, ConsoleOptions, PlainFrontend};

/// The backend `--sandbox` names (Docker by default; the host only by explicit choice).
pub fn sandbox_backend(globals: &GlobalOptions) -> Arc<dyn SandboxBackend> {
    match globals.sandbox {
        SandboxKind::Host => Arc::new(HostBackend),
        SandboxKind::Docker => Arc::new(DockerBackend::new(
            globals.image.clone(),
            globals.egress.clone(),
        )),
        SandboxKind::DockerRemote => Arc::new(DockerBackend {
            remote: true,
            ..DockerBackend::new(globals.image.clone(), globals.egress.clone())
        }),
    }
}

/// The run's settings: the resolved global switches, the backend they name, the model's
/// configuration from `creds`, and the project's MCP servers (`.mcp.json`: problems are
/// warnings on stderr; `--mcp-config`: problems are exit 2).
pub fn run_settings(globals: &GlobalOptions, creds: &Credentials) -> Result<RunSettings, CliError> {
    debug_assert!(creds.is_bound(), "credentials reach a run bound");
    let mut plugins = crate::plugin::load(
        &globals.workspace,
        &globals.plugin_dirs,
        &globals.mcp.masked,
    );
    resolve_model_aliases(&mut plugins, &|k: &str| creds.get(k).map(str::to_string));
    plugins.mounts = globals.plugin_mounts.clone();
    let unmounted = plugins.plugins.iter().filter(|p| {
        !p.root.starts_with(&globals.workspace)
            && plugins.hooks.iter().any(|h| h.root == p.root)
            && !p
                .root
                .canonicalize()
                .is_ok_and(|r| plugins.mounts.contains(&r))
    });
    let unmounted: Vec<String> = unmounted.map(|p| p.root.display().to_string()).collect();
    for root in unmounted {
        plugins.problems.push(format!(
            "{root}:装着你的 HOME 或工作区,不挂进容器;它的钩子只能用写在 hooks.json 里的命令,找不到脚本"
        ));
    }
    let plugins = Arc::new(plugins);
    let mut err = crate::shown::stderr();
    for p in &plugins.problems {
        let _ = writeln!(err, "! 插件:{p}");
    }
    if globals.sandbox == SandboxKind::Host && !plugins.hooks.is_empty() {
        let _ = writeln!(
            err,
            "! --sandbox host:没有容器,插件的钩子这次一个都不跑(钩子只在 agent 的容器里跑)"
        );
    }
    let mut watched = watched_config(globals, creds);
    // A plugin created or removed in the repository's place is named too.
    watched.push(Watched {
        path: globals.workspace.join(crate::plugin::DEFAULT_DIR),
        items: "插件",
        itemize: None,
    });
    watched.extend(
        crate::plugin::watched_files(&plugins)
            .into_iter()
            .map(|path| Watched {
                path,
                items: "插件文件",
                itemize: None,
            }),
    );
    let creds = creds.clone();
    Ok(RunSettings {
        workspace: globals.workspace.clone(),
        run_dir: globals.run_dir.clone(),
        egress: globals.egress.clone(),
        max_workers: globals.max_workers,
        sandbox: sandbox_backend(globals),
        model: Arc::new(move |k: &str| creds.get(k).map(str::to_string)),
        mcp_servers: mcp_servers(globals)?,
        mcp: globals.mcp.clone(),
        plugins,
        watched,
        objects: globals.bounds.objects,
        disk: globals.bounds.disk,
        opened: None,
        exits_after: true,
    })
}

/// THE list of configuration files a next run reads from the workspace (issue 25 §1):
/// watched over every run and named at its end when an agent created, changed or removed
/// one (only those inside the workspace are watched). `run` adds its workflow file
/// ([`watched_workflow`]); [`run_settings`] adds the loaded plugins' files.
pub fn watched_config(globals: &GlobalOptions, creds: &Credentials) -> Vec<Watched> {
    let dotenv = |path: PathBuf| Watched {
        path,
        items: "键",
        itemize: Some(dotenv_keys),
    };
    let mut list: Vec<Watched> = creds.dotenv_paths().iter().cloned().map(dotenv).collect();
    list.push(dotenv(globals.workspace.join(".env")));
    let mcp = |path: PathBuf| Watched {
        path,
        items: "服务器",
        itemize: Some(mcp_servers_of),
    };
    list.push(mcp(globals
        .workspace
        .join(crate::mcp::config::PROJECT_FILE)));
    if let Some(file) = &globals.mcp.config_file {
        list.push(mcp(file.clone()));
    }
    list
}

/// `run`'s workflow file, watched like the rest of [`watched_config`].
pub fn watched_workflow(file: &Path) -> Watched {
    Watched {
        path: file.to_path_buf(),
        items: "流程",
        itemize: Some(toml_tables),
    }
}

/// A `.env` file's pairs (nothing of a binary one).
fn dotenv_keys(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let report = crate::creds::dotenv::report_bytes(bytes);
    (!report.binary).then_some(report.pairs)
}

/// An MCP configuration's servers, each with its whole entry.
fn mcp_servers_of(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let root: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let servers = root.get("mcpServers")?.as_object()?;
    Some(
        servers
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
    )
}

/// A workflow file's top-level tables, each with its whole text.
fn toml_tables(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let doc: toml::Table = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    Some(doc.into_iter().map(|(k, v)| (k, v.to_string())).collect())
}

/// The project's MCP servers, loaded and checked.
fn mcp_servers(globals: &GlobalOptions) -> Result<Vec<ServerConfig>, CliError> {
    let config = crate::mcp::config::load_with_settings(&globals.workspace, &globals.mcp)?;
    let mut err = crate::shown::stderr();
    for w in &config.warnings {
        let _ = writeln!(err, "! {w}");
    }
    if globals.sandbox == SandboxKind::Host
        && config
            .servers
            .iter()
            .any(|s| matches!(s.transport, crate::mcp::Transport::Stdio { .. }))
    {
        let _ = writeln!(
            err,
            "! --sandbox host:项目的 MCP stdio 服务器直接在这台机器上以你的身份运行,没有沙箱"
        );
    }
    Ok(config.servers)
}

/// `once -t` names only MCP servers that are configured (arguments take effect or fail).
pub fn check_mcp_entries(tools: &[String], servers: &[ServerConfig]) -> Result<(), CliError> {
    let ids: Vec<String> = servers.iter().map(|s| s.id.clone()).collect();
    for t in tools.iter().filter(|t| names::is_entry(t)) {
        if t == names::ALL || names::entry_server(t, &ids).is_some() {
            continue;
        }
        let have = if servers.is_empty() {
            "没有配置任何 MCP 服务器(.mcp.json 或 --mcp-config)".to_string()
        } else {
            let list: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
            format!("配置里的服务器:{}", list.join(", "))
        };
        return Err(CliError::Usage(format!(
            "-t 里的 {t} 不是哪个 MCP 服务器的:{have}"
        )));
    }
    Ok(())
}

/// THE place that decides whether a `go`/`run` is interactive: the terminal console when stdin
/// is a terminal, plain output otherwise (also when the console cannot be built).
pub fn frontend(globals: &GlobalOptions) -> Arc<dyn Frontend> {
    if globals.interactive {
        let mut opts = ConsoleOptions::detect(globals.verbose);
        opts.keyboard = globals.interactive;
        match Console::new(opts) {
            Ok(c) => return Arc::new(c),
            Err(e) => tracing::warn!(error = %e, "console unavailable"),
        }
    }
    Arc::new(PlainFrontend::stdout(globals.verbose))
}

/// Claude Code's model aliases in agent types (`sonnet`, `opus`, `haiku`) as Claude Code
/// resolves them: `ANTHROPIC_DEFAULT_<TIER>_MODEL`; unset, the run's model (a problem says so).
fn resolve_model_aliases(
    plugins: &mut crate::plugin::Plugins,
    get: crate::model::config::Lookup<'_>,
) {
    use crate::model::config::{tier_model, ModelTier};
    let mut problems = Vec::new();
    for a in &mut plugins.agents {
        let tier = match a.model.as_deref() {
            Some("opus") => ModelTier::Opus,
            Some("sonnet") => ModelTier::Sonnet,
            Some("haiku") => ModelTier::Haiku,
            _ => continue,
        };
        let alias = a.model.take().unwrap_or_default();
        a.model = tier_model(get, tier);
        if a.model.is_none() {
            problems.push(format!(
                "{}:model: {alias} 没有映射({} 没设),用这次运行的模型",
                a.file.display(),
                tier.variable()
            ));
        }
    }
    plugins.problems.extend(problems);
}

#[cfg(test)]
mod plugin_tests {
    use super::*;

    #[test]
    fn agent_type_model_aliases_resolve_like_claude_codes() {
        let agent = |model: &str| crate::plugin::AgentType {
            plugin: "p".into(),
            name: model.into(),
            description: "d".into(),
            prompt: String::new(),
            tools: None,
            model: Some(model.into()),
            file: format!("agents/{model}.md").into(),
        };
        let mut p = crate::plugin::Plugins {
            agents: vec![agent("sonnet"), agent("haiku"), agent("claude-x-1")],
            ..Default::default()
        };
        let get = |k: &str| {
            (k == "ANTHROPIC_DEFAULT_SONNET_MODEL").then(|| "claude-sonnet-9".to_string())
        };
        resolve_model_aliases(&mut p, &get);
        let models: Vec<_> = p.agents.iter().map(|a| a.model.clone()).collect();
        assert_eq!(
            models,
            [
                Some("claude-sonnet-9".into()),
                None,
                Some("claude-x-1".into())
            ]
        );
        assert_eq!(p.problems.len(), 1);
        assert!(
            p.problems[0].contains("ANTHROPIC_DEFAULT_HAIKU_MODEL"),
            "{:?}",
            p.problems
        );
    }
}
