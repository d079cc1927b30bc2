//! `Bash`: runs a command in the agent's sandbox (its container, or a host process group with
//! `--sandbox host`). Output is capped keeping head and tail, non-UTF-8 decoded lossily, the
//! full output spilled to the workbench; a non-zero exit, timeout or signal is an error result.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::{ExecOutput, ExecRequest};

pub(super) struct BashTool;

#[derive(Deserialize)]
struct Args {
    command: String,
    /// Milliseconds.
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    run_in_background: bool,
}

/// Formats an [`ExecOutput`] for the model; returns (text, success).
pub(crate) fn format_output(o: &ExecOutput) -> (String, bool) {
    let mut out = String::new();
    out.push_str(o.stdout.trim_end_matches('\n'));
    if !o.stderr.trim().is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(o.stderr.trim_end_matches('\n'));
    }
    let mut tail = Vec::new();
    if o.timed_out {
        tail.push("[超时:整个进程组已被杀掉]".to_string());
    } else if let Some(sig) = &o.signal {
        tail.push(format!("[被信号 {sig} 终止]"));
    } else if let Some(code) = o.exit_code {
        if code != 0 {
            tail.push(format!("[退出码 {code}]"));
        }
    } else if !o.interrupted {
        tail.push("[退出码未知]".to_string());
    }
    if o.truncated {
        match &o.full_output {
            Some(p) => tail.push(format!(
                "[输出共 {} 字节,中间省略;全文在 {}]",
                o.total_bytes,
                p.display()
            )),
            None => tail.push(format!("[输出共 {} 字节,中间省略]", o.total_bytes)),
        }
    }
    for n in &o.notes {
        tail.push(format!("[{n}]"));
    }
    for t in tail {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&t);
    }
    if out.is_empty() {
        out.push_str("(没有输出)");
    }
    (out, o.success())
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &'static str {
        ToolName::Bash.as_str()
    }
    fn description(&self) -> String {
        "Runs a bash command in your sandbox and returns its output. `timeout` is in milliseconds (default \
         120000, max 600000). Each command starts in the working directory in a fresh shell. To keep a server \
         running, start it in the background with its output redirected (`./app > app.log 2>&1 &`)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "integer", "description": "milliseconds"},
            "description": {"type": "string"},
            "run_in_background": {"type": "boolean"}
        }, "required": ["command"]})
    }
    fn mutating(&self) -> bool {
        true
    }
    fn spills(&self) -> bool {
        true
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: Args = parse_input(input)?;
        if a.command.trim().is_empty() {
            return Err(ToolError::InvalidInput("command 是空的".into()));
        }
        if a.run_in_background {
            return Err(ToolError::InvalidInput(
                "不支持 run_in_background;要常驻的进程在命令里用 `… > out.log 2>&1 &` 放到后台"
                    .into(),
            ));
        }
        let timeout = a
            .timeout
            .map(Duration::from_millis)
            .unwrap_or(ctx.limits.bash_default_timeout)
            .min(ctx.limits.bash_max_timeout);
        let sandbox = ctx.sandbox().await?;
        let req = ExecRequest {
            command: a.command,
            cwd: ctx.confine.workdir().to_path_buf(),
            env: ctx.env.clone(),
            timeout,
            output_cap: ctx.limits.bash_output_cap,
            spill_dir: ctx.workbench.as_ref().map(|w| w.spill()),
            cancel: ctx.cancel.child_token(),
        };
        let out = sandbox
            .exec(req)
            .await
            .map_err(|e| ToolError::Failed(format!("沙箱出错:{e}")))?;
        if out.interrupted {
            return Err(ToolError::Interrupted);
        }
        let (text, ok) = format_output(&out);
        if ok {
            Ok(text)
        } else {
            Err(ToolError::Failed(text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_failures_and_notes() {
        let o = ExecOutput {
            stdout: "hi\n".into(),
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(format_output(&o), ("hi".into(), true));
        let o = ExecOutput {
            stderr: "boom".into(),
            exit_code: Some(2),
            ..Default::default()
        };
        assert_eq!(format_output(&o), ("boom\n[退出码 2]".into(), false));
        let o = ExecOutput {
            timed_out: true,
            notes: vec!["x".into()],
            ..Default::default()
        };
        let (t, ok) = format_output(&o);
        assert!(!ok && t.contains("超时") && t.ends_with("[x]"));
        let o = ExecOutput {
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(format_output(&o).0, "(没有输出)");
    }
}
