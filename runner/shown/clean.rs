//! The one sanitiser: [`clean`] turns text that an agent, a model, a container, a workspace file
//! or a server produced into text that is safe to put in front of a person — on a terminal,
//! in the log, in a notes file a later `cat` replays.
//!
//! The rules, one per kind of character (the result never holds a C0 control but `\n` and
//! `\t`, no DEL, no C1 control, no bidi control and no invisible character):
//!
//! | input | becomes |
//! |---|---|
//! | `\n`, `\t` | kept |
//! | `\r\n` | `\n` (a line ending, not an overwrite) |
//! | a complete escape sequence: CSI (`ESC [` … final, 8-bit `U+009B`), OSC/DCS/SOS/PM/APC strings (`ESC ]` … BEL or ST, 8-bit forms), nF (`ESC ( B`) and two-character escapes (`ESC c`, `ESC 7`) | removed whole, [`ESCAPE_MARK`] `␛` in its place — none of it can act, and the reader sees something was there (seed 000: "清屏、移光标序列被整段吞掉") |
//! | an SGR sequence (`ESC [ 1;31 m`: colour only) | removed whole, no mark: it carries no text and compilers, `ls` and `git` emit it everywhere |
//! | an `ESC` that starts no complete sequence (a string without its terminator on the same line) | `␛`, and what follows is shown as text |
//! | any other C0 control (a lone `\r`, backspace, BEL, NUL …) and DEL | its Unicode control picture (`␍ ␈ ␇ ␀ ␡`), one column wide |
//! | any other C1 control (`U+0080–U+009F`) | `<U+0085>` |
//! | a bidi control (`U+061C`, `U+200E/F`, `U+202A–202E`, `U+2066–2069`) or an invisible character (zero-width space and joiners, word joiner, BOM, soft hyphen, Hangul fillers, tag characters, variation selectors, line and paragraph separators …) | `<U+202E>` |
//! | a text or emoji presentation selector (`U+FE0E`, `U+FE0F`) right after a visible character | kept (`⚠️`); a second one in a row is marked |
//!
//! A displayed line therefore reads as the bytes it came from: `r<U+200B>m` is not `rm`,
//! `safe␍rm -rf ~` is not `rm -rf ~`. Cleaning is idempotent (every mark is printable text),
//! and text that needs nothing is returned borrowed.

use std::borrow::Cow;

/// What stands where an escape sequence (or a lone `ESC`) was removed.
pub const ESCAPE_MARK: char = '\u{241b}';

/// The ESC character.
const ESC: char = '\u{1b}';

/// Text safe to show: see the module doc for the rules.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !needs_cleaning(text) {
        return Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    // The last character pushed was a visible one (a presentation selector may follow it).
    let mut after_visible = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' | '\t' => {
                out.push(c);
                after_visible = false;
                i += 1;
                continue;
            }
            '\r' if chars.get(i + 1) == Some(&'\n') => {
                i += 1;
                continue;
            }
            ESC => {
                i = match escape_end(&chars, i + 1) {
                    Some((end, sgr)) => {
                        if !sgr {
                            out.push(ESCAPE_MARK);
                        }
                        end
                    }
                    None => {
                        out.push(ESCAPE_MARK);
                        i + 1
                    }
                };
            }
            '\u{9b}' | '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => {
                let end = if c == '\u{9b}' {
                    csi_end(&chars, i + 1)
                } else {
                    string_end(&chars, i + 1).map(|e| (e, false))
                };
                i = match end {
                    Some((end, sgr)) => {
                        if !sgr {
                            out.push(ESCAPE_MARK);
                        }
                        end
                    }
                    None => {
                        push_code(&mut out, c);
                        i + 1
                    }
                };
            }
            c if (c as u32) < 0x20 => {
                out.push(char::from_u32(0x2400 + c as u32).unwrap_or(ESCAPE_MARK));
                i += 1;
            }
            '\u{7f}' => {
                out.push('\u{2421}');
                i += 1;
            }
            '\u{fe0e}' | '\u{fe0f}' if after_visible => {
                out.push(c);
                after_visible = false;
                i += 1;
                continue;
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) || is_hidden(c) => {
                push_code(&mut out, c);
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
        after_visible = true;
    }
    Cow::Owned(out)
}

/// `b` is a control byte, or the first byte of a character [`suspect`] may refuse (C1 controls
/// `C2 80–9F`, and the leads of every [`is_hidden`] range): text without one needs nothing,
/// and CJK text (leads `E4–E9`) is never decoded on the fast path.
const fn lead_of_suspect(b: u8) -> bool {
    matches!(
        b,
        0x00..=0x08 | 0x0b..=0x1f | 0x7f | 0xc2 | 0xcd | 0xd8 | 0xe1..=0xe3 | 0xef | 0xf0 | 0xf3
    )
}

/// [`lead_of_suspect`] for every byte value, so the fast path is one lookup per byte (also in
/// a debug build, which is what `scripts/demo.sh` installs).
static SUSPECT_LEAD: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = lead_of_suspect(b as u8);
        b += 1;
    }
    t
};

/// Whether [`clean`] has anything to do: a byte walk that decodes only the characters whose
/// first byte is a [`lead_of_suspect`] (those bytes never continue a character, so each is a
/// character boundary).
fn needs_cleaning(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !SUSPECT_LEAD[bytes[i] as usize] {
            i += 1;
            continue;
        }
        match text.get(i..).and_then(|rest| rest.chars().next()) {
            Some(c) if suspect(c) => return true,
            Some(c) => i += c.len_utf8(),
            None => return true,
        }
    }
    false
}

/// `c` may need [`clean`] to act (the fast path's test).
fn suspect(c: char) -> bool {
    let n = c as u32;
    (n < 0x20 && c != '\n' && c != '\t') || (0x7f..=0x9f).contains(&n) || is_hidden(c)
}

/// `<U+XXXX>` for a character that must not be shown as itself.
fn push_code(out: &mut String, c: char) {
    out.push_str(&format!("<U+{:04X}>", c as u32));
}

/// Bidi controls and characters a terminal draws as nothing (Unicode's default-ignorable code
/// points, the Hangul fillers drawn blank, the line and paragraph separators).
pub fn is_hidden(c: char) -> bool {
    matches!(
        c as u32,
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFFB
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// The end of the sequence an `ESC` at `i - 1` starts, and whether it is SGR; `None` when it
/// starts no complete sequence.
fn escape_end(chars: &[char], i: usize) -> Option<(usize, bool)> {
    match *chars.get(i)? {
        '[' => csi_end(chars, i + 1),
        ']' | 'P' | 'X' | '^' | '_' => string_end(chars, i + 1).map(|e| (e, false)),
        // nF escapes: intermediates 0x20–0x2F, then a final 0x30–0x7E (`ESC ( B`).
        '\u{20}'..='\u{2f}' => {
            let mut j = i;
            while matches!(chars.get(j), Some('\u{20}'..='\u{2f}')) {
                j += 1;
            }
            matches!(chars.get(j), Some('\u{30}'..='\u{7e}')).then_some((j + 1, false))
        }
        // Fp/Fe/Fs two-character escapes (`ESC 7`, `ESC M`, `ESC c`).
        '\u{30}'..='\u{7e}' => Some((i + 1, false)),
        _ => None,
    }
}

/// The end of a CSI body starting at `i` (parameters 0x30–0x3F, intermediates 0x20–0x2F, a
/// final 0x40–0x7E) and whether it is SGR (digits, `;` and `:` only, final `m`).
fn csi_end(chars: &[char], mut i: usize) -> Option<(usize, bool)> {
    let start = i;
    while let Some(&c) = chars.get(i) {
        match c {
            '\u{20}'..='\u{3f}' => i += 1,
            '\u{40}'..='\u{7e}' => {
                let sgr = c == 'm'
                    && chars[start..i]
                        .iter()
                        .all(|p| p.is_ascii_digit() || *p == ';' || *p == ':');
                return Some((i + 1, sgr));
            }
            _ => return None,
        }
    }
    None
}

/// The end of a string sequence's body starting at `i`: after its BEL or ST (`ESC \`,
/// `U+009C`) on the same line. A newline first, or no end, is no sequence: the body is text.
fn string_end(chars: &[char], mut i: usize) -> Option<usize> {
    while let Some(&c) = chars.get(i) {
        match c {
            '\u{7}' | '\u{9c}' => return Some(i + 1),
            ESC if chars.get(i + 1) == Some(&'\\') => return Some(i + 2),
            '\n' => return None,
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> String {
        clean(s).into_owned()
    }

    #[test]
    fn clean_text_is_borrowed_and_unchanged() {
        for s in ["中文 ok", "line1\n\tline2", "", "a — b · c"] {
            assert!(matches!(clean(s), Cow::Borrowed(_)), "{s:?}");
            assert_eq!(clean(s), s);
        }
        assert_eq!(clean("⚠️ careful"), "⚠️ careful");
    }

    #[test]
    fn sequences_go_whole_with_one_mark_and_colours_without_one() {
        assert_eq!(c("a\x1b[2Jb\x1b[10;20Hc\x1b[31md\x1b[0m"), "a␛b␛cd");
        assert_eq!(c("x\x1b[?1049hy"), "x␛y");
        assert_eq!(c("a\u{9b}2Jb\u{9b}1;32mc"), "a␛bc");
        assert_eq!(c("a\x1b]0;title\x07b"), "a␛b");
        assert_eq!(c("a\x1b]52;c;ZXZpbA==\x1b\\b"), "a␛b");
        assert_eq!(c("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b"), "a␛link␛b");
        assert_eq!(c("a\x1bPq#0;2;0;0;0\x1b\\b"), "a␛b");
        assert_eq!(c("a\x1b_apc\x1b\\b\x1b^pm\x07c"), "a␛b␛c");
        assert_eq!(c("a\u{9d}0;t\u{9c}b"), "a␛b");
        assert_eq!(c("a\x1bcb\x1b7c\x1b8d\x1bMe\x1b(Bf"), "a␛b␛c␛d␛e␛f");
    }

    #[test]
    fn an_escape_that_starts_nothing_complete_is_marked_and_the_rest_shown() {
        assert_eq!(c("a\x1b]0;never ends\nnext"), "a␛]0;never ends\nnext");
        assert_eq!(c("end\x1b"), "end␛");
        assert_eq!(c("a\x1b\u{4e2d}"), "a␛\u{4e2d}");
        assert_eq!(c("a\x1b[31\x1b[0mb"), "a␛[31b");
        assert_eq!(c("a\u{9b}"), "a<U+009B>");
    }

    #[test]
    fn lone_controls_become_pictures_and_crlf_a_newline() {
        assert_eq!(c("safe\rrm -rf ~"), "safe␍rm -rf ~");
        assert_eq!(c("HTTP/1.1 200 OK\r\nx\r\n"), "HTTP/1.1 200 OK\nx\n");
        assert_eq!(c("ab\x08\x08cd\x07\x00\x7f"), "ab␈␈cd␇␀␡");
        assert_eq!(c("a\u{85}b\u{8f}c"), "a<U+0085>b<U+008F>c");
    }

    #[test]
    fn bidi_and_invisible_characters_are_named() {
        assert_eq!(c("r\u{200b}m"), "r<U+200B>m");
        assert_eq!(
            c("ls \u{202e}txt.exe\u{202c}"),
            "ls <U+202E>txt.exe<U+202C>"
        );
        for ch in [
            '\u{061c}',
            '\u{200e}',
            '\u{200f}',
            '\u{202a}',
            '\u{2066}',
            '\u{2069}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{feff}',
            '\u{00ad}',
            '\u{3164}',
            '\u{e0041}',
            '\u{2028}',
            '\u{e0100}',
            '\u{fe00}',
        ] {
            let s = c(&format!("a{ch}b"));
            assert_eq!(s, format!("a<U+{:04X}>b", ch as u32));
        }
        // One presentation selector after a visible character is the emoji it asks for; more
        // are a hidden payload.
        assert_eq!(c("⚠\u{fe0f}"), "⚠\u{fe0f}");
        assert_eq!(c("⚠\u{fe0f}\u{fe0f}"), "⚠\u{fe0f}<U+FE0F>");
        assert_eq!(c("\u{fe0f}x"), "<U+FE0F>x");
        assert_eq!(c("a\n\u{fe0e}"), "a\n<U+FE0E>");
    }

    #[test]
    fn the_byte_prefilter_misses_no_suspect_character() {
        for n in 0..=0x10FFFFu32 {
            let Some(ch) = char::from_u32(n) else {
                continue;
            };
            if suspect(ch) {
                let mut buf = [0u8; 4];
                let first = ch.encode_utf8(&mut buf).as_bytes()[0];
                assert!(lead_of_suspect(first), "U+{n:04X}");
            }
        }
    }

    #[test]
    fn nothing_after_clean_can_act_and_cleaning_is_idempotent() {
        let nasty =
            "\x1b[2J\x1b[3J\x1b[H\x1b]0;x\x07\x1b]52;c;aGk=\x07\x1bP1$r\x1b\\\u{9b}1A\r\x1b\
                     \u{202e}\u{2066}\u{200b}\u{200d}\x08\x0b\x0c\x0e\x0f\u{85}\u{9c}\x1b[";
        let s = c(nasty);
        assert!(!s.chars().any(suspect), "{s:?}");
        assert!(!s.contains('\r') && !s.contains('\u{1b}'), "{s:?}");
        assert_eq!(c(&s), s);
    }
}
