//! The input thread (seed 000 "常驻在最下面的输入提示符"): reads stdin for the whole run, not
//! only while a question is pending, so what is typed during hours of work never lingers in
//! the terminal buffer to be taken as the answer to a question nobody has seen yet.
//!
//! It polls every 0.2 s instead of blocking in `read`, so a stop flag ends it promptly (a
//! thread blocked in `read` cannot be woken, and the process would wait for one more Enter
//! before exiting). Two modes: [`InputMode::Keys`] feeds bytes to the [`LineEditor`] and
//! redraws the prompt through the [`OutputPort`] (stdin in cbreak mode); [`InputMode::Lines`]
//! reads whole lines (a pipe, or a terminal where termios failed).

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::line_editor::{EditOutcome, LineEditor};
use super::port::OutputPort;

/// How often the thread looks at its stop flag.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How the bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    /// Key by key through the line editor (the terminal is in cbreak mode).
    Keys,
    /// Whole lines (pipe, or no termios).
    Lines,
}

/// What the thread reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputEvent {
    /// A finished line (without its line break).
    Line(String),
    /// Ctrl-D on an empty line, or the input closed. The thread ends after reporting it.
    Eof,
}

/// The running input thread.
#[derive(Debug)]
pub struct InputThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl InputThread {
    /// Starts reading `fd` (stdin, or a pipe in tests). In [`InputMode::Keys`] every edit is
    /// drawn through `port`; each finished line is first left on screen as "prompt + text"
    /// ([`OutputPort::commit_input`]), then given to `handler`. `handler` runs on the input
    /// thread and must not block for long.
    pub fn spawn<F>(
        fd: F,
        mode: InputMode,
        port: OutputPort,
        mut handler: Box<dyn FnMut(InputEvent) + Send>,
    ) -> io::Result<InputThread>
    where
        F: AsFd + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("flowerbox-stdin".into())
            .spawn(move || {
                let mut reader = Reader {
                    mode,
                    editor: LineEditor::new(),
                    partial: Vec::new(),
                    port,
                };
                reader.run(&fd, &flag, &mut *handler);
            })?;
        Ok(InputThread {
            stop,
            handle: Some(handle),
        })
    }

    /// Whether the thread has ended (EOF, or stopped).
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Asks the thread to stop and waits for it (at most about one poll interval).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for InputThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread's state.
struct Reader {
    mode: InputMode,
    editor: LineEditor,
    /// Lines mode: bytes of the line not yet finished.
    partial: Vec<u8>,
    port: OutputPort,
}

impl Reader {
    fn run<F: AsFd>(&mut self, fd: &F, stop: &AtomicBool, handler: &mut dyn FnMut(InputEvent)) {
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::SeqCst) {
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(
                &mut fds,
                PollTimeout::from(POLL_INTERVAL.as_millis() as u16),
            ) {
                Ok(0) => {
                    // Quiet: a lone Esc key must not swallow the next keystroke.
                    self.editor.cancel_pending_escape();
                    continue;
                }
                Ok(_) => {}
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => continue,
                Err(_) => return self.eof(handler),
            }
            match nix::unistd::read(fd.as_fd(), &mut buf) {
                Ok(0) => return self.eof(handler),
                Ok(n) => {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if self.feed(&buf[..n], handler) {
                        return;
                    }
                }
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => continue,
                // EIO: the terminal hung up.
                Err(_) => return self.eof(handler),
            }
        }
    }

    /// Feeds bytes; returns `true` when input ended.
    fn feed(&mut self, bytes: &[u8], handler: &mut dyn FnMut(InputEvent)) -> bool {
        match self.mode {
            InputMode::Keys => {
                for outcome in self.editor.feed(bytes) {
                    match outcome {
                        EditOutcome::Redraw => {
                            self.port
                                .set_input(&self.editor.text(), self.editor.cursor());
                        }
                        EditOutcome::Line(line) => {
                            self.port.commit_input(&line);
                            handler(InputEvent::Line(line));
                        }
                        EditOutcome::Eof => {
                            handler(InputEvent::Eof);
                            return true;
                        }
                        EditOutcome::None => {}
                    }
                }
                false
            }
            InputMode::Lines => {
                self.partial.extend_from_slice(bytes);
                while let Some(pos) = self.partial.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.partial.drain(..=pos).collect();
                    let text = String::from_utf8_lossy(&line[..line.len() - 1]);
                    handler(InputEvent::Line(text.trim_end_matches('\r').to_string()));
                }
                false
            }
        }
    }

    fn eof(&mut self, handler: &mut dyn FnMut(InputEvent)) {
        if self.mode == InputMode::Lines && !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            handler(InputEvent::Line(String::from_utf8_lossy(&rest).to_string()));
        }
        handler(InputEvent::Eof);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::port::PortConfig;
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::time::Instant;

    fn sink_port() -> OutputPort {
        OutputPort::new(
            Box::new(io::sink()),
            PortConfig {
                screen: true,
                color: false,
                columns: Arc::new(|| 80),
                question_pending: Arc::new(|| false),
            },
        )
    }

    fn collect(
        mode: InputMode,
    ) -> (
        std::os::fd::OwnedFd,
        InputThread,
        mpsc::Receiver<InputEvent>,
    ) {
        let (r, w) = nix::unistd::pipe().unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let t = InputThread::spawn(
            r,
            mode,
            sink_port(),
            Box::new(move |ev| {
                let _ = tx.lock().unwrap().send(ev);
            }),
        )
        .unwrap();
        (w, t, rx)
    }

    fn next(rx: &mpsc::Receiver<InputEvent>) -> InputEvent {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("no input event")
    }

    #[test]
    fn keys_mode_edits_and_reports_lines_and_eof() {
        let (w, _t, rx) = collect(InputMode::Keys);
        // 你好 then Backspace deletes 好 (one press for one CJK character), then 们, Enter.
        nix::unistd::write(&w, "你好\x7f们\r".as_bytes()).unwrap();
        assert_eq!(next(&rx), InputEvent::Line("你们".into()));
        // A character split across two writes is assembled.
        let bytes = "？进度".as_bytes();
        nix::unistd::write(&w, &bytes[..2]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        nix::unistd::write(&w, &bytes[2..]).unwrap();
        nix::unistd::write(&w, b"\n").unwrap();
        assert_eq!(next(&rx), InputEvent::Line("？进度".into()));
        nix::unistd::write(&w, b"\x04").unwrap();
        assert_eq!(next(&rx), InputEvent::Eof);
    }

    #[test]
    fn lines_mode_reports_lines_then_eof_when_the_pipe_closes() {
        let (w, _t, rx) = collect(InputMode::Lines);
        nix::unistd::write(&w, "第一行\r\n第二".as_bytes()).unwrap();
        assert_eq!(next(&rx), InputEvent::Line("第一行".into()));
        nix::unistd::write(&w, "行\nlast".as_bytes()).unwrap();
        assert_eq!(next(&rx), InputEvent::Line("第二行".into()));
        drop(w);
        assert_eq!(next(&rx), InputEvent::Line("last".into()));
        assert_eq!(next(&rx), InputEvent::Eof);
    }

    #[test]
    fn stop_ends_a_thread_waiting_for_input() {
        let (_w, mut t, rx) = collect(InputMode::Keys);
        let start = Instant::now();
        t.stop();
        assert!(t.is_finished());
        // Generous bound: catches a thread stuck in read, not a timing target.
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(rx.try_recv().is_err());
    }
}
