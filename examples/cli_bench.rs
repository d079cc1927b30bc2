//! The issue-17 figures of `scripts/bench.sh`, each through the `flowerbox` binary against an
//! in-process scripted model, each a median over interleaved repeats with its baseline:
//!
//! 9. `once` with one Bash call, the model thinking `--think-ms` (1,500) per turn: wall clock
//!    with `--sandbox docker` vs with `--sandbox host` (ratio; target ≤ 1.05, issue 32); 9c the
//!    same docker run until its last container and network are gone (the run's end leaves
//!    their removal to a detached cleanup: 9 is what the user waits for, 9c what the engine
//!    does);
//! 10. a whole unattended `go` run, 8 workers each running `sleep 2` all at once
//!     (`--max-workers 8`), vs the same run with 1 worker (ratio; target ≤ 1.25, issue 32: the
//!     cost of 8 containers at once, not of the limit); 10e the engine alone for the same
//!     containers, 8 vs 1, interleaved with 10 (the floor under 10's ratio); 10s the same with the coordinator's
//!     dispatching message streamed at 60 ms an event (a model writing its `Agent` calls: a
//!     worker's container can start as its call ends, issue 32 §4); 10d as 10 without
//!     `--max-workers`, under the machine's default limit (`fanout::default_max_workers`: on
//!     2 cores 4, so two waves of `sleep 2` and a floor near 1.45: it measures the limit);
//! 11. the first `once --resume` of a 10,000-message session with trimming (`-T`, cold spill
//!     directory) vs a fresh `once` with the same reply (target ≤ 150 ms). Row 11: results of
//!     200 characters (every tenth 3,000): the trimmed history (~2.5 MB, ~630K tokens at
//!     bytes/4) is refused as too long (the scripted model's 413 past its 2 MiB body limit,
//!     as a 200K window would), so the run hands off at once (a degraded handoff) and the
//!     model never sees a spill pointer; 11f: the same 10,000 messages with results of 20
//!     characters (~1.7 MB), a history the model accepts (a larger window), so every trimmed
//!     result is written before the run ends;
//! 12. the scale curve (issue 32): whole `go` runs with N = 1, 8, 16, 32 workers (and the
//!     machine's core count) each running `sleep 2`, all N at once (`--max-workers N`): the wall clock at N = 32 vs N = 1 (12),
//!     the runner's peak RSS at N = 32 vs N = 1 (12b), and the per-worker overhead as
//!     least-squares slopes over N, in ms (12c) and MiB (12d) per worker; every N's medians
//!     in the notes.
//! 13. a text-only `once` (its default tools, which run no command; an instant model): wall
//!     clock with `--sandbox docker` vs with `--sandbox host` (ratio; target ≤ 1.2, issue 32).
//!
//! Every run starts only once the previous run's containers and networks are gone (waited
//! for, untimed), so a cleanup never slows the next measured run.
//!
//! With `--base PATH` a second binary (the build before a change) is measured in the same run,
//! interleaved with the first, and every figure appears twice (`9` and `9 base`, ...), so the
//! before/after ratio is read off one table.
//!
//! Usage: `cli_bench [--repeat N] [--flowerbox PATH] [--base PATH] [--think-ms MS]
//! [--only 9,10,10s,10d,11,12,13] [--scale 1,8,16,32] [--json FILE]`. `--flowerbox` defaults to the `flowerbox` next to this
//! example's directory (`scripts/bench.sh` builds it first).
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;
#[path = "bench_common/engine_floor.rs"]
mod engine_floor;

use bench_common::{ms, print_table, slope, wait_with_peak_rss, write_part, Figure, Stats};
use flowerbox::model::{ContentBlock, Message, Speaker};
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{ensure_image, Engine};
use flowerbox::session::{SessionMeta, SessionStore, SqliteSessionStore};
use scripted_model::{Scenario, ScriptedServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The report every scripted worker ends with (the four-part format).
const REPORT: &str = "结论:做完了\n依据:命令跑了\n产出:无\n未验证:无";
/// Messages in the resumed session of figure 11.
const RESUME_MESSAGES: usize = 10_000;

fn bash(cmd: &str) -> Value {
    json!({"content": [{"type": "tool_use", "name": "Bash", "input": {"command": cmd}}]})
}

fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
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

/// One flowerbox run in `ws` (HOME beside it) with `args`; returns the wall clock in ms and
/// panics with its output when it does not exit 0.
async fn run(flowerbox: &Path, url: &str, ws: &Path, args: &[&str]) -> f64 {
    run_rss(flowerbox, url, ws, args).await.0
}

/// [`run`], and the ms from its start until the last container and network of `ws` are gone
/// from the engine.
async fn run_gone(flowerbox: &Path, url: &str, ws: &Path, args: &[&str]) -> (f64, f64) {
    let (wall, _, gone) = run_full(flowerbox, url, ws, args).await;
    (wall, gone)
}

/// The engine the figures' runs use, when there is one.
static ENGINE: tokio::sync::OnceCell<Option<Engine>> = tokio::sync::OnceCell::const_new();

/// [`ENGINE`], connected on first use.
async fn engine() -> Option<&'static Engine> {
    ENGINE
        .get_or_init(|| async { Engine::connect(None, Duration::from_secs(5)).await.ok() })
        .await
        .as_ref()
}

/// Waits until no container or network of workspace `ws` is left on the engine (a run's
/// detached cleanup done; at most two minutes); the ms from `started` until then.
async fn gone_since(ws: &Path, started: Instant) -> f64 {
    use bollard::query_parameters::{ListContainersOptions, ListNetworksOptions};
    let Some(engine) = engine().await else {
        return ms(started.elapsed());
    };
    let label = format!("flowerbox.workspace={}", ws.display());
    let filters = std::collections::HashMap::from([("label".to_string(), vec![label])]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let containers = engine.docker().list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        }));
        let networks = engine.docker().list_networks(Some(ListNetworksOptions {
            filters: Some(filters.clone()),
        }));
        let (c, n) = tokio::join!(containers, networks);
        let left = c.map_or(1, |c| c.len()) + n.map_or(1, |n| n.len());
        let at = ms(started.elapsed());
        if left == 0 {
            return at;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "{}: {left} containers and networks still there",
                ws.display()
            );
            return at;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`run`], and the run's peak RSS in MiB.
async fn run_rss(flowerbox: &Path, url: &str, ws: &Path, args: &[&str]) -> (f64, f64) {
    let (wall, rss, _) = run_full(flowerbox, url, ws, args).await;
    (wall, rss)
}

/// [`run`], the run's peak RSS in MiB, and the ms until its containers and networks were gone:
/// returns only then (waited for, untimed), so the next run starts on an engine with none of
/// them.
async fn run_full(flowerbox: &Path, url: &str, ws: &Path, args: &[&str]) -> (f64, f64, f64) {
    let home = ws.with_file_name("home");
    std::fs::create_dir_all(&home).unwrap();
    let log = ws.with_file_name("out.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(flowerbox);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", "sk-bench")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let started = Instant::now();
    let (code, kib) = tokio::task::spawn_blocking(move || {
        wait_with_peak_rss(cmd.spawn().expect("spawn flowerbox"))
    })
    .await
    .unwrap();
    let wall = ms(started.elapsed());
    assert!(
        code == Some(0),
        "{} {args:?} exited {code:?}:\n{}",
        flowerbox.display(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let gone = gone_since(ws, started).await;
    (wall, kib as f64 / 1024.0, gone)
}

/// A fresh workspace `proj` in a new temporary directory.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("proj");
    std::fs::create_dir_all(&ws).unwrap();
    (dir, ws)
}

/// The binaries measured: (label suffix, path).
type Bins = Vec<(String, PathBuf)>;

/// One `once` figure: the same run with `--sandbox docker` and `--sandbox host`, per binary.
struct OnceFigure {
    /// Figure id (`9`, `12`).
    id: &'static str,
    /// What is measured.
    what: &'static str,
    /// `once`'s arguments after the sandbox switch.
    args: &'static [&'static str],
    /// The model's turns.
    turns: Vec<Value>,
    /// The figure's note.
    note: String,
}

/// Figure 9: `once` with one Bash call behind a model thinking `think_ms` a turn.
fn once_bash(think_ms: u64) -> OnceFigure {
    let turn = |mut t: Value| {
        t["think_ms"] = json!(think_ms);
        t
    };
    OnceFigure {
        id: "9",
        what: "once, one Bash call, --sandbox docker",
        args: &["once", "-t", "Bash", "跑一条命令"],
        turns: vec![turn(bash("echo hi")), turn(text("跑完了。"))],
        note: format!("model thinks {think_ms} ms per turn (2 turns); whole process wall clock"),
    }
}

/// Figure 12: a text-only `once` (its default tools, which run no command) with an instant
/// model: no container should be made at all (issue 32 §1).
fn once_text() -> OnceFigure {
    OnceFigure {
        id: "13",
        what: "once, text only (default tools), --sandbox docker",
        args: &["once", "说一句"],
        turns: vec![text("好的。")],
        note: "instant model, 1 turn; whole process wall clock (target ≤ 1.2)".into(),
    }
}

/// Measures `fig` for every binary, interleaved: docker vs host; with `gone`, also the docker
/// run until its containers and networks are gone (row `<id>c`).
async fn once_figure(bins: &Bins, repeat: usize, fig: OnceFigure, gone: bool) -> Vec<Figure> {
    let url = serve(&json!({"agents": [{"turns": fig.turns}]})).await;
    // Per binary: host, docker, docker until gone.
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new()); bins.len()];
    for _ in 0..repeat {
        for (b, (_, bin)) in bins.iter().enumerate() {
            for sandbox in ["host", "docker"] {
                let (_dir, ws) = workspace();
                let mut args = vec!["--sandbox", sandbox];
                args.extend_from_slice(fig.args);
                let (t, until_gone) = run_gone(bin, &url, &ws, &args).await;
                match sandbox {
                    "host" => samples[b].0.push(t),
                    _ => {
                        samples[b].1.push(t);
                        samples[b].2.push(until_gone);
                    }
                }
            }
        }
    }
    let mut figures = Vec::new();
    for ((label, _), (host, docker, until_gone)) in bins.iter().zip(samples) {
        figures.push(
            Figure::new(
                &format!("{}{label}", fig.id),
                fig.what,
                "ms",
                Stats::of(&docker),
            )
            .vs("--sandbox host", Stats::of(&host))
            .note(fig.note.clone()),
        );
        if gone {
            figures.push(
                Figure::new(
                    &format!("{}c{label}", fig.id),
                    &format!("{}, until its containers and network are gone", fig.what),
                    "ms",
                    Stats::of(&until_gone),
                )
                .vs("--sandbox host", Stats::of(&host))
                .note(format!(
                    "{}; from the start until the engine lists none of the run's containers \
                     and networks (the detached cleanup done)",
                    fig.note
                )),
            );
        }
    }
    figures
}

/// The go scenario of figure 10: `n` workers dispatched in one coordinator turn, each runs
/// `sleep 2` and reports; with `stream_ms`, the coordinator's message comes a pause of that
/// many milliseconds before each event (figure 10s: a model writing its dispatches).
fn go_scenario(n: usize, stream_ms: Option<u64>) -> Value {
    let calls: Vec<Value> = (1..=n)
        .map(|k| {
            json!({"type": "tool_use", "name": "Agent", "input": {
                "description": format!("任务 {k}"),
                "prompt": format!("做任务 {k}:睡两秒"),
                "subagent_type": "coder"}})
        })
        .collect();
    json!({"agents": [
        {"role": "clarifier", "turns": [text(
            "## 目标\n睡两秒\n\n## 验收标准\n- 睡过了\n\n## 边界\n无\n\n## 未知与假设\n- 无人应答:按字面做\n")]},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [text(
            "## 目标\n睡过了\n\n## 判定清单\n- 睡过了\n")]},
        {"role": "judge", "prompt": "判定这一轮", "turns": [text(
            "## 结论\nACHIEVED\n\n## 理由\n睡过了\n\n## 未通过\n无\n")]},
        {"role": "coordinator", "turns": [coordinator_turn(calls, stream_ms), text("都做完了。")]},
        {"role": "worker", "prompt": "做任务", "turns": [bash("sleep 2"), text(REPORT)]}
    ]})
}

/// The coordinator's dispatching turn, streamed at `stream_ms` an event when given.
fn coordinator_turn(calls: Vec<Value>, stream_ms: Option<u64>) -> Value {
    match stream_ms {
        Some(ms) => json!({"content": calls, "fault": {"delay_ms": ms}}),
        None => json!({"content": calls}),
    }
}

/// Pause before each event of the coordinator's dispatching message in figure 10s.
const STREAM_MS: u64 = 60;

/// How figure 10's runs are made: all 8 workers at once, or under the default limit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GoRun {
    /// 10: `--max-workers 8`, every worker at once.
    AllAtOnce,
    /// 10s: as 10, the dispatching message streamed at this many ms an event.
    Streamed(u64),
    /// 10d: no `--max-workers`, the machine's default limit.
    DefaultLimit,
}

/// Figure 10 (10s, 10d): go with 8 workers vs 1, per binary.
async fn go_workers(bins: &Bins, repeat: usize, how: GoRun) -> Vec<Figure> {
    let stream_ms = match how {
        GoRun::Streamed(ms) => Some(ms),
        _ => None,
    };
    let one = serve(&go_scenario(1, stream_ms)).await;
    let eight = serve(&go_scenario(8, stream_ms)).await;
    let mut samples = vec![(Vec::new(), Vec::new()); bins.len()];
    // Figure 10e (with 10 only): the engine's own cost of the same containers, interleaved.
    let floor_engine = match how {
        GoRun::AllAtOnce => floor_engine().await,
        _ => None,
    };
    let mut floor = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        if let Some((engine, image)) = &floor_engine {
            floor
                .0
                .push(engine_floor::sample(engine.docker(), image, 1).await);
            floor
                .1
                .push(engine_floor::sample(engine.docker(), image, 8).await);
        }
        for (b, (_, bin)) in bins.iter().enumerate() {
            for (n, url) in [(1, &one), (8, &eight)] {
                let (_dir, ws) = workspace();
                let mut args = vec!["--timeout", "0"];
                if how != GoRun::DefaultLimit {
                    args.extend(["--max-workers", "8"]);
                }
                args.push("睡两秒");
                let t = run(bin, url, &ws, &args).await;
                match n {
                    1 => samples[b].0.push(t),
                    _ => samples[b].1.push(t),
                }
            }
        }
    }
    let first_one = samples.first().map(|(one, _)| Stats::of(one).median);
    let mut figures: Vec<Figure> = bins
        .iter()
        .zip(samples)
        .map(|((label, _), (one, eight))| {
            let (id, what, note) = match how {
                GoRun::AllAtOnce => (
                    "10",
                    "go, 8 workers `sleep 2` at once".to_string(),
                    "whole unattended go run (clarify, goal, 1 round, judge), Docker sandbox, \
                     --max-workers 8 (target ≤ 1.25)"
                        .to_string(),
                ),
                GoRun::DefaultLimit => (
                    "10d",
                    "go, 8 workers `sleep 2`, default limit".to_string(),
                    "as 10 without --max-workers: the machine's default limit (2 × cores, \
                     memory); below 8 it runs in waves and measures the limit"
                        .to_string(),
                ),
                GoRun::Streamed(ms) => (
                    "10s",
                    "go, 8 workers `sleep 2`, dispatches streamed".to_string(),
                    format!(
                        "as 10, the coordinator's dispatching message {ms} ms an event \
                         (both sides): containers can start as each Agent call ends"
                    ),
                ),
            };
            Figure::new(&format!("{id}{label}"), &what, "ms", Stats::of(&eight))
                .vs("1 worker", Stats::of(&one))
                .note(note)
        })
        .collect();
    if let (false, Some(one)) = (floor.0.is_empty(), first_one) {
        let (e1, e8) = (Stats::of(&floor.0), Stats::of(&floor.1));
        let bound = (one + e8.median - e1.median) / one;
        figures.push(
            Figure::new(
                "10e",
                "the engine alone: 8 agent-shaped containers vs 1",
                "ms",
                e8,
            )
            .vs("1 container", e1)
            .note(format!(
                "no flowerbox: in a started pod, each container created, started, one exec, \
                 SIGKILLed, all at once (examples/bench_common/engine_floor.rs); figure 10's \
                 1-worker run plus this difference: {bound:.2}x, the ratio figure 10 would \
                 have if flowerbox added nothing per worker but its containers"
            )),
        );
    }
    figures
}

/// The engine (the figures' own, [`engine`]) and the agent image for figure 10e, when there
/// is an engine.
async fn floor_engine() -> Option<(&'static Engine, String)> {
    let engine = engine().await?;
    let image = ensure_image(engine, None, false).await.ok()?.image;
    Some((engine, image))
}

/// One binary's samples of figure 12: per N, the walls (ms) and peak RSS (MiB); per repeat,
/// the slopes over N.
#[derive(Default, Clone)]
struct Scale {
    wall: Vec<Vec<f64>>,
    rss: Vec<Vec<f64>>,
    wall_slope: Vec<f64>,
    rss_slope: Vec<f64>,
}

/// Figure 12, the scale curve: go runs with each N of `ns` workers `sleep 2`, all at once, per
/// binary; interleaved by repeat, so load drifts hit every N and binary alike.
async fn scale_curve(bins: &Bins, repeat: usize, ns: &[usize]) -> Vec<Figure> {
    let mut urls = Vec::new();
    for &n in ns {
        urls.push(serve(&go_scenario(n, None)).await);
    }
    let mut samples = vec![Scale::default(); bins.len()];
    for s in &mut samples {
        s.wall = vec![Vec::new(); ns.len()];
        s.rss = vec![Vec::new(); ns.len()];
    }
    let xs: Vec<f64> = ns.iter().map(|&n| n as f64).collect();
    for _ in 0..repeat {
        for (b, (_, bin)) in bins.iter().enumerate() {
            let (mut walls, mut rsss) = (Vec::new(), Vec::new());
            for (i, (&n, url)) in ns.iter().zip(&urls).enumerate() {
                let (_dir, ws) = workspace();
                let max = n.to_string();
                let args = ["--timeout", "0", "--max-workers", &max, "睡两秒"];
                let (wall, rss) = run_rss(bin, url, &ws, &args).await;
                samples[b].wall[i].push(wall);
                samples[b].rss[i].push(rss);
                walls.push(wall);
                rsss.push(rss);
            }
            samples[b].wall_slope.push(slope(&xs, &walls));
            samples[b].rss_slope.push(slope(&xs, &rsss));
        }
    }
    let (first, last) = (ns[0], ns[ns.len() - 1]);
    let mut figures = Vec::new();
    for ((label, _), s) in bins.iter().zip(samples) {
        let med = |v: &Vec<f64>| Stats::of(v).median;
        let curve = ns
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    "N={n}: {:.1} s, {:.1} MiB",
                    med(&s.wall[i]) / 1000.0,
                    med(&s.rss[i])
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let at = |v: &Vec<Vec<f64>>, i: usize| Stats::of(&v[i]);
        figures.push(
            Figure::new(
                &format!("12{label}"),
                &format!("go, {last} workers `sleep 2` at once, wall clock"),
                "ms",
                at(&s.wall, ns.len() - 1),
            )
            .vs(&format!("{first} worker(s)"), at(&s.wall, 0))
            .note(curve.clone()),
        );
        figures.push(
            Figure::new(
                &format!("12b{label}"),
                &format!("go, {last} workers at once, runner peak RSS"),
                "MiB",
                at(&s.rss, ns.len() - 1),
            )
            .vs(&format!("{first} worker(s)"), at(&s.rss, 0))
            .note("ru_maxrss of the flowerbox process; containers not included"),
        );
        let over = ns
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        figures.push(
            Figure::new(
                &format!("12c{label}"),
                "go, wall clock per additional worker",
                "ms/worker",
                Stats::of(&s.wall_slope),
            )
            .note(format!("least-squares slope over N = {over}, per repeat")),
        );
        figures.push(
            Figure::new(
                &format!("12d{label}"),
                "go, runner peak RSS per additional worker",
                "MiB/worker",
                Stats::of(&s.rss_slope),
            )
            .note(format!("least-squares slope over N = {over}, per repeat")),
        );
    }
    figures
}

/// A tool result of `chars` characters, different for every `seed`.
fn result_text(seed: usize, chars: usize) -> String {
    let line = format!("{seed:06} build output: compiling module {seed} of the project ... ok\n");
    line.repeat(chars / line.len() + 1)[..chars].to_string()
}

/// Writes `runs/sessions.db` of `ws` with one session of `n` messages (a prompt, then tool
/// calls and results, every tenth result 3,000 characters, the rest `small`; a final reply);
/// returns its id and its assistant messages.
fn build_session(ws: &Path, n: usize, small: usize) -> (String, usize) {
    let store = SqliteSessionStore::open(ws.join("runs/sessions.db")).expect("open");
    let meta = SessionMeta {
        agent: "ad-hoc".into(),
        role: Role::Worker,
        step: None,
        parent: None,
        run: "20260101-000000-bench0".into(),
    };
    let session = store.create(&meta).expect("create");
    store
        .append(&session, &Message::user_text("把这个项目修到能编译"), None)
        .unwrap();
    let pairs = (n - 2) / 2;
    for i in 0..pairs {
        let id = format!("toolu_bench_{i}");
        let call = Message {
            role: Speaker::Assistant,
            content: vec![
                ContentBlock::text(format!("第 {i} 步。")),
                ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "Bash".into(),
                    input: json!({"command": format!("cargo build -p part{i}")}),
                },
            ],
        };
        store.append(&session, &call, Some(20_000)).unwrap();
        let size = if i % 10 == 0 { 3000 } else { small };
        let result = Message {
            role: Speaker::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id,
                content: result_text(i, size),
                is_error: false,
            }],
        };
        store.append(&session, &result, None).unwrap();
    }
    store
        .append(&session, &Message::assistant_text("修好了。"), Some(90_000))
        .unwrap();
    (session, pairs + 1)
}

/// Figure 11: the first `once --resume` of a 10,000-message session with trimming vs a fresh
/// `once`, per binary (host sandbox: no container in either): row 11 with a history the model
/// refuses as too long (a handoff at once), 11f with one it accepts.
async fn first_resume(bins: &Bins, repeat: usize) -> Vec<Figure> {
    let mut figures = Vec::new();
    for (id, small, note) in [
        (
            "11",
            200,
            "refused as too long (413): a degraded handoff at once; 500 results of 3,000 chars \
             trimmed, cold spill dir; --sandbox host",
        ),
        (
            "11f",
            20,
            "results of 20 chars: accepted; 500 results of 3,000 chars trimmed to a cold spill \
             dir, all written; --sandbox host",
        ),
    ] {
        figures.extend(resume_row(bins, repeat, id, small, note).await);
    }
    figures
}

/// One row of figure 11: results of `small` characters (every tenth 3,000).
async fn resume_row(bins: &Bins, repeat: usize, id: &str, small: usize, note: &str) -> Vec<Figure> {
    let (template_dir, template) = workspace();
    let (session, assistant) = build_session(&template, RESUME_MESSAGES, small);
    let db = template.join("runs/sessions.db");
    // Whatever the resumed history's turn index, the model says the same.
    let turns: Vec<Value> = (0..=assistant + 1).map(|_| text("好的。")).collect();
    let url = serve(&json!({"agents": [{"turns": turns}]})).await;
    let mut samples = vec![(Vec::new(), Vec::new()); bins.len()];
    for _ in 0..repeat {
        for (b, (_, bin)) in bins.iter().enumerate() {
            let (_fresh_dir, fresh) = workspace();
            let args = ["--sandbox", "host", "-T", "once", "-t", "Read", "继续"];
            samples[b].0.push(run(bin, &url, &fresh, &args).await);
            let (_dir, ws) = workspace();
            std::fs::create_dir_all(ws.join("runs")).unwrap();
            std::fs::copy(&db, ws.join("runs/sessions.db")).unwrap();
            let args = [
                "--sandbox",
                "host",
                "-T",
                "once",
                "-t",
                "Read",
                "--resume",
                &session,
                "继续",
            ];
            samples[b].1.push(run(bin, &url, &ws, &args).await);
        }
    }
    drop(template_dir);
    bins.iter()
        .zip(samples)
        .map(|((label, _), (fresh, resume))| {
            Figure::new(
                &format!("{id}{label}"),
                "first once --resume, 10,000 messages, -T",
                "ms",
                Stats::of(&resume),
            )
            .vs("fresh once", Stats::of(&fresh))
            .note(note)
        })
        .collect()
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
    let (mut repeat, mut think_ms) = (3usize, 1500u64);
    let (mut only, mut json_out, mut flowerbox, mut base) =
        (None::<String>, None::<PathBuf>, None, None::<PathBuf>);
    // The N, and the machine's core count among them (the time should stay flat up
    // to it).
    let mut scale = vec![1usize, 8, 16, 32];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 32 && !scale.contains(&cores) {
        scale.push(cores);
        scale.sort_unstable();
    }
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--repeat" => repeat = val().parse().expect("--repeat N"),
            "--think-ms" => think_ms = val().parse().expect("--think-ms MS"),
            "--only" => only = Some(val()),
            "--json" => json_out = Some(PathBuf::from(val())),
            "--flowerbox" => flowerbox = Some(PathBuf::from(val())),
            "--base" => base = Some(PathBuf::from(val())),
            "--scale" => {
                scale = val()
                    .split(',')
                    .map(|n| n.parse().expect("--scale N,N,..."))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let flowerbox = flowerbox.unwrap_or_else(default_flowerbox);
    let mut bins: Bins = vec![(String::new(), flowerbox.clone())];
    if let Some(b) = &base {
        bins.push((" base".into(), b.clone()));
    }
    for (_, b) in &bins {
        assert!(b.is_file(), "no flowerbox binary at {}", b.display());
    }
    let wants = |id: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == id))
    };
    if ["9", "10", "10s", "10d", "12", "13"]
        .iter()
        .any(|f| wants(f))
    {
        // Built before the first measurement (the binaries build it on first use).
        let engine = Engine::connect(None, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ensure_image(&engine, None, true).await.expect("image");
    }
    let mut figures = Vec::new();
    if wants("13") {
        figures.extend(once_figure(&bins, repeat, once_text(), false).await);
    }
    if wants("9") {
        figures.extend(once_figure(&bins, repeat, once_bash(think_ms), true).await);
    }
    if wants("10") {
        figures.extend(go_workers(&bins, repeat, GoRun::AllAtOnce).await);
    }
    if wants("10s") {
        figures.extend(go_workers(&bins, repeat, GoRun::Streamed(STREAM_MS)).await);
    }
    if wants("10d") {
        figures.extend(go_workers(&bins, repeat, GoRun::DefaultLimit).await);
    }
    // 12 before 11: figure 11 builds its 10,000-message sessions in this process, and a child
    // spawned afterwards (vfork + exec) starts its `ru_maxrss` at this process's high-water
    // mark, which would hide the runner's own peak (12b, 12d) under it.
    if wants("12") {
        assert!(scale.len() >= 2, "--scale needs two N at least");
        figures.extend(scale_curve(&bins, repeat, &scale).await);
    }
    if wants("11") {
        figures.extend(first_resume(&bins, repeat).await);
    }
    print_table(&figures);
    if let Some(path) = json_out {
        let extra = json!({"repeat": repeat, "think_ms": think_ms, "flowerbox": flowerbox,
                           "base": base, "scale": scale});
        write_part(&path, "cli_bench", extra, &figures);
        eprintln!("wrote {}", path.display());
    }
}
