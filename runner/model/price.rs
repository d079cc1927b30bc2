//! Cost of model calls from [`Usage`] and the [`catalog`] price table.
//!
//! Unknown is not zero (DESIGN.md invariant 7): a model missing from the table, or a call whose
//! input or output token count the provider did not report, has cost `None`; totals that
//! include such a call are lower bounds and print as `≥ $1.2345` (seed 000's `总花费 $1.2345`
//! format otherwise).

use super::catalog;
use super::Usage;
use serde::Serialize;
use std::fmt;

/// Cost in USD of one call of `model` with `usage`; `None` when unknown.
///
/// Cache-token counts the provider did not report count as 0 (providers that report no cache
/// fields do not cache). The long-context tier applies when the prompt (input + cache reads +
/// cache writes) exceeds its threshold.
pub fn cost_usd(model: &str, usage: &Usage) -> Option<f64> {
    let info = catalog::lookup(model)?;
    let input = usage.input_tokens? as f64;
    let output = usage.output_tokens? as f64;
    let write = usage.cache_creation_input_tokens.unwrap_or(0) as f64;
    let read = usage.cache_read_input_tokens.unwrap_or(0) as f64;
    let prices = match info.long_context {
        Some((threshold, long)) if usage.context_tokens() > threshold => long,
        _ => info.prices,
    };
    let usd = (input * prices.input
        + output * prices.output
        + write * prices.cache_write
        + read * prices.cache_read)
        / 1_000_000.0;
    Some(usd)
}

/// A running total that remembers whether any part was unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Sum of the known parts, USD.
    pub known_usd: f64,
    /// True when at least one part was unknown: the real total is at least `known_usd`.
    pub unknown: bool,
}

impl Cost {
    /// The cost of one call (see [`cost_usd`]).
    pub fn of(model: &str, usage: &Usage) -> Cost {
        Cost::default().plus(cost_usd(model, usage))
    }

    /// Adds one part; `None` marks the total as a lower bound.
    pub fn add(&mut self, part: Option<f64>) {
        match part {
            Some(usd) => self.known_usd += usd,
            None => self.unknown = true,
        }
    }

    /// [`Cost::add`] by value.
    pub fn plus(mut self, part: Option<f64>) -> Cost {
        self.add(part);
        self
    }

    /// The exact total, or `None` when a part was unknown (for `cost_usd: null` fields).
    pub fn exact(&self) -> Option<f64> {
        (!self.unknown).then_some(self.known_usd)
    }
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        self.known_usd += other.known_usd;
        self.unknown |= other.unknown;
    }
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(mut self, other: Cost) -> Cost {
        self += other;
        self
    }
}

impl std::iter::Sum<Option<f64>> for Cost {
    fn sum<I: Iterator<Item = Option<f64>>>(iter: I) -> Cost {
        iter.fold(Cost::default(), Cost::plus)
    }
}

impl std::iter::Sum<Cost> for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::default(), |a, b| a + b)
    }
}

impl fmt::Display for Cost {
    /// `$1.2345`, or `≥ $1.2345` when a part was unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unknown {
            write!(f, "≥ ")?;
        }
        write!(f, "${:.4}", self.known_usd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64, w: u64, r: u64) -> Usage {
        Usage {
            input_tokens: Some(i),
            output_tokens: Some(o),
            cache_creation_input_tokens: Some(w),
            cache_read_input_tokens: Some(r),
        }
    }

    #[test]
    fn priced_per_token_kind() {
        // A 170k-token prompt: the standard tier.
        let c = cost_usd(
            "claude-sonnet-4-5-20250929",
            &usage(100_000, 10_000, 20_000, 50_000),
        );
        let want = (100_000.0 * 3.0 + 10_000.0 * 15.0 + 20_000.0 * 3.75 + 50_000.0 * 0.30) / 1e6;
        assert!((c.unwrap() - want).abs() < 1e-12);
        let long = cost_usd("claude-sonnet-4-5", &usage(150_000, 1_000, 0, 100_000)).unwrap();
        let want = (150_000.0 * 6.0 + 1_000.0 * 22.5 + 100_000.0 * 0.60) / 1e6;
        assert!((long - want).abs() < 1e-12);
    }

    #[test]
    fn unknown_model_or_missing_counts_are_unknown_not_zero() {
        assert_eq!(cost_usd("llama-3-70b", &usage(1, 1, 0, 0)), None);
        let no_output = Usage {
            input_tokens: Some(5),
            ..Default::default()
        };
        assert_eq!(cost_usd("claude-haiku-4-5", &no_output), None);
        let no_cache = Usage {
            input_tokens: Some(1_000_000),
            output_tokens: Some(0),
            ..Default::default()
        };
        assert_eq!(cost_usd("claude-haiku-4-5", &no_cache), Some(1.0));
    }

    #[test]
    fn totals_say_at_least() {
        let exact: Cost = [Some(1.0), Some(0.2345)].into_iter().sum();
        assert_eq!(exact.to_string(), "$1.2345");
        assert_eq!(exact.exact(), Some(1.2345));
        let partial: Cost = [Some(1.0), None, Some(0.2345)].into_iter().sum();
        assert_eq!(partial.to_string(), "≥ $1.2345");
        assert_eq!(partial.exact(), None);
        let both = exact + partial;
        assert!(both.unknown);
        assert!((both.known_usd - 2.469).abs() < 1e-9);
        assert_eq!(Cost::default().to_string(), "$0.0000");
    }
}
