//! What flowerbox shows a person passes through here: [`clean`] is the one sanitiser, and the
//! writers of this module are the only way flowerbox's bytes reach the places a person reads —
//! the terminal (both stdout and stderr, a TTY or a pipe: [`terminal`]), the log
//! `runs/flowerbox.log` ([`log_event`]), the notes and `INDEX.md` ([`notes`]) and the JSON
//! records ([`json`]).
//!
//! Every byte that comes from an agent, a model, a container, a workspace file or a server is
//! untrusted (DESIGN.md, threat model point 7). Callers do not sanitise: they write through
//! these types, which clean whatever text they are given, while flowerbox's own styling and
//! cursor work exist only as typed values ([`Style`], [`Control`]) that the boundary encodes.
//! clippy's `disallowed-methods` (`clippy.toml`) refuses `std::io::stdout`, `std::io::stderr`
//! and indicatif's own terminal targets outside this module, and the library denies the
//! `print!` family, so a new caller cannot skip the boundary without an `#[allow]` in review.

pub mod clean;
pub mod json;
pub mod notes;
pub mod terminal;

pub use clean::{clean, is_hidden, ESCAPE_MARK};
pub use terminal::{
    bar_target, columns, is_terminal, stderr, stdout, Control, Line, Stream, Style, Terminal,
};

/// What the log gets for one formatted `tracing` event: the text cleaned, and every newline
/// but the last shown as `␤`, so an event is one line and a message cannot forge another.
pub fn log_event(event: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(event);
    let text = clean(&text);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let mut out = body.replace('\n', "\u{2424}");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_event_is_one_clean_line() {
        let ev = "2026-01-01 WARN step=\"x\" message=evil\x1b]0;t\x07\nFAKE 2026 INFO ok\r\n";
        assert_eq!(
            String::from_utf8(log_event(ev.as_bytes())).unwrap(),
            "2026-01-01 WARN step=\"x\" message=evil␛␤FAKE 2026 INFO ok\n"
        );
    }
}
