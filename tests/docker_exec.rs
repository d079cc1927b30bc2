//! Exec on the real engine: labelled containers as the host user, timeouts that leave nothing
//! behind, no zombies, background children that do not hang, capped output, missing programs.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use bollard::query_parameters::StopContainerOptions;
use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{DockerOptions, DockerSandboxFactory, Engine, UserIds};
use flowerbox::sandbox::{AgentBox, Mount, Sandbox, SandboxError, SandboxFactory};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn command_runs_in_labelled_container_and_files_belong_to_the_host_user() {
    let Some(engine) = engine_or_skip("labelled_container").await else {
        return;
    };
    let run = TestRun::new(&engine, "labels").await;
    let sb = run
        .factory
        .docker_sandbox(&run.agent("worker-1", Role::Worker, false))
        .await
        .unwrap();
    let out = exec_ok(
        &*sb,
        "touch made-here && id -u && id -g && echo $HOME && touch $HOME/ok",
        &run.workspace,
    )
    .await;
    assert!(out.success(), "{out:?}");
    let me = UserIds::current();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], me.uid.to_string());
    assert_eq!(lines[1], me.gid.to_string());
    let meta = std::fs::metadata(run.workspace.join("made-here")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (me.uid, me.gid));

    let info = engine
        .docker()
        .inspect_container(&sb.container_id(), None)
        .await
        .unwrap();
    let labels = info.config.as_ref().unwrap().labels.clone().unwrap();
    assert_eq!(labels["flowerbox.run"], run.run_id);
    assert_eq!(labels["flowerbox.agent"], "worker-1");
    assert_eq!(labels["flowerbox.role"], "worker");
    assert_eq!(
        labels["flowerbox.workspace"],
        run.workspace.to_string_lossy()
    );
    assert_eq!(
        labels["flowerbox.owner.pid"],
        std::process::id().to_string()
    );
    assert!(
        labels.contains_key("flowerbox.owner.start") && labels.contains_key("flowerbox.owner.host")
    );
    let hc = info.host_config.unwrap();
    // Docker reports the request (`ALL`), Podman every capability it dropped; the container
    // holds none either way (bounding set empty) and cannot gain any.
    if !engine.kind().is_podman() {
        assert_eq!(hc.cap_drop.clone().unwrap(), ["ALL"]);
    }
    let status = exec_ok(
        &*sb,
        "grep -E '^(CapBnd|CapEff|NoNewPrivs)' /proc/self/status",
        &run.workspace,
    )
    .await;
    assert!(
        status.stdout.contains("CapBnd:\t0000000000000000"),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("CapEff:\t0000000000000000"),
        "{}",
        status.stdout
    );
    assert!(
        status.stdout.contains("NoNewPrivs:\t1"),
        "{}",
        status.stdout
    );
    assert!(hc
        .security_opt
        .unwrap()
        .contains(&"no-new-privileges".to_string()));
    assert!(hc.pids_limit.unwrap() > 0 && hc.memory.unwrap() > 0);
    assert!(hc.pid_mode.unwrap().starts_with("container:"));
    // The mount keeps its host path (spaces and non-ASCII included).
    let mounts = info.mounts.unwrap();
    assert!(mounts
        .iter()
        .any(|m| m.destination.as_deref() == Some(&*run.workspace.to_string_lossy())));
}

/// A factory of run `prefix` whose agents run as 4242:4243 (ids the image has no entry for),
/// and a writer's box over `ws`.
async fn writer_as_4242(
    engine: &Engine,
    ws: &std::path::Path,
    prefix: &str,
) -> (DockerSandboxFactory, AgentBox) {
    let mut opts = DockerOptions::new(run_id(prefix), ws);
    opts.image = Some(agent_image(engine).await);
    opts.show_progress = false;
    opts.user = Some(UserIds {
        uid: 4242,
        gid: 4243,
    });
    let factory = DockerSandboxFactory::connect(opts).await.unwrap();
    let spec = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.to_path_buf(), false)],
        masked: Vec::new(),
        workdir: ws.to_path_buf(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    };
    (factory, spec)
}

/// Issue 32: a writing agent's passwd and group are read-only bind mounts of files beside the
/// exec service's private copy (no upload into the container before its start): they name the
/// agent, nothing in the container can change them, and their host files lie in a private
/// directory outside every mount of the agent.
#[tokio::test]
async fn a_writers_passwd_is_a_read_only_mount_from_a_private_directory() {
    let Some(engine) = engine_or_skip("passwd_mount").await else {
        return;
    };
    let (_dir, ws) = odd_workspace();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (factory, spec) = writer_as_4242(&engine, &ws, "etc").await;
    let sb = factory.docker_sandbox(&spec).await.unwrap();
    let out = exec_ok(
        &*sb,
        "grep -c ':x:4242:4243:' /etc/passwd; grep -c ':x:4243:' /etc/group; \
         for f in /etc/passwd /etc/group; do \
           (echo x >> $f) 2>/dev/null && echo WROTE || echo refused; \
           grep \" $f \" /proc/self/mountinfo | awk '{print $6}' | cut -d, -f1; \
         done",
        &ws,
    )
    .await;
    let info = engine
        .docker()
        .inspect_container(&sb.container_id(), None)
        .await
        .unwrap();
    factory.teardown().await.unwrap();
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let mounts = info.mounts.unwrap();
    if engine.kind().is_podman() {
        // Podman's own passwd would hide a mounted one: uploaded there, as before (whether
        // Podman then mounts a file of its own is its business).
        assert_eq!(
            [lines[0], lines[1], lines[2]],
            ["1", "1", "refused"],
            "{out:?}"
        );
        assert!(
            lines.contains(&"refused") && !out.stdout.contains("WROTE"),
            "{out:?}"
        );
        assert!(
            mounts
                .iter()
                .all(|m| m.destination.as_deref() != Some("/etc/passwd")),
            "{mounts:?}"
        );
        return;
    }
    assert_eq!(
        lines,
        ["1", "1", "refused", "ro", "refused", "ro"],
        "{out:?}"
    );
    for target in ["/etc/passwd", "/etc/group"] {
        let m = mounts
            .iter()
            .find(|m| m.destination.as_deref() == Some(target))
            .unwrap_or_else(|| panic!("no mount at {target}: {mounts:?}"));
        assert_eq!(m.rw, Some(false), "{m:?}");
        let source = std::path::PathBuf::from(m.source.clone().unwrap());
        assert!(!source.starts_with(&ws), "{source:?}");
        let dir = source.parent().unwrap();
        // The directory went with the run (its copy of the service is discarded at teardown).
        assert!(!dir.exists(), "{dir:?} outlived the run");
    }
}

#[tokio::test]
async fn another_uid_gets_a_passwd_entry_home_and_git_safe_directory() {
    let Some(engine) = engine_or_skip("another_uid").await else {
        return;
    };
    let (_dir, ws) = odd_workspace();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A repository owned by someone else: git refuses it unless safe.directory allows it.
    let git = |args: &[&str]| {
        assert!(std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap()
            .status
            .success())
    };
    git(&["init", "-q"]);
    let (factory, spec) = writer_as_4242(&engine, &ws, "uid").await;
    let sb = factory.sandbox(&spec).await.unwrap();
    let out = exec_ok(
        &*sb,
        "whoami && echo $HOME && touch $HOME/x && touch f && git status --short >/dev/null && echo git-ok \
         && git config gc.auto && git config gc.worktreePruneExpire",
        &ws,
    )
    .await;
    factory.teardown().await.unwrap();
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        !lines[0].is_empty() && !lines[0].contains("I have no name"),
        "{lines:?}"
    );
    assert!(lines[1].starts_with('/'));
    assert_eq!(&lines[2..], ["git-ok", "0", "never"]);
    let meta = std::fs::metadata(ws.join("f")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4242, 4243));
}

#[tokio::test]
async fn exec_timeout_leaves_no_process_behind() {
    let Some(engine) = engine_or_skip("exec_timeout").await else {
        return;
    };
    let run = TestRun::new(&engine, "timeout").await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    let started = Instant::now();
    let cmd =
        "sleep 1001 & setsid sleep 1002 & (trap '' TERM; sleep 1003) & echo begun; sleep 1004";
    let out = sb
        .exec(req(cmd, &run.workspace, Duration::from_secs(2)))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        out.timed_out && !out.success() && out.exit_code.is_none(),
        "{out:?}"
    );
    assert_eq!(out.stdout.trim(), "begun");
    let ps = exec_ok(&*sb, "ps -eo args", &run.workspace).await;
    for n in 1001..=1004 {
        assert!(
            !ps.stdout.contains(&format!("sleep {n}")),
            "sleep {n} survived:\n{}",
            ps.stdout
        );
    }
}

#[tokio::test]
async fn timeout_with_the_pids_limit_exhausted_still_leaves_nothing() {
    let Some(engine) = engine_or_skip("pids_exhausted").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = TestRun::with(&engine, "pids", |o| o.limits.pids = 40).await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    let cmd = "for i in $(seq 100); do sleep 3001 & done 2>/dev/null; sleep 3002";
    let out = sb
        .exec(req(cmd, &run.workspace, Duration::from_secs(3)))
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    eprintln!("notes: {:?}", out.notes);
    let ps = exec_ok(&*sb, "ps -eo args", &run.workspace).await;
    assert!(ps.success(), "{ps:?}");
    assert!(!ps.stdout.contains("sleep 300"), "{}", ps.stdout);
}

#[tokio::test]
async fn cancellation_kills_the_command() {
    let Some(engine) = engine_or_skip("cancellation").await else {
        return;
    };
    let run = TestRun::new(&engine, "cancel").await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    let r = req("sleep 2001", &run.workspace, Duration::from_secs(120));
    let cancel = r.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        cancel.cancel();
    });
    let out = sb.exec(r).await.unwrap();
    assert!(
        out.interrupted && !out.timed_out && !out.success(),
        "{out:?}"
    );
    let ps = exec_ok(&*sb, "ps -eo args", &run.workspace).await;
    assert!(!ps.stdout.contains("sleep 2001"), "{}", ps.stdout);
}

#[tokio::test]
async fn fifty_background_sleeps_leave_no_zombie_and_containers_stop_quickly() {
    let Some(engine) = engine_or_skip("zombies").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = TestRun::new(&engine, "zombies").await;
    let sb = run
        .factory
        .docker_sandbox(&run.agent("worker-1", Role::Worker, false))
        .await
        .unwrap();
    for _ in 0..50 {
        let out = exec_ok(&*sb, "sh -c 'sleep 1 &'", &run.workspace).await;
        assert!(out.success(), "{out:?}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ps = exec_ok(&*sb, "ps -eo stat,pid,args", &run.workspace).await;
    let zombies: Vec<&str> = ps.stdout.lines().filter(|l| l.starts_with('Z')).collect();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
    // Stop uses the container's own stop timeout (1 s), not Docker's 10 s default.
    for id in run.factory.container_ids() {
        let started = Instant::now();
        engine
            .docker()
            .stop_container(&id, None::<StopContainerOptions>)
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "stop took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn background_child_holding_stdout_does_not_hang_and_stays_visible_in_the_pod() {
    let Some(engine) = engine_or_skip("background_child").await else {
        return;
    };
    let run = TestRun::new(&engine, "background").await;
    let worker = run.sandbox("worker-1", Role::Worker).await;
    let started = Instant::now();
    let out = worker
        .exec(req(
            "python3 -m http.server 8765 & echo started",
            &run.workspace,
            Duration::from_secs(120),
        ))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert!(!out.timed_out && out.exit_code == Some(0), "{out:?}");
    assert!(out.stdout.contains("started"), "{out:?}");
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("background") && n.contains("http.server")),
        "{:?}",
        out.notes
    );
    // A judge in the same pod sees the process and reaches the server.
    let judge = run
        .factory
        .sandbox(&run.agent("judge-1", Role::Judge, true))
        .await
        .unwrap();
    let probe = exec_ok(
        &*judge,
        "sleep 3; for i in $(seq 50); do curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8765/ && break; sleep 0.1; done; \
         echo; ps -eo args | grep -c '[h]ttp.server'; ulimit -n; touch judged 2>/dev/null || echo read-only",
        &run.workspace,
    )
    .await;
    let lines: Vec<&str> = probe.stdout.lines().collect();
    assert_eq!(lines, ["200", "1", "1024", "read-only"], "{probe:?}");
}

#[tokio::test]
async fn large_and_binary_output_is_capped_without_panic() {
    let Some(engine) = engine_or_skip("large_output").await else {
        return;
    };
    let run = TestRun::new(&engine, "output").await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    let spill = tempfile::tempdir().unwrap();
    let mut r = req(
        "head -c 10485760 /dev/zero | tr '\\0' a; echo tail-marker",
        &run.workspace,
        Duration::from_secs(120),
    );
    r.output_cap = 64 * 1024;
    r.spill_dir = Some(spill.path().to_path_buf());
    let out = sb.exec(r).await.unwrap();
    assert!(
        out.success() && out.truncated,
        "{:?}",
        (out.exit_code, out.truncated, &out.notes)
    );
    assert_eq!(
        out.total_bytes,
        10 * 1024 * 1024 + "tail-marker\n".len() as u64
    );
    assert!(out.stdout.len() < 70 * 1024);
    assert!(out.stdout.trim_end().ends_with("tail-marker"));
    let full = out.full_output.expect("spilled");
    assert_eq!(std::fs::metadata(full).unwrap().len(), out.total_bytes);
    assert_eq!(out.full_output_omitted, 0, "10 MB fit the spill file whole");

    // Beyond the spill file's 64 MiB: head and tail kept (the end is where the error is), the
    // gap counted and named.
    let mut r = req(
        "head -c 104857600 /dev/zero | tr '\\0' a; echo the-very-end",
        &run.workspace,
        Duration::from_secs(120),
    );
    r.output_cap = 64 * 1024;
    r.spill_dir = Some(spill.path().to_path_buf());
    let out = sb.exec(r).await.unwrap();
    assert!(out.success() && out.truncated, "{:?}", out.notes);
    let full = std::fs::read(out.full_output.as_ref().expect("spilled")).unwrap();
    assert!(full.len() as u64 <= flowerbox::sandbox::output::FULL_OUTPUT_LIMIT);
    assert!(full.ends_with(b"the-very-end\n"));
    assert!(
        out.full_output_omitted > 36 * 1024 * 1024,
        "{}",
        out.full_output_omitted
    );
    let (text, _) = flowerbox::agent::tools::format_bash_output(&out);
    assert!(text.contains("落盘文件也有上限"), "{text}");
    assert!(text.contains("the-very-end"), "{text}");

    let mut r = req(
        "head -c 3000000 /dev/urandom; head -c 300000 /dev/urandom >&2",
        &run.workspace,
        Duration::from_secs(120),
    );
    r.output_cap = 8 * 1024;
    let out = sb.exec(r).await.unwrap();
    assert!(out.success() && out.truncated);
    assert_eq!(out.total_bytes, 3_300_000);
    assert!(out.stdout.len() < 40 * 1024 && out.stderr.len() < 40 * 1024);
}

#[tokio::test]
async fn missing_program_is_reported_and_exit_codes_are_real() {
    let Some(engine) = engine_or_skip("missing_program").await else {
        return;
    };
    let run = TestRun::new(&engine, "missing").await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    let out = exec_ok(&*sb, "frobnicate --now", &run.workspace).await;
    assert_eq!(out.exit_code, Some(127));
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("frobnicate") && n.contains("not found in the image")),
        "{out:?}"
    );
    let out = exec_ok(&*sb, "sleep 0.3; exit 3", &run.workspace).await;
    assert_eq!(out.exit_code, Some(3));
    assert!(out.notes.is_empty(), "{out:?}");
    let missing = sb
        .missing_tools(&["file", "lsof", "no-such-tool-x"])
        .await
        .unwrap();
    assert_eq!(missing, ["no-such-tool-x"]);
}

#[tokio::test]
async fn a_command_longer_than_one_argument_may_be_runs_in_the_container() {
    let Some(engine) = engine_or_skip("long_command").await else {
        return;
    };
    let run = TestRun::new(&engine, "longcmd").await;
    let sb = run.sandbox("worker-1", Role::Worker).await;
    // 300 KiB: as an exec argument the kernel refuses it (MAX_ARG_STRLEN is 128 KiB).
    let payload = "b".repeat(300 * 1024);
    let cmd = format!("x='{payload}'\necho ${{#x}} $(id -u)\nfrobnicate\nexit 5");
    let out = exec_ok(&*sb, &cmd, &run.workspace).await;
    let uid = flowerbox::sandbox::docker::UserIds::current().uid;
    assert_eq!(out.stdout, format!("{} {uid}\n", 300 * 1024), "{out:?}");
    assert_eq!(out.exit_code, Some(5));
    // The staged file removed itself.
    let left = exec_ok(
        &*sb,
        "ls -A /tmp | grep -c flowerbox-cmd || true",
        &run.workspace,
    )
    .await;
    assert_eq!(left.stdout.trim(), "0", "{left:?}");
}

#[tokio::test]
async fn sandboxes_are_reused_released_and_confined_to_mounts() {
    let Some(engine) = engine_or_skip("reuse_release").await else {
        return;
    };
    let run = TestRun::new(&engine, "reuse").await;
    let a = run
        .factory
        .docker_sandbox(&run.agent("coordinator", Role::Coordinator, true))
        .await
        .unwrap();
    let b = run
        .factory
        .docker_sandbox(&run.agent("coordinator", Role::Coordinator, true))
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let outside = a
        .exec(req(
            "true",
            std::path::Path::new("/etc"),
            Duration::from_secs(5),
        ))
        .await;
    assert!(
        matches!(outside, Err(SandboxError::OutsideMounts(_))),
        "{outside:?}"
    );
    run.factory.release("coordinator").await.unwrap();
    let gone = engine
        .docker()
        .inspect_container(&a.container_id(), None)
        .await;
    assert!(gone.is_err(), "released container still exists");
    let c = run
        .factory
        .docker_sandbox(&run.agent("coordinator", Role::Coordinator, true))
        .await
        .unwrap();
    assert_ne!(c.container_id(), a.container_id());
    run.factory.teardown().await.unwrap();
    assert!(run_containers(&engine, &run.run_id).await.is_empty());
    assert!(matches!(
        run.factory
            .sandbox(&run.agent("x", Role::Worker, false))
            .await,
        Err(SandboxError::ShutDown)
    ));
}

/// A masked directory (the run directory) is an empty read-only tmpfs in the container, also on
/// Podman, whose tmpfs copies the directory's files in unless told not to (found there: the
/// run's `sessions.db` was copied into the mask).
#[tokio::test]
async fn a_masked_directory_is_empty_in_the_container_on_every_engine() {
    let Some(engine) = engine_or_skip("masked_empty").await else {
        return;
    };
    let run = TestRun::new(&engine, "masked").await;
    let runs = run.workspace.join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::fs::write(runs.join("sessions.db"), "the records").unwrap();
    let mut spec = run.agent("worker-1", Role::Worker, false);
    spec.masked = vec![runs.clone()];
    let sb = run.factory.sandbox(&spec).await.unwrap();
    let out = exec_ok(
        &*sb,
        "ls -A runs | wc -l; cat runs/sessions.db; touch runs/planted",
        &run.workspace,
    )
    .await;
    assert_eq!(out.stdout.lines().next(), Some("0"), "{out:?}");
    assert!(!out.stdout.contains("the records"), "{out:?}");
    assert!(!out.success(), "{out:?}");
    assert!(!runs.join("planted").exists());
}
