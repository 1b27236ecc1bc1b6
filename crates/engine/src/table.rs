//! Tables: a name and an ordered concurrent index from byte-string keys to
//! records (our OLC B+-tree, `crate::index`; BENCHMARKS.md compares it with
//! scc's `TreeIndex`, which it replaced), with an optional hash index beside
//! it for point reads (`crate::index::PointIndex`, kept a subset of the
//! tree: see its module comment).

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use epochdb_epoch::EpochHandle;

use crate::blob::free_blob;
use crate::index::{free_leaf, InsertedInto, LeafVersion, PointIndex, Tree, PREFETCH_WALKS};
use crate::record::{free_record, RecordRef};
use crate::tid::{tid_of, Tid, ABSENT_BIT, LOCK_BIT, UNLINKED_BIT};

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
    /// Short keys → the same record words as `index` (`Config::point_index`).
    point: Option<PointIndex>,
    /// The largest TID of a deleted record unlinked from this table. A key
    /// re-inserted after its record left the index starts a new record, so
    /// its first TID must be ordered after the delete by this floor instead
    /// of by the record's own TID ("largest TID wins" replay, silor §3.2).
    unlinked_floor: AtomicU64,
    /// Whether recovery put a tombstone (`recover_put` with no value) into
    /// this table: only then can absent records be left for
    /// `remove_absent` to find, so without one it skips its whole-table scan
    /// (a tenth of a 4 M-key recovery's time when nothing was deleted).
    recovered_tombstones: AtomicBool,
}

/// One write that recovery replays ([`Table::replay_batch`]).
pub(crate) struct ReplayWrite<'a> {
    pub(crate) tid: Tid,
    pub(crate) table: &'a Table,
    pub(crate) key: &'a [u8],
    /// `None`: a tombstone.
    pub(crate) value: Option<&'a [u8]>,
}

/// The last reference to a table frees the records still in its index —
/// at a database's drop, and also when a failed recovery drops the tables
/// it had filled. Records already unlinked were retired to the epoch
/// framework, which frees them itself.
impl Drop for Table {
    fn drop(&mut self) {
        self.for_each(|_, record| {
            // SAFETY: nothing else holds the table; each record is in the
            // index exactly once.
            unsafe { free_record(record.as_ptr().cast()) };
        });
    }
}

/// Index operations. Callers must be epoch-protected (workers are, for
/// their whole transaction and commit): the index frees removed keys'
/// memory through the epoch framework.
impl Table {
    pub(crate) fn new(id: TableId, name: String, point_index: bool) -> Self {
        Self {
            id,
            name,
            index: Tree::new(),
            point: point_index.then(PointIndex::new),
            unlinked_floor: AtomicU64::new(0),
            recovered_tombstones: AtomicBool::new(false),
        }
    }

    /// Hands the point index the database's epochs, through which it frees
    /// the tables its growth replaces.
    pub(crate) fn attach_epochs(&self, epochs: &epochdb_epoch::EpochManager) {
        if let Some(point) = &self.point {
            point.attach_epochs(epochs);
        }
    }

    /// The record for `key`, or the leaf version proving it is missing.
    #[inline]
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<RecordRef, LeafVersion> {
        let Some(point) = &self.point else {
            return self.index.get(key).map(RecordRef::from_word);
        };
        if let Some(word) = point.get(key) {
            return Ok(RecordRef::from_word(word));
        }
        let found = self.index.get(key).map(RecordRef::from_word);
        if let Ok(record) = found {
            Self::fill(point, key, record);
        }
        found
    }

    /// Starts loading the point-index bucket for `key`, if the table has a
    /// point index (the tree's descent has no single line to ask for).
    #[inline]
    pub(crate) fn prefetch_index(&self, key: &[u8]) {
        if let Some(point) = &self.point {
            point.prefetch(key);
        }
    }

    /// Adds a record a read found in the tree to the point index, if its
    /// lock is free right now (a held lock is a commit or an insert in
    /// flight; a later read fills it) and it has not been unlinked. Under
    /// the lock, not unlinked means still in the tree under `key`.
    #[cold]
    fn fill(point: &PointIndex, key: &[u8], record: RecordRef) {
        if !PointIndex::covers(key) {
            return;
        }
        let r = record.get();
        if r.try_lock(0) {
            if r.word() & UNLINKED_BIT == 0 {
                point.insert(key, record.to_word());
            }
            r.unlock();
        }
    }

    /// The tree's record for `key`, leaving the point index alone
    /// (recovery).
    #[inline]
    fn lookup_in_tree(&self, key: &[u8]) -> Result<RecordRef, LeafVersion> {
        self.index.get(key).map(RecordRef::from_word)
    }

    /// Inserts `record`, which must be a locked placeholder, for `key`;
    /// `None` if the key is already indexed.
    #[inline]
    pub(crate) fn insert(&self, key: &[u8], record: RecordRef) -> Option<InsertedInto> {
        debug_assert!(
            record.get().word() & LOCK_BIT != 0,
            "only locked placeholders enter an index"
        );
        let inserted = self.index.insert(key, record.to_word())?;
        // After the tree, under the record's lock: the point index stays a
        // subset of the tree.
        if let Some(point) = &self.point {
            point.insert(key, record.to_word());
        }
        Some(inserted)
    }

    /// The floor for TIDs of records inserted into this table (see
    /// `unlinked_floor`).
    #[inline]
    pub(crate) fn insert_floor(&self) -> Tid {
        Tid::from_raw(self.unlinked_floor.load(Ordering::Acquire))
    }

    /// Raises the insert floor before a deleted record at `tid` leaves the
    /// index: whoever inserts the key after the removal (which it observes
    /// through the leaf's lock) then sees the floor.
    pub(crate) fn raise_insert_floor(&self, tid: Tid) {
        self.unlinked_floor.fetch_max(tid.raw(), Ordering::AcqRel);
    }

    /// Removes `key` if it still maps to `record`, which the caller has
    /// locked.
    pub(crate) fn remove_if_is(
        &self,
        key: &[u8],
        record: RecordRef,
        handle: &mut EpochHandle,
    ) -> bool {
        debug_assert!(
            record.get().word() & LOCK_BIT != 0,
            "only locked records leave an index"
        );
        // Before the tree: the point index stays a subset of it.
        if let Some(point) = &self.point {
            point.remove_if_is(key, record.to_word());
        }
        let removed = self.index.remove_if(key, |value| value == record.to_word());
        if let Some(copy) = removed.key_copy {
            // SAFETY: the key copy just left the index; concurrent readers
            // are epoch-protected, so it is freed only after they finish.
            unsafe { handle.retire(copy, free_blob) };
        }
        if let Some(unlinked) = removed.unlinked {
            // SAFETY: as above, for the emptied leaf it unlinked.
            unsafe { handle.retire(unlinked.leaf, free_leaf) };
            if let Some(copy) = unlinked.separator_copy {
                // SAFETY: as above, for the leaf's separator in its parent.
                unsafe { handle.retire(copy, free_blob) };
            }
        }
        removed.removed
    }

    /// Visits `(key, record)` in key order over `(lo, hi)` until `visit`
    /// returns false, reporting every leaf read to `on_leaf`.
    #[inline]
    pub(crate) fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut visit: impl FnMut(&[u8], RecordRef) -> bool,
        on_leaf: impl FnMut(LeafVersion),
    ) {
        self.index.scan(
            lo,
            hi,
            |key, value| visit(key, RecordRef::from_word(value)),
            on_leaf,
        );
    }

    /// Number of index entries (including absent records not yet unlinked).
    pub(crate) fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Visits every record (teardown and checkpoints).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&[u8], RecordRef)) {
        self.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            |key, record| {
                visit(key, record);
                true
            },
            |_| (),
        );
    }

    /// Recovery's write (silor §5): installs `value` (`None`: a tombstone)
    /// at `tid` unless the key already holds a larger TID — "largest TID
    /// wins", so files replay in any order and on any number of threads.
    /// `likely_new` (checkpoint loading: every key once, in key order)
    /// tries the insert first, saving a lookup's descent per record.
    /// Returns whether it was applied.
    pub(crate) fn recover_put(
        &self,
        key: &[u8],
        tid: Tid,
        value: Option<&[u8]>,
        handle: &mut EpochHandle,
        likely_new: bool,
    ) -> bool {
        let mut try_insert = likely_new;
        loop {
            if try_insert {
                self.note_if_tombstone(value);
                let record = RecordRef::new_placeholder(value.map_or(0, <[u8]>::len));
                // The tree alone: reads fill the point index later.
                if self.index.insert(key, record.to_word()).is_some() {
                    record.get().install_and_unlock(tid, value, handle);
                    return true;
                }
                // The key is there (another file or thread put it first);
                // this record was never published: free it, then update.
                // SAFETY: fresh, unreachable, freed once.
                unsafe { free_record(record.as_ptr().cast()) };
            }
            match self.lookup_in_tree(key) {
                Ok(record) => return self.recover_put_into(record, tid, value, handle),
                Err(_) => try_insert = true,
            }
        }
    }

    /// Records that recovery put a tombstone here, if `value` is one (see
    /// `recovered_tombstones`).
    fn note_if_tombstone(&self, value: Option<&[u8]>) {
        if value.is_none() && !self.recovered_tombstones.load(Ordering::Relaxed) {
            self.recovered_tombstones.store(true, Ordering::Relaxed);
        }
    }

    /// Applies a batch of recovery's writes (at most
    /// [`PREFETCH_WALKS`] take part in the batched lookup; any more are
    /// applied by [`Table::recover_put`]). Their keys are looked up
    /// together first, the cache misses of the descents overlapping (see
    /// [`Tree::prefetch_paths`]), each record found is prefetched, and a
    /// write whose record was found is applied to it without a second
    /// descent. Replay looks keys up in log order, all over the tree, and
    /// descents one miss at a time were half of its time.
    ///
    /// During recovery a key's record, once indexed, stays its record until
    /// `remove_absent` (replay only installs into records in place), so a
    /// record found here is still the key's when its write is applied.
    /// Callers must be epoch-protected.
    pub(crate) fn replay_batch(batch: &[ReplayWrite<'_>], handle: &mut EpochHandle) {
        let mut records: [Option<RecordRef>; PREFETCH_WALKS] = [None; PREFETCH_WALKS];
        Tree::prefetch_paths(
            batch,
            |write| (&write.table.index, write.key),
            |i, word| {
                let record = RecordRef::from_word(word);
                // The record's header and the start of its value, which
                // `recover_put_into` reads and then overwrites.
                epochdb_memory::prefetch_lines_for_write(record.as_ptr().cast::<u8>(), 2);
                records[i] = Some(record);
            },
        );
        for (i, write) in batch.iter().enumerate() {
            let table = write.table;
            match records.get(i).copied().flatten() {
                Some(record) => table.recover_put_into(record, write.tid, write.value, handle),
                None => table.recover_put(write.key, write.tid, write.value, handle, false),
            };
        }
    }

    /// [`Table::recover_put`] for a key whose record is known: `record`,
    /// found in this table's index during recovery (see
    /// [`Table::replay_batch`]).
    fn recover_put_into(
        &self,
        record: RecordRef,
        tid: Tid,
        value: Option<&[u8]>,
        handle: &mut EpochHandle,
    ) -> bool {
        self.note_if_tombstone(value);
        let r = record.get();
        if tid_of(r.word()) >= tid {
            return false; // a newer version is in (reverse replay's win)
        }
        let locked = r.try_lock(u32::MAX);
        debug_assert!(locked);
        if tid_of(r.word()) >= tid {
            r.unlock();
            return false;
        }
        r.install_and_unlock(tid, value, handle);
        true
    }

    /// Removes every absent record (recovery's tombstones, once replay is
    /// over) and raises the insert floor above their TIDs. Returns how
    /// many were removed. Recovery's threads have all finished (joined)
    /// when it runs, so it sees every tombstone they put; with none put it
    /// returns at once: checkpoints hold no tombstones, so a table that got
    /// none from the logs has no absent record.
    pub(crate) fn remove_absent(&self, handle: &mut EpochHandle) -> usize {
        if !self.recovered_tombstones.load(Ordering::Relaxed) {
            return 0;
        }
        let mut absent = Vec::new();
        self.for_each(|key, record| {
            let word = record.get().word();
            if word & ABSENT_BIT != 0 {
                absent.push((key.to_vec(), record, tid_of(word)));
            }
        });
        let mut removed = 0;
        for (key, record, tid) in absent {
            self.raise_insert_floor(tid);
            if !record.get().try_lock(0) {
                continue;
            }
            if self.remove_if_is(&key, record, handle) {
                record.get().unlink_and_unlock();
                // SAFETY: removed from the index; retired once.
                unsafe { handle.retire(record.as_ptr().cast(), free_record) };
                removed += 1;
            } else {
                record.get().unlock();
            }
        }
        removed
    }

    /// Keys that split the table into `parts` ranges of roughly equal
    /// record counts (silor §4.2); fewer when the table is small. Callers
    /// must be epoch-protected.
    pub(crate) fn split_keys(&self, parts: usize) -> Vec<Vec<u8>> {
        let total = self.index_len();
        if parts <= 1 || total < parts {
            return Vec::new();
        }
        let step = total / parts;
        let mut keys = Vec::with_capacity(parts - 1);
        let mut seen = 0;
        self.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            |key, _| {
                seen += 1;
                if seen % step == 0 {
                    keys.push(key.to_vec());
                }
                keys.len() < parts - 1
            },
            |_| (),
        );
        keys
    }
}
