//! The project's MCP servers, end to end: `flowerbox once` with a `.mcp.json`, the real
//! binary, the strict scripted model over HTTP, a real Docker engine, and a hand-written MCP
//! stdio server (`tests/fixtures/mcp/server.py`, python3 is in the agent image) that behaves
//! well or hostilely by `--mode`. The server must run in the agent's container, its tool must
//! reach the model, and every failure must be a tool error or a note the model reads, never a
//! crash, with nothing left running.
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "docker_support/mod.rs"]
mod docker_support;
#[path = "model_support/mod.rs"]
mod model_support;

use docker_support::{engine_ready as engine, Sweep};
use model_support::ScriptedModel;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = include_str!("fixtures/mcp/server.py");
const HTTP_FIXTURE: &str = include_str!("fixtures/mcp/http_server.py");
/// Each run ends well within this.
const BOUND: Duration = Duration::from_secs(120);

/// A workspace with the fixture server in it and a `.mcp.json` naming `servers`
/// (name → mode, or a full entry).
struct Project {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
}

impl Project {
    fn new(servers: &[(&str, Value)]) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let home = root.join("home");
        std::fs::create_dir_all(ws.join("tools")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(ws.join("tools/mcp_fixture.py"), FIXTURE).unwrap();
        let mut entries = serde_json::Map::new();
        for (name, entry) in servers {
            entries.insert(name.to_string(), entry.clone());
        }
        let p = Project {
            _dir: dir,
            ws,
            home,
        };
        p.servers(Value::Object(entries));
        p
    }

    /// Writes the workspace's `.mcp.json` naming `servers` (name → entry).
    fn servers(&self, servers: Value) {
        std::fs::write(
            self.ws.join(".mcp.json"),
            json!({ "mcpServers": servers }).to_string(),
        )
        .unwrap();
    }

    /// A stdio entry running the fixture in `mode`.
    fn fixture(&self, mode: &str) -> Value {
        fixture_entry(&self.ws, mode)
    }
}

fn fixture_entry(ws: &Path, mode: &str) -> Value {
    json!({
        "command": "python3",
        "args": [ws.join("tools/mcp_fixture.py").display().to_string(), "--mode", mode],
        "env": {"FIXTURE_VALUE": "from-config", "ANTHROPIC_API_KEY": "sk-ant-planted"}
    })
}

/// `flowerbox ARGS` in the project against `model`; (exit code, stdout + stderr).
fn run(
    p: &Project,
    model: &ScriptedModel,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowerbox"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &p.home)
        .env("FLOWER_NO_PROBE", "1")
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-secret")
        .env("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        .envs(env.iter().copied())
        .current_dir(&p.ws)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn flowerbox");
    match flowerbox_testkit::wait_bounded(child, BOUND) {
        Ok(out) => (
            out.status.code(),
            format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(out) => panic!(
            "flowerbox ran over {BOUND:?} (hung?):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn tool(name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "name": name, "input": input})
}

/// Every tool result the model received, by the name of its tool: (text, is_error).
fn results(model: &ScriptedModel) -> BTreeMap<String, Vec<(String, bool)>> {
    let mut out: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for (name, text, is_error) in model.tool_results() {
        out.entry(name).or_default().push((text, is_error));
    }
    out
}

fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Containers (any state) of this workspace's runs.
/// Nothing of `p`'s runs is left on the engine (once their cleanup is done).
fn nothing_left(p: &Project) {
    let left = docker_support::cleanup::once_cleaned(|| containers_of(&p.ws));
    assert!(left.is_empty(), "{left:?}");
}

fn containers_of(ws: &Path) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=flowerbox.workspace={}", ws.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_stdio_server_runs_in_the_agents_container_and_its_tool_reaches_the_model() {
    if !engine("a_stdio_server_runs_in_the_agents_container_and_its_tool_reaches_the_model") {
        return;
    }
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    let fixture = p.fixture("normal");
    p.servers(json!({"fixture": fixture}));
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("mcp__fixture__probe", json!({})),
                     tool("mcp__fixture__touch", json!({"path": p.ws.join("made-by-mcp").display().to_string()}))]},
        {"content": [{"type": "text", "text": "探过了"}]}
    ]}]}));
    let (code, out) = run(&p, &model, &["--sandbox", "docker", "once", "探一下"], &[]);
    assert_eq!(code, Some(0), "{out}");
    let reqs = model.recorded();
    let offered = tool_names(&reqs[0]);
    assert!(
        offered.contains(&"mcp__fixture__probe".to_string())
            && offered.contains(&"mcp__fixture__touch".to_string()),
        "{offered:?}"
    );
    let results = results(&model);
    let (probe, err) = &results["mcp__fixture__probe"][0];
    assert!(!err, "{probe}");
    let probe: Value = serde_json::from_str(probe).unwrap();
    // Inside the agent's container, in the run's pod (whose PID 1 is `sleep infinity`), as
    // the invoking user, marked like every command, with no credential.
    assert_eq!(probe["dockerenv"], true, "{probe}");
    assert!(
        probe["pid1"].as_str().unwrap().ends_with("sleep infinity"),
        "{probe}"
    );
    assert_eq!(probe["exec_marker"], true, "{probe}");
    assert_ne!(
        probe["hostname"].as_str().unwrap(),
        nix::unistd::gethostname().unwrap().to_string_lossy()
    );
    assert_eq!(probe["uid"], nix::unistd::getuid().as_raw());
    assert_eq!(probe["cwd"], p.ws.display().to_string());
    assert_eq!(
        probe["secret_env"],
        json!([]),
        "a credential reached the server"
    );
    assert_eq!(probe["fixture_env"], "from-config");
    // The tool result is in the next request (what the model sees).
    assert!(reqs[1].to_string().contains("sleep infinity"));
    // The worker-like `once` writes through its own mount, as the user.
    let made = p.ws.join("made-by-mcp");
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "touched\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&made).unwrap().uid(),
        nix::unistd::getuid().as_raw()
    );
    assert!(
        out.contains("凭证"),
        "the dropped credential is named: {out}"
    );
    // Stopped with its container: nothing of the run is left on the engine.
    nothing_left(&p);
}

#[test]
fn hostile_and_broken_servers_are_tool_errors_never_crashes() {
    if !engine("hostile_and_broken_servers_are_tool_errors_never_crashes") {
        return;
    }
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    let mut servers = serde_json::Map::new();
    for (name, mode) in [
        ("ok", "chatty"),
        ("crash", "crash"),
        ("hang", "hang"),
        ("garbage", "garbage"),
        ("huge", "huge"),
        ("hugeline", "hugeline"),
        ("failinit", "failinit"),
        ("hanginit", "hanginit"),
        ("odd", "oddnames"),
        ("bloat", "bloat"),
    ] {
        servers.insert(name.into(), p.fixture(mode));
    }
    servers.insert("missing".into(), json!({"command": "no-such-mcp-server"}));
    servers.insert(
        "loop".into(),
        json!({"type": "http", "url": "http://127.0.0.1:9/mcp"}),
    );
    servers.insert("human".into(), json!({"command": "python3"}));
    p.servers(json!(servers));
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [
            tool("mcp__ok__probe", json!({})),
            tool("mcp__crash__probe", json!({})),
            tool("mcp__hang__probe", json!({})),
            tool("mcp__garbage__probe", json!({})),
            tool("mcp__huge__probe", json!({})),
            tool("mcp__hugeline__probe", json!({})),
            tool("mcp__odd__a_b", json!({})),
            tool("mcp__failinit__probe", json!({}))]},
        {"content": [tool("mcp__crash__probe", json!({})), tool("mcp__ok__probe", json!({}))]},
        {"content": [tool("mcp__crash__probe", json!({}))]},
        {"content": [tool("mcp__crash__probe", json!({}))]},
        {"content": [{"type": "text", "text": "都试过了"}]}
    ]}]}));
    let t = Instant::now();
    let (code, out) = run(
        &p,
        &model,
        &["--sandbox", "docker", "-W", "once", "挨个试"],
        &[("MCP_TIMEOUT", "8000"), ("MCP_TOOL_TIMEOUT", "3000")],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(t.elapsed() < Duration::from_secs(90), "{:?}", t.elapsed());
    let reqs = model.recorded();
    // The strict server accepted every request: all offered names match the APIs' pattern.
    let offered = tool_names(&reqs[0]);
    for n in &offered {
        assert!(
            n.len() <= 64
                && n.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-'),
            "{n}"
        );
    }
    let odd: Vec<&String> = offered
        .iter()
        .filter(|n| n.starts_with("mcp__odd__"))
        .collect();
    assert_eq!(odd.len(), 6, "{offered:?}");
    for gone in [
        "mcp__failinit__",
        "mcp__hanginit__",
        "mcp__missing__",
        "mcp__loop__",
        "mcp__human__probe",
    ] {
        assert!(
            !offered.iter().any(|n| n.starts_with(gone)),
            "{gone}: {offered:?}"
        );
    }
    // What did not start is said in the first message, with the server's own stderr.
    let first = reqs[0]["messages"][0].to_string();
    assert!(
        first.contains("failinit") && first.contains("missing config"),
        "{first}"
    );
    assert!(
        first.contains("hanginit") && first.contains("8 秒内没完成初始化"),
        "{first}"
    );
    assert!(
        first.contains("loop") && first.contains("回环地址"),
        "{first}"
    );
    assert!(
        first.contains("no-such-mcp-server 在容器里找不到或不能执行"),
        "{first}"
    );
    assert!(
        out.contains("人机通道"),
        "the reserved name is refused: {out}"
    );

    let r = results(&model);
    let one = |name: &str, i: usize| r[name][i].clone();
    let (text, err) = one("mcp__ok__probe", 0);
    assert!(!err && text.contains("\"dockerenv\": true"), "{text}");
    let (text, err) = one("mcp__crash__probe", 0);
    assert!(
        err && text.contains("退出码 3") && text.contains("crashing on purpose"),
        "{text}"
    );
    // The next call restarts it (and it crashes again, an error again).
    let (text, err) = one("mcp__crash__probe", 1);
    assert!(err && text.contains("退出码 3"), "{text}");
    // Twice restarted, then it stays stopped.
    let (text, err) = one("mcp__crash__probe", 2);
    assert!(
        err && text.contains("退出码 3") && !text.contains("会重启"),
        "{text}"
    );
    let (text, err) = one("mcp__crash__probe", 3);
    assert!(err && text.contains("不再启动它"), "{text}");
    let (text, err) = one("mcp__hang__probe", 0);
    assert!(err && text.contains("3 秒内没有回答"), "{text}");
    let (text, err) = one("mcp__garbage__probe", 0);
    assert!(err && text.contains("秒内没有回答"), "{text}");
    let (text, err) = one("mcp__hugeline__probe", 0);
    assert!(err && text.contains("超过 4 MiB"), "{text}");
    // A huge result is capped and spilled to the workbench like Bash output.
    let (text, err) = one("mcp__huge__probe", 0);
    assert!(
        !err && text.contains("已落盘到") && text.len() < 5000,
        "{text}"
    );
    let spilled = text
        .split("已落盘到 ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .unwrap();
    let full = std::fs::read_to_string(spilled).unwrap();
    assert!(full.starts_with("HEAD") && full.ends_with("TAIL") && full.contains("中间省略"));
    assert!(full.chars().count() < 31_000, "{}", full.len());
    let (text, err) = one("mcp__odd__a_b", 0);
    assert!(!err && text.contains("dockerenv"), "{text}");
    let (text, err) = one("mcp__failinit__probe", 0);
    // Whitelisted (`mcp__*`): the refusal names the server that did not start.
    assert!(
        err && text.contains("MCP 服务器 failinit") && !text.contains("白名单"),
        "{text}"
    );
    // The well-behaved server kept working beside the broken ones.
    assert!(!one("mcp__ok__probe", 1).1);
    nothing_left(&p);
}

#[test]
fn plan_mode_offers_only_read_only_tools_and_minus_t_picks_tools() {
    if !engine("plan_mode_offers_only_read_only_tools_and_minus_t_picks_tools") {
        return;
    }
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    p.servers(json!({"fx": p.fixture("normal"), "other": p.fixture("normal")}));
    let turns = json!({"agents": [{"role": "once", "turns": [
        {"content": [{"type": "text", "text": "看了"}]}]}]});
    let model = ScriptedModel::start(&turns);
    let (code, out) = run(&p, &model, &["once", "-p", "plan", "看看"], &[]);
    assert_eq!(code, Some(0), "{out}");
    let offered = tool_names(&model.recorded()[0]);
    assert!(
        offered.contains(&"mcp__fx__probe".to_string()),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|n| n.ends_with("__touch")),
        "{offered:?}"
    );

    let model = ScriptedModel::start(&turns);
    let (code, out) = run(
        &p,
        &model,
        &["once", "-t", "Read,mcp__fx__touch", "写"],
        &[],
    );
    assert_eq!(code, Some(0), "{out}");
    let offered = tool_names(&model.recorded()[0]);
    assert_eq!(offered, ["Read", "mcp__fx__touch"]);

    // A server no configuration names is an argument error, before any model call (and
    // before any container: the runs above are cleaned up first, by their detached cleanup).
    nothing_left(&p);
    let model = ScriptedModel::start(&turns);
    let (code, out) = run(&p, &model, &["once", "-t", "mcp__nope", "写"], &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("mcp__nope") && out.contains("fx, other"),
        "{out}"
    );
    assert!(model.recorded().is_empty());
    assert!(containers_of(&p.ws).is_empty());
}

#[test]
fn doctor_lists_the_servers_and_whether_each_starts() {
    if !engine("doctor_lists_the_servers_and_whether_each_starts") {
        return;
    }
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    p.servers(json!({
        "good": p.fixture("normal"),
        "bad": p.fixture("failinit"),
        "old": {"type": "sse", "url": "https://x.example/sse"}
    }));
    let model = ScriptedModel::start(&json!({"agents": []}));
    let (_, out) = run(&p, &model, &["doctor"], &[]);
    let mcp: Vec<&str> = out.lines().filter(|l| l.contains(" mcp ")).collect();
    assert!(
        mcp.iter().any(|l| l.starts_with("通过")
            && l.contains("good(")
            && l.contains("在 agent 容器里起来了,2 个工具:probe(只读), touch")),
        "{out}"
    );
    assert!(
        mcp.iter()
            .any(|l| l.starts_with("不行") && l.contains("bad(") && l.contains("missing config")),
        "{out}"
    );
    assert!(
        mcp.iter()
            .any(|l| l.starts_with("注意") && l.contains("sse")),
        "{out}"
    );
    nothing_left(&p);
}

#[test]
fn with_sandbox_host_the_server_is_a_host_process_and_says_so() {
    let p = Project::new(&[]);
    p.servers(json!({"fx": p.fixture("normal")}));
    let model = ScriptedModel::start(&json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("mcp__fx__probe", json!({}))]},
        {"content": [{"type": "text", "text": "好"}]}]}]}));
    let (code, out) = run(&p, &model, &["--sandbox", "host", "once", "探"], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("没有沙箱"), "{out}");
    let r = results(&model);
    let probe: Value = serde_json::from_str(&r["mcp__fx__probe"][0].0).unwrap();
    assert_eq!(probe["exec_marker"], false);
    assert!(!probe["pid1"].as_str().unwrap().ends_with("sleep infinity"));
    assert_eq!(
        probe["secret_env"],
        json!([]),
        "credentials are removed on the host too"
    );
}

/// A judge's server runs under the judge's own uid with its restrictions: `readOnlyHint` is
/// only a filter of what is offered, and a server that lies about it still writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_roles_server_runs_under_its_uid_and_writes_nothing_even_when_it_lies() {
    use flowerbox::mcp::{AgentAsk, McpHub, McpSettings, ServerConfig, Transport};
    use flowerbox::role::Role;
    use flowerbox::sandbox::docker::{ReadOnlyIds, UserIds};
    use flowerbox::sandbox::SandboxFactory;
    let test = "a_read_only_roles_server_runs_under_its_uid_and_writes_nothing_even_when_it_lies";
    let Some(engine) = docker_support::engine_or_skip(test).await else {
        return;
    };
    let run = docker_support::TestRun::new(&engine, "mcp-ro").await;
    let ws = run.workspace.clone();
    std::fs::create_dir_all(ws.join("tools")).unwrap();
    std::fs::write(ws.join("tools/mcp_fixture.py"), FIXTURE).unwrap();
    let server = |mode: &str| ServerConfig {
        name: mode.into(),
        id: mode.into(),
        origin: ws.join(".mcp.json"),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![
                ws.join("tools/mcp_fixture.py").display().to_string(),
                "--mode".into(),
                mode.into(),
            ],
            env: Vec::new(),
        },
    };
    let hub = McpHub::new(
        vec![server("normal"), server("liar")],
        McpSettings::default(),
        Default::default(),
        30_000,
    );
    let judge = run.agent("judge-1", Role::Judge, true);
    let sandbox = run.factory.sandbox(&judge).await.unwrap();
    let mcp = hub
        .for_agent(AgentAsk {
            agent: "judge-1".into(),
            whitelist: vec!["mcp__*".into()],
            read_only: true,
            taken: Default::default(),
            sandbox: Some(sandbox),
            cwd: ws.clone(),
        })
        .await;
    assert!(mcp.notes.is_empty(), "{:?}", mcp.notes);
    let names: Vec<&str> = mcp.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["mcp__normal__probe", "mcp__liar__probe", "mcp__liar__touch"]
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let probe: Value = serde_json::from_str(
        &mcp.call("mcp__normal__probe", &json!({}), &cancel)
            .await
            .unwrap(),
    )
    .unwrap();
    let judge_uid = ReadOnlyIds::of(flowerbox::sandbox::Seat::Judge, UserIds::current())
        .shell
        .uid;
    assert_eq!(probe["uid"], judge_uid, "{probe}");
    assert_eq!(probe["exec_marker"], true);
    let target = ws.join("written-by-a-judge");
    let err = mcp
        .call(
            "mcp__liar__touch",
            &json!({"path": target.display().to_string()}),
            &cancel,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot write"), "{err}");
    assert!(!target.exists());
    hub.shutdown().await;
    run.factory.teardown().await.unwrap();
}

/// A test host of our own: the HTTP fixture in a container of the agent image on a network
/// this test creates (a private address on this machine); removed on drop.
struct HttpHost {
    container: String,
    network: String,
    ip: String,
    _dir: tempfile::TempDir,
}

impl HttpHost {
    fn start(image: &str) -> HttpHost {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().canonicalize().unwrap().join("http_server.py");
        std::fs::write(&script, HTTP_FIXTURE).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let network = format!("fbx-mcp-test-{tag}");
        let docker = |args: &[&str]| {
            let out = Command::new("docker").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "docker {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        docker(&[
            "network",
            "create",
            "--label",
            "flowerbox.test=mcp",
            &network,
        ]);
        let mount = format!(
            "type=bind,source={},target=/srv/http_server.py,readonly",
            script.display()
        );
        let container = docker(&[
            "run",
            "-d",
            "--rm",
            "--label",
            "flowerbox.test=mcp",
            "--network",
            &network,
            "--mount",
            &mount,
            "--entrypoint",
            "python3",
            image,
            "/srv/http_server.py",
            "8000",
        ]);
        let ip = docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &container,
        ]);
        let host = HttpHost {
            container,
            network,
            ip,
            _dir: dir,
        };
        // Ready when it answers.
        let t = Instant::now();
        while std::net::TcpStream::connect((host.ip.as_str(), 8000)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the HTTP fixture did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        host
    }
}

impl Drop for HttpHost {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.container])
            .output();
        let _ = Command::new("docker")
            .args(["network", "rm", &self.network])
            .output();
    }
}

#[test]
fn an_http_server_is_reached_from_the_host_only_where_the_egress_policy_allows() {
    let test = "an_http_server_is_reached_from_the_host_only_where_the_egress_policy_allows";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(image) = rt.block_on(async {
        match docker_support::engine_or_skip(test).await {
            Some(e) => Some(docker_support::agent_image(&e).await),
            None => None,
        }
    }) else {
        return;
    };
    let host = HttpHost::start(&image);
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    p.servers(json!({"web": {
        "type": "http",
        "url": format!("http://{}:8000/mcp", host.ip),
        "headers": {"Authorization": "Bearer ${FIXTURE_TOKEN}", "X-Other": "${HOME:-none}"}
    }}));
    let scenario = json!({"agents": [{"role": "once", "turns": [
        {"content": [tool("mcp__web__probe", json!({}))]},
        {"content": [{"type": "text", "text": "连上了"}]}]}]});
    // A private address: refused unless --allow-net names it (the note says so).
    let model = ScriptedModel::start(&scenario);
    let env = [("FIXTURE_TOKEN", "tok-42")];
    let (code, out) = run(
        &p,
        &model,
        &[
            "--sandbox",
            "host",
            "--mcp-env",
            "FIXTURE_TOKEN",
            "once",
            "连",
        ],
        &env,
    );
    assert_eq!(code, Some(0), "{out}");
    let first = model.recorded()[0]["messages"][0].to_string();
    assert!(
        first.contains("内网") && first.contains(&host.ip),
        "{first}"
    );
    assert!(!tool_names(&model.recorded()[0])
        .iter()
        .any(|n| n.starts_with("mcp__web")));

    // Allowed: the tool is offered and called over HTTP, the named variable expanded.
    let model = ScriptedModel::start(&scenario);
    let allow = format!("{}/32", host.ip);
    let (code, out) = run(
        &p,
        &model,
        &[
            "--sandbox",
            "host",
            "--allow-net",
            &allow,
            "--mcp-env",
            "FIXTURE_TOKEN",
            "once",
            "连",
        ],
        &env,
    );
    assert_eq!(code, Some(0), "{out}");
    let r = results(&model);
    let (text, err) = &r["mcp__web__probe"][0];
    assert!(!err, "{text}");
    let probe: Value = serde_json::from_str(text).unwrap();
    assert_eq!(probe["http"], true);
    assert_eq!(probe["session"], "fixture-session-1");
    assert_eq!(probe["auth"], "Bearer tok-42");

    // Without --mcp-env the variable is not read: the server is not started, and says why.
    let model = ScriptedModel::start(&scenario);
    let (code, out) = run(
        &p,
        &model,
        &["--sandbox", "host", "--allow-net", &allow, "once", "连"],
        &env,
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("--mcp-env FIXTURE_TOKEN"), "{out}");
    assert!(!tool_names(&model.recorded()[0])
        .iter()
        .any(|n| n.starts_with("mcp__web")));
}

/// An interrupt ends a call at once (the model reads "interrupted"), and releasing the agent
/// stops its servers: nothing of them keeps running. Host sandbox, so no engine is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_call_and_release_stops_the_server() {
    use flowerbox::mcp::{AgentAsk, McpError, McpHub, McpSettings, ServerConfig, Transport};
    use flowerbox::role::Role;
    use flowerbox::sandbox::host::HostSandboxFactory;
    use flowerbox::sandbox::{AgentBox, Mount, SandboxFactory};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    // A unique path, to find its processes by.
    let script = ws.join(format!("fx-{}.py", uuid::Uuid::new_v4().simple()));
    std::fs::write(&script, FIXTURE).unwrap();
    let config = ServerConfig {
        name: "slow".into(),
        id: "slow".into(),
        origin: ws.join(".mcp.json"),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![script.display().to_string(), "--mode".into(), "hang".into()],
            env: Vec::new(),
        },
    };
    let hub = McpHub::new(
        vec![config],
        McpSettings::default(),
        Default::default(),
        30_000,
    );
    let factory = HostSandboxFactory::new();
    let agent = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.clone(), false)],
        masked: Vec::new(),
        workdir: ws.clone(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
    };
    let sandbox = factory.sandbox(&agent).await.unwrap();
    let mcp = hub
        .for_agent(AgentAsk {
            agent: "worker-1".into(),
            whitelist: vec!["mcp__slow".into()],
            read_only: false,
            taken: Default::default(),
            sandbox: Some(sandbox),
            cwd: ws.clone(),
        })
        .await;
    assert_eq!(mcp.tools().len(), 2, "{:?}", mcp.notes);
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&*script.to_string_lossy()))
                    .unwrap_or(false)
            })
            .count()
    };
    assert_eq!(running(), 1);
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel();
    });
    let t = Instant::now();
    let err = mcp
        .call("mcp__slow__probe", &json!({}), &cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Interrupted), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    hub.release("worker-1").await;
    let t = Instant::now();
    while running() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the server outlived its release"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    factory.teardown().await.unwrap();
}

/// Through `go`: the worker gets every tool of the project's server, the coordinator and the
/// judge (with `--judge-can-run`) only the read-only one, the clarifier none; the judge's
/// server runs under the judge's uid, and the worker's call really writes.
#[test]
fn in_go_each_role_gets_the_servers_tools_its_container_allows() {
    let test = "in_go_each_role_gets_the_servers_tools_its_container_allows";
    if !engine(test) {
        return;
    }
    let p = Project::new(&[]);
    let _sweep = Sweep(p.ws.clone());
    // Relative to the agent's working directory, as in Claude Code.
    p.servers(json!({"fx": {"command": "python3", "args": ["tools/mcp_fixture.py"]}}));
    let done = p.ws.join("done.txt").display().to_string();
    let model = ScriptedModel::start(&json!({"agents": [
        {"role": "clarifier", "turns": [{"content": [{"type": "text", "text":
            "## 目标\n写 done.txt\n\n## 验收标准\n- done.txt 存在\n\n## 边界\n无\n\n## 未知与假设\n- 无\n"}]}]},
        {"role": "judge", "prompt": "变成可判定的目标", "turns": [{"content": [{"type": "text", "text":
            "## 目标\ndone.txt 存在\n\n## 判定清单\n- `test -f done.txt` 成功\n"}]}]},
        {"role": "judge", "prompt": "判定这一轮", "turns": [
            {"content": [tool("mcp__fx__probe", json!({}))]},
            {"content": [{"type": "text", "text": "## 结论\nACHIEVED\n\n## 理由\n看到了\n\n## 未通过\n无\n"}]}]},
        {"role": "coordinator", "turns": [
            {"content": [tool("Agent", json!({"description": "写 done.txt", "prompt": "用 mcp__fx__touch 写 done.txt"}))]},
            {"content": [{"type": "text", "text": "写好了。"}]}]},
        {"role": "worker", "turns": [
            {"content": [tool("mcp__fx__touch", json!({"path": done}))]},
            {"content": [{"type": "text", "text": "结论:写好了\n依据:mcp__fx__touch\n产出:done.txt\n未验证:无"}]}]}
    ]}));
    let (code, out) = run(
        &p,
        &model,
        &[
            "--sandbox",
            "docker",
            "go",
            "--judge-can-run",
            "--timeout",
            "0",
            "写 done.txt",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "touched\n");
    let mut seen = std::collections::BTreeSet::new();
    for req in model.recorded() {
        let names = tool_names(&req);
        let has = |n: &str| names.iter().any(|t| t == n);
        let role = if has("Agent") {
            "coordinator"
        } else if has("Write") {
            "worker"
        } else if has("Bash") {
            "judge"
        } else {
            "clarifier"
        };
        let mcp: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("mcp__fx__"))
            .collect();
        let want: &[&str] = match role {
            "worker" => &["mcp__fx__probe", "mcp__fx__touch"],
            "coordinator" | "judge" => &["mcp__fx__probe"],
            _ => &[],
        };
        assert_eq!(mcp, want, "{role}: {names:?}");
        seen.insert(role);
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    let r = results(&model);
    let probe: Value = serde_json::from_str(&r["mcp__fx__probe"][0].0).unwrap();
    let judge_uid = flowerbox::sandbox::docker::ReadOnlyIds::of(
        flowerbox::sandbox::Seat::Judge,
        flowerbox::sandbox::docker::UserIds::current(),
    )
    .shell
    .uid;
    assert_eq!(probe["uid"], judge_uid, "{probe}");
    nothing_left(&p);
}
