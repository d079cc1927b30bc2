//! The gates (issue 27 §2; DESIGN.md invariants 4 and 8, seed 004 §4.4): before every judge
//! round flowerbox runs each [`Check`] itself, each in a fresh gate container with the judge's
//! read-only view of the candidate (the workspace; with `--isolate` the merged branch), in the
//! run's pod (its network policy, the workers' live servers), with the containers' fixed
//! environment and no credentials, under a timeout.
//!
//! A check passes only when its exit status is the expected one, it did not time out, was not
//! killed by a signal or interrupted, its output was not cut, no sandbox error happened while
//! starting, running or removing its container, and the candidate's content identity
//! ([`crate::sandbox::SandboxFiles::identity`]) is the same before and after it. An identity
//! that cannot be read before means the check never starts; after, it fails. A red check makes ACHIEVED impossible
//! for the round ([`super::guard`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checks::Check;
use crate::agent::Runtime;
use crate::role::Role;
use crate::sandbox::files::WorkspaceIdentity;
use crate::sandbox::{AgentBox, ExecOutput, ExecRequest, Mount, Sandbox};

/// How long one check may run.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(600);
/// Output kept of one check (both streams); more is "cut", and a cut check fails.
pub const OUTPUT_CAP: usize = 4 * 1024 * 1024;
/// Lines of a check's output shown from its start and from its end.
const HEAD_LINES: usize = 10;
const TAIL_LINES: usize = 30;
/// Characters of one shown line.
const LINE_CHARS: usize = 300;

/// How one check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckStatus {
    /// The expected status; nothing else went wrong.
    Passed,
    /// Another exit status.
    Exit {
        /// What it exited with.
        code: i64,
        /// What passes.
        expected: i64,
    },
    /// The timeout fired.
    TimedOut,
    /// Killed by a signal.
    Signal(String),
    /// The run was interrupted while it ran.
    Interrupted,
    /// Its output was more than [`OUTPUT_CAP`].
    Truncated,
    /// Its container could not be made, run or removed.
    Sandbox(String),
    /// The candidate changed while it ran (the files named).
    Changed(Vec<String>),
    /// The candidate's identity could not be read (before: the check never ran).
    Unbound,
}

/// One check's result.
#[derive(Debug, Clone)]
pub struct CheckResult {
    /// The check.
    pub check: Check,
    /// How it ended.
    pub status: CheckStatus,
    /// Wall-clock time of the command in its container.
    pub duration: Duration,
    /// stdout then stderr as captured (cleaned before display by the writers).
    pub output: String,
}

impl CheckResult {
    /// Green.
    pub fn passed(&self) -> bool {
        self.status == CheckStatus::Passed
    }

    /// `exit 0, 1.3 s`, `exit 2, 1.3 s`, `超时 600 s`, `改了现场(a.txt)`...
    pub fn status_text(&self) -> String {
        let secs = format!("{:.1} s", self.duration.as_secs_f64());
        match &self.status {
            CheckStatus::Passed => format!("exit {}, {secs}", self.check.expect),
            CheckStatus::Exit { code, expected } if *expected == 0 => {
                format!("exit {code}, {secs}")
            }
            CheckStatus::Exit { code, expected } => {
                format!("exit {code},要 {expected}, {secs}")
            }
            CheckStatus::TimedOut => format!("超时,{secs}"),
            CheckStatus::Signal(s) => format!("被信号 {s} 杀掉,{secs}"),
            CheckStatus::Interrupted => format!("被打断,{secs}"),
            CheckStatus::Truncated => format!("输出太长被截断,{secs}"),
            CheckStatus::Sandbox(e) => format!("容器出错:{e}"),
            CheckStatus::Changed(files) => {
                let shown: Vec<&str> = files.iter().take(3).map(String::as_str).collect();
                format!("跑的时候现场变了({}),{secs}", shown.join("、"))
            }
            CheckStatus::Unbound => "读不全现场,没法绑定".to_string(),
        }
    }

    /// The head and tail of the output, a marker between them when lines were left out.
    pub fn head_tail(&self) -> String {
        let lines: Vec<&str> = self.output.lines().collect();
        let cut = |l: &&str| -> String {
            if l.chars().count() > LINE_CHARS {
                let s: String = l.chars().take(LINE_CHARS).collect();
                format!("{s}…")
            } else {
                l.to_string()
            }
        };
        if lines.len() <= HEAD_LINES + TAIL_LINES {
            return lines.iter().map(cut).collect::<Vec<_>>().join("\n");
        }
        let head: Vec<String> = lines[..HEAD_LINES].iter().map(cut).collect();
        let tail: Vec<String> = lines[lines.len() - TAIL_LINES..].iter().map(cut).collect();
        format!(
            "{}\n…(中间 {} 行省略)…\n{}",
            head.join("\n"),
            lines.len() - HEAD_LINES - TAIL_LINES,
            tail.join("\n")
        )
    }
}

/// Every check's result of one round, and the candidate they ran on.
#[derive(Debug, Clone, Default)]
pub struct GateReport {
    /// In check order.
    pub results: Vec<CheckResult>,
    /// The candidate's identity when the checks started (`None`: unreadable).
    pub identity: Option<WorkspaceIdentity>,
}

impl GateReport {
    /// Checks that passed.
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed()).count()
    }

    /// Checks run.
    pub fn total(&self) -> usize {
        self.results.len()
    }

    /// The red ones.
    pub fn red(&self) -> Vec<&CheckResult> {
        self.results.iter().filter(|r| !r.passed()).collect()
    }

    /// Every check passed (true without checks).
    pub fn green(&self) -> bool {
        self.red().is_empty()
    }

    /// The identity's digest, for records (`None` when unreadable).
    pub fn digest(&self) -> Option<String> {
        self.identity.as_ref().map(WorkspaceIdentity::digest)
    }

    /// The screen line: `✓ 3/4 检查 · ✗ make test (exit 2, 1.3 s)`.
    pub fn screen_line(&self) -> String {
        let mark = if self.green() { "✓" } else { "✗" };
        let mut s = format!("{mark} {}/{} 检查", self.passed(), self.total());
        for r in self.red() {
            let _ = write!(s, " · ✗ {} ({})", r.check.one_line(), r.status_text());
        }
        s
    }

    /// What the judge reads before deciding: every check's id, command, status, duration and
    /// output's head and tail; red ones block ACHIEVED.
    pub fn judge_block(&self) -> String {
        let mut s = format!(
            "## 检查结果(flowerbox 自己在只读的现场上跑的,{}/{} 通过)\n",
            self.passed(),
            self.total()
        );
        for r in &self.results {
            s.push_str(&result_block(r));
        }
        if !self.green() {
            s.push_str(
                "\n有检查是红的:这一轮不能判 ACHIEVED(判了也会被记成 NOT_YET)。照样逐条看现场,把差距写清楚。\n",
            );
        }
        s
    }

    /// What the coordinator's next round is told: the red checks and their output.
    pub fn feedback_block(&self) -> Option<String> {
        let red = self.red();
        if red.is_empty() {
            return None;
        }
        let mut s = format!(
            "\n\nflowerbox 自己跑的检查有 {} 条没过(全过才可能判达成):\n",
            red.len()
        );
        for r in red {
            s.push_str(&result_block(r));
        }
        Some(s)
    }

    /// The verdict record's block (`notes/判定记录.md`).
    pub fn record_block(&self) -> String {
        let mut s = format!(
            "检查:{}/{} 通过(现场 {})\n\n",
            self.passed(),
            self.total(),
            self.digest()
                .map_or_else(|| "读不全".to_string(), |d| d[..12].to_string())
        );
        for r in &self.results {
            s.push_str(&result_block(r));
        }
        s.push('\n');
        s
    }

    /// Why the round cannot be ACHIEVED (the first red check), if it cannot.
    pub fn blocking_reason(&self) -> Option<String> {
        let red = self.red();
        let first = red.first()?;
        let more = if red.len() > 1 {
            format!(",另有 {} 条检查也没过", red.len() - 1)
        } else {
            String::new()
        };
        Some(format!(
            "检查 {} 没过:`{}`({}){more}。检查红着不能判达成,按未达成处理",
            first.check.id(),
            first.check.one_line(),
            first.status_text()
        ))
    }
}

/// One check in the judge's, the coordinator's and the record's words.
fn result_block(r: &CheckResult) -> String {
    let mark = if r.passed() { "✓" } else { "✗" };
    let mut s = format!(
        "\n### {mark} {} `{}` — {}\n",
        r.check.id(),
        r.check.one_line(),
        r.status_text()
    );
    let out = r.head_tail();
    if !out.trim().is_empty() {
        let _ = write!(s, "```\n{out}\n```\n");
    }
    s
}

/// What the checks run on.
#[derive(Debug, Clone)]
pub enum Target {
    /// The candidate: the judge's read-only view of it.
    Candidate,
    /// A probe's mutated copy of it (a host directory), shown read-only at the candidate's
    /// path in the judge's view ([`super::probe`]).
    Copy(PathBuf),
}

impl Target {
    /// The box of check `n`'s container (`<prefix>-<n>`).
    fn gate_box(&self, rt: &Runtime, prefix: &str, n: usize) -> AgentBox {
        let name = format!("{prefix}-{n}");
        match self {
            Target::Candidate => rt.main_box(&name, Role::Judge),
            // The judge's view with the copy in the candidate's place: the workbench (its
            // artifacts, which checks may name) shown too when it lies inside the candidate,
            // where the copy has only its empty mount point.
            Target::Copy(dir) => {
                let ws = rt.config().workspace.clone();
                let mut b = rt.main_box(&name, Role::Judge);
                for m in b.mounts.iter_mut().filter(|m| m.inside == ws) {
                    m.host = dir.clone();
                }
                if let Some(wb) = rt.workbench().map(|w| w.root().to_path_buf()) {
                    if wb.starts_with(&ws) {
                        b.mounts.push(Mount::same(wb, true));
                    }
                }
                b
            }
        }
    }

    /// Its content identity now (`None`: unreadable).
    async fn identity(&self, rt: &Arc<Runtime>) -> Option<WorkspaceIdentity> {
        match self {
            Target::Candidate => super::guard::scene(rt).await,
            Target::Copy(dir) => {
                rt.sandboxes().settled().await;
                rt.sandboxes()
                    .files()
                    .identity(dir, &Default::default())
                    .await
                    .ok()
            }
        }
    }
}

/// Runs `checks` one after another, each in a fresh gate container (`gate-<round>-<n>`).
/// The containers are made all at once ahead of their check (making one changes nothing a
/// check sees) and each is removed while the next check runs; a removal that fails turns its
/// check red. Never fails: what goes wrong is the check's status.
pub async fn run_checks(rt: &Arc<Runtime>, checks: &[Check], round: u32) -> GateReport {
    run_checks_on(rt, checks, &format!("gate-{round}"), &Target::Candidate).await
}

/// [`run_checks`] on `target`, the containers named `<prefix>-<n>`.
pub async fn run_checks_on(
    rt: &Arc<Runtime>,
    checks: &[Check],
    prefix: &str,
    target: &Target,
) -> GateReport {
    let factory = rt.sandboxes().clone();
    let boxes: Vec<AgentBox> = (1..=checks.len())
        .map(|n| target.gate_box(rt, prefix, n))
        .collect();
    let made: Vec<_> = boxes
        .iter()
        .map(|b| {
            let (f, b) = (factory.clone(), b.clone());
            tokio::spawn(async move { f.sandbox(&b).await })
        })
        .collect();
    let first = target.identity(rt).await;
    let mut report = GateReport {
        results: Vec::new(),
        identity: first.clone(),
    };
    let mut before = first;
    let mut removals = Vec::new();
    for ((check, abox), made) in checks.iter().zip(&boxes).zip(made) {
        let sandbox = match made.await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let (result, after) = run_one(rt, target, check, abox, sandbox, before.as_ref()).await;
        let (f, agent) = (factory.clone(), abox.agent.clone());
        removals.push(tokio::spawn(async move { f.release(&agent).await }));
        report.results.push(result);
        before = after;
    }
    for (r, removal) in report.results.iter_mut().zip(removals) {
        let failed = match removal.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let (Some(e), true) = (failed, r.passed()) {
            r.status = CheckStatus::Sandbox(format!("删不掉检查的容器:{e}"));
        }
    }
    report
}

/// One check in its container; returns its result and the identity after it (the next
/// check's before).
async fn run_one(
    rt: &Arc<Runtime>,
    target: &Target,
    check: &Check,
    abox: &AgentBox,
    sandbox: Result<Arc<dyn Sandbox>, String>,
    before: Option<&WorkspaceIdentity>,
) -> (CheckResult, Option<WorkspaceIdentity>) {
    let done = |status, output: String, duration, after| {
        (
            CheckResult {
                check: check.clone(),
                status,
                duration,
                output,
            },
            after,
        )
    };
    // No identity before: nothing this check says could be bound to a candidate.
    let Some(before) = before else {
        let now = target.identity(rt).await;
        return done(CheckStatus::Unbound, String::new(), Duration::ZERO, now);
    };
    let started = Instant::now();
    let ran = match sandbox {
        Ok(sb) => sb
            .exec(ExecRequest {
                command: check.command.clone(),
                cwd: abox.workdir.clone(),
                env: vec![("FLOWERBOX_CHECK".to_string(), check.id())],
                timeout: CHECK_TIMEOUT,
                output_cap: OUTPUT_CAP,
                spill_dir: None,
                cancel: rt.cancel_token(),
            })
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let took = started.elapsed();
    let after = target.identity(rt).await;
    let (status, output) = match ran {
        Err(e) => (CheckStatus::Sandbox(e), String::new()),
        Ok(out) => (
            status_of(&out, check.expect, before, after.as_ref()),
            joined(&out),
        ),
    };
    done(status, output, took, after)
}

/// The status of a finished command (DESIGN.md invariant 4: the exit code is one fact among
/// several, never enough alone).
fn status_of(
    out: &ExecOutput,
    expect: i64,
    before: &WorkspaceIdentity,
    after: Option<&WorkspaceIdentity>,
) -> CheckStatus {
    if out.timed_out {
        return CheckStatus::TimedOut;
    }
    if out.interrupted {
        return CheckStatus::Interrupted;
    }
    if let Some(sig) = &out.signal {
        return CheckStatus::Signal(sig.clone());
    }
    if out.truncated {
        return CheckStatus::Truncated;
    }
    let Some(after) = after else {
        return CheckStatus::Unbound;
    };
    if before != after {
        return CheckStatus::Changed(before.changed(after));
    }
    match out.exit_code {
        Some(code) if code == expect => CheckStatus::Passed,
        Some(code) => CheckStatus::Exit {
            code,
            expected: expect,
        },
        None => CheckStatus::Sandbox("退出码读不到".to_string()),
    }
}

/// stdout then stderr, one text.
fn joined(out: &ExecOutput) -> String {
    match (out.stdout.is_empty(), out.stderr.is_empty()) {
        (_, true) => out.stdout.clone(),
        (true, false) => out.stderr.clone(),
        (false, false) => format!("{}\n{}", out.stdout.trim_end(), out.stderr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::checks::CheckSource;

    fn result(status: CheckStatus, output: &str) -> CheckResult {
        CheckResult {
            check: Check::new(CheckSource::User(1), "make test"),
            status,
            duration: Duration::from_millis(1300),
            output: output.to_string(),
        }
    }

    fn id(files: &[(&str, &str)]) -> WorkspaceIdentity {
        let dir = tempfile::tempdir().unwrap();
        for (p, c) in files {
            std::fs::write(dir.path().join(p), c).unwrap();
        }
        crate::sandbox::files::identity::identity(dir.path(), &Default::default()).unwrap()
    }

    #[test]
    fn only_a_clean_matching_exit_passes() {
        let a = id(&[("a", "1")]);
        let b = id(&[("a", "2")]);
        let ok = ExecOutput {
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(status_of(&ok, 0, &a, Some(&a)), CheckStatus::Passed);
        assert_eq!(
            status_of(&ok, 1, &a, Some(&a)),
            CheckStatus::Exit {
                code: 0,
                expected: 1
            }
        );
        // A timeout or a kill whose exit code happens to match is never a pass.
        for (out, want) in [
            (
                ExecOutput {
                    timed_out: true,
                    ..ok.clone()
                },
                CheckStatus::TimedOut,
            ),
            (
                ExecOutput {
                    signal: Some("SIGKILL".into()),
                    exit_code: Some(1),
                    ..Default::default()
                },
                CheckStatus::Signal("SIGKILL".into()),
            ),
            (
                ExecOutput {
                    interrupted: true,
                    ..ok.clone()
                },
                CheckStatus::Interrupted,
            ),
            (
                ExecOutput {
                    truncated: true,
                    ..ok.clone()
                },
                CheckStatus::Truncated,
            ),
        ] {
            assert_eq!(status_of(&out, 1, &a, Some(&a)), want);
            assert_eq!(status_of(&out, 0, &a, Some(&a)), want);
        }
        // The candidate changed, or cannot be read after: red whatever the exit.
        assert_eq!(
            status_of(&ok, 0, &a, Some(&b)),
            CheckStatus::Changed(vec!["a".into()])
        );
        assert_eq!(status_of(&ok, 0, &a, None), CheckStatus::Unbound);
        let no_code = ExecOutput::default();
        assert!(matches!(
            status_of(&no_code, 0, &a, Some(&a)),
            CheckStatus::Sandbox(_)
        ));
    }

    #[test]
    fn the_screen_line_the_judge_and_the_coordinator() {
        let report = GateReport {
            results: vec![
                result(CheckStatus::Passed, "ok"),
                result(
                    CheckStatus::Exit {
                        code: 2,
                        expected: 0,
                    },
                    "cc: error\nmake: *** [test] Error 2",
                ),
            ],
            identity: None,
        };
        assert_eq!(
            report.screen_line(),
            "✗ 1/2 检查 · ✗ make test (exit 2, 1.3 s)"
        );
        assert!(!report.green());
        let judge = report.judge_block();
        assert!(judge.contains("1/2 通过"), "{judge}");
        assert!(
            judge.contains("### ✗ user-1 `make test` — exit 2, 1.3 s"),
            "{judge}"
        );
        assert!(judge.contains("make: *** [test] Error 2"), "{judge}");
        assert!(judge.contains("不能判 ACHIEVED"), "{judge}");
        let fb = report.feedback_block().unwrap();
        assert!(fb.contains("1 条没过") && fb.contains("cc: error"), "{fb}");
        assert!(report
            .blocking_reason()
            .unwrap()
            .contains("检查 user-1 没过:`make test`(exit 2, 1.3 s)"));
        let green = GateReport {
            results: vec![result(CheckStatus::Passed, "")],
            identity: None,
        };
        assert_eq!(green.screen_line(), "✓ 1/1 检查");
        assert_eq!(green.feedback_block(), None);
        assert_eq!(green.blocking_reason(), None);
    }

    #[test]
    fn long_output_keeps_its_head_and_tail() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let shown = result(CheckStatus::Passed, &text).head_tail();
        assert!(shown.starts_with("line 1\n") && shown.ends_with("line 100"));
        assert!(shown.contains("…(中间 60 行省略)…") && !shown.contains("line 50\n"));
    }
}
