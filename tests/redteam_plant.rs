//! Red team, issue 25 §2 and §5: nothing an agent plants runs when the user looks at the
//! results. Scripted hostile workers, whose Bash runs in their containers on the real engine,
//! plant repositories where the user is pointed — the workbench root and any depth (`.git`
//! directories, a `.GIT` variant, a `gitdir:` file, a bare repository with `core.worktree`),
//! a nested `src/.git` in the shared workspace, each with a `core.fsmonitor` that touches a
//! canary file outside every mount — and, with `--isolate`, commit symlinks that lead out of
//! the repository (absolute, `..`, through another link) or into the run directory, and a
//! bare repository as plain files. After the run, ended as the driver ends it (step release,
//! all containers gone, final sweep, worktrees closed, kept ones swept): no planted entry is
//! left where the user looks, each one's content is in the run's quarantine, no refused link
//! reached the user's branch (kept on its own), and a plain `git status` by the test in every
//! place a plant was never creates the canary. Every attempt is counted; a single success
//! fails the test. A last test (§5): a worktree holding an untracked nested repository is kept,
//! and the screen says so truthfully.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod isolate_support;

use flowerbox::sandbox::SandboxFactory;
use isolate_support::docker_support::{engine_or_skip, SERIAL};
use isolate_support::plain::PlainRun;
use isolate_support::user_git::{attempts_made, conclude, host_status, positive_control};
use isolate_support::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whole-test bound.
const BOUND: Duration = Duration::from_secs(600);

/// Shell helpers every attack script starts with: `fsm DIR` plants the canary fsmonitor in the
/// repository at DIR; `try NAME` announces an attempt.
const PRELUDE: &str = r#"set +e
fsm() { git -C "$1" config core.fsmonitor "touch '$MARK'; false"; }
try() { echo "ATTEMPT $1"; }
"#;

/// Workbench plants: root, nested, upper-case, a `gitdir:` file with its store, a bare
/// repository whose `core.worktree` is its parent.
const WORKBENCH: &str = r#"
try wb-root; git init -q "$WB" && fsm "$WB"
try wb-nested; git init -q "$WB/notes/sub" && fsm "$WB/notes/sub"
try wb-upper; git init -q "$WB/scripts/x" && fsm "$WB/scripts/x" && mv "$WB/scripts/x/.git" "$WB/scripts/x/.GIT"
try wb-gitfile; git init -q --separate-git-dir "$WB/artifacts/store" "$WB/artifacts/w" && fsm "$WB/artifacts/w"
try wb-bare; git init -q --bare "$WB/notes/evil.git" && git -C "$WB/notes/evil.git" config core.worktree .. && git -C "$WB/notes/evil.git" config core.bare false && fsm "$WB/notes/evil.git"
git init -q "$WB/evil" && fsm "$WB/evil"
echo DONE
"#;

/// The places of the workbench plants, where the user's `git status` is tried afterwards.
const WORKBENCH_PLACES: &[&str] = &[
    "",
    "notes",
    "notes/sub",
    "notes/evil.git",
    "scripts/x",
    "artifacts/w",
    "artifacts/store",
    "evil",
];

fn commit(links: &str) -> String {
    format!(
        "{PRELUDE}{links}\ngit add -A && git -c user.name=E -c user.email=e@e commit -qm links; echo DONE\n"
    )
}

/// Every entry under `root` (symlinks not followed) that git would take for a repository: a
/// `.git` in any case, or a directory holding `HEAD` beside `objects` or `refs`; `allow`ed
/// paths left out.
fn repositories(root: &Path, allow: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let names: Vec<_> = rd.flatten().collect();
        let has = |n: &str| names.iter().any(|e| e.file_name() == n);
        if has("HEAD") && (has("objects") || has("refs")) && !allow.contains(&d) {
            out.push(d.clone());
            continue;
        }
        for e in names {
            let p = e.path();
            if e.file_name().to_string_lossy().eq_ignore_ascii_case(".git") {
                if !allow.contains(&p) {
                    out.push(p);
                }
                continue;
            }
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The planted entries kept in the run's quarantine.
fn quarantined(runs: &Path, run: &str) -> Vec<PathBuf> {
    let q = runs.join("quarantine").join(run);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&q)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join("planted-git"))
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// True when some quarantined entry still holds the canary's fsmonitor line (content kept).
fn kept_for_inspection(entries: &[PathBuf]) -> usize {
    entries
        .iter()
        .filter(|p| {
            std::fs::read_to_string(p.join("config"))
                .map(|c| c.contains("fsmonitor"))
                .unwrap_or(false)
        })
        .count()
}

#[tokio::test]
async fn isolate_plants_in_the_workbench_and_committed_links_out_never_reach_the_user() {
    let Some(engine) = engine_or_skip("redteam_plant_isolate").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = repo(&root);
    let mark = root.join("MARK-planted");
    let wb_name = format!(".flower-{}", ws.file_name().unwrap().to_string_lossy());
    // From a worktree root (`<parent>/.flower-<ws>-worktrees/<run>/<agent>`) to the workbench.
    let up = format!("../../../{wb_name}/evil");
    let link_attacks: Vec<(&str, String)> = vec![
        ("link-absolute", "ln -s \"$WB/evil\" link-abs".to_string()),
        ("link-dotdot", format!("ln -s '{up}' link-rel")),
        (
            "link-through-link",
            format!("ln -s . hop && ln -s 'hop/{up}' link-hop"),
        ),
        ("link-into-runs", "ln -s runs/quarantine link-runs".into()),
        ("link-into-git", "ln -s .git/config link-git".into()),
        (
            "bare-committed",
            "git init -q --bare tools.git && git -C tools.git config core.worktree .. && touch tools.git/refs/heads/.keep tools.git/objects/.keep && fsm tools.git".into(),
        ),
    ];
    let names: Vec<String> = (0..link_attacks.len())
        .map(|i| format!("worker-{}", i + 2))
        .collect();
    let run = IsoRun::guarded(&engine, "redteam-plant", dir, ws.clone(), |_, wb, _| {
        let env = format!("export MARK='{}' WB='{}'\n", mark.display(), wb.display());
        let mut coordinator = vec![json!({"content": [tool("Agent", json!({"description": "布置者", "prompt": "整理工作台"}))]})];
        let mut agents = vec![json!({"role": "worker", "agent": "worker-1", "turns": [
            {"content": [tool("Bash", json!({"command": format!("{env}{PRELUDE}{WORKBENCH}"), "timeout": 120000}))]},
            {"content": [text(REPORT)]}]})];
        for ((what, script), name) in link_attacks.iter().zip(&names) {
            coordinator.push(json!({"content": [tool("Agent", json!({"description": what, "prompt": "加个链接"}))]}));
            agents.push(json!({"role": "worker", "agent": name, "turns": [
                {"content": [tool("Bash", json!({"command": format!("{env}{}", commit(&format!("try {what}; {script}"))), "timeout": 120000}))]},
                {"content": [text(REPORT)]}]}));
        }
        coordinator.push(json!({"content": [text("完了")]}));
        agents.insert(0, json!({"role": "coordinator", "turns": coordinator}));
        json!({"agents": agents})
    })
    .await;
    tokio::time::timeout(BOUND, coordinate(&run.rt, "布置"))
        .await
        .expect("bounded");
    let wb_out = &run.results_of("worker-1", "Bash")[0].1;
    let mut attempts = attempts_made(
        wb_out,
        &["wb-root", "wb-nested", "wb-upper", "wb-gitfile", "wb-bare"],
    );
    let mut breaches: Vec<String> = Vec::new();
    let agent_results = run.results_of("协调者", "Agent");
    let mut kept_branches = Vec::new();
    for (i, (what, _)) in link_attacks.iter().enumerate() {
        let name = &names[i];
        attempts += attempts_made(&run.results_of(name, "Bash")[0].1, &[*what]);
        let result = &agent_results[i + 1].1;
        if !result.contains("[合入被拒]") {
            breaches.push(format!("{what} merged: {result}"));
        }
        let (branch, _) = run.placement.worktree_of(name).unwrap();
        if !run
            .warnings()
            .iter()
            .any(|w| w.contains(&format!("没合入 {name} 的分支")))
        {
            breaches.push(format!("{what}: the user was not told"));
        }
        kept_branches.push(branch);
    }
    let closing = run.end_like_the_driver().await;

    // Nothing planted is left where the user looks: the workbench, the kept worktrees (their
    // own `.git` file is flowerbox's), the workspace.
    let mut kept = run.placement.kept_worktrees();
    kept.sort();
    if kept.len() != link_attacks.len() {
        breaches.push(format!("kept worktrees: {kept:?} {closing:?}"));
    }
    let mut look: Vec<(PathBuf, Vec<PathBuf>)> = vec![(run.wb.clone(), vec![])];
    for wt in &kept {
        look.push((wt.clone(), vec![wt.join(".git")]));
    }
    look.push((ws.clone(), vec![ws.join(".git")]));
    for (place, allow) in &look {
        for left in repositories(place, allow) {
            breaches.push(format!("left: {}", left.display()));
        }
    }
    // The user's branch has none of the links; each branch kept them.
    let main_files = git(&ws, &["ls-tree", "-r", "--name-only", "main"]);
    for f in [
        "link-abs",
        "link-rel",
        "link-hop",
        "link-runs",
        "link-git",
        "tools.git",
    ] {
        if main_files.lines().any(|l| l.starts_with(f)) {
            breaches.push(format!("{f} reached main"));
        }
        if ws.join(f).exists() || std::fs::symlink_metadata(ws.join(f)).is_ok() {
            breaches.push(format!("{f} in the workspace"));
        }
    }
    for b in &kept_branches {
        let listed = std::process::Command::new("git")
            .args(["ls-tree", "-r", "--name-only", b])
            .current_dir(&ws)
            .output()
            .unwrap();
        if !listed.status.success() || listed.stdout.is_empty() {
            breaches.push(format!("branch {b} not kept"));
        }
    }
    let runs = ws.join("runs");
    let q = quarantined(&runs, &run.run_id);
    let warnings = run.warnings();
    let lines = warnings
        .iter()
        .filter(|w| w.contains("移走了 agent 放下的 git 仓库"))
        .count();
    // The user's git where each plant was, through each kept link, in the quarantine.
    positive_control(&root);
    let mut tried = Vec::new();
    for p in WORKBENCH_PLACES {
        tried.push(run.wb.join(p));
    }
    for wt in &kept {
        tried.push(wt.clone());
        for l in ["link-abs", "link-rel", "link-hop", "tools.git"] {
            tried.push(wt.join(l));
        }
    }
    tried.push(ws.clone());
    for p in &q {
        tried.push(p.clone());
        tried.push(p.parent().unwrap().to_path_buf());
    }
    for d in tried.iter().filter(|d| d.is_dir()) {
        host_status(d, &root);
    }
    if mark.exists() {
        breaches.push("a planted command ran on the host".into());
    }
    attempts += 1;
    // Each planted entry's content is in the quarantine, with one line on screen.
    assert!(q.len() >= 7, "{q:?} {warnings:?}");
    assert_eq!(lines, q.len(), "{warnings:?}");
    assert!(kept_for_inspection(&q) >= 5, "{q:?}");
    conclude("redteam_plant", "--isolate", attempts, &breaches);
}

/// Plants in the shared workspace and its workbench (`.flower` inside it).
const SHARED: &str = r#"
try ws-nested; git init -q src && fsm src
try ws-upper; git init -q lib && fsm lib && mv lib/.git lib/.GIT
try ws-gitfile; git init -q --separate-git-dir store docs && fsm docs && mv docs/.git docs/.Git
try ws-replace-users; rm -f vendor/dep/.git && git init -q vendor/dep && fsm vendor/dep
try ws-bare; git init -q --bare tool.git && git -C tool.git config core.worktree .. && git -C tool.git config core.bare false && fsm tool.git
try wb-inside; git init -q .flower && fsm .flower
try deep; d=deep; for i in $(seq 1 300); do d="$d/d"; done; mkdir -p "$d" && git init -q "$d" && fsm "$d"
setsid nohup bash -c 'sleep 2; git init -q late && git -C late config core.fsmonitor "touch $0; false"' "$MARK" >/dev/null 2>&1 &
echo DONE
"#;

#[tokio::test]
async fn shared_workspace_nested_repositories_never_reach_the_user() {
    let Some(engine) = engine_or_skip("redteam_plant_plain").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = repo(&root);
    let mark = root.join("MARK-planted");
    // The user's own nested repository and submodule-style pointer, there before the run.
    git(&ws, &["init", "-q", "tools/own"]);
    std::fs::create_dir_all(ws.join("vendor/dep")).unwrap();
    std::fs::write(
        ws.join("vendor/dep/.git"),
        "gitdir: ../../.git/modules/dep\n",
    )
    .unwrap();
    let script = format!("export MARK='{}'\n{PRELUDE}{SHARED}", mark.display());
    let scenario = json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [tool("Agent", json!({"description": "布置者", "prompt": "整理"}))]},
            {"content": [text("完了")]}]},
        {"role": "worker", "turns": [
            {"content": [tool("Bash", json!({"command": script, "timeout": 120000}))]},
            {"content": [text(REPORT)]}]}]});
    let run = PlainRun::guarded(&engine, "redteam-plant-plain", &ws, scenario).await;
    tokio::time::timeout(BOUND, coordinate(&run.rt, "布置"))
        .await
        .expect("bounded");
    let mut attempts = attempts_made(
        &run.bash_output(),
        &[
            "ws-nested",
            "ws-upper",
            "ws-gitfile",
            "ws-replace-users",
            "ws-bare",
            "wb-inside",
            "deep",
        ],
    );
    // The step ends (its containers released, the step-end sweep), then the run: the late
    // plant of a process the worker left is caught by the final sweep.
    run.rt.release_agents().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.factory.teardown().await.expect("teardown");
    run.rt.sweep_plants(&[]).await;
    attempts += 1;

    let mut breaches: Vec<String> = Vec::new();
    let allow = [ws.join(".git"), ws.join("tools/own/.git")];
    for left in repositories(&ws, &allow) {
        breaches.push(format!("left: {}", left.display()));
    }
    if !ws.join("tools/own/.git/config").is_file() {
        breaches.push("the user's own nested repository was moved".into());
    }
    let q = quarantined(&ws.join("runs"), &run.run_id);
    let warnings = run.warnings();
    positive_control(&root);
    let mut deep = ws.join("deep");
    for _ in 0..300 {
        deep.push("d");
    }
    for d in [
        ws.clone(),
        ws.join("src"),
        ws.join("lib"),
        ws.join("docs"),
        ws.join("store"),
        ws.join("tool.git"),
        ws.join("vendor/dep"),
        ws.join(".flower"),
        ws.join(".flower/notes"),
        ws.join("late"),
        deep,
    ] {
        if d.is_dir() {
            host_status(&d, &root);
        }
    }
    if mark.exists() {
        breaches.push("a planted command ran on the host".into());
    }
    attempts += 1;
    assert!(q.len() >= 7, "{q:?} {warnings:?}");
    assert!(kept_for_inspection(&q) >= 4, "{q:?}");
    assert!(
        warnings
            .iter()
            .filter(|w| w.contains("移走了 agent 放下的 git 仓库") || w.contains("嵌套太深"))
            .count()
            >= q.len(),
        "{warnings:?}"
    );
    conclude("redteam_plant", "shared workspace", attempts, &breaches);
}

#[tokio::test]
async fn a_worktree_with_an_untracked_nested_repository_is_kept_as_said() {
    let Some(engine) = engine_or_skip("redteam_plant_kept").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = repo(dir.path());
    // The worker's change is merged; its nested repository (no commit: `git add` refuses it)
    // stays behind in the worktree.
    let script =
        "echo more >> a.txt && git init -q nested && echo mine > nested/work.txt && echo DONE";
    let run = IsoRun::guarded(&engine, "redteam-plant-kept", dir, ws.clone(), |_, _, _| {
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "执行者", "prompt": "改 a.txt"}))]},
                {"content": [text("完了")]}]},
            {"role": "worker", "agent": "worker-1", "turns": [
                {"content": [tool("Bash", json!({"command": script}))]},
                {"content": [text(REPORT)]}]}]})
    })
    .await;
    tokio::time::timeout(BOUND, coordinate(&run.rt, "改"))
        .await
        .expect("bounded");
    let agent = &run.results_of("协调者", "Agent")[0].1;
    assert!(agent.contains("已合入 main"), "{agent}");
    assert!(agent.contains("worktree 会留着"), "{agent}");
    let (branch, wt) = run.placement.worktree_of("worker-1").unwrap();
    let closing = run.end_like_the_driver().await;
    // Kept, as said, with the reason on the line; the work inside is still there.
    assert!(wt.join("nested/work.txt").is_file(), "{closing:?}");
    assert!(
        closing
            .iter()
            .any(|l| l.contains(&branch) && l.contains("nested")),
        "{closing:?}"
    );
    assert_eq!(run.placement.kept_worktrees(), vec![wt.clone()]);
    // Its `.git` went to the quarantine: the kept worktree holds no repository but its own.
    assert!(repositories(&wt, &[wt.join(".git")]).is_empty());
    assert_eq!(quarantined(&ws.join("runs"), &run.run_id).len(), 1);
}
