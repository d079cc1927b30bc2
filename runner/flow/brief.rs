//! [`Brief`]: the frozen four-section requirement document (seed 003, seed 001 "需求确认书"),
//! and the tolerant section splitter every flower document uses ([`split_sections`]).
//!
//! The clarifier's output is parsed into exactly four sections — 目标 / 验收标准 / 边界 /
//! 未知与假设 — and everything else is dropped: fenced code is removed first (and everything
//! after an unclosed fence, so a truncated output parses as incomplete), headings are
//! recognised in many spellings (`## 目标`, `**目标**`, `目标:`, `目标：`, `3. 边界`, text on
//! the heading line), aliases map to their section (验收条件→验收标准, 不做什么→边界,
//! 未知项与假设→未知与假设; longest first), and when a section appears twice the first
//! non-empty one wins. What the human says during the run is appended to the file under
//! `## 运行中补充` headings ([`Brief::append_amendment`]); those survive parsing as
//! [`Brief::amendments`] and flow downstream with [`Brief::prompt_block`].

use std::io;
use std::path::{Path, PathBuf};

use crate::fsroot::own;

/// The four section names in their fixed order (seed 003).
pub const SECTION_NAMES: [&str; 4] = ["目标", "验收标准", "边界", "未知与假设"];

/// Heading of a run-time amendment appended to the brief (seed 000 "你敲的东西去哪了").
pub const AMENDMENT_HEADING: &str = "运行中补充";

/// What [`Brief::to_markdown`] writes for an empty section; [`Brief::load`] reads it as empty.
pub const PLACEHOLDER: &str = "(未填)";

/// Section index of amendments in the alias table (after the four sections).
const AMEND: usize = 4;

/// Heading spellings of the brief, each with its section index.
const BRIEF_ALIASES: &[(&str, usize)] = &[
    ("目标", 0),
    ("验收标准", 1),
    ("验收条件", 1),
    ("边界", 2),
    ("不做什么", 2),
    ("未知与假设", 3),
    ("未知项与假设", 3),
    (AMENDMENT_HEADING, AMEND),
];

/// The requirement document: exactly four sections plus the amendments added during the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Brief {
    /// 目标: one sentence, what is built and for whom.
    pub goal: String,
    /// 验收标准: decidable conditions, one per line.
    pub accept: String,
    /// 边界: explicitly what is not done.
    pub bounds: String,
    /// 未知与假设: what was not asked, timed out or guessed.
    pub unknowns: String,
    /// 运行中补充: what the human said during the run, oldest first (not one of the four
    /// sections; never makes a brief complete or incomplete).
    pub amendments: Vec<String>,
}

impl Brief {
    /// Parses model output or a brief file. Never fails: what cannot be found stays empty.
    pub fn parse(text: &str) -> Brief {
        let found = split_sections(text, BRIEF_ALIASES);
        let first = |i: usize| first_non_empty(&found[i]);
        Brief {
            goal: first(0),
            accept: first(1),
            bounds: first(2),
            unknowns: first(3),
            amendments: found[AMEND]
                .iter()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect(),
        }
    }

    /// The four sections in order, as (name, body).
    pub fn sections(&self) -> [(&'static str, &str); 4] {
        [
            (SECTION_NAMES[0], self.goal.as_str()),
            (SECTION_NAMES[1], self.accept.as_str()),
            (SECTION_NAMES[2], self.bounds.as_str()),
            (SECTION_NAMES[3], self.unknowns.as_str()),
        ]
    }

    /// The Chinese names of the empty sections, in order (displayable as is).
    pub fn missing(&self) -> Vec<&'static str> {
        self.sections()
            .iter()
            .filter(|(_, body)| body.trim().is_empty())
            .map(|(name, _)| *name)
            .collect()
    }

    /// All four sections have content.
    pub fn is_complete(&self) -> bool {
        self.missing().is_empty()
    }

    /// What flows downstream (`ctx["确认需求"]`): the non-empty sections and every amendment as
    /// `## name` blocks, no title, no placeholders.
    pub fn prompt_block(&self) -> String {
        let mut blocks: Vec<String> = self
            .sections()
            .iter()
            .filter(|(_, body)| !body.trim().is_empty())
            .map(|(name, body)| format!("## {name}\n{body}"))
            .collect();
        blocks.extend(
            self.amendments
                .iter()
                .map(|a| format!("## {AMENDMENT_HEADING}\n{a}")),
        );
        blocks.join("\n\n")
    }

    /// The whole document as frozen on disk: a title, the four sections (empty ones written as
    /// [`PLACEHOLDER`]), then the amendments.
    pub fn to_markdown(&self) -> String {
        let mut out = String::from("# 需求确认书\n");
        for (name, body) in self.sections() {
            let body = if body.trim().is_empty() {
                PLACEHOLDER
            } else {
                body
            };
            out.push_str(&format!("\n## {name}\n{body}\n"));
        }
        for a in &self.amendments {
            out.push_str(&format!("\n## {AMENDMENT_HEADING}\n{a}\n"));
        }
        out
    }

    /// Reads a brief file. `Ok(None)` when it does not exist; a section that still holds the
    /// [`PLACEHOLDER`] counts as empty. Errors: any other I/O error.
    pub fn load(path: &Path) -> io::Result<Option<Brief>> {
        let Some(text) = read_optional(path)? else {
            return Ok(None);
        };
        let mut b = Brief::parse(&text);
        for s in [&mut b.goal, &mut b.accept, &mut b.bounds, &mut b.unknowns] {
            if is_placeholder(s) {
                s.clear();
            }
        }
        Ok(Some(b))
    }

    /// Writes [`Brief::to_markdown`] to `path` atomically (temporary file + rename), creating
    /// parent directories. Errors: I/O.
    pub fn write(&self, path: &Path) -> io::Result<()> {
        write_atomic(path, &self.to_markdown())
    }

    /// Appends what the human said during the run to the brief at `path` as a
    /// `## 运行中补充(<local time>)` section, creating the file and its directories when
    /// missing. Appends, never rewrites: the original requirement stays visible above it.
    /// Returns `Ok(false)` for blank text (nothing written). Errors: I/O.
    pub fn append_amendment(path: &Path, text: &str) -> io::Result<bool> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(false);
        }
        let stamp = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
        append_text(
            path,
            &format!("\n## {AMENDMENT_HEADING}({stamp})\n{text}\n"),
        )?;
        Ok(true)
    }
}

/// The question channel's [`Amend`](crate::channel::human::Amend) for a brief: what the human
/// says during a run becomes a [`Brief::append_amendment`] section of the brief at its path.
#[derive(Debug, Clone)]
pub struct BriefAmendments(PathBuf);

impl BriefAmendments {
    /// Amends the brief at `path` (`notes/需求.md`).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        BriefAmendments(path.into())
    }
}

impl crate::channel::human::Amend for BriefAmendments {
    fn amend(&self, text: &str) -> io::Result<bool> {
        Brief::append_amendment(&self.0, text)
    }
    fn target(&self) -> &Path {
        &self.0
    }
}

/// Whether a section body is only the placeholder (ASCII or fullwidth parentheses).
pub(crate) fn is_placeholder(s: &str) -> bool {
    matches!(s.trim(), "(未填)" | "（未填）" | "(空)" | "（空）")
}

/// The first non-empty body of a section, or empty.
pub(crate) fn first_non_empty(bodies: &[String]) -> String {
    bodies
        .iter()
        .find(|b| !b.is_empty())
        .cloned()
        .unwrap_or_default()
}

/// Largest note file read (brief, goal, Q&A log): what goes into a prompt stays sane.
const NOTE_CAP: u64 = 16 * 1024 * 1024;

/// Reads a note file; `Ok(None)` when it does not exist. The workbench is writable by workers,
/// so a symlink, FIFO or socket there is an error, never followed or waited on.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<String>> {
    own::read_string(path, NOTE_CAP)
}

/// Writes `text` to `path` through a new file renamed over it, creating directories (a symlink
/// at `path` is replaced, never written through). A note: cleaned ([`crate::shown::notes`]).
pub(crate) fn write_atomic(path: &Path, text: &str) -> io::Result<()> {
    crate::shown::notes::write(path, text).map(|_| ())
}

/// Appends `text` to `path`, creating the file and its directories (a regular file only).
/// A note: cleaned ([`crate::shown::notes`]).
pub(crate) fn append_text(path: &Path, text: &str) -> io::Result<()> {
    crate::shown::notes::append(path, "", text)
}

/// Items of a list body, one per line: markers (`-`, `*`, `+`, `•`, `·`, `1.`, `1)`, `- [ ]`)
/// stripped; an indented line without a marker continues the previous item; lines that only
/// say "none" (`无`, `(无)`, `没有`, `none`) are dropped.
pub fn list_items(body: &str) -> Vec<String> {
    let mut items: Vec<String> = Vec::new();
    for line in body.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let (marked, text) = strip_list_marker(t);
        let continuation = !marked && line.starts_with(char::is_whitespace);
        match items.last_mut() {
            Some(prev) if continuation => {
                prev.push(' ');
                prev.push_str(text);
            }
            _ => items.push(text.to_string()),
        }
    }
    items.retain(|i| !is_none_word(i));
    items
}

/// Strips one list marker; returns whether there was one.
fn strip_list_marker(t: &str) -> (bool, &str) {
    for m in ["- [ ]", "- [x]", "- [X]", "* [ ]", "* [x]"] {
        if let Some(r) = t.strip_prefix(m) {
            return (true, r.trim_start());
        }
    }
    for m in ['-', '*', '+', '•', '·'] {
        if let Some(r) = t.strip_prefix(m) {
            if r.is_empty() || r.starts_with(char::is_whitespace) {
                return (true, r.trim_start());
            }
        }
    }
    let n = strip_number(t);
    if n.len() != t.len() {
        return (true, n);
    }
    (false, t)
}

/// A list line that means "nothing".
fn is_none_word(s: &str) -> bool {
    let t = s.trim().trim_end_matches(['。', '.']);
    matches!(
        t.to_ascii_lowercase().as_str(),
        "无" | "(无)" | "（无）" | "没有" | "暂无" | "none" | "n/a" | "-"
    )
}

/// Splits a document into sections by heading. `aliases` maps heading names to section
/// indices (any order; matched longest first). Returns, per section index, the body of every
/// occurrence in document order (trimmed; possibly empty), so a caller can take the first
/// non-empty one or all of them.
///
/// Fenced code blocks (```` ``` ```` / `~~~`) are removed first and everything after an
/// unclosed fence is dropped. Text before the first heading is dropped; a markdown heading
/// (`#`) that names no section ends the current one (its content is dropped). A heading line
/// may carry its body (`目标: 做一个 X`, `**目标** 做一个 X`); a parenthetical right after the
/// name is an annotation and is dropped (`## 目标(一句话)`).
pub fn split_sections(text: &str, aliases: &[(&str, usize)]) -> Vec<Vec<String>> {
    let mut sorted: Vec<(&str, usize)> = aliases.to_vec();
    sorted.sort_by_key(|(name, _)| std::cmp::Reverse(name.chars().count()));
    let count = aliases.iter().map(|(_, i)| i + 1).max().unwrap_or(0);
    let mut found: Vec<Vec<String>> = vec![Vec::new(); count];

    let mut current: Option<(usize, Vec<String>)> = None;
    let close = |cur: Option<(usize, Vec<String>)>, found: &mut Vec<Vec<String>>| {
        if let Some((idx, lines)) = cur {
            found[idx].push(clean_body(&lines));
        }
    };
    for line in strip_fences(text).lines() {
        if let Some((idx, rest)) = match_heading(line, &sorted) {
            close(current.take(), &mut found);
            let mut lines = Vec::new();
            if !rest.is_empty() {
                lines.push(rest);
            }
            current = Some((idx, lines));
        } else if is_markdown_heading(line) {
            close(current.take(), &mut found);
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line.to_string());
        }
    }
    close(current, &mut found);
    found
}

/// Joins body lines, trimming blank lines and trailing horizontal rules.
fn clean_body(lines: &[String]) -> String {
    let mut end = lines.len();
    while end > 0 {
        let t = lines[end - 1].trim();
        let rule = t.len() >= 3 && t.chars().all(|c| matches!(c, '-' | '*' | '_'));
        if t.is_empty() || rule {
            end -= 1;
        } else {
            break;
        }
    }
    lines[..end].join("\n").trim().to_string()
}

/// Removes fenced code blocks; an unclosed fence drops everything after it.
pub fn strip_fences(text: &str) -> String {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match fence {
            None => match fence_marker(t) {
                Some(m) => fence = Some(m),
                None => out.push(line),
            },
            Some((c, n)) => {
                let tt = t.trim_end();
                if tt.len() >= n && tt.chars().all(|x| x == c) {
                    fence = None;
                }
            }
        }
    }
    out.join("\n")
}

/// A fence opening: three or more backticks or tildes.
fn fence_marker(t: &str) -> Option<(char, usize)> {
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// A markdown ATX heading (`#` … `######` followed by a space or the end).
fn is_markdown_heading(line: &str) -> bool {
    let t = line.trim_start();
    let n = t.chars().take_while(|c| *c == '#').count();
    (1..=6).contains(&n) && t[n..].chars().next().is_none_or(char::is_whitespace)
}

/// Strips a list number (`3.`, `3、`, `3)`, `一、`) at the start.
fn strip_number(s: &str) -> &str {
    let digits: usize = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || "一二三四五六七八九十".contains(*c))
        .map(char::len_utf8)
        .sum();
    if digits == 0 {
        return s;
    }
    let rest = &s[digits..];
    for sep in [".", "、", ")", "）", "．"] {
        if let Some(r) = rest.strip_prefix(sep) {
            // `1.5 秒` is a number, not a list marker.
            if r.starts_with(|c: char| c.is_ascii_digit()) {
                return s;
            }
            return r.trim_start();
        }
    }
    s
}

/// Strips an opening or closing bold marker.
fn strip_bold(s: &str) -> Option<&str> {
    s.strip_prefix("**").or_else(|| s.strip_prefix("__"))
}

/// Strips a parenthetical annotation `(…)` / `（…）` at the start.
fn strip_paren(s: &str) -> &str {
    for (open, close) in [('(', ')'), ('（', '）')] {
        if let Some(r) = s.strip_prefix(open) {
            if let Some(end) = r.find(close) {
                return &r[end + close.len_utf8()..];
            }
        }
    }
    s
}

/// Recognises a heading line naming one of `aliases` (sorted longest first). Returns the
/// section index and the body text on the same line.
fn match_heading(line: &str, aliases: &[(&str, usize)]) -> Option<(usize, String)> {
    let mut s = line.trim();
    let hashes = s.chars().take_while(|c| *c == '#').count();
    let atx = (1..=6).contains(&hashes);
    if atx {
        s = s[hashes..].trim_start();
    }
    s = strip_number(s);
    let bold = match strip_bold(s) {
        Some(r) => {
            s = strip_number(r.trim_start());
            true
        }
        None => false,
    };
    let (idx, after) = aliases
        .iter()
        .find_map(|(name, idx)| s.strip_prefix(name).map(|r| (*idx, r)))?;
    // What may follow the name directly decides whether this is a heading at all:
    // `目标是…` is a sentence, `目标:`/`目标 (…)`/`**目标**` are headings.
    let next = after.chars().next();
    let separated = next.is_none_or(|c| c.is_whitespace() || "(（*_:：".contains(c));
    if !separated {
        return None;
    }
    let mut r = after.trim_start();
    if bold {
        if let Some(x) = strip_bold(r) {
            r = x.trim_start();
        }
    }
    r = strip_paren(r).trim_start();
    let mut colon = false;
    for c in [':', '：'] {
        if let Some(x) = r.strip_prefix(c) {
            r = x.trim_start();
            colon = true;
            break;
        }
    }
    if bold {
        if let Some(x) = strip_bold(r) {
            r = x.trim_start();
        }
    }
    let r = r.trim();
    if r.is_empty() || colon || atx || bold {
        Some((idx, r.to_string()))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "## 目标\n做一个 md 转 html 的 CLI\n\n## 验收标准\n- 跑 `conv a.md` 产出 a.html\n\n## 边界\n不做 GUI\n\n## 未知与假设\n假设只处理 UTF-8\n";

    #[test]
    fn parses_markdown_headings() {
        let b = Brief::parse(FULL);
        assert_eq!(b.goal, "做一个 md 转 html 的 CLI");
        assert_eq!(b.accept, "- 跑 `conv a.md` 产出 a.html");
        assert_eq!(b.bounds, "不做 GUI");
        assert_eq!(b.unknowns, "假设只处理 UTF-8");
        assert!(b.is_complete());
        assert!(b.missing().is_empty());
    }

    #[test]
    fn parses_bold_colon_fullwidth_numbered_and_inline_forms() {
        let text = "好的,整理如下。\n**目标**\n做 X\n验收标准:跑 x 输出 y\n3. 边界：不碰数据库\n### 4. 未知与假设\n- 假设 A\n";
        let b = Brief::parse(text);
        assert_eq!(b.goal, "做 X");
        assert_eq!(b.accept, "跑 x 输出 y");
        assert_eq!(b.bounds, "不碰数据库");
        assert_eq!(b.unknowns, "- 假设 A");

        let b = Brief::parse(
            "目标: 做一个 X\n**验收标准:** 能跑\n**边界**:只读\n1) 未知与假设 (可以为空)\n无\n",
        );
        assert_eq!(b.goal, "做一个 X");
        assert_eq!(b.accept, "能跑");
        assert_eq!(b.bounds, "只读");
        assert_eq!(b.unknowns, "无");
    }

    #[test]
    fn aliases_map_to_their_sections_longest_first() {
        let b = Brief::parse("# 目标\nA\n# 验收条件\nB\n# 不做什么\nC\n# 未知项与假设\nD\n");
        assert_eq!(
            (
                b.goal.as_str(),
                b.accept.as_str(),
                b.bounds.as_str(),
                b.unknowns.as_str()
            ),
            ("A", "B", "C", "D")
        );
    }

    #[test]
    fn a_sentence_starting_with_a_section_name_is_not_a_heading() {
        let b =
            Brief::parse("## 验收标准\n目标是让它能跑\n边界情况要测\n## 目标与范围\n不该进来\n");
        assert_eq!(b.accept, "目标是让它能跑\n边界情况要测");
        assert_eq!(b.goal, "");
    }

    #[test]
    fn first_non_empty_duplicate_wins() {
        let b = Brief::parse("## 目标\n\n## 目标\n第一个有内容的\n## 目标\n第二个\n");
        assert_eq!(b.goal, "第一个有内容的");
    }

    #[test]
    fn unknown_markdown_heading_ends_a_section_and_preamble_is_dropped() {
        let b = Brief::parse("前言不要\n## 目标\nA\n## 备注\n不属于任何一段\n## 边界\nC\n");
        assert_eq!(b.goal, "A");
        assert_eq!(b.bounds, "C");
        assert!(!b.prompt_block().contains("前言") && !b.prompt_block().contains("备注"));
    }

    #[test]
    fn fenced_code_is_removed_before_parsing() {
        let text =
            "## 目标\n做 X\n```python\n## 边界\nprint('pasted code')\n```\n## 验收标准\n能跑\n";
        let b = Brief::parse(text);
        assert_eq!(b.goal, "做 X");
        assert_eq!(b.accept, "能跑");
        assert_eq!(b.bounds, "", "a heading inside a fence is not a heading");
        assert!(!b.prompt_block().contains("pasted"));
    }

    #[test]
    fn unclosed_fence_drops_everything_after_it() {
        let text = "## 目标\n做 X\n## 验收标准\n能跑\n~~~\n## 边界\n不做 Y\n## 未知与假设\n无\n";
        let b = Brief::parse(text);
        assert_eq!(b.goal, "做 X");
        assert_eq!(b.accept, "能跑");
        assert_eq!(b.missing(), vec!["边界", "未知与假设"]);
        assert!(!b.is_complete());
    }

    #[test]
    fn missing_names_sections_in_chinese() {
        let b = Brief::parse("## 目标\n做 X\n## 边界\n只读\n");
        assert_eq!(b.missing(), vec!["验收标准", "未知与假设"]);
        assert_eq!(Brief::default().missing(), SECTION_NAMES.to_vec());
    }

    #[test]
    fn prompt_block_has_only_non_empty_sections() {
        let b = Brief::parse("## 目标\n做 X\n## 边界\n只读\n");
        assert_eq!(b.prompt_block(), "## 目标\n做 X\n\n## 边界\n只读");
    }

    #[test]
    fn to_markdown_round_trips_and_uses_placeholder() {
        let b = Brief::parse(FULL);
        assert_eq!(Brief::parse(&b.to_markdown()), b);
        let partial = Brief {
            goal: "做 X".into(),
            ..Brief::default()
        };
        let md = partial.to_markdown();
        assert!(md.starts_with("# 需求确认书\n"));
        assert_eq!(md.matches(PLACEHOLDER).count(), 3);
    }

    #[test]
    fn load_treats_placeholder_as_empty_and_missing_file_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes/需求.md");
        assert_eq!(Brief::load(&path).unwrap(), None);
        let partial = Brief {
            goal: "做 X".into(),
            ..Brief::default()
        };
        partial.write(&path).unwrap();
        // parse() sees the placeholder text; load() does not.
        assert_eq!(
            Brief::parse(&std::fs::read_to_string(&path).unwrap()).accept,
            PLACEHOLDER
        );
        let loaded = Brief::load(&path).unwrap().unwrap();
        assert_eq!(loaded, partial);
        assert_eq!(loaded.missing(), vec!["验收标准", "边界", "未知与假设"]);
    }

    #[test]
    fn amendments_are_appended_and_flow_downstream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("需求.md");
        Brief::parse(FULL).write(&path).unwrap();
        assert!(Brief::append_amendment(&path, "顺便统计总字节数").unwrap());
        assert!(Brief::append_amendment(&path, "输出要带行号").unwrap());
        assert!(!Brief::append_amendment(&path, "   ").unwrap());
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(raw.starts_with("# 需求确认书\n"), "original kept above");
        assert!(raw.contains("## 运行中补充("));
        let b = Brief::load(&path).unwrap().unwrap();
        assert!(b.is_complete());
        assert_eq!(
            b.unknowns, "假设只处理 UTF-8",
            "amendment is not part of 未知与假设"
        );
        assert_eq!(b.amendments, vec!["顺便统计总字节数", "输出要带行号"]);
        let block = b.prompt_block();
        assert!(block.ends_with("## 运行中补充\n顺便统计总字节数\n\n## 运行中补充\n输出要带行号"));
    }

    #[test]
    fn amendment_creates_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/需求.md");
        assert!(Brief::append_amendment(&path, "加一条").unwrap());
        let b = Brief::load(&path).unwrap().unwrap();
        assert_eq!(b.amendments, vec!["加一条"]);
        assert!(!b.is_complete());
    }

    #[test]
    fn what_the_human_sends_lands_in_the_brief_as_amendments() {
        use crate::channel::{HumanChannel, HumanConfig};
        let dir = tempfile::tempdir().unwrap();
        let brief = dir.path().join("notes/需求.md");
        let ch = HumanChannel::new(HumanConfig {
            amend: Some(std::sync::Arc::new(BriefAmendments::at(&brief))),
            ..HumanConfig::default()
        });
        assert!(ch.send("顺便统计总字节数").unwrap().appended);
        assert!(ch.send("再加一条").unwrap().appended);
        let b = Brief::load(&brief).unwrap().unwrap();
        assert_eq!(b.amendments, vec!["顺便统计总字节数", "再加一条"]);
    }
}
