//! Logs: `tracing` events go to `<run_dir>/flowerbox.log` (appended; level from `RUST_LOG`,
//! default `info`), never to the terminal, which belongs to the UI.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;

use super::error::CliError;

/// The log file's name inside the run directory.
pub const LOG_FILE: &str = "flowerbox.log";

/// Where the log of a run directory is (for failure messages: "详情见 <path>").
pub fn log_path(run_dir: &Path) -> PathBuf {
    run_dir.join(LOG_FILE)
}

/// Creates `run_dir` and installs the process's subscriber writing to [`log_path`]. `rust_log`
/// is the `RUST_LOG` value, if any (an invalid filter falls back to `info`). Installing twice
/// keeps the first subscriber (the binary installs it once).
///
/// Errors: [`CliError::Io`] when the directory or file cannot be created.
pub fn init(run_dir: &Path, rust_log: Option<&str>) -> Result<PathBuf, CliError> {
    let path = log_path(run_dir);
    let io = |what: &str, source| CliError::Io {
        what: format!("{what} {}", path.display()),
        source,
    };
    // The run directory lies in the workspace by default: no symlink is followed on the way
    // (flowerbox made the path canonical at start), and only a regular file is appended to.
    crate::fsroot::own::create_dir_all(run_dir).map_err(|e| io("建不出日志目录", e))?;
    let (file, _) = crate::fsroot::own::open_append(&path).map_err(|e| io("打不开日志", e))?;
    let filter = rust_log
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(Mutex::new(file))
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(path)
}
