//! What every workload offers a benchmark or a test: a loader and clients
//! that run one transaction at a time on a worker.

use epochdb_engine::{Database, PointIndexes, Ticket, TxError, Worker};

/// The result of one client step.
#[derive(Debug)]
pub enum Outcome {
    /// The transaction committed; the ticket says when it is durable.
    Committed(Ticket),
    /// The transaction rolled itself back, as the workload specifies
    /// (TPC-C's 1% of new-orders with an unused item).
    RolledBack,
}

/// A workload: creates and loads its tables, then hands out clients.
pub trait Workload: Send + Sync {
    /// A short name for reports (`ycsb-silor`, `tpcc`, …).
    fn name(&self) -> String;

    /// Settings as `(name, value)` pairs, for reports.
    fn settings(&self) -> Vec<(String, String)>;

    /// Creates the tables and loads the initial data with `threads`
    /// threads, calling `progress(fraction done)` now and then.
    fn load(
        &mut self,
        db: &Database,
        threads: usize,
        progress: &(dyn Fn(f64) + Sync),
    ) -> Result<(), TxError>;

    /// A client for thread `thread` of `threads`, seeded with `seed`.
    /// Must be called after `load`.
    fn client(&self, thread: usize, threads: usize, seed: u64) -> Box<dyn Client>;

    /// The tables that should keep a point-read hash index
    /// (`Config::point_index`); the default is every table.
    fn point_indexes(&self) -> PointIndexes {
        PointIndexes::All
    }

    /// Checks the workload's consistency conditions on `db` (TPC-C's
    /// §3.3.2); the default has none.
    fn check(&self, db: &Database) -> Result<(), String> {
        let _ = db;
        Ok(())
    }
}

/// One benchmark thread's transaction generator.
pub trait Client: Send {
    /// Runs one transaction (retrying conflicts) on `worker`.
    fn step(&mut self, worker: &mut Worker) -> Result<Outcome, TxError>;
}

/// Splits `0..total` into `parts` nearly equal ranges; returns part `index`.
pub fn share(total: u64, parts: usize, index: usize) -> std::ops::Range<u64> {
    let parts = parts as u64;
    let index = index as u64;
    let start = total * index / parts;
    let end = total * (index + 1) / parts;
    start..end
}
