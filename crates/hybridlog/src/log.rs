//! The HybridLog (FASTER §5; cpr-sigmod19 §5.1): a 48-bit logical address
//! space whose tail lives in a circular buffer of in-memory page frames and
//! whose body lives in one file on disk (file offset = logical address).
//!
//! ```text
//!  begin        safe_head  head      safe_ro  read_only          tail
//!    |  on disk    |   immutable, in memory  | fuzzy |  mutable   |
//! ```
//!
//! Invariants:
//! * `begin ≤ safe_head ≤ head ≤ flushed ≤ safe_read_only ≤ read_only ≤ tail`
//!   (head is only moved up to what is durable on disk, `flushed`).
//! * `head` and `read_only` move first; their *safe* twins follow in an epoch
//!   action (`bump_with`), once every thread has refreshed and so has seen
//!   the new value (cpr-sigmod19 §3, §5.1). A thread that read the old head
//!   and is still protected may still read the page: frames are recycled only
//!   for pages below `safe_head`.
//! * Records below `safe_read_only` are never written again in memory, so
//!   the flush thread may copy them to disk while others work; a record
//!   is written completely by its allocator before the allocator refreshes.
//! * Page `p` lives in frame `p mod frames`; a page is opened (its frame
//!   zeroed, the tail moved onto it) only once the frame's previous page is
//!   below `safe_head`. Exactly one thread opens each page (`opened` CAS).
//! * Records never straddle pages; the zero-filled rest of a page reads as
//!   "no more records here".

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock, Weak};

use crossbeam_utils::CachePadded;
use epochdb_epoch::EpochManager;
use epochdb_memory::{HugePages, Region};
use epochdb_storage::{DirectBuffer, StorageFile, DIRECT_ALIGN};
use parking_lot::{Condvar, Mutex};

use crate::address::{FIRST_ADDRESS, FRAMES_MIN, PAGE_BITS_MAX, PAGE_BITS_MIN};
use crate::error::Error;
use crate::record::RECORD_HEADER_BYTES;
use crate::sums::{piece_spans, Piece, Sums};

/// The most one direct flush write carries. Measured on this machine's
/// disk (BENCHMARKS.md, "Checkpoint writes without a copy"): 2–8 MiB
/// writes flushed fastest, 16 and 32 MiB ones 10–40% slower.
const FLUSH_RUN_BYTES: u64 = 4 << 20;

/// A flush at least this long computes its checksums on a thread of its
/// own, beside the writes (`Log::write_and_sum`).
const SUM_ASIDE_BYTES: u64 = 1 << 20;
/// Direct flush writes in flight at once (threads, each writing one run):
/// two wrote about 10% faster than one, four no faster than two.
const FLUSH_WRITERS: usize = 2;
/// How far past a new record [`Log::allocate`] warms the tail's page for
/// writing: a few records ahead (8 of FASTER's 32-byte ones), so the line
/// arrives before the record that needs it is written.
const TAIL_PREFETCH_BYTES: u64 = 256;

/// Geometry of the in-memory part of the log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    /// log2 of the page size in bytes.
    pub(crate) page_bits: u32,
    /// In-memory page frames (the memory budget in pages).
    pub(crate) frames: usize,
    /// Pages kept mutable behind the tail page (the read-only lag).
    pub(crate) mutable_pages: u64,
    /// Whether the frames ask for transparent huge pages
    /// (`Config::huge_pages`; on unless set otherwise).
    pub(crate) huge_pages: bool,
    /// Whether a background thread faults the frames in after the log
    /// opens (`Config::prefault_frames`; on unless set otherwise).
    pub(crate) prefault: bool,
}

impl Geometry {
    /// The geometry for a memory budget: as many frames as fit (at least
    /// [`FRAMES_MIN`]), `mutable_fraction` of them mutable, leaving at least
    /// two immutable frames so flushing and eviction keep up.
    pub(crate) fn new(page_bits: u32, memory_bytes: u64, mutable_fraction: f64) -> Self {
        assert!(
            (PAGE_BITS_MIN..=PAGE_BITS_MAX).contains(&page_bits),
            "page_bits out of range"
        );
        let frames = ((memory_bytes >> page_bits) as usize).max(FRAMES_MIN);
        let mutable = ((frames as f64 * mutable_fraction) as u64).clamp(1, frames as u64 - 3);
        Geometry {
            page_bits,
            frames,
            mutable_pages: mutable,
            huge_pages: true,
            prefault: true,
        }
    }

    pub(crate) fn page_bytes(&self) -> u64 {
        1 << self.page_bits
    }

    /// The frame that holds page `page`: `page mod frames`, by a mask when
    /// the frame count is a power of two (the usual budgets; FASTER
    /// requires one). Every read and update finds its record's frame here,
    /// and a copy-on-update twice, so the 64-bit division is worth
    /// avoiding (issue 7's instruction count against FASTER's).
    #[inline]
    pub(crate) fn frame_of_page(&self, page: u64) -> usize {
        let frames = self.frames as u64;
        if frames.is_power_of_two() {
            (page & (frames - 1)) as usize
        } else {
            (page % frames) as usize
        }
    }
}

/// The page size to ask for: huge pages if `huge`, else 4 KiB ones
/// (`Config::huge_pages`; `Off`, not the system default, so that the two
/// settings measure what they say).
pub(crate) fn page_size(huge: bool) -> HugePages {
    if huge {
        HugePages::On
    } else {
        HugePages::Off
    }
}

/// Bytes of frames one step of [`prefault_frames`] faults in.
const PREFAULT_CHUNK_BYTES: u64 = 32 << 20;

/// Faults the log's frames in on a thread of its own, the frames after the
/// tail's page first (the order the tail will open them), a chunk at a
/// time, stopping early if the log is dropped (`Config::prefault_frames`).
/// The frames are mapped lazily so that opening a store with a large
/// budget is quick; left that way, the first lap of the tail around the
/// frames pays a page fault (and the kernel's zeroing) on every page a
/// session opens: 1 M-key fold-over checkpoint runs were slowest in their
/// first seconds (BENCHMARKS.md, session 60). Populating changes no byte, so it may
/// run beside the sessions. Best effort: where the kernel cannot populate
/// (before Linux 5.14), or the thread cannot start, pages fault in on
/// first touch as before.
fn prefault_frames(log: Weak<Log>, geometry: Geometry, tail_page: u64) {
    let spawned = std::thread::Builder::new()
        .name("hybridlog-prefault".into())
        .spawn(move || {
            let page_words = (geometry.page_bytes() / 8) as usize;
            let chunk = ((PREFAULT_CHUNK_BYTES >> geometry.page_bits) as usize).max(1);
            let start = geometry.frame_of_page(tail_page + 1);
            // Frames `start..frames`, then `0..start`, a chunk at a time.
            for (from, to) in [(start, geometry.frames), (0, start)] {
                for at in (from..to).step_by(chunk) {
                    let frames = chunk.min(to - at);
                    // Holding the log keeps the mapping alive for the call.
                    let Some(log) = log.upgrade() else { return };
                    if !log.frames.populate(at * page_words, frames * page_words) {
                        return;
                    }
                }
            }
        });
    // Without the thread the frames fault in on first touch, as before.
    drop(spawned);
}

/// Frame `i` of `frames`, frames of `page_words` words each.
fn frame_of(frames: &[AtomicU64], page_words: usize, i: usize) -> &[AtomicU64] {
    &frames[i * page_words..(i + 1) * page_words]
}

/// The log's addresses, its frames, its file and the flush thread's mailbox.
pub(crate) struct Log {
    me: Weak<Log>,
    pub(crate) geometry: Geometry,
    epochs: EpochManager,
    /// Every frame, one after another in one mapping (`epochdb_memory`; one
    /// per frame would exceed the kernel's map count with small pages), on
    /// transparent huge pages unless `Config::huge_pages` is off, so that
    /// filling a frame faults it in 2 MiB at a time. See [`Log::frame`].
    frames: Region<AtomicU64>,
    /// `page << 32 | offset`; the offset may run past the page end while the
    /// next page is being opened.
    tail: CachePadded<AtomicU64>,
    /// The last page opened (its frame zeroed and the tail moved onto it).
    opened: AtomicU64,
    pub(crate) begin: AtomicU64,
    head: CachePadded<AtomicU64>,
    safe_head: CachePadded<AtomicU64>,
    read_only: CachePadded<AtomicU64>,
    safe_read_only: CachePadded<AtomicU64>,
    /// Everything below is on disk and synced.
    flushed: CachePadded<AtomicU64>,
    pub(crate) file: Arc<dyn StorageFile>,
    /// The checksums of what is flushed (`sums.rs`).
    pub(crate) sums: Arc<Sums>,
    flush_lock: Mutex<FlushState>,
    flush_cv: Condvar,
    /// Set by the first failed write or sync: nothing is durable any more.
    failed: AtomicBool,
    /// Called once the log has failed, to wake waiters outside the log (the
    /// checkpoint driver waiting for a phase that may now never come).
    on_failure: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Flush with [`StorageFile::write_direct_at`] (see `Config::direct_io`).
    direct: bool,
    /// Per frame: a record on its page was updated in place since the last
    /// snapshot checkpoint took the bit (incremental snapshots).
    dirty: Box<[AtomicBool]>,
}

#[derive(Debug, Default)]
struct FlushState {
    shutdown: bool,
    error: Option<String>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("tail", &self.tail_address())
            .field("read_only", &self.read_only())
            .field("head", &self.head())
            .field("flushed", &self.flushed())
            .finish_non_exhaustive()
    }
}

fn pack(page: u64, offset: u64) -> u64 {
    (page << 32) | offset
}

impl Log {
    /// The in-memory frame `i`.
    #[inline]
    fn frame(&self, i: usize) -> &[AtomicU64] {
        frame_of(&self.frames, (self.geometry.page_bytes() / 8) as usize, i)
    }

    /// A log in `file`, its checksums recorded in `sums`, whose tail is at
    /// `tail` (a fresh log: [`FIRST_ADDRESS`]); every address below it is on
    /// disk. `last_page` holds the bytes of the tail's
    /// page below the tail (recovery), loaded into its frame.
    pub(crate) fn new(
        geometry: Geometry,
        epochs: EpochManager,
        (file, sums): (Arc<dyn StorageFile>, Arc<Sums>),
        tail: u64,
        last_page: &[u8],
        begin: u64,
        direct: bool,
    ) -> Arc<Log> {
        let page_words = (geometry.page_bytes() / 8) as usize;
        let frames =
            Region::zeroed_lazily(page_words * geometry.frames, page_size(geometry.huge_pages));
        let page = tail >> geometry.page_bits;
        let offset = tail & (geometry.page_bytes() - 1);
        let page_start = page << geometry.page_bits;
        assert!(last_page.len() as u64 <= offset);
        let frame = frame_of(&frames, page_words, geometry.frame_of_page(page));
        for (word, bytes) in frame.iter().zip(last_page.chunks(8)) {
            let mut buf = [0u8; 8];
            buf[..bytes.len()].copy_from_slice(bytes);
            word.store(u64::from_le_bytes(buf), Relaxed);
        }
        let head = if tail == FIRST_ADDRESS {
            FIRST_ADDRESS
        } else {
            page_start.max(FIRST_ADDRESS)
        };
        let log = Arc::new_cyclic(|me| Log {
            me: me.clone(),
            geometry,
            epochs,
            frames,
            tail: CachePadded::new(AtomicU64::new(pack(page, offset))),
            opened: AtomicU64::new(page),
            begin: AtomicU64::new(begin.max(FIRST_ADDRESS)),
            head: CachePadded::new(AtomicU64::new(head)),
            safe_head: CachePadded::new(AtomicU64::new(head)),
            read_only: CachePadded::new(AtomicU64::new(tail)),
            safe_read_only: CachePadded::new(AtomicU64::new(tail)),
            flushed: CachePadded::new(AtomicU64::new(tail)),
            file,
            sums,
            flush_lock: Mutex::new(FlushState::default()),
            flush_cv: Condvar::new(),
            failed: AtomicBool::new(false),
            on_failure: OnceLock::new(),
            direct,
            dirty: (0..geometry.frames)
                .map(|_| AtomicBool::new(false))
                .collect(),
        });
        if geometry.prefault && !cfg!(miri) {
            prefault_frames(Arc::downgrade(&log), geometry, page);
        }
        log
    }

    /// The next address to be allocated.
    pub(crate) fn tail_address(&self) -> u64 {
        let word = self.tail.load(Acquire);
        let page = word >> 32;
        let offset = (word & 0xffff_ffff).min(self.geometry.page_bytes());
        (page << self.geometry.page_bits) + offset
    }

    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head.load(Acquire)
    }

    pub(crate) fn safe_head(&self) -> u64 {
        self.safe_head.load(Acquire)
    }

    #[inline]
    pub(crate) fn read_only(&self) -> u64 {
        self.read_only.load(Acquire)
    }

    #[inline]
    pub(crate) fn safe_read_only(&self) -> u64 {
        self.safe_read_only.load(Acquire)
    }

    pub(crate) fn flushed(&self) -> u64 {
        self.flushed.load(Acquire)
    }

    /// Whether a write or sync of the log failed (fail-stop).
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Acquire)
    }

    /// `count` words from `address`, on one page.
    #[inline]
    pub(crate) fn words(&self, address: u64, count: usize) -> &[AtomicU64] {
        let page = address >> self.geometry.page_bits;
        let frame = self.frame(self.geometry.frame_of_page(page));
        let start = ((address & (self.geometry.page_bytes() - 1)) >> 3) as usize;
        &frame[start..start + count]
    }

    /// The words of `address`'s page from `address` to the page end, which
    /// must be in memory: one frame lookup (a division by the frame count)
    /// for a whole record, which never straddles pages.
    #[inline]
    pub(crate) fn record(&self, address: u64) -> &[AtomicU64] {
        self.record_in(self.frame_of(address), address)
    }

    /// The frame that holds `address`'s page (in memory or not).
    #[inline]
    pub(crate) fn frame_of(&self, address: u64) -> usize {
        self.geometry
            .frame_of_page(address >> self.geometry.page_bits)
    }

    /// [`Log::record`] for a caller that already has the frame
    /// ([`Log::frame_of`]), so that it can also mark the frame dirty
    /// ([`Log::mark_frame_dirty`]) without a second division.
    #[inline]
    pub(crate) fn record_in(&self, frame: usize, address: u64) -> &[AtomicU64] {
        debug_assert_eq!(frame, self.frame_of(address));
        &self.frame(frame)[((address & (self.geometry.page_bytes() - 1)) >> 3) as usize..]
    }

    /// Notes that a record at `address` (in memory) was updated in place,
    /// after the update's stores. A load before the store keeps the common
    /// case (already marked) free of writes to a shared line; the snapshot
    /// that takes the bit waits one epoch before copying, so an update that
    /// saw the bit set has finished by then (see `Store`'s snapshot).
    #[inline]
    pub(crate) fn mark_dirty(&self, address: u64) {
        self.mark_frame_dirty(self.frame_of(address));
    }

    /// [`Log::mark_dirty`] by frame ([`Log::frame_of`]).
    #[inline]
    pub(crate) fn mark_frame_dirty(&self, frame: usize) {
        let bit = &self.dirty[frame];
        if !bit.load(Relaxed) {
            bit.store(true, SeqCst);
        }
    }

    /// Takes (clears and returns) the dirty bit of `page`'s frame.
    pub(crate) fn take_dirty(&self, page: u64) -> bool {
        self.dirty[self.geometry.frame_of_page(page)].swap(false, SeqCst)
    }

    /// Appends the log's bytes `[start, end)` (on one page) to `out` for a
    /// snapshot: from the page's frame while `epoch` protects it (so the
    /// frame cannot be reused under us), or from the log file if head has
    /// already passed the page (then the page is flushed and synced).
    pub(crate) fn copy_for_snapshot(
        &self,
        epoch: &mut epochdb_epoch::EpochHandle,
        start: u64,
        end: u64,
        out: &mut epochdb_storage::DirectVec,
    ) -> Result<(), Error> {
        debug_assert_eq!(
            start >> self.geometry.page_bits,
            (end - 1) >> self.geometry.page_bits
        );
        let at = out.len();
        epoch.protect();
        if start.max(FIRST_ADDRESS) >= self.head() {
            debug_assert!((end - start).is_multiple_of(8));
            let words = self.words(start, ((end - start) / 8) as usize);
            out.extend_with((end - start) as usize, |bytes| {
                for (to, word) in bytes.chunks_exact_mut(8).zip(words) {
                    to.copy_from_slice(&word.load(Acquire).to_le_bytes());
                }
            });
            epoch.unprotect();
            return Ok(());
        }
        epoch.unprotect();
        out.resize(at + (end - start) as usize, 0);
        let n = self.file.read_at(start, &mut out[at..])?;
        if n < out.len() - at {
            return Err(Error::Corrupted {
                file: self.file.path().to_path_buf(),
                offset: start + n as u64,
                reason: "the log file ends below head".into(),
            });
        }
        Ok(())
    }

    /// Largest record the log takes.
    #[inline]
    pub(crate) fn record_bytes_max(&self) -> usize {
        crate::address::record_bytes_max(self.geometry.page_bits)
    }

    /// Reserves `bytes` (a multiple of 8, ≤ [`Log::record_bytes_max`]) at the
    /// tail by fetch-add (FASTER's `Allocate`). `None` when the next page
    /// cannot be opened yet (its frame is not yet evicted): the caller
    /// refreshes its epoch, which lets head and flushing move, and retries.
    pub(crate) fn allocate(&self, bytes: usize) -> Option<u64> {
        debug_assert!(bytes.is_multiple_of(8) && bytes >= RECORD_HEADER_BYTES);
        debug_assert!(bytes <= self.record_bytes_max());
        let page_bytes = self.geometry.page_bytes();
        // While the next page is being opened, do not push the offset
        // further (it has 32 bits).
        let now = self.tail.load(Acquire);
        if now & 0xffff_ffff > page_bytes {
            self.open_page((now >> 32) + 1);
            return None;
        }
        let old = self.tail.fetch_add(bytes as u64, AcqRel);
        let page = old >> 32;
        let offset = old & 0xffff_ffff;
        if offset + bytes as u64 <= page_bytes {
            self.prefetch_ahead_of(page, offset);
            return Some((page << self.geometry.page_bits) + offset);
        }
        // The page is full. Its unused rest stays zero: "no more records".
        self.open_page(page + 1);
        None
    }

    /// Asks for the line [`TAIL_PREFETCH_BYTES`] past `offset` of `page`
    /// (the tail's page) in a writable state, so that the record allocated
    /// there a few appends from now is written into a line already in
    /// cache. Without it the line's read-for-ownership miss held up the
    /// index CAS that publishes each appended record (a locked instruction
    /// waits for earlier stores to drain): perf put 14–20% of `upsert`'s
    /// samples on that CAS in a copy-heavy run, about 2% with the prefetch.
    #[inline]
    fn prefetch_ahead_of(&self, page: u64, offset: u64) {
        let ahead = offset + TAIL_PREFETCH_BYTES;
        if ahead < self.geometry.page_bytes() {
            let frame = self.frame(self.geometry.frame_of_page(page));
            epochdb_memory::prefetch_lines_for_write(
                frame.as_ptr().wrapping_add((ahead >> 3) as usize),
                1,
            );
        }
    }

    /// Opens `page` if its frame is free and no one else has: zeroes the
    /// frame, moves the tail onto it, and moves read-only and head along.
    fn open_page(&self, page: u64) {
        let frames = self.geometry.frames as u64;
        let safe_head_page = self.safe_head() >> self.geometry.page_bits;
        if page >= safe_head_page + frames {
            // Not evicted yet: ask for head to move (it may be waiting on
            // the flush) and let the caller refresh.
            self.shift_head_to_lag();
            return;
        }
        if self
            .opened
            .compare_exchange(page - 1, page, AcqRel, Relaxed)
            .is_err()
        {
            return;
        }
        for word in self.frame(self.geometry.frame_of_page(page)).iter() {
            word.store(0, Relaxed);
        }
        // Release: the zeroed frame happens-before any allocation on it.
        self.tail.store(pack(page, 0), Release);
        let mutable = self.geometry.mutable_pages;
        if page > mutable {
            self.shift_read_only((page - mutable) << self.geometry.page_bits);
        }
        self.shift_head_to_lag();
    }

    /// Moves read-only up to `address`; `safe_read_only` follows once every
    /// thread has seen it, and then the flush thread writes the pages.
    pub(crate) fn shift_read_only(&self, address: u64) {
        if self.read_only.fetch_max(address, AcqRel) >= address {
            return;
        }
        let me = self.me.clone();
        self.epochs.bump_with(move || {
            if let Some(log) = me.upgrade() {
                log.safe_read_only.fetch_max(address, AcqRel);
                let _guard = log.flush_lock.lock();
                log.flush_cv.notify_all();
            }
        });
    }

    /// Moves head toward keeping one free frame ahead of the tail page,
    /// never above what is flushed.
    fn shift_head_to_lag(&self) {
        let page_bits = self.geometry.page_bits;
        let tail_page = self.tail.load(Acquire) >> 32;
        let frames = self.geometry.frames as u64;
        let want = (tail_page + 2).saturating_sub(frames) << page_bits;
        let durable = (self.flushed() >> page_bits) << page_bits;
        let target = want.min(durable);
        if target <= self.head() {
            return;
        }
        if self.head.fetch_max(target, AcqRel) >= target {
            return;
        }
        let me = self.me.clone();
        self.epochs.bump_with(move || {
            if let Some(log) = me.upgrade() {
                // Frames below `target` may now be reused: no protected
                // thread can still hold an address below it from before.
                log.safe_head.fetch_max(target, AcqRel);
            }
        });
    }

    /// The flush thread's loop: writes `[flushed, safe_read_only)` to the
    /// file, syncs, and publishes the new `flushed`. A failed write or sync
    /// is fatal (fail-stop): `failed` is set and the thread ends.
    pub(crate) fn flush_loop(&self) {
        loop {
            let (from, to) = {
                let mut state = self.flush_lock.lock();
                loop {
                    if state.shutdown || state.error.is_some() {
                        return;
                    }
                    let to = self.safe_read_only();
                    let from = self.flushed();
                    if to > from {
                        break (from, to);
                    }
                    self.flush_cv.wait(&mut state);
                }
            };
            // The checksums are computed while the range is written (the
            // writes mostly wait for the device), and recorded only once it
            // is synced: a checksum on disk always describes synced bytes.
            let (written, pieces) = self.write_and_sum(from, to);
            if let Err(e) = written.and_then(|()| self.file.sync()) {
                self.fail(e.to_string());
                return;
            }
            if let Err(e) = self.sums.record(&pieces) {
                self.fail(e.to_string());
                return;
            }
            self.flushed.store(to, Release);
            {
                let _guard = self.flush_lock.lock();
                self.flush_cv.notify_all();
            }
            self.shift_head_to_lag();
        }
    }

    /// Writes `[from, to)` and computes its checksums, on a thread of
    /// their own when the range is large.
    fn write_and_sum(
        &self,
        from: u64,
        to: u64,
    ) -> (Result<(), epochdb_storage::StorageError>, Vec<Piece>) {
        if to - from < SUM_ASIDE_BYTES {
            return (self.write_range(from, to), self.pieces(from, to));
        }
        std::thread::scope(|scope| {
            let summer = std::thread::Builder::new()
                .name("hybridlog-flush-sums".into())
                .spawn_scoped(scope, || self.pieces(from, to));
            let written = self.write_range(from, to);
            let pieces = match summer {
                Ok(summer) => summer.join().expect("the checksum thread panicked"),
                // No thread to be had: this one computes them.
                Err(_) => self.pieces(from, to),
            };
            (written, pieces)
        })
    }

    /// The checksums of `[from, to)` as it is in the frames, a piece per
    /// block (`sums::SUM_BLOCK_BYTES`). The range lies below
    /// `safe_read_only`: nothing stores to it.
    fn pieces(&self, from: u64, to: u64) -> Vec<Piece> {
        let mut bytes = [0u8; crate::sums::SUM_BLOCK_BYTES as usize];
        piece_spans(from, to)
            .map(|(start, end)| {
                let mut crc = 0;
                let mut at = start;
                while at < end {
                    let n = ((end - at) as usize).min(bytes.len());
                    let words = self.words(at, n / 8);
                    for (out, word) in bytes.chunks_exact_mut(8).zip(words) {
                        out.copy_from_slice(&word.load(Relaxed).to_le_bytes());
                    }
                    crc = crc32c::crc32c_append(crc, &bytes[..n]);
                    at += n as u64;
                }
                Piece {
                    from: start,
                    to: end,
                    crc,
                }
            })
            .collect()
    }

    /// Writes `[from, to)` to the file, a page at a time. Direct: each
    /// write is widened to whole [`DIRECT_ALIGN`] blocks. The bytes below
    /// `from` in its block are already on disk and immutable, so they are
    /// written again unchanged; those above `to` in its block (mutable
    /// records, or the zeros past the tail) are written too, but nothing
    /// reads a log address at or above what is flushed, recovery stops at a
    /// checkpoint's `l_e` (≤ flushed), and the next flush rewrites them.
    /// Head stays at or below the page holding `flushed`, so the widened
    /// range is in memory.
    fn write_range(&self, from: u64, to: u64) -> Result<(), epochdb_storage::StorageError> {
        if self.direct && cfg!(target_endian = "little") {
            return self.write_range_from_frames(from, to);
        }
        let page_bits = self.geometry.page_bits;
        let align = if self.direct { DIRECT_ALIGN as u64 } else { 8 };
        let mut buf = DirectBuffer::zeroed(self.geometry.page_bytes() as usize);
        let mut start = from / align * align;
        while start < to {
            let page_end = ((start >> page_bits) + 1) << page_bits;
            let end = page_end.min(to.next_multiple_of(align));
            let out = &mut buf.as_mut_slice()[..(end - start) as usize];
            let words = self.words(start, out.len() / 8);
            for (bytes, word) in out.chunks_exact_mut(8).zip(words) {
                bytes.copy_from_slice(&word.load(Relaxed).to_le_bytes());
            }
            if self.direct {
                self.file.write_direct_at(start, out)?;
            } else {
                self.file.write_at(start, out)?;
            }
            start = end;
        }
        Ok(())
    }

    /// [`Log::write_range`] for direct writes, with no copy: the whole
    /// [`DIRECT_ALIGN`] blocks below `to` go to the file straight from the
    /// frames ([`StorageFile::write_words_direct_at`]), in runs as long as
    /// the frames are contiguous in memory (up to [`FLUSH_RUN_BYTES`]), as
    /// FASTER writes its circular buffer's pages. They lie below
    /// `safe_read_only`, so nothing stores to them meanwhile. The block
    /// holding `to` is copied word by word first, because its bytes at and
    /// above `to` may be records being written. Frames hold the words in
    /// memory order, so the file gets the same bytes as the copying path on
    /// a little-endian machine (the only one that takes this path).
    fn write_range_from_frames(
        &self,
        from: u64,
        to: u64,
    ) -> Result<(), epochdb_storage::StorageError> {
        let align = DIRECT_ALIGN as u64;
        let page_bits = self.geometry.page_bits;
        let frames = self.geometry.frames as u64;
        let whole_end = to / align * align;
        let mut runs = Vec::new();
        let mut start = from / align * align;
        while start < whole_end {
            // Page p lives in frame p mod frames: the frames are contiguous
            // up to the last one.
            let page = start >> page_bits;
            let contiguous_end = (page + frames - page % frames) << page_bits;
            let end = whole_end.min(contiguous_end).min(start + FLUSH_RUN_BYTES);
            runs.push((start, end));
            start = end;
        }
        // Runs are written by up to FLUSH_WRITERS threads at once: this
        // one and helpers, each taking the next run.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let write_runs = || -> Result<(), epochdb_storage::StorageError> {
            while let Some(&(start, end)) = runs.get(next.fetch_add(1, Relaxed)) {
                let words = self.contiguous_words(start, ((end - start) / 8) as usize);
                self.file.write_words_direct_at(start, words)?;
            }
            Ok(())
        };
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..FLUSH_WRITERS.min(runs.len()))
                .filter_map(|_| {
                    // Without a helper (no thread to be had) this thread
                    // writes every run itself.
                    std::thread::Builder::new()
                        .name("hybridlog-flush-helper".into())
                        .spawn_scoped(scope, write_runs)
                        .ok()
                })
                .collect();
            let mut result = write_runs();
            for helper in helpers {
                let helped = helper.join().expect("a flush writer panicked");
                result = result.and(helped);
            }
            result
        })?;
        if whole_end < to {
            let mut block = DirectBuffer::zeroed(DIRECT_ALIGN);
            let words = self.words(whole_end, DIRECT_ALIGN / 8);
            for (bytes, word) in block.as_mut_slice().chunks_exact_mut(8).zip(words) {
                bytes.copy_from_slice(&word.load(Relaxed).to_le_bytes());
            }
            self.file.write_direct_at(whole_end, block.as_slice())?;
        }
        Ok(())
    }

    /// `count` words from `address` on, which may span pages as long as
    /// their frames are consecutive (no wrap past the last frame).
    fn contiguous_words(&self, address: u64, count: usize) -> &[AtomicU64] {
        let page_words = (self.geometry.page_bytes() / 8) as usize;
        let frame = self.frame_of(address);
        let start =
            frame * page_words + ((address & (self.geometry.page_bytes() - 1)) >> 3) as usize;
        &self.frames[start..start + count]
    }

    /// Blocks until everything below `address` is on disk and synced
    /// (or the flush failed). Waits on the flush thread's condition
    /// variable: no polling.
    pub(crate) fn wait_flushed(&self, address: u64) -> Result<(), Error> {
        let mut state = self.flush_lock.lock();
        loop {
            if let Some(e) = &state.error {
                return Err(Error::Failed(e.clone()));
            }
            if self.flushed() >= address {
                return Ok(());
            }
            if state.shutdown {
                return Err(Error::Failed("store shut down".into()));
            }
            self.flush_cv.wait(&mut state);
        }
    }

    /// Marks the log failed (fail-stop) and wakes every waiter, its own and
    /// the one registered with [`Log::on_failure`]. The first reason is kept.
    pub(crate) fn fail(&self, reason: String) {
        self.failed.store(true, SeqCst);
        {
            let mut state = self.flush_lock.lock();
            state.error.get_or_insert(reason);
            self.flush_cv.notify_all();
        }
        if let Some(wake) = self.on_failure.get() {
            wake();
        }
    }

    /// Registers what [`Log::fail`] calls after marking the log failed (once;
    /// a second registration is ignored). A failure before registration is
    /// seen by `has_failed`.
    pub(crate) fn on_failure(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_failure.set(wake);
    }

    /// Stops the flush thread.
    pub(crate) fn shutdown(&self) {
        let mut state = self.flush_lock.lock();
        state.shutdown = true;
        self.flush_cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_maps_to_its_frame_with_or_without_a_power_of_two() {
        for memory_frames in [4u64, 5, 8, 12, 64, 100] {
            let geometry = Geometry::new(12, memory_frames << 12, 0.5);
            let frames = geometry.frames as u64;
            for page in (0..3 * frames).chain([u32::MAX as u64, (1 << 36) - 1]) {
                assert_eq!(
                    geometry.frame_of_page(page),
                    (page % frames) as usize,
                    "page {page} with {frames} frames"
                );
            }
        }
    }
}
