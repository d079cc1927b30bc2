//! A run's network and its egress policy, set up by the pod's side (DESIGN.md threat model
//! point 4, "Network").
//!
//! - `none`: the pod has no network at all (`network_mode: none`): loopback only.
//! - `open` / `proxy`: the run gets a bridge network of its own (labelled like its containers,
//!   removed with the pod, swept by `gc`), so another run's containers are on another bridge.
//!   Before any agent joins, a short-lived *fence* container (flowerbox's own image, root, only
//!   `NET_ADMIN`) enters the pod's network namespace, loads the rules below with
//!   `iptables-restore`/`ip6tables-restore` and exits; agent containers join that namespace with
//!   no capability, so nothing in them can change the rules.
//! - `proxy`: the pod may reach only the run's proxy container (tinyproxy from Debian, in its
//!   own network namespace on the run network); the proxy fences itself the same way, then
//!   drops every capability and its uid (`setpriv`) before running, and lets through only the
//!   listed domains. Agents get `http_proxy`/`https_proxy` pointing at it.
//!
//! Rules are generated from typed values only (addresses, networks, validated domain names),
//! never from free text, and passed to the infrastructure containers as arguments.

use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest, NetworkInspect};
use bollard::query_parameters::{LogsOptions, RemoveContainerOptions};
use futures::StreamExt;
use ipnet::{IpNet, Ipv4Net};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use tokio::sync::watch;

use crate::sandbox::egress::{blocked_v4, EgressMode, EgressPolicy, HostAddrs};
use crate::sandbox::SandboxError;

/// The port the run's proxy listens on.
pub(crate) const PROXY_PORT: u16 = 3128;

/// Memory of an infrastructure container (fence, proxy).
const INFRA_MEMORY: i64 = 256 << 20;
/// Processes of an infrastructure container.
const INFRA_PIDS: i64 = 256;
/// The uid:gid the proxy runs as once its rules are in (`nobody`).
const PROXY_UID: u32 = 65534;

/// The run's bridge network, as the engine made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunNet {
    /// Network name (`fbx-<run>-net-<hex>`).
    pub name: String,
    /// Engine id.
    pub id: String,
    /// The bridge's address on the host (the gateway): the host, as the pod sees it.
    pub gateway: Option<Ipv4Addr>,
    /// The network's IPv4 range.
    pub subnet: Option<Ipv4Net>,
}

/// What the rules are built from besides the policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct FenceFacts {
    /// The host's own addresses.
    pub host: HostAddrs,
    /// Name servers the engine's embedded DNS forwards to (reached from the pod's namespace).
    pub resolvers: Vec<IpAddr>,
    /// The run network's gateway.
    pub gateway: Option<Ipv4Addr>,
}

/// Creates the run's network (a plain bridge, no IPv6) and reads back its gateway and range.
/// Only the run's pod (and in proxy mode its proxy, which the pod must reach) are on it, so
/// inter-container traffic stays enabled; the engine isolates it from every other bridge.
pub(crate) async fn create_network(
    docker: &bollard::Docker,
    name: &str,
    labels: HashMap<String, String>,
) -> Result<RunNet, SandboxError> {
    let request = NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(false),
        attachable: Some(false),
        enable_ipv6: Some(false),
        labels: Some(labels),
        ..Default::default()
    };
    let id = docker
        .create_network(request)
        .await
        .map_err(super::error::container(format!(
            "建不出这次运行的网络 {name}(引擎的地址池用完时,`flowerbox gc` 清掉残留,或在 daemon.json 里加 default-address-pools)"
        )))?
        .id;
    let inspect = docker
        .inspect_network(&id, None)
        .await
        .map_err(super::error::container(format!("读不出网络 {name}")))?;
    let (gateway, subnet) = ipam_v4(&inspect);
    Ok(RunNet {
        name: name.to_string(),
        id,
        gateway,
        subnet,
    })
}

fn ipam_v4(inspect: &NetworkInspect) -> (Option<Ipv4Addr>, Option<Ipv4Net>) {
    let configs = inspect
        .ipam
        .as_ref()
        .and_then(|i| i.config.clone())
        .unwrap_or_default();
    let mut gateway = None;
    let mut subnet = None;
    for c in configs {
        if let Some(Ok(net)) = c.subnet.as_deref().map(str::parse::<Ipv4Net>) {
            subnet = subnet.or(Some(net));
        }
        if let Some(Ok(gw)) = c.gateway.as_deref().map(str::parse::<Ipv4Addr>) {
            gateway = gateway.or(Some(gw));
        }
    }
    (gateway, subnet)
}

/// Infrastructure container common settings: root (to load rules), every capability dropped
/// but `caps`, `no-new-privileges`, small limits.
fn infra_host_config(network_mode: String, caps: &[&str]) -> HostConfig {
    HostConfig {
        network_mode: Some(network_mode),
        cap_drop: Some(vec!["ALL".into()]),
        cap_add: Some(caps.iter().map(|c| c.to_string()).collect()),
        security_opt: Some(vec!["no-new-privileges".into()]),
        memory: Some(INFRA_MEMORY),
        memory_swap: Some(INFRA_MEMORY),
        pids_limit: Some(INFRA_PIDS),
        ..Default::default()
    }
}

/// Loads `$1` with iptables-restore and `$2` with ip6tables-restore (when the kernel has IPv6);
/// fails on the first error, so a fence that did not take leaves no pod behind.
const LOAD_RULES: &str = "set -eu\n\
printf '%s' \"$1\" | iptables-restore\n\
if [ -e /proc/net/if_inet6 ]; then printf '%s' \"$2\" | ip6tables-restore; fi\n";

/// The fence: joins the pod's network namespace, loads the rules, exits 0.
pub(crate) fn fence_body(
    image: &str,
    pod_id: &str,
    labels: HashMap<String, String>,
    rules: &(String, String),
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            LOAD_RULES.into(),
            "fence".into(),
            rules.0.clone(),
            rules.1.clone(),
        ]),
        cmd: Some(vec![]),
        user: Some("0:0".into()),
        labels: Some(labels),
        stop_timeout: Some(1),
        host_config: Some(infra_host_config(
            format!("container:{pod_id}"),
            &["NET_ADMIN"],
        )),
        ..Default::default()
    }
}

/// The proxy: on the run network in a namespace of its own; loads its rules, writes its
/// configuration, then runs tinyproxy as `nobody` with no capability at all.
pub(crate) fn proxy_body(
    image: &str,
    network: &str,
    labels: HashMap<String, String>,
    rules: &(String, String),
    config: &ProxyFiles,
) -> ContainerCreateBody {
    let script = format!(
        "{LOAD_RULES}mkdir -p /run/flowerbox-proxy\n\
printf '%s' \"$3\" >/run/flowerbox-proxy/tinyproxy.conf\n\
printf '%s' \"$4\" >/run/flowerbox-proxy/filter\n\
printf '%s' \"$5\" >/run/flowerbox-proxy/refused.html\n\
exec setpriv --reuid={PROXY_UID} --regid={PROXY_UID} --clear-groups --inh-caps=-all \
--bounding-set=-all --no-new-privs -- tinyproxy -d -c /run/flowerbox-proxy/tinyproxy.conf\n"
    );
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            script,
            "proxy".into(),
            rules.0.clone(),
            rules.1.clone(),
            config.conf.clone(),
            config.filter.clone(),
            config.refused.clone(),
        ]),
        cmd: Some(vec![]),
        user: Some("0:0".into()),
        labels: Some(labels),
        stop_timeout: Some(1),
        host_config: Some(infra_host_config(
            network.to_string(),
            &["NET_ADMIN", "SETUID", "SETGID", "SETPCAP"],
        )),
        ..Default::default()
    }
}

/// The proxy's files: its configuration, its filter, the page it answers a refusal with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProxyFiles {
    /// `tinyproxy.conf`.
    pub conf: String,
    /// The filter file: one anchored ERE per line, matched against the whole request URL.
    pub filter: String,
    /// The 403 page (tinyproxy's template: `{url}`, `{detail}`).
    pub refused: String,
}

/// The ports the proxy reaches: plain HTTP on 80, CONNECT (HTTPS) on 443.
pub(crate) const PROXY_OUT_PORTS: [u16; 2] = [80, 443];

/// tinyproxy's files: clients from the run network only, no `Via` or `X-Tinyproxy` header
/// (nothing added to requests, no credentials), CONNECT to port 443 only, and only URLs of a
/// listed name on the right port: `http://NAME[:80][/…]` (plain HTTP) or `NAME:443` (the
/// CONNECT target), each an anchored, case-insensitive regular expression matched against the
/// whole URL as the client sent it, so `http://NAME:8080/` or `NAME:22` is refused (403, with
/// a page saying what is let through). The proxy's own rules ([`proxy_rules`]) refuse every
/// other port as well.
pub(crate) fn proxy_config(policy: &EgressPolicy, clients: Option<Ipv4Net>) -> ProxyFiles {
    let allow = clients.map_or_else(|| "0.0.0.0/0".to_string(), |n| n.to_string());
    let conf = format!(
        "Port {PROXY_PORT}\nTimeout 120\nMaxClients 64\nLogLevel Notice\nAllow {allow}\n\
DisableViaHeader Yes\nXTinyproxy No\nFilterType ere\nFilterURLs On\nFilterDefaultDeny Yes\n\
Filter \"/run/flowerbox-proxy/filter\"\nConnectPort 443\n\
ErrorFile 403 \"/run/flowerbox-proxy/refused.html\"\n"
    );
    let filter: String = policy
        .domains()
        .iter()
        .map(|d| {
            let name = d.ere_unanchored();
            format!("^http://{name}(:80)?(/.*)?$\n^{name}:443$\n")
        })
        .collect();
    let refused = "<html><body><h1>403 refused by flowerbox's proxy</h1>\n\
<p>--egress proxy lets through only listed names, plain HTTP on port 80 and HTTPS (CONNECT) \
on port 443.</p>\n<p>Refused: {url} ({detail})</p></body></html>\n"
        .to_string();
    ProxyFiles {
        conf,
        filter,
        refused,
    }
}

/// The environment agents get in proxy mode (loopback bypasses the proxy, so a judge's
/// `curl localhost:8080` still reaches the worker's server).
pub(crate) fn proxy_env(proxy: Ipv4Addr) -> Vec<String> {
    let url = format!("http://{proxy}:{PROXY_PORT}");
    let bypass = "localhost,127.0.0.1,::1";
    vec![
        format!("http_proxy={url}"),
        format!("https_proxy={url}"),
        format!("HTTP_PROXY={url}"),
        format!("HTTPS_PROXY={url}"),
        format!("no_proxy={bypass}"),
        format!("NO_PROXY={bypass}"),
    ]
}

fn head(text: &mut String, inbound: Option<&str>) {
    text.push_str("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT DROP [0:0]\n");
    text.push_str("-A INPUT -i lo -j ACCEPT\n");
    text.push_str("-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n");
    if let Some(rule) = inbound {
        text.push_str(rule);
    }
}

/// The IPv4 egress to the outside in `open` mode (and the proxy's own): DNS to the resolvers,
/// then only TCP to `ports` when given (the proxy's), the host refused, `--allow-net` accepted, private/link-local/reserved refused, rest
/// accepted.
fn open_egress_v4(
    text: &mut String,
    policy: &EgressPolicy,
    facts: &FenceFacts,
    ports: Option<&[u16]>,
) {
    for r in facts.resolvers.iter().filter_map(v4) {
        for proto in ["udp", "tcp"] {
            let _ = writeln!(text, "-A OUTPUT -d {r}/32 -p {proto} --dport 53 -j ACCEPT");
        }
    }
    // Past DNS, only TCP to these ports (the proxy's).
    if let Some(ports) = ports {
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        let _ = writeln!(
            text,
            "-A OUTPUT -p tcp -m multiport ! --dports {} -j REJECT --reject-with tcp-reset",
            list.join(",")
        );
        text.push_str("-A OUTPUT ! -p tcp -j REJECT\n");
    }
    let mut host: Vec<Ipv4Addr> = facts.host.v4();
    host.extend(facts.gateway);
    host.sort();
    host.dedup();
    for h in host {
        let _ = writeln!(text, "-A OUTPUT -d {h}/32 -j REJECT");
    }
    for n in &policy.allow_nets {
        if let IpNet::V4(n) = n {
            let _ = writeln!(text, "-A OUTPUT -d {n} -j ACCEPT");
        }
    }
    for n in blocked_v4() {
        let _ = writeln!(text, "-A OUTPUT -d {n} -j REJECT");
    }
    text.push_str("-A OUTPUT -j ACCEPT\n");
}

fn v4(ip: &IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(_) => None,
    }
}

/// IPv6: the run network has none, so loopback only (and `--allow-net` IPv6 ranges in `open`,
/// should an engine route them).
fn rules_v6(policy: &EgressPolicy) -> String {
    let mut text = String::new();
    head(&mut text, None);
    text.push_str("-A OUTPUT -o lo -j ACCEPT\n");
    text.push_str("-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n");
    if policy.mode == EgressMode::Open {
        for n in &policy.allow_nets {
            if let IpNet::V6(n) = n {
                let _ = writeln!(text, "-A OUTPUT -d {n} -j ACCEPT");
            }
        }
    }
    text.push_str("-A OUTPUT -j REJECT\nCOMMIT\n");
    text
}

/// The pod's rules (IPv4, IPv6) for `policy` (not `none`, which has no network). In proxy mode
/// the pod may reach port [`PROXY_PORT`] on its own network (`run_net`: only the pod and its
/// proxy are on it; the gateway, which is the host, is refused first).
pub(crate) fn pod_rules(
    policy: &EgressPolicy,
    facts: &FenceFacts,
    run_net: Option<Ipv4Net>,
) -> (String, String) {
    let mut text = String::new();
    head(&mut text, None);
    if policy.mode == EgressMode::Proxy {
        // Agents resolve nothing themselves: the engine's DNS would forward their queries out of
        // this namespace (a channel past the proxy).
        text.push_str("-A OUTPUT -o lo -d 127.0.0.11/32 -j REJECT\n");
    }
    text.push_str("-A OUTPUT -o lo -j ACCEPT\n");
    text.push_str("-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n");
    match policy.mode {
        EgressMode::Proxy => {
            let mut host: Vec<Ipv4Addr> = facts.host.v4();
            host.extend(facts.gateway);
            host.sort();
            host.dedup();
            for h in host {
                let _ = writeln!(text, "-A OUTPUT -d {h}/32 -j REJECT");
            }
            if let Some(net) = run_net {
                let _ = writeln!(
                    text,
                    "-A OUTPUT -d {net} -p tcp --dport {PROXY_PORT} -j ACCEPT"
                );
            }
            for n in &policy.allow_nets {
                if let IpNet::V4(n) = n {
                    let _ = writeln!(text, "-A OUTPUT -d {n} -j ACCEPT");
                }
            }
            text.push_str("-A OUTPUT -j REJECT\n");
        }
        EgressMode::Open => open_egress_v4(&mut text, policy, facts, None),
        EgressMode::None => text.push_str("-A OUTPUT -j REJECT\n"),
    }
    text.push_str("COMMIT\n");
    (text, rules_v6(policy))
}

/// The proxy container's own rules: clients from the run network on the proxy port only;
/// egress as in `open` (DNS, no host, no private ranges but `--allow-net`), TCP to ports 80
/// and 443 only.
pub(crate) fn proxy_rules(
    policy: &EgressPolicy,
    facts: &FenceFacts,
    clients: Option<Ipv4Net>,
) -> (String, String) {
    let source = clients.map_or_else(String::new, |n| format!("-s {n} "));
    let inbound = format!("-A INPUT {source}-p tcp --dport {PROXY_PORT} -j ACCEPT\n");
    let mut text = String::new();
    head(&mut text, Some(&inbound));
    text.push_str("-A OUTPUT -o lo -j ACCEPT\n");
    text.push_str("-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n");
    open_egress_v4(&mut text, policy, facts, Some(&PROXY_OUT_PORTS));
    text.push_str("COMMIT\n");
    let open = EgressPolicy {
        mode: EgressMode::Open,
        ..policy.clone()
    };
    (text, rules_v6(&open))
}

/// Resolves once the pod's rules are loaded, or failed to load. Agent containers may be created
/// before; they start only after (`create_agent` waits), so no agent process ever runs in the
/// pod's namespace without its rules.
#[derive(Debug, Clone)]
pub(crate) struct Fenced(watch::Receiver<Option<Result<(), FenceError>>>);

/// Why a pod's rules did not load: the fence container and what went wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("装不上 pod 的出网规则({fence}):{why}")]
pub(crate) struct FenceError {
    /// The fence container's name.
    fence: String,
    /// What went wrong.
    why: FenceFailure,
}

/// What went wrong with a fence.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FenceFailure {
    /// It did not start.
    #[error("starting {fence}: {error}")]
    Start {
        /// The fence container's name.
        fence: String,
        /// The engine's answer.
        #[source]
        error: bollard::errors::Error,
    },
    /// It exited non-zero (its last words).
    #[error("exit {code}: {logs}")]
    Exit {
        /// Its exit code.
        code: i64,
        /// The tail of its logs.
        logs: String,
    },
    /// Waiting for it to exit failed, or the proxy is not running.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl Fenced {
    /// Nothing to wait for (`--egress none`: no network to fence).
    pub(crate) fn ready() -> Fenced {
        let (_tx, rx) = watch::channel(Some(Ok(())));
        Fenced(rx)
    }

    /// Waits for the fence's outcome.
    pub(crate) async fn wait(&self) -> Result<(), SandboxError> {
        let mut rx = self.0.clone();
        let gone = || SandboxError::Container("pod 的出网规则没装上:装规则的任务没了".into());
        let outcome = match rx.wait_for(Option::is_some).await {
            Ok(v) => match &*v {
                Some(Ok(())) => Ok(()),
                Some(Err(why)) => Err(SandboxError::Container(why.to_string())),
                None => Err(gone()),
            },
            Err(_) => Err(gone()),
        };
        outcome
    }
}

/// Starts the (created) fence `id` in the background, waits for it to exit, checks that the
/// proxy (proxy mode) still runs, reports the outcome, then removes the fence and forgets it in
/// `created` (teardown removes it too, should the run end first).
pub(crate) fn spawn_fence(
    docker: bollard::Docker,
    created: super::Created,
    name: String,
    id: String,
    proxy: Option<String>,
) -> Fenced {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let run = async {
            docker
                .start_container(&id, None)
                .await
                .map_err(|error| FenceFailure::Start {
                    fence: name.clone(),
                    error,
                })?;
            match wait_exit(&docker, &id).await? {
                0 => {}
                code => {
                    return Err(FenceFailure::Exit {
                        code,
                        logs: logs_tail(&docker, &id).await,
                    })
                }
            }
            if let Some(proxy) = &proxy {
                still_running(&docker, proxy, "proxy").await?;
            }
            Ok(())
        };
        let outcome = run.await.map_err(|why| FenceError {
            fence: name.clone(),
            why,
        });
        let _ = tx.send(Some(outcome));
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        if docker.remove_container(&id, Some(opts)).await.is_ok() {
            super::lock(&created).retain(|(c, _)| *c != id);
        }
    });
    Fenced(rx)
}

/// Fails with the container's last words when it is no longer running.
pub(crate) async fn still_running(
    docker: &bollard::Docker,
    id: &str,
    what: &str,
) -> Result<(), SandboxError> {
    let info = docker.inspect_container(id, None).await?;
    if info.state.and_then(|s| s.running) == Some(true) {
        return Ok(());
    }
    Err(SandboxError::Container(format!(
        "这次运行的 {what} 没起来:{}",
        logs_tail(docker, id).await
    )))
}

/// Waits for a container to exit and returns its exit code.
pub(crate) async fn wait_exit(docker: &bollard::Docker, id: &str) -> Result<i64, SandboxError> {
    let mut wait = docker.wait_container(id, None);
    let mut code = None;
    while let Some(r) = wait.next().await {
        match r {
            Ok(resp) => code = Some(resp.status_code),
            Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => code = Some(c),
            Err(e) => return Err(e.into()),
        }
    }
    code.ok_or_else(|| SandboxError::Backend(format!("docker: no exit code for {id}")))
}

/// The last lines a container wrote (both streams), for an error message.
pub(crate) async fn logs_tail(docker: &bollard::Docker, id: &str) -> String {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: "20".into(),
        ..Default::default()
    };
    let mut logs = docker.logs(id, Some(options));
    let mut out = String::new();
    while let Some(Ok(item)) = logs.next().await {
        out.push_str(&String::from_utf8_lossy(&item.into_bytes()));
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::egress::{parse_net, DomainRule};

    fn facts() -> FenceFacts {
        FenceFacts {
            host: HostAddrs {
                addrs: vec![
                    "127.0.0.1".parse().unwrap(),
                    "192.0.2.2".parse().unwrap(),
                    "fd00::2".parse().unwrap(),
                ],
            },
            resolvers: vec!["10.255.255.53".parse().unwrap()],
            gateway: Some("172.18.0.1".parse().unwrap()),
        }
    }

    fn position(text: &str, needle: &str) -> usize {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle} not in\n{text}"))
    }

    #[test]
    fn open_rules_refuse_the_host_before_allowing_private_nets_and_the_internet() {
        let policy = EgressPolicy {
            allow_nets: vec![
                parse_net("10.9.0.0/16").unwrap(),
                parse_net("fd01::/16").unwrap(),
            ],
            ..Default::default()
        };
        let (v4, v6) = pod_rules(&policy, &facts(), None);
        assert!(v4.starts_with("*filter\n:INPUT DROP"), "{v4}");
        assert!(v4.ends_with("-A OUTPUT -j ACCEPT\nCOMMIT\n"), "{v4}");
        let dns = position(
            &v4,
            "-A OUTPUT -d 10.255.255.53/32 -p udp --dport 53 -j ACCEPT",
        );
        let gw = position(&v4, "-A OUTPUT -d 172.18.0.1/32 -j REJECT");
        let host = position(&v4, "-A OUTPUT -d 192.0.2.2/32 -j REJECT");
        let allowed = position(&v4, "-A OUTPUT -d 10.9.0.0/16 -j ACCEPT");
        let private = position(&v4, "-A OUTPUT -d 10.0.0.0/8 -j REJECT");
        let meta = position(&v4, "-A OUTPUT -d 169.254.0.0/16 -j REJECT");
        assert!(dns < gw && gw < allowed && host < allowed && allowed < private && private < meta);
        assert!(
            !v4.contains("127.0.0.11"),
            "open mode keeps the engine's DNS"
        );
        assert!(v6.contains("-A OUTPUT -o lo -j ACCEPT\n"));
        assert!(v6.contains("-A OUTPUT -d fd01::/16 -j ACCEPT\n"));
        assert!(v6.ends_with("-A OUTPUT -j REJECT\nCOMMIT\n"), "{v6}");
    }

    #[test]
    fn proxy_pod_rules_reach_only_the_proxy_and_no_dns() {
        let policy = EgressPolicy {
            mode: EgressMode::Proxy,
            ..Default::default()
        };
        let run_net: Ipv4Net = "172.18.0.0/16".parse().unwrap();
        let (v4, v6) = pod_rules(&policy, &facts(), Some(run_net));
        let dns = position(&v4, "-A OUTPUT -o lo -d 127.0.0.11/32 -j REJECT");
        let lo = position(&v4, "-A OUTPUT -o lo -j ACCEPT");
        assert!(dns < lo);
        let gateway = position(&v4, "-A OUTPUT -d 172.18.0.1/32 -j REJECT");
        let proxy = position(
            &v4,
            "-A OUTPUT -d 172.18.0.0/16 -p tcp --dport 3128 -j ACCEPT\n",
        );
        assert!(gateway < proxy, "the host first");
        assert!(v4.ends_with("-A OUTPUT -j REJECT\nCOMMIT\n"), "{v4}");
        assert!(!v4.contains("--dport 53"), "{v4}");
        assert!(!v4.contains("-j ACCEPT\n-A OUTPUT -j ACCEPT"));
        assert!(!v6.contains("fd01"));
    }

    #[test]
    fn proxy_rules_and_config_admit_the_run_network_and_listed_domains_only() {
        let policy = EgressPolicy {
            mode: EgressMode::Proxy,
            allow_domains: vec![DomainRule::parse("*.corp.example").unwrap()],
            ..Default::default()
        };
        let clients: Ipv4Net = "172.18.0.0/16".parse().unwrap();
        let (v4, _) = proxy_rules(&policy, &facts(), Some(clients));
        assert!(v4.contains("-A INPUT -s 172.18.0.0/16 -p tcp --dport 3128 -j ACCEPT\n"));
        assert!(v4.contains("-A OUTPUT -d 169.254.0.0/16 -j REJECT\n"));
        assert!(v4.contains("-A OUTPUT -d 192.0.2.2/32 -j REJECT\n"));
        assert!(v4.contains(
            "-A OUTPUT -p tcp -m multiport ! --dports 80,443 -j REJECT --reject-with tcp-reset\n"
        ));
        assert!(v4.contains("-A OUTPUT ! -p tcp -j REJECT\n"));
        // The port rule comes after DNS and before anything is accepted.
        let ports = position(&v4, "--dports 80,443");
        assert!(position(&v4, "--dport 53 -j ACCEPT") < ports, "{v4}");
        assert!(ports < position(&v4, "-A OUTPUT -j ACCEPT"), "{v4}");
        let files = proxy_config(&policy, Some(clients));
        let conf = &files.conf;
        assert!(conf.contains("Allow 172.18.0.0/16\n"));
        assert!(conf.contains("FilterDefaultDeny Yes\n"));
        assert!(conf.contains("FilterURLs On\n"));
        assert!(conf.contains("ConnectPort 443\n"));
        assert!(conf.contains("DisableViaHeader Yes\n"));
        assert!(conf.contains("ErrorFile 403 \"/run/flowerbox-proxy/refused.html\"\n"));
        assert!(files.refused.contains("{url}") && files.refused.contains("port 80"));
        let filter = &files.filter;
        let lines: Vec<&str> = filter.lines().collect();
        assert!(
            lines.contains(&"^http://pypi\\.org(:80)?(/.*)?$"),
            "{filter}"
        );
        assert!(lines.contains(&"^pypi\\.org:443$"), "{filter}");
        assert!(
            lines.contains(&"^([a-z0-9-]+\\.)+corp\\.example:443$"),
            "{filter}"
        );
        assert!(lines.iter().all(|l| l.starts_with('^') && l.ends_with('$')));
        // What the filter lets through, with the same expressions (ERE ⊂ Rust regex here).
        let re = regex::RegexBuilder::new(&lines.join("|"))
            .case_insensitive(true)
            .build()
            .unwrap();
        for ok in [
            "http://pypi.org/simple/",
            "http://pypi.org",
            "http://PyPI.org:80/x",
            "pypi.org:443",
            "files.corp.example:443",
            "http://a.b.corp.example/",
        ] {
            assert!(re.is_match(ok), "{ok} refused");
        }
        for refused in [
            "http://pypi.org:8080/",
            "http://pypi.org:443/",
            "http://pypi.org:80:8080/",
            "http://pypi.org:80@evil.example/",
            "http://user@pypi.org/",
            "pypi.org:22",
            "pypi.org:80",
            "pypi.org:4430",
            "http://evil.example/pypi.org",
            "http://pypi.org.evil.example/",
            "corp.example:443",
            "https://pypi.org/",
        ] {
            assert!(!re.is_match(refused), "{refused} let through");
        }
    }

    #[test]
    fn proxy_env_bypasses_loopback() {
        let env = proxy_env("172.18.0.3".parse().unwrap());
        assert!(env.contains(&"https_proxy=http://172.18.0.3:3128".to_string()));
        assert!(env.contains(&"NO_PROXY=localhost,127.0.0.1,::1".to_string()));
    }
}
