//! Logs: `tracing` events go to `<run_dir>/flowerbox.log` (appended; level from `RUST_LOG`,
//! default `info`), never to the terminal, which belongs to the UI. Events quote what agents,
//! models, servers and workspace files said (an error message, a step name, a server's
//! reply): each formatted event passes the output boundary ([`crate::shown::log_event`]) on its
//! way in, so the log holds one clean line per event, whatever a later `cat` or `tail -f`
//! replays.
//!
//! The file is opened only once a run really starts ([`Log::open`]: credentials passed, the
//! request given). Until then events wait in memory (at most [`PENDING_CAP`] bytes), so a start
//! that fails or is cancelled — no token, `已取消` at the prompt, `--isolate` outside git — and
//! `doctor` or `gc` in a fresh directory leave no `runs/` behind ([`Log::open_existing`] logs
//! there only when the run directory is already there).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use super::error::CliError;

/// The log file's name inside the run directory.
pub const LOG_FILE: &str = "flowerbox.log";

/// Most bytes of events kept in memory before the log file is open; later ones are dropped
/// (and counted in a line written when it opens).
pub const PENDING_CAP: usize = 1024 * 1024;

/// Where the log of a run directory is (for failure messages: "详情见 <path>").
pub fn log_path(run_dir: &Path) -> PathBuf {
    run_dir.join(LOG_FILE)
}

/// Where events go: memory until the file is open, then the file.
enum Sink {
    Pending { bytes: Vec<u8>, dropped: u64 },
    File(std::fs::File),
}

/// The process's log: installed by [`init`], pointed at a file by [`Log::open`].
#[derive(Clone)]
pub struct Log(Arc<Mutex<Sink>>);

/// One event's writer: holds the sink for the length of the event, collects the formatted
/// event and hands it, cleaned, to the sink when the event is written (on drop).
pub struct LogWriter<'a> {
    sink: MutexGuard<'a, Sink>,
    event: Vec<u8>,
}

impl Write for LogWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.event.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter<'_> {
    fn drop(&mut self) {
        if self.event.is_empty() {
            return;
        }
        let line = crate::shown::log_event(&std::mem::take(&mut self.event));
        match &mut *self.sink {
            Sink::Pending { bytes, dropped } => {
                if bytes.len() + line.len() <= PENDING_CAP {
                    bytes.extend_from_slice(&line);
                } else {
                    *dropped += line.len() as u64;
                }
            }
            // A log that cannot be written must not stop the run.
            Sink::File(f) => {
                let _ = f.write_all(&line);
            }
        }
    }
}

impl<'a> MakeWriter<'a> for Log {
    type Writer = LogWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter {
            sink: self.0.lock().unwrap_or_else(|e| e.into_inner()),
            event: Vec::new(),
        }
    }
}

impl Log {
    /// A log that keeps events in memory until opened (not installed; see [`init`]).
    pub fn pending() -> Self {
        Log(Arc::new(Mutex::new(Sink::Pending {
            bytes: Vec::new(),
            dropped: 0,
        })))
    }

    /// Creates `run_dir`, opens [`log_path`] for appending and writes what waited in memory.
    /// Opening again keeps the file that is open.
    ///
    /// Errors: [`CliError::Io`] when the directory or file cannot be created.
    pub fn open(&self, run_dir: &Path) -> Result<PathBuf, CliError> {
        let path = log_path(run_dir);
        let io = |what: &str, source| CliError::Io {
            what: format!("{what} {}", path.display()),
            source,
        };
        let mut sink = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Sink::File(_) = &*sink {
            return Ok(path);
        }
        // The run directory lies in the workspace by default: no symlink is followed on the
        // way (flowerbox made the path canonical at start), and only a regular file is
        // appended to.
        // The directories this open makes, deepest first: a start that cannot write its log
        // takes them away again, so it leaves no empty `runs/` (issue 26 §3).
        let made: Vec<PathBuf> = run_dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !crate::fsroot::own::exists(d))
            .map(Path::to_path_buf)
            .collect();
        let opened = crate::fsroot::own::create_dir_all(run_dir)
            .map_err(|e| io("建不出日志目录", e))
            .and_then(|()| crate::fsroot::own::open_append(&path).map_err(|e| io("打不开日志", e)));
        let written = opened.and_then(|(mut file, created)| {
            if let Sink::Pending { bytes, dropped } = &*sink {
                let mut w = file.write_all(bytes);
                if *dropped > 0 && w.is_ok() {
                    w = writeln!(file, "(log: {dropped} bytes of early events dropped)");
                }
                if let Err(e) = w.and_then(|()| file.sync_data()) {
                    if created {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Err(io("写不进日志", e));
                }
            }
            Ok(file)
        });
        match written {
            Ok(file) => {
                *sink = Sink::File(file);
                Ok(path)
            }
            Err(e) => {
                for d in &made {
                    // Only empty directories go: anything else in them is not this start's.
                    if std::fs::remove_dir(d).is_err() {
                        break;
                    }
                }
                Err(e)
            }
        }
    }

    /// [`Log::open`] when `run_dir` already exists (`doctor`, `gc`: they create nothing);
    /// `None` otherwise or when it cannot be opened.
    pub fn open_existing(&self, run_dir: &Path) -> Option<PathBuf> {
        run_dir.is_dir().then(|| self.open(run_dir).ok()).flatten()
    }
}

/// Installs the process's subscriber writing to a [`Log`] that keeps events in memory until
/// [`Log::open`]. `rust_log` is the `RUST_LOG` value, if any (an invalid filter falls back to
/// `info`). Installing twice keeps the first subscriber (the binary installs it once).
pub fn init(rust_log: Option<&str>) -> Log {
    let log = Log::pending();
    let filter = rust_log
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(log.clone())
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_wait_in_memory_until_the_run_directory_is_opened() {
        let d = tempfile::tempdir().unwrap();
        let run_dir = d.path().join("runs");
        let log = Log::pending();
        log.make_writer().write_all(b"early event\n").unwrap();
        assert!(!run_dir.exists(), "nothing on disk before open");
        assert_eq!(log.open_existing(&run_dir), None);
        assert!(!run_dir.exists(), "open_existing creates nothing");
        let path = log.open(&run_dir).unwrap();
        log.make_writer().write_all(b"later event\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "early event\nlater event\n"
        );
        assert_eq!(log.open(&run_dir).unwrap(), path);
    }

    #[test]
    fn an_event_reaches_the_log_as_one_clean_line() {
        let d = tempfile::tempdir().unwrap();
        let log = Log::pending();
        let path = log.open(d.path()).unwrap();
        log.make_writer()
            .write_all(b"WARN step=\"x\" evil\x1b]0;t\x07\n2026 INFO forged\xe2\x80\xae\n")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            "WARN step=\"x\" evil\u{241b}\u{2424}2026 INFO forged<U+202E>\n"
        );
    }

    #[test]
    fn the_memory_before_open_is_capped() {
        let d = tempfile::tempdir().unwrap();
        let log = Log::pending();
        let chunk = vec![b'x'; 1000];
        for _ in 0..(PENDING_CAP / 1000 + 10) {
            log.make_writer().write_all(&chunk).unwrap();
        }
        let path = log.open(d.path()).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.len() <= PENDING_CAP + 100);
        assert!(
            text.ends_with("bytes of early events dropped)\n"),
            "{}",
            &text[text.len() - 80..]
        );
    }
}
