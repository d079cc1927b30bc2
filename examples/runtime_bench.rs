//! The agent-run figures of `scripts/bench.sh` (issue 10), on the real Docker engine against the
//! scripted model, each a median over repeated runs with its spread:
//!
//! 3. 8 scripted workers in parallel vs 1: wall-clock of real agent runs through the
//!    [`Runtime`] with the Docker sandbox (each worker: its own container, three Bash calls,
//!    a four-part report); ratio ideal 1.0;
//! 5. the runner's peak RSS (`ru_maxrss` of the `flowerbox` process) during the demo
//!    (`scripts/demo.sh`, its `flowerbox --isolate --judge-can-run` run, measured through a
//!    shim given as `FLOWERBOX_DEMO_BIN`), vs `flowerbox --help`; and (5b) per additional
//!    parallel worker: unattended `go` runs shaped like the demo (clarify → goal → coordinator
//!    dispatching N workers at once, each with its own container and three Bash calls → a judge
//!    that runs commands → ACHIEVED) for N = 1, 2, 4, 8, the least-squares slope per repeat.
//!
//! Usage: `runtime_bench [--repeat N] [--rss-repeat N] [--only 3|5] [--flowerbox PATH]
//! [--json FILE]`. `--flowerbox` defaults to the `flowerbox` next to this example's directory
//! (`target/debug/flowerbox`; `scripts/bench.sh` builds it first).
//! Internal: `--shim-rss OUT PROGRAM ARGS…` runs PROGRAM, appends its peak RSS (KiB) and
//! arguments to OUT as one JSON line and exits with its code (the demo's flowerbox command).
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{ms, print_table, slope, wait_with_peak_rss, write_part, Figure, Stats};
use flowerbox::agent::event::null_sink;
use flowerbox::agent::human::Absent;
use flowerbox::agent::roles::worker;
use flowerbox::agent::{RunOptions, Runtime, RuntimeConfig};
use flowerbox::model::{build_provider, Provider, ProviderOptions};
use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::sandbox::SandboxFactory;
use flowerbox::session::SqliteSessionStore;
use scripted_model::{Scenario, ScriptedServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The report every scripted worker ends with (the four-part format).
const REPORT: &str = "结论:做完了\n依据:三条命令都跑了\n产出:无\n未验证:无";

fn bash(cmd: &str) -> Value {
    json!({"content": [{"type": "tool_use", "name": "Bash", "input": {"command": cmd}}]})
}

fn worker_turns() -> Vec<Value> {
    vec![
        bash("true"),
        bash("echo $((6*7))"),
        bash("ls / >/dev/null && uname -r"),
        json!({"content": [{"type": "text", "text": REPORT}]}),
    ]
}

/// Binds an in-process scripted model on loopback and serves it in the background.
async fn serve(scenario: &Value) -> String {
    let scenario = Scenario::parse(&scenario.to_string()).expect("scenario");
    let server = ScriptedServer::bind(scenario, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("bind scripted model");
    let url = server.url();
    tokio::spawn(server.serve(std::future::pending()));
    url
}

fn provider(url: &str) -> Arc<dyn Provider> {
    let url = url.to_string();
    let get = move |k: &str| match k {
        "ANTHROPIC_BASE_URL" => Some(url.clone()),
        "ANTHROPIC_API_KEY" => Some("sk-bench".into()),
        "ANTHROPIC_MODEL" => Some("claude-sonnet-4-5".into()),
        _ => None,
    };
    build_provider(&get, ProviderOptions::default()).expect("provider")
}

/// Figure 3: per repeat, a fresh run (pod warmed by one untimed worker), then 1 worker, then 8
/// at once; every worker gets a new container.
async fn parallel_workers(image: &str, repeat: usize) -> Figure {
    let url = serve(&json!({"agents": [{"role": "worker", "turns": worker_turns()}]})).await;
    let provider = provider(&url);
    let spec = worker("coder", "bench", "按提示跑几条命令。").spec;
    let (mut one, mut eight) = (Vec::new(), Vec::new());
    for i in 0..repeat {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let run_id = format!("bench-{}-w{i}", std::process::id());
        let mut opts = DockerOptions::new(run_id.clone(), &ws);
        opts.image = Some(image.into());
        opts.show_progress = false;
        let factory = Arc::new(DockerSandboxFactory::connect(opts).await.expect("connect"));
        let store = SqliteSessionStore::open(ws.join("sessions.db")).expect("sessions.db");
        let rt = Arc::new(Runtime::new(
            RuntimeConfig::new(ws.clone(), "claude-sonnet-4-5".into(), run_id),
            provider.clone(),
            Arc::new(store),
            factory.clone(),
            None,
            Arc::new(Absent),
            null_sink(),
        ));
        let one_worker = || {
            let rt = rt.clone();
            let spec = spec.clone();
            async move {
                let r = rt.run(&spec, "跑三条命令", RunOptions::default()).await;
                assert!(r.ok, "worker failed: {:?} {:?}", r.error, r.errors);
            }
        };
        one_worker().await; // the pod
        rt.release_agents().await;
        let t = Instant::now();
        one_worker().await;
        one.push(ms(t.elapsed()));
        rt.release_agents().await;
        let t = Instant::now();
        futures::future::join_all((0..8).map(|_| one_worker())).await;
        eight.push(ms(t.elapsed()));
        rt.release_agents().await;
        factory.teardown().await.expect("teardown");
    }
    Figure::new(
        "3",
        "8 scripted workers in parallel (wall clock)",
        "ms",
        Stats::of(&eight),
    )
    .vs("1 scripted worker", Stats::of(&one))
    .note("Runtime + Docker sandbox + scripted model; each worker: own container, 3 Bash calls")
}

/// The go scenario of figure 5 with `n` workers dispatched in one coordinator turn.
fn go_scenario(n: usize) -> Value {
    let calls: Vec<Value> = (1..=n)
        .map(|k| {
            json!({"type": "tool_use", "name": "Agent", "input": {
                "description": format!("任务 {k}"),
                "prompt": format!("做任务 {k}:按提示跑几条命令"),
                "subagent_type": "coder"}})
        })
        .collect();
    json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text":
            "## 目标\n跑几条命令\n\n## 验收标准\n- 命令都跑过\n\n## 边界\n无\n\n## 未知与假设\n- 无人应答:按字面做\n"}]}]},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [{"content": [{"type": "text", "text":
            "## 目标\n命令都跑过\n\n## 判定清单\n- 工作区可以列出\n- 命令都跑过\n"}]}]},
        {"role": "judge", "prompt": "判定这一轮", "turns": [
            bash("ls -la && ps ax | head -n 5"),
            {"content": [{"type": "text", "text": "## 结论\nACHIEVED\n\n## 理由\n看到了\n\n## 未通过\n无\n"}]}]},
        {"role": "coordinator", "turns": [
            {"content": calls},
            {"content": [{"type": "text", "text": "都做完了。"}]}]},
        {"role": "worker", "prompt": "做任务", "turns": worker_turns()}
    ]})
}

/// One unattended `go` run with `n` workers: (peak RSS in MiB, wall ms).
async fn go_run(flowerbox: &Path, n: usize) -> (f64, f64) {
    let url = serve(&go_scenario(n)).await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, home) = (root.join("proj"), root.join("home"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let log = root.join("out.log");
    let out = std::fs::File::create(&log).unwrap();
    let flowerbox = flowerbox.to_path_buf();
    let started = Instant::now();
    let (code, kib) = tokio::task::spawn_blocking(move || {
        let child = Command::new(&flowerbox)
            .args(["--timeout", "0", "--judge-can-run", "跑几条命令"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("FLOWER_NO_PROBE", "1")
            .env("ANTHROPIC_BASE_URL", &url)
            .env("ANTHROPIC_API_KEY", "sk-bench")
            .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
            .current_dir(&ws)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn flowerbox");
        wait_with_peak_rss(child)
    })
    .await
    .unwrap();
    let wall = ms(started.elapsed());
    if code != Some(0) {
        panic!(
            "go with {n} workers exited {code:?}:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    (kib as f64 / 1024.0, wall)
}

/// Figure 5: per repeat, go runs with 1, 2, 4, 8 workers; the demo-like value is N = 2.
async fn runner_rss(flowerbox: &Path, repeat: usize) -> Vec<Figure> {
    const NS: [usize; 4] = [1, 2, 4, 8];
    let mut idle = Vec::new();
    let mut by_n: Vec<Vec<f64>> = vec![Vec::new(); NS.len()];
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); NS.len()];
    let mut slopes = Vec::new();
    for _ in 0..repeat {
        let child = Command::new(flowerbox)
            .arg("--help")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn flowerbox --help");
        idle.push(wait_with_peak_rss(child).1 as f64 / 1024.0);
        let mut this = Vec::new();
        for (i, n) in NS.iter().enumerate() {
            let (rss, wall) = go_run(flowerbox, *n).await;
            by_n[i].push(rss);
            walls[i].push(wall);
            this.push(rss);
        }
        let xs: Vec<f64> = NS.iter().map(|n| *n as f64).collect();
        slopes.push(slope(&xs, &this));
    }
    let med = |v: &Vec<f64>| Stats::of(v).median;
    let per_n = NS
        .iter()
        .zip(&by_n)
        .zip(&walls)
        .map(|((n, r), w)| format!("N={n}: {:.1} MiB in {:.1} s", med(r), med(w) / 1000.0))
        .collect::<Vec<_>>()
        .join("; ");
    let demo = demo_rss(flowerbox, repeat);
    vec![
        Figure::new(
            "5",
            "runner peak RSS during the demo (scripts/demo.sh)",
            "MiB",
            Stats::of(&demo),
        )
        .vs("flowerbox --help", Stats::of(&idle))
        .note("go --isolate --judge-can-run: 2 parallel workers in worktree containers, 2 rounds, judge runs file/lsof/curl"),
        Figure::new(
            "5b",
            "runner peak RSS per additional parallel worker",
            "MiB/worker",
            Stats::of(&slopes),
        )
        .note(format!(
            "least-squares slope over N = 1, 2, 4, 8 per repeat; {per_n}"
        )),
    ]
}

/// The shim side: runs `program args`, records its peak RSS, exits with its code.
fn shim_rss(out: &Path, program: &str, args: Vec<String>) -> ! {
    let child = Command::new(program)
        .args(&args)
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let (code, kib) = wait_with_peak_rss(child);
    let line = json!({"kib": kib, "args": args, "code": code}).to_string() + "\n";
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    std::process::exit(code.unwrap_or(128));
}

/// Figure 5: `scripts/demo.sh` with this example as the shim around `flowerbox`; the peak RSS
/// of the run (not of `doctor`), in MiB, per repeat.
fn demo_rss(flowerbox: &Path, repeat: usize) -> Vec<f64> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().expect("current_exe");
    let model = flowerbox.with_file_name("scripted-model");
    let mut rss = Vec::new();
    for _ in 0..repeat {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().canonicalize().unwrap();
        let (shim, record) = (tmp.join("flowerbox-rss"), tmp.join("rss.jsonl"));
        let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\nexec {} --shim-rss {} {} \"$@\"\n",
                q(&exe),
                q(&record),
                q(flowerbox)
            ),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let log = tmp.join("demo.log");
        let status = Command::new(root.join("scripts/demo.sh"))
            .arg(tmp.join("demo"))
            .env("FLOWERBOX_DEMO_BIN", &shim)
            .env("FLOWERBOX_DEMO_MODEL_BIN", &model)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(tmp.join("demo.err")).unwrap())
            .status()
            .expect("scripts/demo.sh");
        assert!(
            status.success(),
            "scripts/demo.sh failed:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let runs: Vec<Value> = std::fs::read_to_string(&record)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &Value| {
                v["args"]
                    .as_array()
                    .is_some_and(|a| a.iter().all(|x| x != "doctor"))
            })
            .collect();
        assert_eq!(runs.len(), 1, "the demo's flowerbox runs: {runs:?}");
        rss.push(runs[0]["kib"].as_f64().unwrap() / 1024.0);
    }
    rss
}

/// `flowerbox` next to this example's directory (`target/<profile>/flowerbox`).
fn default_flowerbox() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("flowerbox"))
        .expect("target directory")
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut repeat, mut rss_repeat) = (3usize, 2usize);
    let (mut only, mut json_out, mut flowerbox) = (None::<String>, None::<PathBuf>, None);
    while let Some(a) = args.next() {
        if a == "--shim-rss" {
            let out = PathBuf::from(args.next().expect("--shim-rss OUT"));
            let program = args.next().expect("--shim-rss OUT PROGRAM");
            shim_rss(&out, &program, args.collect());
        }
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--repeat" => repeat = val().parse().expect("--repeat N"),
            "--rss-repeat" => rss_repeat = val().parse().expect("--rss-repeat N"),
            "--only" => only = Some(val()),
            "--json" => json_out = Some(PathBuf::from(val())),
            "--flowerbox" => flowerbox = Some(PathBuf::from(val())),
            other => panic!("unknown argument {other}"),
        }
    }
    let flowerbox = flowerbox.unwrap_or_else(default_flowerbox);
    let wants = |id: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == id))
    };
    let engine = Engine::connect(None, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let image = ensure_image(&engine, None, true)
        .await
        .expect("image")
        .image;

    let mut figures = Vec::new();
    if wants("3") {
        figures.push(parallel_workers(&image, repeat).await);
    }
    if wants("5") {
        assert!(
            flowerbox.is_file(),
            "no flowerbox binary at {} (cargo build --bin flowerbox, or --flowerbox PATH)",
            flowerbox.display()
        );
        figures.extend(runner_rss(&flowerbox, rss_repeat).await);
    }
    print_table(&figures);
    if let Some(path) = json_out {
        let extra = json!({"image": image, "repeat": repeat, "rss_repeat": rss_repeat,
                           "flowerbox": flowerbox});
        write_part(&path, "runtime_bench", extra, &figures);
        eprintln!("wrote {}", path.display());
    }
}
