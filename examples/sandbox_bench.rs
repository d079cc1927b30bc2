//! The Docker sandbox figures of `scripts/bench.sh` (issue 6), each a median over repeated runs
//! next to a baseline measured in the same run:
//!
//! 1. container cold start to first exec result (pod + agent container + `true`) vs
//!    `docker run --rm IMAGE true`;
//! 2. Bash round trip for `true` in a warm container vs `sh -c true` on the host;
//! 3. 8 agent containers started in parallel (to first exec result) vs 1.
//!
//! Usage: `sandbox_bench [--repeat N] [--roundtrips N] [--json FILE] [--exec CMD] [--ensure-image]`.
//! `--exec CMD` runs one command in a fresh sandbox and prints the result (debugging aid).
//! `--ensure-image` only makes sure the agent image exists (built offline on first use, progress
//! on stderr) and prints its tag: `docker/build.sh` bases the runner image on it.

use flowerbox::model::Role;
use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, SandboxFactory};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

struct Figure {
    name: &'static str,
    unit: &'static str,
    value: f64,
    baseline_name: &'static str,
    baseline: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn req(cmd: &str, cwd: &Path) -> ExecRequest {
    ExecRequest {
        command: cmd.into(),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 64 * 1024,
        spill_dir: None,
        cancel: CancellationToken::new(),
    }
}

fn agent(name: &str, ws: &Path) -> AgentBox {
    AgentBox {
        agent: name.into(),
        role: Role::Worker,
        mounts: vec![Mount {
            path: ws.to_path_buf(),
            read_only: false,
        }],
        workdir: ws.to_path_buf(),
    }
}

async fn factory(image: &str, ws: &Path, tag: &str) -> DockerSandboxFactory {
    let run = format!(
        "bench-{}-{tag}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let mut opts = DockerOptions::new(run, ws);
    opts.image = Some(image.into());
    opts.show_progress = false;
    DockerSandboxFactory::connect(opts).await.expect("connect")
}

async fn first_result(f: &DockerSandboxFactory, name: &str, ws: &Path) -> Duration {
    let t = Instant::now();
    let sb = f.sandbox(&agent(name, ws)).await.expect("sandbox");
    let out = sb.exec(req("true", ws)).await.expect("exec");
    assert!(out.success(), "{out:?}");
    t.elapsed()
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut repeat, mut roundtrips, mut json, mut exec) =
        (5usize, 50usize, None::<PathBuf>, None::<String>);
    let mut image_only = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--repeat N")
            }
            "--roundtrips" => {
                roundtrips = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--roundtrips N")
            }
            "--json" => json = Some(args.next().expect("--json FILE").into()),
            "--exec" => exec = Some(args.next().expect("--exec CMD")),
            "--ensure-image" => image_only = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let engine = Engine::connect(None, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let image = ensure_image(&engine, None, true)
        .await
        .expect("image")
        .image;
    if image_only {
        println!("{image}");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).unwrap();

    if let Some(cmd) = exec {
        let f = factory(&image, &ws, "exec").await;
        let sb = f.sandbox(&agent("worker-1", &ws)).await.expect("sandbox");
        let t = Instant::now();
        let out = sb.exec(req(&cmd, &ws)).await.expect("exec");
        println!("{:.1} ms {out:#?}", ms(t.elapsed()));
        f.teardown().await.expect("teardown");
        return;
    }

    // 1. Cold start: a fresh run's first agent (pod + container + exec) vs `docker run --rm`.
    let (mut cold, mut run_rm) = (Vec::new(), Vec::new());
    for i in 0..repeat {
        let f = factory(&image, &ws, &format!("cold{i}")).await;
        cold.push(ms(first_result(&f, "worker-1", &ws).await));
        f.teardown().await.expect("teardown");
        let t = Instant::now();
        let st = std::process::Command::new("docker")
            .args(["run", "--rm", &image, "true"])
            .status()
            .unwrap();
        assert!(st.success());
        run_rm.push(ms(t.elapsed()));
    }

    // 2. Round trip of `true` in a warm container vs `sh -c true` on the host.
    let f = factory(&image, &ws, "warm").await;
    let sb = f.sandbox(&agent("worker-1", &ws)).await.expect("sandbox");
    sb.exec(req("true", &ws)).await.expect("warm-up");
    let (mut rt, mut host) = (Vec::new(), Vec::new());
    for _ in 0..roundtrips {
        let t = Instant::now();
        let out = sb.exec(req("true", &ws)).await.expect("exec");
        rt.push(ms(t.elapsed()));
        assert!(out.success());
        let t = Instant::now();
        std::process::Command::new("sh")
            .args(["-c", "true"])
            .status()
            .unwrap();
        host.push(ms(t.elapsed()));
    }
    f.teardown().await.expect("teardown");

    // 3. 8 agent containers at once vs 1 (pod already up, as within a run).
    let (mut one, mut eight) = (Vec::new(), Vec::new());
    for i in 0..repeat {
        let f = factory(&image, &ws, &format!("par{i}")).await;
        first_result(&f, "coordinator", &ws).await; // the pod
        one.push(ms(first_result(&f, "worker-0", &ws).await));
        let t = Instant::now();
        let names: Vec<String> = (1..=8).map(|n| format!("worker-{n}")).collect();
        futures::future::join_all(names.iter().map(|n| first_result(&f, n, &ws))).await;
        eight.push(ms(t.elapsed()));
        f.teardown().await.expect("teardown");
    }

    let figures = [
        Figure {
            name: "cold start to first exec result",
            unit: "ms",
            value: median(cold),
            baseline_name: "docker run --rm IMAGE true",
            baseline: median(run_rm),
        },
        Figure {
            name: "Bash round trip `true`, warm container",
            unit: "ms",
            value: median(rt),
            baseline_name: "sh -c true on the host",
            baseline: median(host),
        },
        Figure {
            name: "8 containers in parallel (to first result)",
            unit: "ms",
            value: median(eight),
            baseline_name: "1 container",
            baseline: median(one),
        },
    ];
    println!("image {image}; medians of {repeat} runs ({roundtrips} round trips)");
    println!(
        "{:<46} {:>10}   {:<30} {:>10} {:>8}",
        "figure", "median", "baseline", "median", "ratio"
    );
    for f in &figures {
        println!(
            "{:<46} {:>7.1} {}   {:<30} {:>7.1} {} {:>7.2}x",
            f.name,
            f.value,
            f.unit,
            f.baseline_name,
            f.baseline,
            f.unit,
            f.value / f.baseline
        );
    }
    if let Some(path) = json {
        let v: Vec<serde_json::Value> = figures
            .iter()
            .map(|f| {
                serde_json::json!({
                    "figure": f.name, "unit": f.unit, "median": f.value,
                    "baseline": f.baseline_name, "baseline_median": f.baseline,
                    "ratio": f.value / f.baseline,
                })
            })
            .collect();
        let doc = serde_json::json!({ "image": image, "repeat": repeat, "roundtrips": roundtrips, "figures": v });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write json");
        eprintln!("wrote {}", path.display());
    }
}
