//! Real runs under a real terminal: tmux runs `flowerbox --timeout 0 …` (the `go` workflow:
//! clarify → goal → work → judge) against `scripted-model`, and the tests type into it. The
//! worker's first command is a long `sleep`, so the run is in flight while the tests ask the
//! aside oracle, press Ctrl-C, or send SIGTERM. Sandbox `host` by default (no Docker needed);
//! the last test repeats SIGTERM with `--sandbox docker` and checks no container is left.
//!
//! tmux missing: skipped with a message (failure under `CI=true`). Docker missing: the Docker
//! test is skipped the same way.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;
#[path = "term_support/tmux.rs"]
mod tmux;

use model_support::ScriptedModel;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tmux::{tmux_available, Pane};

/// The scenario: the worker sleeps `sleep` seconds in Bash; the coordinator's closing turn
/// streams slowly (`delay_ms` per event) so a run resumed after Ctrl-C is still in flight for
/// a moment; the oracle answers every aside question.
fn scenario(sleep: &str, delay_ms: u64, ask: bool, oracle_delay_ms: u64) -> Value {
    let text = |t: &str| json!({"content": [{"type": "text", "text": t}]});
    let brief = text(
        "## 目标\n写一个 hello.sh\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n无\n\n## 未知与假设\n- 无\n");
    let clarifier = if ask {
        vec![
            json!({"content": [{"type": "tool_use", "name": "mcp__human__ask", "input": {
                "question": "这个工具是给命令行用,还是要有 Web 界面?",
                "options": ["纯命令行", "Web 界面"]}}]}),
            brief,
        ]
    } else {
        vec![brief]
    };
    json!({"agents": [
        {"role": "clarifier", "turns": clarifier},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [text(
            "## 目标\n有 hello.sh\n\n## 判定清单\n- 跑 `./hello.sh` 看到 hello\n")]},
        {"role": "judge", "prompt": "判定这一轮", "turns": [text(
            "## 结论\nACHIEVED\n\n## 理由\n看到了\n\n## 未通过\n无\n")]},
        {"role": "oracle", "turns": [{"content": [{"type": "text", "text": "旁路:执行者还在跑 sleep"}],
                                      "fault": {"delay_ms": oracle_delay_ms}}]},
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "写 hello.sh", "prompt": "写出 hello.sh", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "协调者:收尾了。"}],
             "fault": {"delay_ms": delay_ms}}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command":
                format!("sleep {sleep}; printf 'echo hello\\n' > hello.sh; chmod +x hello.sh")}}]},
            text("结论:写好了\n依据:printf\n产出:hello.sh\n未验证:无")]}
    ]})
}

/// The exit status the pane's shell printed (`rc=N` on a line of its own).
fn exit_code(history: &str) -> Option<i32> {
    history
        .lines()
        .find_map(|l| l.trim().strip_prefix("rc="))
        .and_then(|n| n.trim().parse().ok())
}

/// A project directory, a model, and the pane the run happens in.
struct Live {
    pane: Pane,
    model: ScriptedModel,
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    /// The worker's `sleep` argument: whole seconds plus this process's id as the fraction,
    /// so `pgrep` never mistakes another test process's sleep (other checkouts run the same
    /// test on this machine) for this one's.
    sleep: String,
}

impl Live {
    fn new(name: &str, sleep: u32, delay_ms: u64) -> Live {
        Self::with(name, sleep, delay_ms, false, 0)
    }

    fn with(name: &str, sleep: u32, delay_ms: u64, ask: bool, oracle_delay_ms: u64) -> Live {
        let sleep = format!("{sleep}.{:06}", std::process::id() % 1_000_000);
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ws = root.join("proj");
        let home = root.join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let model = ScriptedModel::start(&scenario(&sleep, delay_ms, ask, oracle_delay_ms));
        let pane = Pane::in_dir(name, Some(&ws), 110, 40);
        Live {
            pane,
            model,
            _tmp: tmp,
            ws,
            home,
            sleep,
        }
    }

    /// Starts `flowerbox --sandbox <sandbox> --timeout 0 写个hello.sh` in the pane and waits
    /// for the worker's sleep.
    fn start(&self, sandbox: &str) {
        self.launch(sandbox, "0");
        self.wait_for_sleep();
    }

    /// Starts `flowerbox --sandbox <sandbox> --timeout <timeout> 写个hello.sh` in the pane.
    fn launch(&self, sandbox: &str, timeout: &str) {
        let cmd = format!(
            "env -i PATH=\"$PATH\" TERM=\"$TERM\" HOME={home} FLOWER_NO_PROBE=1 \
             ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=sk-ant-test \
             ANTHROPIC_MODEL=claude-sonnet-4-5 {bin} --sandbox {sandbox} --timeout {timeout} \
             写个hello.sh",
            home = self.home.display(),
            url = self.model.url,
            bin = env!("CARGO_BIN_EXE_flowerbox"),
        );
        self.pane.run_recorded(&cmd);
    }

    fn wait_for_sleep(&self) {
        let marker = format!("* Bash sleep {}", self.sleep);
        self.pane
            .wait_for("the worker's sleep", |h| h.contains(&marker));
        self.pane.wait_for("the resident prompt", |_| {
            self.pane.last_line().starts_with("(直接说 = 加需求")
        });
    }

    fn manifest(&self, rel: &str) -> Vec<Value> {
        let path = self.ws.join("runs").join(rel);
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    fn row(&self, step: &str) -> Value {
        self.manifest("manifest.json")
            .into_iter()
            .find(|r| r["step"] == step)
            .unwrap_or_else(|| panic!("no {step} row"))
    }

    /// The flowerbox process in the pane (the shell's child).
    fn pid(&self) -> i32 {
        let out = Command::new("pgrep")
            .args(["-P", &self.pane.shell_pid().to_string(), "-x", "flowerbox"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("flowerbox pid")
    }

    /// The worker's `sleep` is gone (its process group was killed).
    fn sleep_gone(&self) {
        let pattern = format!("^sleep {}$", self.sleep);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new("pgrep")
                .args(["-f", &pattern])
                .output()
                .unwrap();
            if out.stdout.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sleep survived: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn live_aside_questions_and_ctrl_c_then_enter_lets_the_run_finish() {
    if !tmux_available() {
        return;
    }
    let l = Live::new("live-aside", 41, 300);
    l.start("host");
    let p = &l.pane;
    p.type_text("? 进度如何");
    p.keys(&["Enter"]);
    p.wait_for("first aside answer", |h| {
        h.matches("旁路:执行者还在跑 sleep").count() == 1
    });
    p.type_text("？还要多久");
    p.keys(&["Enter"]);
    let h = p.wait_for("second aside answer", |h| {
        h.matches("旁路:执行者还在跑 sleep").count() == 2
    });
    assert_eq!(h.matches("# 旁路\n").count(), 2, "{h}");
    assert!(h.contains("没有打扰正在跑的运行)"));
    // Their own books: two rows in aside/manifest.json, none in the main manifest.
    let aside = l.manifest("aside/manifest.json");
    let steps: Vec<&str> = aside.iter().map(|r| r["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["旁路问答#1", "旁路问答#2"]);
    assert!(l.ws.join("runs/aside/sessions.db").exists());
    assert!(l
        .manifest("manifest.json")
        .iter()
        .all(|r| !r["step"].as_str().unwrap().starts_with("旁路")));

    // Ctrl-C interrupts the round (the worker's sleep is killed), Enter carries on.
    p.keys(&["C-c"]);
    p.wait_for("the Ctrl-C prompt", |h| {
        h.contains("! 已打断这一轮。正在跑的 subagent 会丢掉半成品。")
    });
    p.keys(&["Enter"]);
    let h = p.wait_for("the end", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(0), "{h}");
    assert!(h.contains("协调者:收尾了。"));
    assert!(h.contains("总花费 $"));
    l.sleep_gone();
    p.stty_unchanged();
    assert!(l.manifest("manifest.json").iter().all(|r| r["ok"] == true));
}

#[test]
fn live_question_is_answered_from_the_terminal_by_its_option_number() {
    if !tmux_available() {
        return;
    }
    let l = Live::with("live-ask", 45, 300, true, 0);
    l.launch("host", "60");
    let p = &l.pane;
    p.wait_for("the question", |h| {
        h.contains("  ? 这个工具是给命令行用,还是要有 Web 界面?")
            && h.contains("     1) 纯命令行")
            && h.contains("     2) Web 界面")
    });
    p.wait_for("the answer prompt", |_| {
        p.last_line()
            .starts_with("你的回答 (回车=跳过,让它自己判断) >")
    });
    p.type_text("1");
    p.keys(&["Enter"]);
    p.wait_for("answered", |h| h.contains("  + 纯命令行"));
    l.wait_for_sleep();
    // Unprompted text goes to the inbox and into the brief.
    p.type_text("顺便打印字节数");
    p.keys(&["Enter"]);
    p.wait_for("receipt", |h| {
        h.contains("+ 收到 (它下次查收件箱时会看到;已追加进确认书)")
    });
    let brief = std::fs::read_to_string(l.ws.join(".flower/notes/需求.md")).unwrap();
    assert!(brief.contains("顺便打印字节数"), "{brief}");
    let qa = std::fs::read_to_string(l.ws.join(".flower/notes/问答记录.md")).unwrap();
    assert!(qa.contains("纯命令行"), "{qa}");
    p.keys(&["C-c"]);
    p.wait_for("the Ctrl-C prompt", |h| h.contains("! 已打断这一轮。"));
    p.keys(&["C-c"]);
    let h = p.wait_for("the exit", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(130), "{h}");
    l.sleep_gone();
    p.stty_unchanged();
}

#[test]
fn live_ctrl_c_twice_exits_130_with_the_step_recorded() {
    if !tmux_available() {
        return;
    }
    // The coordinator's resumed turn streams for a while, so the second press finds it.
    let l = Live::new("live-quit", 42, 2000);
    l.start("host");
    let p = &l.pane;
    p.type_text("半句话");
    p.keys(&["C-c"]);
    p.wait_for("the Ctrl-C prompt", |h| h.contains("! 已打断这一轮。"));
    p.keys(&["C-c"]);
    let h = p.wait_for("the exit", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(130), "{h}");
    assert!(!h.contains("panicked") && !h.contains("内部错误"), "{h}");
    assert_eq!(l.row("干活")["error"], "interrupted-by-human");
    assert_eq!(l.row("干活")["ok"], false);
    l.sleep_gone();
    p.stty_unchanged();
}

#[test]
fn live_sigterm_exits_143_with_killed_by_signal_and_a_sane_terminal() {
    if !tmux_available() {
        return;
    }
    let l = Live::new("live-term", 43, 300);
    l.start("host");
    l.pane.type_text("打了一半");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(l.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let h = l.pane.wait_for("the exit", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(143), "{h}");
    assert_eq!(l.row("干活")["error"], "killed-by-signal");
    l.sleep_gone();
    l.pane.stty_unchanged();
}

#[test]
fn live_exit_waits_for_a_pending_aside_answer_but_sigterm_does_not() {
    if !tmux_available() {
        return;
    }
    // Normal end: the oracle takes a few seconds, the run ends first, the console waits.
    let l = Live::with("live-wait", 2, 0, false, 400);
    l.start("host");
    let p = &l.pane;
    p.type_text("? 慢慢答");
    p.keys(&["Enter"]);
    let h = p.wait_for("the end", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(0), "{h}");
    let at = |s: &str| h.find(s).unwrap_or_else(|| panic!("no {s:?} in\n{h}"));
    assert!(at("(等 1 条旁路问答收尾…)") < at("旁路:执行者还在跑 sleep"));
    assert!(at("旁路:执行者还在跑 sleep") < at("总花费 $"));
    p.stty_unchanged();

    // SIGTERM with an answer still coming: no waiting, straight out by the signal.
    let l = Live::with("live-nowait", 46, 0, false, 5000);
    l.start("host");
    l.pane.type_text("? 很慢的问题");
    l.pane.keys(&["Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(l.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let h = l.pane.wait_for("the exit", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(143), "{h}");
    assert!(!h.contains("旁路问答收尾"), "{h}");
    l.sleep_gone();
    l.pane.stty_unchanged();
}

/// Whether the Docker engine answers; panics under `CI=true` when it does not.
fn docker_available() -> bool {
    let ok = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("the Docker engine is required for the Docker terminal test under CI");
        }
        eprintln!("SKIPPED: no Docker engine; the Docker terminal test did not run");
    }
    ok
}

/// Containers (running or not) labelled with this workspace.
fn containers_of(ws: &Path) -> String {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=flowerbox.workspace={}", ws.display()),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether a worker's container of this workspace is running.
fn worker_running(ws: &Path) -> bool {
    let out = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=flowerbox.workspace={}", ws.display()))
        .args(["--filter", "label=flowerbox.role=worker"])
        .output()
        .unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

#[test]
fn live_docker_sigterm_leaves_no_container() {
    if !tmux_available() || !docker_available() {
        return;
    }
    let l = Live::new("live-docker", 44, 300);
    l.start("docker");
    // The Bash call shows before its container runs (the run's network and fence come first):
    // wait for the worker's container, so the signal lands while the worker is in it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !worker_running(&l.ws) {
        assert!(
            Instant::now() < deadline,
            "the worker should be in a container"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(l.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let h = l.pane.wait_for("the exit", |h| exit_code(h).is_some());
    assert_eq!(exit_code(&h), Some(143), "{h}");
    assert_eq!(l.row("干活")["error"], "killed-by-signal");
    assert_eq!(containers_of(&l.ws), "", "containers left behind");
    l.pane.stty_unchanged();
}
