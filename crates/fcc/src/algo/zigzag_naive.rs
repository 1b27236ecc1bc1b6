//! Wait-Free Zigzag, naive layout (§3.2, Algorithm 1; NZZ in §4.2): two
//! copies `AS0`, `AS1` and, per word, a read bit `MR` and a write bit `MW`,
//! each bit stored as one byte, every array separate.
//!
//! Sharing argument (§3.2): `MW` changes only in
//! `PrepareForNextCheckpoint`, i.e. at a point of consistency once the
//! writer is done. Within a period the mutator therefore writes only
//! `AS_MW[i][i]` and the writer reads only `AS_¬MW[i][i]` — never the same
//! word. The mutator may read `AS_¬MW[i][i]` too (when `MR[i] = ¬MW[i]`),
//! but two reads do not conflict. `MR` is private to the mutator.

use super::{atomic_bytes, atomic_words};
use crate::error::Error;
use crate::memory::{HugePages, Region};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

struct Shared {
    copies: [Region<AtomicU64>; 2],
    /// `MW`: which copy the mutator writes (0 or 1).
    mw: Region<AtomicU8>,
}

/// Mutator side.
pub(crate) struct NzzMutator {
    shared: Arc<Shared>,
    /// `MR`: which copy holds the current value (0 or 1).
    mr: Region<u8>,
}

/// Writer side.
pub(crate) struct NzzWriter {
    shared: Arc<Shared>,
}

/// Builds the pair: `AS0 = AS1 = initial`, `MR = 0…0`, `MW = 1…1`
/// (Algorithm 1), so the first checkpoint is `AS0`, the initial state.
pub(crate) fn new(initial: &[u64], huge: HugePages) -> (NzzMutator, NzzWriter) {
    let shared = Arc::new(Shared {
        copies: [atomic_words(initial, huge), atomic_words(initial, huge)],
        mw: atomic_bytes(initial.len(), 1, huge),
    });
    (
        NzzMutator {
            shared: shared.clone(),
            mr: Region::zeroed(initial.len(), huge),
        },
        NzzWriter { shared },
    )
}

impl MutatorScheme for NzzMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        // return AS_MR[index][index]
        self.shared.copies[usize::from(self.mr[index])][index].load(Relaxed)
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        // AS_MW[index][index] ← newValue; MR[index] ← MW[index]
        let mw = self.shared.mw[index].load(Relaxed);
        self.shared.copies[usize::from(mw)][index].store(value, Relaxed);
        self.mr[index] = mw;
    }

    fn prepare_for_next_checkpoint(&mut self) {
        // for all i: MW[i] ← ¬MR[i]
        for (mw, &mr) in self.shared.mw.iter().zip(self.mr.iter()) {
            mw.store(mr ^ 1, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.mr.len()
    }
}

impl ImageWriter for NzzWriter {
    fn write_image(
        &mut self,
        _prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        let s = &*self.shared;
        for (k, mw) in s.mw.iter().enumerate() {
            // write-to-disk AS_¬MW[k][k]
            let stable = usize::from(mw.load(Relaxed) ^ 1);
            out.push(s.copies[stable][k].load(Relaxed))?;
        }
        Ok(())
    }
}
