//! The linear-scanning baseline of eleda §6.5.1 (Figure 21): "a bitmap with
//! each bit representing a single byte of a log buffer. A dedicated worker
//! simply scans a bitmap to advance SBL while database threads set bits
//! after copying their logs, except that database threads stop before they
//! outrun the dedicated worker thread" (the ring's backpressure).
//!
//! SBL must still end on an entry (§4.2.1), so the worker, having found
//! the set prefix, walks the entry headers inside it (each entry's frame
//! header carries its length) and stops at the last whole entry. It clears
//! the bits it passes before publishing SBL, so a writer of the next lap
//! (which waits for SDL, hence for this SBL) finds them clear.

use std::sync::atomic::Ordering::{Acquire, Release};

use epochdb_storage::BLOCK_HEADER_BYTES;

use crate::ring::Ring;
use crate::sync::AtomicU64;

/// One bit per byte of the ring.
pub(crate) struct Bitmap {
    words: Box<[AtomicU64]>,
    /// The ring's size minus one.
    mask: u64,
}

impl Bitmap {
    /// A clear bitmap for a ring of `ring_bytes` (a power of two ≥ 64).
    pub(crate) fn new(ring_bytes: u64) -> Self {
        assert!(ring_bytes.is_power_of_two() && ring_bytes >= 64);
        Self {
            words: (0..ring_bytes / 64).map(|_| AtomicU64::new(0)).collect(),
            mask: ring_bytes - 1,
        }
    }

    /// Sets the bits of LSNs `[lsn, lsn + len)` (Release: the copy before
    /// it is visible to a worker that sees the bits).
    pub(crate) fn set(&self, lsn: u64, len: u64) {
        self.apply(lsn, len, |word, bits| {
            word.fetch_or(bits, Release);
        });
    }

    /// Clears the bits of LSNs `[lsn, lsn + len)`.
    fn clear(&self, lsn: u64, len: u64) {
        self.apply(lsn, len, |word, bits| {
            word.fetch_and(!bits, Release);
        });
    }

    fn apply(&self, lsn: u64, len: u64, f: impl Fn(&AtomicU64, u64)) {
        let end = lsn + len;
        let mut at = lsn;
        while at < end {
            let pos = at & self.mask;
            let bit = pos % 64;
            let n = (64 - bit).min(end - at);
            let bits = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            f(&self.words[(pos / 64) as usize], bits);
            at += n;
        }
    }

    /// How many bytes from `lsn` on are set, scanning at most `limit`.
    fn set_run(&self, lsn: u64, limit: u64) -> u64 {
        let mut run = 0;
        while run < limit {
            let pos = (lsn + run) & self.mask;
            let bit = pos % 64;
            let word = self.words[(pos / 64) as usize].load(Acquire) >> bit;
            let ones = u64::from((!word).trailing_zeros()).min(64 - bit);
            run += ones;
            if ones < 64 - bit {
                break;
            }
        }
        run.min(limit)
    }
}

/// The scanning worker's private state.
pub(crate) struct BitmapWorker {
    sbl: u64,
    /// Bits in `[sbl, scanned)` are known set.
    scanned: u64,
}

impl BitmapWorker {
    /// A worker for a log whose SBL starts at `sbl`.
    pub(crate) fn new(sbl: u64) -> Self {
        Self { sbl, scanned: sbl }
    }

    /// Scans on from where it stopped, moves SBL over every whole entry in
    /// the set prefix, publishes it; returns whether it moved.
    pub(crate) fn advance(&mut self, bitmap: &Bitmap, ring: &Ring, sbl_out: &AtomicU64) -> bool {
        let limit = self.sbl + ring.size() - self.scanned;
        self.scanned += bitmap.set_run(self.scanned, limit);
        let before = self.sbl;
        while self.scanned - self.sbl >= BLOCK_HEADER_BYTES as u64 {
            let mut header = [0u8; BLOCK_HEADER_BYTES];
            let mut at = 0;
            // SAFETY: the header's bits are set, so its writer's copy
            // happened-before (Release/Acquire on the words); the bytes are
            // below no SBL yet, so no writer reuses them.
            unsafe {
                ring.read(self.sbl, BLOCK_HEADER_BYTES, |s| {
                    header[at..at + s.len()].copy_from_slice(s);
                    at += s.len();
                })
            };
            let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
            let entry = BLOCK_HEADER_BYTES as u64 + u64::from(len);
            if self.sbl + entry > self.scanned {
                break;
            }
            bitmap.clear(self.sbl, entry);
            self.sbl += entry;
        }
        if self.sbl == before {
            return false;
        }
        sbl_out.store(self.sbl, Release);
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn set_runs_wrap_and_clear() {
        let b = Bitmap::new(128);
        b.set(120, 20); // wraps to 12
        assert_eq!(b.set_run(120, 128), 20);
        assert_eq!(b.set_run(119, 128), 0);
        b.set(140, 100);
        assert_eq!(b.set_run(120, 128), 120);
        b.clear(120, 20);
        assert_eq!(b.set_run(120, 128), 0);
        assert_eq!(b.set_run(140, 128), 100);
    }
}
