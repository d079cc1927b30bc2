//! Credentials (seed 000 "首次运行的配置流程"; flower's config reference, "凭证查找优先级"):
//! the lookup chain, `.env` files, `setup`, and the probe.
//!
//! Nothing here touches the process environment: a [`Lookup`] takes a snapshot of the
//! variables and the current directory, and [`Lookup::discover`] returns a [`Credentials`] value
//! (each key with its [`Source`]). The model layer builds its provider from
//! [`Credentials::get`]: flower's 9 [`CREDENTIAL_KEYS`] plus flowerbox's own
//! [`FLOWERBOX_KEYS`]. That value is *bound* (`bind`): an endpoint a project file chose never
//! carries a credential from another source.

mod bind;
mod chain;
mod credentials;
pub mod dotenv;
mod ensure;
mod error;
pub mod input;
mod line_peek;
pub mod probe;
pub mod setup;
mod warning;

pub use bind::Route;
pub use chain::Lookup;
pub use credentials::{mask, Credentials, ProviderKind, Source, Trust};
pub use ensure::{ensure_credentials, ensure_discovered, EnsurePolicy};
pub use error::{CredsError, Refusal};
pub use probe::{ProbeSettings, Verdict};
pub use warning::{DotenvSkip, DotenvWarning};

/// The variables' names (the model layer's, their one home).
pub use crate::model::config::var;
pub use crate::model::config::var::{ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN};

/// flower's 9 credential keys: the only keys borrowed from `~/.claude/settings*.json`.
pub const CREDENTIAL_KEYS: [&str; 9] = [
    ANTHROPIC_API_KEY,
    ANTHROPIC_AUTH_TOKEN,
    var::ANTHROPIC_BASE_URL,
    var::ANTHROPIC_MODEL,
    var::ANTHROPIC_DEFAULT_OPUS_MODEL,
    var::ANTHROPIC_DEFAULT_SONNET_MODEL,
    var::ANTHROPIC_DEFAULT_HAIKU_MODEL,
    var::CLAUDE_CODE_SUBAGENT_MODEL,
    var::CLAUDE_CODE_EFFORT_LEVEL,
];

/// flowerbox's own keys, looked up through the environment and `.env` files (not through
/// Claude Code's settings): `FLOWERBOX_PROVIDER` (`anthropic` | `openai`), the
/// OpenAI-compatible endpoint, and the model-call knobs (`model::config`).
pub const FLOWERBOX_KEYS: [&str; 6] = [
    var::FLOWERBOX_PROVIDER,
    var::OPENAI_BASE_URL,
    var::OPENAI_API_KEY,
    var::OPENAI_MODEL,
    var::FLOWERBOX_OPENAI_STREAM,
    var::FLOWERBOX_MAX_TOKENS,
];

/// Every key a lookup resolves, in display order.
pub const LOOKUP_KEYS: [&str; 15] = [
    CREDENTIAL_KEYS[0],
    CREDENTIAL_KEYS[1],
    CREDENTIAL_KEYS[2],
    CREDENTIAL_KEYS[3],
    CREDENTIAL_KEYS[4],
    CREDENTIAL_KEYS[5],
    CREDENTIAL_KEYS[6],
    CREDENTIAL_KEYS[7],
    CREDENTIAL_KEYS[8],
    FLOWERBOX_KEYS[0],
    FLOWERBOX_KEYS[1],
    FLOWERBOX_KEYS[2],
    FLOWERBOX_KEYS[3],
    FLOWERBOX_KEYS[4],
    FLOWERBOX_KEYS[5],
];

/// Keys whose values are secrets: masked wherever shown (the model layer's list).
pub use crate::model::config::SECRET_VARIABLES as SECRET_KEYS;
