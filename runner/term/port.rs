//! [`OutputPort`]: the one writer to the terminal (seed 000 "常驻在最下面的输入提示符": "_say()
//! 是唯一的输出口,每次输出前先擦掉提示符、输出完再重画").
//!
//! The bottom of the screen is the *bottom area*: the spinner lines (progress), then the
//! resident prompt with the half-typed text and the cursor in its column. Every output erases
//! the bottom area, prints its lines above it, and draws the bottom area again, so the prompt is
//! never pushed up the screen by event output and the half-typed text stays visible.
//!
//! Geometry is exact for wrapped prompts: the idle prompt alone is 68 columns, so on an
//! 80-column terminal a few typed characters wrap it. [`place`] simulates the terminal's
//! placement (a wide character that does not fit in the last column moves to the next row;
//! the cursor after a full row is in the "pending wrap" state) and the port moves the cursor
//! with relative motions only (`ESC[nA`, `CR`, `ESC[nC`), erasing with `ESC[J`.
//!
//! Two modes. *Screen* (stdout is a terminal): prompt, spinners, flowerbox's own SGR when
//! colour is on. *Plain* (pipe, file): lines only, every SGR removed, no prompt, no spinner,
//! no cursor motion. The port writes through a [`Terminal`] (the output boundary): untrusted
//! text is cleaned there in both modes, and the port's colours and cursor motions are typed
//! values ([`Style`], [`Control`]), never bytes it assembles.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use unicode_width::UnicodeWidthChar;

use super::render::{prompt_text, INTERRUPT_INPUT_PROMPT};
use super::sanitize::{fit, sanitize, Style};
use crate::shown::{Control, Line, Terminal};

/// Terminal columns, asked at every redraw (the terminal may be resized).
pub type Columns = Arc<dyn Fn() -> usize + Send + Sync>;
/// Whether a question is pending (decides the prompt text), asked at every redraw.
pub type QuestionPending = Arc<dyn Fn() -> bool + Send + Sync>;

/// Which prompt the last line shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// No prompt (plain mode, line-mode input, before the input thread starts, after EOF).
    Hidden,
    /// The resident prompt: [`super::render::ANSWER_PROMPT`] while a question is pending,
    /// [`super::render::IDLE_PROMPT`] otherwise.
    Resident,
    /// After the first Ctrl-C: [`INTERRUPT_INPUT_PROMPT`] (`> `).
    Interrupt,
}

/// How the port writes.
#[derive(Clone)]
pub struct PortConfig {
    /// Screen mode (stdout is a terminal): prompt, spinners, cursor motion. `false` = plain.
    pub screen: bool,
    /// Emit flowerbox's SGR colours (screen mode only).
    pub color: bool,
    /// Terminal columns.
    pub columns: Columns,
    /// Whether a question is pending.
    pub question_pending: QuestionPending,
}

impl fmt::Debug for PortConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortConfig")
            .field("screen", &self.screen)
            .field("color", &self.color)
            .field("columns", &(self.columns)())
            .finish_non_exhaustive()
    }
}

/// Where the cursor and the end of "prompt + input" land on a `cols`-wide terminal, in rows
/// relative to the prompt's first row (see [`place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Row of the last character written.
    pub end_row: usize,
    /// The text filled its last row exactly: the terminal is in the pending-wrap state, and a
    /// cursor at the end needs a forced line break (`CR LF`) to be shown on the next row.
    pub end_full: bool,
    /// Row of the cursor.
    pub cursor_row: usize,
    /// Column of the cursor (0-based).
    pub cursor_col: usize,
}

/// Terminal width of one character (ambiguous 1, as xterm and tmux render by default).
fn char_width(c: char) -> usize {
    UnicodeWidthChar::width(c).unwrap_or(0)
}

/// Simulates how a terminal places `prompt` (plain, no SGR) followed by `input`, with the
/// cursor before the `cursor`-th character of `input`. Pure; the redraw sequences follow
/// from it.
pub fn place(prompt: &str, input: &str, cursor: usize, cols: usize) -> Placement {
    let cols = cols.max(1);
    let prompt_len = prompt.chars().count();
    let target = prompt_len + cursor.min(input.chars().count());
    let (mut row, mut col) = (0usize, 0usize);
    let mut at: Option<(usize, usize)> = None;
    for (i, c) in prompt.chars().chain(input.chars()).enumerate() {
        let w = char_width(c);
        if i == target {
            at = Some(if col + w.max(1) > cols {
                (row + 1, 0)
            } else {
                (row, col)
            });
        }
        if w == 0 {
            continue;
        }
        if col + w > cols {
            row += 1;
            col = 0;
        }
        col += w;
    }
    let end_full = col == cols && (prompt_len + input.chars().count()) > 0;
    let (cursor_row, cursor_col) = at.unwrap_or(if end_full { (row + 1, 0) } else { (row, col) });
    Placement {
        end_row: row,
        end_full,
        cursor_row,
        cursor_col,
    }
}

/// The mutable side of the port, behind one lock.
struct Inner {
    out: Terminal,
    config: PortConfig,
    prompt: PromptKind,
    /// The half-typed text and the cursor in characters.
    input: String,
    cursor: usize,
    /// Spinner lines by id (drawn in id order above the prompt).
    spinners: BTreeMap<u64, String>,
    /// The bottom area is on screen.
    drawn: bool,
    /// Rows from the top of the drawn bottom area down to the cursor.
    cursor_row: usize,
    /// Write failures (a hung-up terminal); counted, never raised into the run.
    write_errors: u64,
}

/// The one writer. Cheap to clone; every clone is the same port. Thread-safe: the event sink
/// (runtime tasks), the input thread, spinner ticks and the driver all write through it.
#[derive(Clone)]
pub struct OutputPort {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for OutputPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        f.debug_struct("OutputPort")
            .field("config", &g.config)
            .field("prompt", &g.prompt)
            .finish_non_exhaustive()
    }
}

impl OutputPort {
    /// A port writing to `out`, through the output boundary ([`Terminal`]). The prompt starts
    /// hidden.
    pub fn new(out: Box<dyn Write + Send>, config: PortConfig) -> Self {
        Self::with_terminal(Terminal::new(out), config)
    }

    /// A port writing to a boundary writer ([`crate::shown::stdout`] for the console).
    pub fn with_terminal(out: Terminal, config: PortConfig) -> Self {
        OutputPort {
            inner: Arc::new(Mutex::new(Inner {
                out,
                config,
                prompt: PromptKind::Hidden,
                input: String::new(),
                cursor: 0,
                spinners: BTreeMap::new(),
                drawn: false,
                cursor_row: 0,
                write_errors: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Screen mode (prompt and spinners are drawn).
    pub fn is_screen(&self) -> bool {
        self.lock().config.screen
    }

    /// Colours are on.
    pub fn color(&self) -> bool {
        let g = self.lock();
        g.config.screen && g.config.color
    }

    /// Current terminal columns (80 in plain mode when unknown).
    pub fn columns(&self) -> usize {
        (self.lock().config.columns)()
    }

    /// Prints lines produced by [`super::render`] (laid out and styled by flowerbox; their
    /// text is cleaned again on the way out). Styles show only with colour in screen mode.
    pub fn print_rendered<L: Clone + Into<Line>>(&self, lines: &[L]) {
        let lines: Vec<Line> = lines.iter().cloned().map(Into::into).collect();
        self.lock().output(&lines);
    }

    /// Prints untrusted text: every line sanitised (no escape sequence survives), embedded
    /// newlines split into lines, tabs as four spaces. For the `-v` credential print and
    /// anything else a driver shows.
    pub fn print_lines<S: AsRef<str>>(&self, lines: &[S]) {
        let lines: Vec<Line> = lines
            .iter()
            .flat_map(|l| {
                sanitize(l.as_ref())
                    .replace('\t', "    ")
                    .split('\n')
                    .map(Line::from)
                    .collect::<Vec<_>>()
            })
            .collect();
        self.lock().output(&lines);
    }

    /// Prints one untrusted line in a flowerbox style (sanitised first).
    #[cfg(test)]
    pub(crate) fn print_styled(&self, style: Style, text: &str) {
        let text = sanitize(text).replace(['\n', '\t'], " ");
        self.lock().output(&[Line::styled(style, text)]);
    }

    /// Sets the half-typed text and the cursor (in characters) and redraws the prompt.
    pub fn set_input(&self, text: &str, cursor: usize) {
        let mut g = self.lock();
        g.input = text.to_string();
        g.cursor = cursor.min(g.input.chars().count());
        g.refresh();
    }

    /// Enter: leaves "prompt + text" on screen as a line of its own (what you said stays
    /// above) and empties the input. No-op on the screen in plain mode.
    pub fn commit_input(&self, text: &str) {
        let mut g = self.lock();
        g.input.clear();
        g.cursor = 0;
        if !g.config.screen || g.prompt == PromptKind::Hidden {
            g.refresh();
            return;
        }
        let line = g
            .prompt_line()
            .with(None, &sanitize(text).replace(['\n', '\t'], " "));
        g.output(&[line]);
    }

    /// Switches the prompt and redraws.
    pub fn set_prompt(&self, kind: PromptKind) {
        let mut g = self.lock();
        g.prompt = kind;
        g.refresh();
    }

    /// The prompt shown.
    pub fn prompt(&self) -> PromptKind {
        self.lock().prompt
    }

    /// Shows (`Some`) or removes (`None`) spinner line `id` (plain text; drawn dim, cut to the
    /// width). Ignored in plain mode.
    pub fn set_spinner(&self, id: u64, line: Option<String>) {
        let mut g = self.lock();
        if !g.config.screen {
            return;
        }
        let changed = match line {
            Some(l) => {
                let l = sanitize(&l).replace(['\n', '\t'], " ");
                g.spinners.insert(id, l.clone()).as_deref() != Some(l.as_str())
            }
            None => g.spinners.remove(&id).is_some(),
        };
        if changed {
            g.refresh();
        }
    }

    /// Redraws the bottom area (after the question state changed, for instance).
    pub fn redraw(&self) {
        self.lock().refresh();
    }

    /// Removes the bottom area from the screen for good (prompt hidden, spinners gone), so
    /// the shell's prompt starts on a clean line. Used at the end of a run.
    pub fn clear_bottom(&self) {
        let mut g = self.lock();
        g.prompt = PromptKind::Hidden;
        g.spinners.clear();
        g.input.clear();
        g.cursor = 0;
        g.refresh();
    }
}

impl Inner {
    /// Counts a failed write (a hung-up terminal): never raised into the run.
    fn count(&mut self, r: std::io::Result<()>) {
        if r.is_err() {
            self.write_errors += 1;
        }
    }

    fn text(&mut self, s: &str) {
        let r = self.out.text(s);
        self.count(r);
    }

    fn line(&mut self, l: &Line) {
        let color = self.config.screen && self.config.color;
        let r = self.out.line(l, color);
        self.count(r);
    }

    fn control(&mut self, c: Control) {
        let r = self.out.control(c);
        self.count(r);
    }

    fn flush(&mut self) {
        if self.out.flush().is_err() {
            self.write_errors += 1;
        }
    }

    /// The prompt as drawn, empty when hidden.
    fn prompt_line(&self) -> Line {
        match self.prompt {
            PromptKind::Hidden => Line::new(),
            PromptKind::Interrupt => Line::plain(INTERRUPT_INPUT_PROMPT),
            PromptKind::Resident => prompt_text((self.config.question_pending)()),
        }
    }

    /// Erases the drawn bottom area; the cursor ends at its first row, column 0.
    fn erase(&mut self) {
        if !self.drawn {
            return;
        }
        self.control(Control::Up(self.cursor_row));
        self.control(Control::Cr);
        self.control(Control::EraseDown);
        self.drawn = false;
        self.cursor_row = 0;
    }

    /// Draws spinners and prompt at the cursor (which is at column 0 of an empty row).
    fn draw_bottom(&mut self) {
        let cols = (self.config.columns)().max(1);
        let mut rows = 0;
        let spinners: Vec<String> = self.spinners.values().cloned().collect();
        for s in spinners {
            let line = Line::styled(Style::Dim, fit(&s, cols.saturating_sub(1).max(1)));
            self.line(&line);
            self.control(Control::CrLf);
            rows += 1;
        }
        if self.prompt == PromptKind::Hidden {
            self.cursor_row = rows;
            self.drawn = rows > 0;
            return;
        }
        let prompt = self.prompt_line();
        // Placed as shown: what the boundary makes of the half-typed text (a pasted bidi or
        // zero-width character is drawn as its mark), the cursor after the same characters.
        let input = sanitize(&self.input);
        let before: String = self.input.chars().take(self.cursor).collect();
        let cursor = sanitize(&before).chars().count();
        self.line(&prompt);
        self.text(&input);
        let p = place(prompt.as_str(), &input, cursor, cols);
        let mut at = p.end_row;
        if p.cursor_row > p.end_row {
            // The cursor is after a full last row: force the wrap so it shows below.
            self.control(Control::CrLf);
            at += 1;
        }
        self.control(Control::Up(at.saturating_sub(p.cursor_row)));
        self.control(Control::Cr);
        self.control(Control::Right(p.cursor_col));
        self.cursor_row = rows + p.cursor_row;
        self.drawn = true;
    }

    /// Prints finished lines above the bottom area.
    fn output(&mut self, lines: &[Line]) {
        if !self.config.screen {
            for l in lines {
                self.line(l);
                self.text("\n");
            }
            self.flush();
            return;
        }
        self.erase();
        for l in lines {
            self.line(l);
            self.control(Control::CrLf);
        }
        self.draw_bottom();
        self.flush();
    }

    /// Redraws the bottom area only.
    fn refresh(&mut self) {
        if !self.config.screen {
            return;
        }
        self.erase();
        self.draw_bottom();
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::render::{ANSWER_PROMPT, IDLE_PROMPT};
    use std::sync::atomic::{AtomicBool, Ordering};

    // An in-memory terminal output.
    use flowerbox_testkit::SharedBuf as Buf;

    fn port(screen: bool, cols: usize, pending: Arc<AtomicBool>) -> (OutputPort, Buf) {
        let buf = Buf::default();
        let p = OutputPort::new(
            Box::new(buf.clone()),
            PortConfig {
                screen,
                color: false,
                columns: Arc::new(move || cols),
                question_pending: Arc::new(move || pending.load(Ordering::SeqCst)),
            },
        );
        (p, buf)
    }

    #[test]
    fn place_without_wrap() {
        // "> " + "ab", cursor between a and b.
        let p = place("> ", "ab", 1, 80);
        assert_eq!(
            p,
            Placement {
                end_row: 0,
                end_full: false,
                cursor_row: 0,
                cursor_col: 3
            }
        );
        // CJK: each character two columns.
        let p = place("> ", "你好吗", 2, 80);
        assert_eq!((p.cursor_row, p.cursor_col), (0, 6));
        assert_eq!(place("> ", "你好吗", 3, 80).cursor_col, 8);
    }

    #[test]
    fn place_wraps_wide_characters_at_the_edge() {
        // 9 columns: "> " (2) + 你好吗 (6) = 8, then 啊 does not fit in column 9: next row.
        let p = place("> ", "你好吗啊", 4, 9);
        assert_eq!(p.end_row, 1);
        assert_eq!((p.cursor_row, p.cursor_col), (1, 2));
        // Cursor before 啊: it will be drawn on the next row, so the cursor shows there.
        let p = place("> ", "你好吗啊", 3, 9);
        assert_eq!((p.cursor_row, p.cursor_col), (1, 0));
    }

    #[test]
    fn place_full_last_row_needs_a_forced_wrap() {
        // "> " + "abcdefgh" fills 10 columns exactly.
        let p = place("> ", "abcdefgh", 8, 10);
        assert!(p.end_full);
        assert_eq!(p.end_row, 0);
        assert_eq!((p.cursor_row, p.cursor_col), (1, 0));
        // Cursor inside: no forced wrap needed.
        let p = place("> ", "abcdefgh", 7, 10);
        assert_eq!((p.cursor_row, p.cursor_col), (0, 9));
    }

    #[test]
    fn the_idle_prompt_alone_is_68_columns() {
        let p = place(IDLE_PROMPT, "", 0, 200);
        assert_eq!(p.cursor_col, 68);
        let p = place(IDLE_PROMPT, "写个测试", 4, 80);
        assert_eq!((p.cursor_row, p.cursor_col), (0, 76));
        let p = place(IDLE_PROMPT, "写个测试再写文档", 8, 80);
        // 68 + 8 = 76, 再写 fills 80, 文 wraps: row 1, then 文档 = 4 columns.
        assert_eq!((p.end_row, p.cursor_row, p.cursor_col), (1, 1, 4));
    }

    #[test]
    fn a_line_erases_the_prompt_and_redraws_it_with_the_half_typed_text() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Resident);
        assert_eq!(buf.take(), format!("{IDLE_PROMPT}\r\x1b[68C"));
        p.set_input("你好", 2);
        assert_eq!(buf.take(), format!("\r\x1b[J{IDLE_PROMPT}你好\r\x1b[72C"));
        p.print_rendered(&["  * Bash ls"]);
        assert_eq!(
            buf.take(),
            format!("\r\x1b[J  * Bash ls\r\n{IDLE_PROMPT}你好\r\x1b[72C")
        );
        // Cursor moved left over one CJK character: two columns back.
        p.set_input("你好", 1);
        assert_eq!(buf.take(), format!("\r\x1b[J{IDLE_PROMPT}你好\r\x1b[70C"));
    }

    #[test]
    fn the_prompt_text_follows_the_pending_question() {
        let pending = Arc::new(AtomicBool::new(false));
        let (p, buf) = port(true, 120, pending.clone());
        p.set_prompt(PromptKind::Resident);
        buf.take();
        pending.store(true, Ordering::SeqCst);
        p.print_rendered(&["  ? 要不要测试?"]);
        let out = buf.take();
        assert!(
            out.ends_with(&format!("{ANSWER_PROMPT}\r\x1b[36C")),
            "{out:?}"
        );
        p.set_prompt(PromptKind::Interrupt);
        assert_eq!(buf.take(), "\r\x1b[J> \r\x1b[2C");
    }

    #[test]
    fn a_wrapped_prompt_is_erased_from_its_first_row() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Resident);
        p.set_input("写个测试再写文档", 8);
        buf.take();
        p.print_rendered(&["x"]);
        let out = buf.take();
        // Up one row (the cursor is on the second row of the prompt), then erase.
        assert!(out.starts_with("\x1b[1A\r\x1b[J"), "{out:?}");
        assert!(out.ends_with(&format!("{IDLE_PROMPT}写个测试再写文档\r\x1b[4C")));
    }

    #[test]
    fn a_full_row_forces_the_wrap_and_is_erased_from_the_right_row() {
        let (p, buf) = port(true, 10, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Interrupt);
        p.set_input("abcdefgh", 8);
        let out = buf.take();
        assert!(out.ends_with("> abcdefgh\r\n\r"), "{out:?}");
        p.set_input("abcdefgh", 3);
        let out = buf.take();
        assert!(
            out.starts_with("\x1b[1A\r\x1b[J> abcdefgh\r\x1b[5C"),
            "{out:?}"
        );
    }

    #[test]
    fn spinners_sit_above_the_prompt_and_are_erased_with_it() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Interrupt);
        p.set_spinner(1, Some("- 等模型回话 3s".into()));
        buf.take();
        p.print_rendered(&["line"]);
        assert_eq!(
            buf.take(),
            "\x1b[1A\r\x1b[Jline\r\n- 等模型回话 3s\r\n> \r\x1b[2C"
        );
        p.set_spinner(1, None);
        assert_eq!(buf.take(), "\x1b[1A\r\x1b[J> \r\x1b[2C");
    }

    #[test]
    fn commit_leaves_what_was_said_on_screen() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Interrupt);
        p.set_input("别改 Makefile", 11);
        buf.take();
        p.commit_input("别改 Makefile");
        assert_eq!(buf.take(), "\r\x1b[J> 别改 Makefile\r\n> \r\x1b[2C");
    }

    #[test]
    fn plain_mode_prints_lines_only() {
        let (p, buf) = port(false, 80, Arc::new(AtomicBool::new(true)));
        p.set_prompt(PromptKind::Resident);
        p.set_input("abc", 3);
        p.set_spinner(1, Some("spin".into()));
        p.print_rendered(&["\x1b[32m  + 完成\x1b[0m"]);
        p.print_lines(&["evil \x1b[2J\x1b]0;title\x07text\nsecond"]);
        assert_eq!(buf.take(), "  + 完成\nevil ␛␛text\nsecond\n");
    }

    #[test]
    fn untrusted_lines_cannot_move_the_cursor() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.print_lines(&["a\x1b[10;10Hb\rc"]);
        assert_eq!(buf.take(), "a␛b␍c\r\n");
        p.print_styled(Style::Red, "x\x1b[31m");
        assert_eq!(buf.take(), "x\r\n");
    }

    #[test]
    fn clear_bottom_removes_the_prompt() {
        let (p, buf) = port(true, 80, Arc::new(AtomicBool::new(false)));
        p.set_prompt(PromptKind::Interrupt);
        p.set_input("ab", 2);
        buf.take();
        p.clear_bottom();
        assert_eq!(buf.take(), "\r\x1b[J");
        p.print_rendered(&["done"]);
        assert_eq!(buf.take(), "done\r\n");
    }
}
