//! `scripted-model`: serves the Anthropic Messages streaming protocol from a scenario file.

fn main() {}
