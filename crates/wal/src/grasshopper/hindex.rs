//! The hopping index (eleda §3.2): per LSN range `[i·2^H, (i+1)·2^H)` the
//! cumulative count of bytes buffered in it.
//!
//! Ranges are counted from `base`, the LSN the log started at in this
//! process rounded down to `2^H`; the bytes of the first range below the
//! starting LSN are credited up front, as if buffered.
//!
//! **Laps instead of resets.** Algorithm 1 line 6 resets a full entry to 0
//! once hopped over, so it can be reused when the ring wraps. A reset races
//! with crawling, though: SBL-crawling can pass a range whose last
//! database thread has enqueued its node (step 1 of §4.1.2) but not yet
//! added its bytes (step 3); a reset then would be followed by a stale
//! add. Here entries are never reset: range `r` maps to slot `r mod n`,
//! the `k`-th range to use a slot is its lap `k = r / n`, and the range is
//! full exactly when the slot holds `(k + 1)·2^H` (every lap before it is
//! full and each lap contributes at most `2^H`). This is exact as long as
//! no range of lap `k + 1` can receive bytes while SBL is still inside
//! range `r` of lap `k`: a writer copies only into ring space the flusher
//! is done with (SDL ≥ its end − ring size), so `n·2^H ≥ ring + 2^H`
//! suffices, and [`HIndex::new`] sizes `n` so (rounded up to a power of
//! two). The worker thus only reads the index, as Table 2 has it.

use crossbeam_utils::CachePadded;

use crate::sync::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// The hopping index shared by database threads (writers, Table 2: W) and
/// the worker (reader, R).
#[derive(Debug)]
pub(crate) struct HIndex {
    base: u64,
    shift: u32,
    /// `n`, a power of two, so that a range's slot and lap are a mask and
    /// a shift rather than a division on every append.
    slots: Box<[CachePadded<AtomicU64>]>,
}

impl HIndex {
    /// An index for a log starting at `start` with hops of `2^shift` bytes
    /// over a ring of `ring_bytes`.
    pub(crate) fn new(start: u64, shift: u32, ring_bytes: u64) -> Self {
        let hop = 1u64 << shift;
        let n = (ring_bytes.div_ceil(hop) + 1).next_power_of_two();
        let slots: Box<[CachePadded<AtomicU64>]> = (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        assert!(
            n * hop >= ring_bytes + hop,
            "hopping index too small for its ring"
        );
        let base = start >> shift << shift;
        slots[0].store(start - base, Relaxed);
        Self { base, shift, slots }
    }

    /// The index of the range holding `lsn`.
    #[inline]
    pub(crate) fn range_of(&self, lsn: u64) -> u64 {
        debug_assert!(lsn >= self.base);
        (lsn - self.base) >> self.shift
    }

    /// The first LSN of range `r` (the hopping boundary of Algorithm 1
    /// line 10).
    #[inline]
    pub(crate) fn range_start(&self, r: u64) -> u64 {
        self.base + (r << self.shift)
    }

    /// Step 3 of §4.1.2: counts the `len` bytes buffered at `lsn`, split
    /// over the ranges they cover. Release: a worker that sees the range
    /// full sees the copy and the node enqueued before this.
    pub(crate) fn add(&self, lsn: u64, len: u64) {
        let end = lsn + len;
        let mut at = lsn;
        while at < end {
            let r = self.range_of(at);
            let upto = end.min(self.range_start(r + 1));
            self.slot(r).fetch_add(upto - at, Release);
            at = upto;
        }
    }

    /// Whether every byte of range `r` has been buffered (Algorithm 1 line
    /// 5's `bytes == 2^H`). Acquire: pairs with every [`HIndex::add`]
    /// counted (an RMW chain is one release sequence).
    #[inline]
    pub(crate) fn is_full(&self, r: u64) -> bool {
        self.slot(r).load(Acquire) == (self.lap(r) + 1) << self.shift
    }

    /// The bytes of range `r` counted so far, read with Acquire (as
    /// [`HIndex::is_full`]). Exact while SBL is inside range `r` (no range
    /// of a later lap receives bytes then; see the module docs).
    #[inline]
    pub(crate) fn buffered(&self, r: u64) -> u64 {
        self.slot(r)
            .load(Acquire)
            .wrapping_sub(self.lap(r) << self.shift)
    }

    /// How many ranges used range `r`'s slot before it: `r / n`.
    #[inline]
    fn lap(&self, r: u64) -> u64 {
        r >> self.slots.len().trailing_zeros()
    }

    #[inline]
    fn slot(&self, r: u64) -> &AtomicU64 {
        &self.slots[(r & (self.slots.len() as u64 - 1)) as usize]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn full_only_when_every_byte_counted_across_laps() {
        // 8-byte hops over a 16-byte ring: 3 slots, rounded up to 4.
        let h = HIndex::new(0, 3, 16);
        assert_eq!(h.slots.len(), 4);
        assert!(!h.is_full(0));
        h.add(0, 5);
        assert!(!h.is_full(0));
        h.add(5, 6); // straddles into range 1
        assert!(h.is_full(0));
        assert!(!h.is_full(1));
        h.add(11, 21); // fills ranges 1, 2 and 3
        assert!(h.is_full(1) && h.is_full(2) && h.is_full(3));
        // Range 4 reuses slot 0 in lap 1: full needs 16 there.
        assert!(!h.is_full(4));
        assert_eq!(h.buffered(4), 0);
        h.add(32, 3);
        assert_eq!(h.buffered(4), 3);
        h.add(35, 5);
        assert!(h.is_full(4));
    }

    #[test]
    fn start_mid_range_is_credited() {
        let h = HIndex::new(21, 3, 16);
        assert_eq!(h.range_of(21), 0);
        assert_eq!(h.range_start(1), 24);
        assert!(!h.is_full(0));
        h.add(21, 3);
        assert!(h.is_full(0));
    }
}
