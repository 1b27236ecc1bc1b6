//! A worker's end of SiloR logging (silor §3.3–3.5 step 1): it builds log
//! records in a 512 KiB buffer taken from its logger's bounded pool, hands
//! the buffer over when it is full or the epoch changes, and advertises
//! `e_w`, the epoch every later commit of it will be at least.
//!
//! The buffer lives in a slot the logger can also lock. A worker holds the
//! slot's lock from just before it reads `E` at its serialization point
//! until its record is in the buffer, so a logger that gets the lock knows
//! the worker is between commits: it may take a stale buffer and advance
//! `e_w` for an idle worker (the paper's workers never idle; ours may wait
//! on a ticket whose record sits in their own buffer).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::format::{entry_bytes, put_entry, start_log_block, LOG_PREFIX_BYTES};
use super::{Inner, Stats};
use crate::durability::{CommitView, WorkerLog};
use crate::ticket::{Ticket, TicketSource};
use crate::tid::Tid;

/// What a worker and its logger share.
pub(crate) struct WorkerSlot {
    /// Guards `state`. A spin flag rather than a mutex: the worker takes it
    /// on every commit, and releasing it with a plain store (no locked
    /// instruction) lets the stores into the log buffer drain in the
    /// background — with a mutex's CAS release the commit waited for them
    /// (measured: 89% of `log_commit`'s time was that CAS).
    busy: AtomicBool,
    state: UnsafeCell<SlotState>,
    /// `e_w` (silor §3.5 step 1). `u64::MAX` once the worker is gone.
    pub(crate) e_w: AtomicU64,
}

// SAFETY: `state` is only reached through `SlotGuard`, which holds `busy`.
unsafe impl Sync for WorkerSlot {}
// SAFETY: as above; `SlotState` itself is `Send`.
unsafe impl Send for WorkerSlot {}

impl WorkerSlot {
    fn new() -> Self {
        Self {
            busy: AtomicBool::new(false),
            state: UnsafeCell::new(SlotState {
                buffer: None,
                epoch: 0,
            }),
            e_w: AtomicU64::new(0),
        }
    }

    /// Takes the slot, spinning while the logger holds it (briefly).
    fn lock(&self) {
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    /// Takes the slot if it is free.
    pub(crate) fn try_lock(&self) -> Option<SlotGuard<'_>> {
        // Build the guard only on success: a guard dropped on failure would
        // release the worker's hold (the simulated-disk crash test caught
        // exactly that with `then_some`).
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| SlotGuard { slot: self })
    }

    fn unlock(&self) {
        self.busy.store(false, Ordering::Release);
    }

    /// The state; the caller holds the slot.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state_mut(&self) -> &mut SlotState {
        // SAFETY: per the contract the caller holds `busy`, so no other
        // reference to the state exists.
        unsafe { &mut *self.state.get() }
    }
}

/// The slot, held (the logger's side).
pub(crate) struct SlotGuard<'a> {
    slot: &'a WorkerSlot,
}

impl std::ops::Deref for SlotGuard<'_> {
    type Target = SlotState;
    fn deref(&self) -> &SlotState {
        // SAFETY: the guard holds the slot.
        unsafe { self.slot.state_mut() }
    }
}

impl std::ops::DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut SlotState {
        // SAFETY: the guard holds the slot.
        unsafe { self.slot.state_mut() }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.slot.unlock();
    }
}

/// The part of a slot behind its lock.
pub(crate) struct SlotState {
    /// The buffer being filled, if any: a log block under construction.
    pub(crate) buffer: Option<Vec<u8>>,
    /// The epoch of every record in `buffer`.
    pub(crate) epoch: u64,
}

impl SlotState {
    /// Whether the buffer holds at least one record.
    pub(crate) fn has_records(&self) -> bool {
        self.buffer
            .as_ref()
            .is_some_and(|buffer| buffer.len() > LOG_PREFIX_BYTES)
    }
}

/// Bytes ahead of the write position that `prefetch_ahead` warms.
const PREFETCH_DISTANCE: usize = 1024;

/// Pulls the buffer's next lines into cache before the next commit writes
/// them: the buffer was last touched by the logger's core (or not at all),
/// and stores into cold lines stall the commit's next locked instruction
/// (measured with perf: 89–94% of `log_commit`).
#[inline]
fn prefetch_ahead(buffer: &Vec<u8>) {
    // Four lines, none past the vector's allocation.
    let from = buffer.len() + PREFETCH_DISTANCE;
    let room = buffer.capacity().saturating_sub(from);
    epochdb_memory::prefetch_lines(buffer.as_ptr().wrapping_add(from), room.div_ceil(64).min(4));
}

/// The `WorkerLog` of the `log` and `silor` modes.
pub(crate) struct SilorWorkerLog {
    inner: Arc<Inner>,
    /// This worker's own handle on the watermark (see `TicketSource`).
    tickets: Arc<TicketSource>,
    logger: usize,
    slot: Arc<WorkerSlot>,
    /// Whether `begin_commit` took the slot (released by `log_commit` or
    /// `abort_commit`).
    held: bool,
}

impl SilorWorkerLog {
    pub(crate) fn new(inner: Arc<Inner>, worker: usize) -> Self {
        let logger = worker % inner.loggers.len();
        let slot = Arc::new(WorkerSlot::new());
        // Register, then advertise the current epoch: a logger that read
        // the slot list before this push read E before our E below, and our
        // commits read E later still (see logger.rs, `compute_e_l`).
        inner.loggers[logger].workers.lock().push(slot.clone());
        slot.e_w.store(inner.epochs.current(), Ordering::SeqCst);
        Self {
            tickets: TicketSource::new(inner.watermark.clone()),
            inner,
            logger,
            slot,
            held: false,
        }
    }

    /// Takes the slot (or takes over the hold from `begin_commit`); the
    /// caller wraps it in a `SlotGuard` that releases it.
    fn take_slot(&mut self) {
        if !std::mem::take(&mut self.held) {
            self.slot.lock();
        }
    }

    /// Hands the buffer to the logger if it holds records.
    fn flush(&self, state: &mut SlotState) {
        if state.has_records() {
            let buffer = state.buffer.take().expect("has_records checked it");
            self.inner.loggers[self.logger].submit(buffer);
        }
    }

    /// A buffer from the pool, blocking while the pool is empty (the
    /// backpressure of silor §3.4). `None` once the mode has stopped.
    fn take_buffer(&self) -> Option<Vec<u8>> {
        let logger = &self.inner.loggers[self.logger];
        if let Some(buffer) = logger.try_take(self.inner.options.log_buffer_bytes) {
            return Some(buffer);
        }
        let started = Instant::now();
        let waited = |stats: &Stats| {
            stats.buffer_waits.fetch_add(1, Ordering::Relaxed);
            let micros = started.elapsed().as_micros() as u64;
            stats
                .buffer_wait_micros
                .fetch_add(micros, Ordering::Relaxed);
        };
        loop {
            if self.inner.is_stopped() {
                waited(&self.inner.stats);
                return None;
            }
            if let Some(buffer) = logger.wait_recycled(Duration::from_millis(10)) {
                waited(&self.inner.stats);
                return Some(buffer);
            }
        }
    }
}

impl WorkerLog for SilorWorkerLog {
    fn begin_commit(&mut self) {
        if !self.held {
            self.slot.lock();
            self.held = true;
        }
    }

    fn abort_commit(&mut self) {
        if std::mem::take(&mut self.held) {
            self.slot.unlock();
        }
    }

    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket {
        let epoch = commit.tid().epoch();
        // The ticket first: its reference count's `lock inc` waits for the
        // store buffer to drain, and after the entry is written that buffer
        // holds stores into log-buffer lines still on their way from the
        // logger's core (perf: 46% of `log_commit`'s samples sat right
        // after that increment when it came last).
        let ticket = Ticket::from_source(epoch, &self.tickets);
        self.take_slot();
        let mut state = SlotGuard { slot: &self.slot };
        if state.buffer.is_some() && state.epoch != epoch {
            self.flush(&mut state);
            if let Some(empty) = state.buffer.as_mut() {
                start_log_block(empty, epoch);
                state.epoch = epoch;
            }
            self.slot.e_w.fetch_max(epoch, Ordering::SeqCst);
        }
        let needed = entry_bytes(
            commit
                .writes()
                .map(|write| (write.key.len(), write.value.map(<[u8]>::len))),
        );
        if let Some(buffer) = &state.buffer {
            if buffer.len() + needed > self.inner.options.log_buffer_bytes && state.has_records() {
                self.flush(&mut state);
            }
        }
        if state.buffer.is_none() {
            match self.take_buffer() {
                Some(mut buffer) => {
                    start_log_block(&mut buffer, epoch);
                    state.buffer = Some(buffer);
                    state.epoch = epoch;
                }
                // Failed or stopped: nothing will be acknowledged, and the
                // ticket reports why.
                None => return ticket,
            }
        }
        let buffer = state.buffer.as_mut().expect("a buffer was just installed");
        put_entry(
            buffer,
            commit.tid().raw(),
            commit
                .writes()
                .map(|write| (write.table.0, write.key, write.value)),
            needed,
        );
        prefetch_ahead(buffer);
        drop(state);
        ticket
    }

    fn read_only(&mut self, max_read: Tid) -> Ticket {
        // Results of a read-only transaction may be released once the data
        // it read is durable — usually it is already.
        let epoch = max_read.epoch();
        if epoch <= self.inner.watermark.durable() {
            return Ticket::resolved();
        }
        Ticket::from_source(epoch, &self.tickets)
    }

    fn on_epoch(&mut self, epoch: u64) {
        self.take_slot();
        let mut state = SlotGuard { slot: &self.slot };
        if state.epoch < epoch {
            self.flush(&mut state);
        }
        self.slot.e_w.fetch_max(epoch, Ordering::SeqCst);
    }

    fn quiesce(&mut self) {
        self.take_slot();
        let mut state = SlotGuard { slot: &self.slot };
        self.flush(&mut state);
        self.slot
            .e_w
            .fetch_max(self.inner.epochs.current(), Ordering::SeqCst);
    }
}

impl Drop for SilorWorkerLog {
    fn drop(&mut self) {
        self.take_slot();
        let mut state = SlotGuard { slot: &self.slot };
        self.flush(&mut state);
        if let Some(buffer) = state.buffer.take() {
            self.inner.loggers[self.logger].recycle(buffer);
        }
        // Gone: holds back nothing. The logger drops the slot.
        self.slot.e_w.store(u64::MAX, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_try_lock_leaves_the_holder_in_place() {
        let slot = WorkerSlot::new();
        slot.lock();
        assert!(slot.try_lock().is_none());
        assert!(
            slot.try_lock().is_none(),
            "the failed attempt released the lock"
        );
        slot.unlock();
        let guard = slot.try_lock().expect("free now");
        assert!(slot.try_lock().is_none());
        drop(guard);
        assert!(slot.try_lock().is_some());
    }
}
