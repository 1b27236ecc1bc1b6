//! The one error type of the storage seam.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Result of every storage operation.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Which storage operation failed; carried by [`StorageError`] so a report
/// names both the file and what was being done to it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Exclusive creation of a file.
    Create,
    /// Opening an existing file.
    Open,
    /// Reading a file.
    Read,
    /// Writing or appending to a file.
    Write,
    /// Changing a file's length.
    Truncate,
    /// Syncing a file's data.
    Sync,
    /// Syncing a directory's entries.
    SyncDir,
    /// Renaming a file.
    Rename,
    /// Removing a file.
    Remove,
    /// Listing a directory.
    List,
    /// Reading a file's length or existence.
    Stat,
    /// Creating a directory and its missing parents.
    CreateDir,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Op::Create => "create",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Truncate => "truncate",
            Op::Sync => "sync",
            Op::SyncDir => "sync_dir",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::List => "list",
            Op::Stat => "stat",
            Op::CreateDir => "create_dir_all",
        };
        f.write_str(name)
    }
}

/// Everything that can go wrong at the file seam.
///
/// A failed write, truncate, sync or sync_dir latches the storage (unless
/// it was `NotFound`, an answer about the namespace): from then on every
/// call returns [`StorageError::PreviousIo`]. Failures of namespace calls
/// (create, open, rename, remove, create_dir_all) and of reads are reported
/// and do not latch; a caller that cannot go on without them stops anyway.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The operating system (or the simulated disk) reported an I/O error.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The file or directory operated on.
        path: PathBuf,
        /// What was being done.
        op: Op,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The device is full (ENOSPC or EDQUOT). Durability stops here: free
    /// space and restart; nothing written since the last sync is promised.
    #[error("{op} {}: no space left on device; epochdb stopped acknowledging commits, free space and restart", path.display())]
    NoSpace {
        /// The file or directory operated on.
        path: PathBuf,
        /// What was being done.
        op: Op,
    },
    /// The file or directory does not exist.
    #[error("{op} {}: not found", path.display())]
    NotFound {
        /// The missing file or directory.
        path: PathBuf,
        /// What was being done.
        op: Op,
    },
    /// Exclusive creation found the name taken.
    #[error("{op} {}: already exists", path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
        /// What was being done.
        op: Op,
    },
    /// An earlier write or sync on this storage failed. What reached the
    /// media is unknown, so no later call is allowed to pretend otherwise
    /// (a failed fsync is never retried): reopen and recover.
    #[error("a previous write or sync failed; this storage refuses all I/O until reopened and recovered")]
    PreviousIo,
}

impl StorageError {
    /// Classifies an `io::Error` from `op` on `path`.
    pub(crate) fn from_io(op: Op, path: &Path, source: io::Error) -> Self {
        let path = path.to_path_buf();
        match source.kind() {
            io::ErrorKind::NotFound => StorageError::NotFound { path, op },
            io::ErrorKind::AlreadyExists => StorageError::AlreadyExists { path, op },
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
                StorageError::NoSpace { path, op }
            }
            _ => StorageError::Io { path, op, source },
        }
    }

    /// Whether this error must latch the storage if a write or sync returned
    /// it: everything but answers about the namespace.
    pub(crate) fn latches(&self) -> bool {
        !matches!(
            self,
            StorageError::NotFound { .. } | StorageError::AlreadyExists { .. }
        )
    }
}
