//! [`Verdict`]: one round's judgement by the judge (seed 002 "三个结论,不是两个", "判定含糊 =
//! 未达成"; seed 001 "判定").
//!
//! Exactly three sections — 结论 / 理由 / 未通过 — and three states: ACHIEVED, NOT_YET,
//! UNREACHABLE. Code decides the state from the judge's text, in a fixed order: the 结论 (or
//! 判定) section; a bare `1`/`true` or `0`/`false` as the whole answer; state keywords, longest
//! first (未达成 and 无法达成 both contain 达成); an isolated `1` or `0`. Nothing matched is
//! NOT_YET with [`DEFAULT_REASON`]: "cannot tell" is never "done". UNREACHABLE is never a pass;
//! every "cannot verify here" wording maps to it.

use super::brief::{first_non_empty, list_items, split_sections};

/// The reason given when the judge's text has no recognisable conclusion (seed 002).
pub const DEFAULT_REASON: &str = "判定者没给出明确结论,按未达成处理";

/// 理由 of a verdict whose judge stated a conclusion but no reason: never an empty reason on
/// screen or in the next round's prompt.
pub const NO_REASON: &str = "判定者没写理由(它看了什么,见 notes/判定记录.md)";

/// Heading spellings, each with its section index.
const ALIASES: &[(&str, usize)] = &[
    ("结论", 0),
    ("判定", 0),
    ("判定结论", 0),
    ("判定结果", 0),
    ("理由", 1),
    ("原因", 1),
    ("未通过", 2),
    ("未通过项", 2),
    ("未通过的判定项", 2),
    ("没通过", 2),
];

/// The three conclusions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerdictState {
    /// Every check passed: move on.
    Achieved,
    /// Not done yet: send back with what is missing, resume the same session.
    NotYet,
    /// Another round will not help (missing external condition, contradictory requirement,
    /// unverifiable check): stop and ask the human.
    Unreachable,
}

impl VerdictState {
    /// Every state, in the order they are listed.
    pub const ALL: [VerdictState; 3] = [
        VerdictState::Achieved,
        VerdictState::NotYet,
        VerdictState::Unreachable,
    ];

    /// The state named `name` as [`VerdictState::as_str`] spells it (a workflow file's
    /// `when = { verdict = "NOT_YET" }`).
    pub fn from_name(name: &str) -> Option<VerdictState> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The names, joined by `sep`.
    pub fn names(sep: &str) -> String {
        Self::ALL.map(VerdictState::as_str).join(sep)
    }

    /// `ACHIEVED`, `NOT_YET`, `UNREACHABLE` (manifest, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictState::Achieved => "ACHIEVED",
            VerdictState::NotYet => "NOT_YET",
            VerdictState::Unreachable => "UNREACHABLE",
        }
    }

    /// 达成, 未达成, 无法达成 (screen).
    pub fn label(self) -> &'static str {
        match self {
            VerdictState::Achieved => "达成",
            VerdictState::NotYet => "未达成",
            VerdictState::Unreachable => "无法达成",
        }
    }
}

/// State words; matched case-insensitively (ASCII), longest first.
const KEYWORDS: &[(&str, VerdictState)] = &[
    ("无法达成", VerdictState::Unreachable),
    ("不可达成", VerdictState::Unreachable),
    ("达不成", VerdictState::Unreachable),
    ("做不到", VerdictState::Unreachable),
    ("不可达", VerdictState::Unreachable),
    ("无法验证", VerdictState::Unreachable),
    ("没法验证", VerdictState::Unreachable),
    ("验证不了", VerdictState::Unreachable),
    ("无法判定", VerdictState::Unreachable),
    ("UNREACHABLE", VerdictState::Unreachable),
    ("UNVERIFIABLE", VerdictState::Unreachable),
    ("未达成", VerdictState::NotYet),
    ("没达成", VerdictState::NotYet),
    ("没有达成", VerdictState::NotYet),
    ("尚未达成", VerdictState::NotYet),
    ("还没达成", VerdictState::NotYet),
    ("未完成", VerdictState::NotYet),
    ("没完成", VerdictState::NotYet),
    ("未通过", VerdictState::NotYet),
    ("没通过", VerdictState::NotYet),
    ("不通过", VerdictState::NotYet),
    ("NOT_YET", VerdictState::NotYet),
    ("NOT YET", VerdictState::NotYet),
    ("NOT ACHIEVED", VerdictState::NotYet),
    ("NOT_ACHIEVED", VerdictState::NotYet),
    ("已达成", VerdictState::Achieved),
    ("已完成", VerdictState::Achieved),
    ("达成", VerdictState::Achieved),
    ("通过", VerdictState::Achieved),
    ("ACHIEVED", VerdictState::Achieved),
];

/// One judgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The conclusion (NOT_YET when nothing was recognised).
    pub state: VerdictState,
    /// Whether the judge's text stated a conclusion; `false` means the state is the
    /// "ambiguous = not achieved" default.
    pub explicit: bool,
    /// 理由 ([`DEFAULT_REASON`] first when no conclusion was recognised).
    pub reason: String,
    /// 未通过: the checklist items that did not pass, one per entry.
    pub failed: Vec<String>,
}

impl Verdict {
    /// Parses the judge's final text (see the module doc for the order). Never fails.
    pub fn parse(text: &str) -> Verdict {
        let found = split_sections(text, ALIASES);
        let conclusion = first_non_empty(&found[0]);
        let mut reason = first_non_empty(&found[1]);
        let failed = list_items(&first_non_empty(&found[2]));

        let has_section = !conclusion.is_empty();
        let state = if has_section {
            keyword(&conclusion).or_else(|| isolated_digit(&conclusion))
        } else {
            bare(text)
                .or_else(|| keyword(text))
                .or_else(|| isolated_digit(text))
        };
        let explicit = state.is_some();
        if !explicit {
            reason = if reason.is_empty() {
                DEFAULT_REASON.to_string()
            } else {
                format!("{DEFAULT_REASON}\n{reason}")
            };
        } else if reason.trim().is_empty() {
            reason = NO_REASON.to_string();
        }
        Verdict {
            state: state.unwrap_or(VerdictState::NotYet),
            explicit,
            reason,
            failed,
        }
    }

    /// ACHIEVED (and stated explicitly, which ACHIEVED always is).
    pub fn achieved(&self) -> bool {
        self.state == VerdictState::Achieved
    }

    /// UNREACHABLE: stop and ask the human, never another round, never a pass.
    pub fn unreachable(&self) -> bool {
        self.state == VerdictState::Unreachable
    }

    /// The prompt for the next round of the work step: what is missing, never how to do it.
    pub fn feedback(&self) -> String {
        let mut out = format!("独立判定者看了现场,结论是「{}」。\n", self.state.label());
        if !self.failed.is_empty() {
            out.push_str("\n还没通过的判定项:\n");
            for f in &self.failed {
                out.push_str(&format!("- {f}\n"));
            }
        }
        if !self.reason.trim().is_empty() {
            out.push_str(&format!("\n判定者的理由:\n{}\n", self.reason.trim()));
        }
        out.push_str("\n接着做,把这些差距补上;怎么补由你决定。做完后会再判一次。");
        out
    }

    /// The three sections as markdown (the tests compare verdicts by it).
    #[cfg(test)]
    pub(crate) fn to_markdown(&self) -> String {
        let failed = if self.failed.is_empty() {
            "无".to_string()
        } else {
            self.failed
                .iter()
                .map(|f| format!("- {f}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "## 结论\n{}\n\n## 理由\n{}\n\n## 未通过\n{failed}\n",
            self.state.as_str(),
            self.reason.trim()
        )
    }
}

/// The whole answer is `1`/`true` or `0`/`false`.
fn bare(text: &str) -> Option<VerdictState> {
    let t = text
        .trim()
        .trim_end_matches(['.', '。'])
        .trim()
        .to_ascii_lowercase();
    match t.as_str() {
        "1" | "true" => Some(VerdictState::Achieved),
        "0" | "false" => Some(VerdictState::NotYet),
        _ => None,
    }
}

/// The first state word found in `text`, trying longer words first.
fn keyword(text: &str) -> Option<VerdictState> {
    let upper = text.to_ascii_uppercase();
    let mut words: Vec<&(&str, VerdictState)> = KEYWORDS.iter().collect();
    words.sort_by_key(|(w, _)| std::cmp::Reverse(w.chars().count()));
    words
        .into_iter()
        .find(|(w, _)| upper.contains(w))
        .map(|(_, s)| *s)
}

/// An isolated `1` (achieved) or `0` (not yet): not part of a number or a word. Both present
/// is ambiguous and yields nothing.
fn isolated_digit(text: &str) -> Option<VerdictState> {
    let chars: Vec<char> = text.chars().collect();
    let joined =
        |c: Option<&char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || "._".contains(*c));
    let (mut one, mut zero) = (false, false);
    for (i, c) in chars.iter().enumerate() {
        if (*c == '1' || *c == '0')
            && !joined(i.checked_sub(1).and_then(|p| chars.get(p)))
            && !joined(chars.get(i + 1))
        {
            if *c == '1' {
                one = true;
            } else {
                zero = true;
            }
        }
    }
    match (one, zero) {
        (true, false) => Some(VerdictState::Achieved),
        (false, true) => Some(VerdictState::NotYet),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use VerdictState::*;

    #[test]
    fn verdict_names_parse_back_from_their_one_spelling() {
        for state in VerdictState::ALL {
            assert_eq!(VerdictState::from_name(state.as_str()), Some(state));
        }
        assert_eq!(VerdictState::from_name("achieved"), None);
        assert_eq!(VerdictState::names("、"), "ACHIEVED、NOT_YET、UNREACHABLE");
    }

    #[test]
    fn three_sections_parse() {
        let v = Verdict::parse(
            "我去现场看了。\n## 结论\n未达成\n## 理由\n列表没转成 ul\n## 未通过\n- 列表被转成 `<ul><li>`\n- 输出里含 `<h1>`\n",
        );
        assert_eq!(v.state, NotYet);
        assert!(v.explicit);
        assert_eq!(v.reason, "列表没转成 ul");
        assert_eq!(v.failed, vec!["列表被转成 `<ul><li>`", "输出里含 `<h1>`"]);
    }

    #[test]
    fn conclusion_section_wins_over_words_elsewhere() {
        // The reason mentions 未达成 and 无法验证, the conclusion says 达成.
        let v = Verdict::parse("## 判定\n达成\n## 理由\n上一轮未达成的两项现在都能验证,没有无法验证的项\n## 未通过\n无\n");
        assert_eq!(v.state, Achieved);
        assert!(v.failed.is_empty());
        let v = Verdict::parse("**结论**: ACHIEVED\n**理由**: ok\n");
        assert_eq!(v.state, Achieved);
    }

    #[test]
    fn a_conclusion_without_a_reason_gets_the_default_reason() {
        for text in [
            "## 结论\nUNREACHABLE\n",
            "UNREACHABLE",
            "## 结论\n无法达成\n## 理由\n\n",
        ] {
            let v = Verdict::parse(text);
            assert_eq!(v.state, Unreachable, "{text:?}");
            assert_eq!(v.reason, NO_REASON, "{text:?}");
        }
    }

    #[test]
    fn longest_keyword_first() {
        for (text, want) in [
            ("## 结论\n未达成", NotYet),
            ("## 结论\n无法达成", Unreachable),
            ("## 结论\n达成", Achieved),
            ("## 结论\n已达成", Achieved),
            ("## 结论\nNOT_YET", NotYet),
            ("## 结论\nnot achieved", NotYet),
            ("## 结论\nunreachable", Unreachable),
            ("## 结论\n判定项 2 在这里验证不了", Unreachable),
            ("## 结论\n无法判定", Unreachable),
            ("## 结论\nunverifiable here", Unreachable),
            ("## 结论\n没法验证", Unreachable),
            ("## 结论\n未通过", NotYet),
            ("## 结论\n通过", Achieved),
        ] {
            let v = Verdict::parse(text);
            assert_eq!(v.state, want, "{text}");
            assert!(v.explicit, "{text}");
        }
    }

    #[test]
    fn bare_one_true_zero_false() {
        for (text, want) in [
            ("1", Achieved),
            (" true\n", Achieved),
            ("TRUE.", Achieved),
            ("0", NotYet),
            ("false", NotYet),
        ] {
            let v = Verdict::parse(text);
            assert_eq!((v.state, v.explicit), (want, true), "{text:?}");
        }
    }

    #[test]
    fn keywords_without_sections() {
        assert_eq!(
            Verdict::parse("看完了,结论是无法达成:缺少 X 依赖").state,
            Unreachable
        );
        assert_eq!(Verdict::parse("还没做完,未达成。").state, NotYet);
        assert_eq!(Verdict::parse("全部检查通过,达成。").state, Achieved);
    }

    #[test]
    fn isolated_digit_is_the_last_resort() {
        assert_eq!(Verdict::parse("## 结论\n1").state, Achieved);
        assert_eq!(Verdict::parse("判定:0 (差两项)").state, NotYet);
        let v = Verdict::parse("我的看法: 1");
        assert_eq!((v.state, v.explicit), (Achieved, true));
        // Digits inside numbers or words are not isolated.
        let v = Verdict::parse("跑了 10 个用例,v1.0 版本,耗时 1.5 秒");
        assert!(!v.explicit);
        // Both present: ambiguous.
        assert!(!Verdict::parse("1 项好了 0 项没好…其实说不准").explicit);
    }

    #[test]
    fn nothing_recognised_is_not_yet_with_default_reason() {
        let v = Verdict::parse("我看了一下代码,写得挺工整的。");
        assert_eq!(v.state, NotYet);
        assert!(!v.explicit);
        assert!(!v.achieved());
        assert_eq!(v.reason, DEFAULT_REASON);
        let v = Verdict::parse("## 理由\n看不出来\n");
        assert_eq!(v.reason, format!("{DEFAULT_REASON}\n看不出来"));
        let v = Verdict::parse("");
        assert_eq!((v.state, v.reason.as_str()), (NotYet, DEFAULT_REASON));
    }

    #[test]
    fn feedback_says_what_is_missing() {
        let v = Verdict::parse("## 结论\n未达成\n## 理由\n没有 a.html\n## 未通过\n1. 跑 `python conv.py a.md` 产出 a.html\n");
        let fb = v.feedback();
        assert!(fb.contains("「未达成」"), "{fb}");
        assert!(
            fb.contains("- 跑 `python conv.py a.md` 产出 a.html"),
            "{fb}"
        );
        assert!(fb.contains("没有 a.html"), "{fb}");
        let fb = Verdict::parse("嗯").feedback();
        assert!(fb.contains(DEFAULT_REASON), "{fb}");
    }

    #[test]
    fn markdown_round_trips() {
        for state in [Achieved, NotYet, Unreachable] {
            let v = Verdict {
                state,
                explicit: true,
                reason: "理由一".into(),
                failed: vec!["项 a".into()],
            };
            assert_eq!(Verdict::parse(&v.to_markdown()), v);
        }
    }

    #[test]
    fn fenced_code_in_the_answer_is_ignored() {
        let v = Verdict::parse("```\n## 结论\n达成\n```\n## 结论\n未达成\n");
        assert_eq!(v.state, NotYet);
    }
}
