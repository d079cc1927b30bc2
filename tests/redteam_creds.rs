//! Red team, credentials and workspace configuration (issue 25 §1; DESIGN.md threat model 7):
//! a hostile scripted worker, in its container on the real engine, plants configuration in the
//! workspace (`./.env`, `.mcp.json`); then the user runs flowerbox again there, with their real
//! key in `~/.config/flower/.env` (or the environment), against a listening canary server that
//! records every request and header. Each test counts its attempts (user runs, and the
//! in-process paths: the probe, `setup`) and fails if one succeeds:
//!
//! - the canary sees a credential that the planted file did not give it (the user's key or
//!   token, a key typed into `setup`), or any request at all where the planted address must be
//!   ignored;
//! - a user run hangs (a FIFO), grows past a memory bound (`/dev/zero`, a 1 GiB `.env`) or
//!   fails;
//! - the first run does not name the configuration its worker planted.
//!
//! `FLOWERBOX_REDTEAM_BIN` runs another build of `flowerbox` against the same attacks (the
//! baseline); the tests then report what got through.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "docker_support/mod.rs"]
mod docker_support;
#[path = "flow_support/mod.rs"]
mod flow_support;

mod redteam_support;

use docker_support::{engine_ready as engine, Sweep};
use flow_support::{Project, ScriptedModel};
use redteam_support::{
    bash, measured, repository, text, user_command, user_file, write_user_file, Outcome, PLANT_X,
    REPORT,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Each run must end well within this (a FIFO that hangs the host shows up here).
const BOUND: Duration = Duration::from_secs(90);
/// A user run may not use more memory than this (resident, KiB): the runner takes tens of MB.
const RSS_BOUND_KB: i64 = 400 * 1024;
/// The address space a user run gets (a regression then fails the run instead of the machine).
const AS_LIMIT: u64 = 3 << 30;

/// The user's real secrets: none of them may ever reach the canary.
const USER_KEY: &str = "sk-ant-USER-REAL-KEY-5b0c1d2e3f";
const USER_OPENAI_KEY: &str = "sk-openai-USER-REAL-KEY-77aa88";
const TYPED_KEY: &str = "sk-ant-TYPED-IN-SETUP-9f9f9f9f";

/// One request the canary received.
#[derive(Debug, Clone)]
struct Seen {
    /// The request line (`POST /v1/messages HTTP/1.1`) as the first pair, then the headers.
    headers: Vec<(String, String)>,
}

/// A listening server that records every request (its line and headers) and answers with a
/// fixed status: the address a planted file names.
struct Canary {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    addr: std::net::SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Canary {
    /// Answers 401 (an auth error: the client stops at once).
    fn start() -> Canary {
        Canary::answering(
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"canary"}}"#,
        )
    }

    fn answering(status: u16, body: &'static str) -> Canary {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s, status, body));
            }
        });
        Canary {
            url: format!("http://{addr}"),
            seen,
            addr,
            stop,
        }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests that carried one of `secrets` in a header.
    fn leaks(&self, secrets: &[&str]) -> usize {
        self.requests()
            .iter()
            .filter(|r| {
                r.headers
                    .iter()
                    .any(|(_, v)| secrets.iter().any(|s| v.contains(s)))
            })
            .count()
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Records one request (line, headers; the body is read and dropped) and answers it, closing
/// the connection.
fn serve(conn: TcpStream, seen: &Mutex<Vec<Seen>>, status: u16, body: &str) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers = vec![("request".to_string(), line.trim_end().to_string())];
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut sink = vec![0u8; len.min(64 << 20)];
    let _ = reader.read_exact(&mut sink);
    seen.lock().unwrap().push(Seen { headers });
    let mut out = &conn;
    let _ = write!(
        out,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `flowerbox --sandbox docker ARGS` in the workspace as the user: HOME is the project's (the
/// user's configuration is in it), `env` on top of PATH, bounded by [`BOUND`] and an address
/// space of [`AS_LIMIT`]; its peak resident memory measured.
fn flowerbox(p: &Project, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Outcome {
    let mut c = user_command(p);
    c.env("FLOWER_NO_PROBE", "1")
        .args(["--sandbox", "docker"])
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, || {
            let lim = nix::libc::rlimit {
                rlim_cur: AS_LIMIT,
                rlim_max: AS_LIMIT,
            };
            nix::libc::setrlimit(nix::libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    measured(c, BOUND, stdin)
}

/// A `go` scenario whose worker runs `worker_turns` to plant; the other workers report, and
/// `once` answers.
fn go_scenario(worker_turns: Vec<Value>) -> Value {
    redteam_support::go_scenario(
        &PLANT_X,
        worker_turns,
        vec![
            json!({"role": "worker", "turns": vec![text(REPORT); 4]}),
            json!({"role": "once", "turns": vec![text("好"); 4]}),
        ],
    )
}

/// The first run: a hostile worker runs `plant` (in its container, in the workspace or its
/// worktree), then reports. Returns what the run printed.
fn plant(p: &Project, plant: &str, extra: &[&str]) -> Outcome {
    let model = ScriptedModel::start(&go_scenario(vec![
        json!({"content": [bash(&format!("{plant}; touch x.txt; ls -la"))]}),
        text(REPORT),
    ]));
    user_file(p, &model, USER_KEY);
    let mut args = vec!["go"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--timeout", "0", "做 X"]);
    let o = flowerbox(p, &args, &[], None);
    eprintln!("plant run: exit {:?}\n{}", o.code, o.text);
    assert_eq!(o.code, Some(0), "the planting run failed:\n{}", o.text);
    o
}

/// The worker's plant of a `./.env` that sends a token of its own to `canary`.
fn planted_token(canary: &Canary) -> String {
    format!(
        "printf 'ANTHROPIC_BASE_URL={}\\nANTHROPIC_AUTH_TOKEN=dummy-planted-token\\n' > .env",
        canary.url
    )
}

/// One user run after the plant, against a fresh model that behaves: its outcome.
fn user_run(p: &Project, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let model = ScriptedModel::start(&go_scenario(vec![text(REPORT)]));
    user_file(p, &model, USER_KEY);
    let o = flowerbox(p, args, env, None);
    eprintln!(
        "user run {args:?}: exit {:?}{} in ≤{} KiB\n{}",
        o.code,
        if o.hung { " (hung, killed)" } else { "" },
        o.max_rss_kb,
        o.text
    );
    o
}

/// A workflow file of the user's, for `run`.
fn flows_file(p: &Project) {
    std::fs::write(
        p.ws.join("flows.toml"),
        "[main]\n[[main.steps]]\nname = \"看看\"\nrole = \"worker\"\nprompt = \"看一眼\"\n",
    )
    .unwrap();
}

/// Every user secret the tests hold.
const SECRETS: [&str; 3] = [USER_KEY, USER_OPENAI_KEY, TYPED_KEY];

/// Tallies one variant. Each user run is an attempt; the attack succeeded in it when the
/// canary got a user's secret during it, or any request at all (every planted address here
/// must be ignored), or the run hung or grew past [`RSS_BOUND_KB`]. What else a run must do
/// (exit 0, the lines that name the planted file) is checked apart, as unmet expectations.
#[derive(Default)]
struct Tally {
    base: redteam_support::Tally,
    /// The user runs in which the canary got a user's secret.
    leaks: usize,
}

impl std::ops::Deref for Tally {
    type Target = redteam_support::Tally;
    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

impl std::ops::DerefMut for Tally {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.base
    }
}

impl Tally {
    /// One user run: `args` with `env`, judged against what the canary saw meanwhile.
    fn user_run(
        &mut self,
        p: &Project,
        canary: &Canary,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Outcome {
        let before = canary.requests().len();
        let o = user_run(p, args, env);
        let new: Vec<Seen> = canary.requests().split_off(before);
        let leaked = new
            .iter()
            .filter(|r| {
                r.headers
                    .iter()
                    .any(|(_, v)| SECRETS.iter().any(|s| v.contains(s)))
            })
            .count();
        let mut why = Vec::new();
        if leaked > 0 {
            why.push(format!(
                "the canary got a user's secret in {leaked} requests"
            ));
        } else if !new.is_empty() {
            why.push(format!("the planted address got {} requests", new.len()));
        }
        if o.hung {
            why.push(format!("hung (killed after {BOUND:?})"));
        }
        if o.max_rss_kb >= RSS_BOUND_KB {
            why.push(format!("{} KiB resident", o.max_rss_kb));
        }
        self.attempts += 1;
        self.leaks += usize::from(leaked > 0);
        if !why.is_empty() {
            self.successes.push(format!("{args:?}: {}", why.join(", ")));
        }
        o
    }

    /// [`Tally::user_run`], which must also do what `ok` says (an unmet expectation named
    /// `what` otherwise).
    fn checked_run(
        &mut self,
        what: &str,
        p: &Project,
        canary: &Canary,
        args: &[&str],
        env: &[(&str, &str)],
        ok: impl FnOnce(&Outcome) -> bool,
    ) -> Outcome {
        let o = self.user_run(p, canary, args, env);
        let met = ok(&o);
        self.expect(what, met, || format!("{o:?}"));
        o
    }

    fn report(self, variant: &str) {
        let leaks = format!(" ({} sent a user's secret to the canary)", self.leaks);
        eprintln!("creds red team, {variant}: {}", self.line(&leaks));
        self.base.assert_clean();
    }
}

/// A user run ended well: exit 0 (hangs and memory are the tally's).
fn sound(o: &Outcome) -> bool {
    !o.hung && o.code == Some(0)
}

#[test]
fn a_planted_endpoint_with_a_token_never_gets_the_users_key() {
    if !engine("redteam_creds_token") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let canary = Canary::start();
    let first = plant(&p, &planted_token(&canary), &[]);
    let mut t = Tally::default();
    // The run that planted it names it, with its keys (never a value).
    t.expect(
        "named at the end",
        first
            .text
            .contains(&format!("新建 {}", p.ws.join(".env").display()))
            && first
                .text
                .contains("键 新增 ANTHROPIC_AUTH_TOKEN、ANTHROPIC_BASE_URL")
            && !first.text.contains("dummy-planted-token"),
        || first.text.clone(),
    );
    flows_file(&p);
    let key_in_env = [("ANTHROPIC_API_KEY", USER_KEY)];
    for (args, env) in [
        (&["once", "hi"][..], &[][..]),
        (&["go", "--timeout", "0", "再做一次 X"], &[]),
        (&["run", "flows.toml:main"], &[]),
        (&["doctor"], &[]),
        // The user's key in the environment instead of their file: the same.
        (&["once", "hi"], &key_in_env),
    ] {
        t.checked_run(&format!("{args:?}"), &p, &canary, args, env, |o| {
            (sound(o) || args[0] == "doctor")
                && o.text.contains("设了 ANTHROPIC_BASE_URL")
                && o.text.contains("ANTHROPIC_API_KEY 来自")
        });
    }
    t.report("ANTHROPIC_BASE_URL + ANTHROPIC_AUTH_TOKEN planted, the user's API key elsewhere");
}

#[test]
fn a_planted_openai_switch_never_gets_the_users_openai_key() {
    if !engine("redteam_creds_openai") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    let canary = Canary::start();
    plant(
        &p,
        &format!(
            "printf 'FLOWERBOX_PROVIDER=openai\\nOPENAI_BASE_URL={}/v1\\nOPENAI_MODEL=gpt-planted\\n' > .env",
            canary.url
        ),
        &[],
    );
    let mut t = Tally::default();
    for args in [&["once", "hi"][..], &["go", "--timeout", "0", "再做一次 X"]] {
        let env = [("OPENAI_API_KEY", USER_OPENAI_KEY)];
        t.checked_run(&format!("{args:?}"), &p, &canary, args, &env, |o| {
            sound(o) && o.text.contains("OPENAI_API_KEY 来自 进程环境")
        });
    }
    t.report("FLOWERBOX_PROVIDER=openai + OPENAI_BASE_URL planted, the user's OPENAI_API_KEY in the environment");
}

#[test]
fn a_planted_env_merged_by_isolate_never_gets_the_users_key() {
    if !engine("redteam_creds_isolate") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let p = Project::new();
    let _sweep = Sweep(p.ws.clone());
    repository(&p);
    let canary = Canary::start();
    let first = plant(&p, &planted_token(&canary), &["--isolate"]);
    assert!(
        p.ws.join(".env").is_file(),
        "integration did not bring the planted .env into the workspace: the test proves nothing\n{}",
        first.text
    );
    let mut t = Tally::default();
    t.expect(
        "named at the end",
        first
            .text
            .contains(&format!("新建 {}", p.ws.join(".env").display())),
        || first.text.clone(),
    );
    for args in [
        &["once", "hi"][..],
        &["go", "--isolate", "--timeout", "0", "再做一次 X"],
    ] {
        t.checked_run(&format!("{args:?}"), &p, &canary, args, &[], |o| {
            sound(o) && o.text.contains("设了 ANTHROPIC_BASE_URL")
        });
    }
    t.report(".env planted by an --isolate worker and merged into the workspace");
}

#[test]
fn planted_fifos_devices_links_and_huge_files_neither_hang_nor_balloon_nor_lead_out() {
    if !engine("redteam_creds_files") {
        return;
    }
    let _serial = docker_support::SERIAL.blocking_lock();
    let canary = Canary::start();
    // The baseline: a user run in a workspace with nothing planted.
    let clean = Project::new();
    let _sweep = Sweep(clean.ws.clone());
    let base = user_run(&clean, &["once", "hi"], &[]);
    assert!(sound(&base), "{base:?}");
    let outside = clean.ws.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let evil = outside.join("evil.env");
    std::fs::write(
        &evil,
        format!(
            "ANTHROPIC_BASE_URL={}\nANTHROPIC_API_KEY=\nANTHROPIC_AUTH_TOKEN=canary-own-token\n",
            canary.url
        ),
    )
    .unwrap();
    let variants: Vec<(&str, String, &str, &str)> = vec![
        ("FIFO .env", "mkfifo .env".into(), ".env", "不是普通文件"),
        (
            "/dev/zero .env",
            "ln -s /dev/zero .env".into(),
            ".env",
            "符号链接",
        ),
        (
            ".env linked out of the workspace",
            format!("ln -s '{}' .env", evil.display()),
            ".env",
            "符号链接",
        ),
        (
            "1 GiB .env",
            "truncate -s 1G .env".into(),
            ".env",
            "超过 1024 KiB",
        ),
        (
            "FIFO .mcp.json",
            "mkfifo .mcp.json".into(),
            ".mcp.json",
            "不是普通文件",
        ),
    ];
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    for (name, cmd, file, why) in variants {
        let p = Project::new();
        let _sweep = Sweep(p.ws.clone());
        let first = plant(&p, &cmd, &[]);
        let mut t = Tally::default();
        t.expect(
            "named at the end",
            first
                .text
                .contains(&format!("新建 {}:现在读不了", p.ws.join(file).display())),
            || first.text.clone(),
        );
        for args in [&["once", "hi"][..], &["go", "--timeout", "0", "再做一次 X"]] {
            let unreadable = format!("{} 读不了", p.ws.join(file).display());
            let o = t.checked_run(&format!("{name} {args:?}"), &p, &canary, args, &[], |o| {
                sound(o) && o.text.contains(&unreadable) && o.text.contains(why)
            });
            summary.push(format!(
                "{name} {}: {} KiB ({:.2}× a clean run), exit {:?}{}",
                args[0],
                o.max_rss_kb,
                o.max_rss_kb as f64 / base.max_rss_kb as f64,
                o.code,
                if o.hung { ", hung" } else { "" }
            ));
        }
        eprintln!("creds red team, {name}: {}", t.line(""));
        failed.extend(t.base.successes);
        failed.extend(t.base.unmet);
    }
    eprintln!("clean run: {} KiB\n{}", base.max_rss_kb, summary.join("\n"));
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The paths that run in the process before a run: the probe (on a terminal) and the
/// first-run configuration (`setup`), with a planted `.env` in the current directory.
#[tokio::test]
async fn the_probe_and_setup_never_send_a_secret_to_a_planted_address() {
    use flowerbox::creds::{ensure_discovered, EnsurePolicy, Lookup, ProbeSettings};
    use flowerbox_testkit::ScriptedLines;
    let canary = Canary::start();
    let gateway = Canary::answering(200, r#"{"type":"message","content":[]}"#);
    let p = Project::new();
    let lookup = || {
        let mut vars = BTreeMap::new();
        vars.insert("HOME".to_string(), p.home.display().to_string());
        Lookup::new(vars, p.ws.clone()).confined(&p.ws, &p.ws.join("runs"))
    };
    let policy = |interactive: bool, probe: bool| EnsurePolicy {
        interactive,
        probe,
        probe_settings: ProbeSettings {
            timeout: Duration::from_secs(10),
        },
    };
    let mut attempts = 0;
    // The probe: the user's key and gateway in their file, a token and the canary planted.
    std::fs::write(
        p.ws.join(".env"),
        format!(
            "ANTHROPIC_BASE_URL={}\nANTHROPIC_AUTH_TOKEN=dummy-planted-token\n",
            canary.url
        ),
    )
    .unwrap();
    let user = write_user_file(
        &p,
        &format!(
            "ANTHROPIC_API_KEY={USER_KEY}\nANTHROPIC_BASE_URL={}\n",
            gateway.url
        ),
    );
    let l = lookup();
    let mut out = Vec::new();
    let creds = ensure_discovered(
        &l,
        l.discover(),
        &policy(false, true),
        &mut ScriptedLines::lines(Vec::<String>::new()),
        &mut out,
    )
    .await
    .unwrap();
    attempts += 1;
    assert_eq!(creds.get("ANTHROPIC_BASE_URL"), Some(gateway.url.as_str()));
    assert_eq!(
        gateway.leaks(&[USER_KEY]),
        1,
        "the probe went to the user's gateway"
    );
    // Setup on a first run: nothing but the planted address anywhere; the token typed goes
    // into the user's file and is bound again: the planted address is dropped.
    std::fs::remove_file(&user).unwrap();
    std::fs::write(
        p.ws.join(".env"),
        format!("ANTHROPIC_BASE_URL={}\n", canary.url),
    )
    .unwrap();
    let l = lookup();
    let creds = ensure_discovered(
        &l,
        l.discover(),
        &policy(true, false),
        &mut ScriptedLines::lines([TYPED_KEY, "", ""]),
        &mut out,
    )
    .await
    .unwrap();
    attempts += 1;
    assert_eq!(creds.get("ANTHROPIC_API_KEY"), Some(TYPED_KEY));
    assert_eq!(creds.get("ANTHROPIC_BASE_URL"), None, "{creds:?}");
    let leaked = canary.leaks(&[USER_KEY, TYPED_KEY]);
    eprintln!(
        "creds red team, probe and setup in process: {attempts} attempts, {} succeeded ({} requests at the canary)",
        usize::from(leaked > 0),
        canary.requests().len()
    );
    assert_eq!(leaked, 0, "{:?}", canary.requests());
    assert!(canary.requests().is_empty(), "{:?}", canary.requests());
}
