//! `WebFetch`: a host-side HTTP GET, HTML turned into text, size-capped. Runs on the host (the
//! containers have no credentials and need no network for this); off for roles without it.
//!
//! It obeys the run's egress policy like the agent's pod (DESIGN.md threat model point 4): on
//! every hop the name is checked ([`EgressPolicy::check_name`]: `none` refuses, `proxy` admits
//! listed domains only), resolved once, every address checked ([`EgressPolicy::check_addr`]: no
//! loopback, no host address, no private or link-local range unless `--allow-net`), and the
//! connection pinned to the checked addresses, so a second DNS answer cannot rebind it.
//! Redirects are followed by hand, each under the same check; no system proxy is used.

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::egress::{EgressPolicy, HostAddrs};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;

pub(super) struct WebFetchTool;

#[derive(Deserialize)]
struct Args {
    url: String,
    #[serde(default)]
    prompt: Option<String>,
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &'static str {
        ToolName::WebFetch.as_str()
    }
    fn description(&self) -> String {
        "Fetches a URL (http/https) and returns its content as text (HTML converted). `prompt` says what you \
         are looking for; the whole text is returned for you to read."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "url": {"type": "string"}, "prompt": {"type": "string"}
        }, "required": ["url"]})
    }
    fn spills(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        let mut url =
            Url::parse(&a.url).map_err(|e| ToolError::InvalidInput(format!("url: {e}")))?;
        let policy = &ctx.limits.egress;
        let host = HostAddrs::discover();
        let fetch = async {
            let mut hops = 0;
            let resp = loop {
                let client = pinned_client(&url, policy, &host).await?;
                let resp = client
                    .get(url.clone())
                    .send()
                    .await
                    .map_err(|e| ToolError::Failed(format!("请求失败:{e}")))?;
                let location = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .filter(|_| resp.status().is_redirection());
                let Some(location) = location else {
                    break resp;
                };
                hops += 1;
                if hops > MAX_REDIRECTS {
                    return Err(ToolError::Failed(format!(
                        "重定向超过 {MAX_REDIRECTS} 次,停在 {url}"
                    )));
                }
                url = url
                    .join(location)
                    .map_err(|e| ToolError::Failed(format!("重定向的地址不对:{e}")))?;
            };
            let status = resp.status();
            let ctype = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let mut body = Vec::new();
            let mut stream = resp.bytes_stream();
            let mut cut = false;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| ToolError::Failed(format!("读取失败:{e}")))?;
                let room = ctx.limits.webfetch_max_bytes.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if chunk.len() > room {
                    cut = true;
                    break;
                }
            }
            Ok::<_, ToolError>((status, ctype, body, cut))
        };
        let (status, ctype, body, cut) = tokio::select! {
            r = fetch => r?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
        };
        let text = if ctype.contains("html") {
            html2text::from_read(&body[..], 100)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned())
        } else {
            String::from_utf8_lossy(&body).into_owned()
        };
        let mut out = format!("{} {}\n", status.as_u16(), url);
        if let Some(p) = a.prompt {
            out.push_str(&format!("(要找的:{p})\n"));
        }
        out.push_str(&text);
        if cut {
            out.push_str(&format!(
                "\n[内容超过 {} 字节,后面被截掉了]",
                ctx.limits.webfetch_max_bytes
            ));
        }
        if status.is_success() {
            Ok(out)
        } else {
            Err(ToolError::Failed(out))
        }
    }
}

/// A client for one hop to `url`: the scheme, the name and every resolved address checked
/// against `policy`, the connection pinned to the addresses that passed, no redirects followed
/// and no system proxy.
async fn pinned_client(
    url: &Url,
    policy: &EgressPolicy,
    host: &HostAddrs,
) -> Result<reqwest::Client, ToolError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::InvalidInput("只支持 http/https".into()));
    }
    let denied = |why: String| ToolError::Denied(format!("WebFetch 不去 {url}:{why}"));
    let name = url
        .host_str()
        .ok_or_else(|| ToolError::InvalidInput(format!("{url} 里没有主机名")))?;
    policy.check_name(name).map_err(|r| denied(r.to_string()))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let literal = name.trim_start_matches('[').trim_end_matches(']');
    let (domain, addrs): (Option<&str>, Vec<SocketAddr>) = match literal.parse::<IpAddr>() {
        Ok(ip) => (None, vec![SocketAddr::new(ip, port)]),
        Err(_) => {
            let found = tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| ToolError::Failed(format!("解析不了 {name}:{e}")))?;
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
        let why = refusal.map_or_else(|| format!("{name} 没有地址"), |r| r.to_string());
        return Err(denied(why));
    }
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(d) = domain {
        builder = builder.resolve_to_addrs(d, &allowed);
    }
    builder
        .build()
        .map_err(|e| ToolError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::egress::{EgressMode, Refusal};

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn refused(r: Result<reqwest::Client, ToolError>) -> String {
        match r {
            Err(ToolError::Denied(m)) => m,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn the_host_is_refused_before_any_connection() {
        let host = HostAddrs::discover();
        let open = EgressPolicy::default();
        for u in [
            "http://127.0.0.1:1/",
            "http://[::1]:1/",
            "http://[::ffff:7f00:1]:1/",
            "http://2130706433:1/",
            "http://0.0.0.0:1/",
            "http://localhost:1/",
            "http://169.254.169.254/",
            "http://10.0.0.1/",
        ] {
            let m = refused(pinned_client(&url(u), &open, &host).await);
            assert!(m.starts_with("WebFetch 不去 http://"), "{m}");
        }
        let m = refused(pinned_client(&url("http://127.0.0.1:8/"), &open, &host).await);
        assert!(m.contains(&Refusal::Loopback("127.0.0.1".parse().unwrap()).to_string()));
        for a in host.v4().into_iter().filter(|a| !a.is_loopback()) {
            let m = refused(pinned_client(&url(&format!("http://{a}:9/")), &open, &host).await);
            assert!(m.contains("宿主机自己的地址"), "{m}");
        }
        // A public address passes (nothing is connected here).
        assert!(pinned_client(&url("http://203.0.113.80/"), &open, &host)
            .await
            .is_ok());
        let none = EgressPolicy {
            mode: EgressMode::None,
            ..Default::default()
        };
        let m = refused(pinned_client(&url("http://203.0.113.80/"), &none, &host).await);
        assert!(m.contains("none"), "{m}");
        let proxy = EgressPolicy {
            mode: EgressMode::Proxy,
            ..Default::default()
        };
        let m = refused(pinned_client(&url("https://example.com/"), &proxy, &host).await);
        assert!(m.contains("example.com 不在放行的域名里"), "{m}");
        assert!(matches!(
            pinned_client(&url("file:///etc/passwd"), &open, &host).await,
            Err(ToolError::InvalidInput(_))
        ));
    }
}
