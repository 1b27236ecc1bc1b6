//! The public face: [`Wal`] (one per log) and [`ThreadHandle`] (one per
//! database thread).

use std::collections::VecDeque;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use epochdb_storage::Storage;

use crate::baseline::bitmap::BitmapWorker;
use crate::core::{Core, Tracker, FAILED, STOPPED};
use crate::error::WalError;
use crate::flusher::Flusher;
use crate::format::{encode_entry, entry_bytes};
use crate::grasshopper::list::{Callback, GList};
use crate::lsn::{Lsn, LsnRange};
use crate::options::{LogKind, WalOptions};
use crate::recovery::{scan, EntryRef, RecoveredLog};
use crate::segments::{prepare, truncate_before, FileList, WriteMode};
use crate::sync::Backoff;

/// A central write-ahead log (eleda §3): database threads append through
/// [`ThreadHandle`]s; a worker thread advances SBL and a flusher thread
/// makes the log durable up to SDL; commit callbacks run, on the thread
/// that committed, once SDL passes the commit.
///
/// ```
/// use epochdb_storage::SimStorage;
/// use epochdb_wal::{Wal, WalOptions};
/// use std::sync::{Arc, Mutex};
///
/// let disk = Arc::new(SimStorage::new(1));
/// let (wal, recovered) = Wal::open(disk.clone(), "/db/wal", WalOptions::default())?;
/// assert!(recovered.entries.is_empty());
/// let mut db_thread = wal.thread_handle();
/// let acked = Arc::new(Mutex::new(None));
/// let slot = acked.clone();
/// let lsn = db_thread.commit(&[b"put k v"], move |r| *slot.lock().unwrap() = Some(r))?;
/// db_thread.wait_durable(lsn.end)?; // or keep working and poll_callbacks() later
/// assert_eq!(acked.lock().unwrap().clone().unwrap()?, lsn);
/// drop(db_thread);
/// wal.shutdown()?;
///
/// let (_wal, recovered) = Wal::open(disk, "/db/wal", WalOptions::default())?;
/// assert_eq!(recovered.entries[0].records, vec![b"put k v".to_vec()]);
/// # Ok::<(), epochdb_wal::WalError>(())
/// ```
pub struct Wal {
    core: Arc<Core>,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    files: FileList,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("kind", &self.core.options.kind)
            .field("durable_lsn", &self.durable_lsn())
            .finish_non_exhaustive()
    }
}

/// A snapshot of the log's progress and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalStats {
    /// The next LSN the sequencer hands out.
    pub allocated_lsn: Lsn,
    /// SBL.
    pub buffered_lsn: Lsn,
    /// SDL.
    pub durable_lsn: Lsn,
    /// Bytes SBL advanced by SBL-hopping (GRASSHOPPER only).
    pub hop_bytes: u64,
    /// Bytes SBL advanced by SBL-crawling (GRASSHOPPER only; Figure 20's
    /// "crawling ratio" is `crawl / (hop + crawl + catch_up)`).
    pub crawl_bytes: u64,
    /// Bytes SBL advanced by catching up with the lists' tails inside a
    /// range (GRASSHOPPER only, beyond the paper: `WalOptions::sbl_catch_up`).
    pub catch_up_bytes: u64,
    /// Completed flushes (each: writes, a log sync and an SDL sync).
    pub flushes: u64,
    /// Bytes flushed.
    pub flushed_bytes: u64,
    /// Passes of Algorithm 1 that database threads ran for a late worker
    /// (GRASSHOPPER only: `WalOptions::worker_help_after_us`).
    pub help_passes: u64,
    /// Passes of Algorithm 1 the flusher ran after a flush (GRASSHOPPER
    /// with `WalOptions::flusher_passes`).
    pub flusher_passes: u64,
    /// Times a database thread yielded its core because the backlog
    /// exceeded `WalOptions::yield_backlog_bytes` (GRASSHOPPER only).
    pub backlog_yields: u64,
}

impl Wal {
    /// Recovers the log in `dir` (creating it if missing), cuts a torn tail,
    /// and starts the worker and flusher threads. Returns the log, ready to
    /// append at the recovered end, and what was recovered.
    ///
    /// Fails with [`WalError::Corrupted`] if data below the persisted SDL is
    /// damaged; nothing is changed on disk then.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: WalOptions,
    ) -> Result<(Wal, RecoveredLog), WalError> {
        let mut entries = Vec::new();
        let (wal, mut log) = Self::open_streaming::<WalError>(storage, dir, options, |entry| {
            entries.push(entry.to_entry());
            Ok(())
        })?;
        log.entries = entries;
        Ok((wal, log))
    }

    /// Like [`Wal::open`], but hands each recovered entry to `visit` as it
    /// is read, in LSN order, instead of collecting them: the log is read in
    /// chunks through one buffer, so recovery needs memory for a chunk, not
    /// for the whole log. The returned [`RecoveredLog`] has no `entries`.
    ///
    /// Entries are visited before the scan has seen the rest of the log: if
    /// it then finds corruption, it fails after `visit` has seen the entries
    /// before it, so the caller must discard what it built from them. An
    /// error from `visit` stops the scan and is returned; nothing is
    /// changed on disk then.
    pub fn open_streaming<E: From<WalError>>(
        storage: Arc<dyn Storage>,
        dir: impl AsRef<Path>,
        options: WalOptions,
        mut visit: impl FnMut(EntryRef<'_>) -> Result<(), E>,
    ) -> Result<(Wal, RecoveredLog), E> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let scanned = scan::<E>(&*storage, &dir, options.direct_io, &mut visit)?;
        let mode = WriteMode::of(&options);
        let prepared = prepare(&*storage, &dir, &scanned, mode)?;
        let start = scanned.log.end_lsn;
        let core = Arc::new(Core::new(options, start));
        let flusher = Flusher {
            core: Arc::clone(&core),
            storage: Arc::clone(&storage),
            dir: dir.clone(),
            active: prepared.active,
            sdl_file: prepared.sdl_file,
            files: Arc::clone(&prepared.files),
            mode,
        };
        let mut threads = Vec::new();
        let flusher_core = Arc::clone(&core);
        threads.push(spawn("eleda-flusher", move || {
            flusher_core.run_guarded("flusher", || flusher.run())
        })?);
        if !matches!(core.tracker, Tracker::Vanilla(_)) {
            let worker_core = Arc::clone(&core);
            threads.push(spawn("eleda-worker", move || {
                worker_core.run_guarded("worker", || worker_main(&worker_core, start))
            })?);
        }
        let wal = Wal {
            core,
            storage,
            dir,
            files: prepared.files,
            threads,
        };
        Ok((wal, scanned.log))
    }

    /// A handle for one database thread: its grasshopper list (or, for the
    /// baselines, its callback queue).
    pub fn thread_handle(&self) -> ThreadHandle {
        let side = match &self.core.tracker {
            Tracker::Grasshopper(gh) => Side::Grasshopper(gh.register()),
            _ => Side::Queue(VecDeque::new()),
        };
        ThreadHandle {
            core: Arc::clone(&self.core),
            side,
            scratch: Vec::new(),
            last_end: 0,
            held: None,
            help: HelpClock::new(&self.core.options),
        }
    }

    /// SDL: every entry ending at or below it is durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.core.sdl.load(Acquire)
    }

    /// A handle that follows SDL from another thread, without borrowing
    /// the log (an engine's acknowledgement thread keeps one).
    pub fn durable_watch(&self) -> DurableWatch {
        DurableWatch {
            core: Arc::clone(&self.core),
        }
    }

    /// The next LSN the sequencer hands out (see
    /// [`ThreadHandle::reserved_lsn`]).
    pub fn reserved_lsn(&self) -> Lsn {
        self.core.next_lsn.load(Acquire)
    }

    /// SBL: every entry ending at or below it is in the buffer.
    pub fn buffered_lsn(&self) -> Lsn {
        self.core.sbl.load(Acquire)
    }

    /// The hole tracker in use.
    pub fn kind(&self) -> LogKind {
        self.core.options.kind
    }

    /// The error the log failed with, if it did (fail-stop).
    pub fn failure(&self) -> Option<WalError> {
        self.core.failure()
    }

    /// Progress and counters.
    pub fn stats(&self) -> WalStats {
        let c = &self.core.counters;
        WalStats {
            allocated_lsn: self.core.next_lsn.load(Relaxed),
            buffered_lsn: self.buffered_lsn(),
            durable_lsn: self.durable_lsn(),
            hop_bytes: c.hop_bytes.load(Relaxed),
            crawl_bytes: c.crawl_bytes.load(Relaxed),
            catch_up_bytes: c.catch_up_bytes.load(Relaxed),
            flushes: c.flushes.load(Relaxed),
            flushed_bytes: c.flushed_bytes.load(Relaxed),
            help_passes: c.help_passes.load(Relaxed),
            flusher_passes: c.flusher_passes.load(Relaxed),
            backlog_yields: c.backlog_yields.load(Relaxed),
        }
    }

    /// Removes every log file whose entries all lie below `lsn` (a
    /// checkpoint made them unneeded). The file being written is kept.
    /// Returns how many files went.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        truncate_before(&*self.storage, &self.dir, &self.files, lsn)
    }

    /// Stops taking appends, waits until everything reserved is durable,
    /// and stops the threads. Returns the final SDL, or the error the log
    /// failed with.
    pub fn shutdown(mut self) -> Result<Lsn, WalError> {
        self.close()
    }

    fn close(&mut self) -> Result<Lsn, WalError> {
        self.core.begin_close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        match self.core.state() {
            FAILED => Err(self.core.stop_error()),
            _ => Ok(self.durable_lsn()),
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, WalError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| {
            WalError::from(epochdb_storage::StorageError::Io {
                path: PathBuf::new(),
                op: epochdb_storage::Op::Create,
                source: e,
            })
        })
}

/// Bytes past an entry whose ring lines a GRASSHOPPER append warms for the
/// handle's next entry. At one database thread that entry lands right
/// there, and its copy then finds the lines owned: the hopping-index add
/// that follows the copy (a locked instruction) otherwise waits for their
/// ownership misses (BENCHMARKS.md, session 32: GRASSHOPPER over the mutex
/// log, pinned, 1.02–1.05 → 1.11–1.20 staged). With more threads the
/// lines may go to another thread's entry; the grid showed no loss there.
const RING_PREFETCH_BYTES: usize = 256;

/// The most bytes of its own entry an append asks to own (`prefetchw`)
/// before it frames the entry, in every log kind. Framing a 4 KiB entry
/// (its CRC) takes about a microsecond; ownership requests issued first
/// overlap it, and the copy then finds the lines owned instead of filling
/// the store buffer with misses that the next store or locked instruction
/// waits for (one database thread, 4 KiB records, null device, pinned:
/// GRASSHOPPER's database thread 2,712 → 2,129 ns per transaction;
/// BENCHMARKS.md, session 35).
const ENTRY_PREFETCH_MAX_BYTES: usize = 8 << 10;

/// Passes in a row that found nothing after which a pacing worker stops
/// napping and sleeps on its bell until a database thread rings it. Under
/// load a pass finds nothing when the database threads are busy elsewhere
/// for a few microseconds (at one thread: running a burst of callbacks
/// after SDL moved); going to sleep on the bell then, after spinning and
/// yielding, made every such pause cost the database thread a futex wake
/// (an inter-processor interrupt, ~20 µs of its time on the VM measured:
/// ~1,800 a second at one thread appending 128 B entries; BENCHMARKS.md,
/// session 53). 64 naps of the default pace: an idle log stops polling
/// after about 1.3 ms (more where sleeps overshoot).
const IDLE_NAPS: u32 = 64;

/// The ELEDA worker thread (stage two): advances SBL until the log stops.
/// It rings the flusher whenever SBL moves, and sleeps on its own bell
/// while nothing is reserved beyond SBL.
fn worker_main(core: &Core, start: Lsn) {
    let mut backoff = Backoff::new();
    let nothing_to_do = || {
        // Something reserved beyond SBL (perhaps still being copied: the
        // writer rings once it is in), or the log stopped.
        core.next_lsn.load(Acquire) > core.sbl.load(Relaxed) || core.is_stopped()
    };
    let pace = Duration::from_micros(core.options.worker_pace_us);
    let unit = core.options.io_unit_bytes as u64;
    // After a pass that moved SBL by less than an I/O unit, nap before the
    // next one (`WalOptions::worker_pace_us`): the entries of the next
    // pass accumulate meanwhile, so the worker reads the database threads'
    // fresh nodes and counters in batches instead of pulling each entry's
    // cache lines across cores as it lands, and it leaves its core to the
    // flusher. Measured at 1 database thread on 2 cores: a worker polling
    // continuously starved the flusher (the ring filled, commit p50 2 ms
    // on the null device) and cost the database thread a cache miss per
    // entry; BENCHMARKS.md has the figures.
    if !pace.is_zero() {
        tighten_timer_slack(pace);
    }
    let nap = |moved: u64| {
        if !pace.is_zero() && moved < unit {
            std::thread::sleep(pace);
        }
    };
    // A pass that found nothing naps too, for up to `IDLE_NAPS` passes in
    // a row, before the worker sleeps on its bell: see `IDLE_NAPS`.
    let mut idle_naps = 0u32;
    let idle = |backoff: &mut Backoff, idle_naps: &mut u32| {
        if !pace.is_zero() && *idle_naps < IDLE_NAPS {
            *idle_naps += 1;
            std::thread::sleep(pace);
        } else {
            backoff.idle(&core.worker_bell, nothing_to_do);
        }
    };
    match &core.tracker {
        Tracker::Grasshopper(_) => {
            // The state (made at `start` by `Core::new`) is shared with
            // database threads that step in (`Core::help_worker`).
            loop {
                if core.worker_should_rest() {
                    // The flusher is flushing, and passes itself after each
                    // flush: sleep until it goes idle. A pass meanwhile
                    // would only ready bytes for the next flush, which the
                    // flusher's pass readies anyway; on the disk a flush
                    // takes milliseconds, and a worker napping through it
                    // woke ~50,000 times a second (`WalOptions::flusher_passes`).
                    core.rest_bell
                        .wait_unless(|| !core.worker_may_rest() || core.is_stopped());
                    if core.is_stopped() {
                        return;
                    }
                    continue;
                }
                let moved = core.worker_pass();
                if moved > 0 {
                    backoff.reset();
                    idle_naps = 0;
                    nap(moved);
                } else if core.is_stopped() {
                    return;
                } else {
                    idle(&mut backoff, &mut idle_naps);
                }
            }
        }
        Tracker::Bitmap(bitmap) => {
            let mut worker = BitmapWorker::new(start);
            loop {
                let before = core.sbl.load(Relaxed);
                if worker.advance(bitmap, &core.ring, &core.sbl) {
                    core.flusher_bell.ring();
                    backoff.reset();
                    idle_naps = 0;
                    nap(core.sbl.load(Relaxed) - before);
                } else if core.is_stopped() {
                    return;
                } else {
                    idle(&mut backoff, &mut idle_naps);
                }
            }
        }
        Tracker::Vanilla(_) => {}
    }
}

/// Makes the calling thread's timed sleeps end within a twentieth of
/// `pace` of their deadline (at least 1 µs). Linux lets a normal thread's
/// sleep run up to 50 µs late by default (its timer slack, to batch
/// wake-ups), which would turn the worker's 20 µs nap into about 70 µs:
/// measured, the p50 commit latency at one database thread then stayed at
/// ~0.1 ms whatever the pace. Best effort: elsewhere, or on error, the
/// naps keep the default slack.
fn tighten_timer_slack(pace: Duration) {
    // Not under miri, which does not model `prctl`.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let ns = (pace.as_nanos() / 20).clamp(1_000, 50_000) as u64;
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(ns));
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = pace;
}

/// Asks to own the ring lines of the entry about to be framed at
/// `[lsn, lsn + len)` (see `ENTRY_PREFETCH_MAX_BYTES`); its space is free.
fn prefetch_entry(core: &Core, lsn: u64, len: u64) {
    let len = (len as usize).min(ENTRY_PREFETCH_MAX_BYTES);
    if len > 64 {
        core.ring.prefetch_for_write(lsn, len);
    }
}

/// Enqueues `held`'s run on `list`, if any, and wakes the worker.
/// `fenced`: no `SeqCst` reservation was made since the run's bytes were
/// copied, so the worker's bell needs its fence.
fn release_held(
    held: &mut Option<LsnRange>,
    list: &GList,
    gh: &crate::grasshopper::GhShared,
    core: &Core,
    fenced: bool,
) {
    let Some(run) = held.take() else {
        return;
    };
    // SAFETY: the handle owning `held` is the list's only producer; the
    // run's bytes are in the ring and follow its previous node.
    unsafe { list.push(run.start, run.end, None, &gh.hindex) };
    if fenced {
        core.worker_bell.ring();
    } else {
        core.worker_bell.ring_after_seq_cst_rmw();
    }
}

/// Where a handle keeps its pending callbacks.
enum Side {
    /// GRASSHOPPER: in the nodes of the thread's grasshopper list.
    Grasshopper(crate::sync::Arc<GList>),
    /// Baselines: a plain queue in LSN order.
    Queue(VecDeque<(LsnRange, Callback)>),
}

/// Follows the log's SDL from any thread: see [`Wal::durable_watch`].
#[derive(Clone)]
pub struct DurableWatch {
    core: Arc<Core>,
}

impl fmt::Debug for DurableWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableWatch")
            .field("durable_lsn", &self.durable_lsn())
            .finish()
    }
}

impl DurableWatch {
    /// SDL: every entry ending at or below it is durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.core.sdl.load(Acquire)
    }

    /// The error the log failed with, if it did.
    pub fn failure(&self) -> Option<WalError> {
        self.core.failure()
    }

    /// Whether the log has stopped for good: shut down and drained, or
    /// failed. SDL read after this returns `true` is final.
    pub fn is_stopped(&self) -> bool {
        self.core.is_stopped()
    }

    /// Blocks, without polling, until SDL is past `lsn` or the log has
    /// stopped; returns SDL then.
    pub fn wait_past(&self, lsn: Lsn) -> Lsn {
        let core = &*self.core;
        let mut backoff = Backoff::new();
        loop {
            // State first: a stopped log's SDL, read after, is final.
            let stopped = core.is_stopped();
            let sdl = core.sdl.load(Acquire);
            if sdl > lsn || stopped {
                return sdl;
            }
            backoff.idle(&core.sdl_bell, || {
                core.sdl.load(Acquire) > lsn || core.is_stopped()
            });
        }
    }
}

/// One database thread's access to the log. Not shareable: the grasshopper
/// list behind it has a single producer (Table 2).
///
/// Dropping a handle waits until everything it appended is durable (or the
/// log failed or stopped) and runs the remaining callbacks.
pub struct ThreadHandle {
    core: Arc<Core>,
    side: Side,
    /// The entry being built (framed before it is copied into the ring).
    scratch: Vec<u8>,
    last_end: Lsn,
    /// GRASSHOPPER: a run of this handle's entries, contiguous in LSN,
    /// copied into the ring but not yet enqueued (see [`ThreadHandle::stage`]).
    held: Option<LsnRange>,
    /// When this thread steps in for a late worker.
    help: HelpClock,
}

/// Appends between two looks at whether the worker is late or the
/// backlog long: a look reads the worker's pass count (a line it writes),
/// the clock, and the LSN sequencer and SDL.
const HELP_CHECK_EVERY: u32 = 16;

/// A database thread's watch on the ELEDA pipeline, every
/// `HELP_CHECK_EVERY` appends.
///
/// * The worker (`WalOptions::worker_help_after_us`): the thread notes how
///   many passes the worker has run, and if none ran for the option's
///   time while entries wait beyond SBL, it runs a pass of Algorithm 1
///   itself. Passes, not SBL: SBL also stands still behind a hole, which
///   only the hole's owner can fill (with more database threads than
///   cores, an owner preempted between its reservation and its enqueue
///   holds SBL for a time slice), and a pass then does nothing.
/// * The backlog (`WalOptions::yield_backlog_bytes`): if more than the
///   option's bytes are reserved but not durable, the thread yields its
///   core, to the flusher, the worker or a preempted hole's owner.
struct HelpClock {
    /// `None`: never help.
    after: Option<Duration>,
    /// `None`: never yield.
    yield_backlog: Option<u64>,
    countdown: u32,
    passes_seen: u64,
    seen_at: Instant,
}

impl HelpClock {
    fn new(options: &WalOptions) -> Self {
        let grasshopper = options.kind == LogKind::Grasshopper;
        Self {
            after: (grasshopper && options.worker_help_after_us > 0)
                .then(|| Duration::from_micros(options.worker_help_after_us)),
            yield_backlog: (grasshopper && options.yield_backlog_bytes > 0)
                .then_some(options.yield_backlog_bytes),
            countdown: HELP_CHECK_EVERY,
            passes_seen: 0,
            seen_at: Instant::now(),
        }
    }

    /// Called after each enqueued append: helps the worker if it is late,
    /// and yields if the backlog is long.
    #[inline]
    fn tick(&mut self, core: &Core) {
        if self.after.is_none() && self.yield_backlog.is_none() {
            return;
        }
        self.countdown -= 1;
        if self.countdown == 0 {
            self.countdown = HELP_CHECK_EVERY;
            self.look(core);
        }
    }

    #[cold]
    fn look(&mut self, core: &Core) {
        if let Some(bound) = self.yield_backlog {
            // SDL read after the sequencer may have passed the value read.
            let backlog = core
                .next_lsn
                .load(Relaxed)
                .saturating_sub(core.sdl.load(Relaxed));
            if backlog > bound {
                core.counters.backlog_yields.fetch_add(1, Relaxed);
                std::thread::yield_now();
            }
        }
        let Some(after) = self.after else { return };
        let passes = core.counters.passes.load(Relaxed);
        let now = Instant::now();
        // During a flush no pass is missed: the flusher runs one when the
        // flush ends (`WalOptions::flusher_passes`).
        if passes != self.passes_seen
            || core.next_lsn.load(Relaxed) <= core.sbl.load(Relaxed)
            || core.worker_may_rest()
        {
            self.passes_seen = passes;
            self.seen_at = now;
        } else if now.duration_since(self.seen_at) >= after {
            core.help_worker();
            self.seen_at = now;
        }
    }

    /// Called while waiting for SDL to pass `lsn`: a waiting thread has
    /// nothing better to do than the worker's pass.
    fn waiting(&self, core: &Core, lsn: Lsn) {
        if self.after.is_some() && core.sbl.load(Relaxed) < lsn {
            core.help_worker();
        }
    }
}

impl fmt::Debug for ThreadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadHandle")
            .field("last_end", &self.last_end)
            .finish_non_exhaustive()
    }
}

impl ThreadHandle {
    /// Appends one entry holding `records` without waiting for anything but
    /// ring space; returns its LSNs. Durable once `durable_lsn() ≥ end`.
    pub fn append(&mut self, records: &[&[u8]]) -> Result<LsnRange, WalError> {
        self.log(records, None, false)
    }

    /// Appends one entry of a transaction that this handle goes on to
    /// commit: like [`append`], except that under GRASSHOPPER the entry's
    /// pending-LSN node may be held back and enqueued with the handle's next
    /// entry. Entries of one thread that are contiguous in LSN (at low
    /// thread counts, most of a transaction's records) then cost one node
    /// and one hopping-index add between them, instead of one each — an
    /// addition to eleda §4.1.2, which enqueues a node per record.
    ///
    /// A held entry stops SBL (every thread's progress) at its start until
    /// it is enqueued: by this handle's next [`append`] or [`commit`],
    /// [`poll_callbacks`], [`wait_durable`] or drop, or at once if its ring
    /// space is not free yet. So stage only records whose commit follows
    /// promptly. The baselines treat it as [`append`].
    ///
    /// [`append`]: ThreadHandle::append
    /// [`commit`]: ThreadHandle::commit
    /// [`poll_callbacks`]: ThreadHandle::poll_callbacks
    /// [`wait_durable`]: ThreadHandle::wait_durable
    pub fn stage(&mut self, records: &[&[u8]]) -> Result<LsnRange, WalError> {
        self.log(records, None, true)
    }

    /// Appends a commit entry and registers `callback`, which runs (on this
    /// thread, from a later `append` or `commit` (not `stage`), [`poll_callbacks`],
    /// [`wait_durable`] or the handle's drop) once the entry is durable, or
    /// with the error that stopped the log (§3.3's latency hiding: the
    /// caller parks the transaction and goes on with another). If `commit`
    /// itself returns an error, the callback never runs.
    ///
    /// [`poll_callbacks`]: ThreadHandle::poll_callbacks
    /// [`wait_durable`]: ThreadHandle::wait_durable
    pub fn commit<F>(&mut self, records: &[&[u8]], callback: F) -> Result<LsnRange, WalError>
    where
        F: FnOnce(Result<LsnRange, WalError>) + Send + 'static,
    {
        self.log(records, Some(Box::new(callback)), false)
    }

    /// Enqueues the held run, if any (GRASSHOPPER only), and wakes the
    /// worker.
    fn release_held(&mut self) {
        if let (Tracker::Grasshopper(gh), Side::Grasshopper(list)) =
            (&self.core.tracker, &self.side)
        {
            release_held(&mut self.held, list, gh, &self.core, true);
        }
    }

    fn log(
        &mut self,
        records: &[&[u8]],
        callback: Option<Callback>,
        hold: bool,
    ) -> Result<LsnRange, WalError> {
        let max = self.core.options.entry_max_bytes();
        let len = entry_bytes(records).unwrap_or(usize::MAX);
        if len > max {
            return Err(WalError::EntryTooLarge { len, max });
        }
        let len = len as u64;
        let core = &*self.core;
        let range = match (&core.tracker, &mut self.side) {
            (Tracker::Grasshopper(gh), Side::Grasshopper(list)) => {
                let lsn = match core.claim(len) {
                    Ok(lsn) => lsn,
                    Err(e) => {
                        release_held(&mut self.held, list, gh, core, true);
                        return Err(e);
                    }
                };
                if !core.has_space(lsn, len) {
                    // A held run must not wait for ring space: SDL may need
                    // to pass it first (deadlock otherwise).
                    release_held(&mut self.held, list, gh, core, false);
                    core.wait_space(lsn, len)?;
                }
                // This handle's next entry usually lands right after this
                // one: warm its lines now (see `RING_PREFETCH_BYTES`).
                core.ring.prefetch_for_write(lsn + len, RING_PREFETCH_BYTES);
                // The entry's first bytes were warmed by this handle's
                // previous append (when contiguous); asking for them again
                // would only take lines from a neighbour still copying
                // there when several threads append.
                let warmed = RING_PREFETCH_BYTES as u64;
                if len > warmed {
                    prefetch_entry(core, lsn + warmed, len - warmed);
                }
                encode_entry(&mut self.scratch, lsn, records);
                // SAFETY: reserved, and we waited for the space.
                unsafe { core.ring.write(lsn, &self.scratch) };
                let entry = LsnRange {
                    start: lsn,
                    end: lsn + len,
                };
                // Join the held run if contiguous, else enqueue it first.
                let run = match self.held.take() {
                    Some(held) if held.end == lsn => LsnRange {
                        start: held.start,
                        end: entry.end,
                    },
                    mut other => {
                        // Another thread's entry came between: the held
                        // run goes alone.
                        release_held(&mut other, list, gh, core, false);
                        entry
                    }
                };
                if hold {
                    self.held = Some(run);
                } else {
                    // SAFETY: this handle is the list's only producer.
                    unsafe { list.push(run.start, run.end, callback, &gh.hindex) };
                    // The reservation above published the progress (SeqCst).
                    core.worker_bell.ring_after_seq_cst_rmw();
                    self.help.tick(core);
                }
                entry
            }
            (Tracker::Bitmap(bitmap), Side::Queue(queue)) => {
                let lsn = core.reserve(len)?;
                prefetch_entry(core, lsn, len);
                encode_entry(&mut self.scratch, lsn, records);
                // SAFETY: as above.
                unsafe { core.ring.write(lsn, &self.scratch) };
                bitmap.set(lsn, len);
                // The reservation above published the progress (SeqCst).
                core.worker_bell.ring_after_seq_cst_rmw();
                let range = LsnRange {
                    start: lsn,
                    end: lsn + len,
                };
                if let Some(cb) = callback {
                    queue.push_back((range, cb));
                }
                range
            }
            (Tracker::Vanilla(lock), Side::Queue(queue)) => {
                core.check_open()?;
                let guard = lock.lock();
                let lsn = core.next_lsn.load(Relaxed);
                core.wait_space(lsn, len)?;
                prefetch_entry(core, lsn, len);
                encode_entry(&mut self.scratch, lsn, records);
                // SAFETY: the mutex makes this the only writer; the space
                // is flushed.
                unsafe { core.ring.write(lsn, &self.scratch) };
                core.next_lsn.store(lsn + len, Relaxed);
                core.sbl.store(lsn + len, Release);
                drop(guard);
                core.flusher_bell.ring();
                let range = LsnRange {
                    start: lsn,
                    end: lsn + len,
                };
                if let Some(cb) = callback {
                    queue.push_back((range, cb));
                }
                range
            }
            _ => unreachable!("a handle's side matches its log's tracker"),
        };
        self.last_end = range.end;
        // A staged entry is followed at once by the transaction's next
        // entry, which runs what is due; polling here too would only walk
        // the list again.
        if !hold {
            self.run_due_callbacks();
        }
        Ok(range)
    }

    /// §4.4: runs the callbacks of every entry now durable (moving the gc
    /// point and freeing nodes), or, if the log failed or stopped, of every
    /// entry, with the error for those not durable. Returns how many ran.
    pub fn poll_callbacks(&mut self) -> usize {
        self.release_held();
        self.run_due_callbacks()
    }

    /// [`ThreadHandle::poll_callbacks`] without enqueueing a held run.
    fn run_due_callbacks(&mut self) -> usize {
        // State first: seeing STOPPED or FAILED (Acquire) means the SDL
        // loaded next is final.
        let state = self.core.state();
        let sdl = self.core.sdl.load(Acquire);
        let mut ran = match &mut self.side {
            // SAFETY: this handle is the list's owner; `sdl` was loaded
            // with Acquire.
            Side::Grasshopper(list) => unsafe { list.collect(sdl) },
            Side::Queue(queue) => {
                let mut ran = 0;
                while queue.front().is_some_and(|(r, _)| r.end <= sdl) {
                    let (range, cb) = queue.pop_front().expect("checked");
                    cb(Ok(range));
                    ran += 1;
                }
                ran
            }
        };
        if matches!(state, FAILED | STOPPED) {
            let error = self.core.stop_error();
            ran += match &mut self.side {
                // SAFETY: owner.
                Side::Grasshopper(list) => unsafe { list.fail_pending(&error) },
                Side::Queue(queue) => {
                    let n = queue.len();
                    for (_, cb) in queue.drain(..) {
                        cb(Err(error.clone()));
                    }
                    n
                }
            };
        }
        ran
    }

    /// Blocks until SDL ≥ `lsn` (then runs due callbacks), or returns the
    /// error that stopped the log first.
    pub fn wait_durable(&mut self, lsn: Lsn) -> Result<(), WalError> {
        self.release_held();
        let mut backoff = Backoff::new();
        loop {
            let state = self.core.state();
            if self.core.sdl.load(Acquire) >= lsn {
                self.poll_callbacks();
                return Ok(());
            }
            if matches!(state, FAILED | STOPPED) {
                self.poll_callbacks();
                return Err(self.core.stop_error());
            }
            let core = &*self.core;
            self.help.waiting(core, lsn);
            backoff.idle(&core.sdl_bell, || {
                core.sdl.load(Acquire) >= lsn || core.is_stopped()
            });
        }
    }

    /// The end of this handle's last entry.
    pub fn last_lsn(&self) -> Lsn {
        self.last_end
    }

    /// The next LSN the sequencer hands out: every entry reserved so far
    /// (by any thread) ends at or below it. An engine acknowledges a
    /// read-only transaction once SDL reaches this value read after the
    /// transaction's reads, because a writer reserves its LSN before it
    /// installs what was read.
    pub fn reserved_lsn(&self) -> Lsn {
        self.core.next_lsn.load(Acquire)
    }
}

impl Drop for ThreadHandle {
    fn drop(&mut self) {
        let _ = self.wait_durable(self.last_end);
        self.poll_callbacks();
        if let (Tracker::Grasshopper(gh), Side::Grasshopper(list)) =
            (&self.core.tracker, &self.side)
        {
            gh.retire(list);
        }
    }
}
