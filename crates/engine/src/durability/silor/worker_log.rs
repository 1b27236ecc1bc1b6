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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Mutex, RawMutex};

use super::format::{entry_bytes, put_entry_header, put_write, start_log_block, LOG_PREFIX_BYTES};
use super::Inner;
use crate::durability::{CommitView, WorkerLog};
use crate::ticket::Ticket;
use crate::tid::Tid;

/// What a worker and its logger share.
pub(crate) struct WorkerSlot {
    pub(crate) state: Arc<Mutex<SlotState>>,
    /// `e_w` (silor §3.5 step 1). `u64::MAX` once the worker is gone.
    pub(crate) e_w: AtomicU64,
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

/// The `WorkerLog` of the `log` and `silor` modes.
pub(crate) struct SilorWorkerLog {
    inner: Arc<Inner>,
    logger: usize,
    slot: Arc<WorkerSlot>,
    held: Option<ArcMutexGuard<RawMutex, SlotState>>,
}

impl SilorWorkerLog {
    pub(crate) fn new(inner: Arc<Inner>, worker: usize) -> Self {
        let logger = worker % inner.loggers.len();
        let slot = Arc::new(WorkerSlot {
            state: Arc::new(Mutex::new(SlotState {
                buffer: None,
                epoch: 0,
            })),
            e_w: AtomicU64::new(0),
        });
        // Register, then advertise the current epoch: a logger that read
        // the slot list before this push read E before our E below, and our
        // commits read E later still (see logger.rs, `compute_e_l`).
        inner.loggers[logger].workers.lock().push(slot.clone());
        slot.e_w.store(inner.epochs.current(), Ordering::SeqCst);
        Self {
            inner,
            logger,
            slot,
            held: None,
        }
    }

    fn lock(&mut self) -> ArcMutexGuard<RawMutex, SlotState> {
        match self.held.take() {
            Some(guard) => guard,
            None => self.slot.state.lock_arc(),
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
        loop {
            if self.inner.is_stopped() {
                return None;
            }
            if let Ok(buffer) = logger.free.1.recv_timeout(Duration::from_millis(10)) {
                return Some(buffer);
            }
        }
    }
}

impl WorkerLog for SilorWorkerLog {
    fn begin_commit(&mut self) {
        if self.held.is_none() {
            self.held = Some(self.slot.state.lock_arc());
        }
    }

    fn abort_commit(&mut self) {
        self.held = None;
    }

    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket {
        let epoch = commit.tid().epoch();
        let mut state = self.lock();
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
            if buffer.len() + needed > self.inner.options.log_buffer_bytes
                && state.has_records()
            {
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
                // ticket below reports why.
                None => return Ticket::at(epoch, self.inner.watermark.clone()),
            }
        }
        let buffer = state.buffer.as_mut().expect("a buffer was just installed");
        put_entry_header(buffer, commit.tid().raw(), commit.len() as u32);
        for write in commit.writes() {
            put_write(buffer, write.table.0, write.key, write.value);
        }
        drop(state);
        Ticket::at(epoch, self.inner.watermark.clone())
    }

    fn read_only(&mut self, max_read: Tid) -> Ticket {
        // Results of a read-only transaction may be released once the data
        // it read is durable.
        Ticket::at(max_read.epoch(), self.inner.watermark.clone())
    }

    fn on_epoch(&mut self, epoch: u64) {
        let mut state = self.lock();
        if state.epoch < epoch {
            self.flush(&mut state);
        }
        self.slot.e_w.fetch_max(epoch, Ordering::SeqCst);
    }

    fn quiesce(&mut self) {
        let mut state = self.lock();
        self.flush(&mut state);
        self.slot
            .e_w
            .fetch_max(self.inner.epochs.current(), Ordering::SeqCst);
    }
}

impl Drop for SilorWorkerLog {
    fn drop(&mut self) {
        let mut state = self.lock();
        self.flush(&mut state);
        if let Some(buffer) = state.buffer.take() {
            self.inner.loggers[self.logger].recycle(buffer);
        }
        // Gone: holds back nothing. The logger drops the slot.
        self.slot.e_w.store(u64::MAX, Ordering::SeqCst);
    }
}
