//! `WebFetch`: a host-side HTTP GET, HTML turned into text, size-capped. Runs on the host (the
//! containers have no credentials and need no network for this); off for roles without it.

use async_trait::async_trait;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::{parse_input, Tool, ToolContext, ToolError};

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
        "WebFetch"
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
        let url = reqwest::Url::parse(&a.url)
            .map_err(|e| ToolError::InvalidInput(format!("url: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::InvalidInput("只支持 http/https".into()));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let fetch = async {
            let resp = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| ToolError::Failed(format!("请求失败:{e}")))?;
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
