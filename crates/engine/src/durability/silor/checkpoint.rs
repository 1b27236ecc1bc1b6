//! Fuzzy parallel checkpoints (silor §4). A manager thread starts one every
//! `C` seconds after the previous finished: it records `e_l`, splits every
//! table's key range into one sub-range per checkpointer (one per
//! directory), and runs the checkpointers. Each walks its sub-ranges in key
//! order, writing key/TID/value blocks round-robin into `m` files per table,
//! syncing every 32 MiB and skipping records of epoch ≥ `e_l`; at the end it
//! syncs and reports `E`. The manager takes `e_h` as the largest report,
//! waits until `e_h ≤ e_p`, installs the checkpoint by writing its metadata
//! atomically, then removes the previous checkpoint and every log file
//! wholly below `e_l` (§4.3).
//!
//! The same checkpoints serve the `wal` mode (eleda; issue 4's "reuse the
//! fuzzy checkpoints of the silor mode"): what differs between the modes —
//! what the checkpoint must leave out, when its content is durable, which
//! log it makes unneeded — is behind [`CheckpointHost`]. For `silor` the
//! positions in the metadata are epochs (`e_l`, `e_h`); for `wal` they are
//! LSNs (replay start, durable-through end).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use epochdb_epoch::{EpochHandle, EpochManager};
use epochdb_storage::{DirectAppender, Storage, StorageError, StorageFile, DIRECT_ALIGN};
use parking_lot::{Condvar, Mutex};

use super::files::{
    ckpt_file_name, parse_ckpt_file_name, parse_log_name, remove_in_pieces, replace_atomically,
    LogName, CHECKPOINT_META, REMOVE_PIECE_BYTES,
};
use super::format::{put_ckpt_record, seal_ckpt_block, start_ckpt_block, CheckpointMeta};
use super::{Inner, SilorOptions, Stats};
use crate::arena::Arena;
use crate::db::TableList;
use crate::durability::cpr::copies::StableCopy;
use crate::error::DurabilityError;
use crate::table::Table;
use crate::tid::{tid_of, ABSENT_BIT};

/// Records a checkpointer copies between two epoch refreshes.
const RECORDS_PER_SCAN: usize = 512;

/// What a checkpoint fixed before reading its first record.
pub(crate) struct CheckpointStart {
    /// Recorded as the metadata's `e_l`: where recovery starts replaying
    /// the log (an epoch for `silor`, an LSN for `wal`).
    pub(crate) replay_from: u64,
    /// Records whose TID epoch is at least this are left out (the log
    /// replays them); `u64::MAX` leaves nothing out.
    pub(crate) skip_epoch: u64,
    /// The tables the checkpoint covers (a prefix of the table list).
    pub(crate) tables: usize,
}

/// The durability mode a checkpoint serves.
pub(crate) trait CheckpointHost: Send + Sync + 'static {
    fn storage(&self) -> &dyn Storage;
    /// One checkpointer per directory; the metadata lives in the first.
    fn dirs(&self) -> &[PathBuf];
    /// `C`, `m`, block and sync sizes.
    fn options(&self) -> &SilorOptions;
    fn epochs(&self) -> &EpochManager;
    fn stats(&self) -> &Stats;
    /// CPUs the checkpoint threads run on (empty: not pinned).
    fn background_cpus(&self) -> &[usize];
    fn is_stopped(&self) -> bool;
    /// Fail-stop on a checkpoint I/O error.
    fn fail(&self, error: &StorageError);
    /// Fixes what the checkpoint must contain; returns once every record
    /// the checkpointers will read is either final below `replay_from` or
    /// is replayed from the log. `None`: stopped while waiting.
    fn begin(&self, stopped: &dyn Fn() -> bool) -> Option<CheckpointStart>;
    /// After every checkpointer finished: a position (the metadata's `e_h`)
    /// such that everything the checkpoint read is in the log below it.
    fn end(&self) -> u64;
    /// Whether the log is durable through `end`'s position, as recovery
    /// will see it.
    fn is_durable(&self, end: u64) -> Result<bool, StorageError>;
    /// After the checkpoint is installed: removes the log it made
    /// unneeded.
    fn remove_old_log(&self, meta: &CheckpointMeta) -> Result<(), StorageError>;
    /// After every checkpointer finished its scan: records the scan left
    /// out that belong in the checkpoint, and the sessions it commits (the
    /// `cpr` mode's stable copies and CPR points). Default: none.
    fn after_scan(&self) -> ScanExtras {
        ScanExtras::default()
    }
    /// The checkpoint is installed (its metadata is durable).
    fn installed(&self, meta: &CheckpointMeta) {
        let _ = meta;
    }
    /// The checkpoint that `begin` started will not be installed (stopped,
    /// or an I/O error).
    fn abandoned(&self) {}
}

/// What a host adds to a checkpoint after the scan ([`CheckpointHost::after_scan`]).
#[derive(Default)]
pub(crate) struct ScanExtras {
    /// Records to write besides the scan's, in the encoding of
    /// [`crate::durability::cpr::copies`]; a key may also be in the scan
    /// with the same TID and value (recovery keeps one).
    pub(crate) copies: Vec<Vec<u8>>,
    /// Session id → serial number of the last transaction the checkpoint
    /// holds (cpr-sigmod19 §2's CPR point).
    pub(crate) sessions: Vec<(u64, u64)>,
}

impl CheckpointHost for Inner {
    fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }
    fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }
    fn options(&self) -> &SilorOptions {
        &self.options
    }
    fn epochs(&self) -> &EpochManager {
        &self.epochs
    }
    fn background_cpus(&self) -> &[usize] {
        &self.background_cpus
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn is_stopped(&self) -> bool {
        Inner::is_stopped(self)
    }
    fn fail(&self, error: &StorageError) {
        Inner::fail(self, error)
    }

    /// `e_l`, then wait until no transaction of an earlier epoch is still
    /// installing values: every record a checkpointer can see from then on
    /// is either final for epochs < `e_l` or from an epoch the log replays.
    fn begin(&self, stopped: &dyn Fn() -> bool) -> Option<CheckpointStart> {
        let e_l = self.epochs.current();
        // Transactions, not workers: one idle between transactions holds
        // nothing back (`EpochManager::oldest_operation`).
        while self.epochs.oldest_operation() < e_l {
            if stopped() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Some(CheckpointStart {
            replay_from: e_l,
            skip_epoch: e_l,
            tables: usize::MAX, // every table
        })
    }

    /// `e_h`: every checkpointer finished during or before this epoch.
    fn end(&self) -> u64 {
        self.epochs.current()
    }

    /// Install only once the log is durable through `e_h` (§4.2).
    /// The published `e_p` may run ahead of the `pepoch` file while
    /// nothing is logged; recovery reads the file, so it is brought up to
    /// `e_h` first.
    fn is_durable(&self, e_h: u64) -> Result<bool, StorageError> {
        if self.persistent_epoch() < e_h {
            return Ok(false);
        }
        self.persist_pepoch_through(e_h)?;
        Ok(true)
    }

    /// Every log file wholly below `e_l` (§4.3).
    fn remove_old_log(&self, meta: &CheckpointMeta) -> Result<(), StorageError> {
        let storage = self.storage.as_ref();
        for dir in &self.dirs {
            let mut removed = false;
            for name in storage.list(dir)? {
                if matches!(parse_log_name(&name), Some(LogName::Old { epoch }) if epoch < meta.e_l)
                {
                    remove_in_pieces(storage, &dir.join(&name), REMOVE_PIECE_BYTES)?;
                    removed = true;
                }
            }
            if removed {
                storage.sync_dir(dir)?;
            }
        }
        Ok(())
    }
}

/// Requests and results shared between the manager and its callers.
#[derive(Default)]
struct ControlState {
    stop: bool,
    /// Checkpoints asked for by `run_now`.
    requested: u64,
    /// Checkpoints finished, and the last one's result.
    finished: u64,
    last_result: Option<Result<(), DurabilityError>>,
}

struct Control {
    state: Mutex<ControlState>,
    changed: Condvar,
}

/// The running checkpoint manager.
pub(crate) struct CheckpointManager {
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
}

impl CheckpointManager {
    pub(crate) fn start(
        inner: Arc<dyn CheckpointHost>,
        tables: TableList,
        next_id: u64,
    ) -> Result<Self, std::io::Error> {
        let control = Arc::new(Control {
            state: Mutex::new(ControlState::default()),
            changed: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("epochdb-checkpoint".into())
            .spawn({
                let control = control.clone();
                move || manage(inner, tables, control, next_id)
            })?;
        Ok(Self {
            control,
            thread: Some(thread),
        })
    }

    /// Starts a checkpoint now and waits until it is installed.
    pub(crate) fn run_now(&self) -> Result<(), DurabilityError> {
        let mut state = self.control.state.lock();
        state.requested += 1;
        let wanted = state.requested;
        self.control.changed.notify_all();
        loop {
            if state.finished >= wanted {
                return state.last_result.clone().unwrap_or(Ok(()));
            }
            if state.stop {
                return Err(DurabilityError::Stopped("checkpoints stopped".into()));
            }
            self.control.changed.wait(&mut state);
        }
    }

    /// Stops the manager (an unfinished checkpoint is abandoned; recovery
    /// removes its files) and waits for it.
    pub(crate) fn stop(mut self) {
        self.control.state.lock().stop = true;
        self.control.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn manage(
    inner: Arc<dyn CheckpointHost>,
    tables: TableList,
    control: Arc<Control>,
    mut next_id: u64,
) {
    crate::cores::place_background(inner.background_cpus());
    if !inner.options().checkpoint_idle_io.is_zero() {
        // The manager's own I/O — installing, and removing what a
        // checkpoint made unneeded — queues behind the log's too.
        crate::cores::set_io_class(crate::cores::IoClass::Idle);
    }
    loop {
        let covers = {
            let mut state = control.state.lock();
            let deadline = Instant::now() + inner.options().checkpoint_interval;
            while !state.stop && state.requested <= state.finished {
                if control.changed.wait_until(&mut state, deadline).timed_out() {
                    break;
                }
            }
            if state.stop || inner.is_stopped() {
                state.stop = true;
                control.changed.notify_all();
                return;
            }
            // This checkpoint answers every request made before it starts.
            state.requested
        };
        let result = take_checkpoint(inner.as_ref(), &tables, &control, next_id);
        next_id += 1;
        let mut state = control.state.lock();
        state.finished = state.finished.max(covers);
        state.last_result = Some(result.clone());
        control.changed.notify_all();
        if matches!(result, Err(ref error) if !matches!(error, DurabilityError::Stopped(_))) {
            state.stop = true; // fail-stop: the mode already failed
            return;
        }
    }
}

fn stopped(control: &Control) -> bool {
    control.state.lock().stop
}

/// One checkpointer's result.
struct Written {
    files: Vec<(u32, String, u64)>,
    bytes: u64,
}

/// Takes checkpoint `id` and installs it.
fn take_checkpoint(
    inner: &dyn CheckpointHost,
    tables: &TableList,
    control: &Control,
    id: u64,
) -> Result<(), DurabilityError> {
    inner.stats().checkpointing.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let result = write_and_install(inner, tables, control, id);
    inner.stats().checkpointing.store(false, Ordering::Relaxed);
    if result.is_err() {
        inner.abandoned();
    }
    if let Err(CheckpointError::Stopped) = &result {
        remove_abandoned(inner, id);
    }
    if result.is_ok() {
        let micros = started.elapsed().as_micros() as u64;
        let stats = inner.stats();
        stats.checkpoint_micros.fetch_add(micros, Ordering::Relaxed);
        stats
            .last_checkpoint_micros
            .store(micros, Ordering::Relaxed);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        stats.last_checkpoint_unix.store(unix, Ordering::Relaxed);
    }
    if let Err(CheckpointError::Io(error)) = &result {
        inner.fail(error);
    }
    result.map_err(|error| match error {
        CheckpointError::Io(error) => DurabilityError::from_storage(&error),
        CheckpointError::Stopped => DurabilityError::Stopped("checkpoint abandoned".into()),
    })
}

enum CheckpointError {
    Io(StorageError),
    Stopped,
}

impl From<StorageError> for CheckpointError {
    fn from(error: StorageError) -> Self {
        CheckpointError::Io(error)
    }
}

fn write_and_install(
    inner: &dyn CheckpointHost,
    tables: &TableList,
    control: &Control,
    id: u64,
) -> Result<(), CheckpointError> {
    let n = inner.dirs().len();
    let m = inner.options().files_per_table(n);
    let stop = || stopped(control) || inner.is_stopped();
    let start = inner.begin(&stop).ok_or(CheckpointError::Stopped)?;
    let tables: Vec<Arc<Table>> = tables.read().iter().take(start.tables).cloned().collect();

    // Partition each table into n roughly equal key ranges.
    let mut handle = inner
        .epochs()
        .register()
        .map_err(|_| CheckpointError::Stopped)?;
    handle.protect();
    let partitions: Vec<Vec<Vec<u8>>> = tables.iter().map(|t| t.split_keys(n)).collect();
    handle.unprotect();
    drop(handle);

    let skip_epoch = start.skip_epoch;
    let results: Vec<Result<Written, CheckpointError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..n)
            .map(|index| {
                let (tables, partitions) = (&tables, &partitions);
                scope.spawn(move || {
                    yield_to_workers(inner.background_cpus());
                    Checkpointer::new(inner, index, id, m, skip_epoch)?
                        .run(tables, partitions, control)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("checkpointer panicked"))
            .collect()
    });
    let mut files = Vec::new();
    let mut bytes = 0;
    for result in results {
        let written = result?;
        files.extend(written.files);
        bytes += written.bytes;
    }
    let extras = inner.after_scan();
    if !extras.copies.is_empty() {
        let written =
            Checkpointer::new(inner, 0, id, m, skip_epoch)?.write_copies(&extras.copies)?;
        files.extend(written.files);
        bytes += written.bytes;
    }
    let end = inner.end();

    // Install only once everything the checkpoint read is durable in the
    // log (§4.2's e_h ≤ e_p).
    while !inner.is_durable(end)? {
        if stop() {
            return Err(CheckpointError::Stopped);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let meta = CheckpointMeta {
        id,
        e_l: start.replay_from,
        e_h: end,
        dirs: n as u32,
        tables: tables.iter().map(|t| (t.id.0, t.name.clone())).collect(),
        files,
        sessions: extras.sessions,
    };
    replace_atomically(
        inner.storage(),
        &inner.dirs()[0].join(CHECKPOINT_META),
        &meta.encode(),
    )?;
    inner.stats().checkpoints.fetch_add(1, Ordering::Relaxed);
    inner
        .stats()
        .checkpoint_bytes
        .fetch_add(bytes, Ordering::Relaxed);
    inner.installed(&meta);
    remove_old_checkpoints(inner, id)?;
    inner.remove_old_log(&meta)?;
    Ok(())
}

/// Removes what checkpoint `id` wrote before it was abandoned (the
/// database closing mid-checkpoint), so that a closed database does not
/// keep a partial checkpoint's files until it is next opened. Best effort:
/// recovery removes whatever is left (`remove_strays`), and the storage
/// may already have failed; no directory sync, for the same reason.
fn remove_abandoned(inner: &dyn CheckpointHost, id: u64) {
    let storage = inner.storage();
    for dir in inner.dirs() {
        let Ok(names) = storage.list(dir) else {
            continue;
        };
        for name in names {
            if matches!(parse_ckpt_file_name(&name), Some((of, _, _)) if of == id) {
                let _ = storage.remove(&dir.join(&name));
            }
        }
    }
}

/// Removes the checkpoints older than `installed` (§4.3).
fn remove_old_checkpoints(inner: &dyn CheckpointHost, installed: u64) -> Result<(), StorageError> {
    let storage = inner.storage();
    for dir in inner.dirs() {
        let mut removed = false;
        for name in storage.list(dir)? {
            if matches!(parse_ckpt_file_name(&name), Some((id, _, _)) if id < installed) {
                remove_in_pieces(storage, &dir.join(&name), REMOVE_PIECE_BYTES)?;
                removed = true;
            }
        }
        if removed {
            storage.sync_dir(dir)?;
        }
    }
    Ok(())
}

/// A checkpoint file being written: through the page cache, or past it
/// (`SilorOptions::direct_io`) with the appender that pads each write to
/// whole blocks until the padding is trimmed.
struct CkptFile {
    file: Box<dyn StorageFile>,
    direct: Option<DirectAppender>,
}

/// One checkpointer: one directory, `m` files per table.
struct Checkpointer<'a> {
    inner: &'a dyn CheckpointHost,
    index: usize,
    dir: PathBuf,
    id: u64,
    m: usize,
    /// Records of this epoch or later are left out (the log has them).
    skip_epoch: u64,
    handle: EpochHandle,
    arena: Arena,
    block: Vec<u8>,
    unsynced: u64,
    bytes: u64,
    /// When this checkpointer started, and whether its I/O is still in the
    /// idle class (`SilorOptions::checkpoint_idle_io`).
    started: Instant,
    io_idle: bool,
}

impl<'a> Checkpointer<'a> {
    fn new(
        inner: &'a dyn CheckpointHost,
        index: usize,
        id: u64,
        m: usize,
        skip_epoch: u64,
    ) -> Result<Self, CheckpointError> {
        let handle = inner
            .epochs()
            .register()
            .map_err(|_| CheckpointError::Stopped)?;
        // Spawned by the manager, the thread inherited its idle I/O class.
        let io_idle = !inner.options().checkpoint_idle_io.is_zero();
        Ok(Self {
            inner,
            index,
            dir: inner.dirs()[index].clone(),
            id,
            m,
            skip_epoch,
            handle,
            arena: Arena::default(),
            block: Vec::with_capacity(inner.options().checkpoint_block_bytes + 4096),
            unsynced: 0,
            bytes: 0,
            started: Instant::now(),
            io_idle,
        })
    }

    fn run(
        mut self,
        tables: &[Arc<Table>],
        partitions: &[Vec<Vec<u8>>],
        control: &Control,
    ) -> Result<Written, CheckpointError> {
        let mut written = Vec::new();
        for (table, splits) in tables.iter().zip(partitions) {
            let lo = match self.index {
                0 => None,
                i => splits.get(i - 1).cloned(),
            };
            let hi = splits.get(self.index).cloned();
            if self.index > 0 && lo.is_none() {
                continue; // fewer ranges than checkpointers for this table
            }
            let mut files = self.create_files(table.id.0)?;
            self.walk(table, lo, hi, &mut files, control)?;
            written.extend(self.finish_files(files)?);
        }
        self.inner.storage().sync_dir(&self.dir)?;
        Ok(Written {
            files: written,
            bytes: self.bytes,
        })
    }

    /// Writes records handed over after the scan (`ScanExtras::copies`):
    /// one more file per table that has any, file number `m` in the first
    /// directory, so recovery loads it beside the scan's files.
    fn write_copies(mut self, buffers: &[Vec<u8>]) -> Result<Written, CheckpointError> {
        let mut by_table: std::collections::BTreeMap<u32, Vec<StableCopy<'_>>> = Default::default();
        for buffer in buffers {
            for copy in crate::durability::cpr::copies::iter(buffer) {
                by_table.entry(copy.table).or_default().push(copy);
            }
        }
        let block_bytes = self.inner.options().checkpoint_block_bytes;
        let mut written = Vec::new();
        for (table, copies) in by_table {
            let mut files = self.create_files_numbered(table, self.m..self.m + 1)?;
            let mut next_file = 0;
            start_ckpt_block(&mut self.block, table);
            for copy in copies {
                put_ckpt_record(&mut self.block, copy.key, copy.tid, copy.value);
                if self.block.len() >= block_bytes {
                    self.emit(&mut files, &mut next_file, table)?;
                }
            }
            self.emit(&mut files, &mut next_file, table)?;
            written.extend(self.finish_files(files)?);
        }
        self.inner.storage().sync_dir(&self.dir)?;
        Ok(Written {
            files: written,
            bytes: self.bytes,
        })
    }

    /// Trims, syncs and names the files of one table.
    fn finish_files(&self, files: Vec<CkptFile>) -> Result<Vec<(u32, String, u64)>, StorageError> {
        let mut written = Vec::new();
        for mut file in files {
            if let Some(direct) = &file.direct {
                direct.trim(file.file.as_mut())?;
            }
            let file = &file.file;
            file.sync()?;
            let name = file
                .path()
                .file_name()
                .and_then(|n| n.to_str())
                .expect("we named it")
                .to_owned();
            written.push((self.index as u32, name, file.size()?));
        }
        Ok(written)
    }

    fn create_files(&self, table: u32) -> Result<Vec<CkptFile>, StorageError> {
        self.create_files_numbered(table, 0..self.m)
    }

    fn create_files_numbered(
        &self,
        table: u32,
        numbers: std::ops::Range<usize>,
    ) -> Result<Vec<CkptFile>, StorageError> {
        let options = self.inner.options();
        numbers
            .map(|j| {
                let path: PathBuf = self.dir.join(ckpt_file_name(self.id, table, j));
                let file = create_fresh(self.inner, &path)?;
                let direct = if options.direct_io {
                    let capacity = options.checkpoint_block_bytes + DIRECT_ALIGN;
                    Some(DirectAppender::new(file.as_ref(), 0, capacity)?)
                } else {
                    None
                };
                Ok(CkptFile { file, direct })
            })
            .collect()
    }

    /// Walks `[lo, hi)` in key order in short scans (refreshing the epoch
    /// between them), filling blocks round-robin into `files`.
    fn walk(
        &mut self,
        table: &Table,
        lo: Option<Vec<u8>>,
        hi: Option<Vec<u8>>,
        files: &mut [CkptFile],
        control: &Control,
    ) -> Result<(), CheckpointError> {
        let mut next_file = 0;
        let mut cursor: Option<Vec<u8>> = None;
        start_ckpt_block(&mut self.block, table.id.0);
        let block_bytes = self.inner.options().checkpoint_block_bytes;
        loop {
            if stopped(control) || self.inner.is_stopped() {
                return Err(CheckpointError::Stopped);
            }
            self.handle.protect();
            let mut visited = 0;
            let mut last_key: Option<Vec<u8>> = None;
            {
                let lower = match (&cursor, &lo) {
                    (Some(key), _) => Bound::Excluded(key.as_slice()),
                    (None, Some(key)) => Bound::Included(key.as_slice()),
                    (None, None) => Bound::Unbounded,
                };
                let upper = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                let (block, arena, skip_epoch) =
                    (&mut self.block, &mut self.arena, self.skip_epoch);
                table.scan(
                    lower,
                    upper,
                    |key, record| {
                        visited += 1;
                        let snapshot = record.get().read_settled(arena);
                        let tid = tid_of(snapshot.word);
                        if snapshot.word & ABSENT_BIT == 0 && tid.epoch() < skip_epoch {
                            if let Some(value) = snapshot.value {
                                // SAFETY: the arena is reset only below, after
                                // this copy.
                                let value = unsafe { value.as_slice() };
                                put_ckpt_record(block, key, tid.raw(), value);
                            }
                        }
                        arena.reset();
                        if visited >= RECORDS_PER_SCAN || block.len() >= block_bytes {
                            last_key = Some(key.to_vec());
                            return false;
                        }
                        true
                    },
                    |_| (),
                );
            }
            self.handle.unprotect();
            if self.block.len() >= block_bytes {
                self.emit(files, &mut next_file, table.id.0)?;
            }
            match last_key {
                Some(key) => cursor = Some(key),
                None => break,
            }
        }
        self.emit(files, &mut next_file, table.id.0)?;
        Ok(())
    }

    /// Writes the current block (if it holds records) to the next file in
    /// round-robin order; syncs every `checkpoint_sync_bytes`.
    fn emit(
        &mut self,
        files: &mut [CkptFile],
        next_file: &mut usize,
        table: u32,
    ) -> Result<(), StorageError> {
        if self.block.len() <= epochdb_storage::BLOCK_HEADER_BYTES + 4 {
            return Ok(());
        }
        seal_ckpt_block(&mut self.block);
        if self.io_idle && self.started.elapsed() >= self.inner.options().checkpoint_idle_io {
            // Long enough behind the log: finish as its equal.
            crate::cores::set_io_class(crate::cores::IoClass::Default);
            self.io_idle = false;
        }
        let target = &mut files[*next_file];
        match &mut target.direct {
            Some(direct) => {
                direct.append(target.file.as_ref(), &self.block)?;
            }
            None => {
                target.file.append(&self.block)?;
            }
        }
        *next_file = (*next_file + 1) % files.len();
        let len = self.block.len() as u64;
        self.unsynced += len;
        self.bytes += len;
        if self.unsynced >= self.inner.options().checkpoint_sync_bytes {
            for file in files.iter() {
                file.file.sync()?;
            }
            self.unsynced = 0;
        }
        start_ckpt_block(&mut self.block, table);
        Ok(())
    }
}

/// Places the calling checkpointer thread on `cpus` (the cores left over
/// from workers, where `Config::pin_threads` reserved some; the paper gave
/// its checkpointers cores of their own, §6) and lowers its scheduling
/// priority (nice 10): a checkpoint is background work, and where cores
/// are scarce the scheduler should prefer workers and loggers over it.
fn yield_to_workers(cpus: &[usize]) {
    crate::cores::place_background(cpus);
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on the calling thread (who = 0) with a valid
    // nice value has no memory effects; failure is harmless and ignored.
    unsafe {
        let _ = libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// Creates `path`, replacing a leftover of an abandoned attempt.
fn create_fresh(
    inner: &dyn CheckpointHost,
    path: &Path,
) -> Result<Box<dyn StorageFile>, StorageError> {
    let storage = inner.storage();
    if storage.exists(path)? {
        storage.remove(path)?;
    }
    storage.create(path)
}
