//! The interactive terminal under a real terminal: tmux runs `examples/console_smoke.rs` (a
//! Console with a fake event producer printing a line every 100 ms, a pending question, an
//! echoing aside oracle) and the tests type into it with `send-keys` and read the screen with
//! `capture-pane`.
//!
//! tmux missing: the tests skip with a visible message, except under `CI=true` where they fail.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "term_support/tmux.rs"]
mod tmux;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tmux::{tmux_available, Pane};

/// The smoke driver, built once per test process.
fn smoke_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "console_smoke"])
            .current_dir(root)
            .status()
            .expect("cargo build --example console_smoke");
        assert!(status.success(), "building the smoke example failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let bin = target.join("debug").join("examples").join("console_smoke");
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
}

/// The smoke driver's own helpers on a pane.
trait Smoke {
    fn run_smoke(&self, args: &str);
    fn last_tick(&self) -> u64;
    fn pid(&self) -> i32;
    fn quit_with_two_ctrl_c(&self);
}

impl Smoke for Pane {
    /// Runs the smoke driver, recording `stty -a` before and after and the exit status.
    fn run_smoke(&self, args: &str) {
        self.run_recorded(&format!("{} {args}", smoke_binary().display()));
        self.wait_for("smoke pid", |s| s.contains("[smoke] pid "));
    }

    /// The highest `tick N` on screen.
    fn last_tick(&self) -> u64 {
        self.history()
            .lines()
            .filter_map(|l| l.trim().strip_prefix("* Read tick "))
            .filter_map(|n| n.trim().parse().ok())
            .max()
            .unwrap_or(0)
    }

    fn pid(&self) -> i32 {
        self.history()
            .lines()
            .find_map(|l| l.strip_prefix("[smoke] pid "))
            .and_then(|p| p.trim().parse().ok())
            .expect("pid line")
    }

    /// Ctrl-C, then, once the first press has been acted on (the interrupt prompt is up),
    /// Ctrl-C again. Two presses sent back to back can reach the process as ONE SIGINT: the
    /// kernel does not queue a standard signal that is still pending, which happens whenever
    /// the process is not scheduled between the two (a loaded machine). A human's double press
    /// is far slower than that; the console's own coalescing is covered by
    /// `signals::tests::two_quick_sigints_are_two`.
    fn quit_with_two_ctrl_c(&self) {
        let prompts = |h: &str| h.matches("再按一次 Ctrl+C = 退出").count();
        let before = prompts(&self.history());
        self.keys(&["C-c"]);
        self.wait_for("the interrupt prompt", |h| prompts(h) > before);
        self.keys(&["C-c"]);
    }
}

#[test]
fn typing_while_output_arrives_keeps_the_half_typed_text_and_cjk_backspace_is_one_press() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("typing");
    p.run_smoke("");
    p.wait_for("ticks", |h| h.contains("* Read tick 3"));
    p.type_text("abc你好");
    let tick = p.last_tick();
    p.wait_for("more ticks", |_| p.last_tick() >= tick + 5);
    let last = p.last_line();
    assert!(
        last.starts_with("(直接说 = 加需求") && last.ends_with("> abc你好"),
        "{last:?}"
    );
    // The idle prompt is 68 columns; abc is 3, 你好 4.
    assert_eq!(p.cursor_x(), 68 + 3 + 4);
    p.keys(&["BSpace"]);
    p.wait_for("backspace", |_| p.last_line().ends_with("> abc你"));
    assert_eq!(p.cursor_x(), 68 + 3 + 2);
    // Left arrow over 你 moves two columns; typing inserts at the cursor.
    p.keys(&["Left"]);
    p.type_text("X");
    p.wait_for("insert", |_| p.last_line().ends_with("> abcX你"));
    assert_eq!(p.cursor_x(), 68 + 4);
    let tick = p.last_tick();
    p.wait_for("still ticking", |_| p.last_tick() >= tick + 3);
    assert!(p.last_line().ends_with("> abcX你"));
    p.quit_with_two_ctrl_c();
    p.wait_for("exit", |h| h.contains("rc=130"));
    p.stty_unchanged();
}

#[test]
fn both_question_marks_reach_the_aside_oracle_and_text_reaches_the_inbox() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("aside");
    p.run_smoke("");
    p.type_text("? 现在到哪了");
    p.keys(&["Enter"]);
    p.wait_for("aside answer (halfwidth)", |h| {
        h.contains("旁路回答:现在到哪了")
    });
    p.type_text("？进度如何");
    p.keys(&["Enter"]);
    let h = p.wait_for("aside answer (fullwidth)", |h| {
        h.contains("旁路回答:进度如何")
    });
    assert_eq!(h.matches("# 旁路").count(), 2, "{h}");
    assert!(h.contains("没有打扰正在跑的运行"));
    assert!(
        !h.contains("+ 收到"),
        "an aside question must not reach the inbox"
    );
    p.type_text("顺便统计总字节数");
    p.keys(&["Enter"]);
    p.wait_for("receipt", |h| {
        h.contains("+ 收到 (它下次查收件箱时会看到;没有确认书可落盘")
    });
    // What was typed stays on screen after the prompt.
    assert!(p.history().contains("> 顺便统计总字节数"));
    p.quit_with_two_ctrl_c();
    p.wait_for("exit", |h| h.contains("rc=130"));
}

#[test]
fn a_pending_question_switches_the_prompt_and_a_number_picks_the_option() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("question");
    p.run_smoke("--ask-after 1");
    p.wait_for("question", |h| h.contains("? 要不要加测试?"));
    p.wait_for("answer prompt", |_| {
        p.last_line()
            .starts_with("你的回答 (回车=跳过,让它自己判断) >")
    });
    // `?` during a pending question is still an aside question.
    p.type_text("?问题是什么");
    p.keys(&["Enter"]);
    p.wait_for("aside", |h| h.contains("旁路回答:问题是什么"));
    assert!(p.last_line().starts_with("你的回答"));
    // Ctrl-C while it waits: the extra line, and Enter brings the answer prompt back.
    p.keys(&["C-c"]);
    p.wait_for("pending note", |h| {
        h.contains("(有 1 个提问还等着,打断不影响它们)")
    });
    p.wait_for("> prompt", |_| p.last_line() == ">");
    p.keys(&["Enter"]);
    p.wait_for("answer prompt again", |_| {
        p.last_line().starts_with("你的回答")
    });
    p.type_text("2");
    p.keys(&["Enter"]);
    p.wait_for("answered", |h| h.contains("  + 不要"));
    p.wait_for("idle prompt", |_| p.last_line().starts_with("(直接说"));
    p.quit_with_two_ctrl_c();
    p.wait_for("exit", |h| h.contains("rc=130"));
}

#[test]
fn ctrl_c_then_enter_continues_text_is_said_and_twice_exits_130_cleanly() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("ctrlc");
    p.run_smoke("");
    p.wait_for("ticks", |h| h.contains("* Read tick 3"));
    p.keys(&["C-c"]);
    let h = p.wait_for("interrupt prompt", |h| {
        h.contains("! 已打断这一轮。正在跑的 subagent 会丢掉半成品。")
    });
    assert!(h.contains("要说什么?(直接回车 = 什么都不说,接着跑;再按一次 Ctrl+C = 退出)"));
    assert!(h.contains("[smoke] paused"));
    p.wait_for("> prompt", |_| p.last_line() == ">");
    // Held while the prompt waits: no tick goes by until the human answers.
    let held = p.last_tick();
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(
        p.last_tick(),
        held,
        "the run went on before the prompt was answered"
    );
    assert!(!p.history().contains("[smoke] interrupt:"));
    p.keys(&["Enter"]);
    p.wait_for("resumed", |h| h.contains("[smoke] interrupt: (空)"));
    p.wait_for("resident prompt again", |_| {
        p.last_line().starts_with("(直接说")
    });
    let tick = p.last_tick();
    p.wait_for("the run goes on", |_| p.last_tick() >= tick + 5);
    // Interrupt again and say something.
    p.keys(&["C-c"]);
    p.wait_for("> prompt", |_| p.last_line() == ">");
    p.type_text("别改 Makefile");
    p.keys(&["Enter"]);
    p.wait_for("said", |h| h.contains("[smoke] interrupt: 别改 Makefile"));
    // Twice: quit.
    p.keys(&["C-c"]);
    p.wait_for("> prompt", |_| p.last_line() == ">");
    p.keys(&["C-c"]);
    let h = p.wait_for("exit", |h| h.contains("rc=130"));
    assert!(h.contains("[smoke] quit"));
    assert!(!h.contains("panicked"), "{h}");
    p.stty_unchanged();
}

#[test]
fn sigterm_exits_143_and_restores_the_terminal() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("sigterm");
    p.run_smoke("");
    p.type_text("half typed");
    p.wait_for("typed", |_| p.last_line().ends_with("> half typed"));
    let pid = p.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let h = p.wait_for("exit", |h| h.contains("rc=143"));
    assert!(h.contains("[smoke] terminated by SIGTERM"));
    p.stty_unchanged();
}

#[test]
fn sighup_exits_by_the_signal_too() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("sighup");
    p.run_smoke("");
    let pid = p.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    p.wait_for("exit", |h| h.contains("rc=129"));
    p.stty_unchanged();
}

#[test]
fn after_ctrl_z_and_fg_keys_still_go_through_the_editor() {
    if !tmux_available() {
        return;
    }
    let p = Pane::new("stop");
    p.run_smoke("");
    p.wait_for("ticks", |h| h.contains("* Read tick 3"));
    p.keys(&["C-z"]);
    // bash goes on with the rest of the command list (`rc=148`, a stopped job); `fg` brings
    // the driver back and reports its status itself.
    p.wait_for("stopped", |h| h.contains("rc=148"));
    let after = p.dir.path().join("after");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !after.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(&after).unwrap();
    let fg = format!("fg; echo rc=$?; stty -a > {}", after.display());
    p.keys(&[&fg, "Enter"]);
    let tick = p.last_tick();
    p.wait_for("running again", |_| p.last_tick() >= tick + 3);
    p.type_text("ab你");
    p.keys(&["BSpace"]);
    p.wait_for("edited", |_| p.last_line().ends_with("> ab"));
    p.quit_with_two_ctrl_c();
    p.wait_for("exit", |h| h.contains("rc=130"));
    p.stty_unchanged();
}
