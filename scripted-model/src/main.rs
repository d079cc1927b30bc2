//! `scripted-model`: serves the Anthropic Messages streaming protocol from a scenario file.
//! Usage and the scenario format: the `scripted_model` library (`src/lib.rs`).

use std::io::Write;

use clap::Parser;
use scripted_model::{run, Args};

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args, &mut flowerbox::shown::stdout()).await {
        let _ = writeln!(flowerbox::shown::stderr(), "scripted-model: {e}");
        std::process::exit(2);
    }
}
