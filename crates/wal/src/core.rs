//! The state every thread of the pipeline shares (eleda §3.1, Figure 1):
//! the LSN sequencer, the ring buffer, SBL, SDL, the hole tracker of the
//! chosen [`LogKind`], and the fail-stop latch.
//!
//! | variable   | written by            | read by                          |
//! |------------|-----------------------|----------------------------------|
//! | `next_lsn` | database threads (fetch-add) | flusher (at shutdown)     |
//! | `sbl`      | the worker (vanilla: the mutex holder) | flusher          |
//! | `sdl`      | the flusher           | database threads (space, callbacks) |
//! | `state`    | `Wal::shutdown`, the flusher on stop or failure | all     |

use std::sync::atomic::AtomicU64 as StatU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use crate::baseline::bitmap::Bitmap;
use crate::error::WalError;
use crate::grasshopper::worker::GhWorker;
use crate::grasshopper::GhShared;
use crate::options::{LogKind, WalOptions};
use crate::ring::Ring;
use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Backoff, Bell, Mutex};

/// How long a flush must have run before the worker rests until the
/// flusher goes idle (`WalOptions::flusher_passes`): longer than the null
/// device's flushes (~0.15 ms here), where resting cost one pinned
/// database thread ~5% of its throughput and ~70 µs of commit latency (the
/// flusher's pass then crawled every entry of the flush), far shorter than
/// the disk's (~12 ms for 16 MB), where pacing through them slowed the
/// flush's writes (BENCHMARKS.md, session 61).
const REST_AFTER: std::time::Duration = std::time::Duration::from_micros(500);

/// Appends are accepted.
pub(crate) const RUNNING: u8 = 0;
/// Shutdown asked: no new appends; the pipeline drains.
pub(crate) const CLOSING: u8 = 1;
/// Drained: SDL reached every reserved LSN; pipeline threads gone.
pub(crate) const STOPPED: u8 = 2;
/// A write or sync failed: SDL is frozen, nothing more is acknowledged.
pub(crate) const FAILED: u8 = 3;

/// The pipeline's second stage, per [`LogKind`].
pub(crate) enum Tracker {
    /// GRASSHOPPER.
    Grasshopper(GhShared),
    /// One mutex around reserve + copy + publish.
    Vanilla(Mutex<()>),
    /// One bit per buffer byte, scanned by the worker.
    Bitmap(Bitmap),
}

/// Counters for benchmarks (Relaxed: statistics only).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hop_bytes: StatU64,
    pub(crate) crawl_bytes: StatU64,
    pub(crate) catch_up_bytes: StatU64,
    pub(crate) flushes: StatU64,
    pub(crate) flushed_bytes: StatU64,
    /// Passes of Algorithm 1 run by database threads for a late worker.
    pub(crate) help_passes: StatU64,
    /// Passes of Algorithm 1 run by the flusher after a flush.
    pub(crate) flusher_passes: StatU64,
    /// Passes of Algorithm 1 run so far, by the worker or for it: a
    /// database thread that sees this stand still knows the worker is not
    /// running (`WalOptions::worker_help_after_us`).
    pub(crate) passes: StatU64,
    /// Times a database thread yielded its core to a backlog
    /// (`WalOptions::yield_backlog_bytes`).
    pub(crate) backlog_yields: StatU64,
}

/// Shared pipeline state.
pub(crate) struct Core {
    pub(crate) options: WalOptions,
    pub(crate) ring: Ring,
    /// SDL masked with this is how far the ring may be reused
    /// ([`Core::has_space`]): SDL's block is kept for in-place flushes.
    reuse_mask: u64,
    /// The LSN sequencer (§4.1.2).
    pub(crate) next_lsn: CachePadded<AtomicU64>,
    /// Sequentially buffered LSN: every byte below is in the ring.
    pub(crate) sbl: CachePadded<AtomicU64>,
    /// Storage durable LSN: every byte below is synced, and SDL itself is
    /// persisted in the SDL file.
    pub(crate) sdl: CachePadded<AtomicU64>,
    /// Whether the flusher is inside a flush (set only with
    /// [`WalOptions::flusher_passes`]): the worker sleeps meanwhile.
    flushing: CachePadded<AtomicBool>,
    /// When the flush in progress began, in nanoseconds since `clock`.
    flush_began_ns: AtomicU64,
    /// The origin of `flush_began_ns`.
    clock: std::time::Instant,
    state: AtomicU8,
    failure: parking_lot::Mutex<Option<WalError>>,
    pub(crate) tracker: Tracker,
    /// GRASSHOPPER: the worker's private state (§4.1: the LSN-heap and the
    /// lists' consuming ends), behind a lock so that a database thread can
    /// run a pass when the worker is late (`WalOptions::worker_help_after_us`).
    /// Whoever holds it is "the worker" of Table 2's single-writer rules;
    /// the lock's hand-over orders one holder's accesses before the next's.
    gh_worker: Option<CachePadded<Mutex<GhWorker>>>,
    pub(crate) counters: CachePadded<Counters>,
    /// Rung by database threads once an entry is in the ring: the worker
    /// sleeps on it when nothing is reserved beyond SBL.
    /// Each bell on a cache line of its own: every append loads
    /// `worker_bell`'s sleeper count, which must not share a line that the
    /// worker or the flusher writes (the counters, the other bells).
    pub(crate) worker_bell: CachePadded<Bell>,
    /// Rung when SBL moves: the flusher sleeps on it.
    pub(crate) flusher_bell: CachePadded<Bell>,
    /// Rung when SDL moves: threads waiting for space or durability sleep
    /// on it.
    pub(crate) sdl_bell: CachePadded<Bell>,
    /// Rung when the flusher stops flushing: a worker resting meanwhile
    /// sleeps on it (`WalOptions::flusher_passes`).
    pub(crate) rest_bell: CachePadded<Bell>,
}

impl Core {
    /// The pipeline of a log whose next LSN is `start`.
    pub(crate) fn new(options: WalOptions, start: u64) -> Self {
        let ring_bytes = options.buffer_bytes as u64;
        let tracker = match options.kind {
            LogKind::Grasshopper => Tracker::Grasshopper(GhShared::new(
                start,
                options.hop_shift,
                ring_bytes,
                options.io_unit_bytes as u64,
            )),
            LogKind::Vanilla => Tracker::Vanilla(Mutex::new(())),
            LogKind::BitmapScan => Tracker::Bitmap(Bitmap::new(ring_bytes.max(64))),
        };
        let gh_worker = match &tracker {
            Tracker::Grasshopper(gh) => Some(CachePadded::new(Mutex::new(GhWorker::new(
                gh,
                start,
                options.sbl_catch_up,
            )))),
            _ => None,
        };
        Self {
            ring: Ring::new(options.buffer_bytes),
            // A guard of 0 (nothing kept) masks nothing, as a guard of 1.
            reuse_mask: !(options.in_place_guard().max(1) - 1),
            options,
            next_lsn: CachePadded::new(AtomicU64::new(start)),
            sbl: CachePadded::new(AtomicU64::new(start)),
            sdl: CachePadded::new(AtomicU64::new(start)),
            flushing: CachePadded::new(AtomicBool::new(false)),
            flush_began_ns: AtomicU64::new(0),
            clock: std::time::Instant::now(),
            state: AtomicU8::new(RUNNING),
            failure: parking_lot::Mutex::new(None),
            tracker,
            gh_worker,
            counters: CachePadded::new(Counters::default()),
            worker_bell: CachePadded::new(Bell::new()),
            flusher_bell: CachePadded::new(Bell::new()),
            sdl_bell: CachePadded::new(Bell::new()),
            rest_bell: CachePadded::new(Bell::new()),
        }
    }

    /// GRASSHOPPER: one pass of Algorithm 1 by the worker thread, waiting
    /// for the state if a database thread holds it. Returns how many bytes
    /// SBL moved.
    pub(crate) fn worker_pass(&self) -> u64 {
        match (&self.tracker, &self.gh_worker) {
            (Tracker::Grasshopper(gh), Some(worker)) => self.pass(gh, &mut worker.lock()),
            _ => 0,
        }
    }

    /// GRASSHOPPER: one pass of Algorithm 1 by a database thread, if the
    /// worker's state is free (`WalOptions::worker_help_after_us`). Returns
    /// how many bytes SBL moved.
    pub(crate) fn help_worker(&self) -> u64 {
        match (&self.tracker, &self.gh_worker) {
            (Tracker::Grasshopper(gh), Some(worker)) => match worker.try_lock() {
                Some(mut worker) => {
                    self.counters.help_passes.fetch_add(1, Relaxed);
                    // A broken invariant fails the log, as on the worker
                    // thread, rather than unwinding into the caller with
                    // the state half-changed.
                    let mut moved = 0;
                    self.run_guarded("worker pass on a database thread", || {
                        moved = self.pass(gh, &mut worker);
                    });
                    moved
                }
                None => 0,
            },
            _ => 0,
        }
    }

    /// Advances SBL (Algorithm 1), wakes the flusher if it moved, and
    /// updates the counters of how it moved.
    fn pass(&self, gh: &GhShared, worker: &mut GhWorker) -> u64 {
        let c = &self.counters;
        // The holder of the state is the counter's only writer.
        c.passes.store(c.passes.load(Relaxed) + 1, Relaxed);
        let before = worker.sbl();
        if !worker.advance(gh, &self.sbl) {
            return 0;
        }
        self.flusher_bell.ring();
        c.hop_bytes.store(worker.hop_bytes, Relaxed);
        c.crawl_bytes.store(worker.crawl_bytes, Relaxed);
        c.catch_up_bytes.store(worker.catch_up_bytes, Relaxed);
        worker.sbl() - before
    }

    /// The lifecycle state (Acquire: a reader seeing `STOPPED` or `FAILED`
    /// sees the final SDL).
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Acquire)
    }

    /// `RUNNING → CLOSING`; no effect in any other state.
    pub(crate) fn begin_close(&self) {
        let _ = self
            .state
            .compare_exchange(RUNNING, CLOSING, AcqRel, Acquire);
        self.ring_all();
    }

    /// Wakes every sleeping pipeline thread and waiter: the state changed.
    fn ring_all(&self) {
        self.worker_bell.ring();
        self.flusher_bell.ring();
        self.sdl_bell.ring();
        self.rest_bell.ring();
    }

    /// Publishes `sdl` (Release: callbacks may run and ring space may be
    /// reused) and wakes those waiting for it.
    pub(crate) fn publish_sdl(&self, sdl: u64) {
        self.sdl.store(sdl, Release);
        self.sdl_bell.ring();
    }

    /// Whether the flusher is flushing and passes itself after each flush
    /// (`WalOptions::flusher_passes`): a pass by anyone else only readies
    /// bytes for the next flush, which the flusher's pass readies anyway.
    pub(crate) fn worker_may_rest(&self) -> bool {
        self.flushing.load(Acquire)
    }

    /// Whether the worker should rest now: [`Core::worker_may_rest`], and
    /// the flush in progress has run for [`REST_AFTER`] already. Short
    /// flushes (the null device's, ~0.15 ms) keep the worker pacing beside
    /// them, so that the flusher's pass at their end finds little to do.
    pub(crate) fn worker_should_rest(&self) -> bool {
        self.worker_may_rest() && {
            let began = self.flush_began_ns.load(Relaxed);
            (self.clock.elapsed().as_nanos() as u64).saturating_sub(began)
                >= REST_AFTER.as_nanos() as u64
        }
    }

    /// The flusher, going idle: the worker moves SBL again. Only here, not
    /// after every flush: waking the worker at each flush end only for it
    /// to find the next flush running cost the flusher a wake-up (and, on
    /// a shared core, its turn) per flush.
    pub(crate) fn end_flushing(&self) {
        if self.flushing.load(Relaxed) {
            self.flushing.store(false, Release);
            self.rest_bell.ring();
        }
    }

    /// Whether the flusher passes (`WalOptions::flusher_passes`, which only
    /// GRASSHOPPER has a worker's pass for).
    fn flusher_passes_on(&self) -> bool {
        self.options.flusher_passes && self.gh_worker.is_some()
    }

    /// The flusher, after a flush (`WalOptions::flusher_passes`): one pass
    /// of Algorithm 1 so that the next flush takes everything buffered
    /// meanwhile. Waits for a pass in progress elsewhere (microseconds)
    /// rather than flushing behind it.
    pub(crate) fn flusher_pass(&self) {
        if self.flusher_passes_on() {
            self.counters.flusher_passes.fetch_add(1, Relaxed);
            self.worker_pass();
        }
    }

    /// The flusher, before a flush: the worker may rest until the flusher
    /// goes idle ([`Core::end_flushing`]).
    pub(crate) fn begin_flush(&self) {
        if self.flusher_passes_on() {
            self.flush_began_ns
                .store(self.clock.elapsed().as_nanos() as u64, Relaxed);
            self.flushing.store(true, Release);
        }
    }

    /// Whether the log has stopped for good (drained or failed).
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.state(), STOPPED | FAILED)
    }

    /// `CLOSING → STOPPED`, by the flusher once drained.
    pub(crate) fn mark_stopped(&self) {
        let _ = self
            .state
            .compare_exchange(CLOSING, STOPPED, AcqRel, Acquire);
        self.ring_all();
    }

    /// Latches `error`: SDL stays where it is for good (fail-stop, DESIGN
    /// "a failed sync is never retried").
    pub(crate) fn fail(&self, error: WalError) {
        let mut failure = self.failure.lock();
        if failure.is_none() {
            *failure = Some(error);
        }
        self.state.store(FAILED, Release);
        drop(failure);
        self.ring_all();
    }

    /// Runs the body of pipeline thread `thread`; if it panics, fails the
    /// log with [`WalError::Internal`] so that no appender or waiter is
    /// left waiting for an SBL or SDL that will never move.
    pub(crate) fn run_guarded(&self, thread: &'static str, body: impl FnOnce()) {
        // The body's state is dropped with the panic; the only state left
        // behind is the shared one, which `fail` makes final.
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            self.fail(WalError::Internal { thread, message });
        }
    }

    /// The error the log failed with, if it did.
    pub(crate) fn failure(&self) -> Option<WalError> {
        self.failure.lock().clone()
    }

    /// What an operation that cannot proceed reports: the failure, or
    /// `Closed`.
    pub(crate) fn stop_error(&self) -> WalError {
        self.failure().unwrap_or(WalError::Closed)
    }

    /// `Ok` while appends are accepted.
    pub(crate) fn check_open(&self) -> Result<(), WalError> {
        match self.state() {
            RUNNING => Ok(()),
            _ => Err(self.stop_error()),
        }
    }

    /// Reserves `len` bytes of log (§4.1.2: fetch-add on the sequencer) and
    /// waits until their ring space is flushed.
    pub(crate) fn reserve(&self, len: u64) -> Result<u64, WalError> {
        // SeqCst (one `lock xadd` on x86 whatever the ordering): a thread
        // that loads the sequencer (Acquire) and sees this reservation also
        // sees what the reserving thread did before it (e.g. locking the
        // records it logs) — the engine's checkpoints rely on it; and it
        // publishes the progress the worker's bell waits for, in the total
        // order that lets the append ring without a fence
        // (`Bell::ring_after_seq_cst_rmw`).
        let lsn = self.claim(len)?;
        self.wait_space(lsn, len)?;
        Ok(lsn)
    }

    /// The first half of [`Core::reserve`]: the fetch-add, without waiting
    /// for the ring space (see [`Core::has_space`], [`Core::wait_space`]).
    pub(crate) fn claim(&self, len: u64) -> Result<u64, WalError> {
        self.check_open()?;
        Ok(self.next_lsn.fetch_add(len, SeqCst))
    }

    /// Whether the ring bytes of `[lsn, lsn + len)` are free already.
    /// Acquire: the flusher's reads of the bytes to be overwritten are done.
    ///
    /// With in-place flushes ([`WalOptions::writes_in_place`]) the block
    /// SDL lies in counts as unflushed: the next flush writes that whole
    /// block again straight from the ring, so its flushed head must stay.
    pub(crate) fn has_space(&self, lsn: u64, len: u64) -> bool {
        self.sdl.load(Acquire) & self.reuse_mask >= (lsn + len).saturating_sub(self.ring.size())
    }

    /// Backpressure: waits until the ring bytes of `[lsn, lsn + len)` no
    /// longer hold unflushed data, i.e. SDL (rounded down to its block with
    /// in-place flushes) ≥ `lsn + len − ring size`. Deadlock-free while
    /// `len ≤` [`WalOptions::entry_max_bytes`]: the oldest waiter needs SDL
    /// only up to its own LSN (less a block), which the entries before it
    /// reach.
    pub(crate) fn wait_space(&self, lsn: u64, len: u64) -> Result<(), WalError> {
        let mut backoff = Backoff::new();
        while !self.has_space(lsn, len) {
            if self.is_stopped() {
                return Err(self.stop_error());
            }
            backoff.idle(&self.sdl_bell, || {
                self.has_space(lsn, len) || self.is_stopped()
            });
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_pipeline_thread_fails_the_log() {
        let core = Core::new(WalOptions::default(), 0);
        core.run_guarded("test", || {});
        assert!(!core.is_stopped(), "a body that returns changes nothing");
        core.run_guarded("test", || panic!("invariant broke at {}", 7));
        assert!(core.is_stopped());
        match core.stop_error() {
            WalError::Internal { thread, message } => {
                assert_eq!(thread, "test");
                assert_eq!(message, "invariant broke at 7");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(core.check_open().is_err(), "appends are refused");
    }
}
