//! JSON records a person may `cat` (`runs/manifest.json`, `runs/lineage.json`): written with
//! every character a terminal would act on or not draw escaped as `\uXXXX`. serde_json already
//! escapes C0 controls; this adds DEL, the C1 controls, bidi controls and invisible characters
//! ([`super::clean::is_hidden`]). Lossless: a reader gets the same strings back.

use std::io;

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter, Serializer};

use super::clean::is_hidden;

/// `value` as pretty JSON (two-space indent, as `serde_json::to_vec_pretty`), with the
/// characters above escaped.
pub fn to_vec_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut ser = Serializer::with_formatter(&mut out, Escaping(PrettyFormatter::new()));
    value.serialize(&mut ser)?;
    Ok(out)
}

/// A character escaped in strings beyond what serde_json escapes.
fn escaped(c: char) -> bool {
    ('\u{7f}'..='\u{9f}').contains(&c) || is_hidden(c)
}

/// The pretty formatter, with [`escaped`] characters written as `\uXXXX`.
struct Escaping(PrettyFormatter<'static>);

impl Formatter for Escaping {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if !escaped(c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(writer, "\\u{u:04x}")?;
            }
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn risky_characters_are_escaped_and_come_back_the_same() {
        let v = json!({"step": "干活\u{202e}\u{9b}2J\x1b]0;t\x07\u{7f}\u{e0041}", "n": [1, 2]});
        let bytes = to_vec_pretty(&v).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains(r#""干活\u202e\u009b2J\u001b]0;t\u0007\u007f\udb40\udc41""#),
            "{text}"
        );
        assert!(!text
            .chars()
            .any(|c| escaped(c) || (c as u32) < 0x20 && c != '\n'));
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            v
        );
        // Clean values: byte for byte what serde_json writes.
        let plain = json!({"a": [1, {"b": "中文"}], "c": null});
        assert_eq!(
            to_vec_pretty(&plain).unwrap(),
            serde_json::to_vec_pretty(&plain).unwrap()
        );
    }
}
