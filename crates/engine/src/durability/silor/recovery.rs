//! Recovery (silor §5): read the installed checkpoint's metadata, remove
//! stray files, load the checkpoint with n×m threads, then replay the logs
//! with g threads per directory, newest file first; the largest TID wins,
//! entries outside `[e_l, e_p]` are skipped, and tombstones are kept until
//! replay ends. Before the database opens, every log file that holds
//! records past `e_p` or a torn tail is rewritten without them, so a later
//! recovery (with a larger `e_p`) can never pick them up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use epochdb_epoch::{EpochHandle, EpochManager};
use epochdb_storage::{decode_block, FrameError, ScanBuffers, Storage, StorageError};
use parking_lot::Mutex;

use super::files::{
    free_old_data_name, parse_ckpt_file_name, parse_log_name, replace_atomically, LogName, CATALOG,
    CHECKPOINT_META, CPR_MARKER, DIRECTORY, LOCK, PEPOCH, TMP_SUFFIX,
};
use super::format::{
    encode_catalog_header, encode_cpr_marker, encode_dir_identity, parse_catalog_table,
    parse_ckpt_block, parse_dir_identity, parse_log_block, parse_log_header, versioned_blocks,
    BlockError, CheckpointMeta, PepochRecord, SyncedLog, CATALOG_MAGIC, CKPT_MAGIC, CPR_MAGIC,
    DIR_MAGIC, FORMAT_VERSION, KIND_CATALOG_HEADER, KIND_CATALOG_TABLE, KIND_CKPT, KIND_CPR,
    KIND_DIR, KIND_LOG, KIND_LOG_HEADER, KIND_META, KIND_PEPOCH, LOG_MAGIC, META_MAGIC,
    PEPOCH_MAGIC,
};
use super::reader::{read_rest, scan_blocks, ScanEnd};
use crate::config::PointIndexes;
use crate::durability::{FileProgress, RecoveryPhase, RecoveryProgress};
use crate::error::DurabilityError;
use crate::index::PREFETCH_WALKS;
use crate::table::{ReplayWrite, Table, TableId};
use crate::tid::{Tid, EPOCH_LIMIT};

/// What a recovery did and how long it took (`epochdb recover` prints it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryReport {
    /// Wall time of the whole recovery, in seconds.
    pub seconds: f64,
    /// Time spent loading the checkpoint.
    pub checkpoint_seconds: f64,
    /// Time spent replaying logs.
    pub log_seconds: f64,
    /// Bytes of checkpoint data read.
    pub checkpoint_bytes: u64,
    /// Bytes of log read.
    pub log_bytes: u64,
    /// Checkpoint loader threads (n × m).
    pub checkpoint_threads: usize,
    /// Log replay threads (g per directory, all directories).
    pub log_threads: usize,
    /// The persistent epoch recovered to: every transaction at or below it.
    pub persistent_epoch: u64,
    /// The installed checkpoint's `[e_l, e_h]`, if there was one.
    pub checkpoint_epochs: Option<(u64, u64)>,
    /// Log entries (transactions) applied.
    pub log_entries: u64,
    /// Log blocks a replayer still scanning a file handed to one with no
    /// file left, so one long file does not leave the others idle.
    pub log_blocks_shared: u64,
    /// Log blocks past `e_p`, dropped (their commits were never acknowledged).
    pub dropped_blocks: u64,
    /// Bytes of torn tail discarded from the logs being written at the crash.
    pub torn_tail_bytes: u64,
    /// Records in the recovered database.
    pub records: u64,
    /// `cpr` mode: each session's CPR point in the installed checkpoint,
    /// `(session id, serial number of its last transaction there)`, by
    /// session id. Empty in the other modes.
    pub sessions: Vec<(u64, u64)>,
}

impl RecoveryReport {
    /// Recovery throughput over the bytes read, in MB/s.
    pub fn mb_per_second(&self) -> f64 {
        let bytes = (self.checkpoint_bytes + self.log_bytes) as f64;
        if self.seconds > 0.0 {
            bytes / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// The recovered database, ready to open.
pub(crate) struct Recovered {
    pub(crate) tables: Vec<Arc<Table>>,
    /// The epoch the database resumes at: above everything on disk.
    pub(crate) next_epoch: u64,
    pub(crate) e_p: u64,
    /// The id the next checkpoint takes.
    pub(crate) next_checkpoint_id: u64,
    pub(crate) report: RecoveryReport,
    /// Locks on the directories, held while the database is open.
    pub(crate) locks: Vec<std::fs::File>,
}

/// Takes an exclusive lock on `LOCK` in every (real) directory, so a second
/// process cannot recover and write the same files while one runs.
pub(crate) fn lock_dirs(dirs: &[PathBuf]) -> Result<Vec<std::fs::File>, DurabilityError> {
    let mut locks = Vec::new();
    for dir in dirs {
        let path = dir.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| DurabilityError::Io(format!("opening {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => locks.push(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(DurabilityError::InUse(format!(
                    "{} is locked by another process that has this database open",
                    path.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(DurabilityError::Io(format!(
                    "locking {}: {e}",
                    path.display()
                )))
            }
        }
    }
    Ok(locks)
}

/// Creates `dir` (and missing ancestors) if it does not exist; every
/// directory created reaches its parent durably.
pub(crate) fn create_dir_durably(storage: &dyn Storage, dir: &Path) -> Result<(), DurabilityError> {
    if !storage.exists(dir).map_err(io)? {
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !storage.exists(a).unwrap_or(false))
            .collect();
        storage.create_dir_all(dir).map_err(io)?;
        for created in missing.iter().rev() {
            if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
                storage.sync_dir(parent).map_err(io)?;
            }
        }
    }
    Ok(())
}

fn io(error: StorageError) -> DurabilityError {
    DurabilityError::from_storage(&error)
}

fn corrupt(path: &Path, error: impl std::fmt::Display) -> DurabilityError {
    DurabilityError::Corrupt(format!("{}: {error}", path.display()))
}

/// A checksummed block of a kind its file does not hold: damage (or a
/// format this build does not know), refused as `epochdb inspect` flags it.
fn wrong_kind(path: &Path, offset: u64, kind: u16) -> DurabilityError {
    corrupt(
        path,
        format!("offset {offset}: block kind {kind} does not belong in this file"),
    )
}

fn block_error(path: &Path, error: BlockError) -> DurabilityError {
    match error {
        BlockError::Version { .. } => {
            DurabilityError::Incompatible(format!("{}: {error}", path.display()))
        }
        BlockError::Frame(_) => corrupt(path, error),
    }
}

/// Which files a database keeps: logs and `pepoch` (`log`, `silor`), or
/// checkpoints alone (`cpr`, marked by its `cpr` file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    Logged,
    CheckpointsOnly,
}

/// Recovers the database stored in `dirs` (creating them if new), into
/// tables with a point index when `point_index` (`Config::point_index`).
/// `direct`: read the files past the page cache (`SilorOptions::direct_io`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn recover(
    storage: &dyn Storage,
    dirs: &[PathBuf],
    layout: Layout,
    (threads, direct): (usize, bool),
    lock_real_dirs: bool,
    point_index: &PointIndexes,
    progress: Option<&RecoveryProgress>,
) -> Result<Recovered, DurabilityError> {
    let started = Instant::now();
    for dir in dirs {
        create_dir_durably(storage, dir)?;
    }
    let locks = if lock_real_dirs {
        lock_dirs(dirs)?
    } else {
        Vec::new()
    };
    let dir0 = &dirs[0];
    if storage
        .exists(&dir0.join(crate::durability::wal::WAL_SUBDIR))
        .map_err(io)?
    {
        return Err(DurabilityError::Incompatible(format!(
            "{} holds a database written by the wal mode; open it with --durability wal",
            dir0.display()
        )));
    }
    check_identities(storage, dirs)?;
    check_layout(storage, dir0, layout)?;
    let names = read_catalog(storage, dir0)?;
    let meta = read_meta(storage, dir0, dirs.len())?;
    let mut pepoch = read_pepoch(storage, dir0)?;
    if layout == Layout::CheckpointsOnly {
        // No log: the installed checkpoint is the durable state.
        pepoch.e_p = meta.as_ref().map_or(0, |m| m.e_h);
    }
    let e_p = pepoch.e_p;
    if !pepoch.logs.is_empty() && pepoch.logs.len() != dirs.len() {
        // Replaying with a directory missing would silently lose its log.
        return Err(DurabilityError::Incompatible(format!(
            "{}: the database was written with {} log directories, but {} were given; pass every directory, in the original order",
            dir0.join(PEPOCH).display(),
            pepoch.logs.len(),
            dirs.len()
        )));
    }
    if let Some(meta) = meta.as_ref().filter(|m| m.e_h > e_p) {
        // The manager installs a checkpoint only after `pepoch` says at
        // least its e_h (§4.2's e_h ≤ e_p), so this is damage.
        return Err(DurabilityError::Corrupt(format!(
            "{}: checkpoint {} ends at epoch {} but {} says only {e_p} is persistent",
            dir0.display(),
            meta.id,
            meta.e_h,
            dir0.join(PEPOCH).display()
        )));
    }
    let e_l = meta.as_ref().map_or(0, |m| m.e_l);
    remove_strays(storage, dirs, meta.as_ref())?;

    let tables: Vec<Arc<Table>> = names
        .iter()
        .enumerate()
        .map(|(id, name)| {
            Arc::new(Table::new(
                TableId(id as u32),
                name.clone(),
                point_index.covers(name),
            ))
        })
        .collect();
    let mut report = RecoveryReport {
        persistent_epoch: e_p,
        checkpoint_epochs: meta.as_ref().map(|m| (m.e_l, m.e_h)),
        sessions: meta
            .as_ref()
            .map(|m| m.sessions.clone())
            .unwrap_or_default(),
        ..RecoveryReport::default()
    };
    let manager = EpochManager::new(threads.max(1) * dirs.len() + 2);

    if let Some(meta) = &meta {
        let loaded = Instant::now();
        // e_h bounds every TID in the checkpoint (next_epoch below).
        let newest = load_checkpoint(
            storage,
            dirs,
            meta,
            &tables,
            (&manager, progress),
            (threads, direct),
            &mut report,
        )?;
        if newest > meta.e_h {
            return Err(DurabilityError::Corrupt(format!(
                "{}: checkpoint {} holds a record of epoch {newest}, past its e_h {}",
                dir0.join(CHECKPOINT_META).display(),
                meta.id,
                meta.e_h
            )));
        }
        report.checkpoint_seconds = loaded.elapsed().as_secs_f64();
    }

    let replayed = Instant::now();
    let max_epoch = replay_logs(
        storage,
        dirs,
        &pepoch,
        e_l,
        &tables,
        (&manager, progress),
        (threads, direct),
        &mut report,
    )?;
    report.log_seconds = replayed.elapsed().as_secs_f64();

    // Tombstones have done their job (hiding older values in any order).
    let mut handle = manager.register().expect("recovery epoch table has room");
    handle.protect();
    for table in &tables {
        table.remove_absent(&mut handle);
        report.records += table.index_len() as u64;
    }
    handle.unprotect();
    drop(handle);

    let e_h = meta.as_ref().map_or(0, |m| m.e_h);
    let next_epoch = e_p.max(e_h).max(max_epoch) + 1;
    if next_epoch >= EPOCH_LIMIT {
        // Epochs this large cannot be in a TID: a damaged pepoch file,
        // checkpoint metadata or log (which one is the largest here).
        return Err(DurabilityError::Corrupt(format!(
            "recovered epoch {next_epoch} does not fit a TID (pepoch {e_p}, \
             checkpoint e_h {e_h}, newest logged epoch {max_epoch})"
        )));
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(Recovered {
        tables,
        next_epoch,
        e_p,
        next_checkpoint_id: meta.as_ref().map_or(1, |m| m.id + 1),
        report,
        locks,
    })
}

/// Refuses a directory written by a mode of the other layout; marks a new
/// `cpr` database (before its catalog exists, so a database is never
/// without its mark).
fn check_layout(storage: &dyn Storage, dir0: &Path, layout: Layout) -> Result<(), DurabilityError> {
    let marker = dir0.join(CPR_MARKER);
    let is_cpr = storage.exists(&marker).map_err(io)?;
    let is_new = !storage.exists(&dir0.join(CATALOG)).map_err(io)?;
    match layout {
        Layout::Logged if is_cpr => Err(DurabilityError::Incompatible(format!(
            "{} holds a database written by the cpr mode; open it with --durability cpr",
            dir0.display()
        ))),
        Layout::CheckpointsOnly if is_new => {
            replace_atomically(storage, &marker, &encode_cpr_marker()).map_err(io)
        }
        Layout::CheckpointsOnly if !is_cpr => Err(DurabilityError::Incompatible(format!(
            "{} holds a database written by the log or silor mode; open it with that mode",
            dir0.display()
        ))),
        Layout::CheckpointsOnly => {
            let data = storage.read(&marker).map_err(io)?;
            match decode_block(&data, 0, CPR_MAGIC) {
                Ok(Some((block, _))) if block.version == FORMAT_VERSION => {
                    if block.kind != KIND_CPR {
                        Err(wrong_kind(&marker, 0, block.kind))
                    } else if block.payload != b"cpr" {
                        Err(corrupt(&marker, "not a cpr marker's payload"))
                    } else {
                        Ok(())
                    }
                }
                Ok(Some((block, _))) => Err(block_error(
                    &marker,
                    BlockError::Version {
                        offset: 0,
                        found: block.version,
                    },
                )),
                Ok(None) => Err(corrupt(&marker, "empty cpr marker")),
                Err(error) => Err(corrupt(&marker, error)),
            }
        }
        Layout::Logged => Ok(()),
    }
}

/// Checks (or, in a new directory, writes) each directory's identity, so
/// directories given in another order or from another database are refused.
fn check_identities(storage: &dyn Storage, dirs: &[PathBuf]) -> Result<(), DurabilityError> {
    let count = dirs.len() as u32;
    for (index, dir) in dirs.iter().enumerate() {
        let path = dir.join(DIRECTORY);
        if !storage.exists(&path).map_err(io)? {
            replace_atomically(storage, &path, &encode_dir_identity(index as u32, count))
                .map_err(io)?;
            continue;
        }
        let data = storage.read(&path).map_err(io)?;
        let (block, _) = match decode_block(&data, 0, DIR_MAGIC) {
            Ok(Some(found)) => found,
            Ok(None) => return Err(corrupt(&path, "empty directory identity")),
            Err(error) => return Err(corrupt(&path, error)),
        };
        if block.version != FORMAT_VERSION {
            let found = block.version;
            return Err(block_error(&path, BlockError::Version { offset: 0, found }));
        }
        if block.kind != KIND_DIR {
            return Err(wrong_kind(&path, 0, block.kind));
        }
        let (found_index, found_count) =
            parse_dir_identity(block.payload).map_err(|e| corrupt(&path, e))?;
        if (found_index, found_count) != (index as u32, count) {
            return Err(DurabilityError::Incompatible(format!(
                "{} is directory {found_index} of {found_count} of its database (counting from 0), but was given as directory {index} of {count}; pass every directory, in the original order",
                dir.display(),
            )));
        }
    }
    Ok(())
}

/// Reads (or creates) the table catalog; cuts a torn tail off it so later
/// appends stay readable.
fn read_catalog(storage: &dyn Storage, dir0: &Path) -> Result<Vec<String>, DurabilityError> {
    let path = dir0.join(CATALOG);
    if !storage.exists(&path).map_err(io)? {
        let mut file = storage.create(&path).map_err(io)?;
        file.append(&encode_catalog_header()).map_err(io)?;
        file.sync().map_err(io)?;
        storage.sync_dir(dir0).map_err(io)?;
        return Ok(Vec::new());
    }
    let data = storage.read(&path).map_err(io)?;
    let mut names = Vec::new();
    let mut valid_end = 0;
    let mut saw_header = false;
    for item in versioned_blocks(&data, CATALOG_MAGIC) {
        match item {
            Ok((offset, block)) => {
                match block.kind {
                    KIND_CATALOG_HEADER if offset == 0 => saw_header = true,
                    KIND_CATALOG_TABLE if saw_header => {
                        let (id, name) = parse_catalog_table(block.payload)
                            .map_err(|e| corrupt(&path, format!("offset {offset}: {e}")))?;
                        if id as usize != names.len() {
                            return Err(corrupt(
                                &path,
                                format!("offset {offset}: table id {id} out of order"),
                            ));
                        }
                        names.push(name);
                    }
                    kind => {
                        return Err(corrupt(
                            &path,
                            format!("offset {offset}: unexpected block kind {kind}"),
                        ))
                    }
                }
                valid_end = offset + 16 + block.payload.len();
            }
            // The create_table that was appending never returned.
            Err(BlockError::Frame(FrameError::TornTail { .. })) => break,
            Err(error) => return Err(block_error(&path, error)),
        }
    }
    if !saw_header {
        return Err(DurabilityError::Incompatible(format!(
            "{}: no catalog header; not an epochdb {FORMAT_VERSION} directory",
            path.display()
        )));
    }
    if valid_end < data.len() {
        let mut file = storage.open(&path).map_err(io)?;
        file.truncate(valid_end as u64).map_err(io)?;
        file.sync().map_err(io)?;
    }
    Ok(names)
}

pub(crate) fn read_meta(
    storage: &dyn Storage,
    dir0: &Path,
    dirs: usize,
) -> Result<Option<CheckpointMeta>, DurabilityError> {
    let path = dir0.join(CHECKPOINT_META);
    if !storage.exists(&path).map_err(io)? {
        return Ok(None);
    }
    let data = storage.read(&path).map_err(io)?;
    // Installed by an atomic rename after a sync: any damage is corruption.
    let (block, end) = match decode_block(&data, 0, META_MAGIC) {
        Ok(Some(found)) => found,
        Ok(None) => return Err(corrupt(&path, "empty checkpoint metadata")),
        Err(error) => return Err(corrupt(&path, error)),
    };
    if block.version != FORMAT_VERSION {
        return Err(block_error(
            &path,
            BlockError::Version {
                offset: 0,
                found: block.version,
            },
        ));
    }
    if block.kind != KIND_META {
        return Err(wrong_kind(&path, 0, block.kind));
    }
    if end != data.len() {
        return Err(corrupt(&path, "trailing bytes after checkpoint metadata"));
    }
    let meta = CheckpointMeta::parse(block.payload).map_err(|e| corrupt(&path, e))?;
    if meta.dirs as usize != dirs {
        // The directories' identities matched the configuration already.
        return Err(corrupt(
            &path,
            format!(
                "checkpoint {} spans {} directories, but the database has {dirs}",
                meta.id, meta.dirs
            ),
        ));
    }
    Ok(Some(meta))
}

/// The last durable record in `pepoch` (`e_p` = 0 if there is none yet).
/// A torn last record is an append the crash interrupted; the one before
/// it holds.
pub(crate) fn read_pepoch(
    storage: &dyn Storage,
    dir0: &Path,
) -> Result<PepochRecord, DurabilityError> {
    let path = dir0.join(PEPOCH);
    if !storage.exists(&path).map_err(io)? {
        return Ok(PepochRecord::default());
    }
    let data = storage.read(&path).map_err(io)?;
    let mut last = PepochRecord::default();
    for item in versioned_blocks(&data, PEPOCH_MAGIC) {
        match item {
            Ok((offset, block)) => {
                if block.kind != KIND_PEPOCH {
                    return Err(wrong_kind(&path, offset as u64, block.kind));
                }
                let record = PepochRecord::parse(block.payload)
                    .map_err(|e| corrupt(&path, format!("offset {offset}: {e}")))?;
                if record.e_p >= last.e_p {
                    last = record;
                }
            }
            Err(BlockError::Frame(FrameError::TornTail { .. })) => break,
            Err(error) => return Err(block_error(&path, error)),
        }
    }
    Ok(last)
}

/// Removes files no recovery needs: checkpoints other than the installed
/// one (a crash mid-checkpoint leaves one), temporaries, and logs wholly
/// below the installed checkpoint's `e_l` (silor §5.1).
pub(crate) fn remove_strays(
    storage: &dyn Storage,
    dirs: &[PathBuf],
    meta: Option<&CheckpointMeta>,
) -> Result<(), DurabilityError> {
    for dir in dirs {
        let mut removed = false;
        for name in storage.list(dir).map_err(io)? {
            let stray = if let Some((id, _, _)) = parse_ckpt_file_name(&name) {
                meta.is_none_or(|m| m.id != id)
            } else if let Some(LogName::Old { epoch }) = parse_log_name(&name) {
                meta.is_some_and(|m| epoch < m.e_l)
            } else {
                name.ends_with(TMP_SUFFIX)
            };
            if stray {
                storage.remove(&dir.join(&name)).map_err(io)?;
                removed = true;
            }
        }
        if removed {
            storage.sync_dir(dir).map_err(io)?;
        }
    }
    Ok(())
}

/// Loads the checkpoint with n×m threads: thread (d, j) reads file `j` of
/// every table from directory `d` (silor §5.1), past the page cache if
/// `direct`. Returns the largest TID epoch loaded.
pub(crate) fn load_checkpoint(
    storage: &dyn Storage,
    dirs: &[PathBuf],
    meta: &CheckpointMeta,
    tables: &[Arc<Table>],
    (manager, progress): (&EpochManager, Option<&RecoveryProgress>),
    (threads, direct): (usize, bool),
    report: &mut RecoveryReport,
) -> Result<u64, DurabilityError> {
    if let Some(progress) = progress {
        let total = meta.files.iter().map(|(_, _, bytes)| bytes).sum();
        progress.begin(RecoveryPhase::Checkpoint, total);
    }
    let mut groups: BTreeMap<(u32, usize), Vec<(PathBuf, u64)>> = BTreeMap::new();
    for (dir, name, bytes) in &meta.files {
        let Some((_, _, j)) = parse_ckpt_file_name(name) else {
            return Err(corrupt(
                &dirs[0].join(CHECKPOINT_META),
                format!("bad checkpoint file name {name}"),
            ));
        };
        let dir_path = dirs.get(*dir as usize).ok_or_else(|| {
            corrupt(
                &dirs[0].join(CHECKPOINT_META),
                format!(
                    "checkpoint {} names {name} in directory {dir}, but {} directories are configured",
                    meta.id,
                    dirs.len()
                ),
            )
        })?;
        groups
            .entry((*dir, j))
            .or_default()
            .push((dir_path.join(name), *bytes));
    }
    // n×m loaders (§5.1), but no more than recovery was given: a
    // checkpoint written on more cores than this has more files than
    // threads, and a loader then takes the next group when it is done.
    let groups: Vec<Vec<(PathBuf, u64)>> = groups.into_values().collect();
    let loaders = groups.len().min(threads.max(1));
    report.checkpoint_threads = loaders;
    let next_group = AtomicUsize::new(0);
    let bytes_read = AtomicU64::new(0);
    let max_epoch = AtomicU64::new(0);
    let first_error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..loaders {
            let shared = (&groups, &next_group, &bytes_read, &max_epoch, &first_error);
            scope.spawn(move || {
                let (groups, next_group, bytes_read, max_epoch, first_error) = shared;
                let mut handle = manager.register().expect("room for loaders");
                handle.protect();
                let mut buffer = ScanBuffers::default();
                'groups: while let Some(files) =
                    groups.get(next_group.fetch_add(1, Ordering::Relaxed))
                {
                    for (path, expected) in files {
                        match load_checkpoint_file(
                            storage,
                            path,
                            *expected,
                            tables,
                            (&mut handle, FileProgress::new(progress)),
                            (&mut buffer, direct),
                        ) {
                            Ok((bytes, epoch)) => {
                                bytes_read.fetch_add(bytes, Ordering::Relaxed);
                                max_epoch.fetch_max(epoch, Ordering::Relaxed);
                            }
                            Err(error) => {
                                first_error.lock().get_or_insert(error);
                                break 'groups;
                            }
                        }
                    }
                    handle.refresh();
                }
                handle.unprotect();
            });
        }
    });
    if let Some(error) = first_error.into_inner() {
        return Err(error);
    }
    report.checkpoint_bytes = bytes_read.into_inner();
    Ok(max_epoch.into_inner())
}

fn load_checkpoint_file(
    storage: &dyn Storage,
    path: &Path,
    expected: u64,
    tables: &[Arc<Table>],
    (handle, mut progress): (&mut EpochHandle, FileProgress<'_>),
    (buffer, direct): (&mut ScanBuffers, bool),
) -> Result<(u64, u64), DurabilityError> {
    if !storage.exists(path).map_err(io)? {
        return Err(corrupt(path, "checkpoint file missing"));
    }
    let mut max_epoch = 0u64;
    let (end, size) = scan_blocks(
        storage,
        path,
        CKPT_MAGIC,
        (buffer, direct),
        |offset, block| {
            progress.reached(offset);
            let at = |e: &dyn std::fmt::Display| corrupt(path, format!("offset {offset}: {e}"));
            if block.kind != KIND_CKPT {
                return Err(wrong_kind(path, offset, block.kind));
            }
            let mut parsed = parse_ckpt_block(block.payload).map_err(|e| at(&e))?;
            let Some(table) = tables.get(parsed.table as usize) else {
                return Err(at(&format!("unknown table {}", parsed.table)));
            };
            while let Some(record) = parsed.next_record().map_err(|e| at(&e))? {
                if record.tid & crate::tid::STATUS_MASK != 0 {
                    return Err(at(&format!("bad tid {:#x}", record.tid)));
                }
                let tid = Tid::from_raw(record.tid);
                max_epoch = max_epoch.max(tid.epoch());
                table.recover_put(record.key, tid, Some(record.value), handle, true);
            }
            Ok(())
        },
    )?;
    progress.reached(size);
    // Synced before the checkpoint was installed: any damage is corruption.
    if let ScanEnd::Damaged { error, .. } = end {
        return Err(block_error(path, error));
    }
    if size != expected {
        return Err(corrupt(
            path,
            format!("{size} bytes, but the checkpoint recorded {expected}"),
        ));
    }
    Ok((size, max_epoch))
}

/// One log file to replay.
struct LogFile {
    path: PathBuf,
    /// `data.log`: the file being written at the crash.
    current: bool,
    /// What `pepoch` says was synced in this directory's `data.log`.
    synced: SyncedLog,
}

/// What replaying one file found.
#[derive(Default)]
struct FileOutcome {
    /// Blocks past `e_p` or a torn tail: the file must be rewritten.
    needs_rewrite: bool,
    max_epoch: u64,
    /// The largest log header sequence number seen.
    max_seq: u64,
}

/// Replays every log with g threads per directory (silor §5.2). Returns
/// the largest epoch seen in any block.
#[allow(clippy::too_many_arguments)]
fn replay_logs(
    storage: &dyn Storage,
    dirs: &[PathBuf],
    pepoch: &PepochRecord,
    e_l: u64,
    tables: &[Arc<Table>],
    (manager, progress): (&EpochManager, Option<&RecoveryProgress>),
    (threads, direct): (usize, bool),
    report: &mut RecoveryReport,
) -> Result<u64, DurabilityError> {
    let e_p = pepoch.e_p;
    let g = threads.div_ceil(dirs.len()).max(1);
    let mut per_dir: Vec<Vec<LogFile>> = Vec::new();
    for (index, dir) in dirs.iter().enumerate() {
        let synced = pepoch.logs.get(index).copied().unwrap_or_default();
        let mut files: Vec<(u64, LogFile)> = Vec::new();
        for name in storage.list(dir).map_err(io)? {
            match parse_log_name(&name) {
                Some(LogName::Current) => files.push((
                    u64::MAX,
                    LogFile {
                        path: dir.join(name),
                        current: true,
                        synced,
                    },
                )),
                Some(LogName::Old { epoch }) => files.push((
                    epoch,
                    LogFile {
                        path: dir.join(name),
                        current: false,
                        synced,
                    },
                )),
                None => {}
            }
        }
        // Newest first: data.log, then old_data.<e> by decreasing e.
        files.sort_by_key(|file| std::cmp::Reverse(file.0));
        per_dir.push(files.into_iter().map(|(_, file)| file).collect());
    }
    report.log_threads = g * dirs.len();
    if let Some(progress) = progress {
        let paths = per_dir.iter().flatten().map(|file| file.path.as_path());
        progress
            .begin_files(RecoveryPhase::Log, storage, paths)
            .map_err(io)?;
    }
    let counters: Vec<AtomicUsize> = per_dir.iter().map(|_| AtomicUsize::new(0)).collect();
    let bytes_read = AtomicU64::new(0);
    let entries = AtomicU64::new(0);
    let shared_blocks = AtomicU64::new(0);
    let dropped = AtomicU64::new(0);
    let torn = AtomicU64::new(0);
    let max_epoch = AtomicU64::new(0);
    let rewrites: Mutex<Vec<(PathBuf, bool, u64)>> = Mutex::new(Vec::new());
    let first_error = Mutex::new(None);
    let (share_tx, share_rx) = crossbeam_channel::unbounded();
    let sharing = BlockSharing {
        idle: AtomicUsize::new(0),
        handed: &shared_blocks,
        blocks: share_rx,
        spare: crossbeam_channel::unbounded(),
        failed: AtomicBool::new(false),
    };
    std::thread::scope(|scope| {
        for (files, next) in per_dir.iter().zip(&counters) {
            for _ in 0..g {
                let shared = (
                    &bytes_read,
                    &entries,
                    &dropped,
                    &torn,
                    &max_epoch,
                    &rewrites,
                    &first_error,
                    &sharing,
                );
                let share = share_tx.clone();
                scope.spawn(move || {
                    let (
                        bytes_read,
                        entries,
                        dropped,
                        torn,
                        max_epoch,
                        rewrites,
                        first_error,
                        sharing,
                    ) = shared;
                    let mut handle = manager.register().expect("room for replayers");
                    handle.protect();
                    let mut buffer = ScanBuffers::default();
                    let fail = |error| {
                        first_error.lock().get_or_insert(error);
                        sharing.failed.store(true, Ordering::Relaxed);
                    };
                    loop {
                        if sharing.failed.load(Ordering::Relaxed) {
                            break;
                        }
                        // L_d of §5.2: each thread takes the next-newest file.
                        let index = next.fetch_add(1, Ordering::AcqRel);
                        let Some(file) = files.get(index) else { break };
                        let counts = ReplayCounters {
                            entries,
                            dropped,
                            torn,
                        };
                        match replay_file(
                            storage,
                            file,
                            (e_l, e_p),
                            tables,
                            (&mut handle, FileProgress::new(progress)),
                            (&counts, sharing, &share),
                            (&mut buffer, direct),
                        ) {
                            Ok((bytes, outcome)) => {
                                bytes_read.fetch_add(bytes, Ordering::Relaxed);
                                max_epoch.fetch_max(
                                    outcome.max_epoch.max(outcome.max_seq),
                                    Ordering::Relaxed,
                                );
                                if outcome.needs_rewrite || file.current {
                                    rewrites.lock().push((
                                        file.path.clone(),
                                        outcome.needs_rewrite,
                                        outcome.max_epoch,
                                    ));
                                }
                            }
                            Err(error) => {
                                fail(error);
                                break;
                            }
                        }
                        handle.refresh();
                    }
                    // No file left: apply the blocks the threads still
                    // scanning hand over, until every scan is done.
                    drop(share);
                    drop(buffer);
                    handle.unprotect();
                    sharing.idle.fetch_add(1, Ordering::AcqRel);
                    while let Ok(block) = sharing.blocks.recv() {
                        sharing.idle.fetch_sub(1, Ordering::AcqRel);
                        if !sharing.failed.load(Ordering::Relaxed) {
                            handle.protect();
                            match apply_log_block(&block.payload, tables, &mut handle) {
                                Ok(applied) => {
                                    entries.fetch_add(applied, Ordering::Relaxed);
                                }
                                Err(error) => fail(corrupt(
                                    block.path,
                                    format!("offset {}: {error}", block.offset),
                                )),
                            }
                            // Frees what the block's installs retired.
                            handle.refresh();
                            handle.unprotect();
                        }
                        let _ = sharing.spare.0.send(block.payload);
                        sharing.idle.fetch_add(1, Ordering::AcqRel);
                    }
                });
            }
        }
        // The threads hold the only senders: the last to finish its files
        // ends every helper's wait.
        drop(share_tx);
    });
    if let Some(error) = first_error.into_inner() {
        return Err(error);
    }
    report.log_bytes = bytes_read.into_inner();
    report.log_entries = entries.into_inner();
    drop(sharing);
    report.log_blocks_shared = shared_blocks.into_inner();
    report.dropped_blocks = dropped.into_inner();
    report.torn_tail_bytes = torn.into_inner();
    for (path, needs_rewrite, max_epoch) in rewrites.into_inner() {
        if needs_rewrite {
            rewrite_log(storage, &path, e_p)?;
        } else {
            // A clean data.log: rotate it by name, as the logger would.
            let dir = path.parent().unwrap_or(Path::new("."));
            let target = free_old_data_name(storage, dir, max_epoch).map_err(io)?;
            storage.rename(&path, &target).map_err(io)?;
            storage.sync_dir(dir).map_err(io)?;
        }
    }
    Ok(max_epoch.into_inner())
}

struct ReplayCounters<'a> {
    entries: &'a AtomicU64,
    dropped: &'a AtomicU64,
    torn: &'a AtomicU64,
}

/// Replays one file. A decoding failure in the file being written at the
/// crash (`data.log`) is its unsynced tail — unless it lies inside the
/// prefix `pepoch` records as synced, or a block of a persistent epoch
/// follows it (that block was synced, so the damage before it was too):
/// then it is corruption, and recovery refuses. Rotated files were synced
/// before their rename: any damage in them is corruption.
fn replay_file<'a>(
    storage: &dyn Storage,
    file: &'a LogFile,
    (e_l, e_p): (u64, u64),
    tables: &[Arc<Table>],
    (handle, mut progress): (&mut EpochHandle, FileProgress<'_>),
    (counts, sharing, share): (
        &ReplayCounters<'_>,
        &BlockSharing<'a>,
        &Sender<SharedBlock<'a>>,
    ),
    (buffer, direct): (&mut ScanBuffers, bool),
) -> Result<(u64, FileOutcome), DurabilityError> {
    let path = &file.path;
    let mut outcome = FileOutcome::default();
    let mut synced_len = 0u64;
    let (end, size) = scan_blocks(
        storage,
        path,
        LOG_MAGIC,
        (buffer, direct),
        |offset, block| {
            progress.reached(offset);
            let at = |e: &dyn std::fmt::Display| corrupt(path, format!("offset {offset}: {e}"));
            match block.kind {
                KIND_LOG => {}
                KIND_LOG_HEADER => {
                    let seq = parse_log_header(block.payload).map_err(|e| at(&e))?;
                    outcome.max_seq = outcome.max_seq.max(seq);
                    if file.current && offset == 0 && seq == file.synced.seq {
                        synced_len = file.synced.len;
                    }
                    return Ok(());
                }
                kind => return Err(at(&format!("unknown log block kind {kind}"))),
            }
            let epoch = parse_log_block(block.payload).map_err(|e| at(&e))?.epoch;
            outcome.max_epoch = outcome.max_epoch.max(epoch);
            if epoch > e_p {
                // Group commit never finished for this epoch (silor §5.2).
                counts.dropped.fetch_add(1, Ordering::Relaxed);
                outcome.needs_rewrite = true;
                return Ok(());
            }
            if epoch < e_l {
                return Ok(()); // the checkpoint covers it
            }
            if sharing.wants_block() {
                let mut payload = sharing.spare.1.try_recv().unwrap_or_default();
                payload.clear();
                payload.extend_from_slice(block.payload);
                let handed = SharedBlock {
                    path,
                    offset,
                    payload,
                };
                if share.send(handed).is_ok() {
                    sharing.handed.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
            let applied = apply_log_block(block.payload, tables, handle).map_err(|e| at(&e))?;
            counts.entries.fetch_add(applied, Ordering::Relaxed);
            // Frees what the block's installs retired, a block at a time rather
            // than once per file.
            handle.refresh();
            Ok(())
        },
    )?;
    if let ScanEnd::Damaged { offset, error } = end {
        let frame = match error {
            BlockError::Frame(frame) if file.current => frame,
            // Rotated files were synced before their rename.
            other => return Err(block_error(path, other)),
        };
        if offset < synced_len {
            return Err(corrupt(
                path,
                format!("{frame}, inside the {synced_len} bytes pepoch records as synced"),
            ));
        }
        let rest = read_rest(storage, path, offset).map_err(io)?;
        if let Some(synced) = persistent_block_after(&rest, 1, e_p) {
            return Err(corrupt(
                path,
                format!(
                    "{frame}, yet the block at {} of a persistent epoch follows it",
                    offset + synced as u64
                ),
            ));
        }
        counts.torn.fetch_add(size - offset, Ordering::Relaxed);
        outcome.needs_rewrite = true;
    }
    progress.reached(size);
    Ok((size, outcome))
}

/// Applies every entry of a log block's payload (of an epoch already
/// checked to lie in [e_l, e_p]); returns how many entries it held, or
/// what is malformed. Entries are taken in batches of about
/// [`PREFETCH_WALKS`] writes whose keys are looked up together before any
/// is applied (`Table::replay_batch`).
fn apply_log_block(
    payload: &[u8],
    tables: &[Arc<Table>],
    handle: &mut EpochHandle,
) -> Result<u64, String> {
    let mut parsed = parse_log_block(payload).map_err(|e| e.to_string())?;
    let mut writes = Vec::new();
    let mut batch: Vec<ReplayWrite<'_>> = Vec::with_capacity(PREFETCH_WALKS);
    let mut applied = 0;
    let mut more = true;
    while more {
        batch.clear();
        while batch.len() < PREFETCH_WALKS {
            let Some(raw) = parsed.next_entry(&mut writes).map_err(|e| e.to_string())? else {
                more = false;
                break;
            };
            let tid = Tid::from_raw(raw);
            if tid.epoch() != parsed.epoch || raw & crate::tid::STATUS_MASK != 0 {
                return Err(format!("tid {raw:#x} outside block epoch {}", parsed.epoch));
            }
            for write in writes.drain(..) {
                let Some(table) = tables.get(write.table as usize) else {
                    return Err(format!("unknown table {}", write.table));
                };
                batch.push(ReplayWrite {
                    tid,
                    table,
                    key: write.key,
                    value: write.value,
                });
            }
            applied += 1;
        }
        Table::replay_batch(&batch, handle);
    }
    Ok(applied)
}

/// Log blocks handed from threads still scanning a file to replayers that
/// have no file left. Silor §5.2 gives each of a directory's g threads
/// whole files, newest first; with few files of unequal size one thread
/// replays most of the log while the others wait (measured: a 134 MB
/// `old_data` beside an 83 MB `data.log` kept one of two threads busy
/// 1.26 s and the other 0.46 s). Replay order does not matter — the
/// largest TID wins, tombstones included, which is what lets threads
/// replay files in parallel at all — so any thread may apply any block.
struct BlockSharing<'a> {
    /// Threads waiting in `blocks` for work.
    idle: AtomicUsize,
    /// Blocks handed over so far (`RecoveryReport::log_blocks_shared`).
    handed: &'a AtomicU64,
    blocks: Receiver<SharedBlock<'a>>,
    /// Payload buffers already applied, for the scanners to reuse (a
    /// fresh 512 KiB buffer costs page faults).
    spare: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    /// A thread failed: the others stop replaying (the error is reported).
    failed: AtomicBool,
}

impl BlockSharing<'_> {
    /// Whether a scanner should hand its next block over rather than
    /// apply it: a helper is waiting with nothing queued for it.
    fn wants_block(&self) -> bool {
        self.idle.load(Ordering::Relaxed) > self.blocks.len()
    }
}

/// A copy of one log block's payload, with where it came from for errors.
struct SharedBlock<'a> {
    path: &'a Path,
    offset: u64,
    payload: Vec<u8>,
}

/// The offset of a valid log block of an epoch ≤ `e_p` at or after `from`.
fn persistent_block_after(data: &[u8], from: usize, e_p: u64) -> Option<usize> {
    let magic = LOG_MAGIC.to_le_bytes();
    let mut at = from;
    while let Some(found) = data.get(at..)?.windows(4).position(|w| w == magic) {
        let offset = at + found;
        if let Ok(Some((block, _))) = decode_block(data, offset, LOG_MAGIC) {
            if block.kind == KIND_LOG
                && parse_log_block(block.payload).is_ok_and(|b| b.epoch <= e_p)
            {
                return Some(offset);
            }
        }
        at = offset + 1;
    }
    None
}

/// Rewrites a log file keeping only its valid blocks of epochs ≤ `e_p`
/// under a fresh `old_data.<e>` name, then removes the original. A crash
/// in between leaves duplicates (harmless: same TIDs) and the original's
/// stale blocks, which stay above the unchanged `pepoch`.
fn rewrite_log(storage: &dyn Storage, path: &Path, e_p: u64) -> Result<(), DurabilityError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let data = storage.read(path).map_err(io)?;
    let mut kept = Vec::new();
    let mut max_kept = 0;
    let mut at = 0;
    while let Ok(Some((block, next))) = decode_block(&data, at, LOG_MAGIC) {
        if block.kind != KIND_LOG {
            at = next;
            continue;
        }
        if let Ok(parsed) = parse_log_block(block.payload) {
            if parsed.epoch <= e_p {
                kept.extend_from_slice(&data[at..next]);
                max_kept = max_kept.max(parsed.epoch);
            }
        }
        at = next;
    }
    if !kept.is_empty() {
        let target = free_old_data_name(storage, dir, max_kept).map_err(io)?;
        let mut tmp_name = target.as_os_str().to_owned();
        tmp_name.push(TMP_SUFFIX);
        let tmp = PathBuf::from(tmp_name);
        let mut out = storage.create(&tmp).map_err(io)?;
        out.append(&kept).map_err(io)?;
        out.sync().map_err(io)?;
        drop(out);
        storage.rename(&tmp, &target).map_err(io)?;
        storage.sync_dir(dir).map_err(io)?;
    }
    storage.remove(path).map_err(io)?;
    storage.sync_dir(dir).map_err(io)?;
    Ok(())
}
