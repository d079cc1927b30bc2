//! A fresh user for the command-line tests: a temporary HOME and project directory, and the
//! real `flowerbox` binary started there with a cleared environment, so nothing from this
//! machine's credentials or configuration leaks in.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A temporary `home/` and `proj/` (both canonical), removed on drop.
pub struct Scene {
    /// Owns both directories.
    _tmp: tempfile::TempDir,
    /// The child's HOME.
    pub home: PathBuf,
    /// The child's working directory.
    pub cwd: PathBuf,
}

impl Scene {
    /// Creates both directories.
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let home = root.join("home");
        let cwd = root.join("proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        Self {
            _tmp: tmp,
            home,
            cwd,
        }
    }

    /// The temporary directory holding `home/` and `proj/` (canonical).
    pub fn root(&self) -> &Path {
        self.cwd.parent().unwrap()
    }

    /// `flowerbox` with only PATH and HOME set, in the project directory.
    pub fn flowerbox(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .current_dir(&self.cwd);
        c
    }

    /// [`Scene::flowerbox`] for `assert_cmd`, with an empty stdin (not a terminal).
    pub fn cmd(&self) -> assert_cmd::Command {
        let mut c = assert_cmd::Command::from_std(self.flowerbox());
        c.write_stdin("");
        c
    }
}

/// Writes `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}
