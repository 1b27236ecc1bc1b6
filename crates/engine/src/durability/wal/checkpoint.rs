//! The `wal` mode's checkpoints: the fuzzy parallel checkpoints of the
//! `silor` mode (silor §4; `silor/checkpoint.rs`) with LSNs instead of
//! epochs, so the central log can be truncated and recovery replays only
//! the log written since the checkpoint began (issue 4, item 6).
//!
//! # Why the checkpoint plus the log from `S` is the durable state
//!
//! `S` (the metadata's `e_l`) is the sequencer's reserved LSN read at the
//! start. Recovery loads the checkpoint, then replays every commit whose
//! entry lies at or above `S`, "largest TID wins" (the checkpoint stores
//! each record's TID). A write `W` is in the recovered state if either
//! holds:
//!
//! * `W`'s entry is at or above `S`: replayed.
//! * `W`'s entry is below `S`: the sequencer load that returned `S`
//!   (Acquire) saw `W`'s reservation (AcqRel fetch-add), and `W` locked
//!   every record it writes before reserving, so those locks happen before
//!   any checkpointer reads a record. A checkpointer that reads one of
//!   them sees it locked (or a later state) and waits for the unlock
//!   (`Record::read_settled`, which waits on absent records too, so an
//!   insert in flight is not skipped), then sees `W`'s value or a later
//!   version. (A transaction split over several entries, its first part
//!   below `S` and its COMMIT above, is therefore wholly in the checkpoint;
//!   replaying its later parts again is harmless.) Keys `W` inserted were
//!   put in the index before it reserved, so the scan finds them.
//!
//! No epoch wait is needed (a worker idle but still inside an epoch does
//! not hold the checkpoint up).
//!
//! Nothing is left out by epoch (`skip_epoch = u64::MAX`). The end
//! position `e_h` is the reserved LSN read after every checkpointer
//! finished: each value they read was installed by a writer that reserved
//! its entry before installing, so every such entry ends at or below it;
//! the checkpoint is installed once SDL reaches it, so the checkpoint never
//! holds a write that is not durable in the log.
//!
//! Tables: a table's TABLE record is appended under [`Inner::catalog`]'s
//! lock, and `begin` reads `S` and the number of logged tables under the
//! same lock, so the checkpoint covers exactly the tables whose TABLE
//! record lies below `S`; later tables' records are replayed.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use epochdb_epoch::EpochManager;
use epochdb_storage::{Op, Storage, StorageError};

use super::Inner;
use crate::durability::silor::checkpoint::{CheckpointHost, CheckpointStart};
use crate::durability::silor::format::CheckpointMeta;
use crate::durability::silor::{SilorOptions, Stats};

impl CheckpointHost for Inner {
    fn storage(&self) -> &dyn Storage {
        self.storage.as_ref()
    }

    fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn options(&self) -> &SilorOptions {
        &self.checkpoint_options
    }

    fn epochs(&self) -> &EpochManager {
        &self.epochs
    }

    fn background_cpus(&self) -> &[usize] {
        &self.background_cpus
    }

    fn stats(&self) -> &Stats {
        &self.checkpoint_stats
    }

    fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.watermark.failure().is_some()
    }

    fn fail(&self, error: &StorageError) {
        Inner::fail(self, crate::error::DurabilityError::from_storage(error));
    }

    fn begin(&self, _stopped: &dyn Fn() -> bool) -> Option<CheckpointStart> {
        let (replay_from, tables) = {
            let logged_tables = self.catalog.lock();
            let wal = self.wal.lock();
            (wal.as_ref()?.reserved_lsn(), *logged_tables)
        };
        Some(CheckpointStart {
            replay_from,
            skip_epoch: u64::MAX,
            tables,
        })
    }

    fn end(&self) -> u64 {
        self.wal
            .lock()
            .as_ref()
            .map_or(u64::MAX, epochdb_wal::Wal::reserved_lsn)
    }

    fn is_durable(&self, end: u64) -> Result<bool, StorageError> {
        Ok(self.watermark.durable() >= end)
    }

    fn remove_old_log(&self, meta: &CheckpointMeta) -> Result<(), StorageError> {
        let guard = self.wal.lock();
        let Some(wal) = guard.as_ref() else {
            return Ok(());
        };
        match wal.truncate_before(meta.e_l) {
            Ok(_) => Ok(()),
            // The error itself is shared inside the log's latch; the
            // checkpoint reports an equivalent one (fail-stop either way).
            Err(epochdb_wal::WalError::Storage(e)) => Err(StorageError::Io {
                path: self.dirs[0].join(super::WAL_SUBDIR),
                op: Op::Remove,
                source: std::io::Error::other(e.to_string()),
            }),
            // Truncation only removes what is no longer needed: a log that
            // failed or closed meanwhile is reported by the acker.
            Err(_) => Ok(()),
        }
    }
}
