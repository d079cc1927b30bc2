//! What a container kept warm costs (issue 32 §2): the resident memory of an idle agent
//! container with its exec service started, as the engine's cgroup counts it, for the doctor's
//! `warm` line. A run keeps the pod and the coordinator's first worker warm while it clarifies,
//! and starts each worker's container when the coordinator's `Agent` call arrives (DESIGN.md
//! "Start early").

use bollard::query_parameters::StatsOptions;
use bollard::Docker;
use futures::StreamExt;

use crate::sandbox::doctor::{Check, CheckStatus};

/// Resident bytes of container `id`: anonymous memory (cgroup v2 `anon`, v1 `total_rss` or
/// `rss`), else the usage without the reclaimable page cache (`inactive_file`), as `docker
/// stats` shows it. `None` when the engine says nothing.
pub(crate) async fn resident(docker: &Docker, id: &str) -> Option<u64> {
    let options = StatsOptions {
        stream: false,
        one_shot: true,
    };
    let stats = docker.stats(id, Some(options)).next().await?.ok()?;
    let memory = stats.memory_stats?;
    let counters = memory.stats.unwrap_or_default();
    ["anon", "total_rss", "rss"]
        .iter()
        .find_map(|k| counters.get(*k).copied())
        .or_else(|| {
            let cache = ["inactive_file", "total_inactive_file"]
                .iter()
                .find_map(|k| counters.get(*k).copied())
                .unwrap_or(0);
            memory.usage.map(|u| u.saturating_sub(cache))
        })
}

/// The doctor's `warm` line: what a run keeps warm and what one idle container of it costs.
pub(crate) fn warm_check(resident: Option<u64>) -> Check {
    let what = "go/run 澄清目标时先起 pod 和协调者第一种执行者的容器;协调者的 Agent 调用一流出来就给那个执行者起容器,没用上的随即删掉";
    match resident {
        Some(bytes) => Check::new(
            "warm",
            CheckStatus::Pass,
            format!(
                "{what}。一个空闲的执行者容器(含 exec 服务)在引擎上常驻 {:.1} MiB",
                bytes as f64 / (1024.0 * 1024.0)
            ),
        ),
        None => Check::new(
            "warm",
            CheckStatus::Warn,
            format!("{what}。引擎没报空闲容器占多少内存"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_line_says_what_is_kept_and_its_cost() {
        let line = warm_check(Some(3 * 1024 * 1024 + 512 * 1024));
        assert_eq!(line.status, CheckStatus::Pass);
        assert!(line.detail.contains("3.5 MiB"), "{}", line.detail);
        assert!(line.detail.contains("pod"), "{}", line.detail);
        assert_eq!(warm_check(None).status, CheckStatus::Warn);
    }
}
