//! Verify-after-act of pinned mounts (issue 27 §3, [`crate::sandbox::Pin`]).
//!
//! A bind mount's source is a path the engine resolves when it mounts: later than any check
//! the host made, and a process that can write the workspace could have swapped a component for
//! a symlink in between (or the target's, so the mount lands elsewhere in the container). The
//! engine cannot be handed the host's open handle instead (`/proc/<pid>/fd/<n>`: runc's bind
//! from another mount namespace's mount fails with `EINVAL`), so the host checks what was
//! mounted, after the fact, before anything runs in the container:
//!
//! - the container's mount table (`/proc/<pid>/mountinfo`, read once; nothing runs in the
//!   container yet, so it no longer changes) must have a mount at exactly the pinned mount's
//!   path, with its rights; the topmost one there is the candidate `M`;
//! - the host opens that path through the container's root (`/proc/<pid>/root/…`), and the
//!   handle must be on `M` (its `mnt_id` in `/proc/self/fdinfo`) and at `M`'s root (`..` of a
//!   directory is on another mount): then `fstat` of the handle is `M`'s root object, a fact
//!   no later rename can change;
//! - that object must be the one the host pinned (device and inode).
//!
//! Each pinned mount found at its own path with its own pinned object is not yet enough: under
//! a racing swap (`scope_workers`) containers also came up with a second, read-write mount where
//! a link led (`src -> .git` gave a writable `.git` beside the verified scope). So no read-write
//! mount may sit inside the box's mounts unless it is one of the box's own read-write mounts.
//! Anything else (a path swapped, a mount elsewhere, the container's `/proc` out of reach)
//! refuses the box: the container is removed and the worker never runs.

use rustix::fs::{openat, Mode, OFlags, CWD};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

use crate::sandbox::{Mount, SandboxError};

/// One line of a mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: u64,
    point: PathBuf,
    rw: bool,
}

/// Checks every pinned mount of `mounts` in the container whose first process is `pid`.
///
/// # Errors
/// [`SandboxError::OutsideMounts`] naming the first mount that is not what the host pinned;
/// [`SandboxError::Container`] when the container's view cannot be read.
pub(crate) fn verify(pid: i64, mounts: &[Mount]) -> Result<(), SandboxError> {
    let pinned: Vec<_> = mounts
        .iter()
        .filter_map(|m| m.pin.as_ref().map(|pin| (m, pin)))
        .collect();
    if pinned.is_empty() {
        return Ok(());
    }
    let unreadable = |what: &str, e: &dyn std::fmt::Display| {
        SandboxError::Container(format!("核对写权限范围的挂载:读不到容器的 {what}:{e}"))
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let table = std::fs::read_to_string(proc_dir.join("mountinfo"))
        .map_err(|e| unreadable("mountinfo", &e))?;
    let entries = parse(&table);
    for (m, pin) in pinned {
        let wrong = || SandboxError::OutsideMounts(m.inside.clone());
        let Some(top) = entries.iter().rev().find(|e| e.point == m.inside) else {
            return Err(wrong());
        };
        if top.rw == m.read_only {
            return Err(wrong());
        }
        let rel = m.inside.strip_prefix("/").unwrap_or(&m.inside);
        let fd = openat(
            CWD,
            proc_dir.join("root").join(rel),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unreadable(&m.inside.display().to_string(), &e))?;
        if mnt_id(&fd)? != top.id {
            return Err(wrong());
        }
        let st = rustix::fs::fstat(&fd).map_err(|e| unreadable("fstat", &e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
            let up = openat(&fd, "..", OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| unreadable("..", &e))?;
            if mnt_id(&up)? == top.id {
                return Err(wrong());
            }
        }
        let found = (st.st_dev, st.st_ino);
        if pin.identity().ok() != Some(found) {
            return Err(wrong());
        }
    }
    match stray_writable(&entries, mounts) {
        Some(point) => Err(SandboxError::OutsideMounts(point)),
        None => Ok(()),
    }
}

/// A read-write mount inside the box's mounts that is none of the box's own read-write ones:
/// where a mount the engine made landed when its destination was resolved through a link
/// swapped in between (`src -> .git` mounts the repository writable at `.git`). Each pinned
/// mount is also where it belongs, checked above; this refuses whatever else appeared.
fn stray_writable(entries: &[Entry], mounts: &[Mount]) -> Option<PathBuf> {
    let writable: Vec<&std::path::Path> = mounts
        .iter()
        .filter(|m| !m.read_only)
        .map(|m| m.inside.as_path())
        .collect();
    entries
        .iter()
        .filter(|e| e.rw && !writable.contains(&e.point.as_path()))
        .find(|e| mounts.iter().any(|m| e.point.starts_with(&m.inside)))
        .map(|e| e.point.clone())
}

/// The mount id of the mount `fd` is on (`mnt_id:` of `/proc/self/fdinfo/<fd>`).
fn mnt_id(fd: &OwnedFd) -> Result<u64, SandboxError> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd()))
        .map_err(|e| SandboxError::Container(format!("fdinfo:{e}")))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| SandboxError::Container("fdinfo 里没有 mnt_id".into()))
}

/// The entries of a `mountinfo` text (octal escapes such as `\040` undone).
fn parse(table: &str) -> Vec<Entry> {
    table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some(Entry {
                id: f.first()?.parse().ok()?,
                point: PathBuf::from(unescape(f.get(4)?)),
                rw: f.get(5)?.split(',').any(|o| o == "rw"),
            })
        })
        .collect()
}

fn unescape(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .filter(|o| b[i] == b'\\' && o.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|o| o.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')));
        match code.and_then(|n| u8::try_from(n).ok()) {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The race `scope_workers` runs: the scope `src` was a link to `.git` when the engine
    /// resolved the mount's destination, so the table has a writable `.git`.
    #[test]
    fn a_writable_mount_that_is_not_the_boxs_own_is_refused() {
        let ws = Path::new("/w/p");
        let mounts = [
            Mount::same(ws.to_path_buf(), true),
            Mount::same(ws.join(".git"), true),
            Mount::same(ws.join("src"), false),
        ];
        let table = "1 0 8:1 / / rw - overlay overlay rw\n\
                     2 1 8:1 /w/p /w/p ro - ext4 /dev/vda ro\n\
                     3 2 8:1 /w/p/.git /w/p/.git ro - ext4 /dev/vda ro\n\
                     4 2 8:1 /w/p/src /w/p/src rw - ext4 /dev/vda rw\n\
                     5 1 0:9 / /home/agent rw - tmpfs tmpfs rw\n";
        assert_eq!(stray_writable(&parse(table), &mounts), None);
        let raced = format!("{table}6 3 8:1 /w/p/.git /w/p/.git rw - ext4 /dev/vda rw\n");
        assert_eq!(
            stray_writable(&parse(&raced), &mounts),
            Some(ws.join(".git"))
        );
        // Deeper down, too; read-only extras (masks) are fine.
        let deep = format!("{table}6 2 8:1 /w/p/a /w/p/a/b rw - ext4 /dev/vda rw\n");
        assert_eq!(stray_writable(&parse(&deep), &mounts), Some(ws.join("a/b")));
        let mask = format!("{table}6 2 0:9 / /w/p/runs ro - tmpfs tmpfs ro\n");
        assert_eq!(stray_writable(&parse(&mask), &mounts), None);
    }

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let t = "36 35 98:0 /mnt1 /a\\040b/src rw,noatime master:1 - ext3 /dev/root rw\n\
                 37 36 98:0 / /x ro,relatime - ext4 /dev/vda ro\n";
        let e = parse(t);
        assert_eq!(
            e,
            [
                Entry {
                    id: 36,
                    point: PathBuf::from("/a b/src"),
                    rw: true
                },
                Entry {
                    id: 37,
                    point: PathBuf::from("/x"),
                    rw: false
                }
            ]
        );
        assert_eq!(unescape("wö\\040rk"), std::ffi::OsString::from("wö rk"));
        assert_eq!(Path::new(&unescape("a\\9")), Path::new("a\\9"));
    }

    /// Against this process's own mount table: `/proc` is a mount whose root is what the path
    /// shows; a pin of another object at its path is refused.
    #[test]
    fn a_mount_is_checked_against_its_pin() {
        let pin = |p: &str| {
            crate::sandbox::Pin::new(
                rustix::fs::open(p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap(),
            )
        };
        let me = i64::from(std::process::id());
        let proc_mount = |p| Mount::pinned("/proc", p, false);
        // `/proc` is not necessarily a mount in a build sandbox; only then is this meaningful.
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        if !parse(&table)
            .iter()
            .any(|e| e.point == Path::new("/proc") && e.rw)
        {
            return;
        }
        verify(me, &[proc_mount(pin("/proc"))]).unwrap();
        assert!(matches!(
            verify(me, &[proc_mount(pin("/"))]),
            Err(SandboxError::OutsideMounts(_))
        ));
        // A path that is no mount at all.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().to_str().unwrap().to_string();
        assert!(matches!(
            verify(me, &[Mount::pinned(dir.path(), pin(&p), false)]),
            Err(SandboxError::OutsideMounts(_))
        ));
    }
}
