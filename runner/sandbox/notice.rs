//! What the run's sandboxes tell the human while the run goes on (issue 26 §2): one line each,
//! through the sink the run gives [`super::SandboxFactory::on_notice`] (the frontend's
//! warnings). The sandbox prints nothing itself.
//!
//! The lines are the human's (Chinese, flower's voice); what the model is told goes into its
//! tool results instead.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a container is gone, as the engine says (its state from inspect, or a 404).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// It stopped (killed, stopped, its main process ended).
    Stopped {
        /// Its exit code, when the engine knows it.
        exit_code: Option<i64>,
        /// The kernel killed it for memory.
        oom: bool,
    },
    /// It was removed.
    Removed,
    /// The run's pod stopped, and with it every agent container joined to it.
    Pod,
}

impl Gone {
    /// The same, in the human's words (a notice line).
    pub fn zh(&self) -> String {
        match self {
            Gone::Stopped { oom: true, .. } => "内存超限被杀了".into(),
            Gone::Stopped {
                exit_code: Some(c), ..
            } => format!("停了,退出码 {c}"),
            Gone::Stopped { .. } => "停了".into(),
            Gone::Removed => "被删掉了".into(),
            Gone::Pod => "随这次运行的 pod 一起停了".into(),
        }
    }
}

/// For the model (tool results), in English like the other notes it gets.
impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gone::Stopped { oom: true, .. } => write!(f, "was killed for memory (OOM)"),
            Gone::Stopped {
                exit_code: Some(c), ..
            } => write!(f, "stopped (exit code {c})"),
            Gone::Stopped { .. } => write!(f, "stopped"),
            Gone::Removed => write!(f, "was removed"),
            Gone::Pod => write!(f, "stopped with the run's pod"),
        }
    }
}

/// One thing about the run's sandboxes the human should see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxNotice {
    /// An agent's container is gone (the pod still runs): its next command gets a new one.
    ContainerGone {
        /// The agent (`worker-2`).
        agent: String,
        /// How it went.
        why: Gone,
        /// Processes its commands had left running (`pid command`), gone with it.
        lost: Vec<String>,
    },
    /// The run's pod is gone, and every agent container with it: the next command makes the
    /// pod again (its network rules first) and the agent's container.
    PodGone {
        /// How it went.
        why: Gone,
        /// Processes the agents' commands had left running (`agent: pid command`), gone.
        lost: Vec<String>,
    },
    /// The engine does not answer: commands wait for it, at most `grace`.
    EngineDown {
        /// Its endpoint (`unix:///var/run/docker.sock`).
        endpoint: String,
        /// How long the run waits for it.
        grace: Duration,
    },
    /// The engine answers again.
    EngineBack {
        /// Its endpoint.
        endpoint: String,
    },
    /// Commands of this run go as one Docker exec each (slower), not through the exec
    /// service: said once per run, for the first agent it happened to.
    SlowExec {
        /// The agent.
        agent: String,
        /// Why (the engine's or the service's words, one line).
        reason: String,
    },
    /// What a dead run of this workspace left was removed (the run's preflight sweep, which
    /// runs in the background: issue 32 §1): one line each.
    Swept {
        /// What went (`removed fbx-… (run …, pid … gone)`).
        line: String,
    },
}

/// Processes as a clause: "`a`、`b`" (at most five, the rest counted).
fn processes(lost: &[String]) -> String {
    let shown: Vec<String> = lost.iter().take(5).map(|p| format!("`{p}`")).collect();
    let more = lost.len().saturating_sub(shown.len());
    let mut s = shown.join("、");
    if more > 0 {
        s.push_str(&format!(" 等 {} 个", lost.len()));
    }
    s
}

impl fmt::Display for SandboxNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SandboxNotice::ContainerGone { agent, why, lost } => {
                write!(
                    f,
                    "{agent} 的容器{}:正在跑的命令算失败,下一条命令换新容器",
                    why.zh()
                )?;
                match lost.is_empty() {
                    true => write!(f, ";它里面的进程都没了"),
                    false => write!(f, ";它留着跑的进程没了:{}", processes(lost)),
                }
            }
            SandboxNotice::PodGone { why, lost } => {
                let why = match why {
                    Gone::Pod => "停了".to_string(),
                    other => other.zh(),
                };
                write!(
                    f,
                    "这次运行的 pod {why}:各 agent 的容器都随它没了,正在跑的命令算失败;\
                     下一条命令会重建 pod(先装网络规则)和容器"
                )?;
                match lost.is_empty() {
                    true => write!(f, ";pod 里的进程都没了"),
                    false => write!(f, ";留着跑的进程没了:{}", processes(lost)),
                }
            }
            SandboxNotice::EngineDown { endpoint, grace } => write!(
                f,
                "连不上 Docker 引擎 {endpoint}:命令先停着等它,最多 {} 秒,等不到这次运行就停下",
                grace.as_secs()
            ),
            SandboxNotice::EngineBack { endpoint } => {
                write!(f, "Docker 引擎 {endpoint} 又连上了,命令接着跑")
            }
            SandboxNotice::SlowExec { agent, reason } => write!(
                f,
                "{agent} 的容器里 exec 服务用不了({reason}):命令改为每条一次 docker exec,\
                 慢一些(`flowerbox doctor` 有 exec 一行)"
            ),
            SandboxNotice::Swept { line } => f.write_str(line),
        }
    }
}

/// At most `max` characters of `s`, with `…` when cut (a reason from the engine or a
/// service in one screen line).
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// Longest reason a line quotes, in characters.
pub const REASON_MAX: usize = 300;

/// Where notices go (cheap and non-blocking; called from many tasks).
pub type NoticeSink = Arc<dyn Fn(SandboxNotice) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_what_went_and_what_was_lost_on_one_line() {
        let gone = SandboxNotice::ContainerGone {
            agent: "worker-1".into(),
            why: Gone::Stopped {
                exit_code: Some(137),
                oom: false,
            },
            lost: vec!["42 ./httpd".into()],
        };
        assert_eq!(
            gone.to_string(),
            "worker-1 的容器停了,退出码 137:正在跑的命令算失败,下一条命令换新容器;\
             它留着跑的进程没了:`42 ./httpd`"
        );
        let pod = SandboxNotice::PodGone {
            why: Gone::Removed,
            lost: (0..7).map(|i| format!("worker-{i}: {i} srv")).collect(),
        };
        let line = pod.to_string();
        assert!(line.starts_with("这次运行的 pod 被删掉了:"), "{line}");
        assert!(line.ends_with("`worker-4: 4 srv` 等 7 个"), "{line}");
        for n in [
            pod,
            gone,
            SandboxNotice::EngineDown {
                endpoint: "unix:///x.sock".into(),
                grace: Duration::from_secs(30),
            },
        ] {
            assert!(!n.to_string().contains('\n'), "{n}");
        }
        assert_eq!(clip("αβγ", 2), "αβ…");
        assert_eq!(clip("αβ", 2), "αβ");
        assert_eq!(
            Gone::Removed.to_string(),
            "was removed",
            "the model's words are English"
        );
    }
}
