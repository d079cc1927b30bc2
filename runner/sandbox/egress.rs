//! The egress policy (`--egress open|none|proxy`, `--allow-net`, `--allow-domain`; DESIGN.md
//! threat model point 4): which addresses an agent may reach, decided from typed values only.
//!
//! One policy serves two enforcers: the pod's network namespace (iptables rules installed by the
//! pod's fence, [`super::docker::network`]) and flowerbox's own host-side requests on an agent's
//! behalf (`WebFetch`), which call [`EgressPolicy::check_name`] and [`EgressPolicy::check_addr`]
//! on every hop. In every mode the host itself (its addresses, loopback, the run network's
//! gateway) is refused; `open` also refuses private, link-local (cloud metadata), shared and
//! reserved ranges unless `--allow-net` names them; `none` refuses everything outside the pod;
//! `proxy` admits only the listed domains (through the pod's filtering proxy).

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

/// Where agents may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EgressMode {
    /// The internet, but not the host, private, link-local or reserved ranges (the default).
    #[default]
    Open,
    /// Nothing outside the pod: loopback only.
    None,
    /// HTTP(S) through the pod's filtering proxy, to listed domains only.
    Proxy,
}

impl EgressMode {
    /// The spellings `--egress` accepts.
    pub const NAMES: [&'static str; 3] = ["open", "none", "proxy"];

    /// Parses one of [`Self::NAMES`].
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "open" => Some(Self::Open),
            "none" => Some(Self::None),
            "proxy" => Some(Self::Proxy),
            _ => None,
        }
    }

    /// The switch spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::None => "none",
            Self::Proxy => "proxy",
        }
    }
}

/// Package registries every `proxy` run may reach (README "Threat model" lists them).
pub const DEFAULT_DOMAINS: &[&str] = &[
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "pypi.org",
    "files.pythonhosted.org",
    "deb.debian.org",
    "security.debian.org",
    "registry.npmjs.org",
    "proxy.golang.org",
    "sum.golang.org",
    "repo.maven.apache.org",
    "rubygems.org",
];

/// IPv4 ranges that are never "the internet": this network, private (RFC 1918), shared
/// address space (CGNAT; some clouds' metadata), loopback, link-local (169.254.169.254),
/// IETF protocol assignments, benchmarking, multicast and reserved/broadcast.
pub const BLOCKED_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/3",
];

/// A `--allow-domain` or `--allow-net` value that is not one (the text names the switch and
/// the spelling it wants).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    /// Not a domain.
    #[error("--allow-domain {0} 不是域名:要 example.com 或 *.example.com 这样的写法")]
    Domain(String),
    /// Not a network.
    #[error("--allow-net {0} 不是网段:要 10.1.0.0/16 或 10.1.2.3 这样的写法")]
    Net(String),
}

/// An allowed domain: `example.com` (that name only) or `*.example.com` (its subdomains).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRule {
    /// Lower-case name without the `*.` prefix.
    pub name: String,
    /// `*.name`: every subdomain of `name`, not `name` itself.
    pub subdomains: bool,
}

impl DomainRule {
    /// Parses `example.com` or `*.example.com` (letters, digits, `-` and `.`; the last label not
    /// all digits, so an address is never a domain).
    pub fn parse(text: &str) -> Result<DomainRule, AllowError> {
        let lower = text.trim().to_ascii_lowercase();
        let (subdomains, name) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, lower.clone()),
        };
        let labels: Vec<&str> = name.split('.').collect();
        let label_ok = |l: &&str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        let last_is_name = labels
            .last()
            .is_some_and(|l| !l.chars().all(|c| c.is_ascii_digit()));
        if labels.len() < 2 || !labels.iter().all(label_ok) || !last_is_name || name.len() > 253 {
            return Err(AllowError::Domain(text.to_string()));
        }
        Ok(DomainRule { name, subdomains })
    }

    /// Whether `host` (any case, an optional trailing dot) is covered.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if self.subdomains {
            host.strip_suffix(&self.name)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        } else {
            host == self.name
        }
    }

    /// A POSIX extended regular expression matching the same names (the proxy's filter file;
    /// names hold only `[a-z0-9.-]`, so escaping the dots is enough).
    #[cfg(test)]
    pub(crate) fn ere(&self) -> String {
        format!("^{}$", self.ere_unanchored())
    }

    /// [`Self::ere`] without its anchors, to build a longer expression around.
    pub fn ere_unanchored(&self) -> String {
        let escaped = self.name.replace('.', "\\.");
        if self.subdomains {
            format!("([a-z0-9-]+\\.)+{escaped}")
        } else {
            escaped
        }
    }
}

impl fmt::Display for DomainRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.subdomains {
            write!(f, "*.{}", self.name)
        } else {
            f.write_str(&self.name)
        }
    }
}

/// Parses a `--allow-net` value: a CIDR (`10.1.0.0/16`) or one address (`10.1.2.3`).
pub fn parse_net(text: &str) -> Result<IpNet, AllowError> {
    let t = text.trim();
    let net = t
        .parse::<IpNet>()
        .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| AllowError::Net(text.to_string()))?;
    Ok(net.trunc())
}

/// The egress policy of one run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressPolicy {
    /// `--egress`.
    pub mode: EgressMode,
    /// `--allow-net`: ranges kept reachable although private (never the host itself).
    pub allow_nets: Vec<IpNet>,
    /// `--allow-domain` (proxy mode), without the defaults; see [`EgressPolicy::domains`].
    pub allow_domains: Vec<DomainRule>,
}

/// Why a destination is refused. The text is for the model and the user.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Refusal {
    /// `--egress none`.
    #[error("出网策略是 none:pod 外面哪儿都连不了")]
    NoEgress,
    /// `--egress proxy` and the name is not listed.
    #[error("出网策略是 proxy:{0} 不在放行的域名里(--allow-domain 可以加)")]
    DomainNotListed(String),
    /// An address literal in proxy mode outside every `--allow-net`.
    #[error("出网策略是 proxy:只能按域名访问放行的域名,不能直接连地址 {0}")]
    AddressInProxyMode(IpAddr),
    /// One of the host's own addresses (or the run network's gateway).
    #[error("{0} 是宿主机自己的地址,agent 碰不到宿主机")]
    Host(IpAddr),
    /// Loopback (the host's, seen from the host process).
    #[error("{0} 是回环地址,agent 碰不到宿主机")]
    Loopback(IpAddr),
    /// Private, link-local, shared or reserved.
    #[error("{0} 是内网、链路本地或保留地址(出网策略不许;要放行一个内网段用 --allow-net)")]
    Private(IpAddr),
}

impl EgressPolicy {
    /// Every listed domain in proxy mode: [`DEFAULT_DOMAINS`] and then `--allow-domain`.
    #[allow(clippy::expect_used, reason = "literals, parsed by the tests")]
    pub fn domains(&self) -> Vec<DomainRule> {
        let mut all: Vec<DomainRule> = DEFAULT_DOMAINS
            .iter()
            .map(|d| DomainRule::parse(d).expect("valid default domain"))
            .collect();
        for d in &self.allow_domains {
            if !all.contains(d) {
                all.push(d.clone());
            }
        }
        all
    }

    /// Whether a host name may be asked for at all (before resolving it). IP literals pass
    /// here and are judged by [`Self::check_addr`] (in proxy mode only inside `--allow-net`).
    pub fn check_name(&self, host: &str) -> Result<(), Refusal> {
        match self.mode {
            EgressMode::None => Err(Refusal::NoEgress),
            EgressMode::Open => Ok(()),
            EgressMode::Proxy => {
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                if let Ok(ip) = bare.parse::<IpAddr>() {
                    let ip = canonical(ip);
                    return if self.allow_nets.iter().any(|n| n.contains(&ip)) {
                        Ok(())
                    } else {
                        Err(Refusal::AddressInProxyMode(ip))
                    };
                }
                if self.domains().iter().any(|d| d.matches(host)) {
                    Ok(())
                } else {
                    Err(Refusal::DomainNotListed(host.to_string()))
                }
            }
        }
    }

    /// Whether a resolved address may be connected to. `host` is the host's own addresses
    /// (always refused, `--allow-net` notwithstanding).
    pub fn check_addr(&self, ip: IpAddr, host: &HostAddrs) -> Result<(), Refusal> {
        if self.mode == EgressMode::None {
            return Err(Refusal::NoEgress);
        }
        let ip = canonical(ip);
        if ip.is_loopback() || ip.is_unspecified() {
            return Err(Refusal::Loopback(ip));
        }
        if host.contains(ip) {
            return Err(Refusal::Host(ip));
        }
        if self.allow_nets.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        if is_blocked(ip) {
            return Err(Refusal::Private(ip));
        }
        Ok(())
    }

    /// One line for `doctor` and `-v`: the mode and what it lets through.
    pub fn describe(&self) -> String {
        let nets = if self.allow_nets.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = self.allow_nets.iter().map(|n| n.to_string()).collect();
            format!(";--allow-net 放行 {}", list.join(", "))
        };
        match self.mode {
            EgressMode::Open => format!(
                "open:每次运行一个自己的网络,能上互联网;宿主机、内网、链路本地(云元数据)地址都不通{nets}"
            ),
            EgressMode::None => "none:pod 里只有回环,别的哪儿都连不了".to_string(),
            EgressMode::Proxy => {
                let extra = if self.allow_domains.is_empty() {
                    String::new()
                } else {
                    let list: Vec<String> =
                        self.allow_domains.iter().map(|d| d.to_string()).collect();
                    format!(",另加 {}", list.join(", "))
                };
                format!(
                    "proxy:只能经 pod 的过滤代理访问 {} 个放行的域名(包仓库{extra}){nets}",
                    self.domains().len()
                )
            }
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Whether `ip` is outside "the internet": [`BLOCKED_V4`] for IPv4; for IPv6 everything but
/// global unicast (`2000::/3`), and inside it Teredo, documentation and 6to4 (which embed or
/// stand for other ranges).
#[allow(clippy::expect_used, reason = "literals, parsed by the tests")]
pub fn is_blocked(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => blocked_v4().iter().any(|n| n.contains(&v4)),
        IpAddr::V6(v6) => {
            let global: Ipv6Net = "2000::/3".parse().expect("valid");
            let inner = ["2001::/32", "2001:db8::/32", "2002::/16"];
            !global.contains(&v6)
                || inner
                    .iter()
                    .any(|n| n.parse::<Ipv6Net>().expect("valid").contains(&v6))
        }
    }
}

/// [`BLOCKED_V4`] parsed.
#[allow(clippy::expect_used, reason = "literals, parsed by the tests")]
pub fn blocked_v4() -> Vec<Ipv4Net> {
    BLOCKED_V4
        .iter()
        .map(|n| n.parse().expect("valid blocked range"))
        .collect()
}

/// The addresses of this machine's interfaces (what "the host" means to a container on it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddrs {
    /// Every interface address, loopback included.
    pub addrs: Vec<IpAddr>,
}

impl HostAddrs {
    /// This machine's interface addresses (empty when they cannot be listed: the fixed ranges
    /// still hold).
    pub fn discover() -> HostAddrs {
        let mut addrs = Vec::new();
        if let Ok(list) = nix::ifaddrs::getifaddrs() {
            for ifa in list {
                let Some(a) = ifa.address else { continue };
                if let Some(v4) = a.as_sockaddr_in() {
                    addrs.push(IpAddr::V4(v4.ip()));
                } else if let Some(v6) = a.as_sockaddr_in6() {
                    addrs.push(IpAddr::V6(v6.ip()));
                }
            }
        }
        addrs.sort();
        addrs.dedup();
        HostAddrs { addrs }
    }

    /// Whether `ip` is one of them.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.addrs.iter().any(|a| canonical(*a) == ip)
    }

    /// The IPv4 ones.
    pub fn v4(&self) -> Vec<Ipv4Addr> {
        self.addrs
            .iter()
            .filter_map(|a| match canonical(*a) {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
            .collect()
    }

    /// The IPv6 ones (not mapped IPv4).
    pub fn v6(&self) -> Vec<Ipv6Addr> {
        self.addrs
            .iter()
            .filter_map(|a| match canonical(*a) {
                IpAddr::V6(v6) => Some(v6),
                IpAddr::V4(_) => None,
            })
            .collect()
    }
}

/// The name servers the engine's embedded DNS forwards to, as far as this machine says: the
/// `nameserver` lines of `/etc/resolv.conf`, or of systemd-resolved's upstream file when the
/// first holds only loopback (the engine does the same). Loopback ones are dropped.
pub fn resolvers() -> Vec<IpAddr> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let parse = |text: &str| -> Vec<IpAddr> {
        text.lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some("nameserver"))
                    .then(|| words.next())
                    .flatten()
                    .and_then(|w| w.split('%').next()?.parse::<IpAddr>().ok())
            })
            .collect()
    };
    let mut found = parse(&read("/etc/resolv.conf"));
    if found.iter().all(|a| a.is_loopback()) {
        found = parse(&read("/run/systemd/resolve/resolv.conf"));
    }
    found.retain(|a| !a.is_loopback());
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn policy(mode: EgressMode) -> EgressPolicy {
        EgressPolicy {
            mode,
            ..Default::default()
        }
    }

    #[test]
    fn open_refuses_host_private_link_local_and_reserved() {
        let host = HostAddrs {
            addrs: vec![ip("192.0.2.2"), ip("fd00::2"), ip("127.0.0.1")],
        };
        let p = policy(EgressMode::Open);
        for bad in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.0.0.5",
            "172.17.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.2",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fe80::1",
            "fd00::2",
            "fc00::1",
            "ff02::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
            "2001:db8::1",
        ] {
            assert!(p.check_addr(ip(bad), &host).is_err(), "{bad} was allowed");
        }
        for good in ["203.0.113.80", "8.8.8.8", "151.101.0.223", "2606:4700::1"] {
            assert_eq!(p.check_addr(ip(good), &host), Ok(()), "{good}");
        }
    }

    #[test]
    fn allow_net_opens_a_private_range_but_never_the_host() {
        let host = HostAddrs {
            addrs: vec![ip("10.1.0.1")],
        };
        let p = EgressPolicy {
            allow_nets: vec![parse_net("10.1.0.0/16").unwrap()],
            ..Default::default()
        };
        assert_eq!(p.check_addr(ip("10.1.2.3"), &host), Ok(()));
        assert_eq!(
            p.check_addr(ip("10.1.0.1"), &host),
            Err(Refusal::Host(ip("10.1.0.1")))
        );
        assert!(p.check_addr(ip("10.2.0.1"), &host).is_err());
        let wide = EgressPolicy {
            allow_nets: vec![parse_net("0.0.0.0/0").unwrap()],
            ..Default::default()
        };
        assert!(wide.check_addr(ip("127.0.0.1"), &host).is_err());
    }

    #[test]
    fn none_refuses_everything_and_proxy_only_listed_names() {
        let host = HostAddrs::default();
        let none = policy(EgressMode::None);
        assert_eq!(none.check_name("pypi.org"), Err(Refusal::NoEgress));
        assert_eq!(
            none.check_addr(ip("8.8.8.8"), &host),
            Err(Refusal::NoEgress)
        );
        let mut proxy = policy(EgressMode::Proxy);
        proxy.allow_domains = vec![DomainRule::parse("*.Example.com").unwrap()];
        assert_eq!(proxy.check_name("pypi.org"), Ok(()));
        assert_eq!(proxy.check_name("PyPI.org."), Ok(()));
        assert_eq!(proxy.check_name("a.b.example.com"), Ok(()));
        assert!(proxy.check_name("example.com").is_err());
        assert!(proxy.check_name("evilpypi.org").is_err());
        assert!(proxy.check_name("pypi.org.evil.net").is_err());
        assert!(proxy.check_name("1.2.3.4").is_err());
        assert!(proxy.check_name("[::1]").is_err());
        proxy.allow_nets = vec![parse_net("10.9.0.0/16").unwrap()];
        assert_eq!(proxy.check_name("10.9.1.1"), Ok(()));
    }

    #[test]
    fn domain_rules_parse_strictly_and_render_anchored_regexes() {
        for bad in [
            "", "com", "*.com", "a..b", "-a.com", "a_b.com", "1.2.3.4", "a.com/x", "*",
        ] {
            assert!(DomainRule::parse(bad).is_err(), "{bad}");
        }
        let exact = DomainRule::parse("crates.io").unwrap();
        assert_eq!(exact.ere(), "^crates\\.io$");
        let sub = DomainRule::parse("*.crates.io").unwrap();
        assert_eq!(sub.ere(), "^([a-z0-9-]+\\.)+crates\\.io$");
        assert_eq!(sub.to_string(), "*.crates.io");
        assert!(!sub.matches(".crates.io"));
        assert!(sub.matches("static.crates.io"));
    }

    #[test]
    fn nets_parse_as_cidr_or_address() {
        assert_eq!(parse_net("10.1.2.3/16").unwrap().to_string(), "10.1.0.0/16");
        assert_eq!(parse_net("10.1.2.3").unwrap().to_string(), "10.1.2.3/32");
        assert_eq!(parse_net("fd00::/8").unwrap().to_string(), "fd00::/8");
        assert!(parse_net("10.1.2.3/33").is_err());
        assert!(parse_net("example.com").is_err());
    }

    #[test]
    fn host_addresses_include_loopback() {
        let h = HostAddrs::discover();
        assert!(h.contains(ip("127.0.0.1")), "{h:?}");
    }
}
