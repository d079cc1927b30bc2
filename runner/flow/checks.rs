//! Checks: commands whose exit status decides a checklist item (issue 27 §1). The goal's
//! 判定清单 may give an item one, the user adds more with `go --check 'CMD'` and workflow
//! files with `checks = [...]`; flowerbox runs them itself before every judge round
//! ([`super::gates`]).
//!
//! The checklist format is tolerant, like the brief's (seed 003):
//!
//! - an inline label anywhere in the item: `检查: \`make test\``, `check: \`cargo test -q\``
//!   (also `检查命令`, `验证命令`, `cmd`; ASCII or fullwidth colon; bold allowed; the command in
//!   single or double backticks);
//! - or a fenced block under the item (info string empty, `sh`, `bash`, `shell`, `check` or
//!   `检查`), run as one script that stops at its first failing line (`set -e`);
//! - an expected exit status other than 0 after the command or in the item (`(退出码 1)`,
//!   `(exit 1)`, `expect 1`) or in the fence's info string (`sh exit=1`).
//!
//! An item without either is decided by the judge's reading alone.

use regex::Regex;
use std::sync::LazyLock;

/// Where a check came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckSource {
    /// An item of the goal's checklist (its number, 1-based).
    Goal(usize),
    /// `go --check` (its position, 1-based).
    User(usize),
    /// A workflow file's `checks` (its position, 1-based).
    Workflow(usize),
}

/// One command flowerbox runs before the judge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Where it came from (also its id: [`Check::id`]).
    pub source: CheckSource,
    /// The shell command (run with `bash -c` in the gate container).
    pub command: String,
    /// The exit status that passes.
    pub expect: i64,
}

impl Check {
    /// A command given by the user or a workflow file, expecting exit 0.
    pub fn new(source: CheckSource, command: impl Into<String>) -> Self {
        Check {
            source,
            command: command.into(),
            expect: 0,
        }
    }

    /// A stable id: `item-2` (the goal's item 2), `user-1` (`--check`), `flow-1`.
    pub fn id(&self) -> String {
        match self.source {
            CheckSource::Goal(n) => format!("item-{n}"),
            CheckSource::User(n) => format!("user-{n}"),
            CheckSource::Workflow(n) => format!("flow-{n}"),
        }
    }

    /// The command on one line, for the screen and the judge's summary (`a; b` for a script).
    pub fn one_line(&self) -> String {
        self.command
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != "set -e")
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The command of one checklist item, as parsed from the goal file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemCommand {
    /// The command (a fenced block's whole text).
    pub command: String,
    /// The exit status that passes.
    pub expect: i64,
    /// It came from a fenced block under the item (written back as one).
    pub fenced: bool,
}

/// A fenced block lifted out of a document before section splitting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    /// The info string after the opening backticks (`sh exit=1`).
    pub info: String,
    /// The text inside, dedented by the fence's own indentation.
    pub body: String,
}

/// Marks where a fence was (private-use characters: never in a model's checklist text).
const MARK_OPEN: char = '\u{E000}';
const MARK_CLOSE: char = '\u{E001}';

/// Replaces every closed fenced block with an indented marker line (so a list parser sees it
/// as the continuation of the item above), and drops everything after an unclosed fence, as
/// [`super::brief::strip_fences`] does. Returns the text and the fences in order.
pub(crate) fn lift_fences(text: &str) -> (String, Vec<Fence>) {
    let mut out: Vec<String> = Vec::new();
    let mut fences = Vec::new();
    // (fence char, length, indentation, info, body lines)
    let mut open: Option<(char, usize, usize, String, Vec<String>)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match open.as_mut() {
            None => match fence_marker(t) {
                Some((c, n)) => {
                    let indent = line.len() - t.len();
                    let info = t[n * c.len_utf8()..].trim().to_string();
                    open = Some((c, n, indent, info, Vec::new()));
                }
                None => out.push(line.to_string()),
            },
            Some((c, n, indent, _, body)) => {
                let tt = t.trim_end();
                if !(tt.len() >= *n && tt.chars().all(|x| x == *c)) {
                    let strip = line
                        .char_indices()
                        .take_while(|(i, ch)| *i < *indent && *ch == ' ')
                        .count();
                    body.push(line[strip..].to_string());
                } else if let Some((_, _, _, info, body)) = open.take() {
                    out.push(format!("  {MARK_OPEN}{}{MARK_CLOSE}", fences.len()));
                    fences.push(Fence {
                        info,
                        body: body.join("\n"),
                    });
                }
            }
        }
    }
    (out.join("\n"), fences)
}

/// A fence opening: three or more backticks or tildes.
fn fence_marker(t: &str) -> Option<(char, usize)> {
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// Removes the fence markers from `text`; returns the text (spaces around them collapsed) and
/// the fence indices in order.
pub(crate) fn take_markers(text: &str) -> (String, Vec<usize>) {
    let mut idx = Vec::new();
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(MARK_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + MARK_OPEN.len_utf8()..];
        match after.find(MARK_CLOSE) {
            Some(end) => {
                if let Ok(n) = after[..end].parse::<usize>() {
                    idx.push(n);
                }
                rest = &after[end + MARK_CLOSE.len_utf8()..];
            }
            None => rest = after,
        }
    }
    out.push_str(rest);
    let cleaned = out.split_whitespace().collect::<Vec<_>>().join(" ");
    // A marker joined to its item by the list parser leaves nothing else behind.
    let keep_spacing = idx.is_empty();
    (if keep_spacing { out } else { cleaned }, idx)
}

/// `text` without the lines that only hold a fence marker (a fence outside the checklist is
/// dropped, as [`super::brief::strip_fences`] drops it), other lines kept as they are.
pub(crate) fn drop_marker_lines(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let t = l.trim();
            !(t.starts_with(MARK_OPEN) && t.ends_with(MARK_CLOSE))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Info strings of a fenced block that is a check.
const SHELL_INFOS: &[&str] = &["", "sh", "bash", "shell", "check", "检查"];

/// Whether a fence with this info string is a check (its first word decides).
pub(crate) fn is_check_fence(info: &str) -> bool {
    let word = info.split_whitespace().next().unwrap_or("");
    SHELL_INFOS.contains(&word.to_ascii_lowercase().as_str())
}

/// The check label before an inline command.
#[allow(clippy::expect_used, reason = "a literal regex, compiled by the tests")]
static LABEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:^|[^A-Za-z0-9_])(?:\*\*|__)?(?:检查命令|验证命令|判定命令|检查|check|cmd)(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?`")
        .expect("a valid regex")
});

/// An expected exit status.
#[allow(clippy::expect_used, reason = "a literal regex, compiled by the tests")]
static EXPECT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:exit(?:\s*(?:code|status))?|退出码|退出状态|expect(?:ed)?|期望)\s*[:：=]?\s*(\d{1,3})(?:[^0-9]|$)")
        .expect("a valid regex")
});

/// The inline check of an item: `检查: \`cmd\`` and an optional expected status after it.
pub fn inline_check(item: &str) -> Option<ItemCommand> {
    let m = LABEL.find(item)?;
    // The match ends with the first backtick of the opening run.
    let from = m.end() - 1;
    let run = item[from..].chars().take_while(|c| *c == '`').count();
    let body = &item[from + run..];
    let close = "`".repeat(run);
    let end = body.find(&close)?;
    let command = body[..end].trim().to_string();
    if command.is_empty() {
        return None;
    }
    let after = &body[end + run..];
    Some(ItemCommand {
        command,
        expect: expect_in(after).unwrap_or(0),
        fenced: false,
    })
}

/// An expected exit status written in `text` (`退出码 1`, `exit 1`, `exit=1`, `expect 1`).
pub fn expect_in(text: &str) -> Option<i64> {
    EXPECT
        .captures(text)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
        .filter(|n: &i64| *n <= 255)
}

/// The check of one checklist item: its inline label first, else the first fenced check block
/// under it. `text` is the item with the markers removed; `fences` are the fences under it.
pub(crate) fn item_command(text: &str, fences: &[&Fence]) -> Option<ItemCommand> {
    if let Some(c) = inline_check(text) {
        return Some(c);
    }
    let f = fences
        .iter()
        .find(|f| is_check_fence(&f.info) && !f.body.trim().is_empty())?;
    Some(ItemCommand {
        command: f.body.trim_end().to_string(),
        expect: expect_in(&f.info).or_else(|| expect_in(text)).unwrap_or(0),
        fenced: true,
    })
}

/// The fenced block [`super::goal::Goal::to_markdown`] writes under an item.
pub(crate) fn fence_markdown(c: &ItemCommand) -> String {
    let ticks = if c.command.contains("```") {
        "````"
    } else {
        "```"
    };
    let info = if c.expect == 0 {
        "sh".to_string()
    } else {
        format!("sh exit={}", c.expect)
    };
    let body: Vec<String> = c.command.lines().map(|l| format!("  {l}")).collect();
    format!("  {ticks}{info}\n{}\n  {ticks}", body.join("\n"))
}

/// The script a check's command runs as: a fenced block stops at its first failing line.
pub fn script_of(c: &ItemCommand) -> String {
    if c.fenced && c.command.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        format!("set -e\n{}", c.command)
    } else {
        c.command.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_labels_in_many_spellings() {
        for (item, cmd) in [
            ("构建成功,检查: `make`", "make"),
            ("测试全过 检查：`cargo test -q`", "cargo test -q"),
            (
                "服务在跑 (check: `curl -fsS localhost:8080/health`)",
                "curl -fsS localhost:8080/health",
            ),
            ("**检查**: `make test`", "make test"),
            ("CHECK:`true`", "true"),
            ("检查命令: `` echo `date` ``", "echo `date`"),
            ("cmd: `ls`", "ls"),
        ] {
            let c = inline_check(item).unwrap_or_else(|| panic!("{item}"));
            assert_eq!(c.command, cmd, "{item}");
            assert_eq!(c.expect, 0, "{item}");
            assert!(!c.fenced);
        }
    }

    #[test]
    fn no_label_or_no_command_is_no_check() {
        for item in [
            "跑 `./hello.sh` 看到 hello",
            "界面好看 [此环境无法验证:屏幕录制未授权]",
            "precheck: `x`",
            "检查: 手动看一眼",
            "检查: ``",
            "检查: `没有收尾",
        ] {
            assert_eq!(inline_check(item), None, "{item}");
        }
    }

    #[test]
    fn an_expected_status_after_the_command() {
        let c = inline_check("坏输入被拒 检查: `./conv bad.md` (退出码 2)").unwrap();
        assert_eq!((c.command.as_str(), c.expect), ("./conv bad.md", 2));
        assert_eq!(inline_check("check: `false` (exit 1)").unwrap().expect, 1);
        assert_eq!(inline_check("check: `false`, expect=1").unwrap().expect, 1);
        // A status before the command is not the command's.
        assert_eq!(inline_check("退出码 3 检查: `true`").unwrap().expect, 0);
        assert_eq!(expect_in("exit 300"), None);
        assert_eq!(expect_in("sh exit=1"), Some(1));
    }

    #[test]
    fn fences_are_lifted_as_indented_markers() {
        let text = "a\n- item\n  ```sh exit=1\n  make\n    ./x\n  ```\nb\n```\nunclosed\n";
        let (lifted, fences) = lift_fences(text);
        assert_eq!(lifted, format!("a\n- item\n  {MARK_OPEN}0{MARK_CLOSE}\nb"));
        assert_eq!(
            fences,
            vec![Fence {
                info: "sh exit=1".into(),
                body: "make\n  ./x".into()
            }]
        );
        let (t, idx) = take_markers(&format!("item {MARK_OPEN}0{MARK_CLOSE}"));
        assert_eq!((t.as_str(), idx), ("item", vec![0]));
        assert!(is_check_fence("") && is_check_fence("Bash") && is_check_fence("检查"));
        assert!(!is_check_fence("text") && !is_check_fence("json"));
    }

    #[test]
    fn a_fenced_script_stops_at_its_first_failure() {
        let one = ItemCommand {
            command: "make".into(),
            expect: 0,
            fenced: true,
        };
        assert_eq!(script_of(&one), "make");
        let two = ItemCommand {
            command: "make\n./httpd --selftest".into(),
            ..one
        };
        assert_eq!(script_of(&two), "set -e\nmake\n./httpd --selftest");
        let c = Check::new(CheckSource::User(1), "set -e\nmake\n\n./t");
        assert_eq!(c.one_line(), "make; ./t");
        assert_eq!(c.id(), "user-1");
        assert_eq!(Check::new(CheckSource::Goal(3), "x").id(), "item-3");
    }
}
