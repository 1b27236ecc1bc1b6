//! A worker's end of the `cpr` mode: its session (serial numbers and CPR
//! point) and its stable copies (cpr-sigmod19 §4, Algorithm 1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{copies, Inner};
use crate::durability::{CommitView, WorkerLog};
use crate::ticket::{Ticket, TicketSource};
use crate::tid::Tid;

/// One session: the transactions of one worker, numbered 1, 2, … from the
/// CPR point the session recovered with.
pub(crate) struct Session {
    pub(crate) id: u64,
    /// Serial number of the session's last committed read-write
    /// transaction. Written only by its worker.
    serial: AtomicU64,
    /// What the session holds for the checkpoint being captured.
    capture: Mutex<Capture>,
}

/// A session's part of one checkpoint.
#[derive(Default)]
struct Capture {
    /// The boundary `b` that `point` and `copies` belong to (0: none yet).
    boundary: u64,
    /// The serial number of the session's last commit below `b`.
    point: u64,
    /// Values its commits at or above `b` replaced (see `copies`).
    copies: Vec<u8>,
}

impl Session {
    pub(crate) fn new(id: u64, start: u64) -> Self {
        Self {
            id,
            serial: AtomicU64::new(start),
            capture: Mutex::new(Capture::default()),
        }
    }

    /// The serial number of the session's last committed transaction.
    pub(super) fn serial(&self) -> u64 {
        self.serial.load(Ordering::Acquire)
    }

    /// The session's first commit at or above `b` (its shift to `v + 1`)
    /// fixes its CPR point; later ones only add copies. Returns the
    /// capture to add them to.
    fn shift(&self, b: u64, serial_before: u64) -> parking_lot::MutexGuard<'_, Capture> {
        let mut capture = self.capture.lock();
        if capture.boundary != b {
            // A new checkpoint (or a retried boundary): what was kept for
            // an older one is no longer needed.
            capture.boundary = b;
            capture.point = serial_before;
            capture.copies.clear();
        }
        capture
    }

    /// For the checkpoint manager, once no commit below `b` is running:
    /// the session's CPR point for `b` and the copies made so far. A
    /// session that has not shifted yet is shifted here, at its current
    /// serial number: every commit it made is below `b`, and its next one
    /// will find the point taken.
    pub(super) fn close_capture(&self, b: u64) -> (u64, Vec<u8>) {
        let mut capture = self.capture.lock();
        if capture.boundary != b {
            capture.boundary = b;
            capture.point = self.serial.load(Ordering::Acquire);
            capture.copies.clear();
        }
        (capture.point, std::mem::take(&mut capture.copies))
    }
}

/// The `WorkerLog` of the `cpr` mode.
pub(crate) struct CprWorkerLog {
    inner: Arc<Inner>,
    session: Arc<Session>,
    tickets: Arc<TicketSource>,
    /// Holds a replaced value while it is copied.
    scratch: Vec<u8>,
}

impl CprWorkerLog {
    pub(super) fn new(inner: Arc<Inner>, session: Arc<Session>) -> Self {
        Self {
            tickets: TicketSource::new(inner.watermark.clone()),
            inner,
            session,
            scratch: Vec::new(),
        }
    }
}

impl WorkerLog for CprWorkerLog {
    /// Numbers the commit and, while a checkpoint captures a version this
    /// commit is newer than, keeps the values it replaces (Algorithm 1's
    /// "copy record.live to record.stable").
    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket {
        let epoch = commit.tid().epoch();
        let serial = self.session.serial.load(Ordering::Relaxed);
        // After the commit's read of the epoch (sequentially consistent in
        // both): a commit at an epoch ≥ `b` always sees `b` here.
        let b = self.inner.boundary.load(Ordering::SeqCst);
        if b != 0 && epoch >= b {
            let mut capture = self.session.shift(b, serial);
            let buffer = &mut capture.copies;
            commit.for_each_replaced_before(b, &mut self.scratch, |table, key, tid, value| {
                copies::push(buffer, table.0, tid.raw(), key, value);
            });
        }
        // Release: the manager reads a serial number only after every
        // commit below `b` has finished (the safe epoch).
        self.session.serial.store(serial + 1, Ordering::Release);
        Ticket::from_source(epoch, &self.tickets)
    }

    fn on_epoch(&mut self, _epoch: u64) {
        // Copies made after the manager collected them (between the scan's
        // end and the install) are not needed: drop them at REST.
        if self.inner.boundary.load(Ordering::Relaxed) == 0 {
            if let Some(mut capture) = self.session.capture.try_lock() {
                if capture.copies.capacity() > 0 {
                    capture.copies = Vec::new();
                }
            }
        }
    }

    fn read_only(&mut self, max_read: Tid) -> Ticket {
        // Its results may be released once the data it read is in an
        // installed checkpoint.
        let epoch = max_read.epoch();
        if epoch <= self.inner.watermark.durable() {
            return Ticket::resolved();
        }
        Ticket::from_source(epoch, &self.tickets)
    }
}
