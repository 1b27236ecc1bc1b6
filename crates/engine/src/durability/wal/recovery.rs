//! Recovery of the `wal` mode: load the installed checkpoint (if any) with
//! one thread per checkpoint file (silor §5.1), open the central log (which
//! cuts a torn tail and refuses corruption below the persisted SDL), then
//! replay the commits at or above the checkpoint's start LSN in LSN order.
//! Every write goes through "largest TID wins", so a commit the checkpoint
//! already holds is a no-op.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use epochdb_epoch::EpochManager;
use epochdb_storage::Storage;
use epochdb_wal::{Wal, WalOptions};

use super::format::{decode, DecodeError, Record};
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

type Pending = Vec<(u32, Vec<u8>, Option<Vec<u8>>)>;

/// Recovers the database in `dir` (creating it if new).
pub(crate) fn recover(
    storage: Arc<dyn Storage>,
    dir: &Path,
    options: WalOptions,
    lock_real_dir: bool,
) -> Result<Recovered, DurabilityError> {
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
        let loaders = EpochManager::new(meta.files.len() + 2);
        max_epoch = load_checkpoint(
            storage.as_ref(),
            &dirs,
            meta,
            &tables,
            &loaders,
            &mut report,
        )?;
        report.checkpoint_seconds = loaded.elapsed().as_secs_f64();
    }

    let wal_dir = dir.join(WAL_SUBDIR);
    create_dir_durably(storage.as_ref(), &wal_dir)?;
    let (wal, log) = Wal::open(storage, &wal_dir, options.clone()).map_err(|e| wal_error(&e))?;

    let replay_started = Instant::now();
    let manager = EpochManager::new(2);
    let mut handle = manager.register().expect("a fresh epoch table has room");
    handle.protect();
    // Parts of split transactions, by (txn_tag, tid): a tag alone may repeat
    // across restarts, a tag with its TID may not (TIDs grow).
    let mut parts: HashMap<(u64, u64), Pending> = HashMap::new();
    let mut transactions = 0u64;
    let mut log_bytes = 0u64;
    for entry in &log.entries {
        log_bytes += entry.lsn.len();
        let at = |what: String| {
            DurabilityError::Corrupt(format!(
                "{}: entry at LSN {}: {what}",
                wal_dir.display(),
                entry.lsn.start
            ))
        };
        for bytes in &entry.records {
            let record = decode(bytes).map_err(|e| match e {
                DecodeError::Version(v) => DurabilityError::Incompatible(format!(
                    "{}: entry at LSN {} has record format version {v}; this build reads version {}",
                    wal_dir.display(),
                    entry.lsn.start,
                    super::format::RECORD_VERSION
                )),
                DecodeError::Malformed(why) => at(why),
            })?;
            match record {
                Record::Table { id, name } => {
                    if id as usize == tables.len() {
                        tables.push(Arc::new(Table::new(TableId(id), name)));
                    } else if tables.get(id as usize).is_none_or(|t| t.name != name) {
                        return Err(at(format!(
                            "table {id} '{name}' does not follow the {} tables before it",
                            tables.len()
                        )));
                    }
                }
                // In the checkpoint (a split transaction with a part below
                // the start is wholly in it: see `checkpoint.rs`).
                Record::Commit { .. } if entry.lsn.start < replay_from => {}
                Record::Commit {
                    last,
                    txn_tag,
                    tid,
                    writes,
                } => {
                    if tid & STATUS_MASK != 0 {
                        return Err(at(format!("tid {tid:#x} has status bits set")));
                    }
                    let tid = Tid::from_raw(tid);
                    max_epoch = max_epoch.max(tid.epoch());
                    for write in &writes {
                        if tables.get(write.table as usize).is_none() {
                            return Err(at(format!("write to unknown table {}", write.table)));
                        }
                    }
                    if !last {
                        parts.entry((txn_tag, tid.raw())).or_default().extend(
                            writes
                                .iter()
                                .map(|w| (w.table, w.key.to_vec(), w.value.map(<[u8]>::to_vec))),
                        );
                        continue;
                    }
                    if let Some(earlier) = parts.remove(&(txn_tag, tid.raw())) {
                        for (table, key, value) in &earlier {
                            tables[*table as usize].recover_put(
                                key,
                                tid,
                                value.as_deref(),
                                &mut handle,
                                false,
                            );
                        }
                    }
                    for write in &writes {
                        tables[write.table as usize].recover_put(
                            write.key,
                            tid,
                            write.value,
                            &mut handle,
                            false,
                        );
                    }
                    transactions += 1;
                }
            }
        }
    }
    report.log_bytes = log_bytes;
    report.log_threads = 1;
    report.log_entries = transactions;
    // Split transactions whose COMMIT entry never became durable.
    report.dropped_blocks = parts.len() as u64;
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
