//! A node's keys, column by column: for each slot a length code, an 8-byte
//! head and a tail word (see `key`). The columns lie apart in the node —
//! codes and heads in its first cache lines, tails in its last — so a
//! lookup reads the codes and heads it searches and, for keys of at most 8
//! bytes, never the tails. `Keys` is a view over the three, under the
//! node's version (optimistic reads) or lock (writes).

use std::cmp::Ordering as KeyOrder;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::key::{compare_coded, length_code, make_tail, Probe};

/// The key columns of one node.
#[derive(Clone, Copy)]
pub(super) struct Keys<'a> {
    pub(super) codes: &'a [AtomicU8],
    pub(super) heads: &'a [AtomicU64],
    pub(super) tails: &'a [AtomicU64],
}

impl Keys<'_> {
    /// The head of slot `i`.
    #[inline]
    pub(super) fn head(&self, i: usize) -> u64 {
        self.heads[i].load(Ordering::Relaxed)
    }

    /// The tail word of slot `i`.
    #[inline]
    pub(super) fn tail(&self, i: usize) -> u64 {
        self.tails[i].load(Ordering::Relaxed)
    }

    /// Orders `probe` against the key in slot `i`, reading the tail only
    /// when the heads tie and a key is long.
    #[inline]
    pub(super) fn compare_at(&self, i: usize, probe: &Probe<'_>) -> KeyOrder {
        let head = self.head(i);
        let code = self.codes[i].load(Ordering::Relaxed);
        // SAFETY: long-key copies are retired through epochs and callers
        // are epoch-protected (or hold the node's lock), so even a stale
        // tail points to live memory; a torn read is caught by the node's
        // version check.
        unsafe { compare_coded(probe, head, code, || self.tail(i)) }
    }

    /// First slot in `[0, count)` whose key is `>= probe` (or `> probe`
    /// when `strict`). Reads are optimistic: the caller validates the
    /// node's version.
    #[inline]
    pub(super) fn search(&self, count: usize, probe: &Probe<'_>, strict: bool) -> usize {
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let order = self.compare_at(mid, probe);
            let go_right = if strict { order.is_ge() } else { order.is_gt() };
            if go_right {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Whether slot `slot` (`< count`) holds exactly `probe`.
    #[inline]
    pub(super) fn holds(&self, slot: usize, count: usize, probe: &Probe<'_>) -> bool {
        slot < count && self.compare_at(slot, probe).is_eq()
    }

    /// Stores the key `(head, tail)` in slot `i` (under the node's lock).
    #[inline]
    pub(super) fn store(&self, i: usize, head: u64, tail: u64) {
        self.heads[i].store(head, Ordering::Relaxed);
        self.tails[i].store(tail, Ordering::Relaxed);
        self.codes[i].store(length_code(tail), Ordering::Relaxed);
    }

    /// Stores `probe` in slot `i`, copying its bytes out when it is long.
    #[inline]
    pub(super) fn store_probe(&self, i: usize, probe: &Probe<'_>) {
        self.store(i, probe.head, make_tail(probe.bytes));
    }

    /// Moves slot `from` to slot `to` within the node.
    #[inline]
    pub(super) fn move_slot(&self, from: usize, to: usize) {
        self.copy_to(self, from, to);
    }

    /// Copies slot `from` of this node into slot `to` of `other`.
    #[inline]
    pub(super) fn copy_to(&self, other: &Keys<'_>, from: usize, to: usize) {
        other.heads[to].store(self.head(from), Ordering::Relaxed);
        other.tails[to].store(self.tail(from), Ordering::Relaxed);
        other.codes[to].store(self.codes[from].load(Ordering::Relaxed), Ordering::Relaxed);
    }
}
