//! Tables: a name and an ordered concurrent index from byte-string keys to
//! records. The index is scc's `TreeIndex` (a B+-tree with lock-free reads),
//! the baseline a faster index is measured against (BENCHMARKS.md).

use std::ops::Bound;

use scc::ebr::Guard;
use scc::TreeIndex;

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

pub(crate) struct Table {
    pub(crate) id: TableId,
    pub(crate) name: String,
    index: TreeIndex<Box<[u8]>, RecordRef>,
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
        self.index.peek(key, &guard).copied()
    }

    /// Inserts `record` for `key`; false if the key is already indexed.
    pub(crate) fn insert(&self, key: &[u8], record: RecordRef) -> bool {
        self.index.insert(key.into(), record).is_ok()
    }

    /// Removes `key` if it still maps to `record`.
    pub(crate) fn remove_if_is(&self, key: &[u8], record: RecordRef) -> bool {
        self.index.remove_if(key, |current| *current == record)
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
        for (key, record) in self.index.range::<[u8], _>((lo, hi), &guard) {
            if !visit(key, *record) {
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
            visit(key, *record);
        }
    }
}
