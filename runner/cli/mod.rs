//! flower's command line (seed 000): default-subcommand rewriting, the parser, validated
//! options, start prompts, `run` targets, exit codes, logs, and the entry seam.
//!
//! Flow of one invocation ([`app::run`]): [`rewrite`] → clap ([`args`]) → [`options`] (one
//! place, every field) → log at `<run_dir>/flowerbox.log` ([`logging`]) → credentials
//! ([`crate::creds`]) → start prompt ([`prompt`], `go` only) → [`entry`] → exit code
//! ([`error`]).

pub mod app;
pub mod args;
pub mod bounds;
pub mod cleanup;
mod egress;
pub mod entry;
pub mod error;
pub mod host;
pub mod logging;
mod mcp;
pub mod options;
pub mod prompt;
pub mod rewrite;
pub mod services;
pub mod target;

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;

pub use app::{Exit, Hooks, Io};
pub use error::{CliError, ExitStatus};
pub use host::Host;
pub use options::{CommandOptions, DoctorOptions, GcOptions, GlobalOptions, Options, RunOptions};

/// The binary's whole life: reads the real process (argv, environment, cwd, stdin), runs one
/// invocation on a tokio runtime and returns the exit code. Dies by the signal instead when the
/// run ended by SIGHUP/SIGTERM. A panic prints one clean line (no backtrace) and gives 1.
pub fn main_entry() -> i32 {
    install_panic_hook(None);
    let host = match Host::from_process() {
        Ok(h) => h,
        Err(e) => {
            let _ = writeln!(crate::shown::stderr(), "读不到当前目录:{e}");
            return 1;
        }
    };
    let args = std::env::args_os().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(crate::shown::stderr(), "起不来异步运行时:{e}");
            return 1;
        }
    };
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let mut stdin = crate::creds::input::StdinLines;
        let mut stdout = crate::shown::stdout();
        let mut stderr = crate::shown::stderr();
        let mut io = Io {
            stdin: &mut stdin,
            stdout: &mut stdout,
            stderr: &mut stderr,
        };
        runtime.block_on(app::run(args, &host, &mut io, &Hooks::default()))
    }));
    runtime.shutdown_background();
    match outcome {
        Ok(Exit::Code(code)) => code,
        Ok(Exit::Signal(sig)) => crate::signals::reraise(sig),
        Err(_) => 1,
    }
}

/// Replaces Rust's panic output with one line naming the log (`log`, once it is open). The
/// message says it is a bug; the details go to the log, not the terminal.
pub fn install_panic_hook(log: Option<PathBuf>) {
    panic::set_hook(Box::new(move |info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "未知原因".to_string());
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(%what, %place, "panic");
        let mut err = crate::shown::stderr();
        let _ = match &log {
            Some(log) => writeln!(
                err,
                "x flowerbox 内部错误:{what}({place})。这是 bug;详情见 {}",
                log.display()
            ),
            None => writeln!(err, "x flowerbox 内部错误:{what}({place})。这是 bug。"),
        };
    }));
}
