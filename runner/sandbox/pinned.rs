//! Host-side HTTP connections made on an agent's behalf (`WebFetch`, a project's MCP servers
//! over HTTP), under the same egress policy as the agent's pod (DESIGN.md threat model point
//! 4): the scheme and the name are checked ([`EgressPolicy::check_name`]: `none` refuses,
//! `proxy` admits listed domains only), the name is resolved once, every address is checked
//! ([`EgressPolicy::check_addr`]: no loopback, no host address, no private or link-local range
//! unless `--allow-net`), and the client is pinned to the addresses that passed, so a second
//! DNS answer cannot rebind it. It follows no redirect and uses no system proxy.

use reqwest::Url;
use std::net::{IpAddr, SocketAddr};
use thiserror::Error;

use super::egress::{EgressPolicy, HostAddrs, Refusal};

/// Why no client was made for a URL.
#[derive(Debug, Error, PartialEq)]
pub enum PinError {
    /// Not `http` or `https`.
    #[error("只支持 http/https")]
    Scheme,
    /// No host name in the URL.
    #[error("{0} 里没有主机名")]
    NoHost(String),
    /// The policy refuses the destination.
    #[error("{0}")]
    Refused(Refusal),
    /// The name does not resolve.
    #[error("解析不了 {name}:{why}")]
    Resolve {
        /// The host name.
        name: String,
        /// The resolver's error.
        why: String,
    },
    /// The name resolved to no address.
    #[error("{0} 没有地址")]
    NoAddress(String),
}

/// A client builder for requests to `url`'s host, pinned to its checked addresses, with no
/// redirects and no system proxy (timeouts are the caller's).
/// (The future is `Send` by signature, so callers deep in generic async code keep theirs.)
#[allow(clippy::manual_async_fn)] // The point is the stated `Send` bound.
pub fn pinned_builder<'a>(
    url: &'a Url,
    policy: &'a EgressPolicy,
    host: &'a HostAddrs,
) -> impl std::future::Future<Output = Result<reqwest::ClientBuilder, PinError>> + Send + 'a {
    async move { pin(url, policy, host).await }
}

async fn pin(
    url: &Url,
    policy: &EgressPolicy,
    host: &HostAddrs,
) -> Result<reqwest::ClientBuilder, PinError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(PinError::Scheme);
    }
    let name = url
        .host_str()
        .ok_or_else(|| PinError::NoHost(url.to_string()))?;
    policy.check_name(name).map_err(PinError::Refused)?;
    let port = url.port_or_known_default().unwrap_or(80);
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    let (domain, addrs): (Option<&str>, Vec<SocketAddr>) = match literal.parse::<IpAddr>() {
        Ok(ip) => (None, vec![SocketAddr::new(ip, port)]),
        Err(_) => {
            let found =
                tokio::net::lookup_host((name, port))
                    .await
                    .map_err(|e| PinError::Resolve {
                        name: name.to_string(),
                        why: e.to_string(),
                    })?;
            (Some(name), found.collect())
        }
    };
    let mut allowed = Vec::new();
    let mut refusal = None;
    for a in addrs {
        match policy.check_addr(a.ip(), host) {
            Ok(()) => allowed.push(a),
            Err(r) => {
                refusal.get_or_insert(r);
            }
        }
    }
    if allowed.is_empty() {
        return Err(
            refusal.map_or_else(|| PinError::NoAddress(name.to_string()), PinError::Refused)
        );
    }
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(d) = domain {
        builder = builder.resolve_to_addrs(d, &allowed);
    }
    Ok(builder)
}
