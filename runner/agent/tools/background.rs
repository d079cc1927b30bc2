//! Background commands (issue 29 §1.2): `Bash` with `run_in_background` starts the command and
//! returns at once with an id, and two tools named as current Claude Code names them read and
//! stop it: `TaskOutput` (`task_id`; BashOutput's `bash_id` is accepted too) returns the output
//! written since the last read and the status, `TaskStop` (`task_id`; KillShell's `shell_id`
//! accepted) ends it.
//!
//! Everything runs through the agent's sandbox like any command, so it is the same in a
//! container and with `--sandbox host`: the command runs under `bash -c` in a subshell of the
//! launching command's process group (no timeout), its stdout and stderr go to
//! `bg-<unique>-<id>.log` in the workbench's spill directory (`/tmp` without a workbench), where
//! `Read` and `cat` both reach it, and its exit code next to it (`.exit`). It ends with the agent's
//! sandbox: with the container when it is released (the release notice names it), with the
//! teardown of the host sandbox, which kills the process groups its commands left running.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::{parse_input, Tool, ToolContext, ToolError};
use crate::model::ToolName;
use crate::sandbox::ExecRequest;

/// The line that ends a status read (our own protocol, printed by [`read_script`]).
const STATUS_MARK: &str = "\n@@flowerbox-bg ";
/// How long a status read, a start or a stop may take.
const QUICK: Duration = Duration::from_secs(20);
/// How long `block` waits at most when no `timeout` is given (Claude Code's default).
const BLOCK_DEFAULT: Duration = Duration::from_secs(30);
/// Most `block` waits.
const BLOCK_MAX: Duration = Duration::from_secs(600);

/// One background command.
#[derive(Debug, Clone)]
struct Task {
    pid: i64,
    pgid: i64,
    out: PathBuf,
    exit: PathBuf,
    /// Bytes of `out` already returned.
    offset: u64,
    stopped: bool,
}

/// One agent's background commands, by id (`bash_1`, `bash_2`… in the order started, as
/// Claude Code numbered its background shells).
#[derive(Debug, Default)]
pub struct Background {
    started: u32,
    tasks: HashMap<String, Task>,
}

fn tasks(ctx: &ToolContext) -> std::sync::MutexGuard<'_, Background> {
    ctx.background.lock().unwrap_or_else(|e| e.into_inner())
}

/// `s` as one shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

async fn run(ctx: &ToolContext, command: String) -> Result<String, ToolError> {
    let sandbox = ctx.sandbox().await?;
    let out = sandbox
        .exec(ExecRequest {
            command,
            cwd: ctx.confine.workdir().to_path_buf(),
            env: ctx.env.clone(),
            timeout: QUICK,
            output_cap: ctx.limits.bash_output_cap,
            spill_dir: None,
            cancel: ctx.cancel.child_token(),
        })
        .await
        .map_err(|e| ToolError::Failed(format!("沙箱出错:{e}")))?;
    if out.interrupted {
        return Err(ToolError::Interrupted);
    }
    if !out.success() {
        return Err(ToolError::Failed(super::bash::format_output(&out).0));
    }
    Ok(out.stdout)
}

/// Starts `command` in the background; the result names the id, the pid and the output file.
pub(super) async fn start(ctx: &ToolContext, command: &str) -> Result<String, ToolError> {
    let id = {
        let mut b = tasks(ctx);
        b.started += 1;
        format!("bash_{}", b.started)
    };
    // The file names are unique across runs and agents sharing the workbench.
    let file = format!(
        "bg-{}-{id}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let dir = ctx
        .workbench
        .as_ref()
        .map(|w| w.spill())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let out = dir.join(format!("{file}.log"));
    let exit = dir.join(format!("{file}.exit"));
    let (q_out, q_exit) = (
        quote(&out.to_string_lossy()),
        quote(&exit.to_string_lossy()),
    );
    // The exit code is renamed into place: a status read never sees a half-written file.
    // The subshell stays in this command's process group (the sandbox kills that group at
    // teardown); its process group id is read from /proc, after the `)` of the name.
    let script = format!(
        "mkdir -p {dir} && : > {q_out} || exit 1\n\
         ( bash -c {cmd}; echo $? > {q_exit}.tmp; mv -f {q_exit}.tmp {q_exit} ) > {q_out} 2>&1 < /dev/null &\n\
         pid=$!\n\
         echo \"$pid $(sed 's/.*) //' /proc/$pid/stat | cut -d' ' -f3)\"",
        dir = quote(&dir.to_string_lossy()),
        cmd = quote(command),
    );
    let text = run(ctx, script).await?;
    let mut nums = text.split_whitespace().map(str::parse::<i64>);
    let (Some(Ok(pid)), Some(Ok(pgid))) = (nums.next(), nums.next()) else {
        return Err(ToolError::Failed(format!(
            "后台命令启动后没拿到进程号(输出:{})",
            text.trim()
        )));
    };
    tasks(ctx).tasks.insert(
        id.clone(),
        Task {
            pid,
            pgid,
            out: out.clone(),
            exit,
            offset: 0,
            stopped: false,
        },
    );
    Ok(format!(
        "已在后台启动:task_id {id},进程 {pid},输出写进 {}。它没有超时,一直跑到结束、被 TaskStop 停下或你的环境被释放。\
         用 TaskOutput(task_id: \"{id}\")读上次之后的新输出和状态,TaskStop(task_id: \"{id}\")停下它;也可以直接 Read 或 cat 那个文件。",
        out.display()
    ))
}

/// What a status read found.
#[derive(Debug, PartialEq)]
struct Status {
    new_output: String,
    /// The file's size when read.
    size: u64,
    /// `running`, `gone`, or the exit code.
    state: String,
}

/// A shell script printing the output after `t.offset` (at most `chunk` bytes), then the
/// status line.
fn read_script(t: &Task, chunk: u64) -> String {
    let (out, exit) = (
        quote(&t.out.to_string_lossy()),
        quote(&t.exit.to_string_lossy()),
    );
    // The state is read before the size, and no more than `size` bytes are printed: a command
    // that ends between the two reads has all its output counted, and the next read starts
    // exactly after what this one returned.
    format!(
        "state=$(cat {exit} 2>/dev/null | grep . || {{ kill -0 -- -{pgid} 2>/dev/null && echo running; }} || cat {exit} 2>/dev/null || echo gone)\n\
         size=$(wc -c < {out} 2>/dev/null || echo 0)\n\
         if [ \"$size\" -gt {n} ]; then n=$((size - {n})); [ \"$n\" -gt {chunk} ] && n={chunk}; tail -c +{from} {out} | head -c \"$n\"; fi\n\
         printf '\\n@@flowerbox-bg %s %s\\n' \"$size\" \"$state\"",
        n = t.offset,
        from = t.offset + 1,
        pgid = t.pgid,
    )
}

fn parse_status(stdout: &str) -> Option<Status> {
    let (body, line) = stdout.rsplit_once(STATUS_MARK)?;
    let mut parts = line.split_whitespace();
    let size = parts.next()?.parse().ok()?;
    let state = parts.next()?.to_string();
    Some(Status {
        new_output: body.to_string(),
        size,
        state,
    })
}

/// Bytes of output one read returns: under the per-stream cap, so never cut in the middle.
fn chunk(ctx: &ToolContext) -> u64 {
    (ctx.limits.bash_output_cap / 2)
        .saturating_sub(200)
        .max(1024) as u64
}

async fn status(ctx: &ToolContext, t: &Task) -> Result<Status, ToolError> {
    let chunk = chunk(ctx);
    let text = run(ctx, read_script(t, chunk)).await?;
    parse_status(&text)
        .ok_or_else(|| ToolError::Failed(format!("读不到后台命令的状态(输出:{})", text.trim())))
}

/// The task `id` of this agent.
fn task(ctx: &ToolContext, id: &str) -> Result<Task, ToolError> {
    match tasks(ctx).tasks.get(id) {
        Some(t) => Ok(t.clone()),
        None => Err(ToolError::InvalidInput(format!(
            "没有 task_id 为 {id} 的后台命令(它是 Bash 以 run_in_background: true 启动时返回的 id)"
        ))),
    }
}

fn state_text(t: &Task, state: &str) -> String {
    match state {
        "running" => "运行中".to_string(),
        "gone" if t.stopped => "已被 TaskStop 停下".to_string(),
        "gone" => "已不在运行(没有退出码:被杀掉了,或环境已释放)".to_string(),
        "0" => "已结束,退出码 0".to_string(),
        code => format!("已结束,退出码 {code}"),
    }
}

#[derive(Deserialize)]
struct OutputArgs {
    #[serde(alias = "bash_id", alias = "shell_id")]
    task_id: String,
    #[serde(default)]
    block: bool,
    /// Milliseconds.
    #[serde(default)]
    timeout: Option<u64>,
}

pub(super) struct TaskOutputTool;

#[async_trait]
impl Tool for TaskOutputTool {
    fn name(&self) -> &'static str {
        ToolName::TaskOutput.as_str()
    }
    fn description(&self) -> String {
        "Reads a background command started with Bash `run_in_background: true`: the output it wrote since \
         your last read, and whether it is still running or its exit code. With `block: true` it waits until \
         the command ends or `timeout` milliseconds pass (default 30000)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "task_id": {"type": "string"},
            "block": {"type": "boolean"},
            "timeout": {"type": "integer", "description": "milliseconds"}
        }, "required": ["task_id"]})
    }
    fn mutating(&self) -> bool {
        true
    }
    fn spills(&self) -> bool {
        true
    }
    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: OutputArgs = parse_input(input)?;
        let t = task(ctx, &a.task_id)?;
        let deadline = tokio::time::Instant::now()
            + a.timeout
                .map(Duration::from_millis)
                .unwrap_or(BLOCK_DEFAULT)
                .min(BLOCK_MAX);
        let mut s = status(ctx, &t).await?;
        while a.block && s.state == "running" && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = ctx.cancel.cancelled() => return Err(ToolError::Interrupted),
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            }
            s = status(ctx, &t).await?;
        }
        // A file that shrank (rewritten) is read from its start next time.
        let offset = if s.size < t.offset {
            0
        } else {
            (t.offset + chunk(ctx)).min(s.size)
        };
        if let Some(t) = tasks(ctx).tasks.get_mut(&a.task_id) {
            t.offset = offset;
        }
        let mut text = format!("[{}:{}]", a.task_id, state_text(&t, &s.state));
        let body = s.new_output.trim_end_matches('\n');
        text.push('\n');
        text.push_str(if body.is_empty() {
            "(上次读过之后没有新输出)"
        } else {
            body
        });
        if s.size > offset {
            text.push_str(&format!(
                "\n[还有 {} 字节没读:再调用 TaskOutput,或 Read {}]",
                s.size - offset,
                t.out.display()
            ));
        }
        Ok(text)
    }
}

#[derive(Deserialize)]
struct StopArgs {
    #[serde(alias = "shell_id", alias = "bash_id")]
    task_id: String,
}

pub(super) struct TaskStopTool;

#[async_trait]
impl Tool for TaskStopTool {
    fn name(&self) -> &'static str {
        ToolName::TaskStop.as_str()
    }
    fn description(&self) -> String {
        "Stops a background command started with Bash `run_in_background: true` (it and every process it \
         started)."
            .into()
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "task_id": {"type": "string"}
        }, "required": ["task_id"]})
    }
    fn mutating(&self) -> bool {
        true
    }
    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let a: StopArgs = parse_input(input)?;
        let t = task(ctx, &a.task_id)?;
        let s = status(ctx, &t).await?;
        if s.state != "running" {
            return Ok(format!(
                "{} 已经不在运行了:{}",
                a.task_id,
                state_text(&t, &s.state)
            ));
        }
        let g = t.pgid;
        run(
            ctx,
            format!(
                "kill -TERM -- -{g} 2>/dev/null\n\
                 for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- -{g} 2>/dev/null || exit 0; sleep 0.2; done\n\
                 kill -KILL -- -{g} 2>/dev/null; true"
            ),
        )
        .await?;
        if let Some(t) = tasks(ctx).tasks.get_mut(&a.task_id) {
            t.stopped = true;
        }
        let s = status(ctx, &t).await?;
        if s.state == "running" {
            return Err(ToolError::Failed(format!(
                "{} 还在运行:停不下来(进程 {})",
                a.task_id, t.pid
            )));
        }
        Ok(format!(
            "已停下 {}(进程 {} 和它启动的进程)。",
            a.task_id, t.pid
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race CI hit: the command wrote its last line and ended between the size and the
    /// state read, so a read said "ended, no new output" while output was left. Run against
    /// a real shell: a task that already ended, read from an offset, returns every byte after
    /// it and the exit code; and the state is read before the size.
    #[test]
    fn a_read_of_an_ended_command_returns_all_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let (out, exit) = (dir.path().join("bg.log"), dir.path().join("bg.exit"));
        std::fs::write(&out, "start\nend\n").unwrap();
        std::fs::write(&exit, "0\n").unwrap();
        let t = Task {
            pid: 1,
            pgid: 999_999,
            out,
            exit,
            offset: 6,
            stopped: false,
        };
        let script = read_script(&t, 3);
        assert!(script.find("state=").unwrap() < script.find("size=").unwrap());
        let run = |script: String| {
            let o = std::process::Command::new("bash")
                .arg("-c")
                .arg(script)
                .output()
                .unwrap();
            parse_status(&String::from_utf8(o.stdout).unwrap()).unwrap()
        };
        let s = run(script);
        assert_eq!(
            (s.new_output.as_str(), s.size, s.state.as_str()),
            ("end", 10, "0")
        );
        let s = run(read_script(&t, 100));
        assert_eq!(s.new_output, "end\n");
    }

    #[test]
    fn quotes_any_command_as_one_word() {
        assert_eq!(quote("echo 'a b'"), r#"'echo '\''a b'\'''"#);
    }

    #[test]
    fn the_status_line_is_parsed_from_the_end() {
        let s =
            parse_status("start\n@@flowerbox-bg x\nend\n\n@@flowerbox-bg 10 running\n").unwrap();
        assert_eq!(s.new_output, "start\n@@flowerbox-bg x\nend\n");
        assert_eq!((s.size, s.state.as_str()), (10, "running"));
        assert_eq!(parse_status("no status"), None);
    }

    #[test]
    fn the_read_script_prints_its_status_on_a_line_of_its_own() {
        let t = Task {
            pid: 7,
            pgid: 5,
            out: "/wb/spill/bg-b1.log".into(),
            exit: "/wb/spill/bg-b1.exit".into(),
            offset: 3,
            stopped: false,
        };
        let s = read_script(&t, 100);
        assert!(
            s.contains("tail -c +4 '/wb/spill/bg-b1.log' | head -c \"$n\""),
            "{s}"
        );
        assert!(s.contains("-gt 100 ] && n=100"), "{s}");
        assert!(s.contains("kill -0 -- -5"), "{s}");
        assert!(s.contains("printf '\\n@@flowerbox-bg %s %s\\n'"), "{s}");
    }
}
