//! The writer of Wait-Free Ping-Pong (§3.3, Algorithm 2,
//! `WriteToStableStorage`), shared by the naive and interleaved layouts,
//! with both ways of merging the words updated in the last period into the
//! last consistent checkpoint (lines 5 and 9):
//!
//! * [`PingPongWriter::Copy`]: the writer keeps an extra copy of the state
//!   and "rolls it forward" with the new updates, then streams it;
//! * [`PingPongWriter::Merge`]: the writer reads the previous checkpoint
//!   back from disk and streams it with the new updates applied.

use crate::error::Error;
use crate::memory::{HugePages, Region};
use crate::scheme::{PrevImage, WordSink};

/// How the Ping-Pong writer builds the next consistent image (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PingPongWriter {
    /// Roll a writer-private copy of the state forward (one more state-sized
    /// array in memory; fastest in §5.5).
    Copy,
    /// Read the previous checkpoint from disk and apply the updates while
    /// streaming (no extra memory; one more sequential read per checkpoint).
    Merge,
}

/// The two update collectors, `Odd` (index 1) and `Even` (index 0), seen
/// by the writer.
pub(crate) trait Collectors: Send + Sync + 'static {
    /// If word `k` of collector `which` is marked: clears the mark and
    /// returns its value (Algorithm 2, lines 4–7; line 7's "← empty" is
    /// skipped, as the paper allows).
    fn take(&self, which: usize, k: usize) -> Option<u64>;
    /// Words of state.
    fn words(&self) -> usize;
}

/// Writer state common to NPP and IPP.
pub(crate) struct PpWriterCore {
    mode: PingPongWriter,
    /// Roll-forward image (Copy only).
    image: Region<u64>,
    /// `previousAS`/`previousBA`: the collector this pass drains. Starts at
    /// `Even` (0), holding the initial state with every mark set; flips after
    /// every pass, mirroring the mutator's pointer swap.
    previous: usize,
}

impl PpWriterCore {
    pub(crate) fn new(mode: PingPongWriter, words: usize, huge: HugePages) -> Self {
        let image = match mode {
            PingPongWriter::Copy => Region::zeroed(words, huge),
            PingPongWriter::Merge => Region::zeroed(0, huge),
        };
        Self {
            mode,
            image,
            previous: 0,
        }
    }

    pub(crate) fn reads_previous(&self) -> bool {
        self.mode == PingPongWriter::Merge
    }

    /// One pass of `WriteToStableStorage`'s loop.
    pub(crate) fn write_pass<C: Collectors>(
        &mut self,
        collectors: &C,
        mut prev: Option<&mut PrevImage<'_>>,
        out: &mut WordSink<'_>,
    ) -> Result<(), Error> {
        let which = self.previous;
        match self.mode {
            PingPongWriter::Copy => {
                for (k, slot) in self.image.iter_mut().enumerate() {
                    if let Some(v) = collectors.take(which, k) {
                        *slot = v;
                    }
                    out.push(*slot)?;
                }
            }
            PingPongWriter::Merge => {
                for k in 0..collectors.words() {
                    // Read every previous word, so the stream stays aligned
                    // and its CRC can be verified.
                    let old = match prev.as_deref_mut() {
                        Some(p) => Some(p.next_word()?),
                        None => None,
                    };
                    let word = match (collectors.take(which, k), old) {
                        (Some(v), _) => v,
                        (None, Some(old)) => old,
                        (None, None) => {
                            panic!("first Ping-Pong pass has every word marked (word {k})")
                        }
                    };
                    out.push(word)?;
                }
            }
        }
        self.previous ^= 1;
        Ok(())
    }
}
