//! The `cpr` durability mode: CPR checkpoints of the in-memory database
//! (cpr-sigmod19 §2–4), with no log. Every checkpoint is transactionally
//! consistent and commits each session (each [`crate::Worker`]) to its own
//! prefix of transactions, its *CPR point*; a commit's ticket resolves once
//! a checkpoint holding it is installed.
//!
//! # The algorithm, on Silo's OCC
//!
//! The paper's database (§4) runs strict 2PL and gives every record a
//! version; a checkpoint moves the database from version `v` to `v + 1`
//! through the phases REST → PREPARE → IN_PROGRESS → WAIT_FLUSH → REST,
//! each change made by BumpEpoch and picked up lazily by each thread at
//! Refresh, and captures version `v`: records touched by a `v + 1`
//! transaction keep their version-`v` value in a *stable* slot. Here:
//!
//! * **A record's version is its TID's epoch.** A checkpoint chooses `b`,
//!   the first epoch of version `v + 1`: a transaction belongs to version
//!   `v` if the epoch it reads at its serialization point (Silo's commit
//!   step 2, `commit.rs`) is below `b`, to `v + 1` otherwise. Silo already
//!   orders every conflicting pair of transactions by epoch (a transaction
//!   that reads or overwrites another's write has an epoch at least as
//!   large), so no version-`v` transaction can follow a `v + 1` one on a
//!   shared record. This is what the paper's PREPARE aborts and its
//!   IN_PROGRESS read-locking enforce under 2PL (§4: "we believe the
//!   algorithm can be extended appropriately for other protocols"); with
//!   OCC and epochs it comes for free, and no transaction aborts because
//!   of a checkpoint.
//! * **PREPARE**: `b` is published, then the global epoch is moved to
//!   exactly `b` by a compare-and-swap BumpEpoch
//!   ([`epochdb_epoch::EpochManager::bump_from`]), so a commit that reads
//!   an epoch ≥ `b` is sure to see `b` (both sequentially consistent). If
//!   the epoch ticker moved the epoch first, `b` is chosen again.
//! * **IN_PROGRESS**: each thread shifts to `v + 1` on its own, at its
//!   first commit at an epoch ≥ `b`; that moment is its CPR point `t_T`
//!   (the serial number of its last version-`v` commit is recorded). A
//!   `v + 1` commit that replaces a record still at version `v` (TID epoch
//!   below `b`) copies the value it replaces to its session's stable
//!   copies first, under the record's lock ([`copies`]). The phase ends
//!   when no transaction that began in an epoch below `b` is still running
//!   (`EpochManager::oldest_operation` reaches `b`; the paper's trigger is
//!   every thread having refreshed, but a worker idle between transactions
//!   must not hold a checkpoint up): no version-`v` commit is still
//!   installing values.
//! * **WAIT_FLUSH**: the checkpointers of the `silor` mode scan every table
//!   (silor §4: n threads, m files per table, blocks of key/TID/value),
//!   keeping records whose TID epoch is below `b` and skipping the rest;
//!   then the stable copies are collected and written as one more file per
//!   table. A record skipped by the scan was replaced by a `v + 1` commit
//!   after its value was copied; a record copied after the scan passed it
//!   is in both, with the same TID and value. The metadata — with every
//!   session's CPR point — is installed atomically, last.
//! * **REST** at `v + 1`: tickets of every epoch below `b` resolve, the
//!   stable copies are dropped (the paper keeps two values per record
//!   always; here only records touched during a checkpoint have a copy,
//!   and only until it is written).
//!
//! Recovery loads the installed checkpoint with n×m threads (silor §5.1);
//! there is no log to replay. Each session's recovered CPR point is in
//! [`crate::durability::RecoveryReport::sessions`], and a worker that
//! registers again as that session numbers its transactions on from it.

pub(crate) mod copies;
mod worker_log;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use epochdb_epoch::EpochManager;
use epochdb_storage::{Storage, StorageError, StorageFile};
use parking_lot::Mutex;

use crate::config::Config;
use crate::db::TableList;
use crate::durability::silor::checkpoint::{
    CheckpointHost, CheckpointManager, CheckpointStart, ScanExtras,
};
use crate::durability::silor::format::CheckpointMeta;
use crate::durability::silor::{record_table, Recovered, SilorOptions, Stats};
use crate::durability::{DurabilityMode, DurabilityStats, WorkerLog};
use crate::error::{DurabilityError, OpenError};
use crate::table::TableId;
use crate::ticket::Watermark;

use worker_log::{CprWorkerLog, Session};

/// A phase of the CPR state machine (cpr-sigmod19 Figure 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CprPhase {
    /// No checkpoint running; transactions run at the current version.
    Rest,
    /// The next version's first epoch is chosen and being published.
    Prepare,
    /// Threads shift to the next version one by one, at their CPR points.
    InProgress,
    /// The version being captured is written to disk.
    WaitFlush,
}

impl CprPhase {
    const ALL: [CprPhase; 4] = [
        CprPhase::Rest,
        CprPhase::Prepare,
        CprPhase::InProgress,
        CprPhase::WaitFlush,
    ];
}

/// The global state machine as a pure function: the phase and version
/// after `(phase, version)`. Only WAIT_FLUSH → REST moves the version.
pub(crate) fn next_state(phase: CprPhase, version: u64) -> (CprPhase, u64) {
    match phase {
        CprPhase::Rest => (CprPhase::Prepare, version),
        CprPhase::Prepare => (CprPhase::InProgress, version),
        CprPhase::InProgress => (CprPhase::WaitFlush, version),
        CprPhase::WaitFlush => (CprPhase::Rest, version + 1),
    }
}

fn pack(phase: CprPhase, version: u64) -> u64 {
    (version << 2) | phase as u64
}

fn unpack(state: u64) -> (CprPhase, u64) {
    (CprPhase::ALL[(state & 3) as usize], state >> 2)
}

/// What every thread of the mode shares.
pub(crate) struct Inner {
    storage: Arc<dyn Storage>,
    dirs: Vec<PathBuf>,
    epochs: EpochManager,
    options: SilorOptions,
    stats: Stats,
    background_cpus: Vec<usize>,
    /// Every epoch ≤ this is in an installed checkpoint: tickets wait on it.
    watermark: Arc<Watermark>,
    /// `b`, the first epoch of the version being shifted to, from PREPARE
    /// until the checkpoint is installed or abandoned; 0 at REST. Workers
    /// read it at every commit, so it has a cache line of its own.
    boundary: CachePadded<AtomicU64>,
    /// `(phase, version)`, packed; changed only by the checkpoint manager.
    state: AtomicU64,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// CPR points of the installed checkpoint recovery loaded.
    recovered: HashMap<u64, u64>,
    /// CPR points of the last installed checkpoint (at first, recovery's).
    installed_points: Mutex<HashMap<u64, u64>>,
    catalog: Mutex<Option<Box<dyn StorageFile>>>,
    stop: AtomicBool,
    failed: AtomicBool,
}

impl Inner {
    fn phase(&self) -> (CprPhase, u64) {
        unpack(self.state.load(Ordering::Acquire))
    }

    /// Steps the state machine once, from the phase it must be in.
    fn step(&self, from: CprPhase) {
        let (phase, version) = self.phase();
        debug_assert_eq!(phase, from, "the checkpoint manager alone moves the phase");
        let (phase, version) = next_state(phase, version);
        self.state.store(pack(phase, version), Ordering::Release);
    }

    fn fail(&self, error: DurabilityError) {
        self.failed.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.watermark.fail(error);
    }

    /// The session that `worker` drives, continuing from its recovered
    /// CPR point.
    fn attach(&self, worker: usize) -> Arc<Session> {
        let id = worker as u64;
        let start = self.recovered.get(&id).copied().unwrap_or(0);
        let session = Arc::new(Session::new(id, start));
        self.sessions.lock().push(session.clone());
        session
    }

    /// Whether some session committed since the last installed checkpoint.
    fn has_new_commits(&self) -> bool {
        let installed = self.installed_points.lock();
        self.sessions
            .lock()
            .iter()
            .any(|s| s.serial() != installed.get(&s.id).copied().unwrap_or(0))
    }

    /// Every session's CPR point for boundary `b`, and their stable copies.
    fn collect(&self, b: u64) -> ScanExtras {
        let mut extras = ScanExtras::default();
        let mut points: HashMap<u64, u64> = self.recovered.clone();
        for session in self.sessions.lock().iter() {
            let (point, copies) = session.close_capture(b);
            points.insert(session.id, point);
            if !copies.is_empty() {
                extras.copies.push(copies);
            }
        }
        extras.sessions = points.into_iter().collect();
        extras.sessions.sort_unstable();
        extras
    }
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
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn background_cpus(&self) -> &[usize] {
        &self.background_cpus
    }
    fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
    fn fail(&self, error: &StorageError) {
        Inner::fail(self, DurabilityError::from_storage(error));
    }

    /// REST → PREPARE → IN_PROGRESS → WAIT_FLUSH (see the module docs).
    fn begin(&self, stopped: &dyn Fn() -> bool) -> Option<CheckpointStart> {
        self.step(CprPhase::Rest);
        let b = loop {
            let e = self.epochs.current();
            self.boundary.store(e + 1, Ordering::SeqCst);
            if let Ok(b) = self.epochs.bump_from(e) {
                break b;
            }
        };
        self.step(CprPhase::Prepare);
        // No transaction that began below `b` is still running, so no
        // version-v commit is still installing; a worker idle between
        // transactions holds nothing back (`EpochManager::oldest_operation`,
        // whose fence pairs with the commit's before it reads the epoch).
        while self.epochs.oldest_operation() < b {
            if stopped() {
                return None; // `abandoned` resets the state
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.step(CprPhase::InProgress);
        Some(CheckpointStart {
            replay_from: b,
            skip_epoch: b,
            tables: usize::MAX,
        })
    }

    fn after_scan(&self) -> ScanExtras {
        self.collect(self.boundary.load(Ordering::SeqCst))
    }

    /// `e_h`: the checkpoint holds exactly the epochs below `b`.
    fn end(&self) -> u64 {
        self.boundary.load(Ordering::SeqCst) - 1
    }

    /// The checkpoint is its own durability: nothing else to wait for.
    fn is_durable(&self, _end: u64) -> Result<bool, StorageError> {
        Ok(true)
    }

    fn remove_old_log(&self, _meta: &CheckpointMeta) -> Result<(), StorageError> {
        Ok(())
    }

    /// WAIT_FLUSH → REST at `v + 1`; every commit below `b` is durable.
    fn installed(&self, meta: &CheckpointMeta) {
        *self.installed_points.lock() = meta.sessions.iter().copied().collect();
        self.boundary.store(0, Ordering::SeqCst);
        self.step(CprPhase::WaitFlush);
        self.watermark.advance(meta.e_h);
    }

    fn abandoned(&self) {
        self.boundary.store(0, Ordering::SeqCst);
        let (_, version) = self.phase();
        self.state
            .store(pack(CprPhase::Rest, version), Ordering::Release);
    }
}

/// The `cpr` mode, running.
pub(crate) struct CprMode {
    inner: Arc<Inner>,
    checkpoints: Mutex<Option<CheckpointManager>>,
    /// The directories' locks, released when the mode is dropped.
    _locks: Vec<std::fs::File>,
}

impl CprMode {
    /// Starts the mode over a recovered database: the checkpoint manager.
    pub(crate) fn start(
        config: &Config,
        epochs: EpochManager,
        recovered: &Recovered,
        tables: TableList,
    ) -> Result<Arc<Self>, OpenError> {
        let storage = config.storage();
        let dirs = config.dirs.clone();
        let catalog = storage
            .open(&dirs[0].join(crate::durability::silor::CATALOG))
            .map_err(|e| OpenError::Durability(DurabilityError::from_storage(&e)))?;
        let inner = Arc::new(Inner {
            options: config.silor.clone().resolved_at_open(dirs.len()),
            storage,
            dirs,
            epochs,
            stats: Stats::default(),
            background_cpus: config.core_plan().background_cpus().to_vec(),
            watermark: Watermark::new(recovered.e_p),
            boundary: CachePadded::new(AtomicU64::new(0)),
            state: AtomicU64::new(pack(CprPhase::Rest, recovered.next_checkpoint_id)),
            sessions: Mutex::new(Vec::new()),
            recovered: recovered.report.sessions.iter().copied().collect(),
            installed_points: Mutex::new(recovered.report.sessions.iter().copied().collect()),
            catalog: Mutex::new(Some(catalog)),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        });
        let manager =
            CheckpointManager::start(inner.clone(), tables, recovered.next_checkpoint_id)?;
        Ok(Arc::new(Self {
            inner,
            checkpoints: Mutex::new(Some(manager)),
            _locks: recovered
                .locks
                .iter()
                .filter_map(|f| f.try_clone().ok())
                .collect(),
        }))
    }
}

impl DurabilityMode for CprMode {
    fn name(&self) -> &'static str {
        "cpr"
    }

    fn attach_worker(&self, worker: usize) -> Box<dyn WorkerLog> {
        let session = self.inner.attach(worker);
        Box::new(CprWorkerLog::new(self.inner.clone(), session))
    }

    fn table_created(&self, id: TableId, name: &str) -> Result<(), DurabilityError> {
        record_table(&self.inner.catalog, id, name, |e| {
            self.inner.fail(DurabilityError::from_storage(e))
        })
    }

    fn persistent_epoch(&self) -> Option<u64> {
        Some(self.inner.watermark.durable())
    }

    fn checkpoint(&self) -> Result<(), DurabilityError> {
        match &*self.checkpoints.lock() {
            Some(manager) => manager.run_now(),
            None => Err(DurabilityError::Stopped("the cpr mode has stopped".into())),
        }
    }

    fn is_checkpointing(&self) -> bool {
        self.inner.stats.checkpointing.load(Ordering::Relaxed)
    }

    fn stats(&self) -> DurabilityStats {
        let stats = &self.inner.stats;
        DurabilityStats {
            checkpoints: stats.checkpoints.load(Ordering::Relaxed),
            checkpoint_bytes: stats.checkpoint_bytes.load(Ordering::Relaxed),
            checkpoint_seconds: stats.checkpoint_micros.load(Ordering::Relaxed) as f64 / 1e6,
            persistent_epoch: Some(self.inner.watermark.durable()),
            last_checkpoint_seconds: stats.last_checkpoint_micros.load(Ordering::Relaxed) as f64
                / 1e6,
            last_checkpoint_unix: stats.last_checkpoint_unix.load(Ordering::Relaxed),
            ..DurabilityStats::default()
        }
    }

    /// Takes a last checkpoint if anything was committed since the last
    /// one, so every commit so far becomes durable, then stops. Like any
    /// checkpoint it waits for workers that hold an epoch: drop or
    /// quiesce them first (dropping the last database handle does).
    fn shutdown(&self) -> Result<(), DurabilityError> {
        let Some(manager) = self.checkpoints.lock().take() else {
            return self.inner.watermark.failure().map_or(Ok(()), Err);
        };
        let last = if self.inner.failed.load(Ordering::Acquire) || !self.inner.has_new_commits() {
            Ok(())
        } else {
            manager.run_now()
        };
        manager.stop();
        self.inner.stop.store(true, Ordering::Release);
        self.inner.catalog.lock().take();
        if let Some(error) = self.inner.watermark.failure() {
            return Err(error);
        }
        last?;
        self.inner.watermark.fail(DurabilityError::Stopped(
            "the database was shut down".into(),
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phases_cycle_and_only_wait_flush_moves_the_version() {
        let mut state = (CprPhase::Rest, 7);
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(state);
            state = next_state(state.0, state.1);
        }
        assert_eq!(
            seen,
            [
                (CprPhase::Rest, 7),
                (CprPhase::Prepare, 7),
                (CprPhase::InProgress, 7),
                (CprPhase::WaitFlush, 7),
                (CprPhase::Rest, 8),
                (CprPhase::Prepare, 8),
                (CprPhase::InProgress, 8),
                (CprPhase::WaitFlush, 8),
            ]
        );
        for (phase, version) in seen {
            assert_eq!(unpack(pack(phase, version)), (phase, version));
        }
    }
}
