//! Errors of the model layer. Each variant says whether a retry can help; where a failure has
//! an underlying error (the transport's, the JSON parser's, the resolver's) the variant keeps
//! it as its `source()`.

use super::transport::{ProbeError, TransportError};
use std::sync::Arc;
use thiserror::Error;

/// A failed model call, after the provider's own retries.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ModelError {
    /// 401/403: the credentials were refused. Not retried; the user must reconfigure.
    #[error("凭证被拒 (HTTP {status}): {message}")]
    Auth {
        /// HTTP status.
        status: u16,
        /// The response body's message.
        message: String,
    },
    /// 404, or a 400 naming an unknown model/endpoint. Not retried.
    #[error("网关地址或模型名不对 (HTTP {status}): {message}")]
    Config {
        /// HTTP status.
        status: u16,
        /// The response body's message.
        message: String,
    },
    /// A 2xx answer that is not a turn of the provider's protocol (JSON that is not a message,
    /// an empty stream from a server that cannot stream tool calls, ...). Not retried: the
    /// endpoint answers the same way every time. The message names the real cause and, where
    /// one exists, the setting that avoids it.
    #[error("模型服务的回答不是一轮完整的回复 (HTTP {status}): {message}")]
    BadResponse {
        /// HTTP status.
        status: u16,
        /// What came back, and what to do about it.
        message: String,
    },
    /// A 2xx answer whose `content-type` says JSON but whose body does not parse. Not retried,
    /// like [`ModelError::BadResponse`].
    #[error(
        "模型服务的回答不是一轮完整的回复 (HTTP {status}): the body says application/json but is not JSON ({source}): {body}"
    )]
    NotJson {
        /// HTTP status.
        status: u16,
        /// The start of the body, on one line.
        body: String,
        /// The parser's error.
        source: Shared<serde_json::Error>,
    },
    /// Other 400s: the request itself is invalid. Not retried. `prompt_too_long` is true when
    /// the message says the prompt exceeds the context window (triggers a handoff).
    #[error("invalid request (HTTP {status}): {message}")]
    InvalidRequest {
        /// HTTP status.
        status: u16,
        /// The response body's message.
        message: String,
        /// The prompt is longer than the model's window.
        prompt_too_long: bool,
    },
    /// 429 with a `retry-after` beyond the configured cap: fails at once.
    #[error("rate-limited until {until}")]
    RateLimitedUntil {
        /// RFC 3339 time when the limit lifts.
        until: String,
    },
    /// Retryable failures (429/5xx/529, resets, idle, broken streams) that exhausted the
    /// attempts. `errors` lists every attempt's reason. The one retry policy owns the count
    /// (issue 26 §4): `attempts` is the number of requests the turn made.
    #[error("模型调用失败:{attempts} 次请求都没成功(用时 {elapsed_s} 秒),最后一次:{last}")]
    Exhausted {
        /// Attempts made (requests sent).
        attempts: u32,
        /// Seconds from the first request to the last failure, backoffs included.
        elapsed_s: u64,
        /// Last reason.
        last: String,
        /// All reasons, oldest first.
        errors: Vec<String>,
    },
    /// The endpoint stayed unreachable past the resilience limit (an hour by default).
    #[error("模型服务连不上,等了 {waited_s} 秒(上限见 README「Bounds」),最后一次:{last}")]
    Unreachable {
        /// Seconds waited.
        waited_s: u64,
        /// Why the last probe failed.
        #[source]
        last: Shared<ProbeError>,
    },
    /// The call was cancelled by the runner (interrupt, shutdown).
    #[error("interrupted")]
    Interrupted,
    /// Misconfiguration detected before sending (unknown provider, missing key, a setting out
    /// of range).
    #[error("{0}")]
    Setup(String),
    /// The endpoint URL does not parse. Not retried.
    #[error("bad endpoint URL {url}: {source}")]
    BadUrl {
        /// The URL as configured.
        url: String,
        /// The parser's error.
        source: url::ParseError,
    },
    /// The transport could not build or send the request at all (a header value it refuses,
    /// a TLS backend that does not start). Not retried.
    #[error("{0}")]
    Transport(#[source] Shared<TransportError>),
}

/// The underlying error of a [`ModelError`]. A model error is `Clone` (a step's result keeps
/// it) and most causes are not, so the cause is shared; two are equal when they are the same
/// failure. Displays and chains as the error it holds.
#[derive(Debug)]
pub struct Shared<E>(Arc<E>);

impl<E> Shared<E> {
    /// Shares `e`.
    pub fn new(e: E) -> Self {
        Shared(Arc::new(e))
    }

    /// The error.
    pub fn get(&self) -> &E {
        &self.0
    }
}

impl<E> Clone for Shared<E> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<E> PartialEq for Shared<E> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for Shared<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error> std::error::Error for Shared<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl ModelError {
    /// True when the failure is the credentials' fault (the auto-reconfigure path keys on this).
    pub fn is_auth(&self) -> bool {
        matches!(self, ModelError::Auth { .. })
    }

    /// True when the model said the prompt exceeds its window.
    pub fn is_prompt_too_long(&self) -> bool {
        matches!(
            self,
            ModelError::InvalidRequest {
                prompt_too_long: true,
                ..
            }
        )
    }
}

/// An error and its sources joined by `: `, each source only when its text is not already in
/// the line (reqwest's own Display hides the cause; most of ours include it). The one way an
/// error chain becomes one line: the binary's edge and the retry log use it.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message leaves its cause out (as reqwest's does).
    #[derive(Debug, Error)]
    #[error("error sending request")]
    struct Hides(#[source] std::io::Error);

    #[test]
    fn a_chain_names_every_cause_once() {
        let refused = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        // A cause the message hides is appended...
        let e = TransportError::Connect(Box::new(Hides(refused())));
        assert_eq!(
            error_chain(&e),
            "cannot connect: error sending request: refused"
        );
        // ...one it already names is not repeated.
        let e = ModelError::Unreachable {
            waited_s: 3,
            last: Shared::new(ProbeError::Connect {
                addr: "127.0.0.1:9".into(),
                source: refused(),
            }),
        };
        assert_eq!(
            error_chain(&e),
            "模型服务连不上,等了 3 秒(上限见 README「Bounds」),最后一次:TCP 127.0.0.1:9: refused"
        );
    }

    #[test]
    fn a_shared_cause_is_equal_only_to_itself() {
        let e = ModelError::Transport(Shared::new(TransportError::Invalid("bad header".into())));
        assert_eq!(e.clone(), e);
        let other =
            ModelError::Transport(Shared::new(TransportError::Invalid("bad header".into())));
        assert_ne!(e, other);
    }
}
