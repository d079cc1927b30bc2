//! Errors of the model layer. Each variant says whether a retry can help.

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
        /// Last connection error.
        last: String,
    },
    /// The call was cancelled by the runner (interrupt, shutdown).
    #[error("interrupted")]
    Interrupted,
    /// Misconfiguration detected before sending (unknown provider, missing key, bad URL).
    #[error("{0}")]
    Setup(String),
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
