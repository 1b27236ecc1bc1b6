//! The fault plan: which write or sync calls of a [`SimStorage`] fail, and how.
//!
//! [`SimStorage`]: super::SimStorage

use std::io;
use std::path::Path;

use crate::error::{Op, StorageError};

/// The kinds of call a fault can be planned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// `write_at`, `append` and `truncate` on a file.
    Write,
    /// `sync` of a file and `sync_dir` of a directory.
    Sync,
}

/// How a planned fault fails the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// EIO: the device failed.
    Eio,
    /// ENOSPC: the device is full.
    NoSpace,
}

/// EIO's number on Linux (and the BSDs).
const EIO: i32 = 5;

impl FaultKind {
    pub(super) fn error(self, op: Op, path: &Path) -> StorageError {
        let path = path.to_path_buf();
        match self {
            FaultKind::Eio => StorageError::Io {
                path,
                op,
                source: io::Error::from_raw_os_error(EIO),
            },
            FaultKind::NoSpace => StorageError::NoSpace { path, op },
        }
    }
}

/// Counts calls per [`FaultOp`] over the disk's whole life (crashes do not
/// reset them) and fires planned faults on the matching call.
#[derive(Debug, Default)]
pub(super) struct FaultPlan {
    writes: u64,
    syncs: u64,
    /// `(op, call number it fires on, kind)`.
    planned: Vec<(FaultOp, u64, FaultKind)>,
}

impl FaultPlan {
    fn count_mut(&mut self, op: FaultOp) -> &mut u64 {
        match op {
            FaultOp::Write => &mut self.writes,
            FaultOp::Sync => &mut self.syncs,
        }
    }

    pub(super) fn calls(&self, op: FaultOp) -> u64 {
        match op {
            FaultOp::Write => self.writes,
            FaultOp::Sync => self.syncs,
        }
    }

    /// Plans the `nth` call of `op` from now (1 = the next one) to fail.
    pub(super) fn plan(&mut self, op: FaultOp, nth: u64, kind: FaultKind) {
        assert!(nth >= 1, "calls are counted from 1");
        let due = self.calls(op) + nth;
        self.planned.push((op, due, kind));
    }

    pub(super) fn clear(&mut self) {
        self.planned.clear();
    }

    /// Counts one call of `op`; returns the fault planned for it, if any.
    pub(super) fn fire(&mut self, op: FaultOp) -> Option<FaultKind> {
        let count = self.count_mut(op);
        *count += 1;
        let now = *count;
        let at = self
            .planned
            .iter()
            .position(|&(o, due, _)| o == op && due == now)?;
        Some(self.planned.swap_remove(at).2)
    }
}
