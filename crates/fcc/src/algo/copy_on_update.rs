//! Copy-on-Update in the Bit-Array Packed layout (§2.3; BACOU in §4.1).
//!
//! The state is split into blocks of `block_words` words. The first time a
//! block is updated in a checkpoint period the mutator copies it to the
//! shadow copy and marks it dirty; the writer writes each block from the
//! shadow if it is dirty and from the live state otherwise. At the start of
//! each period all dirty bits are reset (the "bulk bit-array reset" of
//! Table 1).
//!
//! Layout (§4.1): dirty bits and lock bits are packed 64 to a word, and each
//! block's live words are followed by its shadow words, so a block and its
//! shadow are fetched together (with 4-word blocks, both share one cache
//! line).
//!
//! Sharing argument — this algorithm is *not* wait-free; it locks (§2.3):
//! the mutator may write a block's live words only after the block is dirty,
//! and it makes a block dirty (copying it to the shadow) only while holding
//! the block's lock. The writer reads a block while holding the same lock:
//! if the block is dirty it reads the shadow, which nobody writes again
//! during the period; if it is clean, the mutator cannot change it until the
//! writer unlocks. Dirty bits are stored only by the mutator (plain
//! load/store on the packed word), read by the writer under the lock.

use crate::error::Error;
use crate::memory::{HugePages, Region};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::hint::spin_loop;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;

/// Largest block size accepted, in words.
pub(crate) const BLOCK_WORDS_MAX: usize = 1 << 16;

struct Shared {
    block_words: usize,
    /// Block `b`: live words at `[2·b·B, 2·b·B + B)`, shadow right after.
    data: Region<AtomicU64>,
    /// Bit `b` set: block `b` was copied to its shadow in this period.
    dirty: Region<AtomicU64>,
    /// Bit `b` set: block `b` is locked.
    locks: Region<AtomicU64>,
    words: usize,
}

impl Shared {
    #[inline]
    fn lock(&self, block: usize) {
        let word = &self.locks[block / 64];
        let bit = 1u64 << (block % 64);
        // Acquire: pairs with the other thread's Release in `unlock`.
        while word.fetch_or(bit, Acquire) & bit != 0 {
            spin_loop();
        }
    }

    #[inline]
    fn unlock(&self, block: usize) {
        self.locks[block / 64].fetch_and(!(1u64 << (block % 64)), Release);
    }

    #[inline]
    fn is_dirty(&self, block: usize) -> bool {
        self.dirty[block / 64].load(Relaxed) & (1u64 << (block % 64)) != 0
    }

    #[inline]
    fn live_index(&self, index: usize) -> usize {
        let block = index / self.block_words;
        index + block * self.block_words
    }
}

/// Mutator side.
pub(crate) struct CouMutator {
    shared: Arc<Shared>,
}

/// Writer side.
pub(crate) struct CouWriter {
    shared: Arc<Shared>,
    block: Vec<u64>,
}

/// Builds the pair with blocks of `block_words` words; no block is dirty, so
/// the first checkpoint is the initial state read from the live words.
pub(crate) fn new(initial: &[u64], block_words: usize, huge: HugePages) -> (CouMutator, CouWriter) {
    assert!((1..=BLOCK_WORDS_MAX).contains(&block_words), "block size");
    let blocks = initial.len().div_ceil(block_words);
    let data = Region::new(blocks * block_words * 2, huge, |j| {
        // Block b's live words sit at [2·b·B, 2·b·B + B), its shadow after.
        let (block, offset) = (j / (2 * block_words), j % (2 * block_words));
        let i = block * block_words + offset;
        AtomicU64::new(if offset < block_words && i < initial.len() {
            initial[i]
        } else {
            0
        })
    });
    let shared = Arc::new(Shared {
        block_words,
        data,
        dirty: Region::zeroed(blocks.div_ceil(64), huge),
        locks: Region::zeroed(blocks.div_ceil(64), huge),
        words: initial.len(),
    });
    (
        CouMutator {
            shared: shared.clone(),
        },
        CouWriter {
            shared,
            block: vec![0; block_words],
        },
    )
}

impl MutatorScheme for CouMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        assert!(index < self.shared.words, "index out of range");
        self.shared.data[self.shared.live_index(index)].load(Relaxed)
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        let s = &*self.shared;
        assert!(index < s.words, "index out of range");
        let block = index / s.block_words;
        if !s.is_dirty(block) {
            // First update of this block in the period: lock, copy, mark.
            s.lock(block);
            let start = 2 * block * s.block_words;
            let (live, shadow) = s.data[start..start + 2 * s.block_words].split_at(s.block_words);
            for (dst, src) in shadow.iter().zip(live) {
                dst.store(src.load(Relaxed), Relaxed);
            }
            let dirty = &s.dirty[block / 64];
            dirty.store(dirty.load(Relaxed) | 1u64 << (block % 64), Relaxed);
            s.unlock(block);
        }
        s.data[s.live_index(index)].store(value, Relaxed);
    }

    fn prepare_for_next_checkpoint(&mut self) {
        // Bulk bit-array reset, a long word at a time (§4.1). The writer is
        // done, so no lock is held.
        for word in self.shared.dirty.iter() {
            word.store(0, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.shared.words
    }
}

impl ImageWriter for CouWriter {
    fn write_image(
        &mut self,
        _prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        let s = &*self.shared;
        let b = s.block_words;
        for block in 0..s.words.div_ceil(b) {
            // Copy the block out under its lock; never do I/O holding it.
            s.lock(block);
            let from = 2 * block * b + if s.is_dirty(block) { b } else { 0 };
            for (dst, src) in self.block.iter_mut().zip(&s.data[from..from + b]) {
                *dst = src.load(Relaxed);
            }
            s.unlock(block);
            let n = b.min(s.words - block * b);
            for &w in &self.block[..n] {
                out.push(w)?;
            }
        }
        Ok(())
    }
}
