//! No repository an agent plants survives where the user is pointed (issue 25 §2, DESIGN.md
//! threat model 2): git runs wherever it finds a `.git`, and its `core.fsmonitor` runs on the
//! user's next `git status` (or a git-aware prompt or editor on `cd`).
//!
//! [`PlantGuard`] sweeps the places the user is sent to look — the shared workspace (without
//! `--isolate`), the workbench (root and any depth) and the worktrees kept at the end — for
//! entries named `.git` in any letter case (directory, `gitdir:` file or symlink) that were not
//! there when the run started, and moves each, race-free ([`crate::fsroot::plant`]), into the
//! run directory's `quarantine/<run>/<n>/` (masked from every agent), content kept for
//! inspection, renamed [`QUARANTINED`] and defused ([`plant::defuse`]: every `HEAD` of a git
//! directory in it and every nested `.git` renamed, so no git run there finds a repository),
//! with one line for the user. It sweeps when a step's containers are gone
//! ([`super::Runtime::release_agents`]) and once more after every container of the run is gone
//! (nothing of an agent runs any more then). The `.git` entries present when the run started —
//! the user's repository, its submodules — are recognised by path, (device, inode) and birth
//! time (an inode number reused by a replacement does not pass) and left alone; a kept worktree's own `.git` file is flowerbox's (mounted read-only for its
//! worker). A directory nested deeper than [`plant::MAX_DEPTH`] is moved whole.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::fsroot::plant::{self, Seen};

/// The name an entry gets in its quarantine directory: not `.git`, so no git finds it there.
pub const QUARANTINED: &str = "planted-git";

/// One entry moved into the quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Where it was.
    pub from: PathBuf,
    /// Where it is now.
    pub to: PathBuf,
}

/// A `.git` entry there at the start: relative path, (device, inode), birth.
type Known = (PathBuf, (u64, u64), Option<(i64, u32)>);

/// The sweeper of one run (see the [module docs](self)).
#[derive(Debug)]
pub struct PlantGuard {
    workspace: PathBuf,
    /// The `.git` entries of the workspace when the run started: (relative path, identity,
    /// birth).
    baseline: Vec<Known>,
    /// Workers write the workspace (cleared when a placement gives them worktrees).
    shared: AtomicBool,
    workbench: Option<PathBuf>,
    quarantine: PathBuf,
    /// Directories never entered: the run directory, the workbench (swept on its own).
    skip: Vec<(u64, u64)>,
    next: AtomicUsize,
    /// One sweep at a time.
    gate: Mutex<()>,
}

impl PlantGuard {
    /// A guard over `workspace` and `workbench` that moves what it finds below `quarantine`
    /// (a directory no agent sees); `masked` are the (device, inode) of directories no agent
    /// sees (never entered). Takes the baseline of the workspace's `.git` entries now: call it
    /// before any agent runs.
    pub fn new(
        workspace: &Path,
        workbench: Option<&Path>,
        quarantine: PathBuf,
        masked: &[(u64, u64)],
    ) -> PlantGuard {
        let mut skip = masked.to_vec();
        if let Some(id) = workbench.and_then(crate::fsroot::own::identity) {
            skip.push(id);
        }
        let mut baseline = Vec::new();
        let _ = plant::scan(workspace, &skip, &mut |f| {
            if matches!(f.seen, Seen::Git | Seen::GitDir) {
                baseline.push((f.rel.to_path_buf(), f.id, f.born));
            }
        });
        PlantGuard {
            workspace: workspace.to_path_buf(),
            baseline,
            shared: AtomicBool::new(true),
            workbench: workbench.map(Path::to_path_buf),
            quarantine,
            skip,
            next: AtomicUsize::new(0),
            gate: Mutex::new(()),
        }
    }

    /// Workers no longer write the workspace (each has its own worktree): it is not swept.
    pub fn workspace_not_shared(&self) {
        self.shared.store(false, Ordering::SeqCst);
    }

    /// Where this guard moves what it finds.
    pub fn quarantine(&self) -> &Path {
        &self.quarantine
    }

    /// Sweeps the workspace (when shared), the workbench and the worktrees `kept`; returns
    /// what was moved and the lines for the user (one per entry, and one per place it could
    /// not finish). Blocking.
    pub fn sweep(&self, kept: &[PathBuf]) -> (Vec<Moved>, Vec<String>) {
        let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        let mut moved = Vec::new();
        let mut lines = Vec::new();
        let mut places: Vec<(&Path, Place)> = Vec::new();
        if self.shared.load(Ordering::SeqCst) {
            places.push((self.workspace.as_path(), Place::Workspace));
        }
        if let Some(wb) = &self.workbench {
            places.push((wb.as_path(), Place::Workbench));
        }
        places.extend(kept.iter().map(|p| (p.as_path(), Place::Worktree)));
        for (root, place) in places {
            self.sweep_one(root, place, &mut moved, &mut lines);
        }
        (moved, lines)
    }

    fn sweep_one(
        &self,
        root: &Path,
        place: Place,
        moved: &mut Vec<Moved>,
        lines: &mut Vec<String>,
    ) {
        if !crate::fsroot::own::is_dir(root) {
            return;
        }
        let scanned = plant::scan(root, &self.skip, &mut |f| {
            let own = match place {
                Place::Workspace => self
                    .baseline
                    .iter()
                    .any(|(rel, id, born)| rel == f.rel && *id == f.id && *born == f.born),
                Place::Worktree => f.rel == Path::new(".git"),
                Place::Workbench => false,
            };
            if own || f.seen == Seen::Special {
                return;
            }
            let from = root.join(f.rel);
            let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
            let dest = self.quarantine.join(n.to_string());
            match plant::move_into(f.dir, f.name, &dest, std::ffi::OsStr::new(QUARANTINED)) {
                Ok(()) => {
                    let to = dest.join(QUARANTINED);
                    // Kept for inspection, but no git run in the quarantine finds it.
                    plant::defuse(&to);
                    tracing::warn!(from = %from.display(), to = %to.display(), "planted .git quarantined");
                    lines.push(moved_line(&from, &to, f.seen));
                    moved.push(Moved { from, to });
                }
                Err(e) => {
                    tracing::warn!(path = %from.display(), error = %e, "planted .git not moved");
                    lines.push(format!(
                        "没能把 {} 移走({e}):别在那里运行 git,先看一眼它的 config",
                        shown(&from)
                    ));
                }
            }
        });
        match scanned {
            Ok(unread) if !unread.is_empty() => lines.push(format!(
                "{} 里有 {} 个目录读不了,没查里面有没有放下的 git 仓库(第一个:{})",
                shown(root),
                unread.len(),
                shown(&root.join(&unread[0]))
            )),
            Ok(_) => {}
            Err(e) => lines.push(format!(
                "查不了 {} 里有没有放下的 git 仓库:{e}",
                shown(root)
            )),
        }
    }
}

/// Which place a sweep walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Workspace,
    Workbench,
    Worktree,
}

fn shown(p: &Path) -> String {
    crate::shown::clean(&p.display().to_string()).into_owned()
}

/// The user's line for one entry moved.
fn moved_line(from: &Path, to: &Path, seen: Seen) -> String {
    match seen {
        Seen::TooDeep => format!(
            "目录 {} 嵌套太深,查不完里面有没有放下的 git 仓库,整个移到了 {}",
            shown(from),
            shown(to)
        ),
        _ => format!(
            "移走了 agent 放下的 git 仓库 {}(宿主机上的 git 会执行它的配置,比如 core.fsmonitor);\
             内容在 {} 备查,别在里面运行 git",
            shown(from),
            shown(to)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_users_repositories_and_moves_every_new_one() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(ws.join(".git/objects")).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        let wb = ws.join(".flower");
        std::fs::create_dir_all(wb.join("notes")).unwrap();
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let masked = [crate::fsroot::own::identity(&runs).unwrap()];
        let q = runs.join("quarantine/r1");
        let guard = PlantGuard::new(&ws, Some(&wb), q.clone(), &masked);
        // What an agent plants afterwards.
        std::fs::create_dir_all(ws.join("src/.git")).unwrap();
        std::fs::write(ws.join("src/.git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::create_dir_all(wb.join(".GIT")).unwrap();
        std::fs::write(wb.join("notes/.Git"), "gitdir: /tmp/evil\n").unwrap();
        // The user's submodule pointer replaced by an agent's: a new inode.
        std::fs::remove_file(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git"), "gitdir: /tmp/evil\n").unwrap();
        let wt = root.join("wt");
        std::fs::create_dir_all(wt.join("x/.git")).unwrap();
        std::fs::write(wt.join(".git"), "gitdir: /repo/.git/worktrees/w\n").unwrap();
        let (moved, lines) = guard.sweep(std::slice::from_ref(&wt));
        let from: Vec<PathBuf> = moved.iter().map(|m| m.from.clone()).collect();
        assert_eq!(
            from,
            vec![
                ws.join("src/.git"),
                ws.join("sub/.git"),
                wb.join(".GIT"),
                wb.join("notes/.Git"),
                wt.join("x/.git"),
            ]
        );
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(lines[0].contains("core.fsmonitor"));
        assert!(ws.join(".git/objects").is_dir() && wt.join(".git").is_file());
        assert_eq!(
            std::fs::read_to_string(q.join("1/planted-git/config")).unwrap(),
            "[core]\n\tfsmonitor = evil\n"
        );
        // Nothing left to move; without a shared workspace the workspace is not walked.
        assert!(guard.sweep(std::slice::from_ref(&wt)).0.is_empty());
        guard.workspace_not_shared();
        std::fs::create_dir_all(ws.join("late/.git")).unwrap();
        assert!(guard.sweep(&[]).0.is_empty());
    }
}
