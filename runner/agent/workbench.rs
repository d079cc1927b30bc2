//! The [`Workbench`] (seed 000 ".flower/", seed 001 "工作台"): `scripts/ artifacts/ notes/
//! spill/` plus `INDEX.md`, shared by every agent of a run and bind-mounted into each container.
//!
//! [`Workbench::locate`] is the only definition of where it lives (flower's `wake_state()` rule):
//! `<workspace>/.flower`, or `<workspace parent>/.flower-<name>` with `--isolate`.
//!
//! Workers can replace anything in it (with a symlink to a host file, or a FIFO) at any moment,
//! so the host touches it only through [`crate::fsroot::own`]: no symlink followed, regular
//! files only, replacements by rename.

use rustix::fs::FileType;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::fsroot::own;

/// Most entries listed per directory in `INDEX.md`.
pub const INDEX_LIMIT: usize = 40;

/// A workbench rooted at an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workbench {
    root: PathBuf,
}

impl Workbench {
    /// Where the workbench of `workspace` lives: `<ws>/.flower`, or with `isolate`
    /// `<ws parent>/.flower-<ws name>` (outside the repository, seed 000).
    pub fn locate(workspace: &Path, isolate: bool) -> PathBuf {
        if isolate {
            let name = workspace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            workspace
                .parent()
                .unwrap_or(workspace)
                .join(format!(".flower-{name}"))
        } else {
            workspace.join(".flower")
        }
    }

    /// A workbench at `root` (not created yet; see [`Workbench::ensure`]).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Workbench { root: root.into() }
    }

    /// Creates the four directories (idempotent) and refreshes the index.
    pub fn ensure(self) -> io::Result<Self> {
        for d in [self.scripts(), self.artifacts(), self.notes(), self.spill()] {
            own::create_dir_all(&d)?;
        }
        self.refresh()?;
        Ok(self)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `scripts/`: scripts worth running twice; first line `# desc: …`.
    pub fn scripts(&self) -> PathBuf {
        self.root.join("scripts")
    }
    /// `artifacts/`: long outputs (> 2000 characters).
    pub fn artifacts(&self) -> PathBuf {
        self.root.join("artifacts")
    }
    /// `notes/`: decisions across steps (brief, goal, Q&A log, handoffs).
    pub fn notes(&self) -> PathBuf {
        self.root.join("notes")
    }
    /// `spill/`: tool results of 4000 characters or more.
    pub fn spill(&self) -> PathBuf {
        self.root.join("spill")
    }
    /// `INDEX.md`.
    pub fn index_path(&self) -> PathBuf {
        self.root.join("INDEX.md")
    }

    /// Rewrites `INDEX.md` from the directories' contents (newest first, at most
    /// [`INDEX_LIMIT`] per directory); returns its text.
    pub fn refresh(&self) -> io::Result<String> {
        let mut out = String::from("# 工作台索引\n");
        for (dir, label) in [
            (self.scripts(), "scripts"),
            (self.artifacts(), "artifacts"),
            (self.notes(), "notes"),
        ] {
            let entries = list_newest_first(&dir);
            out.push_str(&format!("\n## {label}/ ({} 个)\n", entries.len()));
            for (path, len) in entries.iter().take(INDEX_LIMIT) {
                let rel = path
                    .strip_prefix(&self.root)
                    .unwrap_or(path)
                    .display()
                    .to_string();
                let desc = if label == "scripts" {
                    script_desc(path)
                } else {
                    None
                };
                match desc {
                    Some(d) => out.push_str(&format!("- {rel} — {d}\n")),
                    None => out.push_str(&format!("- {rel} ({})\n", human_size(*len))),
                }
            }
            if entries.len() > INDEX_LIMIT {
                out.push_str(&format!(
                    "- …… 另有 {} 个未列出\n",
                    entries.len() - INDEX_LIMIT
                ));
            }
        }
        if own::is_dir(&self.root) {
            // File names are an agent's: the index is cleaned like every note.
            crate::shown::notes::write(&self.index_path(), &out)?;
        }
        Ok(out)
    }

    /// The block that tells an agent where the workbench is and how to use it, followed by the
    /// current index. Goes at the end of the system prompt of the agents that get the index
    /// (the coordinator, the aside oracle), rebuilt at every prompt they are given.
    pub fn prompt_block(&self) -> String {
        let index = self.refresh().unwrap_or_default();
        format!(
            "工作台在 {root}(所有 agent 共享,跨步骤保留):\n\
             - {root}/scripts/ 要跑第二次的脚本,首行写 `# desc: 一句话`\n\
             - {root}/artifacts/ 超过 2000 字符的长产出:报告、数据、日志。对话里只给路径\n\
             - {root}/notes/ 跨步骤的决策记录\n\
             - {root}/spill/ 落盘的长工具结果\n\
             派活时把工作台路径写进任务书:执行者看不到这段索引。\n\n{index}",
            root = self.root.display()
        )
    }
}

fn list_newest_first(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut v: Vec<(PathBuf, u64, SystemTime)> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = own::entries(&d) else {
            continue;
        };
        for e in entries {
            let path = d.join(&e.name);
            match e.kind {
                // notes/archive holds old documents; listing them would crowd the index.
                FileType::Directory if e.name != "archive" => stack.push(path),
                FileType::RegularFile => v.push((path, e.len, e.modified)),
                // Symlinks, FIFOs, sockets: not the workbench's documents.
                _ => {}
            }
        }
    }
    v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().map(|(p, l, _)| (p, l)).collect()
}

/// The `# desc: …` sentence of a script's first two lines (read no further than 1 KiB).
fn script_desc(path: &Path) -> Option<String> {
    let text = own::read_head(path, 1024).ok()??;
    let head = String::from_utf8_lossy(&text).into_owned();
    head.lines().take(2).find_map(|l| {
        let l = l.trim_start_matches(['#', '/', '-', ' ', '!']);
        l.strip_prefix("desc:").map(|d| d.trim().to_string())
    })
}

fn human_size(n: u64) -> String {
    if n < 1000 {
        format!("{n}B")
    } else if n < 1_000_000 {
        format!("{:.1}K", n as f64 / 1000.0)
    } else {
        format!("{:.1}M", n as f64 / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn locate_plain_and_isolated() {
        let ws = Path::new("/home/u/proj");
        assert_eq!(
            Workbench::locate(ws, false),
            Path::new("/home/u/proj/.flower")
        );
        assert_eq!(
            Workbench::locate(ws, true),
            Path::new("/home/u/.flower-proj")
        );
    }

    #[test]
    fn index_lists_scripts_with_desc_and_caps_entries() {
        let dir = tempfile::tempdir().unwrap();
        let wb = Workbench::at(dir.path().join(".flower")).ensure().unwrap();
        fs::write(
            wb.scripts().join("check.sh"),
            "#!/bin/sh\n# desc: 跑一遍验收\nmake test\n",
        )
        .unwrap();
        for i in 0..45 {
            fs::write(wb.artifacts().join(format!("a{i}.log")), "x".repeat(1500)).unwrap();
        }
        fs::create_dir_all(wb.notes().join("archive")).unwrap();
        fs::write(wb.notes().join("archive").join("old.md"), "old").unwrap();
        let idx = wb.refresh().unwrap();
        assert!(idx.contains("scripts/check.sh — 跑一遍验收"), "{idx}");
        assert!(idx.contains("## artifacts/ (45 个)"));
        assert!(idx.contains("另有 5 个未列出"));
        assert!(!idx.contains("old.md"));
        assert_eq!(fs::read_to_string(wb.index_path()).unwrap(), idx);
        assert!(wb.prompt_block().contains(&wb.root().display().to_string()));
    }

    #[test]
    fn a_hostile_workbench_is_not_followed_or_waited_on() {
        // A worker replaced INDEX.md with a link to a host file, a script with a FIFO and a
        // note directory with a link to a host directory.
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("secret.md"), "# desc: SECRET").unwrap();
        let wb = Workbench::at(dir.path().join(".flower")).ensure().unwrap();
        fs::remove_file(wb.index_path()).unwrap();
        std::os::unix::fs::symlink(host.join("target"), wb.index_path()).unwrap();
        nix::unistd::mkfifo(&wb.scripts().join("hang.sh"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink(host.join("secret.md"), wb.scripts().join("s.sh")).unwrap();
        fs::remove_dir(wb.artifacts()).unwrap();
        std::os::unix::fs::symlink(&host, wb.artifacts()).unwrap();
        let idx = wb.refresh().unwrap();
        assert!(
            !idx.contains("SECRET") && !idx.contains("secret.md"),
            "{idx}"
        );
        assert!(!host.join("target").exists());
        assert!(!fs::symlink_metadata(wb.index_path()).unwrap().is_symlink());
    }
}
