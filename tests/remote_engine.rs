//! An engine that does not share the caller's disk (issue 30): a CI `dind` service, a remote
//! build box. Runs against the second engine named by `FLOWERBOX_TEST_SECOND_ENGINE` (the
//! `DOCKER_HOST` printed by `scripts/second-engine.sh start`, which also hands the agent image
//! over; `.ci/run` starts one), and the local engine (fails when `CI=true` and it is missing).
//! Proves the second engine is such an engine (a bind mount of a host directory shows none of
//! its files, and what a container writes there never reaches the host), that `--sandbox
//! docker`'s probe refuses it while `doctor` says the remote mode applies, that `once` with
//! commands is refused there before any agent, and the remote backend's parts (files in the
//! pod, the repository in a volume, gc). Whole runs there: `tests/remote_run.rs`.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod flow_support;
mod remote_support;

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions};
use flow_support::ScriptedModel;
use flowerbox::sandbox::docker::checks::checks;
use flowerbox::sandbox::docker::shared_disk::{probe, DiskProbeError, Seen};
use flowerbox::sandbox::docker::Engine;
use flowerbox::sandbox::doctor::CheckStatus;
use futures::StreamExt;
use remote_support::{caller_repo, second_engine, RunOnEngine};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

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
            assert!(text.contains("--sandbox docker-remote --isolate"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // The probe's directory is gone again.
    assert_eq!(std::fs::read_dir(&ws_path).unwrap().count(), 0);

    // doctor makes the same probe: its `shared` line fails, naming DOCKER_HOST.
    let line = |lines: &[flowerbox::sandbox::doctor::Check], name: &str| {
        lines
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} line: {lines:?}"))
            .clone()
    };
    let lines = checks(
        Some(&host),
        Some(&image),
        Duration::from_secs(10),
        &ws_path,
        false,
    )
    .await;
    // Reached over TCP and blind to the workspace: a run picks the remote mode by itself.
    let shared = line(&lines, "shared");
    assert_eq!(shared.status, CheckStatus::Pass, "{shared}");
    assert!(shared.detail.contains(&host), "{shared}");
    assert!(shared.detail.contains("DOCKER_HOST"), "{shared}");
    assert!(shared.detail.contains("自动用 docker-remote"), "{shared}");
    assert_eq!(line(&lines, "exec").status, CheckStatus::Pass);
    // With `--sandbox docker-remote` the same engine is the one that backend is for, and a
    // container of it (an empty volume at the workspace) starts its exec service.
    let remote = checks(
        Some(&host),
        Some(&image),
        Duration::from_secs(10),
        &ws_path,
        true,
    )
    .await;
    let shared = line(&remote, "shared");
    assert_eq!(shared.status, CheckStatus::Pass, "{shared}");
    assert!(shared.detail.contains("docker-remote"), "{shared}");
    let exec = line(&remote, "exec");
    assert_eq!(exec.status, CheckStatus::Pass, "{exec}");
    assert_eq!(std::fs::read_dir(&ws_path).unwrap().count(), 0);
}

/// `once` against the second engine stops before any agent runs a command: exit 1 (the run
/// chose the remote mode by itself, saying so and naming `DOCKER_HOST`, and there a `once` that
/// runs commands has no integration to bring its work back), no tool result reaches the model,
/// and the workspace keeps exactly its files besides the run's records (no probe directory,
/// nothing made).
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
    let said = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(1), "{said}");
    // The engine is reached over TCP and blind to the workspace: the run chose the remote
    // mode (saying so, naming DOCKER_HOST), where a `once` that runs commands is refused.
    assert!(said.contains(&format!("DOCKER_HOST={host}")), "{said}");
    assert!(said.contains("看不到这台机器的磁盘"), "{said}");
    assert!(stderr.contains("--isolate"), "{stderr}");
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

/// Runs `cmd` (`sh -c`) as root in the running container `id` and returns its stdout and stderr.
async fn exec_in(engine: &Engine, id: &str, cmd: &str) -> String {
    use bollard::exec::StartExecResults;
    use bollard::models::ExecConfig;
    let docker = engine.docker();
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["sh".into(), "-c".into(), cmd.into()]),
        user: Some("0:0".into()),
        ..Default::default()
    };
    let exec = docker.create_exec(id, config).await.unwrap().id;
    let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec, None).await.unwrap()
    else {
        panic!("detached")
    };
    let mut out = String::new();
    while let Some(Ok(item)) = output.next().await {
        if let LogOutput::StdOut { message } | LogOutput::StdErr { message } = item {
            out.push_str(&String::from_utf8_lossy(&message));
        }
    }
    out
}

/// Removes a container and a volume of the second engine when dropped (a failed assertion
/// included), through the CLI: `Drop` cannot wait for the API.
struct OnEngine {
    host: String,
    container: String,
    volume: String,
}

impl Drop for OnEngine {
    fn drop(&mut self) {
        for args in [
            vec!["rm", "-f", "-v", self.container.as_str()],
            vec!["volume", "rm", "-f", self.volume.as_str()],
        ] {
            let _ = Command::new("docker")
                .env("DOCKER_HOST", &self.host)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Issue 30 §2, the file operations of an engine that does not see the caller's disk: the exec
/// service goes into a container of the second engine through the archive API (nothing of this
/// machine's disk is mounted), the files live in a volume of that engine, and `Read`, `Write`,
/// `Edit`, `Glob`, `Grep` and the content identity are done in the container, with the
/// refusals of the local backend: a symlink out of the mounts, the masked run directory, a
/// write into a read-only mount, a file over the size cap, a FIFO. The identity computed
/// there equals the one computed here over the same tree (files, modes, a git repository's
/// refs), and changes with an edit.
#[tokio::test]
async fn file_operations_run_inside_a_container_of_the_second_engine() {
    use bollard::models::{Mount, MountType, VolumeCreateRequest};
    use flowerbox::fsroot::{View, ViewMount};
    use flowerbox::sandbox::docker::remote_files::{files_in, install_service};
    use flowerbox::sandbox::files::{
        Access, Contents, Edit, Exclusions, FilesError, GrepMode, GrepQuery, LocalFiles,
        SandboxFiles,
    };
    use flowerbox::sandbox::service::ServiceSource;
    use std::path::{Path, PathBuf};

    let Some((host, engine, image)) = second_engine("second_engine_files").await else {
        return;
    };
    let docker = engine.docker();
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    // A root that exists on neither side beforehand; on the engine's side only afterwards.
    let root = PathBuf::from(format!("/fbx-remote-files-{tag}"));
    let guard = OnEngine {
        host: host.clone(),
        container: format!("fbx-test-remote-files-{tag}"),
        volume: format!("fbx-test-remote-files-{tag}"),
    };
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(guard.volume.clone()),
            labels: Some([("flowerbox.test".to_string(), tag.clone())].into()),
            ..Default::default()
        })
        .await
        .unwrap();

    // The tree, made here, then shipped as a tar (so the identity can be compared).
    let here = tempfile::tempdir().unwrap();
    let local_root = here.path().canonicalize().unwrap();
    let w = |rel: &str, text: &str| {
        let p = local_root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    };
    w(
        "rw/src/main.rs",
        "fn main() {\n    println!(\"hello\");\n}\n",
    );
    w("rw/notes.txt", "alpha\nbeta\n");
    w("rw/.gitignore", "target/\n");
    w("rw/target/debug/app", "binary");
    w("rw/runs/record.json", "{}");
    w("ro/readme.txt", "read only");
    w("outside/secret", "not for agents");
    flowerbox_testkit::git_with_identity(&local_root.join("rw"), &["init", "-q", "-b", "main"]);
    flowerbox_testkit::git_with_identity(&local_root.join("rw"), &["add", "-A"]);
    flowerbox_testkit::git_with_identity(&local_root.join("rw"), &["commit", "-qm", "one"]);
    std::os::unix::fs::symlink(root.join("outside/secret"), local_root.join("rw/out")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", local_root.join("rw/etc")).unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    tar.append_dir_all(".", &local_root).unwrap();
    let tar = tar.into_inner().unwrap();

    // What the local side says about the same tree, at the remote paths' place.
    let rw_here = local_root.join("rw");
    let exclude_here = Exclusions {
        dirs: vec![rw_here.join("runs")],
        files: Vec::new(),
    };
    let identity_here = LocalFiles.identity(&rw_here, &exclude_here).await.unwrap();

    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let script = format!(
        "truncate -s 70M {r}/rw/huge && mkfifo {r}/rw/fifo && touch {r}/ready && exec sleep infinity",
        r = root.display()
    );
    let body = ContainerCreateBody {
        image: Some(image.clone()),
        entrypoint: Some(vec!["sh".into(), "-c".into(), script]),
        cmd: Some(vec![]),
        // The entrypoint as root (the volume's root is root's); the service as this user, who
        // owns the tree (the archive keeps its owners), as an agent owns its workspace.
        user: Some("0:0".into()),
        labels: Some([("flowerbox.test".to_string(), tag.clone())].into()),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some(root.to_string_lossy().into_owned()),
                source: Some(guard.volume.clone()),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            }]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(guard.container.clone()),
        ..Default::default()
    };
    let id = docker
        .create_container(Some(options), body)
        .await
        .unwrap()
        .id;
    docker
        .upload_to_container(
            &id,
            Some(bollard::query_parameters::UploadToContainerOptions {
                path: root.to_string_lossy().into_owned(),
                ..Default::default()
            }),
            bollard::body_full(tar.into()),
        )
        .await
        .unwrap();
    let binary = ServiceSource::Path(PathBuf::from(env!("CARGO_BIN_EXE_flowerbox")));
    install_service(&engine, &id, &binary).await.unwrap();
    docker.start_container(&id, None).await.unwrap();
    // The entrypoint's files (a sparse file over the cap, a FIFO) before any call.
    let mut ready = String::new();
    for _ in 0..100 {
        ready = exec_in(
            &engine,
            &id,
            &format!("test -e {}/ready && echo yes", root.display()),
        )
        .await;
        if ready.trim() == "yes" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready.trim(), "yes");
    let files = files_in(&engine, &id, &format!("{uid}:{gid}"))
        .await
        .unwrap();

    let (rw, ro) = (root.join("rw"), root.join("ro"));
    let view = View::new(
        vec![
            ViewMount {
                path: rw.clone(),
                read_only: false,
            },
            ViewMount {
                path: ro.clone(),
                read_only: true,
            },
        ],
        vec![rw.join("runs")],
    );
    let refused = |r: Result<(PathBuf, Contents), FilesError>| match r {
        Err(FilesError::View(v)) => format!("{v:?}"),
        other => panic!("{other:?}"),
    };
    let kind = |s: String| s.split(['(', ' ']).next().unwrap().to_string();
    // Reads.
    let (p, c) = files
        .read(&view, &rw.join("notes.txt"), Access::Read)
        .await
        .unwrap();
    assert_eq!(
        (p, c),
        (
            rw.join("notes.txt"),
            Contents::File(b"alpha\nbeta\n".to_vec())
        )
    );
    assert_eq!(
        files
            .read(&view, &rw.join("src"), Access::Read)
            .await
            .unwrap()
            .1,
        Contents::Dir
    );
    assert_eq!(
        files
            .head(&view, &ro.join("readme.txt"), 4)
            .await
            .unwrap()
            .1,
        b"read"
    );
    // Refusals, as the local backend gives them.
    for (path, access, want) in [
        (rw.join("out"), Access::Read, "Outside"),
        (rw.join("etc"), Access::Read, "Outside"),
        (root.join("outside/secret"), Access::Read, "Outside"),
        (rw.join("runs/record.json"), Access::Read, "Masked"),
        (ro.join("readme.txt"), Access::Write, "ReadOnly"),
    ] {
        let got = kind(refused(files.read(&view, &path, access).await));
        assert_eq!(got, want, "{path:?}");
    }
    let huge = refused(files.read(&view, &rw.join("huge"), Access::Read).await);
    assert!(huge.starts_with("Fs(TooLarge"), "{huge}");
    let fifo = refused(files.read(&view, &rw.join("fifo"), Access::Read).await);
    assert_eq!(fifo, "Fs(NotRegular)");
    match files.write(&view, &ro.join("new.txt"), b"x".to_vec()).await {
        Err(FilesError::View(v)) => assert!(format!("{v:?}").starts_with("ReadOnly"), "{v:?}"),
        other => panic!("{other:?}"),
    }
    match files
        .write(&view, &root.join("outside/new"), b"x".to_vec())
        .await
    {
        Err(FilesError::View(v)) => assert!(format!("{v:?}").starts_with("Outside"), "{v:?}"),
        other => panic!("{other:?}"),
    }

    // The identity, computed in the container, equals this machine's over the same tree.
    let exclude = Exclusions {
        dirs: vec![rw.join("runs")],
        files: Vec::new(),
    };
    let before = files.identity(&rw, &exclude).await.unwrap();
    let changed = identity_here.changed(&before);
    // The two files made in the container count there (`huge`; the FIFO never does).
    assert_eq!(changed, ["huge"], "{changed:?}");

    // Writes and edits land in the volume, a large write whole (over one frame).
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (p, existed) = files
        .write(&view, &rw.join("gen/big.bin"), big.clone())
        .await
        .unwrap();
    assert_eq!((p, existed), (rw.join("gen/big.bin"), false));
    assert_eq!(
        files
            .read(&view, &rw.join("gen/big.bin"), Access::Read)
            .await
            .unwrap()
            .1,
        Contents::File(big)
    );
    let edit = Edit {
        old: "hello".into(),
        new: "remote".into(),
        all: false,
    };
    assert_eq!(
        files
            .edit(&view, &rw.join("src/main.rs"), &edit)
            .await
            .unwrap()
            .1,
        Ok(1)
    );
    let inside = exec_in(
        &engine,
        &id,
        &format!(
            "cat {}/rw/src/main.rs; ls {}/ro",
            root.display(),
            root.display()
        ),
    )
    .await;
    assert!(inside.contains("println!(\"remote\")"), "{inside}");
    assert_eq!(inside.lines().last(), Some("readme.txt"), "{inside}");
    let after = files.identity(&rw, &exclude).await.unwrap();
    assert_eq!(before.changed(&after), ["gen/big.bin", "src/main.rs"]);

    // Glob and grep walk the container's tree, ignore rules and links as rg does.
    let (base, found) = files.glob(&view, &rw, "**/*.rs").await.unwrap();
    assert_eq!(base, rw);
    let found: Vec<_> = found.into_iter().map(|(p, _)| p).collect();
    assert_eq!(found, [rw.join("src/main.rs")]);
    let q = GrepQuery::new("remote|beta", GrepMode::Files);
    let mut lines = files.grep(&view, &rw, &q).await.unwrap();
    lines.sort();
    let want: Vec<String> = ["notes.txt", "src/main.rs"]
        .iter()
        .map(|r| rw.join(r).display().to_string())
        .collect();
    assert_eq!(lines, want);

    // Nothing of it ever was on this machine's disk.
    assert!(!Path::new(&root).exists());
    drop(guard);
}

/// Issue 30 §2, the repository on an engine that does not see the caller's disk: the
/// workspace's repository goes into a volume of the second engine as a git bundle through the
/// archive API (a chore container that mounts the volume only), a worker's commit made in a
/// worktree of the volume comes back as a bundle of its branch, and the caller's repository takes it only through the
/// checks of `isolate::bundle` (its own ref, objects hashed and bounded): the branch moves, the
/// file it carries is the one committed there, and the caller's branch and disk are untouched.
/// A bundle that names another branch is refused. The volume carries the run's and owner's
/// labels (what `gc` needs), and nothing is left on the engine.
#[tokio::test]
async fn a_repository_goes_to_a_volume_of_the_second_engine_and_a_branch_comes_back_checked() {
    use flowerbox::isolate::bundle::{receive, write_bundle, MAX_BUNDLE};
    use flowerbox::isolate::{open_workspace_repo, Adopted, IsolateError, Policy};
    use flowerbox::record::owner::Owner;
    use flowerbox::sandbox::docker::volumes::{
        add_worktree, branch_bundle, fill_from_bundle, run_labels, update_from_bundle, Chore,
        RunVolume,
    };
    use std::path::{Path, PathBuf};

    let Some((host, engine, image)) = second_engine("second_engine_volumes").await else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let (_dir, ws) = caller_repo();
    let git = |args: &[&str]| flowerbox_testkit::git_with_identity(&ws, args);
    let base = git(&["rev-parse", "HEAD"]).trim().to_string();
    let repo = open_workspace_repo(&ws).unwrap();
    let out = write_bundle(&repo.open().unwrap(), &["refs/heads/main"]).unwrap();

    let run_id = format!("remote-volumes-{tag}");
    let volume = RunVolume::create(
        &engine,
        &run_id,
        &ws,
        "workspace",
        &Owner::current().unwrap(),
    )
    .await
    .unwrap();
    let _guard = OnEngine {
        host: host.clone(),
        container: format!("fbx-none-{tag}"),
        volume: volume.name.clone(),
    };
    let labelled = engine
        .docker()
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: Some([("label".to_string(), vec![format!("flowerbox.run={run_id}")])].into()),
        }))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default();
    assert_eq!(labelled.len(), 1);
    let labels = &labelled[0].labels;
    assert!(labels.contains_key("flowerbox.owner.pid"), "{labels:?}");
    assert_eq!(labels["flowerbox.workspace"], ws.to_string_lossy());

    let at = PathBuf::from(format!("/fbx-remote-volumes-{tag}"));
    let there = at.join("ws");
    let chore = Chore {
        engine: &engine,
        image: &image,
        user: "0:0",
        mounts: vec![volume.mount(&at)],
        labels: run_labels(&run_id, &ws, &Owner::current().unwrap()),
    };
    fill_from_bundle(&chore, &there, &out, "main")
        .await
        .unwrap();
    // A worker's worktree there, and its commit, as its container would make it.
    let branch = "flower/r1/worker-1";
    let worktree = at.join("worktrees/worker-1");
    add_worktree(&chore, &there, &worktree, branch, &base)
        .await
        .unwrap();
    let commit = format!(
        "cd {} && cat a.txt && echo engine > made.txt && git add made.txt \
         && git -c user.name=W -c user.email=w@example.invalid commit -qm made",
        worktree.display()
    );
    chore.run(&commit, &[], None).await.unwrap();
    let back = branch_bundle(&chore, &there, branch, &base, MAX_BUNDLE)
        .await
        .unwrap();
    let moved = receive(&repo, &back, branch, Policy::Follow).unwrap();
    let Adopted::Moved { from: None, to } = moved else {
        panic!("{moved:?}")
    };
    let r = repo.open().unwrap();
    let tree = r.find_commit(to).unwrap().tree().unwrap();
    let made = tree.get_name("made.txt").unwrap().to_object(&r).unwrap();
    assert_eq!(made.as_blob().unwrap().content(), b"engine\n");
    assert_eq!(
        r.find_commit(to).unwrap().parent_id(0).unwrap().to_string(),
        base
    );
    // The caller's branch and files are as they were, until flowerbox integrates.
    assert_eq!(git(&["rev-parse", "main"]).trim(), base);
    assert!(!ws.join("made.txt").exists());
    // The worker configured the volume's repository to run its commands in flowerbox's chores.
    let hostile = format!(
        "cd {t} && git config core.fsmonitor 'touch {t}/pwned-fsmonitor; false' \
         && printf '#!/bin/sh\\ntouch {t}/pwned-hook\\n' > .git/hooks/post-checkout \
         && chmod +x .git/hooks/post-checkout",
        t = there.display()
    );
    chore.run(&hostile, &[], None).await.unwrap();
    // Integrated here (a fast-forward, as flowerbox's integration would make it), the caller's
    // branch goes back into the volume: its repository and working tree follow.
    git(&["merge", "-q", "--ff-only", branch]);
    let integrated = write_bundle(&repo.open().unwrap(), &["refs/heads/main"]).unwrap();
    update_from_bundle(&chore, &there, &integrated, "main")
        .await
        .unwrap();
    let check = format!(
        "cd {} && test \"$(git rev-parse main)\" = {to} && grep -q engine made.txt",
        there.display()
    );
    chore.run(&check, &[], None).await.unwrap();
    add_worktree(
        &chore,
        &there,
        &at.join("worktrees/worker-2"),
        "flower/r1/worker-2",
        "main",
    )
    .await
    .unwrap();
    let untouched = format!(
        "test ! -e {t}/pwned-fsmonitor && test ! -e {t}/pwned-hook",
        t = there.display()
    );
    chore.run(&untouched, &[], None).await.unwrap();
    // The same bundle offered as another worker's branch is refused before anything is taken.
    assert!(matches!(
        receive(&repo, &back, "flower/r1/worker-2", Policy::Follow),
        Err(IsolateError::Bundle(_))
    ));

    volume.remove(&engine).await.unwrap();
    let chores = engine
        .docker()
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some([("label".to_string(), vec!["flowerbox.chore".to_string()])].into()),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert!(chores.is_empty(), "{chores:?}");
    assert!(!Path::new(&at).exists());
}

/// `gc` on an engine without the caller's disk: a run volume and a disk probe's container whose
/// owner is dead go; a live owner's volume stays.
#[tokio::test]
async fn gc_removes_dead_runs_volumes_and_probe_containers_on_the_second_engine() {
    use flowerbox::record::owner::Owner;
    use flowerbox::sandbox::docker::gc::gc;
    use flowerbox::sandbox::docker::shared_disk::LABEL_DISK_PROBE;
    use flowerbox::sandbox::docker::volumes::RunVolume;

    let Some((host, engine, image)) = second_engine("second_engine_gc").await else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let live = Owner::current().unwrap();
    let mut dead = live.clone();
    dead.start_ticks += 1;
    let gone = RunVolume::create(&engine, &format!("gc-dead-{tag}"), &ws, "workspace", &dead)
        .await
        .unwrap();
    let kept = RunVolume::create(&engine, &format!("gc-live-{tag}"), &ws, "workspace", &live)
        .await
        .unwrap();
    let _guard = OnEngine {
        host: host.clone(),
        container: format!("fbx-gc-probe-{tag}"),
        volume: kept.name.clone(),
    };
    let mut labels = std::collections::HashMap::from([(
        LABEL_DISK_PROBE.to_string(),
        ws.to_string_lossy().into_owned(),
    )]);
    dead.add_labels(&mut labels);
    let body = ContainerCreateBody {
        image: Some(image.clone()),
        entrypoint: Some(vec!["true".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    let options = bollard::query_parameters::CreateContainerOptions {
        name: Some(format!("fbx-gc-probe-{tag}")),
        ..Default::default()
    };
    engine
        .docker()
        .create_container(Some(options), body)
        .await
        .unwrap();

    let report = gc(&engine, Some(&ws)).await.unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    let removed = report.removed.join("\n");
    assert!(removed.contains(&gone.name), "{report:?}");
    assert!(
        removed.contains(&format!("fbx-gc-probe-{tag}")),
        "{report:?}"
    );
    assert!(report.kept.join("\n").contains(&kept.name), "{report:?}");
    let names: Vec<String> = engine
        .docker()
        .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
        .await
        .unwrap()
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert!(
        names.contains(&kept.name) && !names.contains(&gone.name),
        "{names:?}"
    );
    kept.remove(&engine).await.unwrap();
}

/// The run's files keeper on an engine without the caller's disk: the host's writes into the
/// workbench volume (a note) land there for the agents' containers to see, the judge's content
/// identity of the workspace volume is computed in it and equals this machine's over the same
/// repository, and the workspace it mounts read-only stays so even for a view that claims
/// otherwise (the engine refuses the write). Nothing of it is left.
#[tokio::test]
async fn the_files_keeper_writes_the_workbench_and_reads_the_workspace_on_the_second_engine() {
    use bollard::models::Mount;
    use flowerbox::fsroot::{View, ViewMount};
    use flowerbox::isolate::bundle::write_bundle;
    use flowerbox::isolate::open_workspace_repo;
    use flowerbox::record::owner::Owner;
    use flowerbox::sandbox::docker::remote_files::FilesKeeper;
    use flowerbox::sandbox::docker::volumes::{fill_from_bundle, run_labels, Chore, RunVolume};
    use flowerbox::sandbox::files::{Exclusions, FilesError, LocalFiles, SandboxFiles};
    use flowerbox::sandbox::service::ServiceSource;
    use std::path::PathBuf;

    let Some((host, engine, image)) = second_engine("second_engine_keeper").await else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let (_dir, ws) = caller_repo();
    let owner = Owner::current().unwrap();
    let run_id = format!("keeper-{tag}");
    let _guard = RunOnEngine {
        host,
        run: run_id.clone(),
    };
    let labels = run_labels(&run_id, &ws, &owner);
    let workspace = RunVolume::create(&engine, &run_id, &ws, "workspace", &owner)
        .await
        .unwrap();
    let workbench = RunVolume::create(&engine, &run_id, &ws, "workbench", &owner)
        .await
        .unwrap();
    let at = PathBuf::from(format!("/fbx-keeper-{tag}"));
    let (there, wb) = (at.join("ws"), at.join("wb"));
    let chore = Chore {
        engine: &engine,
        image: &image,
        user: "0:0",
        mounts: vec![workspace.mount(&at.join("ws")), workbench.mount(&wb)],
        labels: labels.clone(),
    };
    let repo = open_workspace_repo(&ws).unwrap();
    let bundle = write_bundle(&repo.open().unwrap(), &["refs/heads/main"]).unwrap();
    fill_from_bundle(&chore, &there.join("repo"), &bundle, "main")
        .await
        .unwrap();
    let read_only = Mount {
        read_only: Some(true),
        ..workspace.mount(&there)
    };
    let keeper = FilesKeeper::start(
        &engine,
        &image,
        &format!("fbx-keeper-{tag}"),
        &ServiceSource::Path(PathBuf::from(env!("CARGO_BIN_EXE_flowerbox"))),
        vec![read_only, workbench.mount(&wb)],
        labels,
        "0:0",
    )
    .await
    .unwrap();
    let files = keeper.files();
    let view = View::new(
        vec![
            ViewMount {
                path: wb.clone(),
                read_only: false,
            },
            // A view that claims the workspace is writable: the mount says no.
            ViewMount {
                path: there.clone(),
                read_only: false,
            },
        ],
        Vec::new(),
    );
    files
        .write(&view, &wb.join("notes/worker-1.md"), b"# note\n".to_vec())
        .await
        .unwrap();
    let seen = chore
        .run(
            &format!("cat {}/notes/worker-1.md", wb.display()),
            &[],
            None,
        )
        .await;
    assert!(seen.is_ok(), "{seen:?}");
    match files
        .write(&view, &there.join("repo/a.txt"), b"changed".to_vec())
        .await
    {
        Err(FilesError::View(e)) => assert!(format!("{e:?}").contains("Io"), "{e:?}"),
        other => panic!("{other:?}"),
    }
    let remote = files
        .identity(&there.join("repo"), &Exclusions::default())
        .await
        .unwrap();
    let local = LocalFiles
        .identity(&ws, &Exclusions::default())
        .await
        .unwrap();
    assert_eq!(remote, local, "{:?}", local.changed(&remote));

    // Its service killed, the next call starts another.
    let kill = "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline)\" in \
                /usr/local/libexec/*) kill -9 ${p#/proc/};; esac; done";
    exec_in(&engine, keeper.container(), kill).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = files
        .identity(&there.join("repo"), &Exclusions::default())
        .await
        .unwrap();
    assert_eq!(again, local);

    keeper.stop(&engine).await;
    workspace.remove(&engine).await.unwrap();
    workbench.remove(&engine).await.unwrap();
    let left = engine
        .docker()
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some([("label".to_string(), vec![format!("flowerbox.run={run_id}")])].into()),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}
