//! Retry policy and failure classification shared by every provider.
//!
//! flower's resilience defaults (its `Resilience` parameters; seed 001 "韧性"): 6 attempts
//! including the first, backoff `min(base · 2^(n-1), max) · (1 ± 25 %)` with base 4 s and max
//! 120 s, probing every 15 s while offline for at most an hour. Every knob is a field of
//! [`RetryPolicy`] so tests can run the same paths in milliseconds.

use super::ModelError;
use rand::Rng;
use serde_json::Value;
use std::time::Duration;

/// How a provider retries, times out and waits for the network. Build it with
/// `RetryPolicy { field: .., ..Default::default() }`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts per turn, including the first (flower: 6). An attempt that ends in a network-down
    /// wait which saw the endpoint unreachable does not count.
    pub max_attempts: u32,
    /// Backoff before the second attempt (flower: 4 s); doubles per failed attempt.
    pub base_delay: Duration,
    /// Backoff ceiling (flower: 120 s).
    pub max_delay: Duration,
    /// Relative jitter on each backoff, 0.25 = ±25 % (flower's). 0 makes delays exact.
    pub jitter: f64,
    /// A 429 whose `retry-after` exceeds this fails at once with
    /// [`ModelError::RateLimitedUntil`] (default 10 min). Shorter `retry-after`s are honoured.
    pub retry_after_cap: Duration,
    /// Longest time without progress tolerated while waiting for response headers or the
    /// next content event; keep-alive events (`ping`) do not count as progress. Longer counts
    /// as a broken stream and is retried (default 300 s).
    pub idle_timeout: Duration,
    /// Longest time one attempt may take from request to complete turn, however steadily it
    /// streams; longer is retried (default 30 min: 64k output tokens at 40 tokens/s).
    pub attempt_deadline: Duration,
    /// Probe interval while the endpoint is unreachable (flower: 15 s).
    pub probe_interval: Duration,
    /// Timeout of one DNS + TCP probe (flower: 5 s).
    pub probe_timeout: Duration,
    /// Longest total network-down wait per turn before [`ModelError::Unreachable`]
    /// (flower: 1 hour).
    pub max_offline_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_secs(4),
            max_delay: Duration::from_secs(120),
            jitter: 0.25,
            retry_after_cap: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(300),
            attempt_deadline: Duration::from_secs(1800),
            probe_interval: Duration::from_secs(15),
            probe_timeout: Duration::from_secs(5),
            max_offline_wait: Duration::from_secs(3600),
        }
    }
}

impl RetryPolicy {
    /// Backoff after the `failed_attempt`-th (1-based) failure, jitter included.
    pub fn backoff(&self, failed_attempt: u32) -> Duration {
        let exp = failed_attempt.saturating_sub(1).min(30);
        let raw = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let j = self.jitter.clamp(0.0, 1.0);
        if j == 0.0 {
            return raw;
        }
        let factor = 1.0 - j + rand::rng().random::<f64>() * 2.0 * j;
        raw.mul_f64(factor)
    }
}

/// Why one attempt failed, as the retry loop needs to know it.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Retry after backoff (or after `retry_after` when the server said so).
    Retry {
        /// One line for `Turn.retried_errors` and the `Retrying` event.
        reason: String,
        /// The server's `retry-after`, if any.
        retry_after: Option<Duration>,
        /// HTTP 429: a `retry-after` beyond the cap fails at once.
        rate_limited: bool,
    },
    /// DNS or TCP connect failed: wait for the network, then retry.
    Offline(String),
    /// Not retryable.
    Fatal(ModelError),
}

impl AttemptError {
    /// A plain retryable failure.
    pub(crate) fn retry(reason: impl Into<String>) -> Self {
        AttemptError::Retry {
            reason: reason.into(),
            retry_after: None,
            rate_limited: false,
        }
    }
}

/// The parts of an error response body a provider understood.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ApiError {
    /// The typed error kind (`overloaded_error`, `invalid_request_error`, `not_found_error`...).
    pub kind: Option<String>,
    /// Human-readable message (the raw body when it was not JSON).
    pub message: String,
    /// The provider says the prompt exceeds the context window.
    pub prompt_too_long: bool,
}

impl ApiError {
    /// Reads an error body of the `{"error": {..}}` shape both providers use, understanding the
    /// `error` value with the provider's `api_error`; any other body becomes the message
    /// verbatim (one line).
    pub(crate) fn from_body(body: &str, api_error: impl Fn(&Value) -> ApiError) -> ApiError {
        let parsed: Option<Value> = serde_json::from_str(body).ok();
        match parsed.as_ref().and_then(|v| v.get("error")) {
            Some(e) => api_error(e),
            None => ApiError {
                kind: None,
                message: one_line(body),
                prompt_too_long: false,
            },
        }
    }
}

/// Maps a non-2xx status to an attempt outcome. 401/403 → auth, 404 (or a 400 of kind
/// `not_found_error`) → config, 413 → invalid request that a handoff can fix, other 4xx →
/// invalid request; 408/409/429/5xx (529 included) → retry.
pub(crate) fn classify_status(
    status: u16,
    retry_after: Option<Duration>,
    err: ApiError,
) -> AttemptError {
    let message = err.message;
    match status {
        401 | 403 => AttemptError::Fatal(ModelError::Auth { status, message }),
        404 => AttemptError::Fatal(ModelError::Config { status, message }),
        400 if err.kind.as_deref() == Some("not_found_error") => {
            AttemptError::Fatal(ModelError::Config { status, message })
        }
        413 => AttemptError::Fatal(ModelError::InvalidRequest {
            status,
            message,
            prompt_too_long: true,
        }),
        408 | 409 | 429 | 500..=599 => {
            let kind = err.kind.map(|k| format!(" {k}")).unwrap_or_default();
            AttemptError::Retry {
                reason: format!("HTTP {status}{kind}: {}", one_line(&message)),
                retry_after,
                rate_limited: status == 429,
            }
        }
        _ => AttemptError::Fatal(ModelError::InvalidRequest {
            status,
            message,
            prompt_too_long: err.prompt_too_long,
        }),
    }
}

/// Classifies an `error` event inside a 200 stream by its typed kind: credentials and request
/// errors are fatal, everything else (overloaded, api_error, rate limits) is retried.
pub(crate) fn classify_stream_error(err: ApiError) -> AttemptError {
    let kind = err.kind.clone().unwrap_or_else(|| "error".into());
    match kind.as_str() {
        "authentication_error" | "permission_error" => AttemptError::Fatal(ModelError::Auth {
            status: 200,
            message: err.message,
        }),
        "not_found_error" => AttemptError::Fatal(ModelError::Config {
            status: 200,
            message: err.message,
        }),
        "invalid_request_error" => AttemptError::Fatal(ModelError::InvalidRequest {
            status: 200,
            message: err.message,
            prompt_too_long: err.prompt_too_long,
        }),
        _ => AttemptError::retry(format!("stream error {kind}: {}", one_line(&err.message))),
    }
}

/// Reads `retry-after` (seconds or HTTP date) or `retry-after-ms`, as a wait from `now`.
pub(crate) fn parse_retry_after(
    header: impl Fn(&str) -> Option<String>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let v = header("retry-after")?;
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - now;
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Collapses whitespace so a reason fits on one status line, bounded to 300 chars.
pub(crate) fn one_line(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &joined[..i]),
        None => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_flower_formula_without_jitter() {
        let p = RetryPolicy {
            jitter: 0.0,
            ..Default::default()
        };
        let secs: Vec<u64> = (1..=7).map(|n| p.backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![4, 8, 16, 32, 64, 120, 120]);
    }

    #[test]
    fn backoff_jitter_stays_within_25_percent() {
        let p = RetryPolicy::default();
        for _ in 0..200 {
            let d = p.backoff(2).as_secs_f64();
            assert!((6.0..=10.0).contains(&d), "{d}");
        }
    }

    #[test]
    fn statuses_are_classified() {
        let e = |status| classify_status(status, None, ApiError::default());
        assert!(matches!(
            e(401),
            AttemptError::Fatal(ModelError::Auth { status: 401, .. })
        ));
        assert!(matches!(
            e(403),
            AttemptError::Fatal(ModelError::Auth { .. })
        ));
        assert!(matches!(
            e(404),
            AttemptError::Fatal(ModelError::Config { .. })
        ));
        assert!(matches!(
            e(400),
            AttemptError::Fatal(ModelError::InvalidRequest { .. })
        ));
        for s in [429, 500, 502, 503, 504, 529] {
            assert!(matches!(e(s), AttemptError::Retry { .. }), "{s}");
        }
        let ptl = ApiError {
            prompt_too_long: true,
            ..Default::default()
        };
        let AttemptError::Fatal(err) = classify_status(400, None, ptl) else {
            panic!()
        };
        assert!(err.is_prompt_too_long());
        let nf = ApiError {
            kind: Some("not_found_error".into()),
            ..Default::default()
        };
        assert!(matches!(
            classify_status(400, None, nf),
            AttemptError::Fatal(ModelError::Config { .. })
        ));
    }

    #[test]
    fn retry_after_forms() {
        let now = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let h = |name: &'static str, val: &'static str| {
            move |n: &str| (n == name).then(|| val.to_string())
        };
        assert_eq!(
            parse_retry_after(h("retry-after", "1"), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            parse_retry_after(h("retry-after-ms", "250"), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after(h("retry-after", "Wed, 01 Jan 2025 00:02:00 GMT"), now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(h("retry-after", "soon"), now), None);
        assert_eq!(parse_retry_after(|_| None, now), None);
    }

    #[test]
    fn stream_errors_by_kind() {
        let k = |kind: &str| ApiError {
            kind: Some(kind.into()),
            ..Default::default()
        };
        assert!(matches!(
            classify_stream_error(k("overloaded_error")),
            AttemptError::Retry { .. }
        ));
        assert!(matches!(
            classify_stream_error(k("api_error")),
            AttemptError::Retry { .. }
        ));
        assert!(matches!(
            classify_stream_error(k("authentication_error")),
            AttemptError::Fatal(ModelError::Auth { .. })
        ));
    }
}
