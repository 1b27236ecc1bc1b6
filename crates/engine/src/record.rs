//! Records: a TID word and an immutable, epoch-reclaimed value block.
//!
//! A value block is never changed after it is published: a writer installs
//! a new block and retires the old one through the epoch framework, so a
//! reader may keep a `&[u8]` into it for the rest of its transaction
//! (its epoch protection keeps the block alive). The `(word, value)` pair is
//! read like a seqlock: word, value pointer, word again.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::tid::{Tid, ABSENT_BIT, LATEST_BIT, LOCK_BIT, UNLINKED_BIT};

/// Header of a value block; `len` bytes follow it.
#[repr(C)]
pub(crate) struct ValueBlock {
    len: usize,
}

const HEADER: usize = std::mem::size_of::<ValueBlock>();

fn block_layout(len: usize) -> Layout {
    Layout::from_size_align(HEADER + len, std::mem::align_of::<ValueBlock>())
        .expect("value too large for one allocation")
}

/// Allocates a value block holding a copy of `bytes`.
pub(crate) fn new_value(bytes: &[u8]) -> NonNull<ValueBlock> {
    let layout = block_layout(bytes.len());
    // SAFETY: the layout has non-zero size (it includes the header).
    let raw = unsafe { alloc(layout) }.cast::<ValueBlock>();
    let Some(block) = NonNull::new(raw) else {
        handle_alloc_error(layout)
    };
    // SAFETY: `block` points to a fresh allocation of HEADER + len bytes,
    // aligned for ValueBlock; we initialise the header, then the bytes.
    unsafe {
        block.as_ptr().write(ValueBlock { len: bytes.len() });
        let data = block.as_ptr().cast::<u8>().add(HEADER);
        ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
    }
    block
}

/// The bytes of a value block.
///
/// # Safety
/// `block` must be a live block from [`new_value`], and stay live for `'a`.
#[inline]
pub(crate) unsafe fn value_bytes<'a>(block: *const ValueBlock) -> &'a [u8] {
    // SAFETY: per the contract, the header and `len` bytes are initialised.
    unsafe {
        let len = (*block).len;
        std::slice::from_raw_parts(block.cast::<u8>().add(HEADER), len)
    }
}

/// Frees a value block (type-erased, for the epoch framework).
///
/// # Safety
/// `block` must come from [`new_value`], be unreachable, and be freed once.
pub(crate) unsafe fn free_value(block: *mut ()) {
    let block = block.cast::<ValueBlock>();
    // SAFETY: per the contract the block is live and ours to free; its
    // layout is recomputed from the header.
    unsafe {
        let layout = block_layout((*block).len);
        dealloc(block.cast(), layout);
    }
}

/// One key's record. Lives in exactly one table's index until unlinked;
/// freed through the epoch framework after that.
pub(crate) struct Record {
    word: AtomicU64,
    value: AtomicPtr<ValueBlock>,
}

/// A consistent view of a record: its word and its value at that word.
#[derive(Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) word: u64,
    pub(crate) value: *const ValueBlock,
}

impl Snapshot {
    #[inline]
    pub(crate) fn is_absent(&self) -> bool {
        self.word & ABSENT_BIT != 0
    }
    #[inline]
    pub(crate) fn is_unlinked(&self) -> bool {
        self.word & UNLINKED_BIT != 0
    }
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

impl Record {
    /// An insert placeholder: absent and locked by its creator.
    pub(crate) fn new_placeholder() -> Box<Record> {
        Box::new(Record {
            word: AtomicU64::new(LATEST_BIT | ABSENT_BIT | LOCK_BIT),
            value: AtomicPtr::new(ptr::null_mut()),
        })
    }

    /// The current word, without waiting for a lock.
    #[inline]
    pub(crate) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Reads a consistent `(word, value)`. Waits while a writer holds the
    /// lock of a present record; a locked absent record (an insert in flight)
    /// reads as absent at once — commit-time validation catches the change.
    #[inline]
    pub(crate) fn read(&self) -> Snapshot {
        let mut iteration = 0;
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & LOCK_BIT != 0 {
                if word & ABSENT_BIT != 0 {
                    return Snapshot {
                        word,
                        value: ptr::null(),
                    };
                }
                backoff(iteration);
                iteration += 1;
                continue;
            }
            let value = self.value.load(Ordering::Acquire);
            // The acquire load above keeps this load after it.
            if self.word.load(Ordering::Acquire) == word {
                return Snapshot { word, value };
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
                    return true;
                }
            } else if iteration >= max_spins {
                return false;
            }
            backoff(iteration);
            iteration += 1;
        }
    }

    /// Releases a lock without changing the TID (an aborted commit).
    #[inline]
    pub(crate) fn unlock(&self) {
        let word = self.word.load(Ordering::Relaxed);
        debug_assert!(word & LOCK_BIT != 0, "unlocking an unlocked record");
        self.word.store(word & !LOCK_BIT, Ordering::Release);
    }

    /// Installs `value` (None: delete) at `tid` and unlocks. The record must
    /// be locked by the caller. Returns the replaced block, for retirement.
    #[inline]
    pub(crate) fn install_and_unlock(
        &self,
        tid: Tid,
        value: Option<NonNull<ValueBlock>>,
    ) -> *mut ValueBlock {
        debug_assert!(self.word.load(Ordering::Relaxed) & LOCK_BIT != 0);
        let new = value.map_or(ptr::null_mut(), NonNull::as_ptr);
        let old = self.value.swap(new, Ordering::AcqRel);
        let absent = if value.is_some() { 0 } else { ABSENT_BIT };
        self.word
            .store(tid.raw() | LATEST_BIT | absent, Ordering::Release);
        old
    }

    /// Marks a locked record unlinked (it has left its index) and unlocks.
    /// Returns its value block, for retirement.
    pub(crate) fn unlink_and_unlock(&self) -> *mut ValueBlock {
        let word = self.word.load(Ordering::Relaxed);
        debug_assert!(word & LOCK_BIT != 0);
        let old = self.value.swap(ptr::null_mut(), Ordering::AcqRel);
        self.word.store(
            (word & !LOCK_BIT) | ABSENT_BIT | UNLINKED_BIT,
            Ordering::Release,
        );
        old
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let value = *self.value.get_mut();
        if !value.is_null() {
            // SAFETY: a record is dropped only once unreachable (epoch
            // reclamation or database teardown), and so is its value.
            unsafe { free_value(value.cast()) };
        }
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
    pub(crate) fn from_box(record: Box<Record>) -> Self {
        Self(NonNull::from(Box::leak(record)))
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

/// Frees a record (type-erased, for the epoch framework).
///
/// # Safety
/// `record` must come from `RecordRef::from_box`, be unreachable, and be
/// freed once.
pub(crate) unsafe fn free_record(record: *mut ()) {
    // SAFETY: forwarded from the caller.
    drop(unsafe { Box::from_raw(record.cast::<Record>()) });
}
