//! Where a typed line goes (seed 000 "你敲的东西去哪了"), as a pure function of the line and
//! the oldest pending question. The input thread acts on the [`Route`].
//!
//! | you type | question pending | no question pending |
//! |---|---|---|
//! | empty line | skip it: the model decides itself | nothing |
//! | `?…` or `？…` | aside question | aside question |
//! | digits within the options | that option's text as the answer | plain text |
//! | other text | the answer | inbox (an added requirement) |
//! | EOF | decline, remove the prompt, stop | remove the prompt, stop |
//!
//! flowerbox differs from flower on purpose: the fullwidth `？` (U+FF1F, what a Chinese input
//! method types) also starts an aside question (DESIGN.md "Deliberate differences").

use crate::channel::human::PendingQuestion;

/// What to do with one typed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Nothing (empty line, no question; or a bare `?`).
    Nothing,
    /// Skip question `id` (empty line while it is pending).
    Skip {
        /// The question id.
        id: String,
    },
    /// Answer question `id` with `text` (an option's text when a number selected it).
    Answer {
        /// The question id.
        id: String,
        /// The answer.
        text: String,
    },
    /// Ask the aside oracle; never reaches the running agent.
    Aside {
        /// The question, without the leading `?`.
        question: String,
    },
    /// Into the inbox, as an added requirement.
    Inbox {
        /// The message.
        text: String,
    },
}

/// Routes one finished line (see the module table).
pub fn route(line: &str, pending: Option<&PendingQuestion>) -> Route {
    let raw = line.trim();
    if let Some(rest) = raw.strip_prefix('?').or_else(|| raw.strip_prefix('？')) {
        let question = rest.trim();
        return if question.is_empty() {
            Route::Nothing
        } else {
            Route::Aside {
                question: question.to_string(),
            }
        };
    }
    match pending {
        Some(q) if raw.is_empty() => Route::Skip { id: q.id.clone() },
        Some(q) => Route::Answer {
            id: q.id.clone(),
            text: q.option_for(raw).unwrap_or(raw).to_string(),
        },
        None if raw.is_empty() => Route::Nothing,
        None => Route::Inbox {
            text: raw.to_string(),
        },
    }
}

/// The ids to decline at EOF: every question still pending (nobody can answer any more; with
/// one pending this is the seed's "拒答这个问题").
pub fn route_eof(pending: &[PendingQuestion]) -> Vec<String> {
    pending.iter().map(|q| q.id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn q(options: &[&str]) -> PendingQuestion {
        PendingQuestion {
            id: "q3".into(),
            agent: "clarifier".into(),
            question: "CLI 还是库?".into(),
            options: options.iter().map(|s| s.to_string()).collect(),
            asked_at: Instant::now(),
        }
    }

    #[test]
    fn empty_line() {
        assert_eq!(route("", None), Route::Nothing);
        assert_eq!(route("   ", None), Route::Nothing);
        assert_eq!(
            route("", Some(&q(&["CLI"]))),
            Route::Skip { id: "q3".into() }
        );
    }

    #[test]
    fn both_question_marks_start_an_aside_question_with_or_without_a_pending_question() {
        let aside = |s: &str| Route::Aside { question: s.into() };
        assert_eq!(route("? 现在到哪一步了", None), aside("现在到哪一步了"));
        assert_eq!(route("？现在到哪一步了", None), aside("现在到哪一步了"));
        assert_eq!(route("  ？ 进度如何 ", Some(&q(&[]))), aside("进度如何"));
        assert_eq!(route("?x", Some(&q(&["a"]))), aside("x"));
        assert_eq!(route("?", None), Route::Nothing);
        assert_eq!(route("？  ", Some(&q(&[]))), Route::Nothing);
        // A question mark later in the line is plain text.
        assert_eq!(
            route("为什么?", None),
            Route::Inbox {
                text: "为什么?".into()
            }
        );
    }

    #[test]
    fn digits_select_an_option_only_within_range() {
        let pq = q(&["CLI", "库"]);
        let answer = |t: &str| Route::Answer {
            id: "q3".into(),
            text: t.into(),
        };
        assert_eq!(route("2", Some(&pq)), answer("库"));
        assert_eq!(route(" 1 ", Some(&pq)), answer("CLI"));
        assert_eq!(route("3", Some(&pq)), answer("3"));
        assert_eq!(route("0", Some(&pq)), answer("0"));
        assert_eq!(route("２", Some(&pq)), answer("２"));
        // Without a question, digits are text for the inbox.
        assert_eq!(route("2", None), Route::Inbox { text: "2".into() });
    }

    #[test]
    fn text_is_an_answer_or_goes_to_the_inbox() {
        assert_eq!(
            route("纯命令行就行", Some(&q(&["CLI"]))),
            Route::Answer {
                id: "q3".into(),
                text: "纯命令行就行".into()
            }
        );
        assert_eq!(
            route("  顺便统计总字节数 ", None),
            Route::Inbox {
                text: "顺便统计总字节数".into()
            }
        );
    }

    #[test]
    fn eof_declines_what_is_pending() {
        assert!(route_eof(&[]).is_empty());
        assert_eq!(route_eof(&[q(&[])]), vec!["q3".to_string()]);
    }
}
