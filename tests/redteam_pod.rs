//! Red team, the pod's own processes (its init, `docker-init`, and `sleep`), against the real
//! engine. Agents share the pod's PID namespace; a writing agent without a Landlock domain (no
//! exec service here, so no domain at all) that could trace the pod's `sleep` could run code in
//! it and outlive its own container: into later rounds, past the run's end. The pod runs under
//! a uid no agent has, so a writer under the user's uid and a root writer (no capability) try,
//! from Bash: `PTRACE_ATTACH` and `PTRACE_SEIZE` on each of the pod's processes, opening their
//! `/proc/<pid>/mem` and listing their `/proc/<pid>/root`, and `kill -STOP` and `kill -9`. Every
//! attempt is counted; a single success fails the test, and the pod must live on, its processes
//! running, not stopped. The positive check: the same probe traces the agent's own child.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod box_support;
mod docker_support;

use box_support::{run, Tally};
use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::{Engine, UserIds};
use flowerbox::sandbox::SandboxFactory;
use std::time::Duration;

/// A whole test may take this long.
const BOUND: Duration = Duration::from_secs(300);

/// For each pid given, prints one line per attempt: `OPEN <what> <pid>` when the kernel let it
/// through, `REFUSED <what> <pid> <errno>` when it refused with `EPERM` or `EACCES`, `ODD …`
/// otherwise. `--own` traces a child of its own instead (the probe works).
const PROBE: &str = r#"
import ctypes, errno, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
ATTACH, DETACH, SEIZE = 16, 17, 0x4206
def say(what, pid, err):
    if err is None:
        print("OPEN %s %d" % (what, pid))
    elif err in (errno.EPERM, errno.EACCES):
        print("REFUSED %s %d %d" % (what, pid, err))
    else:
        print("ODD %s %d %d" % (what, pid, err))
def trace(pid, request, what):
    ctypes.set_errno(0)
    if libc.ptrace(request, pid, None, None) == 0:
        if request == ATTACH:
            os.waitpid(pid, getattr(os, "__WALL", 0x40000000))
        libc.ptrace(DETACH, pid, None, None)
        say(what, pid, None)
    else:
        say(what, pid, ctypes.get_errno())
def attempt(what, pid, action):
    try:
        action()
        say(what, pid, None)
    except OSError as e:
        say(what, pid, e.errno)
def mem(pid):
    with open("/proc/%d/mem" % pid, "rb") as f:
        pass
if sys.argv[1] == "--own":
    child = subprocess.Popen(["sleep", "30"])
    trace(child.pid, ATTACH, "ptrace-attach")
    child.kill()
    sys.exit(0)
for pid in map(int, sys.argv[1:]):
    trace(pid, ATTACH, "ptrace-attach")
    trace(pid, SEIZE, "ptrace-seize")
    attempt("mem", pid, lambda: mem(pid))
    attempt("root", pid, lambda: os.listdir("/proc/%d/root/" % pid))
sys.stdout.flush()
"#;

/// The pod's processes as an agent sees them: PID 1 (its init) and the init's `sleep
/// infinity` (an agent container's own `sleep infinity` has no parent in the namespace).
const POD_PIDS: &str =
    "echo 1 $(ps -eo pid=,ppid=,args= | awk '$2 == 1 && $3 == \"sleep\" && $4 == \"infinity\" {print $1}')";

/// The Bash of the attack: the probe on the pod's pids, then `kill -STOP` and `kill -9` of
/// each (`OPEN`/`REFUSED` lines too), then the pod's processes' states.
fn attack(probe: &str) -> String {
    format!(
        "pids=$({POD_PIDS}); echo PIDS $pids\n\
         python3 -c '{probe}' $pids\n\
         for p in $pids; do\n\
           for s in STOP KILL; do\n\
             if kill -$s $p 2>/dev/null; then echo OPEN kill-$s $p; else echo REFUSED kill-$s $p; fi\n\
           done\n\
         done\n\
         sleep 0.3; ps -o pid=,stat=,args= -p \"$(echo $pids | tr ' ' ,)\" | sed 's/^/STATE /'",
        probe = probe.replace('\'', "'\\''")
    )
}

/// The pod's container (role `pod`) of `run` and whether it runs, with its main process's pid.
async fn pod_state(engine: &Engine, run: &TestRun) -> (String, bool, i64) {
    for id in run_containers(engine, &run.run_id).await {
        let info = engine.docker().inspect_container(&id, None).await.unwrap();
        let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get("flowerbox.role").map(String::as_str) == Some("pod") {
            let state = info.state.unwrap_or_default();
            return (
                id,
                state.running == Some(true),
                state.pid.unwrap_or_default(),
            );
        }
    }
    panic!("no pod for {}", run.run_id);
}

/// A writer of a run whose agents run as `user` (without the exec service: no Landlock
/// domain) attacks the pod's processes; none of it gets through and the pod lives on.
async fn writer_cannot_reach_the_pod(user: UserIds, role: Role, test: &str) {
    let Some(engine) = engine_or_skip(test).await else {
        return;
    };
    tokio::time::timeout(BOUND, async {
        let r = TestRun::with(&engine, test, |o| {
            o.user = Some(user);
            o.exec_service = None;
        })
        .await;
        let agent = role.as_str();
        let sb = r.sandbox(agent, role).await;
        let script = format!("python3 -c '{}' --own", PROBE.replace('\'', "'\\''"));
        let own = run(&*sb, &r.workspace, &script).await;
        assert!(own.contains("OPEN ptrace-attach"), "own child:\n{own}");
        let (pod, running, pid) = pod_state(&engine, &r).await;
        assert!(running, "the pod runs before the attack");
        let out = run(&*sb, &r.workspace, &attack(PROBE)).await;
        eprintln!("{out}");
        let pids = out
            .lines()
            .find_map(|l| l.strip_prefix("PIDS "))
            .unwrap_or_else(|| panic!("no pids:\n{out}"));
        assert_eq!(pids.split_whitespace().count(), 2, "init and sleep:\n{out}");
        let mut tally = Tally::default();
        // Per pid: two traces, mem, root, STOP, KILL.
        tally.lines(
            &out,
            "OPEN",
            "REFUSED",
            12,
            &format!("{agent} as {}: ", user.uid),
        );
        assert!(!out.contains("ODD "), "{out}");
        tally.assert_none("red team", "the pod's processes", "");
        // Alive, running, not stopped: same container, same main process.
        let (after, running, pid_after) = pod_state(&engine, &r).await;
        assert!(
            after == pod && running && pid_after == pid,
            "the pod went\n{out}"
        );
        let states: Vec<&str> = out.lines().filter(|l| l.starts_with("STATE ")).collect();
        assert_eq!(states.len(), 2, "{out}");
        assert!(
            states
                .iter()
                .all(|l| !l.split_whitespace().nth(2).unwrap().starts_with('T')),
            "{states:?}"
        );
        // The next command runs in the same container, in the same pod.
        let again = exec_ok(&*sb, "echo still", &r.workspace).await;
        assert_eq!(again.stdout, "still\n", "{again:?}");
        assert!(again.notes.is_empty(), "{again:?}");
        r.factory.teardown().await.unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn a_writer_under_the_users_uid_cannot_trace_enter_or_signal_the_pod() {
    let user = UserIds {
        uid: 4242,
        gid: 4243,
    };
    writer_cannot_reach_the_pod(user, Role::Worker, "rt-pod-user").await;
}

#[tokio::test]
async fn a_root_writer_cannot_trace_enter_or_signal_the_pod() {
    let root = UserIds { uid: 0, gid: 0 };
    writer_cannot_reach_the_pod(root, Role::Once, "rt-pod-root").await;
}
