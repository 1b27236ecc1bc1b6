//! The central ring log buffer (eleda §3.1: "one contiguous memory logically
//! divided into chunks by I/O unit size").
//!
//! LSN `l` lives at byte `l mod size`. The ring owns no synchronization: its
//! callers keep every access race-free by the pipeline's invariants, stated
//! on each method. Under `cfg(loom)` every byte is a loom cell, so the model
//! checker reports any access those invariants fail to order.

#[cfg(not(loom))]
use std::cell::UnsafeCell;

#[cfg(loom)]
use crate::sync::UnsafeCell;

/// A power-of-two ring of bytes addressed by LSN.
pub(crate) struct Ring {
    /// Mapped with huge pages asked for (`MADV_HUGEPAGE`): appends walk the
    /// whole ring (the paper's 32 MiB), and with 4 KiB pages every few
    /// entries would start on a page whose translation has left the TLB.
    #[cfg(not(loom))]
    bytes: epochdb_memory::Region<UnsafeCell<u8>>,
    #[cfg(loom)]
    bytes: Box<[UnsafeCell<u8>]>,
    mask: u64,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("size", &self.bytes.len())
            .finish()
    }
}

// SAFETY: the ring hands out access to disjoint byte ranges only through its
// unsafe methods, whose callers guarantee (by the LSN reservation and the
// SBL/SDL protocol) that no two threads access a byte concurrently unless
// both read.
unsafe impl Sync for Ring {}
// SAFETY: as above; the bytes are plain data.
unsafe impl Send for Ring {}

impl Ring {
    /// A zeroed ring of `size` bytes, a power of two.
    pub(crate) fn new(size: usize) -> Self {
        assert!(size.is_power_of_two(), "ring size must be a power of two");
        Self {
            #[cfg(not(loom))]
            bytes: epochdb_memory::Region::zeroed(size, epochdb_memory::HugePages::On),
            #[cfg(loom)]
            bytes: (0..size).map(|_| UnsafeCell::new(0)).collect(),
            mask: size as u64 - 1,
        }
    }

    /// The ring's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.mask + 1
    }

    /// Copies `data` to LSNs `[lsn, lsn + data.len())`, wrapping.
    ///
    /// # Safety
    ///
    /// The caller reserved those LSNs (so no other writer touches them) and
    /// the flusher is done with the bytes they overwrite: SDL ≥
    /// `lsn + data.len() - size` was observed with Acquire.
    pub(crate) unsafe fn write(&self, lsn: u64, data: &[u8]) {
        debug_assert!(data.len() as u64 <= self.size());
        let at = (lsn & self.mask) as usize;
        let first = data.len().min(self.bytes.len() - at);
        // SAFETY: forwarded from the caller; both pieces are in bounds.
        unsafe {
            self.copy_in(at, &data[..first]);
            self.copy_in(0, &data[first..]);
        }
    }

    /// Asks for the cache lines of LSNs `[lsn, lsn + len)` in a writable
    /// state, up to the ring's end (a hint: it reads and writes nothing).
    pub(crate) fn prefetch_for_write(&self, lsn: u64, len: usize) {
        #[cfg(not(loom))]
        {
            let at = (lsn & self.mask) as usize;
            let len = len.min(self.bytes.len() - at);
            epochdb_memory::prefetch_lines_for_write(
                self.bytes.as_ptr().wrapping_add(at),
                len.div_ceil(64),
            );
        }
        #[cfg(loom)]
        let _ = (lsn, len);
    }

    /// Calls `f` with the bytes of LSNs `[lsn, lsn + len)` in at most two
    /// pieces (one where the range wraps).
    ///
    /// # Safety
    ///
    /// Every byte of the range was written and the write published to this
    /// thread (for the flusher: the range is below an SBL it loaded with
    /// Acquire), and no writer may reuse the range until the caller
    /// publishes that it is done (SDL).
    pub(crate) unsafe fn read(&self, lsn: u64, len: usize, mut f: impl FnMut(&[u8])) {
        debug_assert!(len as u64 <= self.size());
        let at = (lsn & self.mask) as usize;
        let first = len.min(self.bytes.len() - at);
        // SAFETY: forwarded from the caller.
        unsafe {
            self.with_slice(at, first, &mut f);
            if len > first {
                self.with_slice(0, len - first, &mut f);
            }
        }
    }

    /// The bytes of LSNs `[lsn, lsn + len)` in place, where they do not wrap
    /// (`None` if they do, and under loom, whose cells are not bytes). The
    /// ring's memory is page-aligned, so a range starting at a multiple of
    /// 4096 starts at a 4096-aligned address: a direct write takes it as is.
    ///
    /// # Safety
    ///
    /// As [`Ring::read`], for as long as the slice lives.
    pub(crate) unsafe fn in_place(&self, lsn: u64, len: usize) -> Option<&[u8]> {
        #[cfg(not(loom))]
        {
            let at = (lsn & self.mask) as usize;
            if len > self.bytes.len() - at {
                return None;
            }
            let cells = &self.bytes[at..at + len];
            // SAFETY: contiguous bytes as in `copy_in`; the caller
            // guarantees no one writes them while the slice lives.
            Some(unsafe {
                std::slice::from_raw_parts(UnsafeCell::raw_get(cells.as_ptr()) as *const u8, len)
            })
        }
        #[cfg(loom)]
        {
            let _ = (lsn, len);
            None
        }
    }

    #[cfg(not(loom))]
    unsafe fn copy_in(&self, at: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let cells = &self.bytes[at..at + data.len()];
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8`, so the cells are
        // `data.len()` contiguous bytes; the caller guarantees nobody else
        // accesses them now.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                UnsafeCell::raw_get(cells.as_ptr()),
                data.len(),
            );
        }
    }

    #[cfg(not(loom))]
    unsafe fn with_slice(&self, at: usize, len: usize, f: &mut impl FnMut(&[u8])) {
        let cells = &self.bytes[at..at + len];
        // SAFETY: contiguous bytes as in `copy_in`; the caller guarantees no
        // one writes them while the slice lives.
        let slice = unsafe {
            std::slice::from_raw_parts(UnsafeCell::raw_get(cells.as_ptr()) as *const u8, len)
        };
        f(slice);
    }

    #[cfg(loom)]
    unsafe fn copy_in(&self, at: usize, data: &[u8]) {
        for (cell, &b) in self.bytes[at..at + data.len()].iter().zip(data) {
            // SAFETY: loom checks the caller's claim that this is race-free.
            cell.with_mut(|p| unsafe { *p = b });
        }
    }

    #[cfg(loom)]
    unsafe fn with_slice(&self, at: usize, len: usize, f: &mut impl FnMut(&[u8])) {
        let copy: Vec<u8> = self.bytes[at..at + len]
            .iter()
            // SAFETY: loom checks the caller's claim that this is race-free.
            .map(|cell| cell.with(|p| unsafe { *p }))
            .collect();
        f(&copy);
    }
}
