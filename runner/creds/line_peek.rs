//! One line from standard input in chunks, never consuming past its newline (issue 26 §4: a
//! 10 MB request piped in took 85 s, two syscalls per byte).
//!
//! Whatever reads stdin after the start prompt (the run's input thread) must see the rest, so
//! the line is taken by looking first and consuming only up to the newline:
//!
//! | fd 0 is | look | take |
//! |---|---|---|
//! | a pipe or FIFO | `tee(2)` into a private pipe (copies, consumes nothing), read it back | `read` exactly the line's bytes |
//! | a regular file | `pread` at the current offset | move the offset (`lseek`) |
//! | a terminal | `read` (canonical mode hands out at most one line) | — |
//! | anything else (a socket, a device) | `read` of one byte | — |
//!
//! [`take_line`] scans each byte once (only what a look added), so the work is linear in the
//! line's length, with one look per [`CHUNK`] bytes.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;

/// Bytes looked at per step.
pub(super) const CHUNK: usize = 64 * 1024;

/// Input that can be looked at before it is taken.
pub(super) trait Peek {
    /// Up to `max` bytes waiting at the front, not consumed: `Ok(None)` when none are waiting
    /// yet, an empty slice at end of input.
    ///
    /// Errors: the read failed.
    fn peek(&mut self, max: usize) -> io::Result<Option<&[u8]>>;
    /// Consumes the first `n` bytes of what the last [`Peek::peek`] showed.
    ///
    /// Errors: the read or seek failed.
    fn consume(&mut self, n: usize) -> io::Result<()>;
}

/// What one step of [`take_line`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// The line is complete in the buffer (its newline taken, not stored).
    Line,
    /// End of input (the buffer holds what came before it, maybe nothing).
    Eof,
    /// Nothing waiting now: wait for input, then call again with the same buffer.
    Pending,
}

/// Moves bytes from `src` into `line` until a newline, the end of input, or nothing more is
/// waiting. Each byte is looked at once; nothing after the newline is consumed.
///
/// Errors: `src`'s.
pub(super) fn take_line(src: &mut dyn Peek, line: &mut Vec<u8>) -> io::Result<Taken> {
    loop {
        let Some(chunk) = src.peek(CHUNK)? else {
            return Ok(Taken::Pending);
        };
        if chunk.is_empty() {
            return Ok(Taken::Eof);
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&chunk[..i]);
                src.consume(i + 1)?;
                return Ok(Taken::Line);
            }
            None => {
                let n = chunk.len();
                line.extend_from_slice(chunk);
                src.consume(n)?;
            }
        }
    }
}

/// How a descriptor is looked at (see the module table).
enum Way {
    /// A pipe: `tee` into this private pipe (read end, write end).
    Pipe(OwnedFd, OwnedFd),
    /// A seekable regular file.
    File,
    /// Reads that consume, at most this many bytes each.
    Reads(usize),
}

/// A descriptor (normally fd 0) as a [`Peek`].
pub(super) struct FdPeek<'a> {
    fd: BorrowedFd<'a>,
    way: Way,
    buf: Vec<u8>,
}

impl<'a> FdPeek<'a> {
    /// Chooses how to look at `fd` by what it is.
    pub(super) fn new(fd: BorrowedFd<'a>) -> Self {
        use nix::sys::stat::{fstat, SFlag};
        let kind = fstat(fd).map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT);
        let way = match kind {
            Ok(k) if k == SFlag::S_IFIFO => match nix::unistd::pipe() {
                Ok((r, w)) => Way::Pipe(r, w),
                Err(_) => Way::Reads(1),
            },
            Ok(k) if k == SFlag::S_IFREG => Way::File,
            _ if nix::unistd::isatty(fd).unwrap_or(false) => Way::Reads(4096),
            _ => Way::Reads(1),
        };
        FdPeek {
            fd,
            way,
            buf: Vec::new(),
        }
    }

    /// Reads exactly `n` bytes of `fd` (they are known to be there), into `buf` when given.
    fn read_exact(
        fd: BorrowedFd<'_>,
        mut n: usize,
        mut keep: Option<&mut Vec<u8>>,
    ) -> io::Result<()> {
        let mut scratch = vec![0u8; n.min(CHUNK)];
        while n > 0 {
            let want = n.min(scratch.len());
            match nix::unistd::read(fd, &mut scratch[..want]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(got) => {
                    if let Some(k) = keep.as_deref_mut() {
                        k.extend_from_slice(&scratch[..got]);
                    }
                    n -= got;
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl Peek for FdPeek<'_> {
    fn peek(&mut self, max: usize) -> io::Result<Option<&[u8]>> {
        self.buf.clear();
        let mut refused = false;
        match &self.way {
            Way::Pipe(r, w) => {
                let flags = nix::fcntl::SpliceFFlags::SPLICE_F_NONBLOCK;
                match nix::fcntl::tee(self.fd, w.as_fd(), max, flags) {
                    Ok(0) => {}
                    Ok(n) => Self::read_exact(r.as_fd(), n, Some(&mut self.buf))?,
                    Err(Errno::EAGAIN) => return Ok(None),
                    Err(Errno::EINTR) => return Ok(None),
                    // Not a pipe tee accepts after all: read a byte at a time.
                    Err(Errno::EINVAL) => refused = true,
                    Err(e) => return Err(e.into()),
                }
            }
            Way::File => {
                use nix::unistd::{lseek, Whence};
                let at = lseek(self.fd, 0, Whence::SeekCur)?;
                self.buf.resize(max, 0);
                let n = loop {
                    match nix::sys::uio::pread(self.fd, &mut self.buf, at) {
                        Err(Errno::EINTR) => continue,
                        r => break r?,
                    }
                };
                self.buf.truncate(n);
            }
            Way::Reads(most) => {
                self.buf.resize(max.min(*most), 0);
                match nix::unistd::read(self.fd, &mut self.buf) {
                    Ok(n) => self.buf.truncate(n),
                    Err(Errno::EAGAIN | Errno::EINTR) => return Ok(None),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if refused {
            self.way = Way::Reads(1);
            return self.peek(max);
        }
        Ok(Some(&self.buf))
    }

    fn consume(&mut self, n: usize) -> io::Result<()> {
        match &self.way {
            Way::Pipe(..) => Self::read_exact(self.fd, n, None),
            Way::File => {
                let n =
                    i64::try_from(n).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
                nix::unistd::lseek(self.fd, n, nix::unistd::Whence::SeekCur)?;
                Ok(())
            }
            // Taken already; a terminal never hands out more than the line.
            Way::Reads(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    /// In-memory input handed out in pieces of `step` bytes, counting every byte shown.
    struct Counted {
        data: Vec<u8>,
        at: usize,
        step: usize,
        shown: usize,
        looks: usize,
    }

    impl Peek for Counted {
        fn peek(&mut self, max: usize) -> io::Result<Option<&[u8]>> {
            let end = (self.at + max.min(self.step)).min(self.data.len());
            self.shown += end - self.at;
            self.looks += 1;
            Ok(Some(&self.data[self.at..end]))
        }
        fn consume(&mut self, n: usize) -> io::Result<()> {
            self.at += n;
            Ok(())
        }
    }

    /// Issue 26 §4: reading the request was superlinear. Each byte is shown once, one look per
    /// chunk, and nothing after the newline is taken.
    #[test]
    fn a_long_line_is_scanned_once_and_the_rest_is_left() {
        for size in [0usize, 1, 1 << 20, 10 << 20] {
            let mut data = vec![b'x'; size];
            data.extend_from_slice(b"\nnext line\n");
            let mut src = Counted {
                data,
                at: 0,
                step: usize::MAX,
                shown: 0,
                looks: 0,
            };
            let mut line = Vec::new();
            assert_eq!(take_line(&mut src, &mut line).unwrap(), Taken::Line);
            assert_eq!(line.len(), size);
            assert_eq!(&src.data[src.at..], b"next line\n", "the rest is left");
            assert!(
                src.shown <= size + CHUNK,
                "{size}: {} bytes looked at",
                src.shown
            );
            assert!(src.looks <= size / CHUNK + 1, "{size}: {} looks", src.looks);
        }
    }

    #[test]
    fn pieces_end_of_input_and_nothing_waiting() {
        let mut src = Counted {
            data: b"ab\ncd".to_vec(),
            at: 0,
            step: 1,
            shown: 0,
            looks: 0,
        };
        let mut line = Vec::new();
        assert_eq!(take_line(&mut src, &mut line).unwrap(), Taken::Line);
        assert_eq!(line, b"ab");
        line.clear();
        assert_eq!(take_line(&mut src, &mut line).unwrap(), Taken::Eof);
        assert_eq!(line, b"cd");

        struct Nothing;
        impl Peek for Nothing {
            fn peek(&mut self, _: usize) -> io::Result<Option<&[u8]>> {
                Ok(None)
            }
            fn consume(&mut self, _: usize) -> io::Result<()> {
                unreachable!()
            }
        }
        assert_eq!(take_line(&mut Nothing, &mut line).unwrap(), Taken::Pending);
    }

    /// A real pipe: the line is taken in chunks through `tee`, the next reader gets the rest.
    #[test]
    fn a_pipe_keeps_what_follows_the_line() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        let long = "长".repeat(20_000);
        let writer = {
            let text = format!("{long}\n后面的\n");
            std::thread::spawn(move || {
                w.write_all(text.as_bytes()).unwrap();
            })
        };
        let mut src = FdPeek::new(r.as_fd());
        assert!(matches!(src.way, Way::Pipe(..)));
        let mut line = Vec::new();
        loop {
            match take_line(&mut src, &mut line).unwrap() {
                Taken::Line => break,
                Taken::Pending => std::thread::sleep(std::time::Duration::from_millis(5)),
                Taken::Eof => panic!("end before the newline"),
            }
        }
        writer.join().unwrap();
        assert_eq!(String::from_utf8(line).unwrap(), long);
        let mut rest = String::new();
        std::fs::File::from(r).read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "后面的\n");
    }

    /// A file: the offset ends just after the newline.
    #[test]
    fn a_file_offset_ends_after_the_line() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"first\nsecond\n").unwrap();
        f.rewind().unwrap();
        let mut src = FdPeek::new(f.as_fd());
        assert!(matches!(src.way, Way::File));
        let mut line = Vec::new();
        assert_eq!(take_line(&mut src, &mut line).unwrap(), Taken::Line);
        assert_eq!(line, b"first");
        let mut rest = String::new();
        f.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "second\n");
    }
}
