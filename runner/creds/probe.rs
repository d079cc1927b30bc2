//! The credential probe (seed 000, "第二道:凭证能不能用"): one real `POST
//! {BASE_URL}/v1/messages` with `max_tokens` 16, classified into [`Verdict`]s by HTTP status and
//! the seed's exact phrases — never by guessing from error prose.

use std::time::Duration;

use super::credentials::Credentials;
use crate::model::anthropic::AnthropicAuth;

/// The probe's model when neither `ANTHROPIC_DEFAULT_HAIKU_MODEL` nor `ANTHROPIC_MODEL` is set.
pub const FALLBACK_MODEL: &str = "claude-3-5-haiku-20241022";
/// `max_tokens` of the probe: 16, not 1 (a forced-thinking model needs room, seed 000).
pub const PROBE_MAX_TOKENS: u32 = 16;
/// A 400 is a configuration error only when its body contains one of these (lowercased):
/// Anthropic-style errors nearly always mention "model", so that word alone proves nothing.
pub const CONFIG_PHRASES: [&str; 6] = [
    "not_found",
    "not found",
    "does not exist",
    "unknown model",
    "no such model",
    "invalid model",
];

/// How long and how the probe waits.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Whole-request timeout; 20 s in production (tests shorten it).
    pub timeout: Duration,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(20),
        }
    }
}

/// The probe's conclusion. The string is the text shown after the verdict's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Below 400, or anything undecidable: let it run.
    Ok,
    /// 401/403 or no credentials: the first 160 characters of the body.
    Auth(String),
    /// 404, or 400 naming a missing model/endpoint: the first 160 characters of the body.
    Config(String),
    /// No answer (connect, DNS, TLS, timeout) or 5xx: the first 80 characters of the cause.
    Net(String),
}

/// The model the probe asks for: `ANTHROPIC_DEFAULT_HAIKU_MODEL` → `ANTHROPIC_MODEL` →
/// [`FALLBACK_MODEL`].
pub fn probe_model(creds: &Credentials) -> &str {
    creds
        .get(super::var::ANTHROPIC_DEFAULT_HAIKU_MODEL)
        .or_else(|| creds.get(super::var::ANTHROPIC_MODEL))
        .unwrap_or(FALLBACK_MODEL)
}

/// Classifies an HTTP answer (seed 000's table, with the tightened 400 rule).
pub fn classify(status: u16, body: &str) -> Verdict {
    match status {
        401 | 403 => Verdict::Auth(head(body, 160)),
        404 => Verdict::Config(head(body, 160)),
        400 if has_config_phrase(body) => Verdict::Config(head(body, 160)),
        500..=599 => Verdict::Net(head(&format!("HTTP {status}: {body}"), 80)),
        _ => Verdict::Ok,
    }
}

fn has_config_phrase(body: &str) -> bool {
    let lower = body.to_lowercase();
    CONFIG_PHRASES.iter().any(|p| lower.contains(p))
}

/// Sends the probe to the endpoint and with the credential the run's provider would use (the
/// model layer's own rule, over the bound credentials: `x-api-key` when `ANTHROPIC_API_KEY`
/// has a value, otherwise `authorization: Bearer <ANTHROPIC_AUTH_TOKEN>`); no token at all is
/// [`Verdict::Auth`] without a request.
pub async fn probe(creds: &Credentials, settings: &ProbeSettings) -> Verdict {
    let get = |k: &str| creds.get(k).map(str::to_string);
    let config = crate::model::config::anthropic_config(&get);
    let url = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
    let client = match reqwest::Client::builder().timeout(settings.timeout).build() {
        Ok(c) => c,
        Err(e) => return Verdict::Net(head(&cause(&e), 80)),
    };
    let mut request = client
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .json(&serde_json::json!({
            "model": probe_model(creds),
            "max_tokens": PROBE_MAX_TOKENS,
            "messages": [{"role": "user", "content": "ping"}],
        }));
    request = match &config.auth {
        AnthropicAuth::ApiKey(key) => request.header("x-api-key", key),
        AnthropicAuth::Bearer(token) => request.bearer_auth(token),
        AnthropicAuth::None => return Verdict::Auth("没有凭证".to_string()),
    };
    tracing::info!(%url, model = probe_model(creds), "probing credentials");
    let response = match request.send().await {
        Ok(r) => r,
        // A URL that cannot even form a request is a wrong gateway address, not the network.
        Err(e) if e.is_builder() => return Verdict::Config(head(&cause(&e), 160)),
        Err(e) if e.is_timeout() => {
            return Verdict::Net(format!("{} 秒内没有回应", settings.timeout.as_secs_f64()))
        }
        Err(e) => return Verdict::Net(head(&cause(&e), 80)),
    };
    let status = response.status().as_u16();
    let body = match response.text().await {
        Ok(b) => b,
        Err(e) if status >= 400 => format!("(读响应体失败:{})", cause(&e)),
        Err(_) => String::new(),
    };
    let verdict = classify(status, &body);
    tracing::info!(status, ?verdict, "probe answered");
    verdict
}

/// The innermost cause of an error chain: the part that says what went wrong ("Connection
/// refused", "dns error: …"), rather than reqwest's "error sending request for url (…)".
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// The first `n` characters of `s` on one line.
fn head(s: &str, n: usize) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::Source;

    #[test]
    fn classification_table() {
        assert_eq!(classify(200, "{}"), Verdict::Ok);
        assert_eq!(classify(302, ""), Verdict::Ok);
        assert!(matches!(classify(401, "bad key"), Verdict::Auth(b) if b == "bad key"));
        assert!(matches!(classify(403, "forbidden"), Verdict::Auth(_)));
        assert!(matches!(classify(404, "nope"), Verdict::Config(_)));
        for phrase in CONFIG_PHRASES {
            let body = format!(
                "{{\"error\":{{\"message\":\"model x: {}\"}}}}",
                phrase.to_uppercase()
            );
            assert!(
                matches!(classify(400, &body), Verdict::Config(_)),
                "{phrase}"
            );
        }
        // The tightened rule: "model" alone is not a configuration error.
        assert_eq!(
            classify(
                400,
                r#"{"error":{"type":"invalid_request_error","message":"model: max_tokens too large"}}"#
            ),
            Verdict::Ok
        );
        assert!(matches!(classify(500, "boom"), Verdict::Net(m) if m == "HTTP 500: boom"));
        assert!(matches!(classify(529, "overloaded"), Verdict::Net(_)));
        assert_eq!(classify(429, "slow down"), Verdict::Ok);
    }

    #[test]
    fn bodies_are_cut() {
        let long = "x".repeat(500);
        let Verdict::Auth(b) = classify(401, &long) else {
            panic!()
        };
        assert_eq!(b.chars().count(), 160);
        let Verdict::Net(n) = classify(503, &long) else {
            panic!()
        };
        assert_eq!(n.chars().count(), 80);
        assert_eq!(head("a\n  b\tc", 10), "a b c");
    }

    #[test]
    fn model_order() {
        let mut c = Credentials::empty();
        assert_eq!(probe_model(&c), FALLBACK_MODEL);
        c.claim("ANTHROPIC_MODEL", "main", &Source::Process);
        assert_eq!(probe_model(&c), "main");
        c.claim("ANTHROPIC_DEFAULT_HAIKU_MODEL", "haiku", &Source::Process);
        assert_eq!(probe_model(&c), "haiku");
    }
}
