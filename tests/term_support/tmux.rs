//! A tmux pane for terminal tests: its own server socket, one 100x30 (or given) pane running
//! bash, keys in with `send-keys`, the screen out with `capture-pane`.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether tmux can be used; panics under `CI=true` when it cannot.
pub fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("tmux is required for the terminal tests under CI");
        }
        eprintln!("SKIPPED: tmux is not installed; the interactive terminal tests did not run");
    }
    ok
}

/// One tmux server with one pane running bash.
pub struct Pane {
    socket: String,
    /// Scratch directory of the test (stty snapshots).
    pub dir: tempfile::TempDir,
}

impl Pane {
    /// A 100x30 pane in the current directory.
    pub fn new(name: &str) -> Pane {
        Self::in_dir(name, None, 100, 30)
    }

    /// A `cols`x`rows` pane whose shell starts in `cwd`.
    pub fn in_dir(name: &str, cwd: Option<&Path>, cols: u32, rows: u32) -> Pane {
        let socket = format!("fbx-{}-{name}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let p = Pane { socket, dir };
        let (c, r) = (cols.to_string(), rows.to_string());
        let mut args = vec!["new-session", "-d", "-s", "t", "-x", &c, "-y", &r];
        let cwd_s;
        if let Some(d) = cwd {
            cwd_s = d.display().to_string();
            args.extend(["-c", &cwd_s]);
        }
        args.push("bash --norc --noprofile");
        p.tmux(&args);
        p
    }

    /// Runs tmux against this pane's server.
    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Runs `cmd` in the pane's shell, recording `stty -a` before and after and `rc=$?`.
    pub fn run_recorded(&self, cmd: &str) {
        let d = self.dir.path().display();
        let line = format!("stty -a > {d}/before; {cmd}; echo rc=$?; stty -a > {d}/after");
        self.keys(&[&line, "Enter"]);
    }

    /// Sends key names (`Enter`, `C-c`, `BSpace`) or strings.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Types text literally.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", text]);
    }

    /// The visible screen.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// The screen and 3000 lines of history.
    pub fn history(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t", "-S", "-3000"])
    }

    /// The last non-empty line of the screen.
    pub fn last_line(&self) -> String {
        self.screen()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .to_string()
    }

    /// The cursor column.
    pub fn cursor_x(&self) -> usize {
        self.tmux(&["display", "-p", "-t", "t", "#{cursor_x}"])
            .trim()
            .parse()
            .unwrap()
    }

    /// The pid of the pane's shell.
    pub fn shell_pid(&self) -> i32 {
        self.tmux(&["display", "-p", "-t", "t", "#{pane_pid}"])
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits (generously: it only catches hangs) until `pred` holds for the history.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let h = self.history();
            if pred(&h) {
                return h;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Asserts `stty -a` after the command equals `stty -a` before it.
    pub fn stty_unchanged(&self) {
        let d = self.dir.path();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !d.join("after").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(100));
        let before = std::fs::read_to_string(d.join("before")).unwrap();
        let after = std::fs::read_to_string(d.join("after")).expect("stty after");
        assert_eq!(before, after, "terminal settings changed");
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}
