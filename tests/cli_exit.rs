//! The real binary's exit codes and stderr messages (seed 000, "退出码"): every code and every
//! exit-1 message reachable without a model. Each test runs `flowerbox` in a temporary
//! directory with a cleared environment and a temporary HOME, so nothing from this machine's
//! credentials leaks in.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;

use assert_cmd::assert::IntoOutputPredicate;
use assert_cmd::Command;
use predicates::prelude::*;
use predicates::BoxPredicate;

mod cli_support;
use cli_support::{write, Scene};

/// As [`Scene::cmd`], with a token so the credential gate passes (no probe: not a tty), and
/// a model endpoint the run context refuses ([`REACHED_RUN`]): a command that gets past the
/// command line stops there, without network or sandbox.
fn cmd_with_key(s: &Scene) -> Command {
    let mut c = s.cmd();
    c.env("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
        .env("ANTHROPIC_BASE_URL", "notaurl");
    c
}

/// What a command that reached its run context prints with [`cmd_with_key`].
const REACHED_RUN: &str = "bad endpoint URL notaurl";

/// [`cmd_with_key`] with `args` exits `code`, its stderr as `stderr` says (a string: exactly).
fn exits<I, P>(s: &Scene, args: &[&str], code: i32, stderr: I)
where
    I: IntoOutputPredicate<P>,
    P: Predicate<[u8]>,
{
    cmd_with_key(s)
        .args(args)
        .assert()
        .code(code)
        .stderr(stderr);
}

/// No panic text, no backtrace, ever.
fn clean() -> impl Predicate<str> {
    predicate::str::contains("panicked")
        .or(predicate::str::contains("RUST_BACKTRACE"))
        .or(predicate::str::contains("stack backtrace"))
        .not()
}

#[test]
fn help_exits_0_and_reads_well() {
    let s = Scene::new();
    s.cmd()
        .arg("--help")
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("Usage: flowerbox [OPTIONS] <COMMAND>")
                .and(predicate::str::contains("go "))
                .and(predicate::str::contains("setup "))
                .and(predicate::str::contains("doctor "))
                .and(predicate::str::contains("全局开关"))
                .and(predicate::str::contains("六种能用的写法")),
        )
        .stderr("");
}

#[test]
fn go_help_lists_its_switches_and_the_globals() {
    let s = Scene::new();
    let out = s
        .cmd()
        .args(["go", "--help"])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for switch in [
        "--asks",
        "--rounds",
        "--no-goal",
        "--judge-can-run",
        "--timeout",
        "--isolate",
        "--window",
        "--no-handoff",
        "--new",
        "--clarify-only",
        "--no-trim",
        "--workspace",
        "--run-dir",
        "--verbose",
        "--workbench",
        "--trim",
        "--sandbox",
        "--image",
        "--max-workers",
    ] {
        assert!(out.contains(switch), "go --help lacks {switch}:\n{out}");
    }
    // -h anywhere leaves argv alone: after global switches it is the top-level help.
    s.cmd()
        .args(["-w", "elsewhere", "-h"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "Usage: flowerbox [OPTIONS] <COMMAND>",
        ));
    assert!(
        !s.cwd.join("elsewhere").exists(),
        "help must not create the workspace"
    );
}

#[test]
fn run_help_points_to_the_workflow_file_format() {
    let s = Scene::new();
    s.cmd().args(["run", "--help"]).assert().code(0).stdout(
        predicate::str::contains("README 的「Workflow files」")
            .and(predicate::str::contains("examples/flows.toml")),
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains("\n## Workflow files\n"),
        "the section it points to exists"
    );
}

#[test]
fn once_help_says_websearch_is_unavailable() {
    let s = Scene::new();
    s.cmd().args(["once", "--help"]).assert().code(0).stdout(
        predicate::str::contains("WebSearch 不可用")
            .and(predicate::str::contains("--permission-mode"))
            .and(predicate::str::contains("--fork"))
            .and(predicate::str::contains("全局开关")),
    );
}

#[test]
fn argument_errors_exit_2() {
    let s = Scene::new();
    for args in [
        vec!["--bogus"],
        vec!["run"],
        vec!["once"],
        vec!["once", "hi", "-p", "yolo"],
        vec!["once", "hi", "--fork"],
        vec!["go", "--rounds", "many"],
        vec!["--sandbox", "vm", "做 X"],
        vec!["-w"],
    ] {
        exits(&s, &args, 2, predicate::str::is_empty().not().and(clean()));
    }
}

#[test]
fn a_repeated_switch_keeps_its_last_value() {
    // flower keeps the last value (aliases and wrapper scripts rely on it): the run starts.
    let s = Scene::new();
    cmd_with_key(&s)
        .args([
            "--window",
            "0",
            "--timeout",
            "0",
            "做 X",
            "--window",
            "5",
            "--timeout",
            "5",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(REACHED_RUN).and(clean()));
}

/// Switch values that cannot work together or at all: exit 2, saying which. A failed case is
/// named by its command line in the assertion's message.
#[test]
fn contradictory_switches_exit_2_and_say_why() {
    let s = Scene::new();
    let cases: [(&[&str], BoxPredicate<str>); 3] = [
        (
            &["做 X", "--window", "0"],
            predicate::str::starts_with("--window 0 不行")
                .and(clean())
                .boxed(),
        ),
        (
            &["-T", "做 X", "--no-trim"],
            predicate::str::contains("--no-trim").boxed(),
        ),
        (
            &["once", "hi", "-t", "Read,WebSearch"],
            predicate::str::contains("WebSearch 不可用").boxed(),
        ),
    ];
    for (args, says) in cases {
        exits(&s, args, 2, says);
    }
}

#[test]
fn missing_credentials_prints_the_four_lines() {
    let s = Scene::new();
    let expected = format!(
        "缺少凭证:需要 ANTHROPIC_API_KEY 或 ANTHROPIC_AUTH_TOKEN。\n\
         最省事:跑一次 `flowerbox setup`,把 token 存到 {}(装一次,处处生效)。\n\
         或者:在当前目录建 `.env`,或 export 进进程环境。\n\
         flowerbox 也会读 ~/.claude/settings.json 和 settings.local.json 的 env 块(只借其中 9 个凭证键),那里也没有。\n",
        s.home.join(".config/flower/.env").display()
    );
    for args in [vec!["做 X"], vec!["once", "hi"]] {
        s.cmd()
            .args(&args)
            .assert()
            .code(1)
            .stderr(expected.clone());
    }
    std::fs::write(
        s.cwd.join("flows.toml"),
        "[main]\n[[main.steps]]\nname = \"看\"\nrole = \"worker\"\nprompt = \"看一眼\"\n",
    )
    .unwrap();
    s.cmd()
        .args(["run", "flows.toml:main"])
        .assert()
        .code(1)
        .stderr(expected);
}

/// `run` checks the whole declaration before the credentials (README "Differences from
/// flower"): a workflow without steps is named as such on a machine with no token at all.
#[test]
fn run_checks_its_workflow_before_the_credentials() {
    let s = Scene::new();
    std::fs::write(s.cwd.join("flows.toml"), "[main]\n").unwrap();
    s.cmd()
        .args(["run", "flows.toml:main"])
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with("导入 'flows.toml' 失败:'main' steps:").and(clean()));
}

#[test]
fn empty_piped_request_on_a_fresh_directory() {
    let s = Scene::new();
    exits(
        &s,
        &["--timeout", "0"],
        1,
        "要给一句诉求,例如 flowerbox '帮我做一个 X'\n",
    );
}

#[test]
fn piped_request_is_read_and_warned_about() {
    let s = Scene::new();
    cmd_with_key(&s)
        .write_stdin("帮我做一个 X\n")
        .assert()
        .code(1)
        .stdout("> \n")
        .stderr(
            predicate::str::contains(
                "! 标准输入不是终端,没人能回答提问。想让它自己判断就加 --timeout 0",
            )
            .and(predicate::str::contains(REACHED_RUN))
            .and(clean()),
        );
    // With --timeout 0 the advice is already followed: no warning.
    cmd_with_key(&s)
        .args(["--timeout", "0"])
        .write_stdin("帮我做一个 X\n")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("标准输入不是终端").not());
}

#[test]
fn woken_directory_continues_on_empty_piped_input() {
    let s = Scene::new();
    write(
        &s.cwd.join(".flower/notes/需求.md"),
        "## 目标\n做 X\n## 验收标准\n跑得起来\n## 边界\n不做 Y\n## 未知与假设\n无\n",
    );
    exits(
        &s,
        &["--timeout", "0"],
        1,
        predicate::str::contains(REACHED_RUN),
    );
    // A brief without its four sections does not wake the directory.
    write(&s.cwd.join(".flower/notes/需求.md"), "## 目标\n做 X\n");
    exits(
        &s,
        &["--timeout", "0"],
        1,
        "要给一句诉求,例如 flowerbox '帮我做一个 X'\n",
    );
}

#[test]
fn isolate_outside_git_is_exit_1() {
    let s = Scene::new();
    exits(&s, &["做 X", "--isolate"], 1, format!(
            "--isolate 要求 {} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。\n",
            s.cwd.display()
        ));
}

#[test]
fn run_target_errors() {
    let s = Scene::new();
    write(&s.cwd.join("flows.toml"), "[main]\nsteps = []\n");
    write(&s.cwd.join("broken.toml"), "[main\n");
    exits(
        &s,
        &["run", "flows"],
        1,
        "需要模块:属性形式,例如 flows:main\n",
    );
    exits(&s, &["run", "missing.toml:main"], 1, format!(
            "找不到 missing.toml(当前目录 {})。给的是文件路径就要能对上;要按模块名导入就别带 .toml\n",
            s.cwd.display()
        ));
    exits(
        &s,
        &["run", "broken.toml:main"],
        1,
        predicate::str::starts_with("导入 'broken.toml' 失败:").and(clean()),
    );
    exits(&s, &["run", "flows:nope"], 1, "'flows' 里没有 'nope'\n");
    // A workflow without steps is refused before anything runs, naming the field.
    exits(
        &s,
        &["run", "flows.toml:main"],
        1,
        predicate::str::starts_with("导入 'flows.toml' 失败:'main' steps:").and(clean()),
    );
}

#[test]
fn a_failed_or_cancelled_start_and_doctor_leave_no_run_directory() {
    let s = Scene::new();
    // No token.
    s.cmd().args(["做 X"]).assert().code(1);
    // Nothing asked, nothing to continue.
    cmd_with_key(&s).args(["--timeout", "0"]).assert().code(1);
    // --isolate outside git.
    cmd_with_key(&s)
        .args(["做 X", "--isolate"])
        .assert()
        .code(1);
    // doctor and gc look, and write nothing.
    for cmd in ["doctor", "gc"] {
        cmd_with_key(&s)
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .arg(cmd)
            .assert()
            .code(1);
    }
    assert!(!s.cwd.join("runs").exists(), "a runs/ was left behind");
}

/// An engine that cannot serve the run (here a `DOCKER_HOST` with no socket) stops `go`, `run`
/// and a `once` that can run commands before anything of the run is written: no `runs/`, no
/// workbench (issue 29 §2.9: both were left behind, the log and an empty `.flower/`). A
/// text-only `once` never needs the engine and answers (issue 32 §1, `docker_once`).
#[test]
fn an_engine_failure_at_start_leaves_nothing_behind() {
    let s = Scene::new();
    write(
        &s.cwd.join("flows.toml"),
        "[main]\n[[main.steps]]\nname = \"看\"\nrole = \"worker\"\nprompt = \"看一眼\"\n",
    );
    let runs: [&[&str]; 4] = [
        &["做 X", "--timeout", "0"],
        &["go", "做 X", "--timeout", "0", "--new"],
        &["run", "flows.toml:main", "-W"],
        &["once", "-t", "Read,Bash", "看一眼", "-W"],
    ];
    for args in runs {
        s.cmd()
            .env("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .args(["--sandbox", "docker"])
            .args(args)
            .assert()
            .code(1)
            .stderr(
                predicate::str::contains("找不到 socket /nonexistent/docker.sock").and(clean()),
            );
        for left in ["runs", ".flower"] {
            assert!(!s.cwd.join(left).exists(), "{args:?} left {left}");
        }
    }
}

#[test]
fn gc_and_doctor_refuse_a_missing_workspace() {
    let s = Scene::new();
    for cmd in ["gc", "doctor"] {
        cmd_with_key(&s)
            .args([cmd, "-w", "/nonexistent/flowerbox-ws"])
            .assert()
            .code(1)
            .stdout("")
            .stderr("工作目录 /nonexistent/flowerbox-ws 不存在\n");
    }
    assert!(!std::path::Path::new("/nonexistent/flowerbox-ws").exists());
}

#[test]
fn doctor_and_gc_name_an_unreachable_engine() {
    let s = Scene::new();
    cmd_with_key(&s)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("doctor")
        .assert()
        .code(1)
        .stdout(
            predicate::str::contains("不行  engine      用不了 Docker 引擎:找不到 socket /nonexistent/docker.sock(DOCKER_HOST=unix:///nonexistent/docker.sock)")
                .and(predicate::str::contains("pass").not())
                .and(predicate::str::contains("warn").not())
                .and(predicate::str::contains("fail").not()),
        )
        .stderr(predicate::str::contains("doctor: 有检查没通过(见上)").and(clean()));
    cmd_with_key(&s)
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("gc")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("DOCKER_HOST").and(clean()));
}

#[test]
fn runs_and_log_live_in_the_workspace() {
    let s = Scene::new();
    // A start that reaches its run directory and stops there (a damaged store): the log is
    // open by then. (A configuration the run cannot use, like `notaurl`, stops before anything
    // is written.)
    write(&s.cwd.join("sub/proj/runs/sessions.db"), "not a database");
    s.cmd()
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args([
            "--sandbox",
            "host",
            "-w",
            "sub/proj",
            "做 X",
            "--timeout",
            "0",
        ])
        .assert()
        .code(1);
    let log = s.cwd.join("sub/proj/runs/flowerbox.log");
    let text = std::fs::read_to_string(&log).expect("log file");
    assert!(text.contains("flowerbox start"), "{text}");
    // The log never holds the secret.
    assert!(!text.contains("0123456789"), "{text}");
    assert!(!s.cwd.join("runs").exists());
}

#[test]
fn workbench_switch_on_go_is_not_silent() {
    let s = Scene::new();
    exits(
        &s,
        &["-W", "做 X", "--timeout", "0"],
        1,
        predicate::str::contains(format!(
            "- go 恒带工作台:{}",
            s.cwd.join(".flower").display()
        )),
    );
}

#[test]
fn setup_is_reachable_and_writes_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scene::new();
    s.cmd()
        .arg("setup")
        .write_stdin("sk-ant-piped-key-123456\nhttps://gw.example\nclaude-x[1m]\n")
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("还没配过凭证。").and(predicate::str::contains("+ 存好了:")),
        );
    let file = s.home.join(".config/flower/.env");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# 由 `flowerbox setup` 写。"), "{text}");
    assert!(text.contains("ANTHROPIC_API_KEY=sk-ant-piped-key-123456\n"));
    assert!(text.contains("ANTHROPIC_BASE_URL=https://gw.example\n"));
    assert!(text.contains("ANTHROPIC_DEFAULT_SONNET_MODEL=claude-x[1m]\n"));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The file is now part of the chain: the gate passes and -v shows it masked.
    s.cmd()
        // The gateway in the file does not exist; an endpoint that fails at once keeps the
        // run from waiting for it (network-down waiting lasts up to an hour).
        .env("ANTHROPIC_BASE_URL", "notaurl")
        .args(["-v", "once", "hi"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(format!(
            "ANTHROPIC_API_KEY=sk-a…  ({})",
            file.display()
        )))
        .stdout(predicate::str::contains("piped-key").not());
    // A second setup says it is reconfiguring and rewrites the whole file.
    s.cmd()
        .arg("setup")
        .write_stdin("gateway-token-abcdef\n\n\n")
        .assert()
        .code(0)
        .stdout(predicate::str::contains("重新配置。"));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("ANTHROPIC_AUTH_TOKEN=gateway-token-abcdef\n"),
        "{text}"
    );
    assert!(!text.contains("ANTHROPIC_API_KEY"), "{text}");
    assert!(!text.contains("BASE_URL"), "{text}");
}

#[test]
fn setup_without_a_token_cancels() {
    let s = Scene::new();
    s.cmd()
        .arg("setup")
        .write_stdin("\n")
        .assert()
        .code(1)
        .stderr("没给 token,取消。\n");
    assert!(!s.home.join(".config/flower/.env").exists());
}

#[test]
fn go_setup_makes_setup_the_request() {
    let s = Scene::new();
    // Runs go (credential gate first), not the setup screen.
    s.cmd()
        .args(["go", "setup"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("配置 flower").not())
        .stderr(predicate::str::starts_with("缺少凭证"));
}

#[test]
fn panic_hook_prints_one_clean_line() {
    // The child half: this same test, re-run in a subprocess, panics under the hook.
    if std::env::var_os("FLOWERBOX_PANIC_CHILD").is_some() {
        flowerbox::cli::install_panic_hook(Some(PathBuf::from("/x/runs/flowerbox.log")));
        panic!("boom");
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "panic_hook_prints_one_clean_line",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FLOWERBOX_PANIC_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("x flowerbox 内部错误:boom(tests/cli_exit.rs:"),
        "{err}"
    );
    assert!(
        err.contains("这是 bug;详情见 /x/runs/flowerbox.log"),
        "{err}"
    );
    assert!(!err.contains("panicked at"), "{err}");
    assert!(!err.contains("RUST_BACKTRACE"), "{err}");
}

/// Issue 26 §4: `--rounds -1` and `--image ''` were accepted silently; `once ''` ran while
/// `go ''` is refused.
#[test]
fn negative_rounds_empty_image_and_empty_once_are_refused() {
    let s = Scene::new();
    exits(
        &s,
        &["go", "做 X", "--rounds", "-1"],
        2,
        predicate::str::starts_with("--rounds -1 不行").and(clean()),
    );
    for args in [vec!["--image", "", "做 X"], vec!["once", "hi", "--image="]] {
        exits(
            &s,
            &args,
            2,
            predicate::str::starts_with("--image 是空的").and(clean()),
        );
    }
    for prompt in ["", "  "] {
        exits(
            &s,
            &["once", prompt],
            1,
            "once 要给一句话,例如 flowerbox once '这个仓库是做什么的?'\n",
        );
    }
    assert!(!s.cwd.join("runs").exists());
}
