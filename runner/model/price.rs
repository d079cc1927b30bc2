//! TEMPORARY placeholder replaced by the model branch's price table at merge.

use super::Usage;

/// Placeholder: unknown for every model.
pub fn cost_usd(_model: &str, _usage: &Usage) -> Option<f64> {
    None
}
