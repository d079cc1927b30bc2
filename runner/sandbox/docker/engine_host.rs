//! The engine host's own addresses, for a run on an engine that does not share the caller's
//! disk (`DockerOptions::remote`): there "the host" agents must not reach (README threat model)
//! is the machine the containers run on, not the one flowerbox runs on. The engine tells: a
//! short-lived container of the agent image in the host's network namespace
//! (`network_mode: host`; every capability dropped, no new privileges, a read-only root, no
//! mount) prints that namespace's `/proc/net/fib_trie` (its `LOCAL` entries are the IPv4
//! addresses) and `/proc/net/if_inet6`, and this side parses the bounded output strictly
//! ([`parse`]): an unexpected line, or no address at all, is an error and the run does not
//! start ([`SandboxError::EngineHostUnknown`]); never a pod without the engine host's
//! addresses in its fence.

use bollard::query_parameters::LogsOptions;
use futures::StreamExt;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::volumes::{confined_body, create_body, wait_exit, Removal, LABEL_CHORE};
use super::Engine;
use crate::sandbox::egress::HostAddrs;
use crate::sandbox::SandboxError;

/// Longest the container may take.
const WAIT: Duration = Duration::from_secs(60);

/// Most bytes of output taken (a host with many containers has a long `fib_trie`).
pub const MAX_OUTPUT: usize = 4 << 20;

/// Most addresses taken.
pub const MAX_ADDRS: usize = 65_536;

/// The line between the two files in the output.
const SEPARATOR: &str = "--fbx-if-inet6--";

/// Why the output is not what the two files look like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// No separator line between the two files.
    #[error("the output is not fib_trie then if_inet6")]
    Shape,
    /// One line that fits neither file's format.
    #[error("line {0} is not one of /proc/net/fib_trie's or /proc/net/if_inet6's")]
    Line(usize),
    /// More than [`MAX_ADDRS`] addresses.
    #[error("more than {MAX_ADDRS} addresses")]
    TooMany,
    /// Not even an IPv4 loopback: not a network namespace's tables.
    #[error("no local IPv4 address")]
    Empty,
}

/// The addresses of the host's network namespace in `out` (`/proc/net/fib_trie`, the line
/// [`SEPARATOR`], `/proc/net/if_inet6`): the leaves of `fib_trie` marked `host LOCAL` and
/// every address of `if_inet6`. Every line must have one of those files' shapes.
pub fn parse(out: &str) -> Result<HostAddrs, ParseError> {
    let (fib, inet6) = out
        .split_once(&format!("\n{SEPARATOR}\n"))
        .ok_or(ParseError::Shape)?;
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut leaf: Option<Ipv4Addr> = None;
    for (n, line) in fib.lines().enumerate() {
        let bad = || ParseError::Line(n + 1);
        let t = line.trim_start();
        if !line.starts_with(' ') && t.ends_with(':') && t.len() > 1 {
            // A table's name (`Main:`, `Local:`).
            leaf = None;
        } else if let Some(rest) = t.strip_prefix("+-- ") {
            // An inner node: `+-- 10.0.0.0/8 2 0 2`.
            let mut words = rest.split_whitespace();
            let node = words.next().ok_or_else(bad)?;
            node.parse::<ipnet::Ipv4Net>().map_err(|_| bad())?;
            if !words.all(|w| w.parse::<u32>().is_ok()) {
                return Err(bad());
            }
            leaf = None;
        } else if let Some(rest) = t.strip_prefix("|-- ") {
            leaf = Some(rest.trim().parse().map_err(|_| bad())?);
        } else if let Some(rest) = t.strip_prefix('/') {
            // A prefix of the leaf above: `/32 host LOCAL`.
            let words: Vec<&str> = rest.split_whitespace().collect();
            let [len, _scope, kind] = words[..] else {
                return Err(bad());
            };
            let at = leaf.ok_or_else(bad)?;
            if len.parse::<u8>().map_or(true, |l| l > 32) {
                return Err(bad());
            }
            if kind == "LOCAL" {
                addrs.push(IpAddr::V4(at));
            }
        } else {
            return Err(bad());
        }
        if addrs.len() > MAX_ADDRS {
            return Err(ParseError::TooMany);
        }
    }
    if !addrs.iter().any(IpAddr::is_loopback) {
        return Err(ParseError::Empty);
    }
    let first = fib.lines().count() + 2;
    for (n, line) in inet6.lines().enumerate() {
        let bad = || ParseError::Line(first + n);
        let words: Vec<&str> = line.split_whitespace().collect();
        let [hex, index, len, scope, flags, _name] = words[..] else {
            return Err(bad());
        };
        let small_hex = |w: &str| w.len() <= 8 && u32::from_str_radix(w, 16).is_ok();
        if hex.len() != 32 || ![index, len, scope, flags].into_iter().all(small_hex) {
            return Err(bad());
        }
        let bits = u128::from_str_radix(hex, 16).map_err(|_| bad())?;
        addrs.push(IpAddr::V6(Ipv6Addr::from(bits)));
        if addrs.len() > MAX_ADDRS {
            return Err(ParseError::TooMany);
        }
    }
    addrs.sort();
    addrs.dedup();
    Ok(HostAddrs { addrs })
}

/// The addresses of the engine host's network namespace, read by a container of `image`
/// labelled `labels` (the run's: `gc` removes one a killed run left).
pub async fn learn(
    engine: &Engine,
    image: &str,
    labels: HashMap<String, String>,
) -> Result<HostAddrs, SandboxError> {
    let out = read(engine, image, labels)
        .await
        .map_err(|e| SandboxError::EngineHostUnknown(e.to_string()))?;
    parse(&out).map_err(|e| SandboxError::EngineHostUnknown(e.to_string()))
}

/// The output of the reading container.
async fn read(
    engine: &Engine,
    image: &str,
    mut labels: HashMap<String, String>,
) -> Result<String, SandboxError> {
    let docker = engine.docker();
    let name = format!("fbx-hostaddrs-{}", uuid::Uuid::new_v4().simple());
    labels.insert(LABEL_CHORE.to_string(), name.clone());
    let script = format!("cat /proc/net/fib_trie; echo {SEPARATOR}; cat /proc/net/if_inet6");
    let entrypoint = vec!["sh".into(), "-ec".into(), script];
    let mut body = confined_body(image, entrypoint, Some("65534:65534"), Vec::new(), labels);
    body.network_disabled = None;
    if let Some(hc) = body.host_config.as_mut() {
        hc.network_mode = Some("host".into());
        hc.readonly_rootfs = Some(true);
        hc.mounts = None;
    }
    let id = create_body(engine, &name, body).await?;
    let mut removal = Removal::new(docker.clone(), id.clone());
    let done = async {
        docker
            .start_container(&id, None)
            .await
            .map_err(super::error::container(format!("starting {name}")))?;
        let code = wait_exit(docker, &id, &name, WAIT).await?;
        if code != Some(0) {
            return Err(SandboxError::Backend(format!("{name} ended with {code:?}")));
        }
        let mut logs = docker.logs(
            &id,
            Some(LogsOptions {
                stdout: true,
                ..Default::default()
            }),
        );
        let mut out = Vec::new();
        while let Some(item) = logs.next().await {
            let item = item.map_err(super::error::container(format!("reading {name}")))?;
            out.extend_from_slice(&item.into_bytes());
            if out.len() > MAX_OUTPUT {
                return Err(SandboxError::Backend(format!(
                    "{name} printed over {MAX_OUTPUT} bytes"
                )));
            }
        }
        String::from_utf8(out).map_err(|_| SandboxError::Backend(format!("{name} printed no text")))
    }
    .await;
    removal.now().await;
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIB: &str = "Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 172.17.0.0/16 2 0 2
        |-- 172.17.0.0
           /16 link UNICAST
        |-- 172.17.0.3
           /32 host LOCAL
        |-- 172.17.255.255
           /32 link BROADCAST
     |-- 203.0.113.7
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 172.17.0.3
        /32 host LOCAL";

    const INET6: &str = "00000000000000000000000000000001 01 80 10 80       lo
20010db8000000000000000000000042 02 40 00 00     eth0
fe80000000000000004201fffeac1103 02 40 20 80     eth0";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn local_leaves_and_inet6_addresses_are_the_hosts() {
        let out = format!("{FIB}\n{SEPARATOR}\n{INET6}\n");
        let h = parse(&out).unwrap();
        for a in [
            "127.0.0.1",
            "172.17.0.3",
            "203.0.113.7",
            "::1",
            "2001:db8::42",
            "fe80::42:1ff:feac:1103",
        ] {
            assert!(h.contains(ip(a)), "{a} missing from {h:?}");
        }
        for a in ["0.0.0.0", "172.17.0.0", "172.17.255.255", "127.255.255.255"] {
            assert!(!h.contains(ip(a)), "{a} is no address of the host");
        }
        // Deduplicated (172.17.0.3 is in both tables).
        assert_eq!(
            h.addrs.iter().filter(|a| **a == ip("172.17.0.3")).count(),
            1
        );
    }

    #[test]
    fn unexpected_lines_and_shapes_are_refused() {
        let ok = |fib: &str, inet6: &str| parse(&format!("{fib}\n{SEPARATOR}\n{inet6}\n"));
        assert_eq!(parse(FIB), Err(ParseError::Shape));
        assert!(matches!(
            ok(&format!("{FIB}\n     |-- 10.0.0.x"), INET6),
            Err(ParseError::Line(_))
        ));
        assert!(matches!(
            ok(&format!("{FIB}\nhello"), INET6),
            Err(ParseError::Line(_))
        ));
        // A prefix line with no leaf above it.
        assert_eq!(
            ok("Main:\n  /32 host LOCAL", INET6),
            Err(ParseError::Line(2))
        );
        assert!(matches!(
            ok(FIB, "0000000000000000000000000000001 01 80 10 80 lo"),
            Err(ParseError::Line(_))
        ));
        assert!(matches!(
            ok(FIB, "00000000000000000000000000000001 01 80 10 lo"),
            Err(ParseError::Line(_))
        ));
        assert!(matches!(
            ok(FIB, "0000000000000000000000000000000g 01 80 10 80 lo"),
            Err(ParseError::Line(_))
        ));
        // Tables without a loopback are no namespace's.
        assert_eq!(
            ok("Main:\n  |-- 203.0.113.7\n     /32 host LOCAL", ""),
            Err(ParseError::Empty)
        );
        assert!(parse(&format!("{FIB}\n{SEPARATOR}\n")).is_ok());
    }

    #[test]
    fn too_many_addresses_are_refused() {
        let mut fib = String::from("Main:\n");
        for i in 0..=MAX_ADDRS as u32 {
            let a = Ipv4Addr::from(0x7f00_0000 + i);
            fib.push_str(&format!("  |-- {a}\n     /32 host LOCAL\n"));
        }
        assert_eq!(
            parse(&format!("{fib}{SEPARATOR}\n")),
            Err(ParseError::TooMany)
        );
    }
}
