//! A transaction's byte arena: values it read (copied out of records) and
//! values it will write. Bump allocation in chunks that never move, so a
//! `&[u8]` handed to the transaction body stays valid until the arena is
//! reset at the end of the transaction.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Bytes per chunk (larger values get a chunk of their own size).
const CHUNK_BYTES: usize = 64 * 1024;

/// Bytes stored in an [`Arena`]: a raw span, valid until the arena resets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bytes {
    ptr: NonNull<u8>,
    len: usize,
}

impl Bytes {
    /// The bytes.
    ///
    /// # Safety
    /// The arena they came from must not have been reset or dropped since,
    /// for all of `'a`.
    #[inline]
    pub(crate) unsafe fn as_slice<'a>(self) -> &'a [u8] {
        // SAFETY: forwarded; the span was initialised when it was made.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn len(self) -> usize {
        self.len
    }
}

/// The arena. Its memory is only ever reached through raw pointers, so
/// slices handed out may coexist with later allocations.
#[derive(Default)]
pub(crate) struct Arena {
    chunks: Vec<(NonNull<u8>, usize)>,
    current: usize,
    used: usize,
}

// SAFETY: the arena owns its chunks exclusively; moving it between threads
// between transactions moves that ownership.
unsafe impl Send for Arena {}

impl Arena {
    /// Reserves `len` bytes and returns a pointer to them (uninitialised).
    #[inline]
    pub(crate) fn reserve(&mut self, len: usize) -> NonNull<u8> {
        loop {
            if let Some(&(base, capacity)) = self.chunks.get(self.current) {
                if self.used + len <= capacity {
                    // SAFETY: within the chunk's allocation.
                    let ptr = unsafe { base.as_ptr().add(self.used) };
                    self.used += len;
                    return NonNull::new(ptr).expect("chunk pointers are non-null");
                }
                if self.current + 1 < self.chunks.len() {
                    self.current += 1;
                    self.used = 0;
                    continue;
                }
            }
            let capacity = CHUNK_BYTES.max(len);
            let layout = Layout::from_size_align(capacity, 8).expect("chunk layout");
            // SAFETY: non-zero size.
            let Some(base) = NonNull::new(unsafe { alloc(layout) }) else {
                handle_alloc_error(layout)
            };
            self.chunks.push((base, capacity));
            self.current = self.chunks.len() - 1;
            self.used = 0;
        }
    }

    /// Copies `bytes` into the arena.
    #[inline]
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Bytes {
        let ptr = self.reserve(bytes.len());
        // SAFETY: `ptr` has room for `bytes.len()` bytes and does not
        // overlap `bytes` (fresh arena space).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr(), bytes.len()) };
        Bytes {
            ptr,
            len: bytes.len(),
        }
    }

    /// Wraps `len` bytes just written at `ptr` (from [`Arena::reserve`]).
    #[inline]
    pub(crate) fn span(ptr: NonNull<u8>, len: usize) -> Bytes {
        Bytes { ptr, len }
    }

    /// Forgets every allocation; chunks are kept for the next transaction.
    pub(crate) fn reset(&mut self) {
        self.current = 0;
        self.used = 0;
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for &(base, capacity) in &self.chunks {
            let layout = Layout::from_size_align(capacity, 8).expect("chunk layout");
            // SAFETY: allocated in `reserve` with this layout, freed once.
            unsafe { dealloc(base.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_survive_later_allocations() {
        let mut arena = Arena::default();
        let first = arena.copy(b"hello");
        let big = vec![7u8; CHUNK_BYTES * 2];
        let second = arena.copy(&big);
        for i in 0..10_000u32 {
            arena.copy(&i.to_le_bytes());
        }
        // SAFETY: the arena has not been reset.
        unsafe {
            assert_eq!(first.as_slice(), b"hello");
            assert_eq!(second.as_slice(), &big[..]);
        }
        arena.reset();
        let again = arena.copy(b"x");
        // SAFETY: as above, after the reset.
        assert_eq!(unsafe { again.as_slice() }, b"x");
    }
}
