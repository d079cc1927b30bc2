//! Line input for the start prompt and `setup`: a [`LineSource`] trait, the real stdin reader
//! (Ctrl-C at the prompt becomes [`LineRead::Interrupted`] instead of killing the process), and
//! any buffered reader as a source.

use std::io::{self, BufRead};
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::line_peek::{take_line, FdPeek, Taken};

/// What one attempt to read a line gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineRead {
    /// A line, without its `\n` / `\r\n`.
    Line(String),
    /// End of input (Ctrl-D on an empty line, or a closed pipe).
    Eof,
    /// Ctrl-C (SIGINT) arrived while waiting.
    Interrupted,
}

/// Something that hands out lines of human input.
pub trait LineSource {
    /// Blocks until a line, end of input or an interrupt.
    ///
    /// Errors: the underlying read failed.
    fn read_line(&mut self) -> io::Result<LineRead>;

    /// Like [`LineSource::read_line`], for a secret (`setup`'s token): a terminal does not show
    /// what is typed. `prompt` writes the question once the echo is off, so no key typed right
    /// after it appears can be echoed. Sources that echo nothing anyway keep the default.
    ///
    /// Errors: as [`LineSource::read_line`], `prompt`'s, and a terminal whose echo cannot be
    /// switched off.
    fn read_secret(&mut self, prompt: &mut dyn FnMut() -> io::Result<()>) -> io::Result<LineRead> {
        prompt()?;
        self.read_line()
    }
}

/// Any buffered reader as a line source (EOF when it runs out). Never yields `Interrupted`.
pub struct ReaderLines<R>(pub R);

impl<R: BufRead> LineSource for ReaderLines<R> {
    fn read_line(&mut self) -> io::Result<LineRead> {
        let mut buf = Vec::new();
        if self.0.read_until(b'\n', &mut buf)? == 0 {
            return Ok(LineRead::Eof);
        }
        Ok(LineRead::Line(decode(buf)))
    }
}

/// The process's standard input, read in chunks straight from fd 0 without consuming anything
/// beyond the line ([`super::line_peek`]: whatever reads stdin next sees the rest). While a read is in
/// progress SIGINT is caught and turns into [`LineRead::Interrupted`]; the previous disposition
/// is restored afterwards, so Ctrl-C keeps its meaning everywhere else.
#[derive(Debug, Default)]
pub struct StdinLines;

impl LineSource for StdinLines {
    fn read_line(&mut self) -> io::Result<LineRead> {
        let sigint = crate::signals::CatchSigint::install()?;
        let stdin = io::stdin();
        let fd = stdin.as_fd();
        let mut src = FdPeek::new(fd);
        let mut buf = Vec::new();
        loop {
            if sigint.caught() {
                return Ok(LineRead::Interrupted);
            }
            // Poll with a short timeout: the signal may land on another thread, in which case
            // this thread's syscalls are not interrupted and only the flag tells.
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(100u16)) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
            match take_line(&mut src, &mut buf)? {
                Taken::Line => return Ok(LineRead::Line(decode(buf))),
                Taken::Eof if buf.is_empty() => return Ok(LineRead::Eof),
                Taken::Eof => return Ok(LineRead::Line(decode(buf))),
                Taken::Pending => continue,
            }
        }
    }

    fn read_secret(&mut self, prompt: &mut dyn FnMut() -> io::Result<()>) -> io::Result<LineRead> {
        // Off before the question shows, so no key can land while the echo is on (a pipe has
        // no echo to switch off).
        let _quiet = if Self::is_terminal() {
            Some(EchoOff::install()?)
        } else {
            None
        };
        prompt()?;
        self.read_line()
    }
}

impl StdinLines {
    /// Whether fd 0 is a terminal.
    fn is_terminal() -> bool {
        use std::io::IsTerminal;
        io::stdin().is_terminal()
    }
}

/// While alive, the terminal on stdin does not echo typed characters (the newline of Enter
/// still shows, `ECHONL`); the previous settings come back on drop, also after Ctrl-C.
struct EchoOff {
    saved: nix::sys::termios::Termios,
}

impl EchoOff {
    fn install() -> io::Result<Self> {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let stdin = io::stdin();
        let saved = tcgetattr(stdin.as_fd())?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        quiet.local_flags.insert(LocalFlags::ECHONL);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &quiet)?;
        Ok(Self { saved })
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        let _ = tcsetattr(io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Bytes of one line to text: lossy UTF-8, without the line ending.
fn decode(mut buf: Vec<u8>) -> String {
    if buf.last() == Some(&b'\n') {
        buf.pop();
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_lines_strip_endings() {
        let mut src = ReaderLines(io::Cursor::new("一行\r\ntwo\nlast"));
        assert_eq!(src.read_line().unwrap(), LineRead::Line("一行".into()));
        assert_eq!(src.read_line().unwrap(), LineRead::Line("two".into()));
        assert_eq!(src.read_line().unwrap(), LineRead::Line("last".into()));
        assert_eq!(src.read_line().unwrap(), LineRead::Eof);
    }
}
