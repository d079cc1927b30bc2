//! The screen's geometry (seed 000 "屏幕上都是什么": "所有输出行先过一遍消毒,只放行 flower 自己的
//! SGR 颜色码 … 宽度取 max(40, min(终端列数, 110))") and the sanitiser as the renderer uses it.
//!
//! Model and tool text may carry any byte: `ESC[2J` (clear screen), cursor moves, OSC titles
//! and clipboard writes, bidi overrides, zero-width characters, a bare `\r`. [`sanitize`] is
//! [`crate::shown::clean`], the one sanitiser (its module doc has the rules): the renderer
//! cleans untrusted text before it measures and wraps it, and the terminal writer
//! ([`crate::shown::Terminal`]) cleans everything again on the way out, applying flowerbox's
//! own colours ([`Style`] on the pieces of a [`crate::shown::Line`]) only after that.
//!
//! Widths: [`display_width`] is what a terminal renders (East Asian ambiguous characters count
//! 1, as in xterm/tmux defaults; SGR counts 0) and is what cursor placement uses.
//! [`wrap`] and [`fit`] measure conservatively (ambiguous counts 2), so a wrapped line never
//! overflows even on a terminal that renders `—` or `·` double width.

use unicode_width::UnicodeWidthChar;

pub use crate::shown::Style;

/// Width of the screen flowerbox draws on, in columns: `max(40, min(columns, 110))`
/// (seed 000: wide terminals are deliberately not filled).
pub fn screen_width(columns: usize) -> usize {
    columns.clamp(40, 110)
}

/// Untrusted text made safe to show: [`crate::shown::clean`]. Keeps `\n` and `\t`; escape
/// sequences go whole (`␛` in their place, nothing for a colour), other controls and
/// invisible characters become visible marks.
pub fn sanitize(text: &str) -> String {
    crate::shown::clean(text).into_owned()
}

/// Removes SGR sequences (`ESC [ digits/; m`) and nothing else; for measuring styled lines.
pub fn strip_sgr(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('\u{1b}') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        match sgr_len(tail) {
            Some(n) => rest = &tail[n..],
            None => {
                out.push('\u{1b}');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Length in bytes of an SGR sequence at the start of `s`, if there is one.
fn sgr_len(s: &str) -> Option<usize> {
    let body = s.strip_prefix("\u{1b}[")?;
    let params = body
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b';')
        .count();
    (body.as_bytes().get(params) == Some(&b'm')).then_some(2 + params + 1)
}

/// Columns `text` occupies on a terminal: CJK wide characters 2, ambiguous 1, combining and
/// control 0, SGR 0. Used for placing the cursor after "prompt + buffer".
#[cfg(test)]
pub(crate) fn display_width(text: &str) -> usize {
    strip_sgr(text)
        .chars()
        .map(|c| UnicodeWidthChar::width(c).unwrap_or(0))
        .sum()
}

/// Conservative width of one character for layout: ambiguous characters count 2, tab 4.
fn layout_char_width(c: char) -> usize {
    if c == '\t' {
        return 4;
    }
    UnicodeWidthChar::width_cjk(c).unwrap_or(0)
}

/// Conservative layout width of a plain (unstyled) string; see the module doc.
pub fn layout_width(text: &str) -> usize {
    strip_sgr(text).chars().map(layout_char_width).sum()
}

/// Characters that must not start a line (Chinese typesetting, 避头尾): a full stop pushed
/// onto its own line reads like a broken paragraph.
const NO_LEAD: &str = "。，、；：！？」』）】》〉,.;:!?)]}%…";

/// Splits a paragraph into breakable tokens: each wide character alone, other runs up to and
/// including their trailing whitespace (so Latin words break only at spaces).
fn tokens(para: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for c in para.chars() {
        if UnicodeWidthChar::width(c) == Some(2) {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(c.to_string());
        } else if c.is_whitespace() {
            buf.push(c);
            out.push(std::mem::take(&mut buf));
        } else {
            buf.push(c);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

/// Wraps plain text to `width` columns. The first line starts with `first`, the following
/// ones with `rest` (a marker such as `~ ` belongs on the first line only). Each input line is
/// a paragraph; blank paragraphs are dropped. Wide characters break anywhere, Latin words at
/// spaces, a word longer than the line is cut, and closing punctuation never starts a line
/// (it may overhang by its own width instead). Tabs become four spaces. Returns at least one
/// line. Input must already be sanitised; output lines carry no SGR.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for para in text.split('\n') {
        let para = para.replace('\t', "    ");
        if para.trim().is_empty() {
            continue;
        }
        let prefix = if out.is_empty() { first } else { rest };
        let mut line = prefix.to_string();
        let mut cur = layout_width(prefix);
        let mut fresh = true; // nothing but the prefix on this line yet
        for tok in tokens(para.trim_end()) {
            let w = layout_width(&tok);
            let lead_punct = tok.chars().count() == 1 && NO_LEAD.contains(tok.as_str());
            if cur + w > width && !fresh && !lead_punct {
                out.push(line.trim_end().to_string());
                line = rest.to_string();
                cur = layout_width(rest);
                fresh = true;
                if tok.trim().is_empty() {
                    continue; // no dangling space at a break
                }
            }
            if fresh && cur + w > width {
                // A single token wider than the line: cut it by characters.
                for c in tok.chars() {
                    let cw = layout_char_width(c);
                    if cur + cw > width && !fresh {
                        out.push(line.trim_end().to_string());
                        line = rest.to_string();
                        cur = layout_width(rest);
                    }
                    line.push(c);
                    cur += cw;
                    fresh = false;
                }
                continue;
            }
            line.push_str(&tok);
            cur += w;
            fresh = false;
        }
        out.push(line.trim_end().to_string());
    }
    if out.is_empty() {
        out.push(first.trim_end().to_string());
    }
    out
}

/// Cuts one plain line to at most `width` columns (conservative measure), ending it with
/// `...` when something was cut. The last guard before the screen: every path wraps already.
pub fn fit(line: &str, width: usize) -> String {
    if layout_width(line) <= width {
        return line.to_string();
    }
    let mut out: String = within(line.chars(), width.saturating_sub(3))
        .into_iter()
        .collect();
    out.push_str("...");
    out
}

/// Keeps the end of one plain line within `width` columns (conservative measure), starting it
/// with `...` when something was cut: for a path whose last components say the most.
pub fn fit_tail(line: &str, width: usize) -> String {
    if layout_width(line) <= width {
        return line.to_string();
    }
    let kept = within(line.chars().rev(), width.saturating_sub(3));
    let mut out = String::from("...");
    out.extend(kept.into_iter().rev());
    out
}

/// The characters `chars` yields, in that order, while they fit in `budget` columns.
fn within(chars: impl Iterator<Item = char>, budget: usize) -> Vec<char> {
    let mut cur = 0;
    chars
        .take_while(|&c| {
            cur += layout_char_width(c);
            cur <= budget
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_tail_keeps_the_end() {
        assert_eq!(fit_tail("/srv/proj", 20), "/srv/proj");
        assert_eq!(fit_tail("/var/tmp/long/proj", 10), "...ng/proj");
        assert_eq!(fit_tail("/tmp/项目/目录", 9), ".../目录");
    }

    #[test]
    fn screen_width_clamps_between_40_and_110() {
        assert_eq!(screen_width(10), 40);
        assert_eq!(screen_width(80), 80);
        assert_eq!(screen_width(300), 110);
    }

    #[test]
    fn sanitize_is_the_one_sanitiser() {
        assert_eq!(sanitize("a\x1b[2Jb\x1b[31mc\x1b[0m\rd"), "a␛bc␍d");
        assert_eq!(sanitize("line1\n\tline2"), "line1\n\tline2");
    }

    #[test]
    fn strip_measures_styled_text() {
        let p = crate::shown::Line::styled(Style::Red, "失败").painted(true);
        assert_eq!(p, "\x1b[31m失败\x1b[0m");
        assert_eq!(strip_sgr(&p), "失败");
        assert_eq!(display_width(&p), 4);
    }

    #[test]
    fn display_width_counts_cjk_double() {
        assert_eq!(display_width("ab"), 2);
        assert_eq!(display_width("中文"), 4);
        assert_eq!(display_width("a中b"), 4);
        // Ambiguous: 1 on screen, 2 for layout.
        assert_eq!(display_width("—"), 1);
        assert_eq!(layout_width("—"), 2);
    }

    #[test]
    fn wrap_breaks_cjk_anywhere_and_latin_at_spaces() {
        let lines = wrap("一二三四五六七八九十", 10, "  ", "  ");
        assert_eq!(lines, vec!["  一二三四", "  五六七八", "  九十"]);
        let lines = wrap("alpha beta gamma delta", 12, "", "");
        assert_eq!(lines, vec!["alpha beta", "gamma delta"]);
        for l in wrap(
            "中文 mixed with English words 和更多中文字符在这里",
            16,
            "  ~ ",
            "    ",
        ) {
            assert!(layout_width(&l) <= 16, "{l:?}");
        }
    }

    #[test]
    fn wrap_uses_hang_prefix_and_keeps_punctuation_off_line_start() {
        let lines = wrap("一二三四。", 8, "~ ", "  ");
        assert_eq!(lines, vec!["~ 一二三", "  四。"]);
        // "~ 一二三" fills 8 columns; the full stop overhangs rather than start a line.
        let lines = wrap("一二三。", 8, "~ ", "  ");
        assert_eq!(lines, vec!["~ 一二三。"]);
    }

    #[test]
    fn wrap_cuts_overlong_words_and_drops_blank_paragraphs() {
        let lines = wrap("abcdefghij\n\n  \nk", 4, "", "");
        assert_eq!(lines, vec!["abcd", "efgh", "ij", "k"]);
        assert_eq!(wrap("", 10, "  + ", "    "), vec!["  +"]);
    }

    #[test]
    fn fit_truncates_by_columns() {
        assert_eq!(fit("short", 10), "short");
        assert_eq!(fit("abcdefghijkl", 8), "abcde...");
        assert_eq!(fit("中文中文中文", 8), "中文...");
    }
}
