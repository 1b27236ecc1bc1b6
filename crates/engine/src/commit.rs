//! Silo's commit protocol (silor-osdi14 §2; Silo §4.2):
//!
//! 1. lock the write set in a global order (record address);
//! 2. read the global epoch `E` — the serialization point;
//! 3. validate the read set (TID unchanged, not locked by another), the
//!    absent keys and the scans (phantom protection);
//! 4. compute the TID (rules (a)–(c), `tid::commit_tid`);
//! 5. hand the commit to the durability mode (write set still locked);
//! 6. install the new values with the TID and unlock;
//! 7. unlink the records it deleted from their indexes.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use epochdb_epoch::{EpochHandle, EpochManager};

use crate::durability::{CommitView, WorkerLog};
use crate::error::Abort;
use crate::record::{free_record, RecordRef};
use crate::table::Table;
use crate::ticket::Ticket;
use crate::tid::{commit_tid, tid_of, Tid, ABSENT_BIT, LOCK_BIT, UNLINKED_BIT};
use crate::txn::{TxState, WriteSet};

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
}

/// Tries to commit the transaction in `state`. On success the write set's
/// values are installed and `state` must be cleared; on conflict the caller
/// must call [`rollback`].
pub(crate) fn commit(ctx: &mut CommitContext<'_>, state: &mut TxState) -> Result<Ticket, Abort> {
    if state.writes.entries.is_empty() {
        if !validate(state) {
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

    // A new record for a key whose old record may have been deleted and
    // unlinked must be ordered after that delete: the table's insert floor.
    // Read before the epoch, not after: a delete of some other key that
    // commits in a later epoch while we serialize raises the floor too,
    // and a TID above it would be in an epoch we never read. A delete we
    // must follow raised the floor before it unlinked the key we found
    // missing, so this read sees it.
    let mut insert_floor = Tid::ZERO;
    for entry in &state.writes.entries {
        if entry.inserted {
            insert_floor = insert_floor.max(ctx.tables[entry.table.0 as usize].insert_floor());
        }
    }

    // Serialization point: the epoch is read after every lock is held.
    ctx.log.begin_commit();
    fence(Ordering::SeqCst);
    let epoch = ctx.epochs.current();

    if !validate(state) {
        ctx.log.abort_commit();
        unlock_prefix(&state.writes, state.writes.len());
        return Err(Abort::Conflict);
    }

    let mut max_seen = (*ctx.last_tid).max(insert_floor);
    for read in &state.reads {
        max_seen = max_seen.max(tid_of(read.word));
    }
    for entry in &state.writes.entries {
        max_seen = max_seen.max(tid_of(entry.record.get().word()));
    }
    let Some(tid) = commit_tid(max_seen, *ctx.last_tid, epoch) else {
        // This epoch's sequence space is used up; retry in the next one.
        ctx.log.abort_commit();
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
    // Deleted records leave their index at once: the leaf's version changes,
    // so any transaction that saw the key (or the range) aborts, and the
    // table's insert floor orders a later re-insert after the delete.
    for entry in &state.writes.entries {
        if entry.value.is_none() {
            let key = state.writes.keys.get(entry.key);
            unlink_deleted(
                &ctx.tables[entry.table.0 as usize],
                key,
                entry.record,
                tid,
                ctx.handle,
            );
        }
    }
    *ctx.last_tid = tid;
    Ok(ticket)
}

/// Undoes an uncommitted transaction: unlinks its insert placeholders (its
/// pending values live in the arena and go when the state is cleared).
/// Records it locked at commit must already be unlocked.
pub(crate) fn rollback(tables: &[Arc<Table>], handle: &mut EpochHandle, state: &TxState) {
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

/// Checks the read set, the absent keys and the scans at the
/// serialization point. The write set must be sorted (and locked).
fn validate(state: &TxState) -> bool {
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
    // Phantom protection: every leaf scanned or proving a key missing must
    // be unchanged (our own inserts were patched in when made).
    state.nodes.iter().all(|leaf| leaf.unchanged())
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
    if still_ours {
        table.raise_insert_floor(tid);
    }
    if still_ours && table.remove_if_is(key, record, handle) {
        r.unlink_and_unlock();
        // SAFETY: removed from the index; retired once.
        unsafe { handle.retire(record.as_ptr().cast(), free_record) };
    } else {
        r.unlock();
    }
}
