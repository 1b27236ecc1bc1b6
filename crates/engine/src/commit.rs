//! Silo's commit protocol (silor-osdi14 §2; Silo §4.2):
//!
//! 1. lock the write set in a global order (record address);
//! 2. read the global epoch `E` — the serialization point;
//! 3. validate the read set (TID unchanged, not locked by another), the
//!    absent keys and the scans (phantom protection);
//! 4. compute the TID (rules (a)–(c), `tid::commit_tid`);
//! 5. hand the commit to the durability mode (write set still locked);
//! 6. install the new values with the TID and unlock;
//! 7. queue the records it deleted for unlinking once their epoch is safe.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use epochdb_epoch::{EpochHandle, EpochManager};

use crate::durability::{CommitView, WorkerLog};
use crate::error::Abort;
use crate::record::{free_record, RecordRef};
use crate::table::{Table, TableId};
use crate::ticket::Ticket;
use crate::tid::{commit_tid, tid_of, Tid, ABSENT_BIT, LOCK_BIT, UNLINKED_BIT};
use crate::txn::{to_bound, TxState, WriteSet};

/// Spins before a commit gives up on a record lock. Insert placeholders
/// stay locked for their whole transaction, so an unbounded wait could
/// deadlock; a bounded one turns that into an abort and a retry.
const LOCK_SPINS: u32 = 2_000;

/// What a commit needs from its worker.
pub(crate) struct CommitContext<'a> {
    pub(crate) tables: &'a [Arc<Table>],
    pub(crate) epochs: &'a EpochManager,
    pub(crate) handle: &'a mut EpochHandle,
    pub(crate) log: &'a mut dyn WorkerLog,
    pub(crate) last_tid: &'a mut Tid,
    pub(crate) unlinks: &'a mut VecDeque<PendingUnlink>,
}

/// Tries to commit the transaction in `state`. On success the write set's
/// values are installed and `state` must be cleared; on conflict the caller
/// must call [`rollback`].
pub(crate) fn commit(ctx: &mut CommitContext<'_>, state: &mut TxState) -> Result<Ticket, Abort> {
    if state.writes.entries.is_empty() {
        if !validate(ctx.tables, state) {
            return Err(Abort::Conflict);
        }
        let max_read = state
            .reads
            .iter()
            .map(|read| tid_of(read.word))
            .max()
            .unwrap_or(Tid::ZERO);
        return Ok(ctx.log.read_only(max_read));
    }

    state
        .writes
        .entries
        .sort_unstable_by_key(|entry| entry.record);
    let entries = &state.writes.entries;
    for (locked, entry) in entries.iter().enumerate() {
        if entry.inserted {
            continue;
        }
        let record = entry.record.get();
        if !record.try_lock(LOCK_SPINS) {
            unlock_prefix(&state.writes, locked);
            return Err(Abort::Conflict);
        }
        if record.word() & UNLINKED_BIT != 0 {
            // Removed from its index since we found it: writing it would be
            // lost. Retry with a fresh lookup.
            unlock_prefix(&state.writes, locked + 1);
            return Err(Abort::Conflict);
        }
    }

    // Serialization point: the epoch is read after every lock is held.
    fence(Ordering::SeqCst);
    let epoch = ctx.epochs.current();

    if !validate(ctx.tables, state) {
        unlock_prefix(&state.writes, state.writes.len());
        return Err(Abort::Conflict);
    }

    let mut max_seen = *ctx.last_tid;
    for read in &state.reads {
        max_seen = max_seen.max(tid_of(read.word));
    }
    for entry in &state.writes.entries {
        max_seen = max_seen.max(tid_of(entry.record.get().word()));
    }
    let Some(tid) = commit_tid(max_seen, *ctx.last_tid, epoch) else {
        // This epoch's sequence space is used up; retry in the next one.
        unlock_prefix(&state.writes, state.writes.len());
        std::thread::yield_now();
        return Err(Abort::Conflict);
    };

    let ticket = ctx.log.log_commit(&CommitView {
        tid,
        writes: &state.writes,
    });

    for entry in &state.writes.entries {
        // SAFETY: pending values live in the arena until the state clears.
        let value = entry.value.map(|bytes| unsafe { bytes.as_slice() });
        entry
            .record
            .get()
            .install_and_unlock(tid, value, ctx.handle);
    }
    for entry in &state.writes.entries {
        if entry.value.is_none() {
            ctx.unlinks.push_back(PendingUnlink {
                table: entry.table,
                key: state.writes.keys.get(entry.key).into(),
                record: entry.record,
                tid,
            });
        }
    }
    *ctx.last_tid = tid;
    Ok(ticket)
}

/// Undoes an uncommitted transaction: unlinks its insert placeholders and
/// frees its pending values. Records it locked at commit must already be
/// unlocked.
pub(crate) fn rollback(tables: &[Arc<Table>], handle: &mut EpochHandle, state: &mut TxState) {
    let writes = &state.writes;
    for entry in &writes.entries {
        if entry.inserted {
            let key = writes.keys.get(entry.key);
            let table = &tables[entry.table.0 as usize];
            let removed = table.remove_if_is(key, entry.record, handle);
            debug_assert!(removed, "an insert placeholder left its index early");
            entry.record.get().unlink_and_unlock();
            // SAFETY: removed from the index above; retired once.
            unsafe { handle.retire(entry.record.as_ptr().cast(), free_record) };
        }
    }
}

/// Unlocks the first `count` write-set records, skipping placeholders
/// (which stay locked until rollback unlinks them).
fn unlock_prefix(writes: &WriteSet, count: usize) {
    for entry in &writes.entries[..count] {
        if !entry.inserted {
            entry.record.get().unlock();
        }
    }
}

/// Whether `record` is in the (sorted) write set, and if so whether it is
/// our insert placeholder.
fn ownership(writes: &WriteSet, record: RecordRef) -> Option<bool> {
    writes
        .entries
        .binary_search_by(|entry| entry.record.cmp(&record))
        .ok()
        .map(|index| writes.entries[index].inserted)
}

/// Checks the read set, the absent keys and the scans at the
/// serialization point. The write set must be sorted (and locked).
fn validate(tables: &[Arc<Table>], state: &TxState) -> bool {
    let writes = &state.writes;
    for read in &state.reads {
        let current = read.record.get().word();
        if read.word & LOCK_BIT != 0 {
            return false; // observed another transaction's placeholder
        }
        if current & LOCK_BIT != 0 && !writes.contains_sorted(read.record) {
            return false;
        }
        if current & !LOCK_BIT != read.word {
            return false;
        }
    }
    // A key seen missing must still be missing, or hold only our own
    // placeholder. Any other record there is new since the read: it may have
    // been present at the serialization point, so abort (conservatively).
    for absent in &state.absent {
        let table = &tables[absent.table.0 as usize];
        if let Some(record) = table.lookup(state.keys.get(absent.key)) {
            if ownership(writes, record) != Some(true) {
                return false;
            }
        }
    }
    for scan in &state.scans {
        let table = &tables[scan.table.0 as usize];
        let start = scan.seen_start as usize;
        let expected = &state.scan_seen[start..start + scan.seen_len as usize];
        let mut position = 0usize;
        let mut same = true;
        table.scan(
            to_bound(&state.keys, scan.lo),
            to_bound(&state.keys, scan.hi),
            |_, record| {
                if ownership(writes, record) == Some(true) {
                    return true; // our own insert, invisible to the scan set
                }
                if expected.get(position) != Some(&record)
                    || record.get().word() & UNLINKED_BIT != 0
                {
                    same = false;
                    return false;
                }
                position += 1;
                true
            },
        );
        if !same || position != expected.len() {
            return false;
        }
    }
    true
}

/// A deleted record waiting to leave its index.
///
/// Unlinking at once would let a concurrent scan or missing-key read see the
/// range unchanged after an insert and a delete (ABA) and validate wrongly;
/// so a record deleted in epoch `e` is unlinked only once the safe epoch
/// reaches `e`: every transaction that could have observed the range
/// before the delete has finished by then, and the others see the absent
/// record, whose presence changes their scan set.
pub(crate) struct PendingUnlink {
    pub(crate) table: TableId,
    pub(crate) key: Box<[u8]>,
    pub(crate) record: RecordRef,
    pub(crate) tid: Tid,
}

/// Unlinks the pending deletes whose epoch is safe, oldest first.
pub(crate) fn unlink_safe(
    tables: &[Arc<Table>],
    unlinks: &mut VecDeque<PendingUnlink>,
    safe_epoch: u64,
    handle: &mut EpochHandle,
) {
    while unlinks
        .front()
        .is_some_and(|pending| pending.tid.epoch() <= safe_epoch)
    {
        let pending = unlinks.pop_front().expect("front checked");
        let table = &tables[pending.table.0 as usize];
        unlink_deleted(table, &pending.key, pending.record, pending.tid, handle);
    }
}

/// Removes a deleted record from its index so its memory is reclaimed,
/// unless a writer has re-inserted the key since.
fn unlink_deleted(
    table: &Table,
    key: &[u8],
    record: RecordRef,
    tid: Tid,
    handle: &mut EpochHandle,
) {
    let r = record.get();
    if !r.try_lock(0) {
        return; // a writer is re-inserting the key; it keeps the record
    }
    let word = r.word();
    let still_ours = word & ABSENT_BIT != 0 && word & UNLINKED_BIT == 0 && tid_of(word) == tid;
    if still_ours && table.remove_if_is(key, record, handle) {
        r.unlink_and_unlock();
        // SAFETY: removed from the index; retired once.
        unsafe { handle.retire(record.as_ptr().cast(), free_record) };
    } else {
        r.unlock();
    }
}
