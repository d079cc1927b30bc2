//! The file operations as messages (issue 30 §2): what a backend whose engine does not see the
//! caller's disk sends into the sandbox, and what comes back. The side inside the sandbox
//! ([`answer`], run by the exec service) builds the agent's [`View`] from the [`Call`] and does
//! the operation with [`LocalFiles`] there, so the walk, the refusals (no symlink followed out of
//! a mount, no write outside a writable mount, nothing in a masked directory, the size caps)
//! and the content identity are the very code the local backend runs. The host's side,
//! [`RemoteFiles`], is a [`SandboxFiles`] over any [`FilesTransport`] (Docker: the exec
//! service's attached stream).
//!
//! Each operation is one call: its bulk input (the bytes a write puts) travels beside the call
//! as raw bytes, and its bulk output (a file's bytes, a glob's, grep's or identity's result as
//! JSON) comes back as raw bytes beside a small [`Reply`]. Refusals come back typed
//! ([`WireError`]) and become the same [`FilesError`]s the local backend gives, never text to
//! be matched. What comes back is untrusted (it was made beside the agent's processes): the
//! transport caps its size ([`MAX_BODY`]), and a reply of the wrong kind is an error.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::identity::{Exclusions, FileKey, WorkspaceIdentity};
use super::{Access, Contents, Edit, EditRefused, FilesError, GrepQuery, LocalFiles, SandboxFiles};
use crate::fsroot::{FsError, View, ViewError, ViewMount};

/// Most bytes of a call's input or a reply's body either side accepts: a whole file
/// ([`super::MAX_FILE_BYTES`]) and room for a large listing.
pub const MAX_BODY: usize = 2 * super::MAX_FILE_BYTES as usize;

/// An agent's view as data: its mounts with their rights, the masked paths, and the masked
/// directories' identities (as the side that computes them sees them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireView {
    /// `(path, read_only)` per mount.
    pub mounts: Vec<(PathBuf, bool)>,
    /// Masked paths.
    pub masked: Vec<PathBuf>,
    /// Masked directories by `(st_dev, st_ino)`.
    pub masked_ids: Vec<(u64, u64)>,
}

impl WireView {
    /// `view` as data.
    pub fn of(view: &View) -> WireView {
        WireView {
            mounts: view
                .mounts()
                .iter()
                .map(|m| (m.path.clone(), m.read_only))
                .collect(),
            masked: view.masked().to_vec(),
            masked_ids: view.masked_ids().to_vec(),
        }
    }

    /// The view it describes.
    pub fn view(&self) -> View {
        View::new(
            self.mounts
                .iter()
                .map(|(path, read_only)| ViewMount {
                    path: path.clone(),
                    read_only: *read_only,
                })
                .collect(),
            self.masked.clone(),
        )
        .hiding_ids(self.masked_ids.clone())
    }
}

/// One file operation ([`SandboxFiles`]' methods, one variant each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Call {
    /// [`SandboxFiles::read`]; `write`: [`Access::Write`].
    Read {
        /// The view.
        view: WireView,
        /// The path.
        path: PathBuf,
        /// Refuse a file the agent could not write back.
        write: bool,
    },
    /// [`SandboxFiles::head`].
    Head {
        /// The view.
        view: WireView,
        /// The path.
        path: PathBuf,
        /// Most bytes.
        n: usize,
    },
    /// [`SandboxFiles::write`]; the bytes are the call's input.
    Write {
        /// The view.
        view: WireView,
        /// The path.
        path: PathBuf,
    },
    /// [`SandboxFiles::edit`].
    Edit {
        /// The view.
        view: WireView,
        /// The path.
        path: PathBuf,
        /// The replacement.
        edit: Edit,
    },
    /// [`SandboxFiles::glob`].
    Glob {
        /// The view.
        view: WireView,
        /// Where the walk starts.
        base: PathBuf,
        /// The glob.
        pattern: String,
    },
    /// [`SandboxFiles::grep`].
    Grep {
        /// The view.
        view: WireView,
        /// Where the walk starts.
        base: PathBuf,
        /// The query.
        query: GrepQuery,
    },
    /// [`SandboxFiles::identity`].
    Identity {
        /// The tree.
        root: PathBuf,
        /// Excluded directories.
        dirs: Vec<PathBuf>,
        /// Excluded files by `(st_dev, st_ino)` as the sandbox's side sees them.
        files: Vec<(u64, u64)>,
    },
}

/// What a call did; its bulk result travels beside it (see each variant).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// A read: the resolved path; the body is the file's bytes, or empty for a directory.
    Read {
        /// The resolved path.
        path: PathBuf,
        /// It is a directory.
        dir: bool,
    },
    /// A head: the resolved path; the body is the bytes.
    Head {
        /// The resolved path.
        path: PathBuf,
    },
    /// A write.
    Write {
        /// The resolved path.
        path: PathBuf,
        /// The file existed.
        existed: bool,
    },
    /// An edit.
    Edit {
        /// The resolved path (the written one when applied).
        path: PathBuf,
        /// Places changed, or why the text refused it.
        outcome: Result<usize, EditRefused>,
    },
    /// A glob: the resolved base; the body is `[(path, mtime)]` as JSON.
    Glob {
        /// The resolved base.
        base: PathBuf,
    },
    /// A grep: the body is the lines as JSON.
    Grep,
    /// An identity: the body is the [`WorkspaceIdentity`] as JSON.
    Identity,
    /// The operation did not happen.
    Refused(WireError),
}

/// A [`FilesError`] as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum WireError {
    /// [`ViewError::Outside`].
    Outside {
        /// The path.
        path: PathBuf,
    },
    /// [`ViewError::Masked`].
    Masked {
        /// The path.
        path: PathBuf,
    },
    /// [`ViewError::ReadOnly`].
    ReadOnly {
        /// The mount.
        path: PathBuf,
    },
    /// [`ViewError::Loop`].
    Loop,
    /// [`ViewError::NotADirectory`].
    NotADirectory {
        /// The component.
        path: PathBuf,
    },
    /// [`ViewError::NotFound`].
    NotFound {
        /// The directory.
        path: PathBuf,
    },
    /// [`FsError::Symlink`].
    Symlink,
    /// [`FsError::NotRegular`].
    NotRegular,
    /// [`FsError::IsDir`].
    IsDir,
    /// [`FsError::TooLarge`].
    TooLarge {
        /// The cap.
        cap: u64,
    },
    /// [`FsError::Outside`].
    NotBeneath,
    /// [`FsError::Io`]: the OS error number when there is one.
    Io {
        /// `errno`.
        errno: Option<i32>,
        /// The error's text (kept when there is no number).
        message: String,
    },
    /// [`FilesError::Query`].
    Query {
        /// Why.
        message: String,
    },
    /// [`FilesError::Failed`].
    Failed {
        /// Why.
        message: String,
    },
}

impl From<FsError> for WireError {
    fn from(e: FsError) -> Self {
        match e {
            FsError::Symlink => WireError::Symlink,
            FsError::NotRegular => WireError::NotRegular,
            FsError::IsDir => WireError::IsDir,
            FsError::TooLarge(cap) => WireError::TooLarge { cap },
            FsError::Outside => WireError::NotBeneath,
            FsError::Io(io) => WireError::from(io),
        }
    }
}

impl From<std::io::Error> for WireError {
    fn from(io: std::io::Error) -> Self {
        WireError::Io {
            errno: io.raw_os_error(),
            message: io.to_string(),
        }
    }
}

impl From<FilesError> for WireError {
    fn from(e: FilesError) -> Self {
        match e {
            FilesError::View(v) => match v {
                ViewError::Outside(path) => WireError::Outside { path },
                ViewError::Masked(path) => WireError::Masked { path },
                ViewError::ReadOnly(path) => WireError::ReadOnly { path },
                ViewError::Loop => WireError::Loop,
                ViewError::NotADirectory(path) => WireError::NotADirectory { path },
                ViewError::NotFound(path) => WireError::NotFound { path },
                ViewError::Fs(fs) => fs.into(),
            },
            FilesError::Query(message) => WireError::Query { message },
            FilesError::Failed(message) => WireError::Failed { message },
        }
    }
}

impl From<WireError> for FilesError {
    fn from(e: WireError) -> Self {
        let fs = |e: FsError| FilesError::View(ViewError::Fs(e));
        match e {
            WireError::Outside { path } => ViewError::Outside(path).into(),
            WireError::Masked { path } => ViewError::Masked(path).into(),
            WireError::ReadOnly { path } => ViewError::ReadOnly(path).into(),
            WireError::Loop => ViewError::Loop.into(),
            WireError::NotADirectory { path } => ViewError::NotADirectory(path).into(),
            WireError::NotFound { path } => ViewError::NotFound(path).into(),
            WireError::Symlink => fs(FsError::Symlink),
            WireError::NotRegular => fs(FsError::NotRegular),
            WireError::IsDir => fs(FsError::IsDir),
            WireError::TooLarge { cap } => fs(FsError::TooLarge(cap)),
            WireError::NotBeneath => fs(FsError::Outside),
            WireError::Io { errno, message } => fs(FsError::Io(match errno {
                Some(n) => std::io::Error::from_raw_os_error(n),
                None => std::io::Error::other(message),
            })),
            WireError::Query { message } => FilesError::Query(message),
            WireError::Failed { message } => FilesError::Failed(message),
        }
    }
}

/// Does `call` here (inside the sandbox) with [`LocalFiles`], `input` the bytes a write puts;
/// returns the reply and its body.
pub async fn answer(call: Call, input: Vec<u8>) -> (Reply, Vec<u8>) {
    match perform(call, input).await {
        Ok(done) => done,
        Err(e) => (Reply::Refused(e), Vec::new()),
    }
}

async fn perform(call: Call, input: Vec<u8>) -> Result<(Reply, Vec<u8>), WireError> {
    let files = LocalFiles;
    Ok(match call {
        Call::Read { view, path, write } => {
            let access = if write { Access::Write } else { Access::Read };
            match files.read(&view.view(), &path, access).await? {
                (path, Contents::File(bytes)) => (Reply::Read { path, dir: false }, bytes),
                (path, Contents::Dir) => (Reply::Read { path, dir: true }, Vec::new()),
            }
        }
        Call::Head { view, path, n } => {
            let (path, bytes) = files.head(&view.view(), &path, n).await?;
            (Reply::Head { path }, bytes)
        }
        Call::Write { view, path } => {
            let (path, existed) = files.write(&view.view(), &path, input).await?;
            (Reply::Write { path, existed }, Vec::new())
        }
        Call::Edit { view, path, edit } => {
            let (path, outcome) = files.edit(&view.view(), &path, &edit).await?;
            (Reply::Edit { path, outcome }, Vec::new())
        }
        Call::Glob {
            view,
            base,
            pattern,
        } => {
            let (base, found) = files.glob(&view.view(), &base, &pattern).await?;
            (Reply::Glob { base }, json(&found)?)
        }
        Call::Grep { view, base, query } => {
            let lines = files.grep(&view.view(), &base, &query).await?;
            (Reply::Grep, json(&lines)?)
        }
        Call::Identity {
            root,
            dirs,
            files: keys,
        } => {
            let exclude = Exclusions {
                dirs,
                files: keys
                    .into_iter()
                    .map(|(dev, ino)| FileKey { dev, ino })
                    .collect(),
            };
            let id = files.identity(&root, &exclude).await?;
            (Reply::Identity, json(&id)?)
        }
    })
}

/// A reply's body as JSON (a path that is not UTF-8 cannot travel: the call fails).
fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, WireError> {
    serde_json::to_vec(value).map_err(|e| WireError::Failed {
        message: format!("the result cannot be sent: {e}"),
    })
}

/// Carries one call into the sandbox and its reply back.
#[async_trait]
pub trait FilesTransport: Send + Sync {
    /// Sends `call` with `input` beside it; the reply and its body (at most [`MAX_BODY`]
    /// bytes). Errors: the transport failed (then the operation may or may not have happened).
    async fn call(&self, call: &Call, input: Vec<u8>) -> Result<(Reply, Vec<u8>), FilesError>;
}

/// [`SandboxFiles`] done inside the sandbox, through `T`.
#[derive(Debug)]
pub struct RemoteFiles<T> {
    transport: T,
}

impl<T: FilesTransport> RemoteFiles<T> {
    /// File operations through `transport`.
    pub fn new(transport: T) -> Self {
        RemoteFiles { transport }
    }

    async fn ask(&self, call: Call, input: Vec<u8>) -> Result<(Reply, Vec<u8>), FilesError> {
        match self.transport.call(&call, input).await? {
            (Reply::Refused(e), _) => Err(e.into()),
            done => Ok(done),
        }
    }
}

/// The error for a reply that does not answer the call (a broken or hostile other side).
fn unexpected(reply: &Reply) -> FilesError {
    FilesError::Failed(format!("the sandbox answered with {reply:?}"))
}

/// The body as `T`.
fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FilesError> {
    serde_json::from_slice(body)
        .map_err(|e| FilesError::Failed(format!("the sandbox's reply: {e}")))
}

#[async_trait]
impl<T: FilesTransport> SandboxFiles for RemoteFiles<T> {
    async fn read(
        &self,
        view: &View,
        path: &Path,
        access: Access,
    ) -> Result<(PathBuf, Contents), FilesError> {
        let call = Call::Read {
            view: WireView::of(view),
            path: path.to_path_buf(),
            write: access == Access::Write,
        };
        match self.ask(call, Vec::new()).await? {
            (Reply::Read { path, dir: true }, _) => Ok((path, Contents::Dir)),
            (Reply::Read { path, dir: false }, bytes)
                if bytes.len() as u64 <= super::MAX_FILE_BYTES =>
            {
                Ok((path, Contents::File(bytes)))
            }
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn head(
        &self,
        view: &View,
        path: &Path,
        n: usize,
    ) -> Result<(PathBuf, Vec<u8>), FilesError> {
        let call = Call::Head {
            view: WireView::of(view),
            path: path.to_path_buf(),
            n,
        };
        match self.ask(call, Vec::new()).await? {
            (Reply::Head { path }, bytes) if bytes.len() <= n => Ok((path, bytes)),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn write(
        &self,
        view: &View,
        path: &Path,
        bytes: Vec<u8>,
    ) -> Result<(PathBuf, bool), FilesError> {
        if bytes.len() > MAX_BODY {
            return Err(ViewError::Fs(FsError::TooLarge(MAX_BODY as u64)).into());
        }
        let call = Call::Write {
            view: WireView::of(view),
            path: path.to_path_buf(),
        };
        match self.ask(call, bytes).await? {
            (Reply::Write { path, existed }, _) => Ok((path, existed)),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn edit(
        &self,
        view: &View,
        path: &Path,
        edit: &Edit,
    ) -> Result<(PathBuf, Result<usize, EditRefused>), FilesError> {
        let call = Call::Edit {
            view: WireView::of(view),
            path: path.to_path_buf(),
            edit: edit.clone(),
        };
        match self.ask(call, Vec::new()).await? {
            (Reply::Edit { path, outcome }, _) => Ok((path, outcome)),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn glob(
        &self,
        view: &View,
        base: &Path,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<(PathBuf, SystemTime)>), FilesError> {
        let call = Call::Glob {
            view: WireView::of(view),
            base: base.to_path_buf(),
            pattern: pattern.to_string(),
        };
        match self.ask(call, Vec::new()).await? {
            (Reply::Glob { base }, body) => Ok((base, parse(&body)?)),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn grep(
        &self,
        view: &View,
        base: &Path,
        query: &GrepQuery,
    ) -> Result<Vec<String>, FilesError> {
        let call = Call::Grep {
            view: WireView::of(view),
            base: base.to_path_buf(),
            query: query.clone(),
        };
        match self.ask(call, Vec::new()).await? {
            (Reply::Grep, body) => parse(&body),
            (other, _) => Err(unexpected(&other)),
        }
    }

    async fn identity(
        &self,
        root: &Path,
        exclude: &Exclusions,
    ) -> std::io::Result<WorkspaceIdentity> {
        let call = Call::Identity {
            root: root.to_path_buf(),
            dirs: exclude.dirs.clone(),
            files: exclude.files.iter().map(|k| (k.dev, k.ino)).collect(),
        };
        let io = |e: FilesError| match e {
            FilesError::View(ViewError::Fs(FsError::Io(io))) => io,
            other => std::io::Error::other(other),
        };
        match self.ask(call, Vec::new()).await.map_err(io)? {
            (Reply::Identity, body) => parse(&body).map_err(io),
            (other, _) => Err(io(unexpected(&other))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A transport that answers in this process, through JSON both ways, as the exec service
    /// does; it keeps the calls it carried.
    #[derive(Default)]
    struct Here {
        calls: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl FilesTransport for Here {
        async fn call(&self, call: &Call, input: Vec<u8>) -> Result<(Reply, Vec<u8>), FilesError> {
            let sent = serde_json::to_vec(call).unwrap();
            self.calls
                .lock()
                .unwrap()
                .push(String::from_utf8(sent.clone()).unwrap());
            let (reply, body) = answer(serde_json::from_slice(&sent).unwrap(), input).await;
            let back = serde_json::to_vec(&reply).unwrap();
            Ok((serde_json::from_slice(&back).unwrap(), body))
        }
    }

    fn view(rw: &Path, ro: &Path, masked: &Path) -> View {
        View::new(
            vec![
                ViewMount {
                    path: rw.to_path_buf(),
                    read_only: false,
                },
                ViewMount {
                    path: ro.to_path_buf(),
                    read_only: true,
                },
            ],
            vec![masked.to_path_buf()],
        )
    }

    /// The remote side refuses what the local one refuses, with the same typed errors, and
    /// does what it does; the identity comes back equal to the one computed here.
    #[tokio::test]
    async fn calls_through_the_wire_refuse_and_do_what_local_files_do() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (rw, ro, outside) = (root.join("rw"), root.join("ro"), root.join("outside"));
        for p in [&rw, &ro, &outside, &rw.join("runs")] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::write(outside.join("secret"), "s").unwrap();
        std::fs::write(ro.join("r.txt"), "read me").unwrap();
        std::fs::write(rw.join("runs/record"), "r").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), rw.join("out")).unwrap();
        std::fs::File::create(rw.join("huge"))
            .unwrap()
            .set_len(super::super::MAX_FILE_BYTES + 1)
            .unwrap();
        let v = view(&rw, &ro, &rw.join("runs"));
        let remote = RemoteFiles::new(Here::default());
        let local = LocalFiles;

        let is = |e: FilesError, want: &str| {
            let got = format!("{:?}", WireError::from(e));
            assert!(got.starts_with(want), "{got} is not {want}");
        };
        is(
            remote
                .read(&v, &rw.join("out"), Access::Read)
                .await
                .unwrap_err(),
            "Outside",
        );
        is(
            remote
                .read(&v, &outside.join("secret"), Access::Read)
                .await
                .unwrap_err(),
            "Outside",
        );
        is(
            remote
                .read(&v, &rw.join("runs/record"), Access::Read)
                .await
                .unwrap_err(),
            "Masked",
        );
        is(
            remote
                .write(&v, &ro.join("new"), b"x".to_vec())
                .await
                .unwrap_err(),
            "ReadOnly",
        );
        is(
            remote
                .read(&v, &ro.join("r.txt"), Access::Write)
                .await
                .unwrap_err(),
            "ReadOnly",
        );
        is(
            remote
                .read(&v, &rw.join("huge"), Access::Read)
                .await
                .unwrap_err(),
            "TooLarge",
        );
        is(remote.glob(&v, &rw, "[").await.unwrap_err(), "Query");
        assert!(!ro.join("new").exists());

        let (p, existed) = remote
            .write(&v, &rw.join("a/b.txt"), b"hello world".to_vec())
            .await
            .unwrap();
        assert_eq!((p.clone(), existed), (rw.join("a/b.txt"), false));
        let (_, got) = remote.read(&v, &p, Access::Read).await.unwrap();
        assert_eq!(got, Contents::File(b"hello world".to_vec()));
        assert_eq!(remote.head(&v, &p, 5).await.unwrap().1, b"hello");
        let edit = Edit {
            old: "world".into(),
            new: "there".into(),
            all: false,
        };
        assert_eq!(remote.edit(&v, &p, &edit).await.unwrap().1, Ok(1));
        assert_eq!(
            remote.edit(&v, &p, &edit).await.unwrap().1,
            Err(EditRefused::Text(super::super::EditError::NotFound))
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"hello there");
        assert_eq!(
            remote.glob(&v, &rw, "**/*.txt").await.unwrap(),
            local.glob(&v, &rw, "**/*.txt").await.unwrap()
        );
        let q = GrepQuery {
            numbers: true,
            ..GrepQuery::new("th.re", super::super::GrepMode::Content)
        };
        let lines = remote.grep(&v, &rw, &q).await.unwrap();
        assert_eq!(lines, local.grep(&v, &rw, &q).await.unwrap());
        assert_eq!(lines.len(), 1);
        let ex = Exclusions {
            dirs: vec![rw.join("runs")],
            files: Vec::new(),
        };
        let there = remote.identity(&rw, &ex).await.unwrap();
        assert_eq!(there, local.identity(&rw, &ex).await.unwrap());
        assert!(!there.is_empty());
        // The view travelled as data, with its rights and masks.
        let calls = remote.transport.calls.lock().unwrap();
        assert!(
            calls[0].contains("\"masked\"") && calls[0].contains("\"op\":\"read\""),
            "{}",
            calls[0]
        );
    }

    /// A reply of the wrong kind, or a body larger than what was asked, is an error.
    #[tokio::test]
    async fn a_reply_that_does_not_answer_the_call_is_refused() {
        struct Liar;
        #[async_trait]
        impl FilesTransport for Liar {
            async fn call(&self, call: &Call, _: Vec<u8>) -> Result<(Reply, Vec<u8>), FilesError> {
                Ok(match call {
                    Call::Head { path, .. } => (Reply::Head { path: path.clone() }, vec![0; 100]),
                    _ => (Reply::Grep, b"[]".to_vec()),
                })
            }
        }
        let remote = RemoteFiles::new(Liar);
        let v = View::new(
            vec![ViewMount {
                path: "/w".into(),
                read_only: false,
            }],
            Vec::new(),
        );
        assert!(matches!(
            remote.head(&v, Path::new("/w/a"), 10).await,
            Err(FilesError::Failed(_))
        ));
        assert!(matches!(
            remote.read(&v, Path::new("/w/a"), Access::Read).await,
            Err(FilesError::Failed(_))
        ));
    }
}
