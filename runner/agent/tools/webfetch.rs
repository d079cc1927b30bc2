//! `WebFetch`: a host-side HTTP GET, HTML turned into text, size-capped. Runs on the host (the
//! containers have no credentials and need no network for this); off for roles without it.
//!
//! It obeys the run's egress policy like the agent's pod (DESIGN.md threat model point 4): on
//! every hop the name is checked ([`EgressPolicy::check_name`]: `none` refuses, `proxy` admits
//! listed domains only), resolved once, every address checked ([`EgressPolicy::check_addr`]: no
//! loopback, no host address, no private or link-local range unless `--allow-net`), and the
//! connection pinned to the checked addresses, so a second DNS answer cannot rebind it.
//! Redirects are followed by hand, each under the same check; no system proxy is used.
//!
//! The whole call (every hop, the body, and turning HTML into text, [`super::webtext`]) is under
//! one [`TIMEOUT`]; the conversion runs off the async workers, and the human's interrupt stops
//! the wait for it.

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::webtext::page_text;
use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::egress::{EgressPolicy, HostAddrs};
use crate::sandbox::pinned::{pinned_builder, PinError};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;
/// A call takes this long at most: each hop, and the whole call with its conversion.
const TIMEOUT: Duration = Duration::from_secs(60);

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
        let deadline = Instant::now() + TIMEOUT;
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
            r = tokio::time::timeout_at(deadline, fetch) => r.map_err(|_| {
                ToolError::Failed(format!("{} 秒内没取完 {url}", TIMEOUT.as_secs()))
            })??,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
        };
        let (text, fallback) = if ctype.contains("html") {
            let budget = deadline.saturating_duration_since(Instant::now());
            let page = tokio::select! {
                p = page_text(Arc::from(body), budget) => p,
                _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
            };
            (page.text, page.fallback)
        } else {
            (String::from_utf8_lossy(&body).into_owned(), None)
        };
        let mut out = String::new();
        if let Some(why) = fallback {
            out.push_str(&format!("{why}\n"));
        }
        out.push_str(&format!("{} {}\n", status.as_u16(), url));
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

/// A client for one hop to `url`: checked and pinned by [`pinned_builder`], with WebFetch's
/// timeout.
async fn pinned_client(
    url: &Url,
    policy: &EgressPolicy,
    host: &HostAddrs,
) -> Result<reqwest::Client, ToolError> {
    let builder = pinned_builder(url, policy, host)
        .await
        .map_err(|e| match e {
            PinError::Scheme => ToolError::InvalidInput(e.to_string()),
            PinError::NoHost(_) => ToolError::InvalidInput(e.to_string()),
            PinError::Resolve { .. } => ToolError::Failed(e.to_string()),
            PinError::Refused(_) | PinError::NoAddress(_) => {
                ToolError::Denied(format!("WebFetch 不去 {url}:{e}"))
            }
        })?;
    builder
        .timeout(TIMEOUT)
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
