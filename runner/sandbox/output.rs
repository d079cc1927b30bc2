//! Bounded capture of a command's output, shared by every sandbox backend.
//!
//! Memory stays bounded whatever the command prints (10 MB, binary, endless): each stream keeps
//! its first and last `cap / 2` bytes; everything is optionally streamed to a spill file so the
//! full text is never lost. Decoding is lossy UTF-8 and cuts only on character boundaries.

use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most bytes written to a full-output spill file (64 MiB); the rest is counted, not kept.
pub const FULL_OUTPUT_LIMIT: u64 = 64 * 1024 * 1024;

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

#[derive(Debug, Default)]
struct Capped {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capped {
    fn push(&mut self, mut bytes: &[u8], half: usize) {
        self.total += bytes.len() as u64;
        if self.head.len() < half {
            let take = (half - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= half {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - half..]);
        } else {
            self.tail.extend(bytes);
            while self.tail.len() > half {
                self.tail.pop_front();
            }
        }
    }

    fn finish(self) -> (String, bool) {
        let kept = self.head.len() as u64 + self.tail.len() as u64;
        let omitted = self.total - kept;
        let tail: Vec<u8> = self.tail.into_iter().collect();
        if omitted == 0 {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return (String::from_utf8_lossy(&all).into_owned(), false);
        }
        let head = trim_to_char_end(&self.head);
        let tail = trim_to_char_start(&tail);
        let omitted = self.total - head.len() as u64 - tail.len() as u64;
        let text = format!(
            "{}\n… [{} bytes omitted] …\n{}",
            String::from_utf8_lossy(head),
            omitted,
            String::from_utf8_lossy(tail)
        );
        (text, true)
    }
}

/// Drops an incomplete UTF-8 sequence at the end of `b` (at most 3 bytes).
fn trim_to_char_end(b: &[u8]) -> &[u8] {
    let n = b.len();
    for back in 1..=3.min(n) {
        let byte = b[n - back];
        if byte & 0b1100_0000 == 0b1100_0000 {
            // A lead byte: is its sequence complete?
            let need = if byte >= 0xF0 {
                4
            } else if byte >= 0xE0 {
                3
            } else {
                2
            };
            return if back >= need { b } else { &b[..n - back] };
        }
        if byte & 0b1000_0000 == 0 {
            return b;
        }
    }
    b
}

/// Drops continuation bytes at the start of `b` (at most 3).
fn trim_to_char_start(b: &[u8]) -> &[u8] {
    let skip = b
        .iter()
        .take(3)
        .take_while(|&&x| x & 0b1100_0000 == 0b1000_0000)
        .count();
    &b[skip..]
}

/// What a finished [`OutputCollector`] holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapturedOutput {
    /// Capped stdout text.
    pub stdout: String,
    /// Capped stderr text.
    pub stderr: String,
    /// Bytes were omitted from the middle of a stream.
    pub truncated: bool,
    /// Total bytes of both streams.
    pub total_bytes: u64,
    /// The full output file, when truncated and a spill dir was given.
    pub full_output: Option<PathBuf>,
}

/// Collects both streams of one command. Feed chunks with [`OutputCollector::push`], then
/// [`OutputCollector::finish`].
pub struct OutputCollector {
    half: usize,
    out: Capped,
    err: Capped,
    spill: Option<(crate::fsroot::TempFile, Sha256, u64)>,
}

impl OutputCollector {
    /// `cap` is the in-memory cap per stream in bytes (minimum 64). When `spill_dir` is given
    /// (and can be created), the full output is streamed to a temporary file there.
    pub fn new(cap: usize, spill_dir: Option<&Path>) -> Self {
        // The spill directory is in the workbench, writable by workers: the file is made and
        // renamed through a handle of the directory, never through a path they can redirect.
        let spill = spill_dir.and_then(|dir| {
            let f = crate::fsroot::own::temp_file(dir).ok()?;
            Some((f, Sha256::new(), 0u64))
        });
        OutputCollector {
            half: cap.max(64) / 2,
            out: Capped::default(),
            err: Capped::default(),
            spill,
        }
    }

    /// Adds a chunk from one stream.
    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => self.out.push(bytes, self.half),
            Stream::Stderr => self.err.push(bytes, self.half),
        }
        if let Some((file, hash, written)) = &mut self.spill {
            let room = FULL_OUTPUT_LIMIT.saturating_sub(*written) as usize;
            let part = &bytes[..bytes.len().min(room)];
            if !part.is_empty() && file.file().write_all(part).is_ok() {
                hash.update(part);
                *written += part.len() as u64;
            }
        }
    }

    /// Total bytes seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.out.total + self.err.total
    }

    /// Decodes the kept bytes; keeps the spill file (renamed to `<sha256 first 16 hex>.txt`)
    /// only when something was omitted.
    pub fn finish(self) -> CapturedOutput {
        let total_bytes = self.total_bytes();
        let (stdout, t1) = self.out.finish();
        let (stderr, t2) = self.err.finish();
        let truncated = t1 || t2;
        let mut full_output = None;
        if let Some((file, hash, _)) = self.spill {
            if truncated {
                let name = format!("{}.txt", &hex::encode(hash.finalize())[..16]);
                full_output = file.persist(&name).ok();
            }
        }
        CapturedOutput {
            stdout,
            stderr,
            truncated,
            total_bytes,
            full_output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = OutputCollector::new(100, None);
        c.push(Stream::Stdout, b"hello ");
        c.push(Stream::Stdout, b"world");
        c.push(Stream::Stderr, b"err");
        let o = c.finish();
        assert_eq!(o.stdout, "hello world");
        assert_eq!(o.stderr, "err");
        assert!(!o.truncated);
        assert_eq!(o.total_bytes, 14);
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_spills_all() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = OutputCollector::new(1000, Some(dir.path()));
        let big: Vec<u8> = (0..10_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for chunk in big.chunks(65536) {
            c.push(Stream::Stdout, chunk);
        }
        let o = c.finish();
        assert!(o.truncated);
        assert!(o.stdout.len() < 1200, "{}", o.stdout.len());
        assert!(o.stdout.starts_with("abcdef"));
        assert!(o.stdout.contains("bytes omitted"));
        let full = o.full_output.expect("spilled");
        assert_eq!(std::fs::metadata(&full).unwrap().len(), 10_000_000);
        assert_eq!(full.extension().unwrap(), "txt");
        assert_eq!(full.file_stem().unwrap().len(), 16);
    }

    #[test]
    fn cuts_on_char_boundaries_with_cjk() {
        let mut c = OutputCollector::new(64, None);
        let s = "汉字".repeat(200);
        // Feed in odd-sized pieces so multi-byte characters split across chunks.
        for chunk in s.as_bytes().chunks(7) {
            c.push(Stream::Stdout, chunk);
        }
        let o = c.finish();
        assert!(o.truncated);
        assert!(!o.stdout.contains('\u{FFFD}'), "{}", o.stdout);
    }

    #[test]
    fn binary_output_does_not_panic() {
        let mut c = OutputCollector::new(64, None);
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 256) as u8).collect();
        c.push(Stream::Stderr, &bytes);
        let o = c.finish();
        assert!(o.truncated);
    }
}
