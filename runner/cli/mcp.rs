//! `--mcp-config`, `--mcp-env` (and `FLOWERBOX_MCP_ENV`), `MCP_TIMEOUT` and `MCP_TOOL_TIMEOUT`
//! resolved into [`McpSettings`]. Like the egress settings they come from the switches or the
//! process environment only, never from a `.env` file an agent or a repository could write:
//! `--mcp-env` decides which of flowerbox's variables a project's `.mcp.json` may read.

use std::path::PathBuf;
use std::time::Duration;

use super::error::CliError;
use super::host::Host;
use crate::mcp::McpSettings;
use crate::model::config::is_provider_variable as is_secret_env;

/// The MCP settings from the switches, else the process environment.
pub(super) fn mcp_settings(
    config: Option<PathBuf>,
    env: Vec<String>,
    host: &Host,
) -> Result<McpSettings, CliError> {
    let defaults = McpSettings::default();
    let config_file = config.map(|p| host.cwd.join(p));
    let (names, from) = if env.is_empty() {
        let listed = host
            .var("FLOWERBOX_MCP_ENV")
            .map(|v| {
                v.split([',', ' ', '\n', '\t'])
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        (listed, "(来自 FLOWERBOX_MCP_ENV)")
    } else {
        (env, "")
    };
    for name in &names {
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(CliError::Usage(format!(
                "--mcp-env {name}{from} 不是环境变量名"
            )));
        }
        if is_secret_env(name) {
            return Err(CliError::Usage(format!(
                "--mcp-env {name}{from}:这是模型凭证的变量,flowerbox 从不把它交给 MCP 服务器"
            )));
        }
    }
    let millis = |var: &str, default: Duration| -> Result<Duration, CliError> {
        match host.var(var) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                _ => Err(CliError::Usage(format!(
                    "{var}={v} 不行:要是正整数毫秒数(和 Claude Code 一样)"
                ))),
            },
        }
    };
    let env_values = names
        .iter()
        .filter_map(|n| Some((n.clone(), host.var(n)?.to_string())))
        .collect();
    Ok(McpSettings {
        config_file,
        env_allow: names,
        env_values,
        startup_timeout: millis("MCP_TIMEOUT", defaults.startup_timeout)?,
        call_timeout: millis("MCP_TOOL_TIMEOUT", defaults.call_timeout)?,
        masked: defaults.masked,
        plugin_files: Vec::new(),
    })
}
