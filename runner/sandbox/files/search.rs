//! `Glob` and `Grep` with ripgrep semantics on the local disk: a walk of the agent's race-free
//! view ([`crate::fsroot::walk`]: directory handles, `.gitignore`/`.ignore`/`info/exclude` as
//! `rg` reads them, symlinks never followed), `globset` patterns, and `grep-searcher` matching
//! on files opened from their directory's handle. The queries are plain data, so a backend can
//! run the same search inside the sandbox.

use globset::{GlobBuilder, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::local::with;
use super::FilesError;
use crate::fsroot::walk::{walk, Rules};
use crate::fsroot::View;

/// What a grep prints per matching file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GrepMode {
    /// The matching lines (with context).
    Content,
    /// The file's path.
    Files,
    /// `path:count`.
    Count,
}

/// One grep, as the `Grep` tool takes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GrepQuery {
    /// The regular expression (ripgrep syntax).
    pub pattern: String,
    /// Only files matching this glob (rooted at the base).
    pub glob: Option<String>,
    /// Only files of this `rg` type (`rust`, `py`).
    pub file_type: Option<String>,
    /// What to print.
    pub mode: GrepMode,
    /// `-i`.
    pub case_insensitive: bool,
    /// `-n`: line numbers in content lines.
    pub numbers: bool,
    /// `-A` (content mode).
    pub after: usize,
    /// `-B` (content mode).
    pub before: usize,
    /// At most this many lines.
    pub head_limit: Option<usize>,
    /// `.` matches newlines, a match may span lines.
    pub multiline: bool,
}

impl GrepQuery {
    /// `pattern` printed as `mode` says, with nothing else set (no filter, no context, no
    /// limit, case-sensitive, one line at a time).
    pub fn new(pattern: impl Into<String>, mode: GrepMode) -> GrepQuery {
        GrepQuery {
            pattern: pattern.into(),
            glob: None,
            file_type: None,
            mode,
            case_insensitive: false,
            numbers: false,
            after: 0,
            before: 0,
            head_limit: None,
            multiline: false,
        }
    }
}

/// A glob as an override set rooted at `base`.
pub(crate) fn overrides(
    base: &Path,
    glob: &str,
) -> Result<ignore::overrides::Override, FilesError> {
    let mut ob = ignore::overrides::OverrideBuilder::new(base);
    ob.add(glob)
        .map_err(|e| FilesError::Query(format!("glob: {e}")))?;
    ob.build().map_err(|e| FilesError::Query(e.to_string()))
}

/// See [`super::SandboxFiles::glob`].
pub(super) async fn glob(
    view: &View,
    base: &Path,
    pattern: &str,
) -> Result<(PathBuf, Vec<(PathBuf, SystemTime)>), FilesError> {
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| FilesError::Query(format!("pattern: {e}")))?;
    let set = GlobSetBuilder::new()
        .add(glob)
        .build()
        .map_err(|e| FilesError::Query(e.to_string()))?;
    let walked = view.clone();
    with(view, base, false, false, move |r| {
        let mut v: Vec<(PathBuf, SystemTime)> = Vec::new();
        walk(&walked, r, &Rules::default(), &mut |f| {
            let rel = f.path.strip_prefix(r.path()).unwrap_or(&f.path);
            if set.is_match(rel) {
                let m = f.modified();
                v.push((f.path, m));
            }
            true
        })?;
        Ok(v)
    })
    .await
}

/// Bytes of result lines (paths included) one grep returns at most: the matches an agent can
/// make its own files produce are unbounded (a file of millions of one-letter lines), and each
/// was kept as a line of its own. What is left out is said in the first line.
const GREP_OUTPUT_LIMIT: usize = 4 << 20;
/// Bytes of one matching or context line a grep shows; the rest is cut, `…` marking it.
const GREP_LINE_BYTES: usize = 2000;
/// The searcher's buffer: a file with a longer line (or, searched `multiline`, a longer file)
/// is not searched, and the result names it (a line is held whole to be matched).
const GREP_HEAP_LIMIT: usize = 16 << 20;
/// Files a grep result names as not searched, at most (the rest are counted).
const SKIPPED_NAMED: usize = 5;

/// The lines of a grep, bounded by [`GREP_OUTPUT_LIMIT`] and the query's `head_limit`.
struct Lines {
    lines: Vec<String>,
    bytes: usize,
    head_limit: Option<usize>,
    /// A line was left out: a bound was reached.
    cut: bool,
}

impl Lines {
    /// Adds `line` unless a bound is reached; false once one is.
    fn push(&mut self, line: String) -> bool {
        if self.head_limit.is_some_and(|h| self.lines.len() >= h) {
            return false;
        }
        if self.bytes + line.len() + 1 > GREP_OUTPUT_LIMIT {
            self.cut = true;
            return false;
        }
        self.bytes += line.len() + 1;
        self.lines.push(line);
        true
    }

    fn full(&self) -> bool {
        self.cut || self.head_limit.is_some_and(|h| self.lines.len() >= h)
    }
}

/// `line` (without its newline) as text, at most [`GREP_LINE_BYTES`] of it, cut on a character
/// boundary.
fn shown_line(line: &[u8]) -> String {
    if line.len() <= GREP_LINE_BYTES {
        return String::from_utf8_lossy(line).into_owned();
    }
    let mut end = GREP_LINE_BYTES;
    while end > 0 && line[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    String::from_utf8_lossy(&line[..end]).into_owned() + "…"
}

struct Collect<'a> {
    path: &'a str,
    numbers: bool,
    /// Content mode: matching and context lines go to `out`; otherwise only counted.
    content: bool,
    /// Files mode: the first match is enough.
    first_only: bool,
    out: &'a mut Lines,
    count: u64,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;
    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        if !self.content {
            return Ok(!self.first_only);
        }
        let bytes = m.bytes().strip_suffix(b"\n").unwrap_or(m.bytes());
        for (i, l) in bytes.split(|b| *b == b'\n').enumerate() {
            let l = shown_line(l);
            let line = match (self.numbers, m.line_number()) {
                (true, Some(n)) => format!("{}:{}:{}", self.path, n + i as u64, l),
                _ => format!("{}:{}", self.path, l),
            };
            if !self.out.push(line) {
                return Ok(false);
            }
        }
        Ok(true)
    }
    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        let l = shown_line(c.bytes().strip_suffix(b"\n").unwrap_or(c.bytes()));
        let line = match (self.numbers, c.line_number()) {
            (true, Some(n)) => format!("{}-{}-{}", self.path, n, l),
            _ => format!("{}-{}", self.path, l),
        };
        Ok(self.out.push(line))
    }
}

/// See [`super::SandboxFiles::grep`].
pub(super) async fn grep(
    view: &View,
    base: &Path,
    q: &GrepQuery,
) -> Result<Vec<String>, FilesError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(q.case_insensitive)
        .multi_line(true)
        .dot_matches_new_line(q.multiline)
        .build(&q.pattern)
        .map_err(|e| FilesError::Query(format!("pattern: {e}")))?;
    let types = match &q.file_type {
        Some(t) => {
            let mut types = ignore::types::TypesBuilder::new();
            types.add_defaults();
            types.select(t);
            Some(
                types
                    .build()
                    .map_err(|e| FilesError::Query(format!("type: {e}")))?,
            )
        }
        None => None,
    };
    if let Some(g) = &q.glob {
        overrides(base, g)?;
    }
    let q = q.clone();
    let walked = view.clone();
    let (_, lines) = with(view, base, false, false, move |r| {
        let rules = Rules {
            overrides: match &q.glob {
                Some(g) => overrides(r.path(), g).ok(),
                None => None,
            },
            types: types.clone(),
            ..Rules::default()
        };
        let content = q.mode == GrepMode::Content;
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .multi_line(q.multiline)
            .heap_limit(Some(GREP_HEAP_LIMIT))
            .binary_detection(BinaryDetection::quit(0))
            .after_context(if content { q.after } else { 0 })
            .before_context(if content { q.before } else { 0 })
            .build();
        let mut out = Lines {
            lines: Vec::new(),
            bytes: 0,
            head_limit: q.head_limit,
            cut: false,
        };
        let mut skipped: Vec<String> = Vec::new();
        let mut skipped_count = 0usize;
        walk(&walked, r, &rules, &mut |f| {
            let Ok(file) = f.open() else { return true };
            let p = f.path.display().to_string();
            let mut sink = Collect {
                path: &p,
                numbers: q.numbers,
                content,
                first_only: q.mode == GrepMode::Files,
                out: &mut out,
                count: 0,
            };
            if searcher.search_file(&matcher, &file, &mut sink).is_err() {
                // A line (or a multiline file) past the heap limit, or a read that failed.
                skipped_count += 1;
                if skipped.len() < SKIPPED_NAMED {
                    skipped.push(p);
                }
                return !out.full();
            }
            let count = sink.count;
            if count == 0 {
                return !out.full();
            }
            match q.mode {
                GrepMode::Files => {
                    out.push(p);
                }
                GrepMode::Count => {
                    out.push(format!("{p}:{count}"));
                }
                GrepMode::Content => {}
            }
            !out.full()
        })?;
        let mut notes = Vec::new();
        if out.cut {
            notes.push(format!(
                "(结果超过 {} MiB,只给了前 {} 行;用 head_limit、glob 或更窄的 pattern 缩小范围)",
                GREP_OUTPUT_LIMIT >> 20,
                out.lines.len()
            ));
        }
        if skipped_count > 0 {
            notes.push(format!(
                "({skipped_count} 个文件没有搜索:有一行超过 {} MiB(multiline 时整个文件),或读不了:{}{})",
                GREP_HEAP_LIMIT >> 20,
                skipped.join(", "),
                if skipped_count > skipped.len() { " …" } else { "" }
            ));
        }
        if notes.is_empty() {
            return Ok(out.lines);
        }
        notes.extend(out.lines);
        Ok(notes)
    })
    .await?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsroot::ViewMount;

    fn view(root: &Path) -> View {
        View::new(
            vec![ViewMount {
                path: root.to_path_buf(),
                read_only: false,
            }],
            Vec::new(),
        )
    }

    /// What an agent's files can make a grep return is bounded: millions of matching lines,
    /// lines of megabytes, one line past the searcher's limit; the result says what it left out.
    #[tokio::test]
    async fn a_grep_returns_bounded_text_and_says_what_it_left_out() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::write(root.join("many.txt"), "a\n".repeat(1 << 20)).unwrap();
        let wide = format!("{}\n", "é".repeat(GREP_LINE_BYTES));
        std::fs::write(root.join("wide.txt"), wide.repeat(4)).unwrap();
        std::fs::write(root.join("long.txt"), "a".repeat(GREP_HEAP_LIMIT + 1)).unwrap();
        let v = view(&root);

        let q = GrepQuery::new("a", GrepMode::Content);
        let lines = grep(&v, &root.join("many.txt"), &q).await.unwrap();
        let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
        assert!(bytes <= GREP_OUTPUT_LIMIT + 200, "{bytes}");
        assert!(lines[0].contains("只给了前"), "{}", lines[0]);
        assert!(lines.len() > 1000, "{}", lines.len());

        let q = GrepQuery::new("é", GrepMode::Content);
        let lines = grep(&v, &root.join("wide.txt"), &q).await.unwrap();
        assert_eq!(lines.len(), 4);
        assert!(lines
            .iter()
            .all(|l| l.ends_with('…') && l.len() < GREP_LINE_BYTES + 100));

        let q = GrepQuery::new("a", GrepMode::Files);
        let lines = grep(&v, &root, &q).await.unwrap();
        assert!(lines[0].contains("1 个文件没有搜索"), "{lines:?}");
        assert!(lines[0].contains("long.txt"), "{lines:?}");
        assert_eq!(&lines[1..], [root.join("many.txt").display().to_string()]);

        let q = GrepQuery {
            head_limit: Some(3),
            ..GrepQuery::new("a", GrepMode::Content)
        };
        let lines = grep(&v, &root.join("many.txt"), &q).await.unwrap();
        assert_eq!(lines.len(), 3, "{lines:?}");
    }
}
