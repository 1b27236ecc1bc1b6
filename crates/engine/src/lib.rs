//! epochdb's transactional engine: Silo's epoch-based optimistic
//! concurrency control over ordered tables of byte-string keys
//! (silor-osdi14 §2), with a durability seam that the `none`, `log`,
//! `silor`, `wal` and `cpr` modes plug into.
//!
//! Open a [`Database`], create tables, register a [`Worker`] per thread and
//! run transactions as closures; each commit returns a [`Ticket`] that
//! resolves when the commit is durable. See [`Database`] for an example.
#![deny(unsafe_op_in_unsafe_fn)]

mod arena;
mod blob;
mod commit;
mod config;
mod cores;
mod db;
pub mod durability;
mod error;
mod index;
mod pool;
mod record;
mod table;
mod ticket;
mod tid;
mod txn;
mod worker;

pub use config::{Config, PointIndexes, DEFAULT_EPOCH_INTERVAL, DEFAULT_MAX_WORKERS};
pub use db::Database;
pub use durability::{
    DurabilityKind, RecoveryPhase, RecoveryProgress, RecoveryReport, SilorOptions, WalLogKind,
    WalOptions,
};
pub use error::{Abort, DurabilityError, OpenError, TxError};
pub use pool::{Pending, WorkerPool};
pub use table::TableId;
pub use ticket::{DurableCallback, Ticket, TicketSource, Watermark};
pub use tid::Tid;
pub use txn::{ScannedPair, Transaction};
pub use worker::{Worker, WorkerStats};
