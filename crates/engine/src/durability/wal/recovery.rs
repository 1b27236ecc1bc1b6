//! Recovery of the `wal` mode: load the installed checkpoint (if any) with
//! one thread per checkpoint file (silor §5.1), open the central log (which
//! cuts a torn tail and refuses corruption below the persisted SDL), then
//! replay the commits at or above the checkpoint's start LSN in LSN order.
//! Every write goes through "largest TID wins", so a commit the checkpoint
//! already holds is a no-op.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use epochdb_epoch::EpochManager;
use epochdb_storage::Storage;
use epochdb_wal::{RecoveredEntry, Wal, WalOptions};
use parking_lot::Mutex;

use super::format::{decode, DecodeError, Record, KIND_COMMIT, KIND_PART, KIND_TABLE};
use super::{wal_error, WAL_SUBDIR};
use crate::durability::silor::{
    create_dir_durably, load_checkpoint, lock_dirs, read_meta, remove_strays,
};
use crate::durability::RecoveryReport;
use crate::error::DurabilityError;
use crate::table::{Table, TableId};
use crate::tid::{Tid, STATUS_MASK};

/// Names only the `log`/`silor` modes write in their first directory.
const SILOR_FILES: [&str; 2] = ["pepoch", "catalog"];

/// The recovered database and its log, ready to take appends.
pub(crate) struct Recovered {
    pub(crate) tables: Vec<Arc<Table>>,
    /// The epoch the database resumes at: above every recovered TID.
    pub(crate) next_epoch: u64,
    pub(crate) wal: Wal,
    pub(crate) options: WalOptions,
    /// The first LSN of this run.
    pub(crate) start_lsn: u64,
    pub(crate) report: RecoveryReport,
    /// The directory's lock, held while the database is open.
    pub(crate) locks: Vec<std::fs::File>,
    /// The id the next checkpoint takes.
    pub(crate) next_checkpoint_id: u64,
}

/// Recovers the database in `dir` (creating it if new).
pub(crate) fn recover(
    storage: Arc<dyn Storage>,
    dir: &Path,
    options: WalOptions,
    lock_real_dir: bool,
    threads: usize,
) -> Result<Recovered, DurabilityError> {
    let threads = threads.max(1);
    let started = Instant::now();
    create_dir_durably(storage.as_ref(), dir)?;
    let locks = if lock_real_dir {
        lock_dirs(&[dir.to_path_buf()])?
    } else {
        Vec::new()
    };
    for name in SILOR_FILES {
        if storage
            .exists(&dir.join(name))
            .map_err(|e| DurabilityError::from_storage(&e))?
        {
            return Err(DurabilityError::Incompatible(format!(
                "{} holds a database written by the log or silor mode; open it with that mode",
                dir.display()
            )));
        }
    }
    let dirs = [dir.to_path_buf()];
    let meta = read_meta(storage.as_ref(), dir)?;
    remove_strays(storage.as_ref(), &dirs, meta.as_ref())?;
    let mut tables: Vec<Arc<Table>> = Vec::new();
    let mut report = RecoveryReport {
        checkpoint_epochs: meta.as_ref().map(|m| (m.e_l, m.e_h)),
        ..RecoveryReport::default()
    };
    let mut max_epoch = 0u64;
    // Commits below this LSN are in the checkpoint.
    let replay_from = meta.as_ref().map_or(0, |m| m.e_l);
    // One epoch table for every thread recovery runs (loaders, replayers).
    let loaders = meta.as_ref().map_or(0, |m| m.files.len());
    let manager = EpochManager::new(loaders.max(threads) + 2);
    if let Some(meta) = &meta {
        for (i, (id, name)) in meta.tables.iter().enumerate() {
            if *id as usize != i {
                return Err(DurabilityError::Corrupt(format!(
                    "{}: checkpoint {} lists table {id} at position {i}",
                    dir.display(),
                    meta.id
                )));
            }
            tables.push(Arc::new(Table::new(TableId(*id), name.clone())));
        }
        let loaded = Instant::now();
        max_epoch = load_checkpoint(
            storage.as_ref(),
            &dirs,
            meta,
            &tables,
            &manager,
            &mut report,
        )?;
        report.checkpoint_seconds = loaded.elapsed().as_secs_f64();
    }

    let wal_dir = dir.join(WAL_SUBDIR);
    create_dir_durably(storage.as_ref(), &wal_dir)?;
    let (wal, log) = Wal::open(storage, &wal_dir, options.clone()).map_err(|e| wal_error(&e))?;

    let replay_started = Instant::now();
    let log_bytes: u64 = log.entries.iter().map(|e| e.lsn.len()).sum();
    let plan = plan_replay(&log.entries, replay_from, &mut tables, &wal_dir)?;
    let replayed = replay_parallel(
        &log.entries,
        replay_from,
        &tables,
        &plan,
        (threads, &manager),
        &wal_dir,
    )?;
    max_epoch = max_epoch.max(replayed.max_epoch);
    let transactions = replayed.transactions;
    let mut handle = manager.register().expect("a fresh epoch table has room");
    handle.protect();
    report.log_bytes = log_bytes;
    report.log_threads = threads;
    report.log_entries = transactions;
    // Split transactions whose COMMIT entry never became durable.
    report.dropped_blocks = plan.split.values().filter(|c| !**c).count() as u64;
    report.torn_tail_bytes = log.discarded.as_ref().map_or(0, |d| d.bytes);
    // Tombstones have done their job.
    for table in &tables {
        table.remove_absent(&mut handle);
        report.records += table.index_len() as u64;
    }
    handle.unprotect();
    drop(handle);
    report.log_seconds = replay_started.elapsed().as_secs_f64();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(Recovered {
        tables,
        next_epoch: max_epoch + 1,
        wal,
        options,
        start_lsn: log.end_lsn,
        report,
        locks,
        next_checkpoint_id: meta.as_ref().map_or(1, |m| m.id + 1),
    })
}

/// What the sequential pass over the entries' headers found.
struct ReplayPlan {
    /// Split transactions `(txn_tag, tid)` with a PART at or above the
    /// replay start, and whether their COMMIT entry is in the log.
    split: HashMap<(u64, u64), bool>,
    /// LSN of each table's TABLE record (0: from the checkpoint).
    table_lsn: Vec<u64>,
}

/// Reads the `(txn_tag, tid)` of a COMMIT or PART record without decoding
/// its writes.
fn txn_key(bytes: &[u8]) -> Option<(u64, u64)> {
    let tag = bytes.get(2..10)?.try_into().ok()?;
    let tid = bytes.get(10..18)?.try_into().ok()?;
    Some((u64::from_le_bytes(tag), u64::from_le_bytes(tid)))
}

/// The sequential pass: creates the tables in LSN order and finds which
/// split transactions committed (a COMMIT follows its PARTs in LSN order).
/// Only record headers are read; the writes are left to the parallel pass.
fn plan_replay(
    entries: &[RecoveredEntry],
    replay_from: u64,
    tables: &mut Vec<Arc<Table>>,
    wal_dir: &Path,
) -> Result<ReplayPlan, DurabilityError> {
    let mut plan = ReplayPlan {
        split: HashMap::new(),
        table_lsn: vec![0; tables.len()],
    };
    for entry in entries {
        let at = |what: String| corrupt_entry(wal_dir, entry.lsn.start, what);
        for bytes in &entry.records {
            match bytes.get(1).copied() {
                Some(KIND_TABLE) => {
                    let Record::Table { id, name } = decode_at(bytes, wal_dir, entry.lsn.start)?
                    else {
                        unreachable!("the kind byte said TABLE")
                    };
                    if id as usize == tables.len() {
                        tables.push(Arc::new(Table::new(TableId(id), name)));
                        plan.table_lsn.push(entry.lsn.start);
                    } else if tables.get(id as usize).is_none_or(|t| t.name != name) {
                        return Err(at(format!(
                            "table {id} '{name}' does not follow the {} tables before it",
                            tables.len()
                        )));
                    }
                }
                Some(KIND_PART) if entry.lsn.start >= replay_from => {
                    let key = txn_key(bytes).ok_or_else(|| at("short PART header".into()))?;
                    plan.split.insert(key, false);
                }
                Some(KIND_COMMIT) if entry.lsn.start >= replay_from => {
                    if let Some(committed) = txn_key(bytes).and_then(|k| plan.split.get_mut(&k)) {
                        *committed = true;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(plan)
}

/// What the parallel pass applied.
struct Replayed {
    transactions: u64,
    max_epoch: u64,
}

/// Applies every COMMIT at or above `replay_from`, and every PART whose
/// transaction committed, on `threads` threads taking runs of entries in
/// turn. "Largest TID wins" makes the order of application irrelevant,
/// so any split of the entries among threads gives the same state (the
/// silor recovery's argument, §5.2).
fn replay_parallel(
    entries: &[RecoveredEntry],
    replay_from: u64,
    tables: &[Arc<Table>],
    plan: &ReplayPlan,
    (threads, manager): (usize, &EpochManager),
    wal_dir: &Path,
) -> Result<Replayed, DurabilityError> {
    /// Entries one thread takes at a time.
    const RUN: usize = 256;
    let next = AtomicUsize::new(0);
    let transactions = AtomicU64::new(0);
    let max_epoch = AtomicU64::new(0);
    let first_error: Mutex<Option<DurabilityError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let mut handle = manager.register().expect("room for every replayer");
                handle.protect();
                let (mut applied, mut epoch) = (0u64, 0u64);
                loop {
                    let start = next.fetch_add(RUN, Ordering::Relaxed);
                    if start >= entries.len() || first_error.lock().is_some() {
                        break;
                    }
                    for entry in &entries[start..(start + RUN).min(entries.len())] {
                        if entry.lsn.start < replay_from {
                            continue;
                        }
                        match apply_entry(entry, tables, plan, &mut handle, wal_dir) {
                            Ok((commits, e)) => {
                                applied += commits;
                                epoch = epoch.max(e);
                            }
                            Err(error) => {
                                first_error.lock().get_or_insert(error);
                                break;
                            }
                        }
                    }
                    handle.refresh();
                }
                handle.unprotect();
                transactions.fetch_add(applied, Ordering::Relaxed);
                max_epoch.fetch_max(epoch, Ordering::Relaxed);
            });
        }
    });
    if let Some(error) = first_error.into_inner() {
        return Err(error);
    }
    Ok(Replayed {
        transactions: transactions.into_inner(),
        max_epoch: max_epoch.into_inner(),
    })
}

/// Applies one entry's COMMIT/PART records; returns the COMMITs applied
/// and the largest TID epoch seen.
fn apply_entry(
    entry: &RecoveredEntry,
    tables: &[Arc<Table>],
    plan: &ReplayPlan,
    handle: &mut epochdb_epoch::EpochHandle,
    wal_dir: &Path,
) -> Result<(u64, u64), DurabilityError> {
    let at = |what: String| corrupt_entry(wal_dir, entry.lsn.start, what);
    let (mut commits, mut max_epoch) = (0u64, 0u64);
    for bytes in &entry.records {
        let Record::Commit {
            last,
            txn_tag,
            tid,
            writes,
        } = decode_at(bytes, wal_dir, entry.lsn.start)?
        else {
            continue; // TABLE: done by the sequential pass
        };
        if tid & STATUS_MASK != 0 {
            return Err(at(format!("tid {tid:#x} has status bits set")));
        }
        if !last && plan.split.get(&(txn_tag, tid)) != Some(&true) {
            continue; // its COMMIT never became durable
        }
        let tid = Tid::from_raw(tid);
        max_epoch = max_epoch.max(tid.epoch());
        for write in &writes {
            let table = write.table as usize;
            match (tables.get(table), plan.table_lsn.get(table)) {
                (Some(t), Some(&created)) if created <= entry.lsn.start => {
                    t.recover_put(write.key, tid, write.value, handle, false);
                }
                _ => return Err(at(format!("write to unknown table {}", write.table))),
            }
        }
        commits += u64::from(last);
    }
    Ok((commits, max_epoch))
}

fn corrupt_entry(wal_dir: &Path, lsn: u64, what: String) -> DurabilityError {
    DurabilityError::Corrupt(format!("{}: entry at LSN {lsn}: {what}", wal_dir.display()))
}

fn decode_at<'a>(bytes: &'a [u8], wal_dir: &Path, lsn: u64) -> Result<Record<'a>, DurabilityError> {
    decode(bytes).map_err(|e| match e {
        DecodeError::Version(v) => DurabilityError::Incompatible(format!(
            "{}: entry at LSN {lsn} has record format version {v}; this build reads version {}",
            wal_dir.display(),
            super::format::RECORD_VERSION
        )),
        DecodeError::Malformed(why) => corrupt_entry(wal_dir, lsn, why),
    })
}
