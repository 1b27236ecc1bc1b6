//! Loggers (silor §3.3–3.5): one per log directory. A logger writes the
//! buffers its workers hand it to `data.log` as they come and recycles each
//! right after the write (§3.4); it regularly computes its epoch `e_l`,
//! syncs, and publishes `e_l` (§3.5 steps 2–4); every 100 epochs (or
//! `SilorOptions::rotate_bytes`, whichever comes first) it renames
//! `data.log` to `old_data.<e>` (§3.5). Logger 0 is the distinguished one:
//! it computes `e_p = min(e_l) − 1`, appends it to `pepoch`, syncs, and
//! only then publishes it to the watermark tickets wait on (steps 5–6).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::{DirectAppender, StorageError, StorageFile, DIRECT_ALIGN};
use parking_lot::{Condvar, Mutex};

use super::files::{free_old_data_name, replace_atomically, DATA_LOG, PEPOCH};
use super::format::{
    encode_log_header, log_block_epoch, seal_log_block, PepochRecord, SyncedLog, LOG_PREFIX_BYTES,
};
use super::worker_log::WorkerSlot;
use super::Inner;

/// How long a logger waits for a buffer before it looks at the epochs
/// again: a quarter epoch, between these bounds. A commit waits on average
/// half an epoch for the epoch to end and then up to one poll for its
/// logger to notice, so short epochs (a server's 1–2 ms) need short polls;
/// SiloR's 40 ms epochs poll every millisecond.
pub(crate) fn poll_interval(epoch_interval: Duration) -> Duration {
    (epoch_interval / 4).clamp(Duration::from_micros(100), Duration::from_millis(1))
}

/// The longest a logger waits while the log is idle (no logger wrote a
/// byte in its last round): one epoch, at most 1 ms, never below
/// [`poll_interval`]. A server's 1 ms epochs would otherwise wake every
/// logger 4,000 times a second with nothing to write; the first write
/// brings back the short poll. SiloR's 40 ms epochs are unaffected.
pub(crate) fn idle_poll_interval(epoch_interval: Duration) -> Duration {
    epoch_interval
        .min(Duration::from_millis(1))
        .max(poll_interval(epoch_interval))
}

/// Hands `write` the buffers in `full` now, oldest first, and none handed
/// over while it runs: with a disk slower than the workers the channel
/// refills as fast as it drains, and draining it until empty would put off
/// the sync after it, and with it every commit's durability, without bound
/// (seen at 12 TPC-C workers: p50 latency to durability 2.2 s). A buffer
/// whose hand-over completed before the call is counted by `len` and, the
/// channel being FIFO, is among the first `len` received.
fn write_those_present<E>(
    full: &Receiver<Vec<u8>>,
    mut write: impl FnMut(Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    for _ in 0..full.len() {
        match full.try_recv() {
            Ok(buffer) => write(buffer)?,
            Err(_) => break,
        }
    }
    Ok(())
}

/// Free buffers a logger's pool keeps per worker; more are freed as they
/// come back (`LoggerShared::recycle`). The pool's old fixed size: enough
/// for steady logging, where a worker fills one buffer while the logger
/// writes another, so only a backlog's extra buffers are ever freed.
const FREE_KEPT_PER_WORKER: usize = 16;

/// The `pepoch` file is rewritten (atomically) once appends grow it past this.
const PEPOCH_REWRITE_BYTES: u64 = 64 << 10;

/// What a logger shares with its workers and with logger 0.
pub(crate) struct LoggerShared {
    /// Full buffers from workers, in hand-over order.
    pub(crate) full: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    /// The pool of free buffers (silor §3.4), the one recycled last on
    /// top: a worker refills the buffer whose lines are likeliest still
    /// in cache, and buffers allocated in a burst (see
    /// `SilorOptions::buffers_per_worker`) lie unused below until the
    /// next burst, instead of taking turns through memory.
    free: Mutex<Vec<Vec<u8>>>,
    /// Signalled when a buffer is recycled.
    recycled: Condvar,
    /// Buffers this logger's pool holds now (free, filling or written).
    allocated: AtomicUsize,
    /// The most it has held at once.
    peak: AtomicUsize,
    /// Buffers the pool may hold per registered worker.
    per_worker: usize,
    /// This logger's workers.
    pub(crate) workers: Mutex<Vec<Arc<WorkerSlot>>>,
    /// The last published `e_l`: every epoch below it is durable here.
    pub(crate) e_l: AtomicU64,
    /// The `data.log` and length synced when `e_l` was published (stored
    /// before `e_l`, so whoever reads a new `e_l` finds at least this).
    pub(crate) synced: Mutex<SyncedLog>,
    /// The largest epoch of any buffer this logger has written (stored
    /// before the `e_l` that covers it is published).
    pub(crate) max_epoch_written: AtomicU64,
}

impl LoggerShared {
    pub(crate) fn new(per_worker: usize, initial_e_l: u64) -> Self {
        Self {
            full: crossbeam_channel::unbounded(),
            free: Mutex::new(Vec::new()),
            recycled: Condvar::new(),
            allocated: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            per_worker,
            workers: Mutex::new(Vec::new()),
            e_l: AtomicU64::new(initial_e_l),
            synced: Mutex::new(SyncedLog::default()),
            max_epoch_written: AtomicU64::new(0),
        }
    }

    /// Hands a full (unsealed) buffer to the logger.
    pub(crate) fn submit(&self, buffer: Vec<u8>) {
        // The receiver lives as long as `Inner`; after a stop nothing reads
        // it and the buffer is simply never written.
        let _ = self.full.0.send(buffer);
    }

    /// Returns a buffer to the pool, or frees it if the pool already keeps
    /// [`FREE_KEPT_PER_WORKER`] free buffers per worker: what a backlog
    /// allocated (a disk stall, up to the bound) goes back to the system as
    /// the logger writes it out, instead of staying in the pool for good.
    pub(crate) fn recycle(&self, buffer: Vec<u8>) {
        let keep = FREE_KEPT_PER_WORKER * self.workers.lock().len().max(1);
        let mut free = self.free.lock();
        if free.len() >= keep {
            // Nobody waits for a buffer while this many are free.
            drop(free);
            self.allocated.fetch_sub(1, Ordering::AcqRel);
            drop(buffer);
            return;
        }
        free.push(buffer);
        drop(free);
        self.recycled.notify_one();
    }

    /// Buffers this logger's pool holds now.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The most buffers this logger's pool has held at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// A recycled buffer, waiting up to `timeout` for one.
    pub(crate) fn wait_recycled(&self, timeout: Duration) -> Option<Vec<u8>> {
        let mut free = self.free.lock();
        if free.is_empty() {
            let _ = self.recycled.wait_for(&mut free, timeout);
        }
        free.pop()
    }

    /// A free buffer without blocking: a recycled one, or a new one while
    /// the pool is below its bound.
    pub(crate) fn try_take(&self, buffer_bytes: usize) -> Option<Vec<u8>> {
        if let Some(buffer) = self.free.lock().pop() {
            return Some(buffer);
        }
        let bound = self.per_worker * self.workers.lock().len().max(1);
        let mut current = self.allocated.load(Ordering::Relaxed);
        while current < bound {
            match self.allocated.compare_exchange(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(current + 1, Ordering::Relaxed);
                    return Some(Vec::with_capacity(buffer_bytes));
                }
                Err(seen) => current = seen,
            }
        }
        None
    }
}

/// The state of the `pepoch` file, shared by logger 0 and shutdown.
pub(crate) struct PepochWriter {
    path: PathBuf,
    file: Option<Box<dyn StorageFile>>,
    bytes: u64,
    /// The last `e_p` made durable.
    pub(crate) last: u64,
}

impl PepochWriter {
    pub(crate) fn new(dir0: &std::path::Path, last: u64) -> Self {
        Self {
            path: dir0.join(PEPOCH),
            file: None,
            bytes: 0,
            last,
        }
    }

    /// Makes `e_p` durable in `pepoch` (silor §3.5 step 5): one appended,
    /// checksummed record and a sync; recovery takes the last valid one.
    /// The record also names each directory's synced `data.log` prefix, so
    /// recovery can tell damage in synced data from a torn tail.
    pub(crate) fn persist(&mut self, inner: &Inner, e_p: u64) -> Result<(), StorageError> {
        if e_p <= self.last {
            return Ok(());
        }
        let record = PepochRecord {
            e_p,
            logs: inner.loggers.iter().map(|l| *l.synced.lock()).collect(),
        }
        .encode();
        let storage = inner.storage.as_ref();
        match self.file.as_mut() {
            Some(file) if self.bytes < PEPOCH_REWRITE_BYTES => {
                file.append(&record)?;
                file.sync()?;
                self.bytes += record.len() as u64;
            }
            _ => {
                // Start over with a file holding only this record.
                self.file = None;
                replace_atomically(storage, &self.path, &record)?;
                self.file = Some(storage.open(&self.path)?);
                self.bytes = record.len() as u64;
            }
        }
        self.last = e_p;
        Ok(())
    }
}

/// One logger's thread state.
pub(crate) struct Logger {
    inner: Arc<Inner>,
    index: usize,
    dir: PathBuf,
    file: Box<dyn StorageFile>,
    /// Appends past the page cache (`SilorOptions::direct_io`).
    direct: Option<DirectAppender>,
    /// `data.log`'s sequence number (its header) and bytes appended.
    seq: u64,
    file_len: u64,
    /// Epoch of the first and largest buffer in `data.log`.
    file_first_epoch: Option<u64>,
    file_max_epoch: u64,
    unsynced: bool,
    bytes_written: u64,
}

impl Logger {
    /// Creates the logger for directory `index`, with a fresh `data.log`
    /// (recovery moved any previous one aside).
    pub(crate) fn open(inner: Arc<Inner>, index: usize) -> Result<Self, StorageError> {
        let dir = inner.dirs[index].clone();
        let seq = inner.epochs.current().max(inner.min_log_seq);
        let (file, file_len) = create_data_log(&inner, &dir, seq)?;
        let direct = direct_appender(&inner, file.as_ref(), file_len)?;
        *inner.loggers[index].synced.lock() = SyncedLog { seq, len: file_len };
        Ok(Self {
            inner,
            index,
            dir,
            file,
            direct,
            seq,
            file_len,
            file_first_epoch: None,
            file_max_epoch: 0,
            unsynced: false,
            bytes_written: 0,
        })
    }

    fn shared(&self) -> &LoggerShared {
        &self.inner.loggers[self.index]
    }

    fn run_loop(&mut self) -> Result<(), StorageError> {
        let mut poll = self.inner.poll;
        let mut bytes_seen = self.inner.stats.log_bytes.load(Ordering::Relaxed);
        loop {
            let stopping = self.inner.is_stopped();
            if let Ok(buffer) = self.shared().full.1.recv_timeout(poll) {
                self.write(buffer)?;
            }
            if self.inner.has_failed() {
                return Ok(());
            }
            self.cycle()?;
            if stopping {
                return Ok(());
            }
            // Back off while no logger writes (see `idle_poll_interval`);
            // any logger's write restores the short poll for all, since
            // logger 0 publishes every logger's progress.
            let bytes = self.inner.stats.log_bytes.load(Ordering::Relaxed);
            poll = if bytes == bytes_seen {
                (poll * 2).min(self.inner.idle_poll)
            } else {
                self.inner.poll
            };
            bytes_seen = bytes;
        }
    }

    /// One round of §3.5 steps 2–4 (and 5–6 on logger 0).
    fn cycle(&mut self) -> Result<(), StorageError> {
        let e_l = self.compute_e_l()?;
        // Buffers handed over before their worker advanced e_w are in the
        // channel now: write them before the sync that covers e_l.
        let full = self.shared().full.1.clone();
        write_those_present(&full, |buffer| self.write(buffer))?;
        let published = self.shared().e_l.load(Ordering::Acquire);
        if e_l > published {
            if self.unsynced {
                self.file.sync()?;
                self.unsynced = false;
                self.inner.stats.log_syncs.fetch_add(1, Ordering::Relaxed);
            }
            *self.shared().synced.lock() = SyncedLog {
                seq: self.seq,
                len: self.file_len,
            };
            self.shared().e_l.store(e_l, Ordering::Release);
            self.maybe_rotate()?;
        }
        if self.index == 0 {
            self.inner.publish_persistent_epoch()?;
        }
        Ok(())
    }

    /// The logger's epoch (silor §3.5 step 3): the minimum of its workers'
    /// `e_w`, capped by `E` as read first (an idle worker that registers
    /// or wakes after that read commits at or above it). A worker whose
    /// slot is free is between commits: a stale buffer of it is taken and
    /// written here, and its `e_w` advanced to `E`.
    fn compute_e_l(&mut self) -> Result<u64, StorageError> {
        let cap = self.inner.epochs.current();
        let mut e_l = cap;
        let slots: Vec<Arc<WorkerSlot>> = {
            let mut workers = self.shared().workers.lock();
            workers.retain(|slot| slot.e_w.load(Ordering::SeqCst) != u64::MAX);
            workers.clone()
        };
        for slot in slots {
            if let Some(mut state) = slot.try_lock() {
                let now = self.inner.epochs.current();
                if state.has_records() && state.epoch < now {
                    let buffer = state.buffer.take().expect("has_records checked it");
                    drop(state);
                    self.write(buffer)?;
                } else {
                    drop(state);
                }
                // No commit of this worker is in flight (we held its slot),
                // and its next one reads E after `now`.
                slot.e_w.fetch_max(now, Ordering::SeqCst);
            }
            e_l = e_l.min(slot.e_w.load(Ordering::SeqCst));
        }
        Ok(e_l)
    }

    /// Seals and appends one worker buffer, then recycles it at once.
    fn write(&mut self, mut buffer: Vec<u8>) -> Result<(), StorageError> {
        debug_assert!(buffer.len() > LOG_PREFIX_BYTES);
        let epoch = log_block_epoch(&buffer);
        seal_log_block(&mut buffer);
        match &mut self.direct {
            Some(direct) => {
                direct.append(self.file.as_ref(), &buffer)?;
            }
            None => {
                self.file.append(&buffer)?;
            }
        }
        self.file_len += buffer.len() as u64;
        self.unsynced = true;
        self.bytes_written += buffer.len() as u64;
        self.inner
            .stats
            .log_bytes
            .fetch_add(buffer.len() as u64, Ordering::Relaxed);
        self.shared()
            .max_epoch_written
            .fetch_max(epoch, Ordering::Release);
        self.file_first_epoch.get_or_insert(epoch);
        self.file_max_epoch = self.file_max_epoch.max(epoch);
        self.shared().recycle(buffer);
        Ok(())
    }

    /// Renames `data.log` to `old_data.<e>` once it spans the rotation
    /// interval (silor §3.5: every 100 epochs) or holds
    /// `SilorOptions::rotate_bytes`. The file is synced first, so a rotated
    /// file never has a torn tail.
    fn maybe_rotate(&mut self) -> Result<(), StorageError> {
        let Some(first) = self.file_first_epoch else {
            return Ok(());
        };
        let options = &self.inner.options;
        if self.file_max_epoch < first + options.rotate_epochs
            && self.file_len < options.rotate_bytes
        {
            return Ok(());
        }
        self.trim_and_sync()?;
        let storage = self.inner.storage.as_ref();
        let target = free_old_data_name(storage, &self.dir, self.file_max_epoch)?;
        storage.rename(&self.dir.join(DATA_LOG), &target)?;
        let seq = (self.seq + 1).max(self.inner.epochs.current());
        let (file, file_len) = create_data_log(&self.inner, &self.dir, seq)?;
        self.direct = direct_appender(&self.inner, file.as_ref(), file_len)?;
        (self.file, self.seq, self.file_len) = (file, seq, file_len);
        *self.shared().synced.lock() = SyncedLog { seq, len: file_len };
        self.file_first_epoch = None;
        self.file_max_epoch = 0;
        self.inner.stats.rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Final sync on a clean stop.
    fn finish(&mut self) -> Result<(), StorageError> {
        self.trim_and_sync()
    }

    /// Syncs `data.log` for good (before a rotation or a clean stop):
    /// written directly, it first loses its padding, so a file that is
    /// complete ends with its last block, as recovery expects of a rotated
    /// file.
    fn trim_and_sync(&mut self) -> Result<(), StorageError> {
        if let Some(direct) = &self.direct {
            if !self.file_len.is_multiple_of(DIRECT_ALIGN as u64) {
                direct.trim(self.file.as_mut())?;
                self.unsynced = true;
            }
        }
        if self.unsynced {
            self.file.sync()?;
            self.unsynced = false;
        }
        Ok(())
    }
}

/// Creates `data.log` with its header block, synced with its directory
/// entry, so a header can only be damaged by corruption.
fn create_data_log(
    inner: &Inner,
    dir: &std::path::Path,
    seq: u64,
) -> Result<(Box<dyn StorageFile>, u64), StorageError> {
    let mut file = inner.storage.create(&dir.join(DATA_LOG))?;
    let header = encode_log_header(seq);
    file.append(&header)?;
    file.sync()?;
    inner.storage.sync_dir(dir)?;
    Ok((file, header.len() as u64))
}

/// The appender for a `data.log` of `len` bytes when the log is written
/// past the page cache: each worker buffer becomes one direct write.
fn direct_appender(
    inner: &Inner,
    file: &dyn StorageFile,
    len: u64,
) -> Result<Option<DirectAppender>, StorageError> {
    if !inner.options.direct_io {
        return Ok(None);
    }
    let capacity = inner.options.log_buffer_bytes + DIRECT_ALIGN;
    DirectAppender::new(file, len, capacity).map(Some)
}

/// Runs a logger until stop, then a last cycle so everything handed over
/// is durable and published.
pub(crate) fn run_logger(logger: Logger) {
    let inner = logger.inner.clone();
    crate::cores::place_background(&inner.background_cpus);
    let mut logger = logger;
    let result = (|| {
        logger.run_loop()?;
        if !inner.has_failed() {
            logger.cycle()?;
            logger.finish()?;
        }
        Ok(())
    })();
    if let Err(error) = result {
        inner.fail(&error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_writes_the_buffers_present_and_not_those_that_refill_the_channel() {
        let (tx, rx) = crossbeam_channel::unbounded();
        for n in 0..3u8 {
            tx.send(vec![n]).unwrap();
        }
        let mut written = Vec::new();
        // Each write lets a worker hand over another buffer, as when the
        // disk is the bottleneck: the drain must still end.
        write_those_present(&rx, |buffer| {
            written.push(buffer[0]);
            if written.len() > 10 {
                return Err("the drain did not stop");
            }
            tx.send(vec![100 + buffer[0]]).unwrap();
            Ok(())
        })
        .unwrap();
        assert_eq!(written, [0, 1, 2]);
        // The refills wait for the next cycle, oldest first.
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [[100], [101], [102]]);
    }

    #[test]
    fn an_idle_logger_waits_up_to_an_epoch_of_at_most_a_millisecond() {
        let us = Duration::from_micros;
        // A server's 1 ms epochs: a quarter epoch busy, the epoch idle.
        assert_eq!(poll_interval(us(1_000)), us(250));
        assert_eq!(idle_poll_interval(us(1_000)), us(1_000));
        // SiloR's 40 ms: 1 ms either way.
        assert_eq!(poll_interval(us(40_000)), us(1_000));
        assert_eq!(idle_poll_interval(us(40_000)), us(1_000));
        // Very short epochs: never below the busy poll.
        assert_eq!(idle_poll_interval(us(200)), us(200));
        assert_eq!(idle_poll_interval(us(100)), us(100));
    }
}
