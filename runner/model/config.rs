//! Provider selection from configuration values (flower's variables; DESIGN.md "Models").
//!
//! Values come through a lookup closure supplied by the credentials module (process env, then
//! `.env` files, then `~/.claude/settings.json`), so this module never reads or mutates the
//! process environment. An empty value counts as unset, like flower's truthiness checks.
//!
//! | variable | meaning |
//! |---|---|
//! | `FLOWERBOX_PROVIDER` | `anthropic` (default when unset) or `openai`; anything else is an error |
//! | `ANTHROPIC_BASE_URL` | endpoint root without `/v1` (default `https://api.anthropic.com`) |
//! | `ANTHROPIC_API_KEY` / `ANTHROPIC_AUTH_TOKEN` | `x-api-key` / `authorization: Bearer` |
//! | `ANTHROPIC_MODEL` | main model; else `ANTHROPIC_DEFAULT_OPUS_MODEL` (flower's fallback), else [`DEFAULT_ANTHROPIC_MODEL`] |
//! | `ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL` | tier mappings ([`tier_model`]) |
//! | `OPENAI_BASE_URL` | API root with `/v1` (default `https://api.openai.com/v1`) |
//! | `OPENAI_API_KEY` | optional bearer key |
//! | `OPENAI_MODEL` | required for `openai` (there is no sensible default for local servers) |
//! | `FLOWERBOX_OPENAI_STREAM` | `0`/`false`/`no`/`off` asks the `openai` endpoint for complete JSON answers instead of event streams (servers that cannot stream tool calls); default on |
//! | `FLOWERBOX_MAX_TOKENS` | output cap of a model call, in tokens (both providers); default: the catalogue's cap up to 16,384, else a share of the context the server reports, else [`UNCATALOGUED_MAX_TOKENS`] |

use super::anthropic::{AnthropicAuth, AnthropicConfig};
use super::openai::OpenAiConfig;
use super::retry::RetryPolicy;
use super::transport::{HttpTransport, ReqwestTransport};
use super::{ModelError, Provider};
use std::sync::Arc;
use std::time::Duration;

/// The names of the configuration variables (the table above): their one home. `creds` lists,
/// looks up and writes them by these names; `tests/one_home.rs` keeps the literals out of the
/// rest of the shipped code.
pub mod var {
    /// The official Anthropic key (sent as `x-api-key`).
    pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
    /// A gateway token (sent as `authorization: Bearer`, used when there is no API key).
    pub const ANTHROPIC_AUTH_TOKEN: &str = "ANTHROPIC_AUTH_TOKEN";
    /// The anthropic endpoint root.
    pub const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";
    /// The anthropic main model.
    pub const ANTHROPIC_MODEL: &str = "ANTHROPIC_MODEL";
    /// The opus tier's model.
    pub const ANTHROPIC_DEFAULT_OPUS_MODEL: &str = "ANTHROPIC_DEFAULT_OPUS_MODEL";
    /// The sonnet tier's model.
    pub const ANTHROPIC_DEFAULT_SONNET_MODEL: &str = "ANTHROPIC_DEFAULT_SONNET_MODEL";
    /// The haiku tier's model.
    pub const ANTHROPIC_DEFAULT_HAIKU_MODEL: &str = "ANTHROPIC_DEFAULT_HAIKU_MODEL";
    /// Claude Code's subagent model (borrowed, listed).
    pub const CLAUDE_CODE_SUBAGENT_MODEL: &str = "CLAUDE_CODE_SUBAGENT_MODEL";
    /// Claude Code's effort level (borrowed, listed).
    pub const CLAUDE_CODE_EFFORT_LEVEL: &str = "CLAUDE_CODE_EFFORT_LEVEL";
    /// `anthropic` or `openai`.
    pub const FLOWERBOX_PROVIDER: &str = "FLOWERBOX_PROVIDER";
    /// The OpenAI-compatible API root.
    pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
    /// The OpenAI-compatible bearer key.
    pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
    /// The OpenAI-compatible model id.
    pub const OPENAI_MODEL: &str = "OPENAI_MODEL";
    /// Whether the `openai` endpoint is asked for event streams.
    pub const FLOWERBOX_OPENAI_STREAM: &str = "FLOWERBOX_OPENAI_STREAM";
    /// The output cap of a model call.
    pub const FLOWERBOX_MAX_TOKENS: &str = "FLOWERBOX_MAX_TOKENS";
}

/// The anthropic model when neither `ANTHROPIC_MODEL` nor `ANTHROPIC_DEFAULT_OPUS_MODEL` is set.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// How long the connect phase (DNS + TCP + TLS) may take before it counts as network down.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// `max_tokens` for a model outside the catalogue whose server reports no context length: a
/// small local model then answers in minutes, not in a quarter of an hour.
pub const UNCATALOGUED_MAX_TOKENS: u32 = 4_096;

/// `max_tokens` when nothing narrows it (the catalogue's cap may lower it).
pub const DEFAULT_MAX_TOKENS: u32 = 16_384;

/// A configuration lookup: name → value (`None` when unset).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Options that are not configuration variables.
#[derive(Clone, Default)]
pub struct ProviderOptions {
    /// Retry, idle and network-down policy.
    pub retry: RetryPolicy,
    /// Transport to use; `None` builds a [`ReqwestTransport`] with
    /// [`DEFAULT_CONNECT_TIMEOUT`]. Tests pass a fake.
    pub transport: Option<Arc<dyn HttpTransport>>,
}

impl std::fmt::Debug for ProviderOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderOptions")
            .field("retry", &self.retry)
            .field("transport", &self.transport.as_ref().map(|_| "custom"))
            .finish()
    }
}

/// Which provider `FLOWERBOX_PROVIDER` names (the one parse: the credentials gate and the
/// provider builder agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// The Anthropic Messages API (default; flower's variables, the probe applies).
    Anthropic,
    /// OpenAI-compatible Chat Completions (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `OPENAI_MODEL`).
    OpenAi,
}

impl ProviderKind {
    /// `anthropic` or `openai`, in any case; `None` for anything else.
    pub fn parse(name: &str) -> Option<ProviderKind> {
        let name = name.trim();
        if name.eq_ignore_ascii_case("anthropic") {
            Some(ProviderKind::Anthropic)
        } else if name.eq_ignore_ascii_case("openai") {
            Some(ProviderKind::OpenAi)
        } else {
            None
        }
    }
}

/// The variables whose values are secrets: masked wherever shown.
pub const SECRET_VARIABLES: [&str; 3] = [
    var::ANTHROPIC_API_KEY,
    var::ANTHROPIC_AUTH_TOKEN,
    var::OPENAI_API_KEY,
];

/// Whether `name` configures a model provider (its secrets, endpoint, model or provider
/// choice): never passed to an agent's commands. Covers every [`SECRET_VARIABLES`] entry.
pub fn is_provider_variable(name: &str) -> bool {
    name.starts_with("ANTHROPIC_")
        || name.starts_with("OPENAI_")
        || name.starts_with("CLAUDE_")
        || name == var::FLOWERBOX_PROVIDER
}

/// Claude model tiers with their `ANTHROPIC_DEFAULT_*_MODEL` mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelTier {
    /// `ANTHROPIC_DEFAULT_OPUS_MODEL`.
    Opus,
    /// `ANTHROPIC_DEFAULT_SONNET_MODEL`.
    Sonnet,
    /// `ANTHROPIC_DEFAULT_HAIKU_MODEL` (flower's credential probe prefers it).
    Haiku,
}

impl ModelTier {
    /// The variable that maps this tier.
    pub fn variable(self) -> &'static str {
        match self {
            ModelTier::Opus => var::ANTHROPIC_DEFAULT_OPUS_MODEL,
            ModelTier::Sonnet => var::ANTHROPIC_DEFAULT_SONNET_MODEL,
            ModelTier::Haiku => var::ANTHROPIC_DEFAULT_HAIKU_MODEL,
        }
    }
}

/// `get(name)` with empty values treated as unset.
fn value(get: Lookup<'_>, name: &str) -> Option<String> {
    get(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The model a tier maps to, if configured.
pub fn tier_model(get: Lookup<'_>, tier: ModelTier) -> Option<String> {
    value(get, tier.variable())
}

/// The anthropic main model: `ANTHROPIC_MODEL`, else `ANTHROPIC_DEFAULT_OPUS_MODEL`, else
/// [`DEFAULT_ANTHROPIC_MODEL`].
pub fn anthropic_model(get: Lookup<'_>) -> String {
    value(get, var::ANTHROPIC_MODEL)
        .or_else(|| tier_model(get, ModelTier::Opus))
        .unwrap_or_else(|| DEFAULT_ANTHROPIC_MODEL.to_string())
}

/// Reads `FLOWERBOX_PROVIDER`. Unset → anthropic; an unknown name is a
/// [`ModelError::Setup`] error, never a silent default (DESIGN.md invariant 6).
pub fn provider_kind(get: Lookup<'_>) -> Result<ProviderKind, ModelError> {
    match value(get, var::FLOWERBOX_PROVIDER) {
        None => Ok(ProviderKind::Anthropic),
        Some(name) => ProviderKind::parse(&name).ok_or_else(|| {
            ModelError::Setup(format!(
                "FLOWERBOX_PROVIDER={name} is not a provider (use anthropic or openai)"
            ))
        }),
    }
}

/// The variable that names where a provider of `kind` sends its requests (its base URL).
pub fn endpoint_variable(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => var::ANTHROPIC_BASE_URL,
        ProviderKind::OpenAi => var::OPENAI_BASE_URL,
    }
}

/// The variable whose value a provider of `kind` built from `get` sends with every request
/// (`x-api-key`, `authorization: Bearer`), `None` when it sends none: anthropic's
/// `ANTHROPIC_API_KEY` when it has a value (blank counts as none), else
/// `ANTHROPIC_AUTH_TOKEN`; openai's `OPENAI_API_KEY`. THE rule: [`anthropic_config`] and
/// [`openai_config`] pick their credential with it, and the credentials module binds every
/// endpoint to the variable it names (`crate::creds`, a secret only goes where its own
/// source says), so the two can never disagree.
pub fn credential_variable(kind: ProviderKind, get: Lookup<'_>) -> Option<&'static str> {
    let candidates: &[&'static str] = match kind {
        ProviderKind::Anthropic => &[var::ANTHROPIC_API_KEY, var::ANTHROPIC_AUTH_TOKEN],
        ProviderKind::OpenAi => &[var::OPENAI_API_KEY],
    };
    candidates
        .iter()
        .copied()
        .find(|name| value(get, name).is_some())
}

/// The anthropic configuration from flower's variables. Without a credential the requests carry
/// none (the credentials module decides whether that is acceptable before a run).
pub fn anthropic_config(get: Lookup<'_>) -> AnthropicConfig {
    let secret = |name: &str| value(get, name).unwrap_or_default();
    let auth = match credential_variable(ProviderKind::Anthropic, get) {
        Some(name @ var::ANTHROPIC_API_KEY) => AnthropicAuth::ApiKey(secret(name)),
        Some(name) => AnthropicAuth::Bearer(secret(name)),
        None => AnthropicAuth::None,
    };
    AnthropicConfig {
        base_url: value(get, var::ANTHROPIC_BASE_URL)
            .unwrap_or_else(|| super::anthropic::DEFAULT_BASE_URL.to_string()),
        auth,
        model: anthropic_model(get),
    }
}

/// A yes/no variable: `1/true/yes/on` or `0/false/no/off` (any case); unset → `default`; anything
/// else is a [`ModelError::Setup`] naming the variable (DESIGN.md invariant 6).
fn switch(get: Lookup<'_>, name: &str, default: bool) -> Result<bool, ModelError> {
    match value(get, name).map(|v| v.to_ascii_lowercase()).as_deref() {
        None => Ok(default),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(other) => Err(ModelError::Setup(format!(
            "{name}={other} is neither on (1/true/yes/on) nor off (0/false/no/off)"
        ))),
    }
}

/// `FLOWERBOX_MAX_TOKENS`, when set: a positive whole number of tokens, else a
/// [`ModelError::Setup`] error.
pub fn max_tokens_setting(get: Lookup<'_>) -> Result<Option<u32>, ModelError> {
    match value(get, var::FLOWERBOX_MAX_TOKENS) {
        None => Ok(None),
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(ModelError::Setup(format!(
                "FLOWERBOX_MAX_TOKENS={v} is not a positive number of tokens"
            ))),
        },
    }
}

/// The output cap for `model`: `FLOWERBOX_MAX_TOKENS` when set; for a catalogued model
/// [`DEFAULT_MAX_TOKENS`] within its cap; otherwise a quarter of the context length the server
/// reports (`server_window`, at least 256 tokens, at most [`DEFAULT_MAX_TOKENS`]), else
/// [`UNCATALOGUED_MAX_TOKENS`].
pub fn max_tokens_for(setting: Option<u32>, model: &str, server_window: Option<u64>) -> u32 {
    if let Some(n) = setting {
        return n;
    }
    if let Some(cap) = super::catalog::max_output_tokens(model) {
        return DEFAULT_MAX_TOKENS.min(cap);
    }
    match server_window {
        Some(w) => (w / 4).clamp(256, u64::from(DEFAULT_MAX_TOKENS)) as u32,
        None => UNCATALOGUED_MAX_TOKENS,
    }
}

/// The openai configuration; `OPENAI_MODEL` is required.
pub fn openai_config(get: Lookup<'_>) -> Result<OpenAiConfig, ModelError> {
    let model = value(get, var::OPENAI_MODEL).ok_or_else(|| {
        ModelError::Setup(
            "FLOWERBOX_PROVIDER=openai needs OPENAI_MODEL (the model id to call)".into(),
        )
    })?;
    Ok(OpenAiConfig {
        base_url: value(get, var::OPENAI_BASE_URL)
            .unwrap_or_else(|| super::openai::DEFAULT_BASE_URL.to_string()),
        api_key: credential_variable(ProviderKind::OpenAi, get).and_then(|name| value(get, name)),
        model,
        stream: switch(get, var::FLOWERBOX_OPENAI_STREAM, true)?,
    })
}

/// Builds the configured provider. Errors: [`ModelError::Setup`] for an unknown
/// `FLOWERBOX_PROVIDER`, a missing `OPENAI_MODEL` or a base URL that is not http(s);
/// [`ModelError::BadUrl`] for one that does not parse; [`ModelError::Transport`] for a TLS
/// backend that fails to initialise.
pub fn build_provider(
    get: Lookup<'_>,
    opts: ProviderOptions,
) -> Result<Arc<dyn Provider>, ModelError> {
    let kind = provider_kind(get)?;
    let transport: Arc<dyn HttpTransport> = match opts.transport {
        Some(t) => t,
        None => Arc::new(
            ReqwestTransport::new(DEFAULT_CONNECT_TIMEOUT)
                .map_err(|e| ModelError::Transport(super::error::Shared::new(e)))?,
        ),
    };
    Ok(match kind {
        ProviderKind::Anthropic => Arc::new(super::anthropic::new_provider(
            anthropic_config(get),
            opts.retry,
            transport,
        )?),
        ProviderKind::OpenAi => Arc::new(super::openai::new_provider(
            openai_config(get)?,
            opts.retry,
            transport,
        )?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowerbox_testkit::env_of as env;

    #[test]
    fn max_tokens_is_configurable_and_modest_for_unknown_models() {
        let get = env(&[("FLOWERBOX_MAX_TOKENS", "1500")]);
        assert_eq!(max_tokens_setting(&get).unwrap(), Some(1500));
        for bad in ["0", "-3", "lots"] {
            let get = env(&[("FLOWERBOX_MAX_TOKENS", bad)]);
            assert!(max_tokens_setting(&get).is_err(), "{bad}");
        }
        assert_eq!(max_tokens_setting(&env(&[])).unwrap(), None);
        assert_eq!(max_tokens_for(Some(1500), "claude-sonnet-4-5", None), 1500);
        assert_eq!(max_tokens_for(None, "claude-sonnet-4-5", None), 16_384);
        assert_eq!(max_tokens_for(None, "claude-3-haiku", None), 4_096);
        // An 8k server: a quarter of it, not 16k it cannot honour.
        assert_eq!(max_tokens_for(None, "qwen2.5-coder", Some(8_192)), 2_048);
        assert_eq!(max_tokens_for(None, "qwen2.5-coder", Some(512)), 256);
        assert_eq!(
            max_tokens_for(None, "qwen2.5-coder", Some(1_000_000)),
            16_384
        );
        assert_eq!(
            max_tokens_for(None, "qwen2.5-coder", None),
            UNCATALOGUED_MAX_TOKENS
        );
    }

    #[test]
    fn anthropic_is_the_default_and_reads_flower_variables() {
        let get = env(&[
            ("ANTHROPIC_AUTH_TOKEN", "tok"),
            ("ANTHROPIC_API_KEY", ""),
            ("ANTHROPIC_BASE_URL", "https://gw.example/"),
            ("ANTHROPIC_DEFAULT_OPUS_MODEL", "opus-x"),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "haiku-x"),
        ]);
        let cfg = anthropic_config(&get);
        assert_eq!(cfg.auth, AnthropicAuth::Bearer("tok".into()));
        assert_eq!(cfg.model, "opus-x");
        assert_eq!(
            tier_model(&get, ModelTier::Haiku).as_deref(),
            Some("haiku-x")
        );
        assert_eq!(tier_model(&get, ModelTier::Sonnet), None);
        let p = build_provider(&get, ProviderOptions::default()).unwrap();
        assert_eq!(p.name(), "anthropic");
        assert_eq!(p.default_model(), "opus-x");

        let get = env(&[
            ("ANTHROPIC_API_KEY", "k"),
            ("ANTHROPIC_AUTH_TOKEN", "t"),
            ("ANTHROPIC_MODEL", "m"),
        ]);
        let cfg = anthropic_config(&get);
        assert_eq!(cfg.auth, AnthropicAuth::ApiKey("k".into()));
        assert_eq!(cfg.model, "m");
        assert_eq!(cfg.base_url, "https://api.anthropic.com");
        assert_eq!(anthropic_model(&env(&[])), DEFAULT_ANTHROPIC_MODEL);
    }

    #[test]
    fn openai_needs_a_model_and_unknown_providers_fail() {
        let get = env(&[("FLOWERBOX_PROVIDER", "openai")]);
        let err = build_provider(&get, ProviderOptions::default())
            .err()
            .expect("an error");
        assert!(err.to_string().contains("OPENAI_MODEL"), "{err}");

        let get = env(&[
            ("FLOWERBOX_PROVIDER", "openai"),
            ("OPENAI_MODEL", "llama"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
        ]);
        let p = build_provider(&get, ProviderOptions::default()).unwrap();
        assert_eq!((p.name(), p.default_model()), ("openai", "llama"));

        let get = env(&[
            ("FLOWERBOX_PROVIDER", "openai"),
            ("OPENAI_MODEL", "llama"),
            ("FLOWERBOX_OPENAI_STREAM", "off"),
        ]);
        assert!(!openai_config(&get).unwrap().stream);
        let get = env(&[
            ("FLOWERBOX_PROVIDER", "openai"),
            ("OPENAI_MODEL", "llama"),
            ("FLOWERBOX_OPENAI_STREAM", "maybe"),
        ]);
        let err = openai_config(&get).unwrap_err().to_string();
        assert!(err.contains("FLOWERBOX_OPENAI_STREAM=maybe"), "{err}");

        let get = env(&[("FLOWERBOX_PROVIDER", "gemini")]);
        let err = build_provider(&get, ProviderOptions::default())
            .err()
            .expect("an error");
        assert!(matches!(err, ModelError::Setup(_)));
        assert!(err.to_string().contains("gemini"));

        let get = env(&[("ANTHROPIC_BASE_URL", "gw.example")]);
        assert!(build_provider(&get, ProviderOptions::default()).is_err());
    }

    #[test]
    fn one_provider_parse_for_the_gate_and_the_builder() {
        // `FLOWERBOX_PROVIDER=OpenAI` used to pass the credentials gate (which parses with this
        // same function now) and fail the builder.
        for name in ["openai", "OpenAI", " OPENAI "] {
            let get = env(&[("FLOWERBOX_PROVIDER", name)]);
            assert_eq!(
                provider_kind(&get).unwrap(),
                ProviderKind::OpenAi,
                "{name:?}"
            );
        }
        assert_eq!(
            provider_kind(&env(&[("FLOWERBOX_PROVIDER", "Anthropic")])).unwrap(),
            ProviderKind::Anthropic
        );
        assert!(provider_kind(&env(&[("FLOWERBOX_PROVIDER", "gemini")])).is_err());
    }

    #[test]
    fn the_credential_sent_is_the_one_credential_variable_names() {
        // A blank API key is no key: the token is what goes out, and what the rule names.
        let get = env(&[
            ("ANTHROPIC_API_KEY", "   "),
            ("ANTHROPIC_AUTH_TOKEN", "tok"),
        ]);
        assert_eq!(
            credential_variable(ProviderKind::Anthropic, &get),
            Some("ANTHROPIC_AUTH_TOKEN")
        );
        assert_eq!(
            anthropic_config(&get).auth,
            AnthropicAuth::Bearer("tok".into())
        );
        let get = env(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_AUTH_TOKEN", "t")]);
        assert_eq!(
            credential_variable(ProviderKind::Anthropic, &get),
            Some("ANTHROPIC_API_KEY")
        );
        assert_eq!(credential_variable(ProviderKind::OpenAi, &get), None);
        let get = env(&[("OPENAI_API_KEY", "o"), ("OPENAI_MODEL", "m")]);
        assert_eq!(
            credential_variable(ProviderKind::OpenAi, &get),
            Some("OPENAI_API_KEY")
        );
        assert_eq!(openai_config(&get).unwrap().api_key.as_deref(), Some("o"));
        assert_eq!(endpoint_variable(ProviderKind::OpenAi), "OPENAI_BASE_URL");
    }

    #[test]
    fn every_secret_is_a_provider_variable() {
        for name in SECRET_VARIABLES {
            assert!(is_provider_variable(name), "{name}");
        }
        assert!(!is_provider_variable("PATH"));
    }
}
