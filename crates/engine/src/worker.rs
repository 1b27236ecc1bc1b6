//! Workers: the threads that run transactions (silor-osdi14 §2). A worker
//! owns its epoch handle, its durability handle and reusable transaction
//! buffers; one per thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use epochdb_epoch::EpochHandle;

use crate::commit::{commit, rollback, CommitContext};
use crate::db::Shared;
use crate::durability::WorkerLog;
use crate::error::{Abort, OpenError, TxError};
use crate::table::Table;
use crate::ticket::Ticket;
use crate::tid::Tid;
use crate::txn::{Transaction, TxState};

/// Counters of one worker's transactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Transactions committed.
    pub commits: u64,
    /// Attempts that aborted on a conflict (and were retried).
    pub conflicts: u64,
    /// Transactions rolled back by their body.
    pub user_aborts: u64,
}

/// A registered worker. Not `Sync`: one thread drives it.
pub struct Worker {
    shared: Arc<Shared>,
    id: usize,
    handle: EpochHandle,
    log: Box<dyn WorkerLog>,
    state: TxState,
    tables: Vec<Arc<Table>>,
    tables_version: usize,
    last_tid: Tid,
    stats: WorkerStats,
    /// Set by `quiesce`: the next transaction tells the log its epoch.
    quiesced: bool,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Worker {
    pub(crate) fn new(shared: Arc<Shared>) -> Result<Self, OpenError> {
        let handle = shared.epochs.register()?;
        let id = shared.next_worker_id();
        let log = shared.durability.attach_worker(id);
        let tables_version = shared.tables_version.load(Ordering::Acquire);
        let tables = shared.tables_snapshot();
        Ok(Self {
            shared,
            id,
            handle,
            log,
            state: TxState::default(),
            tables,
            tables_version,
            last_tid: Tid::ZERO,
            stats: WorkerStats::default(),
            quiesced: false,
        })
    }

    /// With [`crate::Config::pin_threads`], pins the calling thread — the
    /// one that will drive this worker — to the next worker CPU (round
    /// robin over the first `Config::workers` CPUs) and returns it;
    /// otherwise does nothing and returns `None`.
    pub fn pin_to_core(&self) -> std::io::Result<Option<usize>> {
        self.shared.cores.pin_worker()
    }

    /// This worker's number (distinct among the database's workers).
    pub fn id(&self) -> usize {
        self.id
    }

    /// Counters so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// The TID of the last transaction this worker committed.
    pub fn last_tid(&self) -> Tid {
        self.last_tid
    }

    /// Runs `body` as one transaction, retrying it on conflicts, and
    /// commits it. Returns the body's result and the commit's ticket.
    ///
    /// The body may run several times; it must have no side effects other
    /// than through the transaction (or tolerate repeats). Returning
    /// `Err(Abort::User)` rolls back and yields [`TxError::UserAbort`].
    pub fn run<R>(
        &mut self,
        mut body: impl FnMut(&mut Transaction<'_>) -> Result<R, Abort>,
    ) -> Result<(R, Ticket), TxError> {
        let max_attempts = self.shared.config.max_attempts;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            self.begin();
            let outcome = {
                let mut tx = Transaction {
                    tables: &self.tables,
                    state: &mut self.state,
                };
                body(&mut tx)
            };
            let result = match outcome {
                Ok(value) => {
                    let mut ctx = CommitContext {
                        tables: &self.tables,
                        epochs: &self.shared.epochs,
                        handle: &mut self.handle,
                        log: self.log.as_mut(),
                        last_tid: &mut self.last_tid,
                    };
                    commit(&mut ctx, &mut self.state).map(|ticket| (value, ticket))
                }
                Err(abort) => Err(abort),
            };
            match result {
                Ok(done) => {
                    self.state.clear();
                    self.handle.leave_operation();
                    self.stats.commits += 1;
                    return Ok(done);
                }
                Err(abort) => {
                    rollback(&self.tables, &mut self.handle, &self.state);
                    self.state.clear();
                    match abort {
                        Abort::User => {
                            self.handle.leave_operation();
                            self.stats.user_aborts += 1;
                            return Err(TxError::UserAbort);
                        }
                        Abort::Conflict => {
                            self.stats.conflicts += 1;
                            if attempt >= max_attempts {
                                self.handle.leave_operation();
                                return Err(TxError::TooManyConflicts { attempts: attempt });
                            }
                            if attempt > 2 {
                                std::thread::yield_now();
                            }
                        }
                    }
                }
            }
        }
    }

    /// Prepares for a transaction: refreshes the epoch (telling the
    /// durability mode about a new one) and the table list, and enters an
    /// epoch operation: checkpoints wait for transactions that began in
    /// epochs they must see finished, but not for a worker idle between
    /// transactions (`EpochManager::oldest_operation`; the commit's fence
    /// before it reads the epoch is the one that makes this sound).
    #[inline]
    fn begin(&mut self) {
        let previous = self.handle.local();
        let epoch = self.handle.refresh();
        self.handle.enter_operation();
        if epoch != previous || self.quiesced {
            self.quiesced = false;
            self.log.on_epoch(epoch);
        }
        let version = self.shared.tables_version.load(Ordering::Acquire);
        if version != self.tables_version {
            self.tables = self.shared.tables_snapshot();
            self.tables_version = version;
        }
    }

    /// Declares this worker idle: it leaves the epoch table (so it holds
    /// back neither reclamation nor epoch-based protocols) until its next
    /// transaction.
    pub fn quiesce(&mut self) {
        self.handle.unprotect();
        self.log.quiesce();
        self.quiesced = true;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.quiesce();
    }
}
