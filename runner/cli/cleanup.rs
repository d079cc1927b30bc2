//! `flowerbox __flowerbox-cleanup` (hidden): the detached cleanup of a run's end
//! ([`crate::sandbox::docker::reap`]). Reads its plan whole from stdin, appends its lines to
//! the run's log and removes what the plan names; exit 0 when everything went, 1 when some of
//! it stays (for the next run's sweep or `flowerbox gc`), 2 without a plan.

use std::io::Read;

use super::services::CleanupPlan as Plan;

/// Runs the cleanup; the process's exit code.
pub fn main() -> i32 {
    let mut json = Vec::new();
    if std::io::stdin().read_to_end(&mut json).is_err() {
        return 2;
    }
    let Ok(plan) = Plan::from_json(&json) else {
        return 2;
    };
    let log = super::logging::init(std::env::var("RUST_LOG").ok().as_deref());
    if let Some(run_dir) = plan.run_dir() {
        log.open_existing(run_dir);
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::warn!("cleanup: no runtime");
        return 1;
    };
    match rt.block_on(plan.carry_out()) {
        Ok(()) => 0,
        Err(e) => {
            tracing::warn!(error = %e, "cleanup of the run's end failed");
            1
        }
    }
}
