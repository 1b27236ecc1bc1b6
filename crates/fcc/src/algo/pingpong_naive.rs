//! Wait-Free Ping-Pong, naive layout (§3.3, Algorithm 2; NPP in §4.3): the
//! application state `AS`, the collectors `Odd` and `Even`, and their mark
//! arrays (one byte per mark) are independent arrays.
//!
//! Sharing argument (§3.3): `AS` is private to the mutator. Within a period
//! the mutator writes only `currentAS` and `currentBA`, and the writer reads
//! `previousAS` and clears `previousBA` — the other collector. The roles
//! swap only in `PrepareForNextCheckpoint`, at a point of consistency once
//! the writer is done. The writer leaves every mark of `previousBA` clear,
//! so the next time that collector becomes `currentBA` it starts empty.

use super::pingpong::{Collectors, PingPongWriter, PpWriterCore};
use super::{atomic_bytes, atomic_words};
use crate::error::Error;
use crate::memory::{HugePages, Region};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

struct Shared {
    /// `Even` (0) and `Odd` (1).
    copies: [Region<AtomicU64>; 2],
    marks: [Region<AtomicU8>; 2],
}

impl Collectors for Shared {
    #[inline]
    fn take(&self, which: usize, k: usize) -> Option<u64> {
        if self.marks[which][k].load(Relaxed) == 0 {
            return None;
        }
        self.marks[which][k].store(0, Relaxed);
        Some(self.copies[which][k].load(Relaxed))
    }
    fn words(&self) -> usize {
        self.marks[0].len()
    }
}

/// Mutator side.
pub(crate) struct NppMutator {
    state: Region<u64>,
    shared: Arc<Shared>,
    /// `currentAS`/`currentBA`: 1 (`Odd`) at the start.
    current: usize,
}

/// Writer side.
pub(crate) struct NppWriter {
    shared: Arc<Shared>,
    core: PpWriterCore,
}

/// Builds the pair as in Figure 2(a): `Even` holds the initial state with
/// every mark set (the first checkpoint), `Odd` is empty.
pub(crate) fn new(
    initial: &[u64],
    mode: PingPongWriter,
    huge: HugePages,
) -> (NppMutator, NppWriter) {
    let n = initial.len();
    let shared = Arc::new(Shared {
        copies: [atomic_words(initial, huge), Region::zeroed(n, huge)],
        marks: [atomic_bytes(n, 1, huge), Region::zeroed(n, huge)],
    });
    (
        NppMutator {
            state: Region::copy_of(initial, huge),
            shared: shared.clone(),
            current: 1,
        },
        NppWriter {
            shared,
            core: PpWriterCore::new(mode, n, huge),
        },
    )
}

impl MutatorScheme for NppMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        self.state[index]
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        // AS[index] ← v; currentAS[index] ← v; currentBA[index] ← 1
        self.state[index] = value;
        self.shared.copies[self.current][index].store(value, Relaxed);
        self.shared.marks[self.current][index].store(1, Relaxed);
    }

    fn prepare_for_next_checkpoint(&mut self) {
        // swap(previousAS, currentAS); swap(previousBA, currentBA)
        self.current ^= 1;
    }

    fn words(&self) -> usize {
        self.state.len()
    }
}

impl ImageWriter for NppWriter {
    fn reads_previous(&self) -> bool {
        self.core.reads_previous()
    }

    fn write_image(
        &mut self,
        prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        self.core.write_pass(&*self.shared, prev, out)
    }
}
