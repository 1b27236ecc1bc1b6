//! A hash index beside the B+-tree for point reads of short keys.
//!
//! Why: a point read through the tree pays one dependent cache miss per
//! level below the cached top (BENCHMARKS.md, "The engine against Silo":
//! the descent was 55% of a 10 M-key YCSB run); a hash probe pays about
//! one. The tree stays the index of record — scans, phantom protection
//! (leaf versions for missing keys) and longer keys all go through it —
//! and this map holds, for every key of at most [`MAX_KEY`] bytes, the
//! same record word the tree holds.
//!
//! The invariant that makes a hit as good as a tree lookup: at every
//! instant the map is a subset of the tree. [`crate::table::Table`] puts an
//! entry here only while holding the record's lock and knowing the record
//! is in the tree (just inserted — a fresh placeholder is born locked — or
//! found there by a read that missed here, and not marked unlinked), and
//! removes it before the tree removal, also under the lock (every unlink
//! locks the record first), so a fill and a removal of the same record
//! cannot interleave. A miss falls back to the tree, which also yields the
//! leaf version for a missing key.
//!
//! Filled two ways: by inserts, and by reads that missed here but found
//! the key in the tree (records loaded by recovery, which skips the map so
//! that it runs at the speed of the tree: a map insert costs about 400 ns,
//! three times a tree insert).
//!
//! The map is scc's `HashIndex`: lock-free reads, its entries reclaimed
//! through its own epochs. It holds only keys and record words; the
//! records themselves are still reclaimed through ours.

use std::hash::{BuildHasher, Hash, Hasher};

/// Longest key the map holds; longer keys are read through the tree only.
pub(crate) const MAX_KEY: usize = 15;

/// A key of at most [`MAX_KEY`] bytes, zero-padded, its length in the last
/// byte, so equal keys are equal words and different lengths differ.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ShortKey([u64; 2]);

impl ShortKey {
    #[inline]
    fn new(key: &[u8]) -> Option<Self> {
        if key.len() > MAX_KEY {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..key.len()].copy_from_slice(key);
        bytes[15] = key.len() as u8;
        let (lo, hi) = bytes.split_at(8);
        Some(Self([
            u64::from_le_bytes(lo.try_into().expect("8 bytes")),
            u64::from_le_bytes(hi.try_into().expect("8 bytes")),
        ]))
    }
}

impl Hash for ShortKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(
            self.0[0]
                ^ self.0[1]
                    .rotate_left(32)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
    }
}

/// Hashes one word with MurmurHash3's 64-bit finalizer: every input bit
/// reaches every output bit, which scc needs (it takes bucket and tag bits
/// from different ends of the hash).
#[derive(Clone, Copy, Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.0 = self.0.rotate_left(5) ^ word;
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
}

#[derive(Clone, Copy, Default)]
struct BuildMixHasher;

impl BuildHasher for BuildMixHasher {
    type Hasher = MixHasher;
    #[inline]
    fn build_hasher(&self) -> MixHasher {
        MixHasher::default()
    }
}

/// Short key → record word, kept a subset of the tree by the caller (see
/// the module comment).
pub(crate) struct PointIndex {
    map: scc::HashIndex<ShortKey, u64, BuildMixHasher>,
}

impl PointIndex {
    pub(crate) fn new() -> Self {
        Self {
            map: scc::HashIndex::with_hasher(BuildMixHasher),
        }
    }

    /// The word for `key`, if the map holds it.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u64> {
        let key = ShortKey::new(key)?;
        self.map.peek_with(&key, |_, word| *word)
    }

    /// Whether `key` is short enough for the map.
    #[inline]
    pub(crate) fn covers(key: &[u8]) -> bool {
        key.len() <= MAX_KEY
    }

    /// Adds `key → word` unless the key is there (a no-op for a long key).
    /// The caller holds the record's lock, and the record is in the tree
    /// under `key` — just inserted, or found there and not unlinked — so
    /// an entry already there can only be this same word, put by a
    /// concurrent fill.
    #[inline]
    pub(crate) fn insert(&self, key: &[u8], word: u64) {
        if let Some(key) = ShortKey::new(key) {
            let _ = self.map.insert_sync(key, word);
        }
    }

    /// Removes `key` if it maps to `word`. The caller holds that record's
    /// lock and removes it from the tree next.
    #[inline]
    pub(crate) fn remove_if_is(&self, key: &[u8], word: u64) {
        if let Some(key) = ShortKey::new(key) {
            self.map.remove_if_sync(&key, |current| *current == word);
        }
    }

    /// Entries held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_distinct_by_content_and_length() {
        assert!(ShortKey::new(&[0u8; 16]).is_none());
        assert!(ShortKey::new(&[7u8; 15]).is_some());
        assert!(ShortKey::new(b"") != ShortKey::new(&[0]));
        assert!(ShortKey::new(&[0]) != ShortKey::new(&[0, 0]));
        assert!(ShortKey::new(b"abc") == ShortKey::new(b"abc"));
        assert!(ShortKey::new(b"abcdefgh1") != ShortKey::new(b"abcdefgh2"));
    }

    #[test]
    fn holds_short_keys_only_and_removes_by_word() {
        let index = PointIndex::new();
        index.insert(b"k1", 10);
        index.insert(&[1u8; 16], 11);
        assert_eq!(index.get(b"k1"), Some(10));
        assert_eq!(index.get(&[1u8; 16]), None, "long keys stay in the tree");
        assert_eq!(index.len(), 1);
        index.remove_if_is(b"k1", 99);
        assert_eq!(index.get(b"k1"), Some(10), "another record's word keeps it");
        index.remove_if_is(b"k1", 10);
        assert_eq!(index.get(b"k1"), None);
    }
}
