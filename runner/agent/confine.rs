//! Path confinement for the host-side file tools: an agent's `Read`/`Write`/`Edit`/`Glob`/`Grep`
//! act on the host filesystem but only inside its mounts, with the same read-only / read-write
//! rights its container has. `..` escapes, absolute paths outside, and symlinks that resolve
//! outside are refused (as tool errors, never crashes).

use std::path::{Component, Path, PathBuf};

use crate::sandbox::Mount;

/// What the tool wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read or list.
    Read,
    /// Create or modify.
    Write,
}

/// The mounts an agent may touch and the directory relative paths start from.
#[derive(Debug, Clone)]
pub struct Confinement {
    mounts: Vec<Mount>,
    workdir: PathBuf,
}

impl Confinement {
    /// `mounts` should be canonical absolute paths; `workdir` is where relative paths start.
    pub fn new(mounts: Vec<Mount>, workdir: PathBuf) -> Self {
        Confinement { mounts, workdir }
    }

    /// The working directory.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The mounts.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// Resolves `path` (absolute, or relative to the workdir) to a host path inside the mounts
    /// with the needed access. Errors are one-line messages for the model.
    pub fn resolve(&self, path: &str, access: Access) -> Result<PathBuf, String> {
        if path.trim().is_empty() {
            return Err("路径是空的".into());
        }
        let raw = Path::new(path);
        let joined = if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workdir.join(raw)
        };
        let lexical = normalize(&joined).ok_or_else(|| format!("{path}: 路径越过了根目录"))?;
        let mount = self.mount_of(&lexical).ok_or_else(|| {
            format!(
                "{path}: 不在这个 agent 能访问的目录里(可访问:{})",
                self.listing()
            )
        })?;
        let resolved = resolve_symlinks(&lexical);
        let real_mount = self.mount_of(&resolved).ok_or_else(|| {
            format!(
                "{path}: 经符号链接指向 {} ,在可访问目录之外",
                resolved.display()
            )
        })?;
        if access == Access::Write && (mount.read_only || real_mount.read_only) {
            return Err(format!(
                "{path}: 这个 agent 对 {} 只有只读权限",
                mount.path.display()
            ));
        }
        Ok(resolved)
    }

    /// True when `path` (already absolute) is inside a mount.
    pub fn contains(&self, path: &Path) -> bool {
        self.mount_of(path).is_some()
    }

    fn mount_of(&self, p: &Path) -> Option<&Mount> {
        // The longest matching mount wins (a worktree inside the repo's .git, etc.).
        self.mounts
            .iter()
            .filter(|m| p.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
    }

    fn listing(&self) -> String {
        self.mounts
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

/// Canonicalises the longest existing ancestor (following symlinks) and appends the rest.
fn resolve_symlinks(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (
            existing.file_name().map(|s| s.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
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
                Mount {
                    path: ws.clone(),
                    read_only: false,
                },
                Mount {
                    path: wb.clone(),
                    read_only: true,
                },
            ],
            ws.clone(),
        );
        (dir, c, ws, wb)
    }

    #[test]
    fn relative_and_absolute_inside() {
        let (_d, c, ws, _) = setup();
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
        assert!(c.resolve("/etc/passwd", Access::Read).is_err());
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
        let e = c.resolve("link", Access::Read).unwrap_err();
        assert!(e.contains("符号链接"), "{e}");
        assert!(c.resolve("dirlink/new.txt", Access::Write).is_err());
    }

    #[test]
    fn read_only_mount_refuses_writes() {
        let (_d, c, _, wb) = setup();
        let p = wb.join("notes.md");
        assert!(c.resolve(p.to_str().unwrap(), Access::Read).is_ok());
        let e = c.resolve(p.to_str().unwrap(), Access::Write).unwrap_err();
        assert!(e.contains("只读"), "{e}");
    }
}
