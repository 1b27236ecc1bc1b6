//! The user's update logic, FASTER's `Functions`: how an RMW builds a value
//! for a new key, how it updates a value in place in the mutable region, and
//! how it copies an immutable value to the tail (cpr-sigmod19 §5.1).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

/// A value in the mutable region, which other threads may read and update
/// at the same time: a run of atomic words, so concurrent access is never a
/// data race. A multi-word value may be seen torn by a concurrent reader of
/// an in-place update; single-word (8-byte) values never are.
#[derive(Debug)]
pub struct Value<'a> {
    words: &'a [AtomicU64],
    len: usize,
}

impl<'a> Value<'a> {
    #[inline]
    pub(crate) fn new(words: &'a [AtomicU64], len: usize) -> Self {
        debug_assert!(len <= words.len() * 8);
        Value { words, len }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value's `i`-th 8-byte word (little-endian bytes), as an atomic,
    /// for updates such as `fetch_add`.
    #[inline]
    pub fn word(&self, i: usize) -> &AtomicU64 {
        &self.words[i]
    }

    /// Copies the value's bytes into `out` (replacing its contents).
    #[inline]
    pub fn read_into(&self, out: &mut Vec<u8>) {
        out.clear();
        if let ([word], 8) = (self.words, self.len) {
            // The fixed 8-byte-value fast path: one load, one copy.
            out.extend_from_slice(&word.load(Relaxed).to_le_bytes());
            return;
        }
        for word in self.words {
            out.extend_from_slice(&word.load(Relaxed).to_le_bytes());
        }
        out.truncate(self.len);
    }

    /// Copies the value's bytes into `out`, which must have its length.
    #[inline]
    pub(crate) fn read_to_slice(&self, out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.len);
        if let (Ok(one), [word]) = (<&mut [u8; 8]>::try_from(&mut *out), self.words) {
            // The fixed 8-byte value: one load.
            *one = word.load(Relaxed).to_le_bytes();
            return;
        }
        for (chunk, word) in out.chunks_mut(8).zip(self.words) {
            chunk.copy_from_slice(&word.load(Relaxed).to_le_bytes()[..chunk.len()]);
        }
    }

    /// Overwrites the value with `bytes`, which must have the value's length.
    pub fn write(&self, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.len, "an in-place write keeps the length");
        write_words(self.words, bytes);
    }
}

/// Stores `bytes` into `words`, zero-padding the last word.
#[inline]
pub(crate) fn write_words(words: &[AtomicU64], bytes: &[u8]) {
    if let (Ok(one), [word]) = (<[u8; 8]>::try_from(bytes), words) {
        // The fixed 8-byte key or value: one store.
        word.store(u64::from_le_bytes(one), Relaxed);
        return;
    }
    for (word, chunk) in words.iter().zip(bytes.chunks(8)) {
        let mut buf = [0u8; 8];
        buf[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(buf), Relaxed);
    }
}

/// How read-modify-write builds and updates values (FASTER's
/// `InitialUpdater`, `InPlaceUpdater` and `CopyUpdater`).
pub trait Functions: Send + Sync + 'static {
    /// The RMW's argument.
    type Input: Send + 'static;

    /// Length of the value an RMW creates for an absent key.
    fn initial_len(&self, input: &Self::Input) -> usize;

    /// Fills the value (of [`Functions::initial_len`] bytes, zeroed) for an
    /// absent key.
    fn initial(&self, input: &Self::Input, value: &mut [u8]);

    /// Updates a value in the mutable region in place, concurrently with
    /// other threads. Return `false` to have the store copy it instead (for
    /// example because the new value would not fit): the store then seals
    /// the record and waits for in-place updates already running on it, so
    /// the copy misses none of them.
    fn in_place(&self, value: &Value<'_>, input: &Self::Input) -> bool;

    /// Length of the value an RMW copies from `old`.
    fn copy_len(&self, old: &[u8], input: &Self::Input) -> usize;

    /// Fills `value` (of [`Functions::copy_len`] bytes) from the immutable
    /// `old` value.
    fn copy(&self, old: &[u8], input: &Self::Input, value: &mut [u8]);
}

/// Counters: 8-byte little-endian `u64` values to which an RMW adds its
/// input (FASTER's sum-store). The in-place update is one atomic
/// `fetch_add`, so concurrent increments are never lost.
#[derive(Debug, Default, Clone, Copy)]
pub struct AddU64;

impl Functions for AddU64 {
    type Input = u64;

    fn initial_len(&self, _input: &u64) -> usize {
        8
    }

    fn initial(&self, input: &u64, value: &mut [u8]) {
        value.copy_from_slice(&input.to_le_bytes());
    }

    fn in_place(&self, value: &Value<'_>, input: &u64) -> bool {
        if value.len() != 8 {
            return false;
        }
        value.word(0).fetch_add(*input, Relaxed);
        true
    }

    fn copy_len(&self, _old: &[u8], _input: &u64) -> usize {
        8
    }

    fn copy(&self, old: &[u8], input: &u64, value: &mut [u8]) {
        let old = old
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        value.copy_from_slice(&old.wrapping_add(*input).to_le_bytes());
    }
}

/// [`AddU64`] whose in-place updater declines whenever the counter is a
/// multiple of 16, so that the store seals and copies mutable records now
/// and then (`Session::seal_and_settle`); the sums come out the same. The
/// sum-store tests and `epochdb crashtest --store hybridlog` use it to run
/// that path under concurrency, checkpoints and crashes.
#[derive(Debug, Default, Clone, Copy)]
pub struct AddU64Declining;

impl Functions for AddU64Declining {
    type Input = u64;

    fn initial_len(&self, input: &u64) -> usize {
        AddU64.initial_len(input)
    }

    fn initial(&self, input: &u64, value: &mut [u8]) {
        AddU64.initial(input, value);
    }

    fn in_place(&self, value: &Value<'_>, input: &u64) -> bool {
        if value.len() == 8 && value.word(0).load(Relaxed).is_multiple_of(16) {
            return false;
        }
        AddU64.in_place(value, input)
    }

    fn copy_len(&self, old: &[u8], input: &u64) -> usize {
        AddU64.copy_len(old, input)
    }

    fn copy(&self, old: &[u8], input: &u64, value: &mut [u8]) {
        AddU64.copy(old, input, value);
    }
}
