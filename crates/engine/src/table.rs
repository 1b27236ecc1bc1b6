//! Tables: a name and an ordered concurrent index from byte-string keys to
//! records. The index is scc's `TreeIndex` (a B+-tree with lock-free reads),
//! the baseline a faster index is measured against (BENCHMARKS.md).
//! scc 3 is required: 2.x's range scans did not seek to their lower bound
//! (a limit-1 scan over 300 K keys took ~0.6 ms instead of ~1 µs).

use std::cmp::Ordering;
use std::ops::Bound;

use scc::{Comparable, Equivalent, Guard, TreeIndex};

use crate::record::RecordRef;

/// Identifies a table within one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableId(pub(crate) u32);

impl TableId {
    /// The table's number, as written in logs and checkpoints.
    pub fn as_u32(self) -> u32 {
        self.0
    }
}

/// The first 8 bytes of a key, big-endian, zero-padded: comparing heads
/// orders keys as their bytes do whenever the heads differ (a zero pad
/// sorts a shorter key first, as the prefix rule does), so most
/// comparisons are one integer compare instead of a `memcmp` through a
/// pointer — the trick Masstree builds on.
#[inline]
fn head_of(key: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = key.len().min(8);
    head[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(head)
}

/// An index key: the full bytes, with their head cached beside them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct IndexKey {
    head: u64,
    bytes: Box<[u8]>,
}

/// Orders two keys given their heads: when both fit in 8 bytes, equal heads
/// leave only the length to compare, so no `memcmp` is needed.
#[inline]
fn compare_keys(head: u64, bytes: &[u8], other_head: u64, other: &[u8]) -> Ordering {
    match head.cmp(&other_head) {
        Ordering::Equal if bytes.len() <= 8 && other.len() <= 8 => bytes.len().cmp(&other.len()),
        Ordering::Equal => bytes.cmp(other),
        unequal => unequal,
    }
}

impl Ord for IndexKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        compare_keys(self.head, &self.bytes, other.head, &other.bytes)
    }
}

impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A borrowed key to search for.
#[derive(Clone, Copy)]
struct Probe<'a> {
    head: u64,
    bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    #[inline]
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            head: head_of(bytes),
            bytes,
        }
    }
}

impl Equivalent<IndexKey> for Probe<'_> {
    #[inline]
    fn equivalent(&self, key: &IndexKey) -> bool {
        self.compare(key) == Ordering::Equal
    }
}

impl Comparable<IndexKey> for Probe<'_> {
    #[inline]
    fn compare(&self, key: &IndexKey) -> Ordering {
        compare_keys(self.head, self.bytes, key.head, &key.bytes)
    }
}

fn probe_bound(bound: Bound<&[u8]>) -> Bound<Probe<'_>> {
    match bound {
        Bound::Included(key) => Bound::Included(Probe::new(key)),
        Bound::Excluded(key) => Bound::Excluded(Probe::new(key)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(crate) struct Table {
    pub(crate) id: TableId,
    pub(crate) name: String,
    index: TreeIndex<IndexKey, RecordRef>,
}

impl Table {
    pub(crate) fn new(id: TableId, name: String) -> Self {
        Self {
            id,
            name,
            index: TreeIndex::new(),
        }
    }

    /// The record for `key`, if the index holds one.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<RecordRef> {
        let guard = Guard::new();
        self.index.peek(&Probe::new(key), &guard).copied()
    }

    /// Inserts `record` for `key`; false if the key is already indexed.
    pub(crate) fn insert(&self, key: &[u8], record: RecordRef) -> bool {
        self.index
            .insert_sync(
                IndexKey {
                    head: head_of(key),
                    bytes: key.into(),
                },
                record,
            )
            .is_ok()
    }

    /// Removes `key` if it still maps to `record`.
    pub(crate) fn remove_if_is(&self, key: &[u8], record: RecordRef) -> bool {
        self.index
            .remove_if_sync(&Probe::new(key), |current| *current == record)
    }

    /// Visits `(key, record)` in key order over `(lo, hi)` until `visit`
    /// returns false.
    pub(crate) fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut visit: impl FnMut(&[u8], RecordRef) -> bool,
    ) {
        let guard = Guard::new();
        for (key, record) in self.index.range((probe_bound(lo), probe_bound(hi)), &guard) {
            if !visit(&key.bytes, *record) {
                break;
            }
        }
    }

    /// Number of index entries (including absent records not yet unlinked).
    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Visits every record (teardown and checkpoints).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&[u8], RecordRef)) {
        let guard = Guard::new();
        for (key, record) in self.index.iter(&guard) {
            visit(&key.bytes, *record);
        }
    }
}
