//! Wait-Free Ping-Pong, interleaved layout (§3.3, Algorithm 2; IPP in
//! §4.3): one 32-byte record per word holds the word of `AS`, `Even` and
//! `Odd` and the two marks, two records to a cache line, so the extra
//! writes of `HandleWrite` land on the line the application write already
//! brought in.
//!
//! Sharing argument: as for NPP (`pingpong_naive.rs`). Each mark is its own
//! 32-bit atomic, so the mutator setting a `currentBA` mark and the writer
//! clearing a `previousBA` mark in the same record are stores to different
//! locations, never a read-modify-write race. `AS` lives in the shared
//! record but only the mutator touches it.

use super::pingpong::{Collectors, PingPongWriter, PpWriterCore};
use crate::error::Error;
use crate::memory::{HugePages, Region, Zeroable};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One interleaved record.
#[derive(Zeroable)]
#[repr(C, align(32))]
struct Record {
    state: AtomicU64,
    /// `Even` (0) and `Odd` (1).
    copies: [AtomicU64; 2],
    marks: [AtomicU32; 2],
}
const _: () = assert!(std::mem::size_of::<Record>() == 32);

struct Shared {
    records: Region<Record>,
}

impl Collectors for Shared {
    #[inline]
    fn take(&self, which: usize, k: usize) -> Option<u64> {
        let r = &self.records[k];
        if r.marks[which].load(Relaxed) == 0 {
            return None;
        }
        r.marks[which].store(0, Relaxed);
        Some(r.copies[which].load(Relaxed))
    }
    fn words(&self) -> usize {
        self.records.len()
    }
}

/// Mutator side.
pub(crate) struct IppMutator {
    shared: Arc<Shared>,
    current: usize,
}

/// Writer side.
pub(crate) struct IppWriter {
    shared: Arc<Shared>,
    core: PpWriterCore,
}

/// Builds the pair as in Figure 2(a).
pub(crate) fn new(
    initial: &[u64],
    mode: PingPongWriter,
    huge: HugePages,
) -> (IppMutator, IppWriter) {
    let records = Region::new(initial.len(), huge, |i| Record {
        state: AtomicU64::new(initial[i]),
        copies: [AtomicU64::new(initial[i]), AtomicU64::new(0)],
        marks: [AtomicU32::new(1), AtomicU32::new(0)],
    });
    let shared = Arc::new(Shared { records });
    (
        IppMutator {
            shared: shared.clone(),
            current: 1,
        },
        IppWriter {
            shared,
            core: PpWriterCore::new(mode, initial.len(), huge),
        },
    )
}

impl MutatorScheme for IppMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        self.shared.records[index].state.load(Relaxed)
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        let r = &self.shared.records[index];
        r.state.store(value, Relaxed);
        r.copies[self.current].store(value, Relaxed);
        r.marks[self.current].store(1, Relaxed);
    }

    fn prepare_for_next_checkpoint(&mut self) {
        self.current ^= 1;
    }

    fn words(&self) -> usize {
        self.shared.records.len()
    }
}

impl ImageWriter for IppWriter {
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
