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
    /// Summed step durations, seconds.
    pub duration_s: f64,
}

impl Totals {
    /// Totals of `rows`.
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a ManifestEntry>) -> Totals {
        let mut t = Totals::default();
        for r in rows {
            t.cost.add(r.cost_usd);
            t.turns += r.num_turns;
            t.duration_s += r.duration_s;
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
        a.duration_s = 10.0;
        let mut b = ManifestEntry::begin("b", "r");
        b.cost_usd = None;
        b.num_turns = 2;
        b.duration_s = 5.5;
        let t = Totals::of([&a, &b]);
        assert_eq!(t.turns, 5);
        assert_eq!(t.duration_s, 15.5);
        assert_eq!(t.cost.exact(), None);
        assert_eq!(t.cost.to_string(), "≥ $1.0000");
        assert_eq!(Totals::of([&a]).cost.exact(), Some(1.0));
    }
}
