//! The loop guard (issue 29 §1.3): a model that makes the same tool calls and gets the same
//! results [`REPEAT_LIMIT`] turns in a row is told so once; if its next turn repeats them
//! again, the step ends with [`StepError::Repeating`](super::result::StepError::Repeating).
//! A turn is compared whole (every call's name and input, every result's text and error
//! flag), so a model that changes anything, or gets a different answer, is never stopped.
//! The clarifier asking the same question with nobody to answer is the same case; its note
//! points it to the assumption path (write the brief, the guesses under 未知与假设).

use serde_json::Value;

use crate::agent::roles::ASK_TOOL;
use crate::model::ToolCall;

/// Identical turns in a row after which the model is told (the next one ends the step).
pub const REPEAT_LIMIT: u32 = 5;

/// What the guard says after one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to say.
    Go,
    /// Tell the model (once per streak) with this note.
    Tell(String),
    /// It went on after being told: end the step; (tool name, identical turns).
    Stop(String, u32),
}

/// Counts identical turns in a row.
#[derive(Debug, Default)]
pub(crate) struct RepeatGuard {
    last: Option<String>,
    streak: u32,
}

impl RepeatGuard {
    /// One turn's calls and their results `(text, is_error)`, in the same order.
    pub(crate) fn observe(&mut self, calls: &[ToolCall], results: &[(String, bool)]) -> Verdict {
        if calls.is_empty() {
            *self = RepeatGuard::default();
            return Verdict::Go;
        }
        let key = Value::Array(
            calls
                .iter()
                .zip(results)
                .map(|(c, (text, err))| serde_json::json!([c.name, c.input, text, err]))
                .collect(),
        )
        .to_string();
        if self.last.as_deref() == Some(key.as_str()) {
            self.streak += 1;
        } else {
            self.last = Some(key);
            self.streak = 1;
        }
        let name = calls[0].name.clone();
        if self.streak == REPEAT_LIMIT {
            Verdict::Tell(note(&name, calls.iter().all(|c| c.name == ASK_TOOL)))
        } else if self.streak > REPEAT_LIMIT {
            Verdict::Stop(name, self.streak)
        } else {
            Verdict::Go
        }
    }
}

/// The one-time note.
fn note(name: &str, asking: bool) -> String {
    let n = REPEAT_LIMIT;
    if asking {
        format!(
            "[你已经连续 {n} 次问了同一个问题,得到的都是同一个回答:没有人会回答它。别再问了:按你最合理的假设继续,\
             把这些假设写进「未知与假设」,现在就输出需求确认书。再原样问一次,这一步就会被停下。]"
        )
    } else {
        format!(
            "[你已经连续 {n} 次做了完全相同的调用({name}),得到的是完全相同的结果:再重复也不会变。换个办法,\
             或者结束这一步并说明卡在哪里。再原样调用一次,这一步就会被停下。]"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, input: Value) -> ToolCall {
        ToolCall {
            id: "x".into(),
            name: name.into(),
            input,
        }
    }

    #[test]
    fn identical_turns_are_told_once_then_stopped() {
        let mut g = RepeatGuard::default();
        let c = [call("Read", json!({"file_path": "nope"}))];
        let r = [("不存在".to_string(), true)];
        for _ in 1..REPEAT_LIMIT {
            assert_eq!(g.observe(&c, &r), Verdict::Go);
        }
        let Verdict::Tell(t) = g.observe(&c, &r) else {
            panic!()
        };
        assert!(t.contains("连续 5 次") && t.contains("(Read)"), "{t}");
        assert_eq!(g.observe(&c, &r), Verdict::Stop("Read".into(), 6));
    }

    #[test]
    fn any_change_resets_the_streak() {
        let mut g = RepeatGuard::default();
        let c = [call("Read", json!({"file_path": "a"}))];
        let other = [call("Read", json!({"file_path": "b"}))];
        let r = [("x".to_string(), true)];
        let r2 = [("y".to_string(), true)];
        for i in 0..20 {
            // Same call, alternating results: a polling loop that sees progress.
            let res = if i % 2 == 0 { &r } else { &r2 };
            assert_eq!(g.observe(&c, res), Verdict::Go);
        }
        for _ in 0..20 {
            assert_eq!(g.observe(&c, &r), Verdict::Go);
            assert_eq!(g.observe(&other, &r), Verdict::Go);
        }
        for _ in 1..REPEAT_LIMIT {
            assert_eq!(g.observe(&c, &r), Verdict::Go);
        }
        assert_eq!(g.observe(&[], &[]), Verdict::Go);
        assert_eq!(g.observe(&c, &r), Verdict::Go, "a text-only turn resets");
    }

    #[test]
    fn the_same_unanswered_question_points_to_the_assumptions() {
        let mut g = RepeatGuard::default();
        let c = [call(ASK_TOOL, json!({"question": "用什么数据库?"}))];
        let r = [("人不在".to_string(), false)];
        for _ in 1..REPEAT_LIMIT {
            g.observe(&c, &r);
        }
        let Verdict::Tell(t) = g.observe(&c, &r) else {
            panic!()
        };
        assert!(t.contains("未知与假设"), "{t}");
    }
}
