//! Database configuration.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use epochdb_storage::{RealStorage, Storage};

use crate::cores::CorePlan;
use crate::durability::{
    DurabilityKind, DurabilityMode, RecoveryProgress, SilorOptions, WalOptions,
};
use crate::error::OpenError;

/// Default epoch length (silor-osdi14 §2.1: 40 ms).
pub const DEFAULT_EPOCH_INTERVAL: Duration = Duration::from_millis(40);

/// Default bound on concurrently registered workers.
pub const DEFAULT_MAX_WORKERS: usize = 256;

/// How to open a [`crate::Database`].
#[derive(Clone)]
pub struct Config {
    /// The durability mode.
    pub durability: DurabilityKind,
    /// A custom durability mode; overrides `durability` when set (tests and
    /// embedders that bring their own).
    pub custom_durability: Option<Arc<dyn DurabilityMode>>,
    /// Directories for logs and checkpoints (one per disk). Unused by `none`.
    pub dirs: Vec<PathBuf>,
    /// Worker threads a pool or benchmark starts by default: one per core.
    pub workers: usize,
    /// Length of an epoch.
    pub epoch_interval: Duration,
    /// With `Some(gap)`, [`crate::Database::end_epoch_soon`] ends the
    /// current epoch once `gap` has passed since the last one (a group
    /// commit on demand); `None` (the default) keeps SiloR's fixed epochs.
    pub early_epoch_min_gap: Option<Duration>,
    /// Most workers registered at once (size of the epoch table).
    pub max_workers: usize,
    /// Attempts a transaction gets before [`crate::TxError::TooManyConflicts`].
    pub max_attempts: u32,
    /// Where durable bytes go: real files by default; tests pass a
    /// simulated disk (`epochdb_storage::SimStorage`).
    pub storage: Option<Arc<dyn Storage>>,
    /// Settings of the `log` and `silor` modes; its checkpoint settings
    /// (`checkpoint_*`) and `recovery_threads` apply to `wal` too.
    pub silor: SilorOptions,
    /// Settings of the `wal` mode's central log (hole tracker, I/O unit,
    /// buffer, hop distance, file size; eleda §6.1's values by default).
    pub wal: WalOptions,
    /// Pins each worker thread to a CPU of its own (the first `workers`
    /// CPUs the process may use) and the loggers and checkpointers to the
    /// CPUs left over, as Silo and SiloR place their threads (silor-osdi14
    /// §2, §6). Off by default: an embedding application may place its
    /// threads itself. Pool threads pin themselves; threads driving their
    /// own [`crate::Worker`] call [`crate::Worker::pin_to_core`].
    pub pin_threads: bool,
    /// Which tables keep a hash index beside their B+-tree for point reads
    /// of keys up to 15 bytes: one probe instead of a descent with a cache
    /// miss per level. All tables by default. It costs a map insert per new
    /// key and memory per key, so tables that grow by inserts and are
    /// mostly scanned (TPC-C's order lines) do better without one. Applied
    /// by name whenever a table is created or recovered.
    pub point_index: PointIndexes,
    /// Where recovery counts the bytes it has read as it goes, for whoever
    /// shows progress while [`crate::Database::open`] recovers (the
    /// `epochdb recover` command prints a line a second). `None`: not
    /// counted.
    pub recovery_progress: Option<Arc<RecoveryProgress>>,
}

/// Which tables keep a point-read hash index ([`Config::point_index`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PointIndexes {
    /// No table.
    None,
    /// Every table.
    #[default]
    All,
    /// The tables with these names.
    Only(Vec<String>),
}

impl PointIndexes {
    /// Whether the table `name` keeps one.
    pub fn covers(&self, name: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Only(names) => names.iter().any(|n| n == name),
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("durability", &self.durability)
            .field(
                "custom_durability",
                &self.custom_durability.as_ref().map(|m| m.name()),
            )
            .field("dirs", &self.dirs)
            .field("workers", &self.workers)
            .field("epoch_interval", &self.epoch_interval)
            .field("early_epoch_min_gap", &self.early_epoch_min_gap)
            .field("max_workers", &self.max_workers)
            .field("max_attempts", &self.max_attempts)
            .field("storage", &self.storage)
            .field("silor", &self.silor)
            .field("wal", &self.wal)
            .field("pin_threads", &self.pin_threads)
            .field("point_index", &self.point_index)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            durability: DurabilityKind::None,
            custom_durability: None,
            dirs: Vec::new(),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            epoch_interval: DEFAULT_EPOCH_INTERVAL,
            early_epoch_min_gap: None,
            max_workers: DEFAULT_MAX_WORKERS,
            max_attempts: u32::MAX,
            storage: None,
            silor: SilorOptions::default(),
            wal: WalOptions::default(),
            pin_threads: false,
            point_index: PointIndexes::All,
            recovery_progress: None,
        }
    }
}

impl Config {
    /// Where this configuration places threads (see [`Config::pin_threads`]).
    pub(crate) fn core_plan(&self) -> CorePlan {
        CorePlan::new(self.pin_threads, self.workers)
    }

    /// The storage durable modes write through.
    pub fn storage(&self) -> Arc<dyn Storage> {
        self.storage
            .clone()
            .unwrap_or_else(|| Arc::new(RealStorage::new()))
    }

    /// Checks the settings and their relations.
    pub fn validate(&self) -> Result<(), OpenError> {
        if self.custom_durability.is_none() && self.durability.is_durable() {
            if self.dirs.is_empty() {
                return Err(OpenError::Config(format!(
                    "the {} mode needs at least one directory (dirs / --dir)",
                    self.durability
                )));
            }
            self.silor.validate().map_err(OpenError::Config)?;
            if self.durability == DurabilityKind::Wal {
                if self.dirs.len() != 1 {
                    return Err(OpenError::Config(format!(
                        "the wal mode writes one central log: give exactly one directory, not {}",
                        self.dirs.len()
                    )));
                }
                self.wal
                    .validate()
                    .map_err(|e| OpenError::Config(e.to_string()))?;
            }
        }
        if self.workers == 0 {
            return Err(OpenError::Config("workers must be at least 1".into()));
        }
        if self.max_workers < self.workers {
            return Err(OpenError::Config(format!(
                "max_workers ({}) must be at least workers ({})",
                self.max_workers, self.workers
            )));
        }
        if self.epoch_interval.is_zero() {
            return Err(OpenError::Config("epoch_interval must be positive".into()));
        }
        if self.max_attempts == 0 {
            return Err(OpenError::Config("max_attempts must be at least 1".into()));
        }
        Ok(())
    }
}
