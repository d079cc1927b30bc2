//! Test doubles shared by flowerbox's integration tests in `tests/` and its examples: an
//! in-memory [`SessionStore`], the turns an in-process fake [`Provider`] answers with, scripted
//! line input ([`ScriptedLines`]), an in-memory terminal output, host `git` for building fixture
//! repositories, and where the `scripted-model` binary is ([`scripted_model_bin`]).
//!
//! Not shipped: a dev-dependency of `flowerbox` that depends on the library the tests link, so
//! both see the same types. The library's own unit tests (a copy of the library of their own)
//! use only the helpers here that name no flowerbox type ([`git`], [`env_of`], [`SharedBuf`]);
//! the doubles of flowerbox's traits they need live beside the unit tests.
//!
//! [`Provider`]: flowerbox::model::Provider
// Test doubles: a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use flowerbox::creds::input::{LineRead, LineSource};

use flowerbox::model::{ContentBlock, Message, Speaker, StopReason, Turn, Usage};
use flowerbox::session::{NoticeKind, SessionError, SessionMeta, SessionStore, TrimPolicy};

/// Sessions in memory: messages are kept as appended, notices are dropped, `load` never trims.
#[derive(Default)]
pub struct MemStore {
    /// Session id → (owner, messages).
    sessions: Mutex<HashMap<String, (SessionMeta, Vec<Message>)>>,
}

impl MemStore {
    /// Sessions created so far (forks included).
    pub fn count(&self) -> usize {
        self.sessions.lock().unwrap().len()
    }
}

impl SessionStore for MemStore {
    fn create(&self, meta: &SessionMeta) -> Result<String, SessionError> {
        let id = uuid::Uuid::new_v4().to_string();
        self.sessions
            .lock()
            .unwrap()
            .insert(id.clone(), (meta.clone(), vec![]));
        Ok(id)
    }
    fn append(&self, s: &str, msg: &Message, _c: Option<u64>) -> Result<(), SessionError> {
        self.sessions
            .lock()
            .unwrap()
            .get_mut(s)
            .ok_or(SessionError::NotFound(s.into()))?
            .1
            .push(msg.clone());
        Ok(())
    }
    fn append_notice(&self, _s: &str, _k: NoticeKind, _t: &str) -> Result<(), SessionError> {
        Ok(())
    }
    fn load_raw(&self, s: &str) -> Result<Vec<Message>, SessionError> {
        Ok(self
            .sessions
            .lock()
            .unwrap()
            .get(s)
            .ok_or(SessionError::NotFound(s.into()))?
            .1
            .clone())
    }
    fn load(&self, s: &str, _p: &TrimPolicy) -> Result<Vec<Message>, SessionError> {
        self.load_raw(s)
    }
    fn fork(&self, s: &str) -> Result<String, SessionError> {
        let v = self
            .sessions
            .lock()
            .unwrap()
            .get(s)
            .cloned()
            .ok_or(SessionError::NotFound(s.into()))?;
        let id = uuid::Uuid::new_v4().to_string();
        self.sessions.lock().unwrap().insert(id.clone(), v);
        Ok(id)
    }
    fn meta(&self, s: &str) -> Result<Option<SessionMeta>, SessionError> {
        Ok(self.sessions.lock().unwrap().get(s).map(|v| v.0.clone()))
    }
    fn last_context(&self, _s: &str) -> Result<Option<u64>, SessionError> {
        Ok(None)
    }
}

/// A complete turn with `content` from `model`: `tool_use` when it calls a tool, `end_turn`
/// otherwise; 100 input and 10 output tokens.
pub fn turn_of(content: Vec<ContentBlock>, model: &str) -> Turn {
    let stop_reason = if content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    Turn {
        content,
        stop_reason,
        usage: Usage {
            input_tokens: Some(100),
            output_tokens: Some(10),
            ..Default::default()
        },
        model: model.to_string(),
        retried_errors: vec![],
        truncated_tool_use: false,
        malformed_calls: vec![],
        reported_cost_usd: None,
    }
}

/// An assistant message calling tool `name` with `input` as call `id`.
pub fn tool_call(id: &str, name: &str, input: serde_json::Value) -> Message {
    Message {
        role: Speaker::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
        }],
    }
}

/// An assistant message calling `Bash` with `command` as call `id`.
pub fn bash_call(id: &str, command: &str) -> Message {
    tool_call(id, "Bash", serde_json::json!({ "command": command }))
}

/// A user message answering call `id` with the successful result `text`.
pub fn tool_result(id: &str, text: &str) -> Message {
    Message {
        role: Speaker::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: text.into(),
            is_error: false,
        }],
    }
}

/// A lookup over `pairs`, for code that reads its environment through a function.
pub fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

/// `git ARGS` on the host in `dir`; panics on failure; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`git`] with a fixed identity (`T <t@example.invalid>`), for repositories without one.
pub fn git_with_identity(dir: &Path, args: &[&str]) -> String {
    let identity = ["-c", "user.name=T", "-c", "user.email=t@example.invalid"];
    git(dir, &[&identity[..], args].concat())
}

/// An in-memory output: the code under test writes to a clone, the test reads it back.
#[derive(Clone, Default)]
pub struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    /// Everything written so far (invalid UTF-8 replaced); the buffer keeps it.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).to_string()
    }

    /// Everything written since the last `take` or `clear`, which must be UTF-8; the buffer is
    /// emptied.
    pub fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }

    /// Empties the buffer.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// Nothing was written since the last `take` or `clear`.
    pub fn is_empty(&self) -> bool {
        self.0.lock().unwrap().is_empty()
    }
}

/// Waits for `child` at most `bound`, reading its piped stdout and stderr all the while (a
/// child that writes more than a pipe holds would otherwise block on the write and look hung).
/// `Ok` with its output when it exited in time; `Err` with what it wrote when it was killed.
pub fn wait_bounded(
    mut child: std::process::Child,
    bound: std::time::Duration,
) -> Result<std::process::Output, std::process::Output> {
    use std::io::Read;
    fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = std::time::Instant::now() + bound;
    let (status, in_time) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (status, true);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break (child.wait().unwrap(), false);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // The readers end at EOF: when the child (and anything it left holding its pipes) is gone.
    let out = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if in_time {
        Ok(out)
    } else {
        Err(out)
    }
}

/// A fixed script of reads, then EOF forever: human input for the start prompt and `setup`.
#[derive(Debug, Default)]
pub struct ScriptedLines(pub VecDeque<LineRead>);

impl ScriptedLines {
    /// A script of plain lines.
    pub fn lines<I: IntoIterator<Item = S>, S: Into<String>>(lines: I) -> Self {
        Self(
            lines
                .into_iter()
                .map(|l| LineRead::Line(l.into()))
                .collect(),
        )
    }
}

impl LineSource for ScriptedLines {
    fn read_line(&mut self) -> std::io::Result<LineRead> {
        Ok(self.0.pop_front().unwrap_or(LineRead::Eof))
    }
}

/// The `scripted-model` binary (the `scripted-model` crate beside this one), built if need be.
///
/// It is `target/<profile>/scripted-model`, beside the running test or example's own directory.
/// A binary of another package has no `CARGO_BIN_EXE_…`, and `cargo test --test X` builds only
/// the package X belongs to; so when the test runs under cargo (`CARGO` is set), the first
/// call runs `cargo build -p scripted-model` into the same target directory and profile (a
/// no-op when it is up to date, as after `cargo build` or `cargo test` at the root, whose
/// default members include it). Panics when the binary cannot be built or found.
pub fn scripted_model_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        // target/<profile>/deps/<test>, target/<profile>/examples/<example>, target/<profile>/<bin>
        let mut dir = exe.parent().expect("the test's directory").to_path_buf();
        if dir.ends_with("deps") || dir.ends_with("examples") {
            dir.pop();
        }
        let bin = dir.join("scripted-model");
        if let Some(cargo) = std::env::var_os("CARGO") {
            let profile = match dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") | None => "dev".to_string(),
                Some(name) => name.to_string(),
            };
            let mut build = Command::new(cargo);
            build
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "scripted-model",
                    "--bin",
                    "scripted-model",
                ])
                .args(["--profile", &profile])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if let Some(target_dir) = dir.parent() {
                build.arg("--target-dir").arg(target_dir);
            }
            let out = build.output().expect("run cargo build -p scripted-model");
            assert!(
                out.status.success(),
                "cargo build -p scripted-model failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            bin.is_file(),
            "{} is missing: build it with `cargo build -p scripted-model` (or `cargo build` at \
             the workspace root)",
            bin.display()
        );
        bin
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_lines_end_in_eof() {
        let mut src = ScriptedLines::lines(["a"]);
        assert_eq!(src.read_line().unwrap(), LineRead::Line("a".into()));
        assert_eq!(src.read_line().unwrap(), LineRead::Eof);
        assert_eq!(src.read_line().unwrap(), LineRead::Eof);
    }
}
