//! Totals over manifest rows, where unknown is not zero (DESIGN.md invariant 7; seed 001
//! "预算"): a row with `cost_usd: null` makes the total a lower bound. The cost type itself is
//! the model layer's [`Cost`].

use super::manifest::ManifestEntry;
pub use crate::model::price::Cost;

/// Totals over manifest rows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Summed cost (rows with `cost_usd: null` make it a lower bound).
    pub cost: Cost,
    /// Summed turns.
    pub turns: u64,
    /// Summed step durations, seconds (rows with `duration_s: null` make it a lower bound).
    pub duration_s: f64,
    /// Some row's duration is unknown: `duration_s` is a lower bound.
    pub duration_unknown: bool,
}

impl Totals {
    /// Totals of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a ManifestEntry>) -> Totals {
        let mut t = Totals::default();
        for r in rows {
            t.cost.add(r.cost_usd);
            t.turns += r.num_turns;
            match r.duration_s {
                Some(d) => t.duration_s += d,
                None => t.duration_unknown = true,
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_over_rows_are_a_lower_bound_when_a_row_is_unknown() {
        let mut a = ManifestEntry::begin("a", "r");
        a.cost_usd = Some(1.0);
        a.num_turns = 3;
        a.duration_s = Some(10.0);
        let mut b = ManifestEntry::begin("b", "r");
        b.cost_usd = None;
        b.num_turns = 2;
        b.duration_s = Some(5.5);
        let t = Totals::of([&a, &b]);
        assert_eq!(t.turns, 5);
        assert_eq!(t.duration_s, 15.5);
        assert!(!t.duration_unknown);
        assert_eq!(t.cost.exact(), None);
        assert_eq!(t.cost.to_string(), "≥ $1.0000");
        assert_eq!(Totals::of([&a]).cost.exact(), Some(1.0));
        // A row cut off in flight (kill -9): its cost and duration are unknown.
        let cut = ManifestEntry::begin("c", "r").in_flight();
        let t = Totals::of([&a, &cut]);
        assert_eq!(t.cost.to_string(), "≥ $1.0000");
        assert!(t.duration_unknown);
    }
}
