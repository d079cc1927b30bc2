//! The Docker sandbox figures of `scripts/bench.sh` (issue 6), each a median over repeated runs
//! next to a baseline measured in the same run:
//!
//! 1. container cold start to first exec result (pod + agent container + `true`) vs
//!    `docker run --rm IMAGE true`;
//! 2. Bash round trip for `true` in a warm container (through its exec service) vs `sh -c true`
//!    on the host; 2a, the same vs a Docker exec per command (the path before issue 17); 2c,
//!    the same vs `bash -c true` on the host (what `--sandbox host` runs for the Bash tool:
//!    the same shell on both sides, so the ratio is the service's and the container's cost);
//! 3. 8 agent containers started in parallel (to first exec result) vs 1;
//! 4. cold start per egress mode (1d, 1e): `open` (the default: a network of the run's own and
//!    the fence that loads its rules) and `proxy` (plus the proxy container) vs `none` (no
//!    network).
//!
//! And for the read-only roles (issue 14): 1c, a judge's container (its own uid, the lsof
//! inspector, the seccomp profile) to first exec result vs a worker's, which is what a judge's
//! container was before; 2b, `lsof -nP -i` in a judge's container (answered by its inspector)
//! vs in a worker's.
//!
//! Each figure is a median with its spread (p25–p75, min, max) and the ratio of the medians.
//!
//! Usage: `sandbox_bench [--repeat N] [--roundtrips N] [--json FILE] [--exec CMD] [--ensure-image]
//! [--roundtrip-only] [--base BIN]`; `--roundtrip-only` measures figures 2, 2a and 2c alone;
//! `--base BIN` adds `2 base`: the round trip through the exec service of another flowerbox
//! binary (the build before a change), interleaved with figure 2's samples.
//! `--exec CMD` runs one command in a fresh sandbox and prints the result (debugging aid).
//! `--ensure-image` only makes sure the agent image exists (built offline on first use, progress
//! on stderr) and prints its tag: `docker/build.sh` bases the runner image on it.
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::role::Role;
use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
use flowerbox::sandbox::egress::{EgressMode, EgressPolicy};
use flowerbox::sandbox::service::ServiceSource;
use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, Sandbox, SandboxFactory};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{ms, print_table, write_part, Figure, Stats};

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
        mounts: vec![Mount::same(ws.to_path_buf(), false)],
        masked: Vec::new(),
        workdir: ws.to_path_buf(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    }
}

async fn factory(image: &str, ws: &Path, tag: &str) -> DockerSandboxFactory {
    factory_with(image, ws, tag, EgressMode::Open).await
}

async fn factory_with(image: &str, ws: &Path, tag: &str, mode: EgressMode) -> DockerSandboxFactory {
    factory_opts(image, ws, tag, mode, Service::Beside).await
}

async fn factory_opts(
    image: &str,
    ws: &Path,
    tag: &str,
    mode: EgressMode,
    service: Service<'_>,
) -> DockerSandboxFactory {
    let run = format!(
        "bench-{}-{tag}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let mut opts = DockerOptions::new(run, ws);
    opts.image = Some(image.into());
    opts.show_progress = false;
    opts.egress = EgressPolicy {
        mode,
        ..Default::default()
    };
    match service {
        Service::Beside => assert!(
            opts.exec_service.is_some(),
            "no flowerbox binary beside this example: build with --bins"
        ),
        Service::Of(bin) => opts.exec_service = Some(ServiceSource::Path(bin.to_path_buf())),
        Service::None => opts.exec_service = None,
    }
    DockerSandboxFactory::connect(opts).await.expect("connect")
}

async fn first_result(f: &DockerSandboxFactory, name: &str, ws: &Path) -> Duration {
    first_result_of(f, &agent(name, ws), ws).await
}

async fn first_result_of(f: &DockerSandboxFactory, b: &AgentBox, ws: &Path) -> Duration {
    let t = Instant::now();
    let sb = f.sandbox(b).await.expect("sandbox");
    let out = sb.exec(req("true", ws)).await.expect("exec");
    assert!(out.success(), "{out:?}");
    t.elapsed()
}

/// A warm worker's sandbox of a new factory whose exec service is the flowerbox binary beside
/// this example (`Service::Beside`), another one (`Service::Of`), or none (a Docker exec per
/// command), its service checked to run, after one warm-up command.
async fn warm(image: &str, ws: &Path, tag: &str, service: Service<'_>) -> Warm {
    let f = factory_opts(image, ws, tag, EgressMode::Open, service).await;
    let sb = f
        .docker_sandbox(&agent("worker-1", ws))
        .await
        .expect("sandbox");
    if !matches!(service, Service::None) {
        assert!(
            sb.exec_service_pid().await.is_some(),
            "the exec service did not start"
        );
    }
    sb.exec(req("true", ws)).await.expect("warm-up");
    Warm { f, sb }
}

/// Which exec service a warm sandbox gets.
#[derive(Clone, Copy)]
enum Service<'a> {
    /// The flowerbox binary beside this example.
    Beside,
    /// This flowerbox binary's.
    Of(&'a Path),
    /// None: a Docker exec per command.
    None,
}

/// A factory and its one warm sandbox.
struct Warm {
    f: DockerSandboxFactory,
    sb: std::sync::Arc<flowerbox::sandbox::docker::DockerSandbox>,
}

impl Warm {
    /// One round trip of `true`, in ms.
    async fn round_trip(&self, ws: &Path) -> f64 {
        let t = Instant::now();
        let out = self.sb.exec(req("true", ws)).await.expect("exec");
        let took = ms(t.elapsed());
        assert!(out.success(), "{out:?}");
        took
    }
}

/// One host process `program -c true`, in ms.
fn host_true(program: &str) -> f64 {
    let t = Instant::now();
    let st = std::process::Command::new(program)
        .args(["-c", "true"])
        .status()
        .unwrap();
    assert!(st.success());
    ms(t.elapsed())
}

/// Figures 2, 2a, 2c (and `2 base` with `base`: the same service path with the exec service
/// of another flowerbox binary, the build before a change). Round trips of `true` in a warm
/// container, through the container's exec service, vs `sh -c true` on the host, vs a Docker
/// exec per command (the path before issue 17), vs `bash -c true` on the host; interleaved
/// so that load drifts hit all alike.
async fn roundtrip_figures(
    image: &str,
    ws: &Path,
    roundtrips: usize,
    base: Option<&Path>,
) -> Vec<Figure> {
    let new = warm(image, ws, "warm", Service::Beside).await;
    let old = warm(image, ws, "warm-old", Service::None).await;
    let before = match base {
        Some(bin) => Some(warm(image, ws, "warm-base", Service::Of(bin)).await),
        None => None,
    };
    // Which way each service's frames go (the socket on a local engine since issue 32).
    let way = |over: Option<bool>| match over {
        Some(true) => "frames over the host's socket",
        Some(false) => "frames over the engine's attach",
        None => "no exec service",
    };
    let new_way = way(new.sb.exec_over_socket().await);
    let base_way = match &before {
        Some(b) => way(b.sb.exec_over_socket().await),
        None => "",
    };
    let (mut rt, mut rt_old, mut rt_base, mut host, mut host_bash) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..roundtrips {
        // The base's turn alternates around this build's, so neither always follows the
        // heavier Docker exec.
        let base_first = i % 2 == 1;
        if let (true, Some(b)) = (base_first, &before) {
            rt_base.push(b.round_trip(ws).await);
        }
        rt.push(new.round_trip(ws).await);
        if let (false, Some(b)) = (base_first, &before) {
            rt_base.push(b.round_trip(ws).await);
        }
        rt_old.push(old.round_trip(ws).await);
        host.push(host_true("sh"));
        host_bash.push(host_true("bash"));
    }
    assert!(
        new.sb.exec_service_pid().await.is_some(),
        "the exec service died during figure 2"
    );
    for w in [Some(new), Some(old), before].into_iter().flatten() {
        w.f.teardown().await.expect("teardown");
    }
    let through_service = |id: &str, vs: &str, baseline: &[f64]| {
        Figure::new(
            id,
            "Bash round trip `true`, warm container, exec service",
            "ms",
            Stats::of(&rt),
        )
        .vs(vs, Stats::of(baseline))
    };
    let mut figures = vec![
        Figure::new(
            "2",
            "Bash round trip `true`, warm container",
            "ms",
            Stats::of(&rt),
        )
        .vs("sh -c true on the host", Stats::of(&host))
        .note(format!(
            "{roundtrips} round trips through the container's exec service; {new_way}"
        )),
        through_service("2a", "a Docker exec per command (before issue 17)", &rt_old)
            .note("interleaved with figure 2's samples"),
        through_service(
            "2c",
            "bash -c true on the host (--sandbox host)",
            &host_bash,
        )
        .note("interleaved with figure 2's samples; the same shell on both sides"),
    ];
    if !rt_base.is_empty() {
        figures.push(
            Figure::new(
                "2 base",
                "Bash round trip `true`, warm container",
                "ms",
                Stats::of(&rt_base),
            )
            .vs("sh -c true on the host", Stats::of(&host))
            .note(format!(
                "the --base binary's exec service, interleaved with figure 2's samples; {base_way}"
            )),
        );
        figures.push(
            Figure::new(
                "2c base",
                "Bash round trip `true`, warm container, the --base binary's exec service",
                "ms",
                Stats::of(&rt_base),
            )
            .vs(
                "bash -c true on the host (--sandbox host)",
                Stats::of(&host_bash),
            )
            .note("interleaved with figure 2c's samples; compare its ratio with 2c's"),
        );
    }
    figures
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut repeat, mut roundtrips, mut json, mut exec) =
        (5usize, 50usize, None::<PathBuf>, None::<String>);
    let (mut image_only, mut roundtrip_only) = (false, false);
    let mut base = None::<PathBuf>;
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
            "--roundtrip-only" => roundtrip_only = true,
            "--base" => base = Some(args.next().expect("--base BIN").into()),
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
    for i in 0..if roundtrip_only { 0 } else { repeat } {
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

    // 2, 2a, 2c: the warm round trips.
    let round = roundtrip_figures(&image, &ws, roundtrips, base.as_deref()).await;
    if roundtrip_only {
        println!("image {image}; {roundtrips} round trips");
        print_table(&round);
        if let Some(path) = json {
            let extra = serde_json::json!({"image": image, "roundtrips": roundtrips});
            write_part(&path, "sandbox_bench", extra, &round);
        }
        return;
    }

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

    // 1c, 2b. A judge's container vs a worker's (pod up), alternating which goes first.
    let judge_box = AgentBox {
        role: Role::Judge,
        mounts: vec![Mount::same(ws.to_path_buf(), true)],
        policy: flowerbox::agent::place::role_policy(Role::Judge),
        ..agent("judge-1", &ws)
    };
    let (mut judge, mut worker, mut lsof_judge, mut lsof_worker) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..repeat {
        let f = factory(&image, &ws, &format!("judge{i}")).await;
        first_result(&f, "coordinator", &ws).await; // the pod
        let w = agent("worker-1", &ws);
        if i % 2 == 0 {
            judge.push(ms(first_result_of(&f, &judge_box, &ws).await));
            worker.push(ms(first_result_of(&f, &w, &ws).await));
        } else {
            worker.push(ms(first_result_of(&f, &w, &ws).await));
            judge.push(ms(first_result_of(&f, &judge_box, &ws).await));
        }
        for (b, samples) in [(&judge_box, &mut lsof_judge), (&w, &mut lsof_worker)] {
            let sb = f.sandbox(b).await.expect("sandbox");
            let t = Instant::now();
            let out = sb.exec(req("lsof -nP -i", &ws)).await.expect("exec");
            samples.push(ms(t.elapsed()));
            assert!(out.exit_code.is_some(), "{out:?}");
        }
        f.teardown().await.expect("teardown");
    }

    // 4. Cold start per egress mode, interleaved so that load drifts hit all three alike.
    let (mut none, mut open, mut proxy) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..repeat {
        for (mode, into) in [
            (EgressMode::None, &mut none),
            (EgressMode::Open, &mut open),
            (EgressMode::Proxy, &mut proxy),
        ] {
            let f = factory_with(&image, &ws, &format!("egress{i}"), mode).await;
            into.push(ms(first_result(&f, "worker-1", &ws).await));
            f.teardown().await.expect("teardown");
        }
    }

    let mut figures = round;
    figures.extend([
        Figure::new(
            "1",
            "container cold start → first exec result",
            "ms",
            Stats::of(&cold),
        )
        .vs("docker run --rm IMAGE true", Stats::of(&run_rm))
        .note("pod + agent container + exec of `true`, fresh run each time"),
        Figure::new(
            "1b",
            "8 agent containers in parallel → first result",
            "ms",
            Stats::of(&eight),
        )
        .vs("1 agent container", Stats::of(&one))
        .note("pod already up, as within a run; the containers only (no model)"),
        Figure::new(
            "1c",
            "judge container start → first exec result",
            "ms",
            Stats::of(&judge),
        )
        .vs(
            "a worker's container (a judge's before issue 14)",
            Stats::of(&worker),
        )
        .note("pod up; own uid via setpriv, lsof inspector, seccomp profile"),
        Figure::new(
            "2b",
            "`lsof -nP -i` in a judge's container",
            "ms",
            Stats::of(&lsof_judge),
        )
        .vs("the same in a worker's container", Stats::of(&lsof_worker))
        .note("the judge's lsof is answered by its inspector process"),
        Figure::new(
            "1d",
            "cold start, --egress open (run network + fence)",
            "ms",
            Stats::of(&open),
        )
        .vs("--egress none (no network)", Stats::of(&none))
        .note("pod + agent container + exec of `true`"),
        Figure::new(
            "1e",
            "cold start, --egress proxy (+ proxy container)",
            "ms",
            Stats::of(&proxy),
        )
        .vs("--egress none (no network)", Stats::of(&none))
        .note("pod + proxy + agent container + exec of `true`"),
    ]);
    println!("image {image}; {repeat} repeats");
    print_table(&figures);
    if let Some(path) = json {
        let extra = serde_json::json!({"image": image, "repeat": repeat, "roundtrips": roundtrips});
        write_part(&path, "sandbox_bench", extra, &figures);
        eprintln!("wrote {}", path.display());
    }
}
