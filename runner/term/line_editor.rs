//! [`LineEditor`]: the resident input line as a pure state machine (seed 000 "逐字符输入模式与键位").
//!
//! The input thread puts the terminal in cbreak mode and feeds every byte it reads here; the
//! editor never touches the terminal. It decodes UTF-8 incrementally (a character split across
//! two reads is assembled), consumes escape sequences whole (so `←` never inserts `[D`), and
//! reports per feed whether a line is complete, input ended, or the line must be redrawn. The
//! display helpers give the buffer's width and the cursor column in terminal columns, so the
//! output port can redraw "prompt + buffer" with the cursor in the right place.
//!
//! Keys: printable characters insert at the cursor; Backspace (0x7f) / Ctrl+H delete one
//! character before the cursor (a CJK character is one press); ←/→ move; Home/End as
//! `ESC[H`/`ESC[F`, `ESC[1~`/`ESC[4~`, `ESC[7~`/`ESC[8~`, `ESC OH`/`ESC OF`; Delete `ESC[3~`;
//! Ctrl+A/E start/end; Ctrl+U clears the line; Ctrl+D is end of input only on an empty line;
//! ↑/↓ do nothing (there is no history: moving would look like lost text); Enter (CR or LF;
//! CR LF counts once) yields the line; every other control character is ignored.

/// What one fed byte (or one feed) means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOutcome {
    /// Enter: the finished line (the buffer is now empty; the caller moves to a new line).
    Line(String),
    /// Ctrl+D on an empty line: input ended (the caller declines a pending question and stops).
    Eof,
    /// The buffer or the cursor changed: redraw "prompt + buffer".
    Redraw,
    /// Nothing visible changed (ignored key, half a character, an escape sequence in progress).
    None,
}

/// Where the escape-sequence parser is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Esc {
    /// Not in a sequence.
    Ground,
    /// After `ESC`.
    Start,
    /// Inside `ESC [`, with the parameter bytes seen so far.
    Csi(Vec<u8>),
    /// After `ESC O` (SS3): the next byte is the final.
    Ss3,
    /// Inside an OSC/DCS/APC/PM/SOS string, until BEL or ST.
    Str,
    /// Inside a string, right after an `ESC` (an ST is `ESC \`).
    StrMaybeEnd,
    /// After `ESC` + intermediates (nF escape), until a final byte.
    Inter,
}

/// The line being typed. See the module doc for the keys.
#[derive(Debug, Clone)]
pub struct LineEditor {
    /// The characters of the line.
    buf: Vec<char>,
    /// Cursor position as an index into `buf` (0 ..= len).
    cursor: usize,
    /// Bytes of a UTF-8 character not yet complete.
    utf8: Vec<u8>,
    /// How many bytes the pending UTF-8 character needs in total.
    utf8_need: usize,
    /// Escape-sequence state.
    esc: Esc,
    /// The previous byte was CR, so an immediately following LF is the same Enter.
    after_cr: bool,
}

impl Default for LineEditor {
    fn default() -> Self {
        Self::new()
    }
}

impl LineEditor {
    /// An empty line.
    pub fn new() -> Self {
        LineEditor {
            buf: Vec::new(),
            cursor: 0,
            utf8: Vec::new(),
            utf8_need: 0,
            esc: Esc::Ground,
            after_cr: false,
        }
    }

    /// Feeds bytes as read from the terminal. Returns the outcomes in order: every
    /// [`EditOutcome::Line`] and [`EditOutcome::Eof`], with consecutive redraws collapsed into
    /// one [`EditOutcome::Redraw`] (and none after the last line unless the buffer changed
    /// again). An empty vector means nothing to do. A paste of `"a\nb"` yields
    /// `[Line("a"), Redraw]` with `b` in the buffer.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<EditOutcome> {
        let mut out = Vec::new();
        let mut redraw = false;
        for &b in bytes {
            match self.feed_byte(b) {
                EditOutcome::Redraw => redraw = true,
                EditOutcome::None => {}
                done => {
                    redraw = false;
                    out.push(done);
                }
            }
        }
        if redraw {
            out.push(EditOutcome::Redraw);
        }
        out
    }

    /// Feeds one byte.
    pub fn feed_byte(&mut self, b: u8) -> EditOutcome {
        let after_cr = std::mem::replace(&mut self.after_cr, false);
        if self.esc != Esc::Ground {
            return self.escape_byte(b);
        }
        if self.utf8_need > 0 {
            if (0x80..0xc0).contains(&b) {
                self.utf8.push(b);
                if self.utf8.len() < self.utf8_need {
                    return EditOutcome::None;
                }
                let bytes = std::mem::take(&mut self.utf8);
                self.utf8_need = 0;
                return match std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|s| s.chars().next())
                {
                    Some(c) => self.insert(c),
                    None => EditOutcome::None, // overlong or surrogate: dropped
                };
            }
            // The character was cut short: drop it and read this byte afresh.
            self.utf8.clear();
            self.utf8_need = 0;
        }
        match b {
            b'\r' => {
                self.after_cr = true;
                self.enter()
            }
            b'\n' if after_cr => EditOutcome::None,
            b'\n' => self.enter(),
            0x1b => {
                self.esc = Esc::Start;
                EditOutcome::None
            }
            0x7f | 0x08 => self.backspace(),
            0x01 => self.move_to(0),
            0x05 => self.move_to(self.buf.len()),
            0x15 => {
                if self.buf.is_empty() {
                    return EditOutcome::None;
                }
                self.buf.clear();
                self.cursor = 0;
                EditOutcome::Redraw
            }
            0x04 if self.buf.is_empty() => EditOutcome::Eof,
            0x00..=0x1f => EditOutcome::None,
            0x20..=0x7e => self.insert(b as char),
            0xc2..=0xdf => self.start_utf8(b, 2),
            0xe0..=0xef => self.start_utf8(b, 3),
            0xf0..=0xf4 => self.start_utf8(b, 4),
            // Stray continuation bytes and invalid leads.
            _ => EditOutcome::None,
        }
    }

    /// Drops a sequence that was started by a lone `ESC` and never finished. The input thread
    /// calls this when its poll times out with no further byte, so a pressed Esc key does not
    /// swallow the next keystroke. Returns whether anything was pending.
    pub fn cancel_pending_escape(&mut self) -> bool {
        let pending = self.esc != Esc::Ground;
        self.esc = Esc::Ground;
        pending
    }

    /// The current line.
    pub fn text(&self) -> String {
        self.buf.iter().collect()
    }

    /// Whether the line is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Cursor position in characters (0 = before the first character).
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Width of the whole line in terminal columns (CJK characters 2).
    #[cfg(test)]
    pub(crate) fn display_width(&self) -> usize {
        self.buf.iter().map(|&c| char_width(c)).sum()
    }

    /// Column of the cursor relative to the start of the line, in terminal columns. Redraw is
    /// "erase line, print prompt + text, move left by `display_width() - cursor_column()`".
    #[cfg(test)]
    pub(crate) fn cursor_column(&self) -> usize {
        self.buf[..self.cursor].iter().map(|&c| char_width(c)).sum()
    }

    /// Empties the line (after a question was answered elsewhere, for instance).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.cursor = 0;
    }

    fn start_utf8(&mut self, b: u8, need: usize) -> EditOutcome {
        self.utf8.clear();
        self.utf8.push(b);
        self.utf8_need = need;
        EditOutcome::None
    }

    fn insert(&mut self, c: char) -> EditOutcome {
        // C1 controls decoded from UTF-8 are controls too.
        if ('\u{80}'..='\u{9f}').contains(&c) {
            return EditOutcome::None;
        }
        self.buf.insert(self.cursor, c);
        self.cursor += 1;
        EditOutcome::Redraw
    }

    fn enter(&mut self) -> EditOutcome {
        let line = self.text();
        self.clear();
        EditOutcome::Line(line)
    }

    fn backspace(&mut self) -> EditOutcome {
        if self.cursor == 0 {
            return EditOutcome::None;
        }
        self.cursor -= 1;
        self.buf.remove(self.cursor);
        EditOutcome::Redraw
    }

    fn delete(&mut self) -> EditOutcome {
        if self.cursor >= self.buf.len() {
            return EditOutcome::None;
        }
        self.buf.remove(self.cursor);
        EditOutcome::Redraw
    }

    fn move_to(&mut self, pos: usize) -> EditOutcome {
        let pos = pos.min(self.buf.len());
        if pos == self.cursor {
            return EditOutcome::None;
        }
        self.cursor = pos;
        EditOutcome::Redraw
    }

    fn left(&mut self) -> EditOutcome {
        self.move_to(self.cursor.saturating_sub(1))
    }

    fn right(&mut self) -> EditOutcome {
        self.move_to(self.cursor + 1)
    }

    /// One byte inside an escape sequence.
    fn escape_byte(&mut self, b: u8) -> EditOutcome {
        match std::mem::replace(&mut self.esc, Esc::Ground) {
            Esc::Ground => EditOutcome::None,
            Esc::Start => {
                match b {
                    b'[' => self.esc = Esc::Csi(Vec::new()),
                    b'O' => self.esc = Esc::Ss3,
                    b']' | b'P' | b'X' | b'^' | b'_' => self.esc = Esc::Str,
                    0x20..=0x2f => self.esc = Esc::Inter,
                    // ESC ESC: the first was a lone Esc key; start over with the second.
                    0x1b => self.esc = Esc::Start,
                    // Alt+key and other two-byte escapes: consumed.
                    _ => {}
                }
                EditOutcome::None
            }
            Esc::Ss3 => match b {
                b'H' => self.move_to(0),
                b'F' => self.move_to(self.buf.len()),
                b'D' => self.left(),
                b'C' => self.right(),
                _ => EditOutcome::None,
            },
            Esc::Csi(mut params) => match b {
                0x20..=0x3f => {
                    params.push(b);
                    self.esc = Esc::Csi(params);
                    EditOutcome::None
                }
                0x40..=0x7e => self.csi_final(&params, b),
                // A malformed sequence: abandon it silently.
                _ => EditOutcome::None,
            },
            Esc::Str => {
                match b {
                    0x07 => {}
                    0x1b => self.esc = Esc::StrMaybeEnd,
                    _ => self.esc = Esc::Str,
                }
                EditOutcome::None
            }
            Esc::StrMaybeEnd => {
                if b != b'\\' {
                    self.esc = Esc::Str;
                }
                EditOutcome::None
            }
            Esc::Inter => {
                if (0x20..=0x2f).contains(&b) {
                    self.esc = Esc::Inter;
                }
                EditOutcome::None
            }
        }
    }

    /// A complete CSI sequence with parameter bytes `params` and final byte `fin`.
    fn csi_final(&mut self, params: &[u8], fin: u8) -> EditOutcome {
        // Modifiers (`ESC[1;5D`) do not change what an arrow does here.
        let first: Option<u32> = std::str::from_utf8(params)
            .ok()
            .and_then(|p| p.split(';').next())
            .and_then(|p| p.parse().ok());
        match fin {
            b'D' => self.left(),
            b'C' => self.right(),
            b'H' => self.move_to(0),
            b'F' => self.move_to(self.buf.len()),
            b'~' => match first {
                Some(1) | Some(7) => self.move_to(0),
                Some(4) | Some(8) => self.move_to(self.buf.len()),
                Some(3) => self.delete(),
                // 200~/201~ bracketed paste markers, F-keys, Insert, PgUp/PgDn: consumed.
                _ => EditOutcome::None,
            },
            // ↑ ↓ and everything else: nothing.
            _ => EditOutcome::None,
        }
    }
}

/// Terminal columns of one character in the line (what the terminal renders; 0 for
/// combining marks).
#[cfg(test)]
fn char_width(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ed(input: &str) -> LineEditor {
        let mut e = LineEditor::new();
        e.feed(input.as_bytes());
        e
    }

    #[test]
    fn printable_and_cjk_insert_with_widths() {
        let mut e = LineEditor::new();
        assert_eq!(e.feed("ab中文".as_bytes()), vec![EditOutcome::Redraw]);
        assert_eq!(e.text(), "ab中文");
        assert_eq!(e.cursor(), 4);
        assert_eq!(e.display_width(), 6);
        assert_eq!(e.cursor_column(), 6);
    }

    #[test]
    fn utf8_split_across_feeds_is_assembled() {
        let bytes = "中".as_bytes(); // e4 b8 ad
        let mut e = LineEditor::new();
        assert!(e.feed(&bytes[..1]).is_empty());
        assert!(e.feed(&bytes[1..2]).is_empty());
        assert_eq!(e.text(), "");
        assert_eq!(e.feed(&bytes[2..]), vec![EditOutcome::Redraw]);
        assert_eq!(e.text(), "中");
        // A 4-byte character byte by byte.
        for (i, b) in "😀".as_bytes().iter().enumerate() {
            let out = e.feed_byte(*b);
            assert_eq!(out == EditOutcome::Redraw, i == 3);
        }
        assert_eq!(e.text(), "中😀");
    }

    #[test]
    fn broken_utf8_is_dropped_not_inserted() {
        let mut e = LineEditor::new();
        e.feed(&[0xe4, 0xb8, b'a']); // cut short by an ASCII byte
        e.feed(&[0x80, 0xff, 0xc0, 0xaf]); // stray continuation, invalid leads
        assert_eq!(e.text(), "a");
        // Overlong encoding of '/' (e0 80 af) is rejected by the decoder.
        e.feed(&[0xe0, 0x80, 0xaf]);
        assert_eq!(e.text(), "a");
        // U+0085 (C1 NEL) encoded as UTF-8 is a control: ignored.
        e.feed("\u{85}".as_bytes());
        assert_eq!(e.text(), "a");
    }

    #[test]
    fn backspace_deletes_one_cjk_character_per_press() {
        let mut e = ed("你好世界");
        assert_eq!(e.feed(&[0x7f]), vec![EditOutcome::Redraw]);
        assert_eq!(e.text(), "你好世");
        assert_eq!(e.display_width(), 6);
        e.feed(&[0x08]); // Ctrl+H
        assert_eq!(e.text(), "你好");
        assert_eq!(e.cursor_column(), 4);
        e.feed(&[0x7f, 0x7f]);
        assert_eq!(e.text(), "");
        assert!(
            e.feed(&[0x7f]).is_empty(),
            "backspace on empty does nothing"
        );
    }

    #[test]
    fn arrows_move_and_insert_in_the_middle() {
        let mut e = ed("你好");
        assert_eq!(e.feed(b"\x1b[D"), vec![EditOutcome::Redraw]);
        assert_eq!(e.cursor(), 1);
        assert_eq!(e.cursor_column(), 2);
        e.feed("们".as_bytes());
        assert_eq!(e.text(), "你们好");
        e.feed(b"\x1b[C\x1b[C"); // past the end stays at the end
        assert_eq!(e.cursor(), 3);
        assert_eq!(e.cursor_column(), 6);
        e.feed(b"\x1bOD"); // SS3 form
        assert_eq!(e.cursor(), 2);
        e.feed(b"\x1b[1;5D"); // with a modifier
        assert_eq!(e.cursor(), 1);
        e.feed(&[0x7f]);
        assert_eq!(e.text(), "们好");
    }

    #[test]
    fn home_and_end_in_every_form() {
        for (home, end) in [
            (&b"\x1b[H"[..], &b"\x1b[F"[..]),
            (b"\x1b[1~", b"\x1b[4~"),
            (b"\x1b[7~", b"\x1b[8~"),
            (b"\x1bOH", b"\x1bOF"),
            (b"\x01", b"\x05"), // Ctrl+A / Ctrl+E
        ] {
            let mut e = ed("中文ab");
            assert_eq!(e.feed(home), vec![EditOutcome::Redraw], "{home:?}");
            assert_eq!((e.cursor(), e.cursor_column()), (0, 0));
            e.feed("前".as_bytes());
            assert_eq!(e.text(), "前中文ab");
            assert_eq!(e.feed(end), vec![EditOutcome::Redraw], "{end:?}");
            assert_eq!((e.cursor(), e.cursor_column()), (5, 8));
        }
    }

    #[test]
    fn delete_removes_the_character_after_the_cursor() {
        let mut e = ed("中文字");
        e.feed(b"\x1b[H");
        assert_eq!(e.feed(b"\x1b[3~"), vec![EditOutcome::Redraw]);
        assert_eq!(e.text(), "文字");
        assert_eq!(e.cursor(), 0);
        e.feed(b"\x1b[F");
        assert!(
            e.feed(b"\x1b[3~").is_empty(),
            "delete at the end does nothing"
        );
        assert_eq!(e.text(), "文字");
    }

    #[test]
    fn ctrl_u_clears_the_line() {
        let mut e = ed("要清掉的字");
        e.feed(b"\x1b[D");
        assert_eq!(e.feed(&[0x15]), vec![EditOutcome::Redraw]);
        assert_eq!(e.text(), "");
        assert_eq!((e.cursor(), e.display_width()), (0, 0));
    }

    #[test]
    fn ctrl_d_is_eof_only_on_an_empty_line() {
        let mut e = ed("中");
        assert!(e.feed(&[0x04]).is_empty());
        assert_eq!(e.text(), "中");
        e.feed(&[0x7f]);
        assert_eq!(e.feed(&[0x04]), vec![EditOutcome::Eof]);
    }

    #[test]
    fn up_and_down_do_nothing() {
        let mut e = ed("中文");
        assert!(e.feed(b"\x1b[A\x1b[B\x1bOA\x1bOB").is_empty());
        assert_eq!((e.text().as_str(), e.cursor()), ("中文", 2));
    }

    #[test]
    fn escape_sequences_are_consumed_whole() {
        let mut e = LineEditor::new();
        e.feed(b"a\x1b[15~b\x1b[200~c\x1b[201~d\x1b]0;t\x07e\x1bxf\x1b(Bg");
        e.feed(b"\x1b[?1;2c"); // a terminal reply
        assert_eq!(e.text(), "abcdefg");
    }

    #[test]
    fn other_control_characters_are_ignored() {
        let mut e = ed("中");
        assert!(e
            .feed(&[0x00, 0x02, 0x03, 0x06, 0x07, 0x09, 0x0b, 0x0c, 0x1f])
            .is_empty());
        assert_eq!(e.text(), "中");
    }

    #[test]
    fn enter_yields_the_line_and_clears() {
        let mut e = ed("你好");
        assert_eq!(e.feed(b"\r"), vec![EditOutcome::Line("你好".into())]);
        assert!(e.is_empty());
        assert_eq!(e.cursor_column(), 0);
        // CR LF is one Enter; an empty Enter is an empty line.
        assert_eq!(e.feed(b"x\r\n"), vec![EditOutcome::Line("x".into())]);
        assert_eq!(e.feed(b"\n"), vec![EditOutcome::Line(String::new())]);
        // A paste of several lines.
        assert_eq!(
            e.feed("一\n二\n三".as_bytes()),
            vec![
                EditOutcome::Line("一".into()),
                EditOutcome::Line("二".into()),
                EditOutcome::Redraw
            ]
        );
        assert_eq!(e.text(), "三");
    }

    #[test]
    fn lone_escape_can_be_cancelled() {
        let mut e = LineEditor::new();
        e.feed(b"\x1b");
        assert!(e.cancel_pending_escape());
        e.feed(b"a");
        assert_eq!(e.text(), "a");
        assert!(!e.cancel_pending_escape());
    }

    #[test]
    fn sequence_split_across_feeds_is_still_consumed() {
        let mut e = ed("中文");
        assert!(e.feed(b"\x1b").is_empty());
        assert!(e.feed(b"[").is_empty());
        assert_eq!(e.feed(b"D"), vec![EditOutcome::Redraw]);
        assert_eq!(e.cursor(), 1);
        assert_eq!(e.text(), "中文");
    }
}
