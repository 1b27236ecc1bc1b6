//! The shared state of the epoch framework: the global epoch `E`, the table
//! of per-thread local epochs, the safe epoch and the drain list of trigger
//! actions (cpr-sigmod19 §3, "Epoch Framework"; silor-osdi14 §2.1).
//!
//! Invariants:
//! * `E` only grows; it starts at [`FIRST_EPOCH`].
//! * A slot holds 0 while its thread is unprotected, else the epoch the
//!   thread last observed (≤ `E`).
//! * `safe` only grows, and `safe < local` for every protected thread whose
//!   store was ordered before the computation (SeqCst fences on both sides).
//! * A drain-list action registered with trigger epoch `t` runs exactly once,
//!   and only after `safe ≥ t`.

use crossbeam_utils::CachePadded;

use crate::garbage::Deferred;
use crate::sync::{fence, AtomicBool, AtomicU64, AtomicUsize, Mutex};
use std::sync::atomic::Ordering;

/// The first value of the global epoch. 0 is reserved for "unprotected".
pub const FIRST_EPOCH: u64 = 1;

/// An action run once every thread has left the epoch it was registered in.
pub(crate) type Action = Box<dyn FnOnce() + Send>;

pub(crate) struct Shared {
    /// The global epoch `E`.
    pub(crate) current: CachePadded<AtomicU64>,
    /// Largest epoch known to be left by every thread (`min(local) - 1`).
    pub(crate) safe: CachePadded<AtomicU64>,
    /// Local epochs, one per registered thread; 0 when unprotected.
    pub(crate) slots: Box<[CachePadded<AtomicU64>]>,
    /// Per slot: the local epoch its thread's current operation began in,
    /// 0 between operations ([`crate::EpochHandle::enter_operation`]).
    pub(crate) operations: Box<[CachePadded<AtomicU64>]>,
    /// Whether a slot is taken by a live handle.
    pub(crate) taken: Box<[AtomicBool]>,
    /// One past the highest slot ever taken; scans stop here.
    pub(crate) high_water: AtomicUsize,
    /// Pending trigger actions, `(trigger epoch, action)`.
    pub(crate) drain: Mutex<Vec<(u64, Action)>>,
    /// Length of `drain`, read without the lock on the fast path.
    pub(crate) drain_len: AtomicUsize,
    /// Garbage left behind by handles that were dropped before it was safe.
    pub(crate) orphans: Mutex<Vec<Deferred>>,
}

impl Shared {
    pub(crate) fn new(max_threads: usize, first_epoch: u64) -> Self {
        assert!(max_threads > 0, "the epoch table needs at least one slot");
        assert!(first_epoch >= FIRST_EPOCH, "epochs start at FIRST_EPOCH");
        Self {
            current: CachePadded::new(AtomicU64::new(first_epoch)),
            safe: CachePadded::new(AtomicU64::new(first_epoch - 1)),
            slots: (0..max_threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            operations: (0..max_threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            taken: (0..max_threads).map(|_| AtomicBool::new(false)).collect(),
            high_water: AtomicUsize::new(0),
            drain: Mutex::new(Vec::new()),
            drain_len: AtomicUsize::new(0),
            orphans: Mutex::new(Vec::new()),
        }
    }

    /// Claims a free slot, or `None` when the table is full.
    pub(crate) fn claim_slot(&self) -> Option<usize> {
        for (index, taken) in self.taken.iter().enumerate() {
            if taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.high_water.fetch_max(index + 1, Ordering::AcqRel);
                return Some(index);
            }
        }
        None
    }

    pub(crate) fn release_slot(&self, index: usize) {
        self.slots[index].store(0, Ordering::SeqCst);
        self.operations[index].store(0, Ordering::Release);
        self.taken[index].store(false, Ordering::Release);
    }

    /// Recomputes the safe epoch from the table: one below the smallest
    /// local epoch of a protected thread, or `E - 1` when none is protected.
    pub(crate) fn compute_safe(&self) -> u64 {
        // Pairs with the fence in `protect`: either we see the thread's
        // local epoch, or the thread sees every unlink made before this.
        fence(Ordering::SeqCst);
        let mut min = self.current.load(Ordering::SeqCst);
        let high = self.high_water.load(Ordering::Acquire);
        for slot in &self.slots[..high] {
            let local = slot.load(Ordering::SeqCst);
            if local != 0 && local < min {
                min = local;
            }
        }
        let safe = min - 1;
        self.safe.fetch_max(safe, Ordering::AcqRel);
        self.safe.load(Ordering::Acquire)
    }

    /// BumpEpoch: `E ← E + 1`; with an action, registers it to run once
    /// every thread has left the old epoch. Returns the new epoch.
    pub(crate) fn bump(&self, action: Option<Action>) -> u64 {
        let old = self.current.fetch_add(1, Ordering::SeqCst);
        if let Some(action) = action {
            let mut drain = self.drain.lock();
            drain.push((old, action));
            self.drain_len.store(drain.len(), Ordering::Release);
        }
        self.try_drain();
        old + 1
    }

    /// Runs every registered action whose trigger epoch is now safe.
    /// Actions run outside the lock, on the calling thread.
    pub(crate) fn try_drain(&self) {
        if self.drain_len.load(Ordering::Acquire) == 0 {
            return;
        }
        let safe = self.compute_safe();
        let ready: Vec<Action> = {
            let mut drain = self.drain.lock();
            let mut ready = Vec::new();
            let mut index = 0;
            while index < drain.len() {
                if drain[index].0 <= safe {
                    ready.push(drain.swap_remove(index).1);
                } else {
                    index += 1;
                }
            }
            self.drain_len.store(drain.len(), Ordering::Release);
            ready
        };
        for action in ready {
            action();
        }
    }

    /// Frees orphaned garbage that has become safe.
    pub(crate) fn collect_orphans(&self) {
        let safe = self.safe.load(Ordering::Acquire);
        let ready: Vec<Deferred> = {
            let mut orphans = self.orphans.lock();
            if orphans.is_empty() {
                return;
            }
            let (ready, kept) = std::mem::take(&mut *orphans)
                .into_iter()
                .partition(|d| d.epoch <= safe);
            *orphans = kept;
            ready
        };
        for deferred in ready {
            // SAFETY: `safe ≥ epoch` means no protected thread can still
            // reach the object (see the module invariants).
            unsafe { deferred.run() };
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // No handle is alive (each holds an `Arc<Shared>`), so no thread can
        // reach anything that was retired.
        for deferred in std::mem::take(&mut *self.orphans.lock()) {
            // SAFETY: every handle is gone; nothing can reach the object.
            unsafe { deferred.run() };
        }
        for (_, action) in std::mem::take(&mut *self.drain.lock()) {
            action();
        }
    }
}
