//! The shell lexer behind [`super::check`]: words with quotes removed, operators, and the
//! split into simple commands with redirections checked.

use super::{refuse, Refusal};

/// One shell word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Word {
    /// The value the command receives (quotes removed, escapes resolved; expansions kept raw).
    pub(super) text: String,
    /// The word's unquoted characters, quoted ones replaced by `\0` (for brace detection).
    pub(super) bare: String,
    /// Contains an unquoted glob character or a parameter expansion: its final value depends
    /// on the file system or the environment, not on the text.
    pub(super) dynamic: bool,
    /// Contains a parameter expansion (`$x`, `${x}`).
    pub(super) expands: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RedirKind {
    /// `>`, `>>`, `>|`, `&>`, `&>>`
    Write,
    /// `<`
    Read,
    /// `>&`
    DupOut,
    /// `<&`, `<<`, `<<<`, `<>`
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Word(Word),
    AndIf,
    OrIf,
    Semi,
    Pipe,
    Newline,
    Redir(RedirKind),
    /// `&`, `|&`, `(`, `)`, `;;`: never part of a glance.
    Forbidden(&'static str),
}

#[derive(Default)]
struct WordBuf {
    pub(super) text: String,
    pub(super) bare: String,
    pub(super) dynamic: bool,
    pub(super) expands: bool,
    quoted: bool,
    started: bool,
}

impl WordBuf {
    fn push_bare(&mut self, c: char) {
        self.started = true;
        self.text.push(c);
        self.bare.push(c);
    }

    fn push_quoted(&mut self, c: char) {
        self.started = true;
        self.quoted = true;
        self.text.push(c);
        self.bare.push('\0');
    }

    fn take(&mut self) -> Option<Word> {
        if !self.started {
            return None;
        }
        let w = Word {
            text: std::mem::take(&mut self.text),
            bare: std::mem::take(&mut self.bare),
            dynamic: self.dynamic,
            expands: self.expands,
        };
        *self = WordBuf::default();
        Some(w)
    }

    /// An unquoted all-digit word right before `<`/`>` is a descriptor number (`2>`).
    fn is_io_number(&self) -> bool {
        self.started
            && !self.quoted
            && !self.text.is_empty()
            && self.text.bytes().all(|b| b.is_ascii_digit())
    }
}

pub(super) fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Handles a `$` at `chars[i]` (unquoted or inside double quotes). Returns the index after the
/// expansion. Only plain parameter expansions pass; everything that runs code or assigns is
/// refused.
fn lex_dollar(
    chars: &[char],
    i: usize,
    buf: &mut WordBuf,
    in_dquote: bool,
) -> Result<usize, Refusal> {
    let push = |buf: &mut WordBuf, c: char| {
        if in_dquote {
            buf.push_quoted(c)
        } else {
            buf.push_bare(c)
        }
    };
    match chars.get(i + 1).copied() {
        Some('(') => refuse("command substitution `$(…)` is not a glance"),
        Some('[') => refuse("arithmetic expansion `$[…]` is not a glance"),
        Some('\'') | Some('"') if !in_dquote => {
            refuse("`$'…'` / `$\"…\"` quoting is not supported in a glance")
        }
        Some('{') => {
            let mut j = i + 2;
            let start = j;
            while j < chars.len() && is_name_char(chars[j]) {
                j += 1;
            }
            if j == start || chars.get(j) != Some(&'}') || !is_name_start(chars[start]) {
                return refuse("only plain `${NAME}` expansions are allowed in a glance");
            }
            for &c in &chars[i..=j] {
                push(buf, c);
            }
            buf.dynamic = true;
            buf.expands = true;
            Ok(j + 1)
        }
        Some(c) if is_name_start(c) => {
            let mut j = i + 1;
            while j < chars.len() && is_name_char(chars[j]) {
                j += 1;
            }
            for &c in &chars[i..j] {
                push(buf, c);
            }
            buf.dynamic = true;
            buf.expands = true;
            Ok(j)
        }
        Some(c) if c.is_ascii_digit() || "?#@*$!-".contains(c) => {
            push(buf, '$');
            push(buf, c);
            buf.dynamic = true;
            buf.expands = true;
            Ok(i + 2)
        }
        _ => {
            push(buf, '$');
            Ok(i + 1)
        }
    }
}

/// A single-quoted string starting at `chars[i]`, into `buf`; where lexing goes on.
fn single_quoted(chars: &[char], i: usize, buf: &mut WordBuf) -> Result<usize, Refusal> {
    buf.started = true;
    buf.quoted = true;
    let mut j = i + 1;
    loop {
        match chars.get(j) {
            None => return refuse("unterminated single quote"),
            Some('\'') => break,
            Some(&q) => buf.push_quoted(q),
        }
        j += 1;
    }
    Ok(j + 1)
}

/// A double-quoted string starting at `chars[i]`, into `buf` (`$` expands, backticks are
/// refused); where lexing goes on.
fn double_quoted(chars: &[char], i: usize, buf: &mut WordBuf) -> Result<usize, Refusal> {
    buf.started = true;
    buf.quoted = true;
    let mut j = i + 1;
    loop {
        match chars.get(j) {
            None => return refuse("unterminated double quote"),
            Some('"') => break,
            Some('`') => return refuse("command substitution with backticks is not a glance"),
            Some('\\') => {
                match chars.get(j + 1) {
                    Some('\n') => {}
                    Some(&n) if "$`\"\\".contains(n) => buf.push_quoted(n),
                    Some(&n) => {
                        buf.push_quoted('\\');
                        buf.push_quoted(n);
                    }
                    None => return refuse("unterminated double quote"),
                }
                j += 2;
                continue;
            }
            Some('$') => {
                j = lex_dollar(chars, j, buf, true)?;
                continue;
            }
            Some(&q) => buf.push_quoted(q),
        }
        j += 1;
    }
    Ok(j + 1)
}

/// The operator starting with `;`, `&` or `|` at `chars[i]`, and its length.
fn operator(chars: &[char], i: usize) -> (Tok, usize) {
    match (chars[i], chars.get(i + 1)) {
        (';', Some(';') | Some('&')) => (Tok::Forbidden("case terminator"), 2),
        (';', _) => (Tok::Semi, 1),
        ('&', Some('&')) => (Tok::AndIf, 2),
        // `&>` / `&>>`: stdout and stderr to a file.
        ('&', Some('>')) => (
            Tok::Redir(RedirKind::Write),
            if chars.get(i + 2) == Some(&'>') { 3 } else { 2 },
        ),
        ('&', _) => (Tok::Forbidden("background `&`"), 1),
        ('|', Some('|')) => (Tok::OrIf, 2),
        ('|', Some('&')) => (Tok::Forbidden("`|&`"), 2),
        _ => (Tok::Pipe, 1),
    }
}

/// Splits `src` into words and operators the way a POSIX shell would, refusing constructs
/// that execute code while lexing (substitutions) or that the lexer does not model.
pub(super) fn lex(src: &str) -> Result<Vec<Tok>, Refusal> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut buf = WordBuf::default();
    let mut i = 0;
    macro_rules! finish {
        () => {
            if let Some(w) = buf.take() {
                toks.push(Tok::Word(w));
            }
        };
    }
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' => {
                finish!();
                i += 1;
            }
            '\n' => {
                finish!();
                toks.push(Tok::Newline);
                i += 1;
            }
            '\\' => match chars.get(i + 1) {
                Some('\n') => i += 2,
                Some(&n) => {
                    buf.push_quoted(n);
                    i += 2;
                }
                None => return refuse("trailing backslash"),
            },
            '\'' => i = single_quoted(&chars, i, &mut buf)?,
            '"' => i = double_quoted(&chars, i, &mut buf)?,
            '`' => return refuse("command substitution with backticks is not a glance"),
            '$' => i = lex_dollar(&chars, i, &mut buf, false)?,
            '#' if !buf.started => {
                // A comment runs to the end of the line.
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ';' | '&' | '|' => {
                finish!();
                let (tok, len) = operator(&chars, i);
                toks.push(tok);
                i += len;
            }
            '<' | '>' => {
                if buf.is_io_number() {
                    buf = WordBuf::default();
                } else {
                    finish!();
                }
                let next = chars.get(i + 1).copied();
                if next == Some('(') {
                    return refuse("process substitution is not a glance");
                }
                let (kind, len) = match (c, next, chars.get(i + 2).copied()) {
                    ('>', Some('>'), _) | ('>', Some('|'), _) => (RedirKind::Write, 2),
                    ('>', Some('&'), _) => (RedirKind::DupOut, 2),
                    ('>', _, _) => (RedirKind::Write, 1),
                    ('<', Some('<'), Some('<')) => (RedirKind::Other, 3),
                    ('<', Some('<'), _) | ('<', Some('&'), _) | ('<', Some('>'), _) => {
                        (RedirKind::Other, 2)
                    }
                    _ => (RedirKind::Read, 1),
                };
                toks.push(Tok::Redir(kind));
                i += len;
            }
            '(' | ')' => {
                finish!();
                toks.push(Tok::Forbidden("subshell or grouping"));
                i += 1;
            }
            '*' | '?' | '[' => {
                buf.push_bare(c);
                buf.dynamic = true;
                i += 1;
            }
            _ => {
                buf.push_bare(c);
                i += 1;
            }
        }
    }
    finish!();
    Ok(toks)
}

/// One simple command: its words (redirections already checked and removed).
pub(super) type Segment = Vec<Word>;

/// Splits tokens into simple commands, checking separators and redirections on the way.
pub(super) fn split_segments(tokens: Vec<Tok>) -> Result<Vec<Segment>, Refusal> {
    let mut segments = Vec::new();
    let mut cur: Segment = Vec::new();
    // True right after `&&`, `||` or `|`: a command must follow (newlines may come first).
    let mut need_command = false;
    let mut iter = tokens.into_iter().peekable();
    while let Some(tok) = iter.next() {
        match tok {
            Tok::Word(w) => cur.push(w),
            Tok::AndIf | Tok::OrIf | Tok::Pipe => {
                if cur.is_empty() {
                    return refuse("a compound command needs a command on both sides");
                }
                segments.push(std::mem::take(&mut cur));
                need_command = true;
            }
            Tok::Semi => {
                if cur.is_empty() {
                    return refuse("empty command before `;`");
                }
                segments.push(std::mem::take(&mut cur));
            }
            Tok::Newline => {
                if !cur.is_empty() {
                    segments.push(std::mem::take(&mut cur));
                }
            }
            Tok::Redir(kind) => {
                let target = match iter.next() {
                    Some(Tok::Word(w)) => w,
                    _ => return refuse("redirection without a target"),
                };
                check_redirection(kind, &target)?;
                continue;
            }
            Tok::Forbidden(what) => return refuse(format!("{what} is not a glance")),
        }
        if !cur.is_empty() {
            need_command = false;
        }
    }
    if !cur.is_empty() {
        segments.push(cur);
    } else if need_command {
        return refuse("the command ends with an operator");
    }
    Ok(segments)
}

fn check_redirection(kind: RedirKind, target: &Word) -> Result<(), Refusal> {
    match kind {
        RedirKind::Write if target.text == "/dev/null" && !target.dynamic => Ok(()),
        RedirKind::Write => refuse("redirecting output to a file writes it: not a glance"),
        RedirKind::DupOut
            if !target.dynamic
                && (target.text == "-" || target.text.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Ok(())
        }
        RedirKind::DupOut => refuse("`>&file` writes a file: not a glance"),
        RedirKind::Read if !target.dynamic => Ok(()),
        RedirKind::Read => refuse("input redirection from a pattern or variable is not a glance"),
        RedirKind::Other => refuse("here-documents and `<>`/`<&` are not a glance"),
    }
}
