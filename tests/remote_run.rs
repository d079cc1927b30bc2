//! Runs on an engine that does not share the caller's disk (issue 30 §2), against the second
//! engine `FLOWERBOX_TEST_SECOND_ENGINE` names (`scripts/second-engine.sh start`; `.ci/run`
//! starts one): the Docker factory's remote mode (agent containers on the run's volumes only,
//! a worker's commit integrated), `--isolate`'s placement on the engine's volumes, and the real
//! binary's `go --isolate` and workflows there, `--sandbox docker-remote` or chosen by itself,
//! each container of a run inspected as the engine creates it: volumes only, never a bind.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod flow_support;
mod isogo_support;
mod remote_support;
// Only the engine-API wait of it is used here.
#[allow(dead_code)]
#[path = "docker_support/cleanup.rs"]
mod cleanup;

use flow_support::ScriptedModel;
use futures::StreamExt;
use remote_support::{caller_repo, second_engine, RunOnEngine};
use serde_json::json;
use std::time::Duration;

/// Issue 30 §2, a run's agents on an engine that does not share the caller's disk: the Docker
/// factory in remote mode puts the caller's repository in a volume of the run (a bundle,
/// cloned there), a worker's place in a volume of its own (its own clone, its branch), and
/// every agent container mounts those volumes only. The worker's commands run on the engine's
/// copy (the caller's disk is untouched), its commit comes back as a bundle checked by
/// `isolate::bundle::receive` and is integrated into the caller's repository by flowerbox's
/// integration, the run's workspace volume is brought up to the integration, and a judge's
/// read-only container sees it there and cannot write. A box naming any other path is refused,
/// no container of the run has a bind mount, and the teardown leaves no container or volume.
#[tokio::test]
async fn a_remote_runs_containers_mount_its_volumes_only_and_a_worker_commit_is_integrated() {
    use flowerbox::isolate::bundle::{receive, write_bundle, MAX_BUNDLE};
    use flowerbox::isolate::{integrate, open_workspace_repo, Adopted, Integration, Policy};
    use flowerbox::role::Role;
    use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory};
    use flowerbox::sandbox::{
        AgentBox, ExecRequest, Mount, SandboxError, SandboxFactory, SandboxPolicy, Seat,
    };
    use tokio_util::sync::CancellationToken;

    let Some((host, engine, image)) = second_engine("remote_run_volumes").await else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let run_id = format!("remote-run-{tag}");
    let _guard = RunOnEngine {
        host: host.clone(),
        run: run_id.clone(),
    };
    let (_dir, ws) = caller_repo();
    let git = |args: &[&str]| flowerbox_testkit::git_with_identity(&ws, args);
    let base = git(&["rev-parse", "HEAD"]).trim().to_string();
    let repo = open_workspace_repo(&ws).unwrap();
    let bundle = || write_bundle(&repo.open().unwrap(), &["refs/heads/main"]).unwrap();

    let mut opts = DockerOptions::new(&run_id, &ws);
    opts.docker_host = Some(host.clone());
    opts.image = Some(image.clone());
    opts.show_progress = false;
    opts.remote = true;
    let factory = DockerSandboxFactory::connect(opts).await.unwrap();
    let disk = factory
        .engine_disk()
        .expect("a remote run has an engine disk");
    disk.repository(&ws, "workspace", bundle(), "origin/main", "main")
        .await
        .unwrap();
    let branch = format!("flower/{run_id}/worker-1");
    let place = ws.parent().unwrap().join(format!("wt-{tag}/worker-1"));
    disk.repository(&place, "worker-1", bundle(), &base, &branch)
        .await
        .unwrap();

    let boxed = |agent: &str, role, mounts, workdir: &std::path::Path, policy| AgentBox {
        agent: agent.into(),
        role,
        mounts,
        masked: Vec::new(),
        workdir: workdir.to_path_buf(),
        policy,
    };
    let exec = |command: &str, cwd: &std::path::Path| ExecRequest {
        command: command.into(),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 64 * 1024,
        spill_dir: None,
        cancel: CancellationToken::new(),
    };
    let worker = boxed(
        "worker-1",
        Role::Worker,
        vec![Mount::same(&place, false)],
        &place,
        SandboxPolicy::writer(),
    );
    let sb = factory.sandbox(&worker).await.unwrap();
    let out = sb
        .exec(exec(
            "cat a.txt && git branch --show-current && echo engine > made.txt \
             && git add made.txt && git commit -qm made && git status --porcelain",
            &place,
        ))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, format!("one\n{branch}\n"));
    assert!(
        !place.exists(),
        "nothing of the worker's place is on this machine"
    );
    assert!(!ws.join("made.txt").exists());

    // Back through the checks, then flowerbox's integration into the caller's repository.
    let back = disk
        .branch_back(&place, &branch, &base, MAX_BUNDLE)
        .await
        .unwrap()
        .expect("the worker's commit");
    let moved = receive(&repo, &back, &branch, Policy::Follow).unwrap();
    assert!(
        matches!(moved, Adopted::Moved { from: None, .. }),
        "{moved:?}"
    );
    let merged = integrate(&repo, &branch, "worker-1").unwrap();
    assert!(matches!(merged, Integration::Merged { .. }), "{merged:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "engine\n"
    );
    disk.update(&ws, bundle(), "main").await.unwrap();

    // The judge: the run's workspace volume, read-only, as its own uid.
    let judge = boxed(
        "judge-1",
        Role::Judge,
        vec![Mount::same(&ws, true)],
        &ws,
        SandboxPolicy::read_only(Seat::Judge),
    );
    let jb = factory.sandbox(&judge).await.unwrap();
    let seen = jb
        .exec(exec("cat made.txt; touch judged.txt", &ws))
        .await
        .unwrap();
    assert!(seen.stdout.starts_with("engine\n"), "{seen:?}");
    assert!(!seen.success(), "a read-only mount took a write: {seen:?}");

    // Nothing else of this machine can be mounted.
    let outside = boxed(
        "worker-2",
        Role::Worker,
        vec![Mount::same(&place, false), Mount::same("/etc", true)],
        &place,
        SandboxPolicy::writer(),
    );
    match factory.sandbox(&outside).await {
        Err(SandboxError::NotOnEngine(p)) => assert_eq!(p, std::path::Path::new("/etc")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a box with a host path got a container"),
    }

    // Every container of the run, the pod's included: no bind mount.
    let containers = engine
        .docker()
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some([("label".to_string(), vec![format!("flowerbox.run={run_id}")])].into()),
            ..Default::default()
        }))
        .await
        .unwrap();
    assert!(containers.len() >= 3, "{containers:?}");
    for c in &containers {
        let id = c.id.clone().unwrap();
        let inspected = engine.docker().inspect_container(&id, None).await.unwrap();
        for m in inspected.mounts.unwrap_or_default() {
            assert_ne!(
                m.typ.as_deref(),
                Some("bind"),
                "{:?} has a bind mount: {m:?}",
                c.names
            );
        }
    }

    factory.teardown().await.unwrap();
    let volumes = engine
        .docker()
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: Some([("label".to_string(), vec![format!("flowerbox.run={run_id}")])].into()),
        }))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default();
    assert!(volumes.is_empty(), "{volumes:?}");
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

/// Issue 30 §2, `--isolate`'s placement on an engine that does not share the caller's disk:
/// bound to the run's engine disk, the worktree placement puts the caller's repository in a
/// volume and gives a worker a clone of its own in another (no worktree on this machine); what
/// the worker leaves is committed in its container, its branch comes back checked and is
/// integrated into the caller's branch and files by flowerbox's integration, the run's
/// workspace volume follows (a judge's read-only container sees the file), and closing the
/// placement removes the merged branch. No container of the run has a bind mount.
#[tokio::test]
async fn isolate_on_the_second_engine_integrates_a_workers_clone() {
    use flowerbox::agent::{Placement, WorkerSandbox};
    use flowerbox::fsroot::{View, ViewError, ViewMount};
    use flowerbox::isolate::{IsolateOptions, WorktreePlacement};
    use flowerbox::role::Role;
    use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory};
    use flowerbox::sandbox::files::{
        Access, Contents, Exclusions, FilesError, LocalFiles, SandboxFiles,
    };
    use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, SandboxFactory, SandboxPolicy, Seat};
    use tokio_util::sync::CancellationToken;

    let Some((host, engine, image)) = second_engine("remote_isolate_placement").await else {
        return;
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let run_id = format!("remote-isolate-{tag}");
    let _guard = RunOnEngine {
        host: host.clone(),
        run: run_id.clone(),
    };
    let (_dir, ws) = caller_repo();
    let git = |args: &[&str]| flowerbox_testkit::git_with_identity(&ws, args);
    let base = git(&["rev-parse", "HEAD"]).trim().to_string();
    // Only a name: the workbench lives in a volume of the engine.
    let workbench = ws.parent().unwrap().join(format!(".flower-bench-{tag}"));

    let mut opts = DockerOptions::new(&run_id, &ws);
    opts.docker_host = Some(host.clone());
    opts.image = Some(image.clone());
    opts.show_progress = false;
    opts.remote = true;
    let factory = DockerSandboxFactory::connect(opts).await.unwrap();
    let disk = factory.engine_disk().unwrap();
    let placement = WorktreePlacement::open(IsolateOptions::new(&ws, &workbench)).unwrap();
    placement.bind_run(&run_id);
    placement.bind_engine(disk.clone()).await.unwrap();
    disk.directory(&workbench, "workbench", &["notes", "artifacts"])
        .await
        .unwrap();

    let place = placement.prepare("worker-1").await.unwrap();
    let branch = place.branch.clone().unwrap();
    assert!(!place.workdir.exists(), "no worktree on this machine");
    let worker = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: place.mounts.clone(),
        masked: Vec::new(),
        workdir: place.workdir.clone(),
        policy: SandboxPolicy::writer(),
    };
    let exec = |command: &str, cwd: &std::path::Path| ExecRequest {
        command: command.into(),
        cwd: cwd.to_path_buf(),
        env: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 64 * 1024,
        spill_dir: None,
        cancel: CancellationToken::new(),
    };
    // The file tools: done inside the engine, on the worker's own clone.
    let files = factory.files();
    let mount = |path: &std::path::Path, read_only| ViewMount {
        path: path.to_path_buf(),
        read_only,
    };
    let view = View::new(
        vec![mount(&place.workdir, false), mount(&workbench, false)],
        Vec::new(),
    );
    let (_, existed) = files
        .write(
            &view,
            &place.workdir.join("written.txt"),
            b"tool\n".to_vec(),
        )
        .await
        .unwrap();
    assert!(!existed);
    let (_, a) = files
        .read(&view, &place.workdir.join("a.txt"), Access::Read)
        .await
        .unwrap();
    assert_eq!(a, Contents::File(b"one\n".to_vec()));
    let sb = factory.sandbox(&worker).await.unwrap();
    let bench = workbench.to_string_lossy();
    let out = sb
        .exec(exec(
            &format!("echo engine > made.txt && echo note > {bench}/note.md && git status --short"),
            &place.workdir,
        ))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, "?? made.txt\n?? written.txt\n");

    let report = placement
        .finish(
            "worker-1",
            &place,
            true,
            Some(WorkerSandbox {
                factory: &factory,
                spec: &worker,
            }),
        )
        .await
        .unwrap();
    assert!(report.starts_with("[合入] worker-1 的分支"), "{report}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "engine\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("written.txt")).unwrap(),
        "tool\n"
    );
    assert_ne!(git(&["rev-parse", "main"]).trim(), base);
    assert_eq!(git(&["status", "--porcelain"]).trim(), "");

    // The judge's read-only view: the workspace volume, brought up to the integration.
    let judge = AgentBox {
        agent: "judge-1".into(),
        role: Role::Judge,
        mounts: vec![Mount::same(&ws, true), Mount::same(&workbench, true)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: SandboxPolicy::read_only(Seat::Judge),
    };
    let jb = factory.sandbox(&judge).await.unwrap();
    let seen = jb
        .exec(exec(
            &format!("cat made.txt {bench}/note.md; git log --format=%s -1"),
            &ws,
        ))
        .await
        .unwrap();
    assert!(seen.success(), "{seen:?}");
    assert_eq!(
        seen.stdout,
        format!("engine\nnote\nflowerbox worker-1: 运行 {run_id} 里的改动\n")
    );
    // The judge's file tools: the same volume, read-only; its identity is computed there.
    let judged = View::new(vec![mount(&ws, true)], Vec::new());
    assert!(matches!(
        files.write(&judged, &ws.join("x.txt"), b"x".to_vec()).await,
        Err(FilesError::View(ViewError::ReadOnly(_)))
    ));
    // Once the placement is closed the merged branch is gone here too.
    assert_eq!(placement.close(), Vec::<String>::new());
    assert!(git(&["branch", "--list", &branch]).trim().is_empty());
    let there = files.identity(&ws, &Exclusions::default()).await.unwrap();
    let here = LocalFiles
        .identity(&ws, &Exclusions::default())
        .await
        .unwrap();
    assert_eq!(there, here, "the engine's candidate is the caller's");

    for c in engine
        .docker()
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some([("label".to_string(), vec![format!("flowerbox.run={run_id}")])].into()),
            ..Default::default()
        }))
        .await
        .unwrap()
    {
        let inspected = engine
            .docker()
            .inspect_container(c.id.as_deref().unwrap(), None)
            .await
            .unwrap();
        for m in inspected.mounts.unwrap_or_default() {
            assert_ne!(m.typ.as_deref(), Some("bind"), "{:?}: {m:?}", c.names);
        }
    }
    factory.teardown().await.unwrap();
}

/// Issue 30 §2, the run on the second engine: the real binary, `flowerbox --sandbox
/// docker-remote go --isolate --judge-can-run` against the scripted model (`isolate_go`): the
/// worker writes `hello.sh` in its own clone on the engine, its commit reaches the caller's
/// branch and files through the integration, the judge runs it in its read-only container on
/// the run's workspace volume and the goal is ACHIEVED (exit 0). Every container the run made
/// on the engine (recorded from the engine's events) mounted volumes only, and nothing of the
/// run is left there. Without `--isolate` the same engine is refused with exit 1 before any
/// agent.
#[tokio::test]
async fn go_isolate_reaches_achieved_on_the_second_engine() {
    let Some((host, engine, image)) = second_engine("remote_go_isolate").await else {
        return;
    };
    let p = isogo_support::repo_project();
    let model = ScriptedModel::start(&flow_support::scenario("isolate_go"));
    let base = flowerbox_testkit::git(&p.ws, &["rev-parse", "main"]);
    let ours = format!(
        "flowerbox.workspace={}",
        p.ws.canonicalize().unwrap().display()
    );
    // Every container of a run the engine creates meanwhile, inspected as it is made: its
    // mounts' types and its binds.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let docker = engine.docker().clone();
    let label = ours.clone();
    let watcher = tokio::spawn(async move {
        let mut events = docker.events(Some(bollard::query_parameters::EventsOptions {
            since: None,
            until: None,
            filters: Some(
                [
                    ("type".to_string(), vec!["container".to_string()]),
                    ("event".to_string(), vec!["create".to_string()]),
                    ("label".to_string(), vec![label]),
                ]
                .into(),
            ),
        }));
        while let Some(Ok(e)) = events.next().await {
            let Some(id) = e.actor.and_then(|a| a.id) else {
                continue;
            };
            if let Ok(c) = docker.inspect_container(&id, None).await {
                let hc = c.host_config.unwrap_or_default();
                let types: Vec<String> = hc
                    .mounts
                    .unwrap_or_default()
                    .iter()
                    .map(|m| format!("{:?}", m.typ))
                    .collect();
                let _ = tx.send((
                    c.name.unwrap_or_default(),
                    types,
                    hc.binds.unwrap_or_default(),
                ));
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut go = p.command_in(
        "docker-remote",
        &model,
        &[
            "go",
            "--isolate",
            "--judge-can-run",
            "--timeout",
            "0",
            "写个 hello.sh",
        ],
    );
    go.env("DOCKER_HOST", &host).env("FLOWERBOX_IMAGE", &image);
    // Waited for off the runtime's thread, so the watcher inspects each container in time.
    let child = go.spawn().unwrap();
    let r = tokio::task::spawn_blocking(move || flow_support::finish(child))
        .await
        .unwrap();
    assert_eq!(r.code(), 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(p.ws.join("hello.sh")).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    let log = flowerbox_testkit::git(
        &p.ws,
        &["log", "--format=%s", &format!("{}..main", base.trim())],
    );
    assert!(log.contains("flowerbox worker-1"), "{log}");
    // The judge ran it in its read-only container on the engine and saw it pass.
    let judged = model
        .recorded()
        .iter()
        .flat_map(|body| body["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "judge_run")
        .expect("the judge's command never returned");
    assert_ne!(judged["is_error"], true, "{judged}");
    assert!(
        judged["content"].to_string().contains("hello\\njudged-ok"),
        "{judged}"
    );
    assert!(
        r.out.contains("ACHIEVED") || r.err.contains("ACHIEVED"),
        "{r:?}"
    );
    assert_eq!(
        flowerbox_testkit::git(&p.ws, &["branch", "--list", "flower/*"]),
        ""
    );
    let status = flowerbox_testkit::git(&p.ws, &["status", "--porcelain"]);
    assert_eq!(status, "?? runs/\n", "{status}");

    tokio::time::sleep(Duration::from_millis(500)).await;
    watcher.abort();
    let mut made = Vec::new();
    while let Ok(c) = rx.try_recv() {
        made.push(c);
    }
    let names: Vec<&String> = made.iter().map(|(n, _, _)| n).collect();
    assert!(
        names.iter().any(|n| n.contains("worker-1")) && names.iter().any(|n| n.contains("judge")),
        "{names:?}"
    );
    for (name, types, binds) in &made {
        assert!(binds.is_empty(), "{name}: {binds:?}");
        assert!(
            types.iter().all(|t| t.contains("VOLUME")),
            "{name}: {types:?}"
        );
    }
    // The binary's run returned once its processes were dead; its detached cleanup removes
    // the containers and volumes.
    let left = cleanup::once_cleaned_async(|| async {
        engine
            .docker()
            .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some([("label".to_string(), vec![ours.clone()])].into()),
                ..Default::default()
            }))
            .await
            .unwrap()
    })
    .await;
    assert!(left.is_empty(), "{left:?}");
    let volumes = cleanup::once_cleaned_async(|| volumes_labelled(&engine, &ours)).await;
    assert!(volumes.is_empty(), "{volumes:?}");

    let refused = p
        .command_in("docker", &model, &["go", "写个 hello.sh"])
        .env("DOCKER_HOST", &host)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--isolate"));
    let once = p
        .command_in("docker-remote", &model, &["once", "-t", "Bash", "写个文件"])
        .env("DOCKER_HOST", &host)
        .env("FLOWERBOX_IMAGE", &image)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&once.stderr);
    assert_eq!(once.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--isolate"), "{stderr}");
}

/// Issue 30 §2, the automatic choice: the default `--sandbox docker` on an engine reached over
/// TCP that does not see the workspace runs `go --isolate` in the remote mode (saying so)
/// instead of refusing it: the worker's `hello.sh` arrives through the integration, exit 0,
/// and nothing of the run is left on the engine.
#[tokio::test]
async fn the_default_sandbox_chooses_the_remote_mode_on_the_second_engine() {
    let Some((host, engine, image)) = second_engine("remote_auto").await else {
        return;
    };
    let p = isogo_support::repo_project();
    let model = ScriptedModel::start(&flow_support::scenario("isolate_go"));
    let mut go = p.command_in(
        "docker",
        &model,
        &[
            "go",
            "--isolate",
            "--judge-can-run",
            "--timeout",
            "0",
            "写个 hello.sh",
        ],
    );
    go.env("DOCKER_HOST", &host).env("FLOWERBOX_IMAGE", &image);
    let child = go.spawn().unwrap();
    let r = tokio::task::spawn_blocking(move || flow_support::finish(child))
        .await
        .unwrap();
    assert_eq!(r.code(), 0, "{r:?}");
    assert!(
        format!("{}{}", r.out, r.err).contains("这次用 docker-remote"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(p.ws.join("hello.sh")).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    let ours = format!(
        "flowerbox.workspace={}",
        p.ws.canonicalize().unwrap().display()
    );
    // The run's detached cleanup removes its volumes after the binary returned.
    let left = cleanup::once_cleaned_async(|| volumes_labelled(&engine, &ours)).await;
    assert!(left.is_empty(), "{left:?}");
}

/// A tool result that spills on a remote run: the spill file goes into the workbench's volume
/// too, so the agent's own commands (and its `Read`) find it where the pointer says; and the
/// notes flowerbox writes (the goal) are in the volume for the step's agents.
#[tokio::test]
async fn a_spilled_result_is_in_the_engines_workbench() {
    let Some((host, _engine, image)) = second_engine("remote_spill").await else {
        return;
    };
    let p = isogo_support::repo_project();
    let wb = p.ws.parent().unwrap().join(".flower-proj");
    let mut scenario = flow_support::scenario("isolate_go");
    for agent in scenario["agents"].as_array_mut().unwrap() {
        if agent["role"] == "worker" {
            agent["turns"] = json!([
                {"content": [{"type": "tool_use", "name": "Bash", "id": "big",
                              "input": {"command": "seq 3000"}}]},
                {"content": [{"type": "tool_use", "name": "Bash", "id": "look",
                              "input": {"command": format!(
                                  "cat {w}/spill/*.txt | tail -n 1; test -s {w}/notes/目标.md && echo goal-there; \
                                   printf '#!/bin/sh\\necho hello\\n' > hello.sh && chmod +x hello.sh",
                                  w = wb.display())}}]},
                {"content": [{"type": "text", "text": "结论:写好了\n依据:看到了\n产出:hello.sh\n未验证:无"}]}
            ]);
        }
    }
    let model = ScriptedModel::start(&scenario);
    let mut go = p.command_in(
        "docker-remote",
        &model,
        &["go", "--isolate", "--timeout", "0", "写个 hello.sh"],
    );
    go.env("DOCKER_HOST", &host).env("FLOWERBOX_IMAGE", &image);
    let child = go.spawn().unwrap();
    let r = tokio::task::spawn_blocking(move || flow_support::finish(child))
        .await
        .unwrap();
    assert_eq!(r.code(), 0, "{r:?}");
    let result = |id: &str| {
        model
            .recorded()
            .iter()
            .flat_map(|body| body["messages"].as_array().cloned().unwrap_or_default())
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}"))["content"]
            .to_string()
    };
    assert!(result("big").contains("已落盘到"), "{}", result("big"));
    assert!(result("look").starts_with("\"3000"), "{}", result("look"));
    // The goal flowerbox wrote here was copied into the workbench's volume before the step.
    assert!(result("look").contains("goal-there"), "{}", result("look"));
}

/// A workflow file with `isolate = true` on the second engine (`run`, the default sandbox,
/// which picks the remote mode): the worker's `hello.sh` arrives through the integration; the
/// same workflow without `isolate` stops before any agent with exit 1.
#[tokio::test]
async fn a_workflow_with_isolate_runs_on_the_second_engine_and_one_without_is_refused() {
    let Some((host, _engine, image)) = second_engine("remote_workflow").await else {
        return;
    };
    let p = isogo_support::repo_project();
    let flows = p.ws.parent().unwrap().join("flows.toml");
    let write = |isolate: bool| {
        std::fs::write(
            &flows,
            format!(
                "[main]\nisolate = {isolate}\n[[main.steps]]\nname = \"干活\"\nrole = \"coordinator\"\nprompt = \"写个 hello.sh\"\n"
            ),
        )
        .unwrap();
    };
    let model = ScriptedModel::start(&json!({"agents": [
        {"role": "coordinator", "turns": [
            {"content": [{"type": "tool_use", "name": "Agent", "input": {
                "description": "写 hello.sh", "prompt": "写出 hello.sh", "subagent_type": "coder"}}]},
            {"content": [{"type": "text", "text": "好了。"}]}]},
        {"role": "worker", "turns": [
            {"content": [{"type": "tool_use", "name": "Bash", "input": {"command":
                "printf 'echo hello\\n' > hello.sh && git rev-parse --abbrev-ref HEAD"}}]},
            {"content": [{"type": "text", "text": "结论:写好了\n依据:无\n产出:hello.sh\n未验证:无"}]}]}]}));
    let target = format!("{}:main", flows.display());
    let run = |isolate: bool| {
        write(isolate);
        let mut c = p.command_in("docker", &model, &["run", &target]);
        c.env("DOCKER_HOST", &host).env("FLOWERBOX_IMAGE", &image);
        c.output().unwrap()
    };
    let refused = run(false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--isolate"), "{stderr}");
    assert!(!p.ws.join("hello.sh").exists());

    let ran = run(true);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(p.ws.join("hello.sh")).unwrap(),
        "echo hello\n"
    );
    assert_eq!(
        flowerbox_testkit::git(&p.ws, &["branch", "--list", "flower/*"]),
        ""
    );
}

/// The pod's fence on an engine that does not share the caller's disk refuses the *engine
/// host's* addresses (README threat model "the host is unreachable from agents"): the second
/// engine's own address (its container's on the caller's engine, which the caller's machine
/// does not have) is learned from the engine, and an agent of a remote run cannot connect to a
/// listener in the engine host's network namespace there, although `--allow-net` opens that
/// address's range (without the engine's addresses in the fence it would connect; an
/// unfenced container of the engine does).
#[tokio::test]
async fn a_remote_runs_agents_cannot_reach_the_engine_hosts_own_address() {
    use flowerbox::role::Role;
    use flowerbox::sandbox::docker::{engine_host, DockerOptions, DockerSandboxFactory};
    use flowerbox::sandbox::egress::{parse_net, EgressPolicy, HostAddrs};
    use flowerbox::sandbox::{AgentBox, ExecRequest, Mount, SandboxFactory, SandboxPolicy, Seat};
    use std::net::IpAddr;
    use tokio_util::sync::CancellationToken;

    let Some((host, engine, image)) = second_engine("remote_run_fence").await else {
        return;
    };
    // The second engine's address, as the caller's engine (which runs it) gave it.
    let inspected = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
            "flowerbox-second-engine",
        ])
        .env_remove("DOCKER_HOST")
        .output()
        .unwrap();
    assert!(inspected.status.success(), "{inspected:?}");
    let engine_ip: IpAddr = String::from_utf8(inspected.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .expect("the second engine's address")
        .parse()
        .unwrap();
    assert!(
        !HostAddrs::discover().contains(engine_ip),
        "{engine_ip} is the caller's own address: no test of the engine host's"
    );

    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let run_id = format!("remote-fence-{tag}");
    let _guard = RunOnEngine {
        host: host.clone(),
        run: run_id.clone(),
    };
    let labels = std::collections::HashMap::from([("flowerbox.run".to_string(), run_id.clone())]);
    let learned = engine_host::learn(&engine, &image, labels.clone())
        .await
        .unwrap();
    assert!(
        learned.contains(engine_ip),
        "{engine_ip} not in {learned:?}"
    );
    // Not learned (here: no image to learn them with) is a typed refusal, never an empty set.
    match engine_host::learn(&engine, "fbx-no-such-image:none", labels).await {
        Err(e @ flowerbox::sandbox::SandboxError::EngineHostUnknown(_)) => {
            assert!(e.to_string().contains("查不出引擎所在机器的地址"), "{e}")
        }
        other => panic!("{other:?}"),
    }

    // A listener in the engine host's network namespace, and proof that a container of the
    // engine without the fence reaches it.
    let port = 20_000 + u16::from_str_radix(&tag[..4], 16).unwrap() % 20_000;
    let on_engine = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", &host)
            .output()
            .unwrap()
    };
    let label = format!("flowerbox.run={run_id}");
    let listener = on_engine(&[
        "run",
        "-d",
        "--network",
        "host",
        "--read-only",
        "--cap-drop",
        "ALL",
        "-u",
        "65534",
        "--label",
        &label,
        &image,
        "python3",
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "0.0.0.0",
    ]);
    assert!(listener.status.success(), "{listener:?}");
    let url = format!("http://{engine_ip}:{port}/");
    let control = on_engine(&[
        "run", "--rm", "--label", &label, &image, "sh", "-c",
        &format!("for i in $(seq 30); do curl -sS -o /dev/null --max-time 3 {url} && exit 0; sleep 1; done; exit 1"),
    ]);
    assert!(control.status.success(), "unfenced: {control:?}");

    let (_dir, ws) = caller_repo();
    let bundle = {
        let repo = flowerbox::isolate::open_workspace_repo(&ws).unwrap();
        flowerbox::isolate::bundle::write_bundle(&repo.open().unwrap(), &["refs/heads/main"])
            .unwrap()
    };
    let mut opts = DockerOptions::new(&run_id, &ws);
    opts.docker_host = Some(host.clone());
    opts.image = Some(image.clone());
    opts.show_progress = false;
    opts.remote = true;
    opts.egress = EgressPolicy {
        allow_nets: vec![parse_net(&format!("{engine_ip}/16")).unwrap()],
        ..Default::default()
    };
    let factory = DockerSandboxFactory::connect(opts).await.unwrap();
    let disk = factory.engine_disk().expect("an engine disk");
    disk.repository(&ws, "workspace", bundle, "origin/main", "main")
        .await
        .unwrap();
    let judge = AgentBox {
        agent: "judge-1".into(),
        role: Role::Judge,
        mounts: vec![Mount::same(&ws, true)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: SandboxPolicy::read_only(Seat::Judge),
    };
    let sb = factory.sandbox(&judge).await.unwrap();
    let out = sb
        .exec(ExecRequest {
            command: format!("curl -sS -o /dev/null --max-time 5 {url}; echo rc=$?"),
            cwd: ws.clone(),
            env: Vec::new(),
            timeout: Duration::from_secs(60),
            output_cap: 64 * 1024,
            spill_dir: None,
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    assert!(
        out.stdout.contains("rc=") && !out.stdout.contains("rc=0"),
        "the agent reached the engine host: {out:?}"
    );
    factory.teardown().await.unwrap();
}

/// The engine's volumes carrying `label` (`key=value`).
async fn volumes_labelled(
    engine: &flowerbox::sandbox::docker::Engine,
    label: &str,
) -> Vec<bollard::models::Volume> {
    engine
        .docker()
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions {
            filters: Some([("label".to_string(), vec![label.to_string()])].into()),
        }))
        .await
        .unwrap()
        .volumes
        .unwrap_or_default()
}
