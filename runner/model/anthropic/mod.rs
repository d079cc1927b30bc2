//! The `anthropic` provider (default): the Messages API with `stream: true`.
//!
//! `POST {ANTHROPIC_BASE_URL or https://api.anthropic.com}/v1/messages` with `anthropic-version`,
//! `x-api-key` (`ANTHROPIC_API_KEY`) or `authorization: Bearer` (`ANTHROPIC_AUTH_TOKEN`) as
//! flower's probe does, and the `x-flowerbox-role` / `x-flowerbox-agent` pair from
//! [`Request::caller`](crate::model::Request). Retries and waiting live in
//! `model::client`; this module only speaks the wire format.

mod assemble;
pub mod wire;

use super::client::{self, Driver, Endpoint, WireProtocol};
use super::retry::{ApiError, RetryPolicy};
use super::transport::{HttpRequest, HttpTransport};
use super::{EventSink, ModelError, Request, Turn};
use std::fmt;
use std::sync::Arc;

pub use wire::ANTHROPIC_VERSION;

/// The endpoint root when `ANTHROPIC_BASE_URL` is unset (without `/v1`, like flower's).
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum AnthropicAuth {
    /// `x-api-key: KEY` (`ANTHROPIC_API_KEY`, preferred when both are set).
    ApiKey(String),
    /// `authorization: Bearer TOKEN` (`ANTHROPIC_AUTH_TOKEN`, issued by gateways).
    Bearer(String),
    /// No credential header (local gateways, the scripted model server).
    None,
}

impl fmt::Debug for AnthropicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AnthropicAuth::ApiKey(_) => "ApiKey(<redacted>)",
            AnthropicAuth::Bearer(_) => "Bearer(<redacted>)",
            AnthropicAuth::None => "None",
        })
    }
}

/// Everything the anthropic provider needs, resolved from configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// Endpoint root without `/v1` (`https://api.anthropic.com`).
    pub base_url: String,
    /// Credential.
    pub auth: AnthropicAuth,
    /// Model id used when a request leaves `model` empty.
    pub model: String,
}

/// The anthropic [`Provider`](super::Provider): the one provider over the Messages API.
pub(crate) type AnthropicProvider = Driver<AnthropicProtocol>;

/// A provider for `config`. Errors with [`ModelError::Setup`] when the base URL is not an
/// absolute http(s) URL.
pub(crate) fn new_provider(
    config: AnthropicConfig,
    policy: RetryPolicy,
    transport: Arc<dyn HttpTransport>,
) -> Result<AnthropicProvider, ModelError> {
    let url = format!("{}/v1/messages", config.base_url.trim_end_matches('/'));
    let endpoint = Endpoint::parse(&url)?;
    let proto = AnthropicProtocol { config, endpoint };
    Ok(Driver::new(proto, policy, transport))
}

/// The Messages API's wire format.
pub(crate) struct AnthropicProtocol {
    config: AnthropicConfig,
    endpoint: Endpoint,
}

impl WireProtocol for AnthropicProtocol {
    const NAME: &'static str = "anthropic";
    type Assembler = assemble::AnthropicAssembler;

    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn default_model(&self) -> &str {
        &self.config.model
    }

    fn build(&self, req: &Request) -> HttpRequest {
        let mut headers = client::stream_headers(req);
        headers.push((
            "anthropic-version".to_string(),
            ANTHROPIC_VERSION.to_string(),
        ));
        match &self.config.auth {
            AnthropicAuth::ApiKey(k) => headers.push(("x-api-key".into(), k.clone())),
            AnthropicAuth::Bearer(t) => {
                headers.push(("authorization".into(), format!("Bearer {t}")))
            }
            AnthropicAuth::None => {}
        }
        HttpRequest {
            url: self.endpoint.url.clone(),
            headers,
            body: wire::request_body(req, self.model(req)),
        }
    }

    fn parse_error(&self, _status: u16, body: &str) -> ApiError {
        wire::parse_error(body)
    }

    fn assembler(&self, req: &Request) -> Self::Assembler {
        assemble::AnthropicAssembler::new(self.model(req))
    }

    fn complete(
        &self,
        req: &Request,
        body: &serde_json::Value,
        sink: EventSink<'_>,
    ) -> Result<Turn, super::retry::AttemptError> {
        assemble::complete_message(body, self.model(req), sink)
    }
}

#[cfg(test)]
mod tests;
