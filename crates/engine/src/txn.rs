//! A transaction's execution: reads into the read set, writes into the write
//! set, scans into the scan set (silor-osdi14 §2; Silo §4).
//!
//! Memory safety rests on two rules. A worker is epoch-protected for the
//! whole of [`crate::Worker::run`], so every record it loads from an index
//! stays allocated until the call returns (records and replaced value
//! blocks are freed only through epoch reclamation). And the values a body
//! sees — read ones, copied out of records, and its own pending writes —
//! live in the transaction's arena, which is reset only when the body and
//! its commit are done; so `&'t [u8]` stays valid for the whole body.

use std::ops::Bound;
use std::sync::Arc;

use crate::arena::{Arena, Bytes};
use crate::durability::WriteRecord;
use crate::error::Abort;
use crate::index::LeafVersion;
use crate::record::{RecordRef, Snapshot};
use crate::table::{Table, TableId};
use crate::tid::Tid;

/// A span of the transaction's key arena.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeySpan {
    start: u32,
    len: u32,
}

/// Keys copied out of the caller's buffers, held for the commit.
#[derive(Default)]
pub(crate) struct KeyArena {
    bytes: Vec<u8>,
}

impl KeyArena {
    fn push(&mut self, key: &[u8]) -> KeySpan {
        let start = u32::try_from(self.bytes.len()).expect("transaction keys exceed 4 GiB");
        let len = u32::try_from(key.len()).expect("key exceeds 4 GiB");
        self.bytes.extend_from_slice(key);
        KeySpan { start, len }
    }

    #[inline]
    pub(crate) fn get(&self, span: KeySpan) -> &[u8] {
        &self.bytes[span.start as usize..(span.start + span.len) as usize]
    }
}

/// One observed record: the word seen when it was read.
#[derive(Clone, Copy)]
pub(crate) struct ReadEntry {
    pub(crate) record: RecordRef,
    pub(crate) word: u64,
}

/// One pending write.
pub(crate) struct WriteEntry {
    pub(crate) table: TableId,
    pub(crate) key: KeySpan,
    pub(crate) record: RecordRef,
    /// The new value (in the transaction's arena), or `None` for a delete.
    pub(crate) value: Option<Bytes>,
    /// The record is our insert placeholder, locked since it was created.
    pub(crate) inserted: bool,
}

/// The write set, with the key arena its entries point into.
#[derive(Default)]
pub(crate) struct WriteSet {
    pub(crate) entries: Vec<WriteEntry>,
    pub(crate) keys: KeyArena,
}

impl WriteSet {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn records(&self) -> impl ExactSizeIterator<Item = WriteRecord<'_>> + '_ {
        self.entries.iter().map(move |entry| WriteRecord {
            table: entry.table,
            key: self.keys.get(entry.key),
            // SAFETY: pending values live in the transaction's arena, which
            // outlives the write set's use in this transaction.
            value: entry.value.map(|bytes| unsafe { bytes.as_slice() }),
        })
    }

    /// The entry for `record`, by linear search (write sets are small).
    #[inline]
    fn find(&self, record: RecordRef) -> Option<usize> {
        self.entries.iter().position(|entry| entry.record == record)
    }

    /// After sorting by record address: whether `record` is ours.
    #[inline]
    pub(crate) fn contains_sorted(&self, record: RecordRef) -> bool {
        self.entries
            .binary_search_by(|entry| entry.record.cmp(&record))
            .is_ok()
    }
}

/// Reusable per-worker buffers for one transaction at a time.
#[derive(Default)]
pub(crate) struct TxState {
    pub(crate) reads: Vec<ReadEntry>,
    pub(crate) writes: WriteSet,
    /// Leaves scanned or proving a key missing, with the versions seen
    /// (phantom protection: Silo's node set).
    pub(crate) nodes: Vec<LeafVersion>,
    /// Values read and values to write.
    pub(crate) arena: Arena,
    /// The record the last point access found, so that a write of the key
    /// just read (read-modify-write, most of TPC-C's writes) skips a second
    /// index descent.
    pub(crate) recent: RecentRecord,
}

/// The last record located by key in this transaction.
#[derive(Default)]
pub(crate) struct RecentRecord {
    found: Option<(TableId, RecordRef)>,
    key: Vec<u8>,
}

impl RecentRecord {
    #[inline]
    fn remember(&mut self, table: TableId, key: &[u8], record: RecordRef) {
        self.key.clear();
        self.key.extend_from_slice(key);
        self.found = Some((table, record));
    }

    #[inline]
    fn get(&self, table: TableId, key: &[u8]) -> Option<RecordRef> {
        match self.found {
            Some((t, record)) if t == table && self.key == key => Some(record),
            _ => None,
        }
    }

    fn clear(&mut self) {
        self.found = None;
    }
}

// SAFETY: the arena spans a TxState holds point into its own arena, and its
// records are shared (RecordRef is Send); it can move to another thread
// between transactions like any owned buffer.
unsafe impl Send for TxState {}

impl TxState {
    pub(crate) fn clear(&mut self) {
        self.reads.clear();
        self.writes.entries.clear();
        self.writes.keys.bytes.clear();
        self.nodes.clear();
        self.arena.reset();
        self.recent.clear();
    }
}

/// Looks `key` up, retrying past records unlinked under us. Returns the
/// record and what was read of it (the value's first `value_bytes` bytes
/// copied into `arena`; nothing when `None`), or the leaf version proving
/// the key missing.
///
/// Tries `recent` first, the record this transaction last located for the
/// same key. Using it is the same as a lookup made at that earlier moment:
/// a record leaves the index only while locked and is marked unlinked as
/// it is unlocked, so a record seen unlinked is looked up again, and one
/// removed after that check is caught at commit exactly as if the removal
/// had raced with a lookup (validation sees its word change; a write finds
/// it unlinked once locked).
#[inline]
fn locate(
    table: &Table,
    key: &[u8],
    arena: &mut Arena,
    value_bytes: Option<usize>,
    recent: Option<RecordRef>,
) -> Result<(RecordRef, Snapshot), LeafVersion> {
    let read = |record: RecordRef, arena: &mut Arena| {
        if let Some(max) = value_bytes {
            record.get().read_prefix(arena, max)
        } else {
            Snapshot {
                word: record.get().stable_word(),
                value: None,
            }
        }
    };
    if let Some(record) = recent {
        let snapshot = read(record, arena);
        if !snapshot.is_unlinked() {
            return Ok((record, snapshot));
        }
    }
    loop {
        let record = table.lookup(key)?;
        let snapshot = read(record, arena);
        if !snapshot.is_unlinked() {
            return Ok((record, snapshot));
        }
        std::hint::spin_loop();
    }
}

/// A key and its value, as [`Transaction::scan_collect`] returns them.
pub type ScannedPair<'t> = (Vec<u8>, &'t [u8]);

/// An open transaction, handed to the body passed to
/// [`crate::Worker::run`]. Values it returns borrow nothing from it and stay
/// valid for `'t`, the duration of the body.
pub struct Transaction<'t> {
    pub(crate) tables: &'t [Arc<Table>],
    pub(crate) state: &'t mut TxState,
}

impl<'t> Transaction<'t> {
    #[inline]
    fn table(&self, table: TableId) -> &'t Table {
        let tables: &'t [Arc<Table>] = self.tables;
        match tables.get(table.0 as usize) {
            Some(table) => table,
            None => panic!("table id {} does not belong to this database", table.0),
        }
    }

    /// Hints that the transaction will soon read `key`: looks it up in the
    /// index and asks the CPU to start loading the record's first cache
    /// lines, without waiting for them. A transaction that knows several
    /// keys up front (TPC-C's New-Order knows its items and stocks)
    /// prefetches them all and then reads them, so the record misses
    /// overlap the later lookups instead of queueing behind them. Neither
    /// the read set nor the transaction's outcome changes: a prefetch that
    /// finds nothing, or a record changed after it, is simply wasted.
    pub fn prefetch(&self, table: TableId, key: &[u8]) {
        let t = self.table(table);
        if let Ok(record) = t.lookup(key) {
            record.get().prefetch();
        }
    }

    /// The first of two prefetch stages: asks the CPU for the cache line of
    /// the table's point index where `key` would be (nothing for a table
    /// without one). A transaction with many keys calls this for all of
    /// them, then [`Transaction::prefetch`] for all of them (whose probes
    /// then hit the cache), then reads them: the index misses overlap, then
    /// the record misses. Like `prefetch`, it changes nothing else.
    pub fn prefetch_index(&self, table: TableId, key: &[u8]) {
        self.table(table).prefetch_index(key);
    }

    /// Reads `key`. `Ok(None)` when the key has no value.
    pub fn get(&mut self, table: TableId, key: &[u8]) -> Result<Option<&'t [u8]>, Abort> {
        self.get_prefix(table, key, usize::MAX)
    }

    /// Reads the first `len` bytes of `key`'s value (all of it if shorter).
    /// `Ok(None)` when the key has no value. The read is validated like
    /// [`Transaction::get`]'s: a concurrent change to any part of the value
    /// aborts the transaction at commit. A reader that needs only a field at
    /// the front of a large row copies, and brings into cache, only that.
    pub fn get_prefix(
        &mut self,
        table: TableId,
        key: &[u8],
        len: usize,
    ) -> Result<Option<&'t [u8]>, Abort> {
        let t = self.table(table);
        let recent = self.state.recent.get(table, key);
        let (record, snapshot) = match locate(t, key, &mut self.state.arena, Some(len), recent) {
            Ok(found) => found,
            Err(missing) => {
                self.state.nodes.push(missing);
                return Ok(None);
            }
        };
        self.state.recent.remember(table, key, record);
        if let Some(index) = self.state.writes.find(record) {
            // Read your own write.
            return Ok(self.state.writes.entries[index].value.map(|bytes| {
                // SAFETY: pending values live in the arena, which is reset
                // only after the body returns.
                let value = unsafe { bytes.as_slice::<'t>() };
                &value[..value.len().min(len)]
            }));
        }
        self.state.reads.push(ReadEntry {
            record,
            word: snapshot.word,
        });
        // SAFETY: the copy lives in the arena, reset only after the body.
        Ok(snapshot
            .value
            .map(|bytes| unsafe { bytes.as_slice::<'t>() }))
    }

    /// The TID of the last committed write of `key` (a delete included), or
    /// `None` when the index holds no record for it. The read joins the read
    /// set, so the transaction aborts if the key is written before it
    /// commits. Two calls in different transactions return the same value
    /// only if no transaction wrote the key in between (a key that vanished
    /// from the index and never came back reads `None` both times) — what a
    /// server needs for Redis's `WATCH`.
    pub fn version(&mut self, table: TableId, key: &[u8]) -> Result<Option<Tid>, Abort> {
        let t = self.table(table);
        let recent = self.state.recent.get(table, key);
        let (record, snapshot) = match locate(t, key, &mut self.state.arena, None, recent) {
            Ok(found) => found,
            Err(missing) => {
                self.state.nodes.push(missing);
                return Ok(None);
            }
        };
        self.state.reads.push(ReadEntry {
            record,
            word: snapshot.word,
        });
        Ok(Some(Tid::from_raw(snapshot.word)))
    }

    /// Writes `value` for `key`, inserting the key if it is missing (upsert).
    pub fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<(), Abort> {
        let value = self.state.arena.copy(value);
        self.write(table, key, Some(value), WriteKind::Upsert)
            .map(|_| ())
    }

    /// Inserts `key` with `value` if it has no value; returns `Ok(false)`
    /// (and writes nothing) if it already has one.
    pub fn insert(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<bool, Abort> {
        let value = self.state.arena.copy(value);
        self.write(table, key, Some(value), WriteKind::Insert)
    }

    /// Updates `key` only if it has a value; returns `Ok(false)` otherwise.
    pub fn update(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<bool, Abort> {
        let value = self.state.arena.copy(value);
        self.write(table, key, Some(value), WriteKind::Update)
    }

    /// Deletes `key`; returns whether it had a value.
    pub fn delete(&mut self, table: TableId, key: &[u8]) -> Result<bool, Abort> {
        self.write(table, key, None, WriteKind::Update)
    }

    /// Rolls the transaction back: returns [`Abort::User`] for the body to
    /// propagate with `?`.
    pub fn abort<T>(&self) -> Result<T, Abort> {
        Err(Abort::User)
    }

    /// Inserts an absent, locked placeholder for `key` (Silo §4.5) with room
    /// for the value inline, and records the write. Retries if the key
    /// appears meanwhile... by looping in the caller: returns false then.
    fn try_insert_placeholder(
        &mut self,
        table: TableId,
        t: &Table,
        key: &[u8],
        value: Option<Bytes>,
    ) -> bool {
        let capacity = value.map_or(0, Bytes::len);
        let placeholder = RecordRef::new_placeholder(capacity);
        let Some(inserted) = t.insert(key, placeholder) else {
            // SAFETY: never published; we still own it.
            unsafe { crate::record::free_record(placeholder.as_ptr().cast()) };
            return false;
        };
        // Our own insert must not invalidate what we saw of the leaf.
        inserted.patch(&mut self.state.nodes);
        let key = self.state.writes.keys.push(key);
        self.state.writes.entries.push(WriteEntry {
            table,
            key,
            record: placeholder,
            value,
            inserted: true,
        });
        true
    }

    fn write(
        &mut self,
        table: TableId,
        key: &[u8],
        value: Option<Bytes>,
        kind: WriteKind,
    ) -> Result<bool, Abort> {
        let t = self.table(table);
        let mut recent = self.state.recent.get(table, key);
        // An insert of a key we have not seen goes straight for the index,
        // as Silo's does (§4.5): one descent instead of a failed lookup and
        // then the insert. Only if the key is there already (the index
        // leaves its leaf untouched then) do we look it up and decide below.
        if kind == WriteKind::Insert
            && recent.is_none()
            && self.try_insert_placeholder(table, t, key, value)
        {
            return Ok(true);
        }
        loop {
            let (record, snapshot) =
                match locate(t, key, &mut self.state.arena, None, recent.take()) {
                    Ok(found) => found,
                    Err(missing) => {
                        if kind == WriteKind::Update {
                            self.state.nodes.push(missing);
                            return Ok(false);
                        }
                        if self.try_insert_placeholder(table, t, key, value) {
                            return Ok(true);
                        }
                        continue; // the key appeared meanwhile: look again
                    }
                };
            self.state.recent.remember(table, key, record);
            if let Some(index) = self.state.writes.find(record) {
                let entry = &mut self.state.writes.entries[index];
                let had_value = entry.value.is_some();
                let applies = match kind {
                    WriteKind::Upsert => true,
                    WriteKind::Insert => !had_value,
                    WriteKind::Update => had_value,
                };
                if !applies {
                    return Ok(false);
                }
                entry.value = value;
                return Ok(true);
            }
            let present = snapshot.word & crate::tid::ABSENT_BIT == 0;
            if kind != WriteKind::Upsert {
                // The outcome depends on presence: validate it at commit.
                self.state.reads.push(ReadEntry {
                    record,
                    word: snapshot.word,
                });
                let applies = present == (kind == WriteKind::Update);
                if !applies {
                    return Ok(false);
                }
            }
            let key = self.state.writes.keys.push(key);
            self.state.writes.entries.push(WriteEntry {
                table,
                key,
                record,
                value,
                inserted: false,
            });
            return Ok(true);
        }
    }

    /// Visits the present keys of `table` in `[lo, hi)` order, at most
    /// `limit` of them, until `visit` returns false. The scan is protected
    /// against phantoms: if a key is inserted into or removed from the part
    /// of the range it covered before commit, the transaction aborts (the
    /// index leaves it read are validated, Silo §4.6).
    pub fn scan(
        &mut self,
        table: TableId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
        mut visit: impl FnMut(&[u8], &'t [u8]) -> bool,
    ) -> Result<(), Abort> {
        if limit == 0 {
            return Ok(());
        }
        let t = self.table(table);
        let mut visited = 0usize;
        let mut conflict = false;
        let state = &mut *self.state;
        let TxState {
            reads,
            writes,
            nodes,
            arena,
            recent: _,
        } = state;
        t.scan(
            lo,
            hi,
            |key, record| {
                let value: Option<&'t [u8]> = match writes.find(record) {
                    // SAFETY: as in `get`: the arena outlives `'t`.
                    Some(index) => writes.entries[index]
                        .value
                        .map(|bytes| unsafe { bytes.as_slice::<'t>() }),
                    None => {
                        let snapshot = record.get().read(arena);
                        if snapshot.is_unlinked() {
                            conflict = true;
                            return false;
                        }
                        reads.push(ReadEntry {
                            record,
                            word: snapshot.word,
                        });
                        // SAFETY: as in `get`: the copy lives in the arena.
                        snapshot
                            .value
                            .map(|bytes| unsafe { bytes.as_slice::<'t>() })
                    }
                };
                let Some(value) = value else { return true };
                visited += 1;
                visit(key, value) && visited < limit
            },
            |leaf| nodes.push(leaf),
        );
        if conflict {
            return Err(Abort::Conflict);
        }
        Ok(())
    }

    /// Collects up to `limit` present `(key, value)` pairs of `[lo, hi)`.
    pub fn scan_collect(
        &mut self,
        table: TableId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<ScannedPair<'t>>, Abort> {
        let mut out = Vec::new();
        self.scan(table, lo, hi, limit, |key, value| {
            out.push((key.to_vec(), value));
            true
        })?;
        Ok(out)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    /// Write whether or not the key has a value.
    Upsert,
    /// Write only if the key has no value.
    Insert,
    /// Write (or delete) only if the key has a value.
    Update,
}
