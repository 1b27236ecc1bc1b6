//! The database: tables, the epoch framework, the durability mode.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use epochdb_epoch::{EpochKick, EpochManager, EpochTicker};
use parking_lot::{Mutex, RwLock};

use crate::config::Config;
use crate::cores::CorePlan;
use crate::durability::cpr::CprMode;
use crate::durability::silor::{self, SiloR};
use crate::durability::wal::{self, WalMode};
use crate::durability::{
    DurabilityKind, DurabilityMode, NoDurability, RecoveryProgress, RecoveryReport,
};
use crate::error::{DurabilityError, OpenError};
use crate::pool::WorkerPool;
use crate::table::{Table, TableId};
use crate::worker::Worker;

/// The tables of a database, shared with durability modes that walk them
/// (checkpoints).
pub(crate) type TableList = Arc<RwLock<Vec<Arc<Table>>>>;

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) epochs: EpochManager,
    pub(crate) durability: Arc<dyn DurabilityMode>,
    tables: TableList,
    names: Mutex<HashMap<String, TableId>>,
    recovery: Option<RecoveryReport>,
    /// Bumped whenever a table is added, so workers refresh their copy.
    pub(crate) tables_version: AtomicUsize,
    next_worker: AtomicUsize,
    /// Where worker threads are pinned (`Config::pin_threads`).
    pub(crate) cores: CorePlan,
    ticker: Mutex<Option<EpochTicker>>,
    kick: Arc<EpochKick>,
}

impl Shared {
    pub(crate) fn tables_snapshot(&self) -> Vec<Arc<Table>> {
        self.tables.read().clone()
    }

    pub(crate) fn next_worker_id(&self) -> usize {
        self.next_worker.fetch_add(1, Ordering::Relaxed)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Stop the ticker first; it holds only an EpochManager clone.
        self.ticker.get_mut().take();
        // No worker is alive (each holds an Arc<Shared>): make what they
        // committed durable and stop the mode's threads (a checkpointer
        // reads the tables).
        let _ = self.durability.shutdown();
        // The tables free their records when their last reference goes
        // (`Table`'s drop): these, or the durability mode's copies.
    }
}

/// An open database. Cheap to clone; clones share everything.
///
/// ```
/// use epochdb_engine::{Config, Database};
///
/// let db = Database::open(Config::default()).unwrap();
/// let accounts = db.create_table("accounts").unwrap();
/// let mut worker = db.worker().unwrap();
///
/// let (_, ticket) = worker
///     .run(|tx| {
///         tx.put(accounts, b"alice", &100u64.to_le_bytes())?;
///         tx.put(accounts, b"bob", &50u64.to_le_bytes())?;
///         Ok(())
///     })
///     .unwrap();
/// ticket.wait().unwrap(); // durable under the chosen mode
///
/// let (alice, _) = worker
///     .run(|tx| Ok(tx.get(accounts, b"alice")?.map(|v| v.to_vec())))
///     .unwrap();
/// assert_eq!(alice.unwrap(), 100u64.to_le_bytes());
/// ```
#[derive(Clone)]
pub struct Database {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("durability", &self.shared.durability.name())
            .field("epoch", &self.shared.epochs.current())
            .finish()
    }
}

impl Database {
    /// [`open`](Self::open), reporting a recovery's progress: from a thread
    /// of its own, `line` gets a line a second while the recovery runs
    /// ([`RecoveryProgress::watch`]; none if it takes less than a second).
    pub fn open_reporting(
        mut config: Config,
        line: impl FnMut(&str) + Send,
    ) -> Result<Self, OpenError> {
        let progress = config
            .recovery_progress
            .get_or_insert_with(|| Arc::new(RecoveryProgress::new()))
            .clone();
        std::thread::scope(|scope| {
            scope.spawn(|| progress.watch(line));
            Self::open(config)
        })
    }

    /// Opens a database with `config`, starting its epoch thread. With a
    /// durable mode (`log`, `silor`) the directories are recovered first:
    /// the database holds every transaction that was acknowledged durable.
    pub fn open(config: Config) -> Result<Self, OpenError> {
        // However the open ends (an error or a panic too, and in modes
        // with nothing to recover), whoever watches the progress stops.
        struct FinishOnDrop(Option<Arc<RecoveryProgress>>);
        impl Drop for FinishOnDrop {
            fn drop(&mut self) {
                if let Some(progress) = &self.0 {
                    progress.finish();
                }
            }
        }
        let _finish = FinishOnDrop(config.recovery_progress.clone());
        config.validate()?;
        if let Some(mode) = &config.custom_durability {
            return Self::assemble(config.clone(), mode.clone(), None, None);
        }
        match config.durability {
            DurabilityKind::None => Self::assemble(config, Arc::new(NoDurability), None, None),
            DurabilityKind::Log | DurabilityKind::Silor => Self::open_silor(config),
            DurabilityKind::Wal => Self::open_wal(config),
            DurabilityKind::Cpr => Self::open_silor(config),
        }
    }

    fn open_wal(config: Config) -> Result<Self, OpenError> {
        let recovered = wal::recover(
            config.storage(),
            &config.dirs[0],
            config.wal.clone(),
            config.storage.is_none(),
            config.silor.recovery_threads(),
            &config.point_index,
            config.recovery_progress.as_deref(),
        )?;
        let epochs = EpochManager::starting_at(config.max_workers + 4, recovered.next_epoch);
        let tables: TableList = Arc::new(RwLock::new(recovered.tables.clone()));
        let report = recovered.report.clone();
        let mode = WalMode::start(recovered, &config, epochs.clone(), tables.clone())?;
        Self::assemble(config, mode, Some((epochs, tables)), Some(report))
    }

    fn open_silor(config: Config) -> Result<Self, OpenError> {
        let storage = config.storage();
        let cpr = config.durability == DurabilityKind::Cpr;
        let layout = if cpr {
            silor::Layout::CheckpointsOnly
        } else {
            silor::Layout::Logged
        };
        let recovered = silor::recover(
            storage.as_ref(),
            &config.dirs,
            layout,
            (config.silor.recovery_threads(), config.silor.direct_io),
            config.storage.is_none(),
            &config.point_index,
            config.recovery_progress.as_deref(),
        )?;
        let epochs = EpochManager::starting_at(config.max_workers + 4, recovered.next_epoch);
        let tables: TableList = Arc::new(RwLock::new(recovered.tables.clone()));
        let mode: Arc<dyn DurabilityMode> = if cpr {
            CprMode::start(&config, epochs.clone(), &recovered, tables.clone())?
        } else {
            SiloR::start(&config, epochs.clone(), &recovered, tables.clone())?
        };
        let report = recovered.report.clone();
        Self::assemble(config, mode, Some((epochs, tables)), Some(report))
    }

    fn assemble(
        config: Config,
        durability: Arc<dyn DurabilityMode>,
        prepared: Option<(EpochManager, TableList)>,
        recovery: Option<RecoveryReport>,
    ) -> Result<Self, OpenError> {
        let (epochs, tables) = match prepared {
            Some(prepared) => prepared,
            None => (
                EpochManager::new(config.max_workers + 4),
                Arc::new(RwLock::new(Vec::new())),
            ),
        };
        let names = tables
            .read()
            .iter()
            .map(|table| {
                table.attach_epochs(&epochs);
                (table.name.clone(), table.id)
            })
            .collect();
        let ticker = EpochTicker::start_adaptive(
            epochs.clone(),
            config.epoch_interval,
            config.early_epoch_min_gap,
        )?;
        let kick = ticker.kick_handle();
        Ok(Self {
            shared: Arc::new(Shared {
                cores: config.core_plan(),
                config,
                epochs,
                durability,
                tables,
                names: Mutex::new(names),
                recovery,
                tables_version: AtomicUsize::new(0),
                next_worker: AtomicUsize::new(0),
                ticker: Mutex::new(Some(ticker)),
                kick,
            }),
        })
    }

    /// What recovery did when this database was opened (durable modes).
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.shared.recovery.as_ref()
    }

    /// The durable persistent epoch: every transaction of an epoch at or
    /// below it survives any crash (epoch-based modes).
    pub fn persistent_epoch(&self) -> Option<u64> {
        self.shared.durability.persistent_epoch()
    }

    /// Takes a checkpoint now and waits until it is installed (`silor`,
    /// `wal`, `cpr`).
    ///
    /// In `silor` and `cpr` a checkpoint starts once every transaction that
    /// began before it has finished; workers idle between transactions
    /// (the calling thread's own included) do not hold it back.
    pub fn checkpoint(&self) -> Result<(), DurabilityError> {
        self.shared.durability.checkpoint()
    }

    /// What the durability mode has written since the database opened.
    pub fn durability_stats(&self) -> crate::durability::DurabilityStats {
        self.shared.durability.stats()
    }

    /// Whether the durability mode is writing a checkpoint right now.
    pub fn is_checkpointing(&self) -> bool {
        self.shared.durability.is_checkpointing()
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The durability mode's name.
    pub fn durability_name(&self) -> &'static str {
        self.shared.durability.name()
    }

    /// Creates the table `name`, or returns it if it exists (a recovered
    /// database has its tables back). In a durable mode the creation is
    /// durable when this returns.
    pub fn create_table(&self, name: &str) -> Result<TableId, DurabilityError> {
        let mut names = self.shared.names.lock();
        if let Some(&id) = names.get(name) {
            return Ok(id);
        }
        let count = self.shared.tables.read().len();
        let id = TableId(u32::try_from(count).expect("too many tables"));
        self.shared.durability.table_created(id, name)?;
        let table = Table::new(
            id,
            name.to_owned(),
            self.shared.config.point_index.covers(name),
        );
        table.attach_epochs(&self.shared.epochs);
        self.shared.tables.write().push(Arc::new(table));
        names.insert(name.to_owned(), id);
        self.shared.tables_version.fetch_add(1, Ordering::Release);
        Ok(id)
    }

    /// The table called `name`, if it exists.
    pub fn table(&self, name: &str) -> Option<TableId> {
        self.shared.names.lock().get(name).copied()
    }

    /// Every table's id and name, in id order.
    pub fn tables(&self) -> Vec<(TableId, String)> {
        self.shared
            .tables
            .read()
            .iter()
            .map(|t| (t.id, t.name.clone()))
            .collect()
    }

    /// Index entries of a table, including absent records awaiting unlink.
    /// Returns 0 if no epoch slot is free to walk the index safely (more
    /// threads than the epoch table holds).
    pub fn approximate_len(&self, table: TableId) -> usize {
        let Some(table) = self.shared.tables.read().get(table.0 as usize).cloned() else {
            return 0;
        };
        // Walking the leaves needs epoch protection: unlinked leaves are
        // freed through the epoch framework.
        let Ok(mut handle) = self.shared.epochs.register() else {
            return 0;
        };
        handle.protect();
        let len = table.index_len();
        handle.unprotect();
        len
    }

    /// Registers a worker for the calling thread. Transactions run on
    /// workers; keep one per thread and reuse it. A worker that will sit
    /// idle for long should [`Worker::quiesce`]: until then it holds back
    /// memory reclamation (not checkpoints). In the `cpr` mode the worker
    /// is a session numbered by registration order (the first worker
    /// registered since the database opened is session 0, and so on); its
    /// transactions number on from the session's recovered CPR point
    /// ([`crate::durability::RecoveryReport::sessions`]).
    pub fn worker(&self) -> Result<Worker, OpenError> {
        Worker::new(self.shared.clone())
    }

    /// Starts a pool of `Config::workers` threads (one per core by default)
    /// that run transactions submitted as closures.
    pub fn worker_pool(&self) -> Result<WorkerPool, OpenError> {
        WorkerPool::new(self, self.shared.config.workers)
    }

    /// The global epoch `E`.
    pub fn current_epoch(&self) -> u64 {
        self.shared.epochs.current()
    }

    /// Asks for the current epoch to end early, so that commits waiting
    /// for durability form their group commit now rather than at the end
    /// of the epoch period. Has an effect only with
    /// [`Config::early_epoch_min_gap`]; cheap to call for every waiting
    /// commit.
    pub fn end_epoch_soon(&self) {
        self.shared.kick.kick();
    }

    /// The safe epoch: every worker has left all epochs up to it (an idle,
    /// quiesced worker holds nothing back).
    pub fn safe_epoch(&self) -> u64 {
        self.shared.epochs.compute_safe()
    }

    /// Flushes and stops the durability mode; later commits fail to become
    /// durable.
    pub fn shutdown(&self) -> Result<(), DurabilityError> {
        self.shared.durability.shutdown()
    }
}
