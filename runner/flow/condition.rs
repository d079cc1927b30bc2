//! `when` conditions of workflow-file steps ([`super::declarative`]): a step runs only after an
//! earlier step of the same run came out a certain way.
//!
//! ```toml
//! when = { step = "测试", outcome = "failed" }      # ok | failed | skipped
//! when = { step = "干活", verdict = "NOT_YET" }     # ACHIEVED | NOT_YET | UNREACHABLE
//! ```
//!
//! `outcome`: `ok` — the step ran in this process and was accepted; `failed` — it ran and was
//! not (only reachable when its `on_fail` is `skip` or `continue`); `skipped` — it did not run
//! in this process (its own `when` said no). `verdict`: the last verdict the step's judge gave
//! (the step needs a `goal`); a step never judged matches none.

use serde::Deserialize;

use super::ctx::Ctx;
use super::verdict::VerdictState;

/// How an earlier step came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Ran and was accepted.
    Ok,
    /// Ran and was not accepted.
    Failed,
    /// Did not run in this process.
    Skipped,
}

/// A parsed `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// An earlier step's outcome.
    Outcome {
        /// The step.
        step: String,
        /// The outcome it must have had.
        outcome: Outcome,
    },
    /// An earlier judged step's last verdict.
    Verdict {
        /// The step.
        step: String,
        /// The verdict it must have had.
        state: VerdictState,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WhenDecl {
    step: String,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    verdict: Option<String>,
}

/// Why a `when` is refused (the message names what to write instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenProblem {
    /// Not a table of the two accepted shapes.
    #[error("要写成 {{ step = \"步骤名\", outcome = \"ok\" }} 或 {{ step = \"步骤名\", verdict = \"NOT_YET\" }}({0})")]
    Shape(String),
    /// Both or neither of `outcome` and `verdict`.
    #[error("outcome 和 verdict 恰好写一个")]
    OneOf,
    /// An unknown outcome.
    #[error("outcome 不认识 \"{0}\";可用 ok、failed、skipped")]
    Outcome(String),
    /// An unknown verdict.
    #[error("verdict 不认识 \"{0}\";可用 {names}", names = VerdictState::names("、"))]
    Verdict(String),
}

impl Condition {
    /// Parses a `when` value.
    ///
    /// # Errors
    /// [`WhenProblem`].
    pub fn parse(value: &toml::Value) -> Result<Condition, WhenProblem> {
        let d: WhenDecl = value.clone().try_into().map_err(|e: toml::de::Error| {
            WhenProblem::Shape(e.message().split_whitespace().collect::<Vec<_>>().join(" "))
        })?;
        match (d.outcome, d.verdict) {
            (Some(o), None) => Ok(Condition::Outcome {
                step: d.step,
                outcome: match o.as_str() {
                    "ok" => Outcome::Ok,
                    "failed" => Outcome::Failed,
                    "skipped" => Outcome::Skipped,
                    _ => return Err(WhenProblem::Outcome(o)),
                },
            }),
            (None, Some(v)) => Ok(Condition::Verdict {
                step: d.step,
                state: match VerdictState::from_name(&v) {
                    Some(state) => state,
                    None => return Err(WhenProblem::Verdict(v)),
                },
            }),
            _ => Err(WhenProblem::OneOf),
        }
    }

    /// The step the condition looks at.
    pub fn step(&self) -> &str {
        match self {
            Condition::Outcome { step, .. } | Condition::Verdict { step, .. } => step,
        }
    }

    /// Whether it holds for what `ctx` recorded so far.
    pub fn holds(&self, ctx: &Ctx) -> bool {
        match self {
            Condition::Outcome { step, outcome } => {
                let got = match ctx.passed.get(step) {
                    Some(true) => Outcome::Ok,
                    Some(false) => Outcome::Failed,
                    None => Outcome::Skipped,
                };
                got == *outcome
            }
            Condition::Verdict { step, state } => {
                ctx.verdicts.get(step).is_some_and(|v| v.state == *state)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::verdict::Verdict;

    fn when(text: &str) -> Result<Condition, WhenProblem> {
        let v: toml::Table = toml::from_str(&format!("when = {text}")).unwrap();
        Condition::parse(&v["when"])
    }

    #[test]
    fn the_two_shapes_parse_and_mistakes_are_named() {
        assert_eq!(
            when(r#"{ step = "测试", outcome = "failed" }"#).unwrap(),
            Condition::Outcome {
                step: "测试".into(),
                outcome: Outcome::Failed
            }
        );
        assert_eq!(
            when(r#"{ step = "干活", verdict = "NOT_YET" }"#).unwrap(),
            Condition::Verdict {
                step: "干活".into(),
                state: VerdictState::NotYet
            }
        );
        assert_eq!(
            when(r#"{ step = "a", outcome = "ok", verdict = "ACHIEVED" }"#),
            Err(WhenProblem::OneOf)
        );
        assert_eq!(when(r#"{ step = "a" }"#), Err(WhenProblem::OneOf));
        assert_eq!(
            when(r#"{ step = "a", outcome = "done" }"#),
            Err(WhenProblem::Outcome("done".into()))
        );
        assert!(matches!(when(r#""a""#), Err(WhenProblem::Shape(_))));
        assert!(matches!(
            when(r#"{ step = "a", outcome = "ok", if = 1 }"#),
            Err(WhenProblem::Shape(_))
        ));
    }

    #[test]
    fn conditions_read_what_the_run_recorded() {
        let mut ctx = Ctx::default();
        let ok = |s: &str| Condition::Outcome {
            step: s.into(),
            outcome: Outcome::Ok,
        };
        let skipped = Condition::Outcome {
            step: "a".into(),
            outcome: Outcome::Skipped,
        };
        assert!(!ok("a").holds(&ctx) && skipped.holds(&ctx));
        ctx.passed.insert("a".into(), true);
        assert!(ok("a").holds(&ctx) && !skipped.holds(&ctx));
        ctx.passed.insert("b".into(), false);
        assert!(Condition::Outcome {
            step: "b".into(),
            outcome: Outcome::Failed
        }
        .holds(&ctx));
        let not_yet = Condition::Verdict {
            step: "干活".into(),
            state: VerdictState::NotYet,
        };
        assert!(!not_yet.holds(&ctx), "never judged");
        ctx.verdicts.insert(
            "干活".into(),
            Verdict::parse("## 结论\nNOT_YET\n## 理由\n差一点\n"),
        );
        assert!(not_yet.holds(&ctx));
    }
}
