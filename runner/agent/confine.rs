//! Path confinement for the host-side file tools: an agent's `Read`/`Write`/`Edit`/`Glob`/`Grep`
//! act on the host file system but see exactly what its container sees: its mounts (the most
//! specific one wins), with the same read-only / read-write rights, minus the masked run
//! directory. Paths resolve race-free through [`crate::fsroot::View`] (directory handles,
//! `O_NOFOLLOW` one component at a time, the container's symlink rules); nothing is checked by
//! path and opened later. Refusals are one-line messages for the model, never crashes.

use std::path::{Component, Path, PathBuf};

use super::tools::ToolError;
use crate::fsroot::{View, ViewError, ViewMount};
use crate::sandbox::Mount;

pub use crate::sandbox::files::Access;

/// The mounts an agent may touch and the directory relative paths start from.
#[derive(Debug, Clone)]
pub struct Confinement {
    view: View,
    workdir: PathBuf,
    /// Shadows ([`Mount::shadow`]): shown in the container only, masked for the file tools.
    shadows: Vec<PathBuf>,
    /// A scoped worker's write scope ([`super::scope`]), named when a write is refused.
    scope: Option<String>,
}

impl Confinement {
    /// `mounts` should be canonical absolute paths; `workdir` is where relative paths start.
    pub fn new(mounts: Vec<Mount>, workdir: PathBuf) -> Self {
        Self::masking(mounts, Vec::new(), workdir)
    }

    /// As [`Confinement::new`], with `masked` directories (canonical) hidden as the agent's
    /// container hides them.
    /// A shadow (a worker's own ref directory or object store, shown inside `.git` in its
    /// container only) is masked: the file tools have no such view, so they stay out.
    pub fn masking(mounts: Vec<Mount>, mut masked: Vec<PathBuf>, workdir: PathBuf) -> Self {
        let (shadows, mounts): (Vec<Mount>, Vec<Mount>) =
            mounts.into_iter().partition(Mount::is_shadow);
        let shadows: Vec<PathBuf> = shadows.into_iter().map(|m| m.inside).collect();
        masked.extend(shadows.iter().cloned());
        // Path identity: what the agent names is the host path the tools open.
        let mounts = mounts
            .into_iter()
            .map(|m| ViewMount {
                path: m.inside,
                read_only: m.read_only,
            })
            .collect();
        Confinement {
            view: View::new(mounts, masked),
            workdir,
            shadows,
            scope: None,
        }
    }

    /// Also hides the masked directories by their (device, inode) identities, taken at the
    /// start of the run: found again wherever a worker moved them.
    pub fn hiding_ids(mut self, ids: Vec<(u64, u64)>) -> Self {
        self.view = self.view.hiding_ids(ids);
        self
    }

    /// Names `scope` (the worker's write scope, described) when a write is refused.
    pub fn with_scope(mut self, scope: Option<String>) -> Self {
        self.scope = scope;
        self
    }

    /// The working directory.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The race-free view of the mounts.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// The absolute path `path` names (relative paths start at the workdir), not resolved.
    pub fn absolute(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.trim().is_empty() {
            return Err(ToolError::Path("路径是空的".into()));
        }
        let raw = Path::new(path);
        Ok(if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workdir.join(raw)
        })
    }

    /// Resolves `path` to the host path it names inside the mounts with the needed access
    /// (every symlink resolved as the container would). For decisions about a path only: the
    /// tools open files through [`Confinement::view`], never by the returned path.
    pub fn resolve(&self, path: &str, access: Access) -> Result<PathBuf, ToolError> {
        let abs = self.absolute(path)?;
        self.view
            .resolve(&abs, access == Access::Write, false)
            .map(|r| r.path().to_path_buf())
            .map_err(|e| ToolError::Path(self.message(path, &abs, &e)))
    }

    /// The message for the model when `path` (absolute: `abs`) does not resolve.
    pub fn message(&self, path: &str, abs: &Path, e: &ViewError) -> String {
        match e {
            ViewError::Outside(_) if !normalize(abs).is_some_and(|n| self.contains(&n)) => format!(
                "{path}: 不在这个 agent 能访问的目录里(可访问:{})",
                self.listing()
            ),
            ViewError::Outside(p) => {
                format!("{path}: 经符号链接指向 {} ,在可访问目录之外", p.display())
            }
            ViewError::Masked(p) if self.shadows.iter().any(|s| p.starts_with(s)) => {
                format!("{path}: 这个路径只在容器里能用(用 Bash)")
            }
            ViewError::Masked(_) => {
                format!("{path}: 在 flowerbox 的运行目录里,agent 看不到也改不了")
            }
            ViewError::ReadOnly(m) => match &self.scope {
                Some(scope) => format!(
                    "{path}: 不在写权限范围里(Read-only file system);这个执行者只能写:{scope}"
                ),
                None => format!("{path}: 这个 agent 对 {} 只有只读权限", m.display()),
            },
            ViewError::Loop => format!("{path}: 符号链接层数太多(有环?)"),
            ViewError::NotADirectory(p) => format!("{path}: {} 不是目录", p.display()),
            ViewError::NotFound(_) => format!("{path}: 没有这个文件或目录"),
            ViewError::Fs(e) => format!("{path}: {e}"),
        }
    }

    /// True when `path` (already absolute) is inside a mount.
    pub fn contains(&self, path: &Path) -> bool {
        self.view.mounts().iter().any(|m| path.starts_with(&m.path))
    }

    fn listing(&self) -> String {
        self.view
            .mounts()
            .iter()
            .map(|m| {
                format!(
                    "{}{}",
                    m.path.display(),
                    if m.read_only { " (只读)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Lexical normalisation: drops `.`, applies `..`; `None` when `..` climbs above the root.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Confinement, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let wb = root.join("wb");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&wb).unwrap();
        let c = Confinement::new(
            vec![
                Mount::same(ws.clone(), false),
                Mount::same(wb.clone(), true),
            ],
            ws.clone(),
        );
        (dir, c, ws, wb)
    }

    #[test]
    fn relative_and_absolute_inside() {
        let (_d, c, ws, _) = setup();
        std::fs::create_dir_all(ws.join("a")).unwrap();
        assert_eq!(
            c.resolve("a/b.txt", Access::Write).unwrap(),
            ws.join("a/b.txt")
        );
        assert_eq!(
            c.resolve(ws.join("x").to_str().unwrap(), Access::Read)
                .unwrap(),
            ws.join("x")
        );
        assert_eq!(c.resolve("a/../b", Access::Read).unwrap(), ws.join("b"));
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, c, _, _) = setup();
        assert!(c.resolve("../outside.txt", Access::Read).is_err());
        let e = c
            .resolve("/etc/passwd", Access::Read)
            .unwrap_err()
            .to_string();
        assert!(e.contains("不在这个 agent 能访问的目录里"), "{e}");
        assert!(c.resolve("a/../../..", Access::Read).is_err());
        assert!(c.resolve("", Access::Read).is_err());
    }

    #[test]
    fn symlink_pointing_out_is_refused() {
        let (d, c, ws, _) = setup();
        let outside = d.path().join("secret");
        std::fs::write(&outside, "x").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        std::os::unix::fs::symlink(d.path(), ws.join("dirlink")).unwrap();
        let e = c.resolve("link", Access::Read).unwrap_err().to_string();
        assert!(e.contains("符号链接"), "{e}");
        assert!(c.resolve("dirlink/new.txt", Access::Write).is_err());
    }

    #[test]
    fn dangling_symlink_pointing_out_is_refused() {
        // A Write through a link whose target does not exist yet would create the target:
        // outside the mounts, on the host.
        let (d, c, ws, wb) = setup();
        let target = d.path().join("created-outside.txt");
        std::os::unix::fs::symlink(&target, ws.join("dangling")).unwrap();
        let e = c
            .resolve("dangling", Access::Write)
            .unwrap_err()
            .to_string();
        assert!(e.contains("符号链接"), "{e}");
        assert!(c.resolve("dangling", Access::Read).is_err());
        // Relative targets, chains through links inside the mount, and a dangling directory.
        std::os::unix::fs::symlink("../nowhere/x.txt", ws.join("rel")).unwrap();
        assert!(c.resolve("rel", Access::Write).is_err());
        std::os::unix::fs::symlink(ws.join("dangling"), ws.join("chain")).unwrap();
        assert!(c.resolve("chain", Access::Write).is_err());
        std::os::unix::fs::symlink(d.path().join("no-dir"), ws.join("dir")).unwrap();
        assert!(c.resolve("dir/f.txt", Access::Write).is_err());
        // A dangling link into the read-only workbench is not a way to write there.
        std::os::unix::fs::symlink(wb.join("new.md"), ws.join("towb")).unwrap();
        assert!(c
            .resolve("towb", Access::Write)
            .unwrap_err()
            .to_string()
            .contains("只读"));
        assert!(!target.exists());
    }

    #[test]
    fn dangling_symlink_inside_resolves_to_its_target() {
        let (_d, c, ws, _) = setup();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink("sub/new.txt", ws.join("later")).unwrap();
        assert_eq!(
            c.resolve("later", Access::Write).unwrap(),
            ws.join("sub/new.txt")
        );
        std::os::unix::fs::symlink("loop2", ws.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", ws.join("loop2")).unwrap();
        assert!(c.resolve("loop1", Access::Write).is_err());
    }

    #[test]
    fn read_only_mount_refuses_writes() {
        let (_d, c, _, wb) = setup();
        let p = wb.join("notes.md");
        assert!(c.resolve(p.to_str().unwrap(), Access::Read).is_ok());
        let e = c
            .resolve(p.to_str().unwrap(), Access::Write)
            .unwrap_err()
            .to_string();
        assert!(e.contains("只读"), "{e}");
    }

    #[test]
    fn the_run_directory_is_masked() {
        let (_d, c, ws, _) = setup();
        let runs = ws.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        std::fs::write(runs.join("manifest.json"), "[]").unwrap();
        let c = Confinement::masking(
            c.view()
                .mounts()
                .iter()
                .map(|m| Mount::same(m.path.clone(), m.read_only))
                .collect(),
            vec![runs],
            ws,
        );
        for access in [Access::Read, Access::Write] {
            let e = c
                .resolve("runs/manifest.json", access)
                .unwrap_err()
                .to_string();
            assert!(e.contains("运行目录"), "{e}");
        }
    }

    /// Issue 14 part 2: a read-only `.git` inside a read-write workspace wins below its path
    /// (also through a symlink), and a shadow (a worker's own ref directory) is the
    /// container's alone.
    #[test]
    fn nested_read_only_git_and_shadows_refuse_the_file_tools() {
        let (d, _, ws, _) = setup();
        let git = ws.join(".git");
        let shadow_src = d.path().join("own-refs");
        std::fs::create_dir_all(git.join("refs/heads/flower/r")).unwrap();
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n").unwrap();
        std::fs::write(git.join("refs/heads/flower/r/worker-2"), "x\n").unwrap();
        std::fs::create_dir_all(&shadow_src).unwrap();
        let m = |path: PathBuf, read_only: bool, shadow: Option<PathBuf>| match shadow {
            Some(host) => Mount::shadow(host, path, read_only),
            None => Mount::same(path, read_only),
        };
        let c = Confinement::new(
            vec![
                m(ws.clone(), false, None),
                m(git.clone(), true, None),
                m(git.join("refs/heads/flower/r"), false, Some(shadow_src)),
            ],
            ws.clone(),
        );
        assert!(c.resolve("src.rs", Access::Write).is_ok());
        assert!(c.resolve(".git/config", Access::Read).is_ok());
        for p in [".git/config", ".git/hooks/post-checkout", ".git/HEAD"] {
            let e = c.resolve(p, Access::Write).unwrap_err().to_string();
            assert!(e.contains("只读"), "{p}: {e}");
        }
        std::os::unix::fs::symlink(git.join("config"), ws.join("cfg")).unwrap();
        let e = c.resolve("cfg", Access::Write).unwrap_err().to_string();
        assert!(e.contains("只读"), "{e}");
        for access in [Access::Read, Access::Write] {
            let e = c
                .resolve(".git/refs/heads/flower/r/worker-2", access)
                .unwrap_err()
                .to_string();
            assert!(e.contains("只在容器里"), "{e}");
        }
    }
}
