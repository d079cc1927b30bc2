//! Merges the part files the `*_bench` examples wrote into the one table and JSON document of
//! `scripts/bench.sh`: figures sorted by issue 10's numbers, each a median with its spread and,
//! where it compares, the baseline of the same run and the ratio of the medians.
//!
//! Usage: `bench_report [--json FILE] PART...`.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{print_table, read_part, Figure};
use serde_json::json;
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut out, mut parts) = (None::<PathBuf>, Vec::<PathBuf>::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => out = Some(args.next().expect("--json FILE").into()),
            _ => parts.push(a.into()),
        }
    }
    let mut figures: Vec<Figure> = Vec::new();
    let mut sources = Vec::new();
    for p in &parts {
        let (doc, f) = read_part(p);
        sources.push(json!({"source": doc["source"], "extra": doc["extra"]}));
        figures.extend(f);
    }
    // "1", "1b", "2", …: by number, then suffix.
    figures.sort_by_key(|f| {
        let digits: String = f.id.chars().take_while(char::is_ascii_digit).collect();
        (digits.parse::<u32>().unwrap_or(u32::MAX), f.id.clone())
    });
    print_table(&figures);
    let missing: Vec<String> = (1..=7)
        .map(|n| n.to_string())
        .filter(|n| !figures.iter().any(|f| &f.id == n))
        .collect();
    if !missing.is_empty() {
        eprintln!("bench_report: figures missing: {}", missing.join(", "));
    }
    if let Some(path) = out {
        let machine = json!({
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        });
        let doc = json!({
            "machine": machine, "sources": sources,
            "figures": figures.iter().map(Figure::json).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("wrote {}", path.display());
    }
}
