//! The exec service (issue 17), which is no backend's: `flowerbox __exec-service` runs inside an
//! agent's sandbox as one long-lived process with its stdin and stdout attached, and runs the
//! agent's commands there, one frame each way a command instead of an engine request each.
//! A backend attaches to it (Docker: one attached exec per container, `docker/service`); a
//! remote one can do the same over its own attach (`pods/exec`), and it is the natural home of
//! the file operations a backend without the caller's disk runs inside the sandbox.
//!
//! - [`server`]: the service, inside the sandbox.
//! - [`proto`]: the frames between it and the host.
//! - [`end`]: the run's end inside the pod (every process of the service's uid killed).
//!
//! How the binary gets in: [`ServiceBinary::prepare`] puts a flowerbox binary into a private
//! directory of the host (mode 0700, never inside a mount): the running one as a hard link to
//! its executing image where the kernel allows (same file system; nobody can write an image
//! that runs, so it stays what started the run), else a copy (of `/proc/self/exe`, or of the
//! one the backend's options name); each agent container bind-mounts it read-only at
//! [`SERVICE_PATH`]. The engine is given only that private
//! path, so no container can swap what gets mounted (a link to the engine's socket, say). The
//! directory holds a `lock` file the run keeps `flock`ed while it lives; the kernel drops the
//! lock when the run dies, however it dies, so the next `prepare` removes the copies of runs
//! that are gone ([`sweep_stale`]; a killed run used to leave its 66 MB copy behind for good).
//! The service runs as the agent's engine user behind the container's exec prefix (a judge's
//! `setpriv` to its own uid and one capability): it can do nothing the agent's commands
//! cannot, and no credential passes through it.

pub mod channel;
pub mod domain;
pub mod end;
pub mod proto;
pub mod server;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use server::serve;

/// The variable that marks every process of one command (`FLOWERBOX_EXEC=<marker>`), so a
/// kill finds them all, and no MCP server's environment may set it.
pub const MARKER_VAR: &str = "FLOWERBOX_EXEC";

use crate::sandbox::SandboxError;

/// Process `pid`'s command line as `/proc` shows it, arguments joined by spaces, cut at `max`
/// characters (empty when it is gone or unreadable): what the service names processes by.
fn command_line(pid: impl std::fmt::Display, max: usize) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = String::from_utf8_lossy(&cmdline)
        .replace('\0', " ")
        .chars()
        .take(max)
        .collect();
    text.trim_end().to_string()
}

/// The hidden subcommand that runs the service (`flowerbox __exec-service`).
pub const SUBCOMMAND: &str = "__exec-service";

/// Where the binary is mounted in every agent container.
pub const SERVICE_PATH: &str = "/usr/local/libexec/flowerbox/exec-service";

/// Where the binary to copy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceSource {
    /// The running binary (`/proc/self/exe`): flowerbox itself.
    CurrentExe,
    /// A flowerbox binary at this host path (tests and examples, whose own binary is not).
    Path(PathBuf),
}

impl ServiceSource {
    /// The running binary when it is flowerbox; else a `flowerbox` beside it or one directory
    /// up (Cargo's `target/<profile>/` for tests in `deps/` and `examples/`); else none.
    pub fn discover() -> Option<ServiceSource> {
        let exe = std::env::current_exe().ok()?;
        if exe.file_name()? == "flowerbox" {
            return Some(ServiceSource::CurrentExe);
        }
        let dir = exe.parent()?;
        [dir.join("flowerbox"), dir.parent()?.join("flowerbox")]
            .into_iter()
            .find(|p| p.is_file())
            .map(ServiceSource::Path)
    }
}

/// Name prefix of every run's private directory in the temporary directory.
const DIR_PREFIX: &str = "flowerbox-exec-";

/// The file in a run's private directory that the run holds `flock`ed while it lives.
const LOCK_FILE: &str = "lock";

/// A directory younger than this is never swept: its run may be between making it and
/// locking it.
const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// A directory without a lock file (made by a flowerbox from before the lock) is swept once
/// it is this old: nothing tells whether its run still lives.
const UNLOCKED_AGE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The private copy of the service binary for one run; removed when dropped, and by the next
/// run's [`sweep_stale`] when this run dies without dropping it.
#[derive(Debug)]
pub struct ServiceBinary {
    /// Removes the directory when dropped, until handed over ([`ServiceBinary::hand_over`]).
    dir: std::sync::Mutex<Option<tempfile::TempDir>>,
    /// The directory's path.
    root: PathBuf,
    path: PathBuf,
    /// Held `flock`ed for the life of the copy: tells sweepers the run still lives.
    _lock: std::fs::File,
}

impl ServiceBinary {
    /// Puts `source` into a new private directory of the temporary directory (the running
    /// binary linked where the kernel allows, else copied), first sweeping the copies of runs
    /// that are gone (blocking I/O: call it off the runtime). Only a regular file is taken.
    pub fn prepare(source: &ServiceSource) -> Result<ServiceBinary, SandboxError> {
        Self::prepare_in(source, &std::env::temp_dir())
    }

    /// Removes the copy and its directory now (no container mounts it any more), so that
    /// dropping it later removes nothing. Blocking I/O.
    pub fn discard(&self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }

    /// Leaves the directory to another process to remove (a run's detached cleanup): dropping
    /// this no longer removes it. Its lock goes with this process, so should that process not
    /// remove it, the next run's [`sweep_stale`] does.
    pub fn hand_over(&self) {
        let taken = self.dir.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(dir) = taken {
            let _ = dir.keep();
        }
    }

    /// [`ServiceBinary::prepare`] in `parent`.
    pub fn prepare_in(
        source: &ServiceSource,
        parent: &Path,
    ) -> Result<ServiceBinary, SandboxError> {
        let swept = sweep_stale(parent);
        if swept > 0 {
            tracing::info!(swept, "removed exec-service copies of runs that are gone");
        }
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(parent)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(dir.path().join(LOCK_FILE))?;
        if !fs4::fs_std::FileExt::try_lock_exclusive(&lock)? {
            return Err(SandboxError::Backend(format!(
                "{} is locked by another process",
                dir.path().display()
            )));
        }
        let path = dir.path().join("exec-service");
        let linked = *source == ServiceSource::CurrentExe && link_running(&path);
        if !linked {
            let from = match source {
                ServiceSource::CurrentExe => PathBuf::from(RUNNING),
                ServiceSource::Path(p) => p.clone(),
            };
            copy(&from, &path)?;
        }
        Ok(ServiceBinary {
            root: dir.path().to_path_buf(),
            dir: std::sync::Mutex::new(Some(dir)),
            path,
            _lock: lock,
        })
    }

    /// The copy's host path (to bind-mount).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run's private directory (mode 0700), where the hosts' sockets for the containers
    /// live too ([`channel`]): removed with the copy, swept with it after a killed run.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Whether the copy lies inside `mount` (then it is not mounted: an agent could change it).
    pub fn inside(&self, mount: &Path) -> bool {
        self.root.starts_with(mount)
    }

    /// A small file holding `text` in the copy's private directory, for a read-only bind mount
    /// beside the copy's (an agent container's `/etc/passwd`, say: a mount instead of an upload
    /// into the container, issue 32). Named `<stem>-<digest of text>`: the same text is one
    /// file, written once, whole (a temporary file renamed into place, so no container ever
    /// mounts half of it). Mode 0644. Blocking I/O.
    pub fn file_beside(&self, stem: &str, text: &str) -> Result<PathBuf, SandboxError> {
        use sha2::Digest;
        use std::io::Write as _;
        let digest = hex::encode(&sha2::Sha256::digest(text.as_bytes())[..8]);
        let path = self.root.join(format!("{stem}-{digest}"));
        // Not followed: only a regular file this run wrote is reused.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            return Ok(path);
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(".beside-")
            .tempfile_in(&self.root)?;
        // No sync: only this run's containers read it, through the same page cache, and the
        // directory goes with the run.
        tmp.write_all(text.as_bytes())?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(path)
    }
}

/// The running binary, as the kernel names it.
const RUNNING: &str = "/proc/self/exe";

/// Hard-links the running binary at `to` (issue 32: a 75 MB copy of a debug build cost the
/// run's start ~60 ms of CPU and disk beside its first model request). Only when the kernel
/// keeps that file as it is for the run's whole life: it is this process's executing image,
/// which nobody may open for writing while it runs (`ETXTBSY`), so no agent can change the
/// service under another container even when the binary lies inside a mount it may write; a
/// plain file (no set-id bit) that every container user may read and run. `false` (nothing
/// made) otherwise, and when the kernel will not link it: another file system, a binary
/// replaced since it started (no name left to link).
fn link_running(to: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(RUNNING) else {
        return false;
    };
    let mode = meta.mode();
    if !meta.is_file() || mode & 0o6000 != 0 || mode & 0o005 != 0o005 {
        return false;
    }
    let linked = nix::unistd::linkat(
        nix::fcntl::AT_FDCWD,
        RUNNING,
        nix::fcntl::AT_FDCWD,
        to,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    );
    if linked.is_err() {
        return false;
    }
    // The link names the running image itself, or it goes and the binary is copied.
    match std::fs::symlink_metadata(to) {
        Ok(m) if m.dev() == meta.dev() && m.ino() == meta.ino() => true,
        _ => {
            let _ = std::fs::remove_file(to);
            false
        }
    }
}

/// Copies the regular file `from` to the new file `to` (mode 0755; the kernel copies the
/// data, no sync: nothing but this run's containers reads it, through the same page cache).
fn copy(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let mut src = std::fs::File::open(from)?;
    if !src.metadata()?.is_file() {
        return Err(SandboxError::Backend(format!(
            "{} is not a regular file",
            from.display()
        )));
    }
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    Ok(())
}

/// Removes the private directories in `parent` of runs that are gone: ours (same owner), older
/// than [`SWEEP_GRACE`], whose lock file nobody holds (or, without one, older than
/// [`UNLOCKED_AGE`]). Returns how many went. Never fails: what cannot be read is left.
pub fn sweep_stale(parent: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut swept = 0;
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .starts_with(DIR_PREFIX.as_bytes())
        {
            continue;
        }
        let dir = entry.path();
        if is_stale(&dir, me) && std::fs::remove_dir_all(&dir).is_ok() {
            swept += 1;
        }
    }
    swept
}

/// Whether `dir` is the private directory of a run of user `uid` that is gone.
fn is_stale(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // Not followed: a link or another user's directory is never ours to remove.
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != uid {
        return false;
    }
    let age = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .unwrap_or_default();
    if age < SWEEP_GRACE {
        return false;
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(dir.join(LOCK_FILE));
    match lock {
        // Taken: nobody holds it, the run is gone (the lock drops when this file closes).
        Ok(f) => fs4::fs_std::FileExt::try_lock_exclusive(&f).unwrap_or(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => age >= UNLOCKED_AGE,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_is_private_and_refuses_what_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let copy = ServiceBinary::prepare(&ServiceSource::Path(src.clone())).unwrap();
        assert_eq!(std::fs::read(copy.path()).unwrap(), b"\x7fELF binary");
        let mode = std::fs::metadata(copy.path().parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(!copy.inside(dir.path()));
        assert!(copy.inside(Path::new("/")));
        assert!(ServiceBinary::prepare(&ServiceSource::Path(dir.path().to_path_buf())).is_err());
        let gone = copy.path().parent().unwrap().to_path_buf();
        drop(copy);
        assert!(!gone.exists());
    }

    /// Issue 32: the running binary is linked, not copied, where the kernel allows (here the
    /// test binary and the temporary directory share a file system unless they do not: then
    /// it is a copy). Either way the service gets the running image's bytes, privately, and
    /// the link goes with the run's directory, leaving the binary.
    #[test]
    fn the_running_binary_is_linked_when_it_can_be() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let running = std::fs::metadata(RUNNING).unwrap();
        let taken = ServiceBinary::prepare_in(&ServiceSource::CurrentExe, tmp.path()).unwrap();
        let meta = std::fs::symlink_metadata(taken.path()).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), running.len());
        let same_fs = std::fs::metadata(tmp.path()).unwrap().dev() == running.dev();
        let linked = meta.ino() == running.ino() && meta.dev() == running.dev();
        if same_fs && running.mode() & 0o6005 == 0o005 {
            assert!(linked, "same file system: linked");
        }
        if !linked {
            assert_eq!(meta.mode() & 0o777, 0o755);
            assert_eq!(
                std::fs::read(taken.path()).unwrap(),
                std::fs::read(RUNNING).unwrap()
            );
        }
        // Nobody writes through the link while the image runs.
        let write = std::fs::OpenOptions::new().write(true).open(taken.path());
        if linked {
            assert_eq!(write.unwrap_err().raw_os_error(), Some(nix::libc::ETXTBSY));
        }
        let dir = taken.path().parent().unwrap().to_path_buf();
        taken.discard();
        assert!(!dir.exists());
        assert!(std::fs::metadata(RUNNING).is_ok());
    }

    /// A file beside the copy holds exactly its text, readable by all and written by none but
    /// the run, in the copy's private directory; the same text is the same file.
    #[test]
    fn files_beside_the_copy_are_named_by_their_text() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let copy = ServiceBinary::prepare_in(&ServiceSource::Path(src), tmp.path()).unwrap();
        let a = copy
            .file_beside("passwd", "root:x:0:0::/root:/bin/sh\n")
            .unwrap();
        let b = copy
            .file_beside("passwd", "root:x:0:0::/root:/bin/sh\n")
            .unwrap();
        let c = copy.file_beside("passwd", "other\n").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.parent(), copy.path().parent());
        assert_eq!(
            std::fs::read_to_string(&a).unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
        assert_eq!(std::fs::read_to_string(&c).unwrap(), "other\n");
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        // Nothing else was left behind (no temporary file).
        let names: Vec<_> = std::fs::read_dir(copy.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(names.is_empty(), "{names:?}");
        let dir = copy.path().parent().unwrap().to_path_buf();
        drop(copy);
        assert!(!dir.exists());
    }

    /// Teardown discards the copy once its containers are gone (issue 32): the directory
    /// goes at once, and the later drop finds nothing left to do.
    #[test]
    fn a_discarded_copy_is_gone_before_it_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let copy = ServiceBinary::prepare_in(&ServiceSource::Path(src), tmp.path()).unwrap();
        let dir = copy.path().parent().unwrap().to_path_buf();
        assert!(dir.exists());
        copy.discard();
        assert!(!dir.exists());
        copy.discard();
        drop(copy);
        assert!(!dir.exists());
    }

    /// Moves `dir`'s modification time back by `by` (what a run started that long ago shows).
    fn age(dir: &Path, by: std::time::Duration) {
        let f = std::fs::File::open(dir).unwrap();
        f.set_modified(std::time::SystemTime::now() - by).unwrap();
    }

    /// Issue 26: a killed run left its 66 MB copy in /tmp for good. Its lock file stays, but
    /// the kernel dropped its `flock`: the next prepare removes it, and keeps a live run's.
    /// The directory of `binary`, handed over and then dropped (its lock closed with it): what a
    /// run killed with -9, or a cleanup killed before it removed the directory, leaves.
    fn handed_over(binary: ServiceBinary) -> PathBuf {
        binary.hand_over();
        binary.dir().to_path_buf()
    }

    #[test]
    fn a_handed_over_directory_outlives_its_binary() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let source = ServiceSource::Path(src);
        let dropped = ServiceBinary::prepare_in(&source, tmp.path()).unwrap();
        let gone = dropped.dir().to_path_buf();
        drop(dropped);
        assert!(
            !gone.exists(),
            "a binary not handed over goes with its owner"
        );
        let kept = handed_over(ServiceBinary::prepare_in(&source, tmp.path()).unwrap());
        assert!(
            kept.join("exec-service").is_file(),
            "the cleanup removes it, not the drop"
        );
    }

    #[test]
    fn the_next_prepare_removes_the_copies_of_dead_runs_only() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("flowerbox");
        std::fs::write(&src, b"\x7fELF binary").unwrap();
        let parent = tmp.path().join("tmp");
        std::fs::create_dir(&parent).unwrap();
        let source = ServiceSource::Path(src);
        let minutes = std::time::Duration::from_secs(120);

        // A run killed with -9: nothing removed its directory, its lock fd closed with it.
        let dead = handed_over(ServiceBinary::prepare_in(&source, &parent).unwrap());
        // With a container's socket left in it (issue 32: they live beside the copy).
        let socket = std::os::unix::net::UnixListener::bind(dead.join("s-0123456789abcdef"));
        drop(socket.unwrap());
        age(&dead, minutes);
        // A run that lives (its copy held), as old.
        let live = ServiceBinary::prepare_in(&source, &parent).unwrap();
        let live_dir = live.path().parent().unwrap().to_path_buf();
        age(&live_dir, minutes);
        // A run killed a moment ago (maybe still between making and locking): left for later.
        let young = handed_over(ServiceBinary::prepare_in(&source, &parent).unwrap());
        // A directory of an older flowerbox (no lock file), younger than a day: left.
        let legacy = parent.join("flowerbox-exec-legacy");
        std::fs::create_dir(&legacy).unwrap();
        age(&legacy, minutes);
        // Not ours: a link named like a copy.
        let link = parent.join("flowerbox-exec-link");
        std::os::unix::fs::symlink(&live_dir, &link).unwrap();

        let next = ServiceBinary::prepare_in(&source, &parent).unwrap();
        assert!(!dead.exists(), "the dead run's copy is swept");
        assert!(live.path().is_file(), "the live run's copy stays");
        assert!(young.exists(), "a copy younger than the grace stays");
        assert!(legacy.exists());
        assert!(link.symlink_metadata().is_ok());

        age(&legacy, std::time::Duration::from_secs(25 * 3600));
        drop(next);
        assert_eq!(
            sweep_stale(&parent),
            1,
            "the day-old unlocked directory goes"
        );
        assert!(!legacy.exists());
        assert!(live.path().is_file());
    }
}
