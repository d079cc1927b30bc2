//! Measurements (not assertions) of the worktree placement on the host: worktree creation,
//! commit + fast-forward, commit + three-way merge and removal, on a small repository and one
//! with 5000 files; and on the real engine, the cost of issue 14 part 2 (a worker container's
//! start, and `finish` with the commit inside the container) against the design before it.
//! Run with `cargo test --test isolate_measure -- --ignored --nocapture`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use flowerbox::agent::Placement;
use flowerbox::isolate::{IsolateOptions, WorktreePlacement};
use flowerbox_testkit::git_with_identity as git;
use std::time::Instant;

async fn measure(files: usize) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("proj");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        std::fs::write(
            ws.join("src").join(format!("f{i}.txt")),
            format!("{i}\n").repeat(400),
        )
        .unwrap();
    }
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    let wb = dir.path().join("wb");
    std::fs::create_dir(&wb).unwrap();
    let p = WorktreePlacement::open(IsolateOptions::new(&ws, &wb)).unwrap();
    p.bind_run("m");

    let t = Instant::now();
    let a = p.prepare("worker-1").await.unwrap();
    let create = t.elapsed();
    let b = p.prepare("worker-2").await.unwrap();
    std::fs::write(a.workdir.join("src/f0.txt"), "changed by 1\n").unwrap();
    std::fs::write(b.workdir.join("new.txt"), "new by 2\n").unwrap();
    let t = Instant::now();
    let ra = p.finish("worker-1", &a, true, None).await.unwrap();
    let ff = t.elapsed();
    let t = Instant::now();
    let rb = p.finish("worker-2", &b, true, None).await.unwrap();
    let three_way = t.elapsed();
    assert!(ra.contains("快进") && rb.contains("三方合并"), "{ra}\n{rb}");
    let t = Instant::now();
    assert!(p.close().is_empty());
    let close = t.elapsed();
    eprintln!(
        "{files:>5} files: create {:>7.1} ms · commit+fast-forward {:>7.1} ms · commit+three-way {:>7.1} ms · close (2 worktrees) {:>7.1} ms",
        create.as_secs_f64() * 1e3,
        ff.as_secs_f64() * 1e3,
        three_way.as_secs_f64() * 1e3,
        close.as_secs_f64() * 1e3
    );
}

#[tokio::test]
#[ignore = "measurement; run explicitly"]
async fn worktree_timings() {
    for n in [10, 5000] {
        measure(n).await;
    }
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Issue 14 part 2's cost on the real engine, before (the main `.git` mounted read-write, the
/// host commits what the worker left with libgit2) against after (`.git` read-only with the
/// worker's own parts, commit inside the container, branch brought back): a worker container's
/// cold start to its first exec, and `finish` (commit + bring back + integrate). Run with
/// `cargo test --test isolate_measure container_and_finish -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "measurement; run explicitly"]
async fn container_and_finish_timings() {
    use flowerbox::agent::WorkerSandbox;
    use flowerbox::role::Role;
    use flowerbox::sandbox::docker::{ensure_image, DockerOptions, DockerSandboxFactory, Engine};
    use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, SandboxFactory};
    use std::time::Duration;

    let engine = Engine::connect(None, Duration::from_secs(5))
        .await
        .expect("engine");
    let image = ensure_image(&engine, None, false).await.unwrap().image;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("proj");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    for i in 0..200 {
        std::fs::write(ws.join("src").join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "init"]);
    let wb = dir.path().canonicalize().unwrap().join("wb");
    std::fs::create_dir(&wb).unwrap();
    let p = WorktreePlacement::open(IsolateOptions::new(&ws, &wb)).unwrap();
    p.bind_run("m");
    let mut opts = DockerOptions::new("measure-iso-git", &ws);
    opts.image = Some(image);
    opts.show_progress = false;
    let factory = DockerSandboxFactory::connect(opts).await.unwrap();
    let exec = |cwd: std::path::PathBuf, command: &str| ExecRequest {
        command: command.into(),
        cwd,
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 4096,
        spill_dir: None,
        cancel: tokio_util::sync::CancellationToken::new(),
    };
    let (mut start_before, mut start_after) = (Vec::new(), Vec::new());
    let (mut finish_before, mut finish_after) = (Vec::new(), Vec::new());
    let rounds = 7;
    for round in 0..rounds {
        for after in [false, true] {
            let agent = format!("worker-{}{}", round, if after { "a" } else { "b" });
            let place = p.prepare(&agent).await.unwrap();
            let mounts = if after {
                place.mounts.clone()
            } else {
                // Before: worktree, the whole git dir read-write, workbench.
                vec![
                    place.mounts[0].clone(),
                    Mount::same(ws.join(".git"), false),
                    place.mounts.last().unwrap().clone(),
                ]
            };
            let spec = AgentBox {
                agent: agent.clone(),
                role: Role::Worker,
                mounts,
                masked: Vec::new(),
                workdir: place.workdir.clone(),
                policy: flowerbox::sandbox::SandboxPolicy::writer(),
            };
            let t = Instant::now();
            let sb = factory.sandbox(&spec).await.unwrap();
            let out = sb.exec(exec(place.workdir.clone(), "true")).await.unwrap();
            assert!(out.success(), "{out:?}");
            let start = t.elapsed().as_secs_f64() * 1e3;
            let out = sb
                .exec(exec(
                    place.workdir.clone(),
                    &format!("for i in $(seq 20); do echo {agent} > src/f$i.txt; done; echo n > new-{agent}.txt"),
                ))
                .await
                .unwrap();
            assert!(out.success(), "{out:?}");
            let t = Instant::now();
            let worker_sandbox = WorkerSandbox {
                factory: &factory,
                spec: &spec,
            };
            let r = p
                .finish(&agent, &place, true, after.then_some(worker_sandbox))
                .await
                .unwrap();
            let finish = t.elapsed().as_secs_f64() * 1e3;
            assert!(r.contains("[合入]") || r.contains("[合入失败]"), "{r}");
            factory.release(&agent).await.unwrap();
            if after {
                start_after.push(start);
                finish_after.push(finish);
            } else {
                start_before.push(start);
                finish_before.push(finish);
            }
        }
    }
    factory.teardown().await.unwrap();
    let _ = p.close();
    let (sb, sa) = (median(&mut start_before), median(&mut start_after));
    let (fb, fa) = (median(&mut finish_before), median(&mut finish_after));
    eprintln!(
        "worker container cold start → first exec: before {sb:.0} ms, after {sa:.0} ms (×{:.2}); \
         finish (commit + bring back + integrate, 21 files): before {fb:.0} ms, after {fa:.0} ms (×{:.2}); \
         medians of {rounds}",
        sa / sb,
        fa / fb
    );
}
