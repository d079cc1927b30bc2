//! The exec service's wire format, spoken over the attached stdin (host → service) and stdout
//! (service → host) of one Docker exec.
//!
//! - **The opening.** The service speaks first: the [`PREAMBLE`] (a NUL, `FBXEXEC`, the
//!   protocol [`VERSION`] as a u32 BE), then frames. The engine and the shell write to the
//!   same stdout when the exec cannot start (Docker writes its error there, e.g. `OCI runtime
//!   exec failed: … cannot exec in a stopped container`; a missing C library makes the loader
//!   complain), so before the preamble nothing is read as a frame: [`Opening`] tells the
//!   preamble from anything else, and anything else is kept (bounded, [`FOREIGN_MAX`]) as the
//!   reason the service did not start. Engine text never starts with a NUL, so it can never be
//!   mistaken for the preamble, nor, once the preamble is required, for a frame length.
//! - **Frames.** Length-prefixed `[u32 BE length][u8 kind][u64 BE request id][payload]`,
//!   length counting kind, id and payload. Output frames carry raw bytes; the others a small
//!   JSON object.
//!
//! The host treats the service as untrusted (it runs as the agent's uid in the agent's
//! container): [`FrameReader`] never holds more than one frame of at most [`MAX_FRAME`] bytes,
//! and any malformed frame is a [`ProtoError`], which ends the connection, never the host.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Protocol version, sent in the [`PREAMBLE`] and in [`Hello`]: a stale binary is refused,
/// not misunderstood. 2: the preamble. 3: file operations ([`Kind::Files`]). The frames over a
/// Unix socket ([`Kind::Channel`], [`Kind::Switched`]) need no new version: the host offers
/// them only to a service whose hello says it can ([`Hello::socket`]), so either side of 3
/// without them works with the other as before. 4: the run's end ([`Kind::End`]).
pub const VERSION: u32 = 4;

/// What the service writes before anything else: [`MAGIC`] and [`VERSION`] (u32 BE).
pub const PREAMBLE: [u8; 12] = preamble(VERSION);

/// The preamble's first eight bytes. The NUL first: no engine or shell message starts with one.
pub const MAGIC: [u8; 8] = *b"\0FBXEXEC";

/// Most bytes of foreign text (the engine's or the shell's words instead of the preamble)
/// kept as the reason the service did not start.
pub const FOREIGN_MAX: usize = 2048;

/// The preamble for protocol `version`.
pub const fn preamble(version: u32) -> [u8; 12] {
    let v = version.to_be_bytes();
    let m = MAGIC;
    [
        m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], v[0], v[1], v[2], v[3],
    ]
}

/// Longest frame either side accepts (kind + id + payload), in bytes.
pub const MAX_FRAME: usize = 1 << 20;

/// Output bytes per frame the service sends.
pub const CHUNK: usize = 64 * 1024;

/// Bytes before the payload: length, kind, id.
const HEADER: usize = 4 + 1 + 8;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Host → service: run a command ([`Run`]).
    Run = 1,
    /// Host → service: kill everything a command started ([`Kill`]).
    Kill = 2,
    /// Host → service: do one file operation
    /// ([`crate::sandbox::files::wire::Call`], JSON); its input went before it as
    /// [`Kind::Input`] frames of the same id. Answered by [`Kind::Data`] frames, then one
    /// [`Kind::Done`].
    Files = 3,
    /// Host → service: bytes of a file operation's input (raw), before its [`Kind::Files`].
    Input = 4,
    /// Host → service, once, id 0, right after the hello and before any request: carry the
    /// frames over the socket at [`super::channel::SOCKET_PATH`], opening it with this
    /// payload (the run's one-use token, [`super::channel::TOKEN_LEN`] raw bytes). Answered
    /// on stdout by [`Kind::Switched`].
    Channel = 5,
    /// Host → service, at the run's end, no payload: kill every other process of the
    /// service's uid in the pod's PID namespace and wait until none runs
    /// ([`super::end`]); answered by one [`Kind::Ended`], after which the service exits.
    End = 6,
    /// Service → host, once, id 0: the service is up ([`Hello`]).
    Hello = 10,
    /// The command's process exists ([`Started`]).
    Started = 11,
    /// Bytes the command wrote to stdout.
    Stdout = 12,
    /// Bytes the command wrote to stderr.
    Stderr = 13,
    /// The command's shell ended ([`Exit`]); the last frame of a request.
    Exit = 14,
    /// The kill is done ([`Killed`]).
    Killed = 15,
    /// The command could not be started ([`Failed`]); the last frame of a request.
    Failed = 16,
    /// Bytes of a file operation's result body (raw).
    Data = 17,
    /// A file operation's reply ([`crate::sandbox::files::wire::Reply`], JSON); the last
    /// frame of its request.
    Done = 18,
    /// Service → host, once, id 0, on stdout: the answer to [`Kind::Channel`] ([`Switched`]).
    Switched = 19,
    /// The answer to [`Kind::End`] ([`Ended`]); the last frame the service sends.
    Ended = 20,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Run,
            2 => Kind::Kill,
            3 => Kind::Files,
            4 => Kind::Input,
            5 => Kind::Channel,
            6 => Kind::End,
            10 => Kind::Hello,
            11 => Kind::Started,
            12 => Kind::Stdout,
            13 => Kind::Stderr,
            14 => Kind::Exit,
            15 => Kind::Killed,
            16 => Kind::Failed,
            17 => Kind::Data,
            18 => Kind::Done,
            19 => Kind::Switched,
            20 => Kind::Ended,
            _ => return None,
        })
    }
}

/// A command to run: `shell -c command` in `cwd`, with the service's environment plus `env`
/// and the marker, in a session and process group of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `bash` or `sh`.
    pub shell: String,
    /// The command line.
    pub command: String,
    /// Working directory inside the container.
    pub cwd: String,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Value of `FLOWERBOX_EXEC` for every process of the command.
    pub marker: String,
}

/// Kill every process carrying `marker` and their process groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kill {
    /// The command's marker.
    pub marker: String,
}

/// The service is ready.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`VERSION`] of the service.
    pub version: u32,
    /// The service's pid in the container's PID namespace.
    pub pid: u32,
    /// A socket is mounted at [`super::channel::SOCKET_PATH`]: the host may offer it
    /// ([`Kind::Channel`]). Absent (a service of another make): `false`.
    #[serde(default)]
    pub socket: bool,
}

/// The service's answer to [`Kind::Channel`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Switched {
    /// The service opened the socket with the token: from now on every frame goes over it,
    /// both ways. `false`: it stays on stdin and stdout.
    pub ok: bool,
    /// Why not (with `ok` false), for the logs.
    pub message: String,
}

/// The command's shell runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// Its pid (and process group and session id).
    pub pid: u32,
}

/// The command's shell ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    /// Its exit code, 128 + n for signal n (as a shell reports it); `None` when unknown.
    pub code: Option<i64>,
    /// A background process still held the output ~200 ms after the shell exited; the service
    /// keeps draining it, unread.
    pub cut: bool,
    /// `pid command` of marked processes still running (with `cut`).
    pub left: Vec<String>,
}

/// The kill's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Killed {
    /// No marked process was left.
    pub ok: bool,
}

/// The run's end's outcome ([`Kind::End`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// `pid state command` of the service's uid's processes still running after the wait
    /// (a few at most); empty: none is left.
    pub left: Vec<String>,
}

/// The command did not start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// Why (the spawn error).
    pub message: String,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// What it is.
    pub kind: Kind,
    /// The request it belongs to (0 for [`Kind::Hello`]).
    pub id: u64,
    /// Raw payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// The payload as `T`.
    pub fn json<T: for<'de> Deserialize<'de>>(&self) -> Result<T, ProtoError> {
        serde_json::from_slice(&self.payload).map_err(|e| ProtoError::Payload(self.kind, e))
    }
}

/// A frame that breaks the protocol.
#[derive(Debug, Error)]
pub enum ProtoError {
    /// The length field is below the header or above [`MAX_FRAME`].
    #[error("exec service frame of {0} bytes (at most {MAX_FRAME})")]
    Length(usize),
    /// An unknown kind byte.
    #[error("exec service frame of unknown kind {0}")]
    UnknownKind(u8),
    /// A JSON payload that does not parse.
    #[error("exec service {0:?} frame: {1}")]
    Payload(Kind, serde_json::Error),
}

/// Encodes one frame. Panics never: a payload over [`MAX_FRAME`] is the caller's bug and is
/// refused by the reader on the other side.
pub fn encode(kind: Kind, id: u64, payload: &[u8]) -> Vec<u8> {
    let len = (1 + 8 + payload.len()) as u32;
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Encodes a frame with a JSON payload.
pub fn encode_json<T: Serialize>(kind: Kind, id: u64, value: &T) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap_or_default();
    encode(kind, id, &payload)
}

/// What the first bytes on the service's stdout turned out to be ([`OpeningReader::push`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    /// Too few bytes to tell yet (a prefix of the preamble).
    Pending,
    /// The service's preamble, naming its protocol version; `rest` is what followed it
    /// (frames).
    Service {
        /// The version in the preamble.
        version: u32,
        /// Bytes after the preamble.
        rest: Vec<u8>,
    },
    /// Not the service: the engine's or a shell's text (or anything else). Read on, keeping at
    /// most [`FOREIGN_MAX`] bytes, until the stream ends; [`OpeningReader::foreign`] holds it.
    Foreign,
}

/// Tells the service's preamble from anything else on its stdout (see the module docs).
#[derive(Debug, Default)]
pub struct OpeningReader {
    buf: Vec<u8>,
    foreign: bool,
}

impl OpeningReader {
    /// Takes the next bytes of the stream and says what it is so far. Once
    /// [`Opening::Foreign`], it stays so, and later bytes are kept up to [`FOREIGN_MAX`].
    pub fn push(&mut self, bytes: &[u8]) -> Opening {
        let room = FOREIGN_MAX.saturating_sub(self.buf.len());
        if self.foreign {
            self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
            return Opening::Foreign;
        }
        self.buf.extend_from_slice(bytes);
        let seen = self.buf.len().min(MAGIC.len());
        if self.buf[..seen] != MAGIC[..seen] {
            self.foreign = true;
            self.buf.truncate(FOREIGN_MAX);
            return Opening::Foreign;
        }
        if self.buf.len() < PREAMBLE.len() {
            return Opening::Pending;
        }
        let v = &self.buf[MAGIC.len()..PREAMBLE.len()];
        Opening::Service {
            version: u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
            rest: self.buf[PREAMBLE.len()..].to_vec(),
        }
    }

    /// The foreign text so far, as one line for a message: lossy UTF-8, control characters
    /// (line breaks included) as spaces, runs of spaces folded, trimmed; at most
    /// [`FOREIGN_MAX`] bytes of input.
    pub fn foreign(&self) -> String {
        one_line(&self.buf)
    }
}

/// `bytes` as one printable line (see [`OpeningReader::foreign`]).
pub fn one_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        out.push(c);
    }
    out.trim_end().to_string()
}

/// Streaming decoder: bytes in, whole frames out, memory bounded by one frame.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, `None` when more bytes are needed. After an error the stream is
    /// out of step: stop reading it.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if !(9..=MAX_FRAME).contains(&len) {
            return Err(ProtoError::Length(len));
        }
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let kind = Kind::from_u8(self.buf[4]).ok_or(ProtoError::UnknownKind(self.buf[4]))?;
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&self.buf[5..13]);
        let payload = self.buf[HEADER..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(Frame {
            kind,
            id: u64::from_be_bytes(id),
            payload,
        }))
    }

    /// Bytes held, waiting for the rest of a frame.
    pub fn held(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_whole_and_byte_by_byte() {
        let mut bytes = encode(Kind::Stdout, 7, b"\xff\x00hi");
        bytes.extend(encode_json(
            Kind::Exit,
            7,
            &Exit {
                code: Some(3),
                cut: false,
                left: vec![],
            },
        ));
        let mut whole = FrameReader::default();
        whole.push(&bytes);
        let a = whole.next_frame().unwrap().unwrap();
        assert_eq!(
            (a.kind, a.id, a.payload.as_slice()),
            (Kind::Stdout, 7, &b"\xff\x00hi"[..])
        );
        let b = whole.next_frame().unwrap().unwrap();
        assert_eq!(b.json::<Exit>().unwrap().code, Some(3));
        assert!(whole.next_frame().unwrap().is_none());
        let mut slow = FrameReader::default();
        let mut got = Vec::new();
        for byte in &bytes {
            slow.push(&[*byte]);
            while let Some(f) = slow.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, vec![a, b]);
        assert_eq!(slow.held(), 0);
    }

    #[test]
    fn the_preamble_opens_the_stream_whole_or_byte_by_byte() {
        let mut bytes = PREAMBLE.to_vec();
        bytes.extend(encode_json(
            Kind::Hello,
            0,
            &Hello {
                version: VERSION,
                pid: 9,
                socket: false,
            },
        ));
        let mut whole = OpeningReader::default();
        let Opening::Service { version, rest } = whole.push(&bytes) else {
            panic!("not the service");
        };
        assert_eq!(version, VERSION);
        let mut frames = FrameReader::default();
        frames.push(&rest);
        assert_eq!(frames.next_frame().unwrap().unwrap().kind, Kind::Hello);
        let mut slow = OpeningReader::default();
        for (i, b) in bytes.iter().enumerate() {
            match slow.push(&[*b]) {
                Opening::Pending => assert!(i + 1 < PREAMBLE.len()),
                Opening::Service { version, rest } => {
                    assert_eq!((i + 1, version, rest.len()), (PREAMBLE.len(), VERSION, 0));
                    break;
                }
                Opening::Foreign => panic!("foreign at byte {i}"),
            }
        }
        // Another version is still the service's preamble: the caller refuses it by number.
        let mut old = OpeningReader::default();
        assert!(matches!(
            old.push(&preamble(1)),
            Opening::Service { version: 1, .. }
        ));
    }

    /// The failing input of issue 26: the engine's error text where the service's first bytes
    /// belong was read as a frame length (`exec service frame of 1667329646 bytes`, the bytes
    /// "cann"), and the reason was lost. It is the reason now, whole, on one line.
    #[test]
    fn engine_text_before_the_service_is_the_reason_never_a_frame() {
        for text in [
            "cannot exec in a stopped state: unknown\r\n",
            "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown\r\n",
            "task 4f1c not found: not found\r\n",
            "container 4454865120ac is not running\r\n",
        ] {
            // The old reading: its first four bytes as a length.
            let mut frames = FrameReader::default();
            frames.push(text.as_bytes());
            assert!(matches!(frames.next_frame(), Err(ProtoError::Length(_))));
            let mut r = OpeningReader::default();
            // In two pieces, as a stream may deliver it.
            let (a, b) = text.as_bytes().split_at(3);
            assert_eq!(r.push(a), Opening::Foreign, "{text}");
            assert_eq!(r.push(b), Opening::Foreign);
            assert_eq!(r.foreign(), text.trim_end(), "{text}");
        }
        // Text that happens to follow the magic's NUL is still not the service.
        let mut r = OpeningReader::default();
        assert_eq!(r.push(b"\0FBXoops"), Opening::Foreign);
        // A flood is kept bounded.
        let mut r = OpeningReader::default();
        for _ in 0..1000 {
            r.push(&[b'x'; 1000]);
        }
        assert_eq!(r.foreign().len(), FOREIGN_MAX);
        assert_eq!(one_line(b"a\n\n  b\x1b[31m\t"), "a b [31m");
    }

    #[test]
    fn garbage_is_an_error_never_a_panic_or_a_big_buffer() {
        // An absurd length is refused from its four bytes, before any payload is held.
        let mut r = FrameReader::default();
        r.push(&[0xff, 0xff, 0xff, 0xff, 12]);
        assert!(matches!(r.next_frame(), Err(ProtoError::Length(_))));
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 3]);
        assert!(matches!(r.next_frame(), Err(ProtoError::Length(3))));
        let mut r = FrameReader::default();
        r.push(&[0, 0, 0, 9]);
        assert!(r.next_frame().unwrap().is_none());
        let mut r = FrameReader::default();
        r.push(&encode(Kind::Run, 1, b"")[..4]);
        r.push(&[99]);
        assert!(matches!(r.next_frame(), Err(ProtoError::UnknownKind(99))));
        let mut r = FrameReader::default();
        r.push(&encode(Kind::Exit, 1, b"{not json"));
        let f = r.next_frame().unwrap().unwrap();
        assert!(f.json::<Exit>().is_err());
        // Random bytes: every outcome is Ok or Err, and nothing over one frame is kept.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let mut r = FrameReader::default();
            for _ in 0..64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                r.push(&seed.to_le_bytes());
                match r.next_frame() {
                    Ok(_) => assert!(r.held() <= MAX_FRAME + HEADER),
                    Err(_) => break,
                }
            }
        }
    }
}
