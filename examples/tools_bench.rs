//! Figure 7 of `scripts/bench.sh` (issue 14): what the host-side file tools cost per call, each a
//! median over `--calls` calls with its spread, against the plain `std::fs` call that does the
//! same I/O without any confinement:
//!
//! - 7: `Read` of a 4 KiB file three directories below the workspace vs `fs::read`;
//! - 7b: `Write` of the same file (replacing it) vs `fs::write`;
//! - 7c: `Grep` for one word over a tree of 200 small files (absolute time only).
//!
//! Usage: `tools_bench [--calls N] [--json FILE]`.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{print_table, write_part, Figure, Stats};
use flowerbox::agent::human::Absent;
use flowerbox::agent::tools::{ToolContext, ToolLimits, ToolRegistry};
use flowerbox::role::Role;
use flowerbox::sandbox::{AgentBox, Mount};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

fn context(ws: &Path) -> ToolContext {
    let abox = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.to_path_buf(), false)],
        masked: Vec::new(),
        workdir: ws.to_path_buf(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    };
    ToolContext::new(
        "worker-1".into(),
        Role::Worker,
        1,
        abox,
        None,
        None,
        Arc::new(Absent),
        CancellationToken::new(),
        None,
        ToolLimits::default(),
    )
}

/// Microseconds of each of `calls` runs of `f`.
async fn time_calls<F, Fut>(calls: usize, mut f: F) -> Vec<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut v = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        f(i).await;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    v
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut calls = 500usize;
    let mut json_out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|n| n.parse().ok()).expect("--calls N"),
            "--json" => json_out = args.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    let file = ws.join("src/a/b/file.rs");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let text = "fn main() { println!(\"hello\"); }\n".repeat(4096 / 34);
    std::fs::write(&file, &text).unwrap();
    for i in 0..200 {
        let p = ws.join(format!("tree/d{}/f{i}.txt", i % 10));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("line one\nline {i} needle\n")).unwrap();
    }
    let ctx = context(&ws);
    let reg = ToolRegistry::standard();
    let (read, write, grep) = (
        reg.get("Read").unwrap(),
        reg.get("Write").unwrap(),
        reg.get("Grep").unwrap(),
    );
    let read_in = json!({"file_path": "src/a/b/file.rs"});
    let write_in = json!({"file_path": "src/a/b/file.rs", "content": text});
    let grep_in = json!({"pattern": "needle", "path": "tree"});
    let call = |tool: &Arc<dyn flowerbox::agent::tools::Tool>, input: &Value| {
        let (tool, input) = (tool.clone(), input.clone());
        let ctx = &ctx;
        async move {
            tool.call(&input, ctx).await.expect("tool call");
        }
    };
    // Warm up the page cache and the blocking pool.
    for _ in 0..20 {
        call(&read, &read_in).await;
        call(&write, &write_in).await;
    }
    let t_read = time_calls(calls, |_| call(&read, &read_in)).await;
    let t_fs_read = time_calls(calls, |_| {
        let f = file.clone();
        async move {
            std::hint::black_box(std::fs::read(&f).unwrap());
        }
    })
    .await;
    let t_write = time_calls(calls, |_| call(&write, &write_in)).await;
    let t_fs_write = time_calls(calls, |_| {
        let (f, t) = (file.clone(), text.clone());
        async move { std::fs::write(&f, t).unwrap() }
    })
    .await;
    let t_grep = time_calls(calls / 10 + 1, |_| call(&grep, &grep_in)).await;
    let figures = vec![
        Figure::new("7", "Read tool, 4 KiB file", "µs", Stats::of(&t_read))
            .vs("fs::read", Stats::of(&t_fs_read)),
        Figure::new("7b", "Write tool, 4 KiB file", "µs", Stats::of(&t_write))
            .vs("fs::write", Stats::of(&t_fs_write)),
        Figure::new("7c", "Grep tool, 200 files", "µs", Stats::of(&t_grep)),
    ];
    print_table(&figures);
    if let Some(path) = json_out {
        write_part(&path, "tools_bench", json!({"calls": calls}), &figures);
    }
}
