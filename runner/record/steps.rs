//! Step names in the manifest (seed 000 "步骤名有四种形态") and the run marker.
//!
//! | form | when |
//! |---|---|
//! | `<name>` | first attempt |
//! | `<name>#retry<N>` | ordinary retry |
//! | `<name>#round<N>` | sent back by the judge, keeps working |
//! | `<name>·判定#<N>` | the judge's step |
//!
//! Suffixed names never enter lineage: lineage is keyed by the plain name, the key that stays
//! stable across processes.

use rand::Rng;

/// How a manifest step name relates to its workflow step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepForm {
    /// `<name>`: the first attempt.
    First,
    /// `<name>#retry<N>`.
    Retry(u32),
    /// `<name>#round<N>`.
    Round(u32),
    /// `<name>·判定#<N>`.
    Judge(u32),
}

const RETRY: &str = "#retry";
const ROUND: &str = "#round";
const JUDGE: &str = "·判定#";

/// `<name>#retry<n>`.
pub fn retry_name(name: &str, n: u32) -> String {
    format!("{name}{RETRY}{n}")
}

/// `<name>#round<n>`.
pub fn round_name(name: &str, n: u32) -> String {
    format!("{name}{ROUND}{n}")
}

/// `<name>·判定#<n>`.
pub fn judge_name(name: &str, n: u32) -> String {
    format!("{name}{JUDGE}{n}")
}

/// Splits off the outermost suffix: `("干活", Round(2))` for `干活#round2`; a name without a
/// well-formed suffix is `(name, First)`.
pub fn parse_step(name: &str) -> (&str, StepForm) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return (name, StepForm::First);
    }
    let (head, num) = name.split_at(name.len() - digits);
    let Ok(n) = num.parse::<u32>() else {
        return (name, StepForm::First);
    };
    for (suffix, form) in [
        (RETRY, StepForm::Retry(n)),
        (ROUND, StepForm::Round(n)),
        (JUDGE, StepForm::Judge(n)),
    ] {
        if let Some(base) = head.strip_suffix(suffix) {
            if !base.is_empty() {
                return (base, form);
            }
        }
    }
    (name, StepForm::First)
}

/// The plain step name with every suffix removed (`干活#round2#retry1` → `干活`).
pub fn base_name(name: &str) -> &str {
    let mut cur = name;
    loop {
        match parse_step(cur) {
            (_, StepForm::First) => return cur,
            (base, _) => cur = base,
        }
    }
}

/// True for `#retry`, `#round` and `·判定#` names (they never enter lineage).
#[cfg(test)]
pub(crate) fn is_suffixed(name: &str) -> bool {
    parse_step(name).1 != StepForm::First
}

/// A fresh run marker for this process: `YYYYmmdd-HHMMSS-<6 hex>`, local time (seed 000).
pub fn new_run_marker() -> String {
    run_marker_at(
        chrono::Local::now().naive_local(),
        rand::rng().random_range(0..0x100_0000),
    )
}

/// The run marker for a given time and 24 random bits.
pub fn run_marker_at(t: chrono::NaiveDateTime, random: u32) -> String {
    format!("{}-{:06x}", t.format("%Y%m%d-%H%M%S"), random & 0xff_ffff)
}

/// True when `s` has the run-marker shape.
#[cfg(test)]
pub(crate) fn is_run_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 22
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'-'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'-'
        && b[16..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_forms_round_trip() {
        assert_eq!(parse_step("干活"), ("干活", StepForm::First));
        assert_eq!(
            parse_step(&retry_name("干活", 1)),
            ("干活", StepForm::Retry(1))
        );
        assert_eq!(
            parse_step(&round_name("干活", 2)),
            ("干活", StepForm::Round(2))
        );
        assert_eq!(
            parse_step(&judge_name("干活", 3)),
            ("干活", StepForm::Judge(3))
        );
        assert_eq!(judge_name("干活", 3), "干活·判定#3");
        assert_eq!(retry_name("设定目标", 12), "设定目标#retry12");
        assert_eq!(round_name("a", 2), "a#round2");
    }

    #[test]
    fn suffixed_names_and_their_base() {
        for name in [
            "干活#retry1",
            "干活#round2",
            "干活·判定#1",
            "干活#round2#retry1",
        ] {
            assert!(is_suffixed(name), "{name}");
            assert_eq!(base_name(name), "干活", "{name}");
        }
        for name in [
            "干活",
            "ad-hoc",
            "step2",
            "#retry1",
            "x#retry",
            "a#retryX1",
            "确认需求",
        ] {
            assert!(!is_suffixed(name), "{name}");
            assert_eq!(base_name(name), name);
        }
    }

    #[test]
    fn run_markers_have_the_seed_shape_and_differ() {
        let t = chrono::NaiveDate::from_ymd_opt(2026, 9, 7)
            .unwrap()
            .and_hms_opt(1, 52, 40)
            .unwrap();
        assert_eq!(run_marker_at(t, 0xabc), "20260907-015240-000abc");
        assert_eq!(run_marker_at(t, 0xffff_ffff), "20260907-015240-ffffff");
        let a = new_run_marker();
        assert!(is_run_marker(&a), "{a}");
        let many: std::collections::HashSet<String> = (0..50).map(|_| new_run_marker()).collect();
        assert!(many.len() > 1);
        assert!(!is_run_marker("20260907-015240-ABCDEF"));
        assert!(!is_run_marker("20260907-0152-abcdef"));
    }
}
