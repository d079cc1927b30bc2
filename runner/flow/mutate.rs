//! Mutations for probing the checks (issue 27 §4): small, local defects planted in a copy of
//! the candidate to see whether any check turns red. Pure text work: [`sites`] lists where a
//! file can be mutated, [`choose`] picks one deterministically from a seed (the run id and the
//! round), [`Site::apply`] makes the mutated text. The original is never touched: callers
//! write the result into a copy only.
//!
//! Three kinds, all found line by line in the code of a line, never in a comment: a line
//! comment (`//`, `#`, `--`, `;` at the start of a line; `//` and ` #` after code), a block
//! comment (`/* … */`, over as many lines as it takes) and a docstring (`"""…"""`, `'''…'''`)
//! are left out, so a defect is always planted in something that runs:
//!
//! - flip a comparison written with spaces around it: `==`↔`!=`, `<`↔`>=`, `>`↔`<=` (and
//!   the shell's `-eq`↔`-ne`, `-lt`↔`-ge`, `-gt`↔`-le`);
//! - change an integer constant (`n` → `n + 1`);
//! - drop a statement line (not a block's opening or closing line, not a continuation).
//!
//! Which lines: [`super::probe`] keeps the sites on lines this run wrote (what the checks are
//! there to verify) and falls back to the rest of the files it changed only when those lines
//! have none.

use sha2::{Digest, Sha256};

/// What a mutation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A comparison operator replaced by its negation.
    Flip {
        /// The operator found.
        from: &'static str,
        /// Its replacement.
        to: &'static str,
    },
    /// An integer literal replaced by the next integer.
    Constant {
        /// The literal found.
        from: String,
        /// Its replacement.
        to: String,
    },
    /// The whole line left out.
    Drop,
}

/// One place a file can be mutated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The file, relative to the candidate's root (`/`-separated).
    pub path: String,
    /// Its line, 1-based.
    pub line: usize,
    /// Byte range in the line that changes (the whole line for [`Kind::Drop`]).
    pub start: usize,
    /// End of that range.
    pub end: usize,
    /// The line as it is (for descriptions).
    pub text: String,
    /// What changes.
    pub kind: Kind,
}

/// Comparison operators and their negations (each pair both ways).
const FLIPS: &[(&str, &str)] = &[
    ("==", "!="),
    ("!=", "=="),
    ("<", ">="),
    (">=", "<"),
    (">", "<="),
    ("<=", ">"),
    ("-eq", "-ne"),
    ("-ne", "-eq"),
    ("-lt", "-ge"),
    ("-ge", "-lt"),
    ("-gt", "-le"),
    ("-le", "-gt"),
];

/// Words that open or close a block on a line of their own (never dropped).
const BLOCK_WORDS: &[&str] = &[
    "else", "fi", "done", "then", "do", "esac", "end", "begin", "try", "finally", ";;",
];

/// A comment line (or a preprocessor / shebang line): never mutated. (A line inside a block
/// comment is found by [`Comments`], so a C statement starting with `*p` still counts.)
fn is_comment(t: &str) -> bool {
    ["//", "#", "--", "<!--", ";"]
        .iter()
        .any(|p| t.starts_with(p))
}

/// Where the comments of a file are, carried from line to line: inside a block comment, or
/// inside a docstring (its closing quotes).
#[derive(Default)]
struct Comments {
    block: bool,
    doc: Option<&'static str>,
}

impl Comments {
    /// The code of `line`: the line with every byte of a comment turned into a space (byte
    /// offsets kept, so a site found in it is a site of the line).
    fn code(&mut self, line: &str) -> String {
        let mut out = line.as_bytes().to_vec();
        let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
            out[from..to].iter_mut().for_each(|b| *b = b' ');
        };
        if let Some(delim) = self.doc {
            if line.contains(delim) {
                self.doc = None;
            }
            return " ".repeat(line.len());
        }
        let trimmed = line.trim_start();
        if let Some(delim) = ["\"\"\"", "'''"]
            .into_iter()
            .find(|d| trimmed.starts_with(d))
        {
            if !trimmed[3..].contains(delim) {
                self.doc = Some(delim);
            }
            return " ".repeat(line.len());
        }
        let bytes = line.as_bytes();
        let mut quote: Option<u8> = None;
        let mut i = 0;
        while i < bytes.len() {
            if self.block {
                if let Some(k) = line[i..].find("*/") {
                    blank(&mut out, i, i + k + 2);
                    self.block = false;
                    i += k + 2;
                    continue;
                }
                blank(&mut out, i, bytes.len());
                break;
            }
            let b = bytes[i];
            match quote {
                Some(_) if b == b'\\' => i += 1,
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None if b == b'"' || b == b'\'' => quote = Some(b),
                None if line[i..].starts_with("/*") => {
                    self.block = true;
                    blank(&mut out, i, i + 2);
                    i += 2;
                    continue;
                }
                None if line[i..].starts_with("//")
                    || (b == b'#' && i > 0 && bytes[i - 1].is_ascii_whitespace()) =>
                {
                    blank(&mut out, i, bytes.len());
                    break;
                }
                None => {}
            }
            i += 1;
        }
        // Only ASCII delimiters start or end a blanked range: the rest is still UTF-8.
        String::from_utf8(out).unwrap_or_else(|_| " ".repeat(line.len()))
    }
}

/// A line that can be left out without touching the block structure around it.
fn droppable(t: &str) -> bool {
    if t.is_empty() || BLOCK_WORDS.contains(&t) {
        return false;
    }
    let opens_or_continues = ['{', '}', '(', '[', ',', ':', '\\', '=', '|', '&'];
    let closes = ['}', ')', ']'];
    !t.ends_with(opens_or_continues) && !t.starts_with(closes)
}

/// Every mutation site of the file `path` with content `text`, in order of appearance.
pub fn sites(path: &str, text: &str) -> Vec<Site> {
    let mut out = Vec::new();
    let mut comments = Comments::default();
    for (i, line) in text.split('\n').enumerate() {
        let code = comments.code(line);
        let trimmed = line.trim();
        if code.trim().is_empty() || is_comment(trimmed) {
            continue;
        }
        let site = |start, end, kind| Site {
            path: path.to_string(),
            line: i + 1,
            start,
            end,
            text: trimmed.to_string(),
            kind,
        };
        // Comparisons: a token with whitespace on both sides.
        let mut at = 0;
        for tok in code.split(' ') {
            let start = at;
            at += tok.len() + 1;
            if start == 0 || at > code.len() || tok.is_empty() {
                continue;
            }
            if let Some((from, to)) = FLIPS.iter().find(|(f, _)| *f == tok) {
                out.push(site(start, start + tok.len(), Kind::Flip { from, to }));
            }
        }
        // Integer constants: digits not part of a word, a float or a version.
        let bytes = code.as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            if !bytes[j].is_ascii_digit() {
                j += 1;
                continue;
            }
            let s = j;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.';
            let alone = (s == 0 || !word(bytes[s - 1])) && (j == bytes.len() || !word(bytes[j]));
            if alone && j - s <= 9 {
                let from = &code[s..j];
                if let Ok(n) = from.parse::<u64>() {
                    let kind = Kind::Constant {
                        from: from.to_string(),
                        to: (n + 1).to_string(),
                    };
                    out.push(site(s, j, kind));
                }
            }
        }
        if droppable(code.trim()) {
            out.push(site(0, line.len(), Kind::Drop));
        }
    }
    out
}

impl Site {
    /// `text` (the file this site was found in) with the mutation made; `None` when the file
    /// no longer has the line as it was.
    pub fn apply(&self, text: &str) -> Option<String> {
        let mut lines: Vec<&str> = text.split('\n').collect();
        let line = *lines.get(self.line - 1)?;
        if line.trim() != self.text {
            return None;
        }
        let changed;
        match &self.kind {
            Kind::Drop => {
                lines.remove(self.line - 1);
            }
            Kind::Flip { to, .. } => {
                changed = format!("{}{to}{}", &line[..self.start], &line[self.end..]);
                lines[self.line - 1] = &changed;
                return Some(lines.join("\n"));
            }
            Kind::Constant { to, .. } => {
                changed = format!("{}{to}{}", &line[..self.start], &line[self.end..]);
                lines[self.line - 1] = &changed;
                return Some(lines.join("\n"));
            }
        }
        Some(lines.join("\n"))
    }

    /// `src/http.c:42`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.path, self.line)
    }

    /// What was done, in the words of the screen: `` `src/http.c:42` 的 `==` 换成 `!=` ``.
    pub fn describe(&self) -> String {
        let place = self.place();
        match &self.kind {
            Kind::Flip { from, to } => format!("`{place}` 的 `{from}` 换成 `{to}`"),
            Kind::Constant { from, to } => format!("`{place}` 的常数 `{from}` 改成 `{to}`"),
            Kind::Drop => {
                let shown: String = self.text.chars().take(80).collect();
                format!("删掉 `{place}` 这一行 `{shown}`")
            }
        }
    }
}

/// A seed from the run id and the round: the same run's round always probes the same site.
pub fn seed(run_id: &str, round: u32) -> u64 {
    let mut h = Sha256::new();
    h.update(b"flowerbox-probe\0");
    h.update(run_id.as_bytes());
    h.update(round.to_le_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

/// The site `seed` picks among `all` (sorted by file, line and place first, so the pick does
/// not depend on the order files were found in); `None` when there is none.
pub fn choose(mut all: Vec<Site>, seed: u64) -> Option<Site> {
    if all.is_empty() {
        return None;
    }
    all.sort_by(|a, b| (&a.path, a.line, a.start).cmp(&(&b.path, b.line, b.start)));
    let i = (seed % all.len() as u64) as usize; // below all.len(), so it fits
    Some(all.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(usize, Kind)> {
        sites("a.c", text)
            .into_iter()
            .map(|s| (s.line, s.kind))
            .collect()
    }

    #[test]
    fn finds_comparisons_constants_and_statements() {
        let text = "int f(int n) {\n  if (n == 42) {\n    return n < 3;\n  }\n  // x == 1\n  n = n + 1;\n}\n";
        let k = kinds(text);
        assert!(k.contains(&(
            2,
            Kind::Flip {
                from: "==",
                to: "!="
            }
        )));
        assert!(k.contains(&(
            2,
            Kind::Constant {
                from: "42".into(),
                to: "43".into()
            }
        )));
        assert!(k.contains(&(
            3,
            Kind::Flip {
                from: "<",
                to: ">="
            }
        )));
        assert!(k.contains(&(3, Kind::Drop)));
        assert!(k.contains(&(6, Kind::Drop)));
        // Block lines, comments and closing braces are never sites.
        assert!(!k.iter().any(|(l, _)| [1, 4, 5, 7].contains(l)), "{k:?}");
        assert!(!k.contains(&(2, Kind::Drop)));
    }

    #[test]
    fn leaves_words_floats_arrows_and_includes_alone() {
        let text = "#include <stdio.h>\nx2 = 1.5 -> y<T>;\nv = \"3.1.4\";\nfor i in a b; do\n";
        assert!(sites("a", text)
            .iter()
            .all(|s| matches!(s.kind, Kind::Drop)));
        let sh = "[ \"$n\" -lt 10 ] && echo hello\n";
        let k = kinds(sh);
        assert!(k.contains(&(
            1,
            Kind::Flip {
                from: "-lt",
                to: "-ge"
            }
        )));
    }

    #[test]
    fn comments_and_docstrings_are_never_sites() {
        let text = "/* a block comment\n   x == 1; y = 2;\n   return early;\n*/\nint a = 3; /* 4 */ // 5\n\
                    *p = 6;\n\"\"\"doc\nsay(7)\n\"\"\"\nz = 8  # 9\nw = \"// 10\";\n/* one */ q();\n";
        let k = kinds(text);
        let consts: Vec<(usize, String)> = k
            .iter()
            .filter_map(|(l, k)| match k {
                Kind::Constant { from, .. } => Some((*l, from.clone())),
                _ => None,
            })
            .collect();
        // The code's constants, never the comment's or the docstring's (a string is code).
        assert_eq!(
            consts,
            [
                (5, "3".to_string()),
                (6, "6".into()),
                (10, "8".into()),
                (11, "10".into())
            ]
        );
        assert!(
            !k.iter().any(|(l, _)| [1, 2, 3, 4, 7, 8, 9].contains(l)),
            "{k:?}"
        );
        // A C statement that starts with `*`, and code after a closed block comment, are code.
        assert!(
            k.contains(&(6, Kind::Drop)) && k.contains(&(12, Kind::Drop)),
            "{k:?}"
        );
    }

    #[test]
    fn applying_changes_only_the_site() {
        let text = "a\nif (x == 1) {\nb;\n}\n";
        let all = sites("f", text);
        let flip = all
            .iter()
            .find(|s| matches!(s.kind, Kind::Flip { .. }))
            .unwrap();
        assert_eq!(flip.apply(text).unwrap(), "a\nif (x != 1) {\nb;\n}\n");
        let c = all
            .iter()
            .find(|s| matches!(s.kind, Kind::Constant { .. }))
            .unwrap();
        assert_eq!(c.apply(text).unwrap(), "a\nif (x == 2) {\nb;\n}\n");
        let drop = all.iter().find(|s| s.line == 3).unwrap();
        assert_eq!(drop.apply(text).unwrap(), "a\nif (x == 1) {\n}\n");
        assert_eq!(drop.describe(), "删掉 `f:3` 这一行 `b;`");
        assert_eq!(flip.describe(), "`f:2` 的 `==` 换成 `!=`");
        // The file moved on: nothing is applied blindly.
        assert_eq!(drop.apply("a\nb\nc;\n"), None);
        assert_eq!(drop.apply("a\n"), None);
    }

    #[test]
    fn the_choice_is_deterministic_from_the_run_id() {
        let mut all = sites("b.c", "x = 1;\ny = 2;\nif (a == b) z();\n");
        all.extend(sites("a.c", "q = 7;\n"));
        let s1 = seed("run-1", 1);
        assert_eq!(s1, seed("run-1", 1));
        assert_ne!(s1, seed("run-2", 1));
        let one = choose(all.clone(), s1);
        let mut reversed = all.clone();
        reversed.reverse();
        assert_eq!(one, choose(reversed, s1), "order found does not matter");
        // Different seeds reach different sites.
        let picked: std::collections::BTreeSet<_> = (0..50)
            .filter_map(|i| choose(all.clone(), seed(&format!("r{i}"), 1)))
            .map(|s| (s.path, s.line, s.start))
            .collect();
        assert!(picked.len() > 3, "{picked:?}");
        assert_eq!(choose(Vec::new(), s1), None);
    }
}
