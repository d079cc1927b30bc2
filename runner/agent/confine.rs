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
        let resolved =
            resolve_symlinks(&lexical).ok_or_else(|| format!("{path}: 符号链接层数太多(有环?)"))?;
        let real_mount = self.mount_of(&resolved).ok_or_else(|| {
            format!(
                "{path}: 经符号链接指向 {} ,在可访问目录之外",
                resolved.display()
            )
        })?;
        if mount.source.is_some() || real_mount.source.is_some() {
            // A shadow shows another host directory inside the container only (a worker's
            // own ref directory): the file tools have no such view, so they stay out.
            return Err(format!("{path}: 这个路径只在容器里能用(用 Bash)"));
        }
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

/// Symlinks followed in one resolution before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Resolves every symlink in `p` (absolute, normalised), like `realpath -m`: components that do
/// not exist are kept as written, and a symlink whose target does not exist yet (dangling) is
/// still followed, so a `Write` through it is judged by where the file would really be created.
/// `None` on a symlink loop.
fn resolve_symlinks(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    // Components still to walk, last first (so `pop` yields the next one).
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut todo, p);
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            out.pop();
            continue;
        }
        if c == "." {
            continue;
        }
        let next = out.join(&c);
        match std::fs::symlink_metadata(&next) {
            Ok(md) if md.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                let target = std::fs::read_link(&next).ok()?;
                if target.is_absolute() {
                    out = PathBuf::from("/");
                }
                push_components(&mut todo, &target);
            }
            _ => out = next,
        }
    }
    Some(out)
}

/// Pushes `p`'s components onto `todo` so that they are popped in order.
fn push_components(todo: &mut Vec<std::ffi::OsString>, p: &Path) {
    let parts: Vec<std::ffi::OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
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
                    source: None,
                },
                Mount {
                    path: wb.clone(),
                    read_only: true,
                    source: None,
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
    fn dangling_symlink_pointing_out_is_refused() {
        // A Write through a link whose target does not exist yet would create the target:
        // outside the mounts, on the host.
        let (d, c, ws, wb) = setup();
        let target = d.path().join("created-outside.txt");
        std::os::unix::fs::symlink(&target, ws.join("dangling")).unwrap();
        let e = c.resolve("dangling", Access::Write).unwrap_err();
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
            .contains("只读"));
        assert!(!target.exists());
    }

    #[test]
    fn dangling_symlink_inside_resolves_to_its_target() {
        let (_d, c, ws, _) = setup();
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
        let e = c.resolve(p.to_str().unwrap(), Access::Write).unwrap_err();
        assert!(e.contains("只读"), "{e}");
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
        std::fs::create_dir_all(&shadow_src).unwrap();
        let c = Confinement::new(
            vec![
                Mount {
                    path: ws.clone(),
                    read_only: false,
                    source: None,
                },
                Mount {
                    path: git.clone(),
                    read_only: true,
                    source: None,
                },
                Mount {
                    path: git.join("refs/heads/flower/r"),
                    read_only: false,
                    source: Some(shadow_src),
                },
            ],
            ws.clone(),
        );
        assert!(c.resolve("src.rs", Access::Write).is_ok());
        assert!(c.resolve(".git/config", Access::Read).is_ok());
        for p in [".git/config", ".git/hooks/post-checkout", ".git/HEAD"] {
            assert!(
                c.resolve(p, Access::Write).unwrap_err().contains("只读"),
                "{p}"
            );
        }
        std::os::unix::fs::symlink(git.join("config"), ws.join("cfg")).unwrap();
        assert!(c
            .resolve("cfg", Access::Write)
            .unwrap_err()
            .contains("只读"));
        for access in [Access::Read, Access::Write] {
            let e = c
                .resolve(".git/refs/heads/flower/r/worker-2", access)
                .unwrap_err();
            assert!(e.contains("只在容器里"), "{e}");
        }
    }
}
