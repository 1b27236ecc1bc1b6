//! The durability seam: how a durability mode plugs into the engine.
//!
//! At commit, while the transaction's write set is still locked and after
//! validation succeeded, the engine hands the worker's [`WorkerLog`] a
//! [`CommitView`]: the transaction's TID and its writes (table, key, value or
//! tombstone). The mode returns the [`Ticket`] that resolves when the commit
//! is durable. Because the write set is locked, a mode may assign positions
//! (an LSN) that respect every write-write and write-read dependency.

pub(crate) mod cpr;
mod none;
mod progress;
pub(crate) mod silor;
pub(crate) mod wal;

pub use epochdb_wal::{LogKind as WalLogKind, WalOptions};
pub use none::NoDurability;
pub(crate) use progress::FileProgress;
pub use progress::{RecoveryPhase, RecoveryProgress};
pub use silor::inspect::{
    inspect_database, inspect_dir, inspect_file, Damage, DirSummary, FileFormat, InspectSummary,
};
pub use silor::{RecoveryReport, SilorOptions};

use std::fmt;

use crate::error::DurabilityError;
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

impl CommitView<'_> {
    /// For each write that replaces a present record whose TID epoch is
    /// below `epoch`: `f(table, key, its TID, the value it replaces)`. The
    /// write set is locked, so the values read are exactly the ones this
    /// commit overwrites (the `cpr` mode's copy to a stable slot,
    /// cpr-sigmod19 §4). `scratch` holds each value while `f` runs.
    pub(crate) fn for_each_replaced_before(
        &self,
        epoch: u64,
        scratch: &mut Vec<u8>,
        mut f: impl FnMut(TableId, &[u8], Tid, &[u8]),
    ) {
        for entry in &self.writes.entries {
            if entry.inserted {
                continue; // a new key: absent in every older version
            }
            let record = entry.record.get();
            let word = record.word();
            if word & crate::tid::ABSENT_BIT != 0 || crate::tid::tid_of(word).epoch() >= epoch {
                continue;
            }
            scratch.clear();
            let word = record.copy_locked(scratch);
            f(
                entry.table,
                self.writes.keys.get(entry.key),
                crate::tid::tid_of(word),
                scratch,
            );
        }
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

/// What a durability mode has done since the database opened.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DurabilityStats {
    /// Bytes of log written.
    pub log_bytes: u64,
    /// Log syncs (fdatasync of a log file).
    pub log_syncs: u64,
    /// `data.log` rotations.
    pub log_rotations: u64,
    /// Times a worker found its logger's buffer pool empty and waited for
    /// a buffer (the backpressure of silor §3.4).
    pub buffer_waits: u64,
    /// Total time workers spent in those waits, in seconds.
    pub buffer_wait_seconds: f64,
    /// Log buffers the loggers' pools hold now (`log` and `silor`; each
    /// `SilorOptions::log_buffer_bytes`): the memory they take.
    pub log_buffers_allocated: u64,
    /// The most buffers each pool has held at once, summed over the
    /// loggers: what a backlog made them allocate (its extra buffers are
    /// freed as they are written out).
    pub log_buffers_peak: u64,
    /// Checkpoints installed.
    pub checkpoints: u64,
    /// Bytes of checkpoint data written by installed checkpoints.
    pub checkpoint_bytes: u64,
    /// Wall time of installed checkpoints, in seconds.
    pub checkpoint_seconds: f64,
    /// The durable persistent epoch (epoch-based modes).
    pub persistent_epoch: Option<u64>,
    /// The durable LSN, SDL (`wal`).
    pub durable_lsn: Option<u64>,
    /// Wall time of the last installed checkpoint, in seconds.
    pub last_checkpoint_seconds: f64,
    /// When the last checkpoint was installed, in Unix seconds (0: none
    /// since the database opened).
    pub last_checkpoint_unix: u64,
}

/// A durability mode: makes commits durable and says when they are.
pub trait DurabilityMode: Send + Sync + 'static {
    /// The mode's name as the CLI spells it (`none`, `silor`, …).
    fn name(&self) -> &'static str;

    /// A per-worker handle, called once when a worker registers.
    fn attach_worker(&self, worker: usize) -> Box<dyn WorkerLog>;

    /// Makes the creation of table `id` called `name` durable before any
    /// write to it can be logged.
    fn table_created(&self, id: TableId, name: &str) -> Result<(), DurabilityError> {
        let _ = (id, name);
        Ok(())
    }

    /// The published persistent epoch, for epoch-based modes.
    fn persistent_epoch(&self) -> Option<u64> {
        None
    }

    /// Takes a checkpoint now and waits until it is installed, for modes
    /// that take checkpoints.
    fn checkpoint(&self) -> Result<(), DurabilityError> {
        Err(DurabilityError::Stopped(format!(
            "the {} mode takes no checkpoints",
            self.name()
        )))
    }

    /// Whether a checkpoint is being written right now.
    fn is_checkpointing(&self) -> bool {
        false
    }

    /// Counters since the database opened.
    fn stats(&self) -> DurabilityStats {
        DurabilityStats::default()
    }

    /// Flushes what is buffered and stops; later tickets fail.
    fn shutdown(&self) -> Result<(), DurabilityError> {
        Ok(())
    }
}

/// A worker's end of the seam. Called only from that worker's thread.
pub trait WorkerLog: Send {
    /// Called just before the commit reads the global epoch at its
    /// serialization point (write set locked). A mode may take a lock here
    /// that `log_commit` or `abort_commit` releases.
    fn begin_commit(&mut self) {}

    /// The commit that `begin_commit` announced aborted instead.
    fn abort_commit(&mut self) {}

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
    /// Parallel value logging, no checkpoints ("LogSilo", silor §3, §6).
    Log,
    /// Logging plus fuzzy parallel checkpoints ("SiloR", silor §3–5).
    Silor,
    /// Redo records in ELEDA's central log with GRASSHOPPER
    /// (eleda-pvldb17); tickets resolve at the storage-durable LSN.
    Wal,
    /// Transaction-consistent checkpoints without a log, each committing
    /// every session to its own prefix (CPR, cpr-sigmod19 §2–4); tickets
    /// resolve when a checkpoint holding the commit is installed.
    Cpr,
}

impl DurabilityKind {
    /// Every mode this build implements, in CLI spelling.
    pub const ALL: &'static [DurabilityKind] = &[
        DurabilityKind::None,
        DurabilityKind::Log,
        DurabilityKind::Silor,
        DurabilityKind::Wal,
        DurabilityKind::Cpr,
    ];

    /// The CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            DurabilityKind::None => "none",
            DurabilityKind::Log => "log",
            DurabilityKind::Silor => "silor",
            DurabilityKind::Wal => "wal",
            DurabilityKind::Cpr => "cpr",
        }
    }

    /// Whether the mode writes files (and so needs directories).
    pub fn is_durable(self) -> bool {
        !matches!(self, DurabilityKind::None)
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
                format!(
                    "unknown durability mode '{text}' (available: {})",
                    known.join(", ")
                )
            })
    }
}
