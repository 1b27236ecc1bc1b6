//! Wait-Free Zigzag, bit-array packed layout (§3.2, Algorithm 1; BAZZ in
//! §4.2): `MR` and `MW` are packed into one bit array in which each 64-byte
//! cache line holds 256 bits of `MR` (its first half) followed by the 256
//! matching bits of `MW` (its second half), so `PrepareForNextCheckpoint`
//! negates `MR` into `MW` a long word at a time.
//!
//! Sharing argument: as for NZZ (`zigzag_naive.rs`). The `MR` words are
//! written only by the mutator (plain load/store, it is their only writer);
//! the `MW` words change only at a point of consistency once the writer is
//! done. The writer reads only `MW` words.

use super::atomic_words;
use crate::error::Error;
use crate::memory::{HugePages, Region, Zeroable};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Words of state covered by one cache line of bits.
const WORDS_PER_LINE: usize = 256;

/// One cache line of the packed bit array: `MR` bits, then `MW` bits.
#[derive(Zeroable)]
#[repr(C, align(64))]
struct BitLine {
    mr: [AtomicU64; 4],
    mw: [AtomicU64; 4],
}
const _: () = assert!(std::mem::size_of::<BitLine>() == 64);

struct Shared {
    copies: [Region<AtomicU64>; 2],
    bits: Region<BitLine>,
}

impl Shared {
    /// The line, the long word within each half, and the bit mask of word `i`.
    #[inline]
    fn locate(&self, index: usize) -> (&BitLine, usize, u64) {
        let line = &self.bits[index / WORDS_PER_LINE];
        let offset = index % WORDS_PER_LINE;
        (line, offset / 64, 1u64 << (offset % 64))
    }
}

/// Mutator side.
pub(crate) struct BazzMutator {
    shared: Arc<Shared>,
    words: usize,
}

/// Writer side.
pub(crate) struct BazzWriter {
    shared: Arc<Shared>,
    words: usize,
}

/// Builds the pair: `AS0 = AS1 = initial`, `MR = 0…0`, `MW = 1…1`.
pub(crate) fn new(initial: &[u64], huge: HugePages) -> (BazzMutator, BazzWriter) {
    let lines = initial.len().div_ceil(WORDS_PER_LINE);
    let bits = Region::new(lines, huge, |_| BitLine {
        mr: std::array::from_fn(|_| AtomicU64::new(0)),
        mw: std::array::from_fn(|_| AtomicU64::new(u64::MAX)),
    });
    let shared = Arc::new(Shared {
        copies: [atomic_words(initial, huge), atomic_words(initial, huge)],
        bits,
    });
    let words = initial.len();
    (
        BazzMutator {
            shared: shared.clone(),
            words,
        },
        BazzWriter { shared, words },
    )
}

impl MutatorScheme for BazzMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        let (line, word, mask) = self.shared.locate(index);
        let mr = usize::from(line.mr[word].load(Relaxed) & mask != 0);
        self.shared.copies[mr][index].load(Relaxed)
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        let (line, word, mask) = self.shared.locate(index);
        let mw_set = line.mw[word].load(Relaxed) & mask != 0;
        self.shared.copies[usize::from(mw_set)][index].store(value, Relaxed);
        // MR[index] ← MW[index]; the mutator is the only writer of MR words.
        let mr = line.mr[word].load(Relaxed);
        let mr = if mw_set { mr | mask } else { mr & !mask };
        line.mr[word].store(mr, Relaxed);
    }

    fn prepare_for_next_checkpoint(&mut self) {
        // MW ← ¬MR with long word negation (§4.2).
        for line in self.shared.bits.iter() {
            for (mw, mr) in line.mw.iter().zip(&line.mr) {
                mw.store(!mr.load(Relaxed), Relaxed);
            }
        }
    }

    fn words(&self) -> usize {
        self.words
    }
}

impl ImageWriter for BazzWriter {
    fn write_image(
        &mut self,
        _prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        let s = &*self.shared;
        for (group, chunk) in (0..self.words).step_by(64).enumerate() {
            // One MW long word covers 64 consecutive words of state.
            let line = &s.bits[group / 4];
            let mw = line.mw[group % 4].load(Relaxed);
            for k in chunk..(chunk + 64).min(self.words) {
                let stable = usize::from(mw >> (k % 64) & 1 == 0);
                out.push(s.copies[stable][k].load(Relaxed))?;
            }
        }
        Ok(())
    }
}
