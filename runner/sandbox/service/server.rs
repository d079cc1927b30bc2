//! The exec service itself: `flowerbox __exec-service`, run inside an agent's container as one
//! long-lived Docker exec (the agent's engine user, behind the same `setpriv` prefix as every
//! command), taking [`proto`] frames on stdin and answering on stdout, after its preamble; on
//! a local engine the host then moves the frames to its socket ([`super::channel`]), and the
//! attached streams stay open (stdin's end still ends the service, stderr still says why).
//!
//! Each command is `shell -c COMMAND` in a process group of its own, started with
//! `posix_spawn` (`process_group(0)`: no closure runs in the child, so the C library spawns
//! without copying the service's page tables; a `setsid` in a `pre_exec` hook forced a full
//! `fork`, which cost about 2 ms a command in a container here), with `FLOWERBOX_EXEC=<marker>` in its environment, stdin `/dev/null`, stdout and stderr on
//! pipes of their own that the service reads and forwards as frames. When the shell exits its
//! exit code is sent once both pipes are at end of file, or ~200 ms later when a background
//! process still holds them (`server & echo started`): then the service keeps draining them
//! unread, so the process's writes keep succeeding, and names the marked processes left
//! running. A kill stops and kills every marked process and its group until none is left.
//!
//! The service first makes itself non-dumpable, so the agent's processes (same uid, no
//! capability) cannot open its `/proc/<pid>/fd/*`, read its memory or trace it: they cannot
//! read the host's requests or write frames into its stdout. They can still kill it; the host
//! then reports the command as a tool error and falls back to a Docker exec per command.
//! A writing agent's service then enters a Landlock domain of its own ([`super::domain`]), in
//! which every command it runs stays: nothing it runs reaches another agent's processes
//! through `/proc`, and the fallback's execs enter a domain of their own too.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::proto::{
    self, Ended, Exit, Failed, FrameReader, Hello, Kill, Killed, Kind, Run, Started, Switched,
};
use super::MARKER_VAR;
use super::{channel, domain, end};
use crate::sandbox::files::wire;

/// A line on the service's stderr (the exec's stderr stream, read by the host), through the
/// output boundary like every other line flowerbox writes.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::shown::stderr(), $($arg)*);
    }};
}

/// How long the output pipes may stay open after the shell exited before the service lets go.
const LET_GO: Duration = Duration::from_millis(200);
/// Requests queued between the stdin thread and the runtime.
const QUEUE: usize = 64;

/// Runs the service until the host closes stdin; returns the process exit code. `args` (after
/// the subcommand): [`domain::SERVICE_FLAG`] puts the service, and so every command it runs, in
/// a Landlock domain of its own before anything else (a writing agent's; [`domain::REQUIRED_FLAG`]
/// after it: the service refuses to start without one).
pub fn serve(args: &[std::ffi::OsString]) -> i32 {
    // Before anything else: no same-uid process may open our fds or trace us.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        say!("flowerbox exec service: cannot make itself non-dumpable: {e}");
        return 1;
    }
    if args.first().is_some_and(|a| a == domain::SERVICE_FLAG) {
        let need = if args.get(1).is_some_and(|a| a == domain::REQUIRED_FLAG) {
            domain::Need::Required
        } else {
            domain::Need::BestEffort
        };
        if let Err(why) = domain::enter_as(need) {
            say!("flowerbox exec service: {why}");
            return 1;
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("flowerbox exec service: {e}");
            return 1;
        }
    };
    rt.block_on(run())
}

async fn run() -> i32 {
    // The protocol channel to the host (length-prefixed frames), not a person's terminal: the
    // host decodes it with a bounded reader and shows only what it cleans.
    #[allow(clippy::disallowed_methods)]
    let stdout = std::io::stdout();
    let mut out_tx = match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Out::Pipe(Arc::new(std::fs::File::from(fd))),
        Err(e) => {
            say!("flowerbox exec service: stdout: {e}");
            return 1;
        }
    };
    // The host's requests: read on the runtime itself when stdin is a pipe (nothing between
    // the host and a command but this thread), else by a thread of its own. The end of
    // either input (stdin, or the socket once the frames go over it) ends the service.
    let ended = CancellationToken::new();
    let (in_tx, mut in_rx) = mpsc::channel::<proto::Frame>(QUEUE);
    read_requests(in_tx.clone(), ended.clone());
    // The preamble before any frame: the host reads nothing before it as a frame (the engine
    // writes its own errors to this stream), then the hello.
    let hello = Hello {
        version: proto::VERSION,
        pid: std::process::id(),
        socket: channel::mounted(),
    };
    let mut opening = proto::PREAMBLE.to_vec();
    opening.extend(proto::encode_json(Kind::Hello, 0, &hello));
    if out_tx.send(opening).await.is_err() {
        return 1;
    }
    // The host may move the frames to the socket, first thing or never.
    let mut first = true;
    // File operations' inputs, by request id, until their call comes (`None`: it went over
    // [`wire::MAX_BODY`], and its call is refused).
    let mut inputs: std::collections::HashMap<u64, Option<Vec<u8>>> =
        std::collections::HashMap::new();
    loop {
        let frame = tokio::select! {
            biased;
            frame = in_rx.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            _ = ended.cancelled() => break,
        };
        let was_first = std::mem::replace(&mut first, false);
        match frame.kind {
            Kind::Channel if was_first => {
                let switched = switch(&frame.payload);
                let (ok, message) = match &switched {
                    Ok(_) => (true, String::new()),
                    Err(e) => (false, e.clone()),
                };
                let answer = proto::encode_json(Kind::Switched, 0, &Switched { ok, message });
                let _ = out_tx.send(answer).await;
                if let Ok(stream) = switched {
                    read_socket(stream.clone(), in_tx.clone(), ended.clone());
                    out_tx = Out::Socket(Arc::new(SocketOut {
                        stream,
                        one: tokio::sync::Mutex::new(()),
                    }));
                }
            }
            Kind::Input => {
                let held = inputs.entry(frame.id).or_insert_with(|| Some(Vec::new()));
                match held {
                    Some(bytes) if bytes.len() + frame.payload.len() <= wire::MAX_BODY => {
                        bytes.extend_from_slice(&frame.payload)
                    }
                    _ => *held = None,
                }
            }
            Kind::Files => {
                let input = inputs.remove(&frame.id).unwrap_or(Some(Vec::new()));
                tokio::spawn(files_call(frame, input, out_tx.clone()));
            }
            Kind::Run => match frame.json::<Run>() {
                Ok(run) => {
                    tokio::spawn(run_command(frame.id, run, out_tx.clone()));
                }
                Err(e) => {
                    let failed = Failed {
                        message: e.to_string(),
                    };
                    let _ = out_tx
                        .send(proto::encode_json(Kind::Failed, frame.id, &failed))
                        .await;
                }
            },
            Kind::Kill => {
                // On this thread: a fork bomb may have used up the pids limit, and a kill
                // must not need a new thread. Other commands wait the few milliseconds.
                let ok = frame.json::<Kill>().is_ok_and(|k| kill_marked(&k.marker));
                let _ = out_tx
                    .send(proto::encode_json(Kind::Killed, frame.id, &Killed { ok }))
                    .await;
            }
            Kind::End => {
                // On this thread too (a fork bomb), and the last request: the service exits
                // once the host has the answer.
                let ended = Ended {
                    left: end::end_uid(),
                };
                let _ = out_tx
                    .send(proto::encode_json(Kind::Ended, frame.id, &ended))
                    .await;
                break;
            }
            _ => {}
        }
    }
    // The host closed the connection (or the container is going away): commands left
    // running belong to the pod now, as with a Docker exec. Or the run ended ([`Kind::End`]).
    0
}

/// Opens the host's socket with the token `payload` carries ([`channel::connect`]); why not,
/// as words for the host's logs.
fn switch(payload: &[u8]) -> Result<Arc<tokio::net::UnixStream>, String> {
    let token = channel::Token::from_payload(payload).map_err(|e| e.to_string())?;
    let stream = channel::connect(&token).map_err(|e| e.to_string())?;
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    let stream = tokio::net::UnixStream::from_std(stream).map_err(|e| e.to_string())?;
    Ok(Arc::new(stream))
}

/// Reads the host's requests from the socket into `tx`, frame by frame, on the runtime; its
/// end, or a frame that breaks the protocol, ends the service (`ended`).
fn read_socket(
    stream: Arc<tokio::net::UnixStream>,
    tx: mpsc::Sender<proto::Frame>,
    ended: CancellationToken,
) {
    tokio::spawn(async move {
        let _end = ended.drop_guard();
        let mut reader = FrameReader::default();
        let mut buf = vec![0u8; proto::CHUNK];
        loop {
            let n = match stream.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if stream.readable().await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            if !pass_on(&mut reader, &buf[..n], &tx).await {
                return;
            }
        }
    });
}

/// Hands the whole frames `bytes` complete to `tx`; `false` when reading should stop (a frame
/// broke the protocol, or nobody takes the requests any more).
async fn pass_on(reader: &mut FrameReader, bytes: &[u8], tx: &mpsc::Sender<proto::Frame>) -> bool {
    let (frames, whole) = decode(reader, bytes);
    for frame in frames {
        if tx.send(frame).await.is_err() {
            return false;
        }
    }
    whole
}

/// Starts reading the host's requests from stdin into `tx`, frame by frame: a task of the
/// runtime on a non-blocking pipe (what an engine attaches), or, for anything else, a thread
/// with blocking reads. Either stops at the end of stdin or at a frame that breaks the
/// protocol, and then ends the service (`ended`).
fn read_requests(tx: mpsc::Sender<proto::Frame>, ended: CancellationToken) {
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok());
    match pipe {
        Some(mut pipe) => {
            tokio::spawn(async move {
                let _end = ended.drop_guard();
                let mut reader = FrameReader::default();
                let mut buf = vec![0u8; proto::CHUNK];
                loop {
                    let n = match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if !pass_on(&mut reader, &buf[..n], &tx).await {
                        return;
                    }
                }
            });
        }
        None => {
            std::thread::spawn(move || {
                let _end = ended.drop_guard();
                let mut stdin = std::io::stdin().lock();
                let mut reader = FrameReader::default();
                let mut buf = vec![0u8; proto::CHUNK];
                loop {
                    let n = match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let (frames, whole) = decode(&mut reader, &buf[..n]);
                    for frame in frames {
                        if tx.blocking_send(frame).is_err() {
                            return;
                        }
                    }
                    if !whole {
                        return;
                    }
                }
            });
        }
    }
}

/// The whole frames `bytes` complete, and `false` when the stream broke the protocol (said on
/// stderr): nothing after that is read.
fn decode(reader: &mut FrameReader, bytes: &[u8]) -> (Vec<proto::Frame>, bool) {
    reader.push(bytes);
    let mut frames = Vec::new();
    loop {
        match reader.next_frame() {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return (frames, true),
            Err(e) => {
                say!("flowerbox exec service: {e}");
                return (frames, false);
            }
        }
    }
}

/// Where the service's frames go: its stdout, or the host's socket once it moved there.
/// On stdout frames are written whole, from the runtime's one thread, with a blocking write:
/// no hop through another thread on the way out, and a full pipe (a slow host) holds
/// everything back, which is the backpressure wanted. On the socket a frame is written whole
/// too, one frame at a time, waiting on the runtime when the socket is full.
#[derive(Clone)]
enum Out {
    /// Stdout.
    Pipe(Arc<std::fs::File>),
    /// The host's socket.
    Socket(Arc<SocketOut>),
}

/// The socket's writing side.
struct SocketOut {
    /// The connection (its reading side is [`read_socket`]'s).
    stream: Arc<tokio::net::UnixStream>,
    /// Held while one frame is written, so frames never interleave.
    one: tokio::sync::Mutex<()>,
}

impl Out {
    /// Writes one frame; the host went away when that fails, and so does the service.
    async fn send(&self, frame: Vec<u8>) -> Result<(), ()> {
        let written = match self {
            Out::Pipe(file) => (&**file).write_all(&frame).is_ok(),
            Out::Socket(s) => s.send(&frame).await.is_ok(),
        };
        if !written {
            std::process::exit(0);
        }
        Ok(())
    }
}

impl SocketOut {
    async fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        let _one = self.one.lock().await;
        let mut rest = frame;
        while !rest.is_empty() {
            match self.stream.try_write(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.stream.writable().await?
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Does one file operation ([`wire::answer`]) and sends its body, then its reply. An input
/// that went over [`wire::MAX_BODY`] (`None`) is refused rather than done with part of it.
async fn files_call(frame: proto::Frame, input: Option<Vec<u8>>, out: Out) {
    let refused = |e| (wire::Reply::Refused(e), Vec::new());
    let (reply, body) = match (frame.json::<wire::Call>(), input) {
        (Err(e), _) => refused(wire::WireError::Failed {
            message: e.to_string(),
        }),
        (Ok(_), None) => refused(wire::WireError::TooLarge {
            cap: wire::MAX_BODY as u64,
        }),
        (Ok(call), Some(input)) => wire::answer(call, input).await,
    };
    for chunk in body.chunks(proto::CHUNK) {
        let _ = out.send(proto::encode(Kind::Data, frame.id, chunk)).await;
    }
    let _ = out
        .send(proto::encode_json(Kind::Done, frame.id, &reply))
        .await;
}

async fn run_command(id: u64, run: Run, out: Out) {
    let mut cmd = tokio::process::Command::new(&run.shell);
    cmd.arg("-c")
        .arg(&run.command)
        .current_dir(&run.cwd)
        .envs(run.env.iter().map(|(k, v)| (k, v)))
        .env(MARKER_VAR, &run.marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group (killed as one) without a fork: see the module doc. No command
    // has a controlling terminal, so a session of its own would add nothing.
    cmd.process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let failed = Failed {
                message: format!("{} -c: {e}", run.shell),
            };
            let _ = out
                .send(proto::encode_json(Kind::Failed, id, &failed))
                .await;
            return;
        }
    };
    let pid = child.id().unwrap_or(0);
    let _ = out
        .send(proto::encode_json(Kind::Started, id, &Started { pid }))
        .await;
    let forward = Arc::new(AtomicBool::new(true));
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(
            o,
            Kind::Stdout,
            id,
            out.clone(),
            forward.clone(),
        )));
    }
    if let Some(e) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(
            e,
            Kind::Stderr,
            id,
            out.clone(),
            forward.clone(),
        )));
    }
    let code = match child.wait().await {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .map(i64::from)
                .or_else(|| status.signal().map(|s| 128 + i64::from(s)))
        }
        Err(_) => None,
    };
    let drained = tokio::time::timeout(LET_GO, async {
        for p in pumps.iter_mut() {
            let _ = p.await;
        }
    })
    .await
    .is_ok();
    let cut = !drained;
    let left = if cut {
        // The pumps keep draining, unread, until the last writer closes.
        forward.store(false, Ordering::SeqCst);
        list_marked(&run.marker)
    } else {
        Vec::new()
    };
    let exit = Exit { code, cut, left };
    let _ = out.send(proto::encode_json(Kind::Exit, id, &exit)).await;
}

/// Forwards one pipe as frames while `forward` holds, then drains it unread until EOF.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    mut pipe: R,
    kind: Kind,
    id: u64,
    out: Out,
    forward: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; proto::CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if forward.load(Ordering::SeqCst) {
                    let _ = out.send(proto::encode(kind, id, &buf[..n])).await;
                }
            }
        }
    }
}

/// Pids of the live processes whose environment holds `FLOWERBOX_EXEC=<marker>` (those this
/// uid may read: the command's, whatever their session).
fn marked(marker: &str) -> Vec<i32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == needle.as_bytes()))
        })
        .collect()
}

/// Stops, then kills, every marked process and the process group it leads, until none is
/// left (stopping first, so nothing forks in between). `false` when some survived 50 rounds.
///
/// "None left" is two empty scans in a row: a process in the middle of `execve` shows an empty
/// environment for a moment (the kernel sets the new image's environment after the old one is
/// gone), so one empty scan can miss it.
fn kill_marked(marker: &str) -> bool {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    let mut empty_before = false;
    for _ in 0..50 {
        let found = marked(marker);
        if found.is_empty() {
            if empty_before {
                return true;
            }
            empty_before = true;
        } else {
            empty_before = false;
        }
        for sig in [Signal::SIGSTOP, Signal::SIGKILL] {
            for &p in &found {
                let _ = killpg(Pid::from_raw(p), sig);
                let _ = kill(Pid::from_raw(p), sig);
            }
        }
        std::thread::sleep(Duration::from_millis(if found.is_empty() {
            10
        } else {
            50
        }));
    }
    marked(marker).is_empty()
}

/// `pid command` (command line cut at 80 characters) of each marked process.
fn list_marked(marker: &str) -> Vec<String> {
    marked(marker)
        .into_iter()
        .map(|pid| format!("{pid} {}", super::command_line(pid, 80)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_kills_marked_processes_only() {
        let marker = uuid::Uuid::new_v4().simple().to_string();
        let mut marked_child = std::process::Command::new("sleep")
            .arg("30")
            .env(MARKER_VAR, &marker)
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .env(MARKER_VAR, format!("{marker}x"))
            .spawn()
            .unwrap();
        let pid = marked_child.id() as i32;
        // Right after spawn the child may still be inside execve, its environment not yet
        // readable (the fresh machine caught that once): wait for it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while marked(&marker).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(marked(&marker), vec![pid]);
        assert!(list_marked(&marker)[0].starts_with(&format!("{pid} sleep 30")));
        // Reaped by a thread, as the service's runtime reaps its children.
        let reaper = std::thread::spawn(move || marked_child.wait());
        assert!(kill_marked(&marker));
        assert!(reaper.join().unwrap().is_ok());
        assert!(
            other.try_wait().unwrap().is_none(),
            "an unmarked process was killed"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
