//! The end-of-command line the exec wrapper writes to stderr once the command's shell has
//! exited: `\x1fFBXEND-<marker>:<exit code>:<cut>\n`, where cut is 1 when the relay had to let
//! go of a background child's output. It gives the exit code without another engine round trip
//! (the engine answers exec inspection only after the streams are done). The marker is random per command,
//! so command output cannot forge it. This filter removes it from the stderr stream, also when
//! it arrives split across reads.

/// Streaming remover of the end line.
#[derive(Debug)]
pub(crate) struct EndLine {
    token: Vec<u8>,
    held: Vec<u8>,
    code: Option<i64>,
    cut: bool,
}

/// Longest exit-code text we wait for before giving up on a partial line.
const MAX_TAIL: usize = 24;

impl EndLine {
    pub(super) fn new(marker: &str) -> Self {
        EndLine {
            token: Self::token(marker).into_bytes(),
            held: Vec::new(),
            code: None,
            cut: false,
        }
    }

    /// The token the wrapper prints before the exit code.
    pub(super) fn token(marker: &str) -> String {
        format!("\x1fFBXEND-{marker}:")
    }

    /// The exit code, once the line has been seen.
    pub(super) fn code(&self) -> Option<i64> {
        self.code
    }

    /// The relay was cut: a background child held the output when the shell exited.
    pub(super) fn cut(&self) -> bool {
        self.cut
    }

    /// Feeds a stderr chunk; returns the bytes that belong to the command's stderr.
    pub(super) fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.code.is_some() {
            return chunk.to_vec();
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        let t = self.token.len();
        if let Some(pos) = buf.windows(t).position(|w| w == self.token.as_slice()) {
            let rest = &buf[pos + t..];
            if let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                let text = std::str::from_utf8(&rest[..nl]).unwrap_or("");
                let mut fields = text.trim().split(':');
                self.code = fields.next().and_then(|c| c.parse().ok());
                self.cut = fields.next() == Some("1");
                let mut out = buf[..pos].to_vec();
                out.extend_from_slice(&rest[nl + 1..]);
                return out;
            }
            if rest.len() <= MAX_TAIL {
                self.held = buf.split_off(pos);
                return buf;
            }
            return buf; // not a well-formed line after all: pass it on
        }
        // Hold back a suffix that may be the start of the token.
        let keep = (1..t.min(buf.len() + 1))
            .rev()
            .find(|&k| buf.ends_with(&self.token[..k]))
            .unwrap_or(0);
        self.held = buf.split_off(buf.len() - keep);
        buf
    }

    /// Whatever was held back, at the end of the stream.
    pub(super) fn flush(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> (Vec<u8>, Option<i64>) {
        let mut f = EndLine::new("abc");
        let mut out = Vec::new();
        for c in chunks {
            out.extend(f.feed(c));
        }
        out.extend(f.flush());
        (out, f.code())
    }

    #[test]
    fn removes_the_line_whole_or_split() {
        let line = b"err1\n\x1fFBXEND-abc:3:0\nlate\n";
        assert_eq!(run(&[line]), (b"err1\nlate\n".to_vec(), Some(3)));
        for cut in 1..line.len() {
            let (a, b) = line.split_at(cut);
            assert_eq!(
                run(&[a, b]),
                (b"err1\nlate\n".to_vec(), Some(3)),
                "cut {cut}"
            );
        }
        let bytes: Vec<&[u8]> = line.chunks(1).collect();
        assert_eq!(run(&bytes), (b"err1\nlate\n".to_vec(), Some(3)));
    }

    #[test]
    fn reports_a_cut_relay() {
        let mut f = EndLine::new("m");
        assert!(f.feed(b"\x1fFBXEND-m:0:1\n").is_empty());
        assert_eq!((f.code(), f.cut()), (Some(0), true));
    }

    #[test]
    fn other_markers_and_look_alikes_pass_through() {
        let text = b"\x1fFBXEND-zzz:1:0\n\x1fFBX plain\n";
        assert_eq!(run(&[text]), (text.to_vec(), None));
        let partial = b"tail \x1fFBXEN";
        assert_eq!(run(&[partial]), (partial.to_vec(), None));
    }
}
