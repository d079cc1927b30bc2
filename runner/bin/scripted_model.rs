//! `scripted-model`: serves the Anthropic Messages streaming protocol from a scenario file.
//! Usage and the scenario format: `flowerbox::model::scripted`.

use clap::Parser;
use flowerbox::model::scripted::{run, Args};

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args, &mut std::io::stdout()).await {
        eprintln!("scripted-model: {e}");
        std::process::exit(2);
    }
}
