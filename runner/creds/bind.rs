//! A secret is only sent where its own source says (issue 25 §1, DESIGN.md threat model 7).
//!
//! A provider sends one credential to one endpoint. Which credential is the model layer's rule
//! ([`credential_variable`]: anthropic sends `ANTHROPIC_API_KEY` when it has a value, else
//! `ANTHROPIC_AUTH_TOKEN`; openai sends `OPENAI_API_KEY`), and so is where
//! ([`endpoint_variable`], and `FLOWERBOX_PROVIDER`, which picks the provider and so both). A
//! project file (`./.env`, or any file of the chain lying inside the workspace:
//! [`Trust::Project`]) is something an agent or a cloned repository can write. So an endpoint
//! choice that comes from a project file stands only when the credential that would be sent
//! with it comes from that same file, or when nothing would be sent. Otherwise the choice is
//! ignored (the key falls through to the next source, in the end to the provider's default)
//! and the user is told once, naming the file, the keys and the credential. The user's own
//! sources (the environment, their own files) may choose endpoints for any credential: that is
//! the explicit choice the rule leaves to them.
//!
//! The binding is a property of the resolved value, computed in one place ([`Credentials::bind`])
//! whenever its sources change (discovery, `setup`'s values put first), for both providers
//! whichever is chosen; every path that sends a credential (the run's provider, `once`, `go`,
//! a wake, the probe, `setup`'s reload, `doctor`'s listing) reads the bound value.

use std::collections::BTreeMap;

use super::credentials::{Credentials, Trust};
use super::warning::{DotenvSkip, DotenvWarning};
use crate::model::config::{credential_variable, endpoint_variable, ProviderKind};

/// The key that picks the provider.
const PROVIDER_KEY: &str = super::var::FLOWERBOX_PROVIDER;

/// One endpoint choice the binding refuses: the layer and key of the choice, the credential
/// that would have been sent and the layer it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refused {
    layer: usize,
    key: &'static str,
    credential: &'static str,
    credential_layer: usize,
}

/// Where a provider's requests go and what they carry, as the bound value says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The provider.
    pub provider: ProviderKind,
    /// The endpoint variable and its value, when one is set (else the provider's default).
    pub endpoint: Option<(&'static str, String)>,
    /// The variable whose value is sent, when any.
    pub credential: Option<&'static str>,
}

impl Credentials {
    /// The route of `kind`'s requests.
    pub fn route(&self, kind: ProviderKind) -> Route {
        let get = |k: &str| self.get(k).map(str::to_string);
        let key = endpoint_variable(kind);
        Route {
            provider: kind,
            endpoint: self.get(key).map(|v| (key, v.to_string())),
            credential: credential_variable(kind, &get),
        }
    }

    /// True when no endpoint choice of a project file would carry another source's credential.
    pub fn is_bound(&self) -> bool {
        self.refusals().is_empty()
    }

    /// Resolves the sources and drops every endpoint choice of a project file that would carry
    /// a credential from elsewhere, until none is left (each round drops at least one of
    /// finitely many keys); records what it dropped and, when the chosen provider's endpoint
    /// is a project file's, says so.
    pub(super) fn bind(&mut self) {
        self.warnings.retain(|w| !w.skipped.is_binding());
        for layer in &mut self.layers {
            layer.dropped.clear();
        }
        loop {
            self.resolve();
            let refused = self.refusals();
            if refused.is_empty() {
                break;
            }
            let mut told: BTreeMap<(usize, &'static str, usize), Vec<String>> = BTreeMap::new();
            for r in &refused {
                self.layers[r.layer].dropped.insert(r.key.to_string());
                told.entry((r.layer, r.credential, r.credential_layer))
                    .or_default()
                    .push(r.key.to_string());
                tracing::warn!(
                    key = r.key,
                    credential = r.credential,
                    from = %self.layers[r.layer].source,
                    "a project file's endpoint would carry another source's credential: ignored"
                );
            }
            for ((layer, credential, from), keys) in told {
                let Some(path) = self.layers[layer].source.path() else {
                    continue;
                };
                self.warnings.push(DotenvWarning {
                    path: path.to_path_buf(),
                    skipped: DotenvSkip::Unbound {
                        keys,
                        credential: credential.to_string(),
                        from: self.layers[from].source.to_string(),
                    },
                });
            }
        }
        self.say_project_endpoint();
    }

    /// The endpoint choices of project files that would carry another source's credential.
    fn refusals(&self) -> Vec<Refused> {
        let get = |k: &str| self.get(k).map(str::to_string);
        let from_project = |key: &str| {
            self.entries
                .get(key)
                .map(|(_, i)| *i)
                .filter(|i| self.layers[*i].trust == Trust::Project)
        };
        let sent = |kind| {
            let credential = credential_variable(kind, &get)?;
            Some((credential, self.entries.get(credential)?.1))
        };
        let mut out = Vec::new();
        let mut check = |key: &'static str, layer: usize, kind: ProviderKind| {
            if let Some((credential, credential_layer)) = sent(kind) {
                if credential_layer != layer {
                    out.push(Refused {
                        layer,
                        key,
                        credential,
                        credential_layer,
                    });
                }
            }
        };
        // Every provider's endpoint, chosen or not: no path may ever pair them wrongly.
        for kind in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
            let key = endpoint_variable(kind);
            if let Some(layer) = from_project(key) {
                check(key, layer, kind);
            }
        }
        // The provider switch picks which credential goes where: bound to the credential of
        // the provider it picks (an unknown name stays, and fails as it always does).
        if let Some(layer) = from_project(PROVIDER_KEY) {
            let kind = match self.get(PROVIDER_KEY) {
                None => Some(ProviderKind::Anthropic),
                Some(name) => ProviderKind::parse(name),
            };
            if let Some(kind) = kind {
                check(PROVIDER_KEY, layer, kind);
            }
        }
        out
    }

    /// When the chosen provider's endpoint is a project file's (bound: its credential is that
    /// file's, or none), one line saying where the requests go.
    fn say_project_endpoint(&mut self) {
        let Ok(kind) = self.provider() else {
            return;
        };
        let route = self.route(kind);
        let Some((key, url)) = route.endpoint else {
            return;
        };
        if self.trust(key) != Some(Trust::Project) {
            return;
        }
        let Some(path) = self.source(key).and_then(|s| s.path()) else {
            return;
        };
        self.warnings.push(DotenvWarning {
            path: path.to_path_buf(),
            skipped: DotenvSkip::ProjectEndpoint {
                key: key.to_string(),
                url,
                credential: route.credential.map(str::to_string),
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::credentials::{Layer, Source};
    use super::*;
    use std::path::PathBuf;

    fn layer(source: Source, trust: Trust, pairs: &[(&str, &str)]) -> Layer {
        Layer::new(
            source,
            trust,
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn project(pairs: &[(&str, &str)]) -> Layer {
        layer(
            Source::CwdDotenv(PathBuf::from("/p/.env")),
            Trust::Project,
            pairs,
        )
    }

    fn user(pairs: &[(&str, &str)]) -> Layer {
        layer(
            Source::UserDotenv(PathBuf::from("/u/.env")),
            Trust::User,
            pairs,
        )
    }

    fn env(pairs: &[(&str, &str)]) -> Layer {
        layer(Source::Process, Trust::User, pairs)
    }

    fn bound(layers: Vec<Layer>) -> Credentials {
        let c = Credentials::from_layers(layers, Vec::new());
        assert!(c.is_bound());
        c
    }

    #[test]
    fn a_planted_endpoint_with_a_token_never_gets_the_users_api_key() {
        // The case: the API key wins over the token, and the key is the user's.
        let c = bound(vec![
            project(&[
                ("ANTHROPIC_BASE_URL", "http://canary"),
                ("ANTHROPIC_AUTH_TOKEN", "dummy"),
            ]),
            user(&[
                ("ANTHROPIC_API_KEY", "sk-ant-real"),
                ("ANTHROPIC_BASE_URL", "https://gw.example"),
            ]),
        ]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gw.example"));
        let r = c.route(ProviderKind::Anthropic);
        assert_eq!(r.credential, Some("ANTHROPIC_API_KEY"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].starts_with("! /p/.env 设了 ANTHROPIC_BASE_URL,"));
        assert!(
            told[0].contains("ANTHROPIC_API_KEY 来自 /u/.env"),
            "{told:?}"
        );
        assert!(!told[0].contains("sk-ant-real"));
    }

    #[test]
    fn a_project_file_with_its_own_credential_keeps_its_endpoint_and_says_so() {
        // Blanking the API key there makes the token (also there) what is sent.
        let c = bound(vec![
            project(&[
                ("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000"),
                ("ANTHROPIC_API_KEY", ""),
                ("ANTHROPIC_AUTH_TOKEN", "local-proxy"),
            ]),
            env(&[]),
            user(&[("ANTHROPIC_API_KEY", "sk-ant-real")]),
        ]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:4000"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(
            told,
            ["- 模型请求发往 http://127.0.0.1:4000:ANTHROPIC_BASE_URL 和要发的 ANTHROPIC_AUTH_TOKEN 都来自项目文件 /p/.env"]
        );
    }

    #[test]
    fn a_blank_key_in_the_project_cannot_smuggle_the_users_token() {
        // `ANTHROPIC_API_KEY="  "` has a value for the chain but is no key for the provider:
        // the user's token would be sent, so the endpoint goes.
        let c = bound(vec![
            project(&[
                ("ANTHROPIC_BASE_URL", "http://canary"),
                ("ANTHROPIC_API_KEY", "   "),
            ]),
            user(&[("ANTHROPIC_AUTH_TOKEN", "gw-token-real")]),
        ]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), None);
        assert_eq!(
            c.route(ProviderKind::Anthropic).credential,
            Some("ANTHROPIC_AUTH_TOKEN")
        );
    }

    #[test]
    fn a_planted_provider_switch_cannot_redirect_the_users_openai_key() {
        let c = bound(vec![
            env(&[("OPENAI_API_KEY", "sk-openai-real")]),
            project(&[
                ("FLOWERBOX_PROVIDER", "openai"),
                ("OPENAI_BASE_URL", "http://canary/v1"),
                ("OPENAI_MODEL", "m"),
            ]),
            user(&[("ANTHROPIC_API_KEY", "sk-ant-real")]),
        ]);
        assert_eq!(c.get("OPENAI_BASE_URL"), None);
        assert_eq!(c.get("FLOWERBOX_PROVIDER"), None);
        assert_eq!(c.provider().unwrap(), ProviderKind::Anthropic);
        // The model name is the project's to choose: no secret follows it.
        assert_eq!(c.get("OPENAI_MODEL"), Some("m"));
        let told: Vec<String> = c.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            told[0].contains("FLOWERBOX_PROVIDER、OPENAI_BASE_URL")
                || told[0].contains("OPENAI_BASE_URL、FLOWERBOX_PROVIDER"),
            "{told:?}"
        );
        // Without a key to send, the project's local server stands, and is named.
        let c = bound(vec![
            env(&[]),
            project(&[
                ("FLOWERBOX_PROVIDER", "openai"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
                ("OPENAI_MODEL", "m"),
            ]),
            user(&[("ANTHROPIC_API_KEY", "sk-ant-real")]),
        ]);
        assert_eq!(c.provider().unwrap(), ProviderKind::OpenAi);
        assert_eq!(c.get("OPENAI_BASE_URL"), Some("http://127.0.0.1:8000/v1"));
        assert!(c.warnings()[0].to_string().contains("(不带密钥)"));
    }

    #[test]
    fn an_empty_endpoint_is_a_choice_too_and_the_users_own_endpoint_takes_over() {
        // `ANTHROPIC_BASE_URL=` in the project would send the user's gateway token to the
        // default endpoint instead of their gateway.
        let c = bound(vec![
            project(&[("ANTHROPIC_BASE_URL", "")]),
            user(&[
                ("ANTHROPIC_AUTH_TOKEN", "gw-token"),
                ("ANTHROPIC_BASE_URL", "https://gw.example"),
            ]),
        ]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gw.example"));
    }

    #[test]
    fn the_users_sources_choose_endpoints_for_any_credential() {
        let c = bound(vec![
            env(&[("ANTHROPIC_BASE_URL", "https://gw.example")]),
            project(&[("ANTHROPIC_AUTH_TOKEN", "project-token")]),
            user(&[("ANTHROPIC_API_KEY", "sk-ant-real")]),
        ]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("https://gw.example"));
        assert!(c.warnings().is_empty());
        // A file of the user's kind found in the workspace is the project's.
        let planted = layer(
            Source::FlowerEnv(PathBuf::from("/p/custom.env")),
            Trust::Project,
            &[("ANTHROPIC_BASE_URL", "http://canary")],
        );
        let c = bound(vec![env(&[("ANTHROPIC_API_KEY", "sk-ant-real")]), planted]);
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), None);
    }

    #[test]
    fn setup_values_put_first_are_bound_again() {
        let mut c = bound(vec![
            project(&[
                ("ANTHROPIC_BASE_URL", "http://canary"),
                ("ANTHROPIC_AUTH_TOKEN", "dummy"),
            ]),
            user(&[]),
        ]);
        // Bound as it is: the project's endpoint carries the project's token.
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), Some("http://canary"));
        c.put_first(
            Source::Setup(PathBuf::from("/u/.env")),
            &[("ANTHROPIC_API_KEY", "sk-ant-typed".to_string())],
        );
        assert!(c.is_bound());
        assert_eq!(c.get("ANTHROPIC_BASE_URL"), None);
        assert_eq!(c.get("ANTHROPIC_API_KEY"), Some("sk-ant-typed"));
        assert!(c
            .warnings()
            .iter()
            .all(|w| !matches!(w.skipped, DotenvSkip::ProjectEndpoint { .. })));
    }
}
