//! The `log` (LogSilo) and `silor` (SiloR) durability modes of
//! silor-osdi14 §3–5: parallel value logging with the persistent-epoch
//! protocol, and (for `silor`) fuzzy parallel checkpoints; recovery with
//! every core. Module map:
//!
//! * `worker_log` — the worker's buffer and `e_w` (§3.3–3.4, §3.5 step 1);
//! * `logger` — loggers, rotation, `pepoch` (§3.5 steps 2–6);
//! * `checkpoint` — the manager and checkpointers (§4);
//! * `recovery` — checkpoint load and log replay (§5);
//! * `format`, `files` — what is on disk and under which names.

pub(crate) mod checkpoint;
mod files;
pub(crate) mod format;
pub(crate) mod inspect;
mod logger;
mod reader;
mod recovery;
mod worker_log;

pub use recovery::RecoveryReport;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use epochdb_epoch::EpochManager;
use epochdb_storage::{Storage, StorageError};
use parking_lot::Mutex;

use crate::config::Config;
use crate::db::TableList;
use crate::durability::{DurabilityKind, DurabilityMode, DurabilityStats, WorkerLog};
use crate::error::{DurabilityError, OpenError};
use crate::table::TableId;
use crate::ticket::Watermark;

use checkpoint::CheckpointManager;
pub(crate) use files::CATALOG;
use format::encode_catalog_table;
use logger::{run_logger, Logger, LoggerShared, PepochWriter};
pub(crate) use recovery::{
    create_dir_durably, load_checkpoint, lock_dirs, read_meta, recover, remove_strays, Layout,
    Recovered,
};
use worker_log::SilorWorkerLog;

/// Settings of the `log` and `silor` modes (silor-osdi14 §3–5; the
/// checkpoint settings and `recovery_threads` serve `wal` too). The
/// defaults are the paper's where it gives one.
#[derive(Clone, Debug)]
pub struct SilorOptions {
    /// Bytes of one worker log buffer (§3.4: 512 KiB).
    pub log_buffer_bytes: usize,
    /// Buffers in a logger's pool per registered worker: the backpressure
    /// bound (§3.4: a worker that needs a buffer when none is free waits).
    /// 0, the default: about a tenth of the machine's memory divided among
    /// its cores, as SiloR set it ("about 10% of the machine's memory", so
    /// that a file-system hiccup such as a concurrent checkpoint's writes
    /// does not become a dip in transaction rates), and never fewer than
    /// 16. Buffers are allocated only when the pool has none free, so the
    /// bound costs memory only while a logger falls behind; once the
    /// pool holds 16 free buffers per worker, a buffer coming back from
    /// its write is freed instead. Measured:
    /// a 16-buffer bound (8 MiB per worker) made one TPC-C worker wait for
    /// buffers up to 9% of a run with checkpoints (BENCHMARKS.md, session
    /// 51).
    pub buffers_per_worker: usize,
    /// `data.log` becomes `old_data.<e>` once it spans this many epochs
    /// (§3.5: 100).
    pub rotate_epochs: u64,
    /// … or once it holds this many bytes, whichever comes first (ours,
    /// not the paper's). Recovery replays a directory's files in parallel,
    /// one thread per file (§5.2), so a file's size bounds how well replay
    /// spreads over the cores: 100 epochs of a busy logger is gigabytes
    /// in one file, which one thread replays alone (SiloR's long runs left
    /// "hundreds" of files per disk, §5.2; a 10 M-key database on 16 cores
    /// recovered about 3× faster with this bound, BENCHMARKS.md).
    pub rotate_bytes: u64,
    /// `C`: a checkpoint starts this long after the previous one finished
    /// (§4.3: about 10 s). `silor` and `wal` modes.
    pub checkpoint_interval: Duration,
    /// `m`: files per table per checkpointer, one per recovery thread that
    /// will load them (§4.2). 0: one per core divided among directories,
    /// counted when the database opens (on the opening thread: a
    /// checkpointer pinned to the cores the workers leave would count
    /// only those).
    pub checkpoint_files_per_table: usize,
    /// Bytes of one checkpoint block (§4.2).
    pub checkpoint_block_bytes: usize,
    /// A checkpointer syncs its files whenever this much is unsynced
    /// (§4.2: 32 MB).
    pub checkpoint_sync_bytes: u64,
    /// For this long into each checkpoint its writes queue behind the
    /// log's (Linux's idle I/O class, which the mq-deadline and BFQ
    /// schedulers honour); after that they compete as equals, so a disk
    /// that the log keeps busy still finishes checkpoints. Zero: never
    /// lowered. Ours, not the paper's: the `wal` mode's flusher writes
    /// 64 KiB units one by one, and each waited behind the checkpoint's
    /// large writes — its p99 latency to durability was 237–362 ms with
    /// checkpoints every 3 s and 43–56 ms with the checkpointer's I/O
    /// idle (BENCHMARKS.md).
    pub checkpoint_idle_io: Duration,
    /// Threads recovery uses in all (§5.2: every core). 0: one per core.
    pub recovery_threads: usize,
    /// Loggers write `data.log` past the page cache (`O_DIRECT` where the
    /// file system allows it), each buffer from the start of the 4 KiB
    /// block the log ends in, padded with zeros to a block; the padding is
    /// cut before a rotation or a clean stop, and after a crash recovery
    /// treats it as the torn tail it is. Measured better at SiloR's 40 ms
    /// epochs (large buffers); worse at a server's 1 ms epochs, where
    /// small direct writes wait on the disk one by one (`serve` turns it
    /// off). Checkpoint files are written the same way (each block one
    /// direct write, the padding cut before the file is synced for good),
    /// so a checkpoint does not fill the page cache either. Recovery then
    /// reads the checkpoint and the logs past the page cache too: they are
    /// read once, and the copy out of the cache ran on the recovering
    /// threads.
    pub direct_io: bool,
}

impl Default for SilorOptions {
    fn default() -> Self {
        Self {
            log_buffer_bytes: 512 << 10,
            buffers_per_worker: 0,
            rotate_epochs: 100,
            rotate_bytes: 128 << 20,
            checkpoint_interval: Duration::from_secs(10),
            checkpoint_files_per_table: 0,
            checkpoint_block_bytes: 256 << 10,
            checkpoint_sync_bytes: 32 << 20,
            checkpoint_idle_io: Duration::from_secs(10),
            recovery_threads: 0,
            direct_io: true,
        }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The fewest buffers per worker that `buffers_per_worker: 0` resolves
/// to, whatever the machine's memory.
const MIN_AUTO_BUFFERS_PER_WORKER: usize = 16;

/// The machine's physical memory in bytes, if it can be read.
fn physical_memory() -> Option<u64> {
    // Not under miri, which does not model `sysconf`.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: `sysconf` only reads system configuration values.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page > 0 {
            return Some(pages as u64 * page as u64);
        }
    }
    None
}

/// `buffers_per_worker: 0`'s bound for `memory` bytes of physical memory
/// over `cores` cores: a tenth of the memory in `buffer_bytes` buffers,
/// divided among the cores, at least [`MIN_AUTO_BUFFERS_PER_WORKER`].
fn auto_buffers_per_worker(memory: Option<u64>, cores: usize, buffer_bytes: usize) -> usize {
    let tenth = memory.unwrap_or(0) / 10;
    let per_core = tenth / (buffer_bytes.max(1) as u64 * cores.max(1) as u64);
    usize::try_from(per_core)
        .unwrap_or(usize::MAX)
        .max(MIN_AUTO_BUFFERS_PER_WORKER)
}

impl SilorOptions {
    pub(crate) fn recovery_threads(&self) -> usize {
        if self.recovery_threads == 0 {
            cores()
        } else {
            self.recovery_threads
        }
    }

    /// These options with `checkpoint_files_per_table` fixed now, on the
    /// thread that opens the database (see the field).
    pub(crate) fn resolved_at_open(mut self, dirs: usize) -> Self {
        self.checkpoint_files_per_table = self.files_per_table(dirs);
        if self.buffers_per_worker == 0 {
            self.buffers_per_worker =
                auto_buffers_per_worker(physical_memory(), cores(), self.log_buffer_bytes);
        }
        self
    }

    pub(crate) fn files_per_table(&self, dirs: usize) -> usize {
        if self.checkpoint_files_per_table == 0 {
            cores().div_ceil(dirs).max(1)
        } else {
            self.checkpoint_files_per_table
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.log_buffer_bytes < 4096 {
            return Err("log_buffer_bytes must be at least 4096".into());
        }
        if self.buffers_per_worker == 1 {
            return Err("buffers_per_worker must be 0 (automatic) or at least 2".into());
        }
        if self.rotate_epochs == 0 {
            return Err("rotate_epochs must be at least 1".into());
        }
        if self.rotate_bytes < 1 << 20 {
            return Err("rotate_bytes must be at least 1 MiB".into());
        }
        if self.checkpoint_block_bytes < 4096 {
            return Err("checkpoint_block_bytes must be at least 4096".into());
        }
        Ok(())
    }
}

/// Counters a running mode keeps (for benchmarks and `INFO`).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) log_bytes: AtomicU64,
    pub(crate) log_syncs: AtomicU64,
    pub(crate) rotations: AtomicU64,
    /// Waits of workers for a free log buffer (backpressure, §3.4).
    pub(crate) buffer_waits: AtomicU64,
    /// The total time of those waits, in µs.
    pub(crate) buffer_wait_micros: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) checkpoint_bytes: AtomicU64,
    /// Wall time of installed checkpoints, start to cleanup, in µs.
    pub(crate) checkpoint_micros: AtomicU64,
    /// Wall time of the last installed checkpoint, in µs.
    pub(crate) last_checkpoint_micros: AtomicU64,
    /// When the last checkpoint was installed, in Unix seconds.
    pub(crate) last_checkpoint_unix: AtomicU64,
    /// Whether a checkpoint is being written now.
    pub(crate) checkpointing: AtomicBool,
}

/// What every thread of the mode shares.
pub(crate) struct Inner {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) dirs: Vec<PathBuf>,
    pub(crate) epochs: EpochManager,
    pub(crate) options: SilorOptions,
    /// How long a logger waits for a buffer between looks at the epochs.
    pub(crate) poll: std::time::Duration,
    /// The longest it waits while nothing is being logged.
    pub(crate) idle_poll: std::time::Duration,
    /// The published persistent epoch `e_p`: tickets wait on it.
    pub(crate) watermark: Arc<Watermark>,
    pub(crate) loggers: Vec<LoggerShared>,
    pepoch: Mutex<PepochWriter>,
    catalog: Mutex<Option<Box<dyn epochdb_storage::StorageFile>>>,
    /// Every new `data.log` takes a sequence number at least this (above
    /// every number recorded before the last recovery).
    pub(crate) min_log_seq: u64,
    stop: AtomicBool,
    failed: AtomicBool,
    pub(crate) stats: Stats,
    /// CPUs for loggers and checkpointers (`Config::pin_threads`; empty:
    /// not pinned).
    pub(crate) background_cpus: Vec<usize>,
}

impl Inner {
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Fail-stop: no commit is acknowledged from now on.
    pub(crate) fn fail(&self, error: &StorageError) {
        self.failed.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.watermark.fail(DurabilityError::from_storage(error));
    }

    /// §3.5 steps 5–6: `e_p = min(e_l) − 1`, made durable in `pepoch`,
    /// then published.
    ///
    /// While nothing is logged, `e_p` still moves every epoch (read-only
    /// transactions wait on it), but the sync that makes it durable is
    /// skipped when no logger has written a record of an epoch above the
    /// `pepoch` on disk: recovery with the older `e_p` then restores the
    /// same state, so the published `e_p` may run ahead of the file. An
    /// idle server with 1 ms epochs would otherwise sync `pepoch` a
    /// thousand times a second. A checkpoint, whose `e_h` recovery checks
    /// against the file, forces the file up first
    /// ([`Inner::persist_pepoch_through`]).
    pub(crate) fn publish_persistent_epoch(&self) -> Result<(), StorageError> {
        let min_e_l = self
            .loggers
            .iter()
            .map(|logger| logger.e_l.load(Ordering::Acquire))
            .min()
            .unwrap_or(0);
        let e_p = min_e_l.saturating_sub(1);
        if e_p <= self.watermark.durable() {
            return Ok(());
        }
        let mut pepoch = self.pepoch.lock();
        // Read after the e_l values (Acquire): every buffer of an epoch
        // ≤ e_p was written, and counted here, before its e_l was stored.
        let logged = self
            .loggers
            .iter()
            .map(|logger| logger.max_epoch_written.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        if logged > pepoch.last {
            pepoch.persist(self, e_p)?;
        }
        drop(pepoch);
        self.watermark.advance(e_p);
        Ok(())
    }

    /// Makes the `pepoch` file say at least `epoch`, which must not exceed
    /// the published `e_p` (so everything through it is synced).
    pub(crate) fn persist_pepoch_through(&self, epoch: u64) -> Result<(), StorageError> {
        debug_assert!(epoch <= self.watermark.durable());
        self.pepoch.lock().persist(self, epoch)
    }

    /// The durable persistent epoch.
    pub(crate) fn persistent_epoch(&self) -> u64 {
        self.watermark.durable()
    }
}

/// Makes the creation of table `id` called `name` durable in the catalog
/// before the table can be written, so every logged or checkpointed table
/// id resolves at recovery (`log`, `silor`, `cpr`). `fail` is told of an
/// I/O error (fail-stop) before it is returned.
pub(crate) fn record_table(
    catalog: &Mutex<Option<Box<dyn epochdb_storage::StorageFile>>>,
    id: TableId,
    name: &str,
    fail: impl FnOnce(&StorageError),
) -> Result<(), DurabilityError> {
    let mut catalog = catalog.lock();
    let Some(file) = catalog.as_mut() else {
        return Err(DurabilityError::Stopped("the mode has stopped".into()));
    };
    let result = file
        .append(&encode_catalog_table(id.0, name))
        .and_then(|_| file.sync());
    result.map(|_| ()).map_err(|e| {
        fail(&e);
        DurabilityError::from_storage(&e)
    })
}

/// The `log` or `silor` mode, running.
pub(crate) struct SiloR {
    name: &'static str,
    inner: Arc<Inner>,
    loggers: Mutex<Vec<JoinHandle<()>>>,
    checkpoints: Mutex<Option<CheckpointManager>>,
    /// The directories' locks, released when the mode is dropped.
    _locks: Vec<std::fs::File>,
}

impl SiloR {
    /// Starts the mode over a recovered database: one logger per directory
    /// and, with `checkpoints`, the checkpoint manager.
    pub(crate) fn start(
        config: &Config,
        epochs: EpochManager,
        recovered: &Recovered,
        tables: TableList,
    ) -> Result<Arc<Self>, OpenError> {
        let name = config.durability.name();
        let storage = config.storage();
        let dirs = config.dirs.clone();
        let options = config.silor.clone().resolved_at_open(dirs.len());
        let checkpoints = config.durability == DurabilityKind::Silor;
        let storage_error =
            |e: StorageError| OpenError::Durability(DurabilityError::from_storage(&e));
        let catalog = storage
            .open(&dirs[0].join(CATALOG))
            .map_err(storage_error)?;
        let first_e_l = epochs.current();
        let inner = Arc::new(Inner {
            loggers: dirs
                .iter()
                .map(|_| LoggerShared::new(options.buffers_per_worker, first_e_l))
                .collect(),
            pepoch: Mutex::new(PepochWriter::new(&dirs[0], recovered.e_p)),
            catalog: Mutex::new(Some(catalog)),
            min_log_seq: recovered.next_epoch,
            watermark: Watermark::new(recovered.e_p),
            storage,
            dirs,
            epochs,
            options,
            poll: logger::poll_interval(config.epoch_interval),
            idle_poll: logger::idle_poll_interval(config.epoch_interval),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            stats: Stats::default(),
            background_cpus: config.core_plan().background_cpus().to_vec(),
        });
        let mut handles = Vec::new();
        for index in 0..inner.dirs.len() {
            let logger = Logger::open(inner.clone(), index).map_err(storage_error)?;
            let handle = std::thread::Builder::new()
                .name(format!("epochdb-logger-{index}"))
                .spawn(move || run_logger(logger))?;
            handles.push(handle);
        }
        let mode = Arc::new(Self {
            name,
            inner: inner.clone(),
            loggers: Mutex::new(handles),
            checkpoints: Mutex::new(None),
            _locks: recovered
                .locks
                .iter()
                .filter_map(|f| f.try_clone().ok())
                .collect(),
        });
        if checkpoints {
            let manager = CheckpointManager::start(inner, tables, recovered.next_checkpoint_id)?;
            *mode.checkpoints.lock() = Some(manager);
        }
        Ok(mode)
    }
}

impl DurabilityMode for SiloR {
    fn name(&self) -> &'static str {
        self.name
    }

    fn attach_worker(&self, worker: usize) -> Box<dyn WorkerLog> {
        Box::new(SilorWorkerLog::new(self.inner.clone(), worker))
    }

    fn table_created(&self, id: TableId, name: &str) -> Result<(), DurabilityError> {
        record_table(&self.inner.catalog, id, name, |e| self.inner.fail(e))
    }

    fn persistent_epoch(&self) -> Option<u64> {
        Some(self.inner.persistent_epoch())
    }

    fn checkpoint(&self) -> Result<(), DurabilityError> {
        match &*self.checkpoints.lock() {
            Some(manager) => manager.run_now(),
            None => Err(DurabilityError::Stopped(format!(
                "the {} mode takes no checkpoints",
                self.name
            ))),
        }
    }

    fn is_checkpointing(&self) -> bool {
        self.inner.stats.checkpointing.load(Ordering::Relaxed)
    }

    fn stats(&self) -> DurabilityStats {
        let stats = &self.inner.stats;
        DurabilityStats {
            log_bytes: stats.log_bytes.load(Ordering::Relaxed),
            log_syncs: stats.log_syncs.load(Ordering::Relaxed),
            log_rotations: stats.rotations.load(Ordering::Relaxed),
            buffer_waits: stats.buffer_waits.load(Ordering::Relaxed),
            buffer_wait_seconds: stats.buffer_wait_micros.load(Ordering::Relaxed) as f64 / 1e6,
            log_buffers_allocated: self
                .inner
                .loggers
                .iter()
                .map(|logger| logger.allocated() as u64)
                .sum(),
            log_buffers_peak: self
                .inner
                .loggers
                .iter()
                .map(|logger| logger.peak() as u64)
                .sum(),
            checkpoints: stats.checkpoints.load(Ordering::Relaxed),
            checkpoint_bytes: stats.checkpoint_bytes.load(Ordering::Relaxed),
            checkpoint_seconds: stats.checkpoint_micros.load(Ordering::Relaxed) as f64 / 1e6,
            persistent_epoch: Some(self.inner.persistent_epoch()),
            durable_lsn: None,
            last_checkpoint_seconds: stats.last_checkpoint_micros.load(Ordering::Relaxed) as f64
                / 1e6,
            last_checkpoint_unix: stats.last_checkpoint_unix.load(Ordering::Relaxed),
        }
    }

    fn shutdown(&self) -> Result<(), DurabilityError> {
        if let Some(manager) = self.checkpoints.lock().take() {
            manager.stop();
        }
        // Close the current epoch so the last commits fall below the final
        // e_l and become durable with the last pepoch.
        self.inner.epochs.bump();
        self.inner.stop.store(true, Ordering::Release);
        for handle in self.loggers.lock().drain(..) {
            let _ = handle.join();
        }
        if let Some(error) = self.inner.watermark.failure() {
            return Err(error);
        }
        // Every logger published its last e_l: make the last e_p durable.
        if let Err(error) = self.inner.publish_persistent_epoch() {
            self.inner.fail(&error);
            return Err(DurabilityError::from_storage(&error));
        }
        self.inner.catalog.lock().take();
        self.inner.watermark.fail(DurabilityError::Stopped(
            "the database was shut down".into(),
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_automatic_pool_is_a_tenth_of_memory_over_the_cores() {
        let gib = 1u64 << 30;
        // 24 GiB over 2 cores in 512 KiB buffers: 2.4 GiB / 1 MiB.
        assert_eq!(
            auto_buffers_per_worker(Some(24 * gib), 2, 512 << 10),
            (24 * gib / 10 / (1 << 20)) as usize
        );
        // Little memory, many cores, or memory unknown: the floor.
        assert_eq!(auto_buffers_per_worker(Some(gib), 64, 512 << 10), 16);
        assert_eq!(auto_buffers_per_worker(None, 2, 512 << 10), 16);
        // Degenerate inputs do not divide by zero.
        assert_eq!(auto_buffers_per_worker(Some(gib), 0, 0), gib as usize / 10);
    }

    #[test]
    fn a_zero_bound_is_resolved_at_open_and_one_is_refused() {
        let options = SilorOptions::default();
        assert_eq!(options.buffers_per_worker, 0);
        assert!(options.validate().is_ok());
        let resolved = options.resolved_at_open(1);
        assert!(resolved.buffers_per_worker >= MIN_AUTO_BUFFERS_PER_WORKER);
        let fixed = SilorOptions {
            buffers_per_worker: 4,
            ..SilorOptions::default()
        };
        assert_eq!(fixed.resolved_at_open(1).buffers_per_worker, 4);
        let one = SilorOptions {
            buffers_per_worker: 1,
            ..SilorOptions::default()
        };
        assert!(one.validate().is_err());
    }
}
