//! A small driver of the interactive [`Console`] for manual tries and the tmux tests
//! (`tests/term_tmux.rs`): a fake event producer prints a tool-call line every 100 ms, a
//! question becomes pending after `--ask-after` seconds, `?`/`？` questions go to an aside
//! oracle backed by an echoing model, Ctrl-C and signals are handled the way a real driver
//! handles them.
//!
//! ```text
//! cargo run --example console_smoke -- [--ask-after SECS] [--run-for SECS]
//! ```
//!
//! Lines it prints itself start with `[smoke]`: `pid N`, `paused` (first Ctrl-C: the ticks stop),
//! `interrupt: <msg>` (the prompt answered: they go on), `quit`, `done`.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/term_support/mod.rs"]
mod term_support;

use std::sync::Arc;
use std::time::Duration;

use flowerbox::agent::{Event, EventKind, Runtime, RuntimeConfig};
use flowerbox::channel::{HumanChannel, HumanConfig};
use flowerbox::flow::aside::AsideOracle;
use flowerbox::flow::frontend::Interrupt;
use flowerbox::role::Role;
use flowerbox::sandbox::host::HostSandboxFactory;
use flowerbox::signals::{exit_by_signal, EXIT_INTERRUPTED};
use flowerbox::term::{Console, ConsoleOptions, ConsoleSignal, OutputPort};

/// Shows what Ctrl-C would say to the agent; while paused the fake run stops ticking.
struct LogInterrupt(OutputPort, Arc<tokio::sync::watch::Sender<bool>>);

impl Interrupt for LogInterrupt {
    fn pause(&self) {
        self.1.send_replace(true);
        self.0.print_lines(&["[smoke] paused"]);
    }
    fn resume(&self, message: &str) {
        let shown = if message.is_empty() { "(空)" } else { message };
        self.0.print_lines(&[format!("[smoke] interrupt: {shown}")]);
        self.1.send_replace(false);
    }
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let ask_after = arg("--ask-after", 3600.0);
    let run_for = arg("--run-for", 600.0);
    let dir = tempfile::tempdir().expect("tempdir");

    let channel = HumanChannel::new(HumanConfig::default());
    let console = Console::new(ConsoleOptions::detect(false)).expect("console");
    let sink = console.event_sink();
    let rt = Arc::new(Runtime::new(
        RuntimeConfig::new(
            dir.path().to_path_buf(),
            "echo-model".into(),
            "smoke".into(),
        ),
        term_support::echo_oracle(),
        Arc::new(term_support::MemStore::default()),
        Arc::new(HostSandboxFactory::new()),
        None,
        Arc::new(flowerbox::agent::human::Absent),
        sink.clone(),
    ));
    console.start(channel.clone()).expect("console start");
    if let Some(r) = console.terminal_restore() {
        flowerbox::term::tty::chain_panic_hook(r);
    }
    console.set_aside(Arc::new(AsideOracle::new(
        rt,
        None,
        Some(dir.path().join("runs")),
        tokio::runtime::Handle::current(),
    )));
    let paused = Arc::new(tokio::sync::watch::Sender::new(false));
    console.set_interrupter(Arc::new(LogInterrupt(
        console.port().clone(),
        paused.clone(),
    )));
    console.print_lines(&[format!("[smoke] pid {}", std::process::id())]);

    {
        let _image = console.spinner("构建镜像 smoke");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The fake run: a line every 100 ms.
    let producer = {
        let sink = sink.clone();
        let mut paused = paused.subscribe();
        tokio::spawn(async move {
            for n in 0u64.. {
                let _ = paused.wait_for(|p| !*p).await;
                sink(Event {
                    agent: "coordinator".into(),
                    role: Role::Coordinator,
                    depth: 0,
                    kind: EventKind::ToolCall {
                        id: format!("t{n}"),
                        name: "Read".into(),
                        summary: format!("Read: tick {n}"),
                    },
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let asker = {
        let channel = channel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(ask_after)).await;
            channel
                .ask_question(
                    flowerbox::agent::human::Asker::new("coordinator", Role::Coordinator),
                    "要不要加测试?",
                    &["要".to_string(), "不要".to_string()],
                )
                .await
        })
    };

    let end = tokio::time::sleep(Duration::from_secs_f64(run_for));
    tokio::pin!(end);
    loop {
        tokio::select! {
            _ = &mut end => break,
            sig = console.next_signal() => match sig {
                ConsoleSignal::Interrupted => continue,
                ConsoleSignal::Quit => {
                    producer.abort();
                    console.print_lines(&["[smoke] quit"]);
                    console.close();
                    std::process::exit(EXIT_INTERRUPTED);
                }
                ConsoleSignal::Terminate(s) => {
                    producer.abort();
                    console.print_lines(&[format!("[smoke] terminated by {s}")]);
                    console.close();
                    exit_by_signal(s);
                }
            },
        }
    }
    producer.abort();
    asker.abort();
    console.print_lines(&["[smoke] done"]);
    console.finish().await;
}
