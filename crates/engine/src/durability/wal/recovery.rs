//! Recovery of the `wal` mode: load the installed checkpoint (if any) with
//! one thread per checkpoint file (silor §5.1), open the central log (which
//! cuts a torn tail and refuses corruption below the persisted SDL), then
//! replay the commits at or above the checkpoint's start LSN in LSN order.
//! Every write goes through "largest TID wins", so a commit the checkpoint
//! already holds is a no-op.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use epochdb_epoch::EpochManager;
use epochdb_storage::{Storage, StorageError};
use epochdb_wal::{Wal, WalOptions};
use parking_lot::Mutex;

use super::format::{decode, DecodeError, Record, KIND_COMMIT, KIND_PART, KIND_TABLE};

use super::WAL_SUBDIR;
use crate::config::PointIndexes;
use crate::durability::silor::{
    create_dir_durably, load_checkpoint, lock_dirs, read_meta, remove_strays,
};
use crate::durability::{RecoveryPhase, RecoveryProgress, RecoveryReport};
use crate::error::DurabilityError;
use crate::index::PREFETCH_WALKS;
use crate::table::{ReplayWrite, Table, TableId};
use crate::tid::{Tid, EPOCH_LIMIT, STATUS_MASK};

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

/// Recovers the database in `dir` (creating it if new), into tables with a
/// point index when `point_index` (`Config::point_index`).
pub(crate) fn recover(
    storage: Arc<dyn Storage>,
    dir: &Path,
    options: WalOptions,
    lock_real_dir: bool,
    threads: usize,
    point_index: &PointIndexes,
    progress: Option<&RecoveryProgress>,
) -> Result<Recovered, DurabilityError> {
    let threads = threads.max(1);
    let started = Instant::now();
    create_dir_durably(storage.as_ref(), dir)?;
    let locks = if lock_real_dir {
        lock_dirs(&[dir.to_path_buf()])?
    } else {
        Vec::new()
    };
    if storage
        .exists(&dir.join("cpr"))
        .map_err(|e| DurabilityError::from_storage(&e))?
    {
        return Err(DurabilityError::Incompatible(format!(
            "{} holds a database written by the cpr mode; open it with --durability cpr",
            dir.display()
        )));
    }
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
    let meta = read_meta(storage.as_ref(), dir, dirs.len())?;
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
            tables.push(Arc::new(Table::new(
                TableId(*id),
                name.clone(),
                point_index.covers(name),
            )));
        }
        let loaded = Instant::now();
        max_epoch = load_checkpoint(
            storage.as_ref(),
            &dirs,
            meta,
            &tables,
            (&manager, progress),
            (threads, options.direct_io),
            &mut report,
        )?;
        report.checkpoint_seconds = loaded.elapsed().as_secs_f64();
    }

    let wal_dir = dir.join(WAL_SUBDIR);
    create_dir_durably(storage.as_ref(), &wal_dir)?;
    let replay_started = Instant::now();
    let (wal, log, replayed) = replay_streaming(
        storage,
        &wal_dir,
        options.clone(),
        replay_from,
        &mut tables,
        (threads, &manager, point_index, progress),
    )?;
    max_epoch = max_epoch.max(replayed.max_epoch);
    let transactions = replayed.transactions;
    let log_bytes = replayed.log_bytes;
    let mut handle = manager.register().expect("a fresh epoch table has room");
    handle.protect();
    report.log_bytes = log_bytes;
    report.log_threads = threads;
    report.log_entries = transactions;
    // Split transactions whose COMMIT entry never became durable.
    report.dropped_blocks = replayed.unfinished_splits;
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
    if max_epoch + 1 >= EPOCH_LIMIT {
        return Err(DurabilityError::Corrupt(format!(
            "{}: newest logged epoch {max_epoch} leaves no epoch for new TIDs",
            wal_dir.display()
        )));
    }
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

/// Reads the `(txn_tag, tid)` of a COMMIT or PART record without decoding
/// its writes.
fn txn_key(bytes: &[u8]) -> Option<TxnKey> {
    let tag = bytes.get(2..10)?.try_into().ok()?;
    let tid = bytes.get(10..18)?.try_into().ok()?;
    Some((u64::from_le_bytes(tag), u64::from_le_bytes(tid)))
}

/// A transaction's `(txn_tag, tid)`.
type TxnKey = (u64, u64);

/// A PART record held until its transaction's COMMIT: its entry's LSN and
/// its bytes.
type HeldPart = (u64, Vec<u8>);

/// What the replay applied.
struct Replayed {
    transactions: u64,
    max_epoch: u64,
    /// Bytes of log read (entries at every LSN).
    log_bytes: u64,
    /// Split transactions whose COMMIT entry never became durable.
    unfinished_splits: u64,
}

/// Record bytes a batch gathers before it goes to a replayer.
const BATCH_BYTES: usize = 1 << 20;

/// COMMIT and PART records on their way to a replayer, back to back in one
/// buffer that is handed back and reused (fresh buffers per record made the
/// kernel zero a page for every page of log: perf put 63% of a recovery in
/// `clear_page_erms`).
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Per record: the LSN of its entry and where it ends in `bytes`.
    ends: Vec<(u64, usize)>,
    /// The tables as they stood when the batch was sealed: a batch is
    /// sealed before every table creation, so a write to a table that was
    /// created after it is caught.
    tables: Arc<[Arc<Table>]>,
}

impl Batch {
    fn push(&mut self, lsn: u64, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push((lsn, self.bytes.len()));
    }

    fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(lsn, end)| {
            let record = &self.bytes[start..end];
            start = end;
            (lsn, record)
        })
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// What the replayers share.
struct ReplayShared<'a> {
    manager: &'a EpochManager,
    wal_dir: &'a Path,
    transactions: AtomicU64,
    max_epoch: AtomicU64,
    first_error: Mutex<Option<DurabilityError>>,
    /// Set once `first_error` holds an error: the reader checks it per
    /// entry without taking the lock.
    failed: AtomicBool,
}

impl ReplayShared<'_> {
    fn fail(&self, error: DurabilityError) {
        self.first_error.lock().get_or_insert(error);
        self.failed.store(true, Ordering::Release);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Applies a batch; a damaged record fails the whole recovery. Records
    /// are decoded a few at a time, and the keys of about
    /// [`PREFETCH_WALKS`] writes looked up together before any is applied
    /// (`Table::replay_batch`, as the silor replay does).
    fn apply(&self, batch: &Batch, handle: &mut epochdb_epoch::EpochHandle) {
        let mut commits = 0;
        let mut records = batch.records();
        let mut pending: Vec<ReplayWrite<'_>> = Vec::with_capacity(PREFETCH_WALKS);
        let mut more = true;
        while more {
            pending.clear();
            while pending.len() < PREFETCH_WALKS {
                let Some((lsn, record)) = records.next() else {
                    more = false;
                    break;
                };
                match decode_commit(record, lsn, &batch.tables, self.wal_dir, &mut pending) {
                    Ok((last, tid)) => {
                        commits += u64::from(last);
                        self.max_epoch.fetch_max(tid.epoch(), Ordering::Relaxed);
                    }
                    Err(error) => return self.fail(error),
                }
            }
            Table::replay_batch(&pending, handle);
        }
        self.transactions.fetch_add(commits, Ordering::Relaxed);
        handle.refresh();
    }
}

/// Opens the log and replays it while reading it (one pass, in chunks).
///
/// This thread reads the entries in LSN order: it creates tables as their
/// TABLE records come, holds the PARTs of a split transaction until its
/// COMMIT shows it committed (a COMMIT follows its PARTs in LSN order;
/// PARTs never committed are dropped), and packs every COMMIT at or above
/// `replay_from`, with its PARTs, into batches for `threads - 1`
/// replayers (with one thread, it applies them itself).
/// "Largest TID wins" makes the order of application irrelevant, so any
/// split of the records among threads gives the same state (the silor
/// recovery's argument, §5.2).
fn replay_streaming(
    storage: Arc<dyn Storage>,
    wal_dir: &Path,
    options: WalOptions,
    replay_from: u64,
    tables: &mut Vec<Arc<Table>>,
    (threads, manager, point_index, progress): (
        usize,
        &EpochManager,
        &PointIndexes,
        Option<&RecoveryProgress>,
    ),
) -> Result<(Wal, epochdb_wal::RecoveredLog, Replayed), DurabilityError> {
    if let Some(progress) = progress {
        // The log's files, whatever of them lies below the checkpoint too.
        let storage_error = |e: StorageError| DurabilityError::from_storage(&e);
        let paths: Vec<PathBuf> = storage
            .list(wal_dir)
            .map_err(storage_error)?
            .into_iter()
            .map(|name| wal_dir.join(name))
            .collect();
        progress
            .begin_files(
                RecoveryPhase::Log,
                storage.as_ref(),
                paths.iter().map(PathBuf::as_path),
            )
            .map_err(storage_error)?;
    }
    let shared = ReplayShared {
        manager,
        wal_dir,
        transactions: AtomicU64::new(0),
        max_epoch: AtomicU64::new(0),
        first_error: Mutex::new(None),
        failed: AtomicBool::new(false),
    };
    // With one thread the reader applies its batches itself; with more,
    // it reads and `threads - 1` replayers apply.
    let replayers = threads.saturating_sub(1);
    let (full_tx, full_rx) = crossbeam_channel::bounded::<Batch>(replayers * 2);
    let (empty_tx, empty_rx) = crossbeam_channel::unbounded::<Batch>();
    let mut log_bytes = 0u64;
    let mut parts: HashMap<TxnKey, Vec<HeldPart>> = HashMap::new();
    let mut inline = (replayers == 0).then(|| {
        let mut handle = manager.register().expect("room for the reader");
        handle.protect();
        handle
    });
    let opened = std::thread::scope(|scope| {
        for _ in 0..replayers {
            let (full_rx, empty_tx, shared) = (full_rx.clone(), empty_tx.clone(), &shared);
            scope.spawn(move || {
                let mut handle = shared.manager.register().expect("room for every replayer");
                handle.protect();
                for mut batch in full_rx {
                    if !shared.failed() {
                        shared.apply(&batch, &mut handle);
                    }
                    batch.clear();
                    let _ = empty_tx.send(batch);
                }
                handle.unprotect();
            });
        }
        drop(full_rx);
        let mut snapshot: Arc<[Arc<Table>]> = tables.as_slice().into();
        let mut batch = Batch::default();
        let mut send = |batch: &mut Batch, snapshot: &Arc<[Arc<Table>]>| {
            if batch.ends.is_empty() {
                return;
            }
            if let Some(handle) = inline.as_mut() {
                batch.tables = Arc::clone(snapshot);
                shared.apply(batch, handle);
                batch.clear();
                return;
            }
            let mut next = empty_rx.try_recv().unwrap_or_default();
            std::mem::swap(batch, &mut next);
            next.tables = Arc::clone(snapshot);
            // The replayers outlive this thread's sends; a send fails only
            // if they all panicked, which the scope reports.
            let _ = full_tx.send(next);
        };
        let opened = Wal::open_streaming(storage, wal_dir, options, |entry| {
            if shared.failed() {
                return Err(shared.first_error.lock().take().expect("failed"));
            }
            log_bytes += entry.lsn.len();
            if let Some(progress) = progress {
                progress.set_done(log_bytes);
            }
            let lsn = entry.lsn.start;
            let at = |what: String| corrupt_entry(wal_dir, lsn, what);
            for bytes in entry.records() {
                match bytes.get(1).copied() {
                    Some(KIND_TABLE) => {
                        let Record::Table { id, name } = decode_at(bytes, wal_dir, lsn)? else {
                            unreachable!("the kind byte said TABLE")
                        };
                        if id as usize == tables.len() {
                            send(&mut batch, &snapshot);
                            let point = point_index.covers(&name);
                            tables.push(Arc::new(Table::new(TableId(id), name, point)));
                            snapshot = tables.as_slice().into();
                        } else if tables.get(id as usize).is_none_or(|t| t.name != name) {
                            return Err(at(format!(
                                "table {id} '{name}' does not follow the {} tables before it",
                                tables.len()
                            )));
                        }
                    }
                    _ if lsn < replay_from => {} // the checkpoint holds it
                    Some(KIND_PART) => {
                        let key = txn_key(bytes).ok_or_else(|| at("short PART header".into()))?;
                        parts.entry(key).or_default().push((lsn, bytes.to_vec()));
                    }
                    Some(KIND_COMMIT) => {
                        if let Some(held) = txn_key(bytes).and_then(|key| parts.remove(&key)) {
                            for (part_lsn, part) in held {
                                batch.push(part_lsn, &part);
                            }
                        }
                        batch.push(lsn, bytes);
                        if batch.bytes.len() >= BATCH_BYTES {
                            send(&mut batch, &snapshot);
                        }
                    }
                    // Not a kind this build writes: let the decoder name it.
                    _ => {
                        decode_at(bytes, wal_dir, lsn)?;
                        return Err(at("unknown record kind".into()));
                    }
                }
            }
            Ok(())
        });
        send(&mut batch, &snapshot);
        drop(full_tx);
        opened
    });
    if let Some(mut handle) = inline {
        handle.unprotect();
    }
    let (wal, log) = opened?;
    if let Some(error) = shared.first_error.into_inner() {
        return Err(error);
    }
    Ok((
        wal,
        log,
        Replayed {
            transactions: shared.transactions.into_inner(),
            max_epoch: shared.max_epoch.into_inner(),
            log_bytes,
            unfinished_splits: parts.len() as u64,
        },
    ))
}

/// Decodes one COMMIT or (committed) PART record and checks it; appends
/// its writes to `into` and returns whether it is its transaction's last
/// record (a COMMIT) and its TID.
fn decode_commit<'a>(
    bytes: &'a [u8],
    lsn: u64,
    tables: &'a [Arc<Table>],
    wal_dir: &Path,
    into: &mut Vec<ReplayWrite<'a>>,
) -> Result<(bool, Tid), DurabilityError> {
    let at = |what: String| corrupt_entry(wal_dir, lsn, what);
    let Record::Commit {
        last, tid, writes, ..
    } = decode_at(bytes, wal_dir, lsn)?
    else {
        return Err(at("a TABLE record among the writes".into()));
    };
    if tid & STATUS_MASK != 0 {
        return Err(at(format!("tid {tid:#x} has status bits set")));
    }
    let tid = Tid::from_raw(tid);
    for write in writes {
        let Some(table) = tables.get(write.table as usize) else {
            return Err(at(format!("write to unknown table {}", write.table)));
        };
        into.push(ReplayWrite {
            tid,
            table,
            key: write.key,
            value: write.value,
        });
    }
    Ok((last, tid))
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
