//! The exec service's frames over the host's Unix socket on the local engine (issue 32): a
//! Bash call goes over it; a command that connects to the socket (it can see it, read-only)
//! cannot become the channel nor inject a frame, and the real service keeps working, restarts
//! included; a command can neither replace nor remove the socket, nor read the service's stdin
//! where the token travels, and a listener it puts in the socket's place learns nothing;
//! teardown removes the socket.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;

use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::DockerSandbox;
use flowerbox::sandbox::service::channel::SOCKET_PATH;
use flowerbox::sandbox::service::proto::{self, Kind};
use flowerbox::sandbox::{Sandbox, SandboxFactory};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

/// The host end of the socket mounted into `sb`'s container: its mount's source, after
/// checking the mount is read-only.
async fn host_socket(engine: &flowerbox::sandbox::docker::Engine, sb: &DockerSandbox) -> PathBuf {
    let info = engine
        .docker()
        .inspect_container(&sb.container_id(), None)
        .await
        .unwrap();
    let mounts = info.mounts.unwrap();
    let socket: Vec<_> = mounts
        .iter()
        .filter(|m| m.destination.as_deref() == Some(SOCKET_PATH))
        .collect();
    assert_eq!(socket.len(), 1, "{mounts:?}");
    assert_eq!(socket[0].rw, Some(false), "mounted read-only");
    PathBuf::from(socket[0].source.clone().unwrap())
}

/// A Python script (to run in the container): connects to the socket with each opening in
/// `tries` (hex) and prints, per try, how it ended: `closed` (the host hung up),
/// `refused:<error>` (no listener) or `got:<hex>` (the host answered: a failure).
fn knock(tries: &[Vec<u8>], repeat: usize) -> String {
    let list: Vec<String> = tries.iter().map(|t| format!("'{}'", hex(t))).collect();
    let script = r#"import socket
tries = [bytes.fromhex(t) for t in [LIST]] * REPEAT
for first in tries:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('PATH')
    except OSError as e:
        print('refused:' + type(e).__name__)
        continue
    try:
        s.sendall(first)
        s.settimeout(20)
        got = s.recv(100)
        print('closed' if got == b'' else 'got:' + got.hex())
    except (ConnectionResetError, BrokenPipeError):
        print('closed')
    except OSError as e:
        print('err:' + type(e).__name__)
    s.close()"#;
    script
        .replace("LIST", &list.join(", "))
        .replace("REPEAT", &repeat.to_string())
        .replace("PATH", SOCKET_PATH)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Openings an agent might try: a random token's, the magic alone with zeros, forged frames
/// (an exit for requests 1..=4, a hello), nothing at all.
fn forgeries() -> Vec<Vec<u8>> {
    let mut opening = b"\0FBXSOCK".to_vec();
    opening.extend(uuid::Uuid::new_v4().as_bytes());
    opening.extend(uuid::Uuid::new_v4().as_bytes());
    let mut zeros = b"\0FBXSOCK".to_vec();
    zeros.extend([0u8; 32]);
    let mut frames = Vec::new();
    for id in 1..=4 {
        frames.extend(proto::encode(
            Kind::Exit,
            id,
            br#"{"code":0,"cut":false,"left":[]}"#,
        ));
    }
    let mut hello = proto::PREAMBLE.to_vec();
    hello.extend(proto::encode(Kind::Hello, 0, br#"{"version":3,"pid":1}"#));
    vec![opening, zeros, frames, hello, Vec::new()]
}

fn assert_all_refused(out: &str) {
    let lines: Vec<&str> = out.lines().collect();
    assert!(!lines.is_empty(), "{out}");
    for l in &lines {
        assert!(
            *l == "closed" || l.starts_with("refused:"),
            "the host answered a connection of the agent's: {out}"
        );
    }
}

#[tokio::test]
async fn a_bash_call_on_the_local_engine_goes_over_the_socket() {
    let Some(engine) = engine_or_skip("socket_bash").await else {
        return;
    };
    let run = TestRun::new(&engine, "sock-bash").await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    assert_eq!(sb.exec_over_socket().await, Some(true));
    let out = exec_ok(&*sb, "echo over; echo err >&2; exit 4", &run.workspace).await;
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str(), out.exit_code),
        ("over\n", "err\n", Some(4)),
        "{out:?}"
    );
    // The same service, still on the socket: the call went over it.
    assert_eq!(service_pid(&sb).await, pid);
    assert_eq!(sb.exec_over_socket().await, Some(true));
    // The host's end: a socket in the run's private directory (0700, outside the workspace),
    // connectable by any uid the container maps.
    let host = host_socket(&engine, &sb).await;
    let meta = std::fs::symlink_metadata(&host).unwrap();
    assert!(meta.file_type().is_socket(), "{host:?}");
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    let dir = host.parent().unwrap();
    assert_eq!(
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert!(!host.starts_with(&run.workspace));
    // A judge (its own uid behind `setpriv`, one capability) gets it too.
    let judge = run
        .factory
        .docker_sandbox(&run.agent("judge-1", Role::Judge, true))
        .await
        .expect("sandbox");
    // Its one capability (`CAP_DAC_READ_SEARCH`) does not open its service's stdin, where
    // the token travels.
    let judge_pid = service_pid(&judge).await;
    let out = exec_ok(
        &*judge,
        &format!(
            "id -u; timeout 1 head -c 1 /proc/{judge_pid}/fd/0 >/dev/null 2>&1 && echo READ; true"
        ),
        &run.workspace,
    )
    .await;
    assert_eq!(out.stdout, "65531\n", "{out:?}");
    assert_eq!(judge.exec_over_socket().await, Some(true));
    let judge_socket = host_socket(&engine, &judge).await;
    assert_ne!(judge_socket, host, "one socket per container");
    // Teardown removes both, and their directory.
    run.factory.teardown().await.unwrap();
    assert!(!host.exists() && !judge_socket.exists());
    assert!(!dir.exists());
}

#[tokio::test]
async fn a_command_that_connects_to_the_socket_cannot_become_the_channel() {
    let Some(engine) = engine_or_skip("socket_attack").await else {
        return;
    };
    let run = TestRun::new(&engine, "sock-attack").await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    assert_eq!(sb.exec_over_socket().await, Some(true));
    // While the service is up: every connection is closed, nothing is read as a frame.
    std::fs::write(run.workspace.join("knock.py"), knock(&forgeries(), 2)).unwrap();
    let out = exec_ok(&*sb, "python3 knock.py", &run.workspace).await;
    assert!(out.success(), "{out:?}");
    assert_all_refused(&out.stdout);
    let after = exec_ok(&*sb, "echo fine; exit 5", &run.workspace).await;
    assert_eq!(
        (after.stdout.as_str(), after.exit_code),
        ("fine\n", Some(5))
    );
    assert_eq!(service_pid(&sb).await, pid);
    assert_eq!(sb.exec_over_socket().await, Some(true));

    // While a restart waits for its service: the command kills the service and leaves a
    // knocker behind that keeps trying while the next command starts a new one.
    // (Out of the command's marker and process group: the kill after the death spares it.)
    std::fs::write(run.workspace.join("knock.py"), knock(&forgeries(), 1)).unwrap();
    let knocker = format!(
        "setsid env -u FLOWERBOX_EXEC sh -c \
           'for i in $(seq 20); do python3 knock.py >> knocks.txt 2>&1; done; echo done >> knocks.txt' \
           </dev/null >/dev/null 2>&1 &\n kill -KILL {pid}; sleep 5"
    );
    let killed = sb
        .exec(req(&knocker, &run.workspace, Duration::from_secs(60)))
        .await;
    assert!(killed.is_err(), "{killed:?}");
    let out = exec_ok(&*sb, "echo again", &run.workspace).await;
    assert_eq!(out.stdout, "again\n", "{out:?}");
    let second = service_pid(&sb).await;
    assert_ne!(second, pid, "restarted");
    assert_eq!(
        sb.exec_over_socket().await,
        Some(true),
        "the restart took it"
    );
    // Wait for the knocker to finish (no clock: its own end line).
    let wait = "until grep -q '^done$' knocks.txt; do sleep 0.2; done; grep -v '^done$' knocks.txt";
    let knocks = exec_ok(&*sb, wait, &run.workspace).await;
    assert_all_refused(&knocks.stdout);
    assert_eq!(
        exec_ok(&*sb, "echo last", &run.workspace).await.stdout,
        "last\n"
    );
    assert_eq!(service_pid(&sb).await, second);
}

#[tokio::test]
async fn a_command_can_neither_replace_nor_remove_the_socket() {
    let Some(engine) = engine_or_skip("socket_replace").await else {
        return;
    };
    // Root in its container: the strongest agent there is.
    let run = TestRun::with(&engine, "sock-replace", |o| {
        o.user = Some(flowerbox::sandbox::docker::UserIds { uid: 0, gid: 0 })
    })
    .await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    let host = host_socket(&engine, &sb).await;
    let inode = std::fs::symlink_metadata(&host).unwrap().ino();
    let s = SOCKET_PATH;
    let attack = format!(
        "rm -f {s} 2>/dev/null && echo REMOVED; \
         : > {s} 2>/dev/null && echo TRUNCATED; \
         ln -sf /tmp {s} 2>/dev/null && echo LINKED; \
         chmod 000 {s} 2>/dev/null && echo CHMOD; \
         touch {s} 2>/dev/null && echo TOUCHED; \
         mv {s} /tmp/moved 2>/dev/null && echo MOVED; \
         mv {s} {s}.x 2>/dev/null && echo RENAMED; \
         python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('{s}')\" 2>/dev/null \
           && echo BOUND; \
         for f in fd/0 fd/1 mem environ; do \
           timeout 1 head -c 1 /proc/{pid}/$f >/dev/null 2>&1 && echo READ-$f; \
         done; \
         stat -c %F {s}"
    );
    let out = exec_ok(&*sb, &attack, &run.workspace).await;
    // (Nor read the service's stdin, where the token travels: it is non-dumpable.)
    assert_eq!(out.stdout, "socket\n", "{out:?}");
    // The host's file is the same socket, never anything the container made.
    let meta = std::fs::symlink_metadata(&host).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.ino(), inode);
    assert_eq!(service_pid(&sb).await, pid);
    assert_eq!(sb.exec_over_socket().await, Some(true));
}

/// An agent that may rename the directory above the mount (root in its container) puts its
/// own listener where the socket was, with the service's binary beside it, and kills the
/// service. The next service connects to it, finds it inside its own PID namespace and writes
/// nothing (the token least of all): the frames keep to the attach, and commands work.
#[tokio::test]
async fn a_listener_a_root_agent_puts_in_the_sockets_place_learns_nothing() {
    let Some(engine) = engine_or_skip("socket_plant").await else {
        return;
    };
    let run = TestRun::with(&engine, "sock-plant", |o| {
        o.user = Some(flowerbox::sandbox::docker::UserIds { uid: 0, gid: 0 })
    })
    .await;
    let sb = worker(&run).await;
    let pid = service_pid(&sb).await;
    assert_eq!(sb.exec_over_socket().await, Some(true));
    let host = host_socket(&engine, &sb).await;
    let dir = std::path::Path::new(SOCKET_PATH)
        .parent()
        .unwrap()
        .display();
    let fake = r#"import socket
l = socket.socket(socket.AF_UNIX)
l.bind('PATH')
l.listen(8)
print('listening', flush=True)
c, _ = l.accept()
c.settimeout(20)
got = b''
try:
    while True:
        b = c.recv(100)
        if not b:
            break
        got += b
except OSError:
    pass
print('read', len(got), flush=True)"#
        .replace("PATH", SOCKET_PATH);
    std::fs::write(run.workspace.join("fake.py"), fake).unwrap();
    let planted = format!(
        "mv {dir} {dir}-moved || exit 8; \
         mkdir -p {dir} && cp {dir}-moved/exec-service {dir}/ || exit 9; \
         setsid env -u FLOWERBOX_EXEC python3 fake.py >fake.txt 2>&1 </dev/null & \
         until grep -q listening fake.txt; do sleep 0.1; done; kill -KILL {pid}; sleep 5"
    );
    let planted = sb
        .exec(req(&planted, &run.workspace, Duration::from_secs(60)))
        .await;
    assert!(planted.is_err(), "the service was killed: {planted:?}");
    let out = exec_ok(&*sb, "echo again; id -u", &run.workspace).await;
    assert_eq!(out.stdout, "again\n0\n", "{out:?}");
    assert_ne!(service_pid(&sb).await, pid, "restarted");
    assert_eq!(
        sb.exec_over_socket().await,
        Some(false),
        "kept to the attach"
    );
    let wait = "until grep -q '^read' fake.txt; do sleep 0.2; done; cat fake.txt";
    let fake = exec_ok(&*sb, wait, &run.workspace).await;
    assert_eq!(fake.stdout, "listening\nread 0\n", "{fake:?}");
    // The host's socket was never touched.
    assert!(std::fs::symlink_metadata(&host)
        .unwrap()
        .file_type()
        .is_socket());
}
