//! The store: the hash index, the HybridLog, the session table and the CPR
//! checkpoint driver (cpr-sigmod19 §5–6).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use crossbeam_utils::CachePadded;
use epochdb_epoch::EpochManager;
use epochdb_storage::Storage;
use parking_lot::{Condvar, Mutex};

use crate::address::FIRST_ADDRESS;
use crate::checkpoint::{self, CheckpointKind, Metadata, Piece, SnapshotMap, PIECE_BYTES_MAX};
use crate::error::{Error, Result};
use crate::functions::Functions;
use crate::index::Index;
use crate::io::{io_loop, IoCounters, IoMessage};
use crate::log::{Geometry, Log};
use crate::record::{Layout, RecordLayout};
use crate::recovery;
use crate::session::Session;
use crate::state::{Phase, SystemState};
use crate::windows::InPlaceWindows;

/// How a store is laid out in memory. The index size and the memory budget
/// are chosen at open; a recovered store keeps its checkpoint's index size
/// and page size.
#[derive(Debug, Clone)]
pub struct Config {
    /// Primary hash buckets (a power of two; 7 entries each).
    pub index_buckets: usize,
    /// log2 of the log's page size in bytes (12..=30).
    pub page_bits: u32,
    /// Memory for the log's page frames, in bytes (at least 4 pages).
    pub memory_bytes: u64,
    /// Fraction of the in-memory log kept mutable (FASTER: 0.9).
    pub mutable_fraction: f64,
    /// Sessions that may be open at once.
    pub max_sessions: usize,
    /// How [`Store::checkpoint`] captures version v (Appendix C);
    /// [`Store::checkpoint_with`] chooses per checkpoint.
    pub checkpoint_kind: CheckpointKind,
    /// How threads hand records over from version v to v+1 (Appendix B).
    pub shift_mode: ShiftMode,
    /// log2 of the size of the log's segment files (at least a page; 0:
    /// one file, `log.dat`, never truncated). Truncation
    /// ([`Store::shift_begin_address`]) gives back whole segments. A
    /// recovered store keeps its checkpoint's segment size.
    pub log_segment_bits: u32,
    /// Threads that load the index checkpoint and replay the log into the
    /// index at recovery (0: one per available core). The opening thread
    /// reads ahead meanwhile. Any count recovers the same store and
    /// reports the same errors.
    pub recovery_threads: usize,
    /// Threads that read records below head from disk for pending requests
    /// (0: one per available core, at most [`IO_THREADS_AUTO_MAX`]). Each
    /// read is a synchronous `pread`, so this is also how many reads the
    /// device has in flight; and each thread checks what it reads
    /// (`check_disk_reads`), which is CPU work when the log sits in the
    /// page cache. Threads with nothing to read sleep on the request queue.
    pub io_threads: usize,
    /// Flush the log's pages past the page cache (`O_DIRECT`, as FASTER's
    /// unbuffered devices) where the file system allows it; a flush then
    /// rewrites the 4 KiB blocks its range starts and ends in. Buffered,
    /// the kernel's first touch of fresh page-cache pages limited the flush
    /// to about 0.4 GB/s here (BENCHMARKS.md). Reads of evicted records
    /// then come from the disk, not from the page cache, and recovery
    /// reads the index and the log past it too (no copy out of the cache
    /// on the cores that replay). Default on.
    pub direct_io: bool,
    /// Check every record read from disk (below head) against the log's
    /// checksums (`log.sums`) before a request sees it: the 4 KiB blocks
    /// around the record are read and checksummed with it, so a bit flipped
    /// on disk fails the read (and its session) instead of being returned.
    /// It costs about a microsecond per read when the log file sits in the
    /// page cache (the copy and CRC32C of a block; BENCHMARKS.md, session
    /// 52), nothing measurable against a device read. Default on.
    pub check_disk_reads: bool,
    /// Put the hash index and the log's frames on transparent huge pages
    /// (`madvise(MADV_HUGEPAGE)`, `epochdb-memory`). Filling a new index
    /// or frame then faults memory in 2 MiB at a time: recovering an 8 M-key
    /// store read its 269 MB index 4× faster here (BENCHMARKS.md, "Huge
    /// pages for the HybridLog"). Default on.
    pub huge_pages: bool,
    /// Fault the log's in-memory frames in on a background thread right
    /// after opening, instead of on first touch: the memory budget
    /// (`memory_bytes`) is then resident from the start, and the tail's
    /// first lap around the frames pays no page faults (12-s fold-over
    /// runs of a 1 M-key store were 1.09–1.35× as fast with it; BENCHMARKS.md,
    /// session 60). Default on.
    pub prefault_frames: bool,
    /// How records hold their key and value lengths: any lengths (the
    /// default), or one fixed length each, which saves a word per record
    /// (24 bytes instead of 32 for 8-byte keys and values). A recovered
    /// store keeps its checkpoint's layout, whatever this says.
    pub record_layout: RecordLayout,
}

/// The granularity of the version shift (cpr-sigmod19 Appendix B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShiftMode {
    /// Fine-grained (§6.2): a PREPARE update holds a shared bucket latch
    /// while it runs, in place or not; an IN_PROGRESS update copies a
    /// version-v record anywhere in memory once it takes the bucket's
    /// exclusive latch.
    #[default]
    Fine,
    /// Coarse-grained: a PREPARE update latches its bucket only when it
    /// goes pending; an IN_PROGRESS update copies a version-v record only
    /// from the safe read-only region (or disk) and goes pending on one in
    /// the mutable or fuzzy region. Cheaper PREPARE, more pending requests
    /// in IN_PROGRESS.
    Coarse,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            index_buckets: 1 << 16,
            page_bits: 22,
            memory_bytes: 256 << 20,
            mutable_fraction: 0.9,
            max_sessions: 64,
            checkpoint_kind: CheckpointKind::FoldOver,
            shift_mode: ShiftMode::Fine,
            log_segment_bits: 30,
            recovery_threads: 0,
            io_threads: 0,
            direct_io: true,
            check_disk_reads: true,
            huge_pages: true,
            prefault_frames: true,
            record_layout: RecordLayout::Variable,
        }
    }
}

/// A session's entry in the shared session table, read by the state
/// machine's conditions and by the checkpoint driver.
#[derive(Debug, Default)]
pub(crate) struct SessionSlot {
    /// Claimed by a session (or being set up).
    pub(crate) taken: AtomicBool,
    /// Counted by the state machine's conditions.
    pub(crate) active: AtomicBool,
    pub(crate) id: AtomicU64,
    /// The session's adopted `SystemState`, packed.
    pub(crate) state: AtomicU64,
    /// Serial number of the session's CPR point for the running checkpoint.
    pub(crate) cpr_point: AtomicU64,
    /// Pending updates issued before the session's CPR point.
    pub(crate) old_pending: AtomicU64,
}

/// The state machine as the store and its sessions see it at one moment
/// ([`Store::session_states`]).
#[derive(Debug, Clone)]
pub struct SessionStates {
    /// The global state.
    pub global: SystemState,
    /// The transition out of this state waits for a session to publish.
    pub stalled: Option<SystemState>,
    /// Every active session.
    pub sessions: Vec<SessionView>,
}

/// One session in [`SessionStates`].
#[derive(Debug, Clone, Copy)]
pub struct SessionView {
    /// The session's id.
    pub id: u64,
    /// The state it has adopted.
    pub state: SystemState,
    /// Its pending updates issued before its CPR point.
    pub old_pending: u64,
}

/// The log addresses at one moment (for tests, benchmarks and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogAddresses {
    /// Lowest address on disk.
    pub begin: u64,
    /// Lowest address in memory.
    pub head: u64,
    /// Head as every thread has seen it.
    pub safe_head: u64,
    /// Everything below is on disk and synced.
    pub flushed: u64,
    /// Read-only as every thread has seen it.
    pub safe_read_only: u64,
    /// Lowest mutable address.
    pub read_only: u64,
    /// Next address to be allocated.
    pub tail: u64,
}

/// What a finished checkpoint committed.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    /// The checkpoint's version v (the store continues at v+1).
    pub version: u32,
    /// Tail at PREPARE.
    pub l_s: u64,
    /// Tail at WAIT_FLUSH: the durable log end.
    pub l_e: u64,
    /// Whether a new index checkpoint was written.
    pub with_index: bool,
    /// How version v was captured.
    pub kind: CheckpointKind,
    /// Bytes of log written for the checkpoint (fold-over: from the
    /// previous flush point to `l_e`; snapshots: the snapshot file) plus the
    /// index file.
    pub bytes: u64,
    /// Bytes of log files removed below the begin address after this
    /// checkpoint became durable (log truncation).
    pub log_bytes_freed: u64,
    /// Snapshots: bytes of the snapshot file written, and the time from
    /// taking the page list to the file being durable (both 0 for
    /// fold-over).
    pub snapshot_bytes: u64,
    /// See `snapshot_bytes`.
    pub snapshot_time: Duration,
    /// Every session's committed serial number.
    pub sessions: Vec<(u64, u64)>,
    /// Time in each phase, in order PREPARE, IN_PROGRESS, WAIT_PENDING,
    /// WAIT_FLUSH (the last includes writing the metadata).
    pub phase_times: [Duration; 4],
    /// Time writing the index checkpoint.
    pub index_time: Duration,
    /// Whether the index checkpoint was written over the spare file an
    /// older one left (blocks already allocated) rather than into a new
    /// file; false without an index checkpoint. New files write slower on
    /// ext4 (BENCHMARKS.md, "Which checkpoints write slower than the
    /// probe").
    pub index_over_spare: bool,
}

/// The last index checkpoint: `(id, l_h, l_i)`.
#[derive(Debug, Clone, Copy)]
struct IndexCheckpoint {
    id: u64,
    l_h: u64,
    l_i: u64,
}

/// The checkpoint driver's state (behind a mutex: one checkpoint at a time).
struct Driver {
    index: Option<IndexCheckpoint>,
    next_index_id: u64,
    /// The last snapshot checkpoint of this life and its `l_e`: what an
    /// incremental snapshot refers to. Cleared by a fold-over checkpoint.
    last_snapshot: Option<(SnapshotMap, u64)>,
    /// The driver's epoch membership, to read page frames safely.
    epoch: epochdb_epoch::EpochHandle,
}

pub(crate) struct Inner<F: Functions> {
    me: Weak<Inner<F>>,
    pub(crate) functions: F,
    /// How records hold their lengths (the checkpoint's, when recovered).
    pub(crate) layout: Layout,
    pub(crate) index: Index,
    pub(crate) log: Arc<Log>,
    /// The log's files (the same object as `log.file`).
    segments: Arc<crate::segment::SegmentedFile>,
    pub(crate) epochs: EpochManager,
    /// The global `SystemState`, packed.
    pub(crate) state: CachePadded<AtomicU64>,
    pub(crate) slots: Box<[SessionSlot]>,
    /// Each session's in-place window, by slot (`windows.rs`).
    pub(crate) windows: InPlaceWindows,
    pub(crate) io: Sender<IoMessage>,
    /// What the I/O threads have read.
    io_counters: Arc<IoCounters>,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    driver: Mutex<Driver>,
    /// Wakes the driver when the machine reaches WAIT_FLUSH.
    phase_lock: Mutex<()>,
    phase_cv: Condvar,
    /// Tail at WAIT_FLUSH of the running checkpoint.
    l_e: AtomicU64,
    /// Sessions not open now but known to the store: recovered and not yet
    /// continued, or stopped. `id → serial number`.
    pub(crate) dormant: Mutex<HashMap<u64, u64>>,
    pub(crate) next_session_id: AtomicU64,
    /// A transition waiting for sessions (`from` state | [`STALLED_FLAG`]),
    /// or 0.
    stalled: CachePadded<AtomicU64>,
    /// The version shift's granularity.
    pub(crate) shift_mode: ShiftMode,
    /// The running checkpoint captures version v with a snapshot (1) or a
    /// fold-over (0).
    snapshot_running: AtomicU8,
    /// How far the running snapshot checkpoint has captured version v: a
    /// version-v record below this address is in the snapshot already, so
    /// a version-v+1 session may update it in place (0 outside a snapshot's
    /// WAIT_FLUSH). See `Store::write_snapshot`.
    pub(crate) snapshot_captured: CachePadded<AtomicU64>,
    /// The highest version whose REST every active session has adopted.
    /// From then on no session copies an older version's mutable record to
    /// the tail (only IN_PROGRESS, WAIT_PENDING and WAIT_FLUSH do, and no
    /// session is in them before the next PREPARE ends), so an in-place
    /// update at REST needs no latch against such a copy.
    pub(crate) rest_settled: CachePadded<AtomicU32>,
    /// Buffers kept for the checkpoints' file writers.
    checkpoint_buffers: checkpoint::CheckpointBuffers,
    config: Config,
}

/// What an in-place update of an older version's record in the mutable
/// region needs, by the updating session's state.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OlderInPlace {
    /// PREPARE (FASTER's rules of Algorithm 3 cover it), or a REST every
    /// session had adopted before the session last refreshed: no session
    /// copies a mutable record to the tail any more, and every copy made
    /// before is in the index the session reads after its refresh.
    AsIs,
    /// Otherwise a session still in a CPR phase may be copying the record
    /// (under the bucket's exclusive latch): take the shared latch, then
    /// check that the index entry still points where it did.
    LatchAndRecheck,
}

/// Marks `Inner::stalled` as set even for the all-zero state word.
const STALLED_FLAG: u64 = 1 << 63;

impl<F: Functions> Inner<F> {
    pub(crate) fn system_state(&self) -> SystemState {
        SystemState::unpack(self.state.load(SeqCst))
    }

    /// The condition of the transition out of `from`: every active session
    /// has adopted `from` (and, leaving WAIT_PENDING, has no pending update
    /// from before its CPR point).
    fn sessions_reached(&self, from: SystemState) -> bool {
        self.slots.iter().all(|slot| {
            !slot.active.load(SeqCst)
                || (slot.state.load(SeqCst) == from.pack()
                    && (from.phase != Phase::WaitPending || slot.old_pending.load(SeqCst) == 0))
        })
    }

    /// Records that every active session has adopted `rest` if so (see
    /// `rest_settled`). Called after a session publishes REST or leaves; the
    /// last one to do so sees every other's state (all `SeqCst`).
    pub(crate) fn note_rest(&self, rest: SystemState) {
        if rest.phase == Phase::Rest
            && self.rest_settled.load(Relaxed) < rest.version
            && self.sessions_reached(rest)
        {
            // Release: a copy a session installed before publishing REST
            // happens before an in-place update that skips the latch.
            self.rest_settled.fetch_max(rest.version, Release);
        }
    }

    /// Whether every active session has adopted `local`, a REST (see
    /// `rest_settled`). Acquire: what the sessions did before adopting it
    /// (a copy of a record, installed in the index) is visible after.
    pub(crate) fn rest_settled(&self, local: SystemState) -> bool {
        local.phase == Phase::Rest && self.rest_settled.load(Acquire) >= local.version
    }

    /// Re-registers a transition whose condition failed, after a session
    /// published a new state (or left).
    pub(crate) fn kick(&self) {
        if self.stalled.load(SeqCst) == 0 {
            return;
        }
        let word = self.stalled.swap(0, SeqCst);
        if word != 0 {
            let from = SystemState::unpack(word & !STALLED_FLAG);
            let weak = self.me.clone();
            self.epochs.bump_with(move || advance(weak, from));
        }
    }

    fn notify_phase(&self) {
        let _guard = self.phase_lock.lock();
        self.phase_cv.notify_all();
    }
}

/// BumpEpoch(condition, action) for the transition out of `from`
/// (cpr-sigmod19 §3, §6.2): runs once every thread has refreshed past the
/// bump; if the condition does not hold yet it re-registers itself with a
/// new bump, so it is tried again after the next round of refreshes.
fn advance<F: Functions>(weak: Weak<Inner<F>>, from: SystemState) {
    let Some(inner) = weak.upgrade() else {
        return;
    };
    if inner.system_state() != from {
        return;
    }
    if !inner.sessions_reached(from) {
        // Not yet: the next session to publish a new state re-registers
        // the action (`Inner::kick`). Re-bumping here instead would run the
        // action again at once, recursively, whenever no thread is protected.
        inner.stalled.store(from.pack() | STALLED_FLAG, SeqCst);
        if inner.sessions_reached(from) {
            inner.kick();
        }
        return;
    }
    let to = from.next();
    match from.phase {
        Phase::Prepare | Phase::InProgress => {
            inner.state.store(to.pack(), SeqCst);
            inner.notify_phase();
            inner.epochs.bump_with(move || advance(weak, to));
        }
        Phase::WaitPending => {
            // §6.2.4: every version-v record is below the tail now. Fold
            // the log over: shift read-only to L_e, which flushes it; or
            // (a snapshot, Appendix C) leave the log as it is: the driver
            // copies [flushed, L_e) to a separate file.
            let l_e = inner.log.tail_address();
            inner.l_e.store(l_e, SeqCst);
            if inner.snapshot_running.load(SeqCst) == 0 {
                inner.log.shift_read_only(l_e);
            }
            inner.state.store(to.pack(), SeqCst);
            inner.notify_phase();
        }
        Phase::Rest | Phase::WaitFlush => {}
    }
}

/// A FASTER-style hash key-value store on a HybridLog with CPR checkpoints.
///
/// Operations run in [`Session`]s; [`Store::checkpoint`] commits every
/// session's prefix. Stop every session before dropping the store.
pub struct Store<F: Functions> {
    inner: Arc<Inner<F>>,
    threads: Vec<JoinHandle<()>>,
    /// How many of `threads` are I/O threads.
    io_threads: usize,
    recovered: Option<RecoveredInfo>,
}

impl<F: Functions> std::fmt::Debug for Store<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("state", &self.inner.system_state())
            .field("log", &self.inner.log)
            .finish_non_exhaustive()
    }
}

/// Records read from the log file below head so far
/// ([`Store::disk_reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskReads {
    /// Records read from disk for pending requests.
    pub records: u64,
    /// Of those, records whose every byte was checked against its CRC32C
    /// in `log.sums` before the request saw it. The rest lay under pieces
    /// too wide to read per record (a store written before session 52 cut
    /// pieces to 4 KiB blocks) or under none; `Store::verify_log` scrubs
    /// them.
    pub checked: u64,
}

/// What [`Store::verify_log`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogVerified {
    /// Checksummed pieces read and found whole.
    pub pieces: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of `[begin, flushed)` that have no checksum: a store written
    /// before the log had checksums, below the part its first open read.
    pub unchecked_bytes: u64,
}

/// What recovery found at open.
#[derive(Debug, Clone)]
pub struct RecoveredInfo {
    /// The checkpoint version recovered.
    pub version: u32,
    /// The durable log end recovered to.
    pub l_e: u64,
    /// Sessions and their committed serial numbers.
    pub sessions: Vec<(u64, u64)>,
    /// Bytes of log replayed into the index.
    pub log_bytes: u64,
    /// Bytes of index checkpoint read.
    pub index_bytes: u64,
    /// Records of version v+1 invalidated (§6.4).
    pub invalidated: usize,
    /// How the checkpoint captured version v.
    pub kind: CheckpointKind,
    /// Bytes of snapshot pieces read (and written back into the log file).
    pub snapshot_bytes: u64,
    /// Wall time of recovery, including allocating the log's page frames.
    pub elapsed: Duration,
    /// Wall time of reading the checkpoint (metadata, index, snapshot
    /// pieces, replay), without allocating the frames.
    pub read_time: Duration,
    /// Wall time of reading and loading the index checkpoint.
    pub index_time: Duration,
    /// Wall time of replaying the log into the index.
    pub replay_time: Duration,
    /// Threads that loaded the index and replayed the log
    /// ([`Config::recovery_threads`]).
    pub replay_threads: usize,
}

impl RecoveredInfo {
    /// Bytes recovery read from the checkpoint and the log: index,
    /// snapshot pieces and log replayed.
    pub fn bytes_read(&self) -> u64 {
        self.index_bytes + self.snapshot_bytes + self.log_bytes
    }

    /// [`RecoveredInfo::bytes_read`] over the recovery's wall time
    /// ([`RecoveredInfo::elapsed`]), in MB/s.
    pub fn mb_per_second(&self) -> f64 {
        self.bytes_read() as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl<F: Functions> Store<F> {
    /// Opens the store in `dir` on `storage`, recovering from the newest
    /// checkpoint there if any (§6.4); otherwise starts empty.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: Config,
        functions: F,
    ) -> Result<Self> {
        let started = Instant::now();
        storage.create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            storage.sync_dir(parent)?;
        }
        let state = recovery::recover(&storage, dir, &config)?;
        let read_time = started.elapsed();
        let layout = Layout::new(
            state
                .meta
                .as_ref()
                .map_or(config.record_layout, |meta| meta.layout),
        );
        if let Some(error) = layout.unusable(state.page_bits) {
            return Err(error);
        }
        let geometry = Geometry {
            huge_pages: config.huge_pages,
            prefault: config.prefault_frames,
            ..Geometry::new(
                state.page_bits,
                config.memory_bytes,
                config.mutable_fraction,
            )
        };
        // One slot more than sessions: the checkpoint driver's.
        let epochs = EpochManager::new(config.max_sessions + 1);
        let driver_epoch = epochs
            .register()
            .map_err(|_| Error::TooManySessions(config.max_sessions))?;
        let segments = Arc::new(state.file);
        let file: Arc<dyn epochdb_storage::StorageFile> = segments.clone();
        let log = Log::new(
            geometry,
            epochs.clone(),
            (file.clone(), Arc::new(state.sums)),
            state.tail,
            &state.last_page,
            state.meta.as_ref().map_or(FIRST_ADDRESS, |m| m.begin),
            config.direct_io,
        );
        let (io_tx, io_rx) = crossbeam_channel::unbounded();
        let limit = log.record_bytes_max();
        let mut threads = Vec::new();
        let io_counters = Arc::new(IoCounters::default());
        let io_threads = io_threads(config.io_threads);
        for i in 0..io_threads {
            let (file, log, requests) = (file.clone(), log.clone(), io_rx.clone());
            let counters = io_counters.clone();
            let check = config.check_disk_reads;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("hybridlog-io-{i}"))
                    .spawn(move || io_loop(file, log, requests, (layout, limit), check, counters))
                    .expect("spawn an I/O thread"),
            );
        }
        drop(io_rx);
        let flusher = log.clone();
        threads.push(
            std::thread::Builder::new()
                .name("hybridlog-flush".into())
                .spawn(move || flusher.flush_loop())
                .expect("spawn the flush thread"),
        );
        let driver = Driver {
            index: state.meta.as_ref().map(|m| IndexCheckpoint {
                id: m.index_id,
                l_h: m.l_h,
                l_i: m.l_i,
            }),
            next_index_id: state.meta.as_ref().map_or(1, |m| m.index_id + 1),
            last_snapshot: None,
            epoch: driver_epoch,
        };
        let dormant: HashMap<u64, u64> = state
            .meta
            .as_ref()
            .map(|m| m.sessions.iter().copied().collect())
            .unwrap_or_default();
        let version = state.meta.as_ref().map_or(1, |m| m.version + 1);
        let recovered = state.meta.as_ref().map(|m| RecoveredInfo {
            version: m.version,
            l_e: m.l_e,
            sessions: m.sessions.clone(),
            log_bytes: state.log_bytes,
            index_bytes: state.index_bytes,
            invalidated: state.invalidated,
            kind: m.kind,
            snapshot_bytes: state.snapshot_bytes,
            elapsed: started.elapsed(),
            read_time,
            index_time: state.index_time,
            replay_time: state.replay_time,
            replay_threads: state.replay_threads,
        });
        let next_session_id = state.meta.as_ref().map_or(1, |m| m.next_session_id);
        // The index as recovered (its size may be a checkpoint's, not the
        // configured one), for sizing what the store holds beside it.
        let index_bytes = (state.index.len() * std::mem::size_of::<crate::index::Bucket>()) as u64;
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            functions,
            layout,
            index: state.index,
            log,
            segments,
            epochs,
            state: CachePadded::new(AtomicU64::new(SystemState::rest(version).pack())),
            slots: (0..config.max_sessions)
                .map(|_| SessionSlot::default())
                .collect(),
            windows: InPlaceWindows::new(config.max_sessions),
            io: io_tx,
            io_counters,
            storage,
            dir: dir.to_path_buf(),
            driver: Mutex::new(driver),
            phase_lock: Mutex::new(()),
            phase_cv: Condvar::new(),
            l_e: AtomicU64::new(0),
            dormant: Mutex::new(dormant),
            next_session_id: AtomicU64::new(next_session_id),
            stalled: CachePadded::new(AtomicU64::new(0)),
            shift_mode: config.shift_mode,
            snapshot_running: AtomicU8::new(0),
            snapshot_captured: CachePadded::new(AtomicU64::new(0)),
            rest_settled: CachePadded::new(AtomicU32::new(version)),
            checkpoint_buffers: checkpoint::CheckpointBuffers::for_store(
                config.memory_bytes,
                index_bytes,
            ),
            config,
        });
        // A flush that fails during a checkpoint must wake the driver: the
        // phase it waits for may never come (a session's pending request
        // cannot finish once the log stops).
        let weak = inner.me.clone();
        inner.log.on_failure(Box::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner.notify_phase();
            }
        }));
        Ok(Store {
            inner,
            threads,
            io_threads,
            recovered,
        })
    }

    /// How the store's records hold their lengths: as configured for a new
    /// store, as its checkpoint says for a recovered one.
    pub fn record_layout(&self) -> RecordLayout {
        self.inner.layout.public()
    }

    /// What recovery restored at open, if there was a checkpoint.
    pub fn recovered(&self) -> Option<&RecoveredInfo> {
        self.recovered.as_ref()
    }

    /// Starts a new session (FASTER's `StartSession`) with a fresh id.
    pub fn start_session(&self) -> Result<Session<F>> {
        let id = self.inner.next_session_id.fetch_add(1, SeqCst);
        Session::start(self.inner.clone(), id, 0)
    }

    /// Re-opens session `id` after recovery (FASTER's `ContinueSession`):
    /// returns it with the serial number up to which its operations were
    /// recovered — all of them, and none after. Its next operation gets the
    /// following serial number.
    pub fn continue_session(&self, id: u64) -> Result<(Session<F>, u64)> {
        let serial = self
            .inner
            .dormant
            .lock()
            .remove(&id)
            .ok_or(Error::UnknownSession(id))?;
        match Session::start(self.inner.clone(), id, serial) {
            Ok(session) => Ok((session, serial)),
            Err(e) => {
                self.inner.dormant.lock().insert(id, serial);
                Err(e)
            }
        }
    }

    /// Truncates the log (FASTER's `ShiftBeginAddress`): records below
    /// `address` are dropped — a key whose newest record lies below it
    /// reads as absent from now on. The begin address moves to `address`,
    /// clamped to the in-memory boundary (records in memory are never
    /// dropped this way), and is returned. The log files wholly below it
    /// are removed once the next checkpoint, which records the new begin
    /// address, is durable (until then the previous checkpoint still needs
    /// them). With `log_segment_bits == 0` the begin address moves but no
    /// space is given back.
    ///
    /// The store does not compact: which records below `address` are still
    /// live is the caller's knowledge (for example, keys rewritten since, or
    /// data with a time-to-live).
    pub fn shift_begin_address(&self, address: u64) -> u64 {
        let log = &self.inner.log;
        let target = address.min(log.safe_head()).max(FIRST_ADDRESS);
        log.begin.fetch_max(target, SeqCst).max(target)
    }

    /// Reads the log on disk, `[begin, flushed)`, and checks it against
    /// its checksums (`log.sums`): a scrub of what recovery does not read
    /// (below the index checkpoint's `l_h`) and of what no request has read
    /// (each record read from disk is checked as it is read; see
    /// [`Store::disk_reads`]). Sessions may go
    /// on meanwhile; what the flush writes after the call starts is not
    /// read. A mismatch is `Error::Corrupted` with the log's path and the
    /// piece's first address.
    pub fn verify_log(&self) -> Result<LogVerified> {
        use crate::sums::PieceBytes;
        use std::ops::ControlFlow::{Break, Continue};
        let log = &self.inner.log;
        let flushed = log.flushed();
        let begin = log.begin.load(SeqCst);
        let mut checks = log.sums.checks(begin, flushed);
        checks.retain(|check| check.piece.to <= flushed);
        let file: &dyn epochdb_storage::StorageFile = self.inner.segments.as_ref();
        let mut verified = LogVerified::default();
        let mut covered = begin;
        let mut failure = None;
        crate::sums::read_pieces(file, 0, &checks, |check, bytes| {
            let piece = check.piece;
            verified.unchecked_bytes += piece.from.saturating_sub(covered);
            covered = covered.max(piece.to);
            if piece.from < log.begin.load(SeqCst) {
                // Truncated meanwhile: nothing to check there any more.
                return Continue(());
            }
            match bytes {
                PieceBytes::Read(bytes) if check.matches(bytes) => {
                    verified.pieces += 1;
                    verified.bytes += bytes.len() as u64;
                    Continue(())
                }
                // `read_pieces` returns the error.
                PieceBytes::Failed => Break(()),
                PieceBytes::Read(_) | PieceBytes::Short => {
                    failure = Some(recovery::piece_mismatch(file.path(), &piece));
                    Break(())
                }
            }
        })?;
        if let Some(error) = failure {
            return Err(error);
        }
        verified.unchecked_bytes += flushed.saturating_sub(covered);
        Ok(verified)
    }

    /// Records the I/O threads have read from the log file (below head) since
    /// the store opened, and how many of them it checked.
    pub fn disk_reads(&self) -> DiskReads {
        let counters = &self.inner.io_counters;
        DiskReads {
            records: counters.records.load(SeqCst),
            checked: counters.checked.load(SeqCst),
        }
    }

    /// Bytes of log files on disk now (all segments).
    pub fn log_disk_bytes(&self) -> Result<u64> {
        Ok(self.inner.segments.disk_bytes()?)
    }

    /// The global checkpoint state.
    pub fn system_state(&self) -> SystemState {
        self.inner.system_state()
    }

    /// The highest version whose REST every session has adopted.
    #[cfg(test)]
    pub(crate) fn rest_settled_version(&self) -> u32 {
        self.inner.rest_settled.load(SeqCst)
    }

    /// Every active session's view of the state machine, for diagnosing a
    /// checkpoint that does not finish: what each session has adopted and
    /// how many of its pending updates precede its CPR point. Also the
    /// transition waiting for sessions (`stalled`, if any).
    pub fn session_states(&self) -> SessionStates {
        let inner = &*self.inner;
        let stalled = inner.stalled.load(SeqCst);
        SessionStates {
            global: inner.system_state(),
            stalled: (stalled != 0).then(|| SystemState::unpack(stalled & !STALLED_FLAG)),
            sessions: inner
                .slots
                .iter()
                .filter(|slot| slot.active.load(SeqCst))
                .map(|slot| SessionView {
                    id: slot.id.load(SeqCst),
                    state: SystemState::unpack(slot.state.load(SeqCst)),
                    old_pending: slot.old_pending.load(SeqCst),
                })
                .collect(),
        }
    }

    /// Blocks until the global checkpoint state differs from `seen`, or
    /// until `timeout` has passed, and returns the state then: lets a
    /// monitor (a crash test, a benchmark) follow the phases without
    /// polling. Every change of phase wakes it.
    pub fn wait_state_change(&self, seen: SystemState, timeout: Duration) -> SystemState {
        let inner = &*self.inner;
        let deadline = Instant::now() + timeout;
        let mut guard = inner.phase_lock.lock();
        loop {
            let now = inner.system_state();
            if now != seen {
                return now;
            }
            if inner.phase_cv.wait_until(&mut guard, deadline).timed_out() {
                return inner.system_state();
            }
        }
    }

    /// The log's addresses now.
    pub fn addresses(&self) -> LogAddresses {
        let log = &self.inner.log;
        LogAddresses {
            begin: log.begin.load(Relaxed),
            head: log.head(),
            safe_head: log.safe_head(),
            flushed: log.flushed(),
            safe_read_only: log.safe_read_only(),
            read_only: log.read_only(),
            tail: log.tail_address(),
        }
    }

    /// Takes a CPR checkpoint, fold-over (§6.2, Appendix C): drives the
    /// state machine REST → PREPARE → IN_PROGRESS → WAIT_PENDING →
    /// WAIT_FLUSH → REST and returns once the checkpoint is durable. With
    /// `with_index` (or if there is no index checkpoint yet) a fuzzy index
    /// checkpoint is written first (§6.3); otherwise the checkpoint is
    /// log-only (Appendix D).
    ///
    /// Blocks (on condition variables) until every open session has
    /// refreshed through the phases: call it from a thread that is not
    /// running a session, while sessions keep operating or calling
    /// [`Session::refresh`].
    pub fn checkpoint(&self, with_index: bool) -> Result<CheckpointInfo> {
        self.checkpoint_with(with_index, self.inner.config.checkpoint_kind)
    }

    /// [`Store::checkpoint`], capturing version v as `kind` says: fold-over
    /// (§6.2), a snapshot to a separate file (Appendix C), or an
    /// incremental snapshot (the pages changed since the previous snapshot
    /// of this life, the rest referred to in the older files).
    pub fn checkpoint_with(
        &self,
        with_index: bool,
        kind: CheckpointKind,
    ) -> Result<CheckpointInfo> {
        let result = self.checkpoint_inner(with_index, kind);
        if let Err(e) = &result {
            if !matches!(e, Error::CheckpointInProgress) {
                // Fail-stop: a checkpoint that failed half-way (a failed
                // write or sync) ends durability for this store's life.
                // (`fail` wakes the phase waiters too.)
                self.inner.log.fail(e.to_string());
            }
        }
        result
    }

    fn checkpoint_inner(&self, with_index: bool, kind: CheckpointKind) -> Result<CheckpointInfo> {
        let inner = &*self.inner;
        let mut driver = inner.driver.try_lock().ok_or(Error::CheckpointInProgress)?;
        if inner.log.has_failed() {
            return Err(Error::Failed("an earlier log flush failed".into()));
        }
        let rest = inner.system_state();
        if rest.phase != Phase::Rest {
            return Err(Error::Failed(format!(
                "checkpoint state machine stuck at {rest:?}"
            )));
        }
        let v = rest.version;
        // Every session must have left the previous checkpoint's phases
        // first (FASTER's PERSISTENCE_CALLBACK phase waits for the same):
        // one still in WAIT_FLUSH may be copying a mutable version-v record
        // of a snapshot to the tail while a session in the new PREPARE,
        // which under the coarse shift takes no latch, updates it in place;
        // the copy's CAS would then drop that update.
        self.wait_sessions_at(rest)?;
        let index_started = Instant::now();
        let mut bytes = 0u64;
        let with_index = with_index || driver.index.is_none();
        let mut index_sync = None;
        let mut index_over_spare = false;
        if with_index {
            let id = driver.next_index_id;
            let l_h = inner.log.tail_address();
            // A record allocated below L_h may not be in the index yet; once
            // every thread has refreshed, every such record's CAS is done,
            // so the copy holds it or the replay from L_h is not needed for
            // it.
            self.epoch_barrier();
            let (words_bytes, unsynced) = checkpoint::write_index(
                inner.storage.as_ref(),
                &inner.dir,
                id,
                &inner.index,
                &inner.checkpoint_buffers,
                inner.config.direct_io,
            )?;
            index_over_spare = unsynced.over_spare();
            index_sync = Some(checkpoint::IndexSync::start(
                unsynced,
                inner.storage.clone(),
            ));
            let l_i = inner.log.tail_address();
            bytes += words_bytes;
            driver.index = Some(IndexCheckpoint { id, l_h, l_i });
            driver.next_index_id = id + 1;
        }
        let index_time = index_started.elapsed();
        let index = driver.index.expect("set above");
        let flushed_before = inner.log.flushed();
        let l_s = inner.log.tail_address();
        inner
            .snapshot_running
            .store(u8::from(kind.is_snapshot()), SeqCst);
        let mut marks = [Instant::now(); 5];
        let prepare = rest.next();
        inner.state.store(prepare.pack(), SeqCst);
        inner.notify_phase();
        let weak = inner.me.clone();
        inner.epochs.bump_with(move || advance(weak, prepare));
        // Wait for each phase, to time them; the transitions happen in
        // the sessions' refreshes.
        for (i, phase) in [Phase::InProgress, Phase::WaitPending, Phase::WaitFlush]
            .into_iter()
            .enumerate()
        {
            let mut guard = inner.phase_lock.lock();
            while inner.system_state().phase < phase && !inner.log.has_failed() {
                inner.phase_cv.wait(&mut guard);
            }
            marks[i + 1] = Instant::now();
        }
        if inner.log.has_failed() {
            return Err(Error::Failed("the log failed during the checkpoint".into()));
        }
        let l_e = inner.l_e.load(SeqCst);
        let mut snapshot = None;
        let mut snapshot_bytes = 0;
        let mut snapshot_time = Duration::ZERO;
        if kind.is_snapshot() {
            let started = Instant::now();
            let (map, written) = self.write_snapshot(&mut driver, v, l_e, kind)?;
            snapshot_time = started.elapsed();
            snapshot_bytes = written;
            snapshot = Some(map);
        } else {
            inner.log.wait_flushed(l_e)?;
        }
        let mut sessions: HashMap<u64, u64> = inner.dormant.lock().clone();
        for slot in inner.slots.iter() {
            if slot.active.load(SeqCst) {
                sessions.insert(slot.id.load(Acquire), slot.cpr_point.load(Acquire));
            }
        }
        let mut sessions: Vec<(u64, u64)> = sessions.into_iter().collect();
        sessions.sort_unstable();
        let meta = Metadata {
            version: v,
            l_s,
            l_e,
            begin: inner.log.begin.load(Relaxed),
            index_id: index.id,
            l_h: index.l_h,
            l_i: index.l_i,
            page_bits: inner.log.geometry.page_bits,
            next_session_id: inner.next_session_id.load(SeqCst),
            sessions: sessions.clone(),
            kind,
            snapshot: snapshot.clone(),
            segment_bits: inner.segments.segment_bits(),
            log_sums: true,
            layout: inner.layout.public(),
        };
        // Whatever recovery wrote into the log files (snapshot pieces,
        // invalid marks) and was not synced since becomes durable before
        // the metadata that relies on it; a no-op otherwise.
        epochdb_storage::StorageFile::sync(inner.segments.as_ref())?;
        // The checksums of the log up to l_e were recorded before `flushed`
        // passed it (or by recovery); they must be durable with it.
        inner.log.sums.sync()?;
        if let Some(index_sync) = index_sync {
            index_sync.wait()?;
        }
        checkpoint::write_metadata(inner.storage.as_ref(), &inner.dir, &meta)?;
        marks[4] = Instant::now();
        inner.state.store(SystemState::rest(v + 1).pack(), Release);
        inner.epochs.bump();
        inner.notify_phase();
        if kind.is_snapshot() {
            bytes += snapshot_bytes;
        } else {
            bytes += l_e.saturating_sub(flushed_before.min(l_e));
        }
        let keep_snapshots: Vec<u32> = snapshot
            .as_ref()
            .map(|m| m.pieces.iter().map(|p| p.file).collect())
            .unwrap_or_default();
        driver.last_snapshot = snapshot.map(|m| (m, l_e));
        recovery::remove_old_checkpoints(
            inner.storage.as_ref(),
            &inner.dir,
            v,
            index.id,
            &keep_snapshots,
        )?;
        // Log truncation: the durable checkpoint (the only one kept) needs
        // nothing below its begin address.
        let log_bytes_freed = inner.segments.remove_below(meta.begin)?;
        inner.log.sums.compact(meta.begin)?;
        Ok(CheckpointInfo {
            version: v,
            l_s,
            l_e,
            with_index,
            kind,
            bytes,
            snapshot_bytes,
            snapshot_time,
            log_bytes_freed,
            sessions,
            phase_times: [
                marks[1] - marks[0],
                marks[2] - marks[1],
                marks[3] - marks[2],
                marks[4] - marks[3],
            ],
            index_time,
            index_over_spare,
        })
    }
}

impl<F: Functions> Store<F> {
    /// Writes the snapshot of `[flushed, l_e)` for checkpoint `v` (in
    /// WAIT_FLUSH, Appendix C) and returns its map and the file's size.
    ///
    /// Version-v records are not updated in place in WAIT_FLUSH (every
    /// session is at least in WAIT_PENDING, where a version-v record is
    /// copied, never updated), so the copied pages hold exactly version v
    /// below `l_s` and version v or v+1 in `[l_s, l_e)` (recovery drops the
    /// latter, §6.4). Below the flush point the log file already holds the
    /// pages for good (the immutable region is never written again).
    ///
    /// Incremental: the dirty bits of the range are taken first, then one
    /// epoch passes (every update that saw a bit set has finished, and
    /// every record allocated below `l_e` is written) before any page is
    /// copied; a page is copied if it was dirty, or holds `l_e` of the
    /// previous snapshot or anything above it, or the previous map lacks it.
    fn write_snapshot(
        &self,
        driver: &mut Driver,
        v: u32,
        l_e: u64,
        kind: CheckpointKind,
    ) -> Result<(SnapshotMap, u64)> {
        let inner = &*self.inner;
        let log = &inner.log;
        let page_bits = log.geometry.page_bits;
        let page_bytes = 1u64 << page_bits;
        let start = (log.flushed().min(l_e) >> page_bits) << page_bits;
        let first_page = start >> page_bits;
        let end_page = l_e.div_ceil(page_bytes);
        let dirty: Vec<bool> = (first_page..end_page).map(|p| log.take_dirty(p)).collect();
        self.epoch_barrier();
        let previous = match kind {
            CheckpointKind::IncrementalSnapshot => driver.last_snapshot.as_ref(),
            _ => None,
        };
        let piece_bytes = page_bytes.min(PIECE_BYTES_MAX);
        let mut writer = checkpoint::SnapshotWriter::create(
            inner.storage.as_ref(),
            &inner.dir,
            v,
            page_bits,
            start..l_e,
            &inner.checkpoint_buffers,
            inner.config.direct_io,
        )?;
        let mut pieces = Vec::new();
        // Back to nothing captured whatever happens below, before the state
        // machine leaves WAIT_FLUSH: the next checkpoint's version-v+1
        // records must not pass for captured ones.
        struct Reset<'a>(&'a AtomicU64);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.store(0, Release);
            }
        }
        let _reset = Reset(&inner.snapshot_captured);
        for (i, page) in (first_page..end_page).enumerate() {
            let page_start = page << page_bits;
            let reuse = previous.and_then(|(map, prev_l_e)| {
                if dirty[i] || page >= prev_l_e >> page_bits {
                    return None;
                }
                let at = map
                    .pieces
                    .binary_search_by_key(&page_start, |p| p.address)
                    .ok()?;
                let count = (page_bytes / piece_bytes) as usize;
                let found = map.pieces.get(at..at + count)?;
                (found.last()?.address + found.last()?.bytes == page_start + page_bytes)
                    .then(|| found.to_vec())
            });
            if let Some(found) = reuse {
                pieces.extend(found);
                // Unchanged since the previous snapshot, which holds it.
                inner
                    .snapshot_captured
                    .store(page_start + page_bytes, Release);
                continue;
            }
            let mut at = page_start;
            let page_end = (page_start + page_bytes).min(l_e);
            while at < page_end {
                let end = (at + piece_bytes).min(page_end);
                let epoch = &mut driver.epoch;
                let offset = writer.piece(at, end - at, |out| {
                    log.copy_for_snapshot(epoch, at, end, out)
                })?;
                pieces.push(Piece {
                    address: at,
                    bytes: end - at,
                    file: v,
                    offset,
                });
                at = end;
            }
            // Every version-v record of this page is copied: sessions (all
            // at v+1 now) may update them in place (Release: after the
            // copy's reads; the updaters load it with Acquire).
            inner
                .snapshot_captured
                .store(page_start + page_bytes, Release);
        }
        let written = writer.finish()?;
        Ok((SnapshotMap { start, pieces }, written))
    }

    /// Waits until every active session has adopted `state` (a session
    /// publishes its state at each refresh; one that never refreshes holds
    /// the checkpoint back, as it would at PREPARE).
    fn wait_sessions_at(&self, state: SystemState) -> Result<()> {
        let inner = &*self.inner;
        while !inner.sessions_reached(state) {
            if inner.log.has_failed() {
                return Err(Error::Failed("the log failed".into()));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }

    /// Returns once every thread protected now has refreshed: BumpEpoch with
    /// an action that wakes us (waiting on a condition variable).
    fn epoch_barrier(&self) {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = done.clone();
        self.inner.epochs.bump_with(move || {
            *signal.0.lock() = true;
            signal.1.notify_all();
        });
        let mut passed = done.0.lock();
        while !*passed {
            done.1.wait(&mut passed);
        }
    }
}

impl<F: Functions> Drop for Store<F> {
    fn drop(&mut self) {
        self.inner.log.shutdown();
        // One stop for each I/O thread: each takes one and ends.
        for _ in 0..self.io_threads {
            let _ = self.inner.io.send(IoMessage::Stop);
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// `Config::io_threads: 0` takes one per available core, up to this many.
pub const IO_THREADS_AUTO_MAX: usize = 8;

/// The I/O threads for `requested` (0: automatic).
fn io_threads(requested: usize) -> usize {
    if requested != 0 {
        return requested;
    }
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(IO_THREADS_AUTO_MAX)
}

/// The first address of a fresh log.
pub(crate) const FRESH_TAIL: u64 = FIRST_ADDRESS;
