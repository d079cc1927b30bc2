//! The host's end of one container's exec service: one Docker exec with stdin, stdout and
//! stderr attached (bollard's hijacked connection), or for a container's first service on a
//! local Docker engine the container's own attach (the service starts beside its main process,
//! [`MAIN_SCRIPT`], no exec needed), requests multiplexed over it by id; on a
//! local engine the frames then move to the host's socket ([`super::socket`]), past the
//! engine's relay, while the attached exec stays for what only it can do: carrying the
//! socket's one-use token (which no agent process can read), telling the service's death (its
//! stream ends) and its stderr. When the socket cannot be had, the frames stay on the attach.
//!
//! The host never opens or connects to anything in the container: it talks only to the
//! engine, and listens on its own socket. What comes back is untrusted: frames are decoded with a bounded [`FrameReader`],
//! a frame for an unknown request is dropped, and any malformed frame ends the connection
//! (every request in flight then sees [`Request::next`] return `None`). Each request's events
//! go through a small bounded channel, so a slow reader holds the service back, never grows
//! host memory.

use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use bollard::Docker;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::socket::HostSocket;
use crate::sandbox::docker::lock;
use crate::sandbox::output::Stream;
use crate::sandbox::service::channel::Token;
use crate::sandbox::service::proto::{
    self, Exit, Failed, Frame, FrameReader, Hello, Killed, Kind, Opening, OpeningReader,
    ProtoError, Started, Switched,
};
use crate::sandbox::StderrTail;

/// How long a new service gets for its preamble, and again for its hello.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How long writing one frame to the service may take.
const SEND_WAIT: Duration = Duration::from_secs(5);
/// Events queued per request.
const EVENTS: usize = 32;

/// What the service said about one request.
#[derive(Debug)]
pub(crate) enum Event {
    /// The command's shell runs.
    Started,
    /// Output.
    Out(Stream, Vec<u8>),
    /// The shell ended (last event).
    Exit(Exit),
    /// A kill finished; `true` when nothing marked was left.
    Killed(bool),
    /// The command did not start (last event).
    Failed(String),
    /// Bytes of a file operation's result body.
    Data(Vec<u8>),
    /// A file operation's reply, as sent (last event).
    Done(Vec<u8>),
    /// The run's end is done: the processes of the service's uid still running (empty: none).
    Ended(Vec<String>),
}

/// The service's stdin, written by the requests themselves (one frame at a time).
type Input = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// Which way the frames go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// Over the host's Unix socket, past the engine.
    Socket,
    /// Over the attached exec's stdin and stdout, through the engine.
    Attach,
}

struct Shared {
    /// Where requests are written: the attached stdin, or the socket.
    input: tokio::sync::Mutex<Input>,
    /// The attached stdin while the frames go over the socket: held open (its end ends the
    /// service), closed with the connection.
    attached: tokio::sync::Mutex<Option<Input>>,
    channel: Channel,
    pending: Mutex<HashMap<u64, mpsc::Sender<Event>>>,
    next_id: AtomicU64,
    dead: CancellationToken,
    why: Mutex<Option<String>>,
    stderr: StderrTail,
    pid: u32,
    /// It broke the protocol (or stopped answering): never start it again.
    broken: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn die(&self, why: String) {
        let mut w = lock(&self.why);
        if w.is_none() {
            tracing::debug!(%why, "exec service connection ended");
            *w = Some(why);
        }
        drop(w);
        self.dead.cancel();
        lock(&self.pending).clear();
    }
}

/// A live connection to one container's exec service (cheap to clone).
#[derive(Clone)]
pub(crate) struct Service {
    shared: Arc<Shared>,
}

/// Why a service did not start. Told apart by what happened (the engine's status, the first
/// bytes, the end of the stream), never by reading words: the words (the engine's, a
/// loader's) are only kept, bounded and on one line, to be shown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The engine refused to create or start the exec.
    #[error("the engine refused the exec: {0}")]
    Engine(#[source] bollard::errors::Error),
    /// Something other than the service spoke first (the engine's error, such as `OCI runtime
    /// exec failed: … cannot exec in a stopped container`, or a loader's complaint): its
    /// words.
    #[error("{}", if .0.is_empty() { "something else answered" } else { .0.as_str() })]
    Foreign(String),
    /// It ended before its preamble: the tail of its stderr.
    #[error("it ended before its hello{}", if .0.is_empty() { String::new() } else { format!(": {}", .0) })]
    Ended(String),
    /// Nothing whole within [`HELLO_WAIT`].
    #[error("no hello within {} s", HELLO_WAIT.as_secs())]
    Silent,
    /// A service of another protocol version (a stale binary).
    #[error("protocol {0}, expected {want}", want = proto::VERSION)]
    Version(u32),
    /// The hello was not a hello.
    #[error("{0}")]
    Hello(String),
    /// The attached stream failed.
    #[error("its stream failed: {0}")]
    Stream(#[source] bollard::errors::Error),
    /// A service beside the container's main process did not take the socket (its death
    /// would go unseen on the attach, which ends only with the container).
    #[error("it keeps to the engine's attach")]
    Attach,
    /// It said it opened the socket, and no connection with the token came.
    #[error("it took the socket, which never answered: {0}")]
    Socket(String),
}

/// What the stream said before the first frame.
enum Greeting {
    /// The preamble came; frame bytes already read.
    Service(Vec<u8>),
    /// Not the service.
    Failed(StartError),
}

/// The service's stdout and stderr as the engine multiplexes them.
type Output = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;

/// A service's attached streams before its handshake, and where it runs.
pub(crate) struct Attached {
    output: Output,
    input: Input,
    /// It runs beside the container's main process ([`attach_main`]): its stream ends only
    /// with the container, so an end before the preamble is told by a pause instead, and its
    /// death afterwards only by the socket's end (it must take the socket).
    main: bool,
}

/// How long a service beside the container's main process may stay quiet after something
/// other than its preamble came (a loader's complaint, the shell's `not found`) before that
/// counts as its end: its stream does not end with it.
const SETTLE: Duration = Duration::from_millis(500);

/// Attaches to the not yet started `container`, whose main process starts the service (see
/// [`MAIN_SCRIPT`]): stdin, stdout and stderr, from the start on.
pub(crate) async fn attach_main(docker: &Docker, container: &str) -> Result<Attached, StartError> {
    let options = bollard::query_parameters::AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        ..Default::default()
    };
    let attached = docker
        .attach_container(container, Some(options))
        .await
        .map_err(StartError::Engine)?;
    Ok(Attached {
        output: attached.output,
        input: attached.input,
        main: true,
    })
}

/// The container's main process when the service starts with it (`sh -c MAIN_SCRIPT fbx-main
/// <service argv>`): the service in the background with the attached stdin (as fd 3: an
/// asynchronous list's stdin is otherwise `/dev/null`), stdout and stderr, and `sleep`, which
/// holds none of them, keeping the container alive whatever becomes of the service (a later
/// start is a Docker exec).
pub(crate) const MAIN_SCRIPT: &str =
    "cd /; exec 3<&0; (\"$@\" <&3 3<&- &); exec sleep infinity </dev/null >/dev/null 2>&1 3<&-";

impl Service {
    /// Starts `argv` (the service, behind the container's exec prefix) as `user` in
    /// `container` and waits for its preamble and hello.
    /// With `socket` (a local engine's) usable and the service able, the frames then go over
    /// the socket.
    pub(crate) async fn start(
        docker: &Docker,
        container: &str,
        user: &str,
        argv: Vec<String>,
        socket: Option<&HostSocket>,
    ) -> Result<Service, StartError> {
        let attached = attach(docker, container, user, argv).await?;
        Service::handshake(container, attached, socket).await
    }

    /// Waits for the attached service's preamble and hello, and offers it `socket`. A
    /// service beside the container's main process that keeps to the attach is refused
    /// ([`StartError::Attach`]): nothing would tell its death.
    pub(crate) async fn handshake(
        container: &str,
        attached: Attached,
        socket: Option<&HostSocket>,
    ) -> Result<Service, StartError> {
        let Attached {
            mut output,
            mut input,
            main,
        } = attached;
        let stderr = StderrTail::default();
        let settle = main.then_some(SETTLE);
        let greeting = preamble(&mut output, &stderr, settle);
        let rest = match tokio::time::timeout(HELLO_WAIT, greeting).await {
            Ok(Greeting::Service(rest)) => rest,
            Ok(Greeting::Failed(e)) => return Err(e),
            Err(_) => return Err(StartError::Silent),
        };
        let mut reader = FrameReader::default();
        reader.push(&rest);
        let hello = tokio::time::timeout(HELLO_WAIT, hello(&mut output, &mut reader, &stderr))
            .await
            .map_err(|_| StartError::Silent)?
            .map_err(StartError::Hello)?;
        if hello.version != proto::VERSION {
            return Err(StartError::Version(hello.version));
        }
        let offer = socket.filter(|s| hello.socket && s.usable());
        let switched = match offer {
            Some(s) => switch(s, &mut output, &mut input, &mut reader, &stderr).await?,
            None => None,
        };
        let (input, attached, socket_out, channel) = match switched {
            Some(stream) => {
                let (rd, wr) = stream.into_split();
                let wr: Input = Box::pin(wr);
                // Frames come over the socket from now on, with a reader of their own.
                reader = FrameReader::default();
                (wr, Some(input), Some(rd), Channel::Socket)
            }
            None if main => return Err(StartError::Attach),
            None => (input, None, None, Channel::Attach),
        };
        tracing::debug!(%container, ?channel, "exec service up");
        let shared = Arc::new(Shared {
            input: tokio::sync::Mutex::new(input),
            attached: tokio::sync::Mutex::new(attached),
            channel,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            dead: CancellationToken::new(),
            why: Mutex::new(None),
            stderr,
            pid: hello.pid,
            broken: std::sync::atomic::AtomicBool::new(false),
        });
        tokio::spawn(read_frames(shared.clone(), output, socket_out, reader));
        Ok(Service { shared })
    }

    /// Which way its frames go.
    pub(crate) fn channel(&self) -> Channel {
        self.shared.channel
    }

    /// The connection still works.
    pub(crate) fn alive(&self) -> bool {
        !self.shared.dead.is_cancelled()
    }

    /// Why it ended.
    pub(crate) fn why(&self) -> String {
        lock(&self.shared.why)
            .clone()
            .unwrap_or_else(|| "the exec service stopped answering".into())
    }

    /// The service's pid in the container (from its hello).
    pub(crate) fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// Closes the connection (its container goes); nothing is broken.
    pub(crate) fn close(&self) {
        self.shared.die("its container went".into());
    }

    /// Gives up on the connection (a service that stopped answering): it is not restarted.
    pub(crate) fn abandon(&self, why: &str) {
        self.shared.broken.store(true, Ordering::SeqCst);
        self.shared.die(why.to_string());
    }

    /// It broke the protocol or stopped answering: a new one would do no better.
    pub(crate) fn broken(&self) -> bool {
        self.shared.broken.load(Ordering::SeqCst)
    }

    /// A new request, `None` when the connection has ended.
    pub(crate) fn request(&self) -> Option<Request> {
        if !self.alive() {
            return None;
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(EVENTS);
        lock(&self.shared.pending).insert(id, tx);
        // Registered after a death cleared the table: not alive any more.
        if !self.alive() {
            lock(&self.shared.pending).remove(&id);
            return None;
        }
        Some(Request {
            id,
            rx,
            shared: self.shared.clone(),
        })
    }
}

/// Creates and starts the service's exec with its three streams attached.
async fn attach(
    docker: &Docker,
    container: &str,
    user: &str,
    argv: Vec<String>,
) -> Result<Attached, StartError> {
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(argv),
        user: Some(user.to_string()),
        working_dir: Some("/".into()),
        ..Default::default()
    };
    let exec_id = docker
        .create_exec(container, config)
        .await
        .map_err(StartError::Engine)?
        .id;
    match docker
        .start_exec(&exec_id, None)
        .await
        .map_err(StartError::Engine)?
    {
        StartExecResults::Attached { output, input } => Ok(Attached {
            output,
            input,
            main: false,
        }),
        StartExecResults::Detached => Err(StartError::Hello("the exec started detached".into())),
    }
}

/// Reads the stream up to the service's preamble (its stderr into `stderr`); anything else
/// first is the reason it did not start, read to the end of the stream, or with `settle`
/// (a stream that outlives the service) until nothing more came for that long.
async fn preamble(output: &mut Output, stderr: &StderrTail, settle: Option<Duration>) -> Greeting {
    let mut opening = OpeningReader::default();
    let mut foreign = false;
    loop {
        let other = foreign || !stderr.text().is_empty();
        let next = match settle.filter(|_| other) {
            Some(pause) => tokio::time::timeout(pause, output.next())
                .await
                .unwrap_or(None),
            None => output.next().await,
        };
        match next {
            Some(Ok(LogOutput::StdOut { message })) => match opening.push(&message) {
                Opening::Pending => {}
                Opening::Service { version, rest } => {
                    if version != proto::VERSION {
                        return Greeting::Failed(StartError::Version(version));
                    }
                    return Greeting::Service(rest);
                }
                // Not the service: its words are the reason, read to the end.
                Opening::Foreign => foreign = true,
            },
            Some(Ok(LogOutput::StdErr { message })) => stderr.push(&message),
            Some(Ok(_)) => {}
            // The stream ended or broke; after foreign text, that text is the reason.
            end => {
                return Greeting::Failed(match (foreign, end) {
                    (true, _) => StartError::Foreign(opening.foreign()),
                    (false, Some(Err(e))) => StartError::Stream(e),
                    (false, _) => {
                        StartError::Ended(proto::one_line(stderr.text().trim().as_bytes()))
                    }
                })
            }
        }
    }
}

/// Reads the first frame, which must be the service's hello.
async fn hello(
    output: &mut Output,
    reader: &mut FrameReader,
    stderr: &StderrTail,
) -> Result<Hello, String> {
    let frame = next_frame(output, reader, stderr).await?;
    match frame.kind {
        Kind::Hello => frame.json::<Hello>().map_err(|e| e.to_string()),
        other => Err(format!("{other:?} before hello")),
    }
}

/// Offers the service the socket: a fresh token over its stdin, then its answer on stdout,
/// then the connection that opens with the token. `None`: the service could not take it
/// (said in the logs), the frames stay on the attach. An error: it took the socket, which
/// never delivered it (the start fails; the socket is not offered again).
async fn switch(
    socket: &HostSocket,
    output: &mut Output,
    input: &mut Input,
    reader: &mut FrameReader,
    stderr: &StderrTail,
) -> Result<Option<tokio::net::UnixStream>, StartError> {
    let switched = offer(socket, output, input, reader, stderr).await;
    if !matches!(switched, Ok(Some(_))) {
        socket.give_up();
    }
    switched
}

/// [`switch`]'s steps.
async fn offer(
    socket: &HostSocket,
    output: &mut Output,
    input: &mut Input,
    reader: &mut FrameReader,
    stderr: &StderrTail,
) -> Result<Option<tokio::net::UnixStream>, StartError> {
    let token = Token::random();
    let accepted = socket.expect(token.clone());
    let offer = proto::encode(Kind::Channel, 0, token.payload());
    let sent = tokio::time::timeout(SEND_WAIT, async {
        input.write_all(&offer).await?;
        input.flush().await
    })
    .await;
    if !matches!(sent, Ok(Ok(()))) {
        return Err(StartError::Hello(
            "it did not read the socket's offer".into(),
        ));
    }
    let frame = tokio::time::timeout(HELLO_WAIT, next_frame(output, reader, stderr))
        .await
        .map_err(|_| StartError::Silent)?
        .map_err(StartError::Hello)?;
    let answer = match frame.kind {
        Kind::Switched => frame
            .json::<Switched>()
            .map_err(|e| StartError::Hello(e.to_string()))?,
        other => return Err(StartError::Hello(format!("{other:?} before switched"))),
    };
    if !answer.ok {
        tracing::info!(why = %answer.message, "exec service keeps to the engine's attach");
        return Ok(None);
    }
    match tokio::time::timeout(HELLO_WAIT, accepted).await {
        Ok(Ok(stream)) => Ok(Some(stream)),
        _ => Err(StartError::Socket(format!(
            "no connection with its token within {} s",
            HELLO_WAIT.as_secs()
        ))),
    }
}

/// Reads the next frame from the attached stdout (its stderr into `stderr`).
async fn next_frame(
    output: &mut Output,
    reader: &mut FrameReader,
    stderr: &StderrTail,
) -> Result<Frame, String> {
    loop {
        if let Some(frame) = reader.next_frame().map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        match output.next().await {
            Some(Ok(LogOutput::StdOut { message })) => reader.push(&message),
            Some(Ok(LogOutput::StdErr { message })) => stderr.push(&message),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err(format!("it ended: {}", stderr.text().trim())),
        }
    }
}

/// The connection's reader: frames from the service's stdout (or from the socket, when
/// `socket`) to their requests, until the attached stream or the socket ends, breaks the
/// protocol or the connection is closed; then the connection dies and the service's stdin is
/// closed (which ends a service that is still there).
async fn read_frames(
    rd: Arc<Shared>,
    mut output: Output,
    mut socket: Option<tokio::net::unix::OwnedReadHalf>,
    mut reader: FrameReader,
) {
    let mut buf = vec![0u8; proto::CHUNK];
    let why = 'read: loop {
        let item = tokio::select! {
            _ = rd.dead.cancelled() => break 'read "closed".to_string(),
            read = read_socket(&mut socket, &mut buf) => match read {
                Ok(0) => break 'read "the exec service closed its socket".to_string(),
                // Frame bytes, wherever they came from, as the attach's stdout brings them.
                Ok(n) => Some(Ok(LogOutput::StdOut { message: buf[..n].to_vec().into() })),
                Err(e) => break 'read format!("exec service socket: {e}"),
            },
            item = output.next() => match item {
                // After the switch, frames come over the socket only.
                Some(Ok(LogOutput::StdOut { .. })) if rd.channel == Channel::Socket => continue,
                item => item,
            },
        };
        match item {
            Some(Ok(LogOutput::StdOut { message })) => {
                reader.push(&message);
                loop {
                    match reader.next_frame() {
                        Ok(Some(frame)) => {
                            if let Err(e) = dispatch(&rd, frame).await {
                                rd.broken.store(true, Ordering::SeqCst);
                                break 'read e.to_string();
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            rd.broken.store(true, Ordering::SeqCst);
                            break 'read e.to_string();
                        }
                    }
                }
            }
            Some(Ok(LogOutput::StdErr { message })) => rd.stderr.push(&message),
            Some(Ok(_)) => {}
            Some(Err(e)) => break format!("exec service stream: {e}"),
            None => {
                let tail = rd.stderr.text();
                break match tail.trim() {
                    "" => "the exec service ended".to_string(),
                    t => format!("the exec service ended: {t}"),
                };
            }
        }
    };
    rd.die(why);
    let _ = rd.input.lock().await.shutdown().await;
    if let Some(mut attached) = rd.attached.lock().await.take() {
        let _ = attached.shutdown().await;
    }
}

/// Reads from the socket, when there is one; never returns otherwise.
async fn read_socket(
    socket: &mut Option<tokio::net::unix::OwnedReadHalf>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    match socket {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Why a frame from the service ends the connection.
#[derive(Debug, thiserror::Error)]
enum DispatchError {
    /// Its payload does not parse.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// A frame only the host sends, or a second hello.
    #[error("exec service sent a {0:?} frame")]
    Unexpected(Kind),
}

/// Hands one frame to its request. Errors (the connection must end) on frames only the host
/// sends, a second hello, or a payload that does not parse.
async fn dispatch(shared: &Shared, frame: Frame) -> Result<(), DispatchError> {
    let event = match frame.kind {
        Kind::Started => {
            frame.json::<Started>()?;
            Event::Started
        }
        Kind::Stdout => Event::Out(Stream::Stdout, frame.payload),
        Kind::Stderr => Event::Out(Stream::Stderr, frame.payload),
        Kind::Exit => Event::Exit(frame.json::<Exit>()?),
        Kind::Killed => Event::Killed(frame.json::<Killed>()?.ok),
        Kind::Failed => Event::Failed(frame.json::<Failed>()?.message),
        Kind::Data => Event::Data(frame.payload),
        Kind::Done => Event::Done(frame.payload),
        Kind::Ended => Event::Ended(frame.json::<proto::Ended>()?.left),
        other => return Err(DispatchError::Unexpected(other)),
    };
    let tx = lock(&shared.pending).get(&frame.id).cloned();
    if let Some(tx) = tx {
        // A request that went away meanwhile: its events are dropped.
        let _ = tx.send(event).await;
    }
    Ok(())
}

/// One command's conversation with the service; leaving it (drop) forgets the id.
pub(crate) struct Request {
    id: u64,
    rx: mpsc::Receiver<Event>,
    shared: Arc<Shared>,
}

impl Request {
    async fn send(&self, kind: Kind, payload: Vec<u8>) -> bool {
        if payload.len() + 9 > proto::MAX_FRAME {
            return false;
        }
        self.send_encoded(proto::encode(kind, self.id, &payload))
            .await
    }

    /// Writes `frames` (whole encoded frames) in one write: frames sent one write each over
    /// a TCP engine wait for each other's acknowledgement (Nagle's algorithm against delayed
    /// ACKs, ~40 ms a file write).
    async fn send_encoded(&self, frames: Vec<u8>) -> bool {
        if self.shared.dead.is_cancelled() {
            return false;
        }
        // A stopped service stops reading; once the pipes are full, a write would wait forever.
        let sent = tokio::time::timeout(SEND_WAIT, async {
            let mut input = self.shared.input.lock().await;
            input.write_all(&frames).await?;
            input.flush().await
        });
        match sent.await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                self.shared.die(format!("writing to the exec service: {e}"));
                false
            }
            Err(_) => {
                self.shared.broken.store(true, Ordering::SeqCst);
                self.shared.die("the exec service stopped reading".into());
                false
            }
        }
    }

    /// Sends the command; `false` when the connection is gone or the request too large.
    pub(crate) async fn run(&self, run: &proto::Run) -> bool {
        self.send(Kind::Run, serde_json::to_vec(run).unwrap_or_default())
            .await
    }

    /// Asks the service to kill everything carrying `marker`.
    pub(crate) async fn kill(&self, marker: &str) -> bool {
        let kill = proto::Kill {
            marker: marker.to_string(),
        };
        self.send(Kind::Kill, serde_json::to_vec(&kill).unwrap_or_default())
            .await
    }

    /// Asks the service to end every process of its uid in the pod ([`Kind::End`]): its
    /// answer is an [`Event::Ended`], after which it exits.
    pub(crate) async fn end(&self) -> bool {
        self.send(Kind::End, Vec::new()).await
    }

    /// Sends one file operation: `input` as [`Kind::Input`] frames, then `call`. `false` when
    /// the connection is gone or the call too large for a frame.
    pub(crate) async fn files(&self, call: &[u8], input: &[u8]) -> bool {
        if call.len() + 9 > proto::MAX_FRAME {
            return false;
        }
        // Batches of at most a frame's size, the call in the last one.
        let mut batch = Vec::new();
        for chunk in input.chunks(proto::CHUNK) {
            if batch.len() + chunk.len() + 13 > proto::MAX_FRAME
                && !self.send_encoded(std::mem::take(&mut batch)).await
            {
                return false;
            }
            batch.extend(proto::encode(Kind::Input, self.id, chunk));
        }
        batch.extend(proto::encode(Kind::Files, self.id, call));
        self.send_encoded(batch).await
    }

    /// The next event; `None` when the connection ended.
    pub(crate) async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        lock(&self.shared.pending).remove(&self.id);
    }
}
