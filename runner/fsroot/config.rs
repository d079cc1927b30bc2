//! The one reader for the configuration files flowerbox reads (issue 25 §1, DESIGN.md "Threat
//! model" 7): `.env` files, `.mcp.json`, workflow files, Claude Code's settings and plugin
//! directories ([`list`] for their listings). Every call site opens such a file through
//! [`read`], never by path.
//!
//! Where the file lies decides how it is opened ([`Place`]):
//!
//! - **Beneath a directory agents can write** (the workspace; a project's `./.env` in the
//!   current directory): the way the file tools open workspace files, through a [`View`] whose
//!   one read-only mount is that directory. The walk starts from the directory's handle and
//!   opens one component at a time with `O_NOFOLLOW`; a symlink is followed only while it
//!   stays inside the directory, as the agent's container would resolve it (`.env ->
//!   config/dev.env` works; `.env -> /dev/zero`, `-> ~/.config/flower/.env` or `-> ../x` are
//!   refused with [`ConfigError::Leaves`]), and the run directory is masked. A link that
//!   stays inside is followed because what it reaches is as much the project's (and as
//!   untrusted) as the link itself: nothing outside can be reached that way.
//! - **The user's own files** (`~/.config/flower/.env`, a `$FLOWER_ENV` or `--mcp-config` file
//!   outside the workspace, `~/.claude/settings*.json`): opened by path, symlinks followed
//!   (dotfiles are often links), since no agent can write there.
//!
//! Both ways: the type is checked before anything is opened (a device is never opened), the
//! open is `O_NONBLOCK` (a FIFO cannot block the runner) and `fstat` must say regular file, the
//! size is checked on `fstat` and again while reading (a file that grows stops at the cap), so
//! neither a FIFO nor `/dev/zero` nor a 2 GiB sparse file can hang or balloon the runner. A
//! read also says where the file really is ([`ConfigFile::real`]): a user's path that leads
//! into the workspace makes the content the project's, and callers treat it so.

use rustix::fs::{FileType, Mode, OFlags};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use thiserror::Error;

use super::sys;
use super::view::{View, ViewError, ViewMount};
use super::FsError;

/// The largest configuration file read (1 MiB): a real `.env`, `.mcp.json`, settings or
/// workflow file is a few KiB.
pub const CONFIG_CAP: u64 = 1024 * 1024;

/// How a configuration file is opened: see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Beneath `root`, a directory agents can write (absolute, canonical): opened as the
    /// file tools open workspace files; nothing in `masked` (the run directory) is read.
    Beneath {
        /// The directory the file must stay in.
        root: PathBuf,
        /// Directories beneath it that are never read (the run directory).
        masked: Vec<PathBuf>,
    },
    /// The user's own file: opened by path, symlinks followed.
    User,
}

impl Place {
    /// [`Place::Beneath`] the first of `roots` that holds `path` lexically (roots are
    /// canonical, `path` absolute; `.` and `..` taken away first), else [`Place::User`].
    pub fn of(path: &Path, roots: &[&Path], masked: &[PathBuf]) -> Place {
        let path = lexical(path);
        match roots.iter().find(|r| path.starts_with(r)) {
            Some(root) => Place::Beneath {
                root: root.to_path_buf(),
                masked: masked.to_vec(),
            },
            None => Place::User,
        }
    }
}

/// A configuration file's bytes and where it really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The content (at most the cap).
    pub bytes: Vec<u8>,
    /// The file's real path: every symlink resolved (beneath a root: as the container
    /// resolves it; the user's: as the kernel opened it).
    pub real: PathBuf,
}

impl ConfigFile {
    /// The content as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// True when the file really lies beneath `dir` (canonical).
    pub fn lies_in(&self, dir: &Path) -> bool {
        self.real.starts_with(dir)
    }
}

/// Why a configuration file was not read. The caller names the file; these say why.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// A symlink (or `..`) that leads out of the directory the file must stay in.
    #[error("是指向 {} 外面的符号链接,不跟随", .0.display())]
    Leaves(PathBuf),
    /// It lies in the run directory, which is never read as configuration.
    #[error("在运行目录里,不当配置读")]
    Masked,
    /// A FIFO, socket or device.
    #[error("不是普通文件(FIFO、套接字或设备),不读")]
    NotRegular,
    /// A directory.
    #[error("是目录,不是文件")]
    IsDir,
    /// Larger than the cap.
    #[error("超过 {} KiB,不读", .cap / 1024)]
    TooLarge {
        /// The cap, in bytes.
        cap: u64,
    },
    /// A loop of symlinks.
    #[error("符号链接层数太多(有环?)")]
    Loop,
    /// Any other system error.
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

/// Reads the configuration file `path` (absolute) placed as `place` says, at most `cap` bytes;
/// `Ok(None)` when it (or a directory on its way) does not exist.
pub fn read(path: &Path, place: &Place, cap: u64) -> Result<Option<ConfigFile>, ConfigError> {
    match place {
        Place::Beneath { root, masked } => read_beneath(&lexical(path), root, masked, cap),
        Place::User => read_user(path, cap),
    }
}

/// The entries of the directory `path` placed as `place` says, as (name, is a directory),
/// sorted; `Ok(None)` when it does not exist. Beneath a root the walk is the one [`read`] does
/// (no symlink out of it, the run directory masked); a symlinked entry is listed as not a
/// directory (reading through it goes through [`read`] again).
pub fn list(path: &Path, place: &Place) -> Result<Option<Vec<(String, bool)>>, ConfigError> {
    let entries = match place {
        Place::User => match std::fs::read_dir(path) {
            Ok(dir) => dir
                .flatten()
                .map(|e| {
                    let is_dir = std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir());
                    (e.file_name().to_string_lossy().into_owned(), is_dir)
                })
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                return Err(ConfigError::NotRegular)
            }
            Err(e) => return Err(ConfigError::Io(e)),
        },
        Place::Beneath { root, masked } => {
            let path = lexical(path);
            if !path.starts_with(root) {
                return Err(ConfigError::Leaves(root.to_path_buf()));
            }
            let view = beneath(root, masked);
            let listed = view.with(&path, false, false, |r| {
                let fd = r.open_dir()?;
                sys::list(fd.as_fd())
            });
            match listed {
                Ok(v) => v
                    .into_iter()
                    .map(|(n, t)| (n.to_string_lossy().into_owned(), t == FileType::Directory))
                    .collect(),
                Err(ViewError::NotFound(_)) => return Ok(None),
                Err(ViewError::Fs(e)) if e.is_not_found() => return Ok(None),
                Err(ViewError::Outside(_)) => return Err(ConfigError::Leaves(root.to_path_buf())),
                Err(ViewError::Masked(_)) => return Err(ConfigError::Masked),
                Err(ViewError::Loop) => return Err(ConfigError::Loop),
                Err(ViewError::Fs(e)) => return Err(fs_error(e, CONFIG_CAP)),
                Err(e) => return Err(ConfigError::Io(std::io::Error::other(e.to_string()))),
            }
        }
    };
    let mut entries = entries;
    entries.sort();
    Ok(Some(entries))
}

/// `path` with `.` and `..` taken away lexically (as the command line makes paths absolute).
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// [`read`] beneath `root`: a [`View`] with one read-only mount.
fn read_beneath(
    path: &Path,
    root: &Path,
    masked: &[PathBuf],
    cap: u64,
) -> Result<Option<ConfigFile>, ConfigError> {
    if !path.starts_with(root) {
        return Err(ConfigError::Leaves(root.to_path_buf()));
    }
    let view = beneath(root, masked);
    let read = view.with(path, false, false, |r| {
        Ok(ConfigFile {
            bytes: r.read(cap)?,
            real: r.path().to_path_buf(),
        })
    });
    match read {
        Ok(file) => Ok(Some(file)),
        Err(ViewError::NotFound(_)) => Ok(None),
        Err(ViewError::Fs(e)) if e.is_not_found() => Ok(None),
        Err(ViewError::Outside(_)) => Err(ConfigError::Leaves(root.to_path_buf())),
        Err(ViewError::Masked(_)) => Err(ConfigError::Masked),
        Err(ViewError::Loop) => Err(ConfigError::Loop),
        Err(ViewError::ReadOnly(_)) => unreachable!("a read never asks for write access"),
        Err(ViewError::NotADirectory(p)) => Err(ConfigError::Io(std::io::Error::other(format!(
            "{} 不是目录",
            p.display()
        )))),
        Err(ViewError::Fs(e)) => Err(fs_error(e, cap)),
    }
}

/// [`read`] of the user's own file: the type checked before the open (no device is opened),
/// `O_NONBLOCK`, `fstat` again on the open file.
fn read_user(path: &Path, cap: u64) -> Result<Option<ConfigFile>, ConfigError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ConfigError::Io(e)),
    };
    if meta.is_dir() {
        return Err(ConfigError::IsDir);
    }
    if !meta.is_file() {
        return Err(ConfigError::NotRegular);
    }
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::NXIO) => return Err(ConfigError::NotRegular),
        Err(e) => return Err(ConfigError::Io(e.into())),
    };
    if FileType::from_raw_mode(rustix::fs::fstat(fd.as_fd()).map_err(io)?.st_mode)
        != FileType::RegularFile
    {
        return Err(ConfigError::NotRegular);
    }
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap_or_else(|_| path.to_path_buf());
    let bytes = sys::read_regular(fd, cap).map_err(|e| fs_error(e, cap))?;
    Ok(Some(ConfigFile { bytes, real }))
}

fn io(e: rustix::io::Errno) -> ConfigError {
    ConfigError::Io(e.into())
}

fn fs_error(e: FsError, cap: u64) -> ConfigError {
    match e {
        FsError::Symlink => ConfigError::Loop,
        FsError::NotRegular => ConfigError::NotRegular,
        FsError::IsDir => ConfigError::IsDir,
        FsError::TooLarge(_) => ConfigError::TooLarge { cap },
        FsError::Outside => ConfigError::Io(std::io::Error::other("不在允许的目录之下")),
        FsError::Io(e) => ConfigError::Io(e),
    }
}

/// A read-only view of `root` that hides `masked` (by path and by identity).
fn beneath(root: &Path, masked: &[PathBuf]) -> View {
    let ids = masked
        .iter()
        .filter_map(|m| super::own::identity(m))
        .collect();
    View::new(
        vec![ViewMount {
            path: root.to_path_buf(),
            read_only: true,
        }],
        masked.to_vec(),
    )
    .hiding_ids(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Scene {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn scene() -> Scene {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(ws.join("config")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.env"), "KEY=outside\n").unwrap();
        Scene {
            _tmp: tmp,
            ws,
            outside,
        }
    }

    fn beneath(s: &Scene) -> Place {
        Place::of(&s.ws.join(".env"), &[&s.ws], &[s.ws.join("runs")])
    }

    fn read_ws(s: &Scene, name: &str) -> Result<Option<ConfigFile>, ConfigError> {
        read(&s.ws.join(name), &beneath(s), CONFIG_CAP)
    }

    #[test]
    fn a_plain_file_a_missing_one_and_a_link_that_stays_inside() {
        let s = scene();
        assert!(read_ws(&s, ".env").unwrap().is_none());
        assert!(read_ws(&s, "nodir/.env").unwrap().is_none());
        std::fs::write(s.ws.join("config/dev.env"), "KEY=dev\n").unwrap();
        symlink("config/dev.env", s.ws.join(".env")).unwrap();
        let f = read_ws(&s, ".env").unwrap().unwrap();
        assert_eq!(f.text(), "KEY=dev\n");
        assert_eq!(f.real, s.ws.join("config/dev.env"));
        // An absolute link that stays inside is followed too (the container would).
        std::fs::remove_file(s.ws.join(".env")).unwrap();
        symlink(s.ws.join("config/dev.env"), s.ws.join(".env")).unwrap();
        assert_eq!(read_ws(&s, ".env").unwrap().unwrap().text(), "KEY=dev\n");
    }

    #[test]
    fn links_that_leave_fifos_devices_and_huge_files_are_refused_at_once() {
        let s = scene();
        let refuse = |target: &Path| {
            let _ = std::fs::remove_file(s.ws.join(".env"));
            symlink(target, s.ws.join(".env")).unwrap();
            read_ws(&s, ".env").unwrap_err()
        };
        assert!(matches!(
            refuse(&s.outside.join("secret.env")),
            ConfigError::Leaves(_)
        ));
        assert!(matches!(
            refuse(Path::new("../outside/secret.env")),
            ConfigError::Leaves(_)
        ));
        assert!(matches!(
            refuse(Path::new("/dev/zero")),
            ConfigError::Leaves(_)
        ));
        assert!(matches!(refuse(Path::new(".env")), ConfigError::Loop));
        std::fs::remove_file(s.ws.join(".env")).unwrap();
        nix::unistd::mkfifo(&s.ws.join(".env"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_ws(&s, ".env").unwrap_err(),
            ConfigError::NotRegular
        ));
        std::fs::remove_file(s.ws.join(".env")).unwrap();
        let f = std::fs::File::create(s.ws.join(".env")).unwrap();
        f.set_len(2 << 30).unwrap();
        assert!(matches!(
            read_ws(&s, ".env").unwrap_err(),
            ConfigError::TooLarge { .. }
        ));
        std::fs::remove_file(s.ws.join(".env")).unwrap();
        std::fs::create_dir(s.ws.join(".env")).unwrap();
        assert!(matches!(
            read_ws(&s, ".env").unwrap_err(),
            ConfigError::IsDir
        ));
    }

    #[test]
    fn the_run_directory_is_never_read_as_configuration() {
        let s = scene();
        std::fs::create_dir_all(s.ws.join("runs")).unwrap();
        std::fs::write(s.ws.join("runs/x.json"), "{}").unwrap();
        symlink("runs/x.json", s.ws.join(".mcp.json")).unwrap();
        assert!(matches!(
            read_ws(&s, ".mcp.json").unwrap_err(),
            ConfigError::Masked
        ));
    }

    #[test]
    fn the_users_own_files_follow_links_but_refuse_fifos_and_devices() {
        let s = scene();
        let home = s.outside.join("home");
        std::fs::create_dir_all(&home).unwrap();
        symlink(s.outside.join("secret.env"), home.join(".env")).unwrap();
        let f = read(&home.join(".env"), &Place::User, CONFIG_CAP)
            .unwrap()
            .unwrap();
        assert_eq!(f.text(), "KEY=outside\n");
        assert_eq!(f.real, s.outside.join("secret.env"));
        assert!(!f.lies_in(&s.ws));
        // A user's link into the workspace: read, and said to lie there.
        std::fs::write(s.ws.join("p.env"), "KEY=project\n").unwrap();
        symlink(s.ws.join("p.env"), home.join("linked.env")).unwrap();
        let f = read(&home.join("linked.env"), &Place::User, CONFIG_CAP)
            .unwrap()
            .unwrap();
        assert!(f.lies_in(&s.ws));
        assert!(read(&home.join("none.env"), &Place::User, CONFIG_CAP)
            .unwrap()
            .is_none());
        symlink("/dev/zero", home.join("zero.env")).unwrap();
        assert!(matches!(
            read(&home.join("zero.env"), &Place::User, CONFIG_CAP).unwrap_err(),
            ConfigError::NotRegular
        ));
        nix::unistd::mkfifo(&home.join("fifo.env"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read(&home.join("fifo.env"), &Place::User, CONFIG_CAP).unwrap_err(),
            ConfigError::NotRegular
        ));
        std::fs::write(home.join("big.env"), vec![b'x'; 2048]).unwrap();
        assert!(matches!(
            read(&home.join("big.env"), &Place::User, 1024).unwrap_err(),
            ConfigError::TooLarge { cap: 1024 }
        ));
    }

    #[test]
    fn place_of_picks_the_root_that_holds_the_path() {
        let ws = Path::new("/w");
        assert_eq!(
            Place::of(Path::new("/elsewhere/.env"), &[ws], &[]),
            Place::User
        );
        assert_eq!(
            Place::of(Path::new("/w/.env"), &[ws], &[]),
            Place::Beneath {
                root: ws.to_path_buf(),
                masked: vec![]
            }
        );
    }
}
