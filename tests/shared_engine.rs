//! The test suite shares the engine with a developer's own runs (issue 18 "Tests that are safe
//! on a shared engine"): what the suite's `gc` and runner-image build do must leave alone a dead
//! run of another workspace (its containers are a developer's to inspect or sweep) and
//! `flowerbox-runner` images the suite did not make. The developer's objects here are fakes
//! labelled exactly like the real ones, made and removed by this test.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, TagImageOptions};
use docker_support::{agent_image, engine_or_skip, gc_command, runner_image};
use flowerbox::record::owner::{
    Liveness, Owner, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_RUN, LABEL_WORKSPACE,
};
use flowerbox::sandbox::docker::Engine;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Removes, by name, the containers and image tags this test made (also when it fails).
struct Made {
    containers: Vec<String>,
    tags: Vec<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("docker")
                .args(["rm", "-f", c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        for t in &self.tags {
            // An extra tag of the agent image: `rmi` of it only untags.
            let _ = Command::new("docker")
                .args(["rmi", t])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The labels of a real run's worker container in `ws` whose owner process is dead.
fn dead_run_labels(run: &str, ws: &Path) -> HashMap<String, String> {
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let mut labels = HashMap::from([
        (LABEL_RUN.to_string(), run.to_string()),
        (
            LABEL_WORKSPACE.to_string(),
            ws.to_string_lossy().into_owned(),
        ),
        ("flowerbox.agent".to_string(), "worker-1".to_string()),
        ("flowerbox.role".to_string(), "worker".to_string()),
    ]);
    Owner::current().unwrap().add_labels(&mut labels);
    labels.insert(LABEL_OWNER_PID.into(), dead_pid.to_string());
    // Start tick 1: even if the pid is reused by now, it is another process.
    labels.insert(LABEL_OWNER_START.into(), "1".into());
    let owner = Owner::from_labels(&labels).unwrap();
    assert!(
        matches!(owner.liveness(), Liveness::Dead(_)),
        "the fake owner must be provably dead, so any gc that looks at it removes it"
    );
    labels
}

async fn create(engine: &Engine, image: &str, name: &str, labels: HashMap<String, String>) {
    let body = ContainerCreateBody {
        image: Some(image.into()),
        cmd: Some(vec!["true".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    let opts = CreateContainerOptions {
        name: Some(name.into()),
        ..Default::default()
    };
    engine
        .docker()
        .create_container(Some(opts), body)
        .await
        .expect("create container");
}

async fn image_id(engine: &Engine, name: &str) -> Option<String> {
    engine
        .docker()
        .inspect_image(name)
        .await
        .ok()
        .and_then(|i| i.id)
}

async fn container_exists(engine: &Engine, name: &str) -> bool {
    engine.docker().inspect_container(name, None).await.is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_developers_dead_run_and_runner_image_survive_the_suites_gc_and_build() {
    let Some(engine) = engine_or_skip("shared engine").await else {
        return;
    };
    let image = agent_image(&engine).await;
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let mut made = Made {
        containers: Vec::new(),
        tags: Vec::new(),
    };

    // A developer's run of another workspace, killed: its worker container is an orphan.
    let dev_ws = tempfile::tempdir().unwrap();
    let dev_ws = std::fs::canonicalize(dev_ws.path()).unwrap();
    let dev = format!("fbx-dev-{}-worker-1", &unique[..12]);
    made.containers.push(dev.clone());
    create(
        &engine,
        &image,
        &dev,
        dead_run_labels(&format!("dev-{}", &unique[..12]), &dev_ws),
    )
    .await;
    // This test's own dead run, so its gc has something to remove.
    let own_ws = tempfile::tempdir().unwrap();
    let own_ws = std::fs::canonicalize(own_ws.path()).unwrap();
    let own = format!("fbx-own-{}-worker-1", &unique[..12]);
    made.containers.push(own.clone());
    let own_run = format!("own-{}", &unique[..12]);
    create(&engine, &image, &own, dead_run_labels(&own_run, &own_ws)).await;

    // The suite's gc, from another directory, as the tests run it.
    let elsewhere = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = gc_command(&own_ws)
        .current_dir(elsewhere.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&own_run), "{said}");
    assert!(!container_exists(&engine, &own).await, "{said}");
    assert!(
        container_exists(&engine, &dev).await,
        "the suite's gc removed a developer's container: {said}"
    );

    // A developer's runner image (their docker/build.sh) and their :latest.
    let dev_tag = &unique[..12];
    let dev_image = format!("flowerbox-runner:{dev_tag}");
    engine
        .docker()
        .tag_image(
            &image,
            Some(TagImageOptions {
                repo: Some("flowerbox-runner".into()),
                tag: Some(dev_tag.into()),
            }),
        )
        .await
        .expect("tag");
    made.tags.push(dev_image.clone());
    let latest_before = image_id(&engine, "flowerbox-runner:latest").await;

    // The suite's runner image build (docker/build.sh, as the wrapper tests run it).
    let built = runner_image(&engine).await;
    assert_ne!(built, dev_image);
    assert_eq!(
        image_id(&engine, &dev_image).await.as_deref(),
        image_id(&engine, &image).await.as_deref(),
        "the suite's build removed or moved a developer's runner image"
    );
    assert_eq!(
        image_id(&engine, "flowerbox-runner:latest").await,
        latest_before,
        "the suite's build retagged flowerbox-runner:latest"
    );

    // The developer's container was a real orphan all along: gc of its workspace removes it.
    let out = gc_command(&dev_ws)
        .current_dir(elsewhere.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!container_exists(&engine, &dev).await, "{said}");
}
