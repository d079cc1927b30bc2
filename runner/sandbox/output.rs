//! Bounded capture of a command's output, shared by every sandbox backend.
//!
//! Memory stays bounded whatever the command prints (10 MB, binary, endless): each stream keeps
//! its first and last `cap / 2` bytes; everything is optionally streamed to a spill file so the
//! full text is kept up to [`FULL_OUTPUT_LIMIT`]. Beyond that the spill file, too, keeps head
//! and tail (the last [`FULL_OUTPUT_TAIL`] bytes, where a failing build prints its error), with
//! a line in between saying how much is missing, and [`CapturedOutput::full_output_omitted`]
//! says so to the model. Decoding is lossy UTF-8 and cuts only on character boundaries.

use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most output bytes a full-output spill file keeps (64 MiB): its first
/// `FULL_OUTPUT_LIMIT - FULL_OUTPUT_TAIL` and its last [`FULL_OUTPUT_TAIL`] bytes; the middle is
/// counted, not kept.
pub const FULL_OUTPUT_LIMIT: u64 = 64 * 1024 * 1024;

/// Bytes of the end of an output too large for [`FULL_OUTPUT_LIMIT`] kept for its spill file
/// (held in memory until the command ends).
pub const FULL_OUTPUT_TAIL: u64 = 8 * 1024 * 1024;

/// Bytes kept free in a full-output file for the line that names its gap.
const GAP_ROOM: u64 = 256;

/// The full-output spill file being written: the head straight to disk, the tail in memory.
struct FullOutput {
    file: crate::fsroot::TempFile,
    hash: Sha256,
    /// Bytes written to the file so far.
    written: u64,
    /// The last bytes past the head (at most `tail_cap`).
    tail: VecDeque<u8>,
    /// Bytes past the head that fell out of `tail`.
    dropped: u64,
    /// The head's size: written straight to the file.
    head_cap: u64,
    /// The tail's size.
    tail_cap: usize,
    /// A write failed: the file is incomplete and is not kept.
    failed: bool,
}

impl FullOutput {
    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_cap.saturating_sub(self.written) as usize;
        if room > 0 {
            let part = &bytes[..bytes.len().min(room)];
            self.write(part);
            bytes = &bytes[part.len()..];
        }
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + bytes.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(self.tail_cap);
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    fn write(&mut self, part: &[u8]) {
        if part.is_empty() || self.failed {
            return;
        }
        if self.file.file().write_all(part).is_ok() {
            self.hash.update(part);
            self.written += part.len() as u64;
        } else {
            self.failed = true;
        }
    }

    /// Writes the tail (after a line naming the gap, when bytes were dropped) and renames the
    /// file to `<sha256 first 16 hex>.txt`; returns its path and the bytes not in it.
    fn persist(mut self) -> Option<(PathBuf, u64)> {
        let tail: Vec<u8> = std::mem::take(&mut self.tail).into_iter().collect();
        let mut omitted = self.dropped;
        if omitted > 0 {
            let kept = trim_to_char_start(&tail);
            omitted += (tail.len() - kept.len()) as u64;
            let gap =
                format!("\n… [落盘文件有上限:这里少了 {omitted} 字节,只留了开头和结尾各一段] …\n");
            self.write(gap.as_bytes());
            self.write(kept);
        } else {
            self.write(&tail);
        }
        if self.failed {
            return None;
        }
        let name = format!("{}.txt", &hex::encode(self.hash.finalize())[..16]);
        let path = self.file.persist(&name).ok()?;
        Some((path, omitted))
    }
}

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
    /// Bytes of the output missing from `full_output` too (its head and tail are kept): 0
    /// when it holds everything.
    pub full_output_omitted: u64,
}

/// Collects both streams of one command. Feed chunks with [`OutputCollector::push`], then
/// [`OutputCollector::finish`].
pub struct OutputCollector {
    half: usize,
    out: Capped,
    err: Capped,
    spill: Option<FullOutput>,
}

impl OutputCollector {
    /// `cap` is the in-memory cap per stream in bytes (minimum 64). When `spill_dir` is given
    /// (and can be created), the full output is streamed to a temporary file there.
    pub fn new(cap: usize, spill_dir: Option<&Path>) -> Self {
        Self::with_full_limit(cap, spill_dir, FULL_OUTPUT_LIMIT, FULL_OUTPUT_TAIL)
    }

    /// [`OutputCollector::new`] with another size for the spill file (`limit` bytes, of them
    /// `tail` from the end); for tests.
    pub fn with_full_limit(cap: usize, spill_dir: Option<&Path>, limit: u64, tail: u64) -> Self {
        // The spill directory is in the workbench, writable by workers: the file is made and
        // renamed through a handle of the directory, never through a path they can redirect.
        let tail = tail.min(limit / 2);
        let spill = spill_dir.and_then(|dir| {
            let file = crate::fsroot::own::temp_file(dir).ok()?;
            Some(FullOutput {
                file,
                hash: Sha256::new(),
                written: 0,
                tail: VecDeque::new(),
                dropped: 0,
                // Room for the gap line: the file never exceeds `limit` (the file tools read
                // files up to that size).
                head_cap: limit - tail - GAP_ROOM,
                tail_cap: tail as usize,
                failed: false,
            })
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
        if let Some(full) = &mut self.spill {
            full.push(bytes);
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
        let (full_output, full_output_omitted) = match self.spill {
            Some(full) if truncated => match full.persist() {
                Some((path, omitted)) => (Some(path), omitted),
                None => (None, 0),
            },
            _ => (None, 0),
        };
        CapturedOutput {
            stdout,
            stderr,
            truncated,
            total_bytes,
            full_output,
            full_output_omitted,
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
    fn output_beyond_the_spill_limit_keeps_head_and_tail_and_says_how_much_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        // A 1 MB spill limit standing in for 64 MiB: 200 KB of tail, 800 KB of head.
        let mut c = OutputCollector::with_full_limit(1000, Some(dir.path()), 1_000_000, 200_000);
        let total = 5_000_000usize;
        let mut fed = 0;
        while fed < total {
            let n = 65_536.min(total - fed);
            let chunk: Vec<u8> = (fed..fed + n).map(|i| b'a' + (i % 26) as u8).collect();
            c.push(Stream::Stdout, &chunk);
            fed += n;
        }
        c.push(Stream::Stderr, b"\nerror: the last line\n");
        let o = c.finish();
        let full = std::fs::read(o.full_output.as_ref().expect("spilled")).unwrap();
        assert_eq!(o.total_bytes, total as u64 + 22);
        assert!(full.starts_with(b"abcdefghij"));
        assert!(
            full.ends_with(b"error: the last line\n"),
            "the tail is kept"
        );
        let gap = format!(
            "\n… [落盘文件有上限:这里少了 {} 字节,只留了开头和结尾各一段] …\n",
            o.full_output_omitted
        );
        let text = String::from_utf8_lossy(&full);
        assert!(text.contains(&gap), "the gap is named in the file");
        assert_eq!(
            (full.len() - gap.len()) as u64 + o.full_output_omitted,
            o.total_bytes,
            "every byte is either in the file or counted as missing"
        );
        assert!(full.len() <= 1_000_000, "{}", full.len());
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
