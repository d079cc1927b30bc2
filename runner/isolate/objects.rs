//! Bounded object copies (issue 25 §4 "Memory"): what a worker's branch brings into the
//! repository is bounded by [`ObjectLimits`] before a byte of it is inflated.
//!
//! Every object's declared size and type come from its header ([`Odb::read_header`]: libgit2
//! inflates a few bytes of it, never the object); an object over the per-object limit, or one
//! that would take the branch's total over its limit, is refused with [`IsolateError::TooLarge`]
//! and nothing more is read. Loose objects are then streamed from the worker's store into the
//! repository (a small buffer; libgit2's write stream refuses more bytes than declared, so a
//! header that lies cannot grow it) and checked against their name as they are written; packed
//! objects, which libgit2 cannot stream, are read whole — within the per-object limit, because
//! every object of the worker's packs (a delta's base included) is checked by its header first
//! ([`check_packs`]).

use git2::{ObjectType, Odb, Oid};
use std::path::PathBuf;

use super::IsolateError;

/// The default largest object a worker's branch may bring back (100 MiB, inflated).
pub const OBJECT_LIMIT: u64 = 100 << 20;
/// The default most bytes (inflated) one branch may bring back at a time (1 GiB).
pub const BRANCH_LIMIT: u64 = 1 << 30;

/// Bytes copied per read while streaming an object.
const CHUNK: usize = 64 << 10;

/// Bounds on the objects a worker's branch brings into the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectLimits {
    /// Largest object, inflated bytes (`FLOWERBOX_OBJECT_LIMIT`).
    pub object: u64,
    /// Most inflated bytes written for one branch in one go (`FLOWERBOX_BRANCH_LIMIT`).
    pub branch: u64,
}

impl Default for ObjectLimits {
    fn default() -> Self {
        ObjectLimits {
            object: OBJECT_LIMIT,
            branch: BRANCH_LIMIT,
        }
    }
}

/// Which bound an import went past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Oversize {
    /// One object (`FLOWERBOX_OBJECT_LIMIT`).
    Object(Oid),
    /// The branch's objects together (`FLOWERBOX_BRANCH_LIMIT`).
    Branch,
}

impl std::fmt::Display for Oversize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Oversize::Object(id) => write!(f, "对象 {id}"),
            Oversize::Branch => f.write_str("对象合计"),
        }
    }
}

impl Oversize {
    /// The setting that raises this bound.
    pub fn setting(&self) -> &'static str {
        match self {
            Oversize::Object(_) => "FLOWERBOX_OBJECT_LIMIT",
            Oversize::Branch => "FLOWERBOX_BRANCH_LIMIT",
        }
    }
}

/// Sizes for messages: MiB with one decimal, GiB from 1 GiB on.
pub fn mib(bytes: u64) -> String {
    match bytes >= 1 << 30 {
        true => format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30)),
        false => format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20)),
    }
}

/// One branch's import: its limits, what it has written so far, and where the worker's
/// commits stay when it is refused (for the message).
pub(crate) struct Tally<'a> {
    limits: &'a ObjectLimits,
    branch: &'a str,
    store: PathBuf,
    total: u64,
}

impl<'a> Tally<'a> {
    /// Nothing counted yet.
    pub(crate) fn new(limits: &'a ObjectLimits, branch: &'a str, store: PathBuf) -> Self {
        Tally {
            limits,
            branch,
            store,
            total: 0,
        }
    }

    fn too_large(&self, what: Oversize, size: u64, limit: u64) -> IsolateError {
        IsolateError::TooLarge {
            branch: self.branch.to_string(),
            what,
            size,
            limit,
            store: self.store.clone(),
        }
    }

    /// Refuses `id` of declared `size` when it or the branch's new total is over a limit;
    /// counts it otherwise.
    pub(crate) fn admit(&mut self, id: Oid, size: u64) -> Result<(), IsolateError> {
        if size > self.limits.object {
            return Err(self.too_large(Oversize::Object(id), size, self.limits.object));
        }
        let total = self.total.saturating_add(size);
        if total > self.limits.branch {
            return Err(self.too_large(Oversize::Branch, total, self.limits.branch));
        }
        self.total = total;
        Ok(())
    }
}

/// Checks every object of the worker's packs (`packs`: an object database of its pack files
/// only) by its header: a packed object may be a delta's base, inflated whole to read another.
pub(crate) fn check_packs(packs: &Odb<'_>, tally: &Tally<'_>) -> Result<(), IsolateError> {
    let mut ids = Vec::new();
    packs
        .foreach(|id| {
            ids.push(*id);
            true
        })
        .map_err(IsolateError::git("列不出执行者打包的对象"))?;
    for id in ids {
        let (size, _) = packs
            .read_header(id)
            .map_err(IsolateError::git(format!("读不出执行者的对象 {id} 的头")))?;
        if size as u64 > tally.limits.object {
            return Err(tally.too_large(Oversize::Object(id), size as u64, tally.limits.object));
        }
    }
    Ok(())
}

/// Copies object `id` (already admitted by [`Tally::admit`]) from `theirs` into `main`,
/// checked against its name. A blob is streamed when it is loose (it names no other object, so
/// a mismatch found once it is written leaves nothing dangling); any other object is read
/// whole (within the limit) and checked before it is written.
pub(crate) fn copy_object(
    main: &Odb<'_>,
    theirs: &Odb<'_>,
    id: Oid,
    size: usize,
    kind: ObjectType,
) -> Result<(), IsolateError> {
    let missing = || IsolateError::git(format!("执行者的分支缺对象 {id}"));
    if kind == ObjectType::Blob {
        if let Ok((mut reader, len, ObjectType::Blob)) = theirs.reader(id) {
            if len == size {
                let written = stream(main, &mut reader, len, kind)?;
                return match written == id {
                    true => Ok(()),
                    false => Err(mismatch(id, &written.to_string())),
                };
            }
        }
    }
    // Packed (libgit2 streams loose objects only) or not a blob: whole, within the limit.
    let obj = theirs.read(id).map_err(missing())?;
    if obj.data().len() != size || obj.kind() != kind {
        return Err(mismatch(id, "声明的大小或类型"));
    }
    let check = Oid::hash_object(kind, obj.data()).map_err(IsolateError::git("算不出对象名"))?;
    if check != id {
        return Err(mismatch(id, &check.to_string()));
    }
    main.write(kind, obj.data())
        .map_err(IsolateError::git("写不进对象库"))?;
    Ok(())
}

/// Streams `len` bytes of an object of `kind` from `reader` into `main`; returns the name
/// libgit2 computed for what it received.
fn stream(
    main: &Odb<'_>,
    reader: &mut impl std::io::Read,
    len: usize,
    kind: ObjectType,
) -> Result<Oid, IsolateError> {
    let mut writer = main
        .writer(len, kind)
        .map_err(IsolateError::git("写不进对象库"))?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(IsolateError::io("读不出执行者的对象"))?;
        if n == 0 {
            break;
        }
        // libgit2 refuses bytes past the declared size: a lying header ends here.
        std::io::Write::write_all(&mut writer, &buf[..n])
            .map_err(IsolateError::io("执行者的对象比它声明的大"))?;
    }
    writer
        .finalize()
        .map_err(IsolateError::git("执行者的对象和它声明的大小对不上"))
}

fn mismatch(id: Oid, found: &str) -> IsolateError {
    IsolateError::Git {
        what: format!("执行者的对象 {id} 内容和名字对不上"),
        source: git2::Error::from_str(found),
    }
}
