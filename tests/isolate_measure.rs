//! Measurements (not assertions) of the worktree placement on the host: worktree creation,
//! commit + fast-forward, commit + three-way merge and removal, on a small repository and one
//! with 5000 files. Run with `cargo test --test isolate_measure -- --ignored --nocapture`.

use flowerbox::agent::Placement;
use flowerbox::isolate::{IsolateOptions, WorktreePlacement};
use flowerbox::testkit::git_with_identity as git;
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
