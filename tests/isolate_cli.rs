//! `--isolate` at the binary's edge (seed 000 "退出码"): outside a git repository it exits 1
//! with the seed's message before anything runs; in a repository without a commit it exits 1
//! saying worktrees start from HEAD. Nothing is created next to the workspace in either case.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::Path;

mod cli_support;
use cli_support::Scene;

/// `flowerbox` of `s` in `cwd`, past the credential gate, with a model nothing may reach.
fn flowerbox(s: &Scene, cwd: &Path) -> Command {
    let mut c = s.cmd();
    c.env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
        // Nothing may reach a model: a refused port.
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .current_dir(cwd);
    c
}

fn siblings(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn isolate_outside_a_repository_exits_1_with_the_seeds_message() {
    let s = Scene::new();
    let (ws, elsewhere) = (&s.cwd, s.root());
    for args in [
        vec!["go", "--isolate", "做 X"],
        vec!["--isolate", "做 X"],
        vec!["-w", ws.to_str().unwrap(), "go", "--isolate", "做 X"],
    ] {
        let cwd = if args[0] == "-w" { elsewhere } else { ws };
        flowerbox(&s, cwd)
            .args(&args)
            .assert()
            .code(1)
            .stdout("")
            .stderr(format!(
                "--isolate 要求 {} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。\n",
                ws.display()
            ));
    }
    assert_eq!(siblings(elsewhere), ["home", "proj"]);
    assert!(!ws.join("runs").exists());
}

#[test]
fn isolate_in_a_repository_without_a_commit_exits_1_and_says_why() {
    let s = Scene::new();
    git2::Repository::init(&s.cwd).unwrap();
    flowerbox(&s, &s.cwd)
        .args([
            "--sandbox",
            "host",
            "go",
            "--isolate",
            "--timeout",
            "0",
            "做 X",
        ])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("还没有任何提交"))
        .stderr(predicate::str::contains("panicked").not());
    assert!(!s.root().join(".flower-proj-worktrees").exists());
}
