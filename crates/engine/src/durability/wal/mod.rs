//! The `wal` durability mode: redo logging into ELEDA's central log with
//! GRASSHOPPER (eleda-pvldb17; the `epochdb-wal` crate). This module is
//! the adapter between the engine's durability seam and that log.
//!
//! # Commit
//!
//! `log_commit` runs with the transaction's write set locked, after
//! validation and before its values are installed. It encodes the write
//! set as one redo record (TID; per write: table, key, value or tombstone;
//! `format.rs`) and appends it through the worker's own
//! [`ThreadHandle`]: the LSN is reserved by a fetch-add on the log's
//! sequencer *while the write set is locked*. Any transaction that
//! overwrites or reads one of these writes can do so only after they are
//! installed, i.e. after this reservation, and reserves its own LSN later:
//! LSN order respects every write-write and write-read dependency, and a
//! durable LSN prefix is a consistent state. The ticket's position is the
//! entry's **end LSN**; it resolves when SDL (the storage-durable LSN,
//! persisted by the log's flusher) reaches it. An "acker" thread sleeps
//! until the flusher publishes a new SDL ([`epochdb_wal::DurableWatch`])
//! and advances the mode's [`Watermark`] with it: one thread wake-up on
//! top of the flush, and no CPU while the log is idle.
//!
//! A transaction whose redo exceeds a quarter of the log buffer is split
//! over several entries (PART … COMMIT, all reserved under the same
//! locks); recovery applies it only once its COMMIT entry is found.
//!
//! # Read-only transactions
//!
//! A read-only transaction gets a ticket at the sequencer's *current*
//! reserved LSN ([`ThreadHandle::reserved_lsn`]), read after its
//! validation: every writer it read from reserved its LSN before it
//! installed the value read, so once SDL reaches that position everything
//! the transaction saw is durable. (Conservative: it may also wait for
//! unrelated concurrent commits.)
//!
//! # Tables
//!
//! A table's creation is a TABLE record appended to the same log and waited
//! for (SDL past it) before `create_table` returns, so it precedes every
//! write to the table in LSN order.
//!
//! # Failure
//!
//! Fail-stop: when the log latches an I/O error (a failed write or sync)
//! the acker fails the watermark, so every ticket not yet durable gets the
//! error and later commits' tickets fail at once. A single write too large
//! for one log entry (more than the log buffer) also stops the mode, since
//! the commit is installed in memory but cannot be logged.
//!
//! # Checkpoints
//!
//! The `silor` mode's fuzzy checkpoints, every
//! `Config::silor.checkpoint_interval` after the previous one finished,
//! with LSNs in place of epochs (`checkpoint.rs` argues why the checkpoint
//! plus the log from its start LSN is the durable state). Once one is
//! installed, the log files wholly below its start LSN are removed.
//!
//! # Recovery
//!
//! Load the installed checkpoint (if any) with one thread per checkpoint
//! file, then replay the log from the checkpoint's start LSN: `Wal::open`
//! returns every entry up to the durable end in LSN order (cutting a torn
//! tail, refusing corruption below the persisted SDL); "largest TID wins"
//! makes the checkpoint and the replay commute.
//!
//! # Files
//!
//! One directory (`Config::dirs` must name exactly one, since ELEDA writes
//! one central log): `LOCK` (flock, real disks only), `wal/` with the log
//! crate's `wal-<lsn>.log` files and `wal.sdl`, and the checkpoint's
//! `checkpoint` metadata and `ckpt.<id>.*` files.

//!
//! # Measured (2 shared cores, one disk with ~400–980 MB/s fsync'd writes)
//!
//! * `epochdb crashtest --durability wal --iterations 100 --max-run-ms 500
//!   --rate 2000 --seed 7`: 100 SIGKILLs, 0 violations; the last recovery
//!   replayed 109,829 transactions (acknowledged: 109,817) in 0.23 s.
//! * `sim_crash` with `EPOCHDB_SIM_SEEDS=1000`: 1000 seeds (power loss,
//!   torn writes, EIO/ENOSPC), no violation.
//! * `epochdb bench ycsb --threads 2 --keys 200000 --duration 5 --compare
//!   none,wal,silor`: none 1.68 M txn/s, wal 1.73 M (ratio 1.03, durable
//!   p50/p99 38.7/353 ms, 476 MB of log, 427 flushes), silor 1.54 M (0.92,
//!   50.8/525 ms). The open-loop benchmark keeps the 32 MiB log buffer
//!   full, so durable latency is the buffer's drain time on this disk.

mod checkpoint;
mod format;
pub(crate) mod inspect;
mod recovery;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use epochdb_epoch::EpochManager;
use epochdb_storage::Storage;
use epochdb_wal::{
    DurableWatch, ThreadHandle, Wal, WalError, ENTRY_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES,
};
use parking_lot::Mutex;

use super::silor::checkpoint::CheckpointManager;
use super::silor::{SilorOptions, Stats};
use super::{CommitView, DurabilityMode, DurabilityStats, WorkerLog};
use crate::config::Config;
use crate::db::TableList;
use crate::error::{DurabilityError, OpenError};
use crate::table::TableId;
use crate::ticket::{Ticket, TicketSource, Watermark};
use crate::tid::Tid;

pub(crate) use recovery::{recover, Recovered};

/// The directory inside `dirs[0]` that holds the log crate's files.
pub(crate) const WAL_SUBDIR: &str = "wal";

/// The engine's view of a log error.
impl From<WalError> for DurabilityError {
    fn from(error: WalError) -> Self {
        wal_error(&error)
    }
}

pub(crate) fn wal_error(error: &WalError) -> DurabilityError {
    match error {
        WalError::Storage(e) => DurabilityError::from_storage(e),
        WalError::Corrupted { .. } => DurabilityError::Corrupt(error.to_string()),
        WalError::Closed => DurabilityError::Stopped("the log was shut down".into()),
        other => DurabilityError::Stopped(other.to_string()),
    }
}

/// What the mode's threads and workers share.
struct Inner {
    /// The log; `None` once shut down.
    wal: Mutex<Option<Wal>>,
    /// SDL as tickets see it.
    watermark: Arc<Watermark>,
    /// The first LSN of this run (for the byte counter).
    start_lsn: u64,
    /// Largest record (bytes) one entry of a split transaction gathers.
    part_budget: usize,
    /// Largest record one entry can hold at all.
    record_max: usize,
    /// SDL at shutdown (counters after the log is gone).
    final_lsn: AtomicU64,
    stop: AtomicBool,
    /// Tables whose TABLE record is in the log; appends of TABLE records
    /// and a checkpoint's start hold this lock (see `checkpoint.rs`).
    catalog: Mutex<usize>,
    storage: Arc<dyn Storage>,
    /// The one directory, as a slice for the checkpointers.
    dirs: Vec<PathBuf>,
    epochs: EpochManager,
    /// `Config::silor`: the checkpoint settings.
    checkpoint_options: SilorOptions,
    checkpoint_stats: Stats,
    /// CPUs for the acker and the checkpointers (`Config::pin_threads`;
    /// empty: not pinned). The log's own threads are not placed.
    background_cpus: Vec<usize>,
}

impl Inner {
    /// Fail-stop: no commit is acknowledged from now on.
    fn fail(&self, error: DurabilityError) {
        self.watermark.fail(error);
    }
}

/// The `wal` mode, running.
pub(crate) struct WalMode {
    inner: Arc<Inner>,
    acker: Mutex<Option<JoinHandle<()>>>,
    checkpoints: Mutex<Option<CheckpointManager>>,
    /// The directory's lock, released when the mode is dropped.
    _lock: Vec<std::fs::File>,
}

impl WalMode {
    /// Starts the mode over a recovered log: the acker and the checkpoint
    /// manager.
    pub(crate) fn start(
        recovered: Recovered,
        config: &Config,
        epochs: EpochManager,
        tables: TableList,
    ) -> Result<Arc<Self>, OpenError> {
        let logged_tables = recovered.tables.len();
        let Recovered {
            wal,
            options,
            start_lsn,
            locks,
            next_checkpoint_id,
            ..
        } = recovered;
        let entry_max = options.entry_max_bytes();
        let record_max = entry_max - ENTRY_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES;
        let inner = Arc::new(Inner {
            watermark: Watermark::new(start_lsn),
            wal: Mutex::new(Some(wal)),
            start_lsn,
            part_budget: (record_max / 4).max(format::COMMIT_HEADER_BYTES + 64),
            record_max,
            final_lsn: AtomicU64::new(start_lsn),
            stop: AtomicBool::new(false),
            catalog: Mutex::new(logged_tables),
            storage: config.storage(),
            dirs: vec![config.dirs[0].clone()],
            epochs,
            checkpoint_options: config.silor.clone().resolved_at_open(1),
            checkpoint_stats: Stats::default(),
            background_cpus: config.core_plan().background_cpus().to_vec(),
        });
        let acker_inner = inner.clone();
        let watch = inner
            .wal
            .lock()
            .as_ref()
            .map(Wal::durable_watch)
            .expect("the log was just opened");
        let acker = std::thread::Builder::new()
            .name("epochdb-wal-acker".into())
            .spawn(move || {
                crate::cores::place_background(&acker_inner.background_cpus);
                run_acker(&acker_inner, &watch)
            })?;
        let checkpoints = CheckpointManager::start(inner.clone(), tables, next_checkpoint_id)?;
        Ok(Arc::new(Self {
            inner,
            acker: Mutex::new(Some(acker)),
            checkpoints: Mutex::new(Some(checkpoints)),
            _lock: locks,
        }))
    }
}

/// Publishes SDL to the watermark until the log stops or fails. It sleeps
/// until the flusher publishes a new SDL (no polling).
fn run_acker(inner: &Inner, watch: &DurableWatch) {
    let mut last = inner.watermark.durable();
    loop {
        // Stopped first: SDL read after a stopped log is final.
        let stopped = watch.is_stopped() || inner.stop.load(Ordering::Acquire);
        let sdl = watch.wait_past(last);
        // Everything at or below an SDL the log published is durable, even
        // if the log failed right after: acknowledge it first.
        if sdl > last {
            inner.watermark.advance(sdl);
            last = sdl;
        }
        if let Some(error) = watch.failure() {
            inner.fail(wal_error(&error));
            return;
        }
        if stopped {
            return;
        }
    }
}

impl DurabilityMode for WalMode {
    fn name(&self) -> &'static str {
        "wal"
    }

    fn attach_worker(&self, worker: usize) -> Box<dyn WorkerLog> {
        let handle = self.inner.wal.lock().as_ref().map(Wal::thread_handle);
        Box::new(WalWorkerLog {
            handle,
            inner: self.inner.clone(),
            source: TicketSource::new(self.inner.watermark.clone()),
            scratch: Vec::new(),
            txn_tag: (worker as u64 & 0xFFFF) << 48,
        })
    }

    fn table_created(&self, id: TableId, name: &str) -> Result<(), DurabilityError> {
        let mut logged_tables = self.inner.catalog.lock();
        let mut handle = match self.inner.wal.lock().as_ref() {
            Some(wal) => wal.thread_handle(),
            None => return Err(DurabilityError::Stopped("the mode has stopped".into())),
        };
        let mut record = Vec::new();
        format::encode_table(&mut record, id, name);
        let result = handle
            .append(&[&record])
            .and_then(|range| handle.wait_durable(range.end));
        match result {
            Ok(_) => {
                *logged_tables = (*logged_tables).max(id.0 as usize + 1);
                Ok(())
            }
            Err(e) => {
                let error = wal_error(&e);
                self.inner.fail(error.clone());
                Err(error)
            }
        }
    }

    fn checkpoint(&self) -> Result<(), DurabilityError> {
        match &*self.checkpoints.lock() {
            Some(manager) => manager.run_now(),
            None => Err(DurabilityError::Stopped("the mode has stopped".into())),
        }
    }

    fn is_checkpointing(&self) -> bool {
        self.inner
            .checkpoint_stats
            .checkpointing
            .load(Ordering::Relaxed)
    }

    fn stats(&self) -> DurabilityStats {
        let checkpoints = &self.inner.checkpoint_stats;
        let mut stats = DurabilityStats {
            checkpoints: checkpoints.checkpoints.load(Ordering::Relaxed),
            checkpoint_bytes: checkpoints.checkpoint_bytes.load(Ordering::Relaxed),
            checkpoint_seconds: checkpoints.checkpoint_micros.load(Ordering::Relaxed) as f64 / 1e6,
            last_checkpoint_seconds: checkpoints.last_checkpoint_micros.load(Ordering::Relaxed)
                as f64
                / 1e6,
            last_checkpoint_unix: checkpoints.last_checkpoint_unix.load(Ordering::Relaxed),
            durable_lsn: Some(self.inner.watermark.durable()),
            ..DurabilityStats::default()
        };
        match self.inner.wal.lock().as_ref() {
            Some(wal) => {
                let s = wal.stats();
                stats.log_bytes = s.durable_lsn - self.inner.start_lsn;
                stats.log_syncs = s.flushes;
            }
            None => {
                stats.log_bytes =
                    self.inner.final_lsn.load(Ordering::Relaxed) - self.inner.start_lsn;
            }
        }
        stats
    }

    fn shutdown(&self) -> Result<(), DurabilityError> {
        if let Some(manager) = self.checkpoints.lock().take() {
            manager.stop();
        }
        let Some(wal) = self.inner.wal.lock().take() else {
            return match self.inner.watermark.failure() {
                None | Some(DurabilityError::Stopped(_)) => Ok(()),
                Some(error) => Err(error),
            };
        };
        // Waits until everything reserved is durable, then stops the log's
        // threads.
        let result = wal.shutdown();
        self.inner.stop.store(true, Ordering::Release);
        if let Some(acker) = self.acker.lock().take() {
            let _ = acker.join();
        }
        match result {
            Ok(sdl) => {
                self.inner.final_lsn.store(sdl, Ordering::Relaxed);
                self.inner.watermark.advance(sdl);
                self.inner.fail(DurabilityError::Stopped(
                    "the database was shut down".into(),
                ));
                Ok(())
            }
            Err(e) => {
                let error = wal_error(&e);
                self.inner.fail(error.clone());
                Err(error)
            }
        }
    }
}

impl Drop for WalMode {
    fn drop(&mut self) {
        let _ = DurabilityMode::shutdown(self);
    }
}

/// A worker's end: its own log handle (grasshopper list) and scratch.
struct WalWorkerLog {
    /// `None` if the worker attached after shutdown.
    handle: Option<ThreadHandle>,
    inner: Arc<Inner>,
    source: Arc<TicketSource>,
    scratch: Vec<u8>,
    /// Worker index in the high 16 bits, a per-worker counter below.
    txn_tag: u64,
}

impl WalWorkerLog {
    /// A ticket that fails (the watermark holds the latched error).
    fn failed(&self, error: DurabilityError) -> Ticket {
        self.inner.fail(error);
        Ticket::from_source(u64::MAX, &self.source)
    }

    /// Encodes and appends the commit; returns the end LSN of its last
    /// entry.
    fn append_commit(&mut self, commit: &CommitView<'_>) -> Result<u64, DurabilityError> {
        let Some(handle) = self.handle.as_mut() else {
            return Err(DurabilityError::Stopped("the mode has stopped".into()));
        };
        let tid = commit.tid().raw();
        self.txn_tag = self.txn_tag.wrapping_add(1);
        let tag = self.txn_tag;
        let scratch = &mut self.scratch;
        format::begin_commit(scratch, tag, tid);
        let mut count = 0u32;
        for write in commit.writes() {
            let bytes = format::write_bytes(write.key, write.value);
            if format::COMMIT_HEADER_BYTES + bytes > self.inner.record_max {
                return Err(DurabilityError::Stopped(format!(
                    "a write of {bytes} bytes exceeds the wal mode's largest log entry ({} bytes; raise Config::wal.buffer_bytes); the mode stopped because the commit cannot be logged",
                    self.inner.record_max
                )));
            }
            if count > 0 && scratch.len() + bytes > self.inner.part_budget {
                format::finish_commit(scratch, false, count);
                // A part of a commit whose last part follows at once:
                // GRASSHOPPER may enqueue the parts as one run with it.
                handle
                    .stage(&[scratch.as_slice()])
                    .map_err(|e| wal_error(&e))?;
                format::begin_commit(scratch, tag, tid);
                count = 0;
            }
            format::push_write(scratch, write.table, write.key, write.value);
            count += 1;
        }
        format::finish_commit(scratch, true, count);
        let range = handle
            .append(&[scratch.as_slice()])
            .map_err(|e| wal_error(&e))?;
        Ok(range.end)
    }
}

impl WorkerLog for WalWorkerLog {
    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket {
        match self.append_commit(commit) {
            Ok(end) => Ticket::from_source(end, &self.source),
            Err(error) => self.failed(error),
        }
    }

    fn read_only(&mut self, _max_read: Tid) -> Ticket {
        match &self.handle {
            Some(handle) => {
                let position = handle.reserved_lsn();
                if position <= self.inner.watermark.durable() {
                    Ticket::resolved()
                } else {
                    Ticket::from_source(position, &self.source)
                }
            }
            None => self.failed(DurabilityError::Stopped("the mode has stopped".into())),
        }
    }

    fn quiesce(&mut self) {
        // Frees the pending nodes SDL has passed (eleda §4.4).
        if let Some(handle) = self.handle.as_mut() {
            handle.poll_callbacks();
        }
    }
}
