//! A transaction's execution: reads into the read set, writes into the write
//! set, scans into the scan set (silor-osdi14 §2; Silo §4).
//!
//! Memory safety rests on one rule: a worker is epoch-protected for the
//! whole of [`crate::Worker::run`], so every record and value block it
//! loads from an index stays allocated until the call returns (they are
//! freed only through epoch reclamation after being unlinked or replaced).
//! That is why reads can hand out `&'t [u8]` without copying.

use std::ops::Bound;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::durability::WriteRecord;
use crate::error::Abort;
use crate::record::{free_value, new_value, value_bytes, Record, RecordRef, ValueBlock};
use crate::table::{Table, TableId};

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

/// A key looked up and found missing from the index.
#[derive(Clone, Copy)]
pub(crate) struct AbsentKey {
    pub(crate) table: TableId,
    pub(crate) key: KeySpan,
}

/// A range scan to re-check at commit: the records seen in `[lo, hi]`, in
/// order, must be exactly the records there at the serialization point.
#[derive(Clone, Copy)]
pub(crate) struct ScanEntry {
    pub(crate) table: TableId,
    pub(crate) lo: Option<(KeySpan, bool)>,
    pub(crate) hi: Option<(KeySpan, bool)>,
    pub(crate) seen_start: u32,
    pub(crate) seen_len: u32,
}

/// One pending write.
pub(crate) struct WriteEntry {
    pub(crate) table: TableId,
    pub(crate) key: KeySpan,
    pub(crate) record: RecordRef,
    /// The new value, or `None` for a delete. Owned until installed.
    pub(crate) value: Option<NonNull<ValueBlock>>,
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
            value: entry.value.map(|block| {
                // SAFETY: the block is owned by this write set until it is
                // installed, and the view does not outlive the write set.
                unsafe { value_bytes(block.as_ptr()) }
            }),
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
    pub(crate) absent: Vec<AbsentKey>,
    pub(crate) scans: Vec<ScanEntry>,
    pub(crate) scan_seen: Vec<RecordRef>,
    /// Scan bounds and absent keys.
    pub(crate) keys: KeyArena,
    /// Pending values replaced within the transaction: never published,
    /// freed when it ends (a caller may still hold a slice into one).
    pub(crate) discarded: Vec<NonNull<ValueBlock>>,
}

impl TxState {
    pub(crate) fn clear(&mut self) {
        self.reads.clear();
        self.writes.entries.clear();
        self.writes.keys.bytes.clear();
        self.absent.clear();
        self.scans.clear();
        self.scan_seen.clear();
        self.keys.bytes.clear();
        self.free_discarded();
    }

    pub(crate) fn free_discarded(&mut self) {
        for block in self.discarded.drain(..) {
            // SAFETY: never published; the transaction that could hold a
            // slice into it has ended.
            unsafe { free_value(block.as_ptr().cast()) };
        }
    }
}

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

    /// Looks `key` up, retrying past records unlinked under us. Returns the
    /// record and a consistent snapshot of it.
    #[inline]
    fn locate(&self, table: &Table, key: &[u8]) -> Option<(RecordRef, crate::record::Snapshot)> {
        loop {
            let record = table.lookup(key)?;
            let snapshot = record.get().read();
            if !snapshot.is_unlinked() {
                return Some((record, snapshot));
            }
            std::hint::spin_loop();
        }
    }

    fn note_absent_key(&mut self, table: TableId, key: &[u8]) {
        let key = self.state.keys.push(key);
        self.state.absent.push(AbsentKey { table, key });
    }

    /// Reads `key`. `Ok(None)` when the key has no value.
    pub fn get(&mut self, table: TableId, key: &[u8]) -> Result<Option<&'t [u8]>, Abort> {
        let t = self.table(table);
        let Some((record, snapshot)) = self.locate(t, key) else {
            self.note_absent_key(table, key);
            return Ok(None);
        };
        if let Some(index) = self.state.writes.find(record) {
            return Ok(self.state.writes.entries[index].value.map(|block| {
                // SAFETY: pending blocks are freed only after the body
                // returns (`discarded`) or once installed and retired
                // through the epoch framework, which outlives `'t`.
                unsafe { value_bytes::<'t>(block.as_ptr()) }
            }));
        }
        self.state.reads.push(ReadEntry {
            record,
            word: snapshot.word,
        });
        if snapshot.is_absent() {
            return Ok(None);
        }
        // SAFETY: the snapshot's block was current while we are epoch
        // protected; it is retired, not freed, when replaced.
        Ok(Some(unsafe { value_bytes::<'t>(snapshot.value) }))
    }

    /// Writes `value` for `key`, inserting the key if it is missing (upsert).
    pub fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<(), Abort> {
        let block = new_value(value);
        self.write(table, key, Some(block), WriteKind::Upsert)
            .map(|_| ())
    }

    /// Inserts `key` with `value` if it has no value; returns `Ok(false)`
    /// (and writes nothing) if it already has one.
    pub fn insert(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<bool, Abort> {
        let block = new_value(value);
        self.write(table, key, Some(block), WriteKind::Insert)
    }

    /// Updates `key` only if it has a value; returns `Ok(false)` otherwise.
    pub fn update(&mut self, table: TableId, key: &[u8], value: &[u8]) -> Result<bool, Abort> {
        let block = new_value(value);
        self.write(table, key, Some(block), WriteKind::Update)
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

    fn write(
        &mut self,
        table: TableId,
        key: &[u8],
        value: Option<NonNull<ValueBlock>>,
        kind: WriteKind,
    ) -> Result<bool, Abort> {
        let t = self.table(table);
        loop {
            let Some((record, snapshot)) = self.locate(t, key) else {
                if kind == WriteKind::Update {
                    self.note_absent_key(table, key);
                    discard(value);
                    return Ok(false);
                }
                // Insert an absent, locked placeholder (Silo §4.5).
                let placeholder = RecordRef::from_box(Record::new_placeholder());
                if !t.insert(key, placeholder) {
                    // SAFETY: never published; we still own it.
                    unsafe { crate::record::free_record(placeholder.as_ptr().cast()) };
                    continue;
                }
                let key = self.state.writes.keys.push(key);
                self.state.writes.entries.push(WriteEntry {
                    table,
                    key,
                    record: placeholder,
                    value,
                    inserted: true,
                });
                return Ok(true);
            };
            if let Some(index) = self.state.writes.find(record) {
                let entry = &mut self.state.writes.entries[index];
                let had_value = entry.value.is_some();
                let applies = match kind {
                    WriteKind::Upsert => true,
                    WriteKind::Insert => !had_value,
                    WriteKind::Update => had_value,
                };
                if !applies {
                    discard(value);
                    return Ok(false);
                }
                if let Some(old) = std::mem::replace(&mut entry.value, value) {
                    self.state.discarded.push(old);
                }
                return Ok(true);
            }
            let present = !snapshot.is_absent();
            if kind != WriteKind::Upsert {
                // The outcome depends on presence: validate it at commit.
                self.state.reads.push(ReadEntry {
                    record,
                    word: snapshot.word,
                });
                let applies = present == (kind == WriteKind::Update);
                if !applies {
                    discard(value);
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
    /// against phantoms: if the set of keys in the range it covered changes
    /// before commit, the transaction aborts.
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
        let seen_start = self.state.scan_seen.len();
        let mut visited = 0usize;
        let mut stopped_at: Option<KeySpan> = None;
        let mut conflict = false;
        let state = &mut *self.state;
        {
            t.scan(lo, hi, |key, record| {
                let pending = state.writes.find(record);
                let value: Option<&'t [u8]> = match pending {
                    Some(index) => {
                        let entry = &state.writes.entries[index];
                        if !entry.inserted {
                            state.scan_seen.push(record);
                        }
                        // SAFETY: as in `get`: pending blocks outlive `'t`.
                        entry
                            .value
                            .map(|block| unsafe { value_bytes::<'t>(block.as_ptr()) })
                    }
                    None => {
                        let snapshot = record.get().read();
                        if snapshot.is_unlinked() {
                            conflict = true;
                            return false;
                        }
                        state.scan_seen.push(record);
                        state.reads.push(ReadEntry {
                            record,
                            word: snapshot.word,
                        });
                        if snapshot.is_absent() {
                            None
                        } else {
                            // SAFETY: as in `get`.
                            Some(unsafe { value_bytes::<'t>(snapshot.value) })
                        }
                    }
                };
                let Some(value) = value else { return true };
                visited += 1;
                let go_on = visit(key, value) && visited < limit;
                if !go_on {
                    stopped_at = Some(state.keys.push(key));
                }
                go_on
            });
        }
        if conflict {
            return Err(Abort::Conflict);
        }
        let lo = bound_span(&mut self.state.keys, lo);
        let hi = match stopped_at {
            Some(span) => Some((span, true)),
            None => bound_span(&mut self.state.keys, hi),
        };
        let seen_len = self.state.scan_seen.len() - seen_start;
        self.state.scans.push(ScanEntry {
            table,
            lo,
            hi,
            seen_start: seen_start as u32,
            seen_len: seen_len as u32,
        });
        Ok(())
    }

    /// Collects up to `limit` present `(key, value)` pairs of `[lo, hi)`.
    pub fn scan_collect(
        &mut self,
        table: TableId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, &'t [u8])>, Abort> {
        let mut out = Vec::new();
        self.scan(table, lo, hi, limit, |key, value| {
            out.push((key.to_vec(), value));
            true
        })?;
        Ok(out)
    }
}

fn bound_span(keys: &mut KeyArena, bound: Bound<&[u8]>) -> Option<(KeySpan, bool)> {
    match bound {
        Bound::Unbounded => None,
        Bound::Included(key) => Some((keys.push(key), true)),
        Bound::Excluded(key) => Some((keys.push(key), false)),
    }
}

pub(crate) fn to_bound(keys: &KeyArena, bound: Option<(KeySpan, bool)>) -> Bound<&[u8]> {
    match bound {
        None => Bound::Unbounded,
        Some((span, true)) => Bound::Included(keys.get(span)),
        Some((span, false)) => Bound::Excluded(keys.get(span)),
    }
}

/// Frees a value block that was never published.
fn discard(value: Option<NonNull<ValueBlock>>) {
    if let Some(block) = value {
        // SAFETY: the block was allocated for this write and never shared.
        unsafe { free_value(block.as_ptr().cast()) };
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
