//! The transport seam under the model clients: one streaming POST and one reachability probe.
//!
//! Providers build an [`HttpRequest`] and read the [`HttpResponse`] body as a byte stream; they
//! never touch `reqwest` themselves, so unit tests swap in a fake [`HttpTransport`] that replays
//! crafted bytes (split anywhere, even inside a UTF-8 character) without a server.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use std::fmt;
use std::time::Duration;
use thiserror::Error;

/// The response body: chunks exactly as the network delivered them.
pub type ByteStream = BoxStream<'static, Result<Bytes, TransportError>>;

/// What went wrong underneath a [`TransportError`]: `reqwest`'s error for the real transport
/// (its own `source()` chain holds hyper's and the OS's), any error for a fake one.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// A failure below HTTP semantics. The variant decides what the client does; the cause is kept
/// for the message (see [`super::error_chain`]).
#[derive(Debug, Error)]
pub enum TransportError {
    /// DNS resolution or the TCP/TLS connect failed: the endpoint is unreachable, which sends
    /// the client into its network-down wait (seed 001 "韧性").
    #[error("cannot connect: {0}")]
    Connect(#[source] Cause),
    /// The connection broke after it was established (reset, truncated body, read timeout).
    #[error("connection broken: {0}")]
    Io(#[source] Cause),
    /// The request could not be built (bad URL, bad header value, a body that does not
    /// serialise, a TLS backend that does not start). Never retried.
    #[error("invalid request: {0}")]
    Invalid(#[source] Cause),
    /// A `GET` ([`HttpTransport::get_json`]) answered with a status that is not 2xx.
    #[error("GET {url}: HTTP {status}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status it answered with.
        status: u16,
    },
}

/// One streaming POST with a JSON body.
#[derive(Clone)]
pub struct HttpRequest {
    /// Absolute URL.
    pub url: String,
    /// Header name/value pairs; names lowercase.
    pub headers: Vec<(String, String)>,
    /// JSON body.
    pub body: serde_json::Value,
}

impl HttpRequest {
    /// The first value of header `name` (lowercase), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for HttpRequest {
    // Credentials must never reach a log line through a `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let secret = matches!(k.as_str(), "x-api-key" | "authorization");
                (k.as_str(), if secret { "<redacted>" } else { v.as_str() })
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body", &self.body)
            .finish()
    }
}

/// Status, headers and the streaming body of a response (any status, success or not).
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header name/value pairs; names lowercase.
    pub headers: Vec<(String, String)>,
    /// The body as it arrives.
    pub body: ByteStream,
}

impl HttpResponse {
    /// The first value of header `name` (lowercase), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// How model clients reach the network. The real one is [`ReqwestTransport`]; tests fake it.
#[async_trait]
pub trait HttpTransport: Send + Sync {
    /// Sends `req` and returns as soon as the status line and headers arrived. Non-2xx statuses
    /// are returned as responses, not errors, so the caller can classify them.
    async fn post_stream(&self, req: HttpRequest) -> Result<HttpResponse, TransportError>;

    /// Checks that `host:port` resolves and accepts a TCP connection within `timeout`: DNS plus
    /// a TCP handshake only, no HTTP and no credentials. `Err` says why not.
    async fn probe(&self, host: &str, port: u16, timeout: Duration) -> Result<(), ProbeError> {
        tcp_probe(host, port, timeout).await
    }

    /// A small `GET` whose JSON body is read whole within `timeout` (what a server says about
    /// itself: `/v1/models`, llama.cpp's `/props`). `Ok` only for a 2xx JSON body. The default
    /// (test transports) knows of no server.
    async fn get_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<serde_json::Value, TransportError> {
        let _ = (url, headers, timeout);
        Err(TransportError::Invalid(
            "this transport sends no GET".into(),
        ))
    }
}

/// Why an endpoint did not answer a [`HttpTransport::probe`].
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The name did not resolve.
    #[error("DNS {host}: {source}")]
    Dns {
        /// The host name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// The name resolved to nothing.
    #[error("DNS {host}: no addresses")]
    NoAddress {
        /// The host name.
        host: String,
    },
    /// No address accepted a connection (the last one's error).
    #[error("TCP {addr}: {source}")]
    Connect {
        /// The address tried last.
        addr: String,
        /// Its error.
        source: std::io::Error,
    },
    /// Nothing answered within the timeout.
    #[error("{host}:{port}: no answer within {secs} s")]
    Timeout {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The timeout, seconds.
        secs: f64,
    },
}

/// DNS + TCP reachability check used by [`HttpTransport::probe`]'s default.
pub async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Result<(), ProbeError> {
    let attempt = async {
        let addrs: Vec<_> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|source| ProbeError::Dns {
                host: host.to_string(),
                source,
            })?
            .collect();
        let mut last = ProbeError::NoAddress {
            host: host.to_string(),
        };
        for addr in addrs {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => return Ok(()),
                Err(source) => {
                    last = ProbeError::Connect {
                        addr: addr.to_string(),
                        source,
                    }
                }
            }
        }
        Err(last)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(ProbeError::Timeout {
            host: host.to_string(),
            port,
            secs: timeout.as_secs_f64(),
        }),
    }
}

/// The production transport over `reqwest` (rustls).
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A client whose connect phase (DNS + TCP + TLS) gives up after `connect_timeout`. There is
    /// no overall timeout: streams are bounded by the caller's idle timeout instead.
    pub fn new(connect_timeout: Duration) -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| TransportError::Invalid(e.into()))?;
        Ok(ReqwestTransport { client })
    }

    fn map_err(e: reqwest::Error) -> TransportError {
        if e.is_builder() {
            TransportError::Invalid(e.into())
        } else if e.is_connect() {
            TransportError::Connect(e.into())
        } else {
            TransportError::Io(e.into())
        }
    }
}

#[async_trait]
impl HttpTransport for ReqwestTransport {
    async fn post_stream(&self, req: HttpRequest) -> Result<HttpResponse, TransportError> {
        let mut builder = self.client.post(&req.url);
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let body = serde_json::to_vec(&req.body).map_err(|e| TransportError::Invalid(e.into()))?;
        let resp = builder.body(body).send().await.map_err(Self::map_err)?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let body = resp
            .bytes_stream()
            .map(|r| r.map_err(Self::map_err))
            .boxed();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }

    async fn get_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> Result<serde_json::Value, TransportError> {
        let mut builder = self.client.get(url).timeout(timeout);
        for (k, v) in headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let resp = builder.send().await.map_err(Self::map_err)?;
        if !resp.status().is_success() {
            return Err(TransportError::Status {
                url: url.to_string(),
                status: resp.status().as_u16(),
            });
        }
        resp.json().await.map_err(Self::map_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_credentials() {
        let req = HttpRequest {
            url: "http://x/v1/messages".into(),
            headers: vec![
                ("x-api-key".into(), "sk-secret".into()),
                ("authorization".into(), "Bearer tok-secret".into()),
                ("x-flowerbox-role".into(), "worker".into()),
            ],
            body: serde_json::json!({}),
        };
        let s = format!("{req:?}");
        assert!(!s.contains("secret"), "{s}");
        assert!(s.contains("worker"));
    }

    #[tokio::test]
    async fn probe_sees_open_and_closed_ports() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(tcp_probe("127.0.0.1", port, Duration::from_secs(5))
            .await
            .is_ok());
        drop(listener);
        let err = tcp_probe("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("TCP"), "{err}");
    }
}
