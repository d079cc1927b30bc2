//! Shared setup of the tests that run `flowerbox go --isolate` through the binary on the real
//! engine (`isolate_go`, `isolate_handback`, `isolate_signals`): the repository project, the
//! command, the brief, a child killed when the test ends early, and the workers' branches.
//!
//! Included with `mod` by crates that also include `flow_support` at their root.
#![allow(dead_code)]

use crate::flow_support::{Project, ScriptedModel};
use flowerbox_testkit::git;
use std::path::Path;
use std::process::Command;

/// A project whose workspace is a repository with one commit and its own identity.
pub fn repo_project() -> Project {
    repo_project_with(|_| {})
}

/// [`repo_project`] whose one commit also holds what `extra` writes into the workspace.
pub fn repo_project_with(extra: impl FnOnce(&Path)) -> Project {
    let p = Project::new();
    git(&p.ws, &["init", "-q", "-b", "main"]);
    git(&p.ws, &["config", "user.name", "Test User"]);
    git(&p.ws, &["config", "user.email", "test@example.invalid"]);
    // A commit of many files (isolate_signals: 30,000) would start a detached `gc --auto`
    // that repacks while the test's own `git fsck` reads: fsck then reported loose objects
    // missing (seen once under load).
    git(&p.ws, &["config", "gc.auto", "0"]);
    std::fs::write(p.ws.join("README.md"), "proj\n").unwrap();
    extra(&p.ws);
    git(&p.ws, &["add", "."]);
    git(&p.ws, &["commit", "-q", "-m", "init"]);
    p
}

/// `flowerbox --sandbox docker go --isolate --no-goal --timeout 0 写个 hello.sh` in `p`
/// against `model`.
pub fn go(p: &Project, model: &ScriptedModel) -> Command {
    p.command_in(
        "docker",
        model,
        &[
            "go",
            "--isolate",
            "--no-goal",
            "--timeout",
            "0",
            "写个 hello.sh",
        ],
    )
}

pub const BRIEF: &str = "## 目标\n写一个 hello.sh\n\n## 验收标准\n- 跑 `./hello.sh` 输出 hello\n\n## 边界\n不做别的\n\n## 未知与假设\n无\n";

/// Kills the child when the test ends early.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The workers' branches (`flower/*`) in the workspace.
pub fn branches(p: &Project) -> Vec<String> {
    git(
        &p.ws,
        &["branch", "--list", "flower/*", "--format=%(refname:short)"],
    )
    .lines()
    .map(str::to_string)
    .collect()
}
