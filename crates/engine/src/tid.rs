//! The 64-bit TID word every record carries (silor-osdi14 §2; Silo §4.2).
//!
//! ```text
//!  63            24 23                 4   3        2      1      0
//! +----------------+--------------------+--------+------+------+------+
//! |  epoch (40 b)  | sequence (20 bits) | unlinkd|absent|latest| lock |
//! +----------------+--------------------+--------+------+------+------+
//! ```
//!
//! Silo gives the epoch 32 bits, which its 40 ms epochs take 5 years to
//! exhaust; a server answering durable writes wants 1–10 ms epochs, which
//! would exhaust 32 bits in 50–500 days. Forty bits last 34 years at 1 ms.
//! The sequence keeps 2^20 TIDs per epoch; a committer that exhausts them
//! waits for the next epoch ([`commit_tid`] returns `None`).
//!
//! The TID proper is the word with the four status bits cleared, so TIDs
//! order first by epoch, then by sequence. `unlinked` marks a record that has
//! been removed from its index: a transaction holding a pointer to it must
//! look the key up again.

/// Status bit: the record is locked by a committing (or inserting) writer.
pub(crate) const LOCK_BIT: u64 = 1 << 0;
/// Status bit: this is the latest version (always set; Silo's snapshots use
/// older versions, which epochdb does not keep).
pub(crate) const LATEST_BIT: u64 = 1 << 1;
/// Status bit: the key has no value (a deleted record or an insert placeholder).
pub(crate) const ABSENT_BIT: u64 = 1 << 2;
/// Status bit: the record was removed from its index and will be reclaimed.
pub(crate) const UNLINKED_BIT: u64 = 1 << 3;
/// All status bits.
pub(crate) const STATUS_MASK: u64 = 0xF;

const EPOCH_SHIFT: u32 = 24;
/// Epochs must stay below this to fit the TID word.
pub(crate) const EPOCH_LIMIT: u64 = 1 << (64 - EPOCH_SHIFT);
const SEQUENCE_UNIT: u64 = 1 << 4;
const SEQUENCE_MASK: u64 = ((1u64 << EPOCH_SHIFT) - 1) & !STATUS_MASK;

/// A transaction ID: epoch in the high 32 bits, a sequence number below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid(u64);

impl Tid {
    /// The TID that precedes every committed one (loaded or initial data).
    pub const ZERO: Tid = Tid(0);

    /// The smallest TID of `epoch`.
    #[inline]
    pub fn first_of_epoch(epoch: u64) -> Tid {
        assert!(epoch < EPOCH_LIMIT, "epoch {epoch} overflows the TID word");
        Tid(epoch << EPOCH_SHIFT)
    }

    /// Rebuilds a TID from its raw form (as written to a log).
    #[inline]
    pub fn from_raw(raw: u64) -> Tid {
        Tid(raw & !STATUS_MASK)
    }

    /// The raw 64-bit form (status bits clear).
    #[inline]
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The epoch this TID belongs to.
    #[inline]
    pub fn epoch(self) -> u64 {
        self.0 >> EPOCH_SHIFT
    }

    /// The sequence number within the epoch.
    #[inline]
    pub fn sequence(self) -> u64 {
        (self.0 & SEQUENCE_MASK) / SEQUENCE_UNIT
    }

    /// The next TID in the same epoch, or `None` when the epoch's sequence
    /// space is exhausted (the committer must wait for the next epoch).
    #[inline]
    pub(crate) fn next_in_epoch(self) -> Option<Tid> {
        if self.0 & SEQUENCE_MASK == SEQUENCE_MASK {
            None
        } else {
            Some(Tid(self.0 + SEQUENCE_UNIT))
        }
    }
}

/// The TID part of a record's word.
#[inline]
pub(crate) fn tid_of(word: u64) -> Tid {
    Tid(word & !STATUS_MASK)
}

/// Computes a committing transaction's TID: (a) greater than every TID it
/// read or wrote (`max_observed`), (b) greater than the worker's last TID,
/// (c) in epoch `epoch` (silor-osdi14 §2.1). `None` if (a)–(c) cannot all
/// hold in this epoch's sequence space.
#[inline]
pub(crate) fn commit_tid(max_observed: Tid, last: Tid, epoch: u64) -> Option<Tid> {
    let floor = max_observed.max(last);
    let first = Tid::first_of_epoch(epoch);
    debug_assert!(
        floor.epoch() <= epoch,
        "observed TID {floor:?} is from a future epoch {epoch}"
    );
    if floor < first {
        Some(first)
    } else {
        floor.next_in_epoch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_tid_follows_rules_a_to_c() {
        let e5 = Tid::first_of_epoch(5);
        let t = commit_tid(Tid::ZERO, Tid::ZERO, 5).unwrap();
        assert_eq!(t, e5);
        let read = e5.next_in_epoch().unwrap();
        let t = commit_tid(read, e5, 5).unwrap();
        assert!(t > read && t.epoch() == 5);
        let t2 = commit_tid(Tid::ZERO, t, 5).unwrap();
        assert!(t2 > t);
        let t3 = commit_tid(t2, t2, 6).unwrap();
        assert_eq!(t3, Tid::first_of_epoch(6));
    }

    #[test]
    fn status_bits_do_not_leak_into_tids() {
        let t = Tid::first_of_epoch(9).next_in_epoch().unwrap();
        let word = t.raw() | LOCK_BIT | ABSENT_BIT | LATEST_BIT;
        assert_eq!(tid_of(word), t);
        assert_eq!(Tid::from_raw(word), t);
    }

    #[test]
    fn sequence_exhaustion_is_reported() {
        let last = Tid((7 << EPOCH_SHIFT) | SEQUENCE_MASK);
        assert_eq!(last.next_in_epoch(), None);
        assert_eq!(commit_tid(last, Tid::ZERO, 7), None);
        assert_eq!(commit_tid(last, Tid::ZERO, 8), Some(Tid::first_of_epoch(8)));
    }
}
