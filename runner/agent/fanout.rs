//! How many workers run at once (issue 25 §4 "CPU and fan-out"): one coordinator message may
//! dispatch any number of workers; at most [`WorkerSlots::limit`] of them run, the rest wait
//! in order for a slot. The coordinator learns from the tool result that its worker waited,
//! the screen says so once per run.
//!
//! The default limit comes from the machine ([`default_max_workers`]): at most two workers per
//! core, and no more than fit in memory at the per-container limit. `--max-workers` /
//! `FLOWERBOX_MAX_WORKERS` set it.
//!
//! Write scopes ([`super::scope`]) queue here too: [`WorkerSlots::claim`] waits until no
//! running worker's scope overlaps the new one's, before the worker takes a slot (a worker
//! holding a slot never waits for a scope, so every wait ends).
//!
//! Only a dispatch from depth 0 takes a slot: a worker may not dispatch (its role's tools have
//! no `Agent`), and a nested dispatch waiting for a slot its own parent holds would never end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::scope::{overlaps, WriteScope};

/// The machine's size, as far as the limit cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Cores this process may use.
    pub cores: usize,
    /// Physical memory in bytes (`None`: unknown).
    pub memory_bytes: Option<u64>,
}

impl Capacity {
    /// This machine: `available_parallelism` (honours affinity and cgroup quotas) and
    /// `MemTotal` from `sysinfo(2)`.
    pub fn of_this_machine() -> Capacity {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_bytes = nix::sys::sysinfo::sysinfo()
            .ok()
            .map(|i| i.ram_total())
            .filter(|b| *b > 0);
        Capacity {
            cores,
            memory_bytes,
        }
    }
}

/// The default worker limit for `machine` when each container may use `per_agent_bytes`:
/// `min(2 × cores, memory / per_agent)`, at least 1 (module doc).
pub fn default_max_workers(machine: Capacity, per_agent_bytes: u64) -> usize {
    let by_cores = machine.cores.max(1) * 2;
    let by_memory = match machine.memory_bytes {
        Some(total) if per_agent_bytes > 0 => {
            usize::try_from(total / per_agent_bytes).unwrap_or(usize::MAX)
        }
        _ => by_cores,
    };
    by_cores.min(by_memory).max(1)
}

/// The run's worker slots.
#[derive(Debug)]
pub struct WorkerSlots {
    /// One permit per running worker.
    slots: Arc<Semaphore>,
    /// The limit (the semaphore's size).
    limit: usize,
    /// The screen was told once that a worker waited.
    told: AtomicBool,
    /// The scopes of the workers running now.
    scopes: Arc<ScopeTable>,
}

/// Who writes where now, and a wake-up for those waiting when it changes.
#[derive(Debug, Default)]
struct ScopeTable {
    running: Mutex<Vec<(u64, Option<WriteScope>)>>,
    next: AtomicU64,
    freed: Notify,
    /// The screen was told once that a worker waited for a scope.
    told: AtomicBool,
}

/// A worker's claim on its scope, held while it runs (released on drop).
#[derive(Debug)]
pub struct ScopeClaim {
    table: Arc<ScopeTable>,
    id: u64,
    /// How long the worker waited for an overlapping worker to end, when it had to.
    pub waited: Option<Duration>,
}

impl Drop for ScopeClaim {
    fn drop(&mut self) {
        self.table
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _)| *id != self.id);
        self.table.freed.notify_waiters();
    }
}

/// A worker's slot, held while it runs; `waited` is how long it queued (`None`: not at all).
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    /// How long the worker waited for its slot, when it had to.
    pub waited: Option<Duration>,
}

impl WorkerSlots {
    /// `limit` slots (at least one).
    pub fn new(limit: usize) -> WorkerSlots {
        let limit = limit.max(1);
        WorkerSlots {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
            told: AtomicBool::new(false),
            scopes: Arc::default(),
        }
    }

    /// How many workers may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// True when a worker with `scope` would neither wait for a slot nor for a scope now, with
    /// `ahead` (the scopes of dispatches begun early and not yet run, see `super::speculate`)
    /// counted as running: only such a worker is prepared before it is asked for, so what is
    /// made early never exceeds the limit nor runs beside a scope it must wait for. Takes
    /// nothing: the dispatch itself claims and acquires as ever.
    pub fn would_start_now(
        &self,
        scope: Option<&WriteScope>,
        ahead: &[Option<WriteScope>],
    ) -> bool {
        if self.slots.available_permits() <= ahead.len() {
            return false;
        }
        let running = self
            .scopes
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        !running
            .iter()
            .map(|(_, s)| s)
            .chain(ahead)
            .any(|other| overlaps(scope, other.as_ref()))
    }

    /// Registers a worker that writes `scope` (`None`: everything), at once when no running
    /// worker's scope overlaps it ([`overlaps`]), else when the last overlapping one has ended.
    /// `on_first_wait` runs when the run's first such wait begins (the screen says so once).
    pub async fn claim(
        &self,
        scope: Option<WriteScope>,
        on_first_wait: impl FnOnce(),
    ) -> ScopeClaim {
        let table = self.scopes.clone();
        let id = table.next.fetch_add(1, Ordering::SeqCst);
        let mut start = None;
        let mut on_first_wait = Some(on_first_wait);
        loop {
            // Registered before the check, so a release between the check and the wait wakes it.
            let freed = table.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut running = table.running.lock().unwrap_or_else(|e| e.into_inner());
                if !running
                    .iter()
                    .any(|(_, other)| overlaps(scope.as_ref(), other.as_ref()))
                {
                    running.push((id, scope));
                    return ScopeClaim {
                        table: table.clone(),
                        id,
                        waited: start.map(|s: Instant| s.elapsed()),
                    };
                }
            }
            if start.is_none() {
                start = Some(Instant::now());
                if !table.told.swap(true, Ordering::SeqCst) {
                    if let Some(f) = on_first_wait.take() {
                        f();
                    }
                }
            }
            freed.await;
        }
    }

    /// A slot, at once when one is free, else after the workers before it (first come, first
    /// served: tokio's semaphore is fair). `on_first_wait` runs when the run's first wait
    /// begins (the screen says so once).
    #[allow(clippy::expect_used, reason = "the semaphore is never closed")]
    pub async fn acquire(&self, on_first_wait: impl FnOnce()) -> Slot {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Slot {
                _permit: permit,
                waited: None,
            };
        }
        let start = Instant::now();
        if !self.told.swap(true, Ordering::SeqCst) {
            on_first_wait();
        }
        let permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        Slot {
            _permit: permit,
            waited: Some(start.elapsed()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_default_follows_cores_and_memory() {
        // The host: 23 GiB, 2 cores, 4 GiB per container → 4 (not 10).
        let host = Capacity {
            cores: 2,
            memory_bytes: Some(23 * GIB),
        };
        assert_eq!(default_max_workers(host, 4 * GIB), 4);
        // Memory binds: 8 GiB and 16 cores at 4 GiB each → 2.
        let small = Capacity {
            cores: 16,
            memory_bytes: Some(8 * GIB),
        };
        assert_eq!(default_max_workers(small, 4 * GIB), 2);
        // Never zero, even where one container does not fit.
        let tiny = Capacity {
            cores: 1,
            memory_bytes: Some(2 * GIB),
        };
        assert_eq!(default_max_workers(tiny, 4 * GIB), 1);
        // Unknown memory: cores alone.
        let unknown = Capacity {
            cores: 3,
            memory_bytes: None,
        };
        assert_eq!(default_max_workers(unknown, 4 * GIB), 6);
        assert!(Capacity::of_this_machine().cores >= 1);
    }

    #[tokio::test]
    async fn workers_past_the_limit_wait_in_order_and_the_first_wait_is_told_once() {
        let slots = Arc::new(WorkerSlots::new(2));
        let told = Arc::new(AtomicBool::new(false));
        let tell = |told: &Arc<AtomicBool>| {
            let told = told.clone();
            move || told.store(true, Ordering::SeqCst)
        };
        let a = slots.acquire(tell(&told)).await;
        let b = slots.acquire(|| ()).await;
        assert!(a.waited.is_none() && b.waited.is_none() && !told.load(Ordering::SeqCst));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..2 {
            let (slots, tx) = (slots.clone(), tx.clone());
            tokio::spawn(async move {
                let told = Arc::new(AtomicBool::new(false));
                let slot = slots.acquire(tell(&told)).await;
                tx.send((i, slot.waited.is_some(), told.load(Ordering::SeqCst)))
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(slot);
            });
            // The first queues before the second.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(rx.try_recv().is_err(), "a third worker ran past the limit");
        drop(a);
        let first = rx.recv().await.unwrap();
        assert_eq!(first, (0, true, true));
        drop(b);
        let second = rx.recv().await.unwrap();
        assert_eq!(second, (1, true, false));
        assert_eq!(WorkerSlots::new(0).limit(), 1);
    }

    #[tokio::test]
    async fn overlapping_scopes_wait_and_disjoint_ones_do_not() {
        let scope = |p: &str| Some(WriteScope::parse(&[p.to_string()]).unwrap());
        let slots = Arc::new(WorkerSlots::new(8));
        let http = slots.claim(scope("src/http/"), || ()).await;
        let db = slots.claim(scope("src/db/"), || ()).await;
        assert!(http.waited.is_none() && db.waited.is_none());
        let told = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (i, s) in [(0, scope("src")), (1, None)] {
            let (slots, tx, told) = (slots.clone(), tx.clone(), told.clone());
            tokio::spawn(async move {
                let c = slots.claim(s, || told.store(true, Ordering::SeqCst)).await;
                tx.send((i, c.waited.is_some())).unwrap();
                drop(c);
            });
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(rx.try_recv().is_err(), "an overlapping worker ran");
        assert!(told.load(Ordering::SeqCst));
        drop(http);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(rx.try_recv().is_err(), "ran while src/db/ still runs");
        drop(db);
        let mut got = vec![rx.recv().await.unwrap(), rx.recv().await.unwrap()];
        got.sort();
        assert_eq!(got, vec![(0, true), (1, true)]);
        // Two unscoped workers never wait for each other.
        let a = slots.claim(None, || ()).await;
        let b = slots.claim(None, || ()).await;
        assert!(a.waited.is_none() && b.waited.is_none());
    }

    #[tokio::test]
    async fn a_worker_is_prepared_early_only_when_it_would_start_at_once() {
        let scope = |p: &str| Some(WriteScope::parse(&[p.to_string()]).unwrap());
        let slots = WorkerSlots::new(2);
        assert!(slots.would_start_now(None, &[]));
        // Dispatches begun early count as running: two fill the limit of two.
        assert!(slots.would_start_now(None, &[None]));
        assert!(!slots.would_start_now(None, &[None, None]));
        // A scope that overlaps one begun early, or one running, waits: nothing early.
        assert!(!slots.would_start_now(scope("src/").as_ref(), &[None]));
        assert!(slots.would_start_now(scope("src/").as_ref(), &[scope("docs/")]));
        let running = slots.claim(scope("src/http/"), || ()).await;
        assert!(!slots.would_start_now(scope("src/").as_ref(), &[]));
        assert!(!slots.would_start_now(None, &[]));
        assert!(slots.would_start_now(scope("docs/").as_ref(), &[]));
        drop(running);
        let one = slots.acquire(|| ()).await;
        let two = slots.acquire(|| ()).await;
        assert!(!slots.would_start_now(None, &[]), "no slot is free");
        drop((one, two));
        assert!(slots.would_start_now(scope("src/").as_ref(), &[]));
    }
}
