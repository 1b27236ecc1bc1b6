//! The durability seam: how a durability mode plugs into the engine.
//!
//! At commit, while the transaction's write set is still locked and after
//! validation succeeded, the engine hands the worker's [`WorkerLog`] a
//! [`CommitView`]: the transaction's TID and its writes (table, key, value or
//! tombstone). The mode returns the [`Ticket`] that resolves when the commit
//! is durable. Because the write set is locked, a mode may assign positions
//! (an LSN) that respect every write-write and write-read dependency.

mod none;

pub use none::NoDurability;

use std::fmt;
use std::sync::Arc;

use crate::error::{DurabilityError, OpenError};
use crate::table::TableId;
use crate::ticket::Ticket;
use crate::tid::Tid;
use crate::txn::WriteSet;

/// One write of a committing transaction, as a durability mode sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRecord<'a> {
    /// The table written.
    pub table: TableId,
    /// The key written.
    pub key: &'a [u8],
    /// The new value, or `None` for a delete (a tombstone).
    pub value: Option<&'a [u8]>,
}

/// A committing transaction: its TID and its writes.
pub struct CommitView<'a> {
    pub(crate) tid: Tid,
    pub(crate) writes: &'a WriteSet,
}

impl<'a> CommitView<'a> {
    /// The transaction's TID (its epoch is `tid().epoch()`).
    pub fn tid(&self) -> Tid {
        self.tid
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether the transaction wrote nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.len() == 0
    }

    /// The writes, in lock order (record address), one per key.
    pub fn writes(&self) -> impl ExactSizeIterator<Item = WriteRecord<'a>> + 'a {
        self.writes.records()
    }
}

impl fmt::Debug for CommitView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitView")
            .field("tid", &self.tid)
            .field("writes", &self.len())
            .finish()
    }
}

/// A durability mode: makes commits durable and says when they are.
pub trait DurabilityMode: Send + Sync + 'static {
    /// The mode's name as the CLI spells it (`none`, `silor`, …).
    fn name(&self) -> &'static str;

    /// A per-worker handle, called once when a worker registers.
    fn attach_worker(&self, worker: usize) -> Box<dyn WorkerLog>;

    /// Flushes what is buffered and stops; later tickets fail.
    fn shutdown(&self) -> Result<(), DurabilityError> {
        Ok(())
    }
}

/// A worker's end of the seam. Called only from that worker's thread.
pub trait WorkerLog: Send {
    /// Logs a committing transaction. Called with its write set locked,
    /// after validation, before its values are installed; must not block
    /// for long (backpressure from a bounded buffer pool is fine).
    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket;

    /// The ticket for a read-only transaction whose newest read TID is
    /// `max_read`: its results may be released once that data is durable.
    fn read_only(&mut self, max_read: Tid) -> Ticket {
        let _ = max_read;
        Ticket::resolved()
    }

    /// Called when the worker observes a new global epoch between
    /// transactions (SiloR flushes its buffer here, silor §3.4).
    fn on_epoch(&mut self, epoch: u64) {
        let _ = epoch;
    }

    /// Called when the worker goes idle: it promises no commit until it
    /// runs a transaction again.
    fn quiesce(&mut self) {}
}

/// The durability modes epochdb offers, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DurabilityKind {
    /// In memory only ("MemSilo", silor-osdi14 §6).
    #[default]
    None,
}

impl DurabilityKind {
    /// Every mode this build implements, in CLI spelling.
    pub const ALL: &'static [DurabilityKind] = &[DurabilityKind::None];

    /// The CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            DurabilityKind::None => "none",
        }
    }

    pub(crate) fn build(self) -> Result<Arc<dyn DurabilityMode>, OpenError> {
        match self {
            DurabilityKind::None => Ok(Arc::new(NoDurability)),
        }
    }
}

impl fmt::Display for DurabilityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DurabilityKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
                let planned = ["log", "silor", "wal", "cpr"];
                if planned.contains(&text) {
                    format!(
                        "durability mode '{text}' is not implemented yet (available: {})",
                        known.join(", ")
                    )
                } else {
                    format!(
                        "unknown durability mode '{text}' (available: {})",
                        known.join(", ")
                    )
                }
            })
    }
}
