//! One invocation, start to finish: rewrite argv, parse, resolve options, open the log, pass the
//! credential gates, ask for the request, call [`super::entry`], and turn the outcome into an
//! exit code with its message on stderr.
//!
//! Everything it reads from outside comes in as arguments ([`Host`], [`Io`], [`Hooks`]), so the
//! library tests drive it in-process and the binary ([`super::main_entry`]) wires in the real
//! process.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::args::Cli;
use super::entry;
use super::error::{CliError, ExitStatus};
use super::host::Host;
use super::logging;
use super::options::{CommandOptions, GlobalOptions, Options};
use super::prompt;
use super::rewrite::Grammar;
use crate::creds::input::LineSource;
use crate::creds::{self, Credentials, EnsurePolicy, ProbeSettings};
use crate::flow::wake::WakeState;
use crate::flow::FlowError;
use crate::sandbox::Demand;
use crate::shown::Terminal;

/// The streams of one invocation. Output goes through the output boundary ([`Terminal`]):
/// whatever an error message or a warning quotes (a `.env` value, a workflow file's line, a
/// server's name) is cleaned on the way out.
pub struct Io<'a> {
    /// Human input (the start prompt, `setup`'s questions).
    pub stdin: &'a mut dyn LineSource,
    /// The UI: prompts, setup screens, probe lines, help.
    pub stdout: &'a mut Terminal,
    /// Error messages and warnings.
    pub stderr: &'a mut Terminal,
}

/// The wake probe: `go`'s workspace, run directory and `--isolate` → what the directory holds.
pub type WakeProbe = Box<dyn Fn(&Path, &Path, bool) -> WakeState + Send + Sync>;

/// Pluggable behaviour.
pub struct Hooks {
    /// Whether `go`'s directory is woken, and what it holds: the default is the workflow layer's
    /// probe ([`crate::flow::wake::wake_state`]: a four-section `notes/需求.md`, the goal, the
    /// lineage). Must only read. Asked once: its answer decides the start prompt and is what
    /// `go` acts on.
    pub wake: WakeProbe,
    /// Install the `tracing` subscriber and the panic hook's log path (the binary does; the
    /// in-process tests do not, since both are process-wide).
    pub init_logging: bool,
    /// The probe's settings (tests shorten the timeout).
    pub probe: ProbeSettings,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            wake: Box::new(crate::flow::wake::wake_state),
            init_logging: true,
            probe: ProbeSettings::default(),
        }
    }
}

/// How the process should end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exit with this code.
    Code(i32),
    /// Die by this signal (default action re-raised).
    Signal(i32),
}

/// Runs one invocation. `args` is argv without the program name. Prints the failure message
/// (and the log path when the log has more) on `io.stderr`.
pub async fn run(args: Vec<OsString>, host: &Host, io: &mut Io<'_>, hooks: &Hooks) -> Exit {
    let mut log = None;
    let result = dispatch(args, host, io, hooks, &mut log).await;
    finish(result, io, log.as_deref())
}

async fn dispatch(
    args: Vec<OsString>,
    host: &Host,
    io: &mut Io<'_>,
    hooks: &Hooks,
    log: &mut Option<PathBuf>,
) -> Result<ExitStatus, CliError> {
    let grammar = Grammar::from_command(&<Cli as clap::CommandFactory>::command());
    let argv = std::iter::once(OsString::from("flowerbox")).chain(grammar.rewrite(&args));
    let cli = Cli::try_parse_from(argv)?;
    let Options { global, command } = Options::resolve(cli, host)?;
    let lookup = host.lookup().confined(&global.workspace, &global.run_dir);
    // The chain's files are read once, here: what it found (a malformed or unreadable file, an
    // endpoint of a project file that is ignored, where requests go) is said before anything
    // runs, and what is said is what is used.
    let discovered = lookup.discover();
    for warning in discovered.warnings() {
        writeln!(io.stderr, "{warning}").map_err(CliError::terminal)?;
    }

    if let CommandOptions::Setup = command {
        let (_, creds) = creds::setup::setup_command(&lookup, io.stdin, io.stdout)?;
        if global.verbose {
            describe(&creds, io.stdout)?;
        }
        return Ok(ExitStatus::Success);
    }

    let logger = hooks
        .init_logging
        .then(|| logging::init(host.var("RUST_LOG")));
    // The log file opens when the run really starts (`start_log`): a start that fails or is
    // cancelled before that leaves no `runs/` behind.
    let mut start_log = |path: Option<PathBuf>| {
        if let Some(path) = path {
            super::install_panic_hook(Some(path.clone()));
            *log = Some(path);
        }
    };
    tracing::info!(?args, workspace = %global.workspace.display(), "flowerbox start");

    match command {
        CommandOptions::Go(mut opts) => {
            let creds = gates(&lookup, discovered, &global, io, hooks).await?;
            if global.workbench {
                writeln!(
                    io.stderr,
                    "- go 恒带工作台:{}(-W 不改它的位置)",
                    opts.workbench.display()
                )
                .map_err(CliError::terminal)?;
            }
            let wake = (hooks.wake)(&global.workspace, &global.run_dir, opts.isolate);
            if opts.ask.is_none() {
                let answer = prompt::ask_for_request(
                    wake.waking,
                    opts.new,
                    global.interactive,
                    io.stdin,
                    io.stdout,
                )?;
                opts.ask = answer.ask;
                opts.new = answer.new;
            }
            if !global.interactive && !opts.fully_automatic() {
                writeln!(io.stderr, "{}", prompt::NOT_A_TERMINAL_WARNING)
                    .map_err(CliError::terminal)?;
            }
            let settings = entry::open(entry::settings(&global, &creds)?, Demand::Soon).await?;
            start_log(logger.map(|l| l.open(&global.run_dir)).transpose()?);
            let interactive = global.interactive;
            let result = entry::go(opts, global, settings, wake).await;
            reconfigure_after_refusal(result, &lookup, interactive, io)
        }
        CommandOptions::Run(opts) => {
            let creds = gates(&lookup, discovered, &global, io, hooks).await?;
            let settings = entry::settings(&global, &creds)?;
            let loaded = entry::load_run(opts, &settings)?;
            let settings = entry::open(settings, Demand::Soon).await?;
            start_log(logger.map(|l| l.open(&global.run_dir)).transpose()?);
            let interactive = global.interactive;
            let result = entry::run(loaded, global, settings).await;
            reconfigure_after_refusal(result, &lookup, interactive, io)
        }
        CommandOptions::Once(opts) => {
            let creds = gates(&lookup, discovered, &global, io, hooks).await?;
            let settings = entry::settings(&global, &creds)?;
            entry::check_once(&opts, &settings)?;
            let demand = crate::flow::once::demand(&opts, &settings);
            let settings = entry::open(settings, demand).await?;
            start_log(logger.map(|l| l.open(&global.run_dir)).transpose()?);
            entry::once(opts, global, settings).await
        }
        CommandOptions::Doctor(opts) => {
            start_log(logger.and_then(|l| l.open_existing(&global.run_dir)));
            if global.verbose {
                describe(&discovered, io.stdout)?;
            }
            entry::doctor(opts, global, discovered).await
        }
        CommandOptions::Gc(opts) => {
            start_log(logger.and_then(|l| l.open_existing(&global.run_dir)));
            entry::gc(opts, global).await
        }
        CommandOptions::Setup => unreachable!("handled above"),
    }
}

/// The first line of a reconfiguration after a run stopped on refused credentials.
pub const LOOKS_LIKE_CREDENTIALS: &str = "! 看起来是凭证不对:";
/// The last line of it.
pub const CONFIGURED_RUN_AGAIN: &str = "配好了。再跑一次刚才的命令 —— 同一目录会接着上次。";

/// Seed 000 "跑挂了之后的自动重配": a `go` or `run` stopped after the provider refused the
/// credentials (HTTP 401/403, known by type). On a terminal: [`LOOKS_LIKE_CREDENTIALS`] with the
/// first 120 characters of the refusal, the setup questions, [`CONFIGURED_RUN_AGAIN`], and exit 1
/// all the same. Without one: the seed's refusal message, exit 1. Any other outcome passes
/// through.
fn reconfigure_after_refusal(
    result: Result<ExitStatus, CliError>,
    lookup: &creds::Lookup,
    interactive: bool,
    io: &mut Io<'_>,
) -> Result<ExitStatus, CliError> {
    let Err(CliError::Flow(FlowError::CredentialsRefused { step, refusal })) = result else {
        return result;
    };
    let message = refusal.to_string();
    tracing::warn!(%step, %message, "credentials refused during the run");
    if !interactive {
        return Err(CliError::Creds(creds::CredsError::Refused {
            refusal: creds::Refusal::Auth,
            after_reconfigure: false,
        }));
    }
    let head: String = message.chars().take(120).collect();
    writeln!(io.stdout, "{LOOKS_LIKE_CREDENTIALS}{head}").map_err(CliError::terminal)?;
    creds::setup::configure(lookup, "凭证被拒了,重新配一次。", io.stdin, io.stdout)?;
    writeln!(io.stdout, "{CONFIGURED_RUN_AGAIN}").map_err(CliError::terminal)?;
    Err(CliError::Flow(FlowError::StepAborted(step)))
}

/// The two credential gates on what the chain `discovered`, then the `-v` dump.
async fn gates(
    lookup: &creds::Lookup,
    discovered: Credentials,
    global: &GlobalOptions,
    io: &mut Io<'_>,
    hooks: &Hooks,
) -> Result<Credentials, CliError> {
    let mut policy = EnsurePolicy::standard(global.interactive, lookup);
    policy.probe_settings = hooks.probe.clone();
    let creds = creds::ensure_discovered(lookup, discovered, &policy, io.stdin, io.stdout).await?;
    if global.verbose {
        describe(&creds, io.stdout)?;
    }
    Ok(creds)
}

/// `-v`: the effective configuration, secrets masked (cleaned like every other line on the way
/// out: a value from a `.env` file must not move the cursor). Printed once, before the run's
/// console exists, so it cannot tear the prompt.
fn describe(creds: &Credentials, out: &mut dyn Write) -> Result<(), CliError> {
    let mut text = String::from("- 生效的凭证配置:\n");
    for line in creds.describe() {
        // One line per value, whatever the value holds.
        text.push_str(&format!("  {}\n", line.replace(['\n', '\r'], " ")));
    }
    out.write_all(text.as_bytes()).map_err(CliError::terminal)
}

/// Prints the failure (if any) and picks the exit.
fn finish(result: Result<ExitStatus, CliError>, io: &mut Io<'_>, log: Option<&Path>) -> Exit {
    let error = match result {
        Ok(ExitStatus::Signalled(sig)) => return Exit::Signal(sig),
        Ok(status) => return Exit::Code(status.code()),
        Err(e) => e,
    };
    if error.is_broken_pipe() {
        return Exit::Code(0);
    }
    let code = error.exit_code();
    match &error {
        CliError::Clap(e) => {
            let out: &mut dyn Write = if e.use_stderr() { io.stderr } else { io.stdout };
            // A closed pipe while printing help is not worth a second message.
            let _ = write!(out, "{}", e.render());
        }
        other => {
            // The error and its causes, each once (most messages already name their cause).
            let text = crate::model::error_chain(other);
            tracing::error!(error = %text, code, "exit");
            let _ = writeln!(io.stderr, "{text}");
            if let (Some(log), true) = (log, points_to_log(other)) {
                let _ = writeln!(io.stderr, "  (详情见 {})", log.display());
            }
        }
    }
    let _ = io.stdout.flush();
    let _ = io.stderr.flush();
    Exit::Code(code)
}

/// Errors whose message does not say everything: the log has the rest.
fn points_to_log(error: &CliError) -> bool {
    matches!(
        error,
        CliError::Flow(FlowError::StepAborted(_) | FlowError::Io { .. }) | CliError::Io { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::creds::input::ReaderLines;
    use flowerbox_testkit::SharedBuf;
    use std::collections::BTreeMap;

    struct Run {
        exit: Exit,
        out: String,
        err: String,
    }

    fn run_with(
        args: &[&str],
        host: &Host,
        lines: &[&str],
        wake: impl Fn(&Path, &Path, bool) -> WakeState + Send + Sync + 'static,
    ) -> Run {
        let typed: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let mut stdin = ReaderLines(std::io::Cursor::new(typed));
        let (out, err) = (SharedBuf::default(), SharedBuf::default());
        let mut stdout = Terminal::new(Box::new(out.clone()));
        let mut stderr = Terminal::new(Box::new(err.clone()));
        let hooks = Hooks {
            wake: Box::new(wake),
            init_logging: false,
            probe: ProbeSettings::default(),
        };
        let exit = {
            let mut io = Io {
                stdin: &mut stdin,
                stdout: &mut stdout,
                stderr: &mut stderr,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(
                args.iter().map(OsString::from).collect(),
                host,
                &mut io,
                &hooks,
            ))
        };
        drop((stdout, stderr));
        Run {
            exit,
            out: out.text(),
            err: err.text(),
        }
    }

    fn host(dir: &Path, interactive: bool, vars: &[(&str, &str)]) -> Host {
        let mut map = BTreeMap::new();
        map.insert("HOME".to_string(), dir.join("home").display().to_string());
        for (k, v) in vars {
            map.insert(k.to_string(), v.to_string());
        }
        Host {
            vars: map,
            cwd: dir.to_path_buf(),
            stdin_is_terminal: interactive,
        }
    }

    /// A key, no probe, and an endpoint that fails at once: a command that reaches its run
    /// context ends there instead of waiting for a network.
    const KEY: [(&str, &str); 3] = [
        ("ANTHROPIC_API_KEY", "sk-ant-unit-0123456789"),
        ("FLOWER_NO_PROBE", "1"),
        ("ANTHROPIC_BASE_URL", "notaurl"),
    ];

    #[test]
    fn help_goes_to_stdout_and_errors_to_stderr() {
        let d = tempfile::tempdir().unwrap();
        let h = host(d.path(), false, &[]);
        let r = run_with(&["--help"], &h, &[], crate::flow::wake::wake_state);
        assert_eq!(r.exit, Exit::Code(0));
        assert!(r.out.contains("Usage: flowerbox"));
        assert!(r.err.is_empty());
        let r = run_with(&["--nope"], &h, &[], crate::flow::wake::wake_state);
        assert_eq!(r.exit, Exit::Code(2));
        assert!(r.err.contains("--nope"), "{}", r.err);
    }

    #[test]
    fn the_wake_hook_decides_the_prompt() {
        let d = tempfile::tempdir().unwrap();
        let h = host(d.path(), true, &KEY);
        let expected_workspace = d.path().canonicalize().unwrap();
        let r = run_with(&[], &h, &[""], move |ws, runs, isolate| {
            assert_eq!(ws, expected_workspace);
            WakeState {
                waking: true,
                ..crate::flow::wake::wake_state(ws, runs, isolate)
            }
        });
        assert!(r.out.starts_with(prompt::PROMPT_WOKEN), "{}", r.out);
        // Bare Enter continues: the call reaches `go`, which acts on the same answer (the hook
        // said woken: nothing is asked again) and gets as far as the run's services, where the
        // endpoint fails.
        assert_eq!(r.exit, Exit::Code(1));
        assert!(!r.err.starts_with("要给一句诉求"), "{}", r.err);

        let r = run_with(&[], &h, &[""], crate::flow::wake::wake_state);
        assert!(r.out.starts_with(prompt::PROMPT_FRESH), "{}", r.out);
        assert!(r.err.starts_with("诉求是空的"), "{}", r.err);
    }

    #[test]
    fn verbose_masks_secrets() {
        let d = tempfile::tempdir().unwrap();
        let h = host(d.path(), false, &KEY);
        let r = run_with(
            &["-v", "once", "hi"],
            &h,
            &[],
            crate::flow::wake::wake_state,
        );
        assert!(
            r.out.contains("ANTHROPIC_API_KEY=sk-a…  (进程环境)"),
            "{}",
            r.out
        );
        assert!(!r.out.contains("0123456789"));
    }

    #[test]
    fn verbose_output_cannot_carry_escape_sequences() {
        let d = tempfile::tempdir().unwrap();
        let mut env = KEY.to_vec();
        env.push(("ANTHROPIC_MODEL", "evil\x1b[2J\x1b]0;pwned\x07-model"));
        let h = host(d.path(), false, &env);
        let r = run_with(
            &["-v", "once", "hi"],
            &h,
            &[],
            crate::flow::wake::wake_state,
        );
        assert!(r.out.contains("ANTHROPIC_MODEL=evil"), "{}", r.out);
        assert!(
            !r.out.contains('\x1b') && !r.out.contains('\x07'),
            "{:?}",
            r.out
        );
    }

    #[test]
    fn a_malformed_dotenv_line_is_named_with_its_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(".env"),
            "# mine\nANTHROPIC_API_KEY sk-ant-forgot-the-equals\n",
        )
        .unwrap();
        let h = host(d.path(), false, &[("FLOWER_NO_PROBE", "1")]);
        let r = run_with(&["once", "hi"], &h, &[], crate::flow::wake::wake_state);
        assert_eq!(r.exit, Exit::Code(1));
        let warning = format!(
            "! {} 第 2 行看不懂(没有 `=`),跳过了\n",
            d.path().join(".env").display()
        );
        assert!(r.err.starts_with(&warning), "{}", r.err);
        assert!(r.err.contains("缺少凭证"), "{}", r.err);
        assert!(!r.err.contains("forgot"), "{}", r.err);
    }

    #[test]
    fn setup_writes_the_user_file_and_no_run_dir() {
        let d = tempfile::tempdir().unwrap();
        let h = host(d.path(), false, &[]);
        let r = run_with(
            &["setup"],
            &h,
            &["tok-abcdefgh", "", ""],
            crate::flow::wake::wake_state,
        );
        assert_eq!(r.exit, Exit::Code(0), "{}", r.err);
        assert!(d.path().join("home/.config/flower/.env").exists());
        assert!(!d.path().join("runs").exists());
    }

    /// An error whose message leaves its cause out (as reqwest's does).
    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Hides(#[source] std::io::Error);

    #[test]
    fn the_edge_prints_an_error_with_each_cause_once() {
        use crate::model::error::Shared;
        use crate::model::transport::TransportError;
        use crate::model::ModelError;
        let (out, err) = (SharedBuf::default(), SharedBuf::default());
        let mut stdin = ReaderLines(std::io::Cursor::new(String::new()));
        let mut stdout = Terminal::new(Box::new(out.clone()));
        let mut stderr = Terminal::new(Box::new(err.clone()));
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let cause = TransportError::Connect(Box::new(Hides(refused)));
        let e = CliError::Flow(FlowError::Model(ModelError::Transport(Shared::new(cause))));
        let mut io = Io {
            stdin: &mut stdin,
            stdout: &mut stdout,
            stderr: &mut stderr,
        };
        assert_eq!(finish(Err(e), &mut io, None), Exit::Code(1));
        drop((stdout, stderr));
        assert_eq!(
            err.text(),
            "cannot connect: error sending request: refused\n",
            "the message, then the cause it hides, each once"
        );
    }
}
