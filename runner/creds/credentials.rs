//! The [`Credentials`] value: the effective credential keys, each with where it came from (the
//! chain's sources as layers, so the binding of [`super::bind`] can let a key fall through to
//! the next source).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use super::error::CredsError;
use super::warning::DotenvWarning;
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

impl Source {
    /// The file, for every source but the process environment.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Source::Process => None,
            Source::FlowerEnv(p)
            | Source::CwdDotenv(p)
            | Source::UserDotenv(p)
            | Source::ClaudeSettings(p)
            | Source::Setup(p) => Some(p),
        }
    }

    /// Who can write it, as far as its kind says: a project's `./.env` is the project's; a
    /// file of another kind is the user's unless the chain finds it inside the workspace.
    pub fn default_trust(&self) -> Trust {
        match self {
            Source::CwdDotenv(_) => Trust::Project,
            _ => Trust::User,
        }
    }
}

/// Who can write a source, which decides where its endpoints may send secrets
/// ([`super::bind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The user: the process environment, the user's own files outside the workspace.
    User,
    /// The project, which agents (and a cloned repository) can write: `./.env`, any file of
    /// the chain that lies inside the workspace.
    Project,
}

/// What one source of the chain defines, in lookup order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layer {
    /// Where.
    pub source: Source,
    /// Who can write it.
    pub trust: Trust,
    /// Its keys in file order (the first of a key counts; an empty value still claims).
    pub pairs: Vec<(String, String)>,
    /// Keys of this source the binding ignores (they fall through to the next source).
    pub dropped: BTreeSet<String>,
}

impl Layer {
    /// A layer of `source` with `pairs`.
    pub(super) fn new(source: Source, trust: Trust, pairs: Vec<(String, String)>) -> Layer {
        Layer {
            source,
            trust,
            pairs,
            dropped: BTreeSet::new(),
        }
    }

    /// Its value of `key` (the first one), unless dropped.
    fn value(&self, key: &str) -> Option<&str> {
        if self.dropped.contains(key) {
            return None;
        }
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The effective value of every lookup key, with provenance. Built by
/// [`super::Lookup::discover`]; never written into the process environment.
///
/// A key defined with an empty value still "claims" the key (later sources cannot fill it, as in
/// flower), but [`Credentials::get`] reports it as absent. Built from the chain's sources, the
/// value is always *bound* ([`super::bind`]): no endpoint a project file chose carries a
/// credential from another source.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The sources, in lookup order.
    pub(super) layers: Vec<Layer>,
    /// Every claimed key: its value and the index of the layer it came from.
    pub(super) entries: BTreeMap<String, (String, usize)>,
    /// What the chain found in its files and did about their endpoints, in lookup order.
    pub(super) warnings: Vec<DotenvWarning>,
    /// The `.env` files the chain looked for (found or not): `$FLOWER_ENV`'s, `./.env`.
    pub(super) dotenv_paths: Vec<PathBuf>,
}

impl Credentials {
    /// An empty set (no key has a value).
    pub fn empty() -> Self {
        Self::default()
    }

    /// The chain's result from its sources in lookup order and what reading them found:
    /// resolved per key, then bound.
    pub(super) fn from_layers(layers: Vec<Layer>, warnings: Vec<DotenvWarning>) -> Self {
        let mut creds = Credentials {
            layers,
            entries: BTreeMap::new(),
            warnings,
            dotenv_paths: Vec::new(),
        };
        creds.bind();
        creds
    }

    /// Takes every key from the first layer that defines it (and has not dropped it).
    pub(super) fn resolve(&mut self) {
        self.entries.clear();
        for (i, layer) in self.layers.iter().enumerate() {
            for (key, _) in &layer.pairs {
                if self.entries.contains_key(key) {
                    continue;
                }
                if let Some(value) = layer.value(key) {
                    self.entries.insert(key.clone(), (value.to_string(), i));
                }
            }
        }
    }

    /// Records `key = value` from `source` unless an earlier source already claimed the key.
    /// Returns true when the value was taken. (A builder for tests and tools: the chain
    /// itself builds from its sources and binds.)
    pub fn claim(&mut self, key: &str, value: &str, source: &Source) -> bool {
        if self.entries.contains_key(key) {
            return false;
        }
        let i = match self.layers.iter().position(|l| &l.source == source) {
            Some(i) => i,
            None => {
                self.layers.push(Layer::new(
                    source.clone(),
                    source.default_trust(),
                    Vec::new(),
                ));
                self.layers.len() - 1
            }
        };
        self.layers[i]
            .pairs
            .push((key.to_string(), value.to_string()));
        self.entries.insert(key.to_string(), (value.to_string(), i));
        true
    }

    /// Puts `pairs` from `source` above every other source (values `setup` just wrote take
    /// effect at once, as in flower), then binds again.
    pub fn put_first(&mut self, source: Source, pairs: &[(&str, String)]) {
        let pairs = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let trust = source.default_trust();
        self.layers.insert(0, Layer::new(source, trust, pairs));
        self.bind();
    }

    /// What the chain found in its `.env` files and did about their endpoints, in lookup
    /// order: one line each, ready to print (sanitised).
    pub fn warnings(&self) -> &[DotenvWarning] {
        &self.warnings
    }

    /// The project-side `.env` files the chain looked for, found or not (`$FLOWER_ENV`'s,
    /// `./.env`): what a run watches for changes an agent makes.
    pub fn dotenv_paths(&self) -> &[PathBuf] {
        &self.dotenv_paths
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
        self.entries.get(key).map(|(_, i)| &self.layers[*i].source)
    }

    /// Who can write the source of `key`'s value.
    pub fn trust(&self, key: &str) -> Option<Trust> {
        self.entries.get(key).map(|(_, i)| self.layers[*i].trust)
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
        match self.get(super::var::FLOWERBOX_PROVIDER) {
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
            .filter(|k| self.get(k).is_some())
            .map(|k| k.to_string())
            .collect()
    }

    /// Lines describing the effective configuration for `-v`: `KEY=value  (source)` for every
    /// lookup key that has a value, secrets masked by [`mask`]. Safe to print.
    pub fn describe(&self) -> Vec<String> {
        LOOKUP_KEYS
            .iter()
            .filter_map(|key| {
                let value = self.get(key)?;
                let source = self.source(key)?;
                let shown = if SECRET_KEYS.contains(key) {
                    mask(value)
                } else {
                    value.to_string()
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
        for (key, (value, i)) in &self.entries {
            let source = &self.layers[*i].source;
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
        c.put_first(
            Source::Setup(PathBuf::from("/u/.env")),
            &[("ANTHROPIC_AUTH_TOKEN", "tok-123456789".to_string())],
        );
        assert!(c.has_token());
        assert_eq!(
            c.source("ANTHROPIC_AUTH_TOKEN"),
            Some(&Source::Setup(PathBuf::from("/u/.env")))
        );
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
