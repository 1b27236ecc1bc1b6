//! Log sequence numbers.
//!
//! An LSN is a byte offset in the one logical log stream (eleda §4.1.2: "the
//! allocated LSN is used as an offset inside the central log buffer"): the
//! entry reserved at LSN `l` with `n` bytes occupies `[l, l + n)`, and the
//! next entry starts at `l + n`. LSNs are never reused, across files and
//! across restarts.

use std::fmt;

/// A log sequence number: a byte offset in the logical log.
pub type Lsn = u64;

/// The LSNs `[start, end)` one log entry occupies. `end` is the LSN the
/// entry's durability is judged by: the entry is durable once SDL ≥ `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LsnRange {
    /// The first byte of the entry.
    pub start: Lsn,
    /// One past the last byte of the entry.
    pub end: Lsn,
}

impl LsnRange {
    /// The entry's length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the range is empty (never true of an entry).
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

impl fmt::Display for LsnRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}
