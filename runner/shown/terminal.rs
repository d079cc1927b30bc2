//! The process's output boundary: [`Terminal`] is the only writer flowerbox has to its stdout
//! and stderr ([`stdout`], [`stderr`]; clippy's `disallowed-methods` refuses
//! `std::io::stdout`/`stderr` everywhere else).
//!
//! Two kinds of bytes reach the terminal, and they are told apart by construction, never by
//! looking at a byte stream:
//! - **text**, whatever its source, goes through [`super::clean`] on the way out: written with
//!   [`Terminal::text`], as the pieces of a [`Line`], or through `std::io::Write` (every
//!   `write!` to a `Terminal`);
//! - **flowerbox's own escape sequences** exist only as values: a [`Style`] on a piece of a
//!   [`Line`] (its SGR is emitted around the cleaned piece) and a [`Control`] (cursor motion
//!   and erasing for the resident prompt and the spinners), encoded here and nowhere else.
//!
//! So a string that happens to contain `ESC [ 31 m` is shown as text with its colour removed,
//! whoever built it; and no caller can reach the terminal unsanitised without writing an
//! `#[allow]` that a reviewer sees.

use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::ops::{Deref, Range};
use std::sync::Mutex;

use super::clean::clean;

/// The SGR reset sequence.
const RESET: &str = "\x1b[0m";

/// flowerbox's colours. The hue says who is talking (flower's rule), never decoration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Failures and errors (`x`).
    Red,
    /// Done, answered, received (`+`).
    Green,
    /// Questions, warnings, handoffs, retries (`?`, `!`, `#`, `~`).
    Yellow,
    /// The main thread's tool calls (`*`).
    Blue,
    /// Dispatch and the aside oracle (`>`, `# 旁路`).
    Magenta,
    /// The main thread's thinking (`~`).
    Cyan,
    /// Secondary text: status lines, subagents, hints.
    Dim,
    /// Emphasis.
    Bold,
    /// Step separators.
    BoldCyan,
    /// Questions and the handoff header.
    BoldYellow,
}

impl Style {
    /// The SGR parameters of this style.
    fn code(self) -> &'static str {
        match self {
            Style::Red => "31",
            Style::Green => "32",
            Style::Yellow => "33",
            Style::Blue => "34",
            Style::Magenta => "35",
            Style::Cyan => "36",
            Style::Dim => "2",
            Style::Bold => "1",
            Style::BoldCyan => "1;36",
            Style::BoldYellow => "1;33",
        }
    }
}

/// One screen line: plain text with some ranges styled. What a [`Terminal`] writes is the
/// text, cleaned piece by piece, each styled piece between its SGR and a reset when colour is
/// on (so a style never outlives its piece). Dereferences to the plain text, for measuring
/// and for tests.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Line {
    text: String,
    /// Styled byte ranges of `text`, ascending, not overlapping, none empty.
    styled: Vec<(Range<usize>, Style)>,
}

impl Line {
    /// An empty line.
    pub fn new() -> Line {
        Line::default()
    }

    /// A line without style.
    pub fn plain(text: impl Into<String>) -> Line {
        Line {
            text: text.into(),
            styled: Vec::new(),
        }
    }

    /// A line in one style.
    pub fn styled(style: Style, text: impl Into<String>) -> Line {
        let mut l = Line::new();
        l.push(Some(style), &text.into());
        l
    }

    /// Appends a piece, styled or not.
    pub fn push(&mut self, style: Option<Style>, text: &str) {
        let start = self.text.len();
        self.text.push_str(text);
        if let (Some(style), false) = (style, text.is_empty()) {
            self.styled.push((start..self.text.len(), style));
        }
    }

    /// [`Line::push`], as a builder.
    pub fn with(mut self, style: Option<Style>, text: &str) -> Line {
        self.push(style, text);
        self
    }

    /// The plain text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Removes trailing whitespace (and the styles of what is removed).
    pub fn trim_end(mut self) -> Line {
        let end = self.text.trim_end().len();
        self.text.truncate(end);
        self.styled.retain_mut(|(r, _)| {
            r.end = r.end.min(end);
            r.start < r.end
        });
        self
    }

    /// The pieces in order: unstyled gaps and styled ranges.
    pub fn pieces(&self) -> Vec<(Option<Style>, &str)> {
        let mut out = Vec::new();
        let mut at = 0;
        for (r, style) in &self.styled {
            if r.start > at {
                out.push((None, &self.text[at..r.start]));
            }
            out.push((Some(*style), &self.text[r.clone()]));
            at = r.end;
        }
        if at < self.text.len() {
            out.push((None, &self.text[at..]));
        }
        out
    }

    /// What [`Terminal::line`] writes for this line when its text needs no cleaning: the
    /// pieces, styled ones in their SGR when `color`. For tests and measurements.
    pub fn painted(&self, color: bool) -> String {
        let mut out = String::with_capacity(self.text.len() + 16 * self.styled.len());
        for (style, text) in self.pieces() {
            paint(&mut out, style.filter(|_| color), &clean(text));
        }
        out
    }
}

/// `text` in `style` (SGR, text, reset), or plain.
fn paint(out: &mut String, style: Option<Style>, text: &str) {
    match style {
        Some(s) if !text.is_empty() => {
            out.push_str("\x1b[");
            out.push_str(s.code());
            out.push('m');
            out.push_str(text);
            out.push_str(RESET);
        }
        _ => out.push_str(text),
    }
}

impl Deref for Line {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for Line {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl From<String> for Line {
    fn from(text: String) -> Line {
        Line::plain(text)
    }
}

impl From<&str> for Line {
    fn from(text: &str) -> Line {
        Line::plain(text)
    }
}

impl PartialEq<str> for Line {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for Line {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl PartialEq<String> for Line {
    fn eq(&self, other: &String) -> bool {
        &self.text == other
    }
}

/// flowerbox's own cursor motion and erasing: the only non-SGR escape sequences it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Up `n` rows (nothing for 0).
    Up(usize),
    /// Down `n` rows (nothing for 0).
    Down(usize),
    /// Right `n` columns (nothing for 0).
    Right(usize),
    /// Left `n` columns (nothing for 0).
    Left(usize),
    /// To column 0.
    Cr,
    /// To column 0 of the next row (a line break in cbreak mode).
    CrLf,
    /// Erase from the cursor to the end of the screen.
    EraseDown,
    /// To column 0 and erase the whole row.
    ClearLine,
}

impl Control {
    /// The bytes of this control.
    fn encode(self) -> String {
        let moved = |n: usize, f: char| {
            if n > 0 {
                format!("\x1b[{n}{f}")
            } else {
                String::new()
            }
        };
        match self {
            Control::Up(n) => moved(n, 'A'),
            Control::Down(n) => moved(n, 'B'),
            Control::Right(n) => moved(n, 'C'),
            Control::Left(n) => moved(n, 'D'),
            Control::Cr => "\r".into(),
            Control::CrLf => "\r\n".into(),
            Control::EraseDown => "\x1b[J".into(),
            Control::ClearLine => "\r\x1b[2K".into(),
        }
    }
}

/// Which of the process's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// File descriptor 1.
    Stdout,
    /// File descriptor 2.
    Stderr,
}

/// Whether the stream is a terminal.
pub fn is_terminal(stream: Stream) -> bool {
    #[allow(clippy::disallowed_methods)] // asking, not writing
    match stream {
        Stream::Stdout => io::stdout().is_terminal(),
        Stream::Stderr => io::stderr().is_terminal(),
    }
}

/// The stream's terminal width in columns, when it is a terminal that says.
pub fn columns(stream: Stream) -> Option<usize> {
    let fd = match stream {
        Stream::Stdout => nix::libc::STDOUT_FILENO,
        Stream::Stderr => nix::libc::STDERR_FILENO,
    };
    let mut ws: nix::libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; failure leaves it zeroed.
    let rc = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// The process's stdout, through the boundary.
pub fn stdout() -> Terminal {
    #[allow(clippy::disallowed_methods)] // the boundary itself
    Terminal::new(Box::new(io::stdout()))
}

/// The process's stderr, through the boundary.
pub fn stderr() -> Terminal {
    #[allow(clippy::disallowed_methods)] // the boundary itself
    Terminal::new(Box::new(io::stderr()))
}

/// A writer at the output boundary (see the module doc). Any `Write` can be behind it (tests
/// use a buffer); what comes out is always clean text plus flowerbox's typed styles and
/// controls.
pub struct Terminal {
    out: Box<dyn Write + Send>,
    /// Bytes of an earlier `write` held back: the start of a character cut by the write's end,
    /// or a `\r` that the next write may pair with `\n`.
    carry: Vec<u8>,
}

impl fmt::Debug for Terminal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminal")
            .field("carry", &self.carry.len())
            .finish_non_exhaustive()
    }
}

impl Terminal {
    /// A boundary writer over `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Terminal {
        Terminal {
            out,
            carry: Vec::new(),
        }
    }

    /// Writes `text`, cleaned.
    pub fn text(&mut self, text: &str) -> io::Result<()> {
        self.release()?;
        self.out.write_all(clean(text).as_bytes())
    }

    /// Writes a line's pieces, cleaned, styled when `color` (no line break: see
    /// [`Control::CrLf`], or write `"\n"`).
    pub fn line(&mut self, line: &Line, color: bool) -> io::Result<()> {
        self.release()?;
        self.out.write_all(line.painted(color).as_bytes())
    }

    /// Writes one of flowerbox's controls.
    pub fn control(&mut self, control: Control) -> io::Result<()> {
        self.release()?;
        self.out.write_all(control.encode().as_bytes())
    }

    /// Writes what an earlier `write` held back, cleaned as it stands.
    fn release(&mut self) -> io::Result<()> {
        if self.carry.is_empty() {
            return Ok(());
        }
        let held = std::mem::take(&mut self.carry);
        self.out
            .write_all(clean(&String::from_utf8_lossy(&held)).as_bytes())
    }
}

/// How many bytes at the end of `buf` to hold back: a `\r` (the next write may bring its `\n`)
/// or the start of a character whose other bytes are still to come.
fn held_back(buf: &[u8]) -> usize {
    if buf.last() == Some(&b'\r') {
        return 1;
    }
    let n = buf.len();
    for k in 1..=n.min(3) {
        let b = buf[n - k];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let len = match b {
            0xF0..=0xF7 => 4,
            0xE0..=0xEF => 3,
            0xC2..=0xDF => 2,
            _ => 1,
        };
        return if len > k { k } else { 0 };
    }
    0
}

impl Write for Terminal {
    /// Cleans and writes `buf`. Each call is cleaned on its own (an escape sequence cut in two
    /// shows as `␛` and text, never acts), except that a character cut at the end, or a final
    /// `\r`, waits for the next call or [`Write::flush`].
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.carry.extend_from_slice(buf);
        let hold = held_back(&self.carry);
        let keep = self.carry.split_off(self.carry.len() - hold);
        let ready = std::mem::replace(&mut self.carry, keep);
        if !ready.is_empty() {
            self.out
                .write_all(clean(&String::from_utf8_lossy(&ready)).as_bytes())?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.release()?;
        self.out.flush()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// An indicatif draw target on `stream` through a [`Terminal`]: the bar's text is cleaned,
/// its cursor work is [`Control`]s.
pub fn bar_target(stream: Stream) -> indicatif::ProgressDrawTarget {
    let term = match stream {
        Stream::Stdout => stdout(),
        Stream::Stderr => stderr(),
    };
    indicatif::ProgressDrawTarget::term_like(Box::new(BarTarget {
        term: Mutex::new(term),
        stream,
    }))
}

/// [`bar_target`]'s `TermLike`.
struct BarTarget {
    term: Mutex<Terminal>,
    stream: Stream,
}

impl fmt::Debug for BarTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarTarget")
            .field("stream", &self.stream)
            .finish()
    }
}

impl BarTarget {
    fn with(&self, f: impl FnOnce(&mut Terminal) -> io::Result<()>) -> io::Result<()> {
        f(&mut self.term.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl indicatif::TermLike for BarTarget {
    fn width(&self) -> u16 {
        columns(self.stream).unwrap_or(80).min(u16::MAX as usize) as u16
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.with(|t| t.control(Control::Up(n)))
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.with(|t| t.control(Control::Down(n)))
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.with(|t| t.control(Control::Right(n)))
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.with(|t| t.control(Control::Left(n)))
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.with(|t| {
            t.text(s)?;
            t.text("\n")
        })
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.with(|t| t.text(s))
    }
    fn clear_line(&self) -> io::Result<()> {
        self.with(|t| t.control(Control::ClearLine))
    }
    fn flush(&self) -> io::Result<()> {
        self.with(|t| t.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowerbox_testkit::SharedBuf;

    fn term() -> (Terminal, SharedBuf) {
        let buf = SharedBuf::default();
        (Terminal::new(Box::new(buf.clone())), buf)
    }

    #[test]
    fn styles_wrap_cleaned_pieces_and_only_when_colour_is_on() {
        let line = Line::styled(Style::Green, "  + 完成")
            .with(Some(Style::Dim), " 干活\x1b]0;t\x07")
            .with(None, " x ");
        assert_eq!(line.as_str(), "  + 完成 干活\x1b]0;t\x07 x ");
        assert_eq!(
            line.painted(true),
            "\x1b[32m  + 完成\x1b[0m\x1b[2m 干活␛\x1b[0m x "
        );
        assert_eq!(line.painted(false), "  + 完成 干活␛ x ");
        let (mut t, buf) = term();
        t.line(&line.clone().trim_end(), true).unwrap();
        assert_eq!(buf.take(), "\x1b[32m  + 完成\x1b[0m\x1b[2m 干活␛\x1b[0m x");
        // A trailing styled blank goes with its style.
        let l = Line::plain("a").with(Some(Style::Red), "  ").trim_end();
        assert_eq!(l.painted(true), "a");
    }

    #[test]
    fn text_and_writes_are_cleaned_and_controls_are_ours() {
        let (mut t, buf) = term();
        t.text("a\x1b[2Jb\rc").unwrap();
        t.control(Control::Up(2)).unwrap();
        t.control(Control::Up(0)).unwrap();
        t.control(Control::EraseDown).unwrap();
        let quoted = "x\x1b]52;c;aGk=\x07";
        write!(t, "{quoted}\u{202e}{}", 1).unwrap();
        t.flush().unwrap();
        assert_eq!(buf.take(), "a␛b␍c\x1b[2A\x1b[Jx␛<U+202E>1");
    }

    #[test]
    fn a_character_or_a_crlf_cut_between_writes_comes_out_whole() {
        let (mut t, buf) = term();
        let bytes = "中\r\n".as_bytes();
        for b in bytes {
            t.write_all(std::slice::from_ref(b)).unwrap();
        }
        t.write_all(b"x\r").unwrap();
        assert_eq!(buf.take(), "中\nx");
        t.flush().unwrap();
        assert_eq!(buf.take(), "␍");
        // Raw C1 bytes are no UTF-8: they cannot reach the terminal as themselves.
        t.write_all(b"a\x9b2Jb\xc2\x9b2Jc").unwrap();
        t.flush().unwrap();
        assert_eq!(buf.take(), "a\u{fffd}2Jb␛c");
    }
}
