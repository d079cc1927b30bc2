//! README command 1 through the CI-container wrapper (issue 10): `scripts/demo.sh` with
//! `FLOWERBOX_DEMO_BIN` pointing at `docker/flowerbox` (through a two-line shim that names the
//! runner image this test built). flowerbox itself runs in the runner container; the agents'
//! containers, worktrees and workbench are on the host at their own paths; `scripted-model`
//! listens on the host's loopback, which the runner reaches over the host network.
//!
//! Docker-gated: with `CI=true` a missing engine fails; elsewhere the test skips visibly.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::{engine_or_skip, repo_file, runner_image};
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous bound that only catches hangs.
const HANG: Duration = Duration::from_secs(900);

/// The runner image's container events (`start`, `destroy`), watched live from before the demo
/// starts: the engine keeps only its last 256 events for `--since` queries, and a busy shared
/// engine (other runs, their networks and execs) pushes the runner's out before the demo ends.
struct RunnerEvents {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl RunnerEvents {
    fn watch(image: &str) -> RunnerEvents {
        let mut child = Command::new("docker")
            .args(["events", "--filter", "type=container"])
            .args(["--filter", &format!("image={image}")])
            .args(["--filter", "event=start", "--filter", "event=destroy"])
            .args(["--format", "{{.Action}} {{.Actor.Attributes.name}}"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        RunnerEvents { child, lines }
    }

    /// Names of the containers with event `action` so far (after a moment for the stream).
    fn names(&self, action: &str) -> Vec<String> {
        std::thread::sleep(Duration::from_secs(1));
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("{action} ")).map(str::to_string))
            .collect()
    }
}

impl Drop for RunnerEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_runs_through_the_wrapper_to_achieved() {
    let Some(engine) = engine_or_skip("wrapper demo").await else {
        return;
    };
    let image = runner_image(&engine).await;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let shim = root.join("flowerbox-wrapped");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nFLOWERBOX_RUNNER_IMAGE='{image}' exec '{}' \"$@\"\n",
            repo_file("docker/flowerbox").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let base = root.join("demo");
    let events = RunnerEvents::watch(&image);
    std::thread::sleep(Duration::from_millis(500));

    let mut child = Command::new(repo_file("scripts/demo.sh"))
        .arg(&base)
        .env("FLOWERBOX_DEMO_BIN", &shim)
        .env(
            "FLOWERBOX_DEMO_MODEL_BIN",
            flowerbox_testkit::scripted_model_bin(),
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(root.join("demo.out")).unwrap())
        .stderr(std::fs::File::create(root.join("demo.err")).unwrap())
        .spawn()
        .expect("scripts/demo.sh");
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/demo.sh through the wrapper hung");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = std::fs::read_to_string(root.join("demo.out")).unwrap();
    let err = std::fs::read_to_string(root.join("demo.err")).unwrap();
    assert_eq!(status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("演示完成:ACHIEVED"), "{out}");

    // flowerbox ran in the wrapper's runner containers (doctor, then the run), each removed
    // afterwards. (build.sh's own smoke run of the image has a docker-chosen name.)
    let wrapped = |action: &str| -> Vec<String> {
        let mut v = events.names(action);
        v.retain(|n| n.starts_with("flowerbox-runner-"));
        v.sort();
        v
    };
    let started = wrapped("start");
    assert!(started.len() >= 2, "runner containers started: {started:?}");
    assert_eq!(wrapped("destroy"), started);

    // The books and the judges' evidence, on the host, as without the wrapper.
    let ws = base.join("httpd");
    let wb = base.join(".flower-httpd");
    let rows: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(ws.join("runs/manifest.json")).unwrap())
            .unwrap();
    let text = |step: &str| rows.iter().find(|r| r["step"] == step).unwrap()["text"].to_string();
    assert!(text("干活·判定#1").contains("NOT_YET"));
    assert!(text("干活·判定#2").contains("ACHIEVED"));
    let evidence = std::fs::read_to_string(wb.join("notes/判定证据.md")).unwrap();
    for seen in ["ELF 64-bit", "TCP *:8080 (LISTEN)", "hello from flowerbox"] {
        assert!(
            evidence.contains(seen),
            "{seen} not in the evidence:\n{evidence}"
        );
    }
    // The workers' branches came back through a merge commit; the worktrees lived next to the
    // project (mounted by the wrapper at their own path).
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let parents = git(&["log", "--merges", "-1", "--format=%P"]);
    assert_eq!(parents.split_whitespace().count(), 2, "no merge commit");
    assert!(base.join(".flower-httpd-worktrees").is_dir());
    // Files the run wrote belong to the caller.
    let me = nix::unistd::getuid().as_raw();
    for f in ["runs/manifest.json", "runs/sessions.db", "src/main.c"] {
        assert_eq!(std::fs::metadata(ws.join(f)).unwrap().uid(), me, "{f}");
    }
    // Nothing left on the engine.
    let left = flowerbox::sandbox::docker::gc::list(&engine, Some(&ws))
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "containers left: {:?}",
        left.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
}
