//! The files flowerbox writes for people to read — the notes (`需求.md`, `目标.md`,
//! `问答记录.md`, `判定记录.md`, handoffs) and the workbench's `INDEX.md` — are written here and
//! only here, through [`super::clean`]: a later `cat`, `less -R` or editor shows the words, never
//! an escape sequence an agent or a model put in them. Newlines and tabs stay; what the
//! sanitiser replaces gets its visible mark, so the record still says that something was there.
//!
//! The files live in agent-writable places, so they are opened the way flowerbox opens all of
//! its own files there ([`crate::fsroot::own`]: no symlink followed, regular files only,
//! replaced by rename).

use std::io::{self, Write};
use std::path::Path;

use super::clean::clean;
use crate::fsroot::own;

/// Writes `text`, cleaned, to `path` through a new file renamed over it (directories created).
/// Returns whether the file is new.
pub fn write(path: &Path, text: &str) -> io::Result<bool> {
    own::write(path, clean(text).as_bytes())
}

/// [`write`], with the file and its directory fsynced.
pub fn write_durable(path: &Path, text: &str) -> io::Result<bool> {
    own::write_durable(path, clean(text).as_bytes())
}

/// Appends `text`, cleaned, to `path` (created with its directories when missing). When the
/// file is created, `title` (flowerbox's own words) goes first.
pub fn append(path: &Path, title: &str, text: &str) -> io::Result<()> {
    let (mut f, new) = own::open_append(path)?;
    let mut bytes = Vec::new();
    if new {
        bytes.extend_from_slice(clean(title).as_bytes());
    }
    bytes.extend_from_slice(clean(text).as_bytes());
    f.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_hold_words_and_marks_never_sequences() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("notes/判定记录.md");
        append(&p, "# 判定记录\n\n", "理由:ok\x1b]52;c;aGk=\x07\r\n").unwrap();
        append(&p, "# 判定记录\n\n", "- \u{202e}x\tb\x1b[2J\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "# 判定记录\n\n理由:ok␛\n- <U+202E>x\tb␛\n"
        );
        let q = d.path().join("notes/需求.md");
        write(&q, "a\x1b[31mred\x1b[0m\x08\n").unwrap();
        assert_eq!(std::fs::read_to_string(&q).unwrap(), "ared␈\n");
        write_durable(&q, "b\u{9b}1A\n").unwrap();
        assert_eq!(std::fs::read_to_string(&q).unwrap(), "b␛\n");
    }
}
