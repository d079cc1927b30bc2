//! `--egress`, `--allow-net`, `--allow-domain` (and their `FLOWERBOX_*` variables) resolved
//! into the run's [`EgressPolicy`] (DESIGN.md threat model point 4). The variables are read from
//! the process environment only, never from a `.env` file: the workspace's `.env` is something
//! an agent or a cloned repository can write, and these settings weaken containment.

use super::args::SandboxKind;
use super::error::CliError;
use super::host::Host;
use crate::sandbox::egress::{parse_net, DomainRule, EgressMode, EgressPolicy};

/// The egress policy from the switches, else the process environment. A setting that cannot
/// take effect is an error (DESIGN.md invariant 6): `--allow-domain` outside proxy mode,
/// `--allow-net` with `none`, and `none`/`proxy` with `--sandbox host` (host processes are not in
/// a pod, so nothing would hold them to it).
pub(super) fn egress_policy(
    mode: Option<String>,
    nets: Vec<String>,
    domains: Vec<String>,
    sandbox: SandboxKind,
    host: &Host,
) -> Result<EgressPolicy, CliError> {
    let list = |switch: Vec<String>, var: &str| -> (Vec<String>, String) {
        if !switch.is_empty() {
            return (switch, String::new());
        }
        let values = host
            .var(var)
            .map(|v| {
                v.split([',', ' ', '\n', '\t'])
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        (values, format!("(来自 {var})"))
    };
    let (mode, mode_from) = match mode {
        Some(m) => (m, String::new()),
        None => match host.var("FLOWERBOX_EGRESS") {
            Some(m) => (m.to_string(), "(来自 FLOWERBOX_EGRESS)".to_string()),
            None => ("open".to_string(), String::new()),
        },
    };
    let mode = EgressMode::from_name(&mode).ok_or_else(|| {
        CliError::Usage(format!(
            "--egress {mode}{mode_from} 不认识:只能是 open、none 或 proxy"
        ))
    })?;
    let (nets, nets_from) = list(nets, "FLOWERBOX_ALLOW_NET");
    let (domains, domains_from) = list(domains, "FLOWERBOX_ALLOW_DOMAIN");
    let allow_nets = nets
        .iter()
        .map(|n| parse_net(n).map_err(|e| CliError::Usage(format!("{e}{nets_from}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let allow_domains = domains
        .iter()
        .map(|d| DomainRule::parse(d).map_err(|e| CliError::Usage(format!("{e}{domains_from}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if !allow_domains.is_empty() && mode != EgressMode::Proxy {
        return Err(CliError::Usage(format!(
            "--allow-domain{domains_from} 只在 --egress proxy 下管用(现在是 {})",
            mode.name()
        )));
    }
    if !allow_nets.is_empty() && mode == EgressMode::None {
        return Err(CliError::Usage(format!(
            "--allow-net{nets_from} 和 --egress none 矛盾:none 下 pod 外面哪儿都连不了"
        )));
    }
    if sandbox == SandboxKind::Host && mode != EgressMode::Open {
        return Err(CliError::Usage(format!(
            "--egress {}{mode_from} 要 Docker 沙箱:--sandbox host 的命令直接在本机跑,管不住它们的网络",
            mode.name()
        )));
    }
    Ok(EgressPolicy {
        mode,
        allow_nets,
        allow_domains,
    })
}
