//! Tables: a name and an ordered concurrent index from byte-string keys to
//! records (our OLC B+-tree, `crate::index`; BENCHMARKS.md compares it with
//! scc's `TreeIndex`, which it replaced).

use std::ops::Bound;

use epochdb_epoch::EpochHandle;

use crate::blob::free_blob;
use crate::index::Tree;
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
    index: Tree,
}

/// Index operations. Callers must be epoch-protected (workers are, for
/// their whole transaction and commit): the index frees removed keys'
/// memory through the epoch framework.
impl Table {
    pub(crate) fn new(id: TableId, name: String) -> Self {
        Self {
            id,
            name,
            index: Tree::new(),
        }
    }

    /// The record for `key`, if the index holds one.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8]) -> Option<RecordRef> {
        self.index.get(key).map(RecordRef::from_word)
    }

    /// Inserts `record` for `key`; false if the key is already indexed.
    #[inline]
    pub(crate) fn insert(&self, key: &[u8], record: RecordRef) -> bool {
        self.index.insert(key, record.to_word())
    }

    /// Removes `key` if it still maps to `record`.
    pub(crate) fn remove_if_is(
        &self,
        key: &[u8],
        record: RecordRef,
        handle: &mut EpochHandle,
    ) -> bool {
        let (removed, key_copy) = self.index.remove_if(key, |value| value == record.to_word());
        if let Some(copy) = key_copy {
            // SAFETY: the key copy just left the index; concurrent readers
            // are epoch-protected, so it is freed only after they finish.
            unsafe { handle.retire(copy, free_blob) };
        }
        removed
    }

    /// Visits `(key, record)` in key order over `(lo, hi)` until `visit`
    /// returns false.
    #[inline]
    pub(crate) fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut visit: impl FnMut(&[u8], RecordRef) -> bool,
    ) {
        self.index
            .scan(lo, hi, |key, value| visit(key, RecordRef::from_word(value)));
    }

    /// Number of index entries (including absent records not yet unlinked).
    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Visits every record (teardown and checkpoints).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&[u8], RecordRef)) {
        self.scan(Bound::Unbounded, Bound::Unbounded, |key, record| {
            visit(key, record);
            true
        });
    }
}
