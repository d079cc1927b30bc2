//! Exit codes and the one error type of the command line (seed 000, "退出码").
//!
//! | code | when |
//! |---|---|
//! | 0 | finished normally ([`ExitStatus::Success`]), or `--help` |
//! | 1 | every deliberate exit: a [`CliError`] whose message goes to stderr, no backtrace |
//! | 2 | argument errors: clap's, and [`CliError::Usage`] (`--window 0`, contradictions) |
//! | 130 | two Ctrl-C during a run ([`ExitStatus::Interrupted`]), clean, no traceback |
//! | signal | SIGHUP/SIGTERM after the in-flight step is recorded ([`ExitStatus::Signalled`]) |

use std::path::PathBuf;

use thiserror::Error;

use super::target::TargetError;
use crate::creds::CredsError;
use crate::flow::error::NEED_REQUEST;
use crate::flow::FlowError;
use crate::isolate::IsolateError;
use crate::mcp::config::ConfigError as McpConfigError;
use crate::sandbox::SandboxError;

/// How a command that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exit code 0.
    Success,
    /// A second Ctrl-C during a run: exit code 130.
    Interrupted,
    /// Killed by this signal (SIGHUP/SIGTERM) after recording the in-flight step: the binary
    /// restores the default action and re-raises it, so the parent sees a signal death.
    Signalled(i32),
}

impl ExitStatus {
    /// The numeric code (`128 + signal` for [`ExitStatus::Signalled`], as a shell reports it).
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Interrupted => 130,
            ExitStatus::Signalled(sig) => 128 + sig,
        }
    }
}

/// Every way the command line fails. [`CliError::exit_code`] maps it to 1 or 2; the display
/// text is the exact message for stderr (seed 000's Chinese where the seed has one).
#[derive(Debug, Error)]
pub enum CliError {
    /// clap rejected the arguments (or printed help/version): its own code (2, or 0 for help).
    #[error("{0}")]
    Clap(#[from] clap::Error),
    /// An argument clap accepted but flowerbox refuses (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Ctrl-C or Ctrl-D at the start prompt.
    #[error("已取消")]
    Cancelled,
    /// Bare Enter at the start prompt on a fresh directory.
    #[error("诉求是空的。直接 `flowerbox` 然后按提示输入,或者 flowerbox \"帮我做一个 X\"。")]
    EmptyRequest,
    /// `once ''`: nothing to say to the agent (exit 1, like `go ''` without a request).
    #[error("once 要给一句话,例如 flowerbox once '这个仓库是做什么的?'")]
    EmptyOncePrompt,
    /// No request from a non-terminal stdin and the directory was not woken.
    #[error("{}", NEED_REQUEST)]
    NeedRequest,
    /// Credentials are missing, refused or could not be configured.
    #[error(transparent)]
    Creds(#[from] CredsError),
    /// `--isolate` on a workspace that is not a git repository
    /// ([`IsolateError::NotARepository`]).
    #[error(transparent)]
    Isolate(#[from] IsolateError),
    /// A run did not finish ([`FlowError::StepAborted`] when a step stopped it).
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// `run`'s target could not be found or loaded.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The project's MCP configuration is unusable (exit 2, like any bad setting).
    #[error(transparent)]
    McpConfig(#[from] McpConfigError),
    /// The sandbox backend failed outside a run (`gc`).
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A run could not start or did not finish; the message says why (exit 1).
    #[error("{0}")]
    Failed(String),
    /// `doctor`, `gc` or `setup` was pointed at a workspace that does not exist (they create
    /// nothing).
    #[error("工作目录 {} 不存在", .0.display())]
    NoWorkspace(PathBuf),
    /// The workspace could not be created.
    #[error("工作目录 {} 建不出来:{source}", path.display())]
    Workspace {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An I/O failure outside the cases above (`what` says what was being done).
    #[error("{what}:{source}")]
    Io {
        /// What failed, in words.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Clap(e) => e.exit_code(),
            CliError::Usage(_) | CliError::McpConfig(_) => 2,
            _ => 1,
        }
    }

    /// True when stdout/stderr went away (`flowerbox --help | head -1`): exit quietly.
    pub fn is_broken_pipe(&self) -> bool {
        match self {
            CliError::Io { source, .. } => source.kind() == std::io::ErrorKind::BrokenPipe,
            CliError::Creds(CredsError::Terminal(e)) => e.kind() == std::io::ErrorKind::BrokenPipe,
            _ => false,
        }
    }

    /// Wraps a terminal I/O error.
    pub fn terminal(source: std::io::Error) -> Self {
        CliError::Io {
            what: "终端读写失败".to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(ExitStatus::Success.code(), 0);
        assert_eq!(ExitStatus::Interrupted.code(), 130);
        assert_eq!(ExitStatus::Signalled(15).code(), 143);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::Cancelled.exit_code(), 1);
        let aborted = || CliError::Flow(FlowError::StepAborted("干活".into()));
        assert_eq!(aborted().exit_code(), 1);
        assert_eq!(aborted().to_string(), "在步骤 '干活' 中止");
        assert_eq!(
            CliError::Isolate(IsolateError::NotARepository("/p".into())).to_string(),
            "--isolate 要求 /p 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。"
        );
    }
}
