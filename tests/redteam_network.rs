//! Red team, the network (issue 14 part 4; DESIGN.md threat model point 4), against the real
//! engine. Hostile commands in a run's containers try to reach another run's server, a service
//! the test binds on the host's every address (through the run network's gateway, the host's
//! addresses, the default bridge, `host.docker.internal`), the cloud metadata address, and the
//! world past `--egress none` and `--egress proxy` (directly, and through the proxy to names
//! it does not list); they try to drop the rules; `WebFetch` (host side) tries the host,
//! directly and through a redirect, and fetches a page nested 400k levels deep (which must be
//! stripped, not converted, in time). Every attempt is counted and a single success fails the
//! test; the host service counts the connections it accepted, which must stay zero. Positive
//! checks show the probes can succeed: the pod's loopback in every mode, a listed domain
//! through the proxy (judged by the proxy's decision, so a machine without internet passes).
// A test crate: its helpers unwrap and print as its tests may (clippy.toml `allow-*-in-tests`
// covers only #[test] fns).
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod box_support;
mod docker_support;

use box_support::{run, Tally};
use docker_support::*;
use flowerbox::agent::human::Absent;
use flowerbox::agent::tools::{ToolContext, ToolError, ToolLimits, ToolRegistry};
use flowerbox::role::Role;
use flowerbox::sandbox::docker::Engine;
use flowerbox::sandbox::egress::{parse_net, EgressMode, EgressPolicy, HostAddrs};
use flowerbox::sandbox::{AgentBox, Mount, Sandbox};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A whole test may take this long.
const BOUND: Duration = Duration::from_secs(300);

/// `try LABEL HOST PORT` prints `CONNECTED LABEL` when a TCP connection opens within 3 s,
/// else `REFUSED LABEL`; `via LABEL URL` asks the run proxy for URL and prints the proxy's
/// answer (`PROXY LABEL <http code>/<CONNECT code>`).
const PROBE: &str = r#"try() { if timeout 3 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; then echo "CONNECTED $1"; else echo "REFUSED $1"; fi; }
via() { echo "PROXY $1 $(curl -s -m 10 -o /dev/null -w '%{http_code}/%{http_connect}' --noproxy '' -x "$https_proxy" "$2")"; }
"#;

/// Says how the attacks on `what` went, then fails when one got through or `host` was
/// reached.
fn assert_none(tally: &Tally, what: &str, host: &HostService) {
    let accepted = host.accepted.load(Ordering::SeqCst);
    let extra = format!(", host service accepted {accepted}");
    tally.assert_none("redteam network", what, &extra);
    assert_eq!(accepted, 0, "{what}: the host service was reached");
}

/// A TCP service on every host address (dual-stack `[::]`, else `0.0.0.0`) that answers one
/// HTTP 200 per connection and counts the connections it accepted.
struct HostService {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl HostService {
    fn start() -> HostService {
        let listener = TcpListener::bind("[::]:0")
            .or_else(|_| TcpListener::bind("0.0.0.0:0"))
            .expect("bind a host service");
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = conn.set_read_timeout(Some(Duration::from_millis(300)));
                let _ = conn.read(&mut [0u8; 1024]);
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nhost");
            }
        });
        let host = HostService { port, accepted };
        // The service works: the test itself reaches it, then the count starts from zero.
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("host service reachable");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while host.accepted.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(host.accepted.swap(0, Ordering::SeqCst), 1);
        host
    }
}

/// The address and gateway of a run's pod on its network (`None` without a network).
async fn pod_address(engine: &Engine, run_id: &str) -> Option<(String, String)> {
    for id in run_containers(engine, run_id).await {
        let info = engine.docker().inspect_container(&id, None).await.unwrap();
        let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
        if labels.get("flowerbox.role").map(String::as_str) != Some("pod") {
            continue;
        }
        let nets = info
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default();
        return nets.into_values().find_map(|e| {
            let ip = e.ip_address.filter(|a| !a.is_empty())?;
            Some((ip, e.gateway.unwrap_or_default()))
        });
    }
    None
}

/// The host's addresses as probe targets: IPv4 ones, IPv6 global/ULA ones, and link-local ones
/// scoped to the pod's `eth0` (the bridge the pod sits on is one hop away).
fn host_targets(port: u16) -> Vec<(String, String, u16)> {
    let mut targets = Vec::new();
    for a in HostAddrs::discover().addrs {
        match a {
            IpAddr::V4(v4) if !v4.is_loopback() => {
                targets.push((format!("host-{v4}"), v4.to_string(), port))
            }
            IpAddr::V6(v6) if !v6.is_loopback() => {
                let host = if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    format!("{v6}%eth0")
                } else {
                    v6.to_string()
                };
                targets.push((format!("host-{v6}"), host, port));
            }
            _ => {}
        }
    }
    targets.push(("docker0-172.17.0.1".into(), "172.17.0.1".into(), port));
    targets.push((
        "host.docker.internal".into(),
        "host.docker.internal".into(),
        port,
    ));
    targets.push((
        "metadata-169.254.169.254".into(),
        "169.254.169.254".into(),
        80,
    ));
    targets
}

fn probe_script(targets: &[(String, String, u16)]) -> String {
    let mut s = PROBE.to_string();
    for (label, host, port) in targets {
        s.push_str(&format!("try '{label}' '{host}' {port}\n"));
    }
    s
}

/// `targets` tried from `sb` in `ws`: each an attempt, every one must be tried.
async fn probe(tally: &mut Tally, sb: &dyn Sandbox, ws: &Path, targets: &[(String, String, u16)]) {
    let out = run(sb, ws, &probe_script(targets)).await;
    tally.lines(&out, "CONNECTED", "REFUSED", targets.len(), "");
}

/// A name looked up from `sb` in `ws`: an attempt that got through when it resolved.
async fn resolve(tally: &mut Tally, sb: &dyn Sandbox, ws: &Path) {
    let out = run(sb, ws, "getent hosts pypi.org && echo RESOLVED").await;
    tally.attempt("dns", out.contains("RESOLVED"));
}

/// Starts a server on `bind:port` in `sb`'s pod and checks from `other` (another container of
/// the same pod) that loopback reaches it: the pod's loopback works in this mode.
async fn loopback_works(run_: &TestRun, port: u16) {
    let ws = &run_.workspace;
    let worker = run_.sandbox("worker-1", Role::Worker).await;
    let start = format!(
        "nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1; echo started"
    );
    assert!(run(&*worker, ws, &start).await.contains("started"));
    let judge = run_.sandbox("judge-1", Role::Judge).await;
    let out = run(
        &*judge,
        ws,
        &format!("{PROBE}try loopback 127.0.0.1 {port}\ncurl -sS -m 5 -o /dev/null -w 'curl %{{http_code}}\\n' http://localhost:{port}/"),
    )
    .await;
    assert!(out.contains("CONNECTED loopback"), "{out}");
    assert!(
        out.contains("curl 200"),
        "the judge's curl localhost: {out}"
    );
}

fn policy(mode: EgressMode) -> EgressPolicy {
    EgressPolicy {
        mode,
        ..Default::default()
    }
}

async fn test_run(engine: &Engine, name: &str, egress: EgressPolicy) -> TestRun {
    TestRun::with(engine, name, move |o| o.egress = egress).await
}

#[tokio::test]
async fn open_mode_reaches_neither_another_run_nor_the_host_nor_metadata() {
    let Some(engine) = engine_or_skip("redteam open").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let host = HostService::start();
        let a = test_run(&engine, "rt-open-a", policy(EgressMode::Open)).await;
        let b = test_run(&engine, "rt-open-b", policy(EgressMode::Open)).await;
        // Run A: a server on every address of its pod; its own loopback reaches it.
        let a_worker = a.sandbox("worker-1", Role::Worker).await;
        let served = run(
            &*a_worker,
            &a.workspace,
            "nohup python3 -m http.server 8765 --bind 0.0.0.0 >/dev/null 2>&1 & sleep 1; echo started",
        )
        .await;
        assert!(served.contains("started"), "{served}");
        loopback_works(&a, 8766).await;
        let (a_ip, a_gw) = pod_address(&engine, &a.run_id).await.expect("run A's address");
        let b_worker = b.sandbox("worker-1", Role::Worker).await;
        let (b_ip, b_gw) = pod_address(&engine, &b.run_id).await.expect("run B's address");
        assert_ne!(a_gw, b_gw, "each run has a network of its own");
        assert_ne!(a_ip, b_ip);

        let mut targets = vec![
            ("run-A-server".to_string(), a_ip.clone(), 8765),
            ("run-A-gateway".to_string(), a_gw.clone(), host.port),
            ("own-gateway".to_string(), b_gw.clone(), host.port),
            ("own-gateway-ssh".to_string(), b_gw.clone(), 22),
        ];
        targets.extend(host_targets(host.port));
        let mut tally = Tally::default();
        probe(&mut tally, &*b_worker, &b.workspace, &targets).await;

        // Drop the rules, then try again: no capability, so nothing changes.
        let out = run(
            &*b_worker,
            &b.workspace,
            "iptables -P OUTPUT ACCEPT 2>&1 && echo DROPPED-POLICY; iptables -F 2>&1 && echo FLUSHED; ip6tables -F 2>&1 && echo FLUSHED6",
        )
        .await;
        for word in ["DROPPED-POLICY", "FLUSHED", "FLUSHED6"] {
            tally.attempt(word, out.lines().any(|l| l == word));
        }
        probe(&mut tally, &*b_worker, &b.workspace, &targets).await;
        // The judge of A tries the host too (same pod, another container).
        let a_judge = a.sandbox("judge-1", Role::Judge).await;
        probe(&mut tally, &*a_judge, &a.workspace, &targets[2..]).await;
        assert_none(&tally, "open", &host);
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn none_mode_reaches_nothing_but_loopback() {
    let Some(engine) = engine_or_skip("redteam none").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let host = HostService::start();
        let r = test_run(&engine, "rt-none", policy(EgressMode::None)).await;
        loopback_works(&r, 8767).await;
        assert_eq!(
            pod_address(&engine, &r.run_id).await,
            None,
            "no network at all"
        );
        let mut targets = host_targets(host.port);
        targets.extend(world_targets().await);
        let worker = r.sandbox("worker-1", Role::Worker).await;
        let mut tally = Tally::default();
        probe(&mut tally, &*worker, &r.workspace, &targets).await;
        resolve(&mut tally, &*worker, &r.workspace).await;
        assert_none(&tally, "none", &host);
    })
    .await
    .expect("bounded");
}

/// Public destinations: well-known resolvers and whatever the host resolves a listed registry
/// to (this machine reaches only registries).
async fn world_targets() -> Vec<(String, String, u16)> {
    let mut targets = vec![
        ("world-1.1.1.1:443".to_string(), "1.1.1.1".to_string(), 443),
        ("world-8.8.8.8:53".to_string(), "8.8.8.8".to_string(), 53),
    ];
    if let Ok(found) = tokio::net::lookup_host(("pypi.org", 443)).await {
        for a in found.filter(|a| a.is_ipv4()).take(2) {
            targets.push((
                format!("pypi.org-direct-{}", a.ip()),
                a.ip().to_string(),
                443,
            ));
        }
    }
    targets
}

#[tokio::test]
async fn proxy_mode_lets_only_listed_domains_through_the_proxy() {
    let Some(engine) = engine_or_skip("redteam proxy").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let host = HostService::start();
        let r = test_run(&engine, "rt-proxy", policy(EgressMode::Proxy)).await;
        loopback_works(&r, 8768).await;
        let (_, gw) = pod_address(&engine, &r.run_id).await.expect("pod address");
        let worker = r.sandbox("worker-1", Role::Worker).await;
        let env = run(&*worker, &r.workspace, "echo \"PROXY=$https_proxy\"").await;
        let proxy = env
            .lines()
            .find_map(|l| l.strip_prefix("PROXY=http://"))
            .and_then(|p| p.split(':').next())
            .expect("https_proxy in the agent's environment")
            .to_string();
        let mut tally = Tally::default();

        // Directly: the host, metadata, the world, the proxy's other ports, DNS.
        let mut targets = host_targets(host.port);
        targets.push(("gateway".into(), gw.clone(), host.port));
        targets.push(("proxy-ssh".into(), proxy.clone(), 22));
        targets.push(("proxy-other-port".into(), proxy.clone(), host.port));
        targets.extend(world_targets().await);
        probe(&mut tally, &*worker, &r.workspace, &targets).await;
        resolve(&mut tally, &*worker, &r.workspace).await;

        // Through the proxy: names it does not list, addresses, a listed name on another port.
        let denied = [
            ("connect-example.com", "https://example.com/".to_string()),
            ("get-example.com", "http://example.com/".to_string()),
            ("connect-pypi.org:22", "https://pypi.org:22/".to_string()),
            ("lookalike", "https://pypi.org.example.com/".to_string()),
            ("suffix", "https://evilpypi.org/".to_string()),
            ("metadata", "http://169.254.169.254/".to_string()),
            ("gateway", format!("http://{gw}:{}/", host.port)),
            ("host-loopback", format!("http://127.0.0.1:{}/", host.port)),
        ];
        let mut script = PROBE.to_string();
        for (label, url) in &denied {
            script.push_str(&format!("via '{label}' '{url}'\n"));
        }
        script.push_str("via 'listed-pypi.org' 'https://pypi.org/simple/'\n");
        let out = run(&*worker, &r.workspace, &script).await;
        let decision = |label: &str| -> String {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("PROXY {label} ")))
                .unwrap_or_else(|| panic!("no answer for {label}:\n{out}"));
            let codes = line.rsplit(' ').next().unwrap();
            let (http, connect) = codes.split_once('/').unwrap();
            // A CONNECT is decided in its reply; a plain request in its status.
            if connect != "000" { connect } else { http }.to_string()
        };
        for (label, _) in &denied {
            let d = decision(label);
            tally.attempt(&format!("via-{label} ({d})"), d != "403");
        }
        let listed = decision("listed-pypi.org");
        eprintln!("redteam network, proxy: the proxy's decision for a listed domain: {listed}");
        assert!(
            listed != "403" && listed != "000",
            "the proxy refused or did not answer a listed domain: {listed}\n{out}"
        );
        assert_none(&tally, "proxy", &host);
    })
    .await
    .expect("bounded");
}

/// A WebFetch context for `egress` (no sandbox, a scratch mount).
fn fetch_ctx(egress: EgressPolicy, ws: &std::path::Path) -> ToolContext {
    let abox = AgentBox {
        agent: "worker-1".into(),
        role: Role::Worker,
        mounts: vec![Mount::same(ws.to_path_buf(), false)],
        workdir: ws.to_path_buf(),
        policy: flowerbox::sandbox::SandboxPolicy::writer(),
        masked: Vec::new(),
    };
    let limits = ToolLimits {
        egress,
        ..Default::default()
    };
    ToolContext::new(
        "worker-1".into(),
        Role::Worker,
        0,
        abox,
        None,
        None,
        Arc::new(Absent),
        CancellationToken::new(),
        None,
        limits,
    )
}

async fn fetch(ctx: &ToolContext, url: &str) -> Result<String, ToolError> {
    let tool = ToolRegistry::standard().get("WebFetch").unwrap();
    let input = serde_json::json!({ "url": url });
    tokio::time::timeout(Duration::from_secs(30), tool.call(&input, ctx))
        .await
        .unwrap_or_else(|_| panic!("WebFetch {url} hung"))
}

/// A throwaway container (not a flowerbox pod) serving `/ok` (200), `/r?u=URL` (302 to URL)
/// and `/nested` (an HTML page of 400k unclosed `<div>`s, 2 MB) on the default bridge;
/// removed when dropped.
struct Redirector {
    engine: Engine,
    id: String,
    ip: String,
}

const REDIRECTOR: &str = r#"
import http.server, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path == "/ok":
            self.send_response(200); self.send_header("Content-Length", "5"); self.end_headers()
            self.wfile.write(b"hello"); return
        if u.path == "/nested":
            body = b"<html><body>" + b"<div>" * 400000 + b"nested &lt;marker&gt;"
            self.send_response(200); self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body); return
        self.send_response(302)
        self.send_header("Location", urllib.parse.parse_qs(u.query)["u"][0])
        self.send_header("Content-Length", "0"); self.end_headers()
http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

impl Redirector {
    async fn start(engine: &Engine) -> Redirector {
        use bollard::models::{ContainerCreateBody, HostConfig};
        let image = agent_image(engine).await;
        let body = ContainerCreateBody {
            image: Some(image),
            entrypoint: Some(vec!["python3".into(), "-c".into(), REDIRECTOR.into()]),
            cmd: Some(vec![]),
            labels: Some(std::collections::HashMap::from([(
                "flowerbox.test".to_string(),
                "redteam-network".to_string(),
            )])),
            host_config: Some(HostConfig {
                cap_drop: Some(vec!["ALL".into()]),
                network_mode: Some("bridge".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = engine
            .docker()
            .create_container(None, body)
            .await
            .unwrap()
            .id;
        let mut redirector = Redirector {
            engine: engine.clone(),
            id: id.clone(),
            ip: String::new(),
        };
        engine.docker().start_container(&id, None).await.unwrap();
        let info = engine.docker().inspect_container(&id, None).await.unwrap();
        let ip = info
            .network_settings
            .and_then(|s| s.networks)
            // Docker names the default network `bridge`, Podman `podman`: the only one.
            .and_then(|n| n.into_values().next())
            .and_then(|e| e.ip_address)
            .filter(|a| !a.is_empty())
            .expect("redirector address");
        redirector.ip = ip;
        redirector
    }
}

impl Drop for Redirector {
    fn drop(&mut self) {
        let (engine, id) = (self.engine.clone(), self.id.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let opts = bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            };
            let _ = rt.block_on(engine.docker().remove_container(&id, Some(opts)));
        })
        .join();
    }
}

#[tokio::test]
async fn webfetch_refuses_the_host_directly_and_through_redirects() {
    let Some(engine) = engine_or_skip("redteam webfetch").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let host = HostService::start();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let port = host.port;
        let mut urls = vec![
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            format!("http://[::1]:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://2130706433:{port}/"),
            format!("http://0x7f.1:{port}/"),
            format!("http://0.0.0.0:{port}/"),
            "http://169.254.169.254/latest/meta-data/".to_string(),
        ];
        for a in HostAddrs::discover().addrs {
            match a {
                IpAddr::V4(v4) => urls.push(format!("http://{v4}:{port}/")),
                IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 != 0xfe80 => {
                    urls.push(format!("http://[{v6}]:{port}/"))
                }
                _ => {}
            }
        }
        let mut tally = Tally::default();
        for mode in [EgressMode::Open, EgressMode::Proxy, EgressMode::None] {
            let ctx = fetch_ctx(policy(mode), &ws);
            for url in &urls {
                let got = fetch(&ctx, url).await;
                tally.attempt(&format!("{} {url}: {got:?}", mode.name()), got.is_ok());
                assert!(matches!(got, Err(ToolError::Denied(_))), "{url}: {got:?}");
            }
        }

        // Redirects: the first hop is allowed (its address named by --allow-net), the second
        // goes to the host and is refused.
        let redirector = Redirector::start(&engine).await;
        let ctx = fetch_ctx(
            EgressPolicy {
                allow_nets: vec![parse_net(&redirector.ip).unwrap()],
                ..Default::default()
            },
            &ws,
        );
        let base = format!("http://{}:8080", redirector.ip);
        let mut ok = Err(ToolError::Failed("not tried".into()));
        for _ in 0..50 {
            ok = fetch(&ctx, &format!("{base}/ok")).await;
            if ok.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(ok.as_ref().is_ok_and(|t| t.contains("hello")), "{ok:?}");
        let gateway = "172.17.0.1";
        for target in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://{gateway}:{port}/"),
            "http://169.254.169.254/".to_string(),
        ]
        .into_iter()
        .chain(
            HostAddrs::discover()
                .v4()
                .into_iter()
                .map(|a| format!("http://{a}:{port}/")),
        ) {
            let url = format!("{base}/r?u={}", urlencode(&target));
            let got = fetch(&ctx, &url).await;
            tally.attempt(&format!("redirect to {target}: {got:?}"), got.is_ok());
            assert!(
                matches!(&got, Err(ToolError::Denied(m)) if m.contains(&target)),
                "{target}: {got:?}"
            );
        }
        assert_none(&tally, "webfetch", &host);
    })
    .await
    .expect("bounded");
}

/// A hostile page of 400k nested `<div>`s (2 MB, under WebFetch's 2 MiB cap) took the runner's
/// async worker for hours converting it, the call past every timeout and interrupt. Now the
/// depth is measured first and the page stripped of its tags instead, off the async workers;
/// the result says so on its first line.
#[tokio::test]
async fn webfetch_strips_a_deeply_nested_page_instead_of_converting_it() {
    let Some(engine) = engine_or_skip("redteam webfetch nested").await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let server = Redirector::start(&engine).await;
        let ctx = fetch_ctx(
            EgressPolicy {
                allow_nets: vec![parse_net(&server.ip).unwrap()],
                ..Default::default()
            },
            &ws,
        );
        let base = format!("http://{}:8080", server.ip);
        for _ in 0..50 {
            if fetch(&ctx, &format!("{base}/ok")).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let url = format!("{base}/nested");
        let started = std::time::Instant::now();
        let got = fetch(&ctx, &url).await.expect("fetched");
        eprintln!(
            "redteam webfetch nested: the call took {:?}",
            started.elapsed()
        );
        let mut lines = got.lines();
        assert_eq!(
            lines.next(),
            Some("[这个页面的 HTML 嵌套超过 256 层,没按 HTML 转换:下面是去掉标签的纯文本]"),
            "{}",
            &got[..got.len().min(300)]
        );
        assert_eq!(lines.next(), Some(format!("200 {url}").as_str()));
        assert_eq!(lines.next(), Some("nested <marker>"));
    })
    .await
    .expect("bounded");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
