//! The MCP figures of `scripts/bench.sh` (issue 18), medians next to a baseline measured in the
//! same run, in the same warm agent container:
//!
//! 8a. a project stdio MCP server started in the agent's container (attached exec, MCP
//!     `initialize`, `tools/list`; the test fixture in python3) vs a Bash round trip for `true`;
//! 8b. one MCP tool call (`probe`) to that running server vs a Bash round trip for `true`.
//!
//! Usage: `mcp_bench [--repeat N] [--calls N] [--json FILE]`.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::mcp::{AgentAsk, McpHub, McpSettings, ServerConfig, Transport};
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, Sandbox, SandboxFactory};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{ms, print_table, write_part, Figure, Stats};

const FIXTURE: &str = include_str!("../tests/fixtures/mcp/server.py");

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn bash_true(sb: &dyn Sandbox, ws: &Path) -> f64 {
    let t = Instant::now();
    let out = sb
        .exec(ExecRequest {
            command: "true".into(),
            cwd: ws.to_path_buf(),
            env: Vec::new(),
            timeout: Duration::from_secs(60),
            output_cap: 4096,
            spill_dir: None,
            cancel: CancellationToken::new(),
        })
        .await
        .expect("exec");
    assert!(out.success(), "{out:?}");
    ms(t.elapsed())
}

fn server(ws: &Path) -> ServerConfig {
    ServerConfig {
        name: "fx".into(),
        id: "fx".into(),
        origin: ws.join(".mcp.json"),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![ws.join("mcp_fixture.py").display().to_string()],
            env: Vec::new(),
        },
    }
}

#[tokio::main]
async fn main() {
    let repeat: usize = arg("--repeat").and_then(|v| v.parse().ok()).unwrap_or(5);
    let calls: usize = arg("--calls").and_then(|v| v.parse().ok()).unwrap_or(30);
    let json = arg("--json").map(PathBuf::from);
    let engine = Engine::connect(None, Duration::from_secs(5))
        .await
        .expect("Docker engine");
    let image = ensure_image(&engine, None, true)
        .await
        .expect("agent image")
        .image;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("mcp_fixture.py"), FIXTURE).unwrap();
    let mut opts = DockerOptions::new(
        format!(
            "mcpbench-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        ),
        &ws,
    );
    opts.image = Some(image);
    opts.show_progress = false;
    let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
    let agent = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.clone(), false)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    };
    let sandbox = factory.sandbox(&agent).await.expect("sandbox");
    // Warm up the container.
    bash_true(sandbox.as_ref(), &ws).await;

    let mut starts = Vec::new();
    let mut start_base = Vec::new();
    let mut call = Vec::new();
    let mut call_base = Vec::new();
    let cancel = CancellationToken::new();
    for i in 0..repeat {
        start_base.push(bash_true(sandbox.as_ref(), &ws).await);
        let hub = McpHub::new(
            vec![server(&ws)],
            McpSettings::default(),
            Default::default(),
            30_000,
        );
        let t = Instant::now();
        let mcp = hub
            .for_agent(AgentAsk {
                agent: format!("worker-{i}"),
                whitelist: vec!["mcp__*".into()],
                read_only: false,
                taken: Default::default(),
                sandbox: Some(sandbox.clone()),
                cwd: ws.clone(),
            })
            .await;
        starts.push(ms(t.elapsed()));
        assert!(mcp.notes.is_empty(), "{:?}", mcp.notes);
        if i == 0 {
            for _ in 0..calls {
                call_base.push(bash_true(sandbox.as_ref(), &ws).await);
                let t = Instant::now();
                mcp.call("mcp__fx__probe", &serde_json::json!({}), &cancel)
                    .await
                    .expect("probe");
                call.push(ms(t.elapsed()));
            }
        }
        hub.shutdown().await;
    }
    factory.teardown().await.expect("teardown");

    let figures = vec![
        Figure::new(
            "8a",
            "MCP stdio server start in the agent's container",
            "ms",
            Stats::of(&starts),
        )
        .vs("Bash `true` round trip", Stats::of(&start_base))
        .note(format!(
            "attach + initialize + tools/list, python3 fixture, {repeat} starts"
        )),
        Figure::new("8b", "MCP tool call round trip", "ms", Stats::of(&call))
            .vs("Bash `true` round trip", Stats::of(&call_base))
            .note(format!("{calls} calls, interleaved with the baseline")),
    ];
    print_table(&figures);
    if let Some(path) = json {
        write_part(&path, "mcp_bench", serde_json::json!({}), &figures);
    }
}
