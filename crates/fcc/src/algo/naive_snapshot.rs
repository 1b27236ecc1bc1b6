//! Naive-Snapshot (§2.3; NS in §4.1): at a point of consistency the mutator
//! copies the whole state into a shadow copy, which the writer then streams
//! to disk. No per-access work; one bulk copy per checkpoint (Table 1).
//!
//! Sharing argument: the application state is private to the mutator. The
//! shadow copy is written by the mutator only inside
//! `PrepareForNextCheckpoint`, which runs only when the writer is done, and
//! read by the writer only between the notification and its completion.

use super::atomic_words;
use crate::error::Error;
use crate::memory::{HugePages, Region};
use crate::scheme::{ImageWriter, MutatorScheme, PrevImage, WordSink};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Mutator side: the live state and the shadow copy.
pub(crate) struct NsMutator {
    state: Region<u64>,
    shadow: Arc<Region<AtomicU64>>,
}

/// Writer side: streams the shadow copy.
pub(crate) struct NsWriter {
    shadow: Arc<Region<AtomicU64>>,
}

/// Builds the pair; the shadow starts as the initial state, which is the
/// first checkpoint.
pub(crate) fn new(initial: &[u64], huge: HugePages) -> (NsMutator, NsWriter) {
    let shadow = Arc::new(atomic_words(initial, huge));
    (
        NsMutator {
            state: Region::copy_of(initial, huge),
            shadow: shadow.clone(),
        },
        NsWriter { shadow },
    )
}

impl MutatorScheme for NsMutator {
    #[inline]
    fn handle_read(&self, index: usize) -> u64 {
        self.state[index]
    }

    #[inline]
    fn handle_write(&mut self, index: usize, value: u64) {
        self.state[index] = value;
    }

    fn prepare_for_next_checkpoint(&mut self) {
        // The synchronous bulk copy that gives NS its latency spike (§5.3).
        for (dst, &src) in self.shadow.iter().zip(self.state.iter()) {
            dst.store(src, Relaxed);
        }
    }

    fn words(&self) -> usize {
        self.state.len()
    }
}

impl ImageWriter for NsWriter {
    fn write_image(
        &mut self,
        _prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        for word in self.shadow.iter() {
            out.push(word.load(Relaxed))?;
        }
        Ok(())
    }
}
