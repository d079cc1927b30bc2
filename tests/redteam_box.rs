//! Red team, the box's bounds (issue 25 §4), against the real engine: a hostile agent tries
//! io_uring in every role's container, a root worker rewrites the pod's `/etc/hosts`,
//! `/etc/resolv.conf` and `/etc/hostname`, a worker asks `--egress proxy` for a listed name on
//! other ports than 80 (plain HTTP) and 443 (CONNECT), and a worker spins every core. Every
//! attempt is counted; a single success fails the test. Positive checks show the probes can
//! succeed: the same io_uring probe works on the host, the network files are readable, the
//! proxy lets a listed name through on 80 and 443 (judged by its decision, so a machine
//! without internet passes), and a busy worker does get its CPU quota.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod box_support;
mod docker_support;

use box_support::{run, Tally};
use docker_support::*;
use flowerbox::role::Role;
use flowerbox::sandbox::docker::UserIds;
use flowerbox::sandbox::egress::{EgressMode, EgressPolicy};
use flowerbox::sandbox::SandboxFactory;
use std::time::Duration;

/// A whole test may take this long.
const BOUND: Duration = Duration::from_secs(300);

/// Tries the three io_uring calls (x86-64 and arm64 share their numbers) and prints one line
/// each: `OPEN <call>` when the kernel answered anything but `EPERM`/`ENOSYS` (the call was
/// reachable: `io_uring_setup` made a ring, the other two got past seccomp to `EBADF`),
/// `REFUSED <call> <errno>` otherwise.
const IO_URING: &str = r#"
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
for name, args in (("io_uring_setup", (425, 8, params)), ("io_uring_enter", (426, -1, 1, 0, 0, None, 0)),
                   ("io_uring_register", (427, -1, 0, None, 0))):
    ctypes.set_errno(0)
    r = libc.syscall(*args)
    e = ctypes.get_errno()
    print(("REFUSED %s %d" % (name, e)) if r < 0 and e in (errno.EPERM, errno.ENOSYS) else ("OPEN %s" % name))
sys.stdout.flush()
"#;

#[tokio::test]
async fn io_uring_is_refused_in_every_role() {
    let Some(engine) = engine_or_skip("redteam io_uring").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        // The probe itself works: on the host (when the kernel allows io_uring at all) the
        // ring is made.
        let host = std::process::Command::new("python3")
            .args(["-c", IO_URING])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let host_disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .is_ok_and(|v| v.trim() != "0");
        if !host_disabled && !host.is_empty() {
            assert!(host.contains("OPEN io_uring_setup"), "host probe:\n{host}");
        }
        let r = TestRun::with(&engine, "rt-uring", |o| {
            o.egress = EgressPolicy {
                mode: EgressMode::None,
                ..Default::default()
            }
        })
        .await;
        let script = format!("python3 -c '{}'", IO_URING.replace('\'', "'\\''"));
        let mut tally = Tally::default();
        for (agent, role, read_only) in [
            ("worker-1", Role::Worker, false),
            ("once", Role::Once, false),
            ("judge-1", Role::Judge, true),
            ("coordinator", Role::Coordinator, true),
        ] {
            let sb = r
                .factory
                .sandbox(&r.agent(agent, role, read_only))
                .await
                .expect("sandbox");
            let out = run(&*sb, &r.workspace, &script).await;
            tally.lines(&out, "OPEN", "REFUSED", 3, &format!("{agent}: "));
        }
        tally.assert_none("redteam box", "io_uring", "");
    })
    .await
    .expect("bounded");
}

/// For each network file: a root worker appends, truncates, replaces it in place (`sed -i`,
/// rename over), changes its mode and remounts it writable; each prints `WROTE <how> <file>`
/// when it worked, then `SUM <file> <sha>` of the content afterwards.
const NET_FILES: &str = r#"
for f in /etc/hosts /etc/resolv.conf /etc/hostname; do
  t=$(mktemp)
  cp "$f" "$t.orig"
  (echo "203.0.113.66 pypi.org" >> "$f") 2>/dev/null && echo "WROTE append $f" || echo "REFUSED append $f"
  (: > "$f") 2>/dev/null && echo "WROTE truncate $f" || echo "REFUSED truncate $f"
  sed -i '1i 203.0.113.66 evil' "$f" 2>/dev/null && echo "WROTE sed-i $f" || echo "REFUSED sed-i $f"
  (echo "nameserver 203.0.113.66" > "$t" && mv -f "$t" "$f") 2>/dev/null && echo "WROTE rename $f" || echo "REFUSED rename $f"
  chmod 666 "$f" 2>/dev/null && echo "WROTE chmod $f" || echo "REFUSED chmod $f"
  mount -o remount,rw "$f" 2>/dev/null && echo "WROTE remount $f" || echo "REFUSED remount $f"
  cmp -s "$f" "$t.orig" && echo "SAME $f" || echo "CHANGED $f"
  rm -f "$t" "$t.orig"
done
"#;

#[tokio::test]
async fn a_root_worker_cannot_rewrite_the_pods_network_files() {
    let Some(engine) = engine_or_skip("redteam network files").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let r = TestRun::with(&engine, "rt-etc", |o| {
            o.user = Some(UserIds { uid: 0, gid: 0 })
        })
        .await;
        let worker = r.sandbox("worker-1", Role::Worker).await;
        let before = run(
            &*worker,
            &r.workspace,
            "id -u; sha256sum /etc/hosts /etc/resolv.conf /etc/hostname",
        )
        .await;
        assert!(before.starts_with("0\n"), "not root:\n{before}");
        assert_eq!(
            before.lines().count(),
            4,
            "the files are readable:\n{before}"
        );
        let out = run(&*worker, &r.workspace, NET_FILES).await;
        let mut tally = Tally::default();
        tally.lines(&out, "WROTE", "REFUSED", 18, "");
        for l in out
            .lines()
            .filter(|l| l.starts_with("SAME ") || l.starts_with("CHANGED "))
        {
            tally.attempt(l, l.starts_with("CHANGED "));
        }
        // Another container of the pod sees the same, unchanged files.
        let other = r.sandbox("worker-2", Role::Worker).await;
        let after = run(
            &*other,
            &r.workspace,
            "id -u; sha256sum /etc/hosts /etc/resolv.conf /etc/hostname",
        )
        .await;
        tally.attempt("seen from worker-2", after != before);
        tally.assert_none("redteam box", "network files", "");
    })
    .await
    .expect("bounded");
}

/// Sends one raw request line to the run proxy and prints `ANSWER <label> <status line>`
/// (`none` when it closed without one), then the body's first mention of port 80, if any.
const RAW: &str = r#"
import socket, sys, os
label, line = sys.argv[1], sys.argv[2]
host, port = os.environ["https_proxy"].split("//")[1].rstrip("/").split(":")
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall((line + "\r\nHost: x\r\n\r\n").encode())
data = b""
try:
    while len(data) < 65536:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
        if line.startswith("CONNECT") and b"\r\n\r\n" in data:
            break
except socket.timeout:
    pass
status = data.split(b"\r\n", 1)[0].decode("latin-1") or "none"
print("ANSWER %s %s" % (label, status))
if b"port 80" in data:
    print("EXPLAINED %s" % label)
"#;

#[tokio::test]
async fn the_proxy_lets_listed_names_through_on_80_and_443_only() {
    let Some(engine) = engine_or_skip("redteam proxy ports").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let r = TestRun::with(&engine, "rt-ports", |o| {
            o.egress = EgressPolicy {
                mode: EgressMode::Proxy,
                ..Default::default()
            }
        })
        .await;
        let worker = r.sandbox("worker-1", Role::Worker).await;
        std::fs::write(r.workspace.join("raw.py"), RAW).unwrap();
        // pypi.org is listed by default.
        let denied = [
            ("http-8080", "GET http://pypi.org:8080/ HTTP/1.1"),
            ("http-22", "GET http://pypi.org:22/ HTTP/1.1"),
            ("http-443", "GET http://pypi.org:443/simple/ HTTP/1.1"),
            ("http-upper", "GET HTTP://PYPI.ORG:8080/ HTTP/1.1"),
            ("http-80-then-port", "GET http://pypi.org:80:8080/ HTTP/1.1"),
            (
                "http-userinfo",
                "GET http://pypi.org:80@example.com:8080/ HTTP/1.1",
            ),
            ("post-8080", "POST http://pypi.org:8080/ HTTP/1.1"),
            ("connect-80", "CONNECT pypi.org:80 HTTP/1.1"),
            ("connect-22", "CONNECT pypi.org:22 HTTP/1.1"),
            ("connect-url-8080", "CONNECT http://pypi.org:8080/ HTTP/1.1"),
        ];
        let mut script = String::new();
        for (label, line) in &denied {
            script.push_str(&format!("python3 raw.py '{label}' '{line}'\n"));
        }
        script.push_str("python3 raw.py listed-80 'GET http://pypi.org/simple/ HTTP/1.1'\n");
        script.push_str("python3 raw.py listed-443 'CONNECT pypi.org:443 HTTP/1.1'\n");
        let out = run(&*worker, &r.workspace, &script).await;
        let status = |label: &str| -> String {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("ANSWER {label} ")))
                .unwrap_or_else(|| panic!("no answer for {label}:\n{out}"))
                .to_string()
        };
        let mut tally = Tally::default();
        for (label, _) in &denied {
            let s = status(label);
            tally.attempt(&format!("{label} ({s})"), !s.contains(" 403 "));
        }
        for label in ["listed-80", "listed-443"] {
            let s = status(label);
            eprintln!("redteam box, proxy ports: the proxy's decision for {label}: {s}");
            assert!(
                !s.contains(" 403 ") && s != "none",
                "the proxy refused a listed name on its port: {label} {s}\n{out}"
            );
        }
        tally.assert_none("redteam box", "proxy ports", "");
        // The refusal says why.
        assert!(
            out.contains("EXPLAINED http-8080"),
            "the refusal does not say what is let through:\n{out}"
        );
    })
    .await
    .expect("bounded");
}

/// Two busy loops for `SECONDS` of wall time; prints `CPU <seconds of CPU they got>`.
const SPIN: &str = r#"
import os, resource, time
SECONDS = 2.0
pids = []
for _ in range(max(2, os.cpu_count() or 2)):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print("CPU %.3f" % (u.ru_utime + u.ru_stime))
"#;

#[tokio::test]
async fn a_busy_worker_gets_its_cpu_quota_and_no_more() {
    let Some(engine) = engine_or_skip("redteam cpu").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let r = TestRun::new(&engine, "rt-cpu").await;
        let worker = r.sandbox("worker-1", Role::Worker).await;
        let limits = flowerbox::sandbox::Limits::default();
        let quota = limits.nano_cpus as f64 / 1e9;
        let ids = run_containers(&engine, &r.run_id).await;
        let mut seen = false;
        for id in ids {
            let info = engine.docker().inspect_container(&id, None).await.unwrap();
            let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
            if labels.get("flowerbox.agent").map(String::as_str) == Some("worker-1") {
                let hc = info.host_config.unwrap();
                assert_eq!(hc.nano_cpus, Some(limits.nano_cpus));
                seen = true;
            }
        }
        assert!(seen, "worker-1's container not found");
        std::fs::write(r.workspace.join("spin.py"), SPIN).unwrap();
        let out = run(&*worker, &r.workspace, "python3 spin.py").await;
        let cpu: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("CPU "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no CPU line:\n{out}"));
        let mut tally = Tally::default();
        // Two seconds at `quota` CPUs, with a tenth of slack for the scheduler's periods.
        let allowed = 2.0 * quota * 1.1 + 0.1;
        eprintln!("redteam box, cpu: {cpu:.2} s of CPU in 2 s at a quota of {quota} CPU");
        assert!(cpu > 0.5, "the busy loops got no CPU at all: {cpu}");
        tally.attempt(
            &format!("spin took {cpu:.2} s > {allowed:.2} s"),
            cpu > allowed,
        );
        tally.assert_none("redteam box", "cpu", "");
    })
    .await
    .expect("bounded");
}
