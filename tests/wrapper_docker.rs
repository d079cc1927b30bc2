//! `docker/flowerbox`, the CI-container wrapper (issue 10), end to end: the runner image is
//! built by `docker/build.sh` from the test's own binary, `scripted-model` listens on the
//! host's loopback (the runner container uses the host network), and real flows run through
//! the wrapper with every Bash call in an agent container started through the mounted socket.
//!
//! Docker-gated: with `CI=true` a missing engine fails; elsewhere the tests skip visibly.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod docker_support;
mod model_support;

use docker_support::{containers_where, engine_or_skip, gc_command, repo_file, runner_image};
use flowerbox::sandbox::docker::Engine;
use flowerbox_testkit::git;
use model_support::ScriptedModel;
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "sk-ant-wrapper-test-secret-4711";
/// Generous bound that only catches hangs.
const HANG: Duration = Duration::from_secs(240);

/// A temporary project `<tmp>/proj` (a git repository) and a HOME `<tmp>/home`.
struct Project {
    tmp: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
}

impl Project {
    fn new() -> Project {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ws = root.join("pro ject");
        let home = root.join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(ok.success());
        Project { tmp, ws, home }
    }

    /// Hands the whole tree to `uid:gid`.
    fn chown(&self, uid: u32, gid: u32) {
        let ok = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(self.tmp.path())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// `docker/flowerbox ARGS` in the workspace with a clean environment: the runner image,
    /// the scripted model's address and a key, passed by name by the wrapper.
    fn wrapped(&self, image: &str, model: &ScriptedModel, args: &[&str]) -> Command {
        let mut c = Command::new(repo_file("docker/flowerbox"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("FLOWERBOX_RUNNER_IMAGE", image)
            .env("FLOWER_NO_PROBE", "1")
            .env("ANTHROPIC_BASE_URL", &model.url)
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
            .current_dir(&self.ws)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// [`Project::wrapped`] run to its end, which must be exit 0: the wrapper's pid and stdout.
    fn run_ok(&self, image: &str, model: &ScriptedModel, args: &[&str]) -> (u32, String) {
        let child = self.wrapped(image, model, args).spawn().unwrap();
        let pid = child.id();
        let (status, out, err) = finish(child);
        assert_eq!(status.code(), Some(0), "{out}\n{err}");
        (pid, out)
    }

    fn manifest(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.ws.join("runs/manifest.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

/// Waits (bounded) and returns status, stdout, stderr.
fn finish(child: Child) -> (ExitStatus, String, String) {
    let out = flowerbox_testkit::wait_bounded(child, HANG)
        .unwrap_or_else(|_| panic!("docker/flowerbox hung for {HANG:?}"));
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Containers (any state) whose label `key` is `value`.
async fn containers_labelled(engine: &Engine, key: &str, value: &str) -> Vec<String> {
    containers_where(engine, "label", format!("{key}={value}")).await
}

/// Runner containers this wrapper process started (named `flowerbox-runner-<pid>-…`).
async fn runner_containers(engine: &Engine, pid: u32) -> Vec<String> {
    containers_where(engine, "name", format!("flowerbox-runner-{pid}-")).await
}

/// The runner containers of the wrapper `pid` that has exited, once the engine has removed
/// them (`docker run --rm`) or after [`HANG`]. The engine's removal can trail the CLI's exit:
/// right after a SIGTERMed wrapper exited, its container was still listed (a flaky failure),
/// so "gone" is waited for, not sampled once; one that stays is still a failure.
async fn runner_containers_left(engine: &Engine, pid: u32) -> Vec<String> {
    let deadline = Instant::now() + HANG;
    loop {
        let left = runner_containers(engine, pid).await;
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nothing of `p`'s runs is left: no agent container of its workspace, no runner container of
/// the wrapper `pid`.
async fn nothing_left(engine: &Engine, p: &Project, pid: u32) {
    let ws = p.ws.to_string_lossy().into_owned();
    assert!(containers_labelled(engine, "flowerbox.workspace", &ws)
        .await
        .is_empty());
    assert_eq!(
        runner_containers_left(engine, pid).await,
        Vec::<String>::new()
    );
}

/// The tool_result text the model received in request `n`.
fn tool_result(model: &ScriptedModel, n: usize) -> String {
    let req = &model.recorded()[n];
    let last = req["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"].to_string()
}

fn bash_scenario(command: &str) -> Value {
    json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": command}}]},
        {"content": [{"type": "text", "text": "跑完了"}]}]}]})
}

const PROBE: &str = "test -f /.dockerenv && echo in-container; echo uid=$(id -u) gid=$(id -g); \
                     echo pwd=$(pwd); echo key=${ANTHROPIC_API_KEY:-none}; echo made > made.txt";

#[tokio::test(flavor = "multi_thread")]
async fn once_with_bash_runs_through_the_wrapper_in_an_agent_container() {
    let Some(engine) = engine_or_skip("wrapper once").await else {
        return;
    };
    let image = runner_image(&engine).await;
    let model = ScriptedModel::start(&bash_scenario(PROBE));
    let p = Project::new();
    let (pid, out) = p.run_ok(&image, &model, &["once", "-t", "Bash", "探一下"]);
    assert!(out.contains("跑完了"), "{out}");

    // The Bash call ran in an agent container, at the host path, as the caller, without the key.
    let result = tool_result(&model, 1);
    let me = nix::unistd::getuid().as_raw();
    assert!(result.contains("in-container"), "{result}");
    assert!(result.contains(&format!("uid={me}")), "{result}");
    assert!(
        result.contains(&format!("pwd={}", p.ws.display())),
        "{result}"
    );
    assert!(result.contains("key=none"), "{result}");
    let made = p.ws.join("made.txt");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "made\n");
    assert_eq!(std::fs::metadata(&made).unwrap().uid(), me);

    // flowerbox's books are in the project, as on the host.
    let rows = p.manifest();
    assert_eq!(rows[0]["step"], "ad-hoc");
    assert_eq!(rows[0]["ok"], true);
    let log = std::fs::read_to_string(p.ws.join("runs/flowerbox.log")).unwrap_or_default();
    assert!(!log.contains(SECRET));

    nothing_left(&engine, &p, pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unattended_go_workflow_runs_through_the_wrapper() {
    let Some(engine) = engine_or_skip("wrapper go").await else {
        return;
    };
    let image = runner_image(&engine).await;
    // The go workflow's own scenario: clarify (no human) → goal → worker → judge NOT_YET →
    // round 2 → ACHIEVED, the workers' Bash calls in their containers.
    let scenario = std::fs::read_to_string(repo_file("tests/scenarios/flow_go.json")).unwrap();
    let model = ScriptedModel::start(&serde_json::from_str(&scenario).unwrap());
    let p = Project::new();
    let (pid, _) = p.run_ok(&image, &model, &["--timeout", "0", "写个 hello.sh"]);
    let steps: Vec<String> = p
        .manifest()
        .iter()
        .map(|r| r["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        steps,
        [
            "确认需求",
            "设定目标",
            "干活",
            "干活·判定#1",
            "干活#round2",
            "干活·判定#2"
        ]
    );
    assert!(p.manifest().iter().all(|r| r["ok"] == true));
    let hello = p.ws.join("hello.sh");
    assert_eq!(std::fs::read_to_string(&hello).unwrap(), "echo hello\n");
    assert_ne!(std::fs::metadata(&hello).unwrap().mode() & 0o111, 0);
    assert!(p.ws.join(".flower/notes/目标.md").is_file());
    nothing_left(&engine, &p, pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn go_isolate_works_in_worktrees_through_the_wrapper() {
    let Some(engine) = engine_or_skip("wrapper go --isolate").await else {
        return;
    };
    let image = runner_image(&engine).await;
    let scenario = std::fs::read_to_string(repo_file("tests/scenarios/isolate_go.json")).unwrap();
    let model = ScriptedModel::start(&serde_json::from_str(&scenario).unwrap());
    let p = Project::new();
    git(&p.ws, &["config", "user.name", "Test User"]);
    git(&p.ws, &["config", "user.email", "test@example.invalid"]);
    std::fs::write(p.ws.join("README.md"), "proj\n").unwrap();
    git(&p.ws, &["add", "."]);
    git(&p.ws, &["commit", "-q", "-m", "init"]);
    let args = [
        "--isolate",
        "--judge-can-run",
        "--timeout",
        "0",
        "写个 hello.sh",
    ];
    let (pid, _) = p.run_ok(&image, &model, &args);

    // The worker wrote in its worktree (outside the project, mounted by the wrapper at its own
    // path); its branch was integrated with a commit; the judge ran the result.
    let hello = p.ws.join("hello.sh");
    assert_eq!(
        std::fs::read_to_string(&hello).unwrap(),
        "#!/bin/sh\necho hello\n"
    );
    let log = git(&p.ws, &["log", "--format=%an|%s"]);
    assert!(log.contains("Test User|flowerbox worker-1"), "{log}");
    let judged = model
        .recorded()
        .iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("judged-ok"));
    assert!(judged.is_some(), "the judge's command never returned");
    assert_eq!(git(&p.ws, &["branch", "--list", "flower/*"]), "");
    assert_eq!(git(&p.ws, &["worktree", "list"]).lines().count(), 1);
    let parent = p.ws.parent().unwrap();
    assert!(parent.join(".flower-pro ject/notes/需求.md").is_file());
    assert!(parent.join(".flower-pro ject-worktrees").is_dir());
    let me = nix::unistd::getuid().as_raw();
    assert_eq!(std::fs::metadata(&hello).unwrap().uid(), me);
    nothing_left(&engine, &p, pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_reaches_flowerbox_and_the_exit_code_passes_through() {
    let Some(engine) = engine_or_skip("wrapper sigterm").await else {
        return;
    };
    let image = runner_image(&engine).await;

    // A usage error: flowerbox's own exit code 2 comes back unchanged.
    let model = ScriptedModel::start(&bash_scenario("sleep 120"));
    let p = Project::new();
    let (status, _, err) = finish(
        p.wrapped(&image, &model, &["--window", "0", "x"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("--window 0"), "{err}");

    // SIGTERM to the wrapper while an agent's command runs.
    let child = p
        .wrapped(&image, &model, &["once", "-t", "Bash", "睡"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let ws = p.ws.to_string_lossy().into_owned();
    let deadline = Instant::now() + HANG;
    loop {
        // The pod and the agent's container exist, and the command was sent.
        if containers_labelled(&engine, "flowerbox.workspace", &ws)
            .await
            .len()
            >= 2
            && model.recorded().len() == 1
        {
            break;
        }
        assert!(Instant::now() < deadline, "the agent container never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A host flowerbox sees the wrapped run as alive (same pid namespace, host name, boot):
    // its gc keeps the containers instead of sweeping them as orphans.
    let gc = gc_command(&p.ws)
        .current_dir(&p.ws)
        .env("HOME", &p.home)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&gc.stdout).into_owned() + &String::from_utf8_lossy(&gc.stderr);
    assert!(gc.status.success(), "{said}");
    assert!(said.contains("\n- 留着容器 fbx-"), "{said}");
    assert!(said.contains(":主人还在跑\n"), "{said}");
    assert!(
        containers_labelled(&engine, "flowerbox.workspace", &ws)
            .await
            .len()
            >= 2
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    let (status, out, err) = finish(child);
    // flowerbox dies by the signal inside; docker reports 128 + 15.
    assert_eq!(status.code(), Some(143), "{out}\n{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let rows = p.manifest();
    let row = rows.iter().find(|r| r["step"] == "ad-hoc").unwrap();
    assert_eq!(row["ok"], false);
    assert_eq!(row["error"], "killed-by-signal");
    nothing_left(&engine, &p, pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_root_caller_gets_its_uid_and_the_socket_group() {
    let Some(engine) = engine_or_skip("wrapper non-root").await else {
        return;
    };
    if !nix::unistd::getuid().is_root() || Command::new("setpriv").arg("--help").output().is_err() {
        // As a non-root user the first test already runs the wrapper as that user.
        eprintln!("SKIPPED wrapper non-root: needs root and setpriv to become another user");
        return;
    }
    let image = runner_image(&engine).await;
    let model = ScriptedModel::start(&bash_scenario(PROBE));
    let p = Project::new();
    let (uid, gid) = (4242u32, 4343u32);
    p.chown(uid, gid);
    let sock_gid = std::fs::metadata("/var/run/docker.sock").unwrap().gid();
    let c = p.wrapped(&image, &model, &["once", "-t", "Bash", "探"]);
    // The checkout may sit under a directory only root can enter (`mktemp -d` makes 0700): the
    // other user runs a copy from a directory everyone can enter.
    let wrapper_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(wrapper_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = wrapper_dir.path().join("flowerbox");
    std::fs::copy(c.get_program(), &wrapper).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
    let mut c2 = Command::new("setpriv");
    c2.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg(format!("--groups={sock_gid}"))
        .arg(wrapper)
        .args(args)
        .env_clear()
        .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .current_dir(&p.ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (status, out, err) = finish(c2.spawn().unwrap());
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    let result = tool_result(&model, 1);
    assert!(result.contains("in-container"), "{result}");
    assert!(result.contains(&format!("uid={uid} gid={gid}")), "{result}");
    for f in ["made.txt", "runs/manifest.json", "runs/sessions.db"] {
        let m = std::fs::metadata(p.ws.join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{f}");
    }
}

/// The docker command the wrapper would run (`FLOWERBOX_WRAPPER_PRINT=FILE`).
fn printed(file: &Path) -> Vec<String> {
    let bytes = std::fs::read(file).unwrap();
    bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8(a.to_vec()).unwrap())
        .collect()
}

/// The bind mounts' targets of a printed command.
fn mount_targets(argv: &[String]) -> Vec<String> {
    argv.windows(2)
        .filter(|w| w[0] == "--mount")
        .filter_map(|w| {
            let t = w[1].split("\"target=").nth(1)?;
            Some(t.split('"').next()?.to_string())
        })
        .collect()
}

#[test]
fn the_command_line_mounts_paths_at_their_own_place_and_passes_secrets_by_name() {
    if Command::new("docker").arg("--version").output().is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI=true but the docker CLI is missing"
        );
        eprintln!("SKIPPED wrapper command line: no docker CLI");
        return;
    }
    let p = Project::new();
    let root = p.ws.parent().unwrap().to_path_buf();
    let out = root.join("argv");
    let elsewhere = root.join("else where/runs");
    let run = |args: &[&str], tty: bool| -> Vec<String> {
        let _ = std::fs::remove_file(&out);
        let mut c = Command::new(repo_file("docker/flowerbox"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &p.home)
            .env("FLOWERBOX_WRAPPER_PRINT", &out)
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("OPENAI_MODEL", "")
            .current_dir(&p.ws)
            .stdin(Stdio::null());
        let status = if tty {
            // `script` gives the wrapper a terminal on stdin and stdout.
            let mut line = shell_quote(&repo_file("docker/flowerbox").to_string_lossy());
            for a in args {
                line.push(' ');
                line.push_str(&shell_quote(a));
            }
            Command::new("script")
                .args(["-qec", &line, "/dev/null"])
                .env_clear()
                .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
                .current_dir(&p.ws)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap()
        } else {
            c.args(args).status().unwrap()
        };
        assert!(status.success());
        printed(&out)
    };

    let argv = run(
        &[
            "-vw",
            "sub dir",
            "--run-dir",
            &elsewhere.to_string_lossy(),
            "go",
            "--isolate",
            "帮我看看 -w 的用法",
        ],
        false,
    );
    let ws = p.ws.join("sub dir");
    let targets = mount_targets(&argv);
    // The project (covering the workspace and the workbench inside it), the run dir and the
    // worktree root of --isolate are mounted at their own paths; the caller created them.
    let mut want: Vec<String> = [&p.ws, &elsewhere, &root.join(".flower-pro ject-worktrees")]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    want.sort();
    let mut got = targets.clone();
    got.retain(|t| !t.starts_with("/run/flowerbox-home"));
    got.sort();
    assert_eq!(got, want);
    for dir in [&ws, &elsewhere, &p.ws.join(".flower-sub dir")] {
        assert!(dir.is_dir(), "{dir:?}");
    }
    assert!(argv
        .iter()
        .any(|a| a.contains("target=/var/run/docker.sock")));
    // Secrets by name only; an empty variable is passed as set; unset ones are not passed.
    assert!(argv
        .windows(2)
        .any(|w| w[0] == "-e" && w[1] == "ANTHROPIC_API_KEY"));
    assert!(argv
        .windows(2)
        .any(|w| w[0] == "-e" && w[1] == "OPENAI_MODEL"));
    assert!(!argv.iter().any(|a| a == "ANTHROPIC_AUTH_TOKEN"));
    assert!(!argv.iter().any(|a| a.contains(SECRET)));
    // flowerbox's arguments come last, unchanged; no terminal without one.
    let tail = &argv[argv.len() - 7..];
    assert_eq!(tail[0], "-vw");
    assert_eq!(tail[6], "帮我看看 -w 的用法");
    assert!(!argv.contains(&"-t".to_string()));
    assert!(argv.contains(&"-i".to_string()));
    let user = &argv[argv.iter().position(|a| a == "--user").unwrap() + 1];
    let me = format!(
        "{}:{}",
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw()
    );
    assert_eq!(user, &me);

    // A --mcp-config file is mounted read-only at its path; the variables --mcp-env names
    // go by name, like the secrets.
    let mcp = root.join("mcp servers.json");
    std::fs::write(&mcp, "{\"mcpServers\": {}}").unwrap();
    let argv = run(
        &[
            "--mcp-config",
            &mcp.to_string_lossy(),
            "--mcp-env=DOCS_TOKEN",
            "once",
            "hi",
        ],
        false,
    );
    let mount = argv
        .iter()
        .find(|a| a.contains(&format!("target={}\"", mcp.display())))
        .unwrap_or_else(|| panic!("{argv:?}"));
    assert!(mount.ends_with(",readonly"), "{mount}");
    assert!(!argv.iter().any(|a| a == "DOCS_TOKEN"), "unset: not passed");

    // Each --plugin-dir is mounted read-only at its path (both spellings).
    let (a, b) = (root.join("plugin a"), root.join("plugin-b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
    }
    let argv = run(
        &[
            "--plugin-dir",
            &a.to_string_lossy(),
            &format!("--plugin-dir={}", b.display()),
            "once",
            "hi",
        ],
        false,
    );
    for d in [&a, &b] {
        let mount = argv
            .iter()
            .find(|m| m.contains(&format!("target={}\"", d.display())))
            .unwrap_or_else(|| panic!("{d:?}: {argv:?}"));
        assert!(mount.ends_with(",readonly"), "{mount}");
    }

    if Command::new("script").arg("--version").output().is_ok() {
        let argv = run(&["once", "hi"], true);
        assert!(argv.contains(&"-t".to_string()), "{argv:?}");
    } else {
        eprintln!("SKIPPED the -t half: no `script` to make a terminal");
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
