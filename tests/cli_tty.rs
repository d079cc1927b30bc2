//! The start prompt and first-run configuration on a real terminal: the binary's stdin is the
//! slave side of a pseudo-terminal, the test types on the master side (Enter, Ctrl-D) or sends
//! SIGINT, and reads stdout/stderr through pipes.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod cli_support;
use cli_support::{write, Scene};

#[path = "model_support/mod.rs"]
mod model_support;
use model_support::ScriptedModel;

const FRESH: &str = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)\n> ";
const WOKEN: &str = "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)\n> ";

/// Starts `flowerbox ARGS` in `s` with a terminal on stdin. `env` adds variables to PATH + HOME.
fn start(s: &Scene, args: &[&str], env: &[(&str, &str)]) -> Tty {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut cmd = s.flowerbox();
    cmd.args(args)
        .stdin(Stdio::from(pty.slave))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let out = pump(child.stdout.take().unwrap());
    let err = pump(child.stderr.take().unwrap());
    let master = File::from(pty.master);
    // What the terminal itself shows of the typing (its echo), read from the master side.
    let echo = pump(master.try_clone().unwrap());
    Tty {
        child,
        master,
        out,
        err,
        echo,
    }
}

/// A key that passes the gate without a probe, and a model endpoint the run context refuses to
/// build, so a request that reaches `go` stops there without any network or sandbox.
const KEY: [(&str, &str); 3] = [
    ("ANTHROPIC_API_KEY", "sk-ant-tty-key-0123456789"),
    ("FLOWER_NO_PROBE", "1"),
    ("ANTHROPIC_BASE_URL", "notaurl"),
];

/// The start of the error a request that reached `go`'s run context gets with [`KEY`].
const REACHED_GO: &str = "bad endpoint URL notaurl";

/// A brief with all four sections: the directory wakes.
const COMPLETE_BRIEF: &str =
    "## 目标\n做 X\n## 验收标准\n跑得起来\n## 边界\n不做 Y\n## 未知与假设\n无\n";

struct Tty {
    child: Child,
    master: File,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    echo: Arc<Mutex<Vec<u8>>>,
}

fn pump(mut from: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    buf
}

impl Tty {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Waits until stdout contains `text` (generous bound: a hang fails, speed is not tested).
    fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.stdout().contains(text) {
            assert!(
                Instant::now() < deadline,
                "never saw {text:?}; stdout so far: {:?}, stderr: {:?}",
                self.stdout(),
                String::from_utf8_lossy(&self.err.lock().unwrap())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the terminal echoed of the typing so far.
    fn echo(&self) -> String {
        String::from_utf8_lossy(&self.echo.lock().unwrap()).into_owned()
    }

    fn type_keys(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits for exit; returns (status, stdout, stderr).
    fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("flowerbox did not exit; stdout: {:?}", self.stdout());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Let the pumps drain.
        std::thread::sleep(Duration::from_millis(100));
        let out = self.stdout();
        let err = String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned();
        (status, out, err)
    }
}

#[test]
fn bare_enter_on_a_fresh_directory() {
    let s = Scene::new();
    let mut tty = start(&s, &[], &KEY);
    tty.wait_for(FRESH);
    tty.type_keys(b"\n");
    let (status, out, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    assert!(out.starts_with(FRESH), "{out}");
    assert_eq!(
        err,
        "诉求是空的。直接 `flowerbox` 然后按提示输入,或者 flowerbox \"帮我做一个 X\"。\n"
    );
}

#[test]
fn ctrl_d_cancels() {
    let s = Scene::new();
    let mut tty = start(&s, &[], &KEY);
    tty.wait_for(FRESH);
    tty.type_keys(&[0x04]);
    let (status, _, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    assert_eq!(err, "已取消\n");
    assert!(
        !s.cwd.join("runs").exists(),
        "cancelled, yet a runs/ was made"
    );
}

#[test]
fn ctrl_c_cancels_cleanly() {
    let s = Scene::new();
    let tty = start(&s, &["--new"], &KEY);
    tty.wait_for(FRESH);
    kill(Pid::from_raw(tty.child.id() as i32), Signal::SIGINT).unwrap();
    let (status, _, err) = tty.finish();
    assert_eq!(status.signal(), None, "must not die by the signal");
    assert_eq!(status.code(), Some(1));
    assert_eq!(err, "已取消\n");
}

#[test]
fn typed_request_reaches_the_runtime_seam() {
    let s = Scene::new();
    let mut tty = start(&s, &[], &KEY);
    tty.wait_for(FRESH);
    tty.type_keys("帮我做一个 “X”!\n".as_bytes());
    let (status, _, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    // On a terminal there is no "stdin is not a terminal" warning.
    assert!(!err.contains("标准输入不是终端"), "{err}");
    assert!(err.starts_with(REACHED_GO), "{err}");
}

#[test]
fn woken_directory_offers_to_continue_and_new_starts_over() {
    let s = Scene::new();
    write(&s.cwd.join(".flower/notes/需求.md"), COMPLETE_BRIEF);
    let mut tty = start(&s, &[], &KEY);
    tty.wait_for(WOKEN);
    tty.type_keys(b"/new\n");
    tty.wait_for(FRESH);
    tty.type_keys(b"\n");
    let (status, out, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    assert_eq!(out, format!("{WOKEN}{FRESH}"));
    assert!(err.starts_with("诉求是空的。"), "{err}");

    // Bare Enter on a woken directory is "continue": it goes on to the runtime.
    let mut tty = start(&s, &[], &KEY);
    tty.wait_for(WOKEN);
    tty.type_keys(b"\n");
    let (status, _, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    assert!(err.starts_with(REACHED_GO), "{err}");
}

#[test]
fn first_run_asks_for_credentials_then_for_the_request() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scene::new();
    let mut tty = start(
        &s,
        &[],
        &[("FLOWER_NO_PROBE", "1"), ("ANTHROPIC_BASE_URL", "notaurl")],
    );
    tty.wait_for("还没配过凭证。");
    tty.wait_for("1. 你的 API key 或网关 token");
    tty.type_keys(b"gw-token-from-tty\n");
    tty.wait_for("2. 网关地址");
    tty.type_keys(b"\n");
    tty.wait_for("3. 模型名");
    tty.type_keys(b"gw-model\n");
    tty.wait_for("+ 存好了:");
    tty.wait_for(FRESH);
    tty.type_keys(b"do it\n");
    let (status, _, err) = tty.finish();
    assert_eq!(status.code(), Some(1));
    assert!(err.starts_with(REACHED_GO), "{err}");
    let file = s.home.join(".config/flower/.env");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("ANTHROPIC_AUTH_TOKEN=gw-token-from-tty\n"),
        "{text}"
    );
    assert!(text.contains("ANTHROPIC_MODEL=gw-model\n"), "{text}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn setup_does_not_echo_the_token() {
    let s = Scene::new();
    let mut tty = start(&s, &["setup"], &[]);
    tty.wait_for("1. 你的 API key 或网关 token");
    tty.type_keys(b"gw-secret-token-typed\n");
    tty.wait_for("2. 网关地址");
    tty.type_keys(b"http://gw.example\n");
    tty.wait_for("3. 模型名");
    tty.type_keys(b"gw-model\n");
    tty.wait_for("+ 存好了:");
    // The terminal echoed the gateway and the model as typed, never the token.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tty.echo().contains("gw-model") {
        assert!(Instant::now() < deadline, "no echo: {:?}", tty.echo());
        std::thread::sleep(Duration::from_millis(20));
    }
    let echo = tty.echo();
    assert!(echo.contains("http://gw.example"), "{echo:?}");
    assert!(!echo.contains("secret"), "the token was echoed: {echo:?}");
    let (status, out, err) = tty.finish();
    assert_eq!(status.code(), Some(0), "{out}{err}");
    assert!(!out.contains("secret"), "{out}");
    let text = std::fs::read_to_string(s.home.join(".config/flower/.env")).unwrap();
    assert!(
        text.contains("ANTHROPIC_AUTH_TOKEN=gw-secret-token-typed\n"),
        "{text}"
    );
}

#[test]
fn probe_runs_on_a_terminal_and_net_trouble_is_let_through() {
    let s = Scene::new();
    // A closed port: the probe cannot connect, which is "net", not a reason to reconfigure.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let mut tty = start(
        &s,
        &[],
        &[
            ("ANTHROPIC_AUTH_TOKEN", "tok-0123456789"),
            ("ANTHROPIC_BASE_URL", &base),
        ],
    );
    tty.wait_for("- 验一下凭证…\n  (探针没打通:");
    tty.wait_for(" —— 当作网络问题,照常开跑)\n");
    tty.wait_for(FRESH);
    tty.type_keys(&[0x04]);
    let (status, _, err) = tty.finish();
    assert_eq!((status.code(), err.as_str()), (Some(1), "已取消\n"));
}

/// A model server that refuses every request with 401, as a revoked key gets.
fn refusing_model() -> ScriptedModel {
    ScriptedModel::start(
        &serde_json::json!({"agents": [{"role": "clarifier", "turns": [
        {"content": [{"type": "text", "text": "不会到这里"}],
         "fault": {"status": 401, "error_type": "authentication_error",
                   "message": "invalid x-api-key"}}]}]}),
    )
}

/// Seed 000 "跑挂了之后的自动重配": a 401 in the middle of a run, on a terminal, offers the setup
/// questions, says to run again, and exits 1 all the same.
#[test]
fn a_401_during_the_run_offers_to_reconfigure_on_a_terminal() {
    let s = Scene::new();
    let model = refusing_model();
    let mut tty = start(
        &s,
        &["--sandbox", "host", "--timeout", "0", "写个 hello.sh"],
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-revoked-0123456789"),
            ("FLOWER_NO_PROBE", "1"),
            ("ANTHROPIC_BASE_URL", &model.url),
            ("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
        ],
    );
    tty.wait_for("! 看起来是凭证不对:凭证被拒 (HTTP 401)");
    tty.wait_for("1. 你的 API key 或网关 token");
    tty.type_keys(b"gw-fresh-token-0123\n");
    tty.wait_for("2. 网关地址");
    tty.type_keys(b"\n");
    tty.wait_for("3. 模型名");
    tty.type_keys(b"\n");
    tty.wait_for("配好了。再跑一次刚才的命令 —— 同一目录会接着上次。");
    let (status, out, err) = tty.finish();
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(err.contains("在步骤 '确认需求' 中止"), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("! 看起来是凭证不对:"))
        .unwrap();
    assert!(
        line.chars().count() <= "! 看起来是凭证不对:".chars().count() + 120,
        "{line}"
    );
    let env = std::fs::read_to_string(s.home.join(".config/flower/.env")).unwrap();
    assert!(
        env.contains("ANTHROPIC_AUTH_TOKEN=gw-fresh-token-0123\n"),
        "{env}"
    );
}

/// The same without a terminal: nobody can answer the questions, so exit 1 with the seed's
/// refusal message.
#[test]
fn a_401_during_the_run_without_a_terminal_says_to_run_setup() {
    let s = Scene::new();
    let model = refusing_model();
    let out = s
        .flowerbox()
        .args(["--sandbox", "host", "--timeout", "0", "写个 hello.sh"])
        .env("ANTHROPIC_API_KEY", "sk-ant-revoked-0123456789")
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("凭证被拒,且无法交互配置。跑 `flowerbox setup` 重配。"),
        "{err}"
    );
    assert!(!s.home.join(".config/flower/.env").exists());
}
