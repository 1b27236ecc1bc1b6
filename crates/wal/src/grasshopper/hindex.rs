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
//! add. Here counts are never reset: range `r` maps to slot `r mod n`,
//! the `k`-th range to use a slot is its lap `k = r / n`, and the range is
//! full exactly when the slot's count is `(k + 1)·2^H` (every lap before
//! it is full and each lap contributes at most `2^H`). This is exact as
//! long as no range of lap `k + 1` can receive bytes while SBL is still
//! inside range `r` of lap `k` or below it: a writer copies only into ring
//! space the flusher is done with (SDL ≥ its end − ring size), so
//! `n·2^H ≥ ring + 2^H` suffices, and [`HIndex::new`] sizes `n` so
//! (rounded up to a power of two). The worker only reads the counts, as
//! Table 2 has it.
//!
//! **A count per thread, beyond the paper.** The paper's index is one
//! array every database thread `fetch_add`s into (step 3 of §4.1.2): a
//! second locked instruction per append after the LSN's, where the mutex
//! log makes one, and replacing it by a plain load and store gave 1.04×
//! the throughput at one thread (BENCHMARKS.md, session 58). Here each
//! grasshopper list owns its counts ([`ThreadCounts`], written by its
//! owner only, with a load and a Release store), and the worker's
//! [`Tally`] sums them over the lists it tracks when it asks whether a
//! range is full. The sum is never more than what was buffered: each
//! count only grows and the worker reads each once, so a sum read while
//! owners add is at most the true total when the last count was read,
//! which the lap argument above bounds by `(k + 1)·2^H`; a sum equal to
//! it therefore still means every byte of the range was counted, each by
//! a Release store the worker's Acquire load synchronised with. A list
//! the worker does not track yet only makes the sum smaller (it waits).
//! A retired list's counts are final once the worker sees it retired;
//! the worker folds them into its own array in the same step that drops
//! the list, so no count is ever summed twice. The price: a check reads
//! one line per tracked list instead of one.

use crate::sync::{Arc, AtomicU64};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::list::GList;

/// The hopping index's geometry, shared by database threads and the
/// worker; the counts live in [`ThreadCounts`] and [`Tally`].
#[derive(Debug)]
pub(crate) struct HIndex {
    base: u64,
    shift: u32,
    /// `log2(n)`: `n`, the number of slots, is a power of two, so that a
    /// range's slot and lap are a mask and a shift rather than a division
    /// on every append.
    slot_bits: u32,
    /// Bytes of range 0 below the starting LSN, counted as buffered.
    credit: u64,
}

impl HIndex {
    /// An index for a log starting at `start` with hops of `2^shift` bytes
    /// over a ring of `ring_bytes`.
    pub(crate) fn new(start: u64, shift: u32, ring_bytes: u64) -> Self {
        let hop = 1u64 << shift;
        let n = (ring_bytes.div_ceil(hop) + 1).next_power_of_two();
        assert!(
            n * hop >= ring_bytes + hop,
            "hopping index too small for its ring"
        );
        let base = start >> shift << shift;
        Self {
            base,
            shift,
            slot_bits: n.trailing_zeros(),
            credit: start - base,
        }
    }

    /// The number of slots, `n`.
    pub(crate) fn slots(&self) -> usize {
        1 << self.slot_bits
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

    /// How many ranges used range `r`'s slot before it: `r / n`.
    #[inline]
    fn lap(&self, r: u64) -> u64 {
        r >> self.slot_bits
    }

    /// Range `r`'s slot: `r mod n`.
    #[inline]
    fn slot(&self, r: u64) -> usize {
        (r & ((1u64 << self.slot_bits) - 1)) as usize
    }
}

/// Eight counts on a cache line of their own, so that no other data
/// shares a line the worker reads and the owner writes.
#[repr(align(64))]
struct Line([AtomicU64; 8]);

/// One database thread's counts, a slot per range of the index (Table 2:
/// its owner W, the worker R).
pub(crate) struct ThreadCounts {
    lines: Box<[Line]>,
}

impl ThreadCounts {
    /// Zero counts for `hindex`'s slots.
    pub(crate) fn new(hindex: &HIndex) -> Self {
        Self {
            lines: (0..hindex.slots().div_ceil(8))
                .map(|_| Line(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    #[inline]
    fn slot(&self, s: usize) -> &AtomicU64 {
        &self.lines[s / 8].0[s % 8]
    }

    /// Step 3 of §4.1.2: counts the `len` bytes buffered at `lsn`, split
    /// over the ranges they cover. The owner only (a second writer would
    /// lose counts: the worker would wait for ever, never pass a hole).
    /// Release: a worker that sees the range full sees the copy and the
    /// node enqueued before this.
    #[inline]
    pub(crate) fn add(&self, hindex: &HIndex, lsn: u64, len: u64) {
        let end = lsn + len;
        let mut at = lsn;
        while at < end {
            let r = hindex.range_of(at);
            let upto = end.min(hindex.range_start(r + 1));
            let slot = self.slot(hindex.slot(r));
            // Only this thread writes the slot: a load and a store, no
            // locked instruction.
            slot.store(slot.load(Relaxed) + (upto - at), Release);
            at = upto;
        }
    }

    /// Slot `s`'s count, Acquire: pairs with the owner's Release stores.
    #[inline]
    fn get(&self, s: usize) -> u64 {
        self.slot(s).load(Acquire)
    }
}

/// The worker's side of the index: the counts of the lists it forgot
/// (retired, every byte consumed) and the start's credit, plus the sums
/// over the lists it tracks.
pub(crate) struct Tally {
    folded: Box<[u64]>,
}

impl Tally {
    /// A tally for `hindex`, holding its start's credit.
    pub(crate) fn new(hindex: &HIndex) -> Self {
        let mut folded = vec![0; hindex.slots()].into_boxed_slice();
        folded[0] = hindex.credit;
        Self { folded }
    }

    /// The count of range `r`'s slot: folded plus every list's in `lists`.
    #[inline]
    fn counted(&self, hindex: &HIndex, lists: &[Arc<GList>], r: u64) -> u64 {
        let s = hindex.slot(r);
        lists
            .iter()
            .fold(self.folded[s], |sum, list| sum + list.counts().get(s))
    }

    /// Whether every byte of range `r` has been buffered (Algorithm 1 line
    /// 5's `bytes == 2^H`), as far as the lists in `lists` (every list
    /// not yet folded in) show it.
    #[inline]
    pub(crate) fn is_full(&self, hindex: &HIndex, lists: &[Arc<GList>], r: u64) -> bool {
        self.counted(hindex, lists, r) == (hindex.lap(r) + 1) << hindex.shift
    }

    /// The bytes of range `r` counted so far by the lists in `lists` and
    /// those folded in. Exact for those lists while SBL is inside range
    /// `r` (no range of a later lap receives bytes then; module docs).
    #[inline]
    pub(crate) fn buffered(&self, hindex: &HIndex, lists: &[Arc<GList>], r: u64) -> u64 {
        self.counted(hindex, lists, r)
            .wrapping_sub(hindex.lap(r) << hindex.shift)
    }

    /// Adds a list's final counts, in the step that stops summing it (a
    /// retired list whose owner's last count the worker has seen).
    pub(crate) fn fold(&mut self, counts: &ThreadCounts) {
        for (s, folded) in self.folded.iter_mut().enumerate() {
            *folded += counts.get(s);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// `n` lists of `hindex`'s log.
    fn lists(hindex: &HIndex, n: usize) -> Vec<Arc<GList>> {
        (0..n).map(|_| Arc::new(GList::new(0, hindex))).collect()
    }

    #[test]
    fn full_only_when_every_byte_counted_across_laps() {
        // 8-byte hops over a 16-byte ring: 3 slots, rounded up to 4.
        let h = HIndex::new(0, 3, 16);
        assert_eq!(h.slots(), 4);
        let l = lists(&h, 2);
        let (a, b) = (l[0].counts(), l[1].counts());
        let t = Tally::new(&h);
        assert!(!t.is_full(&h, &l, 0));
        a.add(&h, 0, 5);
        assert!(!t.is_full(&h, &l, 0));
        b.add(&h, 5, 6); // straddles into range 1
        assert!(t.is_full(&h, &l, 0));
        assert!(!t.is_full(&h, &l, 1));
        a.add(&h, 11, 21); // fills ranges 1, 2 and 3
        assert!((1..4).all(|r| t.is_full(&h, &l, r)));
        // Range 4 reuses slot 0 in lap 1: full needs 16 there.
        assert!(!t.is_full(&h, &l, 4));
        assert_eq!(t.buffered(&h, &l, 4), 0);
        b.add(&h, 32, 3);
        assert_eq!(t.buffered(&h, &l, 4), 3);
        a.add(&h, 35, 5);
        assert!(t.is_full(&h, &l, 4));
        // Counting only one of the lists is never full: each holds part.
        assert!(!t.is_full(&h, &l[..1], 4) && !t.is_full(&h, &l[1..], 4));
    }

    #[test]
    fn start_mid_range_is_credited() {
        let h = HIndex::new(21, 3, 16);
        assert_eq!(h.range_of(21), 0);
        assert_eq!(h.range_start(1), 24);
        let l = lists(&h, 1);
        let t = Tally::new(&h);
        assert!(!t.is_full(&h, &l, 0));
        l[0].counts().add(&h, 21, 3);
        assert!(t.is_full(&h, &l, 0));
    }

    #[test]
    fn a_folded_list_counts_once() {
        let h = HIndex::new(0, 3, 16);
        let l = lists(&h, 2);
        let mut t = Tally::new(&h);
        l[0].counts().add(&h, 0, 3);
        l[1].counts().add(&h, 3, 10);
        // The worker drops list 0 and folds its counts in one step.
        t.fold(l[0].counts());
        let kept = &l[1..];
        assert!(t.is_full(&h, kept, 0));
        assert_eq!(t.buffered(&h, kept, 1), 5);
        // Summing it as well would count its bytes twice.
        assert!(!t.is_full(&h, &l, 0), "a folded list summed again");
    }
}
