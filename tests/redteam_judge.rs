//! Red team, threat-model point 3: a judge (and a coordinator) cannot create, change or delete
//! anything a worker can, by any route, and the judge still sees the worker's live process.
//!
//! A worker leaves a victim running (`VICTIM`): cwd in its worktree, a tracked file held open
//! for writing, a world-writable file held open read-write, a memfd, a canary in its memory,
//! files in its container's `/tmp`, `/var/tmp`, `/dev/shm` and HOME, a TCP server reporting its
//! state and every signal it catches. Then a judge — scripted, its Bash in its real container —
//! and the coordinator's container run `ATTACK`: every route (`/proc/<pid>/root`, `cwd`,
//! `fd/N`, `map_files`, `mem`, ptrace attach/seize/poke, `process_vm_writev`/`readv`,
//! `pidfd_getfd`, `kcmp`, `open_by_handle_at`, signals, set-uid programs, the lsof
//! inspector's protocol), each attempt counted. Every attempt must fail, and nothing may change:
//! the host's files (workspace with `.git`, worktree, workbench), the worker container's own
//! writable places, the victim's memory, memfd and signals. The same judge then sees the victim
//! with `ps`, `lsof -p`, `lsof -i`, `file` and `curl`. As a control, the same script run by
//! a worker container outside any Landlock domain (the workers' uid and rights) does get
//! through, so the attempts are real; run by another worker as it really runs (a domain of its
//! own), its `/proc` routes are refused too.
//!
//! The scripted test runs workers as the invoking user (root in CI: workers run as 0:0); the
//! factory-level test runs them as uid 4242 when the test runs as root.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod isolate_support;

use flowerbox::role::Role;
use flowerbox::sandbox::docker::UserIds;
use flowerbox::sandbox::{AgentBox, Mount, Sandbox, SandboxFactory};
use isolate_support::docker_support::{engine_or_skip, req, TestRun, SERIAL};
use isolate_support::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The worker's lingering process. Args: port, directory for `victim.json`.
const VICTIM: &str = r#"
import ctypes, http.server, json, os, signal, socketserver, sys
port, out = int(sys.argv[1]), sys.argv[2]
got = []
for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
          signal.SIGQUIT, signal.SIGALRM, signal.SIGCONT, signal.SIGWINCH, signal.SIGPIPE):
    signal.signal(s, lambda n, f: got.append(n))
held = open('held.txt', 'a')
shared = open('shared.txt', 'r+')
memfd = os.memfd_create('victim')
os.write(memfd, b'pristine')
canary = ctypes.create_string_buffer(b'pristine', 16)
tmp = open('/tmp/victim-tmp.txt', 'w+')
tmp.write('pristine'); tmp.flush()
home = os.environ['HOME']
for p in ('/dev/shm/victim-shm', '/var/tmp/victim-var.txt', home + '/victim-home.txt'):
    with open(p, 'w') as f:
        f.write('pristine')
def state():
    return {'pid': os.getpid(), 'memfd': os.pread(memfd, 64, 0).decode('latin-1'),
            'canary': canary.value.decode('latin-1'), 'canary_addr': ctypes.addressof(canary),
            'signals': got, 'home': home, 'cwd': os.getcwd()}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(state()).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a):
        pass
socketserver.TCPServer.allow_reuse_address = True
srv = socketserver.TCPServer(('127.0.0.1', port), H)
with open(out + '/victim.json.new', 'w') as f:
    json.dump(state(), f)
os.rename(out + '/victim.json.new', out + '/victim.json')
srv.serve_forever()
"#;

/// Attacks that need system calls: `python3 HELPER WHAT PID [ARG]`, exit 0 when it got through.
const HELPER: &str = r#"
import ctypes, os, platform, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
what, pid = sys.argv[1], int(sys.argv[2])
arg = sys.argv[3] if len(sys.argv) > 3 else ''
addr = int(arg) if arg.isdigit() else 0
class Iov(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
def ok(c):
    sys.exit(0 if c else 1)
if what == 'ptrace-attach':
    r = libc.ptrace(16, pid, 0, 0)
    if r == 0:
        libc.ptrace(17, pid, 0, 0)
    ok(r == 0)
if what == 'ptrace-seize':
    ok(libc.ptrace(0x4206, pid, 0, 0) == 0)
if what == 'ptrace-poke':
    ok(libc.ptrace(5, pid, ctypes.c_void_p(addr), ctypes.c_void_p(0x2121444557415021)) == 0)
if what in ('vm-writev', 'vm-readv'):
    buf = ctypes.create_string_buffer(b'PWNED!!!', 8)
    local, remote = Iov(ctypes.addressof(buf), 8), Iov(addr, 8)
    f = libc.process_vm_writev if what == 'vm-writev' else libc.process_vm_readv
    f.restype = ctypes.c_ssize_t
    ok(f(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) > 0)
if what in ('mem-write', 'mem-read'):
    try:
        with open('/proc/%d/mem' % pid, 'r+b' if what == 'mem-write' else 'rb', buffering=0) as m:
            m.seek(addr)
            ok(m.write(b'PWNED!!!') == 8 if what == 'mem-write' else len(m.read(8)) == 8)
    except OSError:
        ok(False)
if what == 'pidfd-getfd':
    try:
        pfd = os.pidfd_open(pid)
    except OSError:
        ok(False)
    got = False
    for n in range(64):
        fd = libc.pidfd_getfd(pfd, n, 0)
        if fd >= 0:
            got = True
            try:
                os.write(fd, b'pwned')
            except OSError:
                pass
    ok(got)
if what == 'pidfd-signal':
    try:
        signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGUSR1)
        ok(True)
    except OSError:
        ok(False)
if what == 'kcmp':
    nr = {'x86_64': 312, 'aarch64': 272}.get(platform.machine(), -1)
    ok(libc.syscall(nr, os.getpid(), pid, 0, 0, 0) >= 0)
if what == 'open-by-handle':
    class Handle(ctypes.Structure):
        _fields_ = [('bytes', ctypes.c_uint), ('type', ctypes.c_int), ('h', ctypes.c_ubyte * 128)]
    h, mount_id = Handle(128, 0), ctypes.c_int(0)
    if libc.name_to_handle_at(-100, arg.encode(), ctypes.byref(h), ctypes.byref(mount_id), 0) != 0:
        h = Handle(8, 1)
        ctypes.memmove(h.h, (ctypes.c_uint * 2)(2, 0), 8)
    mfd = os.open(arg if os.path.isdir(arg) else os.path.dirname(arg) or '/', os.O_RDONLY)
    ok(libc.open_by_handle_at(mfd, ctypes.byref(h), os.O_RDWR) >= 0
       or libc.open_by_handle_at(mfd, ctypes.byref(h), os.O_RDONLY) >= 0)
ok(False)
"#;

/// The attack, run by bash in the attacker's container. Expects `WS`, `WB`, `PORT`, `ME` (a
/// label) and `HELPER` set before it; finds the victim (and its worktree, its cwd) itself. Prints `WROTE <class> <what>` for every attempt that got through
/// and `CLASS <class> <attempts> <wrote>` lines, then `TOTAL <attempts> <wrote>`.
const ATTACK: &str = r#"
exec 2>/dev/null
cd /
P=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$WB/artifacts/victim.json")
STATE=$(curl -s "http://127.0.0.1:$PORT/")
ADDR=$(printf '%s' "$STATE" | python3 -c "import json,sys; print(json.load(sys.stdin)['canary_addr'])")
VHOME=$(printf '%s' "$STATE" | python3 -c "import json,sys; print(json.load(sys.stdin)['home'])")
WT=$(printf '%s' "$STATE" | python3 -c "import json,sys; print(json.load(sys.stdin)['cwd'])")
H=$(mktemp /tmp/helper.XXXXXX.py)
printf '%s' "$HELPER" >"$H"
me=$(id -u)
PIDS=$( (echo "$P"; ps -eo pid=,uid= | awk -v me="$me" '$2 != me {print $1}') | sort -un)
declare -A A W
try() {
  local class=$1 what=$2
  shift 2
  A[$class]=$(( ${A[$class]:-0} + 1 ))
  if ( "$@" ) >/dev/null 2>&1 </dev/null; then
    W[$class]=$(( ${W[$class]:-0} + 1 ))
    echo "WROTE $class $what"
  fi
}
create() { printf pwned >"$1"; }
append() { printf pwned >>"$1"; }
rw() { printf pwned 1<>"$1"; }
trunc() { truncate -s 0 "$1"; }
overwrite() { printf xx | dd of="$1" conv=notrunc status=none; }
xattr() { python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.pwned', b'1')" "$1"; }
mapfiles() { for f in "/proc/$1/map_files/"*; do printf pwned 1<>"$f" && return 0; done; return 1; }
py() { timeout 10 python3 "$H" "$@"; }

R=/proc/$P/root C=/proc/$P/cwd GIT=$WS/.git
# New entries in every place a worker can write, reached through the victim's root and cwd.
for d in "$R$WT" "$R$WT/wwdir" "$C" "$C/wwdir" "$R$WS" "$R$GIT" "$R$GIT/hooks" "$R$WB" \
         "$R$WB/artifacts" "$R/tmp" "$R/var/tmp" "$R/dev/shm" "$R/dev/mqueue" "$R/run/lock" \
         "$R$VHOME"; do
  class=proc-root; case $d in /proc/*/cwd*) class=proc-cwd ;; esac
  try "$class" "create $d" create "$d/$ME-was-here"
  try "$class" "mkdir $d" mkdir "$d/$ME-dir"
  try "$class" "symlink $d" ln -s /etc/passwd "$d/$ME-link"
  try "$class" "fifo $d" mkfifo "$d/$ME-fifo"
done
# Every kind of change to files that exist, world-writable ones included.
for f in "$R$WT/held.txt" "$R$WT/shared.txt" "$R$WT/wwdir/inner.txt" "$R$WT/a.txt" \
         "$C/a.txt" "$C/shared.txt" "$R$WS/a.txt" "$R$GIT/config" "$R$GIT/HEAD" \
         "$R$WB/artifacts/victim.json" "$R/tmp/victim-tmp.txt" "$R/dev/shm/victim-shm" \
         "$R/var/tmp/victim-var.txt" "$R$VHOME/victim-home.txt"; do
  class=proc-root; case $f in /proc/*/cwd*) class=proc-cwd ;; esac
  try "$class" "append $f" append "$f"
  try "$class" "rw $f" rw "$f"
  try "$class" "truncate $f" trunc "$f"
  try "$class" "overwrite $f" overwrite "$f"
  try "$class" "chmod $f" chmod 600 "$f"
  try "$class" "touch $f" touch -d 2000-01-01 "$f"
  try "$class" "xattr $f" xattr "$f"
  try "$class" "link $f" ln "$f" "$f.$ME-link"
  try "$class" "rename $f" mv "$f" "$f.$ME-moved"
  try "$class" "delete $f" rm -- "$f"
done
# Writes into the victim's memory, at its canary.
try proc-mem "write mem of $P" py mem-write "$P" "$ADDR"
try ptrace "poke $P" py ptrace-poke "$P" "$ADDR"
try process-vm "writev $P" py vm-writev "$P" "$ADDR"
# Per foreign process: its root and cwd, each open descriptor, map_files, memory, ptrace,
# process_vm_readv, pidfd_getfd, kcmp.
for p in $PIDS; do
  [ -d "/proc/$p" ] || continue
  try proc-root "create root/tmp of $p" create "/proc/$p/root/tmp/$ME-$p"
  try proc-cwd "create cwd of $p" create "/proc/$p/cwd/$ME-$p"
  for n in $(seq 0 15); do try proc-fd "rw fd $n of $p" rw "/proc/$p/fd/$n"; done
  try proc-fd "truncate fd 3 of $p" trunc "/proc/$p/fd/3"
  try map-files "map_files of $p" mapfiles "$p"
  try proc-mem "read mem of $p" py mem-read "$p" "$ADDR"
  try ptrace "attach $p" py ptrace-attach "$p"
  try ptrace "seize $p" py ptrace-seize "$p"
  try process-vm "readv $p" py vm-readv "$p" "$ADDR"
  try pidfd-getfd "getfd of $p" py pidfd-getfd "$p"
  try kcmp "kcmp $p" py kcmp "$p"
done
# The shocker: a file handle opened with CAP_DAC_READ_SEARCH.
try open-by-handle "handle of $WS/a.txt" py open-by-handle 0 "$WS/a.txt"
try open-by-handle "handle of $WS" py open-by-handle 0 "$WS"
# Becoming someone else.
try setuid "su" su -c "touch '$WS/$ME-su'" root
try setuid "setpriv root" setpriv --reuid=0 --regid=0 --clear-groups touch "$WS/$ME-setpriv"
try setuid "newgrp" newgrp root
# The inspector: its directory, and a request whose id climbs out of it.
try inspector "write its directory" create /run/flowerbox-inspect/$ME-x
try inspector "replace the shim" create /usr/local/bin/lsof
try inspector "id with a path" bash -c "printf '%s\n' '../../proc/$P/root$WT/$ME-inspector _ _' >/run/flowerbox-inspect/req && sleep 0.5 && [ -e '$R$WT/$ME-inspector.out' ]"
# Signals last: they may end the victim when they get through.
for s in HUP INT TERM USR1 USR2 QUIT ALRM CONT WINCH PIPE STOP KILL; do
  try signal "$s to $P" kill -s "$s" "$P"
  try signal "$s to group of $P" kill -s "$s" -- "-$P"
done
try signal "pidfd_send_signal to $P" py pidfd-signal "$P"
total=0 wrote=0
for c in "${!A[@]}"; do
  echo "CLASS $c ${A[$c]} ${W[$c]:-0}"
  total=$((total + A[$c])); wrote=$((wrote + ${W[$c]:-0}))
done
echo "TOTAL $total $wrote"
rm -f "$H"
"#;

/// Single-quotes `s` for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The attack script for one attacker, with its targets.
fn attack(me: &str, ws: &Path, wb: &Path, port: u16) -> String {
    format!(
        "ME={me} WS={} WB={} PORT={port}\nHELPER={}\n{ATTACK}",
        quote(&ws.display().to_string()),
        quote(&wb.display().to_string()),
        quote(HELPER)
    )
}

/// Per class `(attempts, got through)`, and the `WROTE` lines.
#[derive(Debug, Default)]
struct Tally {
    classes: BTreeMap<String, (u32, u32)>,
    total: (u32, u32),
    wrote: Vec<String>,
}

fn tally(out: &str) -> Tally {
    let mut t = Tally::default();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["CLASS", c, a, w] => {
                t.classes
                    .insert(c.to_string(), (a.parse().unwrap(), w.parse().unwrap()));
            }
            ["TOTAL", a, w] => t.total = (a.parse().unwrap(), w.parse().unwrap()),
            ["WROTE", ..] => t.wrote.push(line.to_string()),
            _ => {}
        }
    }
    t
}

/// Every class of route the issue names, with the least attempts each must have made.
const CLASSES: &[(&str, u32)] = &[
    ("proc-root", 100),
    ("proc-cwd", 20),
    ("proc-fd", 16),
    ("map-files", 1),
    ("proc-mem", 2),
    ("ptrace", 3),
    ("process-vm", 2),
    ("pidfd-getfd", 1),
    ("kcmp", 1),
    ("open-by-handle", 2),
    ("setuid", 3),
    ("inspector", 3),
    ("signal", 25),
];

/// Asserts an attacker made every kind of attempt and none got through.
fn assert_refused(who: &str, out: &str) -> Tally {
    let t = tally(out);
    for (class, least) in CLASSES {
        let (attempts, wrote) = t.classes.get(*class).copied().unwrap_or_default();
        assert!(
            attempts >= *least,
            "{who}: {attempts} {class} attempts\n{out}"
        );
        assert_eq!(wrote, 0, "{who}: {class} got through\n{out}");
    }
    assert!(t.wrote.is_empty() && t.total.1 == 0, "{who}: {:?}", t.wrote);
    eprintln!("{who}: {} attempts, {} got through", t.total.0, t.total.1);
    for (c, (a, w)) in &t.classes {
        eprintln!("  {c:<15} {a:>4} attempts {w:>2} through");
    }
    t
}

/// `(kind, mode, size, mtime ns, content or link target)` of every entry under `root`, by
/// relative path; subtrees named in `skip` are left out.
type Snapshot = BTreeMap<String, (char, u32, u64, i64, Vec<u8>)>;

fn snapshot(root: &Path, skip: &[&str]) -> Snapshot {
    let mut out = Snapshot::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if skip.contains(&rel.as_str()) {
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mtime = md.mtime() * 1_000_000_000 + md.mtime_nsec();
            let mode = md.permissions().mode();
            let (kind, body) = if md.is_dir() {
                stack.push(p.clone());
                ('d', Vec::new())
            } else if md.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                ('l', t.display().to_string().into_bytes())
            } else if md.is_file() {
                ('f', std::fs::read(&p).unwrap())
            } else {
                ('o', Vec::new())
            };
            let size = if md.is_dir() { 0 } else { md.len() };
            out.insert(rel, (kind, mode, size, mtime, body));
        }
    }
    let md = std::fs::metadata(root).unwrap();
    let mtime = md.mtime() * 1_000_000_000 + md.mtime_nsec();
    out.insert(
        ".".into(),
        ('d', md.permissions().mode(), 0, mtime, Vec::new()),
    );
    out
}

/// Names of the entries that differ between two snapshots.
fn changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// What the victim's own container shows of its writable places and of the victim.
async fn worker_view(worker: &dyn Sandbox, cwd: &Path, port: u16) -> String {
    let cmd = format!(
        "for d in /tmp /var/tmp /dev/shm /dev/mqueue /run/lock \"$HOME\"; do \
           find \"$d\" -xdev -printf '%p %y %s %m %T@\\n'; done | sort; \
         cat /tmp/victim-tmp.txt /dev/shm/victim-shm /var/tmp/victim-var.txt \"$HOME/victim-home.txt\"; echo; \
         curl -s http://127.0.0.1:{port}/; echo; \
         P=$(curl -s http://127.0.0.1:{port}/ | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"pid\"])'); \
         grep -E '^(State|TracerPid)' /proc/$P/status"
    );
    let out = worker
        .exec(req(&cmd, cwd, Duration::from_secs(60)))
        .await
        .expect("worker exec");
    assert!(out.success(), "{out:?}");
    out.stdout
}

/// The victim's state as it reports it, from `worker_view`'s output.
fn victim_state(view: &str) -> serde_json::Value {
    let line = view
        .lines()
        .find(|l| l.starts_with("{\"pid\""))
        .unwrap_or_else(|| panic!("no victim state in {view}"));
    serde_json::from_str(line).unwrap()
}

fn assert_victim_untouched(view: &str) {
    let s = victim_state(view);
    assert_eq!(s["memfd"], "pristine", "{s}");
    assert_eq!(s["canary"], "pristine", "{s}");
    assert_eq!(s["signals"], json!([]), "{s}");
    assert!(
        view.contains("State:\tS") && view.contains("TracerPid:\t0"),
        "{view}"
    );
}

/// The worker's Bash: files to hold, then the victim in the background, up when it answers.
fn start_victim(wb: &Path, port: u16) -> String {
    format!(
        "printf 'one\\n' > held.txt && printf 'shared\\n' > shared.txt && chmod 666 shared.txt && \
         mkdir -p wwdir && printf 'inner\\n' > wwdir/inner.txt && chmod 666 wwdir/inner.txt && \
         chmod 777 wwdir && {{ git add -A && git commit -qm victim || true; }} && \
         nohup python3 '{wb}/scripts/victim.py' {port} '{wb}/artifacts' > /dev/null 2>&1 &\n\
         for i in $(seq 100); do [ -e '{wb}/artifacts/victim.json' ] && curl -s -o /dev/null \
         http://127.0.0.1:{port}/ && break; sleep 0.1; done; cat '{wb}/artifacts/victim.json'",
        wb = wb.display()
    )
}

/// Runs `script` in `sb`, bounded.
async fn run_attack(sb: &dyn Sandbox, cwd: &Path, script: &str) -> String {
    let mut r = req(script, cwd, Duration::from_secs(300));
    r.output_cap = 256 * 1024;
    let out = sb.exec(r).await.expect("attack exec");
    assert!(!out.timed_out, "{out:?}");
    format!("{}\n{}", out.stdout, out.stderr)
}

fn bash(id: &str, command: &str) -> serde_json::Value {
    json!({"type": "tool_use", "name": "Bash", "id": id,
           "input": {"command": command, "timeout": 300_000}})
}

const PORT: u16 = 18791;

#[tokio::test]
async fn a_judge_and_a_coordinator_cannot_write_by_any_route() {
    let Some(engine) = engine_or_skip("redteam_judge").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let run = IsoRun::new(&engine, "redteam-judge", |ws, wb| {
        std::fs::write(wb.join("scripts/victim.py"), VICTIM).unwrap();
        json!({"agents": [
            {"role": "coordinator", "turns": [
                {"content": [tool("Agent", json!({"description": "起服务", "prompt": "起 victim"}))]},
                {"content": [text("起好了")]}]},
            {"role": "worker", "turns": [
                {"content": [tool("Bash", json!({"command": start_victim(wb, PORT)}))]},
                {"content": [text(REPORT)]}]},
            {"role": "judge", "agent": "judge-1", "turns": [
                {"content": [bash("attack", &attack("judge", ws, wb, PORT))]},
                {"content": [
                    bash("who", "id -u; id -G; grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status"),
                    bash("file", "file ./held.txt"),
                    bash("ps", "ps -ww -eo pid,user,args | cut -c1-160"),
                    bash("lsof_p", &format!("lsof -p $(python3 -c \"import json; print(json.load(open('{}/artifacts/victim.json'))['pid'])\")", wb.display())),
                    bash("lsof_i", &format!("lsof -nP -i :{PORT}")),
                    bash("curl", &format!("curl -s http://127.0.0.1:{PORT}/"))]},
                {"content": [text("## 结论\nNOT_YET\n## 理由\n只是看看\n## 未通过\n无")]}]}]})
    })
    .await;
    coordinate(&run.rt, "起服务").await;
    let started = run.results_of("worker-1", "Bash");
    assert!(started[0].1.contains("canary_addr"), "{started:?}");
    let (_, wt) = run.placement.worktree_of("worker-1").unwrap();

    // Worker-1's own container: the box it was made for (its worktree's mounts); any other
    // box under its name is refused.
    let worker_box = run
        .factory
        .box_of("worker-1")
        .expect("worker-1 ran commands");
    let worker = run.factory.sandbox(&worker_box).await.unwrap();
    let skip_ws = ["runs"];
    let skip_wb = ["spill"];
    let before = (
        snapshot(&run.ws, &skip_ws),
        snapshot(&wt, &[]),
        snapshot(&run.wb, &skip_wb),
        worker_view(worker.as_ref(), &wt, PORT).await,
    );
    assert_victim_untouched(&before.3);

    judge_round(&run.rt, 1, true).await;
    let (_, judge_out) = run.result("attack");
    let judge_tally = assert_refused("judge", &judge_out);

    // The coordinator's container, attacked as if its glance guard let anything through.
    let coordinator = run
        .factory
        .sandbox(&run.rt.main_box("协调者", Role::Coordinator))
        .await
        .unwrap();
    let script = attack("coordinator", &run.ws, &run.wb, PORT);
    let coord_out = run_attack(coordinator.as_ref(), &run.ws, &script).await;
    assert_refused("coordinator", &coord_out);

    let after = (
        snapshot(&run.ws, &skip_ws),
        snapshot(&wt, &[]),
        snapshot(&run.wb, &skip_wb),
        worker_view(worker.as_ref(), &wt, PORT).await,
    );
    assert_eq!(
        changed(&before.0, &after.0),
        Vec::<String>::new(),
        "workspace"
    );
    assert_eq!(
        changed(&before.1, &after.1),
        Vec::<String>::new(),
        "worktree"
    );
    assert_eq!(
        changed(&before.2, &after.2),
        Vec::<String>::new(),
        "workbench"
    );
    assert_eq!(before.3, after.3, "the worker container's own places");
    assert_victim_untouched(&after.3);

    // The judge still sees everything, after the attack, as its own uid with one capability.
    let ok = |id: &str| {
        let (is_error, out) = run.result(id);
        assert!(!is_error, "{id}: {out}");
        out
    };
    let who = ok("who");
    assert!(who.starts_with("65531\n65531\n"), "{who}");
    assert!(who.contains("CapEff:\t0000000000000004"), "{who}");
    assert!(who.contains("CapBnd:\t0000000000000004"), "{who}");
    let file = ok("file");
    assert!(file.contains("text"), "{file}");
    let ps = ok("ps");
    assert!(ps.contains("victim.py"), "{ps}");
    let lsof_p = ok("lsof_p");
    let held = format!("{}/held.txt", wt.display());
    assert!(
        lsof_p
            .lines()
            .any(|l| l.contains(&held) && (l.contains("w ") || l.contains("u "))),
        "{lsof_p}"
    );
    assert!(lsof_p.contains("memfd:victim"), "{lsof_p}");
    assert!(
        lsof_p
            .lines()
            .any(|l| l.contains(" cwd ") && l.ends_with(&wt.display().to_string())),
        "{lsof_p}"
    );
    let lsof_i = ok("lsof_i");
    assert!(
        lsof_i.contains("python3") && lsof_i.contains("(LISTEN)"),
        "{lsof_i}"
    );
    assert!(ok("curl").contains("pristine"));

    // Control: the same script from a worker container with the workers' uid and rights but
    // outside any Landlock domain (a writer's policy without `own_domain`) gets through, so the
    // attempts above were real ones.
    // `who`'s container (a worker's mounts, `policy`) runs the attack; its tally.
    let attack_from = |who: &'static str, policy| {
        let run = &run;
        async move {
            let sb = run
                .factory
                .sandbox(&AgentBox {
                    agent: format!("worker-{who}"),
                    role: Role::Worker,
                    mounts: vec![Mount::same(run.wb.clone(), false)],
                    masked: Vec::new(),
                    workdir: run.wb.clone(),
                    policy,
                })
                .await
                .unwrap();
            let script = attack(who, &run.ws, &run.wb, PORT);
            tally(&run_attack(sb.as_ref(), &run.wb, &script).await)
        }
    };
    let writer = flowerbox::sandbox::SandboxPolicy::writer();
    let unconfined = flowerbox::sandbox::SandboxPolicy {
        own_domain: false,
        ..writer
    };
    let control_tally = attack_from("control", unconfined).await;
    for class in ["proc-root", "proc-cwd", "proc-fd", "proc-mem", "signal"] {
        let (_, wrote) = control_tally.classes[class];
        assert!(
            wrote > 0,
            "control: no {class} write got through: {control_tally:?}"
        );
    }
    // And another worker as it really runs (its own Landlock domain): every `/proc` route to
    // the victim, in worker-1's domain, is refused; signals are not scoped, so they still
    // reach it.
    let other_tally = attack_from("other", writer).await;
    for class in ["proc-root", "proc-cwd", "proc-fd", "proc-mem"] {
        let (tried, wrote) = other_tally.classes[class];
        assert!(
            tried > 0 && wrote == 0,
            "another worker: {class} got through its domain: {other_tally:?}"
        );
    }
    eprintln!(
        "control (a worker outside any domain): {} attempts, {} got through; another worker in \
         its domain: {} attempts, {} got through (judge: {} attempts)",
        control_tally.total.0,
        control_tally.total.1,
        other_tally.total.0,
        other_tally.total.1,
        judge_tally.total.0
    );
}

/// Workers as uid 4242 (when the test runs as root; otherwise the scripted test above already
/// runs them as a non-root user): the judge's and the coordinator's containers refuse the same.
#[tokio::test]
async fn read_only_containers_hold_against_non_root_workers() {
    let Some(engine) = engine_or_skip("redteam_judge_user").await else {
        return;
    };
    if !nix::unistd::getuid().is_root() {
        eprintln!("SKIPPED redteam_judge_user: covered by the scripted test for a non-root user");
        return;
    }
    let _serial = SERIAL.lock().await;
    let ids = UserIds {
        uid: 4242,
        gid: 4242,
    };
    let run = TestRun::with(&engine, "redteam-user", |o| o.user = Some(ids)).await;
    let ws = run.workspace.clone();
    let wb = ws.join(".wb");
    for d in [ws.join("sub"), wb.join("scripts"), wb.join("artifacts")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(ws.join("sub/a.txt"), "one\n").unwrap();
    std::fs::write(wb.join("scripts/victim.py"), VICTIM).unwrap();
    chown_tree(&ws, ids);
    let wt = ws.join("sub");
    let boxed = |agent: &str, role: Role, read_only: bool| AgentBox {
        agent: agent.into(),
        role,
        mounts: vec![Mount::same(ws.clone(), read_only)],
        masked: Vec::new(),
        workdir: wt.clone(),
        policy: flowerbox::agent::place::role_policy(role),
    };
    let worker = run
        .factory
        .sandbox(&boxed("worker-1", Role::Worker, false))
        .await
        .unwrap();
    // No repository here: `git add` fails and is skipped; `.git` paths are simply absent.
    let started = docker_exec(worker.as_ref(), &wt, &start_victim(&wb, PORT + 1)).await;
    assert!(started.contains("canary_addr"), "{started}");

    let before = (
        snapshot(&ws, &[]),
        worker_view(worker.as_ref(), &wt, PORT + 1).await,
    );
    for (agent, role) in [("judge-1", Role::Judge), ("coordinator", Role::Coordinator)] {
        let sb = run
            .factory
            .sandbox(&boxed(agent, role, true))
            .await
            .unwrap();
        let who = docker_exec(sb.as_ref(), &wt, "id -u").await;
        assert_ne!(who.trim(), "4242");
        let script = attack(agent, &ws, &wb, PORT + 1);
        assert_refused(agent, &run_attack(sb.as_ref(), &wt, &script).await);
        if role == Role::Judge {
            let pid = victim_state(&before.1)["pid"].to_string();
            let seen = docker_exec(sb.as_ref(), &wt, &format!("lsof -p {pid}")).await;
            assert!(
                seen.contains("held.txt") && seen.contains("(LISTEN)"),
                "{seen}"
            );
        }
    }
    let after = (
        snapshot(&ws, &[]),
        worker_view(worker.as_ref(), &wt, PORT + 1).await,
    );
    assert_eq!(changed(&before.0, &after.0), Vec::<String>::new());
    assert_eq!(before.1, after.1);
    assert_victim_untouched(&after.1);
}

async fn docker_exec(sb: &dyn Sandbox, cwd: &Path, cmd: &str) -> String {
    let out = sb
        .exec(req(cmd, cwd, Duration::from_secs(60)))
        .await
        .expect("exec");
    assert!(out.success(), "{cmd}: {out:?}");
    out.stdout
}

fn chown_tree(root: &Path, ids: UserIds) {
    let mut stack: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(ids.uid), Some(ids.gid)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        }
    }
}
