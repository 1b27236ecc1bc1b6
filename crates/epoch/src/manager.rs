//! The public face of the framework: [`EpochManager`] (shared) and
//! [`EpochHandle`] (one per thread).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;

use crate::framework::{Action, Shared};
use crate::garbage::{destroy_box, Deferred};
use crate::sync::{fence, Arc};

/// Garbage a handle keeps before it forces a safe-epoch recomputation.
const GARBAGE_COLLECT_THRESHOLD: usize = 1024;

/// Returned by [`EpochManager::register`] when every slot is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyThreads {
    /// The table's size, fixed when the manager was created.
    pub max_threads: usize,
}

impl fmt::Display for TooManyThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch table full: at most {} threads may be registered at once",
            self.max_threads
        )
    }
}

impl std::error::Error for TooManyThreads {}

/// The epoch framework shared by all threads of one database.
///
/// Cheap to clone: clones share the same epochs.
#[derive(Clone)]
pub struct EpochManager {
    shared: Arc<Shared>,
}

impl fmt::Debug for EpochManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpochManager")
            .field("current", &self.current())
            .field("safe", &self.safe())
            .finish()
    }
}

impl EpochManager {
    /// Creates a framework with room for `max_threads` registered threads.
    pub fn new(max_threads: usize) -> Self {
        Self::starting_at(max_threads, crate::FIRST_EPOCH)
    }

    /// Creates a framework whose global epoch starts at `first_epoch`
    /// (≥ [`crate::FIRST_EPOCH`]): a recovered database resumes above every
    /// epoch it recovered, so new TIDs order after old ones.
    pub fn starting_at(max_threads: usize, first_epoch: u64) -> Self {
        Self {
            shared: Arc::new(Shared::new(max_threads, first_epoch)),
        }
    }

    /// The global epoch `E`.
    #[inline]
    pub fn current(&self) -> u64 {
        self.shared.current.load(Ordering::SeqCst)
    }

    /// The last computed safe epoch: every thread has left all epochs ≤ it.
    #[inline]
    pub fn safe(&self) -> u64 {
        self.shared.safe.load(Ordering::Acquire)
    }

    /// Recomputes the safe epoch from the table now and returns it.
    pub fn compute_safe(&self) -> u64 {
        self.shared.compute_safe()
    }

    /// The number of slots in the table.
    pub fn max_threads(&self) -> usize {
        self.shared.slots.len()
    }

    /// BumpEpoch without an action: `E ← E + 1`. Returns the new epoch.
    pub fn bump(&self) -> u64 {
        let epoch = self.shared.bump(None);
        self.shared.collect_orphans();
        epoch
    }

    /// BumpEpoch from a known epoch: `E ← expected + 1` only if `E` is
    /// still `expected` (a compare-and-swap), so the caller knows that no
    /// other bump came between its read of `E` and this one. Returns the
    /// new epoch, or the epoch found instead.
    ///
    /// The engine's `cpr` mode publishes the first epoch of a new version
    /// and then moves `E` to exactly it: any thread that reads that epoch
    /// afterwards is sure to see the publication.
    pub fn bump_from(&self, expected: u64) -> Result<u64, u64> {
        self.shared.current.compare_exchange(
            expected,
            expected + 1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )?;
        self.shared.try_drain();
        self.shared.collect_orphans();
        Ok(expected + 1)
    }

    /// BumpEpoch(action) (cpr-sigmod19 §3): `E ← E + 1` and `action` runs,
    /// exactly once, after every thread has refreshed past the old epoch.
    /// It runs on whichever thread notices that first (a `refresh`, a later
    /// bump or [`EpochManager::try_drain`]). Returns the new epoch.
    pub fn bump_with(&self, action: impl FnOnce() + Send + 'static) -> u64 {
        self.shared.bump(Some(Box::new(action) as Action))
    }

    /// Runs any registered action that has become safe.
    pub fn try_drain(&self) {
        self.shared.try_drain();
        self.shared.collect_orphans();
    }

    /// Registers the calling thread; the handle starts unprotected.
    pub fn register(&self) -> Result<EpochHandle, TooManyThreads> {
        let slot = self.shared.claim_slot().ok_or(TooManyThreads {
            max_threads: self.max_threads(),
        })?;
        Ok(EpochHandle {
            shared: self.shared.clone(),
            slot,
            local: 0,
            garbage: VecDeque::new(),
        })
    }

    /// The epoch the oldest operation still running began in
    /// ([`EpochHandle::enter_operation`]), or `E` when none is running.
    ///
    /// Unlike the safe epoch, a thread between operations holds nothing
    /// back here, even while it stays protected (the engine's workers stay
    /// protected between transactions so the next one starts without a
    /// fence). Once this is at least `t`, where `t` ≤ `E` was reached
    /// before the call, every operation that began below `t` has left
    /// (what it wrote before leaving is visible), and every operation that
    /// reads `E` after a sequentially consistent fence reads at least `t`
    /// (the fence pairs with this one: either the operation's entry is
    /// seen here, or its read of `E` sees `t`).
    pub fn oldest_operation(&self) -> u64 {
        fence(Ordering::SeqCst);
        let high = self.shared.high_water.load(Ordering::Acquire);
        let oldest = self.shared.operations[..high]
            .iter()
            .map(|slot| slot.load(Ordering::Acquire))
            .filter(|&epoch| epoch != 0)
            .min();
        oldest.unwrap_or_else(|| self.shared.current.load(Ordering::SeqCst))
    }

    /// The smallest local epoch among protected threads, or `None`.
    pub fn min_protected(&self) -> Option<u64> {
        fence(Ordering::SeqCst);
        let high = self.shared.high_water.load(Ordering::Acquire);
        self.shared.slots[..high]
            .iter()
            .map(|slot| slot.load(Ordering::SeqCst))
            .filter(|&local| local != 0)
            .min()
    }
}

/// One thread's membership in the framework: its local epoch and its list of
/// retired objects awaiting reclamation.
///
/// While protected, nothing retired by any thread in an epoch ≥ this
/// handle's local epoch is freed.
pub struct EpochHandle {
    shared: Arc<Shared>,
    slot: usize,
    /// Mirror of our slot, to skip stores when nothing changed.
    local: u64,
    garbage: VecDeque<Deferred>,
}

impl fmt::Debug for EpochHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpochHandle")
            .field("slot", &self.slot)
            .field("local", &self.local)
            .field("garbage", &self.garbage.len())
            .finish()
    }
}

impl EpochHandle {
    /// This handle's slot index (stable for its lifetime).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The local epoch, or 0 when unprotected.
    #[inline]
    pub fn local(&self) -> u64 {
        self.local
    }

    /// Whether the thread is protected.
    #[inline]
    pub fn is_protected(&self) -> bool {
        self.local != 0
    }

    /// Acquire: enters the current epoch. Returns it.
    #[inline]
    pub fn protect(&mut self) -> u64 {
        let mut epoch = self.shared.current.load(Ordering::SeqCst);
        while epoch != self.local {
            self.local = epoch;
            self.shared.slots[self.slot].store(epoch, Ordering::SeqCst);
            // Pairs with `compute_safe`'s fence: shared pointers loaded
            // after this point are covered by our local epoch.
            fence(Ordering::SeqCst);
            // A bump between our read of E and our store could let a
            // concurrent `compute_safe` miss our slot and declare `epoch`
            // safe. Re-reading E after the fence closes that window: if it
            // moved, we announce the newer epoch (found by loom).
            epoch = self.shared.current.load(Ordering::SeqCst);
        }
        epoch
    }

    /// Refresh (cpr-sigmod19 §3): moves the local epoch up to `E`, runs any
    /// trigger action that became safe and frees safe garbage. Returns the
    /// local epoch. A protected thread must refresh regularly, or it holds
    /// back every action and all reclamation.
    #[inline]
    pub fn refresh(&mut self) -> u64 {
        let previous = self.local;
        let epoch = self.protect();
        if epoch != previous {
            self.shared.try_drain();
            self.collect();
        }
        epoch
    }

    /// Starts an operation at the current local epoch (the thread must be
    /// protected): [`EpochManager::oldest_operation`] counts it until
    /// [`Self::leave_operation`]. A relaxed store to the thread's own
    /// slot; an operation whose decisions depend on `E` must read it after
    /// a sequentially consistent fence (see `oldest_operation`).
    #[inline]
    pub fn enter_operation(&mut self) {
        debug_assert!(self.local != 0, "an operation needs a protected handle");
        self.shared.operations[self.slot].store(self.local, Ordering::Relaxed);
    }

    /// Ends the operation [`Self::enter_operation`] started; what it wrote
    /// before is visible to whoever sees it gone.
    #[inline]
    pub fn leave_operation(&mut self) {
        self.shared.operations[self.slot].store(0, Ordering::Release);
    }

    /// Release: leaves the epoch table, so an idle thread holds nothing back.
    pub fn unprotect(&mut self) {
        if self.local != 0 {
            self.local = 0;
            self.shared.slots[self.slot].store(0, Ordering::SeqCst);
            self.shared.operations[self.slot].store(0, Ordering::Release);
        }
    }

    /// Defers freeing a boxed object until no thread can reach it.
    ///
    /// # Safety
    /// `pointer` must come from `Box::into_raw`, must already be unreachable
    /// for threads that protect from now on, and must be retired only once.
    pub unsafe fn retire_box<T: Send + 'static>(&mut self, pointer: *mut T) {
        // SAFETY: forwarded from the caller; `destroy_box::<T>` matches.
        unsafe { self.retire(pointer.cast(), destroy_box::<T>) }
    }

    /// Defers `destroy(pointer)` until no thread can reach `pointer`.
    ///
    /// # Safety
    /// The object must already be unreachable for threads that protect from
    /// now on; `destroy(pointer)` must be sound exactly once, on any thread.
    pub unsafe fn retire(&mut self, pointer: *mut (), destroy: unsafe fn(*mut ())) {
        // Order the unlink before reading `E` (see `framework` invariants).
        fence(Ordering::SeqCst);
        let epoch = self.shared.current.load(Ordering::SeqCst);
        // SAFETY: forwarded from the caller.
        self.garbage
            .push_back(unsafe { Deferred::new(epoch, pointer, destroy) });
        if self.garbage.len() >= GARBAGE_COLLECT_THRESHOLD && self.garbage.len().is_power_of_two() {
            self.shared.compute_safe();
            self.collect();
        }
    }

    /// Number of retired objects not yet freed by this handle.
    pub fn pending_garbage(&self) -> usize {
        self.garbage.len()
    }

    /// Frees this handle's garbage that is now safe. Garbage is queued in
    /// retire order, so its epochs are non-decreasing.
    pub fn collect(&mut self) {
        let safe = self.shared.safe.load(Ordering::Acquire);
        while self.garbage.front().is_some_and(|d| d.epoch <= safe) {
            let deferred = self.garbage.pop_front().expect("front checked");
            // SAFETY: `safe ≥ epoch`: every thread has left the epoch the
            // object was retired in, and it was unreachable before that.
            unsafe { deferred.run() };
        }
    }
}

impl Drop for EpochHandle {
    fn drop(&mut self) {
        self.unprotect();
        self.shared.compute_safe();
        self.collect();
        if !self.garbage.is_empty() {
            self.shared.orphans.lock().extend(self.garbage.drain(..));
        }
        self.shared.release_slot(self.slot);
    }
}
