//! How keys live in index nodes: an 8-byte head plus a tail word.
//!
//! The head is the key's first 8 bytes, big-endian and zero-padded, so
//! comparing heads orders keys as their bytes do whenever the heads differ
//! (Masstree's key-slice trick). The tail word holds the length of a key of
//! at most 8 bytes, tagged with its low bit (`len << 1 | 1`), or a pointer
//! to an out-of-line copy of a longer key (a length-prefixed block from
//! `blob::new_blob`, 8-aligned, so its low bit is 0). Short keys — most
//! keys of the benchmarks — need no allocation and compare as integers.

use std::cmp::Ordering;

use crate::blob::{blob_bytes, free_blob, new_blob};

/// The first 8 bytes of `key`, big-endian, zero-padded.
#[inline]
pub(crate) fn head_of(key: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = key.len().min(8);
    head[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(head)
}

/// A key being searched for.
#[derive(Clone, Copy)]
pub(crate) struct Probe<'a> {
    pub(crate) head: u64,
    pub(crate) bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self {
            head: head_of(bytes),
            bytes,
        }
    }
}

#[inline]
fn is_short(tail: u64) -> bool {
    tail & 1 == 1
}

/// Builds the tail word for `key`, allocating a copy when it is long.
pub(crate) fn make_tail(key: &[u8]) -> u64 {
    if key.len() <= 8 {
        ((key.len() as u64) << 1) | 1
    } else {
        new_blob(key).as_ptr() as u64
    }
}

/// Frees the out-of-line copy a tail word owns, if any.
///
/// # Safety
/// `tail` must come from [`make_tail`] and no thread may still read it.
pub(crate) unsafe fn free_tail(tail: u64) {
    if !is_short(tail) {
        // SAFETY: a long tail is a pointer from `new_blob`; forwarded.
        unsafe { free_blob(tail as *mut ()) };
    }
}

/// The pointer a long tail owns (for epoch retirement), or `None`.
pub(crate) fn tail_allocation(tail: u64) -> Option<*mut ()> {
    (!is_short(tail)).then_some(tail as *mut ())
}

/// The key bytes of a `(head, tail)` pair. Short keys are rebuilt into
/// `buffer`.
///
/// # Safety
/// A long `tail` must point to a live key copy for `'a` (callers are
/// epoch-protected; copies are retired through the epoch framework).
#[inline]
pub(crate) unsafe fn key_bytes(head: u64, tail: u64, buffer: &mut [u8; 8]) -> &[u8] {
    if is_short(tail) {
        *buffer = head.to_be_bytes();
        let len = ((tail >> 1) as usize).min(8);
        &buffer[..len]
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { blob_bytes(tail as *const crate::blob::Blob) }
    }
}

/// Orders `probe` against the stored key whose head is `head`, loading its
/// tail word only when the heads tie (one cache line less per step).
///
/// # Safety
/// As [`key_bytes`]: a long tail must point to a live key copy.
#[inline]
pub(crate) unsafe fn compare_lazy(
    probe: &Probe<'_>,
    head: u64,
    tail: impl FnOnce() -> u64,
) -> Ordering {
    match probe.head.cmp(&head) {
        // SAFETY: forwarded from the caller.
        Ordering::Equal => unsafe { compare(probe, head, tail()) },
        unequal => unequal,
    }
}

/// Orders `probe` against the stored key `(head, tail)`.
///
/// # Safety
/// As [`key_bytes`]: a long tail must point to a live key copy.
#[inline]
pub(crate) unsafe fn compare(probe: &Probe<'_>, head: u64, tail: u64) -> Ordering {
    match probe.head.cmp(&head) {
        Ordering::Equal => {
            if probe.bytes.len() <= 8 && is_short(tail) {
                probe.bytes.len().cmp(&((tail >> 1) as usize))
            } else {
                let mut buffer = [0u8; 8];
                // SAFETY: forwarded from the caller.
                let stored = unsafe { key_bytes(head, tail, &mut buffer) };
                probe.bytes.cmp(stored)
            }
        }
        unequal => unequal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(a: &[u8], b: &[u8]) -> Ordering {
        let tail = make_tail(b);
        // SAFETY: the tail is freshly made and freed below.
        let order = unsafe { compare(&Probe::new(a), head_of(b), tail) };
        // SAFETY: made above, read by no one else.
        unsafe { free_tail(tail) };
        order
    }

    #[test]
    fn orders_like_bytes() {
        let keys: [&[u8]; 10] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abd",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(cmp(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}
