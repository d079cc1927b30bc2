//! Figure 14f of `scripts/bench.sh` (issue 30 §2): the demo's wall time (`scripts/demo.sh`, its
//! `took.ms`: the `flowerbox --isolate --probe-checks --judge-can-run` run alone) on an engine
//! that does not share this machine's disk (`--sandbox docker-remote`) vs on the local engine
//! (`--sandbox docker`), run alternately `--repeat` times each in the same run.
//!
//! Usage: `remote_demo_bench --engine tcp://127.0.0.1:PORT [--repeat N] [--json FILE]`
//! (`scripts/second-engine.sh start` prints the engine; `FLOWERBOX_TEST_SECOND_ENGINE` is the
//! default). The binaries are this build's `flowerbox` and `scripted-model`.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{print_table, write_part, Figure, Stats};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One demo in a fresh directory: its run's milliseconds.
fn demo(bins: &Path, engine: Option<&str>) -> f64 {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("demo");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Command::new(root.join("scripts/demo.sh"));
    c.arg(&dir)
        .env("FLOWERBOX_DEMO_BIN", bins.join("flowerbox"))
        .env("FLOWERBOX_DEMO_MODEL_BIN", bins.join("scripted-model"))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    match engine {
        Some(host) => c
            .env("DOCKER_HOST", host)
            .env("FLOWERBOX_DEMO_SANDBOX", "docker-remote"),
        None => c.env_remove("DOCKER_HOST"),
    };
    let status = c.status().unwrap();
    assert!(status.success(), "scripts/demo.sh ({engine:?}) failed");
    std::fs::read_to_string(dir.join("took.ms"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn main() {
    let mut repeat = 3usize;
    let mut json_out: Option<PathBuf> = None;
    let mut engine = std::env::var("FLOWERBOX_TEST_SECOND_ENGINE").ok();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeat N")
            }
            "--json" => json_out = args.next().map(PathBuf::from),
            "--engine" => engine = args.next(),
            other => panic!("unknown argument {other}"),
        }
    }
    let engine = engine.expect("--engine or FLOWERBOX_TEST_SECOND_ENGINE");
    // target/<profile>/examples/remote_demo_bench → target/<profile>
    let exe = std::env::current_exe().unwrap();
    let bins = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for i in 0..repeat {
        local.push(demo(&bins, None));
        remote.push(demo(&bins, Some(&engine)));
        eprintln!(
            "demo {}: local {} ms, remote {} ms",
            i + 1,
            local[i],
            remote[i]
        );
    }
    let figures = vec![Figure::new(
        "14f",
        "demo run, engine without the disk (docker-remote)",
        "ms",
        Stats::of(&remote),
    )
    .vs("local engine", Stats::of(&local))
    .note(format!(
        "scripts/demo.sh took.ms, {repeat} each, alternated"
    ))];
    print_table(&figures);
    if let Some(path) = json_out {
        write_part(
            &path,
            "remote_demo_bench",
            json!({"repeat": repeat}),
            &figures,
        );
    }
}
