//! `scripted-model`: serves the Anthropic Messages streaming protocol from a scenario file.
//! Usage and the scenario format: `flowerbox::model::scripted`.
#![deny(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

use std::io::Write;

use clap::Parser;
use flowerbox::model::scripted::{run, Args};

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args, &mut flowerbox::shown::stdout()).await {
        let _ = writeln!(flowerbox::shown::stderr(), "scripted-model: {e}");
        std::process::exit(2);
    }
}
