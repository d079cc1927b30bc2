//! [`FlowError`]: every way a run driven by this module fails, and how it ended when it did
//! not ([`RunEnd`]). The display text is the exact message for the human (seed 000's Chinese);
//! the command line maps these to exit codes without reading them.

use std::path::PathBuf;

use thiserror::Error;

use crate::isolate::IsolateError;
use crate::model::ModelError;
use crate::sandbox::SandboxError;
use crate::session::SessionError;

/// The message when there is neither a request nor a run to continue.
pub const NEED_REQUEST: &str = "要给一句诉求,例如 flowerbox '帮我做一个 X'";

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// It finished (every step ran, or the agent ended its turn).
    Finished,
    /// The human quit (the second Ctrl-C, or SIGINT without a terminal); the in-flight step is
    /// recorded as `interrupted-by-human`.
    Interrupted,
    /// SIGHUP or SIGTERM; the in-flight step is recorded as `killed-by-signal`.
    Signalled(i32),
}

/// Why a run did not finish.
#[derive(Debug, Error)]
pub enum FlowError {
    /// `resume_from` names a step that has no session (it did not run, or was skipped).
    #[error("步骤 '{step}' 要接着 '{from}' 的会话,可 '{from}' 没有会话(没跑,或被跳过了)")]
    NoSession {
        /// The step with `resume_from`.
        step: String,
        /// The step it names.
        from: String,
    },
    /// Nothing to continue and nothing asked.
    #[error("{}", NEED_REQUEST)]
    NeedRequest,
    /// A step failed and its policy is to stop.
    #[error("在步骤 '{0}' 中止")]
    StepAborted(String),
    /// A step stopped the run, and the provider had refused the credentials (HTTP 401/403):
    /// the command line offers to reconfigure (seed 000 "跑挂了之后的自动重配").
    #[error("在步骤 '{step}' 中止")]
    CredentialsRefused {
        /// The step.
        step: String,
        /// The provider's refusal.
        #[source]
        refusal: ModelError,
    },
    /// Another `go` holds the run directory.
    #[error(
        "{} 正被另一个 flowerbox(pid {pid})用着:两个一起接着跑会把同一条会话写乱。\
         等它跑完再接着;要并行就用不同的 -r。",
        run_dir.display()
    )]
    Busy {
        /// The run directory.
        run_dir: PathBuf,
        /// The process holding it.
        pid: u32,
    },
    /// The run directory's lock could not be taken.
    #[error(transparent)]
    Lock(crate::record::RecordError),
    /// A file of the run could not be written or moved (`what` says which, in words).
    #[error("{what}:{source}")]
    Io {
        /// What failed.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `sessions.db` could not be opened (a damaged one says how to start over).
    #[error("打不开 sessions.db:{err}{hint}", err = .0, hint = damaged_hint(.0))]
    Store(#[source] SessionError),
    /// The session store failed while the run was being set up.
    #[error("sessions.db: {0}")]
    Session(#[source] SessionError),
    /// `once --resume ID` names no session of this run directory.
    #[error(
        "--resume {id}:{} 里没有这条会话。会话 id 要从同一个 run 目录里找(-r 指对了吗?)",
        db.display()
    )]
    UnknownSession {
        /// The id given.
        id: String,
        /// The store looked in.
        db: PathBuf,
    },
    /// The model provider could not be set up.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The sandbox backend could not serve the run.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The run's agents passed the disk budget: what was measured, and one line per container
    /// whose writes were kept (or not).
    #[error("{over}{}", kept.iter().map(|l| format!("\n- {l}")).collect::<String>())]
    DiskBudget {
        /// The measurement.
        over: super::disk::DiskOver,
        /// What happened to the containers' writes.
        kept: Vec<String>,
    },
    /// `--isolate` could not open the workspace's repository.
    #[error(transparent)]
    Isolate(#[from] IsolateError),
    /// A workflow file's table does not declare a workflow (`run`): what is wrong, naming the
    /// step and field.
    #[error("{0}")]
    Declared(#[from] super::declarative::DeclError),
    /// The single agent of `once` did not finish; its error (none: it did not finish its
    /// turn).
    #[error("x {}", .0.as_ref().map_or_else(|| "没做完".to_string(), ToString::to_string))]
    AgentFailed(#[source] Option<crate::agent::StepError>),
    /// A record the run needs to continue (sessions, manifest, lineage, a note) could not be
    /// saved: the run stopped there (issue 26 §3). The message names what and why.
    #[error("{0}")]
    Unsaved(String),
    /// The agent's task died.
    #[error("内部错误:{0}")]
    Internal(#[source] tokio::task::JoinError),
}

/// What to do about a damaged `sessions.db`: `go --new` moves it aside.
fn damaged_hint(e: &SessionError) -> &'static str {
    match e {
        SessionError::Damaged(_) => {
            "\n它没法修:加 --new 把它移到一边从头开始(里面的会话就接不上了;原文件留着)"
        }
        _ => "",
    }
}

impl FlowError {
    /// The step the error belongs to, when it belongs to one.
    pub fn step(&self) -> Option<&str> {
        match self {
            FlowError::NoSession { step, .. }
            | FlowError::StepAborted(step)
            | FlowError::CredentialsRefused { step, .. } => Some(step),
            _ => None,
        }
    }
}
