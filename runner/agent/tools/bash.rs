//! `Bash`: runs a command in the agent's sandbox (its container, or a host process group with
//! `--sandbox host`). Output is capped keeping head and tail, non-UTF-8 decoded lossily, the
//! full output spilled to the workbench; a non-zero exit, timeout or signal is an error result.
//! `run_in_background` starts the command without waiting ([`super::background`]).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::agent::spill::SPILL_PREVIEW;
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

/// Formats an [`ExecOutput`] for the model, as `Bash` returns it; returns (text, success).
pub fn format_output(o: &ExecOutput) -> (String, bool) {
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
            // The spill file holds the most: the model is pointed there (with the start and
            // the end of the output), not at a second spill of the capped text.
            Some(p) => {
                out = spilled_output(&out, o.total_bytes, p);
                if o.full_output_omitted > 0 {
                    tail.push(format!(
                        "[落盘文件也有上限({} MiB):只留了开头和结尾,中间 {} 字节没留下;要全部就把输出重定向到文件再分段看]",
                        crate::sandbox::output::FULL_OUTPUT_LIMIT / 1024 / 1024,
                        o.full_output_omitted
                    ));
                }
            }
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

/// The result text of an output too long for the context whose full text is in `file`: one
/// pointer line, the first [`SPILL_PREVIEW`] characters and the last `2 × SPILL_PREVIEW`
/// (where a failing command prints why). Short enough never to be spilled again.
fn spilled_output(text: &str, total_bytes: u64, file: &std::path::Path) -> String {
    let chars: Vec<char> = text.chars().collect();
    let head: String = chars.iter().take(SPILL_PREVIEW).collect();
    let end_from = chars
        .len()
        .saturating_sub(2 * SPILL_PREVIEW)
        .max(SPILL_PREVIEW.min(chars.len()));
    let end: String = chars[end_from..].iter().collect();
    format!(
        "[输出共 {total_bytes} 字节,太长不放进上下文;全文落盘在 {}:用 Read(offset/limit)或 Bash 的 grep、tail、sed -n 读它]\n{head}\n…\n{end}",
        file.display()
    )
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &'static str {
        ToolName::Bash.as_str()
    }
    fn description(&self) -> String {
        "Runs a bash command in your sandbox and returns its output. `timeout` is in milliseconds (default \
         120000, max 600000). Each command starts in the working directory in a fresh shell. To keep a server \
         running, set `run_in_background: true`: you get a task_id at once and read its output with TaskOutput, \
         stop it with TaskStop."
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
            return super::background::start(ctx, &a.command).await;
        }
        // A timeout of 0 ms cannot be meant (the command would be killed as it starts; a small
        // local model sends it): it is taken as no timeout given, the default.
        let timeout = a
            .timeout
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
            .unwrap_or(ctx.limits.bash_default_timeout)
            .min(ctx.limits.bash_max_timeout);
        let sandbox = ctx.sandbox().await?;
        let command = a.command.clone();
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
        let (mut text, ok) = format_output(&out);
        let cannot_start = matches!(out.exit_code, Some(126 | 127));
        for hint in super::crlf::hints(ctx, &command, cannot_start).await {
            text.push('\n');
            text.push_str(&hint);
        }
        if ok {
            Ok(text)
        } else {
            if let Some(scope) = &ctx.write_scope {
                text.push('\n');
                text.push_str(&crate::agent::scope::failure_note(scope));
            }
            Err(ToolError::Failed(text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::spill::SPILL_THRESHOLD;

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

    /// Issue 29: Qwen2.5-Coder-1.5B sent `"timeout": 0`; the command was killed at once and the
    /// call reported as timed out although it had nothing to wait for.
    #[tokio::test]
    async fn a_zero_timeout_is_the_default_not_an_instant_kill() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let ctx = super::super::crlf::tests::ctx(&ws);
        let out = BashTool
            .call(
                &json!({"command": "echo fbx > check.txt && cat check.txt", "timeout": 0}),
                &ctx,
            )
            .await;
        assert_eq!(out, Ok("fbx".to_string()));
    }

    #[test]
    fn a_truncated_output_points_at_its_full_output_file_and_says_when_that_is_capped() {
        let head = "BEGIN".to_string() + &"x".repeat(15_000);
        let end = "y".repeat(15_000) + "error: the real cause";
        let mut o = ExecOutput {
            stdout: format!("{head}\n… [170000000 bytes omitted] …\n{end}"),
            exit_code: Some(2),
            truncated: true,
            total_bytes: 200_000_000,
            full_output: Some("/wb/spill/0123456789abcdef.txt".into()),
            ..Default::default()
        };
        let (text, ok) = format_output(&o);
        assert!(!ok);
        assert!(
            text.starts_with(
                "[输出共 200000000 字节,太长不放进上下文;全文落盘在 /wb/spill/0123456789abcdef.txt"
            ),
            "{text}"
        );
        assert!(
            text.contains("BEGIN") && text.contains("error: the real cause"),
            "{text}"
        );
        assert!(text.ends_with("[退出码 2]"), "{text}");
        assert!(
            text.chars().count() < SPILL_THRESHOLD,
            "never spilled a second time"
        );
        assert!(!text.contains("上限"), "{text}");
        o.full_output_omitted = 133_000_000;
        let (text, _) = format_output(&o);
        assert!(
            text.contains("[落盘文件也有上限(64 MiB):只留了开头和结尾,中间 133000000 字节没留下"),
            "{text}"
        );
        assert!(text.chars().count() < SPILL_THRESHOLD);
    }
}
