//! The [`Credentials`] value: the effective credential keys, each with where it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::error::CredsError;
use super::{ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, LOOKUP_KEYS, SECRET_KEYS};

/// Where one key's value came from, in lookup order (config reference, "凭证查找优先级").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process environment (always wins).
    Process,
    /// The file named by `$FLOWER_ENV`.
    FlowerEnv(PathBuf),
    /// `./.env` in the current directory.
    CwdDotenv(PathBuf),
    /// `${XDG_CONFIG_HOME:-~/.config}/flower/.env`, the file `setup` writes.
    UserDotenv(PathBuf),
    /// The `env` block of `~/.claude/settings.json` or `settings.local.json` (9 keys only).
    ClaudeSettings(PathBuf),
    /// Written by `setup` in this process and loaded at once (beats every other source).
    Setup(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Process => f.write_str("进程环境"),
            Source::FlowerEnv(p)
            | Source::CwdDotenv(p)
            | Source::UserDotenv(p)
            | Source::ClaudeSettings(p)
            | Source::Setup(p) => write!(f, "{}", p.display()),
        }
    }
}

pub use crate::model::config::ProviderKind;

/// The effective value of every lookup key, with provenance. Built by
/// [`super::Lookup::discover`]; never written into the process environment.
///
/// A key defined with an empty value still "claims" the key (later sources cannot fill it, as in
/// flower), but [`Credentials::get`] reports it as absent.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    entries: BTreeMap<String, (String, Source)>,
    /// What the chain skipped in its `.env` files and the user should hear about.
    warnings: Vec<DotenvWarning>,
}

/// What the chain skipped in a `.env` file and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DotenvSkip {
    /// A malformed line (skipped, as in flower).
    Line(super::dotenv::Skipped),
    /// Endpoint keys of `./.env` ([`super::ENDPOINT_KEYS`]) whose file supplies none of the
    /// secrets that would be sent there: a key from another source never goes to an endpoint
    /// a project file names (an agent that can write the workspace could plant it).
    EndpointWithoutSecret(Vec<String>),
}

/// A malformed line in a `.env` file of the chain: skipped, and worth telling the user (the
/// key on it may be the one they meant to set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvWarning {
    /// The file.
    pub path: PathBuf,
    /// What was skipped.
    pub skipped: DotenvSkip,
}

impl fmt::Display for DotenvWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.skipped {
            DotenvSkip::Line(s) => write!(
                f,
                "! {} 第 {} 行看不懂({}),跳过了",
                self.path.display(),
                s.line,
                s.why
            ),
            DotenvSkip::EndpointWithoutSecret(keys) => write!(
                f,
                "! {} 设了 {},可密钥不是这个文件给的:别处的密钥不送去项目文件指定的地址,这几项没用(要用就把密钥也写进这个文件)",
                self.path.display(),
                keys.join("、")
            ),
        }
    }
}

impl Credentials {
    /// An empty set (no key has a value).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Records `key = value` from `source` unless an earlier source already claimed the key.
    /// Returns true when the value was taken.
    pub fn claim(&mut self, key: &str, value: &str, source: &Source) -> bool {
        if self.entries.contains_key(key) {
            return false;
        }
        self.entries
            .insert(key.to_string(), (value.to_string(), source.clone()));
        true
    }

    /// Forgets `key` (a later source may claim it again).
    pub fn unclaim(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Sets `key = value`, replacing whatever an earlier source gave (used for values `setup`
    /// just wrote: they take effect at once, as in flower).
    pub fn overwrite(&mut self, key: &str, value: &str, source: &Source) {
        self.entries
            .insert(key.to_string(), (value.to_string(), source.clone()));
    }

    /// Records a malformed line of a `.env` file the chain read.
    pub fn warn(&mut self, warning: DotenvWarning) {
        self.warnings.push(warning);
    }

    /// The malformed `.env` lines the chain skipped, in lookup order.
    pub fn warnings(&self) -> &[DotenvWarning] {
        &self.warnings
    }

    /// The non-empty value of `key` (any key, e.g. `ANTHROPIC_BASE_URL`, `OPENAI_MODEL`).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .get(key)
            .map(|(v, _)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Where `key`'s value came from (also for an empty value that claimed it).
    pub fn source(&self, key: &str) -> Option<&Source> {
        self.entries.get(key).map(|(_, s)| s)
    }

    /// True when `ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN` has a non-empty value (seed 000,
    /// "第一道:有没有凭证").
    pub fn has_token(&self) -> bool {
        self.get(ANTHROPIC_API_KEY).is_some() || self.get(ANTHROPIC_AUTH_TOKEN).is_some()
    }

    /// The provider named by `FLOWERBOX_PROVIDER` (`anthropic` when unset or empty).
    ///
    /// Errors: [`CredsError::UnknownProvider`] for any other value (never a silent default).
    pub fn provider(&self) -> Result<ProviderKind, CredsError> {
        match self.get("FLOWERBOX_PROVIDER") {
            None => Ok(ProviderKind::Anthropic),
            Some(v) => {
                ProviderKind::parse(v).ok_or_else(|| CredsError::UnknownProvider(v.to_string()))
            }
        }
    }

    /// Names of the lookup keys that have a non-empty value (never the values): for `doctor`.
    pub fn names(&self) -> Vec<String> {
        LOOKUP_KEYS
            .iter()
            .filter(|k| self.entries.get(**k).is_some_and(|(v, _)| !v.is_empty()))
            .map(|k| k.to_string())
            .collect()
    }

    /// Lines describing the effective configuration for `-v`: `KEY=value  (source)` for every
    /// lookup key that has a value, secrets masked by [`mask`]. Safe to print.
    pub fn describe(&self) -> Vec<String> {
        LOOKUP_KEYS
            .iter()
            .filter_map(|key| {
                let (value, source) = self.entries.get(*key)?;
                if value.is_empty() {
                    return None;
                }
                let shown = if SECRET_KEYS.contains(key) {
                    mask(value)
                } else {
                    value.clone()
                };
                Some(format!("{key}={shown}  ({source})"))
            })
            .collect()
    }
}

impl fmt::Debug for Credentials {
    /// Masks secrets: a `Debug` print must never leak a token into a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, (value, source)) in &self.entries {
            let shown = if SECRET_KEYS.contains(&key.as_str()) {
                mask(value)
            } else {
                value.clone()
            };
            map.entry(key, &format_args!("{shown} ({source})"));
        }
        map.finish()
    }
}

/// Masks a secret to its first 4 characters followed by `…` (seed 000, `-v`: "token 打码只留前
/// 4 位"). A value of 8 characters or fewer shows nothing but `…`, so short secrets never leak
/// by half.
pub fn mask(secret: &str) -> String {
    if secret.chars().count() <= 8 {
        return "…".to_string();
    }
    let head: String = secret.chars().take(4).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_keeps_four_characters() {
        assert_eq!(mask("sk-ant-api03-abcdefgh"), "sk-a…");
        assert_eq!(mask("密钥密钥密钥密钥密钥"), "密钥密钥…");
        assert_eq!(mask("short"), "…");
        assert_eq!(mask(""), "…");
    }

    #[test]
    fn first_claim_wins_and_empty_claims() {
        let mut c = Credentials::empty();
        assert!(c.claim("ANTHROPIC_AUTH_TOKEN", "", &Source::Process));
        assert!(!c.claim("ANTHROPIC_AUTH_TOKEN", "later", &Source::Process));
        assert_eq!(c.get("ANTHROPIC_AUTH_TOKEN"), None);
        assert!(!c.has_token());
        assert_eq!(c.source("ANTHROPIC_AUTH_TOKEN"), Some(&Source::Process));
        c.overwrite("ANTHROPIC_AUTH_TOKEN", "tok-123456789", &Source::Process);
        assert!(c.has_token());
    }

    #[test]
    fn describe_and_debug_mask_secrets() {
        let mut c = Credentials::empty();
        c.claim("ANTHROPIC_API_KEY", "sk-ant-secret-value", &Source::Process);
        c.claim("ANTHROPIC_MODEL", "claude-x", &Source::Process);
        let lines = c.describe().join("\n");
        assert!(
            lines.contains("ANTHROPIC_API_KEY=sk-a…  (进程环境)"),
            "{lines}"
        );
        assert!(lines.contains("ANTHROPIC_MODEL=claude-x"), "{lines}");
        assert!(!lines.contains("secret-value"));
        assert!(!format!("{c:?}").contains("secret-value"));
    }

    #[test]
    fn provider_is_validated() {
        let mut c = Credentials::empty();
        assert_eq!(c.provider().unwrap(), ProviderKind::Anthropic);
        c.claim("FLOWERBOX_PROVIDER", "OpenAI", &Source::Process);
        assert_eq!(c.provider().unwrap(), ProviderKind::OpenAi);
        let mut bad = Credentials::empty();
        bad.claim("FLOWERBOX_PROVIDER", "gemini", &Source::Process);
        assert!(matches!(bad.provider(), Err(CredsError::UnknownProvider(v)) if v == "gemini"));
    }
}
