//! Shared setup of the red-team tests that attack through the real `flowerbox` binary on the
//! real engine (`redteam_creds`, `redteam_files`, `redteam_resources`, `redteam_terminal`):
//! the binary under attack (`FLOWERBOX_REDTEAM_BIN` for a baseline build), the user's command
//! line and configuration, a run measured for hangs and peak memory, the `go` scenario a
//! hostile worker is dispatched in, and what a test counts. The engine gate and the sweep are
//! `docker_support`'s ([`engine_ready`](crate::docker_support::engine_ready),
//! [`Sweep`](crate::docker_support::Sweep)).
//!
//! Included with `mod` by crates that also include `flow_support` at their root.
#![allow(dead_code)]

use crate::flow_support::{Project, ScriptedModel};
use serde_json::{json, Value};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under attack: this build, or `FLOWERBOX_REDTEAM_BIN`.
pub fn bin() -> PathBuf {
    std::env::var_os("FLOWERBOX_REDTEAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_flowerbox")))
}

/// The binary under attack run as the user in `p`: a cleared environment but PATH, HOME the
/// project's, the workspace the current directory.
pub fn user_command(p: &Project) -> Command {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &p.home)
        .current_dir(&p.ws);
    c
}

/// [`user_command`] against `model`, the probe off: its address, a test key and a model name
/// in the environment.
pub fn model_command(p: &Project, model: &ScriptedModel) -> Command {
    let mut c = user_command(p);
    c.env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5");
    c
}

/// The user's own configuration (what `flowerbox setup` writes): `key`, pointing at `model`.
pub fn user_file(p: &Project, model: &ScriptedModel, key: &str) {
    write_user_file(
        p,
        &format!(
            "ANTHROPIC_API_KEY={key}\nANTHROPIC_BASE_URL={}\nANTHROPIC_MODEL=claude-sonnet-4-5\n",
            model.url
        ),
    );
}

/// Writes `text` as the user's own configuration file in `p`'s HOME; returns its path.
pub fn write_user_file(p: &Project, text: &str) -> PathBuf {
    let path = p.home.join(".config/flower/.env");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// How one flowerbox process ended.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    /// stdout, a newline, stderr.
    pub text: String,
    /// It ran over its bound and was killed.
    pub hung: bool,
    /// Its peak resident memory, KiB.
    pub max_rss_kb: i64,
}

/// Runs `c` (its output piped; `stdin` written to it, or none), killed once past `bound`; its
/// peak resident memory measured: the process's own high-water mark (`VmHWM`, which starts
/// afresh at exec; a wait's `ru_maxrss` would start at this test process's size), polled until
/// it exits.
pub fn measured(mut c: Command, bound: Duration, stdin: Option<&str>) -> Outcome {
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn flowerbox");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        let _ = pipe.write_all(text.as_bytes());
    }
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + bound;
    let mut hung = false;
    let status_file = format!("/proc/{}/status", child.id());
    let mut rss = 0i64;
    let status = loop {
        if let Some(kb) = std::fs::read_to_string(&status_file).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        }) {
            rss = rss.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline && !hung {
            hung = true;
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.join().unwrap_or_default()),
        String::from_utf8_lossy(&err.join().unwrap_or_default())
    );
    Outcome {
        code: status.code(),
        text,
        hung,
        max_rss_kb: rss,
    }
}

/// A `tool_use` block.
pub fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

/// A Bash `tool_use` block running `command`.
pub fn bash(command: &str) -> Value {
    tool("Bash", json!({"command": command}))
}

/// A turn that only says `t`.
pub fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}

/// A worker's four-part report.
pub const REPORT: &str = "结论:好\n依据:无\n产出:无\n未验证:无";

/// What a `go` scenario's brief and goal say: the task the coordinator dispatches (also the
/// worker's prompt), the brief's acceptance criterion, the goal and its checklist item.
pub struct Ask {
    pub task: &'static str,
    pub criterion: &'static str,
    pub goal: &'static str,
    pub item: &'static str,
}

/// A `go` scenario: the brief, the goal, a coordinator that dispatches one worker with
/// `worker_turns` for `ask.task`, judges that pass; then the `more` agents. Text agents answer
/// the same whatever turn they are asked for (a wake resumes them).
pub fn go_scenario(ask: &Ask, worker_turns: Vec<Value>, more: Vec<Value>) -> Value {
    let many = |t: &str| vec![text(t); 4];
    let mut agents = vec![
        json!({"role": "clarifier", "turns": many(&format!(
            "## 目标\n做 X\n\n## 验收标准\n- {}\n\n## 边界\n无\n\n## 未知与假设\n- 无\n",
            ask.criterion))}),
        json!({"role": "judge", "prompt": "变成可判定的目标", "turns": many(&format!(
            "## 目标\n{}\n\n## 判定清单\n- {}\n", ask.goal, ask.item))}),
        json!({"role": "judge", "prompt": "判定这一轮", "turns": many(
            "## 结论\nACHIEVED\n\n## 理由\n看到了\n\n## 未通过\n无\n")}),
        json!({"role": "coordinator", "turns": [
            {"content": [tool("Agent", json!({
                "description": ask.task, "prompt": ask.task, "subagent_type": "coder"}))]},
            text("完成"), text("完成"), text("完成")]}),
        json!({"role": "worker", "prompt": ask.task, "turns": worker_turns}),
    ];
    agents.extend(more);
    json!({ "agents": agents })
}

/// The ask of the tests whose worker plants something and leaves `x.txt`.
pub const PLANT_X: Ask = Ask {
    task: "埋雷",
    criterion: "有 x.txt",
    goal: "工作区有 x.txt",
    item: "`test -e x.txt` 成功",
};

/// Makes the workspace of `p` a repository with an identity and one commit (`runs/`
/// ignored), for `--isolate`.
pub fn repository(p: &Project) {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Test User"],
        &["config", "user.email", "test@example.invalid"],
    ] {
        flowerbox_testkit::git(&p.ws, args);
    }
    std::fs::write(p.ws.join(".gitignore"), "runs/\n").unwrap();
    flowerbox_testkit::git(&p.ws, &["add", "."]);
    flowerbox_testkit::git(&p.ws, &["commit", "-q", "-m", "init"]);
}

/// What a red-team test counts: attempts, the attacks that succeeded, and what a run must do
/// besides resisting that it did not.
#[derive(Default)]
pub struct Tally {
    pub attempts: usize,
    pub successes: Vec<String>,
    pub unmet: Vec<String>,
}

impl Tally {
    /// Something a run must do besides resisting.
    pub fn expect(&mut self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        if !ok {
            self.unmet.push(format!("{what}: {}", detail()));
        }
    }

    /// The counts as one line: `N attempts, N succeeded{extra}; N other expectations unmet`.
    pub fn line(&self, extra: &str) -> String {
        format!(
            "{} attempts, {} succeeded{extra}; {} other expectations unmet",
            self.attempts,
            self.successes.len(),
            self.unmet.len()
        )
    }

    /// Fails on any success or unmet expectation.
    pub fn assert_clean(self) {
        assert!(self.successes.is_empty(), "{:#?}", self.successes);
        assert!(self.unmet.is_empty(), "{:#?}", self.unmet);
    }
}
