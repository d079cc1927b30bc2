//! The run's disk budget (issue 25 §4 "Disk"; README "Bounds"): what a run's agents add to the
//! disk — growth of the workspace, the worktrees (and the repository's git directory where the
//! workers' stores are) and the workbench since the run started, plus what each live container
//! wrote to its own file system — is bounded by [`DiskBudget`] (`FLOWERBOX_DISK_BUDGET`).
//!
//! [`DiskWatch`] measures while agents run, cheaply: every [`TICK`] it reads the used blocks
//! and inodes (`statvfs`) of the places' file systems and of the engine's storage (a local engine's
//! data root, where the containers' layers are); only when they grew enough since the last
//! full measurement that the budget could be reached (at most every [`FULL_MIN`]), and at
//! least every [`WALK_EVERY`], does it measure fully: the places walked (allocated blocks, hard
//! links once, never through a symlink, the run directory left out; each inode charged its
//! share of its file system, [`inode_cost`]) and the engine asked for
//! each container's writable layer (which the engine sizes by walking the container's layers:
//! seconds on a busy machine, so never every tick). Past the budget [`DiskWatch::exceeded`]
//! resolves: the driver stops the run there (exit 1, the in-flight step recorded as
//! [`DISK_BUDGET`]), keeps what the containers wrote as images before they are removed, and
//! deletes nothing the agents wrote. Every manifest row carries the last measurement
//! (`disk_bytes`), and `doctor` shows the budget and what counts.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::record::manifest::DiskGauge;
use crate::sandbox::{SandboxFactory, Written};

/// The manifest's `error` of a step in flight when the disk budget stopped the run.
pub const DISK_BUDGET: &str = "disk-budget";
/// The default budget (20 GiB).
pub const DEFAULT_BUDGET: u64 = 20 << 30;
/// How often the watcher measures.
pub const TICK: Duration = Duration::from_secs(2);
/// The places are walked and the engine asked at least this often (a file system that other
/// processes free space on can hide growth from `statvfs`).
pub const WALK_EVERY: Duration = Duration::from_secs(60);
/// Full measurements come at most this often (the engine walks each container's layers to
/// size it, seconds on a busy machine).
pub const FULL_MIN: Duration = Duration::from_secs(4);

/// How much disk a run's agents may add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskBudget {
    /// Bytes (`FLOWERBOX_DISK_BUDGET`).
    pub bytes: u64,
}

impl Default for DiskBudget {
    fn default() -> Self {
        DiskBudget {
            bytes: DEFAULT_BUDGET,
        }
    }
}

/// Where the run's agents write on the host.
#[derive(Debug, Clone, Default)]
pub struct DiskPlaces {
    /// Directories whose growth counts (the workspace, the workbench, the worktrees, the
    /// repository's git directory); nested ones count once.
    pub dirs: Vec<PathBuf>,
    /// Directories left out (the run directory: flowerbox's own records).
    pub skip: Vec<PathBuf>,
}

/// One measurement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskUse {
    /// Growth of the places since the run started, bytes (never below zero).
    pub files: u64,
    /// What each live container wrote to its own file system.
    pub containers: Vec<Written>,
}

impl DiskUse {
    /// Everything counted, bytes.
    pub fn total(&self) -> u64 {
        self.containers
            .iter()
            .fold(self.files, |t, c| t.saturating_add(c.bytes))
    }
}

/// Sizes for messages: MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    crate::isolate::objects::mib(bytes)
}

/// The budget was passed: what was measured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("磁盘预算用完:这次运行的代理写了 {}(工作区、worktree、工作台 {}{}),预算 {}(FLOWERBOX_DISK_BUDGET)。运行停在这一步;写下的文件都留着",
    mib(.used.total()), mib(.used.files), containers(&.used.containers), mib(*.budget))]
pub struct DiskOver {
    /// The measurement that passed it.
    pub used: DiskUse,
    /// The budget, bytes.
    pub budget: u64,
}

fn containers(list: &[Written]) -> String {
    let mut big: Vec<&Written> = list.iter().filter(|c| c.bytes >= 1 << 20).collect();
    big.sort_by_key(|c| std::cmp::Reverse(c.bytes));
    big.iter()
        .take(5)
        .map(|c| format!(",{} 的容器里 {}", c.agent, mib(c.bytes)))
        .collect()
}

/// The watcher of one run (see the module docs). Dropping it stops it.
pub struct DiskWatch {
    over: tokio::sync::watch::Receiver<Option<DiskOver>>,
    task: tokio::task::JoinHandle<()>,
}

impl DiskWatch {
    /// Starts watching: the places are measured first (the baseline), then every [`TICK`];
    /// each measurement goes to `gauge`.
    pub fn start(
        places: DiskPlaces,
        budget: DiskBudget,
        sandboxes: Arc<dyn SandboxFactory>,
        gauge: Arc<DiskGauge>,
    ) -> DiskWatch {
        let (tx, over) = tokio::sync::watch::channel(None);
        let task = tokio::spawn(async move {
            // The engine's storage counts among the file systems watched (local engines).
            let mut watched = places.dirs.clone();
            watched.extend(sandboxes.storage().await);
            let Ok(mut meter) =
                tokio::task::spawn_blocking(move || Meter::new(places, watched)).await
            else {
                return;
            };
            let mut ticker = tokio::time::interval(TICK);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                // A few `statvfs` calls.
                if meter.due(budget.bytes) {
                    meter.fs_at_full = fs_used(&meter.watched);
                    meter.measured_at = Instant::now();
                    let containers = written(sandboxes.as_ref()).await;
                    let Ok(m) = tokio::task::spawn_blocking(move || {
                        let mut m = meter;
                        m.walk();
                        m
                    })
                    .await
                    else {
                        return;
                    };
                    meter = m;
                    meter.containers = containers;
                }
                let used = DiskUse {
                    files: meter.walked.saturating_sub(meter.base),
                    containers: meter.containers.clone(),
                };
                gauge.set(used.total());
                if used.total() > budget.bytes {
                    tracing::warn!(
                        total = used.total(),
                        budget = budget.bytes,
                        "disk budget passed"
                    );
                    let _ = tx.send(Some(DiskOver {
                        used,
                        budget: budget.bytes,
                    }));
                    return;
                }
            }
        });
        DiskWatch { over, task }
    }
    /// Resolves once the budget was passed; never otherwise.
    pub async fn exceeded(&self) -> DiskOver {
        let mut rx = self.over.clone();
        let seen = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone());
        match seen {
            Some(over) => over,
            None => futures::future::pending().await,
        }
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a container measurement gave (nothing when the engine did not answer).
async fn written(sandboxes: &dyn SandboxFactory) -> Vec<Written> {
    match sandboxes.written().await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "container sizes not measured");
            Vec::new()
        }
    }
}

/// The measurements: the places' usage at the start and at the last walk, the containers at
/// the last measurement, and the watched file systems' used bytes then.
struct Meter {
    places: DiskPlaces,
    /// The places' directories and the engine's storage: their file systems' growth bounds
    /// what can have been written since the last full measurement.
    watched: Vec<PathBuf>,
    base: u64,
    walked: u64,
    containers: Vec<Written>,
    measured_at: Instant,
    fs_at_full: Vec<(PathBuf, u64)>,
    /// The used bytes of the places' own file systems when the run started.
    fs_at_start: Vec<(PathBuf, u64)>,
    /// The first walk read every directory: a later one that cannot is an agent's doing.
    start_complete: bool,
}

impl Meter {
    fn new(places: DiskPlaces, watched: Vec<PathBuf>) -> Meter {
        let mut m = Meter {
            fs_at_full: fs_used(&watched),
            places,
            watched,
            base: 0,
            walked: 0,
            containers: Vec::new(),
            measured_at: Instant::now(),
            fs_at_start: Vec::new(),
            start_complete: true,
        };
        m.fs_at_start = fs_used(&m.places.dirs);
        let first = usage(&m.places);
        m.start_complete = first.complete;
        if !first.complete {
            tracing::warn!("disk budget: a directory of the places cannot be read at the start");
        }
        m.walked = first.bytes;
        m.base = m.walked;
        m
    }

    /// Walks the places. A directory that cannot be read hides what it holds, so then the
    /// growth of the places' file systems since the start is charged when it is more: an
    /// agent gains nothing by making a directory the runner cannot read or too many to hold.
    fn walk(&mut self) {
        let w = usage(&self.places);
        self.walked = w.bytes;
        if !w.complete && self.start_complete {
            let grown = growth(&fs_used(&self.places.dirs), &self.fs_at_start);
            tracing::warn!(
                grown,
                walked = w.bytes,
                "disk budget: a directory could not be read; the file systems' growth charged"
            );
            self.walked = self.walked.max(self.base.saturating_add(grown));
        }
    }

    /// Whether to measure fully (walk, ask the engine): the file systems grew since the last
    /// time by enough to reach the budget (not sooner than [`FULL_MIN`] after it), or it is
    /// [`WALK_EVERY`] old.
    fn due(&self, budget: u64) -> bool {
        if self.measured_at.elapsed() >= WALK_EVERY {
            return true;
        }
        self.due_after(budget, growth(&fs_used(&self.watched), &self.fs_at_full))
    }

    /// [`Meter::due`] once the file systems' growth since the last full measurement is known
    /// (`grown` bytes; what others freed meanwhile can hide growth until [`WALK_EVERY`]).
    fn due_after(&self, budget: u64, grown: u64) -> bool {
        let age = self.measured_at.elapsed();
        if age >= WALK_EVERY {
            return true;
        }
        let known = self
            .containers
            .iter()
            .fold(self.walked.saturating_sub(self.base), |t, c| {
                t.saturating_add(c.bytes)
            });
        age >= FULL_MIN && known.saturating_add(grown) > budget
    }
}

/// Used bytes of each distinct file system of `dirs` (by device), in a stable order.
fn fs_used(dirs: &[PathBuf]) -> Vec<(PathBuf, u64)> {
    let mut devices = HashSet::new();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(st) = rustix::fs::stat(d) else {
            continue;
        };
        if !devices.insert(st.st_dev) {
            continue;
        }
        if let Ok(v) = rustix::fs::statvfs(d) {
            let blocks = v
                .f_blocks
                .saturating_sub(v.f_bfree)
                .saturating_mul(v.f_frsize);
            let inodes = v.f_files.saturating_sub(v.f_ffree);
            out.push((
                d.clone(),
                blocks.saturating_add(inodes.saturating_mul(inode_cost(&v))),
            ));
        }
    }
    out
}

/// How much the file systems of `now` grew since `then` (both [`fs_used`]), bytes.
fn growth(now: &[(PathBuf, u64)], then: &[(PathBuf, u64)]) -> u64 {
    now.iter()
        .filter_map(|(d, used)| {
            let before = then.iter().find(|(e, _)| e == d)?.1;
            Some(used.saturating_sub(before))
        })
        .fold(0, u64::saturating_add)
}

/// What one inode of a file system costs, in bytes: its share of the file system
/// (`f_blocks × f_frsize / f_files`). A file system runs out of inodes as surely as of blocks,
/// and an empty file allocates no block: charged this, an agent making millions of empty files
/// spends the budget as fast as one filling the same share of the disk with bytes. Zero where
/// the file system has no fixed count (btrfs says 0).
fn inode_cost(v: &rustix::fs::StatVfs) -> u64 {
    v.f_blocks
        .saturating_mul(v.f_frsize)
        .checked_div(v.f_files)
        .unwrap_or(0)
}

/// What a walk of the places measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Walked {
    /// Bytes allocated beneath them, each inode charged [`inode_cost`] on top.
    bytes: u64,
    /// A directory that is there could not be read (no handle left, no permission): what it
    /// holds is not in `bytes`.
    complete: bool,
}

/// Bytes allocated beneath the places, each inode charged [`inode_cost`] on top (see the
/// module docs), and whether every directory there was read.
fn usage(places: &DiskPlaces) -> Walked {
    let skip: HashSet<(u64, u64)> = places
        .skip
        .iter()
        .filter_map(|p| rustix::fs::stat(p).ok())
        .map(|st| (st.st_dev, st.st_ino))
        .collect();
    let mut seen = HashSet::new();
    let mut all = Walked {
        bytes: 0,
        complete: true,
    };
    for d in &places.dirs {
        let w = walk(d, &skip, &mut seen);
        all.bytes = all.bytes.saturating_add(w.bytes);
        all.complete &= w.complete;
    }
    all
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// True when opening or reading an entry failed because it is no longer what was listed (gone,
/// or swapped for a file or a link): nothing of it is left to count there.
fn vanished(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    e == Errno::NOENT || e == Errno::NOTDIR || e == Errno::LOOP
}

/// Bytes allocated beneath `root`, each inode charged its file system's [`inode_cost`] on
/// top: directories entered from their parent's handle, never through a symlink; `seen` holds
/// directories and multiply linked files counted already. A directory waiting to be walked is
/// its parent's handle and its name, opened when its turn comes: the handles open at once are
/// those of the directories on the way down, not one per directory listed (ten thousand side
/// by side ran the runner out of handles, and each one not opened was left out).
fn walk(root: &Path, skip: &HashSet<(u64, u64)>, seen: &mut HashSet<(u64, u64)>) -> Walked {
    let mut out = Walked {
        bytes: 0,
        complete: true,
    };
    let fd = match rustix::fs::open(root, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            out.complete = vanished(e);
            return out;
        }
    };
    let Ok(st) = rustix::fs::fstat(&fd) else {
        out.complete = false;
        return out;
    };
    if skip.contains(&(st.st_dev, st.st_ino)) || !seen.insert((st.st_dev, st.st_ino)) {
        return out;
    }
    let mut first = Some(fd);
    let mut stack: Vec<(Arc<OwnedFd>, CString)> = Vec::new();
    loop {
        let dir = match first.take() {
            Some(fd) => fd,
            None => {
                let Some((parent, name)) = stack.pop() else {
                    break;
                };
                match rustix::fs::openat(&*parent, name.as_c_str(), dir_flags(), Mode::empty()) {
                    Ok(fd) => fd,
                    Err(e) => {
                        out.complete &= vanished(e);
                        continue;
                    }
                }
            }
        };
        let per_inode = rustix::fs::fstatvfs(&dir)
            .map(|v| inode_cost(&v))
            .unwrap_or(0);
        let entries = rustix::fs::openat(&dir, ".", dir_flags(), Mode::empty())
            .and_then(rustix::fs::Dir::new);
        let entries = match entries {
            Ok(entries) => entries,
            Err(e) => {
                out.complete &= vanished(e);
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for e in entries {
            let Ok(e) = e else {
                out.complete = false;
                break;
            };
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(e) => {
                    out.complete &= vanished(e);
                    continue;
                }
            };
            let id = (st.st_dev, st.st_ino);
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if (is_dir && (skip.contains(&id) || !seen.insert(id)))
                || (!is_dir && st.st_nlink > 1 && !seen.insert(id))
            {
                continue;
            }
            out.bytes = out
                .bytes
                .saturating_add(u64::try_from(st.st_blocks).unwrap_or(0) * 512)
                .saturating_add(per_inode);
            if is_dir {
                subdirs.push(CString::from(name));
            }
        }
        let dir = Arc::new(dir);
        stack.extend(subdirs.into_iter().map(|n| (dir.clone(), n)));
    }
    out
}

/// A container that wrote less than this to its own file system is not kept when the disk
/// budget stops the run (the pod's bookkeeping, an agent's shell history).
const KEEP_FROM: u64 = 1 << 20;

/// Keeps what the run's containers wrote to their own file systems (`written`: the watcher's
/// last measurement, moments old; asking the engine again takes seconds) before the teardown
/// removes them (the disk budget stopped the run: nothing it wrote is lost). One line per
/// container kept, or not.
pub async fn keep_written(sandboxes: &dyn SandboxFactory, written: &[Written]) -> Vec<String> {
    let mut lines = Vec::new();
    for w in written.iter().filter(|w| w.bytes >= KEEP_FROM) {
        lines.push(match sandboxes.keep_written(&w.container).await {
            Ok(Some(image)) => format!(
                "{} 的容器里写下的 {} 存成了镜像 {image}(docker create 一个容器再 docker cp 取出来;不要了就 docker rmi {image})",
                w.agent,
                mib(w.bytes)
            ),
            Ok(None) => continue,
            Err(e) => format!(
                "{} 的容器里写下的 {} 没能留下({e}),容器随运行结束删掉了",
                w.agent,
                mib(w.bytes)
            ),
        });
    }
    lines
}

/// The places of a run: `workspace`, `workbench`, the worktrees and the repository's git
/// directory (`--isolate`), without `run_dir`; nested and missing ones are fine.
pub fn places(
    workspace: &Path,
    workbench: Option<&Path>,
    isolation: &[PathBuf],
    run_dir: &Path,
) -> DiskPlaces {
    let mut dirs = vec![workspace.to_path_buf()];
    dirs.extend(workbench.map(Path::to_path_buf));
    dirs.extend(isolation.iter().cloned());
    DiskPlaces {
        dirs,
        skip: vec![run_dir.to_path_buf()],
    }
}

/// `doctor`'s line: the budget, what counts, and how much the workspace's file system has
/// left; `false` when that is less than the budget (a run could fill the disk first).
pub fn doctor_line(budget: DiskBudget, workspace: &Path) -> (bool, String) {
    let free = rustix::fs::statvfs(workspace)
        .ok()
        .map(|v| v.f_bavail.saturating_mul(v.f_frsize));
    let left = free
        .map(|f| format!(";工作区所在的文件系统还剩 {}", mib(f)))
        .unwrap_or_default();
    (
        free.is_none_or(|f| f >= budget.bytes),
        format!(
            "每次运行 {}(FLOWERBOX_DISK_BUDGET):算工作区、worktree、工作台的增长和各容器自己写下的(可写层),不算 runs/{left}",
            mib(budget.bytes)
        ),
    )
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
