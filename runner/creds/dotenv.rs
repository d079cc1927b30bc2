//! `.env` files: a tolerant `KEY=VALUE` parser and the writer `setup` uses.
//!
//! Parsing follows flower's rules (config reference, ".env 解析") and tolerates more: lines are
//! trimmed (CRLF endings and a leading BOM included), blank lines and `#` comments are skipped,
//! lines without `=` are skipped, the split is at the first `=`, both sides are trimmed. On top
//! of flower: a leading `export ` is dropped (flower would make the key `export KEY`), a value in
//! matching quotes is taken verbatim between them, and an unquoted value loses a trailing
//! ` # comment`. Unpaired leading/trailing quotes are stripped as flower does. No interpolation.
//! A line that is neither blank, a comment nor a pair (no `=`, or a key that is not a shell
//! variable name) is skipped as flower does, but reported ([`report`]), so the user learns
//! which line of which file was ignored. So is a value whose quotes do not pair up (kept as
//! flower keeps it, the stray quote stripped; values never span lines) or that has text after
//! its closing quote, and a file with NUL bytes, which is not text at all (nothing of it used).

use std::fmt::{self, Write as _};

/// One `KEY=VALUE` pair in file order. An empty value is kept: it still claims its key.
pub type Pair = (String, String);

/// Why a line was skipped. The line's text is never kept: a malformed line may be a bare token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// The line has no `=`.
    NoEquals,
    /// The part before `=` is empty or not a variable name (`[A-Za-z0-9_]+`).
    BadKey,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::NoEquals => "没有 `=`",
            Malformed::BadKey => "`=` 前面不是变量名",
        })
    }
}

/// A skipped line: its 1-based number and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Line number, counting from 1.
    pub line: usize,
    /// Why it was skipped.
    pub why: Malformed,
}

/// What is odd about a value's quotes (the pair is used as parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quote {
    /// A quote with no partner (`KEY="abc`, `KEY=abc'`): stripped, the rest kept.
    Unpaired,
    /// Text after the closing quote that is not a comment (`KEY="abc"def`): dropped.
    AfterClosing,
}

impl fmt::Display for Quote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quote::Unpaired => "引号没配对:落单的引号去掉了,其余照用(值不能跨行)",
            Quote::AfterClosing => "收尾引号后面还有字:只用了引号里面的",
        })
    }
}

/// A pair whose value's quotes were odd: its line, its key (never the value) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteNote {
    /// Line number, counting from 1.
    pub line: usize,
    /// The key on that line.
    pub key: String,
    /// What was odd.
    pub why: Quote,
}

/// Everything parsing one file found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The pairs in file order (none when the file is [`Report::binary`]).
    pub pairs: Vec<Pair>,
    /// Lines skipped because they are malformed (blank lines and comments are not).
    pub skipped: Vec<Skipped>,
    /// Pairs used whose quotes were odd.
    pub quotes: Vec<QuoteNote>,
    /// The file holds NUL bytes: it is not text, and nothing of it is used.
    pub binary: bool,
}

/// Parses `.env` text into pairs in file order (later duplicates are kept; the first one seen
/// wins in [`crate::creds::Credentials`] lookups).
pub fn parse(text: &str) -> Vec<Pair> {
    report(text).pairs
}

/// A file's bytes: [`report`] of its text, or only [`Report::binary`] when it holds a NUL
/// byte (a binary file would otherwise be one malformed line after another).
pub fn report_bytes(bytes: &[u8]) -> Report {
    if bytes.contains(&0) {
        return Report {
            binary: true,
            ..Report::default()
        };
    }
    report(&String::from_utf8_lossy(bytes))
}

/// [`parse`], plus every line that was skipped because it is malformed and every pair whose
/// quotes were odd.
pub fn report(text: &str) -> Report {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Report::default();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line) {
            Ok(Some((pair, quote))) => {
                if let Some(why) = quote {
                    out.quotes.push(QuoteNote {
                        line: i + 1,
                        key: pair.0.clone(),
                        why,
                    });
                }
                out.pairs.push(pair);
            }
            Ok(None) => {}
            Err(why) => out.skipped.push(Skipped { line: i + 1, why }),
        }
    }
    out
}

/// Parses one line; `Ok(None)` for blanks and comments.
fn parse_line(line: &str) -> Result<Option<(Pair, Option<Quote>)>, Malformed> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = match line.strip_prefix("export") {
        Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
        _ => line,
    };
    let (key, value) = line.split_once('=').ok_or(Malformed::NoEquals)?;
    let key = key.trim();
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Malformed::BadKey);
    }
    let (value, quote) = parse_value(value.trim());
    Ok(Some(((key.to_string(), value), quote)))
}

/// A value: verbatim inside matching quotes; otherwise without a ` #` comment and with stray
/// quotes stripped from both ends. Says what was odd about its quotes.
fn parse_value(value: &str) -> (String, Option<Quote>) {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote) {
            if let Some(end) = inner.find(quote) {
                let rest = inner[end + 1..].trim_start();
                let odd =
                    (!rest.is_empty() && !rest.starts_with('#')).then_some(Quote::AfterClosing);
                return (inner[..end].to_string(), odd);
            }
        }
    }
    let value = match value.find(" #").or_else(|| value.find("\t#")) {
        Some(at) => value[..at].trim_end(),
        None => value,
    };
    let odd = value.contains(['"', '\'']).then_some(Quote::Unpaired);
    (value.trim_matches(['"', '\'']).to_string(), odd)
}

/// Renders a `.env` file: `header` comment line first, then one `KEY=VALUE` per pair, values
/// quoted only when they would not survive [`parse`] bare.
pub fn render(header: &str, pairs: &[(&str, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {header}");
    for (key, value) in pairs {
        let _ = writeln!(out, "{key}={}", quote_if_needed(value));
    }
    out
}

fn quote_if_needed(value: &str) -> String {
    let bare_ok = !value.is_empty()
        && !value.contains(char::is_whitespace)
        && !value.contains('#')
        && !value.starts_with(['"', '\''])
        && !value.ends_with(['"', '\'']);
    if bare_ok || value.is_empty() {
        value.to_string()
    } else if !value.contains('"') {
        format!("\"{value}\"")
    } else {
        format!("'{value}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text)
    }

    fn p(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn flower_forms() {
        let text = "KEY=VALUE\nSPACED = v2 \nDQ=\"quoted\"\nSQ='single'\nEQ=a=b\n# c\n\n";
        assert_eq!(
            pairs(text),
            vec![
                p("KEY", "VALUE"),
                p("SPACED", "v2"),
                p("DQ", "quoted"),
                p("SQ", "single"),
                p("EQ", "a=b"),
            ]
        );
    }

    #[test]
    fn export_prefix_is_dropped() {
        assert_eq!(
            pairs("export A=1\nexport\tB=2\n"),
            vec![p("A", "1"), p("B", "2")]
        );
        // A key that merely starts with "export" stays.
        assert_eq!(pairs("exporter=3"), vec![p("exporter", "3")]);
    }

    #[test]
    fn crlf_and_bom() {
        assert_eq!(
            pairs("\u{feff}A=1\r\nB=\"two\"\r\n# x\r\n"),
            vec![p("A", "1"), p("B", "two")]
        );
    }

    #[test]
    fn comments_and_quotes() {
        assert_eq!(pairs("A=value # note"), vec![p("A", "value")]);
        assert_eq!(pairs("A=\"has # hash\" # note"), vec![p("A", "has # hash")]);
        assert_eq!(pairs("A=\"unpaired"), vec![p("A", "unpaired")]);
        assert_eq!(pairs("A=tok#en"), vec![p("A", "tok#en")]);
        assert_eq!(pairs("A=$OTHER"), vec![p("A", "$OTHER")]);
    }

    #[test]
    fn skipped_lines_and_empty_values() {
        assert_eq!(
            pairs("no equals here\n=novalue\nbad key=1\nEMPTY=\n"),
            vec![p("EMPTY", "")]
        );
    }

    #[test]
    fn odd_quotes_are_reported_with_their_line_and_key() {
        let r = report("A=\"unpaired\nB='ok' # fine\nC=\"a\"b\nD=ab'c\nE=plain\nF=tail\"\n");
        assert_eq!(
            r.pairs,
            vec![
                p("A", "unpaired"),
                p("B", "ok"),
                p("C", "a"),
                p("D", "ab'c"),
                p("E", "plain"),
                p("F", "tail"),
            ]
        );
        let notes: Vec<(usize, &str, Quote)> = r
            .quotes
            .iter()
            .map(|q| (q.line, q.key.as_str(), q.why))
            .collect();
        assert_eq!(
            notes,
            vec![
                (1, "A", Quote::Unpaired),
                (3, "C", Quote::AfterClosing),
                (4, "D", Quote::Unpaired),
                (6, "F", Quote::Unpaired),
            ]
        );
        assert!(r.skipped.is_empty());
    }

    #[test]
    fn a_binary_file_is_one_finding_not_one_per_line() {
        let mut bytes = b"A=1\n".to_vec();
        bytes.extend((0..4096u32).map(|i| (i % 251) as u8));
        let r = report_bytes(&bytes);
        assert!(r.binary);
        assert!(r.pairs.is_empty() && r.skipped.is_empty() && r.quotes.is_empty());
        // Invalid UTF-8 without NUL is text with a replaced character.
        let r = report_bytes(b"A=caf\xe9\n");
        assert!(!r.binary);
        assert_eq!(r.pairs, vec![p("A", "caf\u{fffd}")]);
    }

    #[test]
    fn malformed_lines_are_reported_by_number_without_their_text() {
        let text = "# c\n\nA=1\nsk-ant-bare-token\nbad key=2\n=3\r\nexport B=4\n";
        let Report { pairs, skipped, .. } = report(text);
        assert_eq!(pairs, vec![p("A", "1"), p("B", "4")]);
        assert_eq!(
            skipped,
            vec![
                Skipped {
                    line: 4,
                    why: Malformed::NoEquals
                },
                Skipped {
                    line: 5,
                    why: Malformed::BadKey
                },
                Skipped {
                    line: 6,
                    why: Malformed::BadKey
                },
            ]
        );
        assert!(!format!("{skipped:?}").contains("sk-ant"));
    }

    #[test]
    fn render_round_trips() {
        let values = [
            ("A", "sk-ant-xyz".to_string()),
            ("B", "has space".to_string()),
            ("C", "claude-opus-5[1m]".to_string()),
            ("D", "we\"ird #".to_string()),
        ];
        let text = render("header line", &values);
        assert!(text.starts_with("# header line\n"));
        let back: Vec<_> = values.iter().map(|(k, v)| p(k, v)).collect();
        assert_eq!(parse(&text), back);
    }
}
