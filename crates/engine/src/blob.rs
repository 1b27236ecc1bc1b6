//! Immutable, length-prefixed byte blocks behind a thin pointer: the
//! out-of-line copies of index keys longer than 8 bytes. Freed through the
//! epoch framework once removed (readers may still hold them).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::{self, NonNull};

/// Header of a blob; `len` bytes follow it.
#[repr(C)]
pub(crate) struct Blob {
    len: usize,
}

const HEADER: usize = std::mem::size_of::<Blob>();

fn layout(len: usize) -> Layout {
    Layout::from_size_align(HEADER + len, std::mem::align_of::<Blob>())
        .expect("blob too large for one allocation")
}

/// Allocates a blob holding a copy of `bytes` (8-aligned).
pub(crate) fn new_blob(bytes: &[u8]) -> NonNull<Blob> {
    let layout = layout(bytes.len());
    // SAFETY: the layout has non-zero size (it includes the header).
    let raw = unsafe { alloc(layout) }.cast::<Blob>();
    let Some(blob) = NonNull::new(raw) else {
        handle_alloc_error(layout)
    };
    // SAFETY: `blob` is a fresh allocation of HEADER + len bytes, aligned
    // for Blob; we initialise the header, then the bytes.
    unsafe {
        blob.as_ptr().write(Blob { len: bytes.len() });
        let data = blob.as_ptr().cast::<u8>().add(HEADER);
        ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
    }
    blob
}

/// The bytes of a blob.
///
/// # Safety
/// `blob` must be a live blob from [`new_blob`], and stay live for `'a`.
#[inline]
pub(crate) unsafe fn blob_bytes<'a>(blob: *const Blob) -> &'a [u8] {
    // SAFETY: per the contract, the header and `len` bytes are initialised.
    unsafe {
        let len = (*blob).len;
        std::slice::from_raw_parts(blob.cast::<u8>().add(HEADER), len)
    }
}

/// Frees a blob (type-erased, for the epoch framework).
///
/// # Safety
/// `blob` must come from [`new_blob`], be unreachable, and be freed once.
pub(crate) unsafe fn free_blob(blob: *mut ()) {
    let blob = blob.cast::<Blob>();
    // SAFETY: per the contract the blob is live and ours to free; its
    // layout is recomputed from the header.
    unsafe { dealloc(blob.cast(), layout((*blob).len)) };
}
