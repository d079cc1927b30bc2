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

struct Collect<'a> {
    path: &'a str,
    numbers: bool,
    lines: Vec<String>,
    count: u64,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;
    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        let text = String::from_utf8_lossy(m.bytes());
        for (i, l) in text.trim_end_matches('\n').split('\n').enumerate() {
            match (self.numbers, m.line_number()) {
                (true, Some(n)) => self
                    .lines
                    .push(format!("{}:{}:{}", self.path, n + i as u64, l)),
                _ => self.lines.push(format!("{}:{}", self.path, l)),
            }
        }
        Ok(true)
    }
    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        let text = String::from_utf8_lossy(c.bytes());
        let l = text.trim_end_matches('\n');
        match (self.numbers, c.line_number()) {
            (true, Some(n)) => self.lines.push(format!("{}-{}-{}", self.path, n, l)),
            _ => self.lines.push(format!("{}-{}", self.path, l)),
        }
        Ok(true)
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
            .binary_detection(BinaryDetection::quit(0))
            .after_context(if content { q.after } else { 0 })
            .before_context(if content { q.before } else { 0 })
            .build();
        let mut lines = Vec::new();
        walk(&walked, r, &rules, &mut |f| {
            let Ok(file) = f.open() else { return true };
            let p = f.path.display().to_string();
            let mut sink = Collect {
                path: &p,
                numbers: q.numbers,
                lines: Vec::new(),
                count: 0,
            };
            if searcher.search_file(&matcher, &file, &mut sink).is_err() || sink.count == 0 {
                return true;
            }
            match q.mode {
                GrepMode::Files => lines.push(p.clone()),
                GrepMode::Count => lines.push(format!("{p}:{}", sink.count)),
                GrepMode::Content => lines.extend(sink.lines),
            }
            q.head_limit.is_none_or(|h| lines.len() < h)
        })?;
        if let Some(h) = q.head_limit {
            lines.truncate(h);
        }
        Ok(lines)
    })
    .await?;
    Ok(lines)
}
