//! An engine that does not share the caller's disk (issue 30): a CI `dind` service, a remote
//! build box. Runs against the second engine named by `FLOWERBOX_TEST_SECOND_ENGINE` (the
//! `DOCKER_HOST` printed by `scripts/second-engine.sh start`, which also hands the agent image
//! over; `.ci/run` starts one), and the local engine (fails when `CI=true` and it is missing).
//! Proves the second engine is such an engine (a bind mount of a host directory shows none of
//! its files, and what a container writes there never reaches the host), and that flowerbox
//! refuses it at start, `once` and `doctor` alike, naming `DOCKER_HOST`, before any agent runs.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "model_support/mod.rs"]
mod model_support;

mod docker_support;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions};
use flowerbox::sandbox::docker::checks::checks;
use flowerbox::sandbox::docker::image::default_image;
use flowerbox::sandbox::docker::shared_disk::{probe, DiskProbeError, Seen};
use flowerbox::sandbox::docker::Engine;
use flowerbox::sandbox::doctor::CheckStatus;
use futures::StreamExt;
use model_support::ScriptedModel;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

const VAR: &str = "FLOWERBOX_TEST_SECOND_ENGINE";

/// The second engine and the agent image on it, or `None` (visibly) when `VAR` is unset. A
/// set `VAR` whose engine does not answer, or lacks the image, fails.
async fn second_engine(test: &str) -> Option<(String, Engine, String)> {
    let Ok(host) = std::env::var(VAR) else {
        eprintln!("SKIPPED {test}: {VAR} names no second engine (scripts/second-engine.sh start)");
        return None;
    };
    let engine = Engine::connect(Some(&host), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{VAR}={host}: {e}"));
    let image = std::env::var(format!("{VAR}_IMAGE")).unwrap_or_else(|_| default_image());
    let present = engine.docker().inspect_image(&image).await.is_ok();
    assert!(
        present,
        "{image} is not on {host}: scripts/second-engine.sh load {image}"
    );
    Some((host, engine, image))
}

/// Runs `script` in a container of `image` on `engine` with `binds` (`-v` syntax: the engine
/// makes a missing source on its own disk), returning its stdout.
async fn run(engine: &Engine, image: &str, binds: Vec<String>, script: &str) -> String {
    let docker = engine.docker();
    let body = ContainerCreateBody {
        image: Some(image.into()),
        entrypoint: Some(vec!["sh".into(), "-c".into(), script.into()]),
        cmd: Some(vec![]),
        host_config: Some(HostConfig {
            binds: Some(binds),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = docker.create_container(None, body).await.unwrap().id;
    docker.start_container(&id, None).await.unwrap();
    let mut wait = docker.wait_container(&id, None);
    while wait.next().await.is_some() {}
    let mut out = String::new();
    let mut logs = docker.logs(
        &id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    while let Some(Ok(item)) = logs.next().await {
        if let LogOutput::StdOut { message } | LogOutput::StdErr { message } = item {
            out.push_str(&String::from_utf8_lossy(&message));
        }
    }
    let rm = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    docker.remove_container(&id, Some(rm)).await.unwrap();
    out
}

#[tokio::test]
async fn a_bind_mount_on_the_second_engine_shows_none_of_the_callers_files() {
    let Some((_, engine, image)) = second_engine("second_engine_disk").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host_dir = dir.path().canonicalize().unwrap();
    std::fs::write(host_dir.join("caller-file.txt"), "on the caller's disk").unwrap();
    std::fs::create_dir(host_dir.join("sub")).unwrap();
    let bind = format!("{}:/w", host_dir.display());
    let out = run(
        &engine,
        &image,
        vec![bind],
        "ls -A /w; echo from-engine > /w/engine-file.txt && echo wrote",
    )
    .await;
    // The engine made an empty directory of that name on its own disk; the container wrote
    // there, never here.
    assert_eq!(out.trim(), "wrote", "{out}");
    let mut here: Vec<_> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    here.sort();
    assert_eq!(here, ["caller-file.txt", "sub"]);
}

#[tokio::test]
async fn the_probe_refuses_the_second_engine() {
    let Some((host, engine, image)) = second_engine("second_engine_probe").await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    // The probe's own image (one empty file), imported on first use: no agent image needed.
    match probe(&engine, &ws_path).await {
        Err(e @ DiskProbeError::NotShared { .. }) => {
            let DiskProbeError::NotShared { seen, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*seen, Seen::NoDirectory, "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&host) && text.contains("DOCKER_HOST"),
                "{text}"
            );
            assert!(text.contains("远程后端还没有"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // The probe's directory is gone again.
    assert_eq!(std::fs::read_dir(&ws_path).unwrap().count(), 0);

    // doctor makes the same probe: its `shared` line fails, naming DOCKER_HOST.
    let lines = checks(Some(&host), Some(&image), Duration::from_secs(10), &ws_path).await;
    let shared = lines
        .iter()
        .find(|c| c.name == "shared")
        .unwrap_or_else(|| panic!("no shared line: {lines:?}"));
    assert_eq!(shared.status, CheckStatus::Fail, "{shared}");
    assert!(shared.detail.contains(&host), "{shared}");
    assert!(shared.detail.contains("DOCKER_HOST"), "{shared}");
}

/// `once` against the second engine stops before any agent runs a command: exit 1 (the engine
/// is unusable, as for an engine that is down), the message names `DOCKER_HOST`, no tool result
/// reaches the model, and the workspace keeps exactly its files besides the run's records (no
/// probe directory, nothing made). The probe runs while the model produces its first turn
/// (issue 32 §1), so `runs/` records the failed step.
#[tokio::test]
async fn once_refuses_the_second_engine_before_any_agent_runs() {
    let Some((host, _, image)) = second_engine("second_engine_once").await else {
        return;
    };
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Bash",
                      "input": {"command": "echo made > made.txt"}}]},
        {"content": [{"type": "text", "text": "好了"}]}]}]}));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(ws_path.join("existing.txt"), "hello").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flowerbox"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", home.path())
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-secret")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .env("DOCKER_HOST", &host)
        .env("FLOWERBOX_IMAGE", &image)
        .current_dir(&ws_path)
        .stdin(Stdio::null())
        .args(["once", "-t", "Bash", "写个文件"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("DOCKER_HOST={host}")), "{stderr}");
    assert!(stderr.contains("看不到这台机器上的文件"), "{stderr}");
    let asked = model
        .recorded()
        .iter()
        .filter(|r| r["messages"].as_array().is_some_and(|m| m.len() > 1))
        .count();
    assert_eq!(asked, 0, "a tool result reached the model");
    let names: Vec<_> = std::fs::read_dir(&ws_path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "runs")
        .collect();
    assert_eq!(names, ["existing.txt"], "{stderr}");
}

/// The local engine sees the workspace: the probe passes (the same one every run makes) and
/// leaves nothing behind.
#[tokio::test]
async fn the_probe_passes_on_the_local_engine() {
    let Some(engine) = docker_support::engine_or_skip("local_probe").await else {
        return;
    };
    let (_dir, ws) = docker_support::odd_workspace();
    probe(&engine, &ws).await.unwrap();
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0);
    // Its container is gone when it returns (found by its label: the workspace).
    let label = format!("flowerbox.disk-probe={}", ws.display());
    let left = docker_support::containers_where(&engine, "label", label).await;
    assert!(left.is_empty(), "{left:?}");
}
