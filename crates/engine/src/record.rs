//! Records: a TID word and a value, laid out as Silo lays them out — the
//! value inline, right after the word, overwritten in place under the
//! record's lock when the new value fits.
//!
//! ```text
//! +-----------+-----------------+-----------------------------------------+
//! | word: u64 | value: *Block   | inline Block: capacity, len, data words |
//! +-----------+-----------------+-----------------------------------------+
//! ```
//!
//! `value` points at the inline block until a value outgrows it; then a
//! larger block is allocated on the heap, and the replaced heap block (never
//! the inline one) is retired through the epoch framework. Readers copy the
//! value out like a seqlock (word, bytes, word again) into the
//! transaction's arena. The bytes are atomic words, so a racing overwrite
//! is a stale read that validation rejects, never undefined behaviour.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use epochdb_epoch::EpochHandle;

use crate::arena::{Arena, Bytes};
use crate::tid::{Tid, ABSENT_BIT, LATEST_BIT, LOCK_BIT, UNLINKED_BIT};

const WORD: usize = 8;

/// Cache lines [`Record::prefetch`] asks for: 256 bytes, enough for the
/// rows TPC-C reads most (an item, and a stock's front).
const PREFETCH_LINES: usize = 4;

/// A value buffer: `len` bytes in `capacity / 8` atomic words that follow.
#[repr(C)]
pub(crate) struct ValueBlock {
    capacity: u32,
    len: AtomicU32,
}

const BLOCK_HEADER: usize = std::mem::size_of::<ValueBlock>();

fn round_up(len: usize) -> usize {
    len.div_ceil(WORD) * WORD
}

fn capacity_for(len: usize) -> u32 {
    u32::try_from(round_up(len)).expect("value larger than 4 GiB")
}

impl ValueBlock {
    /// The data words.
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        let count = self.capacity as usize / WORD;
        // SAFETY: every block is allocated with `capacity` bytes of
        // 8-aligned, initialised words right after its header.
        unsafe {
            let data = (self as *const Self).cast::<u8>().add(BLOCK_HEADER);
            std::slice::from_raw_parts(data.cast::<AtomicU64>(), count)
        }
    }

    /// Initialises a block header at `at` and zeroes its words.
    ///
    /// # Safety
    /// `at` must point to `BLOCK_HEADER + capacity` writable bytes, 8-aligned.
    unsafe fn init(at: *mut ValueBlock, capacity: u32) {
        // SAFETY: forwarded from the caller.
        unsafe {
            at.write(ValueBlock {
                capacity,
                len: AtomicU32::new(0),
            });
            ptr::write_bytes(at.cast::<u8>().add(BLOCK_HEADER), 0, capacity as usize);
        }
    }

    /// Writes `bytes` (which must fit) and sets the length. Caller holds
    /// the record's lock.
    #[inline]
    fn store(&self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= self.capacity as usize);
        let words = self.words();
        let mut chunks = bytes.chunks_exact(WORD);
        for (word, chunk) in words.iter().zip(&mut chunks) {
            let value = u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
            word.store(value, Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; WORD];
            last[..rest.len()].copy_from_slice(rest);
            words[bytes.len() / WORD].store(u64::from_ne_bytes(last), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u32, Ordering::Relaxed);
    }

    /// Copies the value's first `max` bytes (all of it if shorter) into
    /// `arena` (possibly torn: the caller validates).
    #[inline]
    fn load_into(&self, arena: &mut Arena, max: usize) -> Bytes {
        let len = (self.len.load(Ordering::Relaxed) as usize)
            .min(self.capacity as usize)
            .min(max);
        let out = arena.reserve(len);
        let words = self.words();
        let full = len / WORD;
        for (i, word) in words[..full].iter().enumerate() {
            let bytes = word.load(Ordering::Relaxed).to_ne_bytes();
            // SAFETY: `out` has room for `len` bytes; `8 * i + 8 <= len`.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_ptr().add(i * WORD), WORD) };
        }
        let rest = len - full * WORD;
        if rest > 0 {
            let bytes = words[full].load(Ordering::Relaxed).to_ne_bytes();
            // SAFETY: the last `rest` bytes of `out`.
            unsafe {
                ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_ptr().add(full * WORD), rest)
            };
        }
        Arena::span(out, len)
    }
}

fn heap_block_layout(capacity: u32) -> Layout {
    Layout::from_size_align(BLOCK_HEADER + capacity as usize, WORD).expect("value block layout")
}

/// A heap block holding `bytes`.
fn new_heap_block(bytes: &[u8]) -> NonNull<ValueBlock> {
    let capacity = capacity_for(bytes.len());
    let layout = heap_block_layout(capacity);
    // SAFETY: non-zero size (header included).
    let raw = unsafe { alloc(layout) }.cast::<ValueBlock>();
    let Some(block) = NonNull::new(raw) else {
        handle_alloc_error(layout)
    };
    // SAFETY: fresh allocation of the right size and alignment.
    unsafe { ValueBlock::init(block.as_ptr(), capacity) };
    // SAFETY: just initialised, not shared yet.
    unsafe { block.as_ref() }.store(bytes);
    block
}

/// Frees a heap value block (type-erased, for the epoch framework).
///
/// # Safety
/// `block` must come from [`new_heap_block`], be unreachable, freed once.
unsafe fn free_heap_block(block: *mut ()) {
    let block = block.cast::<ValueBlock>();
    // SAFETY: per the contract; the layout is recomputed from the header.
    unsafe { dealloc(block.cast(), heap_block_layout((*block).capacity)) };
}

/// One key's record. Lives in exactly one table's index until unlinked;
/// freed through the epoch framework after that.
#[repr(C)]
pub(crate) struct Record {
    word: AtomicU64,
    value: AtomicPtr<ValueBlock>,
}

const RECORD_HEADER: usize = std::mem::size_of::<Record>();

fn record_layout(capacity: u32) -> Layout {
    Layout::from_size_align(RECORD_HEADER + BLOCK_HEADER + capacity as usize, WORD)
        .expect("record layout")
}

/// Spins `iteration` times politely, yielding the CPU now and then so an
/// oversubscribed lock holder can run.
#[inline]
pub(crate) fn backoff(iteration: u32) {
    if iteration % 64 == 63 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// What a reader saw of a record: its word and, if present, its value
/// copied into the reader's arena.
pub(crate) struct Snapshot {
    pub(crate) word: u64,
    pub(crate) value: Option<Bytes>,
}

impl Snapshot {
    #[inline]
    pub(crate) fn is_unlinked(&self) -> bool {
        self.word & UNLINKED_BIT != 0
    }
}

impl Record {
    #[inline]
    fn inline_block(&self) -> *mut ValueBlock {
        (self as *const Self)
            .cast::<u8>()
            .wrapping_add(RECORD_HEADER)
            .cast::<ValueBlock>()
            .cast_mut()
    }

    #[inline]
    fn block(&self) -> &ValueBlock {
        // SAFETY: `value` always points to a live block: the inline one,
        // or a heap block retired (not freed) while readers may hold it.
        unsafe { &*self.value.load(Ordering::Acquire) }
    }

    /// Asks the CPU to start loading the record's first
    /// [`PREFETCH_LINES`] cache lines: the word, the value pointer and the
    /// front of an inline value.
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        epochdb_memory::prefetch_lines(self, PREFETCH_LINES);
    }

    /// The current word, without waiting for a lock.
    #[inline]
    pub(crate) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// The word once no committing writer holds a present record's lock
    /// (a locked absent record — an insert in flight — is returned as is).
    #[inline]
    pub(crate) fn stable_word(&self) -> u64 {
        let mut iteration = 0;
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & LOCK_BIT == 0 || word & ABSENT_BIT != 0 {
                return word;
            }
            backoff(iteration);
            iteration += 1;
        }
    }

    /// Like [`Self::read`], but also waits while an absent record is
    /// locked (an insert or a revival in flight), so the snapshot is never
    /// taken under a lock. Checkpoints use it: a commit that reserved its
    /// log position before the checkpoint started has locked its records
    /// before the scan reads them (`durability/wal/checkpoint.rs`), and
    /// waiting for the unlock makes the scan see its result. The wait can
    /// last as long as the transaction holding a placeholder lock runs.
    pub(crate) fn read_settled(&self, arena: &mut Arena) -> Snapshot {
        let mut iteration = 0;
        loop {
            // `read` waits out the lock of a present record itself; only a
            // locked absent record comes back locked.
            let snapshot = self.read(arena);
            if snapshot.word & LOCK_BIT == 0 {
                return snapshot;
            }
            backoff(iteration);
            iteration += 1;
        }
    }

    /// Reads a consistent `(word, value)`, copying the value into `arena`.
    /// Waits while a writer holds the lock of a present record; a locked
    /// absent record (an insert in flight) reads as absent at once —
    /// commit-time validation catches the change.
    #[inline]
    pub(crate) fn read(&self, arena: &mut Arena) -> Snapshot {
        self.read_prefix(arena, usize::MAX)
    }

    /// Like [`Self::read`], but copies only the value's first `max` bytes:
    /// a reader that needs one field at the front of a large row touches
    /// only the record's first cache lines. The word is validated the same
    /// way, so the prefix is as consistent as a whole value.
    #[inline]
    pub(crate) fn read_prefix(&self, arena: &mut Arena, max: usize) -> Snapshot {
        let mut iteration = 0;
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & ABSENT_BIT != 0 {
                return Snapshot { word, value: None };
            }
            if word & LOCK_BIT != 0 {
                backoff(iteration);
                iteration += 1;
                continue;
            }
            let value = self.block().load_into(arena, max);
            // Pairs with the release fence taken after locking: if the copy
            // saw any byte written under the lock, this sees the lock.
            fence(Ordering::Acquire);
            if self.word.load(Ordering::Relaxed) == word {
                return Snapshot {
                    word,
                    value: Some(value),
                };
            }
        }
    }

    /// Tries to lock the record for `max_spins` rounds; fails on timeout
    /// (placeholder locks are held for a whole transaction, so an unbounded
    /// wait could deadlock).
    #[inline]
    pub(crate) fn try_lock(&self, max_spins: u32) -> bool {
        let mut iteration = 0;
        loop {
            let word = self.word.load(Ordering::Relaxed);
            if word & LOCK_BIT == 0 {
                if self
                    .word
                    .compare_exchange_weak(
                        word,
                        word | LOCK_BIT,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    // Order the lock before any in-place write (seqlock).
                    fence(Ordering::Release);
                    return true;
                }
            } else if iteration >= max_spins {
                return false;
            }
            backoff(iteration);
            iteration += 1;
        }
    }

    /// Appends the value to `out` and returns the word, for the holder of
    /// the record's lock (nothing can change under it; the `cpr` mode
    /// copies a record's stable value this way before overwriting it).
    pub(crate) fn copy_locked(&self, out: &mut Vec<u8>) -> u64 {
        let word = self.word.load(Ordering::Relaxed);
        debug_assert!(word & LOCK_BIT != 0, "copy_locked without the lock");
        if word & ABSENT_BIT == 0 {
            let block = self.block();
            let len = (block.len.load(Ordering::Relaxed) as usize).min(block.capacity as usize);
            let start = out.len();
            out.reserve(len.next_multiple_of(WORD));
            for word in &block.words()[..len.div_ceil(WORD)] {
                out.extend_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
            out.truncate(start + len);
        }
        word
    }

    /// Releases a lock without changing the TID (an aborted commit).
    #[inline]
    pub(crate) fn unlock(&self) {
        let word = self.word.load(Ordering::Relaxed);
        debug_assert!(word & LOCK_BIT != 0, "unlocking an unlocked record");
        self.word.store(word & !LOCK_BIT, Ordering::Release);
    }

    /// Installs `value` (None: delete) at `tid` and unlocks. The record must
    /// be locked by the caller. A value that fits is written in place;
    /// a larger one gets a new heap block, and the old heap block is retired.
    #[inline]
    pub(crate) fn install_and_unlock(
        &self,
        tid: Tid,
        value: Option<&[u8]>,
        handle: &mut EpochHandle,
    ) {
        debug_assert!(self.word.load(Ordering::Relaxed) & LOCK_BIT != 0);
        if let Some(bytes) = value {
            let current = self.value.load(Ordering::Relaxed);
            // SAFETY: we hold the lock; `current` is live.
            let block = unsafe { &*current };
            if bytes.len() <= block.capacity as usize {
                block.store(bytes);
            } else {
                let grown = new_heap_block(bytes);
                self.value.store(grown.as_ptr(), Ordering::Release);
                if current != self.inline_block() {
                    // SAFETY: unreachable for new readers now; retired once.
                    unsafe { handle.retire(current.cast(), free_heap_block) };
                }
            }
        }
        let absent = if value.is_some() { 0 } else { ABSENT_BIT };
        self.word
            .store(tid.raw() | LATEST_BIT | absent, Ordering::Release);
    }

    /// Marks a locked record unlinked (it has left its index) and unlocks.
    pub(crate) fn unlink_and_unlock(&self) {
        let word = self.word.load(Ordering::Relaxed);
        debug_assert!(word & LOCK_BIT != 0);
        self.word.store(
            (word & !LOCK_BIT) | ABSENT_BIT | UNLINKED_BIT,
            Ordering::Release,
        );
    }
}

/// A pointer to a record, as stored in an index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct RecordRef(NonNull<Record>);

// SAFETY: records are shared between threads by design; all their fields
// are atomics, and their lifetime is governed by the epoch framework.
unsafe impl Send for RecordRef {}
// SAFETY: as above.
unsafe impl Sync for RecordRef {}

impl RecordRef {
    /// A new insert placeholder: absent, locked by its creator, with room
    /// for `capacity` bytes of value inline.
    pub(crate) fn new_placeholder(capacity: usize) -> Self {
        let capacity = capacity_for(capacity);
        let layout = record_layout(capacity);
        // SAFETY: non-zero size.
        let raw = unsafe { alloc(layout) }.cast::<Record>();
        let Some(record) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: a fresh allocation laid out as header + inline block.
        unsafe {
            let inline = raw.cast::<u8>().add(RECORD_HEADER).cast::<ValueBlock>();
            ValueBlock::init(inline, capacity);
            raw.write(Record {
                word: AtomicU64::new(LATEST_BIT | ABSENT_BIT | LOCK_BIT),
                value: AtomicPtr::new(inline),
            });
        }
        Self(record)
    }

    /// The record.
    ///
    /// The caller must be epoch-protected since it loaded this pointer
    /// from an index (or own the record); that keeps it alive.
    #[inline]
    pub(crate) fn get<'a>(self) -> &'a Record {
        // SAFETY: records are freed only through epoch reclamation after
        // they are unlinked; every engine path that holds a RecordRef does so
        // under epoch protection (see the module docs of `txn`).
        unsafe { self.0.as_ref() }
    }

    /// The pointer as an index value word.
    #[inline]
    pub(crate) fn to_word(self) -> u64 {
        self.0.as_ptr() as u64
    }

    /// Rebuilds a reference from [`RecordRef::to_word`].
    #[inline]
    pub(crate) fn from_word(word: u64) -> Self {
        Self(NonNull::new(word as *mut Record).expect("index values are record pointers"))
    }

    pub(crate) fn as_ptr(self) -> *mut Record {
        self.0.as_ptr()
    }
}

/// Frees a record and its heap value block, if any (type-erased, for the
/// epoch framework and teardown).
///
/// # Safety
/// `record` must come from [`RecordRef::new_placeholder`], be unreachable,
/// and be freed once.
pub(crate) unsafe fn free_record(record: *mut ()) {
    let record = record.cast::<Record>();
    // SAFETY: per the contract the record is live and ours to free.
    unsafe {
        let inline = (*record).inline_block();
        let current = *(*record).value.as_ptr();
        if current != inline {
            free_heap_block(current.cast());
        }
        dealloc(record.cast(), record_layout((*inline).capacity));
    }
}
