//! Cost totals where unknown is not zero (DESIGN.md invariant 7; seed 001 "预算").
//!
//! A provider that reports no price gives `None` for a call; a total that includes such a call
//! is only a lower bound, and says so ("至少"). Costs come in as plain `Option<f64>` (USD) so
//! this module does not depend on the model layer.

use super::manifest::ManifestEntry;
use std::path::Path;

/// A running cost: the sum of the known parts and how many parts were unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// Sum of the known costs, USD.
    known_usd: f64,
    /// How many added costs were unknown.
    unknown: u32,
}

impl Cost {
    /// Adds one cost (`None` = unknown).
    pub fn add(&mut self, usd: Option<f64>) {
        match usd {
            Some(v) => self.known_usd += v,
            None => self.unknown += 1,
        }
    }

    /// The sum of several costs.
    pub fn of(costs: impl IntoIterator<Item = Option<f64>>) -> Cost {
        let mut c = Cost::default();
        for usd in costs {
            c.add(usd);
        }
        c
    }

    /// The exact total, or `None` when any part is unknown (the manifest's `cost_usd`).
    pub fn exact(&self) -> Option<f64> {
        (self.unknown == 0).then_some(self.known_usd)
    }

    /// The known part: the total is at least this, USD.
    pub fn at_least(&self) -> f64 {
        self.known_usd
    }

    /// True when every part is known.
    pub fn is_exact(&self) -> bool {
        self.unknown == 0
    }

    /// How many parts were unknown.
    pub fn unknown_parts(&self) -> u32 {
        self.unknown
    }

    /// True when a budget exists and the known spend has reached it: the next call must not
    /// start (the handoff turn is exempt; the runtime decides that).
    pub fn exceeds(&self, budget_usd: Option<f64>) -> bool {
        budget_usd.is_some_and(|b| self.known_usd >= b)
    }

    /// `$1.2345`, or `至少 $1.2345` when part of it is unknown.
    pub fn display(&self) -> String {
        if self.is_exact() {
            format!("${:.4}", self.known_usd)
        } else {
            format!("至少 ${:.4}", self.known_usd)
        }
    }
}

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

/// The closing line of a `go`/`run` (seed 000): `总花费 $1.2345 · 清单 /abs/path/runs/manifest.json`
/// (`总花费 至少 $…` when part of the cost is unknown).
pub fn closing_line(cost: &Cost, manifest: &Path) -> String {
    format!("总花费 {} · 清单 {}", cost.display(), manifest.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_makes_a_lower_bound_not_a_zero() {
        let exact = Cost::of([Some(1.0), Some(0.2345)]);
        assert_eq!(exact.exact(), Some(1.2345));
        assert_eq!(exact.display(), "$1.2345");
        let partial = Cost::of([Some(1.0), None, Some(0.5)]);
        assert_eq!(partial.exact(), None);
        assert_eq!(partial.at_least(), 1.5);
        assert_eq!(partial.unknown_parts(), 1);
        assert_eq!(partial.display(), "至少 $1.5000");
        assert_eq!(Cost::of([None]).display(), "至少 $0.0000");
        assert_eq!(Cost::default().exact(), Some(0.0));
    }

    #[test]
    fn budget() {
        let c = Cost::of([Some(0.4), Some(0.1)]);
        assert!(!c.exceeds(None));
        assert!(!c.exceeds(Some(0.6)));
        assert!(c.exceeds(Some(0.5)));
        assert!(Cost::of([None, Some(0.5)]).exceeds(Some(0.5)));
    }

    #[test]
    fn totals_over_rows_and_the_closing_line() {
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
        assert_eq!(
            closing_line(&t.cost, Path::new("/p/runs/manifest.json")),
            "总花费 至少 $1.0000 · 清单 /p/runs/manifest.json"
        );
        assert_eq!(
            closing_line(&Totals::of([&a]).cost, Path::new("/m.json")),
            "总花费 $1.0000 · 清单 /m.json"
        );
    }
}
