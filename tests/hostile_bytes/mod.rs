//! Hostile terminal bytes for `tests/redteam_terminal.rs`: the payloads (everything a terminal
//! acts on, tagged so its way through flowerbox can be followed) and the scanners that look for
//! any of it in flowerbox's raw output, counting attempts and successes per source.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// -- the payloads --------------------------------------------------------------------------

/// Everything hostile a string can hold, between `<TAG>` and `<TAG-end>` so its way through
/// flowerbox can be followed.
pub fn payload(tag: &str) -> String {
    format!(
        "<{tag}>osc52\x1b]52;c;UFdORUQ=\x07 title\x1b]0;PWNED\x07\x1b]2;PWNED\x1b\\ \
         clear\x1b[2J\x1b[3J\x1b[H move\x1b[10;10H\x1b[5A\x1b[?25l\x1b[6n \
         c1\u{9b}2J\u{9d}0;PWNED\u{9c}\u{85} \
         bidi\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{200e}\u{200f}\u{61c}\u{202a}\u{202b}\u{202c}\u{202d} \
         zw\u{200b}\u{200c}\u{200d}\u{2060}\u{feff} \
         cr SAFE\rEVIL bs ab\x08\x08XY <{tag}-end>"
    )
}

/// A shorter payload that can be a file name (no `/`, under 255 bytes), with a raw `0x9b`.
pub fn name_payload(tag: &str) -> Vec<u8> {
    let mut b = format!(
        "<{tag}>\x1b]52;c;UFdORUQ=\x07\x1b]0;PWNED\x07\x1b[2J\x1b[H\u{9b}2J\u{202e}\u{2066}\u{200b}\
         \u{feff}SAFE\rEVIL ab\x08\x08XY raw"
    )
    .into_bytes();
    b.extend_from_slice(b"\x9b2J");
    b.extend_from_slice(format!("<{tag}-end>").as_bytes());
    b
}

/// `bytes` as a `printf` format that prints exactly them (every byte but letters, digits and
/// `<>-` as an octal escape).
pub fn printf_of(bytes: &[u8]) -> String {
    let mut s = String::from("printf '");
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"<>-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\{b:03o}"));
        }
    }
    s.push('\'');
    s
}

/// What a tool prints: the payload's bytes plus a raw `0x9b` (not UTF-8).
pub fn tool_output(tag: &str) -> Vec<u8> {
    let mut b = payload(tag).into_bytes();
    let end = b.len() - format!("<{tag}-end>").len();
    b.splice(end..end, b"raw\x9b2J ".iter().copied());
    b.push(b'\n');
    b
}

// -- scanning ------------------------------------------------------------------------------

/// The bidi and zero-width characters the payloads carry.
pub const HIDDEN: &[char] = &[
    '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', '\u{200e}', '\u{200f}', '\u{61c}',
    '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}',
    '\u{feff}',
];

/// A hostile character in bytes flowerbox wrote for a pipe or a file: a C0 control but `\t`
/// and `\n`, DEL, a C1 control, a bidi or zero-width character.
pub fn hostile(c: char) -> bool {
    (c < ' ' && c != '\n' && c != '\t') || ('\u{7f}'..='\u{9f}').contains(&c) || HIDDEN.contains(&c)
}

/// Offsets and descriptions of everything hostile in `bytes` (also every byte that is not
/// UTF-8: a raw `0x9b` is a C1 CSI to a terminal that is not in UTF-8 mode).
pub fn raw_hits(bytes: &[u8]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let (good, bad) = match std::str::from_utf8(&bytes[i..]) {
            Ok(_) => (bytes.len() - i, None),
            Err(e) => (e.valid_up_to(), Some(e.error_len().unwrap_or(1))),
        };
        let s = std::str::from_utf8(&bytes[i..i + good]).unwrap();
        for (j, c) in s.char_indices() {
            if hostile(c) {
                out.push((i + j, format!("{c:?}")));
            }
        }
        i += good;
        if let Some(n) = bad {
            out.push((i, format!("not UTF-8: {:02x?}", &bytes[i..i + n])));
            i += n;
        }
    }
    out
}

/// The escape sequences flowerbox itself writes to a terminal: its colours, the prompt's and
/// spinners' cursor motion and erasing.
pub fn own_sequence(rest: &[u8]) -> Option<usize> {
    let body = rest.strip_prefix(b"\x1b[")?;
    for own in [
        "0m", "1m", "2m", "31m", "32m", "33m", "34m", "35m", "36m", "1;36m", "1;33m", "J", "2K",
    ] {
        if body.starts_with(own.as_bytes()) {
            return Some(2 + own.len());
        }
    }
    let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
    let f = body.get(digits)?;
    (digits > 0 && b"ABCD".contains(f)).then_some(2 + digits + 1)
}

/// [`raw_hits`] for what a terminal received: flowerbox's own sequences (see [`own_sequence`])
/// and a CR that ends a line or starts cursor work are allowed; nothing else.
pub fn tty_hits(bytes: &[u8]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut masked = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0x1b => match own_sequence(&bytes[i..]) {
                Some(n) => {
                    masked[i..i + n].fill(b' ');
                    i += n;
                }
                None => {
                    let shown = String::from_utf8_lossy(&bytes[i..bytes.len().min(i + 12)]);
                    out.push((i, format!("escape {shown:?}")));
                    masked[i] = b' ';
                    i += 1;
                }
            },
            b'\r' => {
                if !matches!(bytes.get(i + 1), None | Some(b'\r' | b'\n' | 0x1b)) {
                    out.push((i, "CR that overwrites".into()));
                }
                masked[i] = b' ';
                i += 1;
            }
            _ => i += 1,
        }
    }
    out.extend(raw_hits(&masked));
    out
}

/// Where `tag`'s payloads landed in `bytes`: from `<TAG>` to its `<TAG-end>` (or a stretch
/// long enough for a payload cut on the way).
pub fn windows(bytes: &[u8], tag: &str) -> Vec<(usize, usize)> {
    let open = format!("<{tag}>");
    let close = format!("<{tag}-end>");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = find(&bytes[from..], open.as_bytes()) {
        let start = from + p;
        let end = match find(&bytes[start..], close.as_bytes()) {
            Some(q) if q < 4000 => start + q + close.len(),
            _ => (start + 1500).min(bytes.len()),
        };
        out.push((start, end));
        from = start + open.len();
    }
    out
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Attempts (payload windows found) and successes (windows with a hostile byte) per source.
#[derive(Default)]
pub struct Tally {
    /// source → (attempts, successes, where it got through, the sinks it reached).
    by_source: BTreeMap<
        String,
        (
            usize,
            usize,
            Vec<String>,
            std::collections::BTreeSet<String>,
        ),
    >,
    /// Hostile bytes outside every payload window: sink → hits.
    stray: Vec<String>,
}

impl Tally {
    /// Scans one sink for every tag in `tags`.
    pub fn scan(&mut self, sink: &str, bytes: &[u8], tty: bool, tags: &[&str]) {
        let hits = if tty {
            tty_hits(bytes)
        } else {
            raw_hits(bytes)
        };
        let mut attributed = vec![false; hits.len()];
        for tag in tags {
            let entry = self.by_source.entry(tag.to_string()).or_default();
            for (start, end) in windows(bytes, tag) {
                entry.0 += 1;
                entry.3.insert(sink.to_string());
                let inside: Vec<usize> = (0..hits.len())
                    .filter(|&k| (start..end).contains(&hits[k].0))
                    .collect();
                if !inside.is_empty() {
                    entry.1 += 1;
                    let kinds: std::collections::BTreeSet<&str> =
                        inside.iter().map(|&k| hits[k].1.as_str()).collect();
                    entry.2.push(format!(
                        "{sink}: {}",
                        kinds.into_iter().collect::<Vec<_>>().join(" ")
                    ));
                }
                for k in inside {
                    attributed[k] = true;
                }
            }
        }
        for (k, (at, what)) in hits.iter().enumerate() {
            if !attributed[k] {
                let ctx = String::from_utf8_lossy(
                    &bytes[at.saturating_sub(40)..(*at + 20).min(bytes.len())],
                );
                self.stray.push(format!("{sink} @{at}: {what} in {ctx:?}"));
            }
        }
    }

    /// `tag` reached `sink` (the source really was exercised there).
    pub fn reached(bytes: &[u8], tag: &str) -> bool {
        find(bytes, format!("<{tag}>").as_bytes()).is_some()
    }

    /// Prints the counts and fails on any success or stray hit.
    pub fn verdict(&self, test: &str) {
        let mut report = format!("{test}: attempts / successes per source\n");
        let (mut a, mut s) = (0, 0);
        for (tag, (attempts, successes, how, sinks)) in &self.by_source {
            let sinks: Vec<&str> = sinks.iter().map(String::as_str).collect();
            report.push_str(&format!(
                "  {tag:<12} {attempts:>3} / {successes}   ({})\n",
                sinks.join(", ")
            ));
            for h in how.iter().take(3) {
                report.push_str(&format!("      {h}\n"));
            }
            a += attempts;
            s += successes;
        }
        report.push_str(&format!("  {:<12} {a:>3} / {s}\n", "total"));
        for h in self.stray.iter().take(20) {
            report.push_str(&format!("  stray: {h}\n"));
        }
        eprintln!("{report}");
        assert!(
            s == 0 && self.stray.is_empty(),
            "hostile bytes got through:\n{report}"
        );
    }
}

/// Every file of `dir` (recursively) that flowerbox writes for people: `.md` and `.json`.
pub fn people_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() && !p.ends_with("spill") {
                stack.push(p);
            } else if t.is_file()
                && (p.extension().is_some_and(|x| x == "md" || x == "json")
                    || p.ends_with("flowerbox.log"))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
