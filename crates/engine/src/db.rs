//! The database: tables, the epoch framework, the durability mode.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use epochdb_epoch::{EpochManager, EpochTicker};
use parking_lot::{Mutex, RwLock};

use crate::config::Config;
use crate::durability::DurabilityMode;
use crate::error::{DurabilityError, OpenError};
use crate::pool::WorkerPool;
use crate::record::free_record;
use crate::table::{Table, TableId};
use crate::worker::Worker;

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) epochs: EpochManager,
    pub(crate) durability: Arc<dyn DurabilityMode>,
    tables: RwLock<Vec<Arc<Table>>>,
    names: Mutex<HashMap<String, TableId>>,
    /// Bumped whenever a table is added, so workers refresh their copy.
    pub(crate) tables_version: AtomicUsize,
    next_worker: AtomicUsize,
    ticker: Mutex<Option<EpochTicker>>,
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
        // No worker is alive (each holds an Arc<Shared>): free the records
        // still in the indexes. Records already unlinked were retired to
        // the epoch framework, which frees them itself.
        for table in self.tables.get_mut().drain(..) {
            table.for_each(|_, record| {
                // SAFETY: nothing can reach the table any more; each record
                // is in the index exactly once.
                unsafe { free_record(record.as_ptr().cast()) };
            });
        }
    }
}

/// An open database. Cheap to clone; clones share everything.
///
/// ```
/// use epochdb_engine::{Config, Database};
///
/// let db = Database::open(Config::default()).unwrap();
/// let accounts = db.create_table("accounts");
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
    /// Opens a database with `config`, starting its epoch thread.
    pub fn open(config: Config) -> Result<Self, OpenError> {
        config.validate()?;
        let durability = match &config.custom_durability {
            Some(mode) => mode.clone(),
            None => config.durability.build()?,
        };
        let epochs = EpochManager::new(config.max_workers);
        let ticker = EpochTicker::start(epochs.clone(), config.epoch_interval)?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                epochs,
                durability,
                tables: RwLock::new(Vec::new()),
                names: Mutex::new(HashMap::new()),
                tables_version: AtomicUsize::new(0),
                next_worker: AtomicUsize::new(0),
                ticker: Mutex::new(Some(ticker)),
            }),
        })
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The durability mode's name.
    pub fn durability_name(&self) -> &'static str {
        self.shared.durability.name()
    }

    /// Creates the table `name`, or returns it if it exists.
    pub fn create_table(&self, name: &str) -> TableId {
        let mut names = self.shared.names.lock();
        if let Some(&id) = names.get(name) {
            return id;
        }
        let mut tables = self.shared.tables.write();
        let id = TableId(u32::try_from(tables.len()).expect("too many tables"));
        tables.push(Arc::new(Table::new(id, name.to_owned())));
        names.insert(name.to_owned(), id);
        self.shared.tables_version.fetch_add(1, Ordering::Release);
        id
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
    pub fn approximate_len(&self, table: TableId) -> usize {
        self.shared
            .tables
            .read()
            .get(table.0 as usize)
            .map_or(0, |t| t.index_len())
    }

    /// Registers a worker for the calling thread. Transactions run on
    /// workers; keep one per thread and reuse it.
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
