//! Figure 14 of `scripts/bench.sh` (issue 30 §2): what an engine that does not see the caller's
//! disk costs the file operations, each a median over `--calls` calls against the same
//! operation on this machine's disk ([`LocalFiles`]) in the same run:
//!
//! - 14: `Read` of a 4 KiB file, done in a container of the second engine through its exec
//!   service vs locally;
//! - 14b: `Write` of the same file;
//! - 14c: `Grep` for one word over 200 small files;
//! - 14d: the content identity of that tree (what the goal guard takes around a judge);
//! - 14e: the workspace's repository into a volume (bundle written here, cloned there through
//!   the archive API; absolute).
//!
//! Usage: `remote_bench --engine tcp://127.0.0.1:PORT [--image IMAGE] [--calls N] [--json FILE]`
//! (`scripts/second-engine.sh start` prints the engine; its `FLOWERBOX_TEST_SECOND_ENGINE`
//! is the default).
// A benchmark or smoke example, not shipped: it unwraps like a test and reports on its own
// streams.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "bench_common/mod.rs"]
mod bench_common;

use bench_common::{print_table, write_part, Figure, Stats};
use flowerbox::fsroot::{View, ViewMount};
use flowerbox::isolate::bundle::write_bundle;
use flowerbox::record::owner::Owner;
use flowerbox::sandbox::docker::remote_files::FilesKeeper;
use flowerbox::sandbox::docker::volumes::{fill_from_bundle, run_labels, Chore, RunVolume};
use flowerbox::sandbox::docker::Engine;
use flowerbox::sandbox::files::{
    Access, Exclusions, GrepMode, GrepQuery, LocalFiles, SandboxFiles,
};
use flowerbox::sandbox::service::ServiceSource;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Milliseconds (`ms`) or microseconds of each of `calls` runs of `f`.
async fn time_calls<F, Fut>(calls: usize, scale: f64, mut f: F) -> Vec<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut v = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        f().await;
        v.push(t.elapsed().as_secs_f64() * scale);
    }
    v
}

fn tree(root: &Path) -> String {
    let text = "fn main() { println!(\"hello\"); }\n".repeat(4096 / 34);
    let file = root.join("src/a/b/file.rs");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &text).unwrap();
    for i in 0..200 {
        let p = root.join(format!("tree/d{}/f{i}.txt", i % 10));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("line one\nline {i} needle\n")).unwrap();
    }
    text
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut calls = 200usize;
    let mut json_out: Option<PathBuf> = None;
    let mut engine_host = std::env::var("FLOWERBOX_TEST_SECOND_ENGINE").ok();
    let mut image = flowerbox::sandbox::docker::image::default_image();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|n| n.parse().ok()).expect("--calls N"),
            "--json" => json_out = args.next().map(PathBuf::from),
            "--engine" => engine_host = args.next(),
            "--image" => image = args.next().expect("--image IMAGE"),
            other => panic!("unknown argument {other}"),
        }
    }
    let host = engine_host.expect("--engine tcp://… (scripts/second-engine.sh start)");
    let engine = Engine::connect(Some(&host), Duration::from_secs(10))
        .await
        .unwrap();
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();

    // This machine's side: the tree in a git repository.
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().canonicalize().unwrap().join("ws");
    let text = tree(&here);
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-qm", "tree"],
    ] {
        flowerbox_testkit::git_with_identity(&here, args);
    }

    // The engine's side: a volume filled from a bundle, a container with the service.
    let owner = Owner::current().unwrap();
    let run_id = format!("bench-{tag}");
    let volume = RunVolume::create(&engine, &run_id, &here, "workspace", &owner)
        .await
        .unwrap();
    let at = PathBuf::from(format!("/fbx-bench-{tag}"));
    let there = at.join("ws");
    let chore = Chore {
        engine: &engine,
        image: &image,
        user: "0:0",
        mounts: vec![volume.mount(&at)],
        labels: run_labels(&run_id, &here, &owner),
    };
    let mut t_fill = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        let repo = flowerbox::isolate::open_workspace_repo(&here).unwrap();
        let bundle = write_bundle(&repo.open().unwrap(), &["refs/heads/main"]).unwrap();
        let into = if i == 0 {
            there.clone()
        } else {
            at.join(format!("copy{i}"))
        };
        fill_from_bundle(&chore, &into, &bundle, "main")
            .await
            .unwrap();
        t_fill.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let keeper = FilesKeeper::start(
        &engine,
        &image,
        &format!("fbx-bench-{tag}"),
        &ServiceSource::discover().expect("a flowerbox binary"),
        vec![volume.mount(&at)],
        run_labels(&run_id, &here, &owner),
        "0:0",
    )
    .await
    .unwrap();
    let remote = keeper.files();
    let local = LocalFiles;

    let view_of = |root: &Path| {
        View::new(
            vec![ViewMount {
                path: root.to_path_buf(),
                read_only: false,
            }],
            Vec::new(),
        )
    };
    let (v_here, v_there) = (view_of(&here), view_of(&there));
    let file = |root: &Path| root.join("src/a/b/file.rs");
    let grep = GrepQuery {
        numbers: true,
        ..GrepQuery::new("needle", GrepMode::Content)
    };
    let none = Exclusions::default();
    // Borrowed by every timed call.
    let (text, grep, none) = (&text, &grep, &none);
    // Warm up both sides.
    for _ in 0..10 {
        remote
            .read(&v_there, &file(&there), Access::Read)
            .await
            .unwrap();
        local
            .read(&v_here, &file(&here), Access::Read)
            .await
            .unwrap();
    }
    macro_rules! both {
        ($n:expr, $scale:expr, |$f:ident, $v:ident, $root:ident| $op:expr) => {{
            let r = time_calls($n, $scale, || {
                let ($f, $v, $root) = (&remote, &v_there, &there);
                async move {
                    $op;
                }
            })
            .await;
            let l = time_calls($n, $scale, || {
                let ($f, $v, $root) = (&local, &v_here, &here);
                async move {
                    $op;
                }
            })
            .await;
            (Stats::of(&r), Stats::of(&l))
        }};
    }
    let (r_read, l_read) = both!(calls, 1e6, |f, v, root| f
        .read(v, &file(root), Access::Read)
        .await
        .unwrap());
    let (r_write, l_write) = both!(calls, 1e6, |f, v, root| f
        .write(v, &file(root), text.clone().into_bytes())
        .await
        .unwrap());
    let (r_grep, l_grep) = both!(calls / 10 + 1, 1e6, |f, v, root| f
        .grep(v, root, grep)
        .await
        .unwrap());
    let (r_id, l_id) = both!(calls / 10 + 1, 1e3, |f, _v, root| f
        .identity(root, none)
        .await
        .unwrap());

    let figures = vec![
        Figure::new("14", "Read, 4 KiB, engine without the disk", "µs", r_read).vs("local", l_read),
        Figure::new(
            "14b",
            "Write, 4 KiB, engine without the disk",
            "µs",
            r_write,
        )
        .vs("local", l_write),
        Figure::new(
            "14c",
            "Grep, 200 files, engine without the disk",
            "µs",
            r_grep,
        )
        .vs("local", l_grep),
        Figure::new(
            "14d",
            "identity, 201 files, engine without the disk",
            "ms",
            r_id,
        )
        .vs("local", l_id),
        Figure::new(
            "14e",
            "repository into a volume (bundle + clone)",
            "ms",
            Stats::of(&t_fill),
        ),
    ];
    keeper.stop(&engine).await;
    volume.remove(&engine).await.unwrap();
    print_table(&figures);
    if let Some(path) = json_out {
        write_part(&path, "remote_bench", json!({"calls": calls}), &figures);
    }
}
