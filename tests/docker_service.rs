//! The exec service on the real engine (issue 17): concurrent commands in one container, each
//! in a process group of its own; frames an agent forges reach nothing; a service the agent kills or
//! stops is a tool error or a timeout, never a hang, and the next command works; garbage from a
//! service is a fallback to a Docker exec per command, never a crash; a timeout kills the whole
//! group through the service; a judge's service runs as the judge, with nothing more.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::service::proto::{self, Hello, Kind};
use flowerbox::sandbox::service::{ServiceSource, SERVICE_PATH};
use flowerbox::sandbox::{Sandbox, SandboxError, SandboxFactory};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn concurrent_commands_share_one_service_each_in_its_own_process_group() {
    let Some(engine) = engine_or_skip("service_concurrent").await else {
        return;
    };
    let run = TestRun::new(&engine, "svc-conc").await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    // Each command waits until all four have started: run one after another, none would end
    // with all four flags seen.
    let cmd = |i: usize| {
        format!(
            "touch flag{i}; n=0; until [ -e flag0 ] && [ -e flag1 ] && [ -e flag2 ] && [ -e flag3 ]; do \
             n=$((n+1)); [ $n -gt 300 ] && exit 99; sleep 0.1; done; \
             echo out{i} $(ps -o sid= -p $$) $(ps -o pgid= -p $$) $$ ${{FLOWERBOX_EXEC:+marked}}; \
             echo err{i} >&2; exit {i}"
        )
    };
    let outs = futures::future::join_all((0..4).map(|i| {
        let sb = sb.clone();
        let ws = run.workspace.clone();
        async move { sb.exec(req(&cmd(i), &ws, Duration::from_secs(60))).await }
    }))
    .await;
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.expect("exec");
        assert_eq!(out.exit_code, Some(i as i64), "{out:?}");
        assert_eq!(out.stderr, format!("err{i}\n"), "{out:?}");
        let f: Vec<&str> = out.stdout.split_whitespace().collect();
        assert_eq!(f.len(), 5, "{out:?}");
        assert_eq!(f[0], format!("out{i}"));
        // Process group leader (killed as one), marked; not in the service's group.
        assert_eq!(f[2], f[3], "{out:?}");
        assert_ne!(f[2], pid.to_string(), "{out:?}");
        assert_eq!(f[4], "marked");
    }
    assert_eq!(service_pid(&sb).await, pid, "one service for all four");
}

#[tokio::test]
async fn frames_an_agent_forges_reach_nothing() {
    let Some(engine) = engine_or_skip("service_forged").await else {
        return;
    };
    let run = TestRun::new(&engine, "svc-forge").await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    // A forged "exit 0" frame for request ids 1..=4, and a garbage header.
    let mut forged = Vec::new();
    for id in 1..=4 {
        forged.extend(proto::encode(
            Kind::Exit,
            id,
            br#"{"code":0,"cut":false,"left":[]}"#,
        ));
    }
    forged.extend([0xff, 0xff, 0xff, 0xff, 7]);
    std::fs::write(run.workspace.join("forged.bin"), &forged).unwrap();
    let attack = format!(
        "for fd in 0 1 2; do \
           if cat forged.bin > /proc/{pid}/fd/$fd; then echo WROTE $fd; fi; \
           if timeout 1 head -c 1 /proc/{pid}/fd/$fd >/dev/null; then echo READ $fd; fi; \
         done 2>/dev/null; \
         cat /proc/{pid}/environ >/dev/null 2>&1 && echo ENVIRON; \
         cat forged.bin; echo; echo still-here; exit 3"
    );
    let out = exec_ok(&*sb, &attack, &run.workspace).await;
    // Forged bytes on the command's own stdout are its output, nothing more.
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert!(out.stdout.ends_with("still-here\n"), "{out:?}");
    // (Listing /proc/<pid>/fd may work for a root agent; opening an entry never does.)
    for got in ["WROTE", "READ", "ENVIRON"] {
        assert!(!out.stdout.contains(got), "{got} through /proc: {out:?}");
    }
    let after = exec_ok(&*sb, "echo fine; exit 5", &run.workspace).await;
    assert_eq!(
        (after.stdout.as_str(), after.exit_code),
        ("fine\n", Some(5))
    );
    assert_eq!(service_pid(&sb).await, pid);
}

#[tokio::test]
async fn a_service_the_agent_kills_or_stops_is_an_error_and_the_next_command_works() {
    let Some(engine) = engine_or_skip("service_killed").await else {
        return;
    };
    let run = TestRun::new(&engine, "svc-kill").await;
    let sb = worker(&run).await;
    let first = service_pid(&sb).await;
    // Killed by its own command: that command's result is lost, said as a tool error.
    let killed = sb
        .exec(req(
            &format!("kill -KILL {first}; sleep 5; echo survived"),
            &run.workspace,
            Duration::from_secs(60),
        ))
        .await;
    assert!(
        matches!(killed, Err(SandboxError::Backend(_))),
        "{killed:?}"
    );
    let out = exec_ok(&*sb, "echo again", &run.workspace).await;
    assert_eq!(out.stdout, "again\n", "{out:?}");
    let second = service_pid(&sb).await;
    assert_ne!(second, first, "a new service");
    // Stopped: the command times out, the silent service is given up and killed, and the
    // next command runs without it.
    let stopped = sb
        .exec(req(
            &format!("kill -STOP {second}; echo stopped"),
            &run.workspace,
            Duration::from_secs(2),
        ))
        .await
        .expect("exec");
    assert!(stopped.timed_out && !stopped.success(), "{stopped:?}");
    let out = exec_ok(&*sb, "echo after-stop; ps -eo pid=,stat=", &run.workspace).await;
    assert!(out.stdout.starts_with("after-stop\n"), "{out:?}");
    assert!(
        !out.stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&second.to_string())),
        "the stopped service is gone: {out:?}"
    );
    assert_eq!(
        sb.exec_service_pid().await,
        None,
        "not restarted after silence"
    );
}

#[tokio::test]
async fn garbage_from_a_service_falls_back_to_an_exec_per_command() {
    let Some(engine) = engine_or_skip("service_garbage").await else {
        return;
    };
    // A "service" that says hello properly (its preamble first), then answers the first
    // request with garbage.
    let mut hello = proto::PREAMBLE.to_vec();
    hello.extend(proto::encode_json(
        Kind::Hello,
        0,
        &Hello {
            version: proto::VERSION,
            pid: 1,
            socket: false,
        },
    ));
    let octal: String = hello.iter().map(|b| format!("\\{b:03o}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-service");
    std::fs::write(
        &fake,
        format!(
            "{FAKE_SERVICE_HEAD}printf '{octal}'\nhead -c 1 >/dev/null\n\
             printf '\\377\\377\\377\\377garbage'\nexec cat >/dev/null\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = TestRun::with(&engine, "svc-garbage", |o| {
        o.exec_service = Some(ServiceSource::Path(fake.clone()));
    })
    .await;
    let said = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = said.clone();
    run.factory
        .on_notice(Arc::new(move |n| sink.lock().unwrap().push(n.to_string())));
    let sb = worker(&run).await;
    assert_eq!(sb.exec_service_pid().await, Some(1), "the fake said hello");
    for i in 0..3 {
        let out = exec_ok(&*sb, &format!("echo run{i}; exit {i}"), &run.workspace).await;
        assert_eq!(out.stdout, format!("run{i}\n"), "{out:?}");
        assert_eq!(out.exit_code, Some(i));
    }
    assert_eq!(
        sb.exec_service_pid().await,
        None,
        "a broken service is not restarted"
    );
    // The slower way is said on screen, once, with why.
    let said = said.lock().unwrap().clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("worker-1 的容器里 exec 服务用不了(exec service frame of"),
        "{said:?}"
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_group_and_escapees_through_the_service() {
    let Some(engine) = engine_or_skip("service_timeout").await else {
        return;
    };
    let run = TestRun::new(&engine, "svc-timeout").await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    let cmd =
        "sleep 2001 & setsid sleep 2002 & (trap '' TERM; sleep 2003) & echo begun; sleep 2004";
    let out = sb
        .exec(req(cmd, &run.workspace, Duration::from_secs(2)))
        .await
        .unwrap();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    assert_eq!(out.stdout, "begun\n");
    let ps = exec_ok(&*sb, "ps -eo args=", &run.workspace).await;
    assert!(
        !ps.stdout.contains("sleep 200"),
        "left running: {}",
        ps.stdout
    );
    assert_eq!(service_pid(&sb).await, pid, "the service lives on");
}

#[tokio::test]
async fn a_judges_service_runs_as_the_judge_with_one_capability_and_a_read_only_binary() {
    let Some(engine) = engine_or_skip("service_judge").await else {
        return;
    };
    let run = TestRun::new(&engine, "svc-judge").await;
    let judge = run
        .factory
        .docker_sandbox(&run.agent("judge-1", Role::Judge, true))
        .await
        .expect("sandbox");
    let pid = service_pid(&judge).await;
    let out = exec_ok(
        &*judge,
        &format!(
            "id -u; grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs)' /proc/{pid}/status; \
             grep CapEff /proc/self/status; \
             : > {SERVICE_PATH} 2>/dev/null && echo WROTE; \
             touch {}/x 2>/dev/null && echo WROTE-WS; true",
            run.workspace.display()
        ),
        &run.workspace,
    )
    .await;
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "65531", "{out:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Uid:") && l.contains("65531")),
        "{out:?}"
    );
    // CAP_DAC_READ_SEARCH (bit 2) only, for the service and for the command.
    let caps: Vec<&&str> = lines.iter().filter(|l| l.starts_with("CapEff:")).collect();
    assert_eq!(caps.len(), 2, "{out:?}");
    assert!(
        caps.iter().all(|l| l.ends_with("0000000000000004")),
        "{out:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("NoNewPrivs:") && l.ends_with('1')),
        "{out:?}"
    );
    assert!(!out.stdout.contains("WROTE"), "{out:?}");
    // The only mount the service adds is its binary, read-only.
    let info = engine
        .docker()
        .inspect_container(&judge.container_id(), None)
        .await
        .unwrap();
    let mounts = info.mounts.unwrap();
    let service: Vec<_> = mounts
        .iter()
        .filter(|m| m.destination.as_deref() == Some(SERVICE_PATH))
        .collect();
    assert_eq!(service.len(), 1);
    assert_eq!(service[0].rw, Some(false));
    assert!(mounts
        .iter()
        .filter(|m| m.typ.as_deref() == Some("bind"))
        .all(|m| m.rw == Some(false)));
}
